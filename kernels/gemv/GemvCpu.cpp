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

void linearCpu(const LinearParams &p) {
  std::vector<float> xf = cpu::preparedInput(p.x, p.k, p.normWeight, p.normEps);
  std::vector<float> y(p.n);
  cpu::gemvAcc(p.w, p.n, p.k, xf.data(), y.data());
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
