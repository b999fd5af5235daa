//===- Kda.cu - KDA (linear attention) ops (CUDA) -------------------------===//
//
// One decode token of a KDA layer between its projections, as KdaCpu.cpp
// computes it (K3.md §2, NUMERICS.md "KDA"): the short conv, the per-head
// l2norm, decay gate and β, the gated delta rule on the fp32 state
// [H, d, d] ([head][key][value]) and the output gated RMSNorm; plus the fused
// kda_decode.
//
// The state update is the whole cost (K3: 96 heads × 128² fp32 = 6 MiB read
// and written per token), so the recurrent kernels split every head into
// slices of value columns and give each (head, slice) to one block: a thread
// owns 4 adjacent columns (one 16-byte load per row) of a few key rows, keeps
// them in registers between the two passes, and the key-axis reductions (Sᵀk
// and Sᵀq of each column) are a shuffle over the row lanes of a warp plus a
// fixed-order sum over warps in shared memory. With 256 threads a slice is
// 32 columns × 128 rows (16 KiB), 4 rows per thread, 4 slices per head: a
// grid of H · 4 blocks streams the whole state at once; a smaller grid loops
// over the slices and prefetches the next slice's state while it works.
// Per-head inputs (q, k, exp(g)) are cheap and recomputed by every block of a
// head. kda_step is bounded to 64 registers (__launch_bounds__(1024), no
// spills): any block size up to 1024 launches (1024 threads hold a whole
// 128-wide head in one block); kda_decode, which also sums the folded
// low-rank gate rows, to 128 (512 threads; no spills at 64 with them). 4
// blocks of 256 fit an SM either way, so the H · 4 blocks of K3 are all
// resident at once.
//
// The conv filters and o_norm are VectorRefs (bf16 or fp32 as the checkpoint
// stores them), read through dev::vectorAt / dev::withVector + dev::elemF
// (the conv taps: one dtype branch per channel, which keeps kda_decode at 64
// registers without spills): the math is fp32 either way.
//
// Rounding points are the CPU's; every product that meets a sum is an
// explicit fmaf, so the results do not depend on where the compiler would
// contract, and the chain of fine kernels (kda_conv ×3, kda_l2norm,
// kda_gate, sigmoid, kda_step, kda_gated_norm) gives kda_decode's bits when
// launched with the same block size and grid. Against the CPU only the
// summation order differs (and FMA against mul + add).
//
// Limits: headDim <= kMaxHeadDim (1024) for the recurrent kernels (the per
// head q, k and decay live in shared memory); larger heads write NaN outputs
// and leave the state alone. kda_decode with more than one slice per head
// finishes each head in the block that completes its last slice, counted in
// a module-global array: two kda_decode launches must not run concurrently
// in one context, and such a decode needs numHeads <= kMaxCountedHeads.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CudaCommon.cuh"
#include "kernels/common/CudaWeights.cuh"
#include "kernels/kda/KdaParams.h"

using namespace k3;

namespace {

/// Largest head dimension of the recurrent kernels (shared per-head vectors).
constexpr int kMaxHeadDim = 1024;
/// Key rows each thread keeps in registers between the two state passes;
/// rows beyond (heads much larger than the block) are written back after the
/// decay and read again in the second pass.
constexpr int kRegRows = 4;
/// Largest slice: 32 column groups of 4 (one warp across a row).
constexpr int kMaxSliceCols = 128;
constexpr int kMaxWarps = 32;
/// Heads of kda_decode that can be counted when a head has several slices.
constexpr int kMaxCountedHeads = 4096;
/// Measurement knobs for kda_decode's code size (K3C_TUNE_KDA_*, variant
/// builds only: scripts/ptx-variant.sh): VEC_ONLY drops the element-wise
/// state path (unaligned states write NaN), BF16_TAPS the fp32 conv taps
/// (fp32 filters write NaN). Neither is correct in general; they measure
/// how much of the kernel's time is its instruction footprint.
#ifdef K3C_TUNE_KDA_VEC_ONLY
constexpr bool kVecOnly = K3C_TUNE_KDA_VEC_ONLY != 0;
#else
constexpr bool kVecOnly = false;
#endif
#ifdef K3C_TUNE_KDA_BF16_TAPS
constexpr bool kBf16Taps = K3C_TUNE_KDA_BF16_TAPS != 0;
#else
constexpr bool kBf16Taps = false;
#endif

/// Slices of a head that have finished in the running kda_decode; the block
/// that completes a head's last slice finishes the head and resets its count.
__device__ unsigned int gDecodeArrivals[kMaxCountedHeads];

/// How the value columns of a head are split over blocks and threads.
struct SliceGeom {
  int cgLanes;  ///< column groups (4 columns) per slice: a power of two <= 32
  int cgShift;  ///< log2(cgLanes)
  int rowLanes; ///< blockDim.x / cgLanes threads down the key axis
  int cols;     ///< 4 · cgLanes columns per slice
  int slices;   ///< slices per head
};

/// Shared memory of the recurrent kernels.
struct StepShared {
  float q[kMaxHeadDim];     ///< normalised, scaled q of the head
  float k[kMaxHeadDim];     ///< normalised k
  float decay[kMaxHeadDim]; ///< exp(g) of every key row
  __align__(16) float red[kMaxWarps][kMaxSliceCols]; ///< per-warp col sums
  __align__(16) float u[kMaxSliceCols];              ///< β(v − Sᵀk)
  float v[kMaxSliceCols];                            ///< ṽ of the slice
  float colSum[kMaxSliceCols];                       ///< reduced column sums
  float scratch[32];                                 ///< blockSum
  /// The block's slice geometry, kept here rather than in registers: the
  /// state pass needs every register it can get (no spills at 64).
  SliceGeom geom;
};

/// The widest slice (fewest redundant per-head recomputations) whose rows
/// fit in registers, then narrower (down to 32 columns) while the grid has
/// more blocks than there are items. d <= kMaxHeadDim.
__device__ SliceGeom sliceGeom(int d, int heads) {
  const int groups = (d + 3) / 4;
  int cg = 32;
  while (cg > 1 && cg / 2 >= groups)
    cg >>= 1;
  while (cg > 1 && static_cast<int>(blockDim.x / cg) * kRegRows < d)
    cg >>= 1;
  while (cg > 8 &&
         static_cast<int64_t>(heads) * ((groups + cg - 1) / cg) < gridDim.x)
    cg >>= 1;
  SliceGeom g;
  g.cgLanes = cg;
  g.cgShift = __ffs(cg) - 1;
  g.rowLanes = blockDim.x / cg;
  g.cols = 4 * cg;
  g.slices = (groups + cg - 1) / cg;
  return g;
}

/// Columns of the 4-column group starting at `col` that lie inside [0, d).
__device__ __forceinline__ int validCols(int d, int col) {
  const int n = d - col;
  return n >= 4 ? 4 : (n > 0 ? n : 0);
}

__device__ __forceinline__ float4 zero4() {
  return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

/// Four state values starting at p (streamed: read once per token); Vec
/// needs 16-byte alignment, otherwise only the first nc are read.
template <bool Vec>
__device__ __forceinline__ float4 loadState(const float *p, int nc) {
  if (Vec)
    return __ldcs(reinterpret_cast<const float4 *>(p));
  float4 r = zero4();
  r.x = __ldcs(p);
  if (nc > 1)
    r.y = __ldcs(p + 1);
  if (nc > 2)
    r.z = __ldcs(p + 2);
  if (nc > 3)
    r.w = __ldcs(p + 3);
  return r;
}

template <bool Vec>
__device__ __forceinline__ void storeState(float *p, float4 v, int nc) {
  if (Vec) {
    __stcs(reinterpret_cast<float4 *>(p), v);
    return;
  }
  __stcs(p, v.x);
  if (nc > 1)
    __stcs(p + 1, v.y);
  if (nc > 2)
    __stcs(p + 2, v.z);
  if (nc > 3)
    __stcs(p + 3, v.w);
}

/// Where this thread's columns of a (head, slice) item start in the state,
/// and how many of its 4 columns are inside the head (0: none).
struct ItemCols {
  const float *base; ///< &S[h][0][col]
  int nc;
};

__device__ __forceinline__ ItemCols itemCols(const float *state, int d,
                                             const SliceGeom &g, int item) {
  const int h = item / g.slices;
  const int col =
      (item - h * g.slices) * g.cols + 4 * (threadIdx.x & (g.cgLanes - 1));
  return {state + static_cast<int64_t>(h) * d * d + col, validCols(d, col)};
}

/// Calls f(m, row pointer, valid columns) for each of this thread's
/// register rows m of an item (the rows inside the head).
template <typename F>
__device__ __forceinline__ void forRegRows(const float *state, int d,
                                           const SliceGeom &g, int item,
                                           F &&f) {
  const ItemCols c = itemCols(state, d, g, item);
  if (c.nc <= 0)
    return;
  const int rl = threadIdx.x >> g.cgShift;
#pragma unroll
  for (int m = 0; m < kRegRows; ++m) {
    const int row = rl + m * g.rowLanes;
    if (row < d)
      f(m, c.base + row * d, c.nc);
  }
}

/// Loads this thread's register rows of an item.
template <bool Vec>
__device__ __forceinline__ void loadSlice(float4 (&s)[kRegRows],
                                          const float *state, int d,
                                          const SliceGeom &g, int item) {
  forRegRows(state, d, g, item, [&](int m, const float *row, int nc) {
    s[m] = loadState<Vec>(row, nc);
  });
}

/// Asks L2 for this thread's register rows of an item: issued before the
/// item is staged (and for the block's next item), it overlaps the state's
/// memory latency with that work without holding registers.
__device__ __forceinline__ void prefetchSlice(const float *state, int d,
                                              const SliceGeom &g, int item) {
  forRegRows(state, d, g, item,
             [](int, const float *row, int) { dev::prefetchL2Line(row); });
}

/// Sums each thread's 4 column partials over the row lanes of the block into
/// sm.colSum[0, cols): a shuffle over the row lanes of a warp, then the warps
/// in order. Synchronises the block. Sm: StepShared or ClusterShared (the
/// same red / colSum fields).
template <typename Sm>
__device__ void sumOverRows(float4 v, const SliceGeom &g, Sm &sm) {
  for (int off = g.cgLanes; off < 32; off <<= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, off);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, off);
    v.z += __shfl_xor_sync(0xffffffffu, v.z, off);
    v.w += __shfl_xor_sync(0xffffffffu, v.w, off);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane < g.cgLanes)
    *reinterpret_cast<float4 *>(&sm.red[warp][4 * lane]) = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  for (int t = threadIdx.x; t < g.cols; t += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < warps; ++w)
      sum += sm.red[w][t];
    sm.colSum[t] = sum;
  }
  __syncthreads();
}

/// The delta rule on one slice of one head, on the staged sm.q, sm.k,
/// sm.decay (all key rows) and sm.v (the slice's columns):
///   pass 1: S ← Diag(exp(g)) S, kS = Sᵀk;  u = β(v − kS);
///   pass 2: S ← S + k ⊗ u, o = Sᵀq;  out[j] = R(o_j).
/// `s` holds this thread's first kRegRows rows, already loaded; the state is
/// written back once (the register rows only with `storeRegRows`: a run of
/// rows keeps them for the next row and stores them after its last). `emit(t,
/// o)` takes column j0 + t's o (unrounded) for each t < cols inside the head,
/// before the closing barrier.
template <bool Vec, typename Sm, typename Emit>
__device__ void stepSlice(float4 (&s)[kRegRows], float *S, int d,
                          const SliceGeom &g, int j0, float beta, Sm &sm,
                          Emit emit, bool storeRegRows = true) {
  const int cgl = threadIdx.x & (g.cgLanes - 1);
  const int rl = threadIdx.x >> g.cgShift;
  const int col = j0 + 4 * cgl;
  const int nc = validCols(d, col);
  float *base = S + col;
  const int spill = kRegRows * g.rowLanes;

  float4 acc = zero4();
  if (nc > 0) {
#pragma unroll
    for (int m = 0; m < kRegRows; ++m) {
      const int row = rl + m * g.rowLanes;
      if (row < d) {
        const float e = sm.decay[row], kk = sm.k[row];
        float4 &x = s[m];
        x.x *= e, x.y *= e, x.z *= e, x.w *= e;
        acc.x = fmaf(x.x, kk, acc.x), acc.y = fmaf(x.y, kk, acc.y);
        acc.z = fmaf(x.z, kk, acc.z), acc.w = fmaf(x.w, kk, acc.w);
      }
    }
#pragma unroll 1
    for (int row = rl + spill; row < d; row += g.rowLanes) {
      const float e = sm.decay[row], kk = sm.k[row];
      float4 x = loadState<Vec>(base + row * d, nc);
      x.x *= e, x.y *= e, x.z *= e, x.w *= e;
      acc.x = fmaf(x.x, kk, acc.x), acc.y = fmaf(x.y, kk, acc.y);
      acc.z = fmaf(x.z, kk, acc.z), acc.w = fmaf(x.w, kk, acc.w);
      storeState<Vec>(base + row * d, x, nc);
    }
  }
  sumOverRows(acc, g, sm);
  for (int t = threadIdx.x; t < g.cols; t += blockDim.x)
    sm.u[t] = j0 + t < d ? beta * (sm.v[t] - sm.colSum[t]) : 0.0f;
  __syncthreads();

  float4 o = zero4();
  if (nc > 0) {
    const float4 u = *reinterpret_cast<const float4 *>(&sm.u[4 * cgl]);
#pragma unroll
    for (int m = 0; m < kRegRows; ++m) {
      const int row = rl + m * g.rowLanes;
      if (row < d) {
        const float kk = sm.k[row], qq = sm.q[row];
        float4 &x = s[m];
        x.x = fmaf(kk, u.x, x.x), x.y = fmaf(kk, u.y, x.y);
        x.z = fmaf(kk, u.z, x.z), x.w = fmaf(kk, u.w, x.w);
        o.x = fmaf(x.x, qq, o.x), o.y = fmaf(x.y, qq, o.y);
        o.z = fmaf(x.z, qq, o.z), o.w = fmaf(x.w, qq, o.w);
        if (storeRegRows)
          storeState<Vec>(base + row * d, x, nc);
      }
    }
#pragma unroll 1
    for (int row = rl + spill; row < d; row += g.rowLanes) {
      const float kk = sm.k[row], qq = sm.q[row];
      float4 x = loadState<Vec>(base + row * d, nc);
      x.x = fmaf(kk, u.x, x.x), x.y = fmaf(kk, u.y, x.y);
      x.z = fmaf(kk, u.z, x.z), x.w = fmaf(kk, u.w, x.w);
      o.x = fmaf(x.x, qq, o.x), o.y = fmaf(x.y, qq, o.y);
      o.z = fmaf(x.z, qq, o.z), o.w = fmaf(x.w, qq, o.w);
      storeState<Vec>(base + row * d, x, nc);
    }
  }
  sumOverRows(o, g, sm);
  for (int t = threadIdx.x; t < g.cols && j0 + t < d; t += blockDim.x)
    emit(t, sm.colSum[t]);
  __syncthreads();
}

/// Runs every (head, slice) item of the grid-stride loop: `stage(h, j0)`
/// fills sm.q, sm.k, sm.decay and sm.v, synchronises and returns β;
/// `finish(h)` runs after the slice's outputs are written. The item's state
/// (and the block's next item's) is prefetched into L2 before the staging,
/// so its memory latency overlaps the staging's, and loaded after it, when
/// the registers are free.
template <bool Vec, typename Stage, typename Finish>
__device__ void forEachSlice(float *state, uint16_t *out, int heads, int d,
                             const SliceGeom &g, StepShared &sm, Stage stage,
                             Finish finish) {
  const int items = heads * g.slices;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    prefetchSlice(state, d, g, item);
    if (item + static_cast<int>(gridDim.x) < items)
      prefetchSlice(state, d, g, item + gridDim.x);
    const int h = item / g.slices;
    const int j0 = (item - h * g.slices) * g.cols;
    const float beta = stage(h, j0);
    float4 s[kRegRows];
    loadSlice<Vec>(s, state, d, g, item);
    uint16_t *outHead = out + static_cast<int64_t>(h) * d;
    stepSlice<Vec>(s, state + static_cast<int64_t>(h) * d * d, d, g, j0, beta,
                   sm,
                   [&](int t, float o) { outHead[j0 + t] = dev::fToBf16(o); });
    finish(h);
    __syncthreads(); // the next item's staging overwrites shared memory
  }
}

/// Whether the state rows can be read as float4.
__device__ __forceinline__ bool vecState(const float *state, int64_t d) {
  return d % 4 == 0 && dev::aligned16(state);
}

/// Writes bf16 NaN to out[0, n): the result of an unsupported shape.
using dev::fillNaN;

/// The conv output of one channel before the shift: R(SiLU(Σ_{i<hist}
/// w[i]·s[i] + w[hist]·u)), i ascending, with w the channel's taps starting
/// at element `w0` of the (bf16 or fp32) filter.
__device__ __forceinline__ uint16_t convOut(const VectorRef &w, int64_t w0,
                                            const float *s, uint16_t u,
                                            int hist) {
  auto taps = [&](const auto *t) {
    float a = 0.0f;
    for (int i = 0; i < hist; ++i)
      a = fmaf(dev::elemF(t, w0 + i), s[i], a);
    return fmaf(dev::elemF(t, w0 + hist), dev::bf16ToF(u), a);
  };
  float acc;
  if constexpr (kBf16Taps)
    acc = w.dtype == kVectorF32 ? __int_as_float(0x7fc00000)
                                : taps(static_cast<const uint16_t *>(w.data));
  else
    acc = dev::withVector(w, taps);
  return dev::fToBf16(dev::siluF(acc));
}

/// Shifts one channel's conv state left and appends u.
__device__ __forceinline__ void convShift(float *s, uint16_t u, int hist) {
  for (int i = 0; i + 1 < hist; ++i)
    s[i] = s[i + 1];
  if (hist > 0)
    s[hist - 1] = dev::bf16ToF(u);
}

/// The decay gate g of one channel (K3.md §2.5).
__device__ __forceinline__ float gateF(uint16_t f, float dtBias, float a,
                                       int32_t hasLowerBound,
                                       float lowerBound) {
  const float z = dev::bf16ToF(f) + dtBias;
  return hasLowerBound ? lowerBound * dev::sigmoidF(a * z)
                       : -a * dev::softplusF(z);
}

/// R(Σ_j w[j] · a[j]) over j < r: one row of a folded low-rank gate
/// projection (f_b or g_b; r = 128 in Kimi-Linear), summed by one thread in
/// linearCpu's order (cpu::dotBf16: eight lane sums over j ≡ l mod 8 in
/// ascending j, then a fixed tree). A product of two bf16 values is exact in
/// fp32, so fmaf adds exactly what the CPU adds: the row is the CPU's, bit
/// for bit, and so is the folded form against the unfolded one there. The
/// input a is read through L1 (every thread of the block reads it); the row
/// w from global memory, or (SharedW) from a copy staged in shared memory;
/// a likewise (SharedA).
template <bool SharedW = false, bool SharedA = false>
__device__ __forceinline__ uint16_t lowRankRow(const uint16_t *w,
                                               const uint16_t *a, int64_t r) {
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int64_t j = 0;
  if (dev::aligned16(w) && dev::aligned16(a)) {
    const uint4 *wv = reinterpret_cast<const uint4 *>(w);
    const uint4 *av = reinterpret_cast<const uint4 *>(a);
#pragma unroll 8
    for (int64_t c = 0; c < r / 8; ++c) {
      uint4 x;
      if constexpr (SharedW)
        x = wv[c];
      else
        x = __ldg(wv + c);
      uint4 y;
      if constexpr (SharedA)
        y = av[c];
      else
        y = __ldg(av + c);
      acc[0] = fmaf(dev::loF(x.x), dev::loF(y.x), acc[0]);
      acc[1] = fmaf(dev::hiF(x.x), dev::hiF(y.x), acc[1]);
      acc[2] = fmaf(dev::loF(x.y), dev::loF(y.y), acc[2]);
      acc[3] = fmaf(dev::hiF(x.y), dev::hiF(y.y), acc[3]);
      acc[4] = fmaf(dev::loF(x.z), dev::loF(y.z), acc[4]);
      acc[5] = fmaf(dev::hiF(x.z), dev::hiF(y.z), acc[5]);
      acc[6] = fmaf(dev::loF(x.w), dev::loF(y.w), acc[6]);
      acc[7] = fmaf(dev::hiF(x.w), dev::hiF(y.w), acc[7]);
    }
    j = r / 8 * 8;
  }
  // The rest element by element (j is a multiple of 8 here, so element
  // j + l belongs to lane l: constant indices keep acc in registers).
  for (; j < r; j += 8) {
#pragma unroll
    for (int l = 0; l < 8; ++l) {
      if (j + l >= r)
        break;
      uint16_t wj;
      if constexpr (SharedW)
        wj = w[j + l];
      else
        wj = __ldg(w + j + l);
      uint16_t aj;
      if constexpr (SharedA)
        aj = a[j + l];
      else
        aj = __ldg(a + j + l);
      acc[l] = fmaf(dev::bf16ToF(wj), dev::bf16ToF(aj), acc[l]);
    }
  }
  return dev::fToBf16(((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                      ((acc[4] + acc[5]) + (acc[6] + acc[7])));
}

/// 1 / sqrt(Σ x² + eps) from each thread's partial sum (its elements
/// tid, tid + blockDim, ... in order). Synchronises the block.
__device__ __forceinline__ float invNorm(float partial, float eps,
                                         float *scratch) {
  return 1.0f / sqrtf(dev::blockSum(partial, scratch) + eps);
}

/// l2norm's scale step: skipped at 1, as on the CPU.
__device__ __forceinline__ float scaled(float x, float scale) {
  return scale != 1.0f ? x * scale : x;
}

/// One head of the gated RMSNorm: y = R(o · r · w · sigmoid(gt)) with
/// r = 1/sqrt(mean(o²) + eps). o and gt are read through L2 (in kda_decode
/// other blocks may have written them); `out` may alias `o`: every read of
/// the sum is done before the first write, and a thread rewrites only what
/// it read.
__device__ void gatedNormHead(const uint16_t *o, const uint16_t *gate,
                              const VectorRef &weight, uint16_t *out, int64_t d,
                              float eps, float *scratch) {
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float x = dev::bf16ToF(__ldcg(o + i));
    ss = fmaf(x, x, ss);
  }
  ss = dev::blockSum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float x = dev::bf16ToF(__ldcg(o + i));
    const float y = x * r * dev::vectorAt(weight, i) *
                    dev::sigmoidF(dev::bf16ToF(__ldcg(gate + i)));
    out[i] = dev::fToBf16(y);
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// k3_kda_conv: one step of the depthwise causal conv + SiLU of q, k or v:
// out[c] = R(SiLU(Σ_{i<W-1} w[c,i]·state[c,i] + w[c,W-1]·u[c])), then the
// channel's state shifts left and takes u[c].
// Grid: any; one thread per channel, grid-stride (plans: ceil(C / 256)).
//===----------------------------------------------------------------------===//
extern "C" __global__ void k3_kda_conv(const KdaConvParams p) {
  dev::enterStep();
  const int hist = p.width - 1;
  for (int64_t c = dev::globalThread(); c < p.channels;
       c += dev::gridThreads()) {
    float *s = p.state + c * hist;
    const uint16_t u = p.u[c];
    p.out[c] = convOut(p.weight, c * p.width, s, u, hist);
    convShift(s, u, hist);
  }
}

//===----------------------------------------------------------------------===//
// k3_kda_l2norm: per head of headDim values, out = x / sqrt(Σ x² + eps),
// then · scale unless scale is 1 (fp32, unrounded). A trailing partial head
// is left unwritten, as on the CPU.
// Grid: any; one block per head, block-stride (plans: n / headDim). The sum
// is the one kda_decode uses, so their q and k match.
//===----------------------------------------------------------------------===//
extern "C" __global__ void k3_kda_l2norm(const KdaL2NormParams p) {
  dev::enterStep();
  __shared__ float scratch[32];
  const int64_t d = p.headDim;
  if (d <= 0)
    return;
  for (int64_t h = blockIdx.x; h < p.n / d; h += gridDim.x) {
    const uint16_t *x = p.x + h * d;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float v = dev::bf16ToF(x[i]);
      ss = fmaf(v, v, ss);
    }
    const float inv = invNorm(ss, p.eps, scratch);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
      p.out[h * d + i] = scaled(dev::bf16ToF(x[i]) * inv, p.scale);
  }
}

//===----------------------------------------------------------------------===//
// k3_kda_gate: g[c] = lowerBound · sigmoid(a·z) (hasLowerBound) or
// −a·softplus(z), z = f[c] + dtBias[c], a = exp(aLog[c / headDim]); fp32.
// Grid: any; one thread per channel, grid-stride (plans: numHeads).
//===----------------------------------------------------------------------===//
extern "C" __global__ void k3_kda_gate(const KdaGateParams p) {
  dev::enterStep();
  const int64_t n = p.numHeads * p.headDim;
  for (int64_t c = dev::globalThread(); c < n; c += dev::gridThreads()) {
    const float a = expf(p.aLog[c / p.headDim]);
    p.out[c] = gateF(p.f[c], p.dtBias[c], a, p.hasLowerBound, p.lowerBound);
  }
}

//===----------------------------------------------------------------------===//
// k3_sigmoid: out[i] = sigmoid(x[i]), bf16 in, fp32 out (KDA's β).
// Grid: any; grid-stride (plans: 1 block for the H logits).
//===----------------------------------------------------------------------===//
extern "C" __global__ void k3_sigmoid(const SigmoidParams p) {
  dev::enterStep();
  for (int64_t i = dev::globalThread(); i < p.n; i += dev::gridThreads())
    p.out[i] = dev::sigmoidF(dev::bf16ToF(p.x[i]));
}

namespace {

/// Largest numHeads of the recurrent kernels (items are counted in int).
constexpr int64_t kMaxHeads = int64_t(1) << 22;

/// Whether the recurrent kernels support H heads of d; otherwise they write
/// NaN to out and leave the state alone.
__device__ __forceinline__ bool recurrentShapeOk(int64_t H, int64_t d,
                                                 uint16_t *out) {
  if (H <= 0 || d <= 0)
    return false;
  if (d <= kMaxHeadDim && H <= kMaxHeads)
    return true;
  fillNaN(out, H * d);
  return false;
}

/// The state kernels' start: the shape check (unsupported shapes write NaN
/// and return false) and the block's slice geometry, kept in shared memory.
__device__ __forceinline__ bool enterStateKernel(int64_t heads, int64_t d,
                                                 uint16_t *out,
                                                 StepShared &sm) {
  if (!recurrentShapeOk(heads, d, out))
    return false;
  if (threadIdx.x == 0)
    sm.geom = sliceGeom(static_cast<int>(d), static_cast<int>(heads));
  __syncthreads();
  return true;
}

/// kda_decode's per-head inputs from bf16 q̃, k̃ (already in sm.q, sm.k
/// as floats, with each thread's Σ q̃², Σ k̃² partials over its elements
/// tid, tid + blockDim, ...): normalise them in place, q also scaled by
/// 1/sqrt(d). Every thread touches only its own elements.
__device__ void normaliseQK(int d, float sq, float sk, StepShared &sm) {
  const float invQ = invNorm(sq, kKdaL2NormEps, sm.scratch);
  const float invK = invNorm(sk, kKdaL2NormEps, sm.scratch);
  const float qScale = 1.0f / sqrtf(static_cast<float>(d));
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    sm.q[i] = scaled(sm.q[i] * invQ, qScale);
    sm.k[i] = sm.k[i] * invK;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// k3_kda_step: the delta rule of every head on prepared fp32 q, k, g and β:
// S ← Diag(exp(g)) S; S ← S + k ⊗ (β(v − Sᵀk)); o = R(Sᵀq).
// Grid: any; one block per (head, slice of value columns), block-stride over
// the H · slices items (file comment; 256 threads and d = 128: 4 slices of
// 32 columns, best grid H · 4; the plans' H loops over the slices). State
// in place. Limits: d <= kMaxHeadDim, H <= kMaxHeads (else NaN out).
//===----------------------------------------------------------------------===//
extern "C" __global__ void __launch_bounds__(1024)
    k3_kda_step(const KdaStepParams p) {
  dev::enterStep();
  __shared__ StepShared sm;
  if (!enterStateKernel(p.numHeads, p.headDim, p.out, sm))
    return;
  const int H = static_cast<int>(p.numHeads), d = static_cast<int>(p.headDim);
  const SliceGeom &g = sm.geom;
  auto stage = [&](int h, int j0) {
    const float *q = p.q + static_cast<int64_t>(h) * d;
    const float *k = p.k + static_cast<int64_t>(h) * d;
    const float *gate = p.g + static_cast<int64_t>(h) * d;
    const uint16_t *v = p.v + static_cast<int64_t>(h) * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      sm.q[i] = q[i];
      sm.k[i] = k[i];
      sm.decay[i] = expf(gate[i]);
    }
    for (int t = threadIdx.x; t < g.cols; t += blockDim.x)
      sm.v[t] = j0 + t < d ? dev::bf16ToF(v[j0 + t]) : 0.0f;
    __syncthreads();
    return p.beta[h];
  };
  auto finish = [](int) {};
  if (vecState(p.state, d))
    forEachSlice<true>(p.state, p.out, H, d, g, sm, stage, finish);
  else
    forEachSlice<false>(p.state, p.out, H, d, g, sm, stage, finish);
}

//===----------------------------------------------------------------------===//
// k3_kda_gated_norm: per head, y = R(o · rsqrt(mean(o²) + eps) · w ·
// sigmoid(gt)), fp32 inside, one rounding. out may alias o.
// Grid: any; one block per head, block-stride (plans: numHeads).
//===----------------------------------------------------------------------===//
extern "C" __global__ void k3_kda_gated_norm(const KdaGatedNormParams p) {
  dev::enterStep();
  __shared__ float scratch[32];
  const int64_t d = p.headDim;
  for (int64_t h = blockIdx.x; h < p.numHeads; h += gridDim.x)
    gatedNormHead(p.o + h * d, p.gate + h * d, p.weight, p.out + h * d, d,
                  p.eps, scratch);
}

namespace {

//===--- kda_decode on a cluster of 4 blocks per head ---------------------===//

/// The one shape of the clustered path: a head of 128 on 4 blocks of 256
/// threads (32 value columns each, the geometry sliceGeom gives 256 threads
/// at d = 128, so the state sums are kda_step's), a conv of at most 4 taps.
constexpr int kClusterHeadDim = 128;
constexpr int kClusterSlices = 4;
constexpr int kClusterCols = kClusterHeadDim / kClusterSlices;
constexpr int kClusterThreads = 256;
constexpr int kClusterMaxTaps = 4;
/// Folded low-rank rows up to this rank are staged in shared memory before
/// the PDL wait (Kimi-Linear and K3: 128); longer rows are read from L2.
constexpr int kClusterStagedRank = 128;
/// bf16 per staged row: 16 bytes of padding put the rows that the lanes of a
/// warp read at one step in different banks.
constexpr int kStagedPitch = kClusterStagedRank + 8;

/// Shared memory of the clustered path. q, k, decay and the three partial
/// sums of the head are filled by all four blocks of the cluster (each
/// stores its 32 channels into every block); the rest is the block's own.
/// red / u / v / colSum are StepShared's, so stepSlice runs on either.
struct ClusterShared {
  float q[kClusterHeadDim];     ///< conv q̃, then normalised and scaled
  float k[kClusterHeadDim];     ///< conv k̃, then normalised
  float decay[kClusterHeadDim]; ///< exp(g) of every key row
  float sqPart[kClusterSlices]; ///< Σ q̃² of each block's 32 channels
  float skPart[kClusterSlices]; ///< Σ k̃²
  float ssPart[kClusterSlices]; ///< Σ o² of each block's 32 columns
  __align__(16) float red[kClusterThreads / 32][kMaxSliceCols];
  __align__(16) float u[kMaxSliceCols];
  float v[kMaxSliceCols];
  float colSum[kMaxSliceCols];
  float o[kClusterCols];  ///< R(Sᵀq) of the block's columns, as floats
  float gt[kClusterCols]; ///< the output gate of the block's channels
  /// The folded f_b (0) and g_b (1) rows of the block's 32 channels.
  __align__(16) uint16_t rows[2][kClusterCols][kStagedPitch];
};

/// The slice geometry of the clustered path (sliceGeom at 256 threads and
/// d = 128): 8 column groups of 4 across, 32 row lanes, 4 slices.
__device__ __forceinline__ SliceGeom clusterGeom() {
  return SliceGeom{8, 3, kClusterThreads / 8, kClusterCols, kClusterSlices};
}

/// Whether a clustered launch has the one shape the path takes (uniform
/// over the grid: every block of every cluster agrees); `rows`: the grid's
/// y (the multi-row form's rows, else 1).
__device__ __forceinline__ bool clusterShapeOk(const KdaDecodeParams &p,
                                               unsigned rows) {
  auto rankOk = [](const uint16_t *b, int64_t r) {
    return !b || (r > 0 && r <= kKdaMaxFoldedRank);
  };
  return dev::clusterBlocks() == kClusterSlices &&
         p.headDim == kClusterHeadDim && p.numHeads > 0 &&
         p.numHeads <= kMaxHeads &&
         gridDim.x == static_cast<unsigned>(p.numHeads * kClusterSlices) &&
         gridDim.y == rows && gridDim.z == 1 && blockDim.x == kClusterThreads &&
         blockDim.y == 1 && blockDim.z == 1 && p.convWidth >= 1 &&
         p.convWidth <= kClusterMaxTaps && vecState(p.state, kClusterHeadDim) &&
         rankOk(p.fB, p.fRank) && rankOk(p.gB, p.gRank);
}

/// Channel c's W conv taps (bf16 or fp32 filter) into registers; the rest
/// stay as they are.
__device__ __forceinline__ void loadConvTaps(const VectorRef &w, int64_t c,
                                             int W,
                                             float (&taps)[kClusterMaxTaps]) {
  dev::withVector(w, [&](const auto *t) {
#pragma unroll
    for (int i = 0; i < kClusterMaxTaps; ++i)
      if (i < W)
        taps[i] = dev::elemF(t, c * W + i);
    return 0;
  });
}

/// convOut's sum on the clustered paths' registers: the history taps in
/// order, then the newest input u (taps and history past `hist` unused).
__device__ __forceinline__ float
convTaps(const float (&taps)[kClusterMaxTaps],
         const float (&hs)[kClusterMaxTaps - 1], float u, int hist) {
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < kClusterMaxTaps; ++i) {
    if (i < hist)
      acc = fmaf(taps[i], hs[i], acc);
    else if (i == hist)
      acc = fmaf(taps[i], u, acc);
  }
  return acc;
}

/// Stores `v` at `local` in every block of the cluster (lane-parallel: each
/// call is kClusterSlices remote stores).
__device__ __forceinline__ void storeAllBlocks(float *local, float v) {
#pragma unroll
  for (unsigned b = 0; b < kClusterSlices; ++b)
    dev::storeCluster(local, b, v);
}

/// The sum of the four blocks' partials in blockSum's order for a head of
/// 128 (warps 0-3 of a block holding the head, the others zero).
__device__ __forceinline__ float headSum(const float (&part)[kClusterSlices]) {
  return (part[0] + part[2]) + (part[1] + part[3]);
}

/// kda_decode's clustered path (see k3_kda_decode). Block rank r of the
/// cluster of head h owns channels h·128 + 32r + [0, 32) of q, k, v, the
/// decay and the output gate, and value columns 32r + [0, 32) of the state.
/// Warps 0-2: the conv of q, k, v (a lane per channel); warp 3: the decay;
/// warp 4: the output gate. Before the PDL wait, only weights are touched:
/// the conv taps, dt_bias and o_norm into registers, the folded f_b / g_b
/// rows into shared memory (cp.async), the state's lines asked of L2.
/// A run (k3_kda_decode_run): `run` holds `count` rows of one sequence in
/// position order, `p` a shared-memory copy of the current one (`row`,
/// rows[0] on entry); the rows differ only in their activations, so the
/// weights staged for the first serve all, the state slice stays in
/// registers from the first row to the last (stored once, after it), and
/// each row computes exactly what its own launch would.
__device__ void
decodeClustered(const KdaDecodeParams &p, ClusterShared &sm,
                const KdaDecodeParams *run = nullptr, int count = 1,
                dev::RowParams<KdaDecodeParams> *row = nullptr) {
  constexpr int d = kClusterHeadDim;
  const int h = blockIdx.x / kClusterSlices;
  const unsigned r = dev::clusterRank();
  const int j0 = static_cast<int>(r) * kClusterCols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c0 = static_cast<int64_t>(h) * d, c = c0 + j0 + lane;
  const int W = p.convWidth, hist = W - 1;
  const SliceGeom g = clusterGeom();

  // Weights only before the wait.
  float taps[kClusterMaxTaps] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (warp < 3) {
    const VectorRef w = warp == 0 ? p.convQ : (warp == 1 ? p.convK : p.convV);
    loadConvTaps(w, c, W, taps);
  }
  float dtBias = 0.0f, a = 0.0f, normW = 0.0f;
  if (warp == 0)
    normW = dev::vectorAt(p.normWeight, j0 + lane);
  if (warp == 3 && !p.fB)
    dtBias = p.dtBias[c];
  // The folded row of this lane's channel (warp 3: f_b, warp 4: g_b).
  const uint16_t *fold = nullptr;
  int64_t rank = 0;
  if (warp == 3 && p.fB)
    fold = p.fB, rank = p.fRank;
  if (warp == 4 && p.gB)
    fold = p.gB, rank = p.gRank;
  const bool staged = fold && rank <= kClusterStagedRank && rank % 8 == 0 &&
                      dev::aligned16(fold);
  uint16_t *stagedRow = staged ? sm.rows[warp - 3][lane] : nullptr;
  if (fold) {
    fold += c * rank;
    if (warp == 3)
      dtBias = p.dtBias[c];
    if (staged)
      for (int64_t i = 0; i < rank / 8; ++i)
        dev::copyAsync16(stagedRow + 8 * i, fold + 8 * i);
    else
      dev::prefetchL2Line(fold);
  }
  if (warp == 3)
    a = expf(p.aLog[h]);
  // The block's state lines (a hint: safe before the wait).
  if ((threadIdx.x & (g.cgLanes - 1)) == 0)
    prefetchSlice(p.state, d, g, blockIdx.x);
  dev::waitForPriorGrids();

  // The state rows into registers while the convs run.
  float4 s[kRegRows];
  loadSlice<true>(s, p.state, d, g, blockIdx.x);
  for (int t = 0;;) {
    const float beta = dev::sigmoidF(dev::bf16ToF(p.betaLogit[h]));
    if (warp < 3) {
      const uint16_t *uIn = warp == 0 ? p.uq : (warp == 1 ? p.uk : p.uv);
      float *st = (warp == 0 ? p.convStateQ
                             : (warp == 1 ? p.convStateK : p.convStateV)) +
                  c * hist;
      const float u = dev::bf16ToF(uIn[c]);
      float hs[kClusterMaxTaps - 1];
#pragma unroll
    for (int i = 0; i < kClusterMaxTaps - 1; ++i)
      hs[i] = i < hist ? st[i] : 0.0f;
    const float acc = convTaps(taps, hs, u, hist);
    // convShift: this block alone reads and writes these channels.
#pragma unroll
    for (int i = 0; i < kClusterMaxTaps - 1; ++i)
      if (i < hist)
        st[i] = i + 1 < hist ? hs[i + 1] : u;
    const float x = dev::bf16ToF(dev::fToBf16(dev::siluF(acc)));
    if (warp == 2) {
      sm.v[lane] = x;
    } else {
      const float part = dev::warpSum(fmaf(x, x, 0.0f));
      float *vec = warp == 0 ? sm.q : sm.k;
      float *parts = warp == 0 ? sm.sqPart : sm.skPart;
      storeAllBlocks(vec + j0 + lane, x);
      if (lane < kClusterSlices)
        dev::storeCluster(parts + r, lane, part);
    }
  } else if (warp == 3) {
    uint16_t f;
    if (staged) {
      dev::waitAsyncCopies();
      f = lowRankRow<true>(stagedRow, p.fA, rank);
    } else if (fold) {
      f = lowRankRow(fold, p.fA, rank);
    } else {
      f = p.f[c];
      dtBias = p.dtBias[c];
    }
    storeAllBlocks(sm.decay + j0 + lane,
                   expf(gateF(f, dtBias, a, p.hasLowerBound, p.lowerBound)));
  } else if (warp == 4) {
    uint16_t gt;
    if (staged) {
      dev::waitAsyncCopies();
      gt = lowRankRow<true>(stagedRow, p.gA, rank);
    } else if (fold) {
      gt = lowRankRow(fold, p.gA, rank);
    }
    if (fold)
      p.gateOut[c] = gt;
    else
      gt = p.gate[c];
    sm.gt[lane] = dev::bf16ToF(gt);
  }
  dev::clusterSync(); // q, k, decay and their sums are in every block

  // normaliseQK's arithmetic, on the head's sums.
  {
    const float invQ = 1.0f / sqrtf(headSum(sm.sqPart) + kKdaL2NormEps);
    const float invK = 1.0f / sqrtf(headSum(sm.skPart) + kKdaL2NormEps);
    const float qScale = 1.0f / sqrtf(static_cast<float>(d));
    if (threadIdx.x < d) {
      sm.q[threadIdx.x] = scaled(sm.q[threadIdx.x] * invQ, qScale);
      sm.k[threadIdx.x] = sm.k[threadIdx.x] * invK;
    }
  }
  __syncthreads();
  stepSlice<true>(
      s, p.state + static_cast<int64_t>(h) * d * d, d, g, j0, beta, sm,
      [&](int t, float o) { sm.o[t] = dev::bf16ToF(dev::fToBf16(o)); },
      t + 1 == count);

  // gatedNormHead on the head's Σ o².
  float x = 0.0f;
  if (warp == 0) {
    x = sm.o[lane];
    const float part = dev::warpSum(fmaf(x, x, 0.0f));
    if (lane < kClusterSlices)
      dev::storeCluster(sm.ssPart + r, lane, part);
  }
  dev::clusterSync(); // the last access to another block's shared memory
  if (warp == 0) {
    const float rr =
        1.0f / sqrtf(headSum(sm.ssPart) / static_cast<float>(d) + p.normEps);
    const float y = x * rr * normW * dev::sigmoidF(sm.gt[lane]);
    p.out[c] = dev::fToBf16(y);
  }
  if (++t == count)
    break;
  // The next row's params, once every thread is done with this row's.
  __syncthreads();
  dev::loadRowParams(run, *row, t);
  }
}

/// Shared memory of k3_kda_decode: one path or the other per launch.
union DecodeShared {
  StepShared step;
  ClusterShared cluster;
};

} // namespace

//===----------------------------------------------------------------------===//
// k3_kda_decode: the whole KDA token between the projections: kda_conv of q,
// k, v, the recurrent step and kda_gated_norm, with the chain's rounding points
// (q̃, k̃, ṽ, o in bf16): bit for bit that chain at the same grid and block.
// Grid: any; items and slices as kda_step. Each item computes the conv
// of q and k for the whole head (the l2norm needs it) without touching their
// conv state, and the conv of v for its own columns (shifting their state);
// o = R(Sᵀq) of the slice goes to out. With one slice per head the block
// then norms the head; with several, the block that completes a head's last
// slice (counted in gDecodeArrivals) shifts the head's q/k conv state, reads
// the head's o back from out and norms it in place.
// With fB (gB) the low-rank f_b (g_b) rows are summed here: every block of
// a head computes f for all d key rows (the decay needs them), and each
// slice the output gate of its own channels into gateOut, read back by the
// block that finishes the head.
// Limits: as kda_step; fRank, gRank <= kKdaMaxFoldedRank (else NaN out);
// with several slices per head, numHeads <= kMaxCountedHeads and no
// concurrent kda_decode in the context.
//===----------------------------------------------------------------------===//
namespace {

/// The clustered path for `p` if the launch has its shape (`rows`: the
/// grid's y), else NaN out and the states untouched.
__device__ __forceinline__ void decodeClusteredOrNaN(const KdaDecodeParams &p,
                                                     ClusterShared &sm,
                                                     unsigned rows) {
  if (clusterShapeOk(p, rows)) {
    decodeClustered(p, sm);
  } else {
    dev::waitForPriorGrids();
    fillNaN(p.out, p.numHeads * p.headDim);
  }
}

/// k3_kda_decode's body for `p` (a kernel parameter, or a row's params in
/// shared memory); `rows`: the grid's y (1, or the multi-row form's rows,
/// block row blockIdx.y); the sliced path counts a head's slices in
/// gDecodeArrivals[blockIdx.y · numHeads + h].
__device__ __forceinline__ void kdaDecodeBody(const KdaDecodeParams &p,
                                              DecodeShared &shared,
                                              unsigned rows) {
  dev::allowDependentLaunch();
  dev::prefetchL2Share(p.l2Prefetch);
  if (dev::clusterBlocks() > 1) {
    decodeClusteredOrNaN(p, shared.cluster, rows);
    return;
  }
  // The folded low-rank rows of the block's first item are weights (no
  // earlier kernel writes them): ask L2 for them before the wait.
  if ((p.fB || p.gB) && p.headDim > 0 && p.headDim <= kMaxHeadDim &&
      p.numHeads > 0) {
    const int d = static_cast<int>(p.headDim);
    const SliceGeom g = sliceGeom(d, static_cast<int>(p.numHeads));
    const int h = blockIdx.x / g.slices;
    const int j0 = (blockIdx.x - h * g.slices) * g.cols;
    if (h < p.numHeads) {
      const int64_t c0 = static_cast<int64_t>(h) * d;
      if (p.fB)
        dev::prefetchL2Block(p.fB + c0 * p.fRank, d * p.fRank * 2);
      if (p.gB && j0 < d)
        dev::prefetchL2Block(p.gB + (c0 + j0) * p.gRank,
                             min(g.cols, d - j0) * p.gRank * 2);
    }
  }
  dev::waitForPriorGrids();
  StepShared &sm = shared.step;
  if (!enterStateKernel(p.numHeads, p.headDim, p.out, sm))
    return;
  const int H = static_cast<int>(p.numHeads), d = static_cast<int>(p.headDim);
  const SliceGeom &g = sm.geom;
  const bool whole = g.slices == 1;
  auto badRank = [](const uint16_t *b, int64_t r) {
    return b && (r <= 0 || r > kKdaMaxFoldedRank);
  };
  if ((!whole && int64_t(H) * rows > kMaxCountedHeads) ||
      badRank(p.fB, p.fRank) ||
      badRank(p.gB, p.gRank)) {
    fillNaN(p.out, p.numHeads * p.headDim);
    return;
  }
  const int W = p.convWidth, hist = W - 1;
  auto stage = [&](int h, int j0) {
    const int64_t c0 = static_cast<int64_t>(h) * d;
    const float a = expf(p.aLog[h]);
    // The folded low-rank projections (their rows were asked of L2 before
    // the PDL wait): f of every key row of the head, whose decay goes to
    // sm.decay, then this slice's channels of the output gate into gateOut
    // for the head's finish. The threads past the head's d (128 of 256 for
    // d = 128) sum them while the others run the convs, so their latency
    // overlaps; a block of at most d threads sums them first. Both are read
    // after the stage's closing barrier.
    const int nf = p.fB ? d : 0, ng = p.gB ? min(g.cols, d - j0) : 0;
    auto lowRankItem = [&](int i) {
      if (i < nf) {
        const uint16_t f = lowRankRow(p.fB + (c0 + i) * p.fRank, p.fA, p.fRank);
        sm.decay[i] = expf(
            gateF(f, p.dtBias[c0 + i], a, p.hasLowerBound, p.lowerBound));
      } else {
        const int64_t c = c0 + j0 + (i - nf);
        p.gateOut[c] = lowRankRow(p.gB + c * p.gRank, p.gA, p.gRank);
      }
    };
    const int helpers = static_cast<int>(blockDim.x) - d;
    if (nf + ng > 0) {
      if (helpers > 0) {
        for (int i = static_cast<int>(threadIdx.x) - d; i >= 0 && i < nf + ng;
             i += helpers)
          lowRankItem(i);
      } else {
        for (int i = threadIdx.x; i < nf + ng; i += blockDim.x)
          lowRankItem(i);
      }
    }
    float sq = 0.0f, sk = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      const int64_t c = c0 + i;
      float *sQ = p.convStateQ + c * hist, *sK = p.convStateK + c * hist;
      const float qi = dev::bf16ToF(convOut(p.convQ, c * W, sQ, p.uq[c], hist));
      const float ki = dev::bf16ToF(convOut(p.convK, c * W, sK, p.uk[c], hist));
      if (whole) {
        convShift(sQ, p.uq[c], hist);
        convShift(sK, p.uk[c], hist);
      }
      sm.q[i] = qi;
      sm.k[i] = ki;
      sq = fmaf(qi, qi, sq);
      sk = fmaf(ki, ki, sk);
      if (!p.fB)
        sm.decay[i] = expf(
            gateF(p.f[c], p.dtBias[c], a, p.hasLowerBound, p.lowerBound));
    }
    for (int t = threadIdx.x; t < g.cols; t += blockDim.x) {
      float vt = 0.0f;
      if (j0 + t < d) {
        const int64_t c = c0 + j0 + t;
        float *sV = p.convStateV + c * hist;
        vt = dev::bf16ToF(convOut(p.convV, c * W, sV, p.uv[c], hist));
        convShift(sV, p.uv[c], hist);
      }
      sm.v[t] = vt;
    }
    normaliseQK(d, sq, sk, sm);
    __syncthreads();
    return dev::sigmoidF(dev::bf16ToF(p.betaLogit[h]));
  };
  auto finish = [&](int h) {
    const int64_t c0 = static_cast<int64_t>(h) * d;
    if (!whole) {
      // Publish this slice's o and v conv state and count the slice; the
      // head's last slice finishes it.
      if (!dev::lastToArrive(&gDecodeArrivals[blockIdx.y * H + h],
                             static_cast<unsigned>(g.slices)))
        return;
      // Every other block of the head has read the q/k conv state by now.
      for (int i = threadIdx.x; i < d; i += blockDim.x) {
        convShift(p.convStateQ + (c0 + i) * hist, p.uq[c0 + i], hist);
        convShift(p.convStateK + (c0 + i) * hist, p.uk[c0 + i], hist);
      }
    }
    gatedNormHead(p.out + c0, (p.gB ? p.gateOut : p.gate) + c0,
                  p.normWeight, p.out + c0, d, p.normEps, sm.scratch);
  };
  if (vecState(p.state, d))
    forEachSlice<true>(p.state, p.out, H, d, g, sm, stage, finish);
  else if (kVecOnly)
    fillNaN(p.out, p.numHeads * p.headDim);
  else
    forEachSlice<false>(p.state, p.out, H, d, g, sm, stage, finish);
}

} // namespace

extern "C" __global__ void __launch_bounds__(512)
    k3_kda_decode(const KdaDecodeParams p) {
  __shared__ DecodeShared shared;
  kdaDecodeBody(p, shared, 1);
}

// k3_kda_decode_run: k3_kda_decode for a run of consecutive rows of one
// sequence (KdaDecodeRowsParams: rows[0, count) in position order, bound to
// the same states; a prompt chunk), in one launch on the clustered path's
// grid (4 · numHeads blocks of 256 threads in clusters of 4): each block
// keeps its state slice in registers across the rows and stores it after
// the last, and every row's output, folded gate and states are bit for bit
// what count launches of k3_kda_decode give. Limits: the clustered path's
// shape (else every row's out is NaN and the states are untouched).
extern "C" __global__ void __launch_bounds__(512)
    k3_kda_decode_run(const KdaDecodeRowsParams rp) {
  __shared__ DecodeShared shared;
  __shared__ __align__(16) dev::RowParams<KdaDecodeParams> row;
  dev::allowDependentLaunch();
  if (rp.count < 1)
    return;
  dev::loadRowParams(rp.rows, row, 0);
  const KdaDecodeParams &p = row.get();
  dev::prefetchL2Share(p.l2Prefetch);
  if (dev::clusterBlocks() > 1 && clusterShapeOk(p, 1)) {
    decodeClustered(p, shared.cluster, rp.rows, rp.count, &row);
    return;
  }
  dev::waitForPriorGrids();
  for (int t = 0; t < rp.count; ++t)
    fillNaN(rp.rows[t].out, rp.rows[t].numHeads * rp.rows[t].headDim);
}

// k3_kda_decode_rows: k3_kda_decode for several rows (KdaDecodeRowsParams):
// block (x, y) is block x of row y's launch, its params rows[y] copied to
// shared memory first (before the PDL wait: the runtime writes the rows'
// params before the step's first launch). Every row's results are its own
// launch's bit for bit (same grid.x, same code). Limits: k3_kda_decode's,
// with rows · numHeads <= kMaxCountedHeads on the sliced path.
extern "C" __global__ void __launch_bounds__(512)
    k3_kda_decode_rows(const KdaDecodeRowsParams rp) {
  __shared__ DecodeShared shared;
  __shared__ __align__(16) dev::RowParams<KdaDecodeParams> row;
  dev::loadRowParams(rp.rows, row);
  kdaDecodeBody(row.get(), shared, static_cast<unsigned>(rp.count));
}

// k3_kda_decode_rows_clustered: k3_kda_decode_rows for launches in clusters
// of 4 (the plans' Kimi-Linear and K3 heads): the clustered path alone, so
// that its registers are not the sliced path's. A batch's rows are many
// waves of latency-bound clusters (16 rows x 32 heads: 2048 blocks); at the
// general form's 128 registers two blocks fit an SM, at this form's
// K3C_TUNE_KDA_ROWS_BLOCKS (default 3: 80 registers, no spills) three.
// Every row's results are the general form's bit for bit (the same code).
// Limits: the clustered path's shape (else every row's out is NaN and its
// states untouched).
#ifndef K3C_TUNE_KDA_ROWS_BLOCKS
#define K3C_TUNE_KDA_ROWS_BLOCKS 3
#endif
extern "C" __global__ void __launch_bounds__(kClusterThreads,
                                             K3C_TUNE_KDA_ROWS_BLOCKS)
    k3_kda_decode_rows_clustered(const KdaDecodeRowsParams rp) {
  __shared__ ClusterShared shared;
  __shared__ __align__(16) dev::RowParams<KdaDecodeParams> row;
  dev::loadRowParams(rp.rows, row);
  const KdaDecodeParams &p = row.get();
  dev::allowDependentLaunch();
  dev::prefetchL2Share(p.l2Prefetch);
  decodeClusteredOrNaN(p, shared, static_cast<unsigned>(rp.count));
}

//===----------------------------------------------------------------------===//
// k3_kda_decode_chunk: kda_decode for a run of consecutive rows of one
// sequence (KdaDecodeRowsParams, 1 <= count <= kKdaChunkMaxRows; a prompt
// chunk with PrefillForm::Chunk) in the chunk (WY / UT) form of the delta
// rule, as kdaDecodeChunkCpu computes it: the rows' convs, folded gates,
// l2norms and decays first (each row exactly as kda_decode prepares it),
// then for each head, with G the cumulative log decay within the chunk,
//   A[s][r] = Σ_c k_s k_r e^{G_s − G_r} (r < s), B[t][s] = Σ_c q_t k_s
//   e^{G_t − G_s} (s <= t),
//   w_s = β_s (v_s − S0ᵀ(e^{G_s} ⊙ k_s) − Σ_{r<s} A[s][r] w_r),
//   o_t = S0ᵀ(e^{G_t} ⊙ q_t) + Σ_{s<=t} B[t][s] w_s,
//   S ← e^{G_T} ⊙ S0 + Σ_s (e^{G_T − G_s} ⊙ k_s) ⊗ w_s,
// and each row's gated norm. Within fp32 rounding of the run form, not bit
// for bit (other summation orders); the conv states and folded gates are
// bit for bit.
// Grid: the clustered path's (4 · numHeads blocks of 256 threads in
// clusters of 4), kKdaChunkSmemBytes of dynamic shared memory. Block rank r
// of head h owns value columns 32r + [0, 32) (and those channels of v, the
// gate and the conv states) and the decays of those 32 key channels (stored
// into every block); every block computes q and k of all 128 channels
// itself, the A / B entries are split over the cluster and stored into every
// block, and the rows' Σ o² meet through distributed shared memory. Limits: the
// clustered path's shape and count in [1, kKdaChunkMaxRows] (else every row's
// out is NaN, the states untouched).
//===----------------------------------------------------------------------===//
namespace {

constexpr int kChunkT = kKdaChunkMaxRows;
/// log2(e): e^x = 2^(x · log2 e).
constexpr float kLog2e = 1.4426950408889634f;

/// Dynamic shared memory of k3_kda_decode_chunk.
struct ChunkShared {
  /// q̃ → q (normalised, scaled) → e^{G_t} ⊙ q_t.
  float q[kChunkT][kClusterHeadDim];
  /// k̃ → k (normalised) → e^{G_s} ⊙ k_s.
  float k[kChunkT][kClusterHeadDim];
  /// g (log decay) → G (cumulative) → e^{G_T − G_s} ⊙ k_s.
  float g[kChunkT][kClusterHeadDim];
  float v[kChunkT][kClusterCols];         ///< ṽ of the block's columns
  /// v − S0ᵀ(e^G ⊙ k), then w; rows padded by 4 so that the UT
  /// transform's lanes (8 earlier rows × 4 columns) meet 32 banks.
  float w[kChunkT][kClusterCols + 4];
  float o[kChunkT][kClusterCols];         ///< R(o) of the block's columns
  float gt[kChunkT][kClusterCols];        ///< the output gate of its channels
  float a[kChunkT][kChunkT];              ///< A (r < s)
  float b[kChunkT][kChunkT];              ///< B (s <= t)
  float s[kClusterHeadDim][kClusterCols]; ///< S0's slice [key][column]
  float beta[kChunkT];
  float ss[kChunkT][kClusterSlices]; ///< Σ o² of each block's columns
  float keep[kClusterHeadDim];       ///< e^{G_T} of each key channel
};
static_assert(sizeof(ChunkShared) == kKdaChunkSmemBytes,
              "kKdaChunkSmemBytes (KdaParams.h) states this layout's size");

/// Row t's activation pointers (KdaDecodeParams), read once into shared
/// memory so that the rows' loads are independent of one another.
struct ChunkRowPtrs {
  const uint16_t *uq, *uk, *uv, *f, *fA, *gA, *gate, *betaLogit;
  uint16_t *out, *gateOut;
};

/// One channel's conv over the chunk's rows: `x[t · pitch]` holds u_t (as a
/// float) on entry and R(SiLU(conv)) on return, `hs` the channel's history
/// on entry and after the last row (convOut's and convShift's arithmetic).
__device__ __forceinline__ void convRows(float *x, int pitch, int T,
                                         const float (&taps)[kClusterMaxTaps],
                                         float (&hs)[kClusterMaxTaps - 1],
                                         int hist) {
  for (int t = 0; t < T; ++t) {
    const float u = x[t * pitch];
    const float acc = convTaps(taps, hs, u, hist);
#pragma unroll
    for (int i = 0; i < kClusterMaxTaps - 1; ++i)
      if (i < hist)
        hs[i] = i + 1 < hist ? hs[i + 1] : u;
    x[t * pitch] = dev::bf16ToF(dev::fToBf16(dev::siluF(acc)));
  }
}

/// Copies each row's `rank` bf16 inputs (16-byte aligned, rank % 8 == 0,
/// rank <= kClusterStagedRank) to dst[t · rank ..] with 16-byte loads.
template <typename Src>
__device__ __forceinline__ void stageRanks(uint16_t *dst, int64_t rank, int T,
                                           Src src) {
  const int per = static_cast<int>(rank / 8);
  for (int i = threadIdx.x; i < T * per; i += blockDim.x) {
    const int t = i / per, q = i % per;
    reinterpret_cast<uint4 *>(dst + t * rank)[q] =
        reinterpret_cast<const uint4 *>(src(t))[q];
  }
}

} // namespace

// One block per SM (its shared memory), so every register may be used: the
// minimum of 1 keeps ptxas from aiming at 64 registers for four blocks an SM
// (it spilled there).
extern "C" __global__ void __launch_bounds__(kClusterThreads, 1)
    k3_kda_decode_chunk(const KdaDecodeRowsParams rp) {
  extern __shared__ __align__(16) unsigned char chunkBytes[];
  ChunkShared &sm = *reinterpret_cast<ChunkShared *>(chunkBytes);
  __shared__ __align__(16) dev::RowParams<KdaDecodeParams> row;
  __shared__ ChunkRowPtrs ptr[kChunkT];
  dev::allowDependentLaunch();
  const int T = rp.count;
  if (T < 1)
    return;
  dev::clusterArrive(); // waited for before the first remote store
  const KdaDecodeParams *rows = rp.rows;
  dev::loadRowParams(rows, row, 0);
  const KdaDecodeParams &p = row.get();
  if (T > kChunkT || dev::clusterBlocks() <= 1 || !clusterShapeOk(p, 1) ||
      dev::dynamicSmemBytes() < sizeof(ChunkShared)) {
    dev::clusterWait();
    dev::waitForPriorGrids();
    for (int t = 0; t < T; ++t)
      fillNaN(rows[t].out, rows[t].numHeads * rows[t].headDim);
    return;
  }
  if (threadIdx.x < T) {
    const KdaDecodeParams &q = rows[threadIdx.x];
    ptr[threadIdx.x] =
        ChunkRowPtrs{q.uq, q.uk,   q.uv,        q.f,   q.fA,
                     q.gA, q.gate, q.betaLogit, q.out, q.gateOut};
  }
  constexpr int d = kClusterHeadDim, J = kClusterCols;
  const int h = blockIdx.x / kClusterSlices;
  const unsigned rank = dev::clusterRank();
  const int j0 = static_cast<int>(rank) * J;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t c0 = static_cast<int64_t>(h) * d;
  const int W = p.convWidth, hist = W - 1;
  dev::waitForPriorGrids();

  // 1. The folded gates: each row's R(f_a h), R(g_a h) staged (in the room of
  // A and B), the f_b and g_b rows of the block's 32 channels staged (in the
  // room of q and k, rows padded to kStagedPitch against bank conflicts),
  // all with 16-byte loads; then the decays of the block's channels for
  // every row, stored into every block of the cluster (each block computes a
  // quarter of the head's decays: the sums were a quarter of the launch's
  // instructions when every block computed all 128), the output gate of the
  // block's channels (lowRankRow's sums, bit for bit) and β. Unfolded (or
  // unaligned) gates read f and the gate from memory.
  auto stageable = [&](const uint16_t *b, int64_t r) {
    return b && r <= kClusterStagedRank && r % 8 == 0 && dev::aligned16(b);
  };
  bool stagedF = stageable(p.fB, p.fRank), stagedG = stageable(p.gB, p.gRank);
  // Every row's inputs 16-byte aligned? Row tid checks its own pointers
  // (the barriers also publish the pointer table).
  bool rowF = true, rowG = true, rowV = true;
  if (tid < T) {
    const ChunkRowPtrs &q = ptr[tid];
    rowF = dev::aligned16(q.fA);
    rowG = dev::aligned16(q.gA);
    rowV = dev::aligned16(q.uq) && dev::aligned16(q.uk) && dev::aligned16(q.uv);
  }
  stagedF = __syncthreads_and(rowF) && stagedF;
  stagedG = __syncthreads_and(rowG) && stagedG;
  const bool vecInputs = __syncthreads_and(rowV);
  uint16_t *const fIn = reinterpret_cast<uint16_t *>(&sm.a[0][0]);
  uint16_t *const gIn = reinterpret_cast<uint16_t *>(&sm.b[0][0]);
  uint16_t *const fRows = reinterpret_cast<uint16_t *>(&sm.q[0][0]);
  uint16_t *const gRows = fRows + d * kStagedPitch;
  static_assert((kClusterHeadDim + kClusterCols) * kStagedPitch * 2 <=
                    2 * sizeof(ChunkShared::q),
                "the staged gate rows fit the room of q and k");
  static_assert(kClusterStagedRank * kChunkT * 2 <= sizeof(ChunkShared::a),
                "a row's staged gate input fits the room of A");
  auto stageRows = [&](uint16_t *dst, const uint16_t *src, int n,
                       int64_t rank) {
    const int per = static_cast<int>(rank / 8);
    for (int i = tid; i < n * per; i += kClusterThreads)
      reinterpret_cast<uint4 *>(dst + (i / per) * kStagedPitch)[i % per] =
          reinterpret_cast<const uint4 *>(src + (i / per) * rank)[i % per];
  };
  if (stagedF) {
    stageRanks(fIn, p.fRank, T, [&](int t) { return ptr[t].fA; });
    stageRows(fRows, p.fB + (c0 + j0) * p.fRank, J, p.fRank);
  }
  if (stagedG) {
    stageRanks(gIn, p.gRank, T, [&](int t) { return ptr[t].gA; });
    stageRows(gRows, p.gB + (c0 + j0) * p.gRank, J, p.gRank);
  }
  // The state slice [key][the block's columns] meanwhile.
  {
    const float *S = p.state + static_cast<int64_t>(h) * d * d + j0;
    for (int i = tid; i < d * J / 4; i += kClusterThreads) {
      const int c = i / (J / 4), q4 = i % (J / 4);
      *reinterpret_cast<float4 *>(&sm.s[c][4 * q4]) =
          *reinterpret_cast<const float4 *>(S + c * d + 4 * q4);
    }
  }
  __syncthreads();
  dev::clusterWait(); // every block has started: remote stores may begin
  const float aH = expf(p.aLog[h]);
  for (int i = tid; i < T * J; i += kClusterThreads) {
    const int t = i / J, jj = i % J;
    const int64_t c = c0 + j0 + jj;
    const uint16_t f =
        stagedF ? lowRankRow<true, true>(fRows + jj * kStagedPitch,
                                         fIn + t * p.fRank, p.fRank)
        : p.fB  ? lowRankRow(p.fB + c * p.fRank, ptr[t].fA, p.fRank)
                : ptr[t].f[c];
    const float g = gateF(f, p.dtBias[c], aH, p.hasLowerBound, p.lowerBound);
#pragma unroll
    for (unsigned b = 0; b < kClusterSlices; ++b)
      dev::storeCluster(&sm.g[t][j0 + jj], b, g);
  }
  for (int i = tid; i < T * J; i += kClusterThreads) {
    const int t = i / J, jj = i % J;
    const int64_t c = c0 + j0 + jj;
    uint16_t gt;
    if (p.gB) {
      gt = stagedG ? lowRankRow<true, true>(gRows + jj * kStagedPitch,
                                            gIn + t * p.gRank, p.gRank)
                   : lowRankRow(p.gB + c * p.gRank, ptr[t].gA, p.gRank);
      ptr[t].gateOut[c] = gt;
    } else {
      gt = ptr[t].gate[c];
    }
    sm.gt[t][jj] = dev::bf16ToF(gt);
  }
  if (tid < T)
    sm.beta[tid] = dev::sigmoidF(dev::bf16ToF(ptr[tid].betaLogit[h]));
  __syncthreads(); // done with the staged rows (the room of q and k)

  // 2. The convs: thread i < 128 q's channel i of the head, 128 <= i < 256
  // k's channel i - 128, each channel's rows in order from its history; v's
  // 32 channels of the block in 8 pieces of rows, thread i channel i % 32
  // and piece i / 32 (a conv reads inputs, never outputs: a piece's history
  // is the inputs before it, read before any piece writes). The rows'
  // inputs are staged first (independent loads).
  float hsMain[kClusterMaxTaps - 1], hsV[kClusterMaxTaps - 1];
  const bool isK = tid >= d;
  const int cc = tid & (d - 1);
  {
    float taps[kClusterMaxTaps] = {0.0f, 0.0f, 0.0f, 0.0f};
    auto loadHist = [&](const float *st, int64_t c,
                        float(&hs)[kClusterMaxTaps - 1]) {
#pragma unroll
      for (int i = 0; i < kClusterMaxTaps - 1; ++i)
        hs[i] = i < hist ? st[c * hist + i] : 0.0f;
    };
    const int64_t c = c0 + cc;
    float *x = isK ? &sm.k[0][cc] : &sm.q[0][cc];
    if (vecInputs) {
      // 16-byte pieces: q's and k's 16 of the head and v's 4 of the block's
      // columns per row, all loads of a thread issued together.
      constexpr int kPieces = 2 * d / 8 + J / 8;
#pragma unroll 4
      for (int i = tid; i < T * kPieces; i += kClusterThreads) {
        const int t = i / kPieces, q = i % kPieces;
        const uint16_t *src = q < d / 8 ? ptr[t].uq + c0 + 8 * q
                              : q < 2 * d / 8
                                  ? ptr[t].uk + c0 + 8 * (q - d / 8)
                                  : ptr[t].uv + c0 + j0 + 8 * (q - 2 * d / 8);
        float *dst = q < d / 8       ? &sm.q[t][8 * q]
                     : q < 2 * d / 8 ? &sm.k[t][8 * (q - d / 8)]
                                     : &sm.v[t][8 * (q - 2 * d / 8)];
        float x[8];
        dev::bf16x8ToF(*reinterpret_cast<const uint4 *>(src), x);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          dst[e] = x[e];
      }
    } else {
      for (int t = 0; t < T; ++t)
        x[t * d] = dev::bf16ToF(isK ? ptr[t].uk[c] : ptr[t].uq[c]);
      for (int i = tid; i < T * J; i += kClusterThreads)
        sm.v[i / J][i % J] = dev::bf16ToF(ptr[i / J].uv[c0 + j0 + i % J]);
    }
    __syncthreads();
    // v's piece: its history (the inputs before its first row, from the
    // conv state before row 0) and, threads 0-31, the history after the
    // chunk (the state written back below).
    constexpr int kPieces = kClusterThreads / J;
    const int vc = tid % J, piece = tid / J;
    const int per = (T + kPieces - 1) / kPieces;
    const int vBegin = min(T, piece * per), vEnd = min(T, vBegin + per);
    const float *stV = p.convStateV + (c0 + j0 + vc) * hist;
    float hsPiece[kClusterMaxTaps - 1];
#pragma unroll
    for (int i = 0; i < kClusterMaxTaps - 1; ++i) {
      const int r = vBegin - hist + i, e = T - hist + i;
      hsPiece[i] = i >= hist ? 0.0f : r >= 0 ? sm.v[r][vc] : stV[hist + r];
      hsV[i] = i >= hist ? 0.0f : e >= 0 ? sm.v[e][vc] : stV[hist + e];
    }
    __syncthreads();
    loadConvTaps(isK ? p.convK : p.convQ, c, W, taps);
    loadHist(isK ? p.convStateK : p.convStateQ, c, hsMain);
    convRows(x, d, T, taps, hsMain, hist);
    loadConvTaps(p.convV, c0 + j0 + vc, W, taps);
    convRows(&sm.v[vBegin][vc], J, vEnd - vBegin, taps, hsPiece, hist);
  }
  __syncthreads();

  // 3. G = the running sum of g over the rows (e^{G_T} kept), and each
  // row's l2norms of q̃ and k̃ (a warp per row), once every block's decays
  // are in every block (after which no block reads its staged gate inputs:
  // A and B may be stored over them).
  dev::clusterSync();
  if (tid < d) {
    float run = 0.0f;
    for (int t = 0; t < T; ++t) {
      run += sm.g[t][tid];
      sm.g[t][tid] = run;
    }
    sm.keep[tid] = expf(run);
  }
  {
    const float qScale = 1.0f / sqrtf(static_cast<float>(d));
    for (int t = warp; t < T; t += kClusterThreads / 32) {
      float sq = 0.0f, sk = 0.0f;
#pragma unroll
      for (int m = 0; m < d / 32; ++m) {
        const float xq = sm.q[t][lane + 32 * m], xk = sm.k[t][lane + 32 * m];
        sq = fmaf(xq, xq, sq);
        sk = fmaf(xk, xk, sk);
      }
      const float invQ = 1.0f / sqrtf(dev::warpSum(sq) + kKdaL2NormEps);
      const float invK = 1.0f / sqrtf(dev::warpSum(sk) + kKdaL2NormEps);
#pragma unroll
      for (int m = 0; m < d / 32; ++m) {
        float &xq = sm.q[t][lane + 32 * m];
        xq = scaled(xq * invQ, qScale);
        sm.k[t][lane + 32 * m] *= invK;
      }
    }
  }
  __syncthreads();

  // 4. A and B: groups of 8 lanes take the T(T+1)/2 pairs (s, r <= s) in
  // turn, 4 groups a warp and 128 in the cluster; lane l of a group sums
  // channels 4l + 32m + [0, 4) (16-byte loads) and the group adds its lanes
  // with three shuffles. A pair's A and B entries share their decay
  // e^{G_s − G_r} (exp2 of the difference: within a few ulps of expf, as
  // the chunk form is within rounding of the run form anyway). Each entry
  // is stored into every block of the cluster.
  {
    const int pairs = T * (T + 1) / 2;
    const int grp = lane >> 3, l = lane & 7;
    constexpr int kGroups = kClusterSlices * (kClusterThreads / 32) * 4;
    for (int base =
             (static_cast<int>(rank) * (kClusterThreads / 32) + warp) * 4;
         base < pairs; base += kGroups) {
      const int i = min(base + grp, pairs - 1);
      int s = static_cast<int>((sqrtf(8.0f * i + 1.0f) - 1.0f) * 0.5f);
      while (s * (s + 1) / 2 > i)
        --s;
      while ((s + 1) * (s + 2) / 2 <= i)
        ++s;
      const int r = i - s * (s + 1) / 2;
      float accA = 0.0f, accB = 0.0f;
#pragma unroll
      for (int m = 0; m < d / 32; ++m) {
        const int c = 4 * l + 32 * m;
        const float4 gs = *reinterpret_cast<const float4 *>(&sm.g[s][c]);
        const float4 gr = *reinterpret_cast<const float4 *>(&sm.g[r][c]);
        const float4 ks = *reinterpret_cast<const float4 *>(&sm.k[s][c]);
        const float4 kr = *reinterpret_cast<const float4 *>(&sm.k[r][c]);
        const float4 qs = *reinterpret_cast<const float4 *>(&sm.q[s][c]);
        const float e0 = dev::exp2Approx((gs.x - gr.x) * kLog2e);
        const float e1 = dev::exp2Approx((gs.y - gr.y) * kLog2e);
        const float e2 = dev::exp2Approx((gs.z - gr.z) * kLog2e);
        const float e3 = dev::exp2Approx((gs.w - gr.w) * kLog2e);
        accA = fmaf(ks.x * kr.x, e0, accA);
        accB = fmaf(qs.x * kr.x, e0, accB);
        accA = fmaf(ks.y * kr.y, e1, accA);
        accB = fmaf(qs.y * kr.y, e1, accB);
        accA = fmaf(ks.z * kr.z, e2, accA);
        accB = fmaf(qs.z * kr.z, e2, accB);
        accA = fmaf(ks.w * kr.w, e3, accA);
        accB = fmaf(qs.w * kr.w, e3, accB);
      }
#pragma unroll
      for (int o = 4; o > 0; o >>= 1) {
        accA += __shfl_xor_sync(0xffffffffu, accA, o);
        accB += __shfl_xor_sync(0xffffffffu, accB, o);
      }
      if (l < kClusterSlices && base + grp < pairs) {
        dev::storeCluster(&sm.b[s][r], l, accB);
        if (r < s)
          dev::storeCluster(&sm.a[s][r], l, accA);
      }
    }
  }
  // Every A / B entry is in every block, and every block has read its conv
  // histories (the owners write them below).
  dev::clusterSync();
  if (!isK && (cc >> 5) == static_cast<int>(rank)) {
    float *st = p.convStateQ + (c0 + cc) * hist;
    for (int i = 0; i < hist; ++i)
      st[i] = hsMain[i];
  } else if (isK && (cc >> 5) == static_cast<int>(rank)) {
    float *st = p.convStateK + (c0 + cc) * hist;
    for (int i = 0; i < hist; ++i)
      st[i] = hsMain[i];
  }
  if (tid < J) {
    float *st = p.convStateV + (c0 + j0 + tid) * hist;
    for (int i = 0; i < hist; ++i)
      st[i] = hsV[i];
  }

  // 5. q ← e^G ⊙ q, k ← e^G ⊙ k, g ← e^{G_T − G} ⊙ k (G_T read first).
  {
    const int c = tid & (d - 1);
    const float GT = sm.g[T - 1][c];
    __syncthreads();
    for (int t = tid >> 7; t < T; t += kClusterThreads / d) {
      const float G = sm.g[t][c], e = expf(G), kk = sm.k[t][c];
      sm.q[t][c] *= e;
      sm.k[t][c] = e * kk;
      sm.g[t][c] = expf(GT - G) * kk;
    }
  }
  __syncthreads();

  // 6. Thread (column lane, warp) takes rows warp + 8m: S0ᵀ(e^G ⊙ k) into
  // w = v − it, S0ᵀ(e^G ⊙ q) kept for o.
  constexpr int kRowsPerWarp = kChunkT / (kClusterThreads / 32);
  float accO[kRowsPerWarp];
  {
    float accU[kRowsPerWarp];
#pragma unroll
    for (int m = 0; m < kRowsPerWarp; ++m)
      accU[m] = accO[m] = 0.0f;
    // Four key channels per step: a row's four as one 16-byte broadcast
    // load (the sums keep their order, c ascending).
    for (int c = 0; c < d; c += 4) {
      const float sv0 = sm.s[c][lane], sv1 = sm.s[c + 1][lane],
                  sv2 = sm.s[c + 2][lane], sv3 = sm.s[c + 3][lane];
#pragma unroll
      for (int m = 0; m < kRowsPerWarp; ++m) {
        const int t = warp + 8 * m;
        if (t < T) {
          const float4 k4 = *reinterpret_cast<const float4 *>(&sm.k[t][c]);
          const float4 q4 = *reinterpret_cast<const float4 *>(&sm.q[t][c]);
          accU[m] = fmaf(k4.x, sv0, accU[m]);
          accO[m] = fmaf(q4.x, sv0, accO[m]);
          accU[m] = fmaf(k4.y, sv1, accU[m]);
          accO[m] = fmaf(q4.y, sv1, accO[m]);
          accU[m] = fmaf(k4.z, sv2, accU[m]);
          accO[m] = fmaf(q4.z, sv2, accO[m]);
          accU[m] = fmaf(k4.w, sv3, accU[m]);
          accO[m] = fmaf(q4.w, sv3, accO[m]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kRowsPerWarp; ++m) {
      const int t = warp + 8 * m;
      if (t < T)
        sm.w[t][lane] = sm.v[t][lane] - accU[m];
    }
  }
  __syncthreads();

  // 7. The UT transform, column by column (they are independent): warp w
  // takes columns 4w..4w+3, eight lanes a column (lane = 4 · part + the
  // column's index), lane part l summing the earlier rows r ≡ l (mod 8).
  {
    const int col = 4 * warp + (lane & 3), part = lane >> 2;
    for (int s = 0; s < T; ++s) {
      float acc = 0.0f;
      for (int r = part; r < s; r += 8)
        acc = fmaf(sm.a[s][r], sm.w[r][col], acc);
      acc += __shfl_xor_sync(0xffffffffu, acc, 16);
      acc += __shfl_xor_sync(0xffffffffu, acc, 8);
      acc += __shfl_xor_sync(0xffffffffu, acc, 4);
      if (part == 0)
        sm.w[s][col] = (sm.w[s][col] - acc) * sm.beta[s];
      __syncwarp();
    }
  }
  __syncthreads();

  // 8. o_t = S0ᵀ(e^G ⊙ q_t) + Σ_{s<=t} B[t][s] w_s, rounded; each block's
  // Σ o² of a row into every block.
#pragma unroll
  for (int m = 0; m < kRowsPerWarp; ++m) {
    const int t = warp + 8 * m;
    if (t >= T)
      continue;
    float o = accO[m];
    for (int s = 0; s <= t; ++s)
      o = fmaf(sm.b[t][s], sm.w[s][lane], o);
    const float x = dev::bf16ToF(dev::fToBf16(o));
    sm.o[t][lane] = x;
    const float part = dev::warpSum(fmaf(x, x, 0.0f));
    if (lane < kClusterSlices)
      dev::storeCluster(&sm.ss[t][rank], lane, part);
  }

  // 9. The state after the chunk: thread (column lane, warp) takes the 16
  // key rows 16·warp + [0, 16), each row's sum over s in order; a row s of
  // e^{G_T − G_s} ⊙ k_s is read as four 16-byte broadcast loads.
  {
    constexpr int kKeyRows = d / (kClusterThreads / 32);
    const int cb = kKeyRows * warp;
    float x[kKeyRows];
#pragma unroll
    for (int i = 0; i < kKeyRows; ++i)
      x[i] = sm.keep[cb + i] * sm.s[cb + i][lane];
    for (int s = 0; s < T; ++s) {
      const float wv = sm.w[s][lane];
#pragma unroll
      for (int i = 0; i < kKeyRows; i += 4) {
        const float4 g4 = *reinterpret_cast<const float4 *>(&sm.g[s][cb + i]);
        x[i] = fmaf(g4.x, wv, x[i]);
        x[i + 1] = fmaf(g4.y, wv, x[i + 1]);
        x[i + 2] = fmaf(g4.z, wv, x[i + 2]);
        x[i + 3] = fmaf(g4.w, wv, x[i + 3]);
      }
    }
    float *S = p.state + static_cast<int64_t>(h) * d * d + j0 + lane;
#pragma unroll
    for (int i = 0; i < kKeyRows; ++i)
      S[(cb + i) * d] = x[i];
  }
  dev::clusterSync(); // every row's Σ o² is in every block; the last
                      // access to another block's shared memory

  // 10. Each row's gated norm of the block's channels.
  {
    const float normW = dev::vectorAt(p.normWeight, j0 + lane);
    for (int t = warp; t < T; t += kClusterThreads / 32) {
      const float rr =
          1.0f / sqrtf(headSum(sm.ss[t]) / static_cast<float>(d) + p.normEps);
      const float y =
          sm.o[t][lane] * rr * normW * dev::sigmoidF(sm.gt[t][lane]);
      ptr[t].out[c0 + j0 + lane] = dev::fToBf16(y);
    }
  }
}
