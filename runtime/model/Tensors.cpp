//===- Tensors.cpp - The checkpoint's tensors, one table ------------------===//
//
// The table of K3.md §10 and the walk over one model built on it. The rows
// are grouped by part and, within a part, listed in the order checkpoints
// (and the model maker) list the tensors.
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Tensors.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace k3 {

namespace {

using Shape = std::vector<int64_t>;
using P = TensorPart;
using T = TensorDtypes;

// Sizes in K3.md §10's letters.
int64_t D(const ModelConfig &c) { return c.hiddenSize; }
int64_t C(const ModelConfig &c) { return c.kdaChannels(); }
int64_t H(const ModelConfig &c) { return c.kda.numHeads; }
int64_t d(const ModelConfig &c) { return c.kda.headDim; }
/// N(P+R): the MLA query width.
int64_t qWidth(const ModelConfig &c) {
  return c.numAttentionHeads * (c.qkNopeHeadDim + c.qkRopeHeadDim);
}
/// N·V: the MLA output width.
int64_t oWidth(const ModelConfig &c) {
  return c.numAttentionHeads * c.vHeadDim;
}
/// S·I: the shared MLP width.
int64_t sharedWidth(const ModelConfig &c) {
  return c.numSharedExperts * c.moeIntermediateSize;
}

bool fullRankGate(const ModelConfig &c) { return c.kda.fullRankGate; }
bool lowRankGate(const ModelConfig &c) { return !c.kda.fullRankGate; }
bool qLora(const ModelConfig &c) { return c.qLoraRank > 0; }
bool directQ(const ModelConfig &c) { return c.qLoraRank <= 0; }
bool mlaGate(const ModelConfig &c) { return c.mlaUseOutputGate; }
bool routedNorm(const ModelConfig &c) { return c.latentMoeUseNorm; }
bool attnRes(const ModelConfig &c) { return c.hasAttnRes(); }
bool untied(const ModelConfig &c) { return !c.tieWordEmbeddings; }

#define SHAPE(...) [](const ModelConfig &c) -> Shape { return {__VA_ARGS__}; }

const std::vector<TensorEntry> kTable = {
    {TensorId::EmbedTokens, P::Embed, "model.embed_tokens.weight", false,
     T::BF16, SHAPE(c.vocabSize, D(c)), nullptr},

    {TensorId::InputLayernorm, P::LayerNorms, "input_layernorm.weight", false,
     T::BF16, SHAPE(D(c)), nullptr},
    {TensorId::PostAttentionLayernorm, P::LayerNorms,
     "post_attention_layernorm.weight", false, T::BF16, SHAPE(D(c)), nullptr},

    {TensorId::SelfAttentionResNorm, P::AttnRes,
     "self_attention_res_norm.weight", false, T::BF16, SHAPE(D(c)), nullptr},
    {TensorId::SelfAttentionResProj, P::AttnRes, "self_attention_res_proj",
     true, T::BF16, SHAPE(1, D(c)), nullptr},
    {TensorId::MlpResNorm, P::AttnRes, "mlp_res_norm.weight", false, T::BF16,
     SHAPE(D(c)), nullptr},
    {TensorId::MlpResProj, P::AttnRes, "mlp_res_proj", true, T::BF16,
     SHAPE(1, D(c)), nullptr},

    {TensorId::KdaQProj, P::Kda, "self_attn.q_proj", true, T::BF16,
     SHAPE(C(c), D(c)), nullptr},
    {TensorId::KdaKProj, P::Kda, "self_attn.k_proj", true, T::BF16,
     SHAPE(C(c), D(c)), nullptr},
    {TensorId::KdaVProj, P::Kda, "self_attn.v_proj", true, T::BF16,
     SHAPE(C(c), D(c)), nullptr},
    {TensorId::KdaQConv, P::Kda, "self_attn.q_conv1d.weight", false, T::Small,
     SHAPE(C(c), 1, c.kda.convSize), nullptr},
    {TensorId::KdaKConv, P::Kda, "self_attn.k_conv1d.weight", false, T::Small,
     SHAPE(C(c), 1, c.kda.convSize), nullptr},
    {TensorId::KdaVConv, P::Kda, "self_attn.v_conv1d.weight", false, T::Small,
     SHAPE(C(c), 1, c.kda.convSize), nullptr},
    {TensorId::KdaFAProj, P::Kda, "self_attn.f_a_proj", true, T::BF16,
     SHAPE(d(c), D(c)), nullptr},
    {TensorId::KdaFBProj, P::Kda, "self_attn.f_b_proj", true, T::BF16,
     SHAPE(C(c), d(c)), nullptr},
    {TensorId::KdaDtBias, P::Kda, "self_attn.dt_bias", false, T::F32,
     SHAPE(C(c)), nullptr},
    {TensorId::KdaALog, P::Kda, "self_attn.A_log", false, T::ALog,
     SHAPE(H(c)), nullptr},
    {TensorId::KdaBProj, P::Kda, "self_attn.b_proj", true, T::BF16,
     SHAPE(H(c), D(c)), nullptr},
    {TensorId::KdaGProj, P::Kda, "self_attn.g_proj", true, T::BF16,
     SHAPE(C(c), D(c)), fullRankGate},
    {TensorId::KdaGAProj, P::Kda, "self_attn.g_a_proj", true, T::BF16,
     SHAPE(d(c), D(c)), lowRankGate},
    {TensorId::KdaGBProj, P::Kda, "self_attn.g_b_proj", true, T::BF16,
     SHAPE(C(c), d(c)), lowRankGate},
    {TensorId::KdaONorm, P::Kda, "self_attn.o_norm.weight", false, T::Small,
     SHAPE(d(c)), nullptr},
    {TensorId::KdaOProj, P::Kda, "self_attn.o_proj", true, T::BF16,
     SHAPE(D(c), C(c)), nullptr},

    {TensorId::MlaQAProj, P::Mla, "self_attn.q_a_proj", true, T::BF16,
     SHAPE(c.qLoraRank, D(c)), qLora},
    {TensorId::MlaQALayernorm, P::Mla, "self_attn.q_a_layernorm.weight", false,
     T::BF16, SHAPE(c.qLoraRank), qLora},
    {TensorId::MlaQBProj, P::Mla, "self_attn.q_b_proj", true, T::BF16,
     SHAPE(qWidth(c), c.qLoraRank), qLora},
    {TensorId::MlaQProj, P::Mla, "self_attn.q_proj", true, T::BF16,
     SHAPE(qWidth(c), D(c)), directQ},
    {TensorId::MlaKvAProj, P::Mla, "self_attn.kv_a_proj_with_mqa", true,
     T::BF16, SHAPE(c.mlaCacheWidth(), D(c)), nullptr},
    {TensorId::MlaKvALayernorm, P::Mla, "self_attn.kv_a_layernorm.weight",
     false, T::BF16, SHAPE(c.kvLoraRank), nullptr},
    {TensorId::MlaKvBProj, P::Mla, "self_attn.kv_b_proj", true, T::BF16,
     SHAPE(c.numAttentionHeads * (c.qkNopeHeadDim + c.vHeadDim), c.kvLoraRank),
     nullptr},
    {TensorId::MlaGProj, P::Mla, "self_attn.g_proj", true, T::BF16,
     SHAPE(oWidth(c), D(c)), mlaGate},
    {TensorId::MlaOProj, P::Mla, "self_attn.o_proj", true, T::BF16,
     SHAPE(D(c), oWidth(c)), nullptr},

    {TensorId::MlpGateProj, P::DenseMlp, "mlp.gate_proj", true, T::BF16,
     SHAPE(c.intermediateSize, D(c)), nullptr},
    {TensorId::MlpUpProj, P::DenseMlp, "mlp.up_proj", true, T::BF16,
     SHAPE(c.intermediateSize, D(c)), nullptr},
    {TensorId::MlpDownProj, P::DenseMlp, "mlp.down_proj", true, T::BF16,
     SHAPE(D(c), c.intermediateSize), nullptr},

    {TensorId::MoeGate, P::MoeRouter, "block_sparse_moe.gate", true, T::BF16,
     SHAPE(c.numExperts, D(c)), nullptr},
    {TensorId::MoeGateBias, P::MoeRouter,
     "block_sparse_moe.gate.e_score_correction_bias", false, T::RouterBias,
     SHAPE(c.numExperts), nullptr},

    {TensorId::ExpertW1, P::RoutedExpert, "block_sparse_moe.experts.{e}.w1",
     true, T::Expert, SHAPE(c.moeIntermediateSize, c.moeHiddenSize()),
     nullptr},
    {TensorId::ExpertW2, P::RoutedExpert, "block_sparse_moe.experts.{e}.w2",
     true, T::Expert, SHAPE(c.moeHiddenSize(), c.moeIntermediateSize),
     nullptr},
    {TensorId::ExpertW3, P::RoutedExpert, "block_sparse_moe.experts.{e}.w3",
     true, T::Expert, SHAPE(c.moeIntermediateSize, c.moeHiddenSize()),
     nullptr},

    {TensorId::SharedGateProj, P::SharedExpert,
     "block_sparse_moe.shared_experts.gate_proj", true, T::BF16,
     SHAPE(sharedWidth(c), D(c)), nullptr},
    {TensorId::SharedUpProj, P::SharedExpert,
     "block_sparse_moe.shared_experts.up_proj", true, T::BF16,
     SHAPE(sharedWidth(c), D(c)), nullptr},
    {TensorId::SharedDownProj, P::SharedExpert,
     "block_sparse_moe.shared_experts.down_proj", true, T::BF16,
     SHAPE(D(c), sharedWidth(c)), nullptr},

    {TensorId::RoutedExpertDownProj, P::LatentMoe,
     "block_sparse_moe.routed_expert_down_proj", true, T::BF16,
     SHAPE(c.moeHiddenSize(), D(c)), nullptr},
    {TensorId::RoutedExpertUpProj, P::LatentMoe,
     "block_sparse_moe.routed_expert_up_proj", true, T::BF16,
     SHAPE(D(c), c.moeHiddenSize()), nullptr},
    {TensorId::RoutedExpertNorm, P::LatentMoe,
     "block_sparse_moe.routed_expert_norm.weight", false, T::BF16,
     SHAPE(c.moeHiddenSize()), routedNorm},

    {TensorId::FinalNorm, P::Head, "model.norm.weight", false, T::BF16,
     SHAPE(D(c)), nullptr},
    {TensorId::OutputAttnResNorm, P::Head, "model.output_attn_res_norm.weight",
     false, T::BF16, SHAPE(D(c)), attnRes},
    {TensorId::OutputAttnResProj, P::Head, "model.output_attn_res_proj", true,
     T::BF16, SHAPE(1, D(c)), attnRes},
    {TensorId::LmHead, P::Head, "lm_head", true, T::BF16,
     SHAPE(c.vocabSize, D(c)), untied},
};

#undef SHAPE

/// The parts of one layer, in checkpoint order.
constexpr TensorPart kLayerParts[] = {
    P::LayerNorms, P::AttnRes,   P::Kda,          P::Mla,
    P::DenseMlp,   P::MoeRouter, P::RoutedExpert, P::SharedExpert,
    P::LatentMoe};

bool tableInOrder() {
  if (kTable.size() != static_cast<size_t>(TensorId::Count))
    return false;
  for (size_t i = 0; i < kTable.size(); ++i)
    if (static_cast<size_t>(kTable[i].id) != i ||
        (i && kTable[i].part < kTable[i - 1].part))
      return false;
  return true;
}

/// The rows of `part`: [first, last) of kTable.
std::pair<size_t, size_t> partRows(TensorPart part) {
  size_t first = 0;
  while (first < kTable.size() && kTable[first].part < part)
    ++first;
  size_t last = first;
  while (last < kTable.size() && kTable[last].part == part)
    ++last;
  return {first, last};
}

} // namespace

const std::vector<TensorEntry> &tensorTable() {
  static const bool ordered = tableInOrder();
  assert(ordered && "tensor table out of TensorId or part order");
  (void)ordered;
  return kTable;
}

const TensorEntry &tensorEntry(TensorId id) {
  return tensorTable()[static_cast<size_t>(id)];
}

bool hasTensorPart(const ModelConfig &c, TensorPart part, int64_t layer) {
  switch (part) {
  case P::Embed:
  case P::LayerNorms:
  case P::Head:
    return true;
  case P::AttnRes:
    return c.hasAttnRes();
  case P::Kda:
    return !c.isMlaLayer(layer);
  case P::Mla:
    return c.isMlaLayer(layer);
  case P::DenseMlp:
    return c.isDenseLayer(layer);
  case P::MoeRouter:
  case P::RoutedExpert:
    return !c.isDenseLayer(layer);
  case P::SharedExpert:
    return !c.isDenseLayer(layer) && c.numSharedExperts > 0;
  case P::LatentMoe:
    return !c.isDenseLayer(layer) && c.hasLatentMoe();
  }
  return false;
}

bool hasTensor(const ModelConfig &c, TensorId id, int64_t layer) {
  const TensorEntry &e = tensorEntry(id);
  return hasTensorPart(c, e.part, layer) && (!e.present || e.present(c));
}

std::vector<int64_t> tensorShape(const ModelConfig &c, TensorId id) {
  return tensorEntry(id).shape(c);
}

std::string tensorBaseName(const ModelConfig &c, TensorId id, int64_t layer,
                           int64_t expert) {
  const TensorEntry &e = tensorEntry(id);
  std::string name = c.tensorPrefix;
  if (e.part != P::Embed && e.part != P::Head)
    name += "model.layers." + std::to_string(layer) + ".";
  name += e.name;
  const std::string slot = "{e}";
  size_t at = name.find(slot);
  if (expert >= 0 && at != std::string::npos)
    name.replace(at, slot.size(), std::to_string(expert));
  return name;
}

std::string tensorName(const ModelConfig &c, TensorId id, int64_t layer,
                       int64_t expert) {
  std::string name = tensorBaseName(c, id, layer, expert);
  return tensorEntry(id).linear ? name + ".weight" : name;
}

bool tensorDtypeAllowed(TensorDtypes dtypes, DType t) {
  switch (dtypes) {
  case T::BF16:
  case T::Expert:
    return t == DType::BF16;
  case T::Small:
  case T::F32:
  case T::RouterBias:
    return t == DType::F32 || t == DType::BF16;
  case T::ALog:
    return t == DType::F32;
  }
  return false;
}

const char *tensorDtypesText(TensorDtypes dtypes) {
  switch (dtypes) {
  case T::BF16:
  case T::Expert:
    return "BF16";
  case T::Small:
    return "F32 or BF16";
  case T::F32:
  case T::RouterBias:
  case T::ALog:
    return "F32";
  }
  return "?";
}

void forEachModelTensor(const ModelConfig &c,
                        const std::function<bool(const ModelTensor &)> &fn) {
  const std::vector<TensorEntry> &table = tensorTable();
  ModelTensor t;
  // Each entry of `part` that layer `layer` has, for expert `expert`.
  auto part = [&](TensorPart p, int64_t layer, int64_t expert) {
    const std::pair<size_t, size_t> rows = partRows(p);
    for (size_t r = rows.first; r < rows.second; ++r) {
      const TensorEntry &e = table[r];
      if (e.present && !e.present(c))
        continue;
      t.entry = &e;
      t.layer = layer;
      t.expert = expert;
      t.name = tensorBaseName(c, e.id, layer, expert);
      t.shape = e.shape(c);
      if (!fn(t))
        return false;
    }
    return true;
  };
  if (!part(P::Embed, -1, -1))
    return;
  for (int64_t i = 0; i < c.numLayers; ++i) {
    for (TensorPart p : kLayerParts) {
      if (!hasTensorPart(c, p, i))
        continue;
      if (p != P::RoutedExpert) {
        if (!part(p, i, -1))
          return;
        continue;
      }
      for (int64_t e = 0; e < c.numExperts; ++e)
        if (!part(p, i, e))
          return;
    }
  }
  part(P::Head, -1, -1);
}

//===----------------------------------------------------------------------===//
// What the model maker writes
//===----------------------------------------------------------------------===//

std::vector<TensorSpec> expectedTensorSpecs(const ModelConfig &c,
                                            StoredDtypes dtypes,
                                            std::vector<TensorId> *ids) {
  const bool published = dtypes == StoredDtypes::Published;
  const bool k3 = c.modelType == "kimi_k3";
  std::vector<TensorSpec> specs;
  forEachModelTensor(c, [&](const ModelTensor &t) {
    const TensorEntry &e = *t.entry;
    const std::string name = e.linear ? t.name + ".weight" : t.name;
    switch (e.dtypes) {
    case T::BF16:
      specs.push_back({name, DType::BF16, t.shape});
      break;
    case T::Small:
      specs.push_back({name, published && k3 ? DType::F32 : DType::BF16,
                       t.shape});
      break;
    case T::F32:
      specs.push_back({name, DType::F32, t.shape});
      break;
    case T::RouterBias:
      specs.push_back({name, published && !k3 ? DType::BF16 : DType::F32,
                       t.shape});
      break;
    case T::ALog: {
      // The layouts the published checkpoints use (K3.md §10).
      const int64_t heads = t.shape[0];
      specs.push_back({name, DType::F32,
                       k3 ? Shape{std::max<int64_t>(heads, 128)}
                          : Shape{1, 1, heads, 1}});
      break;
    }
    case T::Expert:
      if (!c.expertsMxfp4) {
        specs.push_back({name, DType::BF16, t.shape});
        break;
      }
      specs.push_back(
          {t.name + ".weight_packed", DType::U8, {t.shape[0], t.shape[1] / 2}});
      specs.push_back(
          {t.name + ".weight_scale", DType::U8, {t.shape[0], t.shape[1] / 32}});
      if (ids)
        ids->push_back(e.id);
      break;
    }
    if (ids)
      ids->push_back(e.id);
    return true;
  });
  return specs;
}

std::vector<std::string> expectedTensorNames(const ModelConfig &c) {
  std::vector<std::string> names;
  for (TensorSpec &s : expectedTensorSpecs(c))
    names.push_back(std::move(s.name));
  return names;
}

} // namespace k3
