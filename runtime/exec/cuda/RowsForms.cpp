//===- RowsForms.cpp - Params of the CUDA multi-row forms -----------------===//
#include "runtime/exec/cuda/RowsForms.h"

#include "kernels/gemv/GemvParams.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace k3 {

namespace {

/// The byte offsets of the pointers in `kernel`'s params that move with a
/// row's arena (the activations), and its input width k.
bool movingFields(const std::string &kernel, const void *params,
                  std::vector<size_t> &moving, int64_t &k) {
  if (kernel == "linear_multi") {
    const auto &p = *static_cast<const LinearMultiParams *>(params);
    k = p.k;
    moving.push_back(offsetof(LinearMultiParams, x));
    for (int e = 0; e < p.count && e < kLinearMultiMax; ++e)
      moving.push_back(offsetof(LinearMultiParams, entries) +
                       e * sizeof(LinearMultiEntry) +
                       offsetof(LinearMultiEntry, out));
    return true;
  }
  if (kernel == "linear") {
    k = static_cast<const LinearParams *>(params)->k;
    for (size_t off :
         {offsetof(LinearParams, x), offsetof(LinearParams, residual),
          offsetof(LinearParams, out), offsetof(LinearParams, outF32)})
      moving.push_back(off);
    return true;
  }
  return false;
}

/// `bytes` with the pointer at `offset` moved by `delta`, unless null.
void movePointer(std::vector<uint8_t> &bytes, size_t offset, uint64_t delta) {
  uint64_t v;
  std::memcpy(&v, bytes.data() + offset, sizeof(v));
  if (v != 0)
    v += delta;
  std::memcpy(bytes.data() + offset, &v, sizeof(v));
}

template <typename P> std::vector<uint8_t> bytesOf(const P &p) {
  std::vector<uint8_t> b(sizeof(P));
  std::memcpy(b.data(), &p, sizeof(P));
  return b;
}

} // namespace

bool hasRowsForm(const std::string &kernel) {
  return std::find(std::begin(kCudaRowsForms), std::end(kCudaRowsForms),
                   kernel) != std::end(kCudaRowsForms);
}

std::optional<RowsLaunch> rowsLaunch(const std::string &kernel,
                                     const std::vector<const void *> &rows,
                                     size_t size, uint64_t arenaStride) {
  std::vector<size_t> moving;
  int64_t k = 0;
  if (rows.size() < 2 || !hasRowsForm(kernel) ||
      !movingFields(kernel, rows[0], moving, k))
    return std::nullopt;
  const size_t expectSize =
      kernel == "linear" ? sizeof(LinearParams) : sizeof(LinearMultiParams);
  if (size != expectSize || arenaStride % 4 != 0)
    return std::nullopt;
  const auto *base = static_cast<const uint8_t *>(rows[0]);
  std::vector<uint8_t> expect(size);
  for (size_t r = 1; r < rows.size(); ++r) {
    expect.assign(base, base + size);
    for (size_t off : moving)
      movePointer(expect, off, arenaStride * r);
    if (std::memcmp(expect.data(), rows[r], size) != 0)
      return std::nullopt;
  }
  RowsLaunch out;
  const int64_t n = static_cast<int64_t>(rows.size());
  out.smem = gemvRowsSmemBytes(k, n);
  const int64_t bf16Stride = static_cast<int64_t>(arenaStride / 2);
  if (kernel == "linear_multi") {
    LinearMultiRowsParams p;
    std::memcpy(&p.one, base, sizeof(p.one));
    p.rows = static_cast<int32_t>(n);
    p.xStride = bf16Stride;
    p.outStride = bf16Stride;
    out.params = bytesOf(p);
  } else {
    LinearRowsParams p;
    std::memcpy(&p.one, base, sizeof(p.one));
    p.rows = static_cast<int32_t>(n);
    p.xStride = bf16Stride;
    p.residualStride = bf16Stride;
    p.outStride = p.one.outF32 ? bf16Stride / 2 : bf16Stride;
    out.params = bytesOf(p);
  }
  return out;
}

} // namespace k3
