//===- GemvParams.h - Parameters of the decode projections --------*- C++
//-*-===//
//
// The contract between codegen, the runtime and the gemv kernels (CPU and
// CUDA). Plain C types only. Batch 1: every projection of a decode step is a
// matrix-vector product y[N] = W[N, K] · x[K] with fp32 accumulation.
//
// Two fusions live here because every projection site can use them:
//  * pre-norm: "RMSNorm folded into the following projection". x is first
//    normalised exactly as `rms_norm` would (R(R(x·rsqrt(mean x² + eps))·w)),
//    so the result equals rms_norm followed by linear, bit for bit;
//  * residual epilogue: y = R(R(Wx) + residual), equal to linear then `add`.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_GEMV_GEMVPARAMS_H
#define K3C_KERNELS_GEMV_GEMVPARAMS_H

#include "kernels/common/WeightRef.h"

#include <cstdint>

namespace k3 {

/// `linear`: y = W · x (optionally pre-normed x, optionally + residual).
///
/// Output: exactly one of `out` (bf16, y = R(Σ W x)) and `outF32` (fp32,
/// unrounded: router logits, lm_head) is non-null. The residual epilogue is
/// only defined with `out` (it must be null with `outF32`).
struct LinearParams {
  const uint16_t *x = nullptr; ///< [k] bf16
  WeightRef w;                 ///< [n, k]; MXFP4 needs k % 32 == 0
  int64_t n = 0;               ///< output rows
  int64_t k = 0;               ///< input columns
  /// [k] bf16 RMSNorm weight, may be null (no pre-norm).
  const uint16_t *normWeight = nullptr;
  float normEps = 1e-5f; ///< used only with normWeight
  /// [n] bf16, may be null: out = R(R(W x) + residual). May alias `out`.
  const uint16_t *residual = nullptr;
  uint16_t *out = nullptr; ///< [n] bf16, or null when outF32 is given
  float *outF32 = nullptr; ///< [n] fp32 unrounded, may be null
};

/// Most projections one `linear_multi` launch carries (KDA: q, k, v, f_a, b,
/// g — or g_a — is six; MLA: q_a or q, kv_a, g is three).
constexpr int kLinearMultiMax = 8;

/// One projection of a `linear_multi`.
struct LinearMultiEntry {
  WeightRef w; ///< [n, k] (k shared by all entries)
  int64_t n = 0;
  uint16_t *out = nullptr; ///< [n] bf16 = R(W · x̂)
};

/// `linear_multi`: several projections of the same (optionally pre-normed)
/// input in one launch; entry i gives exactly what `linear` with the same
/// x, normWeight and normEps gives.
struct LinearMultiParams {
  const uint16_t *x = nullptr; ///< [k] bf16
  int64_t k = 0;
  const uint16_t *normWeight = nullptr; ///< [k] bf16, may be null
  float normEps = 1e-5f;
  int32_t count = 0; ///< 1 .. kLinearMultiMax
  LinearMultiEntry entries[kLinearMultiMax];
};

} // namespace k3

#endif // K3C_KERNELS_GEMV_GEMVPARAMS_H
