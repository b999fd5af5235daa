//===- GemvCpu.cpp - Decode projections on the CPU ------------------------===//
//
// Computes y[r] = Σ_k W[r,k]·x̂[k] in fp32 (cpu::gemvAcc: one row at a time,
// row-major, 8-lane summation order), where x̂ is x or, with a pre-norm,
// cpu::rmsNormBf16(x) — the very helper rms_norm uses, hence bit-identical to
// the unfused chain. The bf16 output is R(y), or R(R(y) + residual). MXFP4
// rows are dequantised exactly to fp32 first (W4A16), so a bf16 matrix holding
// the dequantised values gives the same bits.
//
// Limits: MXFP4 needs k % 32 == 0. The CPU version allocates its scratch
// (the normed input and one dequantised row) per call.
//
//===----------------------------------------------------------------------===//
#include "kernels/gemv/GemvCpu.h"
#include "kernels/common/CpuMath.h"

#include <vector>

namespace k3 {

namespace {

/// linearCpu's epilogue: y (fp32) to the outputs.
void linearStore(const LinearParams &p, const float *y) {
  if (p.outF32) {
    for (int64_t r = 0; r < p.n; ++r)
      p.outF32[r] = y[r];
    return;
  }
  for (int64_t r = 0; r < p.n; ++r) {
    float v = roundBf16(y[r]);
    if (p.residual)
      v = v + bf16ToFloat(p.residual[r]);
    p.out[r] = floatToBf16(v);
  }
}

/// Every row's prepared input x̂ (`xf`, kept alive) and pointers to them.
template <typename P>
std::vector<const float *> preparedRows(const P *const *rows, size_t m,
                                        int64_t k,
                                        std::vector<std::vector<float>> &xf) {
  xf.resize(m);
  std::vector<const float *> xs(m);
  for (size_t i = 0; i < m; ++i) {
    xf[i] = cpu::preparedInput(rows[i]->x, k, rows[i]->normWeight,
                               rows[i]->normEps);
    xs[i] = xf[i].data();
  }
  return xs;
}

bool sameWeight(const WeightRef &a, const WeightRef &b) {
  return a.format == b.format && a.bf16 == b.bf16 && a.packed == b.packed &&
         a.scale == b.scale;
}

} // namespace

void linearCpu(const LinearParams &p) {
  std::vector<float> xf = cpu::preparedInput(p.x, p.k, p.normWeight, p.normEps);
  std::vector<float> y(p.n);
  cpu::gemvAcc(p.w, p.n, p.k, xf.data(), y.data());
  linearStore(p, y.data());
}

void linearRowsCpu(const LinearParams *const *rows, size_t m) {
  const LinearParams &p0 = *rows[0];
  for (size_t i = 1; i < m; ++i) {
    const LinearParams &p = *rows[i];
    if (!sameWeight(p.w, p0.w) || p.n != p0.n || p.k != p0.k) {
      for (size_t j = 0; j < m; ++j)
        linearCpu(*rows[j]);
      return;
    }
  }
  std::vector<std::vector<float>> xf, y(m);
  const std::vector<const float *> xs = preparedRows(rows, m, p0.k, xf);
  std::vector<float *> ys(m);
  for (size_t i = 0; i < m; ++i) {
    y[i].resize(p0.n);
    ys[i] = y[i].data();
  }
  cpu::gemvAccRows(p0.w, p0.n, p0.k, xs.data(), ys.data(), m);
  for (size_t i = 0; i < m; ++i)
    linearStore(*rows[i], ys[i]);
}

void linearMultiRowsCpu(const LinearMultiParams *const *rows, size_t m) {
  const LinearMultiParams &p0 = *rows[0];
  for (size_t i = 1; i < m; ++i) {
    const LinearMultiParams &p = *rows[i];
    bool same = p.k == p0.k && p.count == p0.count;
    for (int32_t e = 0; same && e < p0.count; ++e)
      same = sameWeight(p.entries[e].w, p0.entries[e].w) &&
             p.entries[e].n == p0.entries[e].n;
    if (!same) {
      for (size_t j = 0; j < m; ++j)
        linearMultiCpu(*rows[j]);
      return;
    }
  }
  std::vector<std::vector<float>> xf, y(m);
  const std::vector<const float *> xs = preparedRows(rows, m, p0.k, xf);
  std::vector<float *> ys(m);
  for (int32_t e = 0; e < p0.count; ++e) {
    const LinearMultiEntry &entry = p0.entries[e];
    for (size_t i = 0; i < m; ++i) {
      y[i].resize(entry.n);
      ys[i] = y[i].data();
    }
    cpu::gemvAccRows(entry.w, entry.n, p0.k, xs.data(), ys.data(), m);
    for (size_t i = 0; i < m; ++i) {
      uint16_t *out = rows[i]->entries[e].out;
      for (int64_t r = 0; r < entry.n; ++r)
        out[r] = floatToBf16(ys[i][r]);
    }
  }
}

void linearMultiCpu(const LinearMultiParams &p) {
  std::vector<float> xf = cpu::preparedInput(p.x, p.k, p.normWeight, p.normEps);
  std::vector<float> y;
  for (int32_t e = 0; e < p.count; ++e) {
    const LinearMultiEntry &entry = p.entries[e];
    y.resize(entry.n);
    cpu::gemvAcc(entry.w, entry.n, p.k, xf.data(), y.data());
    for (int64_t r = 0; r < entry.n; ++r)
      entry.out[r] = floatToBf16(y[r]);
  }
}

} // namespace k3
