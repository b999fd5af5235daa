//===- Mla.cu - MLA (full attention) decode ops (CUDA) --------------------===//
//
// The cache append and the absorbed-form attention of one decode token
// (K3.md §3, NUMERICS.md "MLA"), mirroring MlaCpu.cpp: the same rounding
// points, fp32 everywhere else; only the accumulation order differs (and FMA
// contraction in the dot products).
//
// Wide loads: where L and R are multiples of 8 and the cache / kv_b_proj
// pointers are 16-byte aligned, every cache row and weight row is read as
// 16-byte chunks of 8 bf16 (the K3 shapes); otherwise a scalar path with the
// same structure handles any shape within the limits below.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CudaCommon.cuh"
#include "kernels/mla/MlaParams.h"

using namespace k3;

namespace {

/// Largest latent rank L mla_attend handles (q̂ and ĉ live in shared memory).
constexpr int kMaxLatent = 1024;
/// Floats of shared memory for the per-group partial sums of q̂.
constexpr int kPartFloats = 4096;
/// mla_attend's register budget assumes at most this many threads per block.
constexpr int kAttendMaxThreads = 256;
/// Split over the cache: at most this many row ranges per head, for at most
/// kMaxSplitHeads heads (more heads, or a grid below 2 · heads: one block
/// per head, grid-stride).
constexpr int kMaxSplits = 16;
constexpr int kMaxSplitHeads = 128;
/// Rows per split at least: max(256, 8 · heads). Below it a split's share
/// of the cache costs less than its recomputed q̂, whose L2 traffic grows
/// with the heads (measured on the H200: Kimi-Linear's 32 heads, 8 splits
/// of 9 rows took 49 µs against 34 µs unsplit, 4 splits of 256 rows gave a
/// 4.9% shorter step at 1024 rows; K3's 96 heads, 16 splits took 254 µs
/// against 192 µs unsplit at 4096 rows and 1855 against 2622 µs at 65536).
__device__ __forceinline__ int64_t minSplitRows(int64_t heads) {
  return max(int64_t(256), 8 * heads);
}

/// The split partials of the running mla_attend: per (head, split) the
/// unnormalised Σ_j e^(s_j − M_s) c_j (chunk-transposed as AttendShared's
/// cHat) and (M_s, Σ_j e^(s_j − M_s)). Module scratch, like kda_decode's
/// counters: two mla_attend launches must not run concurrently in one
/// context (the plan's launches are stream-ordered).
__device__ float gMlaPart[kMaxSplitHeads * kMaxSplits * kMaxLatent];
__device__ float2 gMlaStat[kMaxSplitHeads * kMaxSplits];
/// Splits of a head that have finished; the block that finishes the last
/// one combines the head and resets its count.
__device__ unsigned gMlaArrivals[kMaxSplitHeads];

template <int W> using Chunk = dev::Bf16Chunk<W>;

/// −∞: the score of a missing row and the max before the first row.
using dev::negInf;

using dev::prefetchL2Block;

/// Shared memory of mla_attend (one head at a time per block). Latent
/// vectors are stored chunk-transposed, element e of chunk c at e·CL + c
/// (CL = L / W chunks): lanes owning consecutive chunks then touch
/// consecutive words, free of bank conflicts.
struct AttendShared {
  float qHat[kMaxLatent];  ///< q̂ = W_UKᵀ q_nope
  float cHat[kMaxLatent];  ///< ĉ = Σ_j p_j c_j (normalised)
  float part[kPartFloats]; ///< partial sums: of q̂, then of ĉ per warp
  float warpMax[32];       ///< per-warp running max of the scores
  float warpSum[32];       ///< per-warp Σ exp(s − max)
  float splitFac[kMaxSplits]; ///< e^(M_s − M) of each split (the combine)
  int last;                   ///< this block combines the head
};

/// The rows mla_attend attends: step[kStepPos] + 1 when the step block is
/// bound (written by the previous step's argmax: read through L2), else
/// `length`.
__device__ __forceinline__ int64_t attendLength(const MlaAttendParams &p) {
  return p.step ? __ldcg(p.step + kStepPos) + 1 : p.length;
}

/// One head of mla_attend with chunks of W values; a lane owns latent chunks
/// lane + 32k (k < KL) and rope chunks lane + 32k (k < KR) of every cache
/// row, and each warp walks ROWS rows per iteration. With splits > 1 the
/// block attends rows [split · chunk, (split + 1) · chunk) only, leaves its
/// partial in module scratch, and the block finishing the head's last split
/// combines them (splits in order) and computes the output.
template <int W, int KL, int KR, int ROWS>
__device__ void attendHead(const MlaAttendParams &p, int64_t h, int split,
                           int splits, AttendShared &s) {
  const int L = static_cast<int>(p.kvLoraRank);
  const int R = static_cast<int>(p.ropeDim);
  const int64_t P = p.nopeDim, V = p.vDim, T = attendLength(p);
  const int64_t width = L + R;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int threads = blockDim.x, warps = threads >> 5;
  const int CL = L / W, CR = R / W; // chunks of a latent / rope row part

  const uint16_t *q = p.q + h * (P + R);
  const uint16_t *wUK = p.kvB + h * (P + V) * L;
  const uint16_t *wUV = wUK + P * L;
  const int64_t chunk = (T + splits - 1) / splits;
  const int64_t rowBegin = min(T, split * chunk);
  const int64_t rowEnd = min(T, rowBegin + chunk);

  // Request both weight blocks of the head (K3: 2 × 128 KB) from HBM at
  // once: prefetches hold no registers, so the whole working set is in
  // flight, and W_UV's fetch overlaps the q̂ and attention phases (one
  // split asks for W_UV: one block of the head reads it).
  prefetchL2Block(wUK, P * L * 2);
  if (split == 0)
    prefetchL2Block(wUV, V * L * 2);

  // --- q̂[l] = Σ_i W_UK[i][l] q_nope[i]. Thread item (chunk c, group g)
  // sums the rows i ≡ g (mod G) of column chunk c; the G partials are then
  // added in group order (deterministic).
  int G = 1;
  if (CL < threads)
    G = min(threads / CL, kPartFloats / L);
  for (int item = tid; item < CL * G; item += threads) {
    const int c = item % CL, g = item / CL;
    float acc[W];
#pragma unroll
    for (int k = 0; k < W; ++k)
      acc[k] = 0.0f;
    const uint16_t *col = wUK + c * W;
#pragma unroll 8
    for (int64_t i = g; i < P; i += G) {
      Chunk<W> w;
      w.loadRO(col + i * L);
      const float qi = dev::bf16ToF(__ldg(q + i));
#pragma unroll
      for (int k = 0; k < W; ++k)
        acc[k] = fmaf(w.at(k), qi, acc[k]);
    }
    float *dst = (G == 1 ? s.qHat : s.part + g * L) + c;
#pragma unroll
    for (int k = 0; k < W; ++k)
      dst[k * CL] = acc[k];
  }
  __syncthreads();
  if (G > 1) {
    for (int l = tid; l < L; l += threads) {
      float v = s.part[l];
      for (int g = 1; g < G; ++g)
        v += s.part[g * L + l];
      s.qHat[l] = v;
    }
    __syncthreads();
  }

  // --- Scores and ĉ with an online softmax per warp: warp w takes rows
  // w, w + warps, ...; (max, Σ exp, Σ exp·c) are merged across warps below.
  float qh[KL][W], qr[KR][W], acc[KL][W];
#pragma unroll
  for (int k = 0; k < KL; ++k) {
    const int c = lane + 32 * k;
#pragma unroll
    for (int e = 0; e < W; ++e) {
      qh[k][e] = c < CL ? s.qHat[e * CL + c] : 0.0f;
      acc[k][e] = 0.0f;
    }
  }
#pragma unroll
  for (int k = 0; k < KR; ++k) {
    const int c = lane + 32 * k;
#pragma unroll
    for (int e = 0; e < W; ++e)
      qr[k][e] = c < CR ? dev::bf16ToF(__ldg(q + P + c * W + e)) : 0.0f;
  }
  float runMax = negInf(), runSum = 0.0f;
  for (int64_t j0 = rowBegin + warp; j0 < rowEnd;
       j0 += int64_t(ROWS) * warps) {
    // All loads of the ROWS rows first, so they are in flight together.
    Chunk<W> lat[ROWS][KL], rope[ROWS][KR];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int64_t j = j0 + int64_t(r) * warps;
      const uint16_t *row = p.cache + j * width;
#pragma unroll
      for (int k = 0; k < KL; ++k) {
        const int c = lane + 32 * k;
        if (j < rowEnd && c < CL)
          lat[r][k].loadRO(row + c * W);
        else
          lat[r][k].zero();
      }
#pragma unroll
      for (int k = 0; k < KR; ++k) {
        const int c = lane + 32 * k;
        if (j < rowEnd && c < CR)
          rope[r][k].loadRO(row + L + c * W);
        else
          rope[r][k].zero();
      }
    }
    float score[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float d = 0.0f;
#pragma unroll
      for (int k = 0; k < KL; ++k)
#pragma unroll
        for (int e = 0; e < W; ++e)
          d = fmaf(qh[k][e], lat[r][k].at(e), d);
#pragma unroll
      for (int k = 0; k < KR; ++k)
#pragma unroll
        for (int e = 0; e < W; ++e)
          d = fmaf(qr[k][e], rope[r][k].at(e), d);
      score[r] = d;
    }
    // The ROWS reductions interleaved (independent shuffles).
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        score[r] += __shfl_xor_sync(0xffffffffu, score[r], o);
    // Row j0 is valid (loop condition), so newMax is finite.
    float newMax = runMax;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const bool valid = j0 + int64_t(r) * warps < rowEnd;
      score[r] = valid ? score[r] * p.scale : negInf();
      newMax = fmaxf(newMax, score[r]);
    }
    const float rescale = expf(runMax - newMax); // 0 on the first rows
    runSum *= rescale;
#pragma unroll
    for (int k = 0; k < KL; ++k)
#pragma unroll
      for (int e = 0; e < W; ++e)
        acc[k][e] *= rescale;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float e = expf(score[r] - newMax); // 0 for a missing row
      runSum += e;
#pragma unroll
      for (int k = 0; k < KL; ++k)
#pragma unroll
        for (int x = 0; x < W; ++x)
          acc[k][x] = fmaf(e, lat[r][k].at(x), acc[k][x]);
    }
    runMax = newMax;
  }

  // --- Merge the warps: global max M, Σ = Σ_w sum_w·e^(m_w − M), and ĉ as
  // Σ_w acc_w·e^(m_w − M) / Σ, warps added in order (deterministic). The
  // scaled accumulators go through `part`, as many warps per round as fit
  // (K3: all 8 in one).
  if (lane == 0) {
    s.warpMax[warp] = runMax;
    s.warpSum[warp] = runSum;
  }
  __syncthreads();
  float M = negInf();
  for (int w = 0; w < warps; ++w)
    M = fmaxf(M, s.warpMax[w]);
  float total = 0.0f;
  for (int w = 0; w < warps; ++w)
    if (s.warpMax[w] != negInf())
      total += s.warpSum[w] * expf(s.warpMax[w] - M);
  // total is 0 only for length <= 0, where the CPU's ĉ stays 0 too (or for
  // a split without rows). A split keeps its sum unnormalised.
  const float invTotal = splits > 1 ? 1.0f : total > 0.0f ? 1.0f / total : 0.0f;
  const float mine = runMax != negInf() ? expf(runMax - M) : 0.0f;
  const int perRound = kPartFloats / L;
  for (int w0 = 0; w0 < warps; w0 += perRound) {
    const int w1 = min(warps, w0 + perRound);
    if (warp >= w0 && warp < w1) {
      float *dst = s.part + (warp - w0) * L;
#pragma unroll
      for (int k = 0; k < KL; ++k) {
        const int c = lane + 32 * k;
        if (c < CL)
#pragma unroll
          for (int e = 0; e < W; ++e)
            dst[e * CL + c] = acc[k][e] * mine;
      }
    }
    __syncthreads();
    for (int l = tid; l < L; l += threads) {
      float v = w0 == 0 ? s.part[l] : s.cHat[l] + s.part[l];
      for (int w = w0 + 1; w < w1; ++w)
        v += s.part[(w - w0) * L + l];
      s.cHat[l] = w1 == warps ? v * invTotal : v;
    }
    __syncthreads();
  }

  if (splits > 1) {
    // --- This split's partial out; the last split of the head combines:
    // M = max_s M_s, ĉ = Σ_s e^(M_s − M) part_s / Σ_s e^(M_s − M) total_s,
    // splits added in order (deterministic for a given grid).
    const int64_t item = h * splits + split;
    float *myPart = gMlaPart + item * kMaxLatent;
    for (int l = tid; l < L; l += threads)
      myPart[l] = s.cHat[l];
    if (tid == 0)
      gMlaStat[item] = make_float2(M, total);
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      s.last = atomicAdd(&gMlaArrivals[h], 1u) == unsigned(splits) - 1;
      if (s.last)
        gMlaArrivals[h] = 0; // all have arrived: ready for the next launch
    }
    __syncthreads();
    if (!s.last)
      return;
    __threadfence();
    if (tid == 0) {
      float MAll = negInf();
      for (int sp = 0; sp < splits; ++sp)
        MAll = fmaxf(MAll, __ldcg(&gMlaStat[h * splits + sp]).x);
      float all = 0.0f;
      for (int sp = 0; sp < splits; ++sp) {
        const float2 st = __ldcg(&gMlaStat[h * splits + sp]);
        const float f = st.x != negInf() ? expf(st.x - MAll) : 0.0f;
        s.splitFac[sp] = f;
        all += st.y * f;
      }
      s.warpSum[0] = all > 0.0f ? 1.0f / all : 0.0f;
    }
    __syncthreads();
    const float inv = s.warpSum[0];
    for (int l = tid; l < L; l += threads) {
      float v = 0.0f;
      for (int sp = 0; sp < splits; ++sp)
        v = fmaf(__ldcg(gMlaPart + (h * splits + sp) * kMaxLatent + l),
                 s.splitFac[sp], v);
      s.cHat[l] = v * inv;
    }
    __syncthreads();
  }

  // --- o_i = R(W_UV[i] · ĉ), optionally gated: one warp per output row,
  // four rows per iteration; ĉ stays in registers (the lane's chunks).
#pragma unroll
  for (int k = 0; k < KL; ++k) {
    const int c = lane + 32 * k;
#pragma unroll
    for (int e = 0; e < W; ++e)
      qh[k][e] = c < CL ? s.cHat[e * CL + c] : 0.0f; // qh now holds ĉ
  }
  constexpr int kOutRows = 4;
  for (int64_t i0 = warp; i0 < V; i0 += int64_t(kOutRows) * warps) {
    Chunk<W> wv[kOutRows][KL];
#pragma unroll
    for (int r = 0; r < kOutRows; ++r) {
      const int64_t i = i0 + int64_t(r) * warps;
#pragma unroll
      for (int k = 0; k < KL; ++k) {
        const int c = lane + 32 * k;
        if (i < V && c < CL)
          wv[r][k].loadRO(wUV + i * L + c * W);
        else
          wv[r][k].zero();
      }
    }
    float dot[kOutRows];
#pragma unroll
    for (int r = 0; r < kOutRows; ++r) {
      float d = 0.0f;
#pragma unroll
      for (int k = 0; k < KL; ++k)
#pragma unroll
        for (int e = 0; e < W; ++e)
          d = fmaf(wv[r][k].at(e), qh[k][e], d);
      dot[r] = d;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
      for (int r = 0; r < kOutRows; ++r)
        dot[r] += __shfl_xor_sync(0xffffffffu, dot[r], o);
    }
    // Lane r writes row r (spreads the gate loads and stores over lanes).
#pragma unroll
    for (int r = 0; r < kOutRows; ++r) {
      const int64_t i = i0 + int64_t(r) * warps;
      if (lane == r && i < V) {
        const int64_t c = h * V + i;
        float o = dev::roundBf16(dot[r]);
        if (p.gate)
          o = o * dev::sigmoidF(dev::bf16ToF(__ldg(p.gate + c)));
        p.out[c] = dev::fToBf16(o);
      }
    }
  }
  __syncthreads(); // the next head reuses the shared memory
}

} // namespace

/// k3_mla_cache_append: cache[pos] = [rms_norm(kv[:L], normWeight, eps) |
/// kv[L:]] (MlaCacheAppendParams), rounding as rms_norm: n = R(x·r),
/// out = R(n·w) with r = 1 / sqrt(mean(x²) + eps).
/// Grid: any (codegen: 1). Every block sums the L squares itself (block
/// reduction, 1 KB read for K3); the row's L + R elements are then written
/// grid-stride, so any grid writes each element exactly once.
extern "C" __global__ void k3_mla_cache_append(const MlaCacheAppendParams p) {
  dev::enterStep();
  __shared__ float scratch[32];
  const int64_t L = p.kvLoraRank, R = p.ropeDim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < L; i += blockDim.x) {
    const float x = dev::bf16ToF(p.kv[i]);
    ss = fmaf(x, x, ss);
  }
  ss = dev::blockSum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(L) + p.eps);
  const int64_t pos = p.step ? __ldcg(p.step + kStepPos) : p.pos;
  uint16_t *row = p.cache + pos * (L + R);
  for (int64_t i = dev::globalThread(); i < L + R; i += dev::gridThreads()) {
    if (i < L) {
      row[i] = static_cast<uint16_t>(dev::rmsNormBf16(
          dev::bf16ToF(p.kv[i]), dev::bf16ToF(p.normWeight[i]), r));
    } else {
      row[i] = p.kv[i];
    }
  }
}

/// k3_mla_attend: absorbed decode attention over cache rows [0, length) with
/// the optional output gate (MlaAttendParams), per head h:
///   q̂ = W_UKᵀ q_nope (fp32), s_j = (q̂·c_j + q_r·k_r_j)·scale,
///   ĉ = softmax(s)·C, out = R(R(W_UV ĉ) · sigmoid(gate)) (gate optional).
/// Grid: S = min(16, grid / N, length / max(256, 8N)) splits of the rows per
/// head when S >= 2 (N <= 128): block i attends head i % N over its split
/// i / N of the rows [0, length), leaves (max, Σ, Σ e·c) in module scratch and
/// counts itself; the block finishing a head's last split merges the S
/// partials in split order and computes W_UV ĉ (no block ever waits for
/// another). A grid below 2N: heads block-stride, one block per head.
/// (codegen: N · S blocks of 256 threads, S from the planned context.)
/// Within a block: q̂ by (column chunk × row group) items with a shared
/// partial-sum merge (every split of a head computes it); the cache rows
/// warp-interleaved, a warp reading a whole 1152-byte K3 row per step (4
/// rows in flight per warp), an online softmax per warp merged in warp
/// order; W_UV one warp per output row. Both weight blocks are prefetched
/// into L2 at the start. Deterministic for a given grid (the split merge is
/// ordered; the arrival counter only picks which block does it).
/// Limits: blockDim <= 256; 1 <= L <= 1024; R <= 256 when L and R are
/// multiples of 8 (with 16-byte aligned cache / kvB), else R <= 128.
/// Outside them the kernel writes NaN to out (the runtime's shapes — K3:
/// L = 512, R = 64 — are inside).
extern "C" __global__ void __launch_bounds__(kAttendMaxThreads)
    k3_mla_attend(const MlaAttendParams p) {
  dev::allowDependentLaunch();
  dev::prefetchL2Share(p.l2Prefetch);
  dev::waitForPriorGrids();
  __shared__ AttendShared s;
  const int64_t L = p.kvLoraRank, R = p.ropeDim;
  const bool aligned = dev::aligned16(p.cache) && dev::aligned16(p.kvB);
  const bool vec = aligned && L % 8 == 0 && R % 8 == 0;
  const bool ok = L >= 1 && L <= kMaxLatent && R >= 0 &&
                  R <= (vec ? 32 * 8 : 32 * 4) && p.nopeDim >= 0 && p.vDim >= 0;
  if (!ok) {
    dev::fillNaN(p.out, p.numHeads * p.vDim); // never silent
    return;
  }
  // Splits over the cache when the grid has room for 2+ blocks per head;
  // item i is head i % N, split i / N (a split's blocks are adjacent: they
  // read the same cache rows together).
  const int64_t N = p.numHeads;
  // The grid bounds the splits; the context decides how many are used (the
  // blocks beyond them return), so a short context runs unsplit.
  int splits = 1;
  if (N > 0 && N <= kMaxSplitHeads)
    splits = static_cast<int>(min(min(int64_t(kMaxSplits), int64_t(gridDim.x) / N),
                                  attendLength(p) / minSplitRows(N)));
  splits = max(splits, 1);
  for (int64_t item = blockIdx.x; item < N * splits; item += gridDim.x) {
    const int64_t h = item % N;
    const int split = static_cast<int>(item / N);
    if (vec && L <= 32 * 8 * 2)
      attendHead<8, 2, 1, 4>(p, h, split, splits, s); // K3: L = 512, R = 64
    else if (vec)
      attendHead<8, 4, 1, 2>(p, h, split, splits, s);
    else
      attendHead<1, 32, 4, 1>(p, h, split, splits, s);
  }
}
