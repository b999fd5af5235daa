//===- GemvCpu.h - Decode projections on the CPU ------------------*- C++
//-*-===//
#ifndef K3C_KERNELS_GEMV_GEMVCPU_H
#define K3C_KERNELS_GEMV_GEMVCPU_H

#include "kernels/gemv/GemvParams.h"

namespace k3 {

/// y = W · x with optional pre-norm and residual epilogue; bf16 or fp32 out.
void linearCpu(const LinearParams &p);

/// Several projections of one (pre-normed) input.
void linearMultiCpu(const LinearMultiParams &p);

} // namespace k3

#endif // K3C_KERNELS_GEMV_GEMVCPU_H
