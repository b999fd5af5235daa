//===- CpuMath.cpp - Shared fp32 building blocks of the CPU kernels -------===//
//
// The out-of-line helpers: RMSNorm and the matrix-vector product that every
// projection, expert and head goes through.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CpuMath.h"
#include "kernels/common/CpuParallel.h"
#include "kernels/common/MXFP4.h"

#include <vector>

namespace k3 {
namespace cpu {

void rmsNormBf16(const uint16_t *x, const uint16_t *w, int64_t n, float eps,
                 uint16_t *out) {
  std::vector<float> xf(n);
  widen(x, n, xf.data());
  float mean = dot(xf.data(), xf.data(), n) / static_cast<float>(n);
  float r = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) {
    float normed = roundBf16(xf[i] * r);
    out[i] = floatToBf16(normed * bf16ToFloat(w[i]));
  }
}

std::vector<float> preparedInput(const uint16_t *x, int64_t n,
                                 const uint16_t *normWeight, float eps) {
  std::vector<float> xf(n);
  if (normWeight) {
    std::vector<uint16_t> normed(n);
    rmsNormBf16(x, normWeight, n, eps, normed.data());
    widen(normed.data(), n, xf.data());
  } else {
    widen(x, n, xf.data());
  }
  return xf;
}

namespace {
/// 2^(e-127) for every E8M0 byte (NaN at 255) and the 16 E2M1 values, built
/// once from the reference helpers in MXFP4.cpp so both agree by
/// construction; a table lookup keeps ldexp out of the inner loop.
struct Mxfp4Tables {
  float scale[256];
  float code[16];
  Mxfp4Tables() {
    for (int e = 0; e < 256; ++e)
      scale[e] = e8m0ToFloat(static_cast<uint8_t>(e));
    for (int c = 0; c < 16; ++c)
      code[c] = e2m1ToFloat(static_cast<uint8_t>(c));
  }
};
const Mxfp4Tables &mxfp4Tables() {
  static const Mxfp4Tables tables;
  return tables;
}
} // namespace

void dequantMxfp4RowFast(const uint8_t *packed, const uint8_t *scale, int64_t k,
                         int64_t row, float *out) {
  const Mxfp4Tables &t = mxfp4Tables();
  const uint8_t *p = packed + row * (k / 2);
  const uint8_t *s = scale + row * (k / kMxfp4BlockSize);
  for (int64_t b = 0; b < k / kMxfp4BlockSize; ++b) {
    float sc = t.scale[s[b]];
    const uint8_t *pb = p + b * (kMxfp4BlockSize / 2);
    float *ob = out + b * kMxfp4BlockSize;
    for (int i = 0; i < kMxfp4BlockSize / 2; ++i) {
      ob[2 * i] = t.code[pb[i] & 0xf] * sc;
      ob[2 * i + 1] = t.code[pb[i] >> 4] * sc;
    }
  }
}

void gemvAcc(const WeightRef &w, int64_t n, int64_t k, const float *x,
             float *y) {
  // Rows are independent and each is summed exactly as in a serial loop, so
  // the row-parallel split cannot change a bit.
  parallelRows(n, n * k, [&](int64_t begin, int64_t end) {
    if (w.format == kWeightMxfp4) {
      std::vector<float> row(k);
      for (int64_t r = begin; r < end; ++r) {
        dequantMxfp4RowFast(w.packed, w.scale, k, r, row.data());
        y[r] = dot(row.data(), x, k);
      }
      return;
    }
    for (int64_t r = begin; r < end; ++r)
      y[r] = dotBf16(w.bf16 + r * k, x, k);
  });
}

void gemvAccRows(const WeightRef &w, int64_t n, int64_t k,
                 const float *const *xs, float *const *ys, size_t m) {
  const int64_t inputs = static_cast<int64_t>(m);
  parallelRows(n, n * k * inputs, [&](int64_t begin, int64_t end) {
    if (w.format == kWeightMxfp4) {
      std::vector<float> row(k);
      for (int64_t r = begin; r < end; ++r) {
        dequantMxfp4RowFast(w.packed, w.scale, k, r, row.data());
        for (size_t i = 0; i < m; ++i)
          ys[i][r] = dot(row.data(), xs[i], k);
      }
      return;
    }
    for (int64_t r = begin; r < end; ++r)
      for (size_t i = 0; i < m; ++i)
        ys[i][r] = dotBf16(w.bf16 + r * k, xs[i], k);
  });
}

} // namespace cpu
} // namespace k3
