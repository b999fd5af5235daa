//===- AttnResParams.h - Parameters of block attention residuals --*- C++
//-*-===//
//
// The contract between codegen, the runtime and the AttnRes kernels (CPU and
// CUDA). Plain C types only. K3.md §4 is the math, NUMERICS.md "AttnRes" the
// rounding (none until the output).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_ATTNRES_ATTNRESPARAMS_H
#define K3C_KERNELS_ATTNRES_ATTNRESPARAMS_H

#include <cstdint>

namespace k3 {

/// `attn_res`: softmax attention over depth. Sources are the first
/// `numBlocks` rows of the committed block list, then `extra` when given
/// (the partial sum p of K3.md §4); n = numBlocks + (extra ? 1 : 0) >= 1.
/// Per source i (fp32): key_i = V_i · rsqrt(mean(V_i²) + eps);
/// logit_i = Σ_d key_i[d] · wNorm[d] · wProj[d]; α = softmax(logit);
/// out = R(Σ_i α_i V_i) over the raw bf16 sources.
/// With normWeight set, the output is instead rms_norm(R(Σ_i α_i V_i),
/// normWeight, normEps) with NUMERICS.md's RMSNorm rounding, bit-identical to
/// attn_res followed by rms_norm (the fused pre-norm of the next mixer/FFN).
struct AttnResParams {
  const uint16_t *blocks = nullptr; ///< [maxBlocks, dim] bf16, rows < numBlocks
  int64_t numBlocks = 0;
  const uint16_t *extra = nullptr; ///< [dim] bf16, may be null
  const uint16_t *wNorm = nullptr; ///< [dim] bf16 (*_res_norm.weight)
  const uint16_t *wProj = nullptr; ///< [dim] bf16 (*_res_proj.weight [1, dim])
  float eps = 1e-5f;               ///< rms_norm_eps
  int64_t dim = 0;                 ///< D
  uint16_t *out = nullptr;         ///< [dim] bf16; must not alias a source
  const uint16_t *normWeight = nullptr; ///< [dim] bf16, may be null
  float normEps = 1e-5f;                ///< eps of that RMSNorm (rms_norm_eps)
};

/// `attn_res_commit`: appends a block representation to the committed list,
/// blocks[index, :] = src (an exact bf16 copy). src may be that row itself.
struct AttnResCommitParams {
  uint16_t *blocks = nullptr;    ///< [maxBlocks, dim] bf16, in place
  const uint16_t *src = nullptr; ///< [dim] bf16
  int64_t index = 0;             ///< row, 0 <= index < maxBlocks
  int64_t dim = 0;               ///< D
};

} // namespace k3

#endif // K3C_KERNELS_ATTNRES_ATTNRESPARAMS_H
