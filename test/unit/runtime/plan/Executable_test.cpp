//===- Executable_test.cpp - Plans embedded in a binary -------------------===//
#include "runtime/plan/Executable.h"

#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

namespace k3 {
namespace {

TEST(ExecutableTest, TrailerRoundTrip) {
  test::TempDir dir;
  const std::string binary = std::string("\x7f"
                                         "ELF fake runtime\0\1\2",
                                         21);
  test::writeFile(dir.file("k3-run"), binary);
  const std::string plan = "K3CPLAN 1 00000000 2\n{}";
  ASSERT_TRUE(
      writeExecutable(dir.file("k3-run"), plan, dir.file("model")).isOk());

  const std::string all = test::readFile(dir.file("model"));
  ASSERT_EQ(all.size(), binary.size() + plan.size() + kExeTrailerSize);
  EXPECT_EQ(all.substr(0, binary.size()), binary);
  EXPECT_EQ(all.substr(all.size() - 8), "K3CEXE01");
  EXPECT_EQ(static_cast<uint8_t>(all[all.size() - 16]), plan.size());

  Expected<std::optional<std::string>> found =
      findEmbeddedPlan(dir.file("model"));
  ASSERT_TRUE(found.hasValue()) << found.message();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ(**found, plan);

  struct stat st;
  ASSERT_EQ(::stat(dir.file("model").c_str(), &st), 0);
  EXPECT_TRUE(st.st_mode & S_IXUSR);

  // Re-embedding into a model binary replaces the plan, not stacks it.
  const std::string plan2 = "another plan";
  ASSERT_TRUE(
      writeExecutable(dir.file("model"), plan2, dir.file("model2")).isOk());
  EXPECT_EQ(test::readFile(dir.file("model2")).size(),
            binary.size() + plan2.size() + kExeTrailerSize);
  found = findEmbeddedPlan(dir.file("model2"));
  ASSERT_TRUE(found.hasValue() && found->has_value());
  EXPECT_EQ(**found, plan2);
}

TEST(ExecutableTest, NoTrailerAndBadTrailer) {
  test::TempDir dir;
  test::writeFile(dir.file("plain"), "just a binary, no plan here");
  Expected<std::optional<std::string>> found =
      findEmbeddedPlan(dir.file("plain"));
  ASSERT_TRUE(found.hasValue());
  EXPECT_FALSE(found->has_value());

  test::writeFile(dir.file("tiny"), "abc");
  found = findEmbeddedPlan(dir.file("tiny"));
  ASSERT_TRUE(found.hasValue());
  EXPECT_FALSE(found->has_value());

  std::string bad = "xx";
  bad += std::string("\xff\x00\x00\x00\x00\x00\x00\x00", 8);
  bad += "K3CEXE01";
  test::writeFile(dir.file("bad"), bad);
  EXPECT_ERROR_CONTAINS(findEmbeddedPlan(dir.file("bad")), "corrupted");
  EXPECT_ERROR_CONTAINS(findEmbeddedPlan(dir.file("missing")), "cannot open");
  EXPECT_ERROR_CONTAINS(
      writeExecutable(dir.file("missing"), "p", dir.file("out")),
      "cannot open the runtime binary");
}

TEST(ExecutableTest, OwnBinaryHasNoPlan) {
  Expected<std::optional<std::string>> found = findEmbeddedPlan();
  ASSERT_TRUE(found.hasValue()) << found.message();
  EXPECT_FALSE(found->has_value());
}

} // namespace
} // namespace k3
