//===- Profile_test.cpp - Launch bytes, layer parts, the step profile -----===//
//
// runtime/exec/Profile.h on k3c's plans (CompiledPlan.h) and the CPU backend: the bytes each launch moves (checked against the shapes for the
// special cases: one embedding row, top-k experts, the MLA cache at a
// context, states read and written), the layer part of every launch from
// the probes, the kernel and part tables, and a real profile of a tiny
// model. Times are only checked to be there, never for their size.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/model/Presets.h"
#include "runtime/exec/Profile.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

namespace k3 {
namespace {

constexpr int64_t kMaxSeq = 32;

ModelConfig preset(const std::string &name) {
  Expected<ModelConfig> c = presetConfig(name);
  EXPECT_TRUE(c.hasValue());
  return c ? *c : ModelConfig();
}

/// k3c's plan of `c` with `fusion` (its probes: layers.<l>.mixer and
/// layers.<l>.out).
PlanDoc compiled(const ModelConfig &c, const std::string &fusion = "default") {
  Expected<PlanDoc> p = test::compiledPlan(c, fusion, kMaxSeq);
  EXPECT_TRUE(p.hasValue()) << p.message();
  return p ? p.take() : PlanDoc();
}

size_t firstLaunch(const PlanDoc &plan, const std::string &kernel) {
  for (size_t i = 0; i < plan.launches.size(); ++i)
    if (plan.launches[i].kernel == kernel)
      return i;
  ADD_FAILURE() << "no " << kernel << " launch";
  return 0;
}

uint64_t argBytes(const PlanDoc &plan, const PlanArg &a) {
  switch (a.kind) {
  case PlanArg::Kind::Buffer:
    return plan.buffers[static_cast<size_t>(a.index)].bytes;
  case PlanArg::Kind::State:
    return plan.states[static_cast<size_t>(a.index)].bytes;
  default:
    return 0;
  }
}

//===----------------------------------------------------------------------===//
// Bytes
//===----------------------------------------------------------------------===//

TEST(LaunchBytes, EveryLaunchMovesBytesAndTheStepIsTheirSum) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *name : {"tiny", "tiny-linear", "tiny-odd"})
    for (const char *fusion : test::kFusionStrategies) {
      const PlanDoc plan = compiled(preset(name), fusion);
      LaunchBytes sum;
      for (size_t i = 0; i < plan.launches.size(); ++i) {
        const LaunchBytes b = launchBytes(plan, i);
        EXPECT_GT(b.read, 0u)
            << name << " launch " << i << " " << plan.launches[i].kernel;
        EXPECT_GT(b.written, 0u)
            << name << " launch " << i << " " << plan.launches[i].kernel;
        sum.read += b.read;
        sum.written += b.written;
      }
      const LaunchBytes step = stepBytes(plan);
      EXPECT_EQ(step.read, sum.read) << name;
      EXPECT_EQ(step.written, sum.written) << name;
      EXPECT_EQ(launchBytes(plan, plan.launches.size()).total(), 0u);
    }
}

TEST(LaunchBytes, EmbedReadsOneRow) {
  K3C_SKIP_WITHOUT_COMPILER();
  const ModelConfig c = preset("tiny");
  const PlanDoc plan = compiled(c);
  const LaunchBytes b = launchBytes(plan, firstLaunch(plan, "embed"));
  EXPECT_EQ(b.read, static_cast<uint64_t>(c.hiddenSize) * 2);
  EXPECT_EQ(b.written, static_cast<uint64_t>(c.hiddenSize) * 2);
}

TEST(LaunchBytes, ExpertsCountTopKOfTheirTable) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *name : {"tiny", "tiny-linear"}) {
    const ModelConfig c = preset(name);
    const PlanDoc plan = compiled(c);
    // Kimi-Linear's MoE FFN is one moe_ffn launch (k3-fuse-moe-ffn): the
    // expert fields are moe_experts' under "experts.", next to a router.
    const bool ffn = std::string(name) == "tiny-linear";
    const size_t i = firstLaunch(plan, ffn ? "moe_ffn" : "moe_experts");
    const PlanLaunch &l = plan.launches[i];
    const std::string e = ffn ? "experts." : "";
    auto arg = [&](const std::string &f) { return l.find(e + f); };
    const int64_t dm = c.moeHiddenSize(), inter = c.moeIntermediateSize;
    const uint64_t perMatrix = static_cast<uint64_t>(dm * inter);
    const uint64_t perExpert =
        3 * (c.expertsMxfp4 ? perMatrix / 2 + perMatrix / 32 : perMatrix * 2);
    uint64_t buffersIn = 0;
    for (const char *f : {"x", "ids", "weights"})
      buffersIn += argBytes(plan, *arg(f));
    // The fused FFN also reads its residual, the input norm's weight and
    // the shared expert, once each, and its router the gate, bias, h and
    // the same norm weight, and writes the ids and weights.
    uint64_t extras = 0, routerWrites = 0;
    if (ffn) {
      extras += argBytes(plan, *arg("residual"));
      extras += 2 * static_cast<uint64_t>(dm) * 2; // both halves' norm
      extras += 3 * static_cast<uint64_t>(c.numSharedExperts * inter * dm) * 2;
      extras += argBytes(plan, *l.find("router.h"));
      extras += static_cast<uint64_t>(c.numExperts * dm) * 2 +
                static_cast<uint64_t>(c.numExperts) * 4; // gate, bias
      routerWrites = argBytes(plan, *l.find("router.outIds")) +
                     argBytes(plan, *l.find("router.outWeights"));
    }
    const LaunchBytes b = launchBytes(plan, i);
    EXPECT_EQ(b.read, buffersIn + extras +
                          static_cast<uint64_t>(c.numExpertsPerToken) *
                              perExpert)
        << name;
    EXPECT_EQ(b.written, argBytes(plan, *arg("out")) + routerWrites) << name;
  }
}

TEST(LaunchBytes, ExpertsReadIsTheExpectedUnionOfTheRowsPicks) {
  EXPECT_EQ(expertsRead(256, 8, 1), 8.0);
  EXPECT_EQ(expertsRead(12, 2, 1), 2.0);
  // Kimi-Linear at 16 rows: about 102 of 256 (the "about 100").
  EXPECT_NEAR(expertsRead(256, 8, 16), 256.0 * (1.0 - std::pow(31.0 / 32, 16)),
              1e-9);
  EXPECT_NEAR(expertsRead(256, 8, 16), 101.96, 0.01);
  EXPECT_GT(expertsRead(256, 8, 4096), 255.99);
  EXPECT_LE(expertsRead(256, 8, 4096), 256.0);
  EXPECT_EQ(expertsRead(4, 8, 3), 4.0); // k > E: every expert
  EXPECT_EQ(expertsRead(0, 8, 3), 0.0);
}

TEST(LaunchBytes, AStepOfRowsReadsEachWeightOnceAndTheRestPerRow) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *name : {"tiny", "tiny-linear"}) {
    const ModelConfig c = preset(name);
    const PlanDoc plan = compiled(c);
    for (size_t i = 0; i < plan.launches.size(); ++i) {
      const PlanLaunch &l = plan.launches[i];
      const LaunchBytes one = launchBytes(plan, i, 9),
                        four = launchBytes(plan, i, 9, 4);
      // Writes are per row (no launch writes a weight).
      EXPECT_EQ(four.written, 4 * one.written) << name << " " << l.kernel;
      if (l.kernel == "embed") {
        EXPECT_EQ(four.read, 4 * one.read) << name << " " << l.kernel;
        continue;
      }
      // Reads: the weights once, so less than four rows' worth whenever
      // the launch reads a weight, and more than one row's.
      bool weights = false;
      for (const auto &[field, arg] : l.args)
        weights |= arg.kind == PlanArg::Kind::Weight;
      if (weights)
        EXPECT_LT(four.read, 4 * one.read) << name << " " << l.kernel;
      else
        EXPECT_EQ(four.read, 4 * one.read) << name << " " << l.kernel;
      EXPECT_GT(four.read, one.read) << name << " " << l.kernel;
    }
    // The expert tables count the expected union U(n) of n rows' picks:
    // with W the other weights and R a row's other bytes, a step of n rows
    // reads W + U(n)·e + n·R, so (4 rows) − (1) − 3·((2) − (1)) leaves
    // (U(4) − k − 3·(U(2) − k))·e, whatever W and R are.
    const size_t m = firstLaunch(
        plan, std::string(name) == "tiny-linear" ? "moe_ffn" : "moe_experts");
    const double perMatrix =
        static_cast<double>(c.moeHiddenSize() * c.moeIntermediateSize);
    const double perExpert =
        3 * (c.expertsMxfp4 ? perMatrix / 2 + perMatrix / 32 : perMatrix * 2);
    auto readAt = [&](int64_t rows) {
      return static_cast<double>(launchBytes(plan, m, 9, rows).read);
    };
    const double k = static_cast<double>(c.numExpertsPerToken);
    auto u = [&](int64_t rows) {
      return expertsRead(c.numExperts, c.numExpertsPerToken, rows);
    };
    EXPECT_NEAR(readAt(4) - readAt(1) - 3 * (readAt(2) - readAt(1)),
                (u(4) - k - 3 * (u(2) - k)) * perExpert, 8.0)
        << name;
    EXPECT_LT(u(4) - k - 3 * (u(2) - k), -0.1) << name; // not trivially 0
  }
}

TEST(LaunchBytes, MlaCacheCountsTheContextAndAppendsOneRow) {
  K3C_SKIP_WITHOUT_COMPILER();
  const ModelConfig c = preset("tiny");
  const PlanDoc plan = compiled(c);
  const uint64_t row = static_cast<uint64_t>(c.mlaCacheWidth()) * 2;
  const size_t attend = firstLaunch(plan, "mla_attend");
  const LaunchBytes full = launchBytes(plan, attend);
  EXPECT_EQ(launchBytes(plan, attend, kMaxSeq).read, full.read);
  EXPECT_EQ(launchBytes(plan, attend, kMaxSeq + 5).read, full.read);
  EXPECT_EQ(full.read - launchBytes(plan, attend, 5).read, (kMaxSeq - 5) * row);
  EXPECT_EQ(launchBytes(plan, attend, 5).written, full.written);
  const size_t append = firstLaunch(plan, "mla_cache_append");
  const PlanLaunch &a = plan.launches[append];
  EXPECT_EQ(launchBytes(plan, append).written, row);
  EXPECT_EQ(launchBytes(plan, append).read,
            argBytes(plan, *a.find("kv")) +
                static_cast<uint64_t>(c.kvLoraRank) * 2); // + the norm [L]
  // The step's floor follows the context only through the MLA caches.
  const int64_t mlaLayers = static_cast<int64_t>(std::count_if(
      plan.launches.begin(), plan.launches.end(),
      [](const PlanLaunch &l) { return l.kernel == "mla_attend"; }));
  EXPECT_EQ(stepBytes(plan).total() - stepBytes(plan, 5).total(),
            static_cast<uint64_t>(mlaLayers * (kMaxSeq - 5)) * row);
}

TEST(LaunchBytes, RecurrentStatesAreReadAndWritten) {
  K3C_SKIP_WITHOUT_COMPILER();
  const ModelConfig c = preset("tiny");
  const PlanDoc fused = compiled(c);
  const PlanLaunch &k = fused.launches[firstLaunch(fused, "kda_decode")];
  const uint64_t state = argBytes(fused, *k.find("state"));
  const uint64_t conv = argBytes(fused, *k.find("convStateQ")) / 3;
  // tiny's f comes from its low-rank f_a / f_b, folded into the launch
  // (k3-fuse-kda low-rank-gates): R(f_a h) and f_b are read instead of f.
  ASSERT_NE(k.find("fB"), nullptr);
  uint64_t in = 0;
  for (const char *f : {"uq", "uk", "uv", "f", "fA", "betaLogit", "gate", "gA"})
    if (const auto *a = k.find(f))
      in += argBytes(fused, *a);
  // Weights: three conv filters [C, 1, W], dt_bias [C] and A_log [H] f32,
  // o_norm [d].
  const int64_t C = c.kdaChannels(), W = c.kda.convSize;
  // + f_b [C, r] bf16 (and g_b when the output gate is low-rank too).
  auto rank = [&](const char *f) {
    const auto *a = k.find(f);
    return a ? a->intValue : 0;
  };
  const uint64_t weights = static_cast<uint64_t>(
      3 * C * W * 2 + C * 4 + c.kda.numHeads * 4 + c.kda.headDim * 2 +
      C * (rank("fRank") + rank("gRank")) * 2);
  const LaunchBytes b = launchBytes(fused, firstLaunch(fused, "kda_decode"));
  EXPECT_EQ(b.read, in + weights + state + 3 * conv);
  const uint64_t gateOut =
      k.find("gateOut") ? argBytes(fused, *k.find("gateOut")) : 0;
  EXPECT_EQ(b.written,
            argBytes(fused, *k.find("out")) + gateOut + state + 3 * conv);

  // AttnRes: a commit writes one row; attn_res reads numBlocks rows.
  const uint64_t row = static_cast<uint64_t>(c.hiddenSize) * 2;
  const size_t commit = firstLaunch(fused, "attn_res_commit");
  EXPECT_EQ(launchBytes(fused, commit).written, row);
  for (size_t i = 0; i < fused.launches.size(); ++i) {
    const PlanLaunch &l = fused.launches[i];
    if (l.kernel != "attn_res")
      continue;
    const uint64_t blocks =
        row * static_cast<uint64_t>(l.find("numBlocks")->intValue);
    EXPECT_EQ(launchBytes(fused, i).read,
              blocks + argBytes(fused, *l.find("extra")) + row + row)
        << "launch " << i; // + the norm weight [D] and projection [1, D]
  }
}

//===----------------------------------------------------------------------===//
// Layer parts
//===----------------------------------------------------------------------===//

TEST(LaunchParts, WithoutProbesOnlyTheKernelsSay) {
  K3C_SKIP_WITHOUT_COMPILER();
  PlanDoc plan = compiled(preset("tiny"));
  plan.probes.clear();
  const std::vector<LaunchPart> parts = launchParts(plan);
  ASSERT_EQ(parts.size(), plan.launches.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string &k = plan.launches[i].kernel;
    const std::string want = k == "embed"                    ? "embed"
                             : k.rfind("attn_res", 0) == 0   ? "attn_res"
                             : i + 2 >= plan.launches.size() // + argmax
                                 ? "head"
                                 : "step";
    EXPECT_EQ(parts[i].part, want) << "launch " << i << " " << k;
    EXPECT_EQ(parts[i].layer, -1);
  }
}

TEST(LaunchParts, ProbesPlaceEveryLaunchInItsLayer) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *name : {"tiny", "tiny-linear", "tiny-odd"})
    for (const char *fusion : test::kFusionStrategies) {
      const ModelConfig c = preset(name);
      const PlanDoc plan = compiled(c, fusion);
      ASSERT_EQ(plan.probes.size(), static_cast<size_t>(2 * c.numLayers));
      ASSERT_TRUE(validatePlan(plan).isOk());
      const std::vector<LaunchPart> parts = launchParts(plan);
      ASSERT_EQ(parts.size(), plan.launches.size());
      std::map<std::string, std::set<int64_t>> layers;
      for (size_t i = 0; i < parts.size(); ++i) {
        const std::string &k = plan.launches[i].kernel;
        const LaunchPart &p = parts[i];
        if (p.layer >= 0)
          layers[p.part].insert(p.layer);
        std::string want;
        if (k == "embed")
          want = "embed";
        else if (k.rfind("attn_res", 0) == 0)
          want = "attn_res";
        else if (k.rfind("kda_", 0) == 0)
          want = "kda mixer";
        else if (k.rfind("mla_", 0) == 0)
          want = "mla mixer";
        else if (k == "router" || k == "moe_experts")
          want = "moe";
        if (!want.empty()) {
          EXPECT_EQ(p.part, want) << i;
        }
        EXPECT_LT(p.layer, c.numLayers);
        if (p.part == "kda mixer" || p.part == "mla mixer") {
          EXPECT_EQ(c.isMlaLayer(p.layer), p.part == "mla mixer") << i;
        }
        if (p.part == "moe" || p.part == "dense mlp") {
          EXPECT_EQ(c.isDenseLayer(p.layer), p.part == "dense mlp") << i;
        }
      }
      EXPECT_EQ(parts.back().part, "head") << name;
      // Every layer has its mixer and its FFN.
      int64_t mla = 0, dense = 0;
      for (int64_t l = 0; l < c.numLayers; ++l) {
        mla += c.isMlaLayer(l);
        dense += c.isDenseLayer(l);
      }
      EXPECT_EQ(layers["mla mixer"].size(), static_cast<size_t>(mla));
      EXPECT_EQ(layers["kda mixer"].size(),
                static_cast<size_t>(c.numLayers - mla));
      EXPECT_EQ(layers["dense mlp"].size(), static_cast<size_t>(dense));
      EXPECT_EQ(layers["moe"].size(), static_cast<size_t>(c.numLayers - dense));
    }
}

//===----------------------------------------------------------------------===//
// The tables
//===----------------------------------------------------------------------===//

/// One row per kernel kind and per part, each launch counted once in each.
void expectTablesCoverThePlan(const PlanDoc &plan, const StepProfile &p,
                              bool withBytes = true) {
  std::map<std::string, int64_t> kernels;
  for (const PlanLaunch &l : plan.launches)
    ++kernels[l.kernel];
  ASSERT_EQ(p.kernels.size(), kernels.size());
  int64_t launches = 0;
  uint64_t bytes = 0;
  double us = 0;
  std::set<std::string> seen;
  for (const ProfileRow &r : p.kernels) {
    EXPECT_TRUE(seen.insert(r.name).second) << r.name;
    EXPECT_EQ(r.launches, kernels[r.name]) << r.name;
    if (withBytes) {
      EXPECT_GT(r.bytes, 0u) << r.name;
    }
    launches += r.launches;
    bytes += r.bytes;
    us += r.us;
  }
  EXPECT_EQ(launches, static_cast<int64_t>(plan.launches.size()));
  EXPECT_EQ(p.total.launches, launches);
  EXPECT_EQ(p.total.bytes, bytes);
  EXPECT_NEAR(p.total.us, us, 1e-6 * (1 + us));

  std::map<std::string, int64_t> parts;
  for (const LaunchPart &lp : launchParts(plan))
    ++parts[lp.part];
  ASSERT_EQ(p.byPart.size(), parts.size());
  launches = 0;
  bytes = 0;
  seen.clear();
  for (const ProfileRow &r : p.byPart) {
    EXPECT_TRUE(seen.insert(r.name).second) << r.name;
    EXPECT_EQ(r.launches, parts[r.name]) << r.name;
    launches += r.launches;
    bytes += r.bytes;
  }
  EXPECT_EQ(launches, static_cast<int64_t>(plan.launches.size()));
  EXPECT_EQ(bytes, p.total.bytes);
}

TEST(SummarizeProfile, RowsSumToThePlanMostTimeFirst) {
  K3C_SKIP_WITHOUT_COMPILER();
  const PlanDoc plan =
      compiled(preset("tiny"));
  std::vector<double> us;
  std::vector<LaunchBytes> bytes;
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    us.push_back(1.0 + static_cast<double>(i % 7));
    bytes.push_back(launchBytes(plan, i, 9));
  }
  const StepProfile p = summarizeProfile(plan, us, bytes);
  expectTablesCoverThePlan(plan, p);
  EXPECT_EQ(p.total.bytes, stepBytes(plan, 9).total());
  for (size_t i = 1; i < p.kernels.size(); ++i)
    EXPECT_GE(p.kernels[i - 1].us, p.kernels[i].us);
  for (size_t i = 1; i < p.byPart.size(); ++i)
    EXPECT_GE(p.byPart[i - 1].us, p.byPart[i].us);
  const ModelConfig c = preset("tiny");
  for (const ProfileRow &r : p.byPart) {
    if (r.name == "embed" || r.name == "head") {
      EXPECT_EQ(r.layers, 0) << r.name;
    }
    if (r.name == "moe") {
      EXPECT_EQ(r.layers, c.numLayers - c.firstKDenseReplace);
    }
  }
}

TEST(Median, OddEvenEmpty) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({3, 1, 2}), 2.0);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
}

TEST(FormatBytes, Units) {
  EXPECT_EQ(formatBytes(512), "512 B");
  EXPECT_EQ(formatBytes(12345), "12.3 KB");
  EXPECT_EQ(formatBytes(4.56e6), "4.56 MB");
  EXPECT_EQ(formatBytes(8.92e9), "8.92 GB");
}

//===----------------------------------------------------------------------===//
// A real profile on the CPU backend
//===----------------------------------------------------------------------===//

class ProfileStepTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir = new test::TempDir();
    config = preset("tiny");
    ASSERT_TRUE(makeModel(config, 5, dir->file("model")).isOk());
  }
  static void TearDownTestSuite() { delete dir; }
  static test::TempDir *dir;
  static ModelConfig config;
};
test::TempDir *ProfileStepTest::dir = nullptr;
ModelConfig ProfileStepTest::config;

TEST_F(ProfileStepTest, TimesEveryLaunchAndTheStep) {
  K3C_SKIP_WITHOUT_COMPILER();
  const PlanDoc plan =
      compiled(config);
  Expected<std::unique_ptr<BoundPlan>> bound =
      bindPlan(plan, dir->file("model"), BackendKind::Cpu);
  ASSERT_TRUE(bound.hasValue()) << bound.message();
  Backend &be = *(*bound)->backend;
  ASSERT_TRUE(be.resetState().isOk());
  for (int64_t pos = 0; pos < 4; ++pos)
    ASSERT_TRUE(be.step(pos + 1, pos).isOk());

  Expected<std::vector<double>> t = be.timeLaunches(7, 4);
  ASSERT_TRUE(t.hasValue()) << t.message();
  ASSERT_EQ(t->size(), plan.launches.size());
  for (double us : *t)
    EXPECT_GE(us, 0.0);
  EXPECT_FALSE(be.replaysGraph());
  Expected<double> plain = be.timeStep(7, 4, false);
  ASSERT_TRUE(plain.hasValue()) << plain.message();
  EXPECT_GT(*plain, 0.0);
  Expected<double> copy = be.measureCopyGBps(4 << 20);
  ASSERT_TRUE(copy.hasValue()) << copy.message();
  EXPECT_GT(*copy, 0.0);
  EXPECT_TRUE(test::contains(be.copyMethod(4 << 20), "memcpy"));

  ProfileOptions o;
  o.warmup = 1;
  o.steps = 3;
  o.pos = 4;
  o.token = 7;
  o.copyBytes = 4 << 20;
  Expected<StepProfile> p = profileStep(be, plan, o);
  ASSERT_TRUE(p.hasValue()) << p.message();
  expectTablesCoverThePlan(plan, *p);
  EXPECT_EQ(p->total.bytes, stepBytes(plan, 5).total());
  EXPECT_EQ(p->launchUs.size(), plan.launches.size());
  EXPECT_GT(p->launchByLaunchUs, 0.0);
  EXPECT_GT(p->plainUs, 0.0);
  EXPECT_EQ(p->replayUs, 0.0);
  EXPECT_EQ(p->stepUs(), p->plainUs);
  EXPECT_GT(p->copyGBps, 0.0);
  EXPECT_GT(p->floorUs(), 0.0);
  EXPECT_GT(p->fractionOfFloor(), 0.0);
  EXPECT_EQ(p->backend, "cpu");

  const std::string text = formatProfile(*p);
  for (const char *want :
       {"profile: ", "position 4 (context 5)", "copy bandwidth", "kernel",
        "layer part", "kda mixer", "mla mixer", "moe", "dense mlp", "head",
        "embed", "attn_res", "total", "step per token", "floor:"})
    EXPECT_TRUE(test::contains(text, want)) << want << "\n" << text;
  for (const ProfileRow &r : p->kernels)
    EXPECT_TRUE(test::contains(text, "\n" + r.name + " ")) << r.name;
}

TEST_F(ProfileStepTest, PrefillTimesEveryLaunchOfEachChunk) {
  K3C_SKIP_WITHOUT_COMPILER();
  const PlanDoc plan = compiled(config);
  Expected<std::unique_ptr<BoundPlan>> bound =
      bindPlan(plan, dir->file("model"), BackendKind::Cpu);
  ASSERT_TRUE(bound.hasValue()) << bound.message();
  Backend &be = *(*bound)->backend;
  ASSERT_TRUE(be.timesStepSlots());
  const std::vector<int64_t> prompt = {3, 1, 4, 1, 5, 9, 2};
  Expected<PrefillProfile> p = profilePrefill(be, plan, prompt, 3);
  ASSERT_TRUE(p.hasValue()) << p.message();
  EXPECT_EQ(p->tokens, 7);
  EXPECT_EQ(p->chunks, 3);
  EXPECT_GT(p->wallUs, 0.0);
  EXPECT_GT(p->tokensPerSecond(), 0.0);
  expectTablesCoverThePlan(plan, p->launches, /*withBytes=*/false);
  // The launches ran inside the steps, the steps inside the wall time.
  EXPECT_LE(p->launches.total.us, p->stepsUs);
  EXPECT_LE(p->stepsUs, p->wallUs);
  EXPECT_GT(p->firstStepUs, 0.0);
  EXPECT_GT(p->slowestStepUs, 0.0);
  EXPECT_LE(p->firstStepUs + p->slowestStepUs, p->stepsUs);
  const std::string text = formatPrefillProfile(*p);
  for (const char *want : {"prefill profile: 7 prompt tokens in 3 chunks of 3",
                           "\nhost: ", "between the steps", "\nkernel ",
                           "\nlayer part ", "\ntotal "})
    EXPECT_TRUE(test::contains(text, want)) << want << "\n" << text;

  // The state holds the prompt: the next step's logits are those of a
  // backend fed row by row.
  ASSERT_TRUE(be.step(6, 7).isOk());
  const std::vector<float> timed(be.logits(), be.logits() + be.vocab());
  ASSERT_TRUE(be.resetState().isOk());
  for (size_t i = 0; i < prompt.size(); ++i)
    ASSERT_TRUE(be.step(prompt[i], static_cast<int64_t>(i)).isOk());
  ASSERT_TRUE(be.step(6, 7).isOk());
  EXPECT_EQ(timed, std::vector<float>(be.logits(), be.logits() + be.vocab()));

  EXPECT_ERROR_CONTAINS(profilePrefill(be, plan, {}, 3), "needs a prompt");
  EXPECT_ERROR_CONTAINS(profilePrefill(be, plan, prompt, 0), "prefill chunk");
  EXPECT_ERROR_CONTAINS(profilePrefill(be, plan, {config.vocabSize}, 1),
                        "prompt chunk at position 0");
}

TEST_F(ProfileStepTest, BadRequestsAreErrors) {
  K3C_SKIP_WITHOUT_COMPILER();
  const PlanDoc plan = compiled(config);
  Expected<std::unique_ptr<BoundPlan>> bound =
      bindPlan(plan, dir->file("model"), BackendKind::Cpu);
  ASSERT_TRUE(bound.hasValue()) << bound.message();
  Backend &be = *(*bound)->backend;
  ProfileOptions o;
  o.copyBytes = 1 << 20;
  o.steps = 0;
  EXPECT_ERROR_CONTAINS(profileStep(be, plan, o), "at least one timed step");
  o.steps = 1;
  o.warmup = -1;
  EXPECT_ERROR_CONTAINS(profileStep(be, plan, o), "warm-up");
  o.warmup = 0;
  o.pos = kMaxSeq;
  EXPECT_ERROR_CONTAINS(profileStep(be, plan, o), "the profiled step");
  EXPECT_ERROR_CONTAINS(be.timeLaunches(0, kMaxSeq), "pos");
  EXPECT_ERROR_CONTAINS(be.timeStep(config.vocabSize, 0, false), "token");

  // A model the plan was not compiled for.
  ModelConfig other = config;
  other.numLayers += 1;
  PlanDoc otherPlan = plan;
  otherPlan.config = other;
  EXPECT_ERROR_CONTAINS(bindPlan(otherPlan, dir->file("model"),
                                 BackendKind::Cpu),
                        "different model");
}

/// A backend with only the required methods: the profiling defaults refuse.
class Untimed final : public Backend {
public:
  Status resetState() override { return Status::ok(); }
  Status step(int64_t, int64_t) override { return Status::ok(); }
  const float *logits() const override { return nullptr; }
  int64_t vocab() const override { return 10; }
  int64_t maxSeq() const override { return 10; }
  std::string name() const override { return "untimed"; }
  Status runLaunch(size_t, int64_t, int64_t) override { return Status::ok(); }
  Status readArena(std::vector<uint8_t> &) override { return Status::ok(); }
  Status readState(size_t, std::vector<uint8_t> &) override {
    return Status::ok();
  }
  Status writeState(size_t, const std::vector<uint8_t> &) override {
    return Status::ok();
  }
};

TEST(BackendDefaults, CannotTime) {
  K3C_SKIP_WITHOUT_COMPILER();
  Untimed be;
  EXPECT_ERROR_CONTAINS(be.timeLaunches(0, 0), "untimed cannot time");
  EXPECT_ERROR_CONTAINS(be.timeStep(0, 0, true), "untimed cannot time");
  EXPECT_ERROR_CONTAINS(be.measureCopyGBps(0), "copy bandwidth");
  EXPECT_FALSE(be.replaysGraph());
  EXPECT_FALSE(be.timesStepSlots());
  EXPECT_ERROR_CONTAINS(be.timeStepSlots({{0, 1, 0}}), "untimed cannot time");
  const PlanDoc plan = compiled(preset("tiny"));
  EXPECT_ERROR_CONTAINS(profileStep(be, plan, ProfileOptions()),
                        "copy bandwidth");
}

} // namespace
} // namespace k3
