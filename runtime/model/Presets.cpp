//===- Presets.cpp - Named model geometries -------------------------------===//
//
// The real geometries follow K3.md §1. Token ids and max_position_embeddings
// are not in that table: the real ones use the Kimi tokenizer's ids
// (bos 163584, eos 163585, pad 163839) and the context lengths the model
// cards advertise; the tiny ones use ids 1/2/0 of their small vocabulary.
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Presets.h"

#include <algorithm>

namespace k3 {

namespace {

struct Preset {
  const char *name;
  const char *description;
  ModelConfig (*make)();
  StoredDtypes dtypes = StoredDtypes::Simple; ///< the maker's default
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
  c.latentMoeUseNorm = false;
  c.routedScalingFactor = 2.446f;
  c.expertsMxfp4 = false;
  c.firstKDenseReplace = 1;
  // As in the published Kimi-Linear config: grouped top-k on, one group.
  c.useGroupedTopk = true;
  return c;
}

/// The sizes that tell presets apart; the rest comes from k3Like() or
/// linearLike().
struct Geometry {
  int64_t vocab, hidden, layers, intermediate;
  int64_t kdaHeads, kdaHeadDim;
  int64_t heads, qLora, kvLora, nope, rope, vDim;
  int64_t experts, topK, latent, moeIntermediate, shared;
  int64_t attnResBlock, maxPositions;
  int64_t bos, eos, pad;
};

ModelConfig withGeometry(ModelConfig c, const Geometry &g) {
  c.vocabSize = g.vocab;
  c.hiddenSize = g.hidden;
  c.numLayers = g.layers;
  c.intermediateSize = g.intermediate;
  c.kda.numHeads = g.kdaHeads;
  c.kda.headDim = g.kdaHeadDim;
  c.numAttentionHeads = g.heads;
  c.numKeyValueHeads = g.heads;
  c.qLoraRank = g.qLora;
  c.kvLoraRank = g.kvLora;
  c.qkNopeHeadDim = g.nope;
  c.qkRopeHeadDim = g.rope;
  c.vHeadDim = g.vDim;
  c.numExperts = g.experts;
  c.numExpertsPerToken = g.topK;
  c.routedExpertHiddenSize = g.latent;
  c.moeIntermediateSize = g.moeIntermediate;
  c.numSharedExperts = g.shared;
  c.attnResBlockSize = g.attnResBlock;
  c.maxPositionEmbeddings = g.maxPositions;
  c.bosTokenId = g.bos;
  c.eosTokenId = g.eos;
  c.padTokenId = g.pad;
  return c;
}

// Kimi tokenizer ids of the real models.
constexpr int64_t kBos = 163584, kEos = 163585, kPad = 163839;

ModelConfig tiny() {
  return withGeometry(k3Like(),
                      {1024, 256, 8, 512, 4,   64, 4, 128,  64, 32, 32,
                       32,   16,  4, 128, 128, 2,  3, 4096, 1,  2,  0});
}

ModelConfig tinyLinear() {
  return withGeometry(linearLike(),
                      {1024, 256, 8, 512, 4,   64, 4, 0,    64, 32, 32,
                       32,   16,  4, 0,   128, 1,  0, 4096, 1,  2,  0});
}

/// Every size and scalar differs from every other one it could be confused
/// with, so a swapped dimension, a wrong score scale or a scalar left at a
/// kernel's default shows at model level: nope 24 / rope 16 / v 40,
/// q_lora 80 / kv_lora 48 / latent 96 / expert intermediate 160 / dense 320,
/// gate lower bound -3.5, conv width 3, SiTU betas 3 and 20, eps 1e-4,
/// top-3 of 12 experts with routed scaling 1.7 and no shared expert, two
/// dense layers, AttnRes blocks of 3 over 7 layers.
ModelConfig tinyOdd() {
  ModelConfig c = withGeometry(k3Like(),
                               {1000, 192, 7, 320, 3,  32, 3, 80,   48, 24, 16,
                                40,   12,  3, 96, 160, 0,  3, 2048, 1,  2,  0});
  c.rmsNormEps = 1e-4f;
  c.kda.gateLowerBound = -3.5f;
  c.kda.convSize = 3;
  c.situBeta = 3.0f;
  c.situLinearBeta = 20.0f;
  c.routedScalingFactor = 1.7f;
  c.firstKDenseReplace = 2;
  return c;
}

ModelConfig realK3() {
  return withGeometry(k3Like(),
                      {163840, 7168, 93,     33792, 96,   128, 96,   1536,
                       512,    128,  64,     128,   896,  16,  3584, 3072,
                       2,      12,   262144, kBos,  kEos, kPad});
}

ModelConfig kimiLinear48b() {
  return withGeometry(linearLike(),
                      {163840, 2304, 27,      9216, 32,   128, 32, 0,
                       512,    128,  64,      128,  256,  8,   0,  1024,
                       1,      0,    1048576, kBos, kEos, kPad});
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
    {"tiny-odd",
     "K3 features at toy size with every dimension and scalar distinct "
     "(P != R != V, lower bound -3.5, conv 3, top-3, no shared expert, "
     "two dense layers): catches swapped sizes and defaulted scalars",
     tinyOdd},
    {"k3",
     "real Kimi K3 geometry (hidden 7168, 93 layers, 896 experts), conv and "
     "o_norm F32 as published; cut down with --layers/--experts",
     realK3, StoredDtypes::Published},
    {"kimi-linear-48b",
     "real Kimi-Linear-48B-A3B geometry (hidden 2304, 27 "
     "layers, 256 experts), router bias BF16 as published; cut down with "
     "--layers/--experts",
     kimiLinear48b, StoredDtypes::Published},
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

StoredDtypes presetStoredDtypes(const std::string &name) {
  const Preset *p = findPreset(name);
  return p ? p->dtypes : StoredDtypes::Simple;
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
