//===- Presets.cpp - Named model geometries -------------------------------===//
//
// The real geometries follow K3.md §1. Token ids and max_position_embeddings
// are not in that table: the real ones use the Kimi tokenizer's ids
// (bos 163584, eos 163585, pad 163839) and the context lengths the model
// cards advertise; the tiny ones use ids 1/2/0 of their small vocabulary.
//
//===----------------------------------------------------------------------===//
#include "runtime/Presets.h"

#include <algorithm>

namespace k3 {

namespace {

struct Preset {
  const char *name;
  const char *description;
  ModelConfig (*make)();
};

/// MLA at every 4th layer (1-based) and at the last; KDA everywhere else.
void assignLayers(ModelConfig &c) {
  c.fullAttnLayers.clear();
  c.kdaLayers.clear();
  for (int64_t n = 1; n <= c.numLayers; ++n) {
    if (n % 4 == 0 || n == c.numLayers)
      c.fullAttnLayers.push_back(n);
    else
      c.kdaLayers.push_back(n);
  }
}

/// Fields shared by every preset (router and MLA conventions of both
/// models).
ModelConfig common() {
  ModelConfig c;
  c.mlaUseNope = true;
  c.rmsNormEps = 1e-5f;
  c.routerActivation = "sigmoid";
  c.topkMethod = "noaux_tc";
  c.moeRenormalize = true;
  c.moeLayerFreq = 1;
  c.numExpertGroup = 1;
  c.topkGroup = 1;
  c.kda.convSize = 4;
  return c;
}

ModelConfig k3Like() {
  ModelConfig c = common();
  c.modelType = "kimi_k3";
  c.tensorPrefix = "language_model.";
  c.hiddenAct = Activation::SiTU;
  c.situBeta = 4.0f;
  c.hasSituLinearBeta = true;
  c.situLinearBeta = 25.0f;
  c.kda.fullRankGate = true;
  c.kda.hasLowerBound = true;
  c.kda.gateLowerBound = -5.0f;
  c.mlaUseOutputGate = true;
  c.latentMoeUseNorm = true;
  c.routedScalingFactor = 1.0f;
  c.expertsMxfp4 = true;
  c.firstKDenseReplace = 1;
  return c;
}

ModelConfig linearLike() {
  ModelConfig c = common();
  c.modelType = "kimi_linear";
  c.tensorPrefix = "";
  c.hiddenAct = Activation::SiLU;
  c.kda.fullRankGate = false;
  c.kda.hasLowerBound = false;
  c.mlaUseOutputGate = false;
  c.qLoraRank = 0;
  c.routedExpertHiddenSize = 0;
  c.latentMoeUseNorm = false;
  c.routedScalingFactor = 2.446f;
  c.expertsMxfp4 = false;
  c.firstKDenseReplace = 1;
  // As in the published Kimi-Linear config: grouped top-k on, one group.
  c.useGroupedTopk = true;
  return c;
}

ModelConfig tiny() {
  ModelConfig c = k3Like();
  c.vocabSize = 1024;
  c.hiddenSize = 256;
  c.numLayers = 8;
  c.intermediateSize = 512;
  c.kda.numHeads = 4;
  c.kda.headDim = 64;
  c.numAttentionHeads = 4;
  c.numKeyValueHeads = 4;
  c.qLoraRank = 128;
  c.kvLoraRank = 64;
  c.qkNopeHeadDim = 32;
  c.qkRopeHeadDim = 32;
  c.vHeadDim = 32;
  c.numExperts = 16;
  c.numExpertsPerToken = 4;
  c.routedExpertHiddenSize = 128;
  c.moeIntermediateSize = 128;
  c.numSharedExperts = 2;
  c.attnResBlockSize = 3;
  c.maxPositionEmbeddings = 4096;
  c.bosTokenId = 1;
  c.eosTokenId = 2;
  c.padTokenId = 0;
  return c;
}

ModelConfig tinyLinear() {
  ModelConfig c = linearLike();
  c.vocabSize = 1024;
  c.hiddenSize = 256;
  c.numLayers = 8;
  c.intermediateSize = 512;
  c.kda.numHeads = 4;
  c.kda.headDim = 64;
  c.numAttentionHeads = 4;
  c.numKeyValueHeads = 4;
  c.kvLoraRank = 64;
  c.qkNopeHeadDim = 32;
  c.qkRopeHeadDim = 32;
  c.vHeadDim = 32;
  c.numExperts = 16;
  c.numExpertsPerToken = 4;
  c.moeIntermediateSize = 128;
  c.numSharedExperts = 1;
  c.maxPositionEmbeddings = 4096;
  c.bosTokenId = 1;
  c.eosTokenId = 2;
  c.padTokenId = 0;
  return c;
}

ModelConfig realK3() {
  ModelConfig c = k3Like();
  c.vocabSize = 163840;
  c.hiddenSize = 7168;
  c.numLayers = 93;
  c.intermediateSize = 33792;
  c.kda.numHeads = 96;
  c.kda.headDim = 128;
  c.numAttentionHeads = 96;
  c.numKeyValueHeads = 96;
  c.qLoraRank = 1536;
  c.kvLoraRank = 512;
  c.qkNopeHeadDim = 128;
  c.qkRopeHeadDim = 64;
  c.vHeadDim = 128;
  c.numExperts = 896;
  c.numExpertsPerToken = 16;
  c.routedExpertHiddenSize = 3584;
  c.moeIntermediateSize = 3072;
  c.numSharedExperts = 2;
  c.attnResBlockSize = 12;
  c.maxPositionEmbeddings = 262144;
  c.bosTokenId = 163584;
  c.eosTokenId = 163585;
  c.padTokenId = 163839;
  return c;
}

ModelConfig kimiLinear48b() {
  ModelConfig c = linearLike();
  c.vocabSize = 163840;
  c.hiddenSize = 2304;
  c.numLayers = 27;
  c.intermediateSize = 9216;
  c.kda.numHeads = 32;
  c.kda.headDim = 128;
  c.numAttentionHeads = 32;
  c.numKeyValueHeads = 32;
  c.kvLoraRank = 512;
  c.qkNopeHeadDim = 128;
  c.qkRopeHeadDim = 64;
  c.vHeadDim = 128;
  c.numExperts = 256;
  c.numExpertsPerToken = 8;
  c.moeIntermediateSize = 1024;
  c.numSharedExperts = 1;
  c.maxPositionEmbeddings = 1048576;
  c.bosTokenId = 163584;
  c.eosTokenId = 163585;
  c.padTokenId = 163839;
  return c;
}

const Preset kPresets[] = {
    {"tiny",
     "every K3 feature at toy size (hidden 256, 8 layers, 16 MXFP4 "
     "latent experts, AttnRes, SiTU); kimi_k3 form",
     tiny},
    {"tiny-linear",
     "Kimi-Linear features at toy size (hidden 256, 8 layers, "
     "16 bf16 experts, SwiGLU, low-rank gate); kimi_linear form",
     tinyLinear},
    {"k3",
     "real Kimi K3 geometry (hidden 7168, 93 layers, 896 experts); "
     "cut down with --layers/--experts",
     realK3},
    {"kimi-linear-48b",
     "real Kimi-Linear-48B-A3B geometry (hidden 2304, 27 "
     "layers, 256 experts); cut down with --layers/--experts",
     kimiLinear48b},
};

const Preset *findPreset(const std::string &name) {
  for (const Preset &p : kPresets)
    if (name == p.name)
      return &p;
  return nullptr;
}

} // namespace

std::vector<std::string> presetNames() {
  std::vector<std::string> names;
  for (const Preset &p : kPresets)
    names.push_back(p.name);
  return names;
}

std::string presetDescription(const std::string &name) {
  const Preset *p = findPreset(name);
  return p ? p->description : "";
}

Expected<ModelConfig> presetConfig(const std::string &name, int64_t layers,
                                   int64_t experts) {
  const Preset *p = findPreset(name);
  if (!p) {
    std::string valid;
    for (const std::string &n : presetNames())
      valid += (valid.empty() ? "" : ", ") + n;
    return makeError("unknown preset '", name, "' (valid presets: ", valid,
                     ")");
  }
  if (layers < 0)
    return makeError("layer count must be positive, got ", layers);
  if (experts < 0)
    return makeError("expert count must be positive, got ", experts);
  ModelConfig c = p->make();
  if (layers > 0)
    c.numLayers = layers;
  // The dense layers are a prefix: keep as many as still fit.
  c.firstKDenseReplace = std::min(c.firstKDenseReplace, c.numLayers);
  assignLayers(c);
  if (experts > 0) {
    c.numExperts = experts;
    c.numExpertsPerToken = std::min(c.numExpertsPerToken, experts);
  }
  K3_RETURN_IF_ERROR(c.validate().withContext("preset " + name));
  return c;
}

} // namespace k3
