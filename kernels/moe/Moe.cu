//===- Moe.cu - Routing, gated MLPs and the routed-expert mix (CUDA) ------===//
//
// k3_router, k3_gated_mlp, k3_moe_experts and k3_moe_ffn (MoeParams.h): the
// CUDA twins of MoeCpu.cpp, rounding to bf16 exactly where the CPU does
// (NUMERICS.md "MoE" and "gated MLP"). Sums are fp32; results differ from the CPU only by the
// summation order and FMA contraction (the CPU sums in 8 lanes, these
// kernels per lane, then across the warp).
//
// Every product is a warp per weight row: lane l reads the row's 16-byte
// (bf16: 8 columns) or 8-byte (MXFP4: 16 codes + their scale byte) pieces
// l, l + 32, ... with streaming loads and a warp shuffle adds the lanes. A
// warp works on several rows at once (W1 and W3 of two intermediate rows;
// two or four rows of W2) so that each activation value it loads serves
// several weights and several loads are in flight; L2 prefetches of MXFP4
// rows keep more bytes in flight than the 64 registers (blocks of up to 1024
// threads) could. MXFP4 codes are decoded with bit operations into fp16
// pairs (exact, dev::mxfp4Dot8 in CudaWeights.cuh), the block scale applied
// once per 16 codes. The dot product of a row is always computed by one
// warp in the same order, whatever the grid and block size, so every kernel
// here is bitwise deterministic.
//
// A gated MLP has a dependency across the grid: W2 needs every element of
// a = R(act(g, u)). One launch does both phases with a work queue instead of
// a grid barrier: blocks draw numbered items from an atomic ticket (all the
// gate/up items first, then the down/mix items); a finished gate/up item is
// counted with a release; a block that draws a down/mix item waits (acquire)
// until the gate/up items it needs are counted. Tickets are drawn in order by
// running blocks and an item only waits for items of lower tickets, so every
// awaited item belongs to a running block: no deadlock with any grid, no
// cooperative launch needed. The
// last block out resets the counters, so the next launch finds them zero.
//
// SCRATCH: the params carry no scratch memory, so the activations a (bf16)
// and the counters live in module-level __device__ arrays. Consequences:
// launches of one of these kernels must not run concurrently (the runtime
// runs a plan on one stream: fine), and the sizes are capped (kGatedActCap,
// kMoeActCap, kRouterCap; beyond them the outputs are NaN). A params field
// `void *scratch` (bytes: see the kernels) allocated per launch by codegen
// would lift both limits; the counters still need zero-initialised memory
// that persists across launches (a plan state, or module scope as here).
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CudaWeights.cuh"
#include "kernels/common/KernelTrace.cuh"
#include "kernels/common/MmaTile.cuh"
#include "kernels/common/WorkQueue.cuh"
#include "kernels/moe/MoeParams.h"

using namespace k3;

namespace {

/// Largest activation vector staged in shared memory (fp32, 32 KiB); a
/// longer input is read from global memory (same results, slower).
constexpr int kStageCap = 8192;
/// Output rows of W2 that one warp of a `moe_experts` down item computes
/// together (each activation load serves four weight rows). (Earlier 4-row
/// mix items, one unit per slot, made the kernel 5% slower on the H200: 47.3
/// against 45.0 µs; each warp then had half the W2 bytes in flight.)
constexpr int kDownRows = 4;
/// Module scratch capacities: experts of `router`, interDim of `gated_mlp`,
/// topK · interDim of `moe_experts`.
constexpr int64_t kRouterCap = 8192;
/// Largest topK `router` ranks (K3: 16, Kimi-Linear: 8).
constexpr int32_t kRouterMaxTopK = 256;
constexpr int64_t kGatedActCap = int64_t(1) << 18;
constexpr int64_t kMoeActCap = int64_t(1) << 20;
/// Expert outputs y of a `moe_experts` launch waiting for the final sum:
/// (topK + shared) · dim floats.
constexpr int64_t kMoeYCap = int64_t(1) << 20;
/// Expert slots of a `moe_experts` launch (topK + the shared expert).
constexpr int kMoeMaxSlots = 257;
/// The first kHeadMxfp4 bytes of an MXFP4 row are asked of L2 up front.
/// bf16 rows are not prefetched: keeping the loads 1 KiB ahead in L2 made
/// the Kimi-Linear moe_ffn slower (61.4 against 59.4 µs on the H200), 4.5
/// KiB slower still.
/// (K3C_TUNE_* macros override tuning constants in a variant build of this
/// family, measured with K3C_PTX_DIR; the shipped PTX uses the values here.)
constexpr int64_t kHeadMxfp4 = 2048;
/// Whether moe_experts / moe_ffn ask L1 for the norm weight before the PDL
/// wait (stageNormed reads it right after the norm factor's reduction).
#ifdef K3C_TUNE_MOE_NORM_L1
constexpr bool kNormL1 = K3C_TUNE_MOE_NORM_L1 != 0;
#else
constexpr bool kNormL1 = true;
#endif

static_assert(kRouterCap <= kStageCap, "the router ranks in the stage area");

//===----------------------------------------------------------------------===//
// Module scratch
//===----------------------------------------------------------------------===//

__device__ dev::WorkQueue gGatedQueue;
__device__ dev::WorkQueue gMoeQueue;
/// Blocks of the running `router` that have written their scores.
__device__ unsigned gRouterArrived;
__device__ float gRouterScores[kRouterCap];
/// a = R(act(g, u)) of the running `gated_mlp` / `moe_experts` ([topK, I],
/// rows padded to 8 elements), read with 16-byte loads.
__device__ __align__(16) uint16_t gGatedAct[kGatedActCap];
__device__ __align__(16) uint16_t gMoeAct[kMoeActCap];
/// y_j = R(W2 a_j) of the running `moe_experts`, [slots, dim] (bf16 values
/// kept as fp32), and the finished gate/up items of each slot.
__device__ float gMoeY[kMoeYCap];
__device__ unsigned gMoeSlotDone[kMoeMaxSlots];

//===----------------------------------------------------------------------===//
// Memory helpers
//===----------------------------------------------------------------------===//

using dev::addRelease;
using dev::aligned;
using dev::awaitCount;
using dev::finishItem;
using dev::ldAcquire;
using dev::leaveQueue;
using dev::nextItem;
using dev::hiF;
using dev::ldStream16;
using dev::ldStream8;
using dev::ldStreamU8;
using dev::loF;

//===----------------------------------------------------------------------===//
// Activation vectors
//===----------------------------------------------------------------------===//

/// Float4 slot of quad `q` (columns 4q..4q+3) of a staged vector: an XOR
/// swizzle within groups of 8 quads, so that the 8 lanes of a shared-memory
/// phase reading the same quad of consecutive 8-, 16- or 32-column pieces
/// hit 8 distinct bank groups.
__device__ __forceinline__ int swz(int q) { return q ^ ((q >> 3) & 7); }

/// An activation vector staged in shared memory as fp32 (swizzled).
struct StagedAct {
  const float4 *q;
  /// Columns c..c+7 (c % 8 == 0).
  __device__ __forceinline__ void load8(int64_t c, float (&o)[8]) const {
    const int i = static_cast<int>(c >> 2);
    const float4 a = q[swz(i)], b = q[swz(i + 1)];
    o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w;
    o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
  }
  __device__ __forceinline__ float at(int64_t c) const {
    const int i = static_cast<int>(c);
    return reinterpret_cast<const float *>(q)[swz(i >> 2) * 4 + (i & 3)];
  }
};

/// A bf16 activation vector in global memory, optionally through an RMSNorm
/// on the fly (x̂ = R(R(x · r) · w), as cpu::rmsNormBf16). Plain loads: the
/// vector may have been written by the running kernel (after an acquire).
struct GlobalAct {
  const uint16_t *x;
  const uint16_t *normW; ///< null: x as is
  float r;
  bool vec; ///< x (and normW) 16-byte aligned: 8 columns per load

  __device__ __forceinline__ float norm(float v, float w) const {
    return dev::bf16ToF(static_cast<uint16_t>(dev::rmsNormBf16(v, w, r)));
  }
  __device__ __forceinline__ float at(int64_t c) const {
    const float v = dev::bf16ToF(x[c]);
    return normW ? norm(v, dev::bf16ToF(normW[c])) : v;
  }
  __device__ __forceinline__ void load8(int64_t c, float (&o)[8]) const {
    if (!vec) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        o[j] = at(c + j);
      return;
    }
    dev::bf16x8ToF(*reinterpret_cast<const uint4 *>(x + c), o);
    if (normW) {
      const uint4 n = *reinterpret_cast<const uint4 *>(normW + c);
      const uint32_t m[4] = {n.x, n.y, n.z, n.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        o[2 * j] = norm(o[2 * j], loF(m[j]));
        o[2 * j + 1] = norm(o[2 * j + 1], hiF(m[j]));
      }
    }
  }
};

/// Partial sums of rmsFactor: a fixed split, whatever the block size.
constexpr int kNormParts = 256;

/// rsqrt(mean(x²) + eps) as cpu::rmsNormBf16 computes it (1 / sqrt, both
/// IEEE). The sum of squares has a fixed order independent of blockDim
/// (part v sums elements v, v + 256, ...; warp 0 adds the parts), so every
/// block, of any size, gets the same bits.
__device__ float rmsFactor(const uint16_t *x, int64_t n, float eps,
                           float *parts) {
  for (int v = threadIdx.x; v < kNormParts; v += blockDim.x) {
    float s = 0.0f;
    for (int64_t i = v; i < n; i += kNormParts) {
      const float f = dev::bf16ToF(x[i]);
      s = fmaf(f, f, s);
    }
    parts[v] = s;
  }
  __syncthreads();
  float s = 0.0f;
  if (threadIdx.x < 32) {
    for (int v = threadIdx.x; v < kNormParts; v += 32)
      s += parts[v];
    s = dev::warpSum(s);
    if (threadIdx.x == 0)
      parts[0] = s;
  }
  __syncthreads();
  s = parts[0];
  __syncthreads(); // parts may be reused
  return 1.0f / sqrtf(s / static_cast<float>(n) + eps);
}

/// Stages act.at(0..n) into `xs` (n <= kStageCap); the caller synchronises.
__device__ void stage(float4 *xs, int64_t n, const GlobalAct &act) {
  float *f = reinterpret_cast<float *>(xs);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    f[swz(i >> 2) * 4 + (i & 3)] = act.at(i);
}

/// Whether stageNormed's vector path applies: x and the norm weight 16-byte
/// aligned, n a multiple of 8 that fits the stage.
__device__ __forceinline__ bool canStageNormed(const uint16_t *x,
                                               const uint16_t *normW,
                                               int64_t n) {
  return n % 8 == 0 && n <= kStageCap && aligned(x, 16) && aligned(normW, 16);
}

/// Stages x̂ = RMSNorm(x, normW) into `xs` (swizzled fp32, as stage() with a
/// normalising GlobalAct would) and returns the norm factor r, in three
/// rounds of independent 16-byte loads instead of a chain of dependent ones:
/// x is staged raw while part v (v < kNormParts) sums the squares of its
/// 8-column chunks v, v + kNormParts, ...; warp 0 adds the parts in order
/// (so every block of any size gets the same bits); then each chunk is
/// normalised in place with its weights. Needs canStageNormed; synchronises.
__device__ __noinline__ float stageNormed(float4 *xs, int64_t n,
                                          const uint16_t *x,
                                          const uint16_t *normW, float eps,
                                          float *parts) {
  const int chunks = static_cast<int>(n >> 3);
  const uint4 *xv = reinterpret_cast<const uint4 *>(x);
  for (int v = threadIdx.x; v < kNormParts; v += blockDim.x) {
    float s = 0.0f;
    for (int c = v; c < chunks; c += kNormParts) {
      float o[8];
      dev::bf16x8ToF(xv[c], o);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        s = fmaf(o[j], o[j], s);
      const float4 lo = make_float4(o[0], o[1], o[2], o[3]);
      const float4 hi = make_float4(o[4], o[5], o[6], o[7]);
      xs[swz(2 * c)] = lo;
      xs[swz(2 * c + 1)] = hi;
    }
    parts[v] = s;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = 0.0f;
    for (int v = threadIdx.x; v < kNormParts; v += 32)
      s += parts[v];
    s = dev::warpSum(s);
    if (threadIdx.x == 0)
      parts[0] = 1.0f / sqrtf(s / static_cast<float>(n) + eps);
  }
  __syncthreads();
  const float r = parts[0];
  const uint4 *wv = reinterpret_cast<const uint4 *>(normW);
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const uint4 w = __ldg(wv + c);
    const uint32_t m[4] = {w.x, w.y, w.z, w.w};
    float4 &lo = xs[swz(2 * c)], &hi = xs[swz(2 * c + 1)];
    float o[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      o[2 * j] = dev::bf16ToF(
          static_cast<uint16_t>(dev::rmsNormBf16(o[2 * j], loF(m[j]), r)));
      o[2 * j + 1] = dev::bf16ToF(
          static_cast<uint16_t>(dev::rmsNormBf16(o[2 * j + 1], hiF(m[j]), r)));
    }
    lo = make_float4(o[0], o[1], o[2], o[3]);
    hi = make_float4(o[4], o[5], o[6], o[7]);
  }
  __syncthreads(); // xs complete; parts may be reused
  return r;
}

/// x, or its RMSNorm with factor r when normW is given, read from global
/// memory (8 columns per load when both are 16-byte aligned).
__device__ __forceinline__ GlobalAct inputAct(const uint16_t *x,
                                              const uint16_t *normW, float r) {
  return GlobalAct{x, normW, r,
                   aligned(x, 16) && (!normW || aligned(normW, 16))};
}

/// A block's input x̂ = x, or RMSNorm(x, normW, eps) when normW is given:
/// returns the norm factor (1 without a norm) and, when `stageIt` (n <=
/// kStageCap), stages x̂ into `xs` (stageNormed's three rounds when it
/// applies). Every kernel here that reads a normalised input goes through
/// it. Synchronises when it stages.
__device__ float prepareInput(float4 *xs, int64_t n, const uint16_t *x,
                              const uint16_t *normW, float eps, bool stageIt,
                              float *parts) {
  if (normW && stageIt && canStageNormed(x, normW, n))
    return stageNormed(xs, n, x, normW, eps, parts);
  const float r = normW ? rmsFactor(x, n, eps, parts) : 1.0f;
  if (stageIt) {
    stage(xs, n, inputAct(x, normW, r));
    __syncthreads();
  }
  return r;
}

using dev::lastToArrive;

//===----------------------------------------------------------------------===//
// Row dot products
//===----------------------------------------------------------------------===//

using dev::bf16Dot8;
using dev::mxfp4Dot8;
using dev::prefetchL2Warp;

/// Prefetches the heads of rows `rows` of the NM matrices (k columns) into
/// L2: the first kHeadMxfp4 bytes of an MXFP4 row (all of a K3 expert row)
/// and its scales (bf16 rows: nothing, see kHeadMxfp4). So a warp has more
/// bytes in flight than its registers hold, with a bounded L2 footprint.
template <int NM, int NR>
__device__ __forceinline__ void
prefetchHeads(const WeightRef (&w)[NM], const int64_t (&rows)[NR], int64_t k) {
#pragma unroll
  for (int m = 0; m < NM; ++m)
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      if (w[m].format == kWeightMxfp4) {
        prefetchL2Warp(w[m].packed + rows[r] * (k / 2), min(k / 2, kHeadMxfp4));
        prefetchL2Warp(w[m].scale + rows[r] * (k / 32),
                       min(k / 32, kHeadMxfp4));
      }
    }
}

/// out[r · NM + m] = Σ_c W_m[rows[r], c] · act[c] for NM matrices of `k`
/// columns sharing NR row indices, summed over the warp (every lane gets the
/// sums). Fast paths: all matrices bf16 with 16-byte aligned rows, or all
/// MXFP4 (k % 32 == 0) with 8-byte aligned codes; anything else (odd widths,
/// mixed formats) goes element by element. The loads of U pieces per stream
/// are issued before their math (U chosen to fit 64 registers: blocks of up
/// to 1024 threads); MXFP4 rows are prefetched into L2 (prefetchHeads).
template <int NM, int NR, class Act>
__device__ __forceinline__ void rowDots(const WeightRef (&w)[NM],
                                        const int64_t (&rows)[NR], int64_t k,
                                        const Act &act, float (&out)[NM * NR]) {
  constexpr int NS = NM * NR;
  constexpr int UMx = NS >= 4 ? 1 : 4 / NS;
#ifdef K3C_TUNE_MOE_UNROLL_BF16
  constexpr int UBf = NS >= 4 ? K3C_TUNE_MOE_UNROLL_BF16 : 4 / NS;
#else
  constexpr int UBf = NS >= 4 ? 1 : 4 / NS;
#endif
  const int lane = threadIdx.x & 31;
  prefetchHeads(w, rows, k);
  float acc[NS];
#pragma unroll
  for (int s = 0; s < NS; ++s)
    acc[s] = 0.0f;
  bool mx = k % 32 == 0, bf = k % 8 == 0;
#pragma unroll
  for (int m = 0; m < NM; ++m) {
    mx = mx && w[m].format == kWeightMxfp4 && aligned(w[m].packed, 8);
    bf = bf && w[m].format == kWeightBf16 && aligned(w[m].bf16, 16);
  }
  if (mx) {
    // 16-column pieces p = lane + 32i: 8 code bytes + their scale byte. Rows
    // are kept as 32-bit scale-row offsets (codes: 16x) to save registers.
    uint32_t off[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r)
      off[r] = static_cast<uint32_t>(rows[r] * (k / 32));
    const int pieces = static_cast<int>(k / 16);
    for (int p0 = lane; p0 < pieces; p0 += 32 * UMx) {
      uint2 q[UMx][NS];
      uint32_t e[UMx][NS];
#pragma unroll
      for (int u = 0; u < UMx; ++u) {
        const int p = p0 + 32 * u;
#pragma unroll
        for (int s = 0; s < NS; ++s) {
          const WeightRef &ws = w[s % NM];
          const uint32_t o = off[s / NM];
          q[u][s] = p < pieces ? ldStream8(ws.packed + 16 * int64_t(o) + 8 * p)
                               : make_uint2(0, 0);
          e[u][s] = p < pieces ? ldStreamU8(ws.scale + o + (p >> 1)) : 127u;
        }
      }
#pragma unroll
      for (int u = 0; u < UMx; ++u) {
        const int p = p0 + 32 * u;
        if (p < pieces) {
          // Σ code · x · 2^-14 per stream, one 8-column half at a time (8
          // activations live), then scaled by 2^14 and the block scale.
          float part[NS], x[8];
          act.load8(int64_t(p) * 16, x);
#pragma unroll
          for (int s = 0; s < NS; ++s)
            part[s] = mxfp4Dot8(q[u][s].x, x, 0.0f);
          act.load8(int64_t(p) * 16 + 8, x);
          uint32_t eMax = 0;
#pragma unroll
          for (int s = 0; s < NS; ++s) {
            part[s] = mxfp4Dot8(q[u][s].y, x, part[s]);
            eMax = max(eMax, e[u][s]);
          }
          if (eMax <= dev::kE8m0FastMax) {
            // 2^14 · 2^(e - 127) is a normal float: one integer op per scale.
#pragma unroll
            for (int s = 0; s < NS; ++s)
              acc[s] = fmaf(part[s], dev::e8m0Times2p14(e[u][s]), acc[s]);
          } else {
            // Scales of 2^114 and up, or NaN: two steps.
#pragma unroll
            for (int s = 0; s < NS; ++s)
              acc[s] = fmaf(part[s] * 16384.0f, dev::e8m0ToF(e[u][s]), acc[s]);
          }
        }
      }
    }
  } else if (bf) {
    // 8-column pieces c = lane + 32i (16 bytes).
    const uint4 *wp[NS];
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
      for (int m = 0; m < NM; ++m)
        wp[r * NM + m] =
            reinterpret_cast<const uint4 *>(w[m].bf16 + rows[r] * k);
    const int pieces = static_cast<int>(k / 8);
    for (int c0 = lane; c0 < pieces; c0 += 32 * UBf) {
      uint4 q[UBf][NS];
#pragma unroll
      for (int u = 0; u < UBf; ++u) {
        const int c = c0 + 32 * u;
#pragma unroll
        for (int s = 0; s < NS; ++s) {
          q[u][s] = c < pieces ? ldStream16(wp[s] + c) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < UBf; ++u) {
        const int c = c0 + 32 * u;
        if (c < pieces) {
          float x[8];
          act.load8(int64_t(c) * 8, x);
#pragma unroll
          for (int s = 0; s < NS; ++s)
            acc[s] = bf16Dot8(q[u][s], x, acc[s]);
        }
      }
    }
  } else {
    // One stream at a time: the fallback keeps few registers.
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll 1
      for (int64_t c = lane; c < k; c += 32)
        acc[s] = fmaf(dev::weightAt(w[s % NM], k, rows[s / NM], c), act.at(c),
                      acc[s]);
  }
#pragma unroll
  for (int s = 0; s < NS; ++s)
    out[s] = dev::warpSum(acc[s]);
}

//===----------------------------------------------------------------------===//
// The work queue
//===----------------------------------------------------------------------===//

/// Counts a finished gate/up item.
__device__ __forceinline__ void finishGateUp(dev::WorkQueue &wq) {
  finishItem(&wq.done);
}

/// Waits until `items` first-phase items are counted.
__device__ __forceinline__ void awaitGateUp(dev::WorkQueue &wq,
                                            unsigned items) {
  awaitCount(&wq.done, items);
}

/// Fills out[0..n) with NaN (a launch outside the scratch limits).
using dev::fillNaN;

/// (rank, index) as one integer whose order is the router's: larger rank
/// first, equal ranks (+0 == -0) by the lower index, NaN after every number
/// (NaNs by index). Never 0 for a valid index, so 0 means "none".
__device__ __forceinline__ unsigned long long rankKey(float rank, int64_t e) {
  unsigned u = 0; // NaN: below every number
  if (rank == rank) {
    const unsigned b = __float_as_uint(rank == 0.0f ? 0.0f : rank);
    u = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  }
  return (static_cast<unsigned long long>(u) << 32) |
         (0xffffffffu - static_cast<unsigned>(e));
}

} // namespace

namespace {

/// s_e = sigmoid(gate_e · x̂) of expert e, by this warp, into gRouterScores;
/// x̂ is staged in `xs` or read through `act`.
__device__ __forceinline__ void scoreExpert(const RouterParams &p, int64_t e,
                                            bool staged, const float4 *xs,
                                            const GlobalAct &act) {
  WeightRef gate[1];
  gate[0].format = kWeightBf16;
  gate[0].bf16 = p.gate;
  const int64_t rows[1] = {e};
  float d[1];
  if (staged)
    rowDots(gate, rows, p.dim, StagedAct{xs}, d);
  else
    rowDots(gate, rows, p.dim, act, d);
  if ((threadIdx.x & 31) == 0)
    gRouterScores[e] = dev::sigmoidF(d[0]);
}

/// The router's second half, by one block once every score is in `scores`
/// (module scratch, written by other blocks: read through L2): the topK
/// experts by s + bias and their weights into outIds / outWeights.
/// `stage` is kStageCap words of 16-byte aligned shared memory (a stage no
/// longer needed).
///
/// Keys are (rank word, index), unique. With topK < 32 each warp first
/// drops the keys that topK or more keys of its own 32 beat (a shuffle per
/// key, no shared memory): only each warp's top-k survive, and every key of the global top-k is among them, with every key
/// above it; so a survivor's place is the number of survivors above it
/// (exact for the top-k, >= topK for the rest). Kimi-Linear: 64 survivors
/// of 256. Otherwise (topK >= 32, or more survivors than the stage holds)
/// every key counts the keys above it over all E, stopping at topK.
__device__ void rankTopK(const RouterParams &p, const float *scores,
                         unsigned *stage) {
  __shared__ int32_t topIds[kRouterMaxTopK];
  __shared__ float topScores[kRouterMaxTopK];
  __shared__ float denomShared;
  __shared__ unsigned survivors;
  const int64_t E = p.numExperts;
  const int32_t K = p.topK;
  const int lane = threadIdx.x & 31;
  unsigned *rankBits = stage; // [E]
  // Survivors: rank word, index, score (after the E words).
  const int64_t cap = (kStageCap - ((E + 3) & ~int64_t(3))) / 3;
  unsigned *candWord = stage + ((E + 3) & ~int64_t(3));
  unsigned *candIdx = candWord + cap;
  float *candScore = reinterpret_cast<float *>(candIdx + cap);
  for (int32_t k = threadIdx.x; k < K; k += blockDim.x) {
    topIds[k] = -1; // E < topK: the places no expert takes
    topScores[k] = __int_as_float(0x7fc00000);
  }
  if (threadIdx.x == 0)
    survivors = 0;
  __syncthreads();
  const bool prune = p.forceExpert < 0 && K < 32;
  if (p.forceExpert < 0) {
    // Whole warps per round (the shuffles): lanes past E hold the lowest
    // word and the highest indices, so they beat no real key.
    const int64_t rounds = (E + blockDim.x - 1) / blockDim.x;
    for (int64_t round = 0; round < rounds; ++round) {
      const int64_t e = round * blockDim.x + threadIdx.x;
      const bool real = e < E;
      const float score = real ? __ldcg(&scores[e]) : 0.0f;
      const float r = score + (p.bias && real ? p.bias[e] : 0.0f);
      const unsigned w =
          real ? static_cast<unsigned>(rankKey(r, e) >> 32) : 0u;
      if (real)
        rankBits[e] = w;
      if (!prune)
        continue;
      int32_t above = 0;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const unsigned wj = __shfl_sync(0xffffffffu, w, j);
        above += (wj > w) | ((wj == w) & (j < lane));
      }
      const bool keep = real && above < K;
      const unsigned mask = __ballot_sync(0xffffffffu, keep);
      unsigned base = 0;
      if (lane == 0 && mask)
        base = atomicAdd(&survivors, static_cast<unsigned>(__popc(mask)));
      base = __shfl_sync(0xffffffffu, base, 0);
      const unsigned at = base + __popc(mask & ((1u << lane) - 1u));
      if (keep && at < cap) {
        candWord[at] = w;
        candIdx[at] = static_cast<unsigned>(e);
        candScore[at] = score;
      }
    }
  }
  __syncthreads();
  auto keyOf = [&](int64_t e) {
    return (static_cast<unsigned long long>(rankBits[e]) << 32) |
           (0xffffffffu - static_cast<unsigned>(e));
  };
  if (prune && survivors <= cap) {
    const unsigned n = survivors;
    for (unsigned c = threadIdx.x; c < n; c += blockDim.x) {
      const unsigned w = candWord[c], i = candIdx[c];
      int32_t above = 0;
      for (unsigned d = 0; d < n; ++d) {
        const unsigned wd = candWord[d];
        above += (wd > w) | ((wd == w) & (candIdx[d] < i));
      }
      if (above < K) {
        topIds[above] = static_cast<int32_t>(i);
        topScores[above] = candScore[c];
      }
    }
  } else if (p.forceExpert < 0) {
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
      // keyOf(j) > keyOf(e) <=> a higher rank word, or the same one at a
      // lower index; 32 words per stop test, read as 16-byte broadcasts.
      const unsigned mine = rankBits[e];
      const uint4 *words = reinterpret_cast<const uint4 *>(rankBits);
      int32_t above = 0;
      int64_t j = 0;
      for (; j + 32 <= E && above < K; j += 32) {
        uint4 w[8];
#pragma unroll
        for (int u = 0; u < 8; ++u)
          w[u] = words[(j >> 2) + u];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const int64_t j0 = j + 4 * u;
          above += (w[u].x > mine) | ((w[u].x == mine) & (j0 < e));
          above += (w[u].y > mine) | ((w[u].y == mine) & (j0 + 1 < e));
          above += (w[u].z > mine) | ((w[u].z == mine) & (j0 + 2 < e));
          above += (w[u].w > mine) | ((w[u].w == mine) & (j0 + 3 < e));
        }
      }
      for (; j < E && above < K; ++j)
        above += keyOf(j) > keyOf(e);
      if (above < K) {
        topIds[above] = static_cast<int32_t>(e);
        topScores[above] = __ldcg(&scores[e]);
      }
    }
  } else {
    for (int32_t k = threadIdx.x; k < K; k += blockDim.x) {
      const int32_t id = p.forceExpert;
      topIds[k] = id;
      topScores[k] = id < E ? __ldcg(&scores[id]) : __int_as_float(0x7fc00000);
    }
  }
  __syncthreads();
  // routerCpu's weights, operation for operation (the sum in rank order by
  // one thread, from shared memory).
  for (int32_t k = threadIdx.x; k < K; k += blockDim.x)
    p.outIds[k] = topIds[k];
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int32_t k = 0; k < K; ++k)
      sum += topScores[k];
    denomShared = p.renormalize ? sum + 1e-20f : 1.0f;
  }
  __syncthreads();
  for (int32_t k = threadIdx.x; k < K; k += blockDim.x) {
    float w = topScores[k];
    if (p.renormalize)
      w = w / denomShared;
    p.outWeights[k] = w * p.scaling;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// router
//===----------------------------------------------------------------------===//
//
// k3_router: s_e = sigmoid(gate_e · h) for every expert (fp32), then the topK
// experts by s + bias (larger first; ties to the lower index; NaN last), the
// weights s renormalised (Σ + 1e-20, in rank order) and scaled, exactly as
// routerCpu (the same fp32 operations after the scores).
// Grid: warp w of block b scores experts (b · warps + w) + i · (grid · warps)
// into module scratch; the last block to finish (arrival counter) ranks them:
// each thread places its experts by counting the 64-bit (rank, index) keys
// above theirs (stopping at topK), then the top-k scores are read in
// parallel and one thread sums them in rank order. Any grid is correct;
// ceil(E / 8) blocks of 256 spread the E × D gate over one row per warp
// (grid 1: one SM reads the whole gate, ~20x slower).
// With normWeight every block takes the norm factor of h itself (the same
// bits in each) and scores x̂ = RMSNorm(h) formed on the fly.
// Limits: E <= kRouterCap and topK <= kRouterMaxTopK (else ids -1, weights
// NaN); D <= kStageCap is staged in shared memory (longer h is read from
// global memory).
extern "C" __global__ void __launch_bounds__(1024)
    k3_router(const RouterParams p) {
  __shared__ float4 xs[kStageCap / 4];
  __shared__ float normParts[kNormParts];
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  const int64_t E = p.numExperts, D = p.dim;
  const int64_t warpsInGrid = int64_t(gridDim.x) * warps;
  // The gate is no kernel's output: this warp's first row is asked for
  // while the previous kernel may still run (programmatic dependent launch).
  dev::allowDependentLaunch();
  if (int64_t e = int64_t(blockIdx.x) * warps + warp; e < E && E <= kRouterCap)
    prefetchL2Warp(p.gate + e * D, 2 * D);
  if (p.normWeight && threadIdx.x < 32)
    prefetchL2Warp(p.normWeight, 2 * D);
  dev::waitForPriorGrids();
  if (E > kRouterCap || p.topK > kRouterMaxTopK) {
    for (int64_t k = dev::globalThread(); k < p.topK; k += dev::gridThreads())
      p.outIds[k] = -1, p.outWeights[k] = __int_as_float(0x7fc00000);
    return;
  }

  // Staging pays when a warp scores several experts; with one row per warp
  // (Kimi-Linear's plan grid) h is read beside the row, saving a dependent
  // round trip and a barrier. A folded norm needs all of h first anyway, so
  // x̂ is staged then. Same values either way.
  const bool staged = D <= kStageCap && (p.normWeight || E > warpsInGrid);
  const float r = prepareInput(xs, D, p.h, p.normWeight, p.normEps, staged,
                               normParts);
  const GlobalAct h = inputAct(p.h, p.normWeight, r);
  for (int64_t e = int64_t(blockIdx.x) * warps + warp; e < E;
       e += warpsInGrid)
    scoreExpert(p, e, staged, xs, h);
  // The last block to arrive sees every score.
  if (lastToArrive(&gRouterArrived, gridDim.x))
    rankTopK(p, gRouterScores, reinterpret_cast<unsigned *>(xs));
}

//===----------------------------------------------------------------------===//
// gated_mlp
//===----------------------------------------------------------------------===//
//
// k3_gated_mlp: x̂ = x or RMSNorm(x); g = R(W1 x̂), u = R(W3 x̂),
// a = R(act(g, u)); y = R(W2 a); out = y or R(y + residual), as gatedMlpCpu.
// Work queue (file comment), items of 2 · warps rows (16 with 256 threads):
// gate/up item i: warp w computes rows 16i + 2w, +1 of W1 and W3 together
// (x̂ staged once per block, norm factor included) and stores a (bf16) to
// module scratch; down item j (after every gate/up item): warp w computes
// out rows 16j + 2w, +1 over a. Items: ceil(I/16) + ceil(outDim/16); a grid
// of ceil(I/8) (the plan's) is enough, about 4 blocks per SM is best.
// Limits: interDim <= kGatedActCap (else out is NaN); inDim <= kStageCap is
// staged in shared memory (longer x̂ is formed on the fly from global
// memory). `out` may alias `residual` (each element is read, then written,
// by one thread).
extern "C" __global__ void __launch_bounds__(1024)
    k3_gated_mlp(const GatedMlpParams p) {
  dev::enterStep();
  __shared__ float4 xs[kStageCap / 4];
  __shared__ float normParts[kNormParts];
  __shared__ unsigned slot;
  const int64_t I = p.interDim, O = p.outDim;
  if (I > kGatedActCap) {
    fillNaN(p.out, O);
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t rowsPerItem = 2 * (blockDim.x >> 5);
  const unsigned gateItems =
      static_cast<unsigned>((I + rowsPerItem - 1) / rowsPerItem);
  const unsigned items =
      gateItems + static_cast<unsigned>((O + rowsPerItem - 1) / rowsPerItem);
  const bool stageX = p.inDim <= kStageCap;
  GlobalAct xin = inputAct(p.x, p.normWeight, 1.0f);
  bool haveX = false, haveA = false;

  for (;;) {
    const unsigned item = nextItem(gGatedQueue, &slot);
    if (item >= items)
      break;
    if (item < gateItems) {
      if (!haveX) {
        xin.r = prepareInput(xs, p.inDim, p.x, p.normWeight, p.normEps, stageX,
                             normParts);
        haveX = true;
      }
      const int64_t i0 = int64_t(item) * rowsPerItem + 2 * warp;
      const WeightRef w[2] = {p.w1, p.w3};
      const int64_t rows[2] = {min(i0, I - 1), min(i0 + 1, I - 1)};
      float d[4]; // g, u of row i0, then of i0 + 1
      if (stageX)
        rowDots(w, rows, p.inDim, StagedAct{xs}, d);
      else
        rowDots(w, rows, p.inDim, xin, d);
      if (lane < 2 && i0 + lane < I) {
        const float g = dev::roundBf16(lane ? d[2] : d[0]);
        const float u = dev::roundBf16(lane ? d[3] : d[1]);
        gGatedAct[i0 + lane] = dev::fToBf16(
            dev::gatedActF(p.activation, p.beta1, p.hasBeta2, p.beta2, g, u));
      }
      finishGateUp(gGatedQueue);
    } else {
      if (!haveA) {
        awaitGateUp(gGatedQueue, gateItems);
        haveA = true;
      }
      const int64_t o0 = int64_t(item - gateItems) * rowsPerItem + 2 * warp;
      const WeightRef w[1] = {p.w2};
      const int64_t rows[2] = {min(o0, O - 1), min(o0 + 1, O - 1)};
      const GlobalAct a{gGatedAct, nullptr, 1.0f, true};
      float d[2];
      rowDots(w, rows, I, a, d);
      if (lane < 2 && o0 + lane < O) {
        float y = dev::roundBf16(lane ? d[1] : d[0]);
        if (p.residual)
          y = y + dev::bf16ToF(p.residual[o0 + lane]);
        p.out[o0 + lane] = dev::fToBf16(y);
      }
    }
  }
  leaveQueue(gGatedQueue);
}

namespace {

/// The launch-wide numbers of a `moe_experts` launch, kept in shared memory
/// and re-read where needed: fewer long-lived registers in the item loop.
/// Slots: 0 is the shared expert when there is one, then the routed slots
/// k = 0 .. topK-1 (slot k + shared).
struct MoeShape {
  int64_t aStride;       ///< activation stride of a routed slot (16 B rows)
  int64_t sharedStride;  ///< activations of the shared slot (before them)
  unsigned slots;        ///< topK + shared
  unsigned shared;       ///< 1 when slot 0 is the shared expert
  unsigned guShared;     ///< gate/up items of the shared slot
  unsigned guRouted;     ///< gate/up items of a routed slot
  unsigned down;         ///< down items of every slot
  unsigned firstCombine; ///< ticket of the first combine item
  unsigned items;        ///< all items
  unsigned item;         ///< the block's current item
  int stageX;            ///< x̂ staged in shared memory
  float normR;           ///< x's norm factor (with normWeight)
};

/// What a ticket of `moe_experts` is (see the kernel for the order).
struct MoeItem {
  enum Kind { GateUp, Down, Combine } kind;
  unsigned slot;  ///< of GateUp / Down
  unsigned index; ///< within its slot (or among the combine items)
};

__device__ __forceinline__ unsigned guItems(const MoeShape &sh, unsigned j) {
  return sh.shared && j == 0 ? sh.guShared : sh.guRouted;
}

/// Tickets: G(0) and, with a shared expert (slot 0), D(0), which need no
/// routing; then every routed slot's gate/up items G(1) .. G(n-1), then their
/// down items D(1) .. D(n-1) (without a shared expert: G(0) .. G(n-1), then
/// D(0) .. D(n-1)), then the combine items. So all routed gate/up rows stream
/// at once when the routing is known, and a slot's down items come after
/// every gate/up item: they rarely wait. (The earlier order G(j+1), D(j)
/// slot by slot left the last slot's gate/up, down and combine as a tail of
/// dependent phases: 64.0 against 61.4 µs per Kimi-Linear moe_ffn, the step
/// 3477 against 3387 µs on the H200, docs/PERF.md.)
/// (Not inlined: inlined, its divisions made the item loops of moe_experts
/// and moe_ffn spill under the 64-register bound; it runs once per item.)
__device__ __noinline__ MoeItem decodeItem(const MoeShape &sh, unsigned t) {
  if (t >= sh.firstCombine)
    return {MoeItem::Combine, 0, t - sh.firstCombine};
  const unsigned g0 = guItems(sh, 0);
  if (t < g0)
    return {MoeItem::GateUp, 0, t};
  unsigned base = g0;
  if (sh.shared) {
    if (t < base + sh.down)
      return {MoeItem::Down, 0, t - base};
    base += sh.down;
  }
  const unsigned routedG = (sh.slots - 1) * sh.guRouted; // slots 1 ..
  if (t < base + routedG)
    return {MoeItem::GateUp, 1 + (t - base) / sh.guRouted,
            (t - base) % sh.guRouted};
  base += routedG;
  const unsigned firstDown = sh.shared ? 1u : 0u;
  return {MoeItem::Down, firstDown + (t - base) / sh.down,
          (t - base) % sh.down};
}

/// Routed slot k's expert id, or -1 when it is outside the table. Read
/// through L2: in moe_ffn the ids are written by this launch's router.
__device__ __forceinline__ int32_t routedExpert(const MoeExpertsParams &p,
                                                int64_t k) {
  const int32_t e = __ldcg(p.ids + k);
  return e >= 0 && e < p.numExperts ? e : -1;
}

/// Slot j's expert weights (false: an invalid routed id, the slot is NaN)
/// and where its activations live.
__device__ __forceinline__ bool slotExpert(const MoeExpertsParams &p,
                                           const MoeShape &sh, unsigned j,
                                           WeightRef (&w)[3], int64_t &inter,
                                           uint16_t *&act) {
  if (sh.shared && j == 0) {
    w[0] = p.sharedW1, w[1] = p.sharedW3, w[2] = p.sharedW2;
    inter = p.sharedInterDim;
    act = gMoeAct;
    return true;
  }
  const int32_t k = static_cast<int32_t>(j - sh.shared);
  inter = p.interDim;
  act = gMoeAct + sh.sharedStride + int64_t(k) * sh.aStride;
  const int32_t e = routedExpert(p, k);
  if (e < 0)
    return false;
  w[0] = p.w1[e], w[1] = p.w3[e], w[2] = p.w2[e];
  return true;
}

/// Gate/up item `index` of slot j: a = R(act(R(W1 x̂), R(W3 x̂))) of two
/// intermediate rows per warp into the slot's activations (NaN for an
/// invalid expert id).
__device__ __forceinline__ void moeGateUp(const MoeExpertsParams &p,
                                          const MoeShape &sh, unsigned j,
                                          unsigned index, const float4 *xs) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  WeightRef w[3];
  int64_t I;
  uint16_t *dst;
  const bool valid = slotExpert(p, sh, j, w, I, dst);
  const int64_t i0 = int64_t(index) * (2 * (blockDim.x >> 5)) + 2 * warp;
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (valid) {
    const WeightRef w13[2] = {w[0], w[1]};
    const int64_t rows[2] = {min(i0, I - 1), min(i0 + 1, I - 1)};
    if (sh.stageX)
      rowDots(w13, rows, p.dim, StagedAct{xs}, d);
    else
      rowDots(w13, rows, p.dim, inputAct(p.x, p.normWeight, sh.normR), d);
  }
  if (lane < 2 && i0 + lane < I) {
    const float g = dev::roundBf16(lane ? d[2] : d[0]);
    const float u = dev::roundBf16(lane ? d[3] : d[1]);
    dst[i0 + lane] =
        valid ? dev::fToBf16(dev::gatedActF(p.activation, p.beta1, p.hasBeta2,
                                            p.beta2, g, u))
              : dev::kBf16NaN;
  }
}

/// Down item `index` of slot j: y = R(W2 a) of kDownRows output rows per
/// warp into gMoeY[j] (NaN for an invalid expert id).
__device__ __forceinline__ void moeDown(const MoeExpertsParams &p,
                                        const MoeShape &sh, unsigned j,
                                        unsigned index) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  WeightRef w[3];
  int64_t I;
  uint16_t *act;
  const bool valid = slotExpert(p, sh, j, w, I, act);
  const int64_t D = p.dim;
  const int64_t r0 =
      int64_t(index) * (kDownRows * (blockDim.x >> 5)) + kDownRows * warp;
  float d[kDownRows];
  if (valid) {
    const WeightRef w2[1] = {w[2]};
    int64_t rows[kDownRows];
#pragma unroll
    for (int r = 0; r < kDownRows; ++r)
      rows[r] = min(r0 + r, D - 1);
    rowDots(w2, rows, I, GlobalAct{act, nullptr, 1.0f, true}, d);
  } else {
#pragma unroll
    for (int r = 0; r < kDownRows; ++r)
      d[r] = __int_as_float(0x7fc00000);
  }
  if (lane < kDownRows && r0 + lane < D) {
    float y = d[0];
#pragma unroll
    for (int r = 1; r < kDownRows; ++r)
      y = lane == r ? d[r] : y;
    gMoeY[int64_t(j) * D + r0 + lane] = dev::roundBf16(y);
  }
}

/// Asks L2 for the shared expert's gate/up rows of its item `item` (the
/// one this block will most likely draw first) before the router it waits
/// for has finished: they depend on no kernel's output.
__device__ __forceinline__ void prefetchShared(const MoeExpertsParams &p,
                                               unsigned item) {
  const int warp = threadIdx.x >> 5;
  const int64_t D = p.dim, S = p.sharedInterDim;
  const int64_t i0 = int64_t(item) * (2 * (blockDim.x >> 5)) + 2 * warp;
  for (int64_t i = i0; i < min(i0 + 2, S); ++i) {
    if (p.sharedW1.format == kWeightBf16)
      prefetchL2Warp(p.sharedW1.bf16 + i * D, 2 * D);
    if (p.sharedW3.format == kWeightBf16)
      prefetchL2Warp(p.sharedW3.bf16 + i * D, 2 * D);
  }
}

/// Gate/up items of the shared slot (0 without one).
__device__ __forceinline__ unsigned sharedGateUpItems(const MoeExpertsParams &p) {
  const int64_t rowsPerItem = 2 * (blockDim.x >> 5);
  return p.sharedInterDim > 0
             ? static_cast<unsigned>(
                   (p.sharedInterDim + rowsPerItem - 1) / rowsPerItem)
             : 0u;
}

/// Fills `sh` (thread 0; published by the next barrier) and returns false
/// when the launch is outside the module scratch (the caller writes NaN).
__device__ bool moeSetup(const MoeExpertsParams &p, MoeShape &sh) {
  const int32_t K = p.topK > 0 ? p.topK : 0;
  const int64_t rowsPerItem = 2 * (blockDim.x >> 5);
  const bool hasShared = p.sharedInterDim > 0;
  const int64_t aStride = (p.interDim + 7) & ~int64_t(7);
  const int64_t sharedStride = (p.sharedInterDim + 7) & ~int64_t(7);
  const int64_t slots = int64_t(K) + (hasShared ? 1 : 0);
  if (int64_t(K) * aStride + sharedStride > kMoeActCap ||
      slots * p.dim > kMoeYCap || slots > kMoeMaxSlots)
    return false;
  if (threadIdx.x == 0) {
    sh.aStride = aStride;
    sh.sharedStride = sharedStride;
    sh.slots = static_cast<unsigned>(slots);
    sh.shared = hasShared ? 1u : 0u;
    sh.guShared = sharedGateUpItems(p);
    sh.guRouted =
        static_cast<unsigned>((p.interDim + rowsPerItem - 1) / rowsPerItem);
    const int64_t downRows = kDownRows * (blockDim.x >> 5);
    sh.down = static_cast<unsigned>((p.dim + downRows - 1) / downRows);
    sh.firstCombine = sh.guShared + sh.guRouted * static_cast<unsigned>(K) +
                      sh.down * sh.slots;
    sh.items = sh.firstCombine +
               static_cast<unsigned>((p.dim + blockDim.x - 1) / blockDim.x);
    sh.stageX = p.dim <= kStageCap;
  }
  return true;
}

/// Stages x̂ (x, or its RMSNorm) for this block's gate/up rows once, and
/// keeps the norm factor in sh for the unstaged path.
__device__ void moeStageInput(const MoeExpertsParams &p, MoeShape &sh,
                              float4 *xs, float *normParts) {
  const float r = prepareInput(xs, p.dim, p.x, p.normWeight, p.normEps,
                               sh.stageX, normParts);
  if (threadIdx.x == 0)
    sh.normR = r;
  __syncthreads();
}

/// Combine item `index` of `moe_experts` (see the kernel), once every down
/// item is counted.
__device__ __forceinline__ void moeCombine(const MoeExpertsParams &p,
                                           const MoeShape &sh, unsigned index) {
  awaitCount(&gMoeQueue.done, sh.down * sh.slots);
  const int64_t row = int64_t(index) * blockDim.x + threadIdx.x;
  if (row < p.dim) {
    // y was written by other blocks of this launch (and, in moe_ffn, the
    // weights too): read via L2.
    const float *y = gMoeY + row;
    float acc = 0.0f;
    for (int32_t k = 0; k < p.topK; ++k)
      acc =
          __fadd_rn(acc, __fmul_rn(__ldcg(p.weights + k),
                                   __ldcg(y + int64_t(k + sh.shared) * p.dim)));
    float v = dev::roundBf16(acc);
    if (sh.shared)
      v = dev::roundBf16(__fadd_rn(v, __ldcg(y)));
    if (p.residual)
      v = __fadd_rn(v, dev::bf16ToF(p.residual[row]));
    p.out[row] = dev::fToBf16(v);
  }
}

/// Runs `moe_experts` item `ticket` (see the kernel). `routed`, when given,
/// is a flag that turns 1 once the ids and weights are written (moe_ffn):
/// routed gate/up items wait for it.
__device__ void moeRunItem(const MoeExpertsParams &p, MoeShape &sh,
                           unsigned ticket, float4 *xs, float *normParts,
                           bool &haveX, const unsigned *routed) {
  const MoeItem it = decodeItem(sh, ticket);
  if (it.kind == MoeItem::GateUp) {
    // x̂ first: it does not depend on the routing, so a block that waits
    // for the router has it staged by when the flag rises.
    if (!haveX) {
      moeStageInput(p, sh, xs, normParts);
      haveX = true;
    }
    if (routed && it.slot >= sh.shared)
      awaitCount(routed, 1u);
    moeGateUp(p, sh, it.slot, it.index, xs);
    finishItem(&gMoeSlotDone[it.slot]);
  } else if (it.kind == MoeItem::Down) {
    awaitCount(&gMoeSlotDone[it.slot], guItems(sh, it.slot));
    moeDown(p, sh, it.slot, it.index);
    finishItem(&gMoeQueue.done); // the combine items wait for all of them
  } else {
    moeCombine(p, sh, it.index);
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// moe_experts
//===----------------------------------------------------------------------===//
//
// k3_moe_experts: r = R(Σ_k weights[k] · y_k) over the topK slots, y_k the
// bf16 output of expert ids[k]'s gated MLP on x̂ (a = R(act(R(W1 x̂),
// R(W3 x̂))), y = R(W2 a)), the sum in fp32 in slot order with separate
// multiply and add, then r = R(r + s) with the shared expert's output s and
// out = R(r + residual), each optional, as moeExpertsCpu. x̂ is x or its
// RMSNorm (normWeight; each block stages it with its own factor).
// Work queue (file comment), in the order of decodeItem (slot 0 the shared
// expert when there is one, its rows prefetched into L2 before the router
// ends):
//  * gate/up items G(j): item i of slot j covers intermediate rows
//    2 · warps · i .. +2·warps; warp w computes W1 and W3 of two rows (4 rows
//    at once, x̂ staged once per block) and stores a to module scratch
//    (bf16), then counts the item in slot j's counter;
//  * down items D(j), after every routed slot's gate/up items: once slot
//    j's gate/up items are counted, warp w computes 4 rows of R(W2 a_j) into
//    module scratch y_j (the shared expert's D(0) right after its G(0), as
//    neither waits for routing);
//  * combine items (after every down item): a thread per output row adds
//    weights[k] · y_k in slot order, rounds, adds the shared expert's row
//    and the residual.
// Every weight byte of the chosen experts is read once, by all SMs.
// Items per slot: ceil(I / 16) gate/up + ceil(dim / 32) down (256 threads),
// plus ceil(dim / 256) combine; the plan's grid (4 blocks per SM) works best.
// Limits: topK · interDim + S <= kMoeActCap (rows padded to 8), (topK + 1)
// · dim <= kMoeYCap and topK < kMoeMaxSlots (else out is NaN); dim <=
// kStageCap is staged in shared memory (a longer x̂ is formed from global
// memory); an id outside [0, numExperts) makes its slot NaN. `out` may alias
// `residual`, not x.
extern "C" __global__ void __launch_bounds__(1024)
    k3_moe_experts(const MoeExpertsParams p) {
  __shared__ float4 xs[kStageCap / 4];
  __shared__ float normParts[kNormParts];
  __shared__ MoeShape sh;
  dev::allowDependentLaunch();
  if (blockIdx.x < sharedGateUpItems(p))
    prefetchShared(p, blockIdx.x);
  if (p.normWeight && threadIdx.x < 32)
    dev::prefetchWarp<kNormL1>(p.normWeight, 2 * p.dim);
  dev::waitForPriorGrids();
  if (!moeSetup(p, sh)) {
    fillNaN(p.out, p.dim);
    return;
  }
  bool haveX = false;
  for (;;) {
    // (nextItem's barriers also publish sh.)
    const unsigned ticket = nextItem(gMoeQueue, &sh.item);
    if (ticket >= sh.items)
      break;
    moeRunItem(p, sh, ticket, xs, normParts, haveX, nullptr);
  }
  leaveQueue(gMoeQueue, gMoeSlotDone, static_cast<int>(sh.slots));
}

//===----------------------------------------------------------------------===//
// moe_experts_mxfp4
//===----------------------------------------------------------------------===//

namespace {

/// Weight rows of a `moe_experts_mxfp4` item: two m-tiles of 16 (the W1 and
/// the W3 rows of a gate/up item; 32 W2 rows of a down item).
constexpr int kMxRows = 32;
/// MXFP4 blocks (32 columns) of a stage row.
constexpr int kMxStageBlocks = static_cast<int>(kMoeMxfp4StageCols / 32);
/// Stages of the ring: kMxRing - 1 in flight while one is read.
constexpr int kMxRing = 4;
constexpr int kMxWarps = kMoeMxfp4Threads / 32;
static_assert(kMxStageBlocks == 2 * kMxWarps,
              "a warp takes two blocks of each stage");
static_assert(16 * kMxStageBlocks == kMoeMxfp4Threads,
              "a thread copies one 16-byte granule of codes a stage half");
static_assert(kMxRows == 4 * kMxWarps && 16 == 2 * kMxWarps,
              "items of moeSetup's sizes (16 gate/up rows, 32 down rows)");

/// The shared memory of `moe_experts_mxfp4` (43.6 KiB: four blocks an SM).
struct MxShared {
  /// The ring's codes, [stage][row][16-byte granule]: granule c of row r at
  /// c ^ (r & 7), so that a quad's reads of 8 rows hit 8 bank groups.
  uint4 codes[kMxRing][kMxRows * kMxStageBlocks];
  /// The ring's scales, [stage][row] × 16 E8M0 bytes (one per block).
  uint4 scales[kMxRing][kMxRows];
  /// The activation vector (x̂, or a slot's a) as mma B fragments: block
  /// b's 32 values v · 2^shift_b in fp16, lane t's word quad at [4b + t]:
  /// columns (8t, 8t+2), (8t+4, 8t+6), (8t+1, 8t+3), (8t+5, 8t+7).
  uint4 act[kMoeMxfp4MaxCols / 8];
  /// 2^(14 - shift_b): turns block b's mma sums (codes · 2^-14 times the
  /// scaled values) into real ones, with the weight's E8M0 scale.
  float actScale[kMoeMxfp4MaxCols / 32];
  /// Each warp's sums of the item's rows, added in warp order.
  float part[kMxWarps][kMxRows];
};

/// Where an item's rows come from: stage rows 16h .. 16h + 15 are the rows
/// at codes[h] / scales[h] (MXFP4 rows of `cols` columns).
struct MxItem {
  const uint8_t *codes[2];
  const uint8_t *scales[2];
  int64_t cols;
};

/// Stages `n` bf16 values at `v` (read through L2: in moe_experts_mxfp4 a
/// slot's a is other blocks' output) as B fragments, a thread per MXFP4
/// block. Each block is scaled by the power of two 2^shift that puts its
/// largest magnitude in [2^14, 2^15), so every value within 2^-28 of it is
/// exact in fp16 (smaller ones round, far below the sums' rounding); NaN
/// and infinities stay what they are.
__device__ void mxStageAct(MxShared &sm, const uint16_t *v, int64_t n) {
  for (int64_t b = threadIdx.x; b < n / 32; b += blockDim.x) {
    uint4 q[4];
    uint32_t mag = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      q[i] = __ldcg(reinterpret_cast<const uint4 *>(v + 32 * b) + i);
      mag = __vmaxu2(mag, q[i].x & 0x7fff7fffu);
      mag = __vmaxu2(mag, q[i].y & 0x7fff7fffu);
      mag = __vmaxu2(mag, q[i].z & 0x7fff7fffu);
      mag = __vmaxu2(mag, q[i].w & 0x7fff7fffu);
    }
    const int e = static_cast<int>(max(mag & 0xffffu, mag >> 16) >> 7);
    // e: the bf16 exponent field of the largest magnitude (0: zeros and
    // subnormals, 255: an infinity or NaN, left unscaled).
    const int shift = e == 255 ? 0 : min(141 - e, 126);
    const float up = __uint_as_float(static_cast<uint32_t>(127 + shift) << 23);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const uint4 w = q[t]; // columns 8t .. 8t + 7
      uint4 f;
      f.x = dev::packHalf2(loF(w.x) * up, loF(w.y) * up);
      f.y = dev::packHalf2(loF(w.z) * up, loF(w.w) * up);
      f.z = dev::packHalf2(hiF(w.x) * up, hiF(w.y) * up);
      f.w = dev::packHalf2(hiF(w.z) * up, hiF(w.w) * up);
      sm.act[4 * b + t] = f;
    }
    sm.actScale[b] =
        __uint_as_float(static_cast<uint32_t>(127 + 14 - shift) << 23);
  }
}

/// Starts copying stage s of the item (kMoeMxfp4StageCols columns of its
/// 32 rows) into ring slot s % kMxRing; one cp.async group per thread.
__device__ __forceinline__ void mxIssueStage(MxShared &sm, const MxItem &it,
                                             int s) {
  const int slot = s % kMxRing;
  const int64_t rowBytes = it.cols / 2, rowScales = it.cols / 32;
  // Thread i copies granule i % 16 of row i / 16 of each half (h: a
  // constant index, so that the item stays in registers).
  const int rh = threadIdx.x / kMxStageBlocks, c = threadIdx.x % kMxStageBlocks;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 16 * h + rh;
    const uint8_t *src = it.codes[h] + rh * rowBytes +
                         int64_t(s) * (kMoeMxfp4StageCols / 2) + 16 * c;
    dev::copyAsync16(&sm.codes[slot][r * kMxStageBlocks + (c ^ (r & 7))], src);
  }
  if (threadIdx.x < kMxRows) {
    const int r = threadIdx.x;
    const uint8_t *base = r < 16 ? it.scales[0] : it.scales[1];
    dev::copyAsync16(&sm.scales[slot][r],
                     base + (r & 15) * rowScales + int64_t(s) * kMxStageBlocks);
  }
  dev::commitAsyncCopies();
}

/// The item row whose sums lane `lane` keeps: the four lanes of quad g
/// hold the same C values (every column of B is the activation), so lane t
/// keeps row g + 8 (t & 1) of m-tile t >> 1 and scales only that one.
__device__ __forceinline__ int mxLaneRow(int lane) {
  return 8 * (lane & 3) + (lane >> 2); // 16 (t >> 1) + 8 (t & 1) + g
}

/// The lane that keeps row r (mxLaneRow's inverse).
__device__ __forceinline__ int mxRowLane(int r) { return 4 * (r & 7) + (r >> 3); }

/// Adds stage s's products of row mxLaneRow(lane) to acc: warp w takes
/// blocks 2w and 2w + 1 of the stage for both m-tiles. A block is two
/// k-steps of m16n8k16 in a k order both operands share: lane t's code
/// word t of rows g and g + 8 (mxfp4Halves) against its B fragment quad;
/// every column of B is the activation, so every lane's C holds its quad's
/// rows' sums. The lane's row's fresh sum is scaled by its E8M0 byte.
__device__ __forceinline__ void mxStageSums(const MxShared &sm, int s,
                                            float &acc) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int slot = s % kMxRing;
  const uint32_t *codes = reinterpret_cast<const uint32_t *>(sm.codes[slot]);
  const uint8_t *scales = reinterpret_cast<const uint8_t *>(sm.scales[slot]) +
                          mxLaneRow(lane) * kMxStageBlocks;
#pragma unroll 1 // (unrolled, the kernel spills under 64 registers)
  for (int bb = 0; bb < 2; ++bb) {
    const int b = 2 * warp + bb;
    const int kb = s * kMxStageBlocks + b; // the block within the row
    const uint4 x = sm.act[4 * kb + t];
    float c[2][4];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int r0 = 16 * m + g, r1 = r0 + 8; // (r & 7) == g for both
      uint32_t h0[4], h1[4];
      dev::mxfp4Halves(codes[(r0 * kMxStageBlocks + (b ^ g)) * 4 + t], h0);
      dev::mxfp4Halves(codes[(r1 * kMxStageBlocks + (b ^ g)) * 4 + t], h1);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        c[m][i] = 0.0f;
      dev::mmaF16K16(c[m], {h0[0], h1[0], h0[1], h1[1]}, x.x, x.y);
      dev::mmaF16K16(c[m], {h0[2], h1[2], h0[3], h1[3]}, x.z, x.w);
    }
    const float sum =
        (t & 2) ? ((t & 1) ? c[1][2] : c[1][0]) : ((t & 1) ? c[0][2] : c[0][0]);
    acc = fmaf(sum, dev::e8m0ToF(scales[b]) * sm.actScale[kb], acc);
  }
}

/// Starts the item's first kMxRing - 1 stages (before the activation's
/// staging, so that their HBM latency overlaps it).
__device__ __forceinline__ void mxBegin(MxShared &sm, const MxItem &it,
                                        int stages) {
#pragma unroll
  for (int s = 0; s < kMxRing - 1; ++s) {
    if (s < stages)
      mxIssueStage(sm, it, s);
    else
      dev::commitAsyncCopies();
  }
}

/// The item's row sums after mxBegin and the activation's staging: row r's
/// in thread r < kMxRows (the warps' parts added in warp order, so the same
/// bits for any grid). Every thread of the block calls it.
__device__ __forceinline__ float mxSums(MxShared &sm, const MxItem &it,
                                        int stages) {
  float acc = 0.0f;
  for (int s = 0; s < stages; ++s) {
    dev::waitAsyncGroups<kMxRing - 2>(); // stage s has landed (this thread)
    __syncthreads(); // ... for every thread; slot (s - 1) % kMxRing is free
    if (s + kMxRing - 1 < stages)
      mxIssueStage(sm, it, s + kMxRing - 1);
    else
      dev::commitAsyncCopies();
    mxStageSums(sm, s, acc);
  }
  // Lane r takes row r's sum from the lane that kept it, so the part's
  // address is the thread index (no register held over the items).
  const int r = threadIdx.x & 31;
  sm.part[threadIdx.x >> 5][r] = __shfl_sync(0xffffffffu, acc, mxRowLane(r));
  __syncthreads();
  float sum = 0.0f;
  if (threadIdx.x < kMxRows)
#pragma unroll
    for (int w = 0; w < kMxWarps; ++w)
      sum += sm.part[w][threadIdx.x];
  return sum;
}

/// Slot j's expert matrix `w` when it can be read here (MXFP4, 16-byte
/// aligned), else null.
__device__ __forceinline__ const WeightRef *mxWeight(const WeightRef &w) {
  return w.format == kWeightMxfp4 && dev::aligned16(w.packed) &&
                 dev::aligned16(w.scale)
             ? &w
             : nullptr;
}

/// Gate/up item `index` of slot j: a = R(act(R(W1 x̂), R(W3 x̂))) of 16
/// intermediate rows (NaN for an invalid expert).
__device__ void mxGateUp(const MoeExpertsParams &p, const MoeShape &sh,
                         MxShared &sm, unsigned j, unsigned index,
                         int &staged) {
  const int64_t D = p.dim, i0 = int64_t(index) * 16;
  uint16_t *dst = gMoeAct + int64_t(j) * sh.aStride + i0;
  const int32_t e = routedExpert(p, j);
  const WeightRef *w1 = e >= 0 ? mxWeight(p.w1[e]) : nullptr;
  const WeightRef *w3 = e >= 0 ? mxWeight(p.w3[e]) : nullptr;
  if (!w1 || !w3) {
    if (threadIdx.x < 16)
      dst[threadIdx.x] = dev::kBf16NaN;
    return;
  }
  const MxItem it{{w1->packed + i0 * (D / 2), w3->packed + i0 * (D / 2)},
                  {w1->scale + i0 * (D / 32), w3->scale + i0 * (D / 32)},
                  D};
  const int stages = static_cast<int>(D / kMoeMxfp4StageCols);
  mxBegin(sm, it, stages);
  if (staged != -1) {
    mxStageAct(sm, p.x, D);
    staged = -1;
  }
  const float sum = mxSums(sm, it, stages);
  const float u = __shfl_down_sync(0xffffffffu, sum, 16); // W3's row
  if (threadIdx.x < 16)
    dst[threadIdx.x] =
        dev::fToBf16(dev::gatedActF(p.activation, p.beta1, p.hasBeta2, p.beta2,
                                    dev::roundBf16(sum), dev::roundBf16(u)));
}

/// Down item `index` of slot j: y = R(W2 a_j) of 32 output rows into
/// gMoeY[j] (NaN for an invalid expert), once slot j's gate/up items are
/// counted.
__device__ void mxDown(const MoeExpertsParams &p, const MoeShape &sh,
                       MxShared &sm, unsigned j, unsigned index, int &staged) {
  const int64_t I = p.interDim, r0 = int64_t(index) * kMxRows;
  float *dst = gMoeY + int64_t(j) * p.dim + r0;
  const int32_t e = routedExpert(p, j);
  const WeightRef *w2 = e >= 0 ? mxWeight(p.w2[e]) : nullptr;
  if (!w2) {
    if (threadIdx.x < kMxRows)
      dst[threadIdx.x] = __int_as_float(0x7fc00000);
    return;
  }
  const MxItem it{{w2->packed + r0 * (I / 2), w2->packed + (r0 + 16) * (I / 2)},
                  {w2->scale + r0 * (I / 32), w2->scale + (r0 + 16) * (I / 32)},
                  I};
  const int stages = static_cast<int>(I / kMoeMxfp4StageCols);
  mxBegin(sm, it, stages);
  awaitCount(&gMoeSlotDone[j], sh.guRouted);
  if (staged != static_cast<int>(j)) {
    mxStageAct(sm, gMoeAct + int64_t(j) * sh.aStride, I);
    staged = static_cast<int>(j);
  }
  const float sum = mxSums(sm, it, stages);
  if (threadIdx.x < kMxRows)
    dst[threadIdx.x] = dev::roundBf16(sum);
}

} // namespace

// k3_moe_experts_mxfp4: k3_moe_experts (the same work queue, items, module
// scratch and combine) for routed experts in MXFP4, their rows on the tensor
// cores. An item's 32 weight rows (16 rows of W1 and of W3, or 32 of W2)
// stream through a shared-memory ring of kMxRing stages of
// kMoeMxfp4StageCols columns by cp.async, kMxRing - 1 stages ahead of the
// mma.sync m16n8k16 (fp16: E2M1 codes are exact as c · 2^-14, the
// activations exact per MXFP4 block after a power-of-two scale) that read
// them; warp w takes two blocks of each stage, fresh sums per block scaled
// by the row's E8M0 byte, the warps' sums added in warp order. The next
// item's first stages are in flight while its activations are staged (a
// gate/up item: x̂ once per block; a down item: its slot's a, read through
// L2 once the slot's gate/up items are counted).
// Grid: any (the plan's 4 blocks per SM fill the SMs: 43.6 KiB of shared
// memory each); block: kMoeMxfp4Threads. Deterministic: an item's rows are
// summed in one order whatever the grid. Limits: moeExpertsMxfp4Fits
// (MoeParams.h), x 16-byte aligned, every chosen expert MXFP4 with 16-byte
// aligned codes and scales; outside them out (or the expert's slot) is NaN.
extern "C" __global__ void __launch_bounds__(kMoeMxfp4Threads, 4)
    k3_moe_experts_mxfp4(const MoeExpertsParams p) {
  __shared__ MxShared sm;
  __shared__ MoeShape sh;
  dev::allowDependentLaunch();
  dev::waitForPriorGrids();
  if (blockDim.x != kMoeMxfp4Threads ||
      !moeExpertsMxfp4Fits(p.dim, p.interDim, p.normWeight != nullptr,
                           p.sharedInterDim > 0) ||
      !aligned(p.x, 16) || !moeSetup(p, sh)) {
    fillNaN(p.out, p.dim);
    return;
  }
  int staged = -2; // the activations in sm.act: -1 x̂, j slot j's a
  for (;;) {
    // (nextItem's barriers also publish sh.)
    const unsigned ticket = nextItem(gMoeQueue, &sh.item);
    if (ticket >= sh.items)
      break;
    const MoeItem it = decodeItem(sh, ticket);
    if (it.kind == MoeItem::GateUp) {
      mxGateUp(p, sh, sm, it.slot, it.index, staged);
      finishItem(&gMoeSlotDone[it.slot]);
    } else if (it.kind == MoeItem::Down) {
      mxDown(p, sh, sm, it.slot, it.index, staged);
      finishItem(&gMoeQueue.done);
    } else {
      moeCombine(p, sh, it.index);
    }
  }
  leaveQueue(gMoeQueue, gMoeSlotDone, static_cast<int>(sh.slots));
}

//===----------------------------------------------------------------------===//
// moe_ffn
//===----------------------------------------------------------------------===//
//
// k3_moe_ffn: k3_router then k3_moe_experts in one launch, one work queue.
// The first ceil(E / warps) tickets are router items: warp w of item i
// scores expert i · warps + w on x̂ (the block's staged input, which its
// gate/up items reuse); the last router item to finish (arrival counter)
// ranks the top k (rankTopK) into the router's outIds / outWeights, the
// buffers experts.ids / weights name, and raises a flag. The remaining
// tickets are moe_experts' items in its order: the shared expert's gate/up
// items need no routing and run beside it; routed gate/up items wait for
// the flag (an acquire). So no launch boundary separates routing from the
// experts, and the shared expert hides the routing latency. Deadlock-free
// for the queue's reason: an item only waits for items of lower tickets.
// Results: exactly router + moe_experts (same functions, same orders).
// Limits: both kernels' (E <= kRouterCap, topK <= kRouterMaxTopK); the
// router must read the experts' input with the same norm (h = x, normWeight,
// normEps, dim), as k3.moe_ffn binds them. Otherwise the output is NaN.
__device__ unsigned gFfnRouted;

// A timeline of moe_ffn for kernel_bench --trace: KernelTrace.cuh, kinds
// MoeTraceKind (MoeParams.h).

extern "C" __global__ void __launch_bounds__(1024)
    k3_moe_ffn(const MoeFfnParams p) {
  __shared__ float4 xs[kStageCap / 4];
  __shared__ float normParts[kNormParts];
  __shared__ MoeShape sh;
  __shared__ unsigned routerItemsShared;
  const RouterParams &rp = p.router;
  const MoeExpertsParams &ep = p.experts;
  const int warp = threadIdx.x >> 5;
  const int64_t E = rp.numExperts;
  unsigned routerItems = static_cast<unsigned>((E + (blockDim.x >> 5) - 1) /
                                               (blockDim.x >> 5));
  if (threadIdx.x == 0)
    routerItemsShared = routerItems;
  // Weights only before the wait: this block's likely first item's rows.
  dev::allowDependentLaunch();
  dev::prefetchL2Share(p.l2Prefetch);
  if (blockIdx.x < routerItems) {
    const int64_t e = int64_t(blockIdx.x) * (blockDim.x >> 5) + warp;
    if (e < E && E <= kRouterCap)
      prefetchL2Warp(rp.gate + e * rp.dim, 2 * rp.dim);
  } else if (blockIdx.x - routerItems < sharedGateUpItems(ep)) {
    prefetchShared(ep, blockIdx.x - routerItems);
  }
  if (ep.normWeight && threadIdx.x < 32)
    dev::prefetchWarp<kNormL1>(ep.normWeight, 2 * ep.dim);
  dev::waitForPriorGrids();
  // One stage serves the router's rows and the gate/up rows: both must read
  // the same x̂ (as k3.moe_ffn binds them).
  const bool sameInput = rp.h == ep.x && rp.normWeight == ep.normWeight &&
                         rp.normEps == ep.normEps && rp.dim == ep.dim;
  if (E > kRouterCap || rp.topK > kRouterMaxTopK || !sameInput ||
      !moeSetup(ep, sh)) {
    fillNaN(ep.out, ep.dim);
    return;
  }
  bool haveX = false;
  {
    K3C_TRACE_T0();
    K3C_TRACE(kTraceStart, 0u);
  }
  for (;;) {
    K3C_TRACE_T0();
    const unsigned ticket = nextItem(gMoeQueue, &sh.item);
    routerItems = routerItemsShared; // (re-read: fewer live registers)
    if (ticket >= routerItems + sh.items)
      break;
    if (ticket >= routerItems) {
      moeRunItem(ep, sh, ticket - routerItems, xs, normParts, haveX,
                 &gFfnRouted);
#ifdef K3C_KERNEL_TRACE
      const MoeItem it = decodeItem(sh, ticket - routerItems);
      K3C_TRACE(it.kind == MoeItem::GateUp ? kTraceGateUp
                : it.kind == MoeItem::Down ? kTraceDown
                                           : kTraceCombine,
                it.slot);
#endif
      continue;
    }
    // A router item: one expert row per warp. The first also asks L2 for
    // the bias, which the ranking block reads right after the scores (from
    // HBM otherwise: the weights streamed since the last step evicted it).
    if (ticket == 0 && rp.bias && threadIdx.x < 32)
      prefetchL2Warp(rp.bias, 4 * E);
    const int64_t e = int64_t(ticket) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (!haveX) {
      moeStageInput(ep, sh, xs, normParts);
      haveX = true;
    }
    K3C_TRACE(kTraceRouterStaged, 0u);
    if (e < rp.numExperts)
      scoreExpert(rp, e, sh.stageX, xs,
                  inputAct(ep.x, ep.normWeight, sh.normR));
    K3C_TRACE(kTraceRouterScored, 0u);
    // The last router item to finish sees every score.
    if (lastToArrive(&gRouterArrived, routerItems)) {
      K3C_TRACE(kTraceRouterArrived, 0u);
      rankTopK(rp, gRouterScores, reinterpret_cast<unsigned *>(xs));
      K3C_TRACE(kTraceRouterRanked, 0u);
      haveX = false; // the stage held the ranks
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence();
        addRelease(&gFfnRouted, 1u);
      }
    }
    K3C_TRACE(kTraceRouter, 0u);
  }
  if (leaveQueue(gMoeQueue, gMoeSlotDone, static_cast<int>(sh.slots)) &&
      threadIdx.x == 0)
    atomicExch(&gFfnRouted, 0u);
}

//===----------------------------------------------------------------------===//
// moe_ffn_rows
//===----------------------------------------------------------------------===//

namespace {

/// Counters of k3_moe_ffn_rows (gRowsCounters), zeroed by the last block
/// out; per union entry u, its finished gate/up items follow them.
enum RowsCounter : int {
  kRcScored = 0, ///< router items done
  kRcRanked,     ///< rank items arrived (lastToArrive resets it)
  kRcRouted,     ///< 1 once the union is built
  kRcSharedUp,   ///< the shared expert's gate/up items done
  kRcDown,       ///< down items done (shared and routed)
  kRcUnion,      ///< experts in the union (written with the union)
  kRcPairs,      ///< (row, rank) pairs of valid ids
  kRowsCounters
};

__device__ dev::WorkQueue gRowsQueue;
__device__ unsigned gRowsCounters[kRowsCounters + kMoeRowsPairCap];
/// Router scores, token t's at t · E.
__device__ float gRowsScores[kMoeRowsScoreCap];
/// Activations: the shared expert's of token t at t · sharedStride, then
/// routed pair p's at rows · sharedStride + p · aStride (bf16, 16 B rows).
__device__ __align__(16) uint16_t gRowsAct[kMoeRowsActCap];
/// Expert outputs (bf16 values as fp32): the shared expert's of token t at
/// t · dim, routed pair p's at (rows + p) · dim.
__device__ float gRowsY[kMoeRowsYCap];
/// The union: expert of entry u (ascending ids), its first pair (its
/// users in token order, then rank order; one past the last entry: the
/// pair count), each pair's token and each (token, rank)'s pair (-1: an id
/// outside [0, E), whose slot is NaN as in moe_ffn).
__device__ int32_t gRowsUnionExpert[kMoeRowsPairCap];
__device__ int32_t gRowsPairStart[kMoeRowsPairCap + 1];
__device__ int32_t gRowsPairRow[kMoeRowsPairCap];
__device__ int32_t gRowsPairOf[kMoeRowsPairCap];

/// Tokens of one rowDotsTokens pass (accumulators: kRowsPass · streams).
#ifdef K3C_TUNE_MOE_ROWS_PASS
constexpr int kRowsPass = K3C_TUNE_MOE_ROWS_PASS;
#else
constexpr int kRowsPass = 8;
#endif

/// `p` moved by t · stride bytes (null stays null).
template <class T>
__device__ __forceinline__ T *rowPtr(T *p, int t, int64_t stride) {
  return p ? reinterpret_cast<T *>(reinterpret_cast<char *>(
                                       const_cast<void *>(
                                           static_cast<const void *>(p))) +
                                   t * stride)
           : p;
}

/// rowDots for up to T tokens (n <= T, warp-uniform) at once: out[j][s] is
/// rowDots(w, rows, k, x_j)'s out[s] bit for bit — each stream's per-lane
/// sum runs over the same pieces in the same order, the MXFP4 scale path is
/// chosen over the same streams — with each weight piece loaded once for
/// all n tokens. xAt(j) is token j's bf16 vector (shared or global memory,
/// 16-byte aligned), formed where it is read (no pointer array held in
/// registers); its values are what rowDots' activation gives (x̂ is bf16).
/// (rowDots is not this with T = 1 on purpose: its unrolled loads are the
/// single-row kernels' measured form, and folding the two changes their
/// PTX; merge them with a GPU measurement.)
template <int NM, int NR, int T, class XAt>
__device__ __forceinline__ void
rowDotsTokens(const WeightRef (&w)[NM], const int64_t (&rows)[NR], int64_t k,
              XAt xAt, int n, float (&out)[T][NM * NR]) {
  constexpr int NS = NM * NR;
  const int lane = threadIdx.x & 31;
  prefetchHeads(w, rows, k);
  float acc[T][NS];
#pragma unroll
  for (int j = 0; j < T; ++j)
#pragma unroll
    for (int s = 0; s < NS; ++s)
      acc[j][s] = 0.0f;
  bool mx = k % 32 == 0, bf = k % 8 == 0;
#pragma unroll
  for (int m = 0; m < NM; ++m) {
    mx = mx && w[m].format == kWeightMxfp4 && aligned(w[m].packed, 8);
    bf = bf && w[m].format == kWeightBf16 && aligned(w[m].bf16, 16);
  }
  if (mx) {
    uint32_t off[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r)
      off[r] = static_cast<uint32_t>(rows[r] * (k / 32));
    const int pieces = static_cast<int>(k / 16);
    for (int p = lane; p < pieces; p += 32) {
      uint2 q[NS];
      uint32_t e[NS], eMax = 0;
#pragma unroll
      for (int s = 0; s < NS; ++s) {
        const WeightRef &ws = w[s % NM];
        const uint32_t o = off[s / NM];
        q[s] = ldStream8(ws.packed + 16 * int64_t(o) + 8 * p);
        e[s] = ldStreamU8(ws.scale + o + (p >> 1));
        eMax = max(eMax, e[s]);
      }
#pragma unroll
      for (int j = 0; j < T; ++j) {
        if (j >= n)
          break;
        const uint4 *xv = reinterpret_cast<const uint4 *>(xAt(j)) + 2 * p;
        float part[NS], v[8];
        dev::bf16x8ToF(xv[0], v);
#pragma unroll
        for (int s = 0; s < NS; ++s)
          part[s] = mxfp4Dot8(q[s].x, v, 0.0f);
        dev::bf16x8ToF(xv[1], v);
#pragma unroll
        for (int s = 0; s < NS; ++s)
          part[s] = mxfp4Dot8(q[s].y, v, part[s]);
        if (eMax <= dev::kE8m0FastMax) {
#pragma unroll
          for (int s = 0; s < NS; ++s)
            acc[j][s] = fmaf(part[s], dev::e8m0Times2p14(e[s]), acc[j][s]);
        } else {
#pragma unroll
          for (int s = 0; s < NS; ++s)
            acc[j][s] =
                fmaf(part[s] * 16384.0f, dev::e8m0ToF(e[s]), acc[j][s]);
        }
      }
    }
  } else if (bf) {
    const uint4 *wp[NS];
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
      for (int m = 0; m < NM; ++m)
        wp[r * NM + m] =
            reinterpret_cast<const uint4 *>(w[m].bf16 + rows[r] * k);
    const int pieces = static_cast<int>(k / 8);
    for (int c = lane; c < pieces; c += 32) {
      uint4 q[NS];
#pragma unroll
      for (int s = 0; s < NS; ++s)
        q[s] = ldStream16(wp[s] + c);
#pragma unroll
      for (int j = 0; j < T; ++j) {
        if (j >= n)
          break;
        float v[8];
        dev::bf16x8ToF(reinterpret_cast<const uint4 *>(xAt(j))[c], v);
#pragma unroll
        for (int s = 0; s < NS; ++s)
          acc[j][s] = bf16Dot8(q[s], v, acc[j][s]);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < T; ++j) {
      if (j >= n)
        break;
#pragma unroll
      for (int s = 0; s < NS; ++s)
#pragma unroll 1
        for (int64_t c = lane; c < k; c += 32)
          acc[j][s] = fmaf(dev::weightAt(w[s % NM], k, rows[s / NM], c),
                           dev::bf16ToF(xAt(j)[c]), acc[j][s]);
    }
  }
#pragma unroll
  for (int j = 0; j < T; ++j) {
    if (j >= n)
      break;
#pragma unroll
    for (int s = 0; s < NS; ++s)
      out[j][s] = dev::warpSum(acc[j][s]);
  }
}

/// The launch-wide numbers of a k3_moe_ffn_rows launch (shared memory).
struct RowsShape {
  int rows;               ///< tokens M
  unsigned router;        ///< router items R (tickets 0 .. R-1)
  unsigned guShared;      ///< the shared expert's gate/up items (after the
                          ///< M rank items)
  unsigned downPer;       ///< down items per expert
  unsigned guRouted;      ///< gate/up items per routed expert
  unsigned firstRouted;   ///< the first ticket that needs the union
  unsigned combinePerRow; ///< combine items per token
  unsigned unionSize;     ///< experts in the union, once routed
  unsigned items;         ///< all tickets, once routed
  unsigned item;          ///< the block's current ticket
  int routed;             ///< this block has read the union
  int64_t aStride, sharedStride;
};

/// Stages x̂ of every token (bf16, token t at xs + t · n) from x (token t
/// at x + t · stride bytes): x itself, or RMSNorm(x, normW) with each
/// token's factor summed in stageNormed's order (kMoeNormParts 8-column
/// chunk parts, then warp sums), so every x̂ value is the one moe_ffn
/// stages for that token. Needs n % 8 == 0 and 16-byte aligned x, stride
/// and normW; synchronises. (Not inlined, as the other item bodies here:
/// each gets its own register allocation.)
__device__ __noinline__ void stageRows(uint16_t *xs, float *parts,
                                       const uint16_t *x, int64_t stride,
                                       const uint16_t *normW, float eps,
                                       int64_t n, int M) {
  __shared__ float factor[kMoeRowsMax];
  const int chunks = static_cast<int>(n >> 3);
  uint4 *xv = reinterpret_cast<uint4 *>(xs);
  if (!normW) {
    for (int i = threadIdx.x; i < M * chunks; i += blockDim.x) {
      const int t = i / chunks, c = i - t * chunks;
      xv[i] = reinterpret_cast<const uint4 *>(rowPtr(x, t, stride))[c];
    }
    __syncthreads();
    return;
  }
  for (int i = threadIdx.x; i < M * kMoeNormParts; i += blockDim.x) {
    const int t = i / kMoeNormParts, v = i - t * kMoeNormParts;
    const uint4 *xt = reinterpret_cast<const uint4 *>(rowPtr(x, t, stride));
    float s = 0.0f;
    for (int c = v; c < chunks; c += kMoeNormParts) {
      const uint4 raw = xt[c];
      float o[8];
      dev::bf16x8ToF(raw, o);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        s = fmaf(o[j], o[j], s);
      xv[t * chunks + c] = raw;
    }
    parts[i] = s;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  for (int t = threadIdx.x >> 5; t < M; t += blockDim.x >> 5) {
    float s = 0.0f;
    for (int v = lane; v < kMoeNormParts; v += 32)
      s += parts[t * kMoeNormParts + v];
    s = dev::warpSum(s);
    if (lane == 0)
      factor[t] = 1.0f / sqrtf(s / static_cast<float>(n) + eps);
  }
  __syncthreads();
  const uint4 *wv = reinterpret_cast<const uint4 *>(normW);
  for (int i = threadIdx.x; i < M * chunks; i += blockDim.x) {
    const int t = i / chunks, c = i - t * chunks;
    const float r = factor[t];
    const uint4 wq = __ldg(wv + c);
    const uint32_t m[4] = {wq.x, wq.y, wq.z, wq.w};
    float o[8];
    dev::bf16x8ToF(xv[i], o);
    uint32_t packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = dev::rmsNormBf16(o[2 * j], loF(m[j]), r);
      const uint32_t hi = dev::rmsNormBf16(o[2 * j + 1], hiF(m[j]), r);
      packed[j] = (lo & 0xffffu) | (hi << 16);
    }
    xv[i] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
  __syncthreads();
}

/// The union of the tokens' experts, by the last rank item (every token's
/// ids written): ascending expert ids, each expert's pairs in token then
/// rank order; then the routed flag rises. `stage` holds E counts and the
/// M · topK ids (kMoeRowsRankWords words). Token t's ids are at idsRow0 +
/// t · stride bytes.
__device__ __noinline__ void buildUnion(const int32_t *idsRow0, int64_t stride,
                                        int64_t E, int K, int M,
                                        unsigned *stage) {
  const int n = M * K;
  unsigned *cnt = stage;
  int32_t *ids = reinterpret_cast<int32_t *>(stage + ((E + 3) & ~int64_t(3)));
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x)
    cnt[e] = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int t = i / K;
    // Through L2: written by other blocks' rank items.
    ids[i] = __ldcg(rowPtr(idsRow0, t, stride) + (i - t * K));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (ids[i] >= 0 && ids[i] < E)
      atomicAdd(&cnt[ids[i]], 1u);
  __syncthreads();
  // Warp 0 scans the counts: entry and first pair of each used expert;
  // cnt[e] becomes that first pair.
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    unsigned entries = 0, pairs = 0;
    for (int64_t base = 0; base < E; base += 32) {
      const int64_t e = base + lane;
      const unsigned c = e < E ? cnt[e] : 0u;
      const unsigned used = __ballot_sync(0xffffffffu, c > 0);
      unsigned incl = c;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const unsigned y = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d)
          incl += y;
      }
      const unsigned first = pairs + incl - c;
      if (c > 0) {
        const unsigned u = entries + __popc(used & ((1u << lane) - 1u));
        gRowsUnionExpert[u] = static_cast<int32_t>(e);
        gRowsPairStart[u] = static_cast<int32_t>(first);
        cnt[e] = first;
      }
      entries += __popc(used);
      pairs += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) {
      gRowsPairStart[entries] = static_cast<int32_t>(pairs);
      gRowsCounters[kRcUnion] = entries;
      gRowsCounters[kRcPairs] = pairs;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t id = ids[i];
    int32_t pair = -1;
    if (id >= 0 && id < E) {
      int32_t before = 0;
      for (int j = 0; j < i; ++j)
        before += ids[j] == id;
      pair = static_cast<int32_t>(cnt[id]) + before;
      gRowsPairRow[pair] = i / K;
    }
    gRowsPairOf[i] = pair;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    addRelease(&gRowsCounters[kRcRouted], 1u);
  }
}

/// The gated activation's constants (moe_experts' fields).
struct ActArgs {
  int32_t activation;
  float beta1;
  int32_t hasBeta2;
  float beta2;
};

/// Gate/up rows i0, i0 + 1 (this warp's) of an expert (W1, W3: I rows of
/// D columns) for `n` tokens: token j's x̂ is `xs` row pairRow[j] (token j
/// when pairRow is null), its activations a go to dst + j · dstStride + i0.
__device__ __noinline__ void rowsGateUp(WeightRef w1, WeightRef w3, int64_t I,
                                        int64_t D, int64_t i0,
                                        const uint16_t *xs,
                                        const int32_t *pairRow, int n,
                                        uint16_t *dst, int64_t dstStride,
                                        ActArgs act) {
  const int lane = threadIdx.x & 31;
  const WeightRef w13[2] = {w1, w3};
  const int64_t rows[2] = {min(i0, I - 1), min(i0 + 1, I - 1)};
  for (int j0 = 0; j0 < n; j0 += kRowsPass) {
    const int m = min(kRowsPass, n - j0);
    int row[kRowsPass]; // the pass's tokens' stage offsets
#pragma unroll
    for (int j = 0; j < kRowsPass; ++j) {
      const int jj = j0 + min(j, m - 1);
      row[j] = (pairRow ? __ldcg(pairRow + jj) : jj) * static_cast<int>(D);
    }
    float d[kRowsPass][4];
    rowDotsTokens<2, 2, kRowsPass>(
        w13, rows, D, [&](int j) { return xs + row[j]; }, m, d);
    if (lane < 2 && i0 + lane < I) {
#pragma unroll
      for (int j = 0; j < kRowsPass; ++j) {
        if (j >= m)
          break;
        const float g = dev::roundBf16(lane ? d[j][2] : d[j][0]);
        const float u = dev::roundBf16(lane ? d[j][3] : d[j][1]);
        dst[int64_t(j0 + j) * dstStride + i0 + lane] = dev::fToBf16(
            dev::gatedActF(act.activation, act.beta1, act.hasBeta2, act.beta2,
                           g, u));
      }
    }
  }
}

/// Down rows r0 .. r0 + kDownRows - 1 (this warp's) of W2 (D rows of I
/// columns) for `n` tokens: token j's activations at a + j · aStride,
/// y = R(W2 a) to y + j · yStride + r0.
__device__ __noinline__ void rowsDown(WeightRef w2, int64_t D, int64_t I,
                                      int64_t r0, int n, const uint16_t *a,
                                      int64_t aStride, float *y,
                                      int64_t yStride) {
  const int lane = threadIdx.x & 31;
  const WeightRef w[1] = {w2};
  int64_t rows[kDownRows];
#pragma unroll
  for (int r = 0; r < kDownRows; ++r)
    rows[r] = min(r0 + r, D - 1);
  for (int j0 = 0; j0 < n; j0 += kRowsPass) {
    const int m = min(kRowsPass, n - j0);
    const uint16_t *a0 = a + int64_t(j0) * aStride;
    float d[kRowsPass][kDownRows];
    rowDotsTokens<1, kDownRows, kRowsPass>(
        w, rows, I, [&](int j) { return a0 + j * aStride; }, m, d);
    if (lane < kDownRows && r0 + lane < D) {
#pragma unroll
      for (int j = 0; j < kRowsPass; ++j) {
        if (j >= m)
          break;
        float v = d[j][0];
#pragma unroll
        for (int r = 1; r < kDownRows; ++r)
          v = lane == r ? d[j][r] : v;
        y[int64_t(j0 + j) * yStride + r0 + lane] = dev::roundBf16(v);
      }
    }
  }
}

/// Router scores of expert e (gate row e, D columns) against all M staged
/// tokens, into gRowsScores (token t's at t · E).
__device__ __noinline__ void rowsScore(const uint16_t *gate, int64_t e,
                                       int64_t D, int64_t E,
                                       const uint16_t *xs, int M) {
  WeightRef g[1];
  g[0].format = kWeightBf16;
  g[0].bf16 = gate;
  const int64_t rows[1] = {e};
  float d[kMoeRowsMax][1];
  rowDotsTokens<1, 1, kMoeRowsMax>(
      g, rows, D, [&](int j) { return xs + j * static_cast<int>(D); }, M, d);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int j = 0; j < kMoeRowsMax; ++j)
      if (j < M)
        gRowsScores[int64_t(j) * E + e] = dev::sigmoidF(d[j][0]);
  }
}

} // namespace

// k3_moe_ffn_rows: k3_moe_ffn for M tokens (MoeFfnRowsParams) in one launch
// over the union of the experts they choose; every token's ids, weights and
// output are the single-row kernel's bit for bit (same dot products, lanes
// and orders; same ranking and combine code). One work queue, tickets in
// this order:
//  * router items (ceil(E / warps)): each block stages every token's x̂ once
//    (bf16, dynamic shared memory; stageRows); warp w of item i scores
//    expert i · warps + w against all M tokens (the gate row read once);
//  * M rank items: token t's top k (rankTopK, on its scores) into its
//    outIds / outWeights once every router item is counted; the last to
//    arrive builds the union (buildUnion) and raises the routed flag;
//  * the shared expert's gate/up items (2 · warps rows for all M tokens)
//    and down items (kDownRows · warps rows), which need no routing;
//  * then, once the routed flag is up (the count is known only then): per
//    union entry its gate/up items (for the tokens that chose the expert),
//    its down items, and M · ceil(dim / block) combine items, each token's
//    slots summed in its own rank order (moe_ffn's combine).
// A ticket past the last item ends the block. Deadlock-free for the queue's
// reason: every wait is on items of lower tickets. Any grid; blocks of at
// most 256 threads; dynamic shared memory moeFfnRowsSmemBytes.
// Limits: moeFfnRowsFit, x / normWeight / stride 16-byte aligned, and
// moe_ffn's (the router reads the experts' input); else every token's
// output is NaN.
extern "C" __global__ void __launch_bounds__(256, 2)
    k3_moe_ffn_rows(const MoeFfnRowsParams p) {
  extern __shared__ __align__(16) unsigned char rowsSmem[];
  __shared__ RowsShape sh;
  const RouterParams &rp = p.one.router;
  const MoeExpertsParams &ep = p.one.experts;
  const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t E = rp.numExperts, D = ep.dim;
  const int M = p.rows;
  uint16_t *xs = reinterpret_cast<uint16_t *>(rowsSmem);
  float *parts = reinterpret_cast<float *>(rowsSmem + int64_t(M) * D * 2);
  dev::allowDependentLaunch();
  dev::prefetchL2Share(p.one.l2Prefetch);
  if (int64_t e = int64_t(blockIdx.x) * warps + warp;
      e < E && E <= kRouterCap && D <= kMoeRowsDimCap)
    prefetchL2Warp(rp.gate + e * rp.dim, 2 * rp.dim);
  dev::waitForPriorGrids();
  const bool sameInput = rp.h == ep.x && rp.normWeight == ep.normWeight &&
                         rp.normEps == ep.normEps && rp.dim == ep.dim;
  if (!moeFfnRowsFit(p.one, M) || !sameInput || p.stride % 16 != 0 ||
      !aligned(ep.x, 16) || (ep.normWeight && !aligned(ep.normWeight, 16))) {
    for (int t = 0; t < M && t < kMoeRowsMax; ++t)
      fillNaN(rowPtr(ep.out, t, p.stride), D);
    return;
  }
  if (threadIdx.x == 0) {
    sh.rows = M;
    sh.router = static_cast<unsigned>((E + warps - 1) / warps);
    const int64_t guRows = 2 * warps, downRows = kDownRows * warps;
    sh.guShared = ep.sharedInterDim > 0
                      ? static_cast<unsigned>(
                            (ep.sharedInterDim + guRows - 1) / guRows)
                      : 0u;
    sh.downPer = static_cast<unsigned>((D + downRows - 1) / downRows);
    sh.guRouted = static_cast<unsigned>((ep.interDim + guRows - 1) / guRows);
    sh.firstRouted = sh.router + M + sh.guShared +
                     (ep.sharedInterDim > 0 ? sh.downPer : 0u);
    sh.combinePerRow = static_cast<unsigned>((D + blockDim.x - 1) / blockDim.x);
    sh.unionSize = 0;
    sh.items = 0;
    sh.routed = 0;
    sh.aStride = (ep.interDim + 7) & ~int64_t(7);
    sh.sharedStride = (ep.sharedInterDim + 7) & ~int64_t(7);
  }
  const ActArgs act{ep.activation, ep.beta1, ep.hasBeta2, ep.beta2};
  bool haveX = false;
  for (;;) {
    const unsigned t = nextItem(gRowsQueue, &sh.item);
    if (t >= sh.firstRouted) {
      if (!sh.routed) {
        // (Thread 0 waits; the barrier in awaitCount publishes.)
        awaitCount(&gRowsCounters[kRcRouted], 1u);
        if (threadIdx.x == 0) {
          const unsigned u = __ldcg(&gRowsCounters[kRcUnion]);
          sh.unionSize = u;
          sh.items = sh.firstRouted + u * (sh.guRouted + sh.downPer) +
                     static_cast<unsigned>(M) * sh.combinePerRow;
          sh.routed = 1;
        }
        __syncthreads();
      }
      if (t >= sh.items)
        break;
    }
    if (t < sh.router) {
      // Router item: one expert per warp against every token.
      if (!haveX) {
        stageRows(xs, parts, ep.x, p.stride, ep.normWeight, ep.normEps, D, M);
        haveX = true;
      }
      const int64_t e = int64_t(t) * warps + warp;
      if (e < E)
        rowsScore(rp.gate, e, D, E, xs, M);
      finishItem(&gRowsCounters[kRcScored]);
      continue;
    }
    if (t < sh.router + M) {
      // Rank item: token t - R's top k; the last one builds the union.
      const int row = static_cast<int>(t - sh.router);
      awaitCount(&gRowsCounters[kRcScored], sh.router);
      RouterParams r = rp;
      r.outIds = rowPtr(rp.outIds, row, p.stride);
      r.outWeights = rowPtr(rp.outWeights, row, p.stride);
      rankTopK(r, gRowsScores + int64_t(row) * E,
               reinterpret_cast<unsigned *>(rowsSmem));
      haveX = false; // the stage held the ranks
      if (lastToArrive(&gRowsCounters[kRcRanked], static_cast<unsigned>(M)))
        buildUnion(ep.ids, p.stride, E, ep.topK, M,
                   reinterpret_cast<unsigned *>(rowsSmem));
      continue;
    }
    unsigned i = t - sh.router - M;
    if (i < sh.guShared) {
      // The shared expert's gate/up rows for every token.
      if (!haveX) {
        stageRows(xs, parts, ep.x, p.stride, ep.normWeight, ep.normEps, D, M);
        haveX = true;
      }
      const int64_t i0 = int64_t(i) * (2 * warps) + 2 * warp;
      rowsGateUp(ep.sharedW1, ep.sharedW3, ep.sharedInterDim, D, i0, xs,
                 nullptr, M, gRowsAct, sh.sharedStride, act);
      finishItem(&gRowsCounters[kRcSharedUp]);
      continue;
    }
    i -= sh.guShared;
    if (t < sh.firstRouted) {
      // The shared expert's down rows for every token.
      awaitCount(&gRowsCounters[kRcSharedUp], sh.guShared);
      const int64_t r0 = int64_t(i) * (kDownRows * warps) + kDownRows * warp;
      rowsDown(ep.sharedW2, D, ep.sharedInterDim, r0, M, gRowsAct,
               sh.sharedStride, gRowsY, D);
      finishItem(&gRowsCounters[kRcDown]);
      continue;
    }
    i = t - sh.firstRouted;
    const unsigned U = sh.unionSize;
    const int64_t actBase = int64_t(M) * sh.sharedStride;
    const int64_t as = sh.aStride;
    if (i < U * sh.guRouted) {
      // A union expert's gate/up rows for the tokens that chose it.
      if (!haveX) {
        stageRows(xs, parts, ep.x, p.stride, ep.normWeight, ep.normEps, D, M);
        haveX = true;
      }
      const unsigned u = i / sh.guRouted;
      const int e = __ldcg(&gRowsUnionExpert[u]);
      const int first = __ldcg(&gRowsPairStart[u]);
      const int n = __ldcg(&gRowsPairStart[u + 1]) - first;
      const int64_t i0 =
          int64_t(i - u * sh.guRouted) * (2 * warps) + 2 * warp;
      rowsGateUp(ep.w1[e], ep.w3[e], ep.interDim, D, i0, xs,
                 gRowsPairRow + first, n,
                 gRowsAct + actBase + int64_t(first) * as, as, act);
      finishItem(&gRowsCounters[kRowsCounters + u]);
      continue;
    }
    i -= U * sh.guRouted;
    if (i < U * sh.downPer) {
      // A union expert's down rows for the tokens that chose it.
      const unsigned u = i / sh.downPer;
      awaitCount(&gRowsCounters[kRowsCounters + u], sh.guRouted);
      const int e = __ldcg(&gRowsUnionExpert[u]);
      const int first = __ldcg(&gRowsPairStart[u]);
      const int n = __ldcg(&gRowsPairStart[u + 1]) - first;
      const int64_t r0 = int64_t(i - u * sh.downPer) * (kDownRows * warps) +
                         kDownRows * warp;
      rowsDown(ep.w2[e], D, ep.interDim, r0, n,
               gRowsAct + actBase + int64_t(first) * as, as,
               gRowsY + int64_t(M + first) * D, D);
      finishItem(&gRowsCounters[kRcDown]);
      continue;
    }
    i -= U * sh.downPer;
    {
      // Combine: token `row`'s slots in its rank order (moe_ffn's sum).
      const bool shared = ep.sharedInterDim > 0;
      awaitCount(&gRowsCounters[kRcDown],
                 U * sh.downPer + (shared ? sh.downPer : 0u));
      const int row = static_cast<int>(i / sh.combinePerRow);
      const int64_t j =
          int64_t(i - row * sh.combinePerRow) * blockDim.x + threadIdx.x;
      if (j < D) {
        const float *w = rowPtr(ep.weights, row, p.stride);
        const int K = ep.topK;
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
          const int pair = __ldcg(&gRowsPairOf[row * K + k]);
          const float y = pair >= 0
                              ? __ldcg(&gRowsY[int64_t(M + pair) * D + j])
                              : __int_as_float(0x7fc00000);
          acc = __fadd_rn(acc, __fmul_rn(__ldcg(w + k), y));
        }
        float v = dev::roundBf16(acc);
        if (shared)
          v = dev::roundBf16(__fadd_rn(v, __ldcg(&gRowsY[int64_t(row) * D + j])));
        if (const uint16_t *res = rowPtr(ep.residual, row, p.stride))
          v = __fadd_rn(v, dev::bf16ToF(res[j]));
        rowPtr(ep.out, row, p.stride)[j] = dev::fToBf16(v);
      }
    }
  }
  leaveQueue(gRowsQueue, gRowsCounters,
             kRowsCounters + static_cast<int>(sh.unionSize));
}

//===----------------------------------------------------------------------===//
// The MoE of a prompt chunk on the tensor cores (MoeChunkParams)
//===----------------------------------------------------------------------===//
namespace {

/// `p` moved by t · stride bytes (null stays null).
template <class T>
__device__ __forceinline__ T *chunkRow(T *p, int t, int64_t stride) {
  return p ? reinterpret_cast<T *>(reinterpret_cast<uintptr_t>(p) +
                                   static_cast<uintptr_t>(t * stride))
           : p;
}

/// Whether (rank a, expert ia) ranks before (b, ib) as routerCpu ranks:
/// the larger rank, a number before NaN, then the lower expert.
__device__ __forceinline__ bool ranksBefore(float a, int ia, float b, int ib) {
  if (ib < 0)
    return ia >= 0;
  if (ia < 0)
    return false;
  const bool an = a != a, bn = b != b;
  if (an != bn)
    return bn;
  if (!an && a != b)
    return a > b;
  return ia < ib;
}

/// A block of the expert GEMMs: its expert (blockIdx.y; numExperts: the
/// shared expert) and the places [first, first + n) of its token tile
/// (blockIdx.z); n <= 0 when the tile holds none.
struct ChunkTile {
  bool shared;
  int64_t e;
  int first, n;
};

template <int Tokens = kMmaTileTokens>
__device__ __forceinline__ ChunkTile chunkTile(const MoeChunkParams &c) {
  ChunkTile t;
  t.e = blockIdx.y;
  t.shared = t.e == c.one.experts.numExperts;
  const int z0 = static_cast<int>(blockIdx.z) * Tokens;
  if (t.shared) {
    t.first = z0;
    t.n = min(Tokens, c.rows - z0);
  } else {
    const int a = c.offsets[t.e], b = c.offsets[t.e + 1];
    t.first = a + z0;
    t.n = min(Tokens, b - t.first);
  }
  return t;
}

} // namespace

/// k3_moe_chunk_route: block t routes row t (< rows) of a prompt chunk:
/// x̂ = RMSNorm(h) rounded as rms_norm (or h), into c.xhat; s = sigmoid(gate
/// · x̂) a warp per expert; the top-k of s + bias in routerCpu's order
/// (warp 0, one rank at a time); the weights (unbiased s, renormalised in
/// rank order, scaled) into the row's outIds / outWeights. With a grid
/// of G > 1 blocks per row (grid y), blocks (t, g) share row t: each computes x̂
/// (block 0 stores it) and the scores of the g-th G-th of the experts into
/// c.scores, and the last of the G to arrive (c.arrivals[t], which it
/// resets) ranks all of them: the same scores (an expert's sum is one
/// warp's in either form), so the same ids and weights. Grid: (rows, G)
/// blocks of 256 threads (the runtime's G: K3C_MOE_CHUNK_ROUTE_GROUPS,
/// default 8). Limits: moeChunkFits.
extern "C" __global__ void __launch_bounds__(256)
    k3_moe_chunk_route(const MoeChunkParams c) {
  __shared__ __align__(16) uint16_t xs[kMoeRowsDimCap];
  __shared__ float score[kMoeChunkMaxExperts];
  __shared__ unsigned char taken[kMoeChunkMaxExperts];
  __shared__ float scratch[32];
  __shared__ int ranks;
  dev::allowDependentLaunch();
  dev::waitForPriorGrids();
  const int t = blockIdx.x;
  if (t >= c.rows)
    return;
  const RouterParams &rp = c.one.router;
  const int64_t D = rp.dim, E = rp.numExperts;
  const int K = rp.topK;
  const int G = static_cast<int>(gridDim.y);
  const int g = static_cast<int>(blockIdx.y);
  const int64_t per = (E + G - 1) / G;
  const int64_t eBegin = min(E, g * per), eEnd = min(E, eBegin + per);
  const uint16_t *h = chunkRow(rp.h, t, c.stride);
  float r = 0.0f;
  if (rp.normWeight) {
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
      const float v = dev::bf16ToF(h[i]);
      sq = fmaf(v, v, sq);
    }
    sq = dev::blockSum(sq, scratch);
    r = 1.0f / sqrtf(sq / static_cast<float>(D) + rp.normEps);
  }
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const uint16_t v =
        rp.normWeight
            ? static_cast<uint16_t>(dev::rmsNormBf16(
                  dev::bf16ToF(h[i]), dev::bf16ToF(rp.normWeight[i]), r))
            : h[i];
    xs[i] = v;
    if (g == 0)
      c.xhat[t * D + i] = v;
  }
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x)
    taken[e] = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t e = eBegin + warp; e < eEnd; e += blockDim.x >> 5) {
    const uint4 *gw = reinterpret_cast<const uint4 *>(rp.gate + e * D);
    const uint4 *x = reinterpret_cast<const uint4 *>(xs);
    float acc = 0.0f;
    for (int64_t j = lane; j < D / 8; j += 32) {
      const uint4 a = __ldg(gw + j), b = x[j];
      acc = dev::dotBf16x8(a, b, acc);
    }
    acc = dev::warpSum(acc);
    if (lane == 0) {
      score[e] = dev::sigmoidF(acc);
      if (G > 1) {
        c.scores[t * E + e] = score[e];
        __threadfence(); // before this block's arrival is counted
      }
    }
  }
  if (G > 1) {
    __syncthreads(); // every score of the block stored and fenced
    if (threadIdx.x == 0)
      ranks = atomicAdd(&c.arrivals[t], 1u) == static_cast<unsigned>(G - 1);
    __syncthreads();
    if (!ranks)
      return;
    // The last block of row t: every group's scores are visible.
    __threadfence();
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x)
      score[e] = __ldcg(&c.scores[t * E + e]);
    if (threadIdx.x == 0)
      c.arrivals[t] = 0; // for the next launch
  }
  __syncthreads();
  if (warp != 0)
    return;
  int32_t *ids = chunkRow(rp.outIds, t, c.stride);
  float *weights = chunkRow(rp.outWeights, t, c.stride);
  float sum = 0.0f;
  for (int k = 0; k < K; ++k) {
    int best = -1;
    float bestRank = 0.0f;
    if (rp.forceExpert >= 0) {
      best = rp.forceExpert;
    } else {
      for (int64_t e = lane; e < E; e += 32) {
        if (taken[e])
          continue;
        const float rk = score[e] + (rp.bias ? rp.bias[e] : 0.0f);
        if (ranksBefore(rk, static_cast<int>(e), bestRank, best))
          best = static_cast<int>(e), bestRank = rk;
      }
      for (int off = 16; off > 0; off >>= 1) {
        const int ob = __shfl_xor_sync(0xffffffffu, best, off);
        const float orr = __shfl_xor_sync(0xffffffffu, bestRank, off);
        if (ranksBefore(orr, ob, bestRank, best))
          best = ob, bestRank = orr;
      }
    }
    if (lane == 0) {
      taken[best] = 1;
      ids[k] = best;
      weights[k] = score[best];
    }
    sum += score[best];
    __syncwarp();
  }
  if (lane == 0) {
    const float denom = rp.renormalize ? sum + 1e-20f : 1.0f;
    for (int k = 0; k < K; ++k) {
      float w = weights[k];
      if (rp.renormalize)
        w = w / denom;
      weights[k] = w * rp.scaling;
    }
  }
}

namespace {

/// Experts per pass of the parallel plan's row bitmaps (kernels/moe
/// k3_moe_chunk_plan), and 32-row words per expert.
constexpr int kPlanPassExperts = 256;
constexpr int kPlanRowWords = kMoeChunkRowsMax / 32;
static_assert(kMoeChunkMaxExperts < 65536, "expert ids fit 16 bits");

/// The serial walk's places (one thread): pair p (t · topK + k, in order)
/// at its expert's next place, count[e] the expert's first place on entry;
/// expertOf(p) gives the pair's expert.
template <class ExpertOf>
__device__ void placePairsInOrder(const MoeChunkParams &c, int *count,
                                  const ExpertOf &expertOf) {
  const int pairs = c.rows * c.one.experts.topK;
  for (int p = 0; p < pairs; ++p) {
    const int place = count[expertOf(p)]++;
    c.order[place] = p;
    c.pairAt[p] = place;
  }
}

/// The parallel plan (c.parallelPlan): each pair's expert into sid and
/// counted (shared atomics); the counts' exclusive sums by the block (each
/// thread a run of consecutive experts) into c.offsets and `count`; then,
/// a pass of kPlanPassExperts experts at a time, a bitmap of the rows that
/// chose each expert, and pair (t, k) of expert e at count[e] plus the
/// rows before t in e's bitmap: the serial walk's place when no row names
/// an expert twice (the router's top-k never does). A row that does (a
/// forced expert) makes thread 0 place the pairs as the walk does.
__device__ void moeChunkPlanParallel(const MoeChunkParams &c, int *count) {
  __shared__ uint16_t sid[kMoeChunkRowsMax * 32];
  __shared__ uint32_t member[kPlanPassExperts][kPlanRowWords];
  __shared__ int warpSums[32];
  __shared__ int twice;
  const MoeExpertsParams &ep = c.one.experts;
  const int E = static_cast<int>(ep.numExperts);
  const int K = ep.topK;
  const int pairs = c.rows * K;
  if (threadIdx.x == 0)
    twice = 0;
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int t = p / K;
    const int e = chunkRow(ep.ids, t, c.stride)[p - t * K];
    sid[p] = static_cast<uint16_t>(e);
    atomicAdd(&count[e], 1);
  }
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int first = p / K * K;
    for (int q = first; q < p; ++q)
      if (sid[q] == sid[p])
        twice = 1; // every writer writes 1
  }
  // The offsets: this thread's run of experts [e0, e1).
  const int per = (E + static_cast<int>(blockDim.x) - 1) / blockDim.x;
  const int e0 = min(E, static_cast<int>(threadIdx.x) * per);
  const int e1 = min(E, e0 + per);
  int run = 0;
  for (int e = e0; e < e1; ++e)
    run += count[e];
  int total = 0;
  int at = dev::blockExclusiveSum(run, warpSums, total);
  for (int e = e0; e < e1; ++e) {
    const int n = count[e];
    c.offsets[e] = at;
    count[e] = at;
    at += n;
  }
  if (threadIdx.x == 0)
    c.offsets[E] = total;
  __syncthreads(); // count holds the offsets; `twice` is final
  if (twice) {
    if (threadIdx.x == 0)
      placePairsInOrder(c, count, [&](int p) { return sid[p]; });
    return;
  }
  for (int base = 0; base < E; base += kPlanPassExperts) {
    for (int i = threadIdx.x; i < kPlanPassExperts * kPlanRowWords;
         i += blockDim.x)
      member[i / kPlanRowWords][i % kPlanRowWords] = 0u;
    __syncthreads();
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
      const int e = sid[p] - base, t = p / K;
      if (e >= 0 && e < kPlanPassExperts)
        atomicOr(&member[e][t >> 5], 1u << (t & 31));
    }
    __syncthreads();
    for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
      const int e = sid[p] - base, t = p / K;
      if (e < 0 || e >= kPlanPassExperts)
        continue;
      const uint32_t *m = member[e];
      int before = __popc(m[t >> 5] & ((1u << (t & 31)) - 1u));
      for (int w = 0; w < (t >> 5); ++w)
        before += __popc(m[w]);
      const int place = count[base + e] + before;
      c.order[place] = p;
      c.pairAt[p] = place;
    }
    __syncthreads(); // the next pass clears the bitmaps
  }
}

} // namespace

/// k3_moe_chunk_plan: the places of the chunk's (row, rank) pairs, each
/// expert's pairs together in row order: offsets (exclusive sums of the
/// counts), order (the pair at each place) and pairAt (its inverse), as
/// moeChunkPlanCpu. One block of 256 threads; c.parallelPlan 0: thread 0
/// walks the pairs (rows · topK <= 8192); 1: moeChunkPlanParallel, the same
/// places.
extern "C" __global__ void __launch_bounds__(256)
    k3_moe_chunk_plan(const MoeChunkParams c) {
  __shared__ int count[kMoeChunkMaxExperts + 1];
  dev::allowDependentLaunch();
  dev::waitForPriorGrids();
  const MoeExpertsParams &ep = c.one.experts;
  const int64_t E = ep.numExperts;
  const int K = ep.topK;
  for (int64_t e = threadIdx.x; e <= E; e += blockDim.x)
    count[e] = 0;
  __syncthreads();
  if (c.parallelPlan) {
    moeChunkPlanParallel(c, count);
    return;
  }
  if (threadIdx.x != 0)
    return;
  for (int t = 0; t < c.rows; ++t) {
    const int32_t *ids = chunkRow(ep.ids, t, c.stride);
    for (int k = 0; k < K; ++k)
      ++count[ids[k]];
  }
  int at = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int n = count[e];
    c.offsets[e] = at;
    count[e] = at;
    at += n;
  }
  c.offsets[E] = at;
  placePairsInOrder(c, count, [&](int p) {
    const int t = p / K;
    return chunkRow(ep.ids, t, c.stride)[p - t * K];
  });
}

/// The body of k3_moe_chunk_gate_up on tiles of Tokens tokens: block (x, y,
/// z) computes columns 32x .. 32x + 31 of a = R(act(R(W1 x̂), R(W3 x̂))) of
/// expert y (numExperts: the shared expert, over every row) for token tile z
/// of its pairs: a tile of the 32 W1 rows and the 32 W3 rows on the tensor
/// cores, R(g) and R(u) met in shared memory.
template <int Tokens>
__device__ void moeChunkGateUp(const MoeChunkParams &c, uint4 *smem) {
  dev::allowDependentLaunch();
  dev::waitForPriorGrids();
  const MoeExpertsParams &ep = c.one.experts;
  const ChunkTile tile = chunkTile<Tokens>(c);
  const int64_t I = tile.shared ? ep.sharedInterDim : ep.interDim;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kMoeChunkInterTile;
  if (tile.n <= 0 || j0 >= I)
    return;
  const int64_t D = ep.dim;
  const uint16_t *w1 = tile.shared ? ep.sharedW1.bf16 : ep.w1[tile.e].bf16;
  const uint16_t *w3 = tile.shared ? ep.sharedW3.bf16 : ep.w3[tile.e].bf16;
  auto wrow = [&](int64_t r) {
    return r < kMoeChunkInterTile ? w1 + (j0 + r) * D
                                  : w3 + (j0 + r - kMoeChunkInterTile) * D;
  };
  const int K = ep.topK;
  auto trow = [&](int i) {
    const int row = tile.shared ? tile.first + i : c.order[tile.first + i] / K;
    return c.xhat + row * D;
  };
  dev::MmaAccOf<Tokens> acc;
  dev::mmaTileSums<false, Tokens>(
      wrow, 0, kMmaTileRows, trow, tile.n, D, [](uint4 &, int, int64_t) {},
      [] {}, smem, acc);
  __syncthreads();
  // R(g) and R(u) of the tile's tokens meet in shared memory.
  float *gu = reinterpret_cast<float *>(smem); // [token][64]
  dev::mmaTileForEach<Tokens>(acc, tile.n, [&](int tok, int r, float v) {
    gu[tok * kMmaTileRows + r] = dev::roundBf16(v);
  });
  __syncthreads();
  for (int i = threadIdx.x; i < tile.n * kMoeChunkInterTile; i += blockDim.x) {
    const int tok = i / kMoeChunkInterTile, j = i % kMoeChunkInterTile;
    const float g = gu[tok * kMmaTileRows + j];
    const float u = gu[tok * kMmaTileRows + kMoeChunkInterTile + j];
    const float a =
        dev::gatedActF(ep.activation, ep.beta1, ep.hasBeta2, ep.beta2, g, u);
    uint16_t *out = tile.shared ? c.sharedAct + (tile.first + tok) * I
                                : c.act + (tile.first + tok) * I;
    out[j0 + j] = dev::fToBf16(a);
  }
}

/// The body of k3_moe_chunk_down on tiles of Tokens tokens: block (x, y, z)
/// computes y = R(W2 a) rows 64x .. 64x + 63 of expert y (numExperts: the
/// shared expert) for token tile z of its pairs, on the tensor cores.
template <int Tokens>
__device__ void moeChunkDown(const MoeChunkParams &c, uint4 *smem) {
  dev::allowDependentLaunch();
  dev::waitForPriorGrids();
  const MoeExpertsParams &ep = c.one.experts;
  const ChunkTile tile = chunkTile<Tokens>(c);
  const int64_t D = ep.dim;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kMmaTileRows;
  if (tile.n <= 0 || n0 >= D)
    return;
  const int64_t I = tile.shared ? ep.sharedInterDim : ep.interDim;
  const uint16_t *w2 = tile.shared ? ep.sharedW2.bf16 : ep.w2[tile.e].bf16;
  const uint16_t *a = tile.shared ? c.sharedAct : c.act;
  auto wrow = [&](int64_t r) { return w2 + r * I; };
  auto trow = [&](int i) { return a + (tile.first + i) * I; };
  dev::MmaAccOf<Tokens> acc;
  dev::mmaTileSums<false, Tokens>(
      wrow, n0, D, trow, tile.n, I, [](uint4 &, int, int64_t) {}, [] {}, smem,
      acc);
  uint16_t *y = tile.shared ? c.sharedY : c.y;
  dev::mmaTileForEach<Tokens>(acc, tile.n, [&](int tok, int r, float v) {
    if (n0 + r < D)
      y[(tile.first + tok) * D + n0 + r] = dev::fToBf16(v);
  });
}

/// k3_moe_chunk_gate_up: moeChunkGateUp on tiles of kMmaTileTokens. Grid:
/// (max(interDim, sharedInterDim) / 32, numExperts + (shared ? 1 : 0),
/// ceil(rows / kMmaTileTokens)), kMmaTileThreads threads,
/// kMmaTileSmemBytes. Limits: moeChunkFits, bf16 weights.
extern "C" __global__ void __launch_bounds__(kMmaTileThreads)
    k3_moe_chunk_gate_up(const MoeChunkParams c) {
  extern __shared__ uint4 smem[];
  moeChunkGateUp<kMmaTileTokens>(c, smem);
}

/// k3_moe_chunk_down: moeChunkDown on tiles of kMmaTileTokens. Grid:
/// (ceil(dim / kMmaTileRows), as gate_up's y and z), kMmaTileThreads
/// threads, kMmaTileSmemBytes.
extern "C" __global__ void __launch_bounds__(kMmaTileThreads)
    k3_moe_chunk_down(const MoeChunkParams c) {
  extern __shared__ uint4 smem[];
  moeChunkDown<kMmaTileTokens>(c, smem);
}

/// k3_moe_chunk_gate_up_narrow / k3_moe_chunk_down_narrow: the same on
/// tiles of kMmaNarrowTokens (grid z: ceil(rows / kMmaNarrowTokens),
/// kMmaNarrowSmemBytes): for chunks of few rows (a decode batch, where an
/// expert serves one or two of them), a stage of the tokens' tile is a
/// quarter of the wide one's, so more blocks an SM stream weights. Each
/// token's sums are the wide tile's bits (its 16-token tile's mma order is
/// the same).
extern "C" __global__ void __launch_bounds__(kMmaTileThreads)
    k3_moe_chunk_gate_up_narrow(const MoeChunkParams c) {
  extern __shared__ uint4 smem[];
  moeChunkGateUp<kMmaNarrowTokens>(c, smem);
}
extern "C" __global__ void __launch_bounds__(kMmaTileThreads)
    k3_moe_chunk_down_narrow(const MoeChunkParams c) {
  extern __shared__ uint4 smem[];
  moeChunkDown<kMmaNarrowTokens>(c, smem);
}

/// k3_moe_chunk_combine: row t's output, as moe_experts' epilogue: r =
/// R(Σ_k w_k · y_k) in rank order, R(r + shared), R(r + residual). Grid:
/// rows blocks (any block size).
extern "C" __global__ void k3_moe_chunk_combine(const MoeChunkParams c) {
  dev::allowDependentLaunch();
  dev::waitForPriorGrids();
  const int t = blockIdx.x;
  if (t >= c.rows)
    return;
  const MoeExpertsParams &ep = c.one.experts;
  const int64_t D = ep.dim;
  const int K = ep.topK;
  const float *w = chunkRow(ep.weights, t, c.stride);
  const uint16_t *res = chunkRow(ep.residual, t, c.stride);
  uint16_t *out = chunkRow(ep.out, t, c.stride);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
      acc = fmaf(w[k], dev::bf16ToF(c.y[c.pairAt[t * K + k] * D + i]), acc);
    float v = dev::roundBf16(acc);
    if (ep.sharedInterDim > 0)
      v = dev::roundBf16(v + dev::bf16ToF(c.sharedY[t * D + i]));
    if (res)
      v = v + dev::bf16ToF(res[i]);
    out[i] = dev::fToBf16(v);
  }
}
