//===- MXFP4.h - FP4 E2M1 codes with E8M0 block scales ----------*- C++ -*-===//
//
// The routed experts of K3 are stored MXFP4 in the compressed-tensors layout
// (K3.md §7): `weight_packed` U8 [out, in/2], two E2M1 codes per byte along
// the input dimension with the even column in the low nibble, and
// `weight_scale` U8 [out, in/32], one E8M0 exponent per 32 inputs:
// w = value(code) * 2^(e - 127); e = 255 is NaN. A code times a power of two
// has at most two significant bits, so dequantisation to bf16 is exact
// (outside the far subnormal range), and W4A16 kernels dequantise a tile to
// bf16 and accumulate in fp32.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_MXFP4_H
#define K3C_KERNELS_COMMON_MXFP4_H

#include <cstdint>
#include <vector>

namespace k3 {

/// Inputs sharing one E8M0 scale.
constexpr int kMxfp4BlockSize = 32;

/// Value of an E2M1 code (low 4 bits of `code`): bit 3 is the sign, the low
/// three bits index {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
float e2m1ToFloat(uint8_t code);

/// 2^(e - 127) for e in [0, 254]; NaN for e = 255.
float e8m0ToFloat(uint8_t e);

/// The E2M1 code nearest to `v` (ties to the even code, saturating at ±6).
uint8_t floatToE2m1(float v);

/// Dequantises row `row` of an MXFP4 matrix with `in` inputs into `out`
/// (float, `in` values). `packed` is [rows, in/2], `scale` is [rows, in/32].
void dequantMxfp4Row(const uint8_t *packed, const uint8_t *scale, int64_t in,
                     int64_t row, float *out);

/// Quantises a row-major float matrix [rows, in] (in % 32 == 0) to MXFP4.
/// The block scale is chosen so the block's largest magnitude maps to at most
/// 6 (E2M1's largest value): e = floor(log2(amax)) - 2 + 127, clamped.
void quantizeMxfp4(const float *w, int64_t rows, int64_t in,
                   std::vector<uint8_t> &packed, std::vector<uint8_t> &scale);

} // namespace k3

#endif // K3C_KERNELS_COMMON_MXFP4_H
