//===- mutant_decode_test.cpp - The e2e check rejects wrong graphs --------===//
//
// compiled_decode_test shows that compiled plans agree with the float64
// reference. That is only worth something if the comparison can fail: here
// each k3-inject-mutant kind compiles a deliberately wrong graph, decodes the
// same 64 tokens, and the same comparison (identical tokens, logits within
// the same bound) must reject it, while the unmutated graph of the same
// strategy passes.
//
//===----------------------------------------------------------------------===//
#include "test/unit/compiler/CompileTestUtil.h"
#include "test/reference/TeacherForced.h"

#include <iostream>
#include <map>

namespace {

const std::vector<int64_t> kPrompt = {1, 17, 300, 42, 5, 999, 123, 64};
constexpr int64_t kMaxNew = 64;
constexpr int64_t kMaxSeq = 128;
/// The bound of compiled_decode_test and the e2e test.
constexpr double kLogitsTol = 2e-2;

/// Compiles and decodes `preset` with `strategy` (and `mutant` unless empty)
/// and compares the run with the float64 reference.
void compareWithReference(const std::string &preset, const std::string &mutant,
                          mlir::k3::FusionStrategy strategy,
                          ::k3::ref::DecodeCompareResult &cmp) {
  const std::string &dir = k3test::madeModelDir(preset, /*seed=*/1);
  ::k3::Expected<::k3::ModelConfig> config =
      ::k3::parseConfigFile(dir + "/config.json");
  ASSERT_TRUE(config.hasValue()) << config.message();
  std::string text =
      k3test::compilePlan(*config, strategy, kMaxSeq, mutant, /*layer=*/1);
  ASSERT_FALSE(text.empty())
      << "compilation failed (mutant '" << mutant << "')";
  k3test::Decode got;
  ASSERT_NO_FATAL_FAILURE(k3test::runPlan(text, dir, kPrompt, kMaxNew, got));
  // The reference decode of a preset, computed once for all its cases.
  static std::map<std::string, ::k3::ref::RefDecode> refs;
  if (!refs.count(preset)) {
    ::k3::ref::RefDecode fresh;
    ASSERT_NO_FATAL_FAILURE(
        k3test::referenceDecode(*config, dir, kPrompt, kMaxNew, fresh));
    refs[preset] = std::move(fresh);
  }
  const ::k3::ref::RefDecode &r = refs[preset];
  ::k3::ref::DecodeCompareOptions opt;
  opt.maxRowRelErr = kLogitsTol;
  cmp =
      ::k3::ref::compareDecode(r.tokens, r.logits, got.tokens, got.logits, opt);
}

/// The layer-local teacher-forced check (TeacherForced.h) of `preset`'s
/// random model compiled with `strategy` and `mutant` ("" for none).
void forcedCheck(const std::string &preset, const std::string &mutant,
                 mlir::k3::FusionStrategy strategy, k3test::ForcedResult &r) {
  constexpr int64_t steps = 16;
  const std::string &dir =
      k3test::madeModelDir(preset, /*seed=*/3, ::k3::Structure::Random);
  ::k3::Expected<::k3::ModelConfig> config =
      ::k3::parseConfigFile(dir + "/config.json");
  ASSERT_TRUE(config.hasValue()) << config.message();
  std::string text =
      k3test::compilePlan(*config, strategy, steps, mutant, /*layer=*/1);
  ASSERT_FALSE(text.empty()) << "compilation failed (mutant '" << mutant
                             << "')";
  ::k3::Expected<::k3::PlanDoc> plan = ::k3::parsePlan(text);
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  auto session = ::k3::Session::open(plan.take(), dir);
  ASSERT_TRUE(session.hasValue()) << session.message();
  ASSERT_NO_FATAL_FAILURE(k3test::teacherForcedCompare(
      *config, dir, **session,
      k3test::forcedTokens(config->vocabSize, steps, /*seed=*/5),
      k3test::ForcedBounds(), r));
}

/// (preset, mutant kind, fusion strategy).
using Param = std::tuple<std::string, std::string, std::string>;
class MutantDecode : public ::testing::TestWithParam<Param> {};

TEST_P(MutantDecode, ReferenceComparisonRejectsIt) {
  auto [preset, mutant, strategyName] = GetParam();
  mlir::k3::FusionStrategy strategy;
  ASSERT_TRUE(mlir::k3::parseFusionStrategy(strategyName, strategy));

  ::k3::ref::DecodeCompareResult clean;
  ASSERT_NO_FATAL_FAILURE(compareWithReference(preset, "", strategy, clean));
  EXPECT_TRUE(clean.ok) << "the unmutated graph must pass: "
                        << clean.diagnostic;

  ::k3::ref::DecodeCompareResult bad;
  ASSERT_NO_FATAL_FAILURE(compareWithReference(preset, mutant, strategy, bad));
  EXPECT_FALSE(bad.ok) << "mutant '" << mutant
                       << "' passed the reference comparison";
  std::cout << "[mutant " << preset << " " << mutant << " " << strategyName
            << "] " << (bad.ok ? "NOT DETECTED" : "detected") << ": "
            << bad.diagnostic;

  // The teacher-forced layer-local check, on a random model where nothing
  // planted can hide an error: the clean graph passes, the mutant fails.
  k3test::ForcedResult forcedClean, forcedBad;
  ASSERT_NO_FATAL_FAILURE(forcedCheck(preset, "", strategy, forcedClean));
  EXPECT_TRUE(forcedClean.ok) << forcedClean.diagnostic;
  ASSERT_NO_FATAL_FAILURE(forcedCheck(preset, mutant, strategy, forcedBad));
  EXPECT_FALSE(forcedBad.ok) << "mutant '" << mutant
                             << "' passed the teacher-forced check";
  std::cout << "[mutant " << preset << " " << mutant << " " << strategyName
            << " teacher-forced] "
            << (forcedBad.ok ? "NOT DETECTED" : "detected") << ": "
            << forcedBad.diagnostic;
}

/// Prefix snapshots: restoring the state after a shared prompt prefix gives
/// exactly the decode of the whole prompt, and a snapshot restored into the
/// wrong layer slots (the KDA states of two layers swapped) is rejected by
/// the same reference comparison.
class SnapshotDecode : public ::testing::TestWithParam<std::string> {};

TEST_P(SnapshotDecode, RestoredPrefixDecodesTheSameAndTheWrongSlotIsCaught) {
  const std::string preset = GetParam();
  const std::string &dir = k3test::madeModelDir(preset, /*seed=*/1);
  ::k3::Expected<::k3::ModelConfig> config =
      ::k3::parseConfigFile(dir + "/config.json");
  ASSERT_TRUE(config.hasValue()) << config.message();
  std::string text =
      k3test::compilePlan(*config, mlir::k3::FusionStrategy::Default, kMaxSeq);
  ASSERT_FALSE(text.empty());
  ::k3::Expected<::k3::PlanDoc> plan = ::k3::parsePlan(text);
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  auto session = ::k3::Session::open(plan.take(), dir);
  ASSERT_TRUE(session.hasValue()) << session.message();
  ::k3::Session &ses = **session;

  auto whole = ses.generate(kPrompt, kMaxNew, /*keepLogits=*/true);
  ASSERT_TRUE(whole.hasValue()) << whole.message();
  const std::vector<int64_t> prefix(kPrompt.begin(), kPrompt.begin() + 5);
  auto snap = ses.snapshotPrefix(prefix);
  ASSERT_TRUE(snap.hasValue()) << snap.message();
  auto resumed = ses.generate(kPrompt, kMaxNew, true, {}, &*snap);
  ASSERT_TRUE(resumed.hasValue()) << resumed.message();
  EXPECT_EQ(resumed->tokens, whole->tokens);
  EXPECT_EQ(resumed->logits, whole->logits) << "not bit-identical";

  // The whole prompt as the prefix: the first token comes from the
  // snapshot's logits.
  auto full = ses.snapshotPrefix(kPrompt);
  ASSERT_TRUE(full.hasValue()) << full.message();
  auto fromFull = ses.generate(kPrompt, kMaxNew, true, {}, &*full);
  ASSERT_TRUE(fromFull.hasValue()) << fromFull.message();
  EXPECT_EQ(fromFull->logits, whole->logits);

  // A snapshot of another prefix is refused.
  std::vector<int64_t> other = kPrompt;
  other[2] += 1;
  auto wrong = ses.generate(other, kMaxNew, false, {}, &*snap);
  ASSERT_FALSE(wrong.hasValue());
  EXPECT_NE(wrong.message().find("is not a prefix of the prompt"),
            std::string::npos)
      << wrong.message();

  // A snapshot of another plan (here: one state short) is refused.
  ::k3::PrefixSnapshot broken = *snap;
  broken.states.pop_back();
  auto refused = ses.generate(kPrompt, kMaxNew, false, {}, &broken);
  ASSERT_FALSE(refused.hasValue());
  EXPECT_NE(refused.message().find("was not made with this plan"),
            std::string::npos)
      << refused.message();

  ::k3::ref::RefDecode r;
  ASSERT_NO_FATAL_FAILURE(
      k3test::referenceDecode(*config, dir, kPrompt, kMaxNew, r));
  ::k3::ref::DecodeCompareOptions opt;
  opt.maxRowRelErr = kLogitsTol;
  auto rows = [&](const ::k3::GenerateResult &g) {
    return ::k3::ref::logitRowsFromFlat(g.logits, g.vocab);
  };
  auto good = ::k3::ref::compareDecode(r.tokens, r.logits, resumed->tokens,
                                       rows(*resumed), opt);
  EXPECT_TRUE(good.ok) << good.diagnostic;

  ::k3::PrefixSnapshot swapped = *snap;
  swapped.mutantSwapKdaSlots = true;
  auto bad = ses.generate(kPrompt, kMaxNew, true, {}, &swapped);
  ASSERT_TRUE(bad.hasValue()) << bad.message();
  auto caught = ::k3::ref::compareDecode(r.tokens, r.logits, bad->tokens,
                                         rows(*bad), opt);
  EXPECT_FALSE(caught.ok) << "a snapshot restored into the wrong KDA slots "
                             "passed the reference comparison";
  std::cout << "[mutant " << preset << " snapshot-wrong-slot] "
            << (caught.ok ? "NOT DETECTED" : "detected") << ": "
            << caught.diagnostic;
}

INSTANTIATE_TEST_SUITE_P(Presets, SnapshotDecode,
                         ::testing::Values("tiny", "tiny-linear", "tiny-odd"),
                         [](const auto &info) {
                           std::string n = info.param;
                           for (char &c : n)
                             if (c == '-')
                               c = '_';
                           return n;
                         });

std::string testName(const ::testing::TestParamInfo<Param> &info) {
  std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param) +
                  "_" + std::get<2>(info.param);
  for (char &c : n)
    if (c == '-')
      c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, MutantDecode,
    ::testing::Combine(::testing::Values("tiny"),
                       ::testing::Values("attn-res-skip", "router-expert0",
                                         "skip-layer"),
                       ::testing::Values("none", "default", "max")),
    testName);

INSTANTIATE_TEST_SUITE_P(
    TinyOdd, MutantDecode,
    ::testing::Combine(::testing::Values("tiny-odd"),
                       ::testing::Values("attn-res-skip", "router-expert0",
                                         "skip-layer"),
                       ::testing::Values("none", "default", "max")),
    testName);

// tiny-linear has no AttnRes, so attn-res-skip does not apply.
INSTANTIATE_TEST_SUITE_P(
    TinyLinear, MutantDecode,
    ::testing::Combine(::testing::Values("tiny-linear"),
                       ::testing::Values("router-expert0", "skip-layer"),
                       ::testing::Values("none", "default", "max")),
    testName);

} // namespace
