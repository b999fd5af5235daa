//===- K3RunFiles_test.cpp - k3-run's prompts and snapshot files ----------===//
//
// tools/k3-run/PromptFile.h and SnapshotFile.h without a model: id lists and
// their errors, line numbers of a prompts file, and the snapshot format on a
// small hand-made plan: the round trip, every truncation, every single-byte
// corruption, trailing bytes, another plan's identity, another layout, and
// the atomic write.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-run/PromptFile.h"
#include "tools/k3-run/SnapshotFile.h"

#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace k3 {
namespace {

TEST(PromptFileTest, IdLists) {
  std::vector<int64_t> ids;
  for (const char *ok :
       {"1,2,3", "1 2 3", " 1, 2 ,3 ", "1,\t2  3", "1 ,2 ,3"}) {
    ASSERT_TRUE(parseIdList(ok, ids).isOk()) << ok;
    EXPECT_EQ(ids, (std::vector<int64_t>{1, 2, 3})) << ok;
  }
  ASSERT_TRUE(parseIdList("-3", ids).isOk()); // the vocabulary check is later
  EXPECT_EQ(ids, std::vector<int64_t>{-3});
  EXPECT_ERROR_CONTAINS(parseIdList("", ids), "no token ids");
  EXPECT_ERROR_CONTAINS(parseIdList("   ", ids), "no token ids");
  EXPECT_ERROR_CONTAINS(parseIdList(",", ids), "empty id");
  EXPECT_ERROR_CONTAINS(parseIdList("1,,2", ids), "empty id");
  EXPECT_ERROR_CONTAINS(parseIdList(",1", ids), "empty id");
  EXPECT_ERROR_CONTAINS(parseIdList("1,2,", ids), "a comma after the last id");
  EXPECT_ERROR_CONTAINS(parseIdList("1,a", ids), "'a' is not a token id");
  EXPECT_ERROR_CONTAINS(parseIdList("1.5", ids), "'1.5' is not a token id");
  EXPECT_ERROR_CONTAINS(parseIdList("2x", ids), "'2x'");
  EXPECT_ERROR_CONTAINS(parseIdList("-", ids), "'-'");
  EXPECT_ERROR_CONTAINS(parseIdList("99999999999999999999", ids),
                        "'99999999999999999999' is not a token id");
}

TEST(PromptFileTest, LinesCommentsAndErrors) {
  Expected<std::vector<Prompt>> p = parsePrompts(
      "# header\n1,2,3\n\n  \n4 5 # the rest is a comment\r\n6\n", "p.txt");
  ASSERT_TRUE(p.hasValue()) << p.message();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[0].line, 2);
  EXPECT_EQ((*p)[0].ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ((*p)[1].line, 5);
  EXPECT_EQ((*p)[1].ids, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ((*p)[2].line, 6);
  EXPECT_EQ((*p)[2].ids, std::vector<int64_t>{6});

  EXPECT_ERROR_CONTAINS(parsePrompts("1,2\n3\n4,x\n", "p.txt"),
                        "p.txt:3: 'x' is not a token id");
  EXPECT_ERROR_CONTAINS(parsePrompts("1\n\n# c\n4,,5", "p.txt"), "p.txt:4: ");
  EXPECT_ERROR_CONTAINS(parsePrompts("", "p.txt"), "p.txt: no prompts");
  EXPECT_ERROR_CONTAINS(parsePrompts("# only\n\n", "p.txt"), "no prompts");

  test::TempDir dir;
  EXPECT_ERROR_CONTAINS(readPromptsFile(dir.file("missing.txt")),
                        "cannot open the prompts file");
  EXPECT_ERROR_CONTAINS(readPromptsFile(dir.path()), "not a regular file");
  test::writeFile(dir.file("p.txt"), "7 8\n");
  Expected<std::vector<Prompt>> q = readPromptsFile(dir.file("p.txt"));
  ASSERT_TRUE(q.hasValue()) << q.message();
  EXPECT_EQ((*q)[0].ids, (std::vector<int64_t>{7, 8}));
}

/// A plan with just what a snapshot depends on: two states, a vocabulary,
/// max_seq.
PlanDoc smallPlan(int64_t vocab = 16) {
  PlanDoc p;
  p.maxSeq = 8;
  p.config.vocabSize = vocab;
  p.addState("layers.0.kda", "kda_state", {2, 2, 2});
  p.addState("layers.1.mla", "mla_cache", {8, 3});
  return p;
}

PrefixSnapshot smallSnapshot(const PlanDoc &plan) {
  PrefixSnapshot s;
  s.tokens = {1, 5, 15};
  for (const PlanState &st : plan.states) {
    std::vector<uint8_t> bytes(st.bytes);
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<uint8_t>(i * 7 + st.bytes);
    s.states.push_back(bytes);
  }
  for (int64_t i = 0; i < plan.config.vocabSize; ++i)
    s.logits.push_back(0.25f * static_cast<float>(i) - 1.0f);
  return s;
}

constexpr uint64_t kId = 0x0123456789abcdefull;

TEST(SnapshotFileTest, RoundTrip) {
  const PlanDoc plan = smallPlan();
  const PrefixSnapshot snap = smallSnapshot(plan);
  Expected<std::string> bytes = serializeSnapshot(snap, plan, kId);
  ASSERT_TRUE(bytes.hasValue()) << bytes.message();
  uint64_t stateBytes = 0;
  for (const PlanState &s : plan.states)
    stateBytes += s.bytes;
  EXPECT_EQ(bytes->size(),
            kSnapshotHeaderBytes + 8 * 3 + 8 * 2 + stateBytes + 4 * 16 + 4);
  EXPECT_EQ(bytes->substr(0, 8), "K3CSNAP\n");
  Expected<PrefixSnapshot> back = parseSnapshot(*bytes, plan, kId, "s");
  ASSERT_TRUE(back.hasValue()) << back.message();
  EXPECT_EQ(back->tokens, snap.tokens);
  EXPECT_EQ(back->states, snap.states);
  EXPECT_EQ(back->logits, snap.logits);

  // The identity is a hash of the plan's bytes.
  EXPECT_EQ(planIdentity("abc"), planIdentity("abc"));
  EXPECT_NE(planIdentity("abc"), planIdentity("abd"));
  EXPECT_EQ(planIdentity(""), 0xcbf29ce484222325ull); // FNV-1a 64 offset
}

TEST(SnapshotFileTest, EveryTruncationAndCorruptionIsRefused) {
  const PlanDoc plan = smallPlan();
  Expected<std::string> bytes =
      serializeSnapshot(smallSnapshot(plan), plan, kId);
  ASSERT_TRUE(bytes.hasValue()) << bytes.message();
  for (size_t n = 0; n < bytes->size(); ++n) {
    Expected<PrefixSnapshot> r =
        parseSnapshot(bytes->substr(0, n), plan, kId, "s");
    ASSERT_FALSE(r.hasValue()) << "cut at " << n;
    if (n >= 8) {
      EXPECT_TRUE(test::contains(r.message(), "truncated")) << r.message();
    }
  }
  for (size_t i = 0; i < bytes->size(); ++i) {
    std::string b = *bytes;
    b[i] ^= 0x10;
    Expected<PrefixSnapshot> r = parseSnapshot(b, plan, kId, "s");
    EXPECT_FALSE(r.hasValue()) << "byte " << i << " flipped";
  }
  std::string flipped = *bytes;
  flipped[kSnapshotHeaderBytes + 40] ^= 1;
  EXPECT_ERROR_CONTAINS(parseSnapshot(flipped, plan, kId, "s"),
                        "s: the snapshot is corrupted (payload checksum");
  flipped = *bytes;
  flipped[30] ^= 1;
  EXPECT_ERROR_CONTAINS(parseSnapshot(flipped, plan, kId, "s"),
                        "header is corrupted");
  EXPECT_ERROR_CONTAINS(parseSnapshot(*bytes + "x", plan, kId, "s"),
                        "1 bytes after the");
  EXPECT_ERROR_CONTAINS(parseSnapshot("K3CPLAN 1 ...", plan, kId, "s"),
                        "not a k3 prefix snapshot");
}

TEST(SnapshotFileTest, AnotherPlanIsRefused) {
  const PlanDoc plan = smallPlan();
  Expected<std::string> bytes =
      serializeSnapshot(smallSnapshot(plan), plan, kId);
  ASSERT_TRUE(bytes.hasValue()) << bytes.message();
  EXPECT_ERROR_CONTAINS(parseSnapshot(*bytes, plan, kId + 1, "s"),
                        "made with another plan (plan identity "
                        "0123456789abcdef, this plan's is 0123456789abcdf0)");
  // The same identity but another layout (only a hash collision could do
  // this): refused, naming both layouts.
  EXPECT_ERROR_CONTAINS(parseSnapshot(*bytes, smallPlan(32), kId, "s"),
                        "is not this plan's");
  // A snapshot that does not fit its plan is not written.
  PrefixSnapshot bad = smallSnapshot(plan);
  bad.states[1].pop_back();
  EXPECT_ERROR_CONTAINS(serializeSnapshot(bad, plan, kId), "layers.1.mla");
}

TEST(SnapshotFileTest, FilesAreWrittenAtomically) {
  test::TempDir dir;
  const PlanDoc plan = smallPlan();
  const PrefixSnapshot snap = smallSnapshot(plan);
  const std::string path = dir.file("p.snap");
  ASSERT_TRUE(writeSnapshotFile(path, snap, plan, kId).isOk());
  Expected<PrefixSnapshot> back = readSnapshotFile(path, plan, kId);
  ASSERT_TRUE(back.hasValue()) << back.message();
  EXPECT_EQ(back->states, snap.states);
  // Only the file itself: no temporary left behind.
  size_t entries = 0;
  for (const auto &e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1u);
  // A refused write leaves the old file as it was.
  PrefixSnapshot bad = snap;
  bad.logits.pop_back();
  EXPECT_FALSE(writeSnapshotFile(path, bad, plan, kId).isOk());
  EXPECT_TRUE(readSnapshotFile(path, plan, kId).hasValue());
  // An output that is one of the inputs is refused.
  test::writeFile(dir.file("in.plan"), "plan");
  EXPECT_ERROR_CONTAINS(writeSnapshotFile(dir.file("in.plan"), snap, plan, kId,
                                          {dir.file("in.plan")}),
                        "the output is the input");

  EXPECT_ERROR_CONTAINS(readSnapshotFile(dir.file("none.snap"), plan, kId),
                        "cannot open the snapshot file");
  EXPECT_ERROR_CONTAINS(readSnapshotFile(dir.path(), plan, kId),
                        "not a regular file");
  std::string bytes = test::readFile(path);
  test::writeFile(dir.file("cut.snap"), bytes.substr(0, bytes.size() - 9));
  EXPECT_ERROR_CONTAINS(readSnapshotFile(dir.file("cut.snap"), plan, kId),
                        "cut.snap: the snapshot is truncated");
  EXPECT_ERROR_CONTAINS(readSnapshotFile(path, plan, kId ^ 1), "another plan");
}

} // namespace
} // namespace k3
