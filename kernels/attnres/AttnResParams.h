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

/// `attn_res_clustered` (the same params and math as `attn_res`) runs on one
/// thread-block cluster: block r of C holds a slice of D, every source's
/// chunk in registers, and the per-source sums cross the cluster through
/// distributed shared memory. Its limits, which codegen reads to choose it:
/// at most kAttnResClusterMaxSources sources (K3: 8 committed blocks + the
/// partial sum), D a multiple of 8 and at most one 8-element chunk per
/// thread: D <= 8 · kAttnResClusterThreads · kAttnResClusterMaxBlocks.
constexpr int64_t kAttnResClusterMaxSources = 9;
/// Threads per block of `attn_res_clustered` (its launch bounds).
constexpr int64_t kAttnResClusterThreads = 128;
/// The most blocks of its cluster (the portable cluster size).
constexpr int64_t kAttnResClusterMaxBlocks = 8;

/// The cluster size codegen gives `attn_res_clustered` for hidden size
/// `dim`: the fewest blocks, a power of two, whose threads hold one chunk of
/// 8 each (K3's 7168: 8; the tiny models' 256: 1, a plain launch); 0 where
/// the clustered form does not take `dim` or `sources`.
constexpr int64_t attnResClusterBlocks(int64_t dim, int64_t sources) {
  if (dim <= 0 || dim % 8 != 0 || sources < 1 ||
      sources > kAttnResClusterMaxSources)
    return 0;
  const int64_t chunks = dim / 8;
  int64_t blocks = 1;
  while (blocks * kAttnResClusterThreads < chunks)
    blocks *= 2;
  return blocks <= kAttnResClusterMaxBlocks ? blocks : 0;
}

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
