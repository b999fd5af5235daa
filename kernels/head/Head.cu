//===- Head.cu - Greedy token choice (CUDA) -------------------------------===//
//
// k3_argmax: the index of the largest fp32 logit, ties to the lowest index,
// NaN never chosen, 0 when every logit is NaN (ArgmaxParams) — the same
// answer as argmaxCpu; with the step block bound, also the next step's
// token and position and whether any logit was not finite. Each thread keeps its best (value, index) and the
// block merges them with the order "larger value, then smaller index", so
// the result does not depend on the scan order.
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
  int64_t i = kNone;
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

} // namespace

/// k3_argmax.
/// Grid: any; block 0 scans all n logits and other blocks return at once:
/// merging across blocks would need a second pass or a pre-set scratch word,
/// which the params do not carry. 256 threads with kUnroll float4 loads in
/// flight each keep 32 KiB outstanding, enough to read 163840 logits (640
/// KiB, usually still in L2 from lm_head) in a few microseconds.
/// Limits: n >= 1. The float4 path needs `logits` 16-byte aligned; otherwise
/// the scan is element-wise.
extern "C" __global__ void __launch_bounds__(1024)
    k3_argmax(const ArgmaxParams p) {
  dev::enterStep();
  __shared__ float sv[32];
  __shared__ int64_t si[32];
  if (blockIdx.x != 0)
    return;
  const int tid = threadIdx.x, threads = blockDim.x;
  Best b;
  bool bad = false;
  int64_t j = 0;
  if ((reinterpret_cast<uintptr_t>(p.logits) & 15u) == 0) {
    const float4 *lv = reinterpret_cast<const float4 *>(p.logits);
    const int64_t nv = p.n >> 2;
    for (int64_t c0 = tid; c0 < nv;
         c0 += static_cast<int64_t>(kUnroll) * threads) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + static_cast<int64_t>(u) * threads;
        v[u] = c < nv ? __ldg(lv + c) : make_float4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + static_cast<int64_t>(u) * threads;
        if (c < nv) {
          consider(b, bad, v[u].x, 4 * c);
          consider(b, bad, v[u].y, 4 * c + 1);
          consider(b, bad, v[u].z, 4 * c + 2);
          consider(b, bad, v[u].w, 4 * c + 3);
        }
      }
    }
    j = nv << 2;
  }
  for (j += tid; j < p.n; j += threads)
    consider(b, bad, __ldg(p.logits + j), j);

  const bool anyBad = __syncthreads_or(bad) != 0;
  b = warpBest(b);
  const int lane = tid & 31, warp = tid >> 5;
  if (lane == 0) {
    sv[warp] = b.v;
    si[warp] = b.i;
  }
  __syncthreads();
  if (warp == 0) {
    Best t;
    if (lane < (threads >> 5)) {
      t.v = sv[lane];
      t.i = si[lane];
    }
    t = warpBest(t);
    if (lane == 0) {
      const int64_t id = t.i == kNone ? 0 : t.i;
      if (p.outId)
        *p.outId = id;
      if (p.step) { // the next step's inputs (StepInputs.h)
        p.step[kStepToken] = id;
        p.step[kStepPos] += 1;
        p.step[kStepNonFinite] = anyBad ? 1 : 0;
      }
    }
  }
}
