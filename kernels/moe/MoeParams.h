//===- MoeParams.h - Parameters of the MoE ops --------------------*- C++
//-*-===//
//
// The contract between codegen, the runtime and the MoE kernels (CPU and
// CUDA). Plain C types only. K3.md §5-6 is the math, NUMERICS.md "MoE" and
// "gated MLP" the rounding points. The latent projections
// (routed_expert_down/up_proj) are `linear`; the latent norm is `rms_norm`.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_MOE_MOEPARAMS_H
#define K3C_KERNELS_MOE_MOEPARAMS_H

#include "kernels/common/HostDevice.h"
#include "kernels/common/MmaTileParams.h"
#include "kernels/common/WeightRef.h"

#include <cstdint>

namespace k3 {

/// `router` (noaux_tc, sigmoid, one expert group), all fp32, no rounding:
/// s = sigmoid(gate · h); rank by s + bias (descending; equal values: the
/// lower expert index first); the weights are the UNBIASED s of the chosen
/// experts, divided by (Σ + 1e-20) when renormalize, then times scaling.
/// Outputs are in rank order (ids[0] has the largest s + bias). Group-limited
/// routing (num_expert_group > 1) is not supported: with one group it is a
/// no-op. NaN scores are never chosen before finite ones. With `normWeight`
/// the scores are taken on RMSNorm(h, normWeight, normEps), rounded as
/// `rms_norm` rounds it, so the norm needs no launch of its own.
struct RouterParams {
  const uint16_t *h = nullptr; ///< [dim] bf16: post_attention_layernorm out,
                               ///< or its input with normWeight
  const uint16_t *normWeight = nullptr; ///< [dim] bf16, may be null
  float normEps = 1e-5f;
  const uint16_t *gate = nullptr; ///< [numExperts, dim] bf16 (gate.weight)
  const float *bias = nullptr;    ///< [numExperts] fp32, may be null (= 0)
  int64_t numExperts = 0;         ///< E
  int64_t dim = 0;                ///< D
  int32_t topK = 0;               ///< 1 <= topK <= E
  int32_t renormalize = 1;        ///< moe_renormalize
  float scaling = 1.0f;           ///< routed_scaling_factor
  int32_t *outIds = nullptr;      ///< [topK] int32
  float *outWeights = nullptr;    ///< [topK] fp32
  int32_t forceExpert = -1; ///< >= 0: mutant, every slot routes to this expert
};

/// `gated_mlp` (dense layer 0, shared experts, one expert):
///   x̂ = x, or rms_norm(x, normWeight, normEps) when normWeight is set;
///   g = R(W1 x̂), u = R(W3 x̂), a = R(act(g, u)) (fp32), y = R(W2 a);
///   out = y, or R(y + residual) when residual is set.
struct GatedMlpParams {
  const uint16_t *x = nullptr;          ///< [inDim] bf16
  const uint16_t *normWeight = nullptr; ///< [inDim] bf16, may be null
  float normEps = 1e-5f;
  WeightRef w1; ///< [interDim, inDim] (gate_proj / w1)
  WeightRef w3; ///< [interDim, inDim] (up_proj / w3)
  WeightRef w2; ///< [outDim, interDim] (down_proj / w2)
  int64_t inDim = 0;
  int64_t interDim = 0;
  int64_t outDim = 0;
  int32_t activation = kActSiTU;      ///< kActSiTU or kActSwiGLU
  float beta1 = 4.0f;                 ///< SiTU β1
  int32_t hasBeta2 = 1;               ///< SiTU: 0 = plain u
  float beta2 = 25.0f;                ///< SiTU β2
  const uint16_t *residual = nullptr; ///< [outDim] bf16, may be null
  uint16_t *out = nullptr;            ///< [outDim] bf16; may alias residual
};

/// `moe_experts` (the fused expert mix): for the topK routed experts run the
/// gated MLP on x̂ and return r = R(Σ_k weights[k] · y_{ids[k]}), the y
/// being the experts' bf16 outputs, the sum in fp32 in k order. Optional
/// parts, each rounded where its own launch would round (NUMERICS.md "MoE"):
///   x̂ = x, or RMSNorm(x, normWeight, normEps) when normWeight is set;
///   with a shared expert (sharedInterDim > 0): r = R(r + s), s the bf16
///   output of the gated MLP sharedW1/W3/W2 on x̂;
///   with a residual: out = R(r + residual), else out = r.
/// So the whole FFN of a Kimi-Linear MoE layer (post-attention norm, routed
/// and shared experts, residual add) is a router and this launch.
///
/// Experts are given as pointer tables indexed by expert id (one WeightRef
/// per expert per matrix), not base + stride: checkpoint experts are separate
/// tensors, possibly in different shards, with no common base. The tables
/// live where the kernel runs (host memory for the CPU, device memory for
/// CUDA).
struct MoeExpertsParams {
  const uint16_t *x = nullptr;    ///< [dim] bf16: z (latent) or h
  const int32_t *ids = nullptr;   ///< [topK] int32, router output
  const float *weights = nullptr; ///< [topK] fp32, router output
  int32_t topK = 0;
  int64_t numExperts = 0;        ///< E (table length; ids < E)
  const WeightRef *w1 = nullptr; ///< [E] tables; each [interDim, dim]
  const WeightRef *w3 = nullptr; ///< [E] tables; each [interDim, dim]
  const WeightRef *w2 = nullptr; ///< [E] tables; each [dim, interDim]
  int64_t dim = 0;               ///< Dm (expert input = output width)
  int64_t interDim = 0;          ///< I (moe_intermediate_size)
  int32_t activation = kActSiTU;
  float beta1 = 4.0f;
  int32_t hasBeta2 = 1;
  float beta2 = 25.0f;
  const uint16_t *normWeight = nullptr; ///< [dim] bf16, may be null
  float normEps = 1e-5f;
  int64_t sharedInterDim = 0; ///< S·I; 0: no shared expert
  WeightRef sharedW1;         ///< [sharedInterDim, dim] (shared gate_proj)
  WeightRef sharedW3;         ///< [sharedInterDim, dim] (shared up_proj)
  WeightRef sharedW2;         ///< [dim, sharedInterDim] (shared down_proj)
  const uint16_t *residual = nullptr; ///< [dim] bf16, may be null
  uint16_t *out = nullptr; ///< [dim] bf16; must not alias x or residual
};

/// `moe_experts_mxfp4`: `moe_experts` (same params, same results within
/// the sums' rounding) for routed experts stored in MXFP4, on the tensor
/// cores (Moe.cu). Its limits, read by codegen and the plan check: blocks of
/// kMoeMxfp4Threads threads; dim and interDim multiples of
/// kMoeMxfp4StageCols up to kMoeMxfp4MaxCols (an activation vector is staged
/// in shared memory as fp16); no norm of x and no shared expert (K3's latent
/// experts have neither). Outside them, or with a bf16 expert, out is NaN.
constexpr int32_t kMoeMxfp4Threads = 256;
/// Columns of a weight stage (the shared-memory ring's unit): 16 MXFP4
/// blocks of every row of an item.
constexpr int64_t kMoeMxfp4StageCols = 512;
/// Longest row (dim for W1 / W3, interDim for W2).
constexpr int64_t kMoeMxfp4MaxCols = 4096;

/// Whether `moe_experts_mxfp4` takes experts of these sizes.
K3C_HOST_DEVICE constexpr bool moeExpertsMxfp4Fits(int64_t dim,
                                                   int64_t interDim,
                                                   bool hasNorm,
                                                   bool hasShared) {
  return dim > 0 && interDim > 0 && dim % kMoeMxfp4StageCols == 0 &&
         interDim % kMoeMxfp4StageCols == 0 && dim <= kMoeMxfp4MaxCols &&
         interDim <= kMoeMxfp4MaxCols && !hasNorm && !hasShared;
}

/// `moe_ffn`: `router` then `moe_experts` in one launch (k3.moe_ffn): the
/// router's outIds / outWeights are the buffers the experts' ids / weights
/// read. The CPU runs the two in turn; the CUDA kernel scores experts and
/// runs the shared expert's rows first, the routed experts once the top-k
/// is known (Moe.cu).
struct MoeFfnParams {
  RouterParams router;
  MoeExpertsParams experts;
  /// A later launch's weight (the next layer's first projection), asked of
  /// L2 while the routing leaves the HBM idle; none when empty.
  L2Prefetch l2Prefetch;
};

/// The multi-row form of `moe_ffn` (k3_moe_ffn_rows): the FFN of `rows`
/// tokens in one launch over the union of the experts they choose. Token
/// t's activation pointers (router.h, outIds, outWeights; experts.x, ids,
/// weights, residual, out) are one's plus t · stride bytes (the rows' step
/// arenas are one allocation, a fixed distance apart); every other field is
/// shared. Each token's ids, weights and output are exactly what k3_moe_ffn
/// with `one` moved to that token gives, bit for bit: every (expert, token)
/// dot product has the single-row kernel's lanes and order; each chosen
/// expert's weights are streamed once for all the tokens that chose it.
struct MoeFfnRowsParams {
  MoeFfnParams one;   ///< token 0's launch
  int32_t rows = 1;   ///< tokens, 1 .. kMoeRowsMax
  int64_t stride = 0; ///< bytes between consecutive tokens' pointers
};

/// Tokens of one k3_moe_ffn_rows launch (the runtime launches larger
/// batches in groups).
constexpr int32_t kMoeRowsMax = 16;
/// Module scratch of k3_moe_ffn_rows: router scores (rows · E floats),
/// (row, rank) pairs (rows · topK), activations (bf16: rows · topK routed
/// rows of interDim padded to 8, then rows shared rows) and expert outputs
/// (floats: (rows + rows · topK) · dim).
constexpr int64_t kMoeRowsScoreCap = int64_t(kMoeRowsMax) * 8192;
constexpr int64_t kMoeRowsPairCap = 1024;
constexpr int64_t kMoeRowsActCap = int64_t(1) << 21;
constexpr int64_t kMoeRowsYCap = int64_t(1) << 21;
/// Widest expert input the form stages (as moe_ffn's kStageCap) and the
/// ranking stage's words (rankTopK, as k3_router's).
constexpr int64_t kMoeRowsDimCap = 8192;
constexpr int64_t kMoeRowsRankWords = 8192;
/// Partial sums per token of the staged RMSNorm factor (moe_ffn's fixed
/// split, so each token's factor has its bits).
constexpr int64_t kMoeNormParts = 256;

/// Dynamic shared memory of a k3_moe_ffn_rows launch (bytes): every
/// token's x̂ (bf16) and its norm partial sums; at least the ranking's
/// stage and the union's expert counts and ids.
K3C_HOST_DEVICE constexpr int64_t moeFfnRowsSmemBytes(int64_t dim,
                                                      int64_t numExperts,
                                                      int64_t topK,
                                                      int64_t rows) {
  const int64_t stage = rows * dim * 2 + rows * kMoeNormParts * 4;
  const int64_t rank = kMoeRowsRankWords * 4;
  const int64_t un = (((numExperts + 3) / 4) * 4 + rows * topK) * 4;
  const int64_t m = stage > rank ? stage : rank;
  return m > un ? m : un;
}

/// Whether k3_moe_ffn_rows takes `rows` tokens of `p`'s shape (sizes only;
/// the pointers' alignment is checked beside it). The kernel writes NaN
/// to every token's output when not.
K3C_HOST_DEVICE constexpr bool moeFfnRowsFit(const MoeFfnParams &p,
                                             int64_t rows) {
  const MoeExpertsParams &e = p.experts;
  const int64_t aStride = (e.interDim + 7) / 8 * 8;
  const int64_t sStride = (e.sharedInterDim + 7) / 8 * 8;
  const int64_t pairs = rows * e.topK;
  return rows >= 1 && rows <= kMoeRowsMax && e.dim % 8 == 0 &&
         e.dim > 0 && e.dim <= kMoeRowsDimCap && e.topK >= 1 &&
         e.topK == p.router.topK && e.numExperts == p.router.numExperts &&
         e.dim == p.router.dim && p.router.topK <= 256 &&
         rows * e.numExperts <= kMoeRowsScoreCap && pairs <= kMoeRowsPairCap &&
         pairs * aStride + rows * sStride <= kMoeRowsActCap &&
         (rows + pairs) * e.dim <= kMoeRowsYCap &&
         ((e.numExperts + 3) / 4) * 4 + pairs <= kMoeRowsRankWords;
}

/// The MoE of a prompt chunk on the tensor cores (k3_moe_chunk_route, _plan,
/// _gate_up, _down, _combine, launched in that order for up to
/// kMoeChunkRowsMax rows of a moe_ffn launch, PrefillForm::Chunk): route
/// every row (x̂ = its norm, scores, top-k, weights: the router's math, its
/// dot products in another order), list each expert's (row, rank) pairs in
/// row order, then each chosen expert's gate/up and down once for all its
/// pairs and the shared expert once for all rows on the tile of
/// kernels/common/MmaTile.cuh (bf16 weights only), and mix each row's
/// outputs as moe_experts does. Within rounding of moe_ffn, not bit for bit.
/// Row t's activation pointers are one's + t · stride bytes, as
/// MoeFfnRowsParams; the scratch is the runtime's (moeChunkScratchBytes).
struct MoeChunkParams {
  MoeFfnParams one;
  int32_t rows = 0;
  int64_t stride = 0;
  /// [kMoeChunkRowsMax] zeros between launches, first in the scratch so
  /// that every launch finds them at the same place (a route grid of
  /// several blocks per row: they count their arrivals here, and the last
  /// resets it).
  uint32_t *arrivals = nullptr;
  float *scores = nullptr;    ///< [rows, numExperts]: ditto, the scores
  uint16_t *xhat = nullptr;   ///< [rows, dim] bf16: each row's x̂
  int32_t *pairAt = nullptr;  ///< [rows · topK]: pair t·topK + k's place
  int32_t *order = nullptr;   ///< [rows · topK]: the pair at each place
  int32_t *offsets = nullptr; ///< [numExperts + 1]: each expert's first place
  uint16_t *act = nullptr;    ///< [rows · topK, interDim] bf16, by place
  uint16_t *y = nullptr;      ///< [rows · topK, dim] bf16, by place
  uint16_t *sharedAct = nullptr; ///< [rows, sharedInterDim] bf16
  uint16_t *sharedY = nullptr;   ///< [rows, dim] bf16
  /// k3_moe_chunk_plan's form: 0, thread 0 walks the pairs; 1, the block
  /// counts, scans and places them in parallel (the same places; rows that
  /// name an expert twice take the walk). Not yet measured on a GPU: the
  /// runtime takes 1 with K3C_MOE_CHUNK_PLAN=parallel.
  int32_t parallelPlan = 0;
};

/// Rows of one MoE-chunk launch sequence (larger steps go in groups).
constexpr int32_t kMoeChunkRowsMax = 256;
/// Most experts the route kernel ranks (K3: 896).
constexpr int64_t kMoeChunkMaxExperts = 1024;
/// Gate/up rows of a tile: kMmaTileRows / 2 of each.
constexpr int64_t kMoeChunkInterTile = 32;

/// Whether the MoE-chunk kernels take `p`'s shapes (bf16 weights are the
/// runtime's check): widths multiples of the tiles, dim staged whole, and a
/// router that names each expert at most once a row (the gate/up and down
/// grids give an expert as many token tiles as the chunk has rows: the
/// router-expert0 mutant's forced expert, every rank of every row, takes
/// the multi-row form instead).
K3C_HOST_DEVICE constexpr bool moeChunkFits(const MoeFfnParams &p) {
  const MoeExpertsParams &e = p.experts;
  return p.router.forceExpert < 0 && e.dim > 0 && e.dim % 8 == 0 &&
         e.dim <= kMoeRowsDimCap && e.interDim > 0 &&
         e.interDim % kMoeChunkInterTile == 0 &&
         e.sharedInterDim % kMoeChunkInterTile == 0 && e.topK >= 1 &&
         e.topK <= 32 && e.topK == p.router.topK &&
         e.numExperts == p.router.numExperts && e.numExperts >= e.topK &&
         e.numExperts <= kMoeChunkMaxExperts && e.dim == p.router.dim &&
         p.router.h == e.x && p.router.normWeight == e.normWeight &&
         p.router.normEps == e.normEps && p.router.outIds == e.ids &&
         p.router.outWeights == e.weights;
}

/// Points c's scratch fields (arrivals .. sharedY) into `base` for c.rows
/// rows of c.one, each part 256-byte aligned, in MoeChunkParams' order;
/// returns the bytes they take (`base` null: only the count). `arrivals`
/// is at `base` whatever the rows: the caller zeroes it once.
K3C_HOST_DEVICE inline int64_t moeChunkBindScratch(MoeChunkParams &c,
                                                   uint8_t *base) {
  const MoeExpertsParams &e = c.one.experts;
  const int64_t rows = c.rows, pairs = rows * e.topK;
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    uint8_t *p = base ? base + at : nullptr;
    at += (bytes + 255) / 256 * 256;
    return p;
  };
  c.arrivals = reinterpret_cast<uint32_t *>(take(kMoeChunkRowsMax * 4));
  c.scores = reinterpret_cast<float *>(take(rows * e.numExperts * 4));
  c.xhat = reinterpret_cast<uint16_t *>(take(rows * e.dim * 2));
  c.pairAt = reinterpret_cast<int32_t *>(take(pairs * 4));
  c.order = reinterpret_cast<int32_t *>(take(pairs * 4));
  c.offsets = reinterpret_cast<int32_t *>(take((e.numExperts + 1) * 4));
  c.act = reinterpret_cast<uint16_t *>(take(pairs * e.interDim * 2));
  c.y = reinterpret_cast<uint16_t *>(take(pairs * e.dim * 2));
  c.sharedAct = reinterpret_cast<uint16_t *>(take(rows * e.sharedInterDim * 2));
  c.sharedY = reinterpret_cast<uint16_t *>(take(rows * e.dim * 2));
  return at;
}

/// Bytes of the scratch of `rows` rows of `p` (moeChunkBindScratch's).
K3C_HOST_DEVICE inline int64_t moeChunkScratchBytes(const MoeFfnParams &p,
                                                    int64_t rows) {
  MoeChunkParams c;
  c.one = p;
  c.rows = static_cast<int32_t>(rows);
  return moeChunkBindScratch(c, nullptr);
}

/// What an event of a traced moe_ffn is (TraceEvent::kind, a
/// -DK3C_KERNEL_TRACE build: kernels/common/TraceEvent.h): a work
/// item's kind (t0: its draw, t1: its end), the launch start (after the
/// dependent-launch wait), or a phase of a router item (t1 - t0: since its
/// draw).
enum MoeTraceKind : uint32_t {
  kTraceRouter = 0,
  kTraceGateUp = 1,
  kTraceDown = 2,
  kTraceCombine = 3,
  kTraceStart = 4,
  kTraceRouterStaged = 5,
  kTraceRouterScored = 6,
  kTraceRouterArrived = 7, ///< the last router item to arrive only
  kTraceRouterRanked = 8,
  kTraceKinds = 9
};

} // namespace k3

#endif // K3C_KERNELS_MOE_MOEPARAMS_H
