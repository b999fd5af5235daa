//===- NormCpu.h - RMSNorm on the CPU -----------------------------*- C++
//-*-===//
#ifndef K3C_KERNELS_NORM_NORMCPU_H
#define K3C_KERNELS_NORM_NORMCPU_H

#include "kernels/norm/NormParams.h"

namespace k3 {

/// RMSNorm of one vector, rounding as NUMERICS.md says.
void rmsNormCpu(const RmsNormParams &p);

} // namespace k3

#endif // K3C_KERNELS_NORM_NORMCPU_H
