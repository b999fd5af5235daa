//===- GemvParams.h - Parameters of the decode projections --------*- C++
//-*-===//
//
// The contract between codegen, the runtime and the gemv kernels (CPU and
// CUDA). Plain C types only. A plan's launch is one token: every projection
// of a decode step is a matrix-vector product y[N] = W[N, K] · x[K] with fp32
// accumulation. The multi-row forms (the *RowsParams below) run one launch
// for the several rows of a step (a decode batch, a prompt chunk): the
// runtime's choice, not the plan's.
//
// Two fusions live here because every projection site can use them:
//  * pre-norm: "RMSNorm folded into the following projection". x is first
//    normalised exactly as `rms_norm` would (R(R(x·rsqrt(mean x² + eps))·w)),
//    so the result equals rms_norm followed by linear, bit for bit;
//  * residual epilogue: y = R(R(Wx) + residual), equal to linear then `add`.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_GEMV_GEMVPARAMS_H
#define K3C_KERNELS_GEMV_GEMVPARAMS_H

#include "kernels/common/HostDevice.h"
#include "kernels/common/MmaTileParams.h"
#include "kernels/common/WeightRef.h"

#include <cstdint>

namespace k3 {

/// `linear`: y = W · x (optionally pre-normed x, optionally + residual).
///
/// Output: exactly one of `out` (bf16, y = R(Σ W x)) and `outF32` (fp32,
/// unrounded: router logits, lm_head) is non-null. The residual epilogue is
/// only defined with `out` (it must be null with `outF32`).
struct LinearParams {
  const uint16_t *x = nullptr; ///< [k] bf16
  WeightRef w;                 ///< [n, k]; MXFP4 needs k % 32 == 0
  int64_t n = 0;               ///< output rows
  int64_t k = 0;               ///< input columns
  /// [k] bf16 RMSNorm weight, may be null (no pre-norm).
  const uint16_t *normWeight = nullptr;
  float normEps = 1e-5f; ///< used only with normWeight
  /// [n] bf16, may be null: out = R(R(W x) + residual). May alias `out`.
  const uint16_t *residual = nullptr;
  uint16_t *out = nullptr; ///< [n] bf16, or null when outF32 is given
  float *outF32 = nullptr; ///< [n] fp32 unrounded, may be null
};

/// Most projections one `linear_multi` launch carries (KDA: q, k, v, f_a, b,
/// g — or g_a — is six; MLA: q_a or q, kv_a, g is three).
constexpr int kLinearMultiMax = 8;

/// One projection of a `linear_multi`.
struct LinearMultiEntry {
  WeightRef w; ///< [n, k] (k shared by all entries)
  int64_t n = 0;
  uint16_t *out = nullptr; ///< [n] bf16 = R(W · x̂)
};

/// `linear_multi`: several projections of the same (optionally pre-normed)
/// input in one launch; entry i gives exactly what `linear` with the same
/// x, normWeight and normEps gives.
struct LinearMultiParams {
  const uint16_t *x = nullptr; ///< [k] bf16
  int64_t k = 0;
  const uint16_t *normWeight = nullptr; ///< [k] bf16, may be null
  float normEps = 1e-5f;
  int32_t count = 0; ///< 1 .. kLinearMultiMax
  LinearMultiEntry entries[kLinearMultiMax];
};

/// Tokens whose x̂ one pass of the multi-row forms stages in shared memory:
/// each weight row read from HBM serves them all (more tokens take more
/// passes, each reading the weights again).
constexpr int kGemvRowsPerPass = 8;

/// 16-byte chunks one token's staged x̂ takes in the multi-row forms (k / 8
/// rounded up to whole swizzle groups of 4 chunks).
K3C_HOST_DEVICE constexpr int64_t gemvRowsTokenChunks(int64_t k) {
  return ((k + 7) / 8 + 3) / 4 * 4;
}

/// Dynamic shared memory a multi-row launch of `rows` tokens over k input
/// columns needs (bytes): one pass's tokens.
K3C_HOST_DEVICE constexpr int64_t gemvRowsSmemBytes(int64_t k, int64_t rows) {
  return (rows < kGemvRowsPerPass ? rows : kGemvRowsPerPass) *
         gemvRowsTokenChunks(k) * 16;
}

/// The tensor-core forms of the multi-row projections (k3_linear_rows_mma,
/// k3_linear_multi_rows_mma: the same params as k3_linear_rows /
/// k3_linear_multi_rows), on the tile of kernels/common/MmaTile.cuh: a
/// block computes kGemvMmaRows weight rows by kGemvMmaTokens tokens. Their
/// outputs differ from the single-row launch's by summation order (bf16
/// products summed in fp32 by the tensor cores), not bit for bit: prompt
/// chunks with PrefillForm::Chunk only.
constexpr int kGemvMmaRows = kMmaTileRows;
constexpr int kGemvMmaTokens = kMmaTileTokens;
constexpr int kGemvMmaThreads = kMmaTileThreads;
constexpr int64_t kGemvMmaSmemBytes = kMmaTileSmemBytes;

/// Split over k: launched in thread-block clusters of `split` blocks (grid
/// x = tiles × split), block r of a cluster sums the r-th share of every
/// tile's k stages, and the cluster adds the shares in rank order through
/// distributed shared memory (the same bits for any grid of that split). A
/// chunk's projections have few tiles (Kimi-Linear's o_proj: 36 for 132
/// SMs), so without it most SMs idle and each block's stream is a chain of
/// 64 dependent stages. At most kGemvMmaMaxSplit (a portable cluster), and
/// each share at least kGemvMmaMinShareStages stages.
constexpr int kGemvMmaMaxSplit = 8;
constexpr int kGemvMmaMinShareStages = 4;

/// The split a launch of `tiles` tiles (weight-row tiles × token tiles) over
/// k input columns takes on a device of `sms` SMs: the smallest power of two
/// that gives every SM a block, within the limits above.
K3C_HOST_DEVICE constexpr int gemvMmaSplit(int64_t tiles, int64_t k,
                                           int64_t sms) {
  const int64_t stages = (k + kMmaTileK - 1) / kMmaTileK;
  int split = 1;
  while (split < kGemvMmaMaxSplit && tiles * split < sms &&
         stages >= 2 * split * kGemvMmaMinShareStages)
    split *= 2;
  return split;
}

/// The multi-row form of `linear` (k3_linear_rows): the same projection for
/// `rows` tokens in one launch, token t's x, residual and out (or outF32) at
/// one's pointers + t times their stride. Each token's output is exactly
/// what k3_linear with `one` moved to that token gives (same grid), bit for
/// bit; the weights are read once per kGemvRowsPerPass tokens. The rows of
/// a decode batch or a prompt chunk sit in per-row copies of the step arena,
/// a fixed distance apart, hence the strides.
struct LinearRowsParams {
  LinearParams one;           ///< token 0's launch
  int32_t rows = 1;           ///< tokens, >= 1
  int64_t xStride = 0;        ///< elements between tokens' x
  int64_t residualStride = 0; ///< elements between tokens' residual
  int64_t outStride = 0;      ///< elements between tokens' out / outF32
};

/// The multi-row form of `linear_multi` (k3_linear_multi_rows), as
/// LinearRowsParams: every entry's out moves by outStride per token.
struct LinearMultiRowsParams {
  LinearMultiParams one;
  int32_t rows = 1;
  int64_t xStride = 0;
  int64_t outStride = 0;
};

/// The pre-norm of a tensor-core launch (k3_linear_rows_prenorm): out_t =
/// x̂_t = R(R(x_t · r_t) · normWeight) for `rows` tokens, r_t the factor the
/// single-row k3_linear computes for x_t (its block's fp32 sum of squares:
/// the same bits). The tensor-core forms then read x̂ with no norm of their
/// own, instead of every block of the launch norming every token again.
/// Grid: one block per token (blockIdx.x), 256 threads.
struct LinearPreNormParams {
  const uint16_t *x = nullptr; ///< [rows][xStride] bf16, x[t] at t·xStride
  const uint16_t *normWeight = nullptr; ///< [k] bf16
  uint16_t *out = nullptr;              ///< [rows][outStride] bf16
  int64_t k = 0;
  int64_t xStride = 0;   ///< elements between tokens' x
  int64_t outStride = 0; ///< elements between tokens' out
  float normEps = 1e-5f;
  int32_t rows = 0;
};

/// The narrow tensor-core forms (k3_linear_rows_mma16,
/// k3_linear_multi_rows_mma16): the projections of up to kGemvMma16Tokens
/// rows (the runtime takes them for steps of 9 to 16 rows: RowsForms.h
/// kMma16MinRows; a decode batch, a prompt's short chunk) streamed once from
/// HBM, as the single-row GEMV streams them, with the products on the
/// tensor cores. The wide tile (kGemvMma*) stages 64-token tiles of both
/// operands through shared memory, which for 16 rows leaves most of each
/// stage's room and barrier to zeros; here a warp loads its 16 weight rows
/// straight into mma fragments (the k order permuted within each group of
/// 32 columns, the staged x̂ permuted alike) and keeps two batches of loads
/// in flight, like the GEMV's streamed path. A block stages all rows' x̂
/// (folding the pre-norm) once, in kGemvMma16Threads threads, one block an
/// SM. Outputs within the tensor cores' rounding of the CPU, not the
/// single-row launch's bits.
constexpr int kGemvMma16Tokens = 16;
/// Weight rows of a tile (the mma's M).
constexpr int kGemvMma16Rows = 16;
/// Columns of a group: a lane's 16-byte load of a row covers 8 of them.
constexpr int kGemvMma16GroupK = 32;
constexpr int kGemvMma16Threads = 512;
constexpr int kGemvMma16Warps = kGemvMma16Threads / 32;
/// fp32 sums of one (tile, part): 16 rows × 16 rows of the batch.
constexpr int kGemvMma16TileFloats = kGemvMma16Rows * kGemvMma16Tokens;
/// Most parts a tile's k splits into.
constexpr int kGemvMma16MaxParts = 64;

/// Dynamic shared memory of a narrow launch over k input columns: every
/// row's x̂ (bf16), kGemvMma16Tokens rows.
K3C_HOST_DEVICE constexpr int64_t gemvMma16SmemBytes(int64_t k) {
  return int64_t{kGemvMma16Tokens} * k * 2;
}

/// Work of a narrow launch: each tile of kGemvMma16Rows weight rows has its
/// k groups in `parts` contiguous shares; a unit (tile, part) is one warp's,
/// the warps of the grid taking units w, w + W, ... (W warps). With parts
/// > 1 each warp stores its unit's sums to `partials` and the last of a
/// tile's parts to arrive (its counter) adds them in part order and stores
/// the outputs: the same bits for any grid. `counters` are zero between
/// launches (the last arrival resets its tile's).
struct GemvSplitScratch {
  float *partials = nullptr;    ///< [tiles · parts][kGemvMma16TileFloats]
  uint32_t *counters = nullptr; ///< [tiles], zero
  int32_t parts = 1;            ///< 1 .. kGemvMma16MaxParts
};

/// The parts a narrow launch splits each of `tiles` tiles' `groups` k
/// groups into for `warps` warps in the grid: the count that minimises the
/// rounds of units (ceil(tiles · parts / warps)) times a unit's groups plus
/// its reduction (a partial stored and its arrival counted: about two
/// groups' time; the last part's warp reading every part's sums, two parts
/// a round trip: about one group's time each), the fewest parts on ties.
/// On 132 SMs × 16 warps: Kimi-Linear's o_proj (144 tiles of 128 groups)
/// 13 parts, one round of 10 groups; its KDA projections (~780 tiles of 72)
/// 5 parts, two rounds of 15; the lm_head (10240 tiles) one.
K3C_HOST_DEVICE constexpr int gemvMma16Parts(int64_t tiles, int64_t groups,
                                             int64_t warps) {
  int best = 1;
  int64_t bestCost = -1;
  for (int parts = 1; parts <= kGemvMma16MaxParts && parts <= groups; ++parts) {
    const int64_t rounds = (tiles * parts + warps - 1) / warps;
    const int64_t per = (groups + parts - 1) / parts;
    const int64_t cost = rounds * (per + (parts > 1 ? 2 + parts / 2 : 0));
    if (bestCost < 0 || cost < bestCost) {
      best = parts;
      bestCost = cost;
    }
  }
  return best;
}

/// k3_linear_rows_mma16's params: the multi-row launch (rows <=
/// kGemvMma16Tokens) and its split over k.
struct LinearRowsMma16Params {
  LinearRowsParams rows;
  GemvSplitScratch split;
};

/// k3_linear_multi_rows_mma16's params, as LinearRowsMma16Params.
struct LinearMultiRowsMma16Params {
  LinearMultiRowsParams rows;
  GemvSplitScratch split;
};

} // namespace k3

#endif // K3C_KERNELS_GEMV_GEMVPARAMS_H
