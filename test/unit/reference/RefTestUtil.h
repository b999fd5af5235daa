//===- RefTestUtil.h - Kernel outputs against the float64 reference -*- C++
//-*-===//
//
// The acceptance rule the per-op tests share for a bf16 kernel output
// against the float64 reference op.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_UNIT_REFERENCE_REFTESTUTIL_H
#define K3C_TEST_UNIT_REFERENCE_REFTESTUTIL_H

#include "test/reference/Compare.h"
#include "test/reference/Reference.h"
#include "test/reference/TestData.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace k3 {
namespace reftest {

using ref::Vec;

/// What a bf16 output must satisfy against the reference.
struct Tolerance {
  double ulps = 1;          ///< allowed distance, in bf16 ulps of the ref
  double slackOfMax = 1e-5; ///< plus this fraction of max|ref| (absolute)
  double maxInexact = 0.01; ///< fraction of elements not exactly equal
  double maxRelErr = 1e-2;  ///< max|diff| / max|ref|
};

/// Compares a kernel's bf16 output with the reference: all finite, not
/// trivial (at least half the elements non-zero), no element farther than
/// tol.ulps ulps plus slack, few inexact elements, small relative error.
/// `stats` receives the measures.
inline ::testing::AssertionResult agrees(const std::vector<uint16_t> &got,
                                         const Vec &want, const Tolerance &tol,
                                         ref::Bf16Stats *stats = nullptr) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " vs " << want.size();
  int64_t nonZero = 0;
  for (uint16_t b : got) {
    if (!std::isfinite(ref::fromBf16Bits(b)))
      return ::testing::AssertionFailure() << "non-finite output";
    nonZero += (b & 0x7fff) != 0;
  }
  if (2 * nonZero < static_cast<int64_t>(got.size()))
    return ::testing::AssertionFailure() << "trivial output: " << nonZero
                                         << " of " << got.size() << " non-zero";
  double maxRef = 0;
  for (double v : want)
    maxRef = std::max(maxRef, std::fabs(v));
  ref::Bf16Stats s = ref::compareBf16(got, want, tol.slackOfMax * maxRef);
  if (stats)
    *stats = s;
  int64_t far = 0;
  for (size_t i = 0; i < want.size(); ++i)
    far += std::fabs(ref::fromBf16Bits(got[i]) - want[i]) >
           tol.ulps * ref::bf16Ulp(want[i]) + tol.slackOfMax * maxRef;
  if (far > 0)
    return ::testing::AssertionFailure()
           << far << " elements beyond " << tol.ulps
           << " ulp + slack: " << s.str();
  const double inexact = static_cast<double>(s.oneUlp + s.worse) / s.n;
  if (inexact > tol.maxInexact)
    return ::testing::AssertionFailure()
           << "inexact fraction " << inexact << " > " << tol.maxInexact << ": "
           << s.str();
  if (!(s.relErr() < tol.maxRelErr))
    return ::testing::AssertionFailure()
           << "relative error " << s.relErr() << " >= " << tol.maxRelErr << ": "
           << s.str();
  return ::testing::AssertionSuccess() << s.str();
}

/// `got` with the element of largest |want| moved by `factor` (5% by
/// default): the perturbed output a comparison must reject.
inline std::vector<uint16_t> perturbLargest(const std::vector<uint16_t> &got,
                                            const Vec &want,
                                            double factor = 1.05) {
  size_t big = 0;
  for (size_t i = 1; i < want.size(); ++i)
    if (std::fabs(want[i]) > std::fabs(want[big]))
      big = i;
  std::vector<uint16_t> bad = got;
  bad[big] = ref::toBf16Bits(ref::fromBf16Bits(got[big]) * factor);
  return bad;
}

/// n bf16 values uniform in [−scale, scale), none zero, two per 64-bit draw:
/// cheaper than ref::randomBf16 for weight matrices of tens of millions of
/// entries (K3's shared MLP has 132M).
inline std::vector<uint16_t> fastRandomBf16(ref::Rng &rng, int64_t n,
                                            double scale) {
  std::vector<uint16_t> w(n);
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t r = rng.raw();
    const uint64_t halves[2] = {r >> 40, (r >> 8) & 0xffffff};
    for (int j = 0; j < 2 && i + j < n; ++j) {
      // 24 random bits -> [-scale, scale); the bf16 value is the datum.
      const float v = static_cast<float>(scale * (halves[j] * 0x1p-23 - 1.0));
      uint16_t b = ref::toBf16Bits(v);
      if ((b & 0x7fff) == 0)
        b = ref::toBf16Bits(scale / 2);
      w[i + j] = b;
    }
  }
  return w;
}

} // namespace reftest
} // namespace k3

#endif // K3C_TEST_UNIT_REFERENCE_REFTESTUTIL_H
