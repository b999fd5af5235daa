//===- mxfp4_test.cpp - MXFP4 helpers against K3.md §7
//---------------------===//
//
// kernels/common/MXFP4.{h,cpp} decodes every routed-expert weight of K3, so a
// wrong table entry or a swapped nibble corrupts the model silently. These
// tests pin it to the literal K3.md §7 table and to the reference's own
// bit-field decoder, and check quantise -> dequantise is exact on values that
// MXFP4 can represent. The fast row decoder the GEMV and MoE CPU kernels
// actually use (cpu::dequantMxfp4RowFast, through cpu::gemvAcc) is held to
// a plain float64 decode written here from K3.md §7 alone, over every byte
// (all 16 codes in both nibbles) under every exponent class (subnormal
// 2^-127, normal, 2^127 where codes >= 2 overflow fp32, NaN at 255); the
// same comparison rejects a decoder with the nibbles swapped, one with
// 16-input blocks, one off by one in the exponent bias and one that flushes
// fp32 subnormals.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CpuMath.h"
#include "kernels/common/MXFP4.h"
#include "test/reference/Reference.h"
#include "test/reference/TestData.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>

using namespace k3;

namespace {

/// K3.md §7, verbatim: the low three bits index this list; bit 3 is the sign.
const double kSpecMagnitude[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

double specValue(uint8_t code) {
  double m = kSpecMagnitude[code & 7];
  return (code & 8) ? -m : m;
}

TEST(Mxfp4, EveryE2m1CodeDecodesToTheSpecValue) {
  for (int c = 0; c < 16; ++c) {
    double want = specValue(static_cast<uint8_t>(c));
    EXPECT_EQ(e2m1ToFloat(static_cast<uint8_t>(c)), want) << "code " << c;
    EXPECT_EQ(ref::e2m1Value(static_cast<uint8_t>(c)), want)
        << "reference decoder, code " << c;
    // Only the low nibble is the code: stray high bits must not leak in.
    EXPECT_EQ(e2m1ToFloat(static_cast<uint8_t>(c | 0xa0)), want)
        << "code " << c << " with high bits set";
  }
  // Code 8 is -0: same value as +0 but the sign must be there.
  EXPECT_TRUE(std::signbit(e2m1ToFloat(8)));
  EXPECT_FALSE(std::signbit(e2m1ToFloat(0)));
}

TEST(Mxfp4, E8m0Edges) {
  EXPECT_EQ(e8m0ToFloat(127), 1.0f);
  EXPECT_EQ(e8m0ToFloat(128), 2.0f);
  EXPECT_EQ(e8m0ToFloat(126), 0.5f);
  // 2^-127 is a float subnormal: it must not flush to zero.
  EXPECT_EQ(static_cast<double>(e8m0ToFloat(0)), std::ldexp(1.0, -127));
  EXPECT_GT(e8m0ToFloat(0), 0.0f);
  EXPECT_EQ(static_cast<double>(e8m0ToFloat(254)), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(e8m0ToFloat(255)));
  EXPECT_TRUE(std::isnan(ref::e8m0Value(255)));
  for (int e = 0; e < 255; ++e)
    EXPECT_EQ(static_cast<double>(e8m0ToFloat(static_cast<uint8_t>(e))),
              ref::e8m0Value(static_cast<uint8_t>(e)))
        << "e = " << e;
}

TEST(Mxfp4, NearestCodeAndTies) {
  for (int c = 0; c < 16; ++c) {
    if (c == 8)
      continue; // -0 is checked below
    EXPECT_EQ(floatToE2m1(static_cast<float>(specValue(c))), c) << "code " << c;
  }
  EXPECT_EQ(floatToE2m1(-0.0f) & 7, 0);
  // Midpoints go to the even code index.
  struct Tie {
    float v;
    uint8_t code;
  } ties[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4},
              {2.5f, 4},  {3.5f, 6},  {5.0f, 6},  {-2.5f, 12}};
  for (const Tie &t : ties)
    EXPECT_EQ(floatToE2m1(t.v), t.code) << "value " << t.v;
  // Beyond 6 saturates.
  EXPECT_EQ(floatToE2m1(100.0f), 7);
  EXPECT_EQ(floatToE2m1(-7.0f), 15);
}

TEST(Mxfp4, NibbleOrderEvenColumnLow) {
  // One row of 32 inputs, scale 2^0: byte 0 = 0x72 means column 0 has code 2
  // (1.0) and column 1 code 7 (6.0).
  std::vector<uint8_t> packed(16, 0), scale(1, 127);
  packed[0] = 0x72;
  packed[15] = 0x9e; // column 30: code 0xe (-4), column 31: code 9 (-0.5)
  std::vector<float> out(32, NAN);
  dequantMxfp4Row(packed.data(), scale.data(), 32, 0, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 6.0f);
  EXPECT_EQ(out[30], -4.0f);
  EXPECT_EQ(out[31], -0.5f);
  for (int i = 2; i < 30; ++i)
    EXPECT_EQ(out[i], 0.0f) << "column " << i;
  ref::Vec r =
      ref::WeightRef::fromMxfp4(packed.data(), scale.data(), 1, 32).row(0);
  for (int i = 0; i < 32; ++i)
    EXPECT_EQ(r[i], out[i]) << "reference decoder, column " << i;

  // And the packer puts them back the same way.
  std::vector<float> w(32, 0.0f);
  w[0] = 1.0f;
  w[1] = 6.0f;
  std::vector<uint8_t> p2, s2;
  quantizeMxfp4(w.data(), 1, 32, p2, s2);
  ASSERT_EQ(p2.size(), 16u);
  ASSERT_EQ(s2.size(), 1u);
  EXPECT_EQ(p2[0], 0x72);
  EXPECT_EQ(s2[0], 127);
}

TEST(Mxfp4, ScaleAppliesPerBlockOf32) {
  // Two blocks with different scales; all codes 2 (1.0).
  std::vector<uint8_t> packed(32, 0x22), scale = {130, 120};
  std::vector<float> out(64, NAN);
  dequantMxfp4Row(packed.data(), scale.data(), 64, 0, out.data());
  for (int i = 0; i < 32; ++i)
    EXPECT_EQ(out[i], 8.0f) << i;
  for (int i = 32; i < 64; ++i)
    EXPECT_EQ(static_cast<double>(out[i]), std::ldexp(1.0, -7)) << i;
  // Scale 255 is NaN for the whole block only.
  scale = {127, 255};
  dequantMxfp4Row(packed.data(), scale.data(), 64, 0, out.data());
  EXPECT_EQ(out[31], 1.0f);
  EXPECT_TRUE(std::isnan(out[32]));
  EXPECT_TRUE(std::isnan(out[63]));
}

TEST(Mxfp4, QuantiseDequantiseIsExactOnRepresentableValues) {
  // Each block: a random exponent and random codes, with one element forced
  // to ±4 or ±6 so the block maximum fixes the scale the quantiser picks
  // (floor(log2 amax) - 2 + 127 = e). Then every value is representable and
  // the round trip must reproduce it bit for bit, codes and scales included.
  ref::Rng rng(7);
  const int64_t rows = 24, cols = 256;
  std::vector<float> w(rows * cols);
  std::vector<uint8_t> wantPacked(rows * cols / 2, 0),
      wantScale(rows * cols / 32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b) {
      int e = static_cast<int>(100 + rng.index(50));
      wantScale[r * (cols / 32) + b] = static_cast<uint8_t>(e);
      int64_t big = rng.index(32);
      for (int64_t i = 0; i < 32; ++i) {
        uint8_t code;
        if (i == big)
          code =
              static_cast<uint8_t>((rng.index(2) ? 6 : 7) | 8 * rng.index(2));
        else
          code = static_cast<uint8_t>(1 + rng.index(7) + 8 * rng.index(2));
        int64_t col = b * 32 + i;
        w[r * cols + col] =
            static_cast<float>(specValue(code) * std::ldexp(1.0, e - 127));
        wantPacked[r * (cols / 2) + col / 2] |=
            (col & 1) ? static_cast<uint8_t>(code << 4) : code;
      }
    }
  std::vector<uint8_t> packed, scale;
  quantizeMxfp4(w.data(), rows, cols, packed, scale);
  EXPECT_EQ(packed, wantPacked);
  EXPECT_EQ(scale, wantScale);

  std::vector<float> out(cols);
  ref::WeightRef wr =
      ref::WeightRef::fromMxfp4(packed.data(), scale.data(), rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(out.begin(), out.end(), NAN);
    dequantMxfp4Row(packed.data(), scale.data(), cols, r, out.data());
    ref::Vec rr = wr.row(r);
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(out[c], w[r * cols + c]) << "row " << r << " col " << c;
      ASSERT_EQ(rr[c], w[r * cols + c])
          << "reference, row " << r << " col " << c;
    }
  }
}

TEST(Mxfp4, DequantMatchesReferenceOnRandomMatrices) {
  // Random codes and scales over a wide exponent range, at an expert shape of
  // K3 (w1: [3072, 3584]) cut to a few rows to stay fast.
  ref::Rng rng(11);
  const int64_t rows = 16, cols = 3584;
  std::vector<uint8_t> packed, scale;
  ref::randomMxfp4(rng, rows, cols, 60, 190, packed, scale);
  ref::WeightRef wr =
      ref::WeightRef::fromMxfp4(packed.data(), scale.data(), rows, cols);
  std::vector<float> out(cols);
  int64_t mismatches = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(out.begin(), out.end(), NAN);
    dequantMxfp4Row(packed.data(), scale.data(), cols, r, out.data());
    ref::Vec rr = wr.row(r);
    for (int64_t c = 0; c < cols; ++c)
      mismatches += static_cast<double>(out[c]) != rr[c];
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Mxfp4, QuantiseSaturatesAndKeepsZeroBlocks) {
  // A zero block keeps scale 127 and zero codes. Elsewhere the error is at
  // most 2 * scale: half the widest code gap (4 -> 6) is 1, and the scale
  // rule lets amax / scale reach just under 8, which saturates to 6.
  ref::Rng rng(3);
  const int64_t cols = 64;
  std::vector<float> w(cols, 0.0f);
  for (int64_t i = 32; i < 64; ++i)
    w[i] = static_cast<float>(rng.signedUniform(0.1, 3.0));
  std::vector<uint8_t> packed, scale;
  quantizeMxfp4(w.data(), 1, cols, packed, scale);
  EXPECT_EQ(scale[0], 127);
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(packed[i] & 0x77, 0) << "byte " << i;
  std::vector<float> out(cols);
  dequantMxfp4Row(packed.data(), scale.data(), cols, 0, out.data());
  double sc = ref::e8m0Value(scale[1]);
  for (int64_t i = 32; i < 64; ++i)
    EXPECT_LE(std::fabs(out[i] - w[i]), 2.0 * sc) << i;
}

//===----------------------------------------------------------------------===//
// The fast row decoder of the CPU kernels
//===----------------------------------------------------------------------===//

/// Column `c` of row `r` decoded in float64 from K3.md §7 alone: two codes per
/// byte along the input dimension, the even column in the low nibble; bit 3
/// the sign, the low three bits index the magnitude list; one E8M0 scale per
/// 32 inputs, 2^(e − 127), NaN at e = 255.
double plainDecode(const uint8_t *packed, const uint8_t *scale, int64_t cols,
                   int64_t r, int64_t c) {
  const uint8_t byte = packed[r * (cols / 2) + c / 2];
  const uint8_t code = (c % 2 == 0) ? (byte & 0xf) : (byte >> 4);
  const uint8_t e = scale[r * (cols / 32) + c / 32];
  if (e == 255)
    return std::numeric_limits<double>::quiet_NaN();
  return specValue(code) * std::ldexp(1.0, static_cast<int>(e) - 127);
}

/// The fp32 a correct decoder must produce for the exact value `v`: v itself
/// (a code times a power of two has at most two significant bits, so every
/// such value in fp32's range, subnormals included, is exact), ±inf from
/// 2^128 up (codes >= 2 at e = 254, >= 4 at e = 253: round to nearest
/// overflows), NaN for NaN. The sign of zero is kept (code 8 is −0).
float expectedFloat(double v) {
  if (std::isnan(v))
    return std::numeric_limits<float>::quiet_NaN();
  if (std::fabs(v) >= std::ldexp(1.0, 128))
    return v > 0 ? std::numeric_limits<float>::infinity()
                 : -std::numeric_limits<float>::infinity();
  const float f = static_cast<float>(v);
  EXPECT_EQ(static_cast<double>(f), v) << "not exact in fp32";
  return f;
}

/// Row r of a decoder's output against the plain decode: NaN exactly where
/// expected, otherwise the same value with the same sign (so −0 != +0).
::testing::AssertionResult rowAgrees(const float *got, const uint8_t *packed,
                                     const uint8_t *scale, int64_t cols,
                                     int64_t r) {
  for (int64_t c = 0; c < cols; ++c) {
    const float want = expectedFloat(plainDecode(packed, scale, cols, r, c));
    const bool ok = std::isnan(want) ? std::isnan(got[c])
                                     : got[c] == want && std::signbit(got[c]) ==
                                                             std::signbit(want);
    if (!ok) {
      const uint8_t byte = packed[r * (cols / 2) + c / 2];
      return ::testing::AssertionFailure()
             << "row " << r << " column " << c << " (byte 0x" << std::hex
             << int(byte) << std::dec << ", e "
             << int(scale[r * (cols / 32) + c / 32]) << "): got " << got[c]
             << ", want " << want;
    }
  }
  return ::testing::AssertionSuccess();
}

/// Every byte value 0..255 in order (block b holds bytes 16b .. 16b+15), one
/// row per exponent class, block b of row r scaled by kExps[(r + b) % n]: so
/// every code in every nibble position meets every exponent.
struct CodeTable {
  static constexpr int64_t kCols = 512;
  std::vector<int> exps = {0,   1,   2,   60,  100, 126, 127,
                           128, 150, 200, 253, 254, 255};
  int64_t rows;
  std::vector<uint8_t> packed, scale;
  CodeTable() : rows(static_cast<int64_t>(exps.size())) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int b = 0; b < 256; ++b)
        packed.push_back(static_cast<uint8_t>(b));
      for (int64_t blk = 0; blk < kCols / 32; ++blk)
        scale.push_back(static_cast<uint8_t>(exps[(r + blk) % rows]));
    }
  }
};

TEST(Mxfp4Fast, EveryCodeNibbleAndExponentMatchesPlainDecode) {
  const CodeTable t;
  const int64_t cols = CodeTable::kCols;
  // Poison: -777 has 10 significant bits, so no MXFP4 value equals it, and
  // it is not NaN (which some expected values are).
  std::vector<float> out(cols);
  int64_t infs = 0, nans = 0, subnormals = 0, negZeros = 0;
  for (int64_t r = 0; r < t.rows; ++r) {
    std::fill(out.begin(), out.end(), -777.0f);
    cpu::dequantMxfp4RowFast(t.packed.data(), t.scale.data(), cols, r,
                             out.data());
    EXPECT_TRUE(
        rowAgrees(out.data(), t.packed.data(), t.scale.data(), cols, r));
    for (float v : out) {
      infs += std::isinf(v);
      nans += std::isnan(v);
      subnormals += std::fpclassify(v) == FP_SUBNORMAL;
      negZeros += v == 0.0f && std::signbit(v);
    }
  }
  // The table really reaches the edges it claims to.
  EXPECT_GT(infs, 0);
  EXPECT_GT(nans, 0);
  EXPECT_GT(subnormals, 0);
  EXPECT_GT(negZeros, 0);
  std::cout << "[mxfp4 fast decode] " << t.rows * cols << " values: " << infs
            << " inf, " << nans << " NaN, " << subnormals << " subnormal, "
            << negZeros << " -0\n";
}

TEST(Mxfp4Fast, WrongDecodersAreRejected) {
  // Test-local decoders with one mistake each, written like the fast one;
  // the comparison above must reject every one of them.
  const CodeTable t;
  const int64_t cols = CodeTable::kCols;
  using Decoder =
      std::function<float(uint8_t byte, bool odd, const uint8_t *s, int64_t c)>;
  auto value = [](uint8_t code, int e, int bias) {
    if (e == 255)
      return std::numeric_limits<float>::quiet_NaN();
    return e2m1ToFloat(code) * std::ldexp(1.0f, e - bias);
  };
  struct Wrong {
    const char *name;
    Decoder decode;
  } wrong[] = {
      {"nibbles swapped (even column in the high nibble)",
       [&](uint8_t byte, bool odd, const uint8_t *s, int64_t c) {
         return value(odd ? (byte & 0xf) : (byte >> 4), s[c / 32], 127);
       }},
      {"16 inputs per scale",
       [&](uint8_t byte, bool odd, const uint8_t *s, int64_t c) {
         return value(odd ? (byte >> 4) : (byte & 0xf), s[(c / 16) % 16], 127);
       }},
      {"exponent bias 128",
       [&](uint8_t byte, bool odd, const uint8_t *s, int64_t c) {
         return value(odd ? (byte >> 4) : (byte & 0xf), s[c / 32], 128);
       }},
      {"fp32 subnormals flushed to zero",
       [&](uint8_t byte, bool odd, const uint8_t *s, int64_t c) {
         float v = value(odd ? (byte >> 4) : (byte & 0xf), s[c / 32], 127);
         return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
       }},
  };
  std::vector<float> out(cols);
  for (const Wrong &w : wrong) {
    bool rejected = false;
    for (int64_t r = 0; r < t.rows; ++r) {
      const uint8_t *p = t.packed.data() + r * (cols / 2);
      const uint8_t *s = t.scale.data() + r * (cols / 32);
      for (int64_t c = 0; c < cols; ++c)
        out[c] = w.decode(p[c / 2], c % 2 == 1, s, c);
      rejected |=
          !rowAgrees(out.data(), t.packed.data(), t.scale.data(), cols, r);
    }
    EXPECT_TRUE(rejected) << w.name << " passed";
  }
  // And the right one, written the same way, passes (the harness is fair).
  for (int64_t r = 0; r < t.rows; ++r) {
    const uint8_t *p = t.packed.data() + r * (cols / 2);
    const uint8_t *s = t.scale.data() + r * (cols / 32);
    for (int64_t c = 0; c < cols; ++c)
      out[c] =
          value(c % 2 ? (p[c / 2] >> 4) : (p[c / 2] & 0xf), s[c / 32], 127);
    EXPECT_TRUE(
        rowAgrees(out.data(), t.packed.data(), t.scale.data(), cols, r));
  }
}

TEST(Mxfp4Fast, RandomExpertRowsMatchPlainDecode) {
  // Rows of a K3 expert's w1 ([3072, 3584]) with random codes and exponents
  // over the whole finite range, decoded at their real row offsets.
  ref::Rng rng(12);
  const int64_t rows = 3072, cols = 3584;
  std::vector<uint8_t> packed(rows * cols / 2), scale(rows * cols / 32);
  for (auto &b : packed)
    b = static_cast<uint8_t>(rng.raw());
  for (auto &e : scale)
    e = static_cast<uint8_t>(rng.index(255)); // 0 .. 254
  std::vector<float> out(cols);
  for (int64_t r : {int64_t(0), int64_t(1), int64_t(1234), rows - 1}) {
    std::fill(out.begin(), out.end(), -777.0f);
    cpu::dequantMxfp4RowFast(packed.data(), scale.data(), cols, r, out.data());
    EXPECT_TRUE(rowAgrees(out.data(), packed.data(), scale.data(), cols, r));
  }
}

} // namespace
