//===- CudaCommon.cuh - Device helpers shared by the CUDA kernels -*- CUDA
//-*-===//
//
// bf16 storage (the same round-to-nearest-even as kernels/common/BF16.h, so a
// CUDA kernel rounds where the CPU kernel rounds), packed bf16 words and the
// RMSNorm element, scalar MXFP4 / E8M0 decoding (K3.md §7; the vector loads
// and dot products of weight rows are in CudaWeights.cuh),
// bf16-or-fp32 small weights (VectorRef),
// the activations of K3.md §6, and warp / block reductions.
//
// Conventions of every k3c CUDA kernel: one entry point
// `extern "C" __global__ void k3_<plan kernel name>(const <Params> p)` taking
// the family's params struct by value (the runtime passes the very bytes the
// CPU backend would use, with device pointers); blockDim.x a multiple of 32
// and at most 1024 (plans use 256); correctness never depends on the grid
// size (loops stride over the grid), only speed does.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_CUDACOMMON_CUH
#define K3C_KERNELS_COMMON_CUDACOMMON_CUH

#include "kernels/common/KernelTrace.cuh"
#include "kernels/common/WeightRef.h"

#include <cstdint>

namespace k3 {
namespace dev {

/// Widens a bf16 (exact).
__device__ __forceinline__ float bf16ToF(uint16_t v) {
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

/// Rounds to the nearest bf16, ties to even; NaN stays a quiet NaN.
__device__ __forceinline__ uint16_t fToBf16(float f) {
  uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

/// Rounds through bf16 and back.
__device__ __forceinline__ float roundBf16(float f) {
  return bf16ToF(fToBf16(f));
}

/// The bf16 quiet NaN: the output of a call outside a kernel's limits.
constexpr uint16_t kBf16NaN = 0x7fc0;

/// −∞ in fp32.
__device__ __forceinline__ float negInf() {
  return -__int_as_float(0x7f800000);
}

/// The low (element 0) bf16 of a packed 32-bit word of two, widened (exact).
__device__ __forceinline__ float loF(uint32_t w) {
  return __uint_as_float(w << 16);
}
/// The high (element 1) bf16 of a packed 32-bit word of two, widened.
__device__ __forceinline__ float hiF(uint32_t w) {
  return __uint_as_float(w & 0xffff0000u);
}

/// `s` plus the squares of the 8 bf16 values of a 16-byte chunk, added in
/// element order (one fp32 sum, no FMA).
/// s + Σ a_i · b_i over the 8 bf16 of each (fp32 FMAs, element order).
__device__ __forceinline__ float dotBf16x8(uint4 a, uint4 b, float s) {
  const uint32_t wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s = fmaf(loF(wa[i]), loF(wb[i]), s);
    s = fmaf(hiF(wa[i]), hiF(wb[i]), s);
  }
  return s;
}
__device__ __forceinline__ float sumSquares8(uint4 v, float s) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float a = loF(words[i]), b = hiF(words[i]);
    s += a * a;
    s += b * b;
  }
  return s;
}

/// One RMSNorm output element R(R(x · r) · w) as bf16 bits, r the factor
/// rsqrt(mean(x²) + eps): the rounding of cpu::rmsNormBf16.
__device__ __forceinline__ uint32_t rmsNormBf16(float x, float w, float r) {
  return fToBf16(roundBf16(x * r) * w);
}
/// rmsNormBf16 of both elements of packed bf16 words of x and of the weight.
__device__ __forceinline__ uint32_t rmsNormPair(uint32_t x, uint32_t w,
                                                float r) {
  return rmsNormBf16(loF(x), loF(w), r) |
         (rmsNormBf16(hiF(x), hiF(w), r) << 16);
}
/// rmsNormPair of the 8 elements of a 16-byte chunk of x and of the weight.
__device__ __forceinline__ uint4 rmsNormChunk(uint4 x, uint4 w, float r) {
  return make_uint4(rmsNormPair(x.x, w.x, r), rmsNormPair(x.y, w.y, r),
                    rmsNormPair(x.z, w.z, r), rmsNormPair(x.w, w.w, r));
}

/// True when `p` is aligned to `bytes` (a power of two).
__device__ __forceinline__ bool aligned(const void *p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}
/// True when `p` is 16-byte aligned (a uint4 / float4 load may read it).
__device__ __forceinline__ bool aligned16(const void *p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

/// Value of an E2M1 code (bit 3 sign, low bits index 0, .5, 1, 1.5, 2, 3, 4,
/// 6).
__device__ __forceinline__ float e2m1ToF(uint32_t code) {
  // Magnitudes ×2 are 0 1 2 3 4 6 8 12: packed as nibbles of one constant.
  const uint32_t twice = (0xC8643210u >> ((code & 7u) * 4u)) & 0xFu;
  const float mag = static_cast<float>(twice) * 0.5f;
  return (code & 8u) ? -mag : mag;
}

/// 2^(e - 127) for an E8M0 scale byte (0: the subnormal 2^-127; 255: NaN),
/// without branches.
__device__ __forceinline__ float e8m0ToF(uint32_t e) {
  uint32_t bits = e ? e << 23 : 0x00400000u;
  bits = e == 255u ? 0x7fc00000u : bits;
  return __uint_as_float(bits);
}

/// 2^x on the special-function unit (ex2.approx.ftz: within ~2 ulps,
/// subnormal results flushed to zero): for sums that are within rounding of
/// their CPU twin anyway, where expf's range reduction would be most of the
/// work.
__device__ __forceinline__ float exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float sigmoidF(float x) {
  return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float siluF(float x) {
  return x / (1.0f + expf(-x));
}
__device__ __forceinline__ float softcapF(float x, float beta) {
  return beta * tanhf(x / beta);
}
/// softplus as the CPU kernels compute it (linear above 20).
__device__ __forceinline__ float softplusF(float z) {
  return z > 20.0f ? z : log1pf(expf(z));
}

/// The gated activation of an MLP (K3.md §6): SiTU or SwiGLU.
__device__ __forceinline__ float gatedActF(int32_t activation, float beta1,
                                           int32_t hasBeta2, float beta2,
                                           float g, float u) {
  if (activation == kActSwiGLU)
    return siluF(g) * u;
  const float up = hasBeta2 ? softcapF(u, beta2) : u;
  return softcapF(g, beta1) * sigmoidF(g) * up;
}

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block; every thread gets the result. `scratch` holds 32
/// floats of shared memory; the call synchronises the block twice.
__device__ __forceinline__ float blockSum(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warpSum(v);
  __syncthreads(); // scratch may still be read by a previous reduction
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  float t = lane < warps ? scratch[lane] : 0.0f;
  return warpSum(t);
}

/// The exclusive sum over the block of each thread's `v` (threads in
/// order), and in `total` (every thread) the sum of all. `scratch` holds 32
/// ints of shared memory; blockDim.x a multiple of 32; the call
/// synchronises the block three times.
__device__ __forceinline__ int blockExclusiveSum(int v, int *scratch,
                                                 int &total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  int in = v; // inclusive within the warp
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int o = __shfl_up_sync(0xffffffffu, in, off);
    if (lane >= off)
      in += o;
  }
  __syncthreads(); // scratch may still be read by a previous reduction
  if (lane == 31)
    scratch[warp] = in;
  __syncthreads();
  if (warp == 0) {
    int w = lane < warps ? scratch[lane] : 0;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, w, off);
      if (lane >= off)
        w += o;
    }
    scratch[lane] = w; // inclusive over the warps
  }
  __syncthreads();
  total = scratch[warps - 1];
  return (warp > 0 ? scratch[warp - 1] : 0) + in - v;
}

/// Max over the block; every thread gets the result (see blockSum).
__device__ __forceinline__ float blockMax(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = warpMax(v);
  __syncthreads();
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  float t = lane < warps ? scratch[lane] : negInf();
  return warpMax(t);
}

/// Global thread index and stride for grid-stride loops.
__device__ __forceinline__ int64_t globalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t gridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

/// Asks L2 for the 128-byte line holding `p`: a hint (no register held, no
/// fault), so many can be in flight at once.
__device__ __forceinline__ void prefetchL2Line(const void *p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/// Asks L2 (or, with `L1`, this SM's L1 and L2) for the 128-byte lines of
/// [p, p + bytes), lane l of the warp taking lines l, l + 32, ... (a line
/// holding any byte of the range is asked for).
template <bool L1 = false>
__device__ __forceinline__ void prefetchWarp(const void *p, int64_t bytes) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  const uintptr_t e = b + bytes;
  for (uintptr_t a = (b & ~uintptr_t(127)) + 128 * (threadIdx.x & 31); a < e;
       a += 32 * 128) {
    if (L1)
      asm volatile("prefetch.global.L1 [%0];" ::"l"(a));
    else
      prefetchL2Line(reinterpret_cast<const void *>(a));
  }
}

/// prefetchWarp into L2.
__device__ __forceinline__ void prefetchL2Warp(const void *p, int64_t bytes) {
  prefetchWarp<false>(p, bytes);
}

/// prefetchWarp into this SM's L1: for a small read-only vector (a norm
/// weight) that the block reads right after a dependent round, so that read
/// finds it in L1 instead of paying an L2 round trip.
__device__ __forceinline__ void prefetchL1Warp(const void *p, int64_t bytes) {
  prefetchWarp<true>(p, bytes);
}

/// Asks L2 for the 128-byte lines of [p, p + bytes), spread over the block's
/// threads (one line per thread in turn): the whole working set in flight.
__device__ __forceinline__ void prefetchL2Block(const void *p, int64_t bytes) {
  const char *base = static_cast<const char *>(p);
  for (int64_t off = int64_t(threadIdx.x) * 128; off < bytes;
       off += int64_t(blockDim.x) * 128)
    prefetchL2Line(base + off);
}

/// Bytes of one bulk prefetch of prefetchL2Share.
constexpr int64_t kL2PrefetchPiece = 16384;

/// Asks L2 for this block's share of a later launch's weight: the range in
/// kL2PrefetchPiece pieces dealt to the grid's blocks in turn, each piece
/// one bulk prefetch (the TMA unit walks it; no register waits on it)
/// issued by a lane of the block's first warp (a 19 MB o_proj over 128
/// blocks: 9 lanes, one instruction each). Call it before
/// waitForPriorGrids: weights depend on no earlier kernel. Nothing for a
/// null, empty or misaligned range. (Issued after the wait, or with an
/// evict_last policy, it measured slower still: docs/PERF.md, 2026-12-02.)
__device__ __forceinline__ void prefetchL2Share(const L2Prefetch &p) {
  const char *base = static_cast<const char *>(p.data);
  if (!base || p.bytes <= 0 || threadIdx.x >= 32 || threadIdx.y || threadIdx.z ||
      (reinterpret_cast<uintptr_t>(base) & 15))
    return;
  const int64_t blocks = int64_t(gridDim.x) * gridDim.y * gridDim.z;
  const int64_t block =
      blockIdx.x + int64_t(gridDim.x) * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z);
  const int64_t pieces = (p.bytes + kL2PrefetchPiece - 1) / kL2PrefetchPiece;
  for (int64_t i = block + blocks * threadIdx.x; i < pieces; i += blocks * 32) {
    const int64_t off = i * kL2PrefetchPiece;
    const uint32_t n =
        static_cast<uint32_t>(min(kL2PrefetchPiece, p.bytes - off)) & ~15u;
    if (n == 0)
      continue;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + off),
                 "r"(n)
                 : "memory");
  }
}

/// 16 bytes of read-only data streamed once (ld.global.nc without an L1
/// line: a long stream through L1 would evict what the kernel reuses, its
/// stack and parameters among it).
__device__ __forceinline__ uint4 ldStream16(const void *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
/// 4 bytes of read-only data streamed once (as ldStream16).
__device__ __forceinline__ uint32_t ldStream4(const void *p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

/// W consecutive bf16 values in registers, still packed: 16 bytes for W = 8
/// (one vector load, the fast path), one value for W = 1 (the scalar
/// fallback for odd sizes or misaligned pointers).
template <int W> struct Bf16Chunk;

template <> struct Bf16Chunk<8> {
  uint4 u;
  __device__ __forceinline__ void zero() { u = make_uint4(0, 0, 0, 0); }
  /// Read-only (non-coherent) path: data the kernel does not write.
  __device__ __forceinline__ void loadRO(const uint16_t *p) {
    u = __ldg(reinterpret_cast<const uint4 *>(p));
  }
  /// Coherent load: data this kernel wrote itself.
  __device__ __forceinline__ void load(const uint16_t *p) {
    u = *reinterpret_cast<const uint4 *>(p);
  }
  __device__ __forceinline__ void store(uint16_t *p) const {
    *reinterpret_cast<uint4 *>(p) = u;
  }
  /// Element k (a compile-time constant after unrolling), widened.
  __device__ __forceinline__ float at(int k) const {
    const uint32_t w = k < 4 ? (k < 2 ? u.x : u.y) : (k < 6 ? u.z : u.w);
    return __uint_as_float((k & 1) ? (w & 0xffff0000u) : (w << 16));
  }
  /// Sets element k to the bf16 `v`.
  __device__ __forceinline__ void set(int k, uint16_t v) {
    uint32_t &w = k < 4 ? (k < 2 ? u.x : u.y) : (k < 6 ? u.z : u.w);
    w = (k & 1) ? ((w & 0x0000ffffu) | (uint32_t(v) << 16))
                : ((w & 0xffff0000u) | v);
  }
};

template <> struct Bf16Chunk<1> {
  uint16_t v;
  __device__ __forceinline__ void zero() { v = 0; }
  __device__ __forceinline__ void loadRO(const uint16_t *p) { v = __ldg(p); }
  __device__ __forceinline__ void load(const uint16_t *p) { v = *p; }
  __device__ __forceinline__ void store(uint16_t *p) const { *p = v; }
  __device__ __forceinline__ float at(int) const { return bf16ToF(v); }
  __device__ __forceinline__ void set(int, uint16_t x) { v = x; }
};

/// Weight element (row, col) of a bf16 or MXFP4 matrix with `cols` columns.
__device__ __forceinline__ float weightAt(const WeightRef &w, int64_t cols,
                                          int64_t row, int64_t col) {
  if (w.format == kWeightBf16)
    return bf16ToF(w.bf16[row * cols + col]);
  const uint8_t byte = w.packed[row * (cols / 2) + col / 2];
  const uint32_t code = (col & 1) ? (byte >> 4) : (byte & 0xFu);
  return e2m1ToF(code) * e8m0ToF(w.scale[row * (cols / 32) + col / 32]);
}

/// The dynamic shared memory of the running launch, in bytes.
__device__ __forceinline__ unsigned dynamicSmemBytes() {
  unsigned n;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  return n;
}

/// Writes the bf16 NaN to out[0, n) over the grid: the output of a call
/// outside a kernel's limits (never silent).
__device__ inline void fillNaN(uint16_t *out, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = kBf16NaN;
}

/// Element i of bf16 or fp32 storage in fp32: a bf16 value widened exactly,
/// an fp32 value as it is (the two halves of vectorAt).
__device__ __forceinline__ float elemF(const uint16_t *p, int64_t i) {
  return bf16ToF(p[i]);
}
__device__ __forceinline__ float elemF(const float *p, int64_t i) {
  return p[i];
}

/// Element i of a bf16-or-fp32 small weight (a conv filter, o_norm) in fp32.
/// The CPU twin is vectorAt in kernels/common/VectorRef.h.
__device__ __forceinline__ float vectorAt(const VectorRef &v, int64_t i) {
  return v.dtype == kVectorF32
             ? elemF(static_cast<const float *>(v.data), i)
             : elemF(static_cast<const uint16_t *>(v.data), i);
}

/// f(p) with `v`'s data as a typed pointer (const float * or const
/// uint16_t *), read with elemF: a loop over several elements branches on
/// the dtype once, outside the loop (the per-element branch of vectorAt
/// costs kda_decode registers it does not have).
template <typename F>
__device__ __forceinline__ auto withVector(const VectorRef &v, F &&f) {
  if (v.dtype == kVectorF32)
    return f(static_cast<const float *>(v.data));
  return f(static_cast<const uint16_t *>(v.data));
}

/// After the block's work: whether it is the last of `total` blocks (or
/// items) to arrive at `counter`, which the last one resets for the next
/// launch; the others' stores before their arrival are visible to it.
__device__ __forceinline__ bool lastToArrive(unsigned *counter,
                                             unsigned total) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(counter, 1u) == total - 1;
    if (last)
      *counter = 0;
  }
  __syncthreads();
  const bool isLast = last;
  if (isLast)
    __threadfence();
  return isLast;
}

//===--- Thread-block clusters and asynchronous copies (Hopper) -----------===//

/// Blocks in this block's cluster (1 when launched without clusters).
__device__ __forceinline__ unsigned clusterBlocks() {
  unsigned n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}
/// This block's rank in its cluster (0 when launched without clusters).
__device__ __forceinline__ unsigned clusterRank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
/// A barrier over every thread of the cluster: the shared-memory stores
/// (local and remote) of each thread before it are visible to every thread
/// of the cluster after it. Every thread of every block must reach it.
__device__ __forceinline__ void clusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}
/// The two halves of clusterSync without its memory ordering, for the
/// first access to another block's shared memory: every block arrives
/// early (clusterArrive) and waits (clusterWait) just before that access,
/// which is then safe (every block of the cluster has started).
__device__ __forceinline__ void clusterArrive() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void clusterWait() {
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}
/// The distributed-shared-memory address, in block `rank` of the cluster,
/// of the shared-memory variable that `local` is in this block.
__device__ __forceinline__ unsigned clusterAddress(const void *local,
                                                   unsigned rank) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(local));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(a), "r"(rank));
  return remote;
}
/// Stores `v` into block `rank` of the cluster, at `local`'s variable.
__device__ __forceinline__ void storeCluster(float *local, unsigned rank,
                                             float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(
                   clusterAddress(local, rank)),
               "f"(v)
               : "memory");
}
/// Loads the float at `local`'s variable from block `rank` of the cluster.
__device__ __forceinline__ float loadCluster(const float *local,
                                             unsigned rank) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];"
               : "=f"(v)
               : "r"(clusterAddress(local, rank))
               : "memory");
  return v;
}
/// Starts copying 16 bytes from global to shared memory (through L2 only);
/// both 16-byte aligned. The thread sees them after waitAsyncCopies.
__device__ __forceinline__ void copyAsync16(void *smem, const void *gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(smem))),
               "l"(__cvta_generic_to_global(gmem))
               : "memory");
}
/// Waits for this thread's copyAsync16 copies.
__device__ __forceinline__ void waitAsyncCopies() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}
/// copyAsync16 when `valid`, else 16 zero bytes into `smem` (`gmem` must
/// still be a global address; nothing is read from it).
__device__ __forceinline__ void copyAsync16OrZero(void *smem, const void *gmem,
                                                  bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(smem))),
               "l"(__cvta_generic_to_global(gmem)), "r"(valid ? 16 : 0)
               : "memory");
}
/// Closes this thread's group of copyAsync16 copies (waitAsyncGroups
/// counts groups).
__device__ __forceinline__ void commitAsyncCopies() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
/// Waits until at most `Pending` of this thread's committed groups are
/// still in flight (the older ones have landed).
template <int Pending> __device__ __forceinline__ void waitAsyncGroups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
}
/// ldmatrix.x4: four 8x8 bf16 matrices from shared memory, lane l giving
/// the address of row l % 8 of matrix l / 8; r[i] is matrix i, lane 4g + t
/// holding its row g, columns 2t, 2t + 1.
__device__ __forceinline__ void loadMatrixX4(uint32_t (&r)[4],
                                             const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(smem)))
               : "memory");
}

//===--- Tensor cores (warp-level mma.sync, sm_80+) -----------------------===//
//
// Fragments of mma.sync.m16n8k16 (row-major A, column-major B, fp32 C), lane
// l = 4g + t: A a0 (row g, k 2t..2t+1), a1 (row g + 8, same k), a2 (row g,
// k 2t+8..2t+9), a3 (row g + 8, same); B b0 (k 2t..2t+1, col g), b1 (k
// 2t+8..2t+9, col g); C c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g + 8).
// A word holds two bf16, the lower k (or col) in its low half. The k order
// is the caller's to choose, as long as A and B agree on it.

/// c += A·B over k = 16 (bf16 inputs, fp32 accumulation).
__device__ __forceinline__ void mmaBf16K16(float (&c)[4], const uint32_t (&a)[4],
                                           uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                 "r"(b1));
}
/// c += A·B over k = 16 with fp16 inputs (same fragments, fp32
/// accumulation).
__device__ __forceinline__ void mmaF16K16(float (&c)[4], const uint32_t (&a)[4],
                                          uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/// c += A·B over k = 8: A a0 (row g, k 2t..2t+1), a1 (row g + 8), B b0.
__device__ __forceinline__ void mmaBf16K8(float (&c)[4], uint32_t a0,
                                          uint32_t a1, uint32_t b0) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(b0));
}
/// The transpose of an 8x8 bf16 matrix held one word per lane (lane 4g + t:
/// row g, cols 2t, 2t+1), in the same distribution.
__device__ __forceinline__ uint32_t transpose8x8(uint32_t w) {
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;"
               : "=r"(r)
               : "r"(w));
  return r;
}
/// Two floats as a word of two fp16 (x in the low half), each rounded to
/// nearest even.
__device__ __forceinline__ uint32_t packHalf2(float x, float y) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(y), "f"(x));
  return r;
}
/// Two floats as a word of two bf16 (x in the low half), each rounded to
/// nearest even.
__device__ __forceinline__ uint32_t packBf16(float x, float y) {
  return uint32_t(fToBf16(x)) | (uint32_t(fToBf16(y)) << 16);
}
/// x and y as the sums hi + lo of two bf16 each (16 significant bits: the
/// rounding error of hi, itself rounded): for products on bf16 tensor cores
/// whose other operand is exact in bf16, at near-fp32 accuracy with two
/// products.
__device__ __forceinline__ void splitBf16(float x, float y, uint32_t &hi,
                                          uint32_t &lo) {
  const uint16_t hx = fToBf16(x), hy = fToBf16(y);
  hi = uint32_t(hx) | (uint32_t(hy) << 16);
  lo = packBf16(x - bf16ToF(hx), y - bf16ToF(hy));
}

//===--- Programmatic dependent launch (Hopper) ---------------------------===//
//
// The runtime launches every kernel of a step with programmatic stream
// serialization (and programmatic graph edges): a kernel may start while
// the one before it still runs. So every kernel
//  1. lets the next kernel launch as soon as all its own blocks are
//     running (allowDependentLaunch), and
//  2. waits for the previous kernel to finish and flush its memory
//     (waitForPriorGrids) before it touches any buffer or state: only work
//     that depends on nothing produced in the step (an L2 prefetch of
//     weights, say) may come before the wait.
// Launched without the attribute, both are no-ops.

/// Lets the next kernel in the stream launch (its blocks wait in
/// waitForPriorGrids until this grid completes).
__device__ __forceinline__ void allowDependentLaunch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
/// Blocks until the previous kernel in the stream has completed and its
/// writes are visible.
/// (A -DK3C_LAUNCH_TRACE build times block (0, 0, 0)'s wait: KernelTrace.cuh.)
__device__ __forceinline__ void waitForPriorGrids() {
#if K3C_LAUNCH_TRACE_ON
  waitTraced();
#else
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
/// Both, for kernels with nothing to do before their inputs are ready.
__device__ __forceinline__ void enterStep() {
  allowDependentLaunch();
  waitForPriorGrids();
}

//===--- Multi-row forms over a params array ------------------------------===//

/// Shared-memory room for one params struct T, copied as 32-bit words.
template <class T> struct RowParams {
  static_assert(sizeof(T) % 4 == 0, "params are copied as words");
  uint32_t words[sizeof(T) / 4];
  __device__ __forceinline__ const T &get() const {
    return *reinterpret_cast<const T *>(words);
  }
};

/// Copies row `index` (default blockIdx.y)'s params from `rows` (device
/// memory) into `dst` (shared memory) and synchronises: the multi-row forms
/// over a params array (a batch's rows, each bound to its own slot's states)
/// run the single-row body on that copy. Before the PDL wait is fine: the
/// runtime writes the rows' params before the step's first launch.
template <class T>
__device__ __forceinline__ void loadRowParams(const T *rows, RowParams<T> &dst,
                                              int64_t index = -1) {
  const uint32_t *src = reinterpret_cast<const uint32_t *>(
      rows + (index < 0 ? static_cast<int64_t>(blockIdx.y) : index));
  for (int i = threadIdx.x; i < int(sizeof(T) / 4); i += blockDim.x)
    dst.words[i] = src[i];
  __syncthreads();
}

} // namespace dev
} // namespace k3

#endif // K3C_KERNELS_COMMON_CUDACOMMON_CUH
