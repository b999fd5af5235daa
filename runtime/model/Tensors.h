//===- Tensors.h - The checkpoint's tensors, one table ----------*- C++ -*-===//
//
// Every tensor of K3.md §10, once: its Hugging Face name (relative to the
// model or layer prefix), its shape in config terms and the dtypes a
// checkpoint may store it in, grouped by the layer part it belongs to. The
// importer (k3 weight ops), the binder (ModelWeights), the model maker and
// the tests read names and shapes here; forEachModelTensor walks one
// model's tensors in checkpoint order. The dialect's verifiers still check
// the shape relations of the ops' operands on their own.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_MODEL_TENSORS_H
#define K3C_RUNTIME_MODEL_TENSORS_H

#include "runtime/io/Tensor.h"
#include "runtime/model/Config.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace k3 {

/// One tensor role of K3.md §10, in table order.
enum class TensorId : uint8_t {
  // Model, before the layers.
  EmbedTokens,
  // Every layer.
  InputLayernorm,
  PostAttentionLayernorm,
  // Every layer, AttnRes only.
  SelfAttentionResNorm,
  SelfAttentionResProj,
  MlpResNorm,
  MlpResProj,
  // KDA layer.
  KdaQProj,
  KdaKProj,
  KdaVProj,
  KdaQConv,
  KdaKConv,
  KdaVConv,
  KdaFAProj,
  KdaFBProj,
  KdaDtBias,
  KdaALog,
  KdaBProj,
  KdaGProj,
  KdaGAProj,
  KdaGBProj,
  KdaONorm,
  KdaOProj,
  // MLA layer.
  MlaQAProj,
  MlaQALayernorm,
  MlaQBProj,
  MlaQProj,
  MlaKvAProj,
  MlaKvALayernorm,
  MlaKvBProj,
  MlaGProj,
  MlaOProj,
  // Dense MLP layer.
  MlpGateProj,
  MlpUpProj,
  MlpDownProj,
  // MoE layer: router, routed experts, shared experts, latent projections.
  MoeGate,
  MoeGateBias,
  ExpertW1,
  ExpertW2,
  ExpertW3,
  SharedGateProj,
  SharedUpProj,
  SharedDownProj,
  RoutedExpertDownProj,
  RoutedExpertUpProj,
  RoutedExpertNorm,
  // Model, after the layers.
  FinalNorm,
  OutputAttnResNorm,
  OutputAttnResProj,
  LmHead,
  Count
};

/// The layer part a tensor belongs to: it sets the name's prefix and
/// whether a layer has the tensor at all.
enum class TensorPart : uint8_t {
  Embed,        ///< `P model.embed_tokens`
  LayerNorms,   ///< `L input_layernorm`, `L post_attention_layernorm`
  AttnRes,      ///< `L self_attention_res_*`, `L mlp_res_*` (AttnRes only)
  Kda,          ///< `L self_attn.` of a KDA layer
  Mla,          ///< `L self_attn.` of an MLA layer
  DenseMlp,     ///< `L mlp.` (layer < first_k_dense_replace)
  MoeRouter,    ///< `L block_sparse_moe.gate` (MoE layers)
  RoutedExpert, ///< `L block_sparse_moe.experts.{e}.` (one per expert)
  SharedExpert, ///< `L block_sparse_moe.shared_experts.` (num_shared > 0)
  LatentMoe,    ///< `L block_sparse_moe.routed_expert_*` (latent MoE only)
  Head,         ///< `P model.norm`, `P model.output_attn_res_*`, `P lm_head`
};

/// The dtypes a checkpoint may store a tensor in (K3.md §10 "Stored
/// dtypes"; a loader accepts each as it is).
enum class TensorDtypes : uint8_t {
  /// BF16 only.
  BF16,
  /// A small weight the kernels read as stored, F32 or BF16 (the KDA conv
  /// filters and o_norm: F32 in the published K3, BF16 in Kimi-Linear).
  Small,
  /// fp32 math, F32 or BF16 accepted (dt_bias).
  F32,
  /// The router's e_score_correction_bias, F32 or BF16 (the published K3
  /// stores F32, Kimi-Linear BF16).
  RouterBias,
  /// KDA A_log: F32 with at least H values, any shape (K3 zero-pads it to
  /// 128 entries, Kimi-Linear stores [1, 1, H, 1]); the first H are used.
  ALog,
  /// A routed expert's Linear: BF16 `.weight`, or MXFP4: U8
  /// `.weight_packed` [out, in/2] + U8 `.weight_scale` [out, in/32].
  Expert,
};

/// One row of the table.
struct TensorEntry {
  TensorId id;
  TensorPart part;
  /// The name after the prefix (`P` for Embed and Head, `L` otherwise), as
  /// in K3.md §10: "self_attn.f_a_proj". For a Linear it is the module's
  /// name and the tensor is `<name>.weight` (a routed expert in MXFP4:
  /// `<name>.weight_packed` + `.weight_scale`); otherwise the whole name
  /// ("self_attn.q_conv1d.weight", "self_attn.A_log"). Routed experts
  /// carry "{e}" for the expert number.
  const char *name;
  /// An nn.Linear module (what compressed-tensors' ignore list names).
  bool linear;
  TensorDtypes dtypes;
  /// The shape in config terms: [out, in] for a Linear, [H] for A_log (the
  /// values used; the stored layout may differ, see TensorDtypes::ALog).
  std::vector<int64_t> (*shape)(const ModelConfig &);
  /// Whether a config whose layer has this part has the tensor (the gate
  /// and q_lora variants, the optional norms, tied embeddings); null: always.
  bool (*present)(const ModelConfig &);
};

/// Every entry, in TensorId order (one per TensorId below Count).
const std::vector<TensorEntry> &tensorTable();
const TensorEntry &tensorEntry(TensorId id);

/// Whether layer `layer` (0-based; ignored for Embed and Head) of `config`
/// has part `part`.
bool hasTensorPart(const ModelConfig &config, TensorPart part, int64_t layer);
/// Whether `config` has tensor `id` in layer `layer` (part and entry).
bool hasTensor(const ModelConfig &config, TensorId id, int64_t layer = 0);

/// The shape of `id` in `config` (TensorEntry::shape).
std::vector<int64_t> tensorShape(const ModelConfig &config, TensorId id);
/// The full name of `id` without the Linear's ".weight": the config's
/// prefix, layer `layer` and routed expert `expert` filled in
/// ("language_model.model.layers.3.self_attn.f_a_proj"). `expert` < 0 keeps
/// "{e}" (the name of the importer's stacked expert weights).
std::string tensorBaseName(const ModelConfig &config, TensorId id,
                           int64_t layer = -1, int64_t expert = -1);
/// The stored tensor's full name: tensorBaseName plus ".weight" for a
/// Linear (for a routed expert, its BF16 form).
std::string tensorName(const ModelConfig &config, TensorId id,
                       int64_t layer = -1, int64_t expert = -1);

/// Whether `dtypes` admits a tensor stored as `t` (for Expert: the BF16
/// `.weight`; the MXFP4 pair is U8).
bool tensorDtypeAllowed(TensorDtypes dtypes, DType t);
/// The dtype messages say is expected: "BF16", "F32", "F32 or BF16".
const char *tensorDtypesText(TensorDtypes dtypes);

/// One tensor of one model, as forEachModelTensor hands it out.
struct ModelTensor {
  const TensorEntry *entry = nullptr;
  int64_t layer = -1;  ///< -1 for Embed and Head
  int64_t expert = -1; ///< the routed expert, else -1
  std::string name;    ///< tensorBaseName
  std::vector<int64_t> shape;
};

/// Calls `fn` for every tensor `config` has, in checkpoint order: the
/// embedding; per layer its norms, AttnRes, mixer (KDA or MLA), FFN (dense
/// MLP, or router, each routed expert's w1/w2/w3, shared experts, latent
/// projections); the head. Stops early when `fn` returns false.
void forEachModelTensor(const ModelConfig &config,
                        const std::function<bool(const ModelTensor &)> &fn);

/// The dtypes the model maker gives the tensors that checkpoints store in
/// either of two ways (K3.md §10 "Stored dtypes"); binding accepts both.
enum class StoredDtypes {
  /// KDA conv filters and o_norm BF16, the router bias F32 (the tiny
  /// presets' default).
  Simple,
  /// As the published checkpoint of the config's model type: kimi_k3 stores
  /// the conv filters and o_norm F32; kimi_linear the router bias BF16.
  Published,
};

/// Name, dtype and shape of every tensor `config` stores, in the order of
/// forEachModelTensor, as the model maker writes them (A_log: K3 pads it
/// to 128 entries, Kimi-Linear stores [1, 1, H, 1]; routed experts MXFP4
/// packed + scale when config.expertsMxfp4, else bf16; conv filters,
/// o_norm and the router bias as `dtypes` says). `ids`, when given, gets
/// each spec's TensorId.
std::vector<TensorSpec>
expectedTensorSpecs(const ModelConfig &config,
                    StoredDtypes dtypes = StoredDtypes::Simple,
                    std::vector<TensorId> *ids = nullptr);

/// The name of every tensor `config` stores, in a stable order.
std::vector<std::string> expectedTensorNames(const ModelConfig &config);

} // namespace k3

#endif // K3C_RUNTIME_MODEL_TENSORS_H
