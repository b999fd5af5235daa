//===- HeadParams.h - Parameters of the decode head ---------------*- C++
//-*-===//
//
// The contract between codegen, the runtime and the head kernels (CPU and
// CUDA). Plain C types only. The head itself (final norm + lm_head) is a
// `linear` with a folded pre-norm and an fp32 output; this family holds what
// comes after it.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_HEAD_HEADPARAMS_H
#define K3C_KERNELS_HEAD_HEADPARAMS_H

#include "kernels/common/StepInputs.h"

#include <cstdint>

namespace k3 {

/// `argmax`: the index of the largest logit; ties go to the lowest index.
/// NaN logits are never chosen (if every logit is NaN the result is 0).
/// With `step` bound, the id also becomes the next step's input:
/// step[kStepToken] = id, step[kStepPos] += 1, step[kStepNonFinite] = 1 when
/// any logit was NaN or ±Inf, else 0 (StepInputs.h).
struct ArgmaxParams {
  const float *logits = nullptr; ///< [n] fp32
  int64_t n = 0;
  int64_t *outId = nullptr; ///< [1] int64, may be null
  int64_t *step = nullptr;  ///< [kStepWords] int64, may be null
};

/// The multi-row form of `argmax` (k3_argmax_rows): grid (the single
/// launch's x, count, 1), row y's whole params at rows[y] in device memory
/// (a batch's rows, each choosing from its own logits into its own step
/// block).
struct ArgmaxRowsParams {
  const ArgmaxParams *rows = nullptr; ///< [count] in device memory
  int32_t count = 0;
};

/// Rows of k3_argmax_rows whose blocks split their logits (module scratch
/// for their candidates); a row past them is scanned by its block 0 alone.
constexpr int kArgmaxRowsSplit = 256;
/// Most blocks that split one row of k3_argmax_rows.
constexpr int kArgmaxRowsMaxParts = 64;

} // namespace k3

#endif // K3C_KERNELS_HEAD_HEADPARAMS_H
