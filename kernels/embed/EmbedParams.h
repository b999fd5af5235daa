//===- EmbedParams.h - Parameters of the embedding lookup ---------*- C++
//-*-===//
//
// The contract between codegen, the runtime and the embed kernels (CPU and
// CUDA). Plain C types only.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_EMBED_EMBEDPARAMS_H
#define K3C_KERNELS_EMBED_EMBEDPARAMS_H

#include "kernels/common/StepInputs.h"

#include <cstdint>

namespace k3 {

/// `embed`: out = table[token] (an exact bf16 row copy).
struct EmbedParams {
  const uint16_t *table = nullptr; ///< [vocab, dim] bf16, row-major
  int64_t vocab = 0;
  int64_t dim = 0;
  /// Token id; the caller checks 0 <= token < vocab (the kernel has no error
  /// path; out of range it writes zeros).
  int64_t token = 0;
  uint16_t *out = nullptr; ///< [dim] bf16
  /// [kStepWords] int64 (StepInputs.h), may be null: when set, the token is
  /// step[kStepToken] and `token` is ignored.
  const int64_t *step = nullptr;
};

/// The multi-row form of `embed` (k3_embed_rows): grid (the single launch's
/// x, count, 1), row y's whole params at rows[y] in device memory (a prompt
/// chunk's or a batch's rows, each reading its token from its own step
/// block).
struct EmbedRowsParams {
  const EmbedParams *rows = nullptr; ///< [count] in device memory
  int32_t count = 0;
};

} // namespace k3

#endif // K3C_KERNELS_EMBED_EMBEDPARAMS_H
