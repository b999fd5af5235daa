//===- Presets_test.cpp - Named model geometries --------------------------===//
//
// The real presets must match the numbers of K3.md §1 exactly (config only:
// the models themselves are far too big for a unit test); the cut-down
// options recompute the MLA layers; the tiny presets use the features they
// exist to exercise.
//
//===----------------------------------------------------------------------===//
#include "runtime/model/ModelWeights.h"
#include "runtime/model/Presets.h"

#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

using namespace k3;

namespace {

std::vector<int64_t> range(int64_t from, int64_t to, int64_t step) {
  std::vector<int64_t> out;
  for (int64_t i = from; i <= to; i += step)
    out.push_back(i);
  return out;
}

} // namespace

TEST(Presets, Names) {
  std::vector<std::string> names = presetNames();
  ASSERT_EQ(names.size(), 5u);
  EXPECT_EQ(names[0], "tiny");
  for (const std::string &n : names) {
    EXPECT_FALSE(presetDescription(n).empty()) << n;
    EXPECT_TRUE(presetConfig(n)) << n;
  }
  EXPECT_EQ(presetDescription("nope"), "");
}

TEST(Presets, UnknownNameListsTheValidOnes) {
  EXPECT_ERROR_CONTAINS(presetConfig("k4"),
                        "unknown preset 'k4' (valid presets: tiny, "
                        "tiny-linear, tiny-odd, k3, kimi-linear-48b)");
  EXPECT_ERROR_CONTAINS(presetConfig("tiny", -1), "layer count");
  EXPECT_ERROR_CONTAINS(presetConfig("tiny", 0, -3), "expert count");
}

TEST(Presets, K3MatchesSpec) {
  Expected<ModelConfig> r = presetConfig("k3");
  ASSERT_TRUE(r) << r.message();
  const ModelConfig &c = *r;
  EXPECT_EQ(c.modelType, "kimi_k3");
  EXPECT_EQ(c.tensorPrefix, "language_model.");
  EXPECT_EQ(c.hiddenSize, 7168);
  EXPECT_EQ(c.numLayers, 93);
  std::vector<int64_t> mla = range(4, 92, 4);
  mla.push_back(93);
  EXPECT_EQ(c.fullAttnLayers, mla);
  EXPECT_EQ(c.kdaLayers.size(), 93u - mla.size());
  EXPECT_EQ(c.kda.numHeads, 96);
  EXPECT_EQ(c.kda.headDim, 128);
  EXPECT_EQ(c.kda.convSize, 4);
  EXPECT_TRUE(c.kda.fullRankGate);
  EXPECT_TRUE(c.kda.hasLowerBound);
  EXPECT_EQ(c.kda.gateLowerBound, -5.0f);
  EXPECT_EQ(c.numAttentionHeads, 96);
  EXPECT_EQ(c.qLoraRank, 1536);
  EXPECT_EQ(c.kvLoraRank, 512);
  EXPECT_EQ(c.qkNopeHeadDim, 128);
  EXPECT_EQ(c.qkRopeHeadDim, 64);
  EXPECT_EQ(c.vHeadDim, 128);
  EXPECT_TRUE(c.mlaUseNope);
  EXPECT_TRUE(c.mlaUseOutputGate);
  EXPECT_EQ(c.firstKDenseReplace, 1);
  EXPECT_EQ(c.intermediateSize, 33792);
  EXPECT_EQ(c.numExperts, 896);
  EXPECT_EQ(c.numExpertsPerToken, 16);
  EXPECT_EQ(c.routedExpertHiddenSize, 3584);
  EXPECT_TRUE(c.latentMoeUseNorm);
  EXPECT_EQ(c.moeIntermediateSize, 3072);
  EXPECT_EQ(c.numSharedExperts, 2);
  EXPECT_EQ(c.routerActivation, "sigmoid");
  EXPECT_EQ(c.topkMethod, "noaux_tc");
  EXPECT_EQ(c.numExpertGroup, 1);
  EXPECT_TRUE(c.moeRenormalize);
  EXPECT_EQ(c.routedScalingFactor, 1.0f);
  EXPECT_EQ(c.hiddenAct, Activation::SiTU);
  EXPECT_EQ(c.situBeta, 4.0f);
  EXPECT_TRUE(c.hasSituLinearBeta);
  EXPECT_EQ(c.situLinearBeta, 25.0f);
  EXPECT_EQ(c.attnResBlockSize, 12);
  EXPECT_EQ(c.rmsNormEps, 1e-5f);
  EXPECT_EQ(c.vocabSize, 163840);
  EXPECT_FALSE(c.tieWordEmbeddings);
  EXPECT_TRUE(c.expertsMxfp4);
  // §9: the MLA cache row is 576 values.
  EXPECT_EQ(c.mlaCacheWidth(), 576);
  EXPECT_EQ(c.kdaChannels(), 12288);
}

TEST(Presets, KimiLinear48bMatchesSpec) {
  Expected<ModelConfig> r = presetConfig("kimi-linear-48b");
  ASSERT_TRUE(r) << r.message();
  const ModelConfig &c = *r;
  EXPECT_EQ(c.modelType, "kimi_linear");
  EXPECT_EQ(c.tensorPrefix, "");
  EXPECT_EQ(c.hiddenSize, 2304);
  EXPECT_EQ(c.numLayers, 27);
  EXPECT_EQ(c.fullAttnLayers, (std::vector<int64_t>{4, 8, 12, 16, 20, 24, 27}));
  EXPECT_EQ(c.kdaLayers.size(), 20u);
  EXPECT_EQ(c.kda.numHeads, 32);
  EXPECT_EQ(c.kda.headDim, 128);
  EXPECT_EQ(c.kda.convSize, 4);
  EXPECT_FALSE(c.kda.fullRankGate);
  EXPECT_FALSE(c.kda.hasLowerBound);
  EXPECT_EQ(c.numAttentionHeads, 32);
  EXPECT_EQ(c.qLoraRank, 0);
  EXPECT_EQ(c.kvLoraRank, 512);
  EXPECT_EQ(c.qkNopeHeadDim, 128);
  EXPECT_EQ(c.qkRopeHeadDim, 64);
  EXPECT_EQ(c.vHeadDim, 128);
  EXPECT_FALSE(c.mlaUseOutputGate);
  EXPECT_EQ(c.firstKDenseReplace, 1);
  EXPECT_EQ(c.intermediateSize, 9216);
  EXPECT_EQ(c.numExperts, 256);
  EXPECT_EQ(c.numExpertsPerToken, 8);
  EXPECT_FALSE(c.hasLatentMoe());
  EXPECT_EQ(c.moeIntermediateSize, 1024);
  EXPECT_EQ(c.numSharedExperts, 1);
  EXPECT_EQ(c.routedScalingFactor, 2.446f);
  EXPECT_EQ(c.hiddenAct, Activation::SiLU);
  EXPECT_FALSE(c.hasAttnRes());
  EXPECT_EQ(c.rmsNormEps, 1e-5f);
  EXPECT_EQ(c.vocabSize, 163840);
  EXPECT_FALSE(c.tieWordEmbeddings);
  EXPECT_FALSE(c.expertsMxfp4);
}

TEST(Presets, CutDown) {
  Expected<ModelConfig> c = presetConfig("k3", 6, 8);
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->numLayers, 6);
  EXPECT_EQ(c->fullAttnLayers, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(c->kdaLayers, (std::vector<int64_t>{1, 2, 3, 5}));
  EXPECT_EQ(c->numExperts, 8);
  EXPECT_EQ(c->numExpertsPerToken, 8); // capped
  EXPECT_EQ(c->hiddenSize, 7168);      // width unchanged

  c = presetConfig("kimi-linear-48b", 8, 32);
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->fullAttnLayers, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(c->numExpertsPerToken, 8);

  c = presetConfig("k3", 1);
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->fullAttnLayers, (std::vector<int64_t>{1}));
  EXPECT_TRUE(c->kdaLayers.empty());
  EXPECT_EQ(c->firstKDenseReplace, 1);

  c = presetConfig("tiny", 3, 4);
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->fullAttnLayers, (std::vector<int64_t>{3}));
  EXPECT_EQ(c->numExperts, 4);
  EXPECT_EQ(c->numExpertsPerToken, 4);
}

TEST(Presets, TinyUsesEveryK3Feature) {
  Expected<ModelConfig> c = presetConfig("tiny");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->modelType, "kimi_k3");
  EXPECT_EQ(c->hiddenSize, 256);
  EXPECT_EQ(c->numLayers, 8);
  EXPECT_EQ(c->fullAttnLayers, (std::vector<int64_t>{4, 8}));
  EXPECT_TRUE(c->kda.fullRankGate);
  EXPECT_TRUE(c->kda.hasLowerBound);
  EXPECT_GT(c->qLoraRank, 0);
  EXPECT_TRUE(c->mlaUseOutputGate);
  EXPECT_EQ(c->firstKDenseReplace, 1);
  EXPECT_TRUE(c->hasLatentMoe());
  EXPECT_TRUE(c->latentMoeUseNorm);
  EXPECT_EQ(c->numSharedExperts, 2);
  EXPECT_EQ(c->hiddenAct, Activation::SiTU);
  EXPECT_TRUE(c->hasSituLinearBeta);
  EXPECT_EQ(c->attnResBlockSize, 3);
  EXPECT_TRUE(c->expertsMxfp4);
  EXPECT_EQ(c->vocabSize, 1024);
  EXPECT_EQ(c->maxPositionEmbeddings, 4096);

  Expected<ModelConfig> l = presetConfig("tiny-linear");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->modelType, "kimi_linear");
  EXPECT_FALSE(l->hasAttnRes());
  EXPECT_EQ(l->hiddenAct, Activation::SiLU);
  EXPECT_FALSE(l->kda.hasLowerBound);
  EXPECT_FALSE(l->kda.fullRankGate);
  EXPECT_EQ(l->qLoraRank, 0);
  EXPECT_FALSE(l->mlaUseOutputGate);
  EXPECT_FALSE(l->hasLatentMoe());
  EXPECT_EQ(l->numSharedExperts, 1);
  EXPECT_FALSE(l->expertsMxfp4);
  EXPECT_EQ(l->routedScalingFactor, 2.446f);
}

TEST(Presets, RealGeometryTensorCount) {
  // Listing the names of the full K3 is cheap and checks the walk at scale:
  // per MoE layer 896 experts × 3 matrices × (packed + scale).
  Expected<ModelConfig> c = presetConfig("k3");
  ASSERT_TRUE(c);
  std::vector<TensorSpec> specs = expectedTensorSpecs(*c);
  size_t experts = 0;
  uint64_t bytes = 0;
  for (const TensorSpec &s : specs) {
    experts += s.name.find(".experts.") != std::string::npos;
    bytes += *tensorByteSize(s.dtype, s.shape);
  }
  EXPECT_EQ(experts, 92u * 896 * 3 * 2);
  // §9: one MXFP4 expert is about 17.5 MB (w1, w2, w3 packed + scales).
  uint64_t expert = 3 * (3072ull * 3584 / 2 + 3072ull * 3584 / 32);
  EXPECT_NEAR(expert / 1e6, 17.5, 0.2);
  EXPECT_GT(bytes, 400ull << 30); // hundreds of GB: never written in tests
}
