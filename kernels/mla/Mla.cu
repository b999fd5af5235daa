//===- Mla.cu - MLA (full attention) decode ops (CUDA) --------------------===//
//
// The cache append and the absorbed-form attention of one decode token
// (K3.md §3, NUMERICS.md "MLA"), mirroring MlaCpu.cpp: the same rounding
// points, fp32 everywhere else; only the accumulation order differs (and FMA
// contraction in the dot products).
//
// mla_attend is fp32 FMA-bound, not bandwidth-bound, at long contexts: every
// cache row costs each head L + R multiply-adds for its score and L for ĉ
// (K3: 96 · 1088 per row, 6.8 G per token at 65536 rows, ~205 µs at the
// H200's 67 fp32 TFLOP/s, against ~23 µs to read the bytes). So the split
// path below is organised as two small GEMMs per tile of cache rows with the
// operands in registers and shared memory, and reads each cache row from HBM
// about once (the head groups of a tile run at the same time and share it
// through L2).
//
// THE SPLIT PATH (blockDim 256, L <= 512, R <= 64, L and R multiples of 8,
// 16-byte aligned cache / kv_b_proj: the K3 shapes). One launch, four phases
// drawn from one work queue (the scheme of kernels/moe/Moe.cu): blocks draw
// numbered items from an atomic ticket; all items of a phase come before
// those of the next; a finished item is counted (fence + atomic add) and a
// block that draws an item of a later phase first issues the loads that do
// not depend on the earlier phase, then waits (acquire) until every item of
// the earlier phase is counted. Tickets are drawn in order by running blocks
// and phase A never waits, so every awaited item belongs to a running block:
// no deadlock with any grid. The last block out zeroes the counters.
//  A  (head, 128 latent columns): q̂ = W_UKᵀ q_nope into module scratch
//     (reads the W_UK half of kv_b_proj once).
//  B  (split, group of 16 heads), split-major: a split is a fixed run of
//     16-row tiles; per tile the block stages the rows as fp32 in shared
//     memory (converted once, 36 KB), computes the 16 × 16 scores, an
//     online-softmax step per head and ĉ += p · C; a thread holds q̂ and ĉ
//     of 2 heads × 16 columns in registers (every tile value it loads
//     feeds 4 FMAs). The split's (max, Σ exp, ĉ [L]) of each head go to
//     module scratch. The six head groups of a K3 split are adjacent items,
//     so a tile comes from HBM once and from L2 for the others.
//  C  (head, 128 latent columns): the splits' states merged in split order
//     (deterministic), normalised: ĉ into the q̂ scratch (no longer read).
//  D  (head, 32 output rows): o = R(W_UV ĉ), optionally gated (reads the
//     W_UV half once; phase C items prefetch it into L2 while they wait).
// The splits depend on (length, N, L) only: up to kMaxSplits splits of
// ceil(tiles / kMaxSplits) tiles. Every reduction has a fixed order, so the
// result is bitwise the same for every grid.
//
// REGISTERS: the kernel is bounded to 128 per thread (two blocks per SM) and
// the split path's hot loop needs nearly all of them; both paths therefore
// read the params from a shared-memory copy and threadIdx.x through an
// opaque read (tidX), so that the compiler re-derives indices and pointers
// where used instead of hoisting them out of the item / head loops into
// registers held throughout (which made it spill).
//
// SCRATCH: the params carry no scratch memory, so q̂ / ĉ, the split states
// and the queue live in module-level __device__ arrays (~25 MB, sized for
// K3 at 128 splits). Launches of mla_attend must not run concurrently (the
// runtime runs a plan on one stream). There is no cap on the length (longer
// contexts get longer splits); shapes beyond the scratch (N·L > kLatentCap,
// N > kStatHeads) and every shape or block size outside the split path run
// THE PER-HEAD PATH: the previous design, one block per head (grid-stride)
// reading the whole cache per head; correct for any shape within the
// kernel's limits, slow at long contexts.
//
// Wide loads: where L and R are multiples of 8 and the cache / kv_b_proj
// pointers are 16-byte aligned, every cache row and weight row is read as
// 16-byte chunks of 8 bf16 (the K3 shapes); otherwise the per-head path's
// scalar variant with the same structure handles any shape within the
// limits of k3_mla_attend.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CudaCommon.cuh"
#include "kernels/mla/MlaParams.h"

using namespace k3;

namespace {

/// Largest latent rank L mla_attend handles (q̂ and ĉ live in shared memory).
constexpr int kMaxLatent = 1024;
/// Floats of shared memory for the per-group partial sums of q̂, the warps'
/// accumulators in the merge (all 8 warps at L = 1024 in one round: the
/// scalar path at L > 512 accumulates there).
constexpr int kPartFloats = 8192;
/// mla_attend's launch bounds: at most 256 threads per block and two blocks
/// per SM, i.e. 128 registers per thread (no spills, checked by ptxas).
constexpr int kAttendMaxThreads = 256;
constexpr int kAttendMinBlocks = 2;

template <int W> using Chunk = dev::Bf16Chunk<W>;

/// −∞, the score of a missing row and the max before the first row.
__device__ __forceinline__ float negInf() {
  return -__int_as_float(0x7f800000);
}

/// threadIdx.x, re-read where it is used: both paths loop over items or
/// heads, and values derived from a threadIdx.x hoisted out of those loops
/// would stay live in registers across all of them (the kernel has 128).
__device__ __forceinline__ int tidX() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

/// prefetchL2Block (CudaCommon.cuh) with tidX().
__device__ __forceinline__ void prefetchL2(const void *p, int64_t bytes) {
  const char *base = static_cast<const char *>(p);
  for (int64_t off = int64_t(tidX()) * 128; off < bytes;
       off += int64_t(blockDim.x) * 128)
    dev::prefetchL2Line(base + off);
}

//===----------------------------------------------------------------------===//
// The per-head path
//===----------------------------------------------------------------------===//

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
};

/// The KL latent chunks of a cache row a lane holds (chunk k, element e).
/// W = 8: 16-byte chunks as loaded; W = 1: the bf16 values packed in pairs,
/// half the registers of one value each.
template <int W, int KL> struct LatentChunks {
  Chunk<W> c[KL];
  __device__ __forceinline__ void load(int k, const uint16_t *p) {
    c[k].loadRO(p);
  }
  __device__ __forceinline__ void zero(int k) { c[k].zero(); }
  __device__ __forceinline__ float at(int k, int e) const { return c[k].at(e); }
};

template <int KL> struct LatentChunks<1, KL> {
  uint32_t w[(KL + 1) / 2];
  __device__ __forceinline__ void set(int k, uint32_t v) {
    w[k / 2] = (k & 1) ? (w[k / 2] & 0xffffu) | (v << 16) : v;
  }
  __device__ __forceinline__ void load(int k, const uint16_t *p) {
    set(k, __ldg(p));
  }
  __device__ __forceinline__ void zero(int k) { set(k, 0u); }
  __device__ __forceinline__ float at(int k, int) const {
    return __uint_as_float((k & 1) ? w[k / 2] & 0xffff0000u : w[k / 2] << 16);
  }
};

/// One head of mla_attend with chunks of W values; a lane owns latent chunks
/// lane + 32k (k < KL) and rope chunks lane + 32k (k < KR) of every cache
/// row, and each warp walks ROWS rows per iteration.
template <int W, int KL, int KR, int ROWS>
__device__ void attendHead(const MlaAttendParams &p, int64_t h,
                           AttendShared &s) {
  const int L = static_cast<int>(p.kvLoraRank);
  const int R = static_cast<int>(p.ropeDim);
  const int64_t P = p.nopeDim, V = p.vDim, T = p.length;
  const int64_t width = L + R;
  const int tid = tidX(), lane = tid & 31, warp = tid >> 5;
  const int threads = blockDim.x, warps = threads >> 5;
  const int CL = L / W, CR = R / W; // chunks of a latent / rope row part

  const uint16_t *q = p.q + h * (P + R);
  const uint16_t *wUK = p.kvB + h * (P + V) * L;
  const uint16_t *wUV = wUK + P * L;

  // Request both weight blocks of the head (K3: 2 × 128 KB) from HBM at
  // once: prefetches hold no registers, so the whole working set is in
  // flight, and W_UV's fetch overlaps the q̂ and attention phases.
  prefetchL2(wUK, P * L * 2);
  prefetchL2(wUV, V * L * 2);

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
  // Wide latent ranks (32 values per lane) keep q̂ and ĉ in shared memory
  // rather than registers: the kernel has 128 registers (two blocks per SM
  // for the split path).
  constexpr bool kQReg = KL * W <= 16;
  // The scalar path at L > 512 also keeps its accumulators in shared memory
  // (the warp's L floats of `part`; a lane owns its columns).
  constexpr bool kAccReg = W > 1 || KL <= 16;
  static_assert(kAccReg || W == 1, "shared accumulators: scalar chunks");
  float qh[kQReg ? KL : 1][W] = {}, qr[KR][W], acc[kAccReg ? KL : 1][W];
  float *accS = s.part + warp * L;
  // Element e of the lane's latent chunk k of q̂ (then of ĉ, in `vec`); 0
  // past L (shared memory there holds anything, even NaN).
  const auto latentAt = [&](const float *vec, int k, int e) {
    if constexpr (kQReg)
      return qh[k][e];
    else
      return lane + 32 * k < CL ? vec[e * CL + lane + 32 * k] : 0.0f;
  };
  const auto loadLatent = [&](const float *vec) {
    if constexpr (kQReg) {
#pragma unroll
      for (int k = 0; k < KL; ++k) {
        const int c = lane + 32 * k;
#pragma unroll
        for (int e = 0; e < W; ++e)
          qh[k][e] = c < CL ? vec[e * CL + c] : 0.0f;
      }
    }
  };
  loadLatent(s.qHat);
#pragma unroll
  for (int k = 0; k < KL; ++k)
#pragma unroll
    for (int e = 0; e < W; ++e) {
      if constexpr (kAccReg)
        acc[k][e] = 0.0f;
      else if (lane + 32 * k < CL)
        accS[lane + 32 * k] = 0.0f;
    }
#pragma unroll
  for (int k = 0; k < KR; ++k) {
    const int c = lane + 32 * k;
#pragma unroll
    for (int e = 0; e < W; ++e)
      qr[k][e] = c < CR ? dev::bf16ToF(__ldg(q + P + c * W + e)) : 0.0f;
  }
  float runMax = negInf(), runSum = 0.0f;
  for (int64_t j0 = warp; j0 < T; j0 += int64_t(ROWS) * warps) {
    // All loads of the ROWS rows first, so they are in flight together.
    LatentChunks<W, KL> lat[ROWS];
    Chunk<W> rope[ROWS][KR];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int64_t j = j0 + int64_t(r) * warps;
      const uint16_t *row = p.cache + j * width;
#pragma unroll
      for (int k = 0; k < KL; ++k) {
        const int c = lane + 32 * k;
        if (j < T && c < CL)
          lat[r].load(k, row + c * W);
        else
          lat[r].zero(k);
      }
#pragma unroll
      for (int k = 0; k < KR; ++k) {
        const int c = lane + 32 * k;
        if (j < T && c < CR)
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
          d = fmaf(latentAt(s.qHat, k, e), lat[r].at(k, e), d);
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
      const bool valid = j0 + int64_t(r) * warps < T;
      score[r] = valid ? score[r] * p.scale : negInf();
      newMax = fmaxf(newMax, score[r]);
    }
    const float rescale = expf(runMax - newMax); // 0 on the first rows
    runSum *= rescale;
    float ex[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      ex[r] = expf(score[r] - newMax); // 0 for a missing row
      runSum += ex[r];
    }
    if constexpr (kAccReg) {
#pragma unroll
      for (int k = 0; k < KL; ++k)
#pragma unroll
        for (int e = 0; e < W; ++e)
          acc[k][e] *= rescale;
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int k = 0; k < KL; ++k)
#pragma unroll
          for (int x = 0; x < W; ++x)
            acc[k][x] = fmaf(ex[r], lat[r].at(k, x), acc[k][x]);
    } else {
#pragma unroll
      for (int k = 0; k < KL; ++k) {
        const int c = lane + 32 * k;
        if (c < CL) {
          float a = accS[c] * rescale;
#pragma unroll
          for (int r = 0; r < ROWS; ++r)
            a = fmaf(ex[r], lat[r].at(k, 0), a);
          accS[c] = a;
        }
      }
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
  // total is 0 only for length <= 0, where the CPU's ĉ stays 0 too.
  const float invTotal = total > 0.0f ? 1.0f / total : 0.0f;
  const float mine = runMax != negInf() ? expf(runMax - M) : 0.0f;
  const int perRound = kPartFloats / L;
  for (int w0 = 0; w0 < warps; w0 += perRound) {
    const int w1 = min(warps, w0 + perRound);
    if (warp >= w0 && warp < w1) {
      float *dst = s.part + (warp - w0) * L; // accS when !kAccReg (w0 = 0)
#pragma unroll
      for (int k = 0; k < KL; ++k) {
        const int c = lane + 32 * k;
        if (c < CL)
#pragma unroll
          for (int e = 0; e < W; ++e) {
            if constexpr (kAccReg)
              dst[e * CL + c] = acc[k][e] * mine;
            else
              dst[c] *= mine;
          }
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

  // --- o_i = R(W_UV[i] · ĉ), optionally gated: one warp per output row,
  // up to four rows per iteration; ĉ in registers (the lane's chunks) where
  // q̂ was.
  loadLatent(s.cHat);
  // Rows per iteration: at most 16 registers of W_UV chunks in flight
  // (W = 1: packed in pairs).
  constexpr int kRowRegs = W == 8 ? 4 * KL : (KL + 1) / 2;
  constexpr int kOutRows = kRowRegs >= 16 ? 1 : kRowRegs >= 8 ? 2 : 4;
  for (int64_t i0 = warp; i0 < V; i0 += int64_t(kOutRows) * warps) {
    LatentChunks<W, KL> wv[kOutRows];
#pragma unroll
    for (int r = 0; r < kOutRows; ++r) {
      const int64_t i = i0 + int64_t(r) * warps;
#pragma unroll
      for (int k = 0; k < KL; ++k) {
        const int c = lane + 32 * k;
        if (i < V && c < CL)
          wv[r].load(k, wUV + i * L + c * W);
        else
          wv[r].zero(k);
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
          d = fmaf(wv[r].at(k, e), latentAt(s.cHat, k, e), d);
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

/// The per-head path: heads block-stride.
template <int W, int KL, int KR, int ROWS>
__device__ void attendHeads(const MlaAttendParams &p, AttendShared &s) {
  for (int64_t h = blockIdx.x; h < p.numHeads; h += gridDim.x)
    attendHead<W, KL, KR, ROWS>(p, h, s);
}

//===----------------------------------------------------------------------===//
// The split path
//===----------------------------------------------------------------------===//

/// Threads of a split-path block (the plans' block size).
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
/// Heads of a phase-B item: 8 warps × 4 lanes per column range hold two
/// heads each.
constexpr int kGroupHeads = 16;
/// Cache rows of a tile.
constexpr int kTileRows = 16;
/// Largest L and R of the split path: warp w owns latent columns
/// [64w, 64w + 64) and rope columns [8w, 8w + 8).
constexpr int kLatMax = 64 * kWarps;
constexpr int kRopeMax = 8 * kWarps;
/// A staged row: kLatMax latent floats then kRopeMax rope floats. Its
/// stride is a multiple of 32 words, so the lanes' column offsets alone
/// decide the banks.
constexpr int kRowFloats = kLatMax + kRopeMax;
/// Row stride of the score exchange (and of the probabilities): 2·18 ≡ 4
/// (mod 32) words, so the stores of a warp (8 head pairs × 4 rows) hit 32
/// distinct banks, as do those of the probabilities (16 rows × 2 heads).
constexpr int kRedStride = 18;
/// Latent columns of a phase-A / phase-C item; output rows of a phase-D item.
constexpr int kSlab = 128;
constexpr int kOutSlab = 4 * kWarps;
/// Most splits of a launch, and the module scratch: q̂ / ĉ [N, L], the split
/// states' ĉ [splits, N, L] (K3 at kMaxSplits: 25 MB) and (max, Σ)
/// [splits, N].
constexpr int kMaxSplits = 128;
constexpr int64_t kLatentCap = int64_t(1) << 18;
constexpr int64_t kPartCap = int64_t(kMaxSplits) * 96 * 512;
constexpr int64_t kStatHeads = 1024;

static_assert(kTileRows == 16 && kGroupHeads == 16,
              "the score exchange maps thread t to (head t / 16, row t % 16)");
static_assert(kGroupHeads * kTileRows == kThreads, "one score per thread");
static_assert(kTileRows * 16 == kThreads && kLatMax == 4 * 16 * 8 &&
                  kRopeMax == 8 * 8,
              "stageTile: 16 threads per row, 4 latent + 1 rope chunk each");
static_assert(kSlab == 4 * 32, "a phase-C warp covers a slab in float4s");

/// The work queue (see the file comment). Zero at module load; the last
/// block of every launch zeroes it again.
struct MlaQueue {
  unsigned ticket; ///< next item to hand out
  unsigned doneA;  ///< finished q̂ items
  unsigned doneB;  ///< finished split items
  unsigned doneC;  ///< finished merge items
  unsigned exited; ///< blocks that have left
};

__device__ MlaQueue gMlaQueue;
/// q̂ [N, L] during phases A-B, then the normalised ĉ [N, L] (phases C-D).
__device__ __align__(16) float gLatent[kLatentCap];
/// Σ_j e^(s_j − m) c_j of every (split, head): [splits, N, L].
__device__ __align__(16) float gPart[kPartCap];
/// (m, Σ_j e^(s_j − m)) of every (split, head): [splits, N].
__device__ float2 gStat[int64_t(kMaxSplits) * kStatHeads];

/// The items of a launch: a function of the shape only.
struct SplitPlan {
  int64_t splitRows; ///< rows of a split (a multiple of kTileRows)
  unsigned splits, groups, latSlabs, outSlabs;
  unsigned endA, endB, endC, endD; ///< one past each phase's last item
  unsigned item;                   ///< the block's current item
  unsigned ready;   ///< phases this block has seen complete (thread 0's)
  int64_t rowBegin; ///< first cache row of the block's phase-B item
};

/// Whether the launch takes the split path (uniform over the grid).
__device__ bool splitPath(const MlaAttendParams &p, bool vec) {
  const int64_t N = p.numHeads, L = p.kvLoraRank;
  return vec && blockDim.x == kThreads && L <= kLatMax &&
         p.ropeDim <= kRopeMax && p.length >= 1 && N >= 1 &&
         N * L <= kLatentCap && N <= kStatHeads;
}

/// The plan of a split-path launch. Kept in shared memory (written by
/// thread 0, published by the first draw's barrier): fewer long-lived
/// registers in the item loop.
__device__ void makeSplitPlan(const MlaAttendParams &p, SplitPlan &pl) {
  const int64_t N = p.numHeads, L = p.kvLoraRank;
  const int64_t maxSplits = min(int64_t(kMaxSplits), kPartCap / (N * L));
  const int64_t tiles = (p.length + kTileRows - 1) / kTileRows;
  const int64_t perSplit = (tiles + maxSplits - 1) / maxSplits;
  pl.splitRows = perSplit * kTileRows;
  pl.splits = static_cast<unsigned>((tiles + perSplit - 1) / perSplit);
  pl.groups = static_cast<unsigned>((N + kGroupHeads - 1) / kGroupHeads);
  pl.latSlabs = static_cast<unsigned>((L + kSlab - 1) / kSlab);
  pl.outSlabs = static_cast<unsigned>((p.vDim + kOutSlab - 1) / kOutSlab);
  pl.endA = static_cast<unsigned>(N) * pl.latSlabs;
  pl.endB = pl.endA + pl.splits * pl.groups;
  pl.endC = pl.endB + static_cast<unsigned>(N) * pl.latSlabs;
  pl.endD = pl.endC + static_cast<unsigned>(N) * pl.outSlabs;
}

/// Phase A's shared memory: the 16 row groups' partial sums of a slab.
struct QHatSmem {
  float part[16][kSlab];
};

/// Phase B's shared memory (47,296 bytes: the static limit is 49,152).
struct TileSmem {
  float tile[kTileRows][kRowFloats];          ///< the staged rows, fp32
  float red[kWarps][kGroupHeads][kRedStride]; ///< per-warp partial scores
  float prob[kTileRows][kRedStride]; ///< e^(s − m) of the tile [row][head]
  float alpha[kGroupHeads];          ///< e^(m_old − m_new) per head
};

/// Phase C's shared memory.
struct MergeSmem {
  float weight[kMaxSplits];  ///< e^(m_s − M) per split
  float part[kWarps][kSlab]; ///< per-warp partial sums of the slab
  float scratch[32];         ///< block reductions
};

union SplitSmem {
  QHatSmem a;
  TileSmem b;
  MergeSmem c;
};

/// The next item for this block (thread 0 draws, the block shares it).
__device__ __forceinline__ unsigned drawItem(unsigned &slot) {
  if (threadIdx.x == 0)
    slot = atomicAdd(&gMlaQueue.ticket, 1u);
  __syncthreads();
  const unsigned item = slot;
  __syncthreads(); // the slot is rewritten by the next draw
  return item;
}

/// Counts a finished item of a phase: the block's global stores are ordered
/// before the count by the barrier and the fence.
__device__ __forceinline__ void countDone(unsigned *counter) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
  }
}

__device__ __forceinline__ unsigned loadAcquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
               : "=r"(v)
               : "l"(__cvta_generic_to_global(p))
               : "memory");
  return v;
}

/// Waits until `n` items are counted in `counter` (phase `phase` complete;
/// `ready` remembers the phases this block has already waited for); the
/// barrier then shares the acquire with the block.
__device__ __forceinline__ void awaitDone(const unsigned *counter, unsigned n,
                                          unsigned phase, unsigned &ready) {
  if (threadIdx.x == 0 && ready < phase) {
    while (loadAcquire(counter) < n)
      __nanosleep(100);
    __threadfence();
    ready = phase;
  }
  __syncthreads();
}

/// Leaves the queue; the last block out zeroes it for the next launch
/// (every other block has drawn its last ticket by then).
__device__ __forceinline__ void leaveQueue() {
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(&gMlaQueue.exited, 1u) == gridDim.x - 1) {
    gMlaQueue.ticket = 0;
    gMlaQueue.doneA = 0;
    gMlaQueue.doneB = 0;
    gMlaQueue.doneC = 0;
    gMlaQueue.exited = 0;
    __threadfence();
  }
}

/// The 8 floats of a packed bf16 chunk.
__device__ __forceinline__ void widen8(const uint4 &u, float4 &lo, float4 &hi) {
  lo = make_float4(
      __uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
      __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
  hi = make_float4(
      __uint_as_float(u.z << 16), __uint_as_float(u.z & 0xffff0000u),
      __uint_as_float(u.w << 16), __uint_as_float(u.w & 0xffff0000u));
}

/// Phase A item: q̂[l] = Σ_i W_UK[i][l] q_nope[i] for the latent columns
/// [128·slab, +128) of one head. Thread (chunk c = t % 16, group g = t / 16)
/// sums the rows i ≡ g (mod 16) of its 8 columns; the 16 partials are added
/// in group order.
__device__ void qHatItem(const MlaAttendParams &p, const SplitPlan &pl,
                         unsigned item, QHatSmem &s) {
  const int64_t L = p.kvLoraRank, P = p.nopeDim;
  const int64_t h = item / pl.latSlabs;
  const int64_t col0 = int64_t(item % pl.latSlabs) * kSlab;
  const int c = tidX() & 15, g = tidX() >> 4;
  const uint16_t *q = p.q + h * (P + p.ropeDim);
  const uint16_t *wUK = p.kvB + h * (P + p.vDim) * L + col0 + 8 * c;
  float acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e)
    acc[e] = 0.0f;
  if (col0 + 8 * c < L) {
#pragma unroll 8
    for (int64_t i = g; i < P; i += 16) {
      Chunk<8> w;
      w.loadRO(wUK + i * L);
      const float qi = dev::bf16ToF(__ldg(q + i));
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[e] = fmaf(w.at(e), qi, acc[e]);
    }
  }
  float4 *dst = reinterpret_cast<float4 *>(&s.part[g][8 * c]);
  dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  __syncthreads();
  const int l = tidX();
  if (l < kSlab && col0 + l < L) {
    float v = s.part[0][l];
#pragma unroll
    for (int k = 1; k < 16; ++k)
      v += s.part[k][l];
    gLatent[h * L + col0 + l] = v;
  }
  countDone(&gMlaQueue.doneA);
}

/// Stages cache rows r0 .. r0 + 15 (the first `valid` exist) as fp32 into
/// the tile. Thread t takes row t / 16: latent chunks t % 16 + 16k (k < 4)
/// and rope chunk t % 16 (16 lanes read 256 contiguous bytes of a row);
/// chunks past L, R or `valid` are zero. The five loads are in flight
/// together (and the previous tile's L2 prefetch has asked for the lines).
__device__ __forceinline__ void stageTile(const MlaAttendParams &p, int64_t r0,
                                          int valid, TileSmem &s) {
  const int64_t L = p.kvLoraRank, width = L + p.ropeDim;
  const int r = tidX() >> 4, c = tidX() & 15;
  const bool rowOk = r < valid;
  const uint4 *src =
      reinterpret_cast<const uint4 *>(p.cache + (r0 + r) * width) + c;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 v[5];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    v[k] = rowOk && 8 * (c + 16 * k) < L ? __ldg(src + 16 * k) : zero;
  v[4] = rowOk && 8 * c < p.ropeDim ? __ldg(src + L / 8) : zero;
  // Latent chunk c + 16k at float4 2c + 32k, rope chunk c at 128 + 2c.
  float4 *dst = reinterpret_cast<float4 *>(&s.tile[r][0]) + 2 * c;
#pragma unroll
  for (int k = 0; k < 4; ++k)
    widen8(v[k], dst[32 * k], dst[32 * k + 1]);
  if (c < kRopeMax / 8) // the row has 8 rope chunks
    widen8(v[4], dst[128], dst[129]);
}

/// Phase B item: cache rows [split · splitRows, +splitRows) ∩ [0, length)
/// for the heads [16 · group, +16).
///
/// Thread layout: warp w, lane = 4 · hp + cq. The thread holds q̂ and the ĉ
/// accumulators of heads 2hp, 2hp + 1 at the 16 latent columns
/// 64w + 16i + 4cq + e (i, e < 4), and q_r at rope columns 8w + 2cq + {0,1}.
/// The 8 head pairs of a warp read the same tile addresses (broadcasts); the
/// 4 column lanes read 64 contiguous bytes.
///
/// Per tile: (1) scores, 4 rows at a time: each thread's 2 × 4 partial dot
/// products; lane cq takes the rows in the order r ^ cq, so a reduce-scatter
/// over the 4 column lanes (xor 2, then xor 1) needs no selects: each lane
/// keeps its low slots and adds the partner's high ones, ending with row
/// 4b + cq of both heads summed over the warp's 64 + 8 columns; (2) thread
/// t = 16 · head + row adds the 8 warps' sums in order, scales, and takes
/// one online-softmax step for its head across the head's 16 lanes;
/// (3) ĉ ← α · ĉ + Σ_rows p · c.
__device__ void splitItem(const MlaAttendParams &p, SplitPlan &pl,
                          unsigned item, TileSmem &s) {
  // The item's numbers are re-read from shared memory where needed rather
  // than held in registers across the tile loop (register pressure).
  const int64_t N = p.numHeads, L = p.kvLoraRank, R = p.ropeDim;
  const int warp = tidX() >> 5, lane = tidX() & 31;
  const int hp = lane >> 2, cq = lane & 3;
  const int latCol = 64 * warp + 4 * cq, ropeCol = 8 * warp + 2 * cq;
  const int64_t group = item % pl.groups;
  int rows; // of the split (fits an int: at most length / 128)
  {
    const int64_t rowBegin = int64_t(item / pl.groups) * pl.splitRows;
    rows = static_cast<int>(min(p.length - rowBegin, pl.splitRows));
    if (tidX() == 0)
      pl.rowBegin = rowBegin;
    // The first tile's loads do not need q̂: issue them before the wait.
    stageTile(p, rowBegin, rows, s);
  }
  awaitDone(&gMlaQueue.doneA, pl.endA, 1, pl.ready);

  float q[2][16], qr[2][2], acc[2][16];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t head = group * kGroupHeads + 2 * hp + h;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t col = latCol + 16 * i;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (head < N && col < L)
        v = __ldcg(reinterpret_cast<const float4 *>(gLatent + head * L + col));
      q[h][4 * i] = v.x, q[h][4 * i + 1] = v.y;
      q[h][4 * i + 2] = v.z, q[h][4 * i + 3] = v.w;
    }
    const uint16_t *qRope = p.q + head * (p.nopeDim + R) + p.nopeDim;
#pragma unroll
    for (int k = 0; k < 2; ++k)
      qr[h][k] = head < N && ropeCol + k < R
                     ? dev::bf16ToF(__ldg(qRope + ropeCol + k))
                     : 0.0f;
#pragma unroll
    for (int k = 0; k < 16; ++k)
      acc[h][k] = 0.0f;
  }
  // The online-softmax state of head `mine` (replicated over its 16 lanes).
  const int mine = tidX() >> 4, myRow = tidX() & 15;
  float runMax = negInf(), runSum = 0.0f;

  for (int t0 = 0; t0 < rows; t0 += kTileRows) {
    __syncthreads(); // the tile is staged
    const bool more = t0 + kTileRows < rows;
    if (more) {
      const int64_t width = L + R;
      prefetchL2(p.cache + (pl.rowBegin + t0 + kTileRows) * width,
                 min(kTileRows, rows - t0 - kTileRows) * width * 2);
    }

    // (1) Partial scores over the warp's columns, reduce-scattered.
#pragma unroll 1
    for (int b = 0; b < kTileRows / 4; ++b) {
      float part[2][4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float *row = &s.tile[4 * b + (r ^ cq)][0];
        const float4 *lp = reinterpret_cast<const float4 *>(row + latCol);
        const float2 kr =
            *reinterpret_cast<const float2 *>(row + kLatMax + ropeCol);
        float d0 = qr[0][0] * kr.x, d1 = qr[1][0] * kr.x;
        d0 = fmaf(qr[0][1], kr.y, d0);
        d1 = fmaf(qr[1][1], kr.y, d1);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 c = lp[4 * i];
          d0 = fmaf(q[0][4 * i], c.x, d0);
          d1 = fmaf(q[1][4 * i], c.x, d1);
          d0 = fmaf(q[0][4 * i + 1], c.y, d0);
          d1 = fmaf(q[1][4 * i + 1], c.y, d1);
          d0 = fmaf(q[0][4 * i + 2], c.z, d0);
          d1 = fmaf(q[1][4 * i + 2], c.z, d1);
          d0 = fmaf(q[0][4 * i + 3], c.w, d0);
          d1 = fmaf(q[1][4 * i + 3], c.w, d1);
        }
        part[0][r] = d0;
        part[1][r] = d1;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int r = 0; r < 2; ++r)
          part[h][r] += __shfl_xor_sync(0xffffffffu, part[h][r + 2], 2);
        part[h][0] += __shfl_xor_sync(0xffffffffu, part[h][1], 1);
        // Slot 0 now holds row 4b + cq.
        s.red[warp][2 * hp + h][4 * b + cq] = part[h][0];
      }
    }
    __syncthreads();

    // (2) The score of (head mine, row myRow) and the softmax step; the 16
    // lanes of a head combine with xor 8, 4, 2, 1 (every lane ends with the
    // same bits: each step adds the same two values).
    {
      float sc = s.red[0][mine][myRow];
#pragma unroll
      for (int w = 1; w < kWarps; ++w)
        sc += s.red[w][mine][myRow];
      // Row t0 exists, so the tile's max is finite.
      sc = t0 + myRow < rows ? sc * p.scale : negInf();
      float tileMax = sc;
#pragma unroll
      for (int o = 8; o > 0; o >>= 1)
        tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, o));
      const float newMax = fmaxf(runMax, tileMax);
      const float e = expf(sc - newMax); // 0 for a missing row
      float tileSum = e;
#pragma unroll
      for (int o = 8; o > 0; o >>= 1)
        tileSum += __shfl_xor_sync(0xffffffffu, tileSum, o);
      const float alpha = expf(runMax - newMax); // 0 on the first tile
      runSum = runSum * alpha + tileSum;
      runMax = newMax;
      s.prob[myRow][mine] = e;
      if (myRow == 0)
        s.alpha[mine] = alpha;
    }
    __syncthreads();

    // (3) ĉ ← α ĉ + Σ_j p_j c_j (missing rows: p = 0, c = 0).
    {
      const float2 al = *reinterpret_cast<const float2 *>(&s.alpha[2 * hp]);
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        acc[0][k] *= al.x;
        acc[1][k] *= al.y;
      }
#pragma unroll
      for (int j = 0; j < kTileRows; ++j) {
        const float4 *lp =
            reinterpret_cast<const float4 *>(&s.tile[j][0] + latCol);
        const float2 pj = *reinterpret_cast<const float2 *>(&s.prob[j][2 * hp]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 c4 = lp[4 * i];
          const float c[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc[0][4 * i + e] = fmaf(pj.x, c[e], acc[0][4 * i + e]);
            acc[1][4 * i + e] = fmaf(pj.y, c[e], acc[1][4 * i + e]);
          }
        }
      }
    }
    __syncthreads(); // the tile and prob are free
    if (more)
      stageTile(p, pl.rowBegin + t0 + kTileRows, rows - t0 - kTileRows, s);
  }

  // The split's state of each head.
  const unsigned split = (pl.item - pl.endA) / pl.groups;
  const int64_t group0 = int64_t((pl.item - pl.endA) % pl.groups) * kGroupHeads;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t head = group0 + 2 * hp + h;
    if (head >= N)
      continue;
    float *dst = gPart + (int64_t(split) * N + head) * L;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t col = latCol + 16 * i;
      if (col < L)
        *reinterpret_cast<float4 *>(dst + col) =
            make_float4(acc[h][4 * i], acc[h][4 * i + 1], acc[h][4 * i + 2],
                        acc[h][4 * i + 3]);
    }
  }
  const int64_t head = group0 + mine;
  if (myRow == 0 && head < N)
    gStat[int64_t(split) * N + head] = make_float2(runMax, runSum);
  countDone(&gMlaQueue.doneB);
}

/// Phase C item: ĉ of the latent columns [128·slab, +128) of one head, the
/// splits' states merged: M = max_s m_s, w_s = e^(m_s − M),
/// ĉ = Σ_s w_s ĉ_s / Σ_s w_s l_s, splits added in order (warp w takes the
/// splits ≡ w mod 8, then the warps are added in order). Written over q̂.
/// Before waiting for phase B, the item asks L2 for its share of the head's
/// W_UV (the next phase's weights).
__device__ void mergeItem(const MlaAttendParams &p, SplitPlan &pl,
                          unsigned item, MergeSmem &s) {
  const int64_t N = p.numHeads, L = p.kvLoraRank, V = p.vDim;
  const int64_t h = item / pl.latSlabs;
  const unsigned slab = item % pl.latSlabs;
  const int64_t col0 = int64_t(slab) * kSlab;
  {
    const int64_t bytes = V * L * 2;
    const int64_t share = (bytes + pl.latSlabs - 1) / pl.latSlabs;
    const int64_t from = share * slab;
    if (from < bytes)
      prefetchL2(p.kvB + (h * (p.nopeDim + V) + p.nopeDim) * L + from / 2,
                 min(share, bytes - from));
  }
  awaitDone(&gMlaQueue.doneB, pl.endB, 2, pl.ready);
  const int splits = static_cast<int>(pl.splits);
  float m = negInf();
  for (int sp = tidX(); sp < splits; sp += kThreads)
    m = fmaxf(m, __ldcg(&gStat[sp * N + h]).x);
  const float M = dev::blockMax(m, s.scratch);
  float l = 0.0f;
  for (int sp = tidX(); sp < splits; sp += kThreads) {
    const float2 st = __ldcg(&gStat[sp * N + h]);
    const float w = expf(st.x - M);
    s.weight[sp] = w;
    l += st.y * w;
  }
  const float total = dev::blockSum(l, s.scratch); // also publishes weight
  const float invTotal = 1.0f / total;

  const int warp = tidX() >> 5, lane = tidX() & 31;
  const int64_t col = col0 + 4 * lane;
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (col < L) {
    const float *src = gPart + h * L + col;
#pragma unroll 8
    for (int sp = warp; sp < splits; sp += kWarps) {
      const float4 x =
          __ldcg(reinterpret_cast<const float4 *>(src + int64_t(sp) * N * L));
      const float w = s.weight[sp];
      v.x = fmaf(w, x.x, v.x);
      v.y = fmaf(w, x.y, v.y);
      v.z = fmaf(w, x.z, v.z);
      v.w = fmaf(w, x.w, v.w);
    }
  }
  *reinterpret_cast<float4 *>(&s.part[warp][4 * lane]) = v;
  __syncthreads();
  const int c = tidX();
  if (c < kSlab && col0 + c < L) {
    float x = s.part[0][c];
#pragma unroll
    for (int w = 1; w < kWarps; ++w)
      x += s.part[w][c];
    gLatent[h * L + col0 + c] = x * invTotal;
  }
  countDone(&gMlaQueue.doneC);
}

/// Phase D item: out rows [32·slab, +32) of one head, o_i = R(W_UV[i] · ĉ),
/// optionally gated; warp w computes rows 32·slab + w + 8r (r < 4) with ĉ in
/// registers (lane chunks lane, lane + 32).
__device__ void outputItem(const MlaAttendParams &p, SplitPlan &pl,
                           unsigned item) {
  const int64_t L = p.kvLoraRank, V = p.vDim, P = p.nopeDim;
  const int64_t h = item / pl.outSlabs;
  const int64_t i0 = int64_t(item % pl.outSlabs) * kOutSlab;
  const int warp = tidX() >> 5, lane = tidX() & 31;
  const int cl = static_cast<int>(L / 8);
  const uint16_t *wUV = p.kvB + (h * (P + V) + P) * L;
  awaitDone(&gMlaQueue.doneC, pl.endC, 3, pl.ready);
  float ch[2][8];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int c = lane + 32 * k;
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), b = a;
    if (c < cl) {
      const float4 *src = reinterpret_cast<const float4 *>(gLatent + h * L);
      a = __ldcg(src + 2 * c);
      b = __ldcg(src + 2 * c + 1);
    }
    ch[k][0] = a.x, ch[k][1] = a.y, ch[k][2] = a.z, ch[k][3] = a.w;
    ch[k][4] = b.x, ch[k][5] = b.y, ch[k][6] = b.z, ch[k][7] = b.w;
  }
  constexpr int kRows = kOutSlab / kWarps;
  Chunk<8> wv[kRows][2];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = i0 + warp + kWarps * r;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int c = lane + 32 * k;
      if (i < V && c < cl)
        wv[r][k].loadRO(wUV + i * L + 8 * c);
      else
        wv[r][k].zero();
    }
  }
  float dot[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float d = 0.0f;
#pragma unroll
    for (int k = 0; k < 2; ++k)
#pragma unroll
      for (int e = 0; e < 8; ++e)
        d = fmaf(wv[r][k].at(e), ch[k][e], d);
    dot[r] = d;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      dot[r] += __shfl_xor_sync(0xffffffffu, dot[r], o);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = i0 + warp + kWarps * r;
    if (lane == r && i < V) {
      const int64_t c = h * V + i;
      float o = dev::roundBf16(dot[r]);
      if (p.gate)
        o = o * dev::sigmoidF(dev::bf16ToF(__ldg(p.gate + c)));
      p.out[c] = dev::fToBf16(o);
    }
  }
}

/// The split path of k3_mla_attend (file comment): draws items until the
/// queue is empty. `pl` is shared memory.
__device__ void splitAttend(const MlaAttendParams &p, SplitPlan &pl,
                            SplitSmem &s) {
  if (threadIdx.x == 0) {
    makeSplitPlan(p, pl);
    pl.ready = 0;
  }
  for (;;) {
    const unsigned item = drawItem(pl.item); // (its barrier publishes pl)
    if (item >= pl.endD)
      break;
    if (item < pl.endA)
      qHatItem(p, pl, item, s.a);
    else if (item < pl.endB)
      splitItem(p, pl, item - pl.endA, s.b);
    else if (item < pl.endC)
      mergeItem(p, pl, item - pl.endB, s.c);
    else
      outputItem(p, pl, item - pl.endC);
  }
  leaveQueue();
}

/// Shared memory of k3_mla_attend: one path runs per launch.
union AttendSmem {
  AttendShared perHead;
  SplitSmem split;
};

} // namespace

/// k3_mla_cache_append: cache[pos] = [rms_norm(kv[:L], normWeight, eps) |
/// kv[L:]] (MlaCacheAppendParams), rounding as rms_norm: n = R(x·r),
/// out = R(n·w) with r = 1 / sqrt(mean(x²) + eps).
/// Grid: any (codegen: 1). Every block sums the L squares itself (block
/// reduction, 1 KB read for K3); the row's L + R elements are then written
/// grid-stride, so any grid writes each element exactly once.
extern "C" __global__ void k3_mla_cache_append(const MlaCacheAppendParams p) {
  __shared__ float scratch[32];
  const int64_t L = p.kvLoraRank, R = p.ropeDim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < L; i += blockDim.x) {
    const float x = dev::bf16ToF(p.kv[i]);
    ss = fmaf(x, x, ss);
  }
  ss = dev::blockSum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(L) + p.eps);
  uint16_t *row = p.cache + p.pos * (L + R);
  for (int64_t i = dev::globalThread(); i < L + R; i += dev::gridThreads()) {
    if (i < L) {
      const float n = dev::roundBf16(dev::bf16ToF(p.kv[i]) * r);
      row[i] = dev::fToBf16(n * dev::bf16ToF(p.normWeight[i]));
    } else {
      row[i] = p.kv[i];
    }
  }
}

/// k3_mla_attend: absorbed decode attention over cache rows [0, length) with
/// the optional output gate (MlaAttendParams), per head h:
///   q̂ = W_UKᵀ q_nope (fp32), s_j = (q̂·c_j + q_r·k_r_j)·scale,
///   ĉ = softmax(s)·C, out = R(R(W_UV ĉ) · sigmoid(gate)) (gate optional).
/// Split path (blockDim 256; L <= 512 and R <= 64, multiples of 8; 16-byte
/// aligned cache / kvB; N·L <= 2^18, N <= 1024: the K3 shapes; file
/// comment): one work queue over q̂ items, (split of cache rows × 16 heads)
/// items, merge items and output items. Any grid gives the same bits; two
/// blocks per SM (264 on an H200: registers and shared memory hold two) is
/// best; the codegen's grid of numHeads works but leaves SMs idle.
/// Per-head path (every other shape or block size): heads block-stride, one
/// block per head re-reading the cache; q̂ by (column chunk × row group)
/// items with a shared partial-sum merge; the cache rows warp-interleaved
/// with an online softmax per warp merged in warp order; W_UV one warp per
/// output row. Deterministic (no atomics on data) on both paths.
/// Limits: blockDim <= 256; 1 <= L <= 1024; R <= 256 when L and R are
/// multiples of 8 (with 16-byte aligned cache / kvB), else R <= 128; any
/// length and head count. Outside them the kernel writes NaN to out (the
/// runtime's shapes — K3: L = 512, R = 64 — are inside).
extern "C" __global__ void __launch_bounds__(kAttendMaxThreads,
                                             kAttendMinBlocks)
    k3_mla_attend(const MlaAttendParams params) {
  __shared__ AttendSmem s;
  __shared__ SplitPlan plan;
  // The paths read the params from a shared copy: values derived from them
  // are re-read after each barrier instead of being hoisted out of the item
  // and head loops into registers held throughout (the kernel has 128).
  __shared__ __align__(8) unsigned char paramBytes[sizeof(MlaAttendParams)];
  MlaAttendParams &p = *reinterpret_cast<MlaAttendParams *>(paramBytes);
  if (threadIdx.x == 0)
    p = params;
  __syncthreads();
  const int64_t L = p.kvLoraRank, R = p.ropeDim;
  const bool aligned = ((reinterpret_cast<uintptr_t>(p.cache) |
                         reinterpret_cast<uintptr_t>(p.kvB)) &
                        15u) == 0;
  const bool vec = aligned && L % 8 == 0 && R % 8 == 0;
  const bool ok = L >= 1 && L <= kMaxLatent && R >= 0 &&
                  R <= (vec ? 32 * 8 : 32 * 4) && p.nopeDim >= 0 && p.vDim >= 0;
  if (!ok) {
    const int64_t n = p.numHeads * p.vDim;
    for (int64_t i = dev::globalThread(); i < n; i += dev::gridThreads())
      p.out[i] = 0x7fc0; // bf16 NaN: an unsupported shape is never silent
    return;
  }
  if (splitPath(p, vec)) {
    splitAttend(p, plan, s.split);
    return;
  }
  // One head loop per variant: nothing of one variant stays live in another.
  if (vec && L <= 32 * 8 * 2)
    attendHeads<8, 2, 1, 2>(p, s.perHead); // L <= 512, R <= 256
  else if (vec)
    attendHeads<8, 4, 1, 1>(p, s.perHead);
  else if (L <= 32 * 16)
    attendHeads<1, 16, 4, 1>(p, s.perHead);
  else
    attendHeads<1, 32, 4, 1>(p, s.perHead); // accumulates in `part`
}
