//===- mxfp4_test.cpp - MXFP4 helpers against K3.md §7
//---------------------===//
//
// kernels/common/MXFP4.{h,cpp} decodes every routed-expert weight of K3, so a
// wrong table entry or a swapped nibble corrupts the model silently. These
// tests pin it to the literal K3.md §7 table and to the reference's own
// bit-field decoder, and check quantise -> dequantise is exact on values that
// MXFP4 can represent.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/MXFP4.h"
#include "test/reference/Reference.h"
#include "test/reference/TestData.h"

#include <gtest/gtest.h>

#include <cmath>

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

} // namespace
