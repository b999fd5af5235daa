//===- MmaTile.cuh - Tiles of tokens × weight rows on tensor cores -*- C++
//-*-===//
//
// The tensor-core tile of the prompt-chunk forms (kernels/gemv
// k3_linear_rows_mma, kernels/moe k3_moe_chunk_*): a block of kMmaTileThreads
// threads computes y[token][row] = Σ_c x[token][c] · W[row][c] for up to
// kMmaTileTokens tokens and kMmaTileRows weight rows, bf16 inputs, fp32 sums,
// on mma.sync m16n8k16. Stages of kMmaTileK columns of both operands go through
// shared memory by cp.async, kMmaTileStages - 1 stages ahead of the tensor
// cores; a row of 8 16-byte chunks keeps chunk c of row r at c ^ (r & 7), so
// the eight rows an ldmatrix reads at one column fall in distinct banks. Thread
// i copies chunk i % 8 of token / weight row i / 8 + 16u (u < 4 for weight
// rows, u < Tokens / 16 for tokens) of every stage, and may rewrite its own
// token chunks once they land (a folded pre-norm). Warp w owns weight rows
// 16w .. 16w + 15 (two n8 tiles) for every 16-token tile that holds a token.
// The token count of a tile is a template parameter (kMmaTileTokens, or
// kMmaNarrowTokens for steps of few tokens: a quarter of the tokens' room a
// stage, so more blocks an SM); a token's sums are the same bits in either
// (its 16-token tile's mma order does not depend on the others). The callers
// say where rows and tokens are.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_MMATILE_CUH
#define K3C_KERNELS_COMMON_MMATILE_CUH

#include "kernels/common/CudaCommon.cuh"
#include "kernels/common/MmaTileParams.h"

namespace k3 {
namespace dev {

constexpr int kMmaChunks = kMmaTileK / 8;
static_assert(kMmaChunks == 8, "the swizzle covers 8 chunks per row");
/// 16-byte chunks of one stage of a tile of `tokens` tokens: the tokens'
/// tile, then the weights'.
K3C_HOST_DEVICE constexpr int mmaStageChunks(int tokens) {
  return (tokens + kMmaTileRows) * kMmaChunks;
}
constexpr int kMmaStageChunks = mmaStageChunks(kMmaTileTokens);
/// Chunks each thread copies per stage of the weights' tile, and of a
/// tokens' tile of `tokens`.
constexpr int kMmaCopies = kMmaTileRows * kMmaChunks / kMmaTileThreads;
K3C_HOST_DEVICE constexpr int mmaTokenCopies(int tokens) {
  return tokens * kMmaChunks / kMmaTileThreads;
}
static_assert(kMmaTileTokens == kMmaTileRows &&
                  mmaTokenCopies(kMmaTileTokens) == kMmaCopies &&
                  kMmaCopies * kMmaTileThreads == kMmaTileRows * kMmaChunks,
              "each thread copies the same chunks of both tiles");
static_assert(mmaTokenCopies(kMmaNarrowTokens) * kMmaTileThreads ==
                  kMmaNarrowTokens * kMmaChunks,
              "the narrow tile's tokens: whole copies a thread");
constexpr int kMmaWarps = kMmaTileThreads / 32;
/// Weight rows of a tile per warp: two n8 tiles.
constexpr int kMmaWarpRows = kMmaTileRows / kMmaWarps;
static_assert(kMmaWarpRows == 16, "a warp holds two n8 tiles");
constexpr int kMmaTokenTiles = kMmaTileTokens / 16;
/// Token / weight rows between one thread's copies.
constexpr int kMmaRowStep = kMmaTileThreads / kMmaChunks;

/// A warp's sums of a tile of Tokens tokens: [16-token tile][n8 tile]
/// [fragment element].
template <int Tokens = kMmaTileTokens>
using MmaAccOf = float[Tokens / 16][2][4];
using MmaAcc = MmaAccOf<kMmaTileTokens>;

__device__ __forceinline__ int mmaSlot(int row, int chunk) {
  return row * kMmaChunks + (chunk ^ (row & 7));
}

/// acc = the tile's sums over k columns for weight rows n0 + [0, 64) of
/// `total` (wrow(r): row r's first element, 16-byte aligned, k % 8 == 0)
/// and tokens [0, nTok) (nTok <= Tokens; trow(i): token i's first element,
/// aligned). After
/// this thread's first weight stages are issued, `first()` runs (the PDL
/// wait, a norm prologue: it may synchronise). With `transform`,
/// xform(v, i, col) rewrites this thread's chunk v of token i at column col
/// (< k) once it has landed. `smem`: mmaTileSmemBytes(Tokens) bytes. The
/// caller synchronises before reusing `smem` (the last stage is read by all
/// warps).
template <bool Transform, int Tokens = kMmaTileTokens, class WRow, class TRow,
          class XForm, class First>
__device__ void mmaTileSums(const WRow &wrow, int64_t n0, int64_t total,
                            const TRow &trow, int nTok, int64_t k,
                            const XForm &xform, const First &first, uint4 *smem,
                            MmaAccOf<Tokens> &acc) {
  constexpr int kStage = mmaStageChunks(Tokens);
  constexpr int kTokenCopies = mmaTokenCopies(Tokens);
  constexpr int kTokenTiles = Tokens / 16;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tokenTiles = (nTok + 15) / 16;
  const int stages = static_cast<int>((k + kMmaTileK - 1) / kMmaTileK);
  const int chunk = threadIdx.x % kMmaChunks;
  const int row0 = threadIdx.x / kMmaChunks;
  uint4 *const xs = smem;                       // [stage][token][chunk]
  uint4 *const ws = smem + Tokens * kMmaChunks; // [stage][row][chunk]
  static_assert(kTokenCopies <= kMmaCopies, "no more tokens than rows");
  const uint16_t *wr[kMmaCopies];
  const uint16_t *xt[kMmaCopies]; // the first kTokenCopies
#pragma unroll
  for (int u = 0; u < kMmaCopies; ++u) {
    wr[u] = wrow(min(n0 + row0 + u * kMmaRowStep, total - 1));
    if (u < kTokenCopies)
      xt[u] = trow(min(row0 + u * kMmaRowStep, nTok - 1));
  }
  auto copyWeights = [&](int s) {
    const int64_t col = static_cast<int64_t>(s) * kMmaTileK + 8 * chunk;
    uint4 *tile = ws + (s % kMmaTileStages) * kStage;
#pragma unroll
    for (int u = 0; u < kMmaCopies; ++u) {
      const int r = row0 + u * kMmaRowStep;
      const bool valid = s < stages && col < k && n0 + r < total;
      copyAsync16OrZero(tile + mmaSlot(r, chunk), valid ? wr[u] + col : wr[u],
                        valid);
    }
  };
  auto copyInputs = [&](int s) {
    const int64_t col = static_cast<int64_t>(s) * kMmaTileK + 8 * chunk;
    uint4 *tile = xs + (s % kMmaTileStages) * kStage;
#pragma unroll
    for (int u = 0; u < kTokenCopies; ++u) {
      const int r = row0 + u * kMmaRowStep;
      const bool valid = s < stages && col < k && r < nTok;
      copyAsync16OrZero(tile + mmaSlot(r, chunk), valid ? xt[u] + col : xt[u],
                        valid);
    }
  };
  // The weights depend on no earlier kernel: their first stages go out
  // before `first` (the PDL wait).
  for (int s = 0; s < kMmaTileStages - 1; ++s)
    copyWeights(s);
  first();
  for (int s = 0; s < kMmaTileStages - 1; ++s) {
    copyInputs(s);
    commitAsyncCopies();
  }
#pragma unroll
  for (int m = 0; m < kTokenTiles; ++m)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.0f;

  for (int s = 0; s < stages; ++s) {
    waitAsyncGroups<kMmaTileStages - 2>();
    uint4 *xtile = xs + (s % kMmaTileStages) * kStage;
    const uint4 *wtile = ws + (s % kMmaTileStages) * kStage;
    if (Transform) {
      // This thread's own chunks (its copies have landed).
      const int64_t col = static_cast<int64_t>(s) * kMmaTileK + 8 * chunk;
      if (col < k) {
#pragma unroll
        for (int u = 0; u < kTokenCopies; ++u) {
          const int r = row0 + u * kMmaRowStep;
          if (r < nTok)
            xform(xtile[mmaSlot(r, chunk)], r, col);
        }
      }
    }
    // Every thread's stage s is in place, and every warp is done with
    // stage s - 1, whose buffers the next copies reuse.
    __syncthreads();
    copyWeights(s + kMmaTileStages - 1);
    copyInputs(s + kMmaTileStages - 1);
    commitAsyncCopies();
#pragma unroll
    for (int kk = 0; kk < kMmaTileK / 16; ++kk) {
      const int j = lane >> 3;
      uint32_t b[4];
      {
        const int r = kMmaWarpRows * warp + (j >> 1) * 8 + (lane & 7);
        loadMatrixX4(b, wtile + mmaSlot(r, 2 * kk + (j & 1)));
      }
#pragma unroll
      for (int m = 0; m < kTokenTiles; ++m) {
        if (m < tokenTiles) {
          uint32_t a[4];
          const int r = 16 * m + (j & 1) * 8 + (lane & 7);
          loadMatrixX4(a, xtile + mmaSlot(r, 2 * kk + (j >> 1)));
          mmaBf16K16(acc[m][0], a, b[0], b[1]);
          mmaBf16K16(acc[m][1], a, b[2], b[3]);
        }
      }
    }
  }
  waitAsyncGroups<0>();
}

/// Calls f(token, weight row of the tile, sum) for each of this thread's
/// sums of a tile of nTok tokens (the rows past the tile's end included:
/// the caller bounds them).
template <int Tokens = kMmaTileTokens, class F>
__device__ __forceinline__ void mmaTileForEach(const MmaAccOf<Tokens> &acc,
                                               int nTok, F &&f) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int m = 0; m < Tokens / 16; ++m)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = 16 * m + g + (e >> 1) * 8;
        const int r = kMmaWarpRows * warp + 8 * j + 2 * t + (e & 1);
        if (tok < nTok)
          f(tok, r, acc[m][j][e]);
      }
}

} // namespace dev
} // namespace k3

#endif // K3C_KERNELS_COMMON_MMATILE_CUH
