//===- Head.cu - Greedy token choice (CUDA) -------------------------------===//
//
// k3_argmax: the index of the largest fp32 logit, ties to the lowest index,
// NaN never chosen, 0 when every logit is NaN (ArgmaxParams) — the same
// answer as argmaxCpu; with the step block bound, also the next step's
// token and position and whether any logit was not finite. Each thread
// keeps its best (value, index); blocks, then the last block to arrive,
// merge them with the order "larger value, then smaller index", so the
// result does not depend on the scan order or the grid.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CudaCommon.cuh"
#include "kernels/head/HeadParams.h"

using namespace k3;

namespace {

/// 16-byte loads in flight per thread.
constexpr int kUnroll = 8;
/// "No candidate yet": loses to every non-NaN logit, -inf included.
constexpr int64_t kNone = INT64_MAX;

/// A candidate: a logit and its index.
struct Best {
  float v = -__builtin_huge_valf();
  long long i = kNone;
};

/// Folds logit `v` at index `i` into `b` (NaN is skipped); `bad` notes a
/// NaN or ±Inf.
__device__ __forceinline__ void consider(Best &b, bool &bad, float v,
                                         int64_t i) {
  bad |= !(fabsf(v) <= 3.402823466e38f);
  if (v > b.v || (v == b.v && i < b.i))
    b = Best{v, i};
}

/// The better of two candidates (larger value, then smaller index).
__device__ __forceinline__ Best better(Best a, Best b) {
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

__device__ __forceinline__ Best warpBest(Best b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Best other;
    other.v = __shfl_xor_sync(0xffffffffu, b.v, o);
    other.i = __shfl_xor_sync(0xffffffffu, b.i, o);
    b = better(b, other);
  }
  return b;
}

/// Most blocks that share one argmax (module scratch for their candidates).
constexpr unsigned kMaxParts = 1024;
/// Each block's candidate and the launch's NaN/Inf flag and arrival count:
/// module scratch (launches of k3_argmax must not run concurrently; the
/// last block resets the count and the flag).
__device__ float gPartV[kMaxParts];
__device__ long long gPartI[kMaxParts];
__device__ unsigned gPartBad;
__device__ unsigned gPartsArrived;

/// The block's best over thread candidates `b` (every thread gets it).
__device__ Best blockBest(Best b, float *sv, long long *si) {
  b = warpBest(b);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = b.v;
    si[warp] = b.i;
  }
  __syncthreads();
  Best t;
  if (lane < static_cast<int>(blockDim.x >> 5)) {
    t.v = sv[lane];
    t.i = si[lane];
  }
  t = warpBest(t);
  __syncthreads(); // sv, si may be reused
  return t;
}

} // namespace

/// k3_argmax.
/// Grid: any. Block b of the first P = min(grid, kMaxParts) scans the b-th
/// of P contiguous parts of the logits (whole float4s), writes its best to
/// module scratch, and the last block to arrive merges the P candidates and
/// writes the results (the merge order "larger value, then smaller index"
/// makes them independent of the split). One block alone was the whole
/// argmax's cost: 27 µs for 163840 logits, one SM's bandwidth; the plan's
/// grid spreads them over 64 blocks. 256 threads with kUnroll float4 loads
/// in flight each keep 32 KiB outstanding per block.
/// Limits: n >= 1. The float4 path needs `logits` 16-byte aligned; otherwise
/// the scan is element-wise.
extern "C" __global__ void __launch_bounds__(1024)
    k3_argmax(const ArgmaxParams p) {
  dev::enterStep();
  __shared__ float sv[32];
  __shared__ long long si[32];
  const unsigned parts = min(gridDim.x, kMaxParts);
  if (blockIdx.x >= parts)
    return;
  const int tid = threadIdx.x, threads = blockDim.x;
  Best b;
  bool bad = false;
  const bool vec = (reinterpret_cast<uintptr_t>(p.logits) & 15u) == 0;
  // This block's part: [beg, end), in whole float4s on the vector path.
  const int64_t units = vec ? p.n >> 2 : p.n;
  const int64_t per = (units + parts - 1) / parts;
  const int64_t uBeg = min(static_cast<int64_t>(blockIdx.x) * per, units);
  const int64_t uEnd = min(uBeg + per, units);
  if (vec) {
    const float4 *lv = reinterpret_cast<const float4 *>(p.logits);
    for (int64_t c0 = uBeg + tid; c0 < uEnd;
         c0 += static_cast<int64_t>(kUnroll) * threads) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + static_cast<int64_t>(u) * threads;
        v[u] = c < uEnd ? __ldg(lv + c) : make_float4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + static_cast<int64_t>(u) * threads;
        if (c < uEnd) {
          consider(b, bad, v[u].x, 4 * c);
          consider(b, bad, v[u].y, 4 * c + 1);
          consider(b, bad, v[u].z, 4 * c + 2);
          consider(b, bad, v[u].w, 4 * c + 3);
        }
      }
    }
    // The tail past the last float4, by the last part.
    if (blockIdx.x == parts - 1)
      for (int64_t j = (units << 2) + tid; j < p.n; j += threads)
        consider(b, bad, __ldg(p.logits + j), j);
  } else {
    for (int64_t j = uBeg + tid; j < uEnd; j += threads)
      consider(b, bad, __ldg(p.logits + j), j);
  }

  const bool anyBad = __syncthreads_or(bad) != 0;
  const Best mine = blockBest(b, sv, si);
  if (tid == 0) {
    gPartV[blockIdx.x] = mine.v;
    gPartI[blockIdx.x] = mine.i;
    if (anyBad)
      atomicOr(&gPartBad, 1u);
  }
  if (!dev::lastToArrive(&gPartsArrived, parts))
    return;
  Best t;
  for (unsigned q = tid; q < parts; q += threads) {
    Best c;
    c.v = __ldcg(&gPartV[q]);
    c.i = __ldcg(&gPartI[q]);
    t = better(t, c);
  }
  t = blockBest(t, sv, si);
  if (tid == 0) {
    const bool nonFinite = atomicExch(&gPartBad, 0u) != 0;
    const int64_t id = t.i == kNone ? 0 : t.i;
    if (p.outId)
      *p.outId = id;
    if (p.step) { // the next step's inputs (StepInputs.h)
      p.step[kStepToken] = id;
      p.step[kStepPos] += 1;
      p.step[kStepNonFinite] = nonFinite ? 1 : 0;
    }
  }
}
