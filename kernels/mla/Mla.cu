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
#include "kernels/common/CudaWeights.cuh"
#include "kernels/common/KernelTrace.cuh"
#include "kernels/common/WorkQueue.cuh"
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
  float2 stat; ///< clustered form: this block's (M, Σ e^(s − M))
  int last;    ///< this block combines the head
};

/// The rows mla_attend attends: step[kStepPos] + 1 when the step block is
/// bound (written by the previous step's argmax: read through L2), else
/// `length`.
__device__ __forceinline__ int64_t attendLength(const MlaAttendParams &p) {
  return p.step ? __ldcg(p.step + kStepPos) + 1 : p.length;
}

/// The rows [rowBegin, rowEnd) of head h against q̂ in s.qHat (chunk-
/// transposed): scores and ĉ with an online softmax per warp, the warps
/// merged in order into s.cHat (chunk-transposed; normalised unless `split`,
/// which keeps Σ e^(s − M) c for a later merge of splits). Returns the
/// rows' max score M and Σ e^(s − M) in (x, y). Synchronises the block.
template <int W, int KL, int KR, int ROWS>
__device__ float2 attendRows(const MlaAttendParams &p, int64_t h,
                             int64_t rowBegin, int64_t rowEnd, bool split,
                             AttendShared &s) {
  const int L = static_cast<int>(p.kvLoraRank);
  const int R = static_cast<int>(p.ropeDim);
  const int64_t P = p.nopeDim;
  const int64_t width = L + R;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int threads = blockDim.x, warps = threads >> 5;
  const int CL = L / W, CR = R / W; // chunks of a latent / rope row part
  const uint16_t *q = p.q + h * (P + R);

  // Scores and ĉ with an online softmax per warp: warp w takes rows
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

  // Merge the warps: global max M, Σ = Σ_w sum_w·e^(m_w − M), and ĉ as
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
  const float invTotal = split ? 1.0f : total > 0.0f ? 1.0f / total : 0.0f;
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
  return make_float2(M, total);
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
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int threads = blockDim.x, warps = threads >> 5;
  const int CL = L / W; // chunks of a latent row

  K3C_TRACE_T0();
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
  K3C_TRACE(kMlaTraceHeadQhat, split);

  const float2 stat = attendRows<W, KL, KR, ROWS>(p, h, rowBegin, rowEnd,
                                                 splits > 1, s);
  const float M = stat.x, total = stat.y;
  K3C_TRACE(kMlaTraceHeadMerged, split);

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
    K3C_TRACE(kMlaTraceHeadSplits, split);
  }

  // --- o_i = R(W_UV[i] · ĉ), optionally gated: one warp per output row,
  // four rows per iteration; ĉ stays in registers (the lane's chunks).
  float qh[KL][W];
#pragma unroll
  for (int k = 0; k < KL; ++k) {
    const int c = lane + 32 * k;
#pragma unroll
    for (int e = 0; e < W; ++e)
      qh[k][e] = c < CL ? s.cHat[e * CL + c] : 0.0f; // ĉ
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
  K3C_TRACE(kMlaTraceHeadOut, split);
}

/// Rows first, first + 1, ... (K of them) of head h's output from this
/// warp's W_UV chunks (wv[k][0]: L columns lane·8 .., wv[k][1]: (lane + 32)·8
/// ..) and the lane's 16 ĉ values: o_i = R(W_UV[i] · ĉ), gated, rows at or
/// past V skipped. The two half-rows are summed in order, then the lanes'
/// sums with a butterfly; lane k writes row first + k.
template <int K>
__device__ __forceinline__ void writeOutRows(const MlaAttendParams &p,
                                             const Chunk<8> (&wv)[K][2],
                                             const float (&ch)[16], int64_t h,
                                             int64_t first) {
  const int lane = threadIdx.x & 31;
  float dot[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float d = 0.0f;
#pragma unroll
    for (int x = 0; x < 8; ++x)
      d = fmaf(wv[k][0].at(x), ch[x], d);
#pragma unroll
    for (int x = 0; x < 8; ++x)
      d = fmaf(wv[k][1].at(x), ch[8 + x], d);
    dot[k] = d;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int k = 0; k < K; ++k)
      dot[k] += __shfl_xor_sync(0xffffffffu, dot[k], o);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = first + k;
    if (lane == k && i < p.vDim) {
      const int64_t c = h * p.vDim + i;
      float o = dev::roundBf16(dot[k]);
      if (p.gate)
        o = o * dev::sigmoidF(dev::bf16ToF(__ldg(p.gate + c)));
      p.out[c] = dev::fToBf16(o);
    }
  }
}

/// Contexts from which the all-heads form runs; below, the per-head or the
/// clustered form. Measured on the H200 (kernel_bench, one launch, 132 blocks; docs/
/// PERF.md 2026-12-02), all-heads against per-head, µs: Kimi-Linear's 32
/// heads 39.4 / 27.5 at 72 rows, 43.8 / 36.6 at 1024, 50.6 / 67.4 at 4096,
/// 168 / 323 at 32768; K3's 96 heads 106 / 63 at 1024, 429 / 856 at 32768.
/// The all-heads form's fixed cost (its dependent phases) is what the short
/// contexts pay. (K3C_TUNE_* macros override tuning constants in a variant
/// build of this family, measured with K3C_PTX_DIR; the shipped PTX uses
/// the values here.)
#ifdef K3C_TUNE_MLA_ALL_HEADS_MIN_ROWS
constexpr int64_t kAllHeadsMinRows = K3C_TUNE_MLA_ALL_HEADS_MIN_ROWS;
#else
constexpr int64_t kAllHeadsMinRows = 4096;
#endif

//===----------------------------------------------------------------------===//
// mla_attend on a cluster per head (short contexts)
//===----------------------------------------------------------------------===//
//
// k3_mla_attend_clustered, up to kMlaClusteredMaxRows rows: a cluster of
// C = kMlaClusterBlocks (4) blocks per head (grid C·N, Hopper's distributed
// shared memory), block rank r of head h's cluster:
//   before the dependent-launch wait: loads its share of W_UK (columns
//     [L/C·r, L/C·(r + 1)) of L, all P rows) into registers and asks L2 for
//     its W_UV rows [V/C·r, V/C·(r + 1)): weights depend on no earlier
//     kernel;
//   q̂ of its columns (16 row groups of 8 columns' chunks, summed in group
//     order: the all-heads form's q̂ bits), stored into every block of the
//     cluster, then a cluster barrier;
//   the rows [r·⌈T/C⌉, (r + 1)·⌈T/C⌉) as the per-head form's split r
//     (attendRows), its (M, Σ) and unnormalised ĉ left in its shared memory;
//   after a cluster barrier, the C splits merged in rank order (the
//     per-head form's split merge) from the cluster's shared memory into
//     the full ĉ, then its V/C rows of W_UV, gated.
// No global scratch, no atomics: three cluster barriers instead of the
// per-head form's one block doing the whole q̂ and W_UV, and its global
// split merge. Deterministic: the cut depends on T alone. Its own entry
// point (two blocks of at most 128 registers per SM) rather than a form of
// k3_mla_attend (255 registers for the all-heads form, one block per SM):
// 32 clusters of 4 one-block-per-SM blocks did not fit the GPCs at once
// (H200: a second wave, 35 µs at 1024 rows instead of ~14). Measured
// (docs/PERF.md 2026-12-03): 26 µs at 1024 rows, the rows phase 11 of them
// (8 rounds of 4 rows per warp); clusters of 8 (half the rows per block)
// measured slower (33 µs).

/// The clustered form's one shape (Kimi-Linear and K3: L = 512, P = V =
/// 128, R = 64, blocks of 256 threads).
constexpr int kClusterL = 512, kClusterP = 128, kClusterV = 128;
constexpr int kClusterQGroups = 16; ///< row groups of the q̂ sum
constexpr int kClusterQRows = kClusterP / kClusterQGroups;

/// Whether this launch takes the clustered form's shape (uniform over the
/// grid; the context is checked after the wait): clusters of
/// kMlaClusterBlocks blocks, one cluster per head.
__device__ __forceinline__ bool clusteredShape(const MlaAttendParams &p,
                                               unsigned rows = 1) {
  const unsigned C = dev::clusterBlocks();
  return C == kMlaClusterBlocks && blockDim.x == kAttendMaxThreads &&
         p.numHeads >= 1 && int64_t(gridDim.x) == p.numHeads * C &&
         gridDim.y == rows && gridDim.z == 1 && p.kvLoraRank == kClusterL &&
         p.nopeDim == kClusterP && p.vDim == kClusterV && p.ropeDim >= 8 &&
         p.ropeDim <= 32 * 8 && p.ropeDim % 8 == 0 && dev::aligned16(p.cache) &&
         dev::aligned16(p.kvB);
}

/// The clustered form (see the section comment). Waits for the prior grid
/// itself; returns false, having done nothing else, beyond
/// kMlaClusteredMaxRows rows.
template <int C>
__device__ bool attendClustered(const MlaAttendParams &p, AttendShared &s) {
  constexpr int L = kClusterL, P = kClusterP, V = kClusterV, CL = L / 8;
  constexpr int kClusterHeadBlocks = C;
  constexpr int kClusterCols = L / C;    ///< of q̂ per block
  constexpr int kClusterOutRows = V / C; ///< of W_UV per block
  /// Threads of the q̂ sum: 16 row groups × the block's column chunks.
  constexpr int kQThreads = kClusterQGroups * (kClusterCols / 8);
  static_assert(kQThreads <= kAttendMaxThreads, "q̂ threads");
  const int64_t h = blockIdx.x / kClusterHeadBlocks;
  const unsigned r = dev::clusterRank();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t R = p.ropeDim;
  const uint16_t *wUK = p.kvB + h * (P + V) * L;
  const uint16_t *wUV = wUK + int64_t(P) * L;
  dev::clusterArrive(); // waited before the first remote store

  // Weights before the wait: this thread's W_UK chunks (column chunk c of
  // the block's 128 columns, rows g, g + 16, ...) into registers, the W_UV
  // rows asked of L2.
  const int c = tid % (kClusterCols / 8), g = tid / (kClusterCols / 8);
  const int col = int(r) * kClusterCols + c * 8;
  const bool qThread = tid < kQThreads;
  Chunk<8> wk[kClusterQRows];
#pragma unroll
  for (int k = 0; k < kClusterQRows; ++k) {
    if (qThread)
      wk[k].loadRO(wUK + int64_t(g + kClusterQGroups * k) * L + col);
    else
      wk[k].zero();
  }
  const int64_t row0 = int64_t(r) * kClusterOutRows;
  prefetchL2Block(wUV + row0 * L, int64_t(kClusterOutRows) * L * 2);

  K3C_TRACE_T0();
  dev::waitForPriorGrids();
  const int64_t T = attendLength(p);
  dev::clusterWait(); // every block of the cluster has started
  if (!mlaAttendOwnsRows(p, /*clustered=*/true, T))
    return true; // the mla_attend launch after this one attends it
  if (T > kMlaClusteredMaxRows)
    return false;

  // q̂ of the block's columns: qhatItem's sum (rows ascending within a
  // group, then the groups in order), stored chunk-transposed into every
  // block of the cluster.
  const uint16_t *q = p.q + h * (P + R);
  float acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e)
    acc[e] = 0.0f;
  if (qThread) {
#pragma unroll
    for (int k = 0; k < kClusterQRows; ++k) {
      const float qi = dev::bf16ToF(__ldg(q + g + kClusterQGroups * k));
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[e] = fmaf(wk[k].at(e), qi, acc[e]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e)
      s.part[g * kClusterCols + c * 8 + e] = acc[e];
  }
  __syncthreads();
  if (tid < kClusterCols) {
    float v = s.part[tid];
    for (int gg = 1; gg < kClusterQGroups; ++gg)
      v += s.part[gg * kClusterCols + tid];
    const int l = int(r) * kClusterCols + tid; // column of L
    float *dst = s.qHat + (l % 8) * CL + l / 8;
    for (unsigned b = 0; b < kClusterHeadBlocks; ++b)
      dev::storeCluster(dst, b, v);
  }
  dev::clusterSync(); // q̂ complete in every block
  K3C_TRACE(kMlaTraceHeadQhat, r);

  // The block's split of the rows, as the per-head form's split r.
  const int64_t chunk = (T + kClusterHeadBlocks - 1) / kClusterHeadBlocks;
  const int64_t rowBegin = min(T, int64_t(r) * chunk);
  const int64_t rowEnd = min(T, rowBegin + chunk);
  const float2 stat = attendRows<8, 2, 1, 4>(p, h, rowBegin, rowEnd,
                                             /*split=*/true, s);
  if (tid == 0)
    s.stat = stat;
  K3C_TRACE(kMlaTraceHeadMerged, r);

  // This block's W_UV rows into registers (L2 hits, in flight across the
  // barrier): warp w rows 4w .. 4w + 3, lane chunks lane and lane + 32.
  constexpr int kRows = kClusterOutRows / 8;
  Chunk<8> wv[kRows][2];
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const uint16_t *row = wUV + (row0 + warp * kRows + k) * L;
    wv[k][0].loadRO(row + lane * 8);
    wv[k][1].loadRO(row + (lane + 32) * 8);
  }
  dev::clusterSync(); // every split's (M, Σ) and ĉ in its block

  // The splits merged in rank order, as the per-head form's last split
  // merges them: M = max_s M_s, ĉ = Σ_s e^(M_s − M) part_s / Σ_s e^(M_s − M)
  // Σ_s. Every block computes the whole ĉ (its W_UV rows need it), into
  // `part` in natural order.
  float MAll = negInf();
  float2 st[kClusterHeadBlocks];
#pragma unroll
  for (int b = 0; b < kClusterHeadBlocks; ++b) {
    st[b].x = dev::loadCluster(&s.stat.x, b);
    st[b].y = dev::loadCluster(&s.stat.y, b);
    MAll = fmaxf(MAll, st[b].x);
  }
  float all = 0.0f, fac[kClusterHeadBlocks];
#pragma unroll
  for (int b = 0; b < kClusterHeadBlocks; ++b) {
    fac[b] = st[b].x != negInf() ? expf(st[b].x - MAll) : 0.0f;
    all += st[b].y * fac[b];
  }
  const float inv = all > 0.0f ? 1.0f / all : 0.0f;
  for (int l = tid; l < L; l += kAttendMaxThreads) {
    const float *src = s.cHat + (l % 8) * CL + l / 8;
    float v = 0.0f;
#pragma unroll
    for (int b = 0; b < kClusterHeadBlocks; ++b)
      v = fmaf(dev::loadCluster(src, b), fac[b], v);
    s.part[l] = v * inv;
  }
  // No block leaves (its shared memory) while another may still read it.
  dev::clusterSync();
  K3C_TRACE(kMlaTraceHeadSplits, r);

  // out = R(W_UV ĉ), gated: outItem's sum for the block's rows.
  float ch[16];
#pragma unroll
  for (int x = 0; x < 8; ++x) {
    ch[x] = s.part[lane * 8 + x];
    ch[8 + x] = s.part[(lane + 32) * 8 + x];
  }
  writeOutRows<kRows>(p, wv, ch, h, row0 + warp * kRows);
  K3C_TRACE(kMlaTraceHeadOut, r);
  return true;
}

//===----------------------------------------------------------------------===//
// mla_attend over all heads at once (the fast path)
//===----------------------------------------------------------------------===//
//
// The absorbed form is two small matrix products per range of cache rows:
// S = Q̂ Cᵀ and Ĉ = P C, so one read of a row can serve every head. The
// launch is one work queue (kernels/common/WorkQueue.cuh) of up to four phases,
// each waiting only for the one before it:
//   Q  (head, 128 columns of L): q̂ = W_UKᵀ q_nope into module scratch, the
//      P rows in 16 groups summed in group order;
//   B  (group of heads, range of rows): the scores and the online softmax
//      of every head of the group over the range, its unnormalised
//      Σ e^(s − M) c and (M, Σ e^(s − M)) into module scratch;
//   M  (head, 128 columns of L): the ranges merged in range order into ĉ
//      (only past 16 ranges; with fewer, each O item merges its head's);
//   O  (head, 32 rows of V): out = R(W_UV ĉ), gated.
// Within a B item a warp holds four heads' q̂ (lane: latent chunks lane and
// lane + 32 of 8 values, rope values 2·lane and 2·lane + 1) and their ĉ
// accumulators, reads four rows at a time, and sums the 16 (row, head)
// partial scores with one transposing reduction over its lanes (16
// shuffles, after which lane l holds row l >> 3, head (l >> 1) & 3). The
// block's 8 warps are QW head quads × 8/QW row lanes: short contexts take
// QW = 1 (a quad per item, warps over rows, merged in shared memory in
// row-lane order), long ones QW = 8 (32 heads per item: each cache row is
// read from L2 once per 32 heads). How the work is cut depends only on the
// heads, L, V and the context, never on the grid: the output bits are the
// same for any grid.
//
// The plans' head shape (L = 512, R = 64, heads in groups of 32) takes the
// B items to the tensor cores instead (attendRangeItemMma): 32 heads per
// item, the two products as bf16 mma.sync with fp32 accumulation, q̂ and
// the softmax weights each split into two bf16 terms (hi + lo) so that the
// products keep ~16 significant bits of their fp32 factors (the cache and
// q_r are bf16 already, exact). The SIMT item (FMA-bound: 32 heads × 1088
// multiply-adds per row) stays for every other shape.


/// Limits of the fast path (else the per-head kernel above runs).
constexpr int kFastMaxLatent = kMlaAllHeadsMaxLatent; // MlaParams.h
constexpr int kFastMaxHeads = kMlaAllHeadsMaxHeads;
constexpr int kFastThreads = 256; ///< 8 warps, exactly
constexpr int kQuad = 4;          ///< heads per warp
/// (head, range) partials of the running launch.
constexpr int kMaxPartials = 4096;
/// B items aimed at (the H200 has 132 SMs; codegen's grid is one block per
/// SM).
constexpr int kTargetItems = 128;
/// Columns of L per Q and M item; rows of W_UV per O item.
constexpr int kColsPerItem = 128;
constexpr int kQGroups = kFastThreads / (kColsPerItem / 8);
constexpr int kOutRowsPerItem = 32;
/// Rows per range at least (each row lane gets a few rows).
constexpr int kMinRowsPerRange = 32;
/// Up to this many ranges the O items merge their head's ranges themselves
/// (no M phase: one dependent round less at short contexts); beyond, each
/// O item would re-read too many partials.
constexpr int kInlineMergeRanges = 16;

/// The tensor-core B item's shape: 32 heads (two m16 tiles) per item, cache
/// rows in tiles of 16 (two n8 tiles), warp w owning latent columns [64w,
/// 64w + 64) and rope columns [8w, 8w + 8) of L = 512, R = 64.
constexpr int kMmaHeads = 32;
constexpr int kMmaRows = 16;
constexpr int kMmaLatent = 512;
constexpr int kMmaRope = 64;

__device__ __align__(16) float gQhat[kFastMaxHeads * kFastMaxLatent];
__device__ __align__(16) float gChat[kFastMaxHeads * kFastMaxLatent];
__device__ __align__(16) float gAttPart[kMaxPartials * kFastMaxLatent];
__device__ float2 gAttStat[kMaxPartials];
__device__ dev::WorkQueue gAttendQueue;
/// Finished Q, B and M items of the running launch.
__device__ unsigned gAttendDone[3];

/// How a launch cuts its work (every block computes the same).
struct AttendCut {
  int64_t T;            ///< attended rows
  int64_t rowsPerRange; ///< rows of a B item
  int quadsPerItem;     ///< QW: 1, 2, 4 or 8
  int ranges;           ///< B items per group of heads
  unsigned nQ, nB, nM, nO; ///< items per phase (nM = 0: merged in O)
};

/// Whether the B items run on the tensor cores (attendRangeItemMma): the
/// plans' head shape, heads in whole groups of 32. (A variant build with
/// -DK3C_TUNE_MLA_MMA=0 keeps the SIMT item, to measure one against the
/// other.)
__device__ __forceinline__ bool mmaRanges(const MlaAttendParams &p) {
#if defined(K3C_TUNE_MLA_MMA) && !K3C_TUNE_MLA_MMA
  return false;
#else
  // q_r is read as bf16 pairs: an even P and a 4-byte aligned q.
  return p.kvLoraRank == kMmaLatent && p.ropeDim == kMmaRope &&
         p.numHeads % kMmaHeads == 0 && p.nopeDim % 2 == 0 &&
         dev::aligned(p.q, 4);
#endif
}

__device__ __forceinline__ AttendCut cutAttend(const MlaAttendParams &p,
                                               int64_t T) {
  const int N = static_cast<int>(p.numHeads);
  const int quads = (N + kQuad - 1) / kQuad;
  int qw = mmaRanges(p) ? kMmaHeads / kQuad
           : T >= 8192  ? 8
           : T >= 4096  ? 4
           : T >= 2048  ? 2
                        : 1;
  while (qw > quads)
    qw >>= 1;
  const int groups = (quads + qw - 1) / qw;
  int64_t ranges = (kTargetItems + groups - 1) / groups;
  ranges = min(ranges, max(int64_t(1), T / kMinRowsPerRange));
  ranges = max(int64_t(1), min(ranges, int64_t(kMaxPartials / N)));
  AttendCut c;
  c.T = T;
  c.quadsPerItem = qw;
  c.ranges = static_cast<int>(ranges);
  c.rowsPerRange = T > 0 ? (T + ranges - 1) / ranges : 0;
  const unsigned colItems =
      static_cast<unsigned>((p.kvLoraRank + kColsPerItem - 1) / kColsPerItem);
  c.nQ = unsigned(N) * colItems;
  c.nB = unsigned(groups) * unsigned(ranges);
  c.nM = ranges <= kInlineMergeRanges ? 0u : c.nQ;
  c.nO = unsigned(N) * static_cast<unsigned>((p.vDim + kOutRowsPerItem - 1) /
                                             kOutRowsPerItem);
  return c;
}

/// Shared memory of a tensor-core B item.
struct MmaRangeShared {
  /// Each warp's partial scores (over its columns) of the tile.
  float part[kFastThreads / 32][kMmaHeads][kMmaRows];
  /// The tile's softmax weights e as bf16 pairs (rows 2k, 2k + 1 in word
  /// k), hi then lo terms; 12 words per head (8 used) so that the warps'
  /// A-fragment loads are free of bank conflicts.
  uint32_t prob[2][kMmaHeads][12];
  /// e^(M_old − M_new) per head: the accumulators' rescale for the tile.
  float rescale[kMmaHeads];
};

/// Shared memory of the fast path (16-byte aligned: the O items read the
/// merged ĉ from `buf` as float4).
struct __align__(16) FastShared {
  union {
    /// Q: the 16 row groups' sums of 128 columns; B: the row lanes' merge
    /// of up to 4 quads (QW · 4 heads · L floats).
    float buf[kQGroups * kColsPerItem > 4 * kQuad * kFastMaxLatent
                  ? kQGroups * kColsPerItem
                  : 4 * kQuad * kFastMaxLatent];
    MmaRangeShared mma; ///< B items on the tensor cores
  };
  float2 warpStat[8][kQuad]; ///< B: each warp's (max, Σ) per head
  float fac[kTargetItems];   ///< M: e^(M_s − M) of each range
  float inv;                 ///< M: 1 / Σ_s e^(M_s − M) Σ_s
  unsigned item;             ///< the drawn ticket
};

/// Q item: q̂ of head h, columns [col0, col0 + 128) of L.
__device__ void qhatItem(const MlaAttendParams &p, int64_t h, int col0,
                         FastShared &s) {
  const int L = static_cast<int>(p.kvLoraRank);
  const int64_t P = p.nopeDim, R = p.ropeDim, V = p.vDim;
  const int tid = threadIdx.x;
  const int chunk = tid % (kColsPerItem / 8), g = tid / (kColsPerItem / 8);
  const int col = col0 + chunk * 8;
  const uint16_t *q = p.q + h * (P + R);
  const uint16_t *wUK = p.kvB + h * (P + V) * L;
  float acc[8];
#pragma unroll
  for (int k = 0; k < 8; ++k)
    acc[k] = 0.0f;
  if (col < L) {
#pragma unroll 4
    for (int64_t i = g; i < P; i += kQGroups) {
      Chunk<8> w;
      w.loadRO(wUK + i * L + col);
      const float qi = dev::bf16ToF(__ldg(q + i));
#pragma unroll
      for (int k = 0; k < 8; ++k)
        acc[k] = fmaf(w.at(k), qi, acc[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < 8; ++k)
    s.buf[g * kColsPerItem + chunk * 8 + k] = acc[k];
  __syncthreads();
  for (int c = tid; c < kColsPerItem; c += blockDim.x) {
    if (col0 + c >= L)
      continue;
    float v = s.buf[c];
    for (int gg = 1; gg < kQGroups; ++gg)
      v += s.buf[gg * kColsPerItem + c];
    gQhat[h * L + col0 + c] = v;
  }
}

/// One step of a transposing warp reduction: of its 2N values a lane keeps
/// the half its lane bit `offset` selects and adds the partner lane's (lane ^
/// offset) copy of that half; the partner keeps the other half. After steps
/// over bits 4..1 of 16 values, lane l holds the full sum of value l >> 1.
template <int N>
__device__ __forceinline__ void halveAcrossLanes(const float (&in)[2 * N],
                                                 float (&out)[N], int offset) {
  const bool b = threadIdx.x & offset;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float send = b ? in[i] : in[i + N];
    const float keep = b ? in[i + N] : in[i];
    out[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
  }
}

/// B item: heads of quads [quad0, quad0 + QW), rows [rowBegin, rowEnd).
/// Not inlined, nor is its caller: this item needs about 220 registers in
/// its row loop, and inlined into the queue loop (or the queue loop into the
/// per-head kernel) ptxas spilled about 100 bytes; apart, the row loop
/// spills nothing and the caller only saves registers around the call.
__device__ __noinline__ void attendRangeItem(const MlaAttendParams &p,
                                             const AttendCut &cut, int quad0,
                                             int range, FastShared &s) {
  const int L = static_cast<int>(p.kvLoraRank);
  const int R = static_cast<int>(p.ropeDim);
  const int N = static_cast<int>(p.numHeads);
  const int64_t P = p.nopeDim, width = L + R;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int qw = cut.quadsPerItem, rowLanes = 8 / qw;
  const int quad = quad0 + warp % qw, rowLane = warp / qw;
  const int h0 = quad * kQuad;
  const int64_t rowBegin = min(cut.T, int64_t(range) * cut.rowsPerRange);
  const int64_t rowEnd = min(cut.T, rowBegin + cut.rowsPerRange);
  const int c0 = lane * 8, c1 = (lane + 32) * 8, e0 = 2 * lane;
  const bool has0 = c0 < L, has1 = c1 < L, hasR = e0 < R;

  // q̂ and q_r of the warp's four heads (zero past N: their scores are 0,
  // never written out).
  float qh[kQuad][16], qr[kQuad][2], acc[kQuad][16];
#pragma unroll
  for (int hh = 0; hh < kQuad; ++hh) {
    const int h = h0 + hh;
    const bool valid = h < N;
    const float *src = gQhat + int64_t(h) * L;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int c = half ? c1 : c0;
      const bool ok = valid && (half ? has1 : has0);
      const float4 a = ok ? __ldcg(reinterpret_cast<const float4 *>(src + c))
                          : make_float4(0, 0, 0, 0);
      const float4 b =
          ok ? __ldcg(reinterpret_cast<const float4 *>(src + c + 4))
             : make_float4(0, 0, 0, 0);
      float *d = qh[hh] + half * 8;
      d[0] = a.x, d[1] = a.y, d[2] = a.z, d[3] = a.w;
      d[4] = b.x, d[5] = b.y, d[6] = b.z, d[7] = b.w;
    }
    const uint16_t *qrope = p.q + int64_t(h) * (P + R) + P;
    qr[hh][0] = valid && hasR ? dev::bf16ToF(__ldg(qrope + e0)) : 0.0f;
    qr[hh][1] = valid && hasR ? dev::bf16ToF(__ldg(qrope + e0 + 1)) : 0.0f;
#pragma unroll
    for (int k = 0; k < 16; ++k)
      acc[hh][k] = 0.0f;
  }

  // After the transposing reduction lane l holds (row l >> 3, head
  // (l >> 1) & 3) of a batch of four rows.
  const int myRow = lane >> 3, myHead = (lane >> 1) & 3;
  float runMax[kQuad], runSum = 0.0f; // runSum: of head myHead
#pragma unroll
  for (int hh = 0; hh < kQuad; ++hh)
    runMax[hh] = negInf();
  const int64_t step = int64_t(4) * rowLanes;
#pragma unroll 1
  for (int64_t j0 = rowBegin + rowLane; j0 < rowEnd; j0 += step) {
    Chunk<8> lat[4][2];
    uint32_t rope[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t j = j0 + int64_t(r) * rowLanes;
      const bool ok = j < rowEnd;
      const uint16_t *row = p.cache + j * width;
      lat[r][0].zero();
      lat[r][1].zero();
      if (ok && has0)
        lat[r][0].loadRO(row + c0);
      if (ok && has1)
        lat[r][1].loadRO(row + c1);
      rope[r] = ok && hasR
                    ? __ldg(reinterpret_cast<const unsigned *>(row + L + e0))
                    : 0u;
    }
    // The lane's partial dot products, v[r * 4 + hh].
    float v[16];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int hh = 0; hh < kQuad; ++hh) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          d = fmaf(qh[hh][e], lat[r][0].at(e), d);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          d = fmaf(qh[hh][8 + e], lat[r][1].at(e), d);
        d = fmaf(qr[hh][0], dev::loF(rope[r]), d);
        d = fmaf(qr[hh][1], dev::hiF(rope[r]), d);
        v[r * 4 + hh] = d;
      }
    // Transposing reduction over lane bits 4, 3, 2, 1, then a plain sum
    // over bit 0.
    float w8[8], w4[4], w2[2], w1[1];
    halveAcrossLanes<8>(v, w8, 16);
    halveAcrossLanes<4>(w8, w4, 8);
    halveAcrossLanes<2>(w4, w2, 4);
    halveAcrossLanes<1>(w2, w1, 2);
    float sc = w1[0] + __shfl_xor_sync(0xffffffffu, w1[0], 1);
    sc = j0 + int64_t(myRow) * rowLanes < rowEnd ? sc * p.scale : negInf();
    // Per head: the batch's max (lanes of one head differ in bits 3, 4),
    // then every lane learns all four.
    float m = fmaxf(sc, __shfl_xor_sync(0xffffffffu, sc, 8));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
    float newMax[kQuad], rescale[kQuad];
#pragma unroll
    for (int hh = 0; hh < kQuad; ++hh) {
      newMax[hh] = fmaxf(runMax[hh], __shfl_sync(0xffffffffu, m, hh * 2));
      rescale[hh] = expf(runMax[hh] - newMax[hh]); // 0 on the first rows
    }
    const float mine = myHead == 0   ? newMax[0]
                       : myHead == 1 ? newMax[1]
                       : myHead == 2 ? newMax[2]
                                     : newMax[3];
    const float myRescale = myHead == 0   ? rescale[0]
                            : myHead == 1 ? rescale[1]
                            : myHead == 2 ? rescale[2]
                                          : rescale[3];
    const float e = expf(sc - mine); // 0 for a missing row
    float es = e + __shfl_xor_sync(0xffffffffu, e, 8);
    es += __shfl_xor_sync(0xffffffffu, es, 16);
    runSum = runSum * myRescale + es;
#pragma unroll
    for (int hh = 0; hh < kQuad; ++hh)
#pragma unroll
      for (int k = 0; k < 16; ++k)
        acc[hh][k] *= rescale[hh];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int hh = 0; hh < kQuad; ++hh) {
        const float pr = __shfl_sync(0xffffffffu, e, (r * 4 + hh) * 2);
#pragma unroll
        for (int x = 0; x < 8; ++x) {
          acc[hh][x] = fmaf(pr, lat[r][0].at(x), acc[hh][x]);
          acc[hh][8 + x] = fmaf(pr, lat[r][1].at(x), acc[hh][8 + x]);
        }
      }
#pragma unroll
    for (int hh = 0; hh < kQuad; ++hh)
      runMax[hh] = newMax[hh];
  }

  // Σ of every head of the quad, from the lanes that hold it.
  float runSums[kQuad];
#pragma unroll
  for (int hh = 0; hh < kQuad; ++hh)
    runSums[hh] = __shfl_sync(0xffffffffu, runSum, hh * 2);

  // The warp's partial written out as the range's: directly when the warp
  // has the quad's rows alone, else merged over the row lanes in row-lane
  // order (global max first, then the sums scaled to it).
  float M[kQuad], total[kQuad], scaleMine[kQuad];
  if (rowLanes == 1) {
#pragma unroll
    for (int hh = 0; hh < kQuad; ++hh) {
      M[hh] = runMax[hh];
      total[hh] = runSums[hh];
      scaleMine[hh] = 1.0f;
    }
  } else {
    if (lane == 0)
#pragma unroll
      for (int hh = 0; hh < kQuad; ++hh)
        s.warpStat[warp][hh] = make_float2(runMax[hh], runSums[hh]);
    __syncthreads();
#pragma unroll
    for (int hh = 0; hh < kQuad; ++hh) {
      float mx = negInf();
      for (int rl = 0; rl < rowLanes; ++rl)
        mx = fmaxf(mx, s.warpStat[rl * qw + warp % qw][hh].x);
      float t = 0.0f;
      for (int rl = 0; rl < rowLanes; ++rl) {
        const float2 st = s.warpStat[rl * qw + warp % qw][hh];
        if (st.x != negInf())
          t += st.y * expf(st.x - mx);
      }
      M[hh] = mx;
      total[hh] = t;
      scaleMine[hh] = runMax[hh] != negInf() ? expf(runMax[hh] - mx) : 0.0f;
    }
  }
  for (int rl = 0; rl < rowLanes; ++rl) {
    if (rowLane == rl) {
#pragma unroll
      for (int hh = 0; hh < kQuad; ++hh) {
        const int h = h0 + hh;
        float *mbuf = s.buf + ((warp % qw) * kQuad + hh) * kFastMaxLatent;
        float *dst =
            gAttPart + (int64_t(h) * cut.ranges + range) * kFastMaxLatent;
        const bool out = rl == rowLanes - 1 && h < N;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int c = half ? c1 : c0;
          if (!(half ? has1 : has0))
            continue;
#pragma unroll
          for (int x = 0; x < 8; ++x) {
            float val = acc[hh][half * 8 + x] * scaleMine[hh];
            if (rl > 0)
              val += mbuf[c + x];
            if (out)
              dst[c + x] = val;
            else
              mbuf[c + x] = val;
          }
        }
        if (out && lane == 0)
          gAttStat[int64_t(h) * cut.ranges + range] =
              make_float2(M[hh], total[hh]);
      }
    }
    if (rowLanes > 1)
      __syncthreads();
  }
}

/// The 16 latent columns (two 16-byte chunks) and two rope values of cache
/// row j that lane t of warp w owns in a tensor-core B item, as bf16 pairs
/// (lat[i]: columns 64w + 16t + 2i, + 1); zeros past the range.
struct MmaRow {
  uint32_t lat[8];
  uint32_t rope;
  __device__ __forceinline__ void load(const uint16_t *cache, int64_t j,
                                       int64_t rowEnd, int warp, int t) {
    if (j < rowEnd) {
      const uint16_t *row = cache + j * (kMmaLatent + kMmaRope);
      const uint4 a = dev::ldStream16(row + warp * 64 + t * 16);
      const uint4 b = dev::ldStream16(row + warp * 64 + t * 16 + 8);
      lat[0] = a.x, lat[1] = a.y, lat[2] = a.z, lat[3] = a.w;
      lat[4] = b.x, lat[5] = b.y, lat[6] = b.z, lat[7] = b.w;
      rope = dev::ldStream4(row + kMmaLatent + warp * 8 + 2 * t);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        lat[i] = 0u;
      rope = 0u;
    }
  }
};

/// B item on the tensor cores: heads [32·group, 32·group + 32), rows
/// [rowBegin, rowEnd), the same partials as attendRangeItem (L = 512, R =
/// 64; mmaRanges). Per tile of 16 rows:
///  1. warp w's partial scores over its 72 columns: S_w = Q̂_w C_wᵀ (heads ×
///     rows; q̂ as hi + lo, two m16n8k16 products per k-step of 16 columns,
///     the rope one m16n8k8 against q_r), into shared memory;
///  2. thread (head tid / 8, rows 2(tid % 8), +1): the 8 partials summed in
///     warp order, scaled, the head's running max and Σ e updated (8-lane
///     shuffles), e written as bf16 hi and lo terms;
///  3. warp w: Ĉ_w = Ĉ_w · rescale + P C_w over its 64 latent columns, the
///     cache words it loaded in step 1 turned into B fragments by movmatrix.
/// The k order inside a warp's columns is free (a dot product's terms can
/// be taken in any order, so long as q̂ and the cache agree): lane t takes
/// columns 16t + 4k .. 16t + 4k + 3 for k-step k, which makes its two
/// 16-byte chunks of a row exactly its B fragments of the four k-steps and
/// its accumulators the columns [16t, 16t + 16) of four heads.
/// What the row loop reads of the params comes by value, in registers: read
/// through the reference, the params live in the kernel's stack, and their
/// reloads (local memory, evicted from L1 by the streamed cache) measured as
/// a third of the loop's stalls.
__device__ __noinline__ void
attendRangeItemMma(const uint16_t *q, int64_t P, const uint16_t *cache,
                   float scale, int64_t T, int64_t rowsPerRange, int ranges,
                   int group, int range, MmaRangeShared &s) {
  constexpr int L = kMmaLatent;
  constexpr int64_t R = kMmaRope;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int h0 = group * kMmaHeads;
  const int64_t rowBegin = min(T, int64_t(range) * rowsPerRange);
  const int64_t rowEnd = min(T, rowBegin + rowsPerRange);
  const int col = warp * 64 + t * 16;

  // A fragments of q̂ (hi, lo) for m-tile mt and k-step k, and of q_r.
  uint32_t qa[2][2][4][4], qra[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < 2; ++j) { // heads g and g + 8 of the tile
      const int64_t h = h0 + mt * 16 + j * 8 + g;
      const float *src = gQhat + h * L + col;
      float v[16];
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const float4 f = __ldcg(reinterpret_cast<const float4 *>(src) + x);
        v[4 * x] = f.x, v[4 * x + 1] = f.y, v[4 * x + 2] = f.z,
                  v[4 * x + 3] = f.w;
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        dev::splitBf16(v[4 * k], v[4 * k + 1], qa[0][mt][k][j],
                       qa[1][mt][k][j]);
        dev::splitBf16(v[4 * k + 2], v[4 * k + 3], qa[0][mt][k][2 + j],
                       qa[1][mt][k][2 + j]);
      }
      qra[mt][j] = __ldg(reinterpret_cast<const uint32_t *>(
          q + h * (P + R) + P + warp * 8 + 2 * t));
    }

  float acc[2][8][4]; // Ĉ: [m-tile][column pair i][fragment]
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int x = 0; x < 4; ++x)
        acc[mt][i][x] = 0.0f;
  // The softmax state of head tid / 8 (the same in its 8 threads).
  const int sh = tid >> 3, sr = (tid & 7) * 2;
  float runMax = negInf(), runSum = 0.0f;

  MmaRow cur[2], nxt[2];
  cur[0].load(cache, rowBegin + g, rowEnd, warp, t);
  cur[1].load(cache, rowBegin + 8 + g, rowEnd, warp, t);
#pragma unroll 1
  for (int64_t r0 = rowBegin; r0 < rowEnd; r0 += kMmaRows) {
    // The next tile's loads in flight during this one.
    nxt[0].load(cache, r0 + kMmaRows + g, rowEnd, warp, t);
    nxt[1].load(cache, r0 + kMmaRows + 8 + g, rowEnd, warp, t);

    // 1. The warp's partial scores.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          dev::mmaBf16K16(sc, qa[0][mt][k], cur[nt].lat[2 * k],
                          cur[nt].lat[2 * k + 1]);
          dev::mmaBf16K16(sc, qa[1][mt][k], cur[nt].lat[2 * k],
                          cur[nt].lat[2 * k + 1]);
        }
        dev::mmaBf16K8(sc, qra[mt][0], qra[mt][1], cur[nt].rope);
        const int hh = mt * 16 + g, rr = nt * 8 + 2 * t;
        *reinterpret_cast<float2 *>(&s.part[warp][hh][rr]) =
            make_float2(sc[0], sc[1]);
        *reinterpret_cast<float2 *>(&s.part[warp][hh + 8][rr]) =
            make_float2(sc[2], sc[3]);
      }
    __syncthreads();

    // 2. The online softmax of head sh over the tile's rows.
    {
      float2 d = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int w = 0; w < kFastThreads / 32; ++w) {
        const float2 x = *reinterpret_cast<const float2 *>(&s.part[w][sh][sr]);
        d.x += x.x;
        d.y += x.y;
      }
      const float s0 = r0 + sr < rowEnd ? d.x * scale : negInf();
      const float s1 = r0 + sr + 1 < rowEnd ? d.y * scale : negInf();
      float m = fmaxf(s0, s1);
#pragma unroll
      for (int o = 1; o < 8; o <<= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      const float newMax = fmaxf(runMax, m); // finite: row r0 is valid
      const float e0 = expf(s0 - newMax), e1 = expf(s1 - newMax);
      const float rescale = expf(runMax - newMax); // 0 on the first tile
      float es = e0 + e1;
#pragma unroll
      for (int o = 1; o < 8; o <<= 1)
        es += __shfl_xor_sync(0xffffffffu, es, o);
      runSum = runSum * rescale + es;
      runMax = newMax;
      dev::splitBf16(e0, e1, s.prob[0][sh][tid & 7], s.prob[1][sh][tid & 7]);
      if ((tid & 7) == 0)
        s.rescale[sh] = rescale;
    }
    __syncthreads();

    // 3. Ĉ_w = Ĉ_w · rescale + P C_w.
    uint32_t pa[2][2][4]; // [hi/lo][m-tile][fragment]
#pragma unroll
    for (int hl = 0; hl < 2; ++hl)
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        pa[hl][mt][0] = s.prob[hl][mt * 16 + g][t];
        pa[hl][mt][1] = s.prob[hl][mt * 16 + g + 8][t];
        pa[hl][mt][2] = s.prob[hl][mt * 16 + g][t + 4];
        pa[hl][mt][3] = s.prob[hl][mt * 16 + g + 8][t + 4];
      }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      const float f0 = s.rescale[mt * 16 + g], f1 = s.rescale[mt * 16 + g + 8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        acc[mt][i][0] *= f0;
        acc[mt][i][1] *= f0;
        acc[mt][i][2] *= f1;
        acc[mt][i][3] *= f1;
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      // Word i of the lanes' rows is an 8x8 block per 8 rows (its column
      // 2t' + b: cache column 64w + 16t' + 2i + b); transposed, lane 4g + t
      // holds rows 2t, 2t + 1 of its column g: the B fragment over rows.
      const uint32_t b0 = dev::transpose8x8(cur[0].lat[i]);
      const uint32_t b1 = dev::transpose8x8(cur[1].lat[i]);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        dev::mmaBf16K16(acc[mt][i], pa[0][mt], b0, b1);
        dev::mmaBf16K16(acc[mt][i], pa[1][mt], b0, b1);
      }
    }
    // Step 1 of the next tile rewrites `part` and step 2 `prob`: this
    // tile's readers are done with `prob` at the next tile's first barrier,
    // and `part` was last read before this tile's second.
#pragma unroll
    for (int x = 0; x < 2; ++x)
      cur[x] = nxt[x];
  }

  // The partials out: lane 4g + t of warp w holds heads g, g + 8, g + 16,
  // g + 24 of the group at columns 64w + 16t + 2i + (0, 1) in acc[.][i].
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t h = h0 + mt * 16 + j * 8 + g;
      float4 *dst = reinterpret_cast<float4 *>(
          gAttPart + (h * ranges + range) * kFastMaxLatent + col);
#pragma unroll
      for (int x = 0; x < 4; ++x)
        dst[x] = make_float4(acc[mt][2 * x][2 * j], acc[mt][2 * x][2 * j + 1],
                             acc[mt][2 * x + 1][2 * j],
                             acc[mt][2 * x + 1][2 * j + 1]);
    }
  if ((tid & 7) == 0)
    gAttStat[int64_t(h0 + sh) * ranges + range] =
        make_float2(runMax, runSum);
}

/// The merge of head h's ranges (M = max_s M_s; ĉ = Σ_s e^(M_s − M) part_s /
/// Σ_s e^(M_s − M) Σ_s, ranges in order): ĉ[col] for col in [col0, col1)
/// into dst[col − col0] (global or shared memory).
__device__ void mergeHead(const AttendCut &cut, int64_t h, int col0, int col1,
                          float *dst, FastShared &s) {
  const int tid = threadIdx.x, lane = tid & 31;
  const float2 *stat = gAttStat + h * cut.ranges;
  if (tid < 32) {
    float mx = negInf();
    for (int r = lane; r < cut.ranges; r += 32)
      mx = fmaxf(mx, __ldcg(stat + r).x);
    mx = dev::warpMax(mx);
    float t = 0.0f;
    for (int r = lane; r < cut.ranges; r += 32) {
      const float2 st = __ldcg(stat + r);
      const float f = st.x != negInf() ? expf(st.x - mx) : 0.0f;
      s.fac[r] = f;
      t += st.y * f;
    }
    t = dev::warpSum(t);
    if (lane == 0)
      s.inv = t > 0.0f ? 1.0f / t : 0.0f;
  }
  __syncthreads();
  const float inv = s.inv;
  for (int col = col0 + tid; col < col1; col += blockDim.x) {
    const float *part = gAttPart + h * cut.ranges * kFastMaxLatent + col;
    float v = 0.0f;
    for (int r = 0; r < cut.ranges; ++r)
      v = fmaf(__ldcg(part + int64_t(r) * kFastMaxLatent), s.fac[r], v);
    dst[col - col0] = v * inv;
  }
}

/// O item: out rows [row0, row0 + 32) of head h, o_i = R(W_UV[i] · ĉ),
/// gated; a warp per row, four rows per warp.
__device__ void outItem(const MlaAttendParams &p, const AttendCut &cut,
                        int64_t h, int64_t row0, FastShared &s) {
  const int L = static_cast<int>(p.kvLoraRank);
  const int64_t P = p.nopeDim, V = p.vDim;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c0 = lane * 8, c1 = (lane + 32) * 8;
  const bool has0 = c0 < L, has1 = c1 < L;
  const uint16_t *wUV = p.kvB + h * (P + V) * L + P * L;
  float ch[16];
  if (cut.nM == 0) { // merge the head's few ranges here, into shared memory
    mergeHead(cut, h, 0, L, s.buf, s);
    __syncthreads();
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bool ok = half ? has1 : has0;
    const int c = half ? c1 : c0;
    float4 a = make_float4(0, 0, 0, 0), b = a;
    if (ok && cut.nM == 0) {
      a = *reinterpret_cast<const float4 *>(s.buf + c);
      b = *reinterpret_cast<const float4 *>(s.buf + c + 4);
    } else if (ok) {
      a = __ldcg(reinterpret_cast<const float4 *>(gChat + h * L + c));
      b = __ldcg(reinterpret_cast<const float4 *>(gChat + h * L + c + 4));
    }
    float *d = ch + half * 8;
    d[0] = a.x, d[1] = a.y, d[2] = a.z, d[3] = a.w;
    d[4] = b.x, d[5] = b.y, d[6] = b.z, d[7] = b.w;
  }
  constexpr int kRows = kOutRowsPerItem / 8;
  Chunk<8> wv[kRows][2];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = row0 + warp * kRows + r;
    const uint16_t *row = wUV + i * L;
    wv[r][0].zero();
    wv[r][1].zero();
    if (i < V && has0)
      wv[r][0].loadRO(row + c0);
    if (i < V && has1)
      wv[r][1].loadRO(row + c1);
  }
  writeOutRows<kRows>(p, wv, ch, h, row0 + warp * kRows);
}

/// Whether the fast path takes this launch (the plans' shapes: K3 and
/// Kimi-Linear have L = 512, R = 64, 16-byte aligned cache and kv_b_proj).
__device__ __forceinline__ bool fastAttend(const MlaAttendParams &p) {
  return blockDim.x == kFastThreads && p.numHeads >= 1 &&
         p.numHeads <= kMlaAllHeadsMaxHeads && p.kvLoraRank >= 8 &&
         p.kvLoraRank <= kMlaAllHeadsMaxLatent && p.kvLoraRank % 8 == 0 &&
         p.ropeDim >= 0 && p.ropeDim <= kMlaAllHeadsMaxRope &&
         p.ropeDim % 8 == 0 && p.nopeDim >= 0 && p.vDim >= 0 &&
         dev::aligned16(p.cache) && dev::aligned16(p.kvB);
}

/// The fast path's work queue (see the section comment); not inlined (see
/// attendRangeItem).
__device__ __noinline__ void attendAllHeads(const MlaAttendParams &p,
                                            FastShared &s) {
  const AttendCut cut = cutAttend(p, attendLength(p));
  const int colItems = static_cast<int>(
      (p.kvLoraRank + kColsPerItem - 1) / kColsPerItem);
  const unsigned endB = cut.nQ + cut.nB, endM = endB + cut.nM,
                 end = endM + cut.nO;
  for (;;) {
    K3C_TRACE_T0();
    const unsigned t = dev::nextItem(gAttendQueue, &s.item);
    if (t >= end)
      break;
    if (t < cut.nQ) {
      qhatItem(p, t / colItems, int(t % colItems) * kColsPerItem, s);
      dev::finishItem(&gAttendDone[0]);
      K3C_TRACE(kMlaTraceQhat, t);
    } else if (t < endB) {
      dev::awaitCount(&gAttendDone[0], cut.nQ);
      K3C_TRACE(kMlaTraceWaited, kMlaTraceRange);
      const unsigned b = t - cut.nQ;
#ifdef K3C_TUNE_MLA_RANGE_TWICE
      // A measurement, not a form: the item twice (same writes), so the
      // trace shows what a second, warm run of it costs.
      for (int twice = 0; twice < 2; ++twice)
#endif
        if (mmaRanges(p))
          attendRangeItemMma(p.q, p.nopeDim, p.cache, p.scale, cut.T,
                             cut.rowsPerRange, cut.ranges, int(b / cut.ranges),
                             int(b % cut.ranges), s.mma);
        else
          attendRangeItem(p, cut, int(b / cut.ranges) * cut.quadsPerItem,
                          int(b % cut.ranges), s);
      dev::finishItem(&gAttendDone[1]);
      K3C_TRACE(kMlaTraceRange, b);
    } else if (t < endM) {
      dev::awaitCount(&gAttendDone[1], cut.nB);
      K3C_TRACE(kMlaTraceWaited, kMlaTraceMerge);
      const unsigned m = t - endB;
      const int64_t h = m / colItems;
      const int col0 = int(m % colItems) * kColsPerItem;
      const int col1 = min(col0 + kColsPerItem, int(p.kvLoraRank));
      mergeHead(cut, h, col0, col1, gChat + h * p.kvLoraRank + col0, s);
      dev::finishItem(&gAttendDone[2]);
      K3C_TRACE(kMlaTraceMerge, m);
    } else {
      // After the merge, or after the ranges when O merges them itself.
      if (cut.nM > 0)
        dev::awaitCount(&gAttendDone[2], cut.nM);
      else
        dev::awaitCount(&gAttendDone[1], cut.nB);
      K3C_TRACE(kMlaTraceWaited, kMlaTraceOut);
      const unsigned o = t - endM;
      const unsigned perHead = cut.nO / unsigned(p.numHeads);
      outItem(p, cut, o / perHead, int64_t(o % perHead) * kOutRowsPerItem, s);
      K3C_TRACE(kMlaTraceOut, o);
    }
  }
  dev::leaveQueue(gAttendQueue, gAttendDone, 3);
}

} // namespace

/// k3_mla_attend_clustered: k3_mla_attend's math (MlaAttendParams) on a
/// cluster of kMlaClusterBlocks blocks of 256 threads per head (grid
/// kMlaClusterBlocks · N), the clustered form above. Limits: L = 512, P = V =
/// 128, R a multiple of 8 in [8, 256], 16-byte aligned cache and kv_b_proj, at
/// most kMlaClusteredMaxRows rows; outside them the kernel writes NaN to out
/// (codegen launches it only for such shapes), except above a `handover`
/// length, where it writes nothing (a later mla_attend launch does).
extern "C" __global__ void __launch_bounds__(kAttendMaxThreads, 2)
    k3_mla_attend_clustered(const MlaAttendParams p) {
  dev::allowDependentLaunch();
  dev::prefetchL2Share(p.l2Prefetch);
  __shared__ AttendShared s;
  // One cluster size only: two forms inlined here spill at 128 registers.
  if (clusteredShape(p) && attendClustered<kMlaClusterBlocks>(p, s))
    return;
  dev::waitForPriorGrids();
  dev::fillNaN(p.out, p.numHeads * p.vDim); // never silent
}

/// k3_mla_attend_clustered_rows: k3_mla_attend_clustered for several rows
/// (MlaAttendRowsParams): block (x, y) is block x of row y's launch, its
/// params rows[y] copied to shared memory first. A row only reads its cache
/// (through its own length), so rows of one sequence (a prompt chunk, its
/// rows appended by the launch before) run together as well as rows of
/// different ones; each row's output is its own launch's bit for bit.
extern "C" __global__ void __launch_bounds__(kAttendMaxThreads, 2)
    k3_mla_attend_clustered_rows(const MlaAttendRowsParams rp) {
  dev::allowDependentLaunch();
  __shared__ AttendShared s;
  __shared__ __align__(16) dev::RowParams<MlaAttendParams> row;
  dev::loadRowParams(rp.rows, row);
  const MlaAttendParams &p = row.get();
  dev::prefetchL2Share(p.l2Prefetch);
  if (clusteredShape(p, static_cast<unsigned>(rp.count)) &&
      attendClustered<kMlaClusterBlocks>(p, s))
    return;
  dev::waitForPriorGrids();
  dev::fillNaN(p.out, p.numHeads * p.vDim); // never silent
}

/// k3_mla_cache_append: cache[pos] = [rms_norm(kv[:L], normWeight, eps) |
/// kv[L:]] (MlaCacheAppendParams), rounding as rms_norm: n = R(x·r),
/// out = R(n·w) with r = 1 / sqrt(mean(x²) + eps).
/// Grid: any (codegen: 1). Every block sums the L squares itself (block
/// reduction, 1 KB read for K3); the row's L + R elements are then written
/// grid-stride, so any grid writes each element exactly once.
namespace {

/// k3_mla_cache_append's body (its params a kernel parameter, or a row's
/// in shared memory).
__device__ __forceinline__ void cacheAppend(const MlaCacheAppendParams &p) {
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

} // namespace

extern "C" __global__ void k3_mla_cache_append(const MlaCacheAppendParams p) {
  cacheAppend(p);
}

/// k3_mla_cache_append_rows: k3_mla_cache_append for several rows
/// (MlaCacheAppendRowsParams), block (x, y) block x of row y's launch.
extern "C" __global__ void
k3_mla_cache_append_rows(const MlaCacheAppendRowsParams rp) {
  __shared__ __align__(16) dev::RowParams<MlaCacheAppendParams> row;
  dev::loadRowParams(rp.rows, row);
  cacheAppend(row.get());
}

/// k3_mla_attend: absorbed decode attention over cache rows [0, length) with
/// the optional output gate (MlaAttendParams), per head h:
///   q̂ = W_UKᵀ q_nope (fp32), s_j = (q̂·c_j + q_r·k_r_j)·scale,
///   ĉ = softmax(s)·C, out = R(R(W_UV ĉ) · sigmoid(gate)) (gate optional).
/// Two forms. From kAllHeadsMinRows (4096) rows, with blockDim 256 and the
/// plans' shapes (fastAttend: L <= 512, R <= 64, multiples of 8, aligned),
/// the all-heads form (attendAllHeads): one work queue over the grid that
/// reads each cache row once per group of up to 32 heads, its cut a function
/// of N, L, V and the context only (the same bits for any grid). Otherwise
/// the per-head form below.
/// Grid: S = min(16, grid / N, length / max(256, 8N)) splits of the rows per
/// head when S >= 2 (N <= 128): block i attends head i % N over its split
/// i / N of the rows [0, length), leaves (max, Σ, Σ e·c) in module scratch and
/// counts itself; the block finishing a head's last split merges the S
/// partials in split order and computes W_UV ĉ (no block ever waits for
/// another). A grid below 2N: heads block-stride, one block per head.
/// (codegen: 132 blocks of 256 threads for the plans' shapes, else N · S,
/// S from the planned context.)
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
/// L = 512, R = 64 — are inside). With a `handover` length, lengths up to it
/// are left alone (an mla_attend_clustered launch before it attends them).
/// The params are __grid_constant__: the non-inlined queue loop and items
/// take them by reference, which otherwise copies them into every thread's
/// stack (128 of its 312 bytes) and reads them back from local memory
/// (measured: 66.3 → 63.6 µs at 32K rows, 42.1 → 40.4 at 4096, H100,
/// docs/PERF.md 2026-12-07).
extern "C" __global__ void __launch_bounds__(kAttendMaxThreads)
    k3_mla_attend(const __grid_constant__ MlaAttendParams p) {
  dev::allowDependentLaunch();
  dev::prefetchL2Share(p.l2Prefetch);
  __shared__ union {
    AttendShared head;
    FastShared fast;
  } sh;
  K3C_TRACE_T0();
  dev::waitForPriorGrids();
  K3C_TRACE(kMlaTraceStart, 0u);
  if (!mlaAttendOwnsRows(p, /*clustered=*/false, attendLength(p)))
    return; // the mla_attend_clustered launch before this one attended it
  if (fastAttend(p) && attendLength(p) >= kAllHeadsMinRows) {
    // W_UV of every head asked of L2 for the O items, a head per block in
    // turn (W_UK is read at once by the q̂ items).
    const int64_t P = p.nopeDim, V = p.vDim, L = p.kvLoraRank;
    for (int64_t h = blockIdx.x; h < p.numHeads; h += gridDim.x)
      prefetchL2Block(p.kvB + h * (P + V) * L + P * L, V * L * 2);
    attendAllHeads(p, sh.fast);
    return;
  }
  AttendShared &s = sh.head;
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

//===----------------------------------------------------------------------===//
// k3_mla_attend_clustered_chunk: mla_attend_clustered for the rows of a
// prompt chunk (MlaAttendRowsParams: one cache, row t attending its own
// length with its own q, gate and out; MlaParams.h kMlaChunk*), a block per
// (head h = blockIdx.x, tile of kMlaChunkRows rows = blockIdx.y), all in
// fp32 as the per-row forms:
//   1. q̂_t = W_UK,hᵀ q_nope,t for the tile's rows (thread i: latent columns
//      2i, 2i + 1; W_UK read once per block, not once per row);
//   2. the cache in rounds of kMlaChunkTile rows staged in shared memory
//      (each row read once per block): the scores (warp w: tile rows 2w and
//      2w + 1, lane: a cache row), an online softmax per row (its running
//      max and sum in the warp's registers), then ĉ_t ← α_t ĉ_t + Σ_j p_tj c_j
//      (thread i: latent columns 2i, 2i + 1 of all the tile's rows, in
//      registers);
//   3. o_t = R(W_UV,h ĉ_t / Σ_t), gated as mla_attend (thread i: row i / 2 of
//      W_UV, eight of the tile's rows).
// Within fp32 rounding of the rows form (other summation orders; the
// softmax weights are applied unnormalised and ĉ divided by their sum).
// A row attends only lengths mla_attend_clustered owns (the handover: the
// others' outputs are left alone); a row of another cache than the tile's
// first, or past kMlaClusteredMaxRows rows without a handover, writes NaN.
// Grid: (>= numHeads, ceil(count / kMlaChunkRows)); blocks kMlaChunkThreads,
// kMlaChunkSmemBytes of dynamic shared memory. Limits: mlaChunkShape (else
// every row's head h is NaN).
//===----------------------------------------------------------------------===//
namespace {

constexpr int kCQ = kMlaChunkRows, kCT = kMlaChunkTile, kCP = kMlaChunkPitch;
constexpr int kCL = 512, kCR = 64, kCN = 128, kCV = 128;
constexpr int kCRow = kCL + kCR; ///< a cache row's bf16 values

/// Dynamic shared memory of k3_mla_attend_clustered_chunk.
struct AttendChunkShared {
  float qHat[kCQ][kCL];    ///< q̂ of the tile's rows, then ĉ / Σ
  float qr[kCQ][kCR];      ///< q_r
  uint16_t tile[kCT][kCP]; ///< the round's cache rows (q_nope first)
  float w[kCQ][kCT];       ///< the round's softmax weights e^(s − M)
  float alpha[kCQ];        ///< the round's rescale of each row's ĉ
  float sum[kCQ];          ///< Σ e^(s − M) of each row, at the end
  int len[kCQ];            ///< rows attended (0: none)
  int state[kCQ];          ///< 0: attend, 1: not this launch's, 2: NaN
};
static_assert(sizeof(AttendChunkShared) == kMlaChunkSmemBytes,
              "kMlaChunkSmemBytes (MlaParams.h) states this layout's size");
static_assert(kCQ == 2 * (kMlaChunkThreads / 32) && kCT == 32 &&
                  kMlaChunkThreads * 2 == kCL && kMlaChunkThreads == 2 * kCV &&
                  kCQ == 16,
              "the thread mappings of the three phases");

/// acc += Σ_i x[i] · a[i] over 8 values, a at `a` (16-byte aligned).
__device__ __forceinline__ float dot8(const float (&x)[8], const float *a,
                                      float acc) {
  const float4 a0 = *reinterpret_cast<const float4 *>(a);
  const float4 a1 = *reinterpret_cast<const float4 *>(a + 4);
  acc = fmaf(x[0], a0.x, acc);
  acc = fmaf(x[1], a0.y, acc);
  acc = fmaf(x[2], a0.z, acc);
  acc = fmaf(x[3], a0.w, acc);
  acc = fmaf(x[4], a1.x, acc);
  acc = fmaf(x[5], a1.y, acc);
  acc = fmaf(x[6], a1.z, acc);
  return fmaf(x[7], a1.w, acc);
}

/// One row's online softmax over the round's scores (a lane per cache row;
/// −∞ for rows it does not attend): the new max M, the round's weights
/// e^(s − M) into w, the rescale α of its earlier ĉ, and its running sum.
__device__ __forceinline__ void softmaxRound(float s, float &m, float &l,
                                             float *w, float *alpha, int lane) {
  const float mn = fmaxf(m, dev::warpMax(s));
  const float a = mn == -INFINITY ? 1.0f : expf(m - mn);
  const float e = mn == -INFINITY ? 0.0f : expf(s - mn);
  l = l * a + dev::warpSum(e);
  m = mn;
  w[lane] = e;
  if (lane == 0)
    *alpha = a;
}

} // namespace

namespace {

/// Pointers of a tile's rows, in shared memory.
struct ChunkRowPtrs {
  const uint16_t *q[kCQ];
  const uint16_t *gate[kCQ];
  const uint16_t *cache[kCQ];
  uint16_t *out[kCQ];
  int64_t outLen[kCQ]; ///< numHeads · vDim of the row's own out
};

/// The tile's rows t0 + [0, nq): each row's state and length into sm, its
/// pointers into ptr (threads < kCQ; the caller synchronises). A row that
/// attends (mlaAttendOwnsRows) and fits (p's weights and heads, the chunk
/// shape, 1 to kMlaClusteredMaxRows rows and, with `oneCache`, p's cache)
/// is state 0, one that does not fit 2 (NaN), one past the handover 1.
__device__ __forceinline__ void
chunkRows(const MlaAttendRowsParams &rp, const MlaAttendParams &p, int t0,
          int nq, bool oneCache, AttendChunkShared &sm, ChunkRowPtrs &ptr) {
  const int tid = threadIdx.x;
  if (tid >= kCQ)
    return;
  int state = 1, len = 0;
  if (tid < nq) {
    const MlaAttendParams &r = rp.rows[t0 + tid];
    const int64_t n = attendLength(r);
    if (mlaAttendOwnsRows(r, true, n)) {
      const bool fits = (!oneCache || r.cache == p.cache) && r.kvB == p.kvB &&
                        r.numHeads == p.numHeads && mlaChunkShape(r) &&
                        n >= 1 && n <= kMlaClusteredMaxRows;
      state = fits ? 0 : 2;
      len = fits ? static_cast<int>(n) : 0;
    }
    ptr.q[tid] = r.q;
    ptr.gate[tid] = r.gate;
    ptr.cache[tid] = r.cache;
    ptr.out[tid] = r.out;
    ptr.outLen[tid] = r.numHeads * r.vDim;
  }
  sm.state[tid] = state;
  sm.len[tid] = len;
}

/// Phase 1 of the chunk forms: q_r of the tile's attending rows into sm.qr
/// and q̂_t = W_UK,hᵀ q_nope,t into sm.qHat (thread i: latent columns 2i,
/// 2i + 1; W_UK read once per block); zeros for the other rows. All threads;
/// sm.len set and synchronised before.
__device__ __forceinline__ void chunkQHat(const MlaAttendParams &p, int h,
                                          AttendChunkShared &sm,
                                          const ChunkRowPtrs &ptr) {
  const int tid = threadIdx.x;
  // q_nope (fp32, in the room of the cache rows) and q_r of the rows.
  float *const qn = reinterpret_cast<float *>(&sm.tile[0][0]);
  static_assert(sizeof(float) * kCQ * kCN <= sizeof(AttendChunkShared::tile),
                "q_nope fits the room of the cache rows");
  constexpr int kQPieces = (kCN + kCR) / 8;
  for (int i = tid; i < kCQ * kQPieces; i += kMlaChunkThreads) {
    const int t = i / kQPieces, k = i % kQPieces;
    float x[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (sm.len[t] > 0)
      dev::bf16x8ToF(
          *reinterpret_cast<const uint4 *>(
              ptr.q[t] + static_cast<int64_t>(h) * (kCN + kCR) + 8 * k),
          x);
    float *dst =
        k < kCN / 8 ? qn + t * kCN + 8 * k : &sm.qr[t][8 * (k - kCN / 8)];
#pragma unroll
    for (int e = 0; e < 8; ++e)
      dst[e] = x[e];
  }
  __syncthreads();
  float acc[kCQ][2];
#pragma unroll
  for (int t = 0; t < kCQ; ++t)
    acc[t][0] = acc[t][1] = 0.0f;
  const uint16_t *wuk =
      p.kvB + static_cast<int64_t>(h) * (kCN + kCV) * kCL + 2 * tid;
#pragma unroll 4
  for (int k = 0; k < kCN; ++k) {
    const uint32_t w2 =
        __ldg(reinterpret_cast<const uint32_t *>(wuk + k * kCL));
    const float w0 = dev::loF(w2), w1 = dev::hiF(w2);
#pragma unroll
    for (int t = 0; t < kCQ; ++t) {
      const float x = qn[t * kCN + k];
      acc[t][0] = fmaf(x, w0, acc[t][0]);
      acc[t][1] = fmaf(x, w1, acc[t][1]);
    }
  }
#pragma unroll
  for (int t = 0; t < kCQ; ++t)
    *reinterpret_cast<float2 *>(&sm.qHat[t][2 * tid]) =
        make_float2(acc[t][0], acc[t][1]);
}

/// Phase 3 of the chunk forms: o_t = R(W_UV,h ĉ_t), gated, for the tile's
/// rows t < nq of state 0 (ĉ_t / Σ_t in sm.qHat), NaN for state 2, nothing
/// for state 1. Thread i: row i / 2 of W_UV against tile rows 8·(i % 2) +
/// [0, 8). All threads; sm.qHat synchronised before.
__device__ __forceinline__ void chunkOut(const MlaAttendParams &p, int h,
                                         int nq, const AttendChunkShared &sm,
                                         const ChunkRowPtrs &ptr) {
  const int tid = threadIdx.x;
  const int v = tid >> 1, half = tid & 1;
  const uint16_t *wuv =
      p.kvB + (static_cast<int64_t>(h) * (kCN + kCV) + kCN + v) * kCL;
  float o[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 2
  for (int k = 0; k < kCL / 8; ++k) {
    float x[8];
    dev::bf16x8ToF(__ldg(reinterpret_cast<const uint4 *>(wuv + 8 * k)), x);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      o[i] = dot8(x, &sm.qHat[8 * half + i][8 * k], o[i]);
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int t = 8 * half + i;
    if (t >= nq || sm.state[t] == 1)
      continue;
    const int64_t c = static_cast<int64_t>(h) * kCV + v;
    if (sm.state[t] == 2) {
      // A row of another shape: NaN within its own out only.
      if (c < ptr.outLen[t])
        ptr.out[t][c] = dev::kBf16NaN;
      continue;
    }
    float r = dev::roundBf16(o[i]);
    if (ptr.gate[t])
      r = r * dev::sigmoidF(dev::bf16ToF(__ldg(ptr.gate[t] + c)));
    ptr.out[t][c] = dev::fToBf16(r);
  }
}

/// Rows t0 + [0, nq) of rp, every output of head h NaN (a launch outside
/// the chunk forms' limits), each row by its own heads and vDim.
__device__ __forceinline__ void chunkNaN(const MlaAttendRowsParams &rp, int h,
                                         int t0, int nq) {
  dev::waitForPriorGrids();
  for (int t = 0; t < nq; ++t) {
    const MlaAttendParams &r = rp.rows[t0 + t];
    if (h < r.numHeads)
      for (int64_t i = threadIdx.x; i < r.vDim; i += blockDim.x)
        r.out[h * r.vDim + i] = dev::kBf16NaN;
  }
}

/// The block's rows t0 + [0, nq) (tiles of `per` rows, grid y) and head h
/// (grid x), the first row's params copied into `first`; false when the
/// block has no rows or no head (the same answer for all its threads).
__device__ __forceinline__ bool
chunkTile(const MlaAttendRowsParams &rp, int per,
          dev::RowParams<MlaAttendParams> &first, int &t0, int &nq, int &h) {
  t0 = static_cast<int>(blockIdx.y) * per;
  nq = min(per, rp.count - t0);
  if (nq <= 0)
    return false;
  dev::loadRowParams(rp.rows, first, t0);
  h = static_cast<int>(blockIdx.x);
  return h < first.get().numHeads;
}

/// Whether a chunk-form launch has the shape its kernels take.
__device__ __forceinline__ bool chunkLaunchOk(const MlaAttendParams &p) {
  return blockDim.x == kMlaChunkThreads && mlaChunkShape(p) &&
         dev::dynamicSmemBytes() >= sizeof(AttendChunkShared);
}

} // namespace

extern "C" __global__ void __launch_bounds__(kMlaChunkThreads)
    k3_mla_attend_clustered_chunk(const MlaAttendRowsParams rp) {
  extern __shared__ __align__(16) unsigned char attendChunkBytes[];
  AttendChunkShared &sm =
      *reinterpret_cast<AttendChunkShared *>(attendChunkBytes);
  __shared__ __align__(16) dev::RowParams<MlaAttendParams> first;
  __shared__ ChunkRowPtrs ptr;
  dev::allowDependentLaunch();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int t0, nq, h;
  if (!chunkTile(rp, kCQ, first, t0, nq, h))
    return;
  const MlaAttendParams &p = first.get();
  if (!chunkLaunchOk(p)) {
    chunkNaN(rp, h, t0, nq);
    return;
  }
  dev::waitForPriorGrids(); // q, the cache rows and the step blocks
  chunkRows(rp, p, t0, nq, /*oneCache=*/true, sm, ptr);
  __syncthreads();

  // 1. q̂ of the tile's rows.
  chunkQHat(p, h, sm, ptr);
  // maxLen: the rounds; minLen: the shortest attending row's length, below
  // which every attending row takes every cache row of a round.
  int maxLen = 0, minLen = kMlaClusteredMaxRows;
  float acc[kCQ][2];
#pragma unroll
  for (int t = 0; t < kCQ; ++t) {
    acc[t][0] = acc[t][1] = 0.0f;
    maxLen = max(maxLen, sm.len[t]);
    if (sm.len[t] > 0)
      minLen = min(minLen, sm.len[t]);
  }

  // 2. The cache in rounds of kCT rows (rows past maxLen staged as zeros).
  const int ta = 2 * warp, tb = ta + 1;
  const int lenA = sm.len[ta], lenB = sm.len[tb];
  float mA = -INFINITY, mB = -INFINITY, lA = 0.0f, lB = 0.0f;
  for (int j0 = 0; j0 < maxLen; j0 += kCT) {
    __syncthreads(); // q̂ written; the last round's rows and weights read
    const int rows = min(kCT, maxLen - j0);
    for (int i = tid; i < kCT * (kCRow / 8); i += kMlaChunkThreads) {
      const int r = i / (kCRow / 8), k = i % (kCRow / 8);
      uint4 u = make_uint4(0u, 0u, 0u, 0u);
      if (r < rows)
        u = *reinterpret_cast<const uint4 *>(
            p.cache + static_cast<int64_t>(j0 + r) * kCRow + 8 * k);
      *reinterpret_cast<uint4 *>(&sm.tile[r][8 * k]) = u;
    }
    __syncthreads();
    float sa = 0.0f, sb = 0.0f;
    {
      const uint16_t *c = sm.tile[lane];
#pragma unroll 4
      for (int k = 0; k < kCL / 8; ++k) {
        float x[8];
        dev::bf16x8ToF(*reinterpret_cast<const uint4 *>(c + 8 * k), x);
        sa = dot8(x, &sm.qHat[ta][8 * k], sa);
        sb = dot8(x, &sm.qHat[tb][8 * k], sb);
      }
#pragma unroll
      for (int k = 0; k < kCR / 8; ++k) {
        float x[8];
        dev::bf16x8ToF(*reinterpret_cast<const uint4 *>(c + kCL + 8 * k), x);
        sa = dot8(x, &sm.qr[ta][8 * k], sa);
        sb = dot8(x, &sm.qr[tb][8 * k], sb);
      }
    }
    const int j = j0 + lane;
    softmaxRound(j < lenA ? sa * p.scale : -INFINITY, mA, lA, sm.w[ta],
                 &sm.alpha[ta], lane);
    softmaxRound(j < lenB ? sb * p.scale : -INFINITY, mB, lB, sm.w[tb],
                 &sm.alpha[tb], lane);
    __syncthreads();
#pragma unroll
    for (int t = 0; t < kCQ; ++t) {
      const float a = sm.alpha[t];
      acc[t][0] *= a;
      acc[t][1] *= a;
    }
    if (j0 + kCT > minLen) {
      // A round past some row's length: each row adds only its own cache
      // rows, as the rows form does (a weight of 0 would still carry a
      // non-finite value of a later position into the sum).
      for (int jj = 0; jj < rows; ++jj) {
        const uint32_t u =
            *reinterpret_cast<const uint32_t *>(&sm.tile[jj][2 * tid]);
        const float c0 = dev::loF(u), c1 = dev::hiF(u);
#pragma unroll
        for (int t = 0; t < kCQ; ++t) {
          if (j0 + jj >= sm.len[t])
            continue;
          const float w = sm.w[t][jj];
          acc[t][0] = fmaf(w, c0, acc[t][0]);
          acc[t][1] = fmaf(w, c1, acc[t][1]);
        }
      }
      continue;
    }
#pragma unroll 2
    for (int jj = 0; jj < kCT; jj += 4) {
      float2 c[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint32_t u =
            *reinterpret_cast<const uint32_t *>(&sm.tile[jj + q][2 * tid]);
        c[q] = make_float2(dev::loF(u), dev::hiF(u));
      }
#pragma unroll
      for (int t = 0; t < kCQ; ++t) {
        const float4 w4 = *reinterpret_cast<const float4 *>(&sm.w[t][jj]);
        acc[t][0] = fmaf(w4.x, c[0].x, acc[t][0]);
        acc[t][1] = fmaf(w4.x, c[0].y, acc[t][1]);
        acc[t][0] = fmaf(w4.y, c[1].x, acc[t][0]);
        acc[t][1] = fmaf(w4.y, c[1].y, acc[t][1]);
        acc[t][0] = fmaf(w4.z, c[2].x, acc[t][0]);
        acc[t][1] = fmaf(w4.z, c[2].y, acc[t][1]);
        acc[t][0] = fmaf(w4.w, c[3].x, acc[t][0]);
        acc[t][1] = fmaf(w4.w, c[3].y, acc[t][1]);
      }
    }
  }
  if (lane == 0) {
    sm.sum[ta] = lA;
    sm.sum[tb] = lB;
  }
  __syncthreads();
#pragma unroll
  for (int t = 0; t < kCQ; ++t) {
    // By the row's length, not by Σ > 0: a non-finite score makes Σ NaN,
    // and the row's output must be NaN then, as the rows form's is.
    const float l = sm.sum[t];
    *reinterpret_cast<float2 *>(&sm.qHat[t][2 * tid]) =
        sm.len[t] > 0 ? make_float2(acc[t][0] / l, acc[t][1] / l)
                      : make_float2(0.0f, 0.0f);
  }
  __syncthreads();

  // 3. o_t = R(W_UV,h ĉ_t / Σ_t), gated.
  chunkOut(p, h, nq, sm, ptr);
}

//===----------------------------------------------------------------------===//
// k3_mla_attend_clustered_batch: mla_attend_clustered for rows of any
// caches (a decode batch's sequences, MlaAttendRowsParams as the rows
// form), a block per (head h = blockIdx.x, tile of ceil(count / grid y)
// <= kMlaChunkRows rows = blockIdx.y): the chunk form's q̂ of the tile's rows
// from one read of W_UK and its W_UV ĉ / Σ (chunkQHat, chunkOut), so the
// head's weights are read once per tile, not once per row and head; between
// them each row in turn attends its own cache in rounds of kMlaChunkTile
// rows staged in shared memory (the scores a warp per 4 cache rows, the
// online softmax by warp 0, ĉ of the row's 512 columns 2 a thread in
// registers). The rows form runs a 4-block cluster per (row, head): at batch
// 16, 2048 blocks in ~8 waves of a latency-bound chain. All in fp32 as the
// other forms, within rounding of the rows form. A row attends only lengths
// mla_attend_clustered owns (the handover: the others' outputs are left
// alone); a row of other weights or heads than the tile's first, or past
// kMlaClusteredMaxRows rows without a handover, writes NaN.
// Grid: (>= numHeads, G), blocks kMlaChunkThreads, kMlaChunkSmemBytes of
// dynamic shared memory; G >= ceil(count / kMlaChunkRows). Limits:
// mlaChunkShape (else every row's head h is NaN).
//===----------------------------------------------------------------------===//
extern "C" __global__ void __launch_bounds__(kMlaChunkThreads)
    k3_mla_attend_clustered_batch(const MlaAttendRowsParams rp) {
  extern __shared__ __align__(16) unsigned char attendChunkBytes[];
  AttendChunkShared &sm =
      *reinterpret_cast<AttendChunkShared *>(attendChunkBytes);
  __shared__ __align__(16) dev::RowParams<MlaAttendParams> first;
  __shared__ ChunkRowPtrs ptr;
  dev::allowDependentLaunch();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int per = (rp.count + static_cast<int>(gridDim.y) - 1) /
                  static_cast<int>(gridDim.y);
  int t0, nq, h;
  if (!chunkTile(rp, per, first, t0, nq, h))
    return;
  const MlaAttendParams &p = first.get();
  if (per > kCQ || !chunkLaunchOk(p)) {
    chunkNaN(rp, h, t0, nq);
    return;
  }
  dev::waitForPriorGrids(); // q, the cache rows and the step blocks
  chunkRows(rp, p, t0, nq, /*oneCache=*/false, sm, ptr);
  __syncthreads();

  // 1. q̂ of the tile's rows.
  chunkQHat(p, h, sm, ptr);

  // 2. Each attending row against its own cache.
  constexpr int kRowsPerWarp = kCT / (kMlaChunkThreads / 32);
  static_assert(kRowsPerWarp * (kMlaChunkThreads / 32) == kCT,
                "the warps share a round's cache rows evenly");
  constexpr int kChunks = kCRow / 8; // 16-byte chunks of a cache row
  for (int t = 0; t < nq; ++t) {
    const int len = sm.len[t];
    if (len == 0)
      continue;
    const uint16_t *cache = ptr.cache[t];
    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (int j0 = 0; j0 < len; j0 += kCT) {
      // q̂ written (the first round); the last round's rows and weights read.
      __syncthreads();
      const int rows = min(kCT, len - j0);
      for (int i = tid; i < rows * kChunks; i += kMlaChunkThreads) {
        const int r = i / kChunks, k = i % kChunks;
        *reinterpret_cast<uint4 *>(&sm.tile[r][8 * k]) =
            *reinterpret_cast<const uint4 *>(
                cache + static_cast<int64_t>(j0 + r) * kCRow + 8 * k);
      }
      __syncthreads();
      // Scores: warp w the round's rows kRowsPerWarp·w + [0, kRowsPerWarp),
      // lane: chunks lane + 32i of the row (64 latent, then 8 rope).
#pragma unroll
      for (int q = 0; q < kRowsPerWarp; ++q) {
        const int r = kRowsPerWarp * warp + q;
        float s = 0.0f;
        if (r < rows) {
          for (int k = lane; k < kChunks; k += 32) {
            float x[8];
            dev::bf16x8ToF(*reinterpret_cast<const uint4 *>(&sm.tile[r][8 * k]),
                           x);
            s = dot8(x,
                     k < kCL / 8 ? &sm.qHat[t][8 * k]
                                 : &sm.qr[t][8 * (k - kCL / 8)],
                     s);
          }
        }
        s = dev::warpSum(s);
        if (lane == 0)
          sm.w[0][r] = r < rows ? s * p.scale : -INFINITY;
      }
      __syncthreads();
      if (warp == 0)
        softmaxRound(sm.w[0][lane], m, l, sm.w[0], &sm.alpha[0], lane);
      __syncthreads();
      const float a = sm.alpha[0];
      acc0 *= a;
      acc1 *= a;
      for (int jj = 0; jj < rows; ++jj) {
        const uint32_t u =
            *reinterpret_cast<const uint32_t *>(&sm.tile[jj][2 * tid]);
        const float w = sm.w[0][jj];
        acc0 = fmaf(w, dev::loF(u), acc0);
        acc1 = fmaf(w, dev::hiF(u), acc1);
      }
    }
    if (tid == 0)
      sm.sum[t] = l; // warp 0's running sum (every lane holds it)
    // Every thread's last reads of q̂_t and the round's weights are done
    // before ĉ_t takes q̂_t's place.
    __syncthreads();
    const float lt = sm.sum[t];
    *reinterpret_cast<float2 *>(&sm.qHat[t][2 * tid]) =
        make_float2(acc0 / lt, acc1 / lt);
  }
  __syncthreads();

  // 3. o_t = R(W_UV,h ĉ_t / Σ_t), gated (rows of length 0: q̂ of zeros).
  chunkOut(p, h, nq, sm, ptr);
}
