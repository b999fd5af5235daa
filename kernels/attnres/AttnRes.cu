//===- AttnRes.cu - Block attention residuals (CUDA) ----------------------===//
//
// AttnRes (K3.md §4, NUMERICS.md "AttnRes") and the commit of a block
// representation, mirroring AttnResCpu.cpp: fp32 throughout, one rounding at
// the output (then the optional fused RMSNorm's two). The softmax and the
// α-weighted mix are computed in exactly the CPU's order and without FMA
// contraction, so only the two reductions per source (mean(V²) and the
// logit) differ from the CPU, by accumulation order.
//
// Wide loads: with D a multiple of 8 and every row pointer 16-byte aligned,
// each thread handles chunks of 8 bf16 (one 16-byte load per source);
// otherwise the same code runs on single elements.
//
//===----------------------------------------------------------------------===//
#include "kernels/attnres/AttnResParams.h"
#include "kernels/common/CudaCommon.cuh"

using namespace k3;

namespace {

/// Most sources (committed blocks + extra) attn_res handles: the per-source
/// statistics live in shared memory.
constexpr int kMaxSources = 64;
/// Sources reduced together in one sweep (K3: up to 8 blocks + the partial
/// sum, i.e. one sweep); their loads are in flight together.
constexpr int kSweep = 9;

template <int W> using Chunk = dev::Bf16Chunk<W>;
using dev::prefetchL2Block;

/// Shared memory of attn_res.
struct AttnResShared {
  float red[32][kSweep];    ///< per-warp partial sums of one sweep
  float rnorm[kMaxSources]; ///< rsqrt(mean(V_i²) + eps) per source
  float alpha[kMaxSources]; ///< logits, then softmax weights
  float scratch[32];        ///< blockSum
};

/// Sums v[0..kSweep) over the block in a fixed order (warp shuffles, then
/// warps in order) and hands sum s to thread s via `use(s, sum)`; the
/// results are visible to the block on return.
template <typename Use>
__device__ __forceinline__ void blockSumSweep(float (&v)[kSweep],
                                              AttnResShared &s, Use use) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int b = 0; b < kSweep; ++b)
      v[b] += __shfl_xor_sync(0xffffffffu, v[b], o);
  if (lane == 0)
#pragma unroll
    for (int b = 0; b < kSweep; ++b)
      s.red[warp][b] = v[b];
  __syncthreads();
  if (threadIdx.x < kSweep) {
    float t = 0.0f;
    for (int w = 0; w < warps; ++w)
      t += s.red[w][threadIdx.x];
    use(static_cast<int>(threadIdx.x), t);
  }
  __syncthreads();
}

/// α = softmax(a[0, n)) in place, exactly as attnResCpu: the max, exp, a
/// sequential sum in source order, a division (n is small: one thread).
__device__ void softmaxInPlace(float *a, int n) {
  float mx = a[0];
  for (int i = 1; i < n; ++i)
    mx = fmaxf(mx, a[i]);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    a[i] = expf(a[i] - mx);
    sum += a[i];
  }
  for (int i = 0; i < n; ++i)
    a[i] = a[i] / sum;
}

template <int W>
__device__ void attnRes(const AttnResParams &p, AttnResShared &s) {
  const int64_t D = p.dim, C = D / W;
  const int n = static_cast<int>(p.numBlocks) + (p.extra ? 1 : 0);
  const int tid = threadIdx.x, threads = blockDim.x;
  const float fD = static_cast<float>(D);
  auto source = [&](int i) {
    return i < p.numBlocks ? p.blocks + i * D : p.extra;
  };

  // One block reads everything: request it all from HBM up front; the
  // sweeps below then wait on L2, not on HBM, per round of loads.
  if (p.numBlocks > 0)
    prefetchL2Block(p.blocks, p.numBlocks * D * 2);
  if (p.extra)
    prefetchL2Block(p.extra, D * 2);
  prefetchL2Block(p.wNorm, D * 2);
  prefetchL2Block(p.wProj, D * 2);
  if (p.normWeight)
    prefetchL2Block(p.normWeight, D * 2);

  // 1. rnorm_i = 1 / sqrt(mean(V_i²) + eps), kSweep sources per sweep.
  for (int i0 = 0; i0 < n; i0 += kSweep) {
    float ss[kSweep];
#pragma unroll
    for (int b = 0; b < kSweep; ++b)
      ss[b] = 0.0f;
#pragma unroll 2
    for (int64_t c = tid; c < C; c += threads) {
      Chunk<W> v[kSweep];
#pragma unroll
      for (int b = 0; b < kSweep; ++b)
        if (i0 + b < n)
          v[b].loadRO(source(i0 + b) + c * W);
#pragma unroll
      for (int b = 0; b < kSweep; ++b)
        if (i0 + b < n)
#pragma unroll
          for (int e = 0; e < W; ++e)
            ss[b] = fmaf(v[b].at(e), v[b].at(e), ss[b]);
    }
    blockSumSweep(ss, s, [&](int b, float t) {
      if (i0 + b < n)
        s.rnorm[i0 + b] = 1.0f / sqrtf(t / fD + p.eps);
    });
  }

  // 2. logit_i = Σ_d (V_i[d]·rnorm_i) · (wNorm[d]·wProj[d]); the product of
  // two bf16 is exact in fp32, as on the CPU.
  for (int i0 = 0; i0 < n; i0 += kSweep) {
    float lg[kSweep], rn[kSweep];
#pragma unroll
    for (int b = 0; b < kSweep; ++b) {
      lg[b] = 0.0f;
      rn[b] = i0 + b < n ? s.rnorm[i0 + b] : 0.0f;
    }
    for (int64_t c = tid; c < C; c += threads) {
      Chunk<W> wn, wp, v[kSweep];
      wn.loadRO(p.wNorm + c * W);
      wp.loadRO(p.wProj + c * W);
#pragma unroll
      for (int b = 0; b < kSweep; ++b)
        if (i0 + b < n)
          v[b].loadRO(source(i0 + b) + c * W);
#pragma unroll
      for (int e = 0; e < W; ++e) {
        const float w = wn.at(e) * wp.at(e);
#pragma unroll
        for (int b = 0; b < kSweep; ++b)
          if (i0 + b < n)
            lg[b] = fmaf(v[b].at(e) * rn[b], w, lg[b]);
      }
    }
    blockSumSweep(lg, s, [&](int b, float t) {
      if (i0 + b < n)
        s.alpha[i0 + b] = t;
    });
  }

  // 3. α = softmax(logit) exactly as the CPU: max, exp, a sequential sum in
  // source order, a division (n is small: one thread).
  if (tid == 0)
    softmaxInPlace(s.alpha, n);
  __syncthreads();

  // 4. out = R(Σ_i α_i V_i), sources in order, unfused multiply-add as on
  // the CPU; with the norm, also Σ R(out)² for it.
  float ss = 0.0f;
  for (int64_t c = tid; c < C; c += threads) {
    float acc[W];
#pragma unroll
    for (int e = 0; e < W; ++e)
      acc[e] = 0.0f;
    int i = 0;
    for (; i + 4 <= n; i += 4) { // four loads in flight, adds still in order
      Chunk<W> v[4];
#pragma unroll
      for (int b = 0; b < 4; ++b)
        v[b].loadRO(source(i + b) + c * W);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float a = s.alpha[i + b];
#pragma unroll
        for (int e = 0; e < W; ++e)
          acc[e] = __fadd_rn(acc[e], __fmul_rn(a, v[b].at(e)));
      }
    }
    for (; i < n; ++i) {
      Chunk<W> v;
      v.loadRO(source(i) + c * W);
      const float a = s.alpha[i];
#pragma unroll
      for (int e = 0; e < W; ++e)
        acc[e] = __fadd_rn(acc[e], __fmul_rn(a, v.at(e)));
    }
    Chunk<W> o;
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const uint16_t r = dev::fToBf16(acc[e]);
      o.set(e, r);
      const float x = dev::bf16ToF(r);
      ss = fmaf(x, x, ss);
    }
    o.store(p.out + c * W);
  }
  if (!p.normWeight)
    return;

  // 5. The fused rms_norm, in place: every thread rereads only the chunks
  // it wrote itself, so no other thread's store is involved.
  ss = dev::blockSum(ss, s.scratch);
  const float r = 1.0f / sqrtf(ss / fD + p.normEps);
  for (int64_t c = tid; c < C; c += threads) {
    Chunk<W> x, w, o;
    x.load(p.out + c * W);
    w.loadRO(p.normWeight + c * W);
#pragma unroll
    for (int e = 0; e < W; ++e)
      o.set(e, static_cast<uint16_t>(dev::rmsNormBf16(x.at(e), w.at(e), r)));
    o.store(p.out + c * W);
  }
}

using dev::aligned16;

/// Whether every row `p` names (a null optional one aside) starts on 16
/// bytes: with D % 8 == 0, then, every 8-element chunk is one 16-byte load.
__device__ bool chunksAligned(const AttnResParams &p) {
  return aligned16(p.blocks) && aligned16(p.wNorm) && aligned16(p.wProj) &&
         aligned16(p.out) && (!p.extra || aligned16(p.extra)) &&
         (!p.normWeight || aligned16(p.normWeight));
}

} // namespace

/// k3_attn_res: out = R(Σ_i α_i V_i) over the first numBlocks rows of
/// `blocks` then `extra`, α = softmax_i(Σ_d V_i[d]·rsqrt(mean(V_i²)+eps)·
/// wNorm[d]·wProj[d]); with normWeight, out = rms_norm(that) (AttnResParams).
/// Grid: block 0 does all the work (codegen launches 1 block of 256); other
/// blocks return at once. Every output needs all n logits, each a reduction
/// over all of D, so more blocks could only repeat that work (or would need
/// a global scratch buffer and a grid-wide sync). Within the block: threads
/// stride over 8-element chunks of D; kSweep sources are reduced per sweep
/// with their 16-byte loads in flight together (K3: 9 × 14 KB read from HBM
/// once, the later sweeps hit L1/L2).
/// Limits: 1 <= numBlocks + (extra ? 1 : 0) <= 64 (else out is written as
/// NaN); blockDim <= 512 (the register budget); out must not alias a source.
extern "C" __global__ void __launch_bounds__(512)
    k3_attn_res(const AttnResParams p) {
  dev::enterStep();
  __shared__ AttnResShared s;
  if (blockIdx.x != 0)
    return;
  const int64_t n = p.numBlocks + (p.extra ? 1 : 0);
  if (n < 1 || n > kMaxSources || p.numBlocks < 0) {
    for (int64_t i = threadIdx.x; i < p.dim; i += blockDim.x)
      p.out[i] = dev::kBf16NaN; // an unsupported call is never silent
    return;
  }
  if (p.dim % 8 == 0 && chunksAligned(p))
    attnRes<8>(p, s);
  else
    attnRes<1>(p, s);
}

namespace {

constexpr int kClusterSources = static_cast<int>(kAttnResClusterMaxSources);
constexpr int kClusterBlocks = static_cast<int>(kAttnResClusterMaxBlocks);
constexpr int kClusterWarps = static_cast<int>(kAttnResClusterThreads / 32);

/// Shared memory of attn_res_clustered. `part` and `normPart` are written
/// by every block of the cluster (row r by block r), the rest locally.
struct AttnResClusterShared {
  /// Per-warp partial sums: Σ V_i² then Σ V_i·wNorm·wProj per source.
  float red[kClusterWarps][2 * kClusterSources];
  /// Block r's sums of the same (row r), pushed by block r into every block.
  float part[kClusterBlocks][2 * kClusterSources];
  /// Block r's Σ R(out)² for the fused norm.
  float normPart[kClusterBlocks];
  float alpha[kClusterSources]; ///< the softmax weights
};

/// Whether attn_res_clustered takes `p` on this launch (the same answer in
/// every block of a cluster: params and the launch's shape only).
__device__ bool clusteredFits(const AttnResParams &p, unsigned blocks) {
  const int64_t n = p.numBlocks + (p.extra ? 1 : 0);
  return p.numBlocks >= 0 && n >= 1 && n <= kClusterSources && p.dim > 0 &&
         p.dim % 8 == 0 && blocks <= kClusterBlocks && blockDim.y == 1 &&
         blockDim.z == 1 && blockDim.x % 32 == 0 &&
         (p.dim / 8 + blocks - 1) / blocks <= blockDim.x && chunksAligned(p);
}

} // namespace

/// k3_attn_res_clustered: attn_res's result (AttnResParams; out within
/// rounding of k3_attn_res and attnResCpu) from one thread-block cluster of
/// C blocks, where k3_attn_res's single block walks all of D. Block r owns
/// chunks [r·⌈D/8C⌉, (r+1)·⌈D/8C⌉) of 8 elements, one per thread: it loads
/// its weight chunks before the dependent-launch wait and every source's
/// chunk after it in one round, reduces Σ V_i² and Σ V_i·wNorm·wProj per
/// source over the block, and stores those 2n sums into row r of every
/// block's `part` (distributed shared memory). After a cluster barrier each
/// block adds the C rows in rank order (so every block computes the same
/// bits), takes logit_i = rsqrt(mean(V_i²) + eps) · Σ V_i·w (the CPU rounds
/// V·rsqrt before the product: a reordering within the sums' own rounding),
/// the softmax as attn_res, and mixes its own chunks in source order with
/// unfused multiply-adds. The fused norm's Σ R(out)² crosses the cluster
/// the same way (one more barrier); the normalised chunk is stored from
/// registers. No global scratch or atomics.
/// Grid: one cluster (codegen: C = attnResClusterBlocks(D, n), block
/// kAttnResClusterThreads; C = 1 is a plain one-block launch); blocks of
/// other clusters return at once.
/// Limits: 1 <= n <= kAttnResClusterMaxSources, D % 8 == 0, ⌈D/8C⌉ <=
/// blockDim.x, C <= kAttnResClusterMaxBlocks, a 1-D block of whole warps
/// of at most kAttnResClusterThreads, every pointer 16-byte aligned (else
/// out is written as NaN); out must not alias a source.
extern "C" __global__ void __launch_bounds__(kAttnResClusterThreads)
    k3_attn_res_clustered(const AttnResParams p) {
  dev::allowDependentLaunch();
  __shared__ AttnResClusterShared s;
  const unsigned C = dev::clusterBlocks(), rank = dev::clusterRank();
  if (blockIdx.x / C != 0) // not the first cluster: the whole cluster leaves
    return;
  if (!clusteredFits(p, C)) {
    dev::waitForPriorGrids();
    for (int64_t i = rank * blockDim.x + threadIdx.x; i < p.dim;
         i += int64_t(C) * blockDim.x)
      p.out[i] = dev::kBf16NaN; // an unsupported call is never silent
    return;
  }
  // Every block must have started before another stores into its shared
  // memory: arrive now, wait just before the first remote store.
  dev::clusterArrive();

  const int n = static_cast<int>(p.numBlocks) + (p.extra ? 1 : 0);
  const int64_t D = p.dim, per = (D / 8 + C - 1) / C;
  const int64_t c = rank * per + threadIdx.x; // this thread's chunk
  const bool mine = threadIdx.x < per && c < D / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  const float fD = static_cast<float>(D);

  // The weights depend on nothing the step writes: load them before the
  // wait, then every source's chunk in one round.
  // Threads past the slice hold zeros (0 · w must not meet uninitialised
  // registers: 0 · NaN is NaN).
  Chunk<8> wn, wp, nw, v[kClusterSources];
  wn.zero();
  wp.zero();
  nw.zero();
  if (mine) {
    wn.loadRO(p.wNorm + c * 8);
    wp.loadRO(p.wProj + c * 8);
    if (p.normWeight)
      nw.loadRO(p.normWeight + c * 8);
  }
  dev::waitForPriorGrids();
#pragma unroll
  for (int b = 0; b < kClusterSources; ++b) {
    if (mine && b < n)
      v[b].loadRO((b < p.numBlocks ? p.blocks + b * D : p.extra) + c * 8);
    else
      v[b].zero();
  }

  // 1. Per source: Σ V² and Σ V·(wNorm·wProj) over this block's chunks (the
  // product of two bf16 is exact in fp32). Zero chunks add nothing.
  float sums[2 * kClusterSources];
#pragma unroll
  for (int b = 0; b < kClusterSources; ++b) {
    float ss = 0.0f, dot = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float x = v[b].at(e);
      ss = fmaf(x, x, ss);
      dot = fmaf(x, wn.at(e) * wp.at(e), dot);
    }
    sums[b] = ss;
    sums[kClusterSources + b] = dot;
  }
#pragma unroll
  for (int k = 0; k < 2 * kClusterSources; ++k)
    sums[k] = dev::warpSum(sums[k]);
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < 2 * kClusterSources; ++k)
      s.red[warp][k] = sums[k];
  __syncthreads();
  dev::clusterWait();
  // Thread k adds sum k over the warps in order and pushes it to row
  // `rank` of every block's `part`.
  if (threadIdx.x < 2 * kClusterSources) {
    float t = 0.0f;
    for (int w = 0; w < warps; ++w)
      t += s.red[w][threadIdx.x];
    for (unsigned r = 0; r < C; ++r)
      dev::storeCluster(&s.part[rank][threadIdx.x], r, t);
  }
  dev::clusterSync();

  // 2. Logits and the softmax, as attn_res's, in one thread; the rows are
  // added in rank order, so every block gets the same α.
  if (threadIdx.x == 0) {
    for (int i = 0; i < n; ++i) {
      float ss = 0.0f, dot = 0.0f;
      for (unsigned r = 0; r < C; ++r) {
        ss += s.part[r][i];
        dot += s.part[r][kClusterSources + i];
      }
      s.alpha[i] = dot * (1.0f / sqrtf(ss / fD + p.eps));
    }
    softmaxInPlace(s.alpha, n);
  }
  __syncthreads();

  // 3. out = R(Σ_i α_i V_i), sources in order, unfused as on the CPU.
  Chunk<8> o;
  float ss = 0.0f;
  {
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
      acc[e] = 0.0f;
#pragma unroll
    for (int b = 0; b < kClusterSources; ++b)
      if (b < n) {
        const float a = s.alpha[b];
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[e] = __fadd_rn(acc[e], __fmul_rn(a, v[b].at(e)));
      }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const uint16_t r = dev::fToBf16(acc[e]);
      o.set(e, r);
      const float x = dev::bf16ToF(r);
      ss = fmaf(x, x, ss);
    }
  }
  if (!p.normWeight) {
    if (mine)
      o.store(p.out + c * 8);
    return; // no block reads another's shared memory after the barrier
  }

  // 4. The fused rms_norm: Σ R(out)² over the block, then over the cluster
  // in rank order; each thread normalises the chunk it holds.
  ss = dev::warpSum(ss);
  if (lane == 0)
    s.red[warp][0] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.0f;
    for (int w = 0; w < warps; ++w)
      t += s.red[w][0];
    for (unsigned r = 0; r < C; ++r)
      dev::storeCluster(&s.normPart[rank], r, t);
  }
  dev::clusterSync();
  float total = 0.0f;
  for (unsigned r = 0; r < C; ++r)
    total += s.normPart[r];
  const float rn = 1.0f / sqrtf(total / fD + p.normEps);
  if (mine) {
    Chunk<8> y;
#pragma unroll
    for (int e = 0; e < 8; ++e)
      y.set(e, static_cast<uint16_t>(dev::rmsNormBf16(o.at(e), nw.at(e), rn)));
    y.store(p.out + c * 8);
  }
}

/// k3_attn_res_commit: blocks[index, :] = src, an exact bf16 copy
/// (AttnResCommitParams). Grid: any (codegen: 1 block); threads stride over
/// the grid in 16-byte chunks when D % 8 == 0 and both rows are aligned,
/// else over single elements. src may be the destination row itself (then
/// nothing needs to move); a partial overlap is not supported.
extern "C" __global__ void k3_attn_res_commit(const AttnResCommitParams p) {
  dev::enterStep();
  uint16_t *dst = p.blocks + p.index * p.dim;
  if (dst == p.src)
    return;
  if (p.dim % 8 == 0 && aligned16(dst) && aligned16(p.src)) {
    const uint4 *from = reinterpret_cast<const uint4 *>(p.src);
    uint4 *to = reinterpret_cast<uint4 *>(dst);
    // Read-only loads (src is not the row being written), unrolled so a
    // thread's loads are in flight together (codegen: 1 block, K3: 3.5 each).
#pragma unroll 4
    for (int64_t i = dev::globalThread(); i < p.dim / 8;
         i += dev::gridThreads())
      to[i] = __ldg(from + i);
  } else {
#pragma unroll 4
    for (int64_t i = dev::globalThread(); i < p.dim; i += dev::gridThreads())
      dst[i] = __ldg(p.src + i);
  }
}
