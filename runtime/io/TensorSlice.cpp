//===- TensorSlice.cpp - One rank's part of a checkpoint tensor -----------===//
#include "runtime/io/TensorSlice.h"

#include <cstring>

namespace k3 {

namespace {

/// "tensor 'w' [6, 8] split 2 of 4 along dimension 0".
std::string described(const TensorView &t, const TensorSplit &s) {
  return "tensor '" + t.name + "' " + shapeString(t.shape) + ", part " +
         std::to_string(s.rank) + " of " + std::to_string(s.ranks) +
         " along dimension " + std::to_string(s.axis);
}

} // namespace

Expected<TensorSlice> sliceTensor(const TensorView &t,
                                  const TensorSplit &split) {
  const std::string what = described(t, split);
  if (split.ranks < 1 || split.rank < 0 || split.rank >= split.ranks)
    return makeError(what, ": the part must be in [0, ranks) of at least "
                           "one rank");
  if (split.axis < 0 || split.axis >= static_cast<int>(t.shape.size()))
    return makeError(what, ": the tensor has no dimension ", split.axis);
  const int64_t dim = t.shape[static_cast<size_t>(split.axis)];
  if (dim % split.ranks != 0)
    return makeError(what, ": ", dim, " is not divisible by ", split.ranks);
  // Bytes of one step along the axis (everything after it), and the number
  // of runs before it.
  uint64_t inner = dtypeSize(t.dtype), outer = 1, total = inner;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    const uint64_t n = static_cast<uint64_t>(t.shape[d]);
    total *= n;
    if (static_cast<int>(d) > split.axis)
      inner *= n;
    else if (static_cast<int>(d) < split.axis)
      outer *= n;
  }
  if (total != t.nbytes)
    return makeError(what, ": ", t.nbytes, " bytes for a shape of ", total);
  const int64_t part = dim / split.ranks;
  const uint64_t run = static_cast<uint64_t>(part) * inner;
  const uint64_t first = static_cast<uint64_t>(split.rank * part) * inner;
  TensorSlice out;
  out.view.name = t.name;
  out.view.dtype = t.dtype;
  out.view.shape = t.shape;
  out.view.shape[static_cast<size_t>(split.axis)] = part;
  out.view.nbytes = static_cast<size_t>(run * outer);
  if (outer == 1) {
    // One contiguous range of the original: a view, no copy.
    out.view.data = t.data + first;
    return out;
  }
  out.owned.resize(out.view.nbytes);
  const uint64_t stride = static_cast<uint64_t>(dim) * inner;
  for (uint64_t o = 0; o < outer; ++o)
    std::memcpy(out.owned.data() + o * run, t.data + o * stride + first, run);
  out.view.data = out.owned.data();
  return out;
}

Expected<std::pair<TensorSlice, TensorSlice>>
sliceMxfp4(const TensorView &packed, const TensorView &scale,
           const TensorSplit &split) {
  constexpr int64_t kBlock = 32; // inputs per scale (K3.md: MXFP4)
  const bool pair = packed.dtype == DType::U8 && scale.dtype == DType::U8 &&
                    packed.shape.size() == 2 && scale.shape.size() == 2 &&
                    packed.shape[0] == scale.shape[0] &&
                    packed.shape[1] * 2 == scale.shape[1] * kBlock;
  if (!pair)
    return makeError("tensors '", packed.name, "' ", shapeString(packed.shape),
                     " and '", scale.name, "' ", shapeString(scale.shape),
                     " are not an MXFP4 matrix (U8 [rows, in/2] and U8 "
                     "[rows, in/32])");
  if (split.axis != 0 && split.axis != 1)
    return makeError(described(packed, split),
                     ": an MXFP4 matrix splits its rows (0) or its inputs (1)");
  if (split.axis == 1 && split.ranks >= 1) {
    const int64_t in = packed.shape[1] * 2;
    if (in % (kBlock * split.ranks) != 0)
      return makeError(described(packed, split), ": ", in, " inputs over ",
                       split.ranks,
                       " ranks do not give every rank whole 32-input blocks "
                       "(a multiple of ",
                       kBlock * split.ranks, " inputs)");
  }
  Expected<TensorSlice> p = sliceTensor(packed, split);
  if (!p)
    return p.status();
  Expected<TensorSlice> s = sliceTensor(scale, split);
  if (!s)
    return s.status();
  return std::make_pair(p.take(), s.take());
}

} // namespace k3
