//===- KernelTestUtil.h - Random inputs for the kernel smoke tests -*- C++
//-*-===//
//
// Deterministic pseudo-random bf16/fp32/MXFP4 data (a fixed xorshift, so a
// failure reproduces everywhere) and a bitwise comparison that reports the
// first differing element.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_UNIT_KERNELS_KERNELTESTUTIL_H
#define K3C_TEST_UNIT_KERNELS_KERNELTESTUTIL_H

#include "kernels/common/BF16.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace k3::test {

/// xorshift64*: small, fast, identical on every platform.
class Rng {
public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1Dull;
  }
  /// Uniform in [-1, 1).
  float uniform() {
    return static_cast<float>(next() >> 40) / 8388608.0f - 1.0f;
  }
  /// Uniform in [-scale, scale), never exactly zero.
  float nonZero(float scale) {
    float v = uniform() * scale;
    return v == 0.0f ? scale * 0.5f : v;
  }

private:
  uint64_t s_;
};

inline std::vector<uint16_t> randomBf16(Rng &rng, int64_t n, float scale) {
  std::vector<uint16_t> v(n);
  for (auto &x : v)
    x = floatToBf16(rng.nonZero(scale));
  return v;
}

inline std::vector<float> randomF32(Rng &rng, int64_t n, float scale) {
  std::vector<float> v(n);
  for (auto &x : v)
    x = rng.nonZero(scale);
  return v;
}

inline std::vector<uint8_t> randomBytes(Rng &rng, int64_t n, int lo, int hi) {
  std::vector<uint8_t> v(n);
  for (auto &x : v)
    x = static_cast<uint8_t>(lo + static_cast<int>(rng.next() % (hi - lo + 1)));
  return v;
}

/// Bitwise equality of two arrays of trivially copyable values.
template <typename T>
::testing::AssertionResult sameBits(const std::vector<T> &a,
                                    const std::vector<T> &b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure()
           << "sizes differ: " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure()
             << "first difference at element " << i << " of " << a.size();
  return ::testing::AssertionSuccess();
}

} // namespace k3::test

#endif // K3C_TEST_UNIT_KERNELS_KERNELTESTUTIL_H
