//===- Gemv.cu - Decode projections (CUDA) --------------------------------===//
//
// k3_linear and k3_linear_multi: y = W · x̂ at batch 1 (GemvParams.h), where
// x̂ is x or, with a folded pre-norm, R(R(x · rsqrt(mean x² + eps)) · w_norm).
// These kernels stream (almost) every weight byte of a decode step, so they
// are built around HBM bandwidth:
//  * x̂ is computed once per block and staged in shared memory as bf16 (it is
//    a bf16 value, so nothing is lost), in chunks of kChunk columns;
//  * one warp reads one weight row (or a 1/slices share of it, see below)
//    with 16-byte streaming loads, kUnroll* of them in flight per lane, and
//    accumulates in fp32 registers; a warp shuffle reduces the row;
//  * MXFP4 rows are read as one 16-byte packed block (32 codes) plus its
//    scale byte per lane, decoded with integer ops (no tables).
// The results differ from the CPU only by summation order (and FMA
// contraction): the CPU sums in 8 lanes, these kernels per lane and warp.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CudaWeights.cuh"
#include "kernels/common/MmaTile.cuh"
#include "kernels/gemv/GemvParams.h"

using namespace k3;

namespace {

/// Most warps of a block (blockDim.x <= 1024).
constexpr int kMaxWarps = 32;
/// Columns of x̂ staged at once (bf16, 24 KiB of shared memory). Every K3
/// projection input fits (7168, 12288, 3584, 3072, 6144); only an unfused
/// dense down_proj (33792) takes several chunks.
constexpr int kChunk = 12288;
/// 16-byte weight loads in flight per lane: a warp keeps 3 KiB (bf16) or
/// 2 KiB + scales (MXFP4) outstanding, 96 / 64 KiB per SM at the 4 blocks
/// of 256 threads an SM holds (64 registers), well over what HBM latency
/// needs. (8 would need more than the 64 registers that 1024-thread blocks
/// allow.)
/// (K3C_TUNE_* macros override tuning constants in a variant build of this
/// family, measured with K3C_PTX_DIR; the shipped PTX uses the values here.)
#ifdef K3C_TUNE_GEMV_UNROLL_BF16
constexpr int kUnrollBf16 = K3C_TUNE_GEMV_UNROLL_BF16;
#else
constexpr int kUnrollBf16 = 6;
#endif
constexpr int kUnrollMxfp4 = 4;
/// 16-byte loads per lane and batch of the streamed bf16 path (streamRows):
/// two batches are in flight while one is summed, so a warp keeps 2 · 1.5 KiB
/// outstanding across its rows.
#ifdef K3C_TUNE_GEMV_STREAM_UNROLL
constexpr int kStreamUnroll = K3C_TUNE_GEMV_STREAM_UNROLL;
#else
constexpr int kStreamUnroll = 3;
#endif
/// Whether the streamed path issues each warp's first weight loads before
/// the PDL wait (the weights depend on no earlier kernel).
#ifdef K3C_TUNE_GEMV_PREWAIT
constexpr bool kStreamPrewait = K3C_TUNE_GEMV_PREWAIT != 0;
#else
constexpr bool kStreamPrewait = true;
#endif
/// Whether a normalising launch asks L1 for its norm weight before the PDL
/// wait, so the staging after the norm factor's reduction reads it from L1
/// (not an L2 round trip on the launch's critical path).
#ifdef K3C_TUNE_GEMV_NORM_L1
constexpr bool kNormL1 = K3C_TUNE_GEMV_NORM_L1 != 0;
#else
constexpr bool kNormL1 = true;
#endif
/// Whether the streamed path is used at all (0: every launch takes the
/// general path, to measure one against the other).
#ifdef K3C_TUNE_GEMV_STREAM
constexpr bool kStream = K3C_TUNE_GEMV_STREAM != 0;
#else
constexpr bool kStream = true;
#endif
/// The largest block the entry points launch with (their register budget:
/// 64 per thread at 1024).
#ifdef K3C_TUNE_GEMV_MAX_THREADS
constexpr int kMaxThreads = K3C_TUNE_GEMV_MAX_THREADS;
#else
constexpr int kMaxThreads = 1024;
#endif
static_assert(kChunk % 32 == 0, "a chunk holds whole MXFP4 blocks");

//===----------------------------------------------------------------------===//
// The staged input's layout
//===----------------------------------------------------------------------===//

using dev::aligned16;
using dev::hiF;
using dev::loF;

/// Shared-memory slot of 16-byte chunk `c` of x̂. The MXFP4 path has lane l
/// read chunks 4l .. 4l+3 (one 32-column block), which unswizzled would put
/// four lanes of every 8-lane phase on the same banks; XOR-ing the chunk's
/// position in its block with bits 3-4 of its index spreads them over all
/// 32 banks. Consecutive chunks (the bf16 path) stay within the same aligned
/// 128 bytes, so that path stays conflict-free too.
__device__ __forceinline__ int swz(int c) { return c ^ ((c >> 3) & 3); }

/// Shared index (in bf16 elements) of column j of the staged chunk.
__device__ __forceinline__ int stagedIndex(int j) {
  return swz(j >> 3) * 8 + (j & 7);
}

//===----------------------------------------------------------------------===//
// Prologue: the norm factor and the staged input
//===----------------------------------------------------------------------===//

/// rsqrt(mean(x²) + eps) as the CPU computes it (1 / sqrt, both IEEE), the
/// sum of squares in fp32 over the block. Every block gets the same bits.
__device__ float rmsFactor(const uint16_t *x, int64_t k, float eps,
                           float *scratch) {
  float s = 0.0f;
  int64_t j = 0;
  if (aligned16(x)) {
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    const int64_t nv = k >> 3;
    for (int64_t c = threadIdx.x; c < nv; c += blockDim.x) {
      s = dev::sumSquares8(__ldg(xv + c), s);
    }
    j = nv << 3;
  }
  for (j += threadIdx.x; j < k; j += blockDim.x) {
    const float a = dev::bf16ToF(__ldg(x + j));
    s += a * a;
  }
  s = dev::blockSum(s, scratch);
  return 1.0f / sqrtf(s / static_cast<float>(k) + eps);
}

/// Stages x̂[c0, c0 + len) into `xs` (swizzled): x itself, or its RMSNorm
/// when `normW` is given (r from rmsFactor). The caller synchronises.
__device__ void stageInput(const uint16_t *x, const uint16_t *normW, float r,
                           int64_t c0, int len, uint4 *xs) {
  uint16_t *xh = reinterpret_cast<uint16_t *>(xs);
  int j = 0;
  if (aligned16(x) && (!normW || aligned16(normW))) {
    // c0 is a multiple of 8, so the chunk starts 16-byte aligned as well.
    const uint4 *xv = reinterpret_cast<const uint4 *>(x + c0);
    const uint4 *wv =
        normW ? reinterpret_cast<const uint4 *>(normW + c0) : nullptr;
    const int nv = len >> 3;
    for (int c = threadIdx.x; c < nv; c += blockDim.x) {
      uint4 v = __ldg(xv + c);
      if (normW) {
        const uint4 w = __ldg(wv + c);
        v = dev::rmsNormChunk(v, w, r);
      }
      xs[swz(c)] = v;
    }
    j = nv << 3;
  }
  for (j += threadIdx.x; j < len; j += blockDim.x) {
    uint16_t v = __ldg(x + c0 + j);
    if (normW)
      v = static_cast<uint16_t>(dev::rmsNormBf16(
          dev::bf16ToF(v), dev::bf16ToF(__ldg(normW + c0 + j)), r));
    xh[stagedIndex(j)] = v;
  }
}

//===----------------------------------------------------------------------===//
// Row dot products over one staged chunk
//===----------------------------------------------------------------------===//

/// Where a row's result goes (one `linear` row or one row of an entry of a
/// `linear_multi`).
struct RowTarget {
  WeightRef w;
  int64_t row = 0; ///< row of `w`
  uint16_t *out = nullptr;
  float *outF32 = nullptr;
  const uint16_t *residual = nullptr;
};

/// acc[0..3] += the products of one 16-byte chunk of 8 bf16 weights and its
/// 8 staged inputs, element 2i + h into acc[2(i % 2) + h]: the summation
/// order both bf16 paths (dotBf16, sumBatch) share, so they agree bit for
/// bit.
__device__ __forceinline__ void dot8(const uint4 &w, const uint4 &x,
                                     float *acc) {
  acc[0] = fmaf(loF(w.x), loF(x.x), acc[0]);
  acc[1] = fmaf(hiF(w.x), hiF(x.x), acc[1]);
  acc[2] = fmaf(loF(w.y), loF(x.y), acc[2]);
  acc[3] = fmaf(hiF(w.y), hiF(x.y), acc[3]);
  acc[0] = fmaf(loF(w.z), loF(x.z), acc[0]);
  acc[1] = fmaf(hiF(w.z), hiF(x.z), acc[1]);
  acc[2] = fmaf(loF(w.w), loF(x.w), acc[2]);
  acc[3] = fmaf(hiF(w.w), hiF(x.w), acc[3]);
}

/// acc[0..3] += Σ_j W[j] · x̂[j] over the 16-byte chunks [cBeg, cEnd) of a
/// 16-byte aligned bf16 row (cBeg % 32 == 0): lane l reads chunks
/// cBeg + l, cBeg + 32 + l, ..., kUnrollBf16 loads in flight.
__device__ __forceinline__ void dotBf16(const uint16_t *wrow, int cBeg,
                                        int cEnd, const uint4 *xs, int lane,
                                        float *acc) {
  const uint4 *wv = reinterpret_cast<const uint4 *>(wrow) + lane;
  for (int c = cBeg; c < cEnd; c += 32 * kUnrollBf16) {
    // Chunk c + 32u + lane exists iff 32u < rest; its x̂ slot is
    // swz(c + lane) + 32u (swz keeps bits 5 and up).
    const int rest = cEnd - c - lane;
    const uint4 *xv = xs + swz(c + lane);
    uint4 w[kUnrollBf16];
#pragma unroll
    for (int u = 0; u < kUnrollBf16; ++u)
      w[u] = 32 * u < rest ? dev::ldStream16<true>(wv + c + 32 * u)
                           : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < kUnrollBf16; ++u) {
      if (32 * u < rest) {
        const uint4 x = xv[32 * u];
        dot8(w[u], x, acc);
      }
    }
  }
}

/// acc += Σ_j W[j] · x̂[j] over the 32-column blocks [bBeg, bEnd) of an
/// MXFP4 row (bBeg % 32 == 0; `packed` 16-byte aligned, `scale` one byte per
/// block): lane l takes blocks bBeg + l, bBeg + 32 + l, ... Each block's sum
/// is formed with the codes scaled by 2^-14 and then multiplied by
/// 2^14 · scale, which is exact (powers of two) short of fp32 under/overflow,
/// so it equals the CPU's dequantise-then-multiply up to summation order.
__device__ __forceinline__ void dotMxfp4(const uint8_t *packed,
                                         const uint8_t *scale, int bBeg,
                                         int bEnd, const uint4 *xs, int lane,
                                         float &acc) {
  const uint4 *pv = reinterpret_cast<const uint4 *>(packed) + lane;
  const uint8_t *sv = scale + lane;
  for (int b = bBeg; b < bEnd; b += 32 * kUnrollMxfp4) {
    // Block b + 32u + lane exists iff 32u < rest; its four x̂ chunks are
    // 4(b + lane) + i, in slots swz(4(b + lane) + i) + 128u.
    const int rest = bEnd - b - lane;
    const int x0 = 4 * (b + lane);
    uint4 q[kUnrollMxfp4];
    uint32_t s[kUnrollMxfp4];
#pragma unroll
    for (int u = 0; u < kUnrollMxfp4; ++u) {
      q[u] = 32 * u < rest ? dev::ldStream16<true>(pv + b + 32 * u)
                           : make_uint4(0, 0, 0, 0);
      s[u] = 32 * u < rest ? dev::ldStreamU8(sv + b + 32 * u) : 0u;
    }
#pragma unroll
    for (int u = 0; u < kUnrollMxfp4; ++u) {
      if (32 * u < rest) {
        const uint4 *xv = xs + 128 * u;
        float p0 = dev::mxfp4Dot8(q[u].x, xv[swz(x0 + 0)], 0.0f);
        float p1 = dev::mxfp4Dot8(q[u].y, xv[swz(x0 + 1)], 0.0f);
        p0 = dev::mxfp4Dot8(q[u].z, xv[swz(x0 + 2)], p0);
        p1 = dev::mxfp4Dot8(q[u].w, xv[swz(x0 + 3)], p1);
        acc = fmaf((p0 + p1) * 16384.0f, dev::e8m0ToF(s[u]), acc);
      }
    }
  }
}

/// acc += Σ_j W[row, c0 + j] · x̂[j] for j in [jBeg, jEnd), element by
/// element: the fallback for rows the vector paths cannot read (k % 8 != 0
/// for bf16, or a matrix that is not 16-byte aligned).
__device__ void dotScalar(const WeightRef &w, int64_t k, int64_t row,
                          int64_t c0, int jBeg, int jEnd, const uint4 *xs,
                          int lane, float &acc) {
  const uint16_t *xh = reinterpret_cast<const uint16_t *>(xs);
  for (int j = jBeg + lane; j < jEnd; j += 32)
    acc = fmaf(dev::weightAt(w, k, row, c0 + j),
               dev::bf16ToF(xh[stagedIndex(j)]), acc);
}

/// Share `slice` of `slices` of [0, units): contiguous, in whole runs of 32
/// units (one per lane).
__device__ __forceinline__ int2 share(int units, int slice, int slices) {
  const int runs = (units + 31) >> 5;
  const int per = (runs + slices - 1) / slices;
  const int beg = min(slice * per, runs) * 32;
  const int end = min((slice + 1) * per * 32, units);
  return make_int2(beg, end);
}

/// acc += this warp's share of Σ_j W[row, c0 + j] · x̂[j] for j < len.
__device__ __forceinline__ void rowDot(const RowTarget &t, int64_t k,
                                       int64_t c0, int len, const uint4 *xs,
                                       int slice, int slices, int lane,
                                       float *acc) {
  if (t.w.format == kWeightMxfp4) {
    if (k % 32 == 0 && aligned16(t.w.packed)) {
      const int2 s = share(len >> 5, slice, slices);
      dotMxfp4(t.w.packed + t.row * (k / 2) + c0 / 2,
               t.w.scale + t.row * (k / 32) + c0 / 32, s.x, s.y, xs, lane,
               acc[0]);
      return;
    }
  } else if (k % 8 == 0 && aligned16(t.w.bf16)) {
    const int2 s = share(len >> 3, slice, slices);
    dotBf16(t.w.bf16 + t.row * k + c0, s.x, s.y, xs, lane, acc);
    return;
  }
  const int2 s = share(len, slice, slices);
  dotScalar(t.w, k, t.row, c0, s.x, s.y, xs, lane, acc[0]);
}

/// Writes a finished row: fp32 as is, or bf16 R(y) / R(R(y) + residual).
__device__ __forceinline__ void storeRow(const RowTarget &t, float y) {
  if (t.outF32) {
    t.outF32[t.row] = y;
    return;
  }
  float v = dev::roundBf16(y);
  if (t.residual)
    v = v + dev::bf16ToF(t.residual[t.row]);
  t.out[t.row] = dev::fToBf16(v);
}

//===----------------------------------------------------------------------===//
// The shared body of both entry points
//===----------------------------------------------------------------------===//

/// Rows of a `linear`.
struct LinearRows {
  LinearParams p;
  __device__ int64_t count() const { return p.n; }
  __device__ RowTarget at(int64_t r) const {
    RowTarget t;
    t.w = p.w;
    t.row = r;
    t.out = p.out;
    t.outF32 = p.outF32;
    t.residual = p.residual;
    return t;
  }
  /// Whether every row can take the streamed bf16 path.
  __device__ bool streamable(int64_t k) const {
    return p.w.format != kWeightMxfp4 && k % 8 == 0 && aligned16(p.w.bf16);
  }
};

/// Rows of a `linear_multi`: the entries' rows one after the other.
struct MultiRows {
  LinearMultiParams p;
  __device__ int64_t count() const {
    int64_t n = 0;
#pragma unroll
    for (int e = 0; e < kLinearMultiMax; ++e)
      n += e < p.count ? p.entries[e].n : 0;
    return n;
  }
  __device__ RowTarget at(int64_t r) const {
    // Unrolled with constant indices: the params stay in the constant bank
    // (a dynamic index would copy them to local memory).
    RowTarget t;
    bool found = false;
#pragma unroll
    for (int e = 0; e < kLinearMultiMax; ++e) {
      if (!found && e < p.count) {
        if (r < p.entries[e].n) {
          t.w = p.entries[e].w;
          t.row = r;
          t.out = p.entries[e].out;
          found = true;
        } else {
          r -= p.entries[e].n;
        }
      }
    }
    return t;
  }
  /// Whether every entry's rows can take the streamed bf16 path.
  __device__ bool streamable(int64_t k) const {
    bool ok = k % 8 == 0;
#pragma unroll
    for (int e = 0; e < kLinearMultiMax; ++e)
      if (e < p.count)
        ok = ok && p.entries[e].w.format != kWeightMxfp4 &&
             aligned16(p.entries[e].w.bf16);
    return ok;
  }
};

//===----------------------------------------------------------------------===//
// The streamed bf16 path: a warp's rows as one stream of load batches
//===----------------------------------------------------------------------===//

/// 16-byte chunks [c, c + 32·kStreamUnroll) of a bf16 row of `chunks`
/// chunks, lane l taking c + l, c + 32 + l, ... (zero past the end). Ordered
/// loads, so the batch issued before the PDL wait stays before it.
__device__ __forceinline__ void loadBatch(uint4 (&w)[kStreamUnroll],
                                          const uint16_t *wrow, int c,
                                          int chunks, int lane) {
  const uint4 *wv = reinterpret_cast<const uint4 *>(wrow) + c + lane;
  const int rest = chunks - c - lane;
#pragma unroll
  for (int u = 0; u < kStreamUnroll; ++u) {
    if (32 * u < rest)
      w[u] = dev::ldStream16Ordered(wv + 32 * u);
    else
      w[u] = make_uint4(0, 0, 0, 0);
  }
}

/// acc += the batch at chunk c times the staged x̂ (as dotBf16).
__device__ __forceinline__ void sumBatch(const uint4 (&w)[kStreamUnroll],
                                         const uint4 *xs, int c, int chunks,
                                         int lane, float *acc) {
  const int rest = chunks - c - lane;
  const uint4 *xv = xs + swz(c + lane);
#pragma unroll
  for (int u = 0; u < kStreamUnroll; ++u) {
    if (32 * u < rest) {
      const uint4 x = xv[32 * u];
      dot8(w[u], x, acc);
    }
  }
}

/// y = W x̂ for the rows row, row + rowStep, ... of `rows` (one warp each,
/// every row bf16, 16-byte aligned, k % 8 == 0 and k <= kChunk, so x̂ is
/// staged once). The general path reads a row in batches of kUnrollBf16
/// loads and waits for each batch before it sums it, so a warp pays the
/// memory latency once per batch and again for the next row; here the warp
/// loads batch i + 1 (of this row or of its next) before it sums batch i,
/// and its first batch before it stages x̂ — before the PDL wait too
/// (kStreamPrewait): the weights depend on no earlier kernel. The sums are
/// those of dotBf16 (same lanes, same order), so both paths agree bit for
/// bit.
template <typename Rows>
__device__ void streamRows(const Rows &rows, const uint16_t *x, int64_t k,
                           const uint16_t *normW, float eps, int64_t row,
                           int64_t rowStep, uint4 *xs, float *scratch) {
  const int lane = threadIdx.x & 31;
  const int64_t total = rows.count();
  const int chunks = static_cast<int>(k >> 3);
  const bool active = row < total;
  // Only row indices live across the loop; the row's pointers are looked up
  // where they are used (params in the constant bank, no register copies).
  auto rowPtr = [&](int64_t r) {
    const RowTarget t = rows.at(r);
    return t.w.bf16 + t.row * k;
  };
  uint4 cur[kStreamUnroll], nxt[kStreamUnroll];
  if (active && kStreamPrewait)
    loadBatch(cur, rowPtr(row), 0, chunks, lane);
  if (kNormL1 && normW && threadIdx.x < 32)
    dev::prefetchL1Warp(normW, 2 * k);
  dev::waitForPriorGrids();
  if (active && !kStreamPrewait)
    loadBatch(cur, rowPtr(row), 0, chunks, lane);
  const float r = normW ? rmsFactor(x, k, eps, scratch) : 0.0f;
  stageInput(x, normW, r, 0, static_cast<int>(k), xs);
  __syncthreads();
  if (!active)
    return;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int c = 0;;) {
    // The next batch: the rest of this row, else the start of the next.
    int cn = c + 32 * kStreamUnroll;
    int64_t rn = row;
    if (cn >= chunks) {
      cn = 0;
      rn = row + rowStep;
    }
    const bool more = rn < total;
    if (more)
      loadBatch(nxt, rowPtr(rn), cn, chunks, lane);
    sumBatch(cur, xs, c, chunks, lane, acc);
    if (cn == 0) {
      const float y = dev::warpSum((acc[0] + acc[1]) + (acc[2] + acc[3]));
      if (lane == 0)
        storeRow(rows.at(row), y);
      acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    }
    if (!more)
      return;
    c = cn;
    row = rn;
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u)
      cur[u] = nxt[u];
  }
}

/// y = W x̂ for every row of `rows`.
///
/// Work split: a block takes `perBlock` rows at a time (block-stride over
/// row groups); each row is read by `slices` consecutive warps, each summing
/// a contiguous share of it, combined in a fixed order through shared
/// memory (deterministic). slices is the largest power of two (dividing the
/// warp count) that the grid can give every row: 1 with the compiler's grid
/// ceil(n / 8) × 256 threads (a warp per row), more for a larger grid on a
/// short matrix. x̂ is staged once per block when k <= kChunk, otherwise
/// chunk by chunk for every row group.
template <typename Rows>
__device__ void gemvBody(const Rows &rows, const uint16_t *x, int64_t k,
                         const uint16_t *normW, float eps) {
  __shared__ uint4 xs[kChunk / 8];
  __shared__ float partial[kMaxWarps];
  __shared__ float scratch[32];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  const int64_t total = rows.count();
  const int64_t gridWarps = static_cast<int64_t>(gridDim.x) * warps;
  int slices = 1;
  while (slices * 2 <= warps && warps % (slices * 2) == 0 &&
         gridWarps >= static_cast<int64_t>(slices) * 2 * total)
    slices *= 2;
  const int perBlock = warps / slices;
  const int slot = warp / slices, slice = warp % slices;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * perBlock;
  dev::allowDependentLaunch();
  if (first >= total)
    return; // the whole block: no row for it
  if (kStream && slices == 1 && k <= kChunk && rows.streamable(k)) {
    streamRows(rows, x, k, normW, eps, first + slot,
               static_cast<int64_t>(gridDim.x) * perBlock, xs, scratch);
    return;
  }

  // No L2 prefetch of the weights before the wait: asking for each warp's
  // first 4 KiB there made the Kimi-Linear-48B step slower (3410 -> 3477 µs
  // on the H200, docs/PERF.md), also when only the blocks of the first wave
  // asked (3480); the loads' own depth keeps HBM busy.
  if (kNormL1 && normW && threadIdx.x < 32)
    dev::prefetchL1Warp(normW, 2 * k);
  dev::waitForPriorGrids();
  const float r = normW ? rmsFactor(x, k, eps, scratch) : 0.0f;

  int64_t stagedAt = -1;
  for (int64_t base = first; base < total;
       base += static_cast<int64_t>(gridDim.x) * perBlock) {
    const int64_t row = base + slot;
    const bool active = row < total;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
      const int len = static_cast<int>(k - c0 < kChunk ? k - c0 : kChunk);
      if (c0 != stagedAt) {
        __syncthreads(); // every warp is done with the previous chunk
        stageInput(x, normW, r, c0, len, xs);
        __syncthreads();
        stagedAt = c0;
      }
      if (active)
        rowDot(rows.at(row), k, c0, len, xs, slice, slices, lane, acc);
    }
    float y = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    y = dev::warpSum(y);
    if (slices == 1) {
      if (active && lane == 0)
        storeRow(rows.at(row), y);
      continue;
    }
    if (lane == 0)
      partial[warp] = y;
    __syncthreads();
    if (active && slice == 0 && lane == 0) {
      float sum = 0.0f;
      for (int s = 0; s < slices; ++s)
        sum += partial[warp + s];
      storeRow(rows.at(row), sum);
    }
    __syncthreads(); // partial is rewritten by the next row group
  }
}

//===----------------------------------------------------------------------===//
// Several tokens per launch (the multi-row forms)
//===----------------------------------------------------------------------===//

/// Blocks of 256 threads an SM should hold of the multi-row forms (so at
/// most 85 registers per thread): 24 warps streaming, as the single-row
/// kernel's 4 blocks of 64-register threads keep 32.
#ifdef K3C_TUNE_GEMV_ROWS_MIN_BLOCKS
constexpr int kRowsMinBlocks = K3C_TUNE_GEMV_ROWS_MIN_BLOCKS;
#else
constexpr int kRowsMinBlocks = 2;
#endif

/// Where token t's activations are: the offsets (elements) of its x,
/// residual and out / outF32 from token 0's.
struct TokenStrides {
  int64_t x = 0, residual = 0, out = 0;
};

/// `t` moved to token `tok`.
__device__ __forceinline__ RowTarget atToken(RowTarget t, int tok,
                                             const TokenStrides &s) {
  if (t.out)
    t.out += tok * s.out;
  if (t.outF32)
    t.outF32 += tok * s.out;
  if (t.residual)
    t.residual += tok * s.residual;
  return t;
}

/// `rows` moved to token `tok` (for the per-token fallback).
__device__ __forceinline__ LinearRows atToken(LinearRows r, int tok,
                                              const TokenStrides &s) {
  if (r.p.out)
    r.p.out += tok * s.out;
  if (r.p.outF32)
    r.p.outF32 += tok * s.out;
  if (r.p.residual)
    r.p.residual += tok * s.residual;
  return r;
}
__device__ __forceinline__ MultiRows atToken(MultiRows r, int tok,
                                             const TokenStrides &s) {
#pragma unroll
  for (int e = 0; e < kLinearMultiMax; ++e)
    if (e < r.p.count)
      r.p.entries[e].out += tok * s.out;
  return r;
}

using dev::dynamicSmemBytes;

/// y = W x̂_t for `tokens` tokens: streamRows with the tokens of a pass
/// (up to kGemvRowsPerPass, x̂ of each staged in `xs`, gemvRowsTokenChunks(k)
/// chunks apart) summed against each batch of weights a warp loads. Per token
/// the lanes, the order and the reduction are streamRows', so every token's
/// output is k3_linear's for that token bit for bit. A warp's rows are those
/// of the single-row launch with the same grid; more tokens than a pass
/// holds take more passes over the weights.
template <typename Rows>
__device__ void streamRowsTokens(const Rows &rows, int tokens,
                                 const TokenStrides &ts, const uint16_t *x,
                                 int64_t k, const uint16_t *normW, float eps,
                                 int64_t first, int64_t rowStep, uint4 *xs,
                                 float *scratch) {
  const int lane = threadIdx.x & 31;
  const int64_t total = rows.count();
  const int chunks = static_cast<int>(k >> 3);
  const int tokChunks = static_cast<int>(gemvRowsTokenChunks(k));
  const bool active = first < total;
  auto rowPtr = [&](int64_t r) {
    const RowTarget t = rows.at(r);
    return t.w.bf16 + t.row * k;
  };
  uint4 cur[kStreamUnroll], nxt[kStreamUnroll];
  if (active)
    loadBatch(cur, rowPtr(first), 0, chunks, lane);
  dev::waitForPriorGrids();
  for (int t0 = 0; t0 < tokens; t0 += kGemvRowsPerPass) {
    const int n = min(kGemvRowsPerPass, tokens - t0);
    if (t0 > 0) {
      __syncthreads(); // every warp is done with the last pass's x̂
      if (active)
        loadBatch(cur, rowPtr(first), 0, chunks, lane);
    }
    for (int j = 0; j < n; ++j) {
      const uint16_t *xt = x + (t0 + j) * ts.x;
      const float r = normW ? rmsFactor(xt, k, eps, scratch) : 0.0f;
      stageInput(xt, normW, r, 0, static_cast<int>(k), xs + j * tokChunks);
    }
    __syncthreads();
    if (!active)
      continue;
    float acc[kGemvRowsPerPass][4];
#pragma unroll
    for (int j = 0; j < kGemvRowsPerPass; ++j)
      acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    int64_t row = first;
    for (int c = 0;;) {
      int cn = c + 32 * kStreamUnroll;
      int64_t rn = row;
      if (cn >= chunks) {
        cn = 0;
        rn = row + rowStep;
      }
      const bool more = rn < total;
      if (more)
        loadBatch(nxt, rowPtr(rn), cn, chunks, lane);
#pragma unroll
      for (int j = 0; j < kGemvRowsPerPass; ++j)
        if (j < n)
          sumBatch(cur, xs + j * tokChunks, c, chunks, lane, acc[j]);
      if (cn == 0) {
#pragma unroll
        for (int j = 0; j < kGemvRowsPerPass; ++j) {
          if (j < n) {
            const float y = dev::warpSum((acc[j][0] + acc[j][1]) +
                                         (acc[j][2] + acc[j][3]));
            if (lane == 0)
              storeRow(atToken(rows.at(row), t0 + j, ts), y);
          }
          acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        }
      }
      if (!more)
        break;
      c = cn;
      row = rn;
#pragma unroll
      for (int u = 0; u < kStreamUnroll; ++u)
        cur[u] = nxt[u];
    }
  }
}

/// gemvBody once per token: the multi-row forms' fallback (out of line, so
/// that its registers do not count against the streamed path's). Every
/// thread of the block calls it. A barrier between the tokens: gemvBody's
/// streamed path stages x̂ with no barrier before it (without a norm), so a
/// warp done with token t (or without a row) would overwrite x̂ while
/// others still read it.
template <typename Rows>
__device__ __noinline__ void gemvTokens(const Rows &rows, int tokens,
                                        const TokenStrides &ts,
                                        const uint16_t *x, int64_t k,
                                        const uint16_t *normW, float eps) {
  for (int t = 0; t < tokens; ++t) {
    if (t > 0)
      __syncthreads();
    gemvBody(atToken(rows, t, ts), x + t * ts.x, k, normW, eps);
  }
}

/// The body of both multi-row entry points: streamRowsTokens where the
/// single-row launch with this grid takes the streamed path (one warp per
/// row, bf16, k <= kChunk) and the launch has the shared memory a pass
/// needs; otherwise false, and the caller runs gemvBody once per token (the
/// single-row kernel's own path, so the same bits, without the shared
/// weight reads). (The fallback is the caller's so that `rows` is given no
/// address here: the multi-row params would be copied to every thread's
/// stack at entry, and read back from there by every row lookup.)
template <typename Rows>
__device__ bool gemvRowsBody(const Rows &rows, int tokens,
                             const TokenStrides &ts, const uint16_t *x,
                             int64_t k, const uint16_t *normW, float eps) {
  extern __shared__ uint4 rowsStage[];
  __shared__ float scratch[32];
  const int warps = blockDim.x >> 5;
  const int64_t total = rows.count();
  const int64_t gridWarps = static_cast<int64_t>(gridDim.x) * warps;
  // gemvBody's slices for this grid: > 1 when the grid has warps to spare.
  const bool oneWarpPerRow = !(warps % 2 == 0 && gridWarps >= 2 * total);
  const bool stream =
      kStream && oneWarpPerRow && k <= kChunk && rows.streamable(k) &&
      dynamicSmemBytes() >= static_cast<unsigned>(gemvRowsSmemBytes(k, tokens));
  if (!stream)
    return false;
  dev::allowDependentLaunch();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * warps +
                        (threadIdx.x >> 5);
  if (static_cast<int64_t>(blockIdx.x) * warps >= total)
    return true; // the whole block: no row for it
  streamRowsTokens(rows, tokens, ts, x, k, normW, eps, first, gridWarps,
                   rowsStage, scratch);
  return true;
}

//===----------------------------------------------------------------------===//
// Several tokens per launch on the tensor cores (prompt chunks)
//===----------------------------------------------------------------------===//

/// Whether the tensor-core path takes this launch: bf16 weights, 16-byte
/// aligned rows (k % 8 == 0), aligned x, token stride and norm weight.
template <typename Rows>
__device__ bool mmaTakes(const Rows &rows, const uint16_t *x, int64_t k,
                         const uint16_t *normW, const TokenStrides &ts) {
  return rows.streamable(k) && aligned16(x) && ts.x % 8 == 0 &&
         (!normW || aligned16(normW));
}

/// Loads in flight per thread in tokenSquares.
constexpr int kNormLoads = 8;
static_assert(kGemvMmaThreads == 2 * kGemvMmaTokens,
              "tokenSquares gives each token two threads");

/// sq[t] = Σ x[t][c]² over columns [c0, c1) (multiples of 8) for tokens
/// t < nTok (trow(t): token t's first element, 16-byte aligned), in fp32:
/// two threads per token, each kNormLoads 16-byte loads in flight, then
/// their pair. The caller synchronises before reading sq.
template <class TRow>
__device__ void tokenSquares(const TRow &trow, int nTok, int64_t c0, int64_t c1,
                             float *sq) {
  const int t = threadIdx.x >> 1, h = threadIdx.x & 1;
  float s = 0.0f;
  if (t < nTok) {
    const uint4 *xv = reinterpret_cast<const uint4 *>(trow(t));
    const int64_t end = c1 / 8;
    for (int64_t c = c0 / 8 + h; c < end; c += 2 * kNormLoads) {
      uint4 v[kNormLoads];
#pragma unroll
      for (int u = 0; u < kNormLoads; ++u)
        v[u] = c + 2 * u < end ? __ldg(xv + c + 2 * u) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < kNormLoads; ++u)
        s = dev::sumSquares8(v[u], s);
    }
  }
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  if (h == 0 && t < nTok)
    sq[t] = s;
}

/// y = W x̂_t for the block's tile of kGemvMmaTokens tokens (blockIdx.y)
/// and each tile of kGemvMmaRows weight rows of its grid-stride loop, on the
/// tensor-core tile (kernels/common/MmaTile.cuh), split over k by the
/// block's cluster (GemvParams.h kGemvMmaMaxSplit; a launch without
/// clusters is a split of one): block r of a cluster of S sums stages
/// [r·n/S, (r+1)·n/S) of the n k stages of the cluster's tile, each block
/// stores its sums in its shared memory, and block r adds every block's sums
/// in rank order for its eighth parts g ≡ r (mod S) of the tile (16 tokens
/// × 8 rows each) and stores those. With a pre-norm, each block sums the
/// squares of its columns of every token (tokenSquares), the cluster adds
/// them in rank order, and each thread rewrites its own landed x chunks as
/// x̂. The stores are storeRow's (R, the residual, or fp32).
template <typename Rows>
__device__ void mmaRowsTile(const Rows &rows, int tokens,
                            const TokenStrides &ts, const uint16_t *x,
                            int64_t k, const uint16_t *normW, float eps,
                            uint4 *smem, float *norm) {
  const int t0 = static_cast<int>(blockIdx.y) * kGemvMmaTokens;
  const int nTok = min(kGemvMmaTokens, tokens - t0);
  const int64_t total = rows.count();
  const unsigned split = dev::clusterBlocks(), rank = dev::clusterRank();
  const int64_t stages = (k + kMmaTileK - 1) / kMmaTileK;
  const int64_t c0 = stages * rank / split * kMmaTileK;
  const int64_t c1 = min(k, stages * (rank + 1) / split * kMmaTileK);
  const int64_t share = c1 > c0 ? c1 - c0 : 0;
  auto wrow = [&](int64_t r) {
    const RowTarget t = rows.at(r);
    return t.w.bf16 + t.row * k + c0;
  };
  auto trow = [&](int i) { return x + (t0 + i) * ts.x; };
  auto shareRow = [&](int i) { return trow(i) + c0; };
  bool waited = false;
  auto first = [&] {
    if (waited)
      return;
    waited = true;
    dev::waitForPriorGrids();
    if (!normW)
      return;
    tokenSquares(trow, nTok, c0, c0 + share, norm);
    if (split > 1) {
      // Every block's sums are in place (and every block has started).
      dev::clusterSync();
      float total = 0.0f;
      const int t = threadIdx.x;
      if (t < nTok)
        for (unsigned r = 0; r < split; ++r)
          total += dev::loadCluster(norm + t, r);
      // No block overwrites its sums before every block has read them.
      dev::clusterSync();
      if (t < nTok)
        norm[t] = total;
    }
    __syncthreads();
    if (threadIdx.x < nTok)
      norm[threadIdx.x] =
          1.0f / sqrtf(norm[threadIdx.x] / static_cast<float>(k) + eps);
    __syncthreads();
  };
  auto xform = [&](uint4 &v, int i, int64_t col) {
    const uint4 w = __ldg(reinterpret_cast<const uint4 *>(normW + c0 + col));
    v = dev::rmsNormChunk(v, w, norm[i]);
  };
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g8 = lane >> 2, t4 = lane & 3;
  // The sums of the cluster's blocks: [part][element][thread], part =
  // 2 · token tile + n8 tile.
  float *const partial = reinterpret_cast<float *>(smem);
  auto slot = [&](int m, int j, int e) {
    return ((m * 2 + j) * 4 + e) * kGemvMmaThreads + threadIdx.x;
  };
  for (int64_t n0 = static_cast<int64_t>(blockIdx.x / split) * kGemvMmaRows;
       n0 < total;
       n0 += static_cast<int64_t>(gridDim.x / split) * kGemvMmaRows) {
    dev::MmaAcc acc;
    if (normW)
      dev::mmaTileSums<true>(wrow, n0, total, shareRow, nTok, share, xform,
                             first, smem, acc);
    else
      dev::mmaTileSums<false>(wrow, n0, total, shareRow, nTok, share, xform,
                              first, smem, acc);
    __syncthreads(); // every warp is done with the stages
    if (split > 1) {
#pragma unroll
      for (int m = 0; m < dev::kMmaTokenTiles; ++m)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            partial[slot(m, j, e)] = acc[m][j][e];
      dev::clusterSync();
    }
#pragma unroll
    for (int m = 0; m < dev::kMmaTokenTiles; ++m)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if ((m * 2 + j) % split != rank || 16 * m >= nTok)
          continue;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float y = acc[m][j][e];
          if (split > 1) {
            y = 0.0f;
            for (unsigned r = 0; r < split; ++r)
              y += dev::loadCluster(partial + slot(m, j, e), r);
          }
          const int tok = 16 * m + g8 + (e >> 1) * 8;
          const int64_t row =
              n0 + dev::kMmaWarpRows * warp + 8 * j + 2 * t4 + (e & 1);
          if (tok < nTok && row < total)
            storeRow(atToken(rows.at(row), t0 + tok, ts), y);
        }
      }
    // The next tile's copies reuse the stages (and the partial sums, which
    // the cluster's blocks read until here).
    if (split > 1)
      dev::clusterSync();
    else
      __syncthreads();
  }
  first();
}

/// The body of both tensor-core entry points: mmaRowsTile when mmaTakes,
/// else gemvBody once per token of the block's token tile (grid x only).
template <typename Rows>
__device__ void mmaRowsBody(const Rows &rows, int tokens,
                            const TokenStrides &ts, const uint16_t *x,
                            int64_t k, const uint16_t *normW, float eps) {
  extern __shared__ uint4 rowsStage[];
  __shared__ float norm[kGemvMmaTokens]; // sums of squares, then factors
  dev::allowDependentLaunch();
  const int t0 = static_cast<int>(blockIdx.y) * kGemvMmaTokens;
  if (t0 >= tokens)
    return;
  if (!mmaTakes(rows, x, k, normW, ts) ||
      dynamicSmemBytes() < static_cast<unsigned>(kGemvMmaSmemBytes) ||
      blockDim.x != kGemvMmaThreads) {
    gemvTokens(atToken(rows, t0, ts), min(kGemvMmaTokens, tokens - t0), ts,
               x + t0 * ts.x, k, normW, eps);
    return;
  }
  mmaRowsTile(rows, tokens, ts, x, k, normW, eps, rowsStage, norm);
}

//===----------------------------------------------------------------------===//
// Up to 16 tokens on the tensor cores, the weights streamed (decode batches)
//===----------------------------------------------------------------------===//

/// Groups of 32 columns a lane loads per batch of the narrow form (two
/// batches in flight: 2 · 4 · 2 · 16 B per lane, 8 KiB per warp, 128 KiB
/// per SM at 16 warps).
#ifdef K3C_TUNE_GEMV_MMA16_BATCH
constexpr int kMma16Batch = K3C_TUNE_GEMV_MMA16_BATCH;
#else
constexpr int kMma16Batch = 4;
#endif
static_assert(kGemvMma16Warps == kGemvMma16Tokens,
              "the pre-norm gives each token one warp");
static_assert(kGemvMma16Rows == 16 && kGemvMma16Tokens == 16 &&
                  kGemvMma16GroupK == 32,
              "a unit is one m16 tile against two n8 tiles, k in groups of "
              "two k16 steps");

/// Shared slot (16-byte units) of chunk c (columns 8c .. 8c + 7) of token i
/// in the narrow form's staged x̂: group c / 4, then the token, then c % 4.
/// Lane 4g + t reads token g's chunk t of a group, so a warp's 32 reads of
/// tokens 0-7 (or 8-15) are 512 contiguous bytes: no bank conflicts.
__device__ __forceinline__ int mma16Slot(int token, int c) {
  return ((c >> 2) * kGemvMma16Tokens + token) * 4 + (c & 3);
}

/// A warp's unit (GemvSplitScratch): tile `tile`'s groups [g0, g1), this
/// lane's two weight rows (tile rows g and g + 8, lane 4g + t) at column 8t.
struct Mma16Unit {
  const uint16_t *lo = nullptr, *hi = nullptr;
  int64_t tile = 0;
  int part = 0, g0 = 0, g1 = 0;
};

/// One batch of a lane's loads: kMma16Batch groups of rows g and g + 8.
struct Mma16Batch {
  uint4 lo[kMma16Batch], hi[kMma16Batch];
};

/// Unit v of a narrow launch over `rows` (GemvSplitScratch: tile v / parts,
/// part v % parts of its k / 32 groups), this lane's rows clamped to the
/// last (their sums are not stored).
template <typename Rows>
__device__ __forceinline__ Mma16Unit mma16UnitAt(const Rows &rows, int64_t k,
                                                 int parts, int64_t v) {
  const int lane = threadIdx.x & 31;
  const int64_t total = rows.count();
  const int groups = static_cast<int>(k / kGemvMma16GroupK);
  Mma16Unit m;
  m.tile = v / parts;
  m.part = static_cast<int>(v - m.tile * parts);
  m.g0 = groups * m.part / parts;
  m.g1 = groups * (m.part + 1) / parts;
  const int64_t r0 = m.tile * kGemvMma16Rows + (lane >> 2);
  const RowTarget a = rows.at(min(r0, total - 1));
  const RowTarget b = rows.at(min(r0 + 8, total - 1));
  m.lo = a.w.bf16 + a.row * k + 8 * (lane & 3);
  m.hi = b.w.bf16 + b.row * k + 8 * (lane & 3);
  return m;
}

/// The batch of unit m's groups c .. c + kMma16Batch - 1 (zeros past g1).
/// Ordered loads: the first batch stays before the PDL wait.
__device__ __forceinline__ void mma16Load(Mma16Batch &b, const Mma16Unit &m,
                                          int c) {
#pragma unroll
  for (int i = 0; i < kMma16Batch; ++i) {
    if (c + i < m.g1) {
      b.lo[i] = dev::ldStream16Ordered(m.lo + kGemvMma16GroupK * (c + i));
      b.hi[i] = dev::ldStream16Ordered(m.hi + kGemvMma16GroupK * (c + i));
    } else {
      b.lo[i] = b.hi[i] = make_uint4(0, 0, 0, 0);
    }
  }
}

/// y = W x̂_t for `tokens` (<= 16) tokens, x̂ staged in `xs` (mma16Slot
/// layout), the weights streamed into mma fragments. Within a group of 32
/// columns lane 4g + t loads columns 8t .. 8t + 7 of its rows g and g + 8
/// (16 bytes each) and of tokens g and g + 8's x̂; for m16n8k16 those are k
/// positions 2t, 2t + 1, 2t + 8, 2t + 9 of two k16 steps (words x, y of the
/// first step, z, w of the second), the same permutation for A and B, so
/// the dot products are those of the unpermuted columns. Each warp streams
/// its units (mma16Unit) one after another with the next batch (of the
/// same unit or the next) in flight while the current one is summed; the
/// first batch goes out before the PDL wait.
template <typename Rows>
__device__ void mma16Stream(const Rows &rows, int tokens,
                            const TokenStrides &ts, int64_t k,
                            const GemvSplitScratch &sp, const uint4 *xs,
                            Mma16Batch &first, int64_t u) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int64_t total = rows.count();
  const int64_t tiles = (total + kGemvMma16Rows - 1) / kGemvMma16Rows;
  const int parts = sp.parts;
  const int64_t units = tiles * parts;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kGemvMma16Warps;
  float acc[2][4];
  auto zero = [&] {
#pragma unroll
    for (int n = 0; n < 2; ++n)
      acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  };
  auto sum = [&](const Mma16Batch &b, const Mma16Unit &m, int c) {
#pragma unroll
    for (int i = 0; i < kMma16Batch; ++i) {
      if (c + i < m.g1) { // warp-uniform: the unit is the warp's
        const int chunk = 4 * (c + i) + t;
        const uint4 xa = xs[mma16Slot(g, chunk)];
        const uint4 xb = xs[mma16Slot(g + 8, chunk)];
        const uint32_t a0[4] = {b.lo[i].x, b.hi[i].x, b.lo[i].y, b.hi[i].y};
        const uint32_t a1[4] = {b.lo[i].z, b.hi[i].z, b.lo[i].w, b.hi[i].w};
        dev::mmaBf16K16(acc[0], a0, xa.x, xa.y);
        dev::mmaBf16K16(acc[0], a1, xa.z, xa.w);
        dev::mmaBf16K16(acc[1], a0, xb.x, xb.y);
        dev::mmaBf16K16(acc[1], a1, xb.z, xb.w);
      }
    }
  };
  // acc[n][e]: weight row g + 8 (e >> 1) of the tile, token 8n + 2t + (e & 1).
  auto finish = [&](const Mma16Unit &m) {
    float y[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        y[n][e] = acc[n][e];
    if (parts > 1) {
      float *mine = sp.partials +
                    (m.tile * parts + m.part) * kGemvMma16TileFloats + 8 * lane;
      __stcg(reinterpret_cast<float4 *>(mine),
             make_float4(y[0][0], y[0][1], y[0][2], y[0][3]));
      __stcg(reinterpret_cast<float4 *>(mine) + 1,
             make_float4(y[1][0], y[1][1], y[1][2], y[1][3]));
      // Every lane's sums, then one fence and the tile's arrival (the
      // pattern of dev::lastToArrive, for a warp).
      __syncwarp();
      unsigned arrived = 0;
      if (lane == 0) {
        __threadfence();
        arrived = atomicAdd(sp.counters + m.tile, 1u);
      }
      arrived = __shfl_sync(0xffffffffu, arrived, 0);
      if (arrived != static_cast<unsigned>(parts - 1))
        return; // another part's warp adds this tile
      if (lane == 0)
        sp.counters[m.tile] = 0; // every part has arrived: for the next launch
      __threadfence();
      __syncwarp();
#pragma unroll
      for (int n = 0; n < 2; ++n)
        y[n][0] = y[n][1] = y[n][2] = y[n][3] = 0.0f;
      // The parts' sums in part order, two parts' loads in flight.
      const float4 *src = reinterpret_cast<const float4 *>(
          sp.partials + m.tile * parts * kGemvMma16TileFloats + 8 * lane);
      constexpr int kPartsAhead = 2;
      constexpr int kPartStep = kGemvMma16TileFloats / 4; // float4s a part
      for (int q0 = 0; q0 < parts; q0 += kPartsAhead) {
        float4 a[kPartsAhead], b[kPartsAhead];
#pragma unroll
        for (int i = 0; i < kPartsAhead; ++i) {
          if (q0 + i < parts) {
            a[i] = __ldcg(src + (q0 + i) * kPartStep);
            b[i] = __ldcg(src + (q0 + i) * kPartStep + 1);
          }
        }
#pragma unroll
        for (int i = 0; i < kPartsAhead; ++i) {
          if (q0 + i < parts) {
            y[0][0] += a[i].x;
            y[0][1] += a[i].y;
            y[0][2] += a[i].z;
            y[0][3] += a[i].w;
            y[1][0] += b[i].x;
            y[1][1] += b[i].y;
            y[1][2] += b[i].z;
            y[1][3] += b[i].w;
          }
        }
      }
    }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = 8 * n + 2 * t + (e & 1);
        const int64_t row = m.tile * kGemvMma16Rows + g + 8 * (e >> 1);
        if (tok < tokens && row < total)
          storeRow(atToken(rows.at(row), tok, ts), y[n][e]);
      }
  };

  if (u >= units)
    return;
  Mma16Unit m = mma16UnitAt(rows, k, parts, u);
  zero();
  int c = m.g0;
  // One batch: load the next (the rest of this unit, else the next unit's
  // first) into `nxt`, sum `cur`; false after the warp's last. Called with
  // the two buffers in turn, so that no register copy waits for the next
  // batch to land and two batches stay in flight.
  auto step = [&](const Mma16Batch &cur, Mma16Batch &nxt) {
    int cn = c + kMma16Batch;
    int64_t un = u;
    const bool last = cn >= m.g1;
    if (last)
      un = u + stride;
    const bool more = un < units;
    Mma16Unit mn = m;
    if (more) {
      if (last) {
        mn = mma16UnitAt(rows, k, parts, un);
        cn = mn.g0;
      }
      mma16Load(nxt, mn, cn);
    }
    sum(cur, m, c);
    if (last) {
      finish(m);
      zero();
    }
    c = cn;
    m = mn;
    u = un;
    return more;
  };
  Mma16Batch other;
  while (step(first, other) && step(other, first)) {
  }
}

/// Whether the narrow form takes this launch: bf16 rows with k a multiple
/// of a group, aligned inputs, at most kGemvMma16Tokens tokens, its block
/// and shared memory, and a split it can reduce.
template <typename Rows>
__device__ bool mma16Takes(const Rows &rows, int tokens, const uint16_t *x,
                           int64_t k, const uint16_t *normW,
                           const TokenStrides &ts, const GemvSplitScratch &sp) {
  return mmaTakes(rows, x, k, normW, ts) && k % kGemvMma16GroupK == 0 &&
         tokens <= kGemvMma16Tokens && blockDim.x == kGemvMma16Threads &&
         dynamicSmemBytes() >= static_cast<unsigned>(gemvMma16SmemBytes(k)) &&
         sp.parts >= 1 && sp.parts <= kGemvMma16MaxParts &&
         (sp.parts == 1 || (sp.partials && sp.counters));
}

/// The body of both narrow entry points, when mma16Takes (else false, and
/// the caller runs gemvBody once per token with this grid): the block
/// stages every token's x̂ (x, or its RMSNorm: each token's factor from one
/// warp's fp32 sum of its staged squares) while its warps' first weight
/// batches are in flight, then each warp streams its units (mma16Stream).
/// (The fallback is the caller's so that `rows` is not given an address
/// here: the multi-row params would be copied to every thread's stack.)
template <typename Rows>
__device__ bool mma16Body(const Rows &rows, int tokens, const TokenStrides &ts,
                          const uint16_t *x, int64_t k, const uint16_t *normW,
                          float eps, const GemvSplitScratch &sp) {
  extern __shared__ uint4 rowsStage[];
  __shared__ float factor[kGemvMma16Tokens];
  dev::allowDependentLaunch();
  if (!mma16Takes(rows, tokens, x, k, normW, ts, sp))
    return false;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t total = rows.count();
  const int64_t units =
      (total + kGemvMma16Rows - 1) / kGemvMma16Rows * sp.parts;
  const int64_t u = static_cast<int64_t>(blockIdx.x) * kGemvMma16Warps + warp;
  if (static_cast<int64_t>(blockIdx.x) * kGemvMma16Warps >= units)
    return true; // no unit for this block (a grid wider than the host's)
  // The first batch of this warp's first unit before the wait (weights
  // depend on no earlier kernel).
  Mma16Batch first;
  if (u < units) {
    const Mma16Unit m = mma16UnitAt(rows, k, sp.parts, u);
    mma16Load(first, m, m.g0);
  }
  dev::waitForPriorGrids();

  // Every token's x (zeros past `tokens`), several loads in flight a thread.
  const int chunks = static_cast<int>(k / 8);
  const int all = kGemvMma16Tokens * chunks;
#pragma unroll 4
  for (int i = threadIdx.x; i < all; i += kGemvMma16Threads) {
    const int tok = i / chunks, c = i - tok * chunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (tok < tokens)
      v = __ldg(reinterpret_cast<const uint4 *>(x + tok * ts.x) + c);
    rowsStage[mma16Slot(tok, c)] = v;
  }
  if (normW) {
    __syncthreads();
    if (warp < tokens) {
      float s = 0.0f;
      for (int c = lane; c < chunks; c += 32)
        s = dev::sumSquares8(rowsStage[mma16Slot(warp, c)], s);
      s = dev::warpSum(s);
      if (lane == 0)
        factor[warp] = 1.0f / sqrtf(s / static_cast<float>(k) + eps);
    }
    __syncthreads();
    const uint4 *wv = reinterpret_cast<const uint4 *>(normW);
    for (int i = threadIdx.x; i < tokens * chunks; i += kGemvMma16Threads) {
      const int tok = i / chunks, c = i - tok * chunks;
      uint4 &v = rowsStage[mma16Slot(tok, c)];
      v = dev::rmsNormChunk(v, __ldg(wv + c), factor[tok]);
    }
  }
  __syncthreads();
  mma16Stream(rows, tokens, ts, k, sp, rowsStage, first, u);
  return true;
}

} // namespace

/// k3_linear: y = W · x̂ (bf16 or MXFP4 W), out = R(y) (+ residual, then R)
/// or outF32 = y.
/// Grid: any; the compiler gives ceil(n / 8) blocks of 256 threads, i.e. one
/// warp per row. Larger grids split rows over warps (see gemvBody); smaller
/// ones loop. Limits: MXFP4 needs k % 32 == 0; `residual` may alias `out`
/// (each element is read before it is written, by the same lane); `out`
/// must not alias `x`. Fast paths need 16-byte aligned x / weights and
/// k % 8 == 0 (bf16); anything else takes an element-wise path.
extern "C" __global__ void __launch_bounds__(kMaxThreads)
    k3_linear(const LinearParams p) {
  gemvBody(LinearRows{p}, p.x, p.k, p.normWeight, p.normEps);
}

/// k3_linear_multi: entry i gets out_i = R(W_i · x̂), x̂ normed once per block.
/// Grid: any; the rows of all entries form one index space of Σ n_i rows, so
/// ceil(Σ n_i / 8) blocks of 256 threads give one warp per row. Limits as
/// k3_linear; the outputs must not alias x.
extern "C" __global__ void __launch_bounds__(kMaxThreads)
    k3_linear_multi(const LinearMultiParams p) {
  gemvBody(MultiRows{p}, p.x, p.k, p.normWeight, p.normEps);
}

/// k3_linear_rows: k3_linear for `rows` tokens (LinearRowsParams), each
/// token's output bit for bit the single-row launch's with the same grid.
/// Grid: the plan's grid of the `linear` launch; dynamic shared memory
/// gemvRowsSmemBytes(k, rows) (less, or an MXFP4 / unaligned / k > kChunk
/// launch, runs the single-row path once per token). Limits as k3_linear,
/// and blockDim.x <= 256.
extern "C" __global__ void __launch_bounds__(256, kRowsMinBlocks)
    k3_linear_rows(const LinearRowsParams p) {
  const TokenStrides ts{p.xStride, p.residualStride, p.outStride};
  if (!gemvRowsBody(LinearRows{p.one}, p.rows, ts, p.one.x, p.one.k,
                    p.one.normWeight, p.one.normEps))
    gemvTokens(LinearRows{p.one}, p.rows, ts, p.one.x, p.one.k,
               p.one.normWeight, p.one.normEps);
}

/// k3_linear_multi_rows: k3_linear_multi for `rows` tokens, as
/// k3_linear_rows.
extern "C" __global__ void __launch_bounds__(256, kRowsMinBlocks)
    k3_linear_multi_rows(const LinearMultiRowsParams p) {
  const TokenStrides ts{p.xStride, 0, p.outStride};
  if (!gemvRowsBody(MultiRows{p.one}, p.rows, ts, p.one.x, p.one.k,
                    p.one.normWeight, p.one.normEps))
    gemvTokens(MultiRows{p.one}, p.rows, ts, p.one.x, p.one.k, p.one.normWeight,
               p.one.normEps);
}

/// k3_linear_rows_prenorm: x̂ of `rows` tokens (LinearPreNormParams), each
/// token's factor rmsFactor's (the single-row launch's bits).
/// Grid: (rows, 1, 1) blocks of any width up to 1024 (256 planned); a block
/// past `rows` returns. Limits: out must not alias x.
extern "C" __global__ void __launch_bounds__(kMaxThreads)
    k3_linear_rows_prenorm(const LinearPreNormParams p) {
  __shared__ float scratch[32];
  dev::allowDependentLaunch();
  dev::waitForPriorGrids();
  if (static_cast<int32_t>(blockIdx.x) >= p.rows)
    return;
  const uint16_t *x = p.x + blockIdx.x * p.xStride;
  uint16_t *out = p.out + blockIdx.x * p.outStride;
  const float r = rmsFactor(x, p.k, p.normEps, scratch);
  int64_t j = 0;
  if (aligned16(x) && aligned16(p.normWeight) && aligned16(out)) {
    const uint4 *xv = reinterpret_cast<const uint4 *>(x);
    const uint4 *wv = reinterpret_cast<const uint4 *>(p.normWeight);
    uint4 *ov = reinterpret_cast<uint4 *>(out);
    for (int64_t c = threadIdx.x; c < (p.k >> 3); c += blockDim.x) {
      const uint4 v = __ldg(xv + c), w = __ldg(wv + c);
      ov[c] = dev::rmsNormChunk(v, w, r);
    }
    j = (p.k >> 3) << 3;
  }
  for (j += threadIdx.x; j < p.k; j += blockDim.x)
    out[j] = static_cast<uint16_t>(
        dev::rmsNormBf16(dev::bf16ToF(x[j]), dev::bf16ToF(p.normWeight[j]), r));
}

/// k3_linear_rows_mma: k3_linear_rows on the tensor cores (GemvParams.h
/// kGemvMma*): not bit for bit the single-row launch, within its rounding.
/// Grid: (any multiple of the cluster size S, ceil(rows / kGemvMmaTokens)),
/// in clusters of (S, 1, 1) (S ≤ kGemvMmaMaxSplit; none: S = 1) that split
/// each tile's k over their blocks — the host gives ceil(n / kGemvMmaRows)
/// · gemvMmaSplit(...) across; fewer clusters than tiles loop. Each output
/// has the same bits for any grid of one S. kGemvMmaThreads threads and
/// kGemvMmaSmemBytes of dynamic shared memory (else, or for MXFP4 or
/// unaligned operands, gemvBody once per token of the block's tile).
/// Limits as k3_linear_rows.
extern "C" __global__ void __launch_bounds__(kGemvMmaThreads)
    k3_linear_rows_mma(const LinearRowsParams p) {
  const TokenStrides ts{p.xStride, p.residualStride, p.outStride};
  mmaRowsBody(LinearRows{p.one}, p.rows, ts, p.one.x, p.one.k, p.one.normWeight,
              p.one.normEps);
}

/// k3_linear_multi_rows_mma: k3_linear_multi_rows on the tensor cores, as
/// k3_linear_rows_mma (the entries' rows one index space).
extern "C" __global__ void __launch_bounds__(kGemvMmaThreads)
    k3_linear_multi_rows_mma(const LinearMultiRowsParams p) {
  const TokenStrides ts{p.xStride, 0, p.outStride};
  mmaRowsBody(MultiRows{p.one}, p.rows, ts, p.one.x, p.one.k, p.one.normWeight,
              p.one.normEps);
}

/// k3_linear_rows_mma16: k3_linear_rows for up to kGemvMma16Tokens tokens
/// on the tensor cores, the weights streamed into mma fragments
/// (GemvParams.h kGemvMma16*, mma16Body): within rounding of the CPU, not
/// the single-row launch's bits; the same bits for any grid of one split.
/// Grid: any; the host gives one block an SM (fewer when the units are
/// fewer), kGemvMma16Threads threads, gemvMma16SmemBytes(k) of dynamic
/// shared memory, split.parts from gemvMma16Parts with its scratch (else,
/// or for MXFP4, unaligned operands or k % 32 != 0, gemvBody once per
/// token). Limits as k3_linear_rows.
extern "C" __global__ void __launch_bounds__(kGemvMma16Threads, 1)
    k3_linear_rows_mma16(const LinearRowsMma16Params p) {
  const TokenStrides ts{p.rows.xStride, p.rows.residualStride,
                        p.rows.outStride};
  const LinearRowsParams &r = p.rows;
  if (!mma16Body(LinearRows{r.one}, r.rows, ts, r.one.x, r.one.k,
                 r.one.normWeight, r.one.normEps, p.split))
    gemvTokens(LinearRows{r.one}, r.rows, ts, r.one.x, r.one.k,
               r.one.normWeight, r.one.normEps);
}

/// k3_linear_multi_rows_mma16: k3_linear_multi_rows for up to
/// kGemvMma16Tokens tokens, as k3_linear_rows_mma16 (the entries' rows one
/// index space, a tile may span two entries).
extern "C" __global__ void __launch_bounds__(kGemvMma16Threads, 1)
    k3_linear_multi_rows_mma16(const LinearMultiRowsMma16Params p) {
  const TokenStrides ts{p.rows.xStride, 0, p.rows.outStride};
  const LinearMultiRowsParams &r = p.rows;
  if (!mma16Body(MultiRows{r.one}, r.rows, ts, r.one.x, r.one.k,
                 r.one.normWeight, r.one.normEps, p.split))
    gemvTokens(MultiRows{r.one}, r.rows, ts, r.one.x, r.one.k, r.one.normWeight,
               r.one.normEps);
}
