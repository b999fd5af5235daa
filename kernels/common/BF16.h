//===- BF16.h - bfloat16 storage helpers for CPU kernels --------*- C++ -*-===//
//
// Activations and most weights are stored as bfloat16 (the upper 16 bits of an
// IEEE float32). CPU kernels keep them as uint16_t and do all math in float32;
// the conversion back rounds to nearest even, as PyTorch and CUDA do, so the
// CPU backend rounds exactly where the reference model rounds.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_BF16_H
#define K3C_KERNELS_COMMON_BF16_H

#include <cstdint>
#include <cstring>

namespace k3 {

/// Storage type of a bfloat16 value.
using bf16_t = uint16_t;

/// Widens a bfloat16 to float32 (exact).
inline float bf16ToFloat(bf16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

/// Rounds a float32 to the nearest bfloat16, ties to even; NaN stays NaN.
inline bf16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet and non-zero
    return static_cast<bf16_t>((bits >> 16) | 0x0040u);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>((bits + rounding) >> 16);
}

/// Rounds a float32 through bfloat16 and back.
inline float roundBf16(float f) { return bf16ToFloat(floatToBf16(f)); }

} // namespace k3

#endif // K3C_KERNELS_COMMON_BF16_H
