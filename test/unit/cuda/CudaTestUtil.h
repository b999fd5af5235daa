//===- CudaTestUtil.h - Running one CUDA kernel against its CPU twin -*- C++
//-*-===//
//
// What every kernel test on the GPU does: skip (not fail) where there is no
// GPU, unless K3C_REQUIRE_GPU=1 (scripts/gpu-check.sh sets it: on the GPU
// machine a skipped test is a failure, with the same message); upload fresh
// random inputs; poison the outputs (0xFF bytes: a bf16 or f32 NaN) on both
// sides before the run; run the CPU implementation and the CUDA entry point on
// the same params struct (host pointers for one, device pointers for the
// other); compare by relative error.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_UNIT_CUDA_CUDATESTUTIL_H
#define K3C_TEST_UNIT_CUDA_CUDATESTUTIL_H

#include "kernels/common/BF16.h"
#include "runtime/exec/cuda/CudaBackend.h"
#include "runtime/exec/cuda/CudaDriver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace k3test {

/// Whether K3C_REQUIRE_GPU is set to something other than "" or "0": then a
/// GPU test that cannot run fails instead of skipping.
inline bool gpuRequired() {
  const char *v = std::getenv("K3C_REQUIRE_GPU");
  return v && *v && std::strcmp(v, "0") != 0;
}

/// Skips the calling test with `message` (stream operands), or fails it with
/// the same message when gpuRequired().
#define K3_SKIP_OR_FAIL(message)                                               \
  do {                                                                         \
    if (::k3test::gpuRequired()) {                                             \
      GTEST_FAIL() << message;                                                 \
    } else {                                                                   \
      GTEST_SKIP() << message;                                                 \
    }                                                                          \
  } while (0)

/// Skips the calling test when there is no usable GPU (CI has none); fails
/// it under K3C_REQUIRE_GPU=1.
#define K3_REQUIRE_GPU()                                                       \
  do {                                                                         \
    ::k3::Expected<::k3::cuda::Driver *> d = ::k3::cuda::Driver::get();        \
    if (!d)                                                                    \
      K3_SKIP_OR_FAIL("no GPU: " << d.message());                              \
  } while (0)

/// Deterministic random data: normal(0, std) as bf16 / f32.
class Rand {
public:
  explicit Rand(uint64_t seed) : gen_(seed) {}
  std::vector<uint16_t> bf16(size_t n, float std = 1.0f) {
    std::normal_distribution<float> d(0.0f, std);
    std::vector<uint16_t> v(n);
    for (auto &x : v)
      x = ::k3::floatToBf16(d(gen_));
    return v;
  }
  std::vector<float> f32(size_t n, float std = 1.0f) {
    std::normal_distribution<float> d(0.0f, std);
    std::vector<float> v(n);
    for (auto &x : v)
      x = d(gen_);
    return v;
  }
  std::vector<float> uniform(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v)
      x = d(gen_);
    return v;
  }
  std::vector<uint8_t> bytes(size_t n) {
    std::uniform_int_distribution<int> d(0, 255);
    std::vector<uint8_t> v(n);
    for (auto &x : v)
      x = static_cast<uint8_t>(d(gen_));
    return v;
  }
  std::mt19937_64 &gen() { return gen_; }

private:
  std::mt19937_64 gen_;
};

/// A device copy of a host vector; `get<T>()` is the device pointer.
struct Dev {
  ::k3::cuda::DeviceBuffer buf;
  template <typename T> static Dev of(const std::vector<T> &host) {
    Dev d;
    auto b =
        ::k3::cuda::DeviceBuffer::upload(host.data(), host.size() * sizeof(T));
    EXPECT_TRUE(b.hasValue()) << b.message();
    if (b)
      d.buf = b.take();
    return d;
  }
  /// `n` elements of T, every byte 0xFF (NaN for bf16 / f32).
  template <typename T> static Dev poisoned(size_t n) {
    return of(std::vector<uint8_t>(n * sizeof(T), 0xFF));
  }
  template <typename T> T *get() const { return buf.as<T>(); }
  template <typename T> std::vector<T> download(size_t n) const {
    return downloadFrom(buf.as<T>(), n);
  }
  /// `n` elements of T at device address `p` (e.g. inside a Dev's buffer).
  template <typename T>
  static std::vector<T> downloadFrom(const T *p, size_t n) {
    std::vector<T> out(n);
    auto d = ::k3::cuda::Driver::get();
    EXPECT_TRUE(d.hasValue());
    if (!d)
      return out;
    ::k3::Status s = (*d)->copyToHost(
        out.data(),
        static_cast<::k3::cuda::CUdeviceptr>(reinterpret_cast<uintptr_t>(p)),
        n * sizeof(T));
    EXPECT_TRUE(s.isOk()) << (s.isOk() ? "" : s.message());
    return out;
  }
};

/// Launches `k3_<kernel>` with `params` (device pointers inside) on a grid
/// of gridXyz and waits; clusterX > 1: in thread-block clusters of that many
/// blocks.
template <typename Params>
::k3::Status launch3(const std::string &kernel, Params params,
                     std::array<int64_t, 3> gridXyz, int64_t blockX = 256,
                     int64_t smem = 0, int64_t clusterX = 1) {
  auto f = ::k3::findCudaKernel(kernel);
  if (!f)
    return f.status();
  auto d = ::k3::cuda::Driver::get();
  if (!d)
    return d.status();
  const int64_t grid[3] = {gridXyz[0], gridXyz[1], gridXyz[2]},
                block[3] = {blockX, 1, 1}, cluster[3] = {clusterX, 1, 1};
  if (smem > 0) { // static + dynamic beyond 48 KiB needs the opt-in
    auto most = (*d)->allowDynamicShared(*f);
    if (!most)
      return most.status();
  }
  K3_RETURN_IF_ERROR((*d)->launch(*f, grid, block, smem, nullptr, &params,
                                  /*programmatic=*/false, cluster));
  return (*d)->synchronize(nullptr);
}

/// launch3 with a grid of (gridX, gridY, 1).
template <typename Params>
::k3::Status launch(const std::string &kernel, Params params, int64_t gridX,
                    int64_t blockX = 256, int64_t smem = 0,
                    int64_t clusterX = 1, int64_t gridY = 1) {
  return launch3(kernel, params, {gridX, gridY, 1}, blockX, smem, clusterX);
}

/// max_i |got − want| / max_i |want| (∞ on NaN or a size mismatch).
inline double relErr(const std::vector<float> &want,
                     const std::vector<float> &got) {
  if (want.size() != got.size())
    return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i]))
      return INFINITY;
    num = std::max(num, std::fabs(double(got[i]) - double(want[i])));
    den = std::max(den, std::fabs(double(want[i])));
  }
  return den > 0 ? num / den : num;
}

inline std::vector<float> widen(const std::vector<uint16_t> &v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = ::k3::bf16ToFloat(v[i]);
  return out;
}

/// Fraction of elements whose bits differ.
template <typename T>
double fractionDiffering(const std::vector<T> &a, const std::vector<T> &b) {
  if (a.size() != b.size() || a.empty())
    return 1.0;
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return double(n) / double(a.size());
}

/// Distance in bf16 ulps (the bit patterns on one ordered integer line).
inline int bf16UlpDistance(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t v) {
    return (v & 0x8000) ? -int(v & 0x7fff) : int(v);
  };
  return std::abs(ordered(a) - ordered(b));
}

/// Largest distance in bf16 steps between same-signed finite values;
/// INT64_MAX when a pair differs in sign or `b` is not finite.
inline int64_t maxUlpDistance(const std::vector<uint16_t> &a,
                              const std::vector<uint16_t> &b) {
  int64_t worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i])
      continue;
    if ((a[i] ^ b[i]) & 0x8000 || !std::isfinite(::k3::bf16ToFloat(b[i])))
      return INT64_MAX;
    worst = std::max<int64_t>(worst, std::abs(int(a[i]) - int(b[i])));
  }
  return worst;
}

/// Compares bf16 outputs with the CPU's: all finite (no poison left), the
/// reference not all zeros, max|diff|/max|ref| <= 1e-2, at most `ulps` apart
/// except for 2 + 0.2% of the elements (tiny outputs of a cancelling sum),
/// and at most `maxDiffering` of the elements different at all. Prints the
/// figures.
inline void expectBf16Near(const std::vector<uint16_t> &want,
                           const std::vector<uint16_t> &got,
                           const std::string &what, int ulps,
                           double maxDiffering) {
  ASSERT_EQ(want.size(), got.size()) << what;
  std::vector<float> w = widen(want), g = widen(got);
  size_t nonFinite = 0, beyond = 0;
  int maxUlp = 0;
  float maxRef = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) {
    nonFinite += !std::isfinite(g[i]);
    maxRef = std::max(maxRef, std::fabs(w[i]));
    const int u = bf16UlpDistance(want[i], got[i]);
    maxUlp = std::max(maxUlp, u);
    beyond += u > ulps;
  }
  const double rel = relErr(w, g), differing = fractionDiffering(want, got);
  std::printf("  %-48s rel %.2e  differing %.4f  max ulp %d  beyond %zu\n",
              what.c_str(), rel, differing, maxUlp, beyond);
  EXPECT_EQ(nonFinite, 0u) << what << ": non-finite outputs (poison left?)";
  EXPECT_GT(maxRef, 0.0f) << what << ": the reference is all zeros";
  EXPECT_LE(rel, 1e-2) << what;
  EXPECT_LE(beyond, 2 + want.size() / 500)
      << what << " (max ulp " << maxUlp << ")";
  EXPECT_LE(differing, maxDiffering) << what;
}

/// normal(mean, std) as bf16.
inline std::vector<uint16_t> bf16Around(Rand &r, size_t n, float mean,
                                        float std) {
  std::vector<float> f = r.f32(n, std);
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = ::k3::floatToBf16(mean + f[i]);
  return out;
}

} // namespace k3test

#endif // K3C_TEST_UNIT_CUDA_CUDATESTUTIL_H
