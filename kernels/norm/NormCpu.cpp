//===- NormCpu.cpp - RMSNorm on the CPU -----------------------------------===//
//
// Computes out = R(R(x · rsqrt(mean(x²) + eps)) · w) for one vector, the sum of
// squares in fp32 in the lane order of cpu::dot. The same helper serves the
// pre-norm folded into linear/linear_multi/gated_mlp, so those give the same
// bits as rms_norm followed by the projection. Limits: n >= 1.
//
//===----------------------------------------------------------------------===//
#include "kernels/norm/NormCpu.h"
#include "kernels/common/CpuMath.h"

namespace k3 {

void rmsNormCpu(const RmsNormParams &p) {
  cpu::rmsNormBf16(p.x, p.w, p.n, p.eps, p.out);
}

} // namespace k3
