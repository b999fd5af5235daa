//===- decode_cuda_test.cpp - Compiled plans on the GPU -------------------===//
//
// Plans compiled by k3c (scripts/gpu-stage.sh writes them for the tiny
// presets and every strategy; the GPU machine has no MLIR, so they come from
// a folder named by K3C_CUDA_TEST_PLANS), bound to the CUDA backend over the
// same made model: 64 greedy tokens identical to the CPU backend's and to
// the float64 reference's, every logits row within the e2e bound of both,
// and the CUDA graph replay bit-identical to launching kernel by kernel.
// Skipped without a GPU or without the plans.
//
//===----------------------------------------------------------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

#include "runtime/CpuBackend.h"
#include "runtime/ModelMaker.h"
#include "runtime/ModelWeights.h"
#include "runtime/Presets.h"
#include "runtime/Session.h"
#include "test/reference/Compare.h"
#include "test/reference/RefModel.h"

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <unistd.h>

namespace {

const std::vector<int64_t> kPrompt = {1, 17, 300, 42, 5, 999, 123, 64};
constexpr int64_t kMaxNew = 64;
constexpr double kLogitsTol = 2e-2;

/// A made model per preset, removed at exit.
const std::string &modelDir(const std::string &preset) {
  struct Dirs {
    std::map<std::string, std::string> byPreset;
    ~Dirs() {
      std::error_code ec;
      for (auto &kv : byPreset)
        std::filesystem::remove_all(kv.second, ec);
    }
  };
  static Dirs dirs;
  auto it = dirs.byPreset.find(preset);
  if (it != dirs.byPreset.end())
    return it->second;
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("k3c-cuda-" + preset + "-" + std::to_string(::getpid())))
                        .string();
  auto c = k3::presetConfig(preset);
  EXPECT_TRUE(c.hasValue());
  k3::Status st = k3::makeModel(*c, /*seed=*/1, dir);
  EXPECT_TRUE(st.isOk()) << (st.isOk() ? "" : st.message());
  return dirs.byPreset[preset] = dir;
}

struct DecodeRun {
  std::vector<int64_t> tokens;
  k3::ref::LogitRows logits;
};

void decode(const std::string &planPath, const std::string &dir,
            k3::BackendKind kind, bool graph, DecodeRun &out) {
  auto plan = k3::readPlanFile(planPath);
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  auto session = k3::Session::open(plan.take(), dir, kind, graph);
  ASSERT_TRUE(session.hasValue()) << session.message();
  auto got = (*session)->generate(kPrompt, kMaxNew, /*keepLogits=*/true);
  ASSERT_TRUE(got.hasValue()) << got.message();
  out.tokens = got->tokens;
  out.logits = k3::ref::logitRowsFromFlat(got->logits, got->vocab);
}

using Param = std::tuple<std::string, std::string>;
class DecodeCuda : public ::testing::TestWithParam<Param> {};

TEST_P(DecodeCuda, MatchesCpuBackendAndReference) {
  K3_REQUIRE_GPU();
  const char *plans = std::getenv("K3C_CUDA_TEST_PLANS");
  if (!plans)
    GTEST_SKIP() << "set K3C_CUDA_TEST_PLANS to a folder of plans made by "
                    "scripts/gpu-stage.sh";
  auto [preset, fusion] = GetParam();
  const std::string planPath =
      std::string(plans) + "/" + preset + "-" + fusion + ".plan";
  ASSERT_TRUE(std::filesystem::exists(planPath)) << planPath;
  const std::string &dir = modelDir(preset);

  DecodeRun cpu, gpu, gpuNoGraph;
  ASSERT_NO_FATAL_FAILURE(
      decode(planPath, dir, k3::BackendKind::Cpu, true, cpu));
  ASSERT_NO_FATAL_FAILURE(
      decode(planPath, dir, k3::BackendKind::Cuda, true, gpu));
  ASSERT_NO_FATAL_FAILURE(
      decode(planPath, dir, k3::BackendKind::Cuda, false, gpuNoGraph));
  // Same kernels, same params: replaying the graph changes nothing.
  EXPECT_EQ(gpuNoGraph.tokens, gpu.tokens);
  EXPECT_EQ(gpuNoGraph.logits, gpu.logits);

  k3::ref::DecodeCompareOptions opt;
  opt.maxRowRelErr = kLogitsTol;
  auto vsCpu = k3::ref::compareDecode(cpu.tokens, cpu.logits, gpu.tokens,
                                      gpu.logits, opt);
  std::cout << "[cuda vs cpu] " << preset << "/" << fusion << ": "
            << vsCpu.diagnostic;
  EXPECT_TRUE(vsCpu.ok) << vsCpu.diagnostic;
  EXPECT_EQ(vsCpu.rowsCompared, kMaxNew);

  auto config = k3::parseConfigFile(dir + "/config.json");
  ASSERT_TRUE(config.hasValue()) << config.message();
  auto store = k3::TensorStore::open(dir);
  ASSERT_TRUE(store.hasValue()) << store.message();
  auto weights = k3::bindModelWeights(*config, *store);
  ASSERT_TRUE(weights.hasValue()) << weights.message();
  auto r = k3::ref::referenceGreedy(*config, *weights, kPrompt, kMaxNew);
  ASSERT_TRUE(r.hasValue()) << r.message();
  auto vsRef =
      k3::ref::compareDecode(r->tokens, r->logits, gpu.tokens, gpu.logits, opt);
  std::cout << "[cuda vs reference] " << preset << "/" << fusion << ": "
            << vsRef.diagnostic;
  EXPECT_TRUE(vsRef.ok) << vsRef.diagnostic;
}

/// Values of `bytes` as floats, by plan dtype ("bf16", "f32"; others: none).
std::vector<float> asFloats(const uint8_t *bytes, uint64_t n,
                            const std::string &dtype) {
  std::vector<float> v;
  if (dtype == "bf16")
    for (uint64_t i = 0; i + 1 < n; i += 2)
      v.push_back(k3::bf16ToFloat(
          static_cast<uint16_t>(bytes[i] | (bytes[i + 1] << 8))));
  else if (dtype == "f32")
    for (uint64_t i = 0; i + 3 < n; i += 4) {
      float f;
      std::memcpy(&f, bytes + i, 4);
      v.push_back(f);
    }
  return v;
}

/// Differential run, launch by launch: both backends run each launch of the
/// first steps and every buffer or state the launch writes must agree (the
/// step where a kernel first goes wrong, named, instead of wrong tokens).
TEST_P(DecodeCuda, LaunchByLaunchAgainstCpu) {
  K3_REQUIRE_GPU();
  const char *plans = std::getenv("K3C_CUDA_TEST_PLANS");
  if (!plans)
    GTEST_SKIP() << "set K3C_CUDA_TEST_PLANS";
  auto [preset, fusion] = GetParam();
  auto plan = k3::readPlanFile(std::string(plans) + "/" + preset + "-" +
                               fusion + ".plan");
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  auto store = k3::TensorStore::open(modelDir(preset));
  ASSERT_TRUE(store.hasValue()) << store.message();
  auto cpu = k3::CpuBackend::bind(*plan, *store);
  ASSERT_TRUE(cpu.hasValue()) << cpu.message();
  auto gpu = k3::CudaBackend::bind(*plan, *store, /*useGraph=*/false);
  ASSERT_TRUE(gpu.hasValue()) << gpu.message();
  ASSERT_TRUE((*cpu)->resetState().isOk());
  ASSERT_TRUE((*gpu)->resetState().isOk());

  std::vector<uint8_t> a, b;
  for (int64_t pos = 0; pos < 3; ++pos) {
    const int64_t token = kPrompt[pos];
    for (size_t i = 0; i < plan->launches.size(); ++i) {
      const k3::PlanLaunch &l = plan->launches[i];
      ASSERT_TRUE((*cpu)->runLaunch(i, token, pos).isOk());
      k3::Status st = (*gpu)->runLaunch(i, token, pos);
      ASSERT_TRUE(st.isOk()) << st.message();
      const k3::KernelInfo *k = k3::findKernel(l.kernel);
      for (const auto &[field, arg] : l.args) {
        const k3::KernelField *f = k->field(field);
        if (!f || f->kind != k3::FieldKind::PtrOut)
          continue;
        std::string what, dtype;
        uint64_t off = arg.offset, bytes = 0;
        if (arg.kind == k3::PlanArg::Kind::Buffer) {
          const k3::PlanBuffer &buf = plan->buffers[arg.index];
          ASSERT_TRUE((*cpu)->readArena(a).isOk());
          ASSERT_TRUE((*gpu)->readArena(b).isOk());
          off += buf.offset;
          bytes = buf.bytes - arg.offset;
          dtype = buf.dtype;
          what = "buffer " + buf.name;
        } else if (arg.kind == k3::PlanArg::Kind::State) {
          ASSERT_TRUE((*cpu)->readState(arg.index, a).isOk());
          ASSERT_TRUE((*gpu)->readState(arg.index, b).isOk());
          bytes = a.size() - arg.offset;
          dtype = plan->states[arg.index].kind == "kda_state" ||
                          plan->states[arg.index].kind == "conv_state"
                      ? "f32"
                      : "bf16";
          what = "state " + plan->states[arg.index].name;
        } else {
          continue;
        }
        std::vector<float> want = asFloats(a.data() + off, bytes, dtype),
                           got = asFloats(b.data() + off, bytes, dtype);
        const double rel = k3test::relErr(want, got);
        ASSERT_LE(rel, 5e-2)
            << "position " << pos << ", launch " << i << " (" << l.kernel
            << ", op " << l.op << "): field '" << field << "' -> " << what
            << " differs (rel " << rel << ")";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Presets, DecodeCuda,
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
