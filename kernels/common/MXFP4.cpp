//===- MXFP4.cpp - FP4 E2M1 codes with E8M0 block scales ------------------===//
#include "kernels/common/MXFP4.h"

#include <cmath>
#include <limits>

namespace k3 {

static const float kE2m1Magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f,
                                        2.0f, 3.0f, 4.0f, 6.0f};

float e2m1ToFloat(uint8_t code) {
  float m = kE2m1Magnitude[code & 7];
  return (code & 8) ? -m : m;
}

float e8m0ToFloat(uint8_t e) {
  if (e == 255)
    return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(e) - 127);
}

uint8_t floatToE2m1(float v) {
  uint8_t sign = std::signbit(v) ? 8 : 0;
  float a = std::fabs(v);
  if (std::isnan(a))
    return 0;
  // Nearest magnitude; on an exact midpoint pick the even code index.
  int best = 0;
  float bestErr = std::numeric_limits<float>::infinity();
  for (int i = 0; i < 8; ++i) {
    float err = std::fabs(a - kE2m1Magnitude[i]);
    if (err < bestErr || (err == bestErr && (i & 1) == 0 && (best & 1))) {
      best = i;
      bestErr = err;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

void dequantMxfp4Row(const uint8_t *packed, const uint8_t *scale, int64_t in,
                     int64_t row, float *out) {
  const uint8_t *p = packed + row * (in / 2);
  const uint8_t *s = scale + row * (in / kMxfp4BlockSize);
  for (int64_t j = 0; j < in; j += 2) {
    float sc = e8m0ToFloat(s[j / kMxfp4BlockSize]);
    out[j] = e2m1ToFloat(p[j / 2] & 0xf) * sc;
    out[j + 1] = e2m1ToFloat(p[j / 2] >> 4) * sc;
  }
}

void quantizeMxfp4(const float *w, int64_t rows, int64_t in,
                   std::vector<uint8_t> &packed, std::vector<uint8_t> &scale) {
  packed.assign(rows * in / 2, 0);
  scale.assign(rows * in / kMxfp4BlockSize, 127);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < in / kMxfp4BlockSize; ++b) {
      const float *blk = w + r * in + b * kMxfp4BlockSize;
      float amax = 0.0f;
      for (int i = 0; i < kMxfp4BlockSize; ++i)
        amax = std::fmax(amax, std::fabs(blk[i]));
      int e = 127;
      if (amax > 0.0f) {
        // 2^(floor(log2 amax) - 2) puts amax in [4, 8) before saturation.
        e = static_cast<int>(std::floor(std::log2(amax))) - 2 + 127;
        e = e < 0 ? 0 : (e > 254 ? 254 : e);
      }
      scale[r * (in / kMxfp4BlockSize) + b] = static_cast<uint8_t>(e);
      float inv = 1.0f / e8m0ToFloat(static_cast<uint8_t>(e));
      for (int i = 0; i < kMxfp4BlockSize; ++i) {
        uint8_t c = floatToE2m1(blk[i] * inv);
        int64_t col = b * kMxfp4BlockSize + i;
        uint8_t &byte = packed[r * (in / 2) + col / 2];
        byte |= (col & 1) ? static_cast<uint8_t>(c << 4) : c;
      }
    }
  }
}

} // namespace k3
