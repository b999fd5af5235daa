//===- Npy.h - NumPy .npy files of float32 matrices -------------*- C++ -*-===//
//
// The logits dumps (K3.md §10: float32 [max_new, vocab]) are .npy version 1.0
// files, so numpy.load reads them with no extra code. The reader exists for
// tests and for comparing two dumps; it accepts only what the writer makes.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_IO_NPY_H
#define K3C_RUNTIME_IO_NPY_H

#include "runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

/// The bytes of a .npy v1.0 file holding float32 little-endian [rows, cols]
/// (C order) from `data` (rows * cols values).
std::string encodeNpyF32(const float *data, int64_t rows, int64_t cols);

/// Writes encodeNpyF32(...) to `path`.
Status writeNpyF32(const std::string &path, const float *data, int64_t rows,
                   int64_t cols);

/// A float32 matrix read back from a .npy file.
struct NpyF32 {
  int64_t rows = 0, cols = 0;
  std::vector<float> values; ///< rows * cols, C order
};

/// Reads a 2-D '<f4' C-order .npy file.
Expected<NpyF32> readNpyF32(const std::string &path);

} // namespace k3

#endif // K3C_RUNTIME_IO_NPY_H
