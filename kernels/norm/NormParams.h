//===- NormParams.h - Parameters of RMSNorm -----------------------*- C++
//-*-===//
//
// The contract between codegen, the runtime and the norm kernels (CPU and
// CUDA). Plain C types only. (KDA's l2norm is internal to the KDA kernels;
// the latent MoE norm is this rms_norm.)
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_NORM_NORMPARAMS_H
#define K3C_KERNELS_NORM_NORMPARAMS_H

#include <cstdint>

namespace k3 {

/// `rms_norm` (NUMERICS.md): v = mean(x²) (fp32); n = R(x · rsqrt(v + eps));
/// out = R(n · w).
struct RmsNormParams {
  const uint16_t *x = nullptr; ///< [n] bf16
  const uint16_t *w = nullptr; ///< [n] bf16
  uint16_t *out = nullptr;     ///< [n] bf16; may alias x
  int64_t n = 0;
  float eps = 1e-5f; ///< rms_norm_eps, or 1e-6 for q_a/kv_a norms
};

} // namespace k3

#endif // K3C_KERNELS_NORM_NORMPARAMS_H
