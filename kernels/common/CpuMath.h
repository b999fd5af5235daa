//===- CpuMath.h - Shared fp32 building blocks of the CPU kernels -*- C++
//-*-===//
//
// Internal to the CPU implementations (not a params contract). Every CPU
// kernel that computes a dot product, an RMSNorm or an activation goes through
// these helpers, so a fused kernel and the chain of fine kernels it replaces
// add in the same order and round at the same points: that is what makes them
// bit-identical. The library is built with -ffp-contract=off for the same
// reason (an FMA contracted in one inlined copy and not in another would break
// the equality).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_CPUMATH_H
#define K3C_KERNELS_COMMON_CPUMATH_H

#include "kernels/common/BF16.h"
#include "kernels/common/WeightRef.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace k3 {
namespace cpu {

/// Lanes of the fp32 dot products. The fixed lane split gives a fixed,
/// documented summation order (lane l sums elements j ≡ l mod 8, then the
/// lanes are added as a balanced tree) that the compiler can vectorise.
constexpr int kDotLanes = 8;

inline float sumLanes(const float *acc) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
         ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/// Σ a[j]·b[j] in fp32, lane order.
inline float dot(const float *a, const float *b, int64_t n) {
  float acc[kDotLanes] = {};
  int64_t j = 0;
  for (; j + kDotLanes <= n; j += kDotLanes)
    for (int l = 0; l < kDotLanes; ++l)
      acc[l] += a[j + l] * b[j + l];
  for (; j < n; ++j)
    acc[j % kDotLanes] += a[j] * b[j];
  return sumLanes(acc);
}

/// Σ w[j]·x[j] with bf16 `w`, in exactly the order of dot(): a bf16 weight
/// and its fp32 widening (or an exactly dequantised MXFP4 weight of the same
/// value) give the same bits.
inline float dotBf16(const uint16_t *w, const float *x, int64_t n) {
  float acc[kDotLanes] = {};
  int64_t j = 0;
  for (; j + kDotLanes <= n; j += kDotLanes)
    for (int l = 0; l < kDotLanes; ++l)
      acc[l] += bf16ToFloat(w[j + l]) * x[j + l];
  for (; j < n; ++j)
    acc[j % kDotLanes] += bf16ToFloat(w[j]) * x[j];
  return sumLanes(acc);
}

/// Widens n bf16 values.
inline void widen(const uint16_t *x, int64_t n, float *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = bf16ToFloat(x[i]);
}

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
/// log(1 + e^z), with PyTorch's threshold (z > 20 returns z) so large z
/// neither overflows nor differs from the reference's softplus.
inline float softplus(float z) {
  return z > 20.0f ? z : std::log1p(std::exp(z));
}
/// β · tanh(x / β) (K3.md §6); β finite and non-zero.
inline float softcap(float x, float beta) { return beta * std::tanh(x / beta); }

/// The gated activation of an MLP on fp32 inputs (the bf16 g = R(W1 x),
/// u = R(W3 x)); the caller rounds. `activation` is kActSiTU or kActSwiGLU;
/// for SiTU without a linear beta (hasBeta2 == 0) the up branch is plain u.
inline float gatedAct(int32_t activation, float beta1, int32_t hasBeta2,
                      float beta2, float g, float u) {
  if (activation == kActSwiGLU)
    return silu(g) * u;
  float up = hasBeta2 ? softcap(u, beta2) : u;
  return softcap(g, beta1) * sigmoid(g) * up;
}

/// RMSNorm exactly as NUMERICS.md: v = mean(x²) (fp32, dot order);
/// n = R(x · rsqrt(v + eps)); out = R(n · w). `out` may alias `x`.
void rmsNormBf16(const uint16_t *x, const uint16_t *w, int64_t n, float eps,
                 uint16_t *out);

/// A projection's input x̂ widened to fp32: x, or rmsNormBf16(x, normWeight)
/// when a norm weight is given (the folded pre-norm of linear, gated_mlp,
/// router and moe_experts).
std::vector<float> preparedInput(const uint16_t *x, int64_t n,
                                 const uint16_t *normWeight, float eps);

/// y[r] = Σ_k W[r,k]·x[k] in fp32, unrounded, for rows [0, n) of a [n, k]
/// matrix in either format. MXFP4 rows are dequantised exactly to fp32 and
/// use the same summation order as bf16 rows.
void gemvAcc(const WeightRef &w, int64_t n, int64_t k, const float *x,
             float *y);
/// gemvAcc for `m` inputs at once: ys[i][r] = Σ_k W[r,k]·xs[i][k], each
/// weight row loaded (or dequantised) once for all inputs and every sum
/// taken exactly as gemvAcc takes it, so each ys[i] equals gemvAcc's bit for
/// bit.
void gemvAccRows(const WeightRef &w, int64_t n, int64_t k,
                 const float *const *xs, float *const *ys, size_t m);

/// Row `row` of an MXFP4 matrix with `k` columns, dequantised (exact).
void dequantMxfp4RowFast(const uint8_t *packed, const uint8_t *scale, int64_t k,
                         int64_t row, float *out);

} // namespace cpu
} // namespace k3

#endif // K3C_KERNELS_COMMON_CPUMATH_H
