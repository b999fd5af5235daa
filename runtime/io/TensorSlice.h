//===- TensorSlice.h - One rank's part of a checkpoint tensor ---*- C++ -*-===//
//
// Tensor-parallel and expert-parallel plans give each rank a part of a
// tensor: equal parts along one dimension. A rank reads only its part of
// the memory-mapped checkpoint: a part along the first dimension (rows:
// column-parallel projections, a vocabulary split) is a contiguous range of
// the file and stays a view into the mapping, no copy; a part along a later
// dimension (input columns: row-parallel projections) is gathered row by
// row into a buffer of the part's size. An MXFP4 matrix (packed codes
// [rows, in/2], scales [rows, in/32]) is split as one logical [rows, in]
// matrix: its codes and scales together, each rank whole 32-input blocks.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_IO_TENSORSLICE_H
#define K3C_RUNTIME_IO_TENSORSLICE_H

#include "runtime/Status.h"
#include "runtime/io/Tensor.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace k3 {

/// Part `rank` of `ranks` equal parts along dimension `axis`.
struct TensorSplit {
  int axis = 0;
  int64_t rank = 0;
  int64_t ranks = 1;
};

/// One rank's part of a tensor: `view` (the part's shape) points into the
/// original bytes when the part is contiguous there, else into `owned`.
/// Movable (the view stays valid), not copyable.
struct TensorSlice {
  TensorView view;
  std::vector<uint8_t> owned;

  TensorSlice() = default;
  TensorSlice(TensorSlice &&) = default;
  TensorSlice &operator=(TensorSlice &&) = default;
  TensorSlice(const TensorSlice &) = delete;
  TensorSlice &operator=(const TensorSlice &) = delete;
  /// Whether the part was gathered into `owned` (false: a view, no copy).
  bool copied() const { return view.data && view.data == owned.data(); }
};

/// The part `split` names of `t`. Errors (naming the tensor, its shape and
/// the split): ranks < 1, rank outside [0, ranks), axis outside the shape,
/// the dimension not divisible by ranks, or bytes that do not match the
/// shape.
Expected<TensorSlice> sliceTensor(const TensorView &t,
                                  const TensorSplit &split);

/// The part of an MXFP4 matrix: `split.axis` 0 splits its rows, 1 its
/// inputs (in = packed.shape[1] · 2). Returns the packed part and the scale
/// part. Errors: as sliceTensor, shapes that are not an MXFP4 pair (U8
/// [rows, in/2] and [rows, in/32]), and an input split that does not give
/// every rank whole 32-input blocks.
Expected<std::pair<TensorSlice, TensorSlice>>
sliceMxfp4(const TensorView &packed, const TensorView &scale,
           const TensorSplit &split);

} // namespace k3

#endif // K3C_RUNTIME_IO_TENSORSLICE_H
