//===- compiled_decode_test.cpp - k3c plans decode like the reference -----===//
//
// The compiler's whole flow, in process: import a preset, run a fusion
// strategy, lower, plan buffers, emit the plan text, parse it back, and
// decode 64 tokens greedily on the CPU backend. Every strategy must give
// exactly the tokens and logits of the hand-written CpuDecoder (same kernels,
// same rounding points: fusion may not change a bit), and the tokens of the
// float64 reference.
//
//===----------------------------------------------------------------------===//
#include "codegen/Codegen.h"
#include "import/Importer.h"
#include "passes/Passes.h"

#include "runtime/CpuDecoder.h"
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
constexpr int64_t kMaxNew = 64;
constexpr int64_t kMaxSeq = 128;

/// Compiles `config` with `strategy` to plan text, as k3c does.
std::string compile(const ::k3::ModelConfig &config,
                    mlir::k3::FusionStrategy strategy) {
  DialectRegistry registry;
  registry.insert<mlir::k3::K3Dialect, func::FuncDialect>();
  mlir::k3::registerCodegen(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module = mlir::k3::importModel(ctx, config, kMaxSeq);
  PassManager pm(&ctx);
  mlir::k3::buildK3FusionPipeline(pm, strategy);
  pm.addPass(mlir::k3::createConvertK3ToLaunch());
  pm.addPass(mlir::k3::createK3PlanBuffers());
  if (failed(pm.run(*module)))
    return "";
  std::string plan;
  if (failed(mlir::k3::emitPlan(*module, mlir::k3::stringifyFusionStrategy(strategy),
                          plan)))
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
                     ("k3c-compiled-" + preset + "-" +
                      std::to_string(::getpid())))
                        .string();
  ::k3::Expected<::k3::ModelConfig> c = ::k3::presetConfig(preset);
  EXPECT_TRUE(c.hasValue());
  ::k3::Status st = ::k3::makeModel(*c, /*seed=*/1, dir);
  EXPECT_TRUE(st.isOk()) << (st.isOk() ? "" : st.message());
  return dirs[preset] = dir;
}

struct Decode {
  std::vector<int64_t> tokens;
  ::k3::ref::LogitRows logits;
};

class CompiledDecode
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(CompiledDecode, MatchesCpuDecoderAndReference) {
  auto [preset, strategyName] = GetParam();
  mlir::k3::FusionStrategy strategy;
  ASSERT_TRUE(mlir::k3::parseFusionStrategy(strategyName, strategy));
  const std::string &dir = modelDir(preset);
  ::k3::Expected<::k3::ModelConfig> config =
      ::k3::parseConfigFile(dir + "/config.json");
  ASSERT_TRUE(config.hasValue()) << config.message();

  std::string text = compile(*config, strategy);
  ASSERT_FALSE(text.empty()) << "compilation failed";
  ::k3::Expected<::k3::PlanDoc> plan = ::k3::parsePlan(text);
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  EXPECT_EQ(plan->fusion, strategyName);

  ::k3::Expected<std::unique_ptr<::k3::Session>> session =
      ::k3::Session::open(plan.take(), dir);
  ASSERT_TRUE(session.hasValue()) << session.message();
  ::k3::Expected<::k3::GenerateResult> got =
      (*session)->generate(kPrompt, kMaxNew, /*keepLogits=*/true);
  ASSERT_TRUE(got.hasValue()) << got.message();
  ASSERT_EQ(got->tokens.size(), static_cast<size_t>(kMaxNew));

  // The hand-written decoder: same kernels, so bit-identical.
  ::k3::Expected<::k3::TensorStore> store = ::k3::TensorStore::open(dir);
  ASSERT_TRUE(store.hasValue()) << store.message();
  ::k3::Expected<::k3::ModelWeights> weights =
      ::k3::bindModelWeights(*config, *store);
  ASSERT_TRUE(weights.hasValue()) << weights.message();
  ::k3::Expected<::k3::CpuDecoder> cpu =
      ::k3::CpuDecoder::create(*config, *weights, kMaxSeq);
  ASSERT_TRUE(cpu.hasValue()) << cpu.message();
  std::vector<std::vector<float>> cpuLogits;
  ::k3::Expected<std::vector<int64_t>> cpuTokens =
      cpu->greedy(kPrompt, kMaxNew, &cpuLogits);
  ASSERT_TRUE(cpuTokens.hasValue()) << cpuTokens.message();
  EXPECT_EQ(got->tokens, *cpuTokens);
  ASSERT_EQ(cpuLogits.size(), static_cast<size_t>(kMaxNew));
  int64_t V = got->vocab, differing = 0;
  for (int64_t s = 0; s < kMaxNew; ++s)
    for (int64_t v = 0; v < V; ++v)
      differing += got->logits[s * V + v] != cpuLogits[s][v];
  EXPECT_EQ(differing, 0) << "logits differ from CpuDecoder in " << differing
                          << " places";

  // The float64 reference: identical tokens, logits within the e2e bound.
  ::k3::Expected<::k3::ref::RefDecode> r =
      ::k3::ref::referenceGreedy(*config, *weights, kPrompt, kMaxNew);
  ASSERT_TRUE(r.hasValue()) << r.message();
  // Same policy as the CpuDecoder e2e test: rows after the reference itself
  // meets a near-tie (router margin < 2e-3, top-2 logit gap < 1e-3 of the
  // row's max) may legitimately go either way in fp32 and are only checked
  // for finiteness. With a well-conditioned model that is every row.
  ::k3::ref::DecodeCompareOptions opt;
  opt.strictRows = ::k3::ref::robustPrefixRows(
      r->routingMargins, r->logits, static_cast<int64_t>(kPrompt.size()),
      2e-3, 1e-3);
  ::k3::ref::DecodeCompareResult cmp =
      ::k3::ref::compareDecode(r->tokens, r->logits, got->tokens,
                               ::k3::ref::logitRowsFromFlat(got->logits, V),
                               opt);
  std::cout << "[compiled] " << preset << "/" << strategyName
            << ": strict rows " << opt.strictRows << " of " << kMaxNew << "; "
            << cmp.diagnostic;
  EXPECT_TRUE(cmp.ok) << cmp.diagnostic;
}

INSTANTIATE_TEST_SUITE_P(
    Presets, CompiledDecode,
    ::testing::Combine(::testing::Values("tiny", "tiny-linear"),
                       ::testing::Values("none", "default", "max")),
    [](const auto &info) {
      std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
      for (char &c : n)
        if (c == '-')
          c = '_';
      return n;
    });

} // namespace
