//===- GemvCpu.h - Decode projections on the CPU ------------------*- C++
//-*-===//
#ifndef K3C_KERNELS_GEMV_GEMVCPU_H
#define K3C_KERNELS_GEMV_GEMVCPU_H

#include "kernels/gemv/GemvParams.h"

#include <cstddef>

namespace k3 {

/// y = W · x with optional pre-norm and residual epilogue; bf16 or fp32 out.
void linearCpu(const LinearParams &p);

/// Several projections of one (pre-normed) input.
void linearMultiCpu(const LinearMultiParams &p);

/// The multi-row forms: `m` launches of one plan launch (the rows of a step:
/// several sequences, a prompt chunk) at once, each weight row read once for
/// all of them; every row's output equals its single-row call bit for bit.
/// The rows must share the weights and sizes (they are one launch bound
/// once per row); rows that do not are run one by one.
void linearRowsCpu(const LinearParams *const *rows, size_t m);
void linearMultiRowsCpu(const LinearMultiParams *const *rows, size_t m);

} // namespace k3

#endif // K3C_KERNELS_GEMV_GEMVCPU_H
