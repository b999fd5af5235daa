//===- TestData.cpp - Random inputs and error measures for tests ----------===//
#include "test/reference/TestData.h"

#include <cmath>
#include <limits>
#include <sstream>

namespace k3 {
namespace ref {

double Rng::uniform(double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(gen_);
}

double Rng::signedUniform(double lo, double hi) {
  double m = uniform(lo, hi);
  return (gen_() & 1) ? -m : m;
}

uint64_t Rng::raw() { return gen_(); }

int64_t Rng::index(int64_t n) {
  return std::uniform_int_distribution<int64_t>(0, n - 1)(gen_);
}

std::vector<uint16_t> randomBf16(Rng &rng, int64_t n, double scale) {
  std::vector<uint16_t> v(n);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t b;
    do
      b = toBf16Bits(rng.uniform(-scale, scale));
    while ((b & 0x7fff) == 0);
    v[i] = b;
  }
  return v;
}

std::vector<uint16_t> randomBf16Magnitude(Rng &rng, int64_t n, double lo,
                                          double hi) {
  std::vector<uint16_t> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = toBf16Bits(rng.signedUniform(lo, hi));
  return v;
}

std::vector<float> randomFloats(Rng &rng, int64_t n, double lo, double hi) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(rng.uniform(lo, hi));
  return v;
}

void randomMxfp4(Rng &rng, int64_t rows, int64_t cols, int eLo, int eHi,
                 std::vector<uint8_t> &packed, std::vector<uint8_t> &scale) {
  packed.assign(rows * cols / 2, 0);
  scale.assign(rows * cols / 32, 0);
  // Nibbles from the bits of 64-bit draws; magnitude index 0 becomes 1 so no
  // code is ±0 and every weight contributes.
  uint64_t bits = 0;
  int left = 0;
  auto nibble = [&]() {
    if (left == 0) {
      bits = rng.raw();
      left = 16;
    }
    uint8_t c = static_cast<uint8_t>(bits & 0xf);
    bits >>= 4;
    --left;
    return (c & 7) ? c : static_cast<uint8_t>(c | 1);
  };
  for (auto &b : packed) {
    uint8_t lo = nibble();
    uint8_t hi = nibble();
    b = static_cast<uint8_t>(lo | (hi << 4));
  }
  for (auto &s : scale)
    s = static_cast<uint8_t>(eLo + rng.index(eHi - eLo + 1));
}

std::vector<uint16_t> poisonedBf16(int64_t n) {
  return std::vector<uint16_t>(n, kBf16Poison);
}

std::vector<float> poisonedFloats(int64_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

/// Maps bf16 bits onto integers in the order of the values they encode.
static int64_t orderedBf16(uint16_t b) {
  int64_t mag = b & 0x7fff;
  return (b & 0x8000) ? -mag : mag;
}

int64_t bf16UlpDistance(uint16_t a, uint16_t b) {
  if ((a & 0x7fff) > 0x7f80 || (b & 0x7fff) > 0x7f80)
    return std::numeric_limits<int64_t>::max();
  int64_t d = orderedBf16(a) - orderedBf16(b);
  return d < 0 ? -d : d;
}

std::string Bf16Stats::str() const {
  std::ostringstream os;
  os << n << " values: " << exact << " exact, " << oneUlp << " at 1 ulp ("
     << 100.0 * flipFraction() << "%), " << worse << " worse (max " << maxUlp
     << " ulp), " << beyond
     << " beyond 1 ulp + slack; max|diff|/max|ref| = " << relErr();
  return os.str();
}

double bf16Ulp(double x) {
  int e = 0;
  std::frexp(std::fabs(x), &e); // |x| = m 2^e, m in [0.5, 1)
  if (x == 0.0 || e < -125)
    e = -125; // bf16 subnormal spacing, as for float
  return std::ldexp(1.0, e - 8);
}

Bf16Stats compareBf16(const uint16_t *got, const Vec &ref, int64_t n,
                      double absSlack) {
  Bf16Stats s;
  s.n = n;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t r = toBf16Bits(ref[i]);
    int64_t u = bf16UlpDistance(got[i], r);
    if (u == 0)
      ++s.exact;
    else if (u == 1)
      ++s.oneUlp;
    else
      ++s.worse;
    s.maxUlp = std::max(s.maxUlp, u);
    double g = fromBf16Bits(got[i]);
    double d = std::fabs(g - ref[i]);
    if (std::isnan(d))
      d = std::numeric_limits<double>::infinity();
    if (d > bf16Ulp(ref[i]) + absSlack)
      ++s.beyond;
    s.maxAbsErr = std::max(s.maxAbsErr, d);
    s.maxRef = std::max(s.maxRef, std::fabs(ref[i]));
  }
  return s;
}

Bf16Stats compareBf16(const std::vector<uint16_t> &got, const Vec &ref,
                      double absSlack) {
  if (got.size() != ref.size()) {
    Bf16Stats s;
    s.n = static_cast<int64_t>(ref.size());
    s.worse = s.n;
    s.beyond = s.n;
    s.maxUlp = std::numeric_limits<int64_t>::max();
    s.maxAbsErr = std::numeric_limits<double>::infinity();
    return s;
  }
  return compareBf16(got.data(), ref, static_cast<int64_t>(ref.size()),
                     absSlack);
}

double FloatStats::relErr() const {
  if (nonFinite)
    return std::numeric_limits<double>::infinity();
  return maxRef > 0 ? maxAbsErr / maxRef : maxAbsErr;
}

std::string FloatStats::str() const {
  std::ostringstream os;
  os << n << " values: max|diff| = " << maxAbsErr << ", max|ref| = " << maxRef
     << ", rel = " << relErr() << ", non-finite " << nonFinite;
  return os.str();
}

FloatStats compareFloat(const float *got, const Vec &ref, int64_t n) {
  FloatStats s;
  s.n = n;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) {
      ++s.nonFinite;
      continue;
    }
    s.maxAbsErr = std::max(s.maxAbsErr, std::fabs(got[i] - ref[i]));
    s.maxRef = std::max(s.maxRef, std::fabs(ref[i]));
  }
  return s;
}

FloatStats compareFloat(const std::vector<float> &got, const Vec &ref) {
  if (got.size() != ref.size()) {
    FloatStats s;
    s.n = static_cast<int64_t>(ref.size());
    s.nonFinite = s.n;
    return s;
  }
  return compareFloat(got.data(), ref, static_cast<int64_t>(ref.size()));
}

Vec fromFloats(const std::vector<float> &x) { return Vec(x.begin(), x.end()); }

std::vector<uint16_t> toBf16(const Vec &x) {
  std::vector<uint16_t> v(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    v[i] = toBf16Bits(x[i]);
  return v;
}

} // namespace ref
} // namespace k3
