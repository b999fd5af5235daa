//===- AtomicFile_test.cpp - Bounded reads and atomic writes --------------===//
//
// Reads: a FIFO, /dev/zero, a directory and an oversized file are refused
// with a message naming the path (the FIFO without blocking: the test would
// hang otherwise). Writes: the target appears only complete, an existing
// target is untouched by a failed write, non-regular targets and inputs are
// refused, symbolic links survive, the null device is a sink, and
// concurrent writers never leave a mix.
//
//===----------------------------------------------------------------------===//
#include "runtime/io/AtomicFile.h"
#include "runtime/io/Npy.h"
#include "runtime/plan/Plan.h"
#include "runtime/model/Presets.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <thread>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace k3 {
namespace {

namespace fs = std::filesystem;

/// The names in `dir` (to see that no temporary is left behind).
std::vector<std::string> entries(const std::string &dir) {
  std::vector<std::string> out;
  for (const auto &e : fs::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ReadRegularFile, ReadsAFile) {
  test::TempDir dir;
  test::writeFile(dir.file("a"), "hello");
  std::string out;
  ASSERT_TRUE(readRegularFile(dir.file("a"), 100, out).isOk());
  EXPECT_EQ(out, "hello");
}

TEST(ReadRegularFile, RefusesAFifoWithoutBlocking) {
  test::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  std::string out;
  EXPECT_ERROR_CONTAINS(
      readRegularFile(dir.file("fifo"), 100, out, "config file"),
      "the config file is a FIFO, not a regular file");
}

TEST(ReadRegularFile, RefusesDevicesAndDirectories) {
  std::string out;
  EXPECT_ERROR_CONTAINS(readRegularFile("/dev/zero", 1 << 20, out),
                        "/dev/zero: the file is a character device");
  test::TempDir dir;
  EXPECT_ERROR_CONTAINS(readRegularFile(dir.path(), 1 << 20, out),
                        "is a directory");
  EXPECT_ERROR_CONTAINS(readRegularFile(dir.file("missing"), 10, out),
                        "cannot open");
}

TEST(ReadRegularFile, RefusesAFileOverTheBound) {
  test::TempDir dir;
  test::writeFile(dir.file("big"), std::string(101, 'x'));
  std::string out;
  EXPECT_ERROR_CONTAINS(readRegularFile(dir.file("big"), 100, out),
                        "101 bytes, more than the 100 bytes accepted");
  ASSERT_TRUE(readRegularFile(dir.file("big"), 101, out).isOk());
  EXPECT_EQ(out.size(), 101u);
}

TEST(AtomicFile, WritesAndReplaces) {
  test::TempDir dir;
  const std::string path = dir.file("out.plan");
  ASSERT_TRUE(writeFileAtomic(path, "first").isOk());
  EXPECT_EQ(test::readFile(path), "first");
  ASSERT_TRUE(writeFileAtomic(path, "second, longer").isOk());
  EXPECT_EQ(test::readFile(path), "second, longer");
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"out.plan"});
}

TEST(AtomicFile, TargetAppearsOnlyOnCommit) {
  test::TempDir dir;
  const std::string path = dir.file("out");
  test::writeFile(path, "old contents");
  {
    Expected<std::unique_ptr<AtomicFile>> f = AtomicFile::create(path);
    ASSERT_TRUE(f.hasValue()) << f.message();
    ASSERT_TRUE((*f)->write("new").isOk());
    // Not committed yet: the target still holds the old bytes, in full.
    EXPECT_EQ(test::readFile(path), "old contents");
    EXPECT_EQ(entries(dir.path()).size(), 2u); // out + the temporary
  } // destroyed without commit
  EXPECT_EQ(test::readFile(path), "old contents");
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"out"});
}

TEST(AtomicFile, AFailedWriteIsAnErrorAndLeavesTheTarget) {
  test::TempDir dir;
  const std::string path = dir.file("out");
  test::writeFile(path, "old contents");
  // A file size limit makes write() fail with EFBIG (SIGXFSZ ignored), as a
  // full disk or a quota would.
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  Status s = writeFileAtomic(path, std::string(100000, 'x'));
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, oldHandler);
  EXPECT_ERROR_CONTAINS(s, "write failed");
  EXPECT_ERROR_CONTAINS(s, path);
  EXPECT_EQ(test::readFile(path), "old contents");
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"out"});
}

TEST(AtomicFile, RefusesNonRegularTargets) {
  test::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  EXPECT_ERROR_CONTAINS(writeFileAtomic(dir.file("fifo"), "x"),
                        "refusing to replace a FIFO");
  fs::create_directory(dir.file("sub"));
  EXPECT_ERROR_CONTAINS(writeFileAtomic(dir.file("sub"), "x"),
                        "refusing to replace a directory");
  // A character device other than the null device (as root, a rename would
  // replace the node itself).
  EXPECT_ERROR_CONTAINS(checkOutputTarget("/dev/zero", {}),
                        "refusing to replace a character device");
  struct stat st;
  ASSERT_EQ(::stat(dir.file("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(AtomicFile, TheNullDeviceIsASink) {
  ASSERT_TRUE(writeFileAtomic("/dev/null", "discarded").isOk());
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";
}

TEST(AtomicFile, RefusesToReplaceAnInput) {
  test::TempDir dir;
  test::writeFile(dir.file("cfg.json"), "{}");
  OutputOptions o;
  o.inputs = {dir.file("cfg.json")};
  EXPECT_ERROR_CONTAINS(writeFileAtomic(dir.file("cfg.json"), "plan", o),
                        "the output is the input");
  // Also through another name for the same inode.
  ASSERT_EQ(::link(dir.file("cfg.json").c_str(), dir.file("alias").c_str()),
            0);
  EXPECT_ERROR_CONTAINS(writeFileAtomic(dir.file("alias"), "plan", o),
                        "the output is the input");
  EXPECT_EQ(test::readFile(dir.file("cfg.json")), "{}");
}

TEST(AtomicFile, WritesThroughASymlink) {
  test::TempDir dir;
  test::writeFile(dir.file("real"), "old");
  fs::create_symlink(dir.file("real"), dir.file("link"));
  ASSERT_TRUE(writeFileAtomic(dir.file("link"), "new").isOk());
  EXPECT_TRUE(fs::is_symlink(dir.file("link")));
  EXPECT_EQ(test::readFile(dir.file("real")), "new");
  fs::create_symlink(dir.file("nowhere"), dir.file("dangling"));
  EXPECT_ERROR_CONTAINS(writeFileAtomic(dir.file("dangling"), "x"),
                        "does not resolve");
}

TEST(AtomicFile, ModeFollowsTheUmask) {
  test::TempDir dir;
  const mode_t old = ::umask(022);
  OutputOptions exe;
  exe.executable = true;
  ASSERT_TRUE(writeFileAtomic(dir.file("plain"), "x").isOk());
  ASSERT_TRUE(writeFileAtomic(dir.file("exe"), "x", exe).isOk());
  ::umask(old);
  struct stat st;
  ASSERT_EQ(::stat(dir.file("plain").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_EQ(::stat(dir.file("exe").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
}

TEST(AtomicFile, ConcurrentWritersNeverMix) {
  test::TempDir dir;
  const std::string path = dir.file("out");
  const std::string a(1 << 20, 'a'), b(1 << 20, 'b');
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 4; ++k)
        EXPECT_TRUE(writeFileAtomic(path, i % 2 ? a : b).isOk());
    });
  for (std::thread &t : threads)
    t.join();
  const std::string got = test::readFile(path);
  EXPECT_TRUE(got == a || got == b) << "a mixed or truncated file";
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"out"});
}

TEST(AtomicFile, PlanAndNpyWritersUseIt) {
  test::TempDir dir;
  K3C_COMPILED_PLAN(plan, presetConfig("tiny").take(), "default", 16);
  EXPECT_ERROR_CONTAINS(writePlanFile(dir.path(), plan),
                        "refusing to replace a directory");
  ASSERT_TRUE(writePlanFile(dir.file("m.plan"), plan).isOk());
  Expected<PlanDoc> back = readPlanFile(dir.file("m.plan"));
  ASSERT_TRUE(back.hasValue()) << back.message();
  const std::vector<float> v(6, 1.5f);
  ASSERT_EQ(::mkfifo(dir.file("fifo.npy").c_str(), 0600), 0);
  EXPECT_ERROR_CONTAINS(writeNpyF32(dir.file("fifo.npy"), v.data(), 2, 3),
                        "refusing to replace a FIFO");
  EXPECT_ERROR_CONTAINS(readNpyF32(dir.file("fifo.npy")), "a FIFO");
  EXPECT_ERROR_CONTAINS(readPlanFile(dir.file("fifo.npy")), "a FIFO");
  EXPECT_ERROR_CONTAINS(writeNpyF32(dir.file("x.npy"), v.data(),
                                    int64_t(1) << 62, 8),
                        "bad .npy shape");
}

} // namespace
} // namespace k3
