//===- StepInputs.h - A decode step's inputs in memory ----------*- C++ -*-===//
//
// Plans can read a step's token and position from memory instead of from
// params values patched by the host before each step: the kernels that take
// them (embed, mla_cache_append, mla_attend) read the step block when their
// `step` field is bound, and `argmax` with its `step` field bound writes the
// chosen id there as the next step's token and advances the position. So
// consecutive greedy steps run back to back on the device (one CUDA graph
// replay after another) and the host reads back only the ids.
//
// The block is kStepWords int64 values, owned by the backend (the plan binds
// it as {"input": "step"}, docs/PLAN.md).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_STEPINPUTS_H
#define K3C_KERNELS_COMMON_STEPINPUTS_H

#include <cstdint>

namespace k3 {

/// Word indices of the step block.
enum StepWord : int {
  kStepToken = 0,     ///< the step's token id
  kStepPos = 1,       ///< its 0-based position (the attended length is +1)
  kStepNonFinite = 2, ///< argmax: 1 when a logit of the step was NaN or Inf
  kStepWords = 4,     ///< the block's size (one word spare, 32 bytes)
};

} // namespace k3

#endif // K3C_KERNELS_COMMON_STEPINPUTS_H
