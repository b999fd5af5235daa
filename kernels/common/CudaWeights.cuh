//===- CudaWeights.cuh - Weight loads and dot products (CUDA) -*- CUDA -*-===//
//
// The pieces every weight-streaming kernel (gemv, moe) builds its row dot
// products from: streaming loads that bypass L1, the MXFP4 decode (E2M1
// codes as exact fp16 pairs, K3.md §7) fused with 8-column dot products, the
// bf16 8-column dot product and the E8M0 scale steps. Each dot product is
// one sequential fp32 FMA chain over its 8 columns, so a kernel that calls
// it gets the same bits wherever it lives; how a row is split into pieces,
// how many rows a warp reads and how partial sums are combined stay with the
// kernel (they fix its summation order and its register budget).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_CUDAWEIGHTS_CUH
#define K3C_KERNELS_COMMON_CUDAWEIGHTS_CUH

#include "kernels/common/CudaCommon.cuh"

#include <cstdint>

namespace k3 {
namespace dev {

//===--- Streaming loads ------------------------------------------------===//
//
// For data read once per launch (weights): non-coherent, not allocated in
// L1 (which keeps the activations). Never for data the running kernel (or
// one overlapping it) writes.

/// Whether the weight stream asks L2 to evict its lines first
/// (K3C_TUNE_L2_EVICT_FIRST, a measurement knob: a step streams ~3 GB
/// through a 50 MB L2, which otherwise also evicts the kernels' code and the
/// small activations and states the next launches read).
#ifdef K3C_TUNE_L2_EVICT_FIRST
constexpr bool kL2EvictFirst = K3C_TUNE_L2_EVICT_FIRST != 0;
#else
constexpr bool kL2EvictFirst = false;
#endif

/// The L2 policy of the weight stream: evict first.
__device__ __forceinline__ uint64_t streamPolicy() {
  uint64_t p;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

/// 16-byte streaming load; with Seg256 it also asks L2 for the whole
/// 256-byte segment (the neighbouring lanes' bytes): for rows a warp reads
/// contiguously.
template <bool Seg256 = false>
__device__ __forceinline__ uint4 ldStream16(const void *p) {
  // The cache hint is part of the instruction, so one asm per variant.
  uint4 v;
  if constexpr (kL2EvictFirst && Seg256)
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 "
        "{%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(streamPolicy()));
  else if constexpr (kL2EvictFirst)
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 "
        "{%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(streamPolicy()));
  else if constexpr (Seg256)
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  else
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  return v;
}
/// ldStream16<true> kept in program order (a volatile asm, which the
/// compiler neither moves across other volatile asm nor sinks to its first
/// use): for weight loads that must be issued before a griddepcontrol.wait.
__device__ __forceinline__ uint4 ldStream16Ordered(const void *p) {
  uint4 v;
  if constexpr (kL2EvictFirst)
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4."
                 "u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(streamPolicy()));
  else
    asm volatile(
        "ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  return v;
}
/// 8-byte streaming load.
__device__ __forceinline__ uint2 ldStream8(const void *p) {
  uint2 v;
  if constexpr (kL2EvictFirst)
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0, %1}, [%2], "
        "%3;"
        : "=r"(v.x), "=r"(v.y)
        : "l"(p), "l"(streamPolicy()));
  else
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
        : "=r"(v.x), "=r"(v.y)
        : "l"(p));
  return v;
}
/// Streaming load of one byte (an MXFP4 scale), zero-extended.
__device__ __forceinline__ uint32_t ldStreamU8(const uint8_t *p) {
  uint32_t v;
  if constexpr (kL2EvictFirst)
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.u8 %0, [%1], %2;"
        : "=r"(v)
        : "l"(p), "l"(streamPolicy()));
  else
    asm("ld.global.nc.L1::no_allocate.u8 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

//===--- Dot products of 8 columns
//-----------------------------------------===//

/// The 8 bf16 values of a 16-byte chunk, widened (element j to x[j]).
__device__ __forceinline__ void bf16x8ToF(uint4 v, float (&x)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j)
    x[2 * j] = loF(w[j]), x[2 * j + 1] = hiF(w[j]);
}

/// Two fp16 values (low half first) widened to fp32 (exact).
__device__ __forceinline__ float2 halfPair(uint32_t h) {
  float2 f;
  asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\t"
      "cvt.f32.f16 %0, lo;\n\tcvt.f32.f16 %1, hi;\n\t}"
      : "=f"(f.x), "=f"(f.y)
      : "r"(h));
  return f;
}

/// The 8 E2M1 codes of `w` (code j in bits 4j..4j+3: byte i holds columns
/// 2i (low nibble) and 2i + 1) as fp16 pairs, each code c exactly c · 2^-14
/// (mxfp4Dot8 says how): h[0] columns (0, 2), h[1] (4, 6), h[2] (1, 3), h[3]
/// (5, 7), the first of each pair in the low half.
__device__ __forceinline__ void mxfp4Halves(uint32_t w, uint32_t (&h)[4]) {
  const uint32_t odd = (w & 0x80808080u) | ((w >> 3) & 0x0e0e0e0eu);
  const uint32_t even = ((w << 4) & 0x80808080u) | ((w << 1) & 0x0e0e0e0eu);
  // Byte 4 of the pool {v, 0} is zero: [0, H(col a), 0, H(col b)].
  h[0] = __byte_perm(even, 0u, 0x1404u);
  h[1] = __byte_perm(even, 0u, 0x3424u);
  h[2] = __byte_perm(odd, 0u, 0x1404u);
  h[3] = __byte_perm(odd, 0u, 0x3424u);
}

/// acc + Σ_j code_j · x_j · 2^-14 over the 8 E2M1 codes of `w` (code j in
/// bits 4j..4j+3: byte i holds columns 2i (low nibble) and 2i + 1), one FMA
/// per column in column order.
///
/// A code c = (s e1 e0 m) becomes the fp16 value with sign s, exponent field
/// e1 e0 and top mantissa bit m: exactly c · 2^-14 for every code (e = 0
/// lands on fp16's subnormals, 0 and 0.5 · 2^-14). Its high byte is
/// H(c) = s << 7 | (e1 e0 m) << 1, its low byte 0. H of the four odd columns
/// and of the four even columns come from a few word-wide bit operations, a
/// byte permute pairs them into fp16x2 words (zero low bytes), and each half
/// widens to fp32: about 2.4 instructions per code, no table. The caller
/// multiplies the sum by 2^14 · scale (exact short of fp32 under/overflow).
__device__ __forceinline__ float mxfp4Dot8(uint32_t w, const float (&x)[8],
                                           float acc) {
  uint32_t h[4];
  mxfp4Halves(w, h);
  const float2 c02 = halfPair(h[0]), c46 = halfPair(h[1]);
  const float2 c13 = halfPair(h[2]), c57 = halfPair(h[3]);
  acc = fmaf(c02.x, x[0], acc);
  acc = fmaf(c13.x, x[1], acc);
  acc = fmaf(c02.y, x[2], acc);
  acc = fmaf(c13.y, x[3], acc);
  acc = fmaf(c46.x, x[4], acc);
  acc = fmaf(c57.x, x[5], acc);
  acc = fmaf(c46.y, x[6], acc);
  acc = fmaf(c57.y, x[7], acc);
  return acc;
}

/// mxfp4Dot8 against the 8 bf16 activations of a 16-byte chunk.
__device__ __forceinline__ float mxfp4Dot8(uint32_t w, uint4 xv, float acc) {
  float x[8];
  bf16x8ToF(xv, x);
  return mxfp4Dot8(w, x, acc);
}

/// acc + Σ_j w_j · x_j over the 8 bf16 weights of `q`, one FMA per column in
/// column order.
__device__ __forceinline__ float bf16Dot8(uint4 q, const float (&x)[8],
                                          float acc) {
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    acc = fmaf(loF(w[j]), x[2 * j], acc);
    acc = fmaf(hiF(w[j]), x[2 * j + 1], acc);
  }
  return acc;
}

//===--- E8M0 scales
//-------------------------------------------------------===//

/// Largest E8M0 byte for which e8m0Times2p14 is exact: 2^14 · 2^(e - 127)
/// stays a normal float (e = 0 included).
constexpr uint32_t kE8m0FastMax = 240;

/// 2^14 · 2^(e - 127) = 2^(e - 113) in one integer op, for e <=
/// kE8m0FastMax: the factor that turns a mxfp4Dot8 sum into the real one.
/// Larger scales (and NaN) need (sum · 16384.0f) · e8m0ToF(e).
__device__ __forceinline__ float e8m0Times2p14(uint32_t e) {
  return __uint_as_float(e * 0x800000u + 0x07000000u);
}

} // namespace dev
} // namespace k3

#endif // K3C_KERNELS_COMMON_CUDAWEIGHTS_CUH
