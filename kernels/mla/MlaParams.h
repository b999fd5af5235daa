//===- MlaParams.h - Parameters of the MLA (full attention) ops ---*- C++
//-*-===//
//
// The contract between codegen, the runtime and the MLA kernels (CPU and
// CUDA). Plain C types only. K3.md §3 is the math (gated, NoPE: k_r is never
// rotated), NUMERICS.md "MLA" the rounding points. The projections (q_a/q_b
// or q, kv_a, g, o) are `linear`/`linear_multi`.
//
// Latent cache of a layer: [maxSeq, L+R] bf16, row j = [c_j | k_r_j] with
// c_j already normalised by kv_a_layernorm.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_MLA_MLAPARAMS_H
#define K3C_KERNELS_MLA_MLAPARAMS_H

#include "kernels/common/HostDevice.h"
#include "kernels/common/StepInputs.h"
#include "kernels/common/WeightRef.h"
#include <cstdint>

namespace k3 {

/// `mla_cache_append`: cache[pos] = [rms_norm(kv[:L], normWeight, eps) |
/// kv[L:]]; the norm rounds exactly as `rms_norm`.
struct MlaCacheAppendParams {
  const uint16_t *kv = nullptr;         ///< [L+R] bf16, R(kv_a h)
  const uint16_t *normWeight = nullptr; ///< [L] bf16, kv_a_layernorm.weight
  float eps = 1e-6f;
  uint16_t *cache = nullptr; ///< [maxSeq, L+R] bf16
  int64_t pos = 0;           ///< row to write, 0 <= pos < maxSeq
  int64_t kvLoraRank = 0;    ///< L
  int64_t ropeDim = 0;       ///< R
  /// [kStepWords] int64 (StepInputs.h), may be null: when set, the row is
  /// step[kStepPos] and `pos` is ignored.
  const int64_t *step = nullptr;
};

/// The multi-row form of `mla_cache_append` (k3_mla_cache_append_rows):
/// grid (the single launch's x, count, 1), row y's whole params at rows[y]
/// in device memory (each row's own cache: its sequence's slot).
struct MlaCacheAppendRowsParams {
  const MlaCacheAppendParams *rows = nullptr; ///< [count] in device memory
  int32_t count = 0;
};

/// `mla_attend`: absorbed decode attention over cache rows [0, length)
/// (length = pos + 1 after the append), per head h, all in fp32:
///   q̂ = W_UK,hᵀ q_nope,h [L];  s_j = (q̂·c_j + q_r,h·k_r_j) · scale;
///   p = softmax(s);  ĉ = Σ_j p_j c_j;  o_h = R(W_UV,h ĉ).
/// With a gate: out = R(R(o) · sigmoid(gate)), i.e. bit-identical to
/// mla_attend without the gate followed by `mul_sigmoid`.
struct MlaAttendParams {
  /// [N, P+R] bf16: per head q_nope (P) then q_r (R).
  const uint16_t *q = nullptr;
  /// [N, P+V, L] bf16 (kv_b_proj.weight [N(P+V), L]): per head P rows of
  /// W_UK then V rows of W_UV.
  const uint16_t *kvB = nullptr;
  const uint16_t *cache = nullptr; ///< [maxSeq, L+R] bf16, rows < length used
  int64_t length = 0;              ///< attended positions, >= 1
  const uint16_t *gate = nullptr;  ///< [N·V] bf16, R(g_proj h); may be null
  uint16_t *out = nullptr;         ///< [N·V] bf16 (head-major)
  int64_t numHeads = 0;            ///< N
  int64_t nopeDim = 0;             ///< P
  int64_t ropeDim = 0;             ///< R
  int64_t vDim = 0;                ///< V
  int64_t kvLoraRank = 0;          ///< L
  /// Score scale; K3.md §3: 1/sqrt(P+R) (not 1/sqrt(L+R)). The compiler
  /// passes it explicitly so a kernel never guesses.
  float scale = 0.0f;
  /// [kStepWords] int64 (StepInputs.h), may be null: when set, length is
  /// step[kStepPos] + 1 and `length` is ignored.
  const int64_t *step = nullptr;
  /// The next launch's weight (o_proj), asked of L2 while the attend's
  /// dependent rounds leave the HBM idle; none when empty.
  L2Prefetch l2Prefetch;
  /// The pair of launches of a plan whose cache holds more rows than
  /// mla_attend_clustered attends (codegen: kMlaClusteredMaxRows): when > 0,
  /// mla_attend_clustered attends only lengths up to `handover` and leaves
  /// `out` alone beyond (the mla_attend launch after it writes it), and
  /// mla_attend attends only lengths above it. 0: a launch attends every
  /// length (mla_attend_clustered writes NaN beyond its limit).
  int64_t handover = 0;
};

/// The multi-row form of `mla_attend_clustered`
/// (k3_mla_attend_clustered_rows): grid (the single launch's x, count, 1),
/// row y's whole params at rows[y] in device memory. Rows of one sequence
/// may share the launch (each reads its cache through its own length).
struct MlaAttendRowsParams {
  const MlaAttendParams *rows = nullptr; ///< [count] in device memory
  int32_t count = 0;
};

/// Whether a context of `rows` rows is this launch's to attend under the
/// handover split: `clustered` for mla_attend_clustered (lengths up to
/// `handover`), else mla_attend (lengths above it); without a handover,
/// every length. The CUDA kernels and their CPU twins all ask it.
K3C_HOST_DEVICE inline bool mlaAttendOwnsRows(const MlaAttendParams &p,
                                              bool clustered, int64_t rows) {
  return p.handover <= 0 || (rows <= p.handover) == clustered;
}

/// Limits of mla_attend's all-heads form (its CUDA kernel, Mla.cu, checks
/// them with the block size and alignment; codegen's grid choice reads them): L
/// <= 512 (a lane owns two 8-value chunks of a row), R <= 64 (two rope values
/// per lane), both multiples of 8, and at most 256 heads (its q̂ and ĉ scratch).
/// Rows mla_attend_clustered (a cluster of blocks per head, Mla.cu)
/// attends at most. A plan whose cache holds more rows gets a clustered
/// launch handing over to mla_attend above them (MlaAttendParams::handover):
/// the all-heads form on a clustered grid runs on fewer SMs at once
/// (clusters of 4 blocks of 255 registers packed into the GPCs unevenly) and
/// measured 1.5-1.8x slower (H200, 4096-32768 rows).
constexpr int64_t kMlaClusteredMaxRows = 4096;
/// Blocks per head (one thread-block cluster) of mla_attend_clustered: its
/// CUDA kernel takes clusters of exactly this many, codegen launches them.
/// Measured on the H200 (Kimi-Linear's 32 heads; docs/PERF.md 2026-12-03):
/// 4 took 16.0 / 26.1 µs at 72 / 1024 rows (the step 2480 µs), 8 took 26.1
/// / 32.9 (the step 2561: the clusters of 8 did not all fit at once).
constexpr int kMlaClusterBlocks = 4;

/// The chunk form of `mla_attend_clustered` (k3_mla_attend_clustered_chunk):
/// rows of one sequence (a prompt chunk: one cache, row t attending its own
/// length with its own q, gate and out), a block per (head, tile of
/// kMlaChunkRows rows), grid (N, ceil(count / kMlaChunkRows)) of
/// kMlaChunkThreads threads and kMlaChunkSmemBytes of dynamic shared memory:
/// each block reads W_UK / W_UV of its head and every cache row its tile
/// attends once for its rows (the rows form reads them once per row). Steps
/// of at least kMlaChunkMinRows rows of one slot with PrefillForm::Chunk
/// take it; within fp32 rounding of the rows form.
constexpr int kMlaChunkRows = 16;
constexpr int kMlaChunkThreads = 256;
constexpr int kMlaChunkMinRows = 16;
/// Cache rows staged per round, and the staged row's pitch in bf16 (L + R
/// and 8 more, so that lanes reading consecutive rows meet all banks).
constexpr int kMlaChunkTile = 32;
constexpr int kMlaChunkPitch = 512 + 64 + 8;
/// q̂ [rows][512] and q_r [rows][64] fp32, the staged cache rows (bf16), the
/// softmax weights [rows][tile] and per-row α, Σ and lengths.
constexpr int64_t kMlaChunkSmemBytes =
    4 * (kMlaChunkRows * 512 + kMlaChunkRows * 64) +
    2 * kMlaChunkTile * kMlaChunkPitch + 4 * kMlaChunkRows * kMlaChunkTile +
    4 * 4 * kMlaChunkRows;

/// Whether the chunk form takes a launch of this shape: the plans' head
/// shape (L = 512, R = 64, P = V = 128), 16-byte aligned operands.
K3C_HOST_DEVICE inline bool mlaChunkShape(const MlaAttendParams &p) {
  const uintptr_t bits =
      reinterpret_cast<uintptr_t>(p.q) | reinterpret_cast<uintptr_t>(p.kvB) |
      reinterpret_cast<uintptr_t>(p.cache) |
      reinterpret_cast<uintptr_t>(p.out) | reinterpret_cast<uintptr_t>(p.gate);
  return p.kvLoraRank == 512 && p.ropeDim == 64 && p.nopeDim == 128 &&
         p.vDim == 128 && p.numHeads >= 1 && (bits & 15) == 0;
}

constexpr int kMlaAllHeadsMaxLatent = 512;
constexpr int kMlaAllHeadsMaxRope = 64;
constexpr int kMlaAllHeadsMaxHeads = 256;

/// What an event of a traced mla_attend is (TraceEvent::kind, a
/// -DK3C_KERNEL_TRACE build: kernels/common/TraceEvent.h): an item of the
/// all-heads form's queue (t0: its draw, t1: its end; Mla.cu), the launch
/// start (t1: after the dependent-launch wait), or an item's wait for the
/// phase before it (t1: the wait's end; slot: the item's kind); in the
/// per-head form, the end of each phase of a (head, split) item (t0: the
/// item's start, so t1 − t0 is the time to that point; slot: the split).
enum MlaTraceKind : uint32_t {
  kMlaTraceQhat = 0,
  kMlaTraceRange = 1,
  kMlaTraceMerge = 2,
  kMlaTraceOut = 3,
  kMlaTraceStart = 4,
  kMlaTraceWaited = 5,
  kMlaTraceHeadQhat = 6,   ///< q̂ in shared memory
  kMlaTraceHeadMerged = 7, ///< the split's rows attended, warps merged
  kMlaTraceHeadSplits = 8, ///< the last split: the splits combined
  kMlaTraceHeadOut = 9,    ///< the head's output written
};

} // namespace k3

#endif // K3C_KERNELS_MLA_MLAPARAMS_H
