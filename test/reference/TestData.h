//===- TestData.h - Random inputs and error measures for tests --*- C++ -*-===//
//
// What every kernel-vs-reference test needs: reproducible random NON-ZERO
// data (zeros hide missing terms), poisoned outputs (NaN, so an output the
// kernel never wrote fails the test), and error measures that separate fp32
// accumulation noise from real disagreement: for bf16 outputs, the distance
// in bf16 ulps element by element; for fp32 outputs, max|Δ| / max|ref|.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_REFERENCE_TESTDATA_H
#define K3C_TEST_REFERENCE_TESTDATA_H

#include "test/reference/Reference.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace k3 {
namespace ref {

/// A seeded generator; every test names its seed so a failure replays.
class Rng {
public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi);
  /// Uniform in ±[lo, hi): never zero when lo > 0.
  double signedUniform(double lo, double hi);
  /// Uniform integer in [0, n).
  int64_t index(int64_t n);
  /// 64 random bits.
  uint64_t raw();

private:
  std::mt19937_64 gen_;
};

/// n bf16 values uniform in [−scale, scale], none zero.
std::vector<uint16_t> randomBf16(Rng &rng, int64_t n, double scale);
/// n bf16 values with magnitude in [lo, hi] and random sign.
std::vector<uint16_t> randomBf16Magnitude(Rng &rng, int64_t n, double lo,
                                          double hi);
/// n floats uniform in [lo, hi].
std::vector<float> randomFloats(Rng &rng, int64_t n, double lo, double hi);
/// A random MXFP4 matrix [rows, cols]: random codes (no zero code) and
/// scales 2^(e−127) with e in [eLo, eHi].
void randomMxfp4(Rng &rng, int64_t rows, int64_t cols, int eLo, int eHi,
                 std::vector<uint8_t> &packed, std::vector<uint8_t> &scale);

/// bf16 NaN (the pattern written into outputs before a kernel runs).
constexpr uint16_t kBf16Poison = 0x7fc1;
/// A vector of n poisoned bf16 values.
std::vector<uint16_t> poisonedBf16(int64_t n);
/// A vector of n NaN floats.
std::vector<float> poisonedFloats(int64_t n);

/// Distance between two bf16 values in units in the last place (ordered
/// integer distance; −0 and +0 are equal). NaN against anything: INT64_MAX.
int64_t bf16UlpDistance(uint16_t a, uint16_t b);

/// Agreement of a bf16 output with the reference's (already rounded) one.
struct Bf16Stats {
  int64_t n = 0;
  int64_t exact = 0;  ///< same bf16 value
  int64_t oneUlp = 0; ///< one ulp apart (a rounding flip)
  int64_t worse = 0;  ///< more than one ulp apart, or NaN
  int64_t maxUlp = 0;
  /// Off by more than one bf16 ulp of ref plus the caller's absolute slack
  /// (for outputs that can cancel to near zero, where fp32 noise exceeds
  /// an ulp of the tiny result).
  int64_t beyond = 0;
  double maxAbsErr = 0.0; ///< max |got − ref|
  double maxRef = 0.0;    ///< max |ref|
  double relErr() const { return maxRef > 0 ? maxAbsErr / maxRef : maxAbsErr; }
  double flipFraction() const {
    return n ? static_cast<double>(oneUlp) / static_cast<double>(n) : 0.0;
  }
  std::string str() const;
};
Bf16Stats compareBf16(const uint16_t *got, const Vec &ref, int64_t n,
                      double absSlack = 0.0);
Bf16Stats compareBf16(const std::vector<uint16_t> &got, const Vec &ref,
                      double absSlack = 0.0);
/// The spacing of bf16 values at |x| (one ulp).
double bf16Ulp(double x);

/// Agreement of an fp32 output with a float64 one.
struct FloatStats {
  int64_t n = 0;
  int64_t nonFinite = 0;
  double maxAbsErr = 0.0;
  double maxRef = 0.0;
  double relErr() const;
  std::string str() const;
};
FloatStats compareFloat(const float *got, const Vec &ref, int64_t n);
FloatStats compareFloat(const std::vector<float> &got, const Vec &ref);

/// Widens floats to doubles.
Vec fromFloats(const std::vector<float> &x);
/// bf16 bit patterns of R(x).
std::vector<uint16_t> toBf16(const Vec &x);

} // namespace ref
} // namespace k3

#endif // K3C_TEST_REFERENCE_TESTDATA_H
