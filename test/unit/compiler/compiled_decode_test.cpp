//===- compiled_decode_test.cpp - k3c plans decode like the reference -----===//
//
// The compiler's whole flow, in process: import a preset, run a fusion
// strategy, lower, plan buffers, emit the plan text, parse it back, and
// decode 64 tokens greedily on the CPU backend. Every strategy must give
// exactly the tokens and logits of another strategy's plan (`none` against
// `default`, the others against `none`: the fused kernels keep the rounding
// points of the chains they replace, so fusion may not change a bit), and
// the tokens of the float64 reference (all 64), with logits within the e2e
// bound.
//
//===----------------------------------------------------------------------===//
#include "test/unit/compiler/CompileTestUtil.h"

#include "runtime/plan/PlanKernels.h"

#include <iostream>

namespace {

const std::vector<int64_t> kPrompt = {1, 17, 300, 42, 5, 999, 123, 64};
constexpr int64_t kMaxNew = 64;
constexpr int64_t kMaxSeq = 128;
/// Per-row logits bound against the float64 reference, as in the e2e test
/// (measured there: at most 8.1e-3 over 42 made models).
constexpr double kLogitsTol = 2e-2;

class CompiledDecode
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(CompiledDecode, MatchesOtherStrategyAndReference) {
  auto [preset, strategyName] = GetParam();
  mlir::k3::FusionStrategy strategy;
  ASSERT_TRUE(mlir::k3::parseFusionStrategy(strategyName, strategy));
  const std::string &dir = k3test::madeModelDir(preset, /*seed=*/1);
  ::k3::Expected<::k3::ModelConfig> config =
      ::k3::parseConfigFile(dir + "/config.json");
  ASSERT_TRUE(config.hasValue()) << config.message();

  std::string text = k3test::compilePlan(*config, strategy, kMaxSeq);
  ASSERT_FALSE(text.empty()) << "compilation failed";
  ::k3::Expected<::k3::PlanDoc> plan = ::k3::parsePlan(text);
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  EXPECT_EQ(plan->fusion, strategyName);
  k3test::Decode got;
  ASSERT_NO_FATAL_FAILURE(k3test::runPlan(text, dir, kPrompt, kMaxNew, got));
  ASSERT_EQ(got.tokens.size(), static_cast<size_t>(kMaxNew));

  // Another strategy's plan: other launches, the same rounding points, so
  // bit-identical.
  const std::string otherName = strategyName == "none" ? "default" : "none";
  mlir::k3::FusionStrategy other;
  ASSERT_TRUE(mlir::k3::parseFusionStrategy(otherName, other));
  std::string otherText = k3test::compilePlan(*config, other, kMaxSeq);
  ASSERT_FALSE(otherText.empty()) << "compilation failed";
  ASSERT_NE(otherText, text);
  k3test::Decode base;
  ASSERT_NO_FATAL_FAILURE(
      k3test::runPlan(otherText, dir, kPrompt, kMaxNew, base));
  EXPECT_EQ(got.tokens, base.tokens);
  ASSERT_EQ(base.logits.size(), static_cast<size_t>(kMaxNew));
  ASSERT_EQ(got.logits.size(), static_cast<size_t>(kMaxNew));
  int64_t differing = 0;
  for (int64_t s = 0; s < kMaxNew; ++s) {
    // Whole rows on both sides, or the comparison below checks nothing.
    ASSERT_EQ(base.logits[s].size(), static_cast<size_t>(config->vocabSize));
    ASSERT_EQ(got.logits[s].size(), base.logits[s].size());
    for (size_t v = 0; v < base.logits[s].size(); ++v)
      differing += got.logits[s][v] != base.logits[s][v];
  }
  EXPECT_EQ(differing, 0) << "logits differ from the " << otherName
                          << " plan's in " << differing << " places";

  // The float64 reference: all 64 tokens identical, every row's logits
  // within the bound.
  ::k3::ref::RefDecode r;
  ASSERT_NO_FATAL_FAILURE(
      k3test::referenceDecode(*config, dir, kPrompt, kMaxNew, r));
  ::k3::ref::DecodeCompareOptions opt;
  opt.maxRowRelErr = kLogitsTol;
  ::k3::ref::DecodeCompareResult cmp =
      ::k3::ref::compareDecode(r.tokens, r.logits, got.tokens, got.logits, opt);
  std::cout << "[compiled] " << preset << "/" << strategyName << ": "
            << cmp.diagnostic;
  EXPECT_TRUE(cmp.ok) << cmp.diagnostic;
  EXPECT_EQ(cmp.firstTokenMismatch, -1);
  EXPECT_EQ(cmp.rowsCompared, kMaxNew);
}

/// Every scalar a launch gives is one its kernel reads (removing it makes
/// the plan invalid, naming the field), and validatePlan already refused
/// any plan missing one: a lowering can neither drop a value silently
/// (the kernel would run on its params struct's default) nor emit one no
/// kernel reads.
TEST_P(CompiledDecode, EveryLaunchGivesExactlyTheScalarsItsKernelReads) {
  auto [preset, strategyName] = GetParam();
  mlir::k3::FusionStrategy strategy;
  ASSERT_TRUE(mlir::k3::parseFusionStrategy(strategyName, strategy));
  ::k3::Expected<::k3::ModelConfig> config = ::k3::presetConfig(preset);
  ASSERT_TRUE(config.hasValue()) << config.message();
  ::k3::Expected<::k3::PlanDoc> plan =
      ::k3::parsePlan(k3test::compilePlan(*config, strategy, kMaxSeq));
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  int64_t scalars = 0;
  for (size_t i = 0; i < plan->launches.size(); ++i) {
    const ::k3::KernelInfo *k = ::k3::findKernel(plan->launches[i].kernel);
    ASSERT_NE(k, nullptr);
    for (size_t a = 0; a < plan->launches[i].args.size(); ++a) {
      const std::string field = plan->launches[i].args[a].first;
      const ::k3::KernelField *f = k->field(field);
      ASSERT_NE(f, nullptr);
      if (f->kind != ::k3::FieldKind::Int64 &&
          f->kind != ::k3::FieldKind::Int32 &&
          f->kind != ::k3::FieldKind::Float32)
        continue;
      ++scalars;
      ::k3::PlanDoc cut = *plan;
      auto &args = cut.launches[i].args;
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(a));
      ::k3::Status st = ::k3::validatePlan(cut);
      EXPECT_FALSE(st.isOk()) << "launch " << i << " (" << k->name
                              << ") gives '" << field
                              << "', which its kernel does not need";
      if (!st.isOk()) {
        EXPECT_NE(st.message().find("scalar '" + field + "' is missing"),
                  std::string::npos)
            << st.message();
      }
    }
  }
  EXPECT_GT(scalars, 3 * static_cast<int64_t>(plan->launches.size()) / 2);
}

INSTANTIATE_TEST_SUITE_P(
    Presets, CompiledDecode,
    ::testing::Combine(::testing::Values("tiny", "tiny-linear", "tiny-odd"),
                       ::testing::Values("none", "default", "max")),
    k3test::paramName);

} // namespace
