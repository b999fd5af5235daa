//===- Norm.cu - RMSNorm (CUDA) -------------------------------------------===//
//
// k3_rms_norm: out = R(R(x · rsqrt(mean(x²) + eps)) · w) for one vector
// (RmsNormParams), the sum of squares in fp32 over the block (the CPU sums
// in 8 lanes: the factor may differ in the last bit, nothing else does).
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CudaCommon.cuh"
#include "kernels/norm/NormParams.h"

using namespace k3;

namespace {

/// 16-byte chunks of x and w a thread keeps in registers between the sum
/// and the write: 8192 columns with 256 threads (K3's widest norm is 7168),
/// so x and w are read once, in one round trip.
constexpr int kRegChunks = 4;

using dev::aligned16;

/// rsqrt(mean + eps) from the block's sum of squares, exactly as the CPU
/// (IEEE division and square root).
__device__ __forceinline__ float factor(float s, int64_t n, float eps) {
  return 1.0f / sqrtf(s / static_cast<float>(n) + eps);
}

} // namespace

/// k3_rms_norm.
/// Grid: any; block 0 does all the work and other blocks return at once
/// (the compiler launches 1 block of 256). One block is right for a vector
/// of at most a few thousand elements, and it is what makes `out == x` safe:
/// every element is read before the block-wide reduction, hence before any
/// element is written.
/// Fast path: x, w and out 16-byte aligned and n <= kRegChunks · 8 ·
/// blockDim.x: one read of x and w, kept in registers. Otherwise x is read
/// twice (same thread reads, then writes, each element). Limits: n >= 1;
/// `out` may alias `x` exactly (not at an offset).
extern "C" __global__ void __launch_bounds__(1024)
    k3_rms_norm(const RmsNormParams p) {
  dev::enterStep();
  __shared__ float scratch[32];
  if (blockIdx.x != 0)
    return;
  const int64_t n = p.n;
  const int tid = threadIdx.x, threads = blockDim.x;

  if (aligned16(p.x) && aligned16(p.w) && aligned16(p.out) &&
      (n >> 3) <= static_cast<int64_t>(kRegChunks) * threads) {
    const uint4 *xv = reinterpret_cast<const uint4 *>(p.x);
    const uint4 *wv = reinterpret_cast<const uint4 *>(p.w);
    const int nv = static_cast<int>(n >> 3);
    uint4 xr[kRegChunks], wr[kRegChunks];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kRegChunks; ++i) {
      const int c = tid + i * threads;
      if (c < nv) {
        xr[i] = __ldg(xv + c);
        wr[i] = __ldg(wv + c);
      }
    }
#pragma unroll
    for (int i = 0; i < kRegChunks; ++i)
      if (tid + i * threads < nv)
        s += dev::sumSquares8(xr[i], 0.0f);
    // The last n % 8 elements: one per thread.
    const int64_t j = (static_cast<int64_t>(nv) << 3) + tid;
    const bool tail = j < n;
    float xt = 0.0f, wt = 0.0f;
    if (tail) {
      xt = dev::bf16ToF(p.x[j]);
      wt = dev::bf16ToF(p.w[j]);
      s += xt * xt;
    }
    const float r = factor(dev::blockSum(s, scratch), n, p.eps);
    uint4 *ov = reinterpret_cast<uint4 *>(p.out);
#pragma unroll
    for (int i = 0; i < kRegChunks; ++i) {
      const int c = tid + i * threads;
      if (c < nv)
        ov[c] = dev::rmsNormChunk(xr[i], wr[i], r);
    }
    if (tail)
      p.out[j] = static_cast<uint16_t>(dev::rmsNormBf16(xt, wt, r));
    return;
  }

  // Any size or alignment: sum, then normalise element by element.
  float s = 0.0f;
  for (int64_t i = tid; i < n; i += threads) {
    const float v = dev::bf16ToF(p.x[i]);
    s += v * v;
  }
  const float r = factor(dev::blockSum(s, scratch), n, p.eps);
  for (int64_t i = tid; i < n; i += threads)
    p.out[i] = static_cast<uint16_t>(
        dev::rmsNormBf16(dev::bf16ToF(p.x[i]), dev::bf16ToF(p.w[i]), r));
}
