//===- cuda_decode_test.cpp - Compiled plans on the GPU -------------------===//
//
// The same compiled plans as compiled_decode_test, bound to the CUDA backend:
// for each preset and strategy, 64 greedy tokens identical to the CPU
// backend's and to the float64 reference's, and every logits row within the
// e2e bound of both (the CUDA kernels differ from the CPU ones by reduction
// order, not by rounding points). Skipped where there is no GPU.
//
//===----------------------------------------------------------------------===//
#include "test/unit/compiler/CompileTestUtil.h"

#include "runtime/cuda/CudaDriver.h"

#include <iostream>

namespace {

const std::vector<int64_t> kPrompt = {1, 17, 300, 42, 5, 999, 123, 64};
constexpr int64_t kMaxNew = 64;
constexpr int64_t kMaxSeq = 128;
constexpr double kLogitsTol = 2e-2;

using Param = std::tuple<std::string, std::string>;
class CudaDecode : public ::testing::TestWithParam<Param> {};

TEST_P(CudaDecode, MatchesCpuBackendAndReference) {
  ::k3::Expected<::k3::cuda::Driver *> gpu = ::k3::cuda::Driver::get();
  if (!gpu)
    GTEST_SKIP() << "no GPU: " << gpu.message();
  auto [preset, strategyName] = GetParam();
  mlir::k3::FusionStrategy strategy;
  ASSERT_TRUE(mlir::k3::parseFusionStrategy(strategyName, strategy));
  const std::string &dir = k3test::madeModelDir(preset, /*seed=*/1);
  ::k3::Expected<::k3::ModelConfig> config =
      ::k3::parseConfigFile(dir + "/config.json");
  ASSERT_TRUE(config.hasValue()) << config.message();
  std::string text = k3test::compilePlan(*config, strategy, kMaxSeq);
  ASSERT_FALSE(text.empty()) << "compilation failed";

  k3test::Decode cpu, gpuRun, gpuNoGraph;
  ASSERT_NO_FATAL_FAILURE(k3test::runPlan(text, dir, kPrompt, kMaxNew, cpu));
  ASSERT_NO_FATAL_FAILURE(k3test::runPlan(text, dir, kPrompt, kMaxNew, gpuRun,
                                          ::k3::BackendKind::Cuda));
  // Kernel by kernel: the same kernels with the same params, so the same
  // bits as the graph replay.
  ASSERT_NO_FATAL_FAILURE(k3test::runPlan(text, dir, kPrompt, kMaxNew,
                                          gpuNoGraph, ::k3::BackendKind::Cuda,
                                          /*cudaGraph=*/false));
  EXPECT_EQ(gpuNoGraph.tokens, gpuRun.tokens);
  EXPECT_EQ(gpuNoGraph.logits, gpuRun.logits);

  ::k3::ref::DecodeCompareOptions opt;
  opt.maxRowRelErr = kLogitsTol;
  // The CPU backend's decode plays the reference here.
  ::k3::ref::DecodeCompareResult vsCpu = ::k3::ref::compareDecode(
      cpu.tokens, cpu.logits, gpuRun.tokens, gpuRun.logits, opt);
  std::cout << "[cuda vs cpu] " << preset << "/" << strategyName << ": "
            << vsCpu.diagnostic;
  EXPECT_TRUE(vsCpu.ok) << vsCpu.diagnostic;
  EXPECT_EQ(vsCpu.rowsCompared, kMaxNew);

  ::k3::ref::RefDecode r;
  ASSERT_NO_FATAL_FAILURE(
      k3test::referenceDecode(*config, dir, kPrompt, kMaxNew, r));
  ::k3::ref::DecodeCompareResult vsRef = ::k3::ref::compareDecode(
      r.tokens, r.logits, gpuRun.tokens, gpuRun.logits, opt);
  std::cout << "[cuda vs reference] " << preset << "/" << strategyName << ": "
            << vsRef.diagnostic;
  EXPECT_TRUE(vsRef.ok) << vsRef.diagnostic;
}

INSTANTIATE_TEST_SUITE_P(
    Presets, CudaDecode,
    ::testing::Combine(::testing::Values("tiny", "tiny-linear"),
                       ::testing::Values("none", "default", "max")),
    k3test::paramName);

} // namespace
