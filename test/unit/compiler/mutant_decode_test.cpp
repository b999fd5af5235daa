//===- mutant_decode_test.cpp - The e2e check rejects wrong graphs --------===//
//
// compiled_decode_test shows that compiled plans agree with the float64
// reference. That is only worth something if the comparison can fail: here
// each k3-inject-mutant kind compiles a deliberately wrong graph, runs it for
// a few tokens, and the comparison with the reference must reject it, while
// the unmutated graph passes on the same prompt.
//
//===----------------------------------------------------------------------===//
#include "codegen/Codegen.h"
#include "import/Importer.h"
#include "passes/Passes.h"

#include "runtime/ModelMaker.h"
#include "runtime/Plan.h"
#include "runtime/Presets.h"
#include "runtime/Session.h"
#include "test/reference/Compare.h"
#include "test/reference/RefModel.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <map>

using namespace mlir;

namespace {

const std::vector<int64_t> kPrompt = {1, 17, 300, 42, 5, 999, 123, 64};
constexpr int64_t kMaxNew = 16;
constexpr int64_t kMaxSeq = 64;

/// Compiles `config` to plan text with `strategy` and, unless `mutant` is
/// empty, the k3-inject-mutant kind `mutant`; "" on failure.
std::string compile(const ::k3::ModelConfig &config,
                    mlir::k3::FusionStrategy strategy,
                    const std::string &mutant, int64_t layer) {
  DialectRegistry registry;
  registry.insert<mlir::k3::K3Dialect, func::FuncDialect>();
  mlir::k3::registerCodegen(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module = mlir::k3::importModel(ctx, config, kMaxSeq);
  PassManager pm(&ctx);
  if (mutant.empty())
    mlir::k3::buildK3FusionPipeline(pm, strategy);
  else if (failed(mlir::k3::buildK3MutantPipeline(pm, strategy, mutant,
                                                  layer)))
    return "";
  pm.addPass(mlir::k3::createConvertK3ToLaunch());
  pm.addPass(mlir::k3::createK3PlanBuffers());
  if (failed(pm.run(*module)))
    return "";
  std::string plan;
  if (failed(mlir::k3::emitPlan(
          *module, mlir::k3::stringifyFusionStrategy(strategy), plan)))
    return "";
  return plan;
}

/// A made model directory per preset, shared by the tests of this file.
const std::string &modelDir(const std::string &preset) {
  static std::map<std::string, std::string> dirs;
  auto it = dirs.find(preset);
  if (it != dirs.end())
    return it->second;
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("k3c-mutant-" + preset + "-" +
                      std::to_string(::getpid())))
                        .string();
  ::k3::Expected<::k3::ModelConfig> c = ::k3::presetConfig(preset);
  EXPECT_TRUE(c.hasValue());
  ::k3::Status st = ::k3::makeModel(*c, /*seed=*/1, dir);
  EXPECT_TRUE(st.isOk()) << (st.isOk() ? "" : st.message());
  return dirs[preset] = dir;
}

/// Compiles and decodes `preset` (with `mutant` unless empty) and compares
/// the run with the float64 reference.
void compareWithReference(const std::string &preset, const std::string &mutant,
                          mlir::k3::FusionStrategy strategy,
                          ::k3::ref::DecodeCompareResult &cmp) {
  const std::string &dir = modelDir(preset);
  ::k3::Expected<::k3::ModelConfig> config =
      ::k3::parseConfigFile(dir + "/config.json");
  ASSERT_TRUE(config.hasValue()) << config.message();
  std::string text = compile(*config, strategy, mutant, /*layer=*/1);
  ASSERT_FALSE(text.empty()) << "compilation failed (mutant '" << mutant
                             << "')";
  ::k3::Expected<::k3::PlanDoc> plan = ::k3::parsePlan(text);
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  ::k3::Expected<std::unique_ptr<::k3::Session>> session =
      ::k3::Session::open(plan.take(), dir);
  ASSERT_TRUE(session.hasValue()) << session.message();
  ::k3::Expected<::k3::GenerateResult> got =
      (*session)->generate(kPrompt, kMaxNew, /*keepLogits=*/true);
  ASSERT_TRUE(got.hasValue()) << got.message();

  ::k3::Expected<::k3::TensorStore> store = ::k3::TensorStore::open(dir);
  ASSERT_TRUE(store.hasValue()) << store.message();
  ::k3::Expected<::k3::ModelWeights> weights =
      ::k3::bindModelWeights(*config, *store);
  ASSERT_TRUE(weights.hasValue()) << weights.message();
  ::k3::Expected<::k3::ref::RefDecode> r =
      ::k3::ref::referenceGreedy(*config, *weights, kPrompt, kMaxNew);
  ASSERT_TRUE(r.hasValue()) << r.message();
  cmp = ::k3::ref::compareDecode(
      r->tokens, r->logits, got->tokens,
      ::k3::ref::logitRowsFromFlat(got->logits, got->vocab));
}

/// (preset, mutant kind).
class MutantDecode
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(MutantDecode, ReferenceComparisonRejectsIt) {
  auto [preset, mutant] = GetParam();
  // router-expert0 marks the decomposed routers and needs fusion none; the
  // others mutate the coarse graph and go through the default fusions.
  mlir::k3::FusionStrategy strategy = mutant == "router-expert0"
                                          ? mlir::k3::FusionStrategy::None
                                          : mlir::k3::FusionStrategy::Default;

  ::k3::ref::DecodeCompareResult clean;
  ASSERT_NO_FATAL_FAILURE(compareWithReference(preset, "", strategy, clean));
  EXPECT_TRUE(clean.ok) << "the unmutated graph must pass: "
                        << clean.diagnostic;

  ::k3::ref::DecodeCompareResult bad;
  ASSERT_NO_FATAL_FAILURE(compareWithReference(preset, mutant, strategy, bad));
  EXPECT_FALSE(bad.ok) << "mutant '" << mutant
                       << "' passed the reference comparison";
  std::cout << "[mutant " << preset << " " << mutant << "] "
            << (bad.ok ? "NOT DETECTED" : "detected") << ": "
            << bad.diagnostic << "\n";
}

std::string testName(
    const ::testing::TestParamInfo<std::tuple<std::string, std::string>>
        &info) {
  std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
  for (char &c : n)
    if (c == '-')
      c = '_';
  return n;
}

// Not instantiated for `tiny` yet: with the current made weights its
// unmutated graph already parts from the float64 reference within 16 tokens
// (a router near-tie; see test/unit/e2e), so "the real graph passes" does not
// hold there and the check would prove nothing. The mutants are caught on
// tiny too (attn-res-skip at step 0, router-expert0 at step 9, skip-layer at
// step 1, measured by hand); re-enable once tiny is well conditioned.

// tiny-linear has no AttnRes, so attn-res-skip does not apply.
INSTANTIATE_TEST_SUITE_P(
    TinyLinear, MutantDecode,
    ::testing::Combine(::testing::Values("tiny-linear"),
                       ::testing::Values("router-expert0", "skip-layer")),
    testName);

} // namespace
