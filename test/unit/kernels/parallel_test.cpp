//===- parallel_test.cpp - Row-parallel CPU GEMV changes no bit -----------===//
//
// gemvAcc splits large GEMVs over the CPU pool by rows; every row must still
// be summed exactly as the serial loop sums it (the CPU kernels are the
// numerical ground truth), for bf16 and MXFP4 weights, at sizes above the
// parallel threshold.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/BF16.h"
#include "kernels/common/CpuMath.h"
#include "kernels/common/CpuParallel.h"
#include "kernels/common/MXFP4.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

namespace {

using namespace k3;

TEST(CpuParallel, CoversEveryRowOnce) {
  for (int64_t n : {1, 2, 7, 100, 4096, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    cpu::parallelRows(n, int64_t(1) << 30, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        hits[static_cast<size_t>(r)]++;
    });
    for (int64_t r = 0; r < n; ++r)
      ASSERT_EQ(hits[static_cast<size_t>(r)].load(), 1) << n << " row " << r;
  }
  EXPECT_GE(cpu::cpuThreads(), 1);
}

TEST(CpuParallel, GemvIsBitIdenticalToTheSerialLoop) {
  // 8M multiply-adds: above the threshold. (k through a volatile: with a
  // constant, GCC's loop analysis of the inlined dot() warns spuriously.)
  volatile int64_t kSize = 4096;
  const int64_t n = 2048, k = kSize;
  std::mt19937 gen(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(n * k)), x(static_cast<size_t>(k));
  for (float &v : wf)
    v = d(gen) * 0.02f;
  for (float &v : x)
    v = roundBf16(d(gen));
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i)
    wb[i] = floatToBf16(wf[i]);
  std::vector<uint8_t> packed, scale;
  quantizeMxfp4(wf.data(), n, k, packed, scale);

  WeightRef bf;
  bf.bf16 = wb.data();
  WeightRef mx;
  mx.format = kWeightMxfp4;
  mx.packed = packed.data();
  mx.scale = scale.data();
  for (const WeightRef &w : {bf, mx}) {
    std::vector<float> got(static_cast<size_t>(n), -1.0f), want(got.size());
    cpu::gemvAcc(w, n, k, x.data(), got.data());
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      if (w.format == kWeightMxfp4) {
        cpu::dequantMxfp4RowFast(w.packed, w.scale, k, r, row.data());
        want[r] = cpu::dot(row.data(), x.data(), k);
      } else {
        want[r] = cpu::dotBf16(w.bf16 + r * k, x.data(), k);
      }
    }
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
        << (w.format == kWeightMxfp4 ? "mxfp4" : "bf16");
    EXPECT_NE(got[n / 2], 0.0f);
  }
}

} // namespace
