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

/// Module scratch of one split argmax: each part's candidate, the NaN/Inf
/// flag and the arrival count (the last block resets the count and flag).
struct ArgmaxScratch {
  float *partV;
  long long *partI;
  unsigned *bad;
  unsigned *arrived;
};

/// The argmax of `p` by part `part` of `parts` blocks (see k3_argmax); with
/// one part the block's best is the answer and `scratch` is not touched.
__device__ void argmaxBody(const ArgmaxParams &p, unsigned parts, unsigned part,
                           const ArgmaxScratch &scratch) {
  __shared__ float sv[32];
  __shared__ long long si[32];
  const int tid = threadIdx.x, threads = blockDim.x;
  Best b;
  bool bad = false;
  const bool vec = (reinterpret_cast<uintptr_t>(p.logits) & 15u) == 0;
  // This block's part: [beg, end), in whole float4s on the vector path.
  const int64_t units = vec ? p.n >> 2 : p.n;
  const int64_t per = (units + parts - 1) / parts;
  const int64_t uBeg = min(static_cast<int64_t>(part) * per, units);
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
    if (part == parts - 1)
      for (int64_t j = (units << 2) + tid; j < p.n; j += threads)
        consider(b, bad, __ldg(p.logits + j), j);
  } else {
    for (int64_t j = uBeg + tid; j < uEnd; j += threads)
      consider(b, bad, __ldg(p.logits + j), j);
  }

  bool anyBad = __syncthreads_or(bad) != 0;
  Best t = blockBest(b, sv, si);
  if (parts > 1) {
    if (tid == 0) {
      scratch.partV[part] = t.v;
      scratch.partI[part] = t.i;
      if (anyBad)
        atomicOr(scratch.bad, 1u);
    }
    if (!dev::lastToArrive(scratch.arrived, parts))
      return;
    Best m;
    for (unsigned q = tid; q < parts; q += threads) {
      Best c;
      c.v = __ldcg(&scratch.partV[q]);
      c.i = __ldcg(&scratch.partI[q]);
      m = better(m, c);
    }
    t = blockBest(m, sv, si);
    if (tid == 0)
      anyBad = atomicExch(scratch.bad, 0u) != 0;
  }
  if (tid == 0) {
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

/// Scratch of k3_argmax_rows: row y < kArgmaxRowsSplit's parts.
__device__ float gRowPartV[kArgmaxRowsSplit][kArgmaxRowsMaxParts];
__device__ long long gRowPartI[kArgmaxRowsSplit][kArgmaxRowsMaxParts];
__device__ unsigned gRowPartBad[kArgmaxRowsSplit];
__device__ unsigned gRowPartsArrived[kArgmaxRowsSplit];

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
  const unsigned parts = min(gridDim.x, kMaxParts);
  if (blockIdx.x >= parts)
    return;
  argmaxBody(p, parts, blockIdx.x,
             ArgmaxScratch{gPartV, gPartI, &gPartBad, &gPartsArrived});
}

/// k3_argmax_rows: k3_argmax for several rows (ArgmaxRowsParams), block
/// (x, y) block x of row y's launch: a batch's greedy choices in one launch
/// instead of one launch per row (16 launches of ~4.8 µs at batch 16).
/// Row y < kArgmaxRowsSplit is split over min(grid x, kArgmaxRowsMaxParts)
/// blocks with its own scratch; a row past them is scanned by its block 0
/// alone (the same answer, slower). Each row's results are its single
/// launch's (the merge order makes them independent of the split).
/// Limits: k3_argmax's; launches of k3_argmax_rows must not run
/// concurrently.
extern "C" __global__ void __launch_bounds__(1024)
    k3_argmax_rows(const ArgmaxRowsParams rp) {
  __shared__ __align__(16) dev::RowParams<ArgmaxParams> row;
  dev::loadRowParams(rp.rows, row);
  dev::enterStep();
  const unsigned y = blockIdx.y;
  const unsigned parts =
      y < kArgmaxRowsSplit
          ? min(gridDim.x, static_cast<unsigned>(kArgmaxRowsMaxParts))
          : 1u;
  if (blockIdx.x >= parts)
    return;
  const unsigned r = min(y, unsigned(kArgmaxRowsSplit - 1));
  argmaxBody(row.get(), parts, blockIdx.x,
             ArgmaxScratch{gRowPartV[r], gRowPartI[r], &gRowPartBad[r],
                           &gRowPartsArrived[r]});
}
