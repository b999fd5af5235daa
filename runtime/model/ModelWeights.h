//===- ModelWeights.h - A model's tensors, by role --------------*- C++ -*-===//
//
// Binds the Hugging Face tensor names of K3.md §10 (the table of Tensors.h)
// to their roles in the decode step, checking each tensor's dtype and shape
// against the config.
// Views only: the bytes stay in the (memory-mapped) TensorStore, which must
// outlive the ModelWeights.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_MODEL_MODELWEIGHTS_H
#define K3C_RUNTIME_MODEL_MODELWEIGHTS_H

#include "runtime/io/Safetensors.h"
#include "runtime/model/Config.h"
#include "runtime/model/Tensors.h"

#include <string>
#include <vector>

namespace k3 {

/// A linear layer's weight [out, in]: bf16, or MXFP4 (packed U8 [out, in/2],
/// even input column in the low nibble, + E8M0 scales U8 [out, in/32]).
struct LinearWeight {
  bool mxfp4 = false;
  int64_t out = 0, in = 0;
  const TensorView *weight = nullptr; ///< bf16 [out, in]; null when mxfp4
  const TensorView *packed = nullptr; ///< u8 [out, in/2]; null when bf16
  const TensorView *scale = nullptr;  ///< u8 [out, in/32]; null when bf16
  bool present() const { return weight || packed; }
};

struct KdaWeights {
  LinearWeight qProj, kProj, vProj;          ///< [C, D]
  const TensorView *qConv = nullptr;         ///< bf16 or f32 [C, 1, W]
  const TensorView *kConv = nullptr, *vConv = nullptr;
  LinearWeight fAProj;                       ///< [d, D]
  LinearWeight fBProj;                       ///< [C, d]
  const TensorView *dtBias = nullptr;        ///< f32 (or bf16) [C]
  const TensorView *aLog = nullptr;          ///< f32, >= H values; use first H
  LinearWeight bProj;                        ///< [H, D]
  LinearWeight gProj;                        ///< [C, D] full-rank gate, or absent
  LinearWeight gAProj, gBProj;               ///< [d, D], [C, d] low-rank gate
  const TensorView *oNorm = nullptr;         ///< bf16 or f32 [d]
  LinearWeight oProj;                        ///< [D, C]
};

struct MlaWeights {
  LinearWeight qAProj;                       ///< [q_lora, D], absent if no q_lora
  const TensorView *qALayernorm = nullptr;   ///< [q_lora]
  LinearWeight qBProj;                       ///< [N(P+R), q_lora]
  LinearWeight qProj;                        ///< [N(P+R), D] when q_lora is null
  LinearWeight kvAProj;                      ///< [L+R, D] (kv_a_proj_with_mqa)
  const TensorView *kvALayernorm = nullptr;  ///< [L]
  LinearWeight kvBProj;                      ///< [N(P+V), L]
  LinearWeight gProj;                        ///< [N*V, D], absent without gate
  LinearWeight oProj;                        ///< [D, N*V]
};

struct MlpWeights {                          ///< gated MLP
  LinearWeight gate, up;                     ///< [I, in]
  LinearWeight down;                         ///< [in, I]
};

struct MoeWeights {
  LinearWeight gate;                         ///< router [E, D] (bf16)
  const TensorView *eScoreCorrectionBias = nullptr; ///< [E] (f32 or bf16)
  std::vector<MlpWeights> experts;           ///< w1 = gate, w3 = up, w2 = down
  MlpWeights shared;                         ///< absent if numSharedExperts = 0
  LinearWeight routedDown;                   ///< [Dm, D], latent MoE only
  LinearWeight routedUp;                     ///< [D, Dm], latent MoE only
  const TensorView *routedNorm = nullptr;    ///< [Dm], latent MoE with norm
};

struct AttnResWeights {
  const TensorView *norm = nullptr;          ///< [D]
  const TensorView *proj = nullptr;          ///< [1, D]
};

struct LayerWeights {
  const TensorView *inputLayernorm = nullptr;         ///< [D]
  const TensorView *postAttentionLayernorm = nullptr; ///< [D]
  AttnResWeights selfAttentionRes, mlpRes;            ///< AttnRes only
  bool isMla = false;
  KdaWeights kda;                                     ///< when !isMla
  MlaWeights mla;                                     ///< when isMla
  bool isDense = false;
  MlpWeights mlp;                                     ///< when isDense
  MoeWeights moe;                                     ///< when !isDense
};

struct ModelWeights {
  const TensorView *embedTokens = nullptr;            ///< [V, D]
  const TensorView *norm = nullptr;                   ///< [D]
  const TensorView *lmHead = nullptr;                 ///< [V, D] (embed if tied)
  AttnResWeights outputAttnRes;                       ///< AttnRes only
  std::vector<LayerWeights> layers;
};

/// Finds and checks every tensor the config needs. Errors name the missing or
/// mis-shaped tensor, with expected and found dtype/shape.
Expected<ModelWeights> bindModelWeights(const ModelConfig &config,
                                        const TensorStore &store);

} // namespace k3

#endif // K3C_RUNTIME_MODEL_MODELWEIGHTS_H
