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
struct AttnResParams {
  const uint16_t *blocks = nullptr; ///< [maxBlocks, dim] bf16, rows < numBlocks
  int64_t numBlocks = 0;
  const uint16_t *extra = nullptr; ///< [dim] bf16, may be null
  const uint16_t *wNorm = nullptr; ///< [dim] bf16 (*_res_norm.weight)
  const uint16_t *wProj = nullptr; ///< [dim] bf16 (*_res_proj.weight [1, dim])
  float eps = 1e-5f;               ///< rms_norm_eps
  int64_t dim = 0;                 ///< D
  uint16_t *out = nullptr;         ///< [dim] bf16; must not alias a source
};

} // namespace k3

#endif // K3C_KERNELS_ATTNRES_ATTNRESPARAMS_H
