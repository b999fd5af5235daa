//===- ElementwiseParams.h - Parameters of the elementwise ops ----*- C++
//-*-===//
//
// The contract between codegen, the runtime and the elementwise kernels (CPU
// and CUDA). Plain C types only. These are the unfused forms (--fusion=none)
// of epilogues that the fused kernels also apply: the residual add, the MLA
// output gate and the gated-MLP activation.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_ELEMENTWISE_ELEMENTWISEPARAMS_H
#define K3C_KERNELS_ELEMENTWISE_ELEMENTWISEPARAMS_H

#include "kernels/common/WeightRef.h"

#include <cstdint>

namespace k3 {

/// `add`: out = R(a + b) (the residual add).
struct AddParams {
  const uint16_t *a = nullptr; ///< [n] bf16
  const uint16_t *b = nullptr; ///< [n] bf16
  uint16_t *out = nullptr;     ///< [n] bf16; may alias a or b
  int64_t n = 0;
};

/// `mul_sigmoid`: out = R(x · sigmoid(gate)) (the MLA output gate; sigmoid
/// and product in fp32).
struct MulSigmoidParams {
  const uint16_t *x = nullptr;    ///< [n] bf16 (the attention output o)
  const uint16_t *gate = nullptr; ///< [n] bf16 (R(g_proj h))
  uint16_t *out = nullptr;        ///< [n] bf16; may alias x
  int64_t n = 0;
};

/// `gated_act`: a = R(act(g, u)) in fp32 (K3.md §6), the middle of an
/// unfused gated MLP.
struct GatedActParams {
  const uint16_t *g = nullptr; ///< [n] bf16 = R(W1 x)
  const uint16_t *u = nullptr; ///< [n] bf16 = R(W3 x)
  uint16_t *out = nullptr;     ///< [n] bf16; may alias g or u
  int64_t n = 0;
  int32_t activation = kActSiTU; ///< kActSiTU or kActSwiGLU
  float beta1 = 4.0f;            ///< SiTU: activation_situ_beta
  int32_t hasBeta2 = 1;          ///< SiTU: 0 = plain u on the up branch
  float beta2 = 25.0f;           ///< SiTU: activation_situ_linear_beta
};

/// The multi-row form of `gated_act` (k3_gated_act_rows): grid (the single
/// launch's x, count, 1), row y's whole params at rows[y] in device memory.
struct GatedActRowsParams {
  const GatedActParams *rows = nullptr; ///< [count] in device memory
  int32_t count = 0;
};

} // namespace k3

#endif // K3C_KERNELS_ELEMENTWISE_ELEMENTWISEPARAMS_H
