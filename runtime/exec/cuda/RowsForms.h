//===- RowsForms.h - Params of the CUDA multi-row forms ---------*- C++ -*-===//
//
// A step of several rows runs each launch once per row, each row bound to
// its own copy of the arena; the projections have a multi-row form
// (kernels/gemv/GemvParams.h: k3_linear_rows, k3_linear_multi_rows) that
// runs all rows in one launch when the rows' activations sit a fixed number
// of bytes apart, and so has the MoE FFN (kernels/moe/MoeParams.h:
// k3_moe_ffn_rows, over the union of the rows' experts, in groups). This builds that launch's params from the rows' bound
// params, or says it cannot (a row's pointer is not its arena's: a state, a
// step-local buffer), so that the CUDA backend launches row by row. Host
// code only, so it is tested without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_CUDA_ROWSFORMS_H
#define K3C_RUNTIME_EXEC_CUDA_ROWSFORMS_H

#include "kernels/moe/MoeParams.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace k3 {

/// The kernels whose PTX has a multi-row form `k3_<kernel>_rows`.
inline constexpr const char *kCudaRowsForms[] = {"linear", "linear_multi",
                                                 "moe_ffn"};

/// Whether `kernel` has a multi-row form.
bool hasRowsForm(const std::string &kernel);

/// The kernels whose PTX has a tensor-core form of its multi-row form,
/// `k3_<kernel>_rows_mma` (the same params; kernels/gemv/GemvParams.h
/// kGemvMma*): prompt chunks with PrefillForm::Chunk, within rounding of
/// the multi-row form.
inline constexpr const char *kCudaMmaRowsForms[] = {"linear", "linear_multi"};

/// Whether `kernel` has a tensor-core multi-row form.
bool hasMmaRowsForm(const std::string &kernel);

/// The kernels whose PTX has the narrow tensor-core form
/// `k3_<kernel>_rows_mma16` (kernels/gemv/GemvParams.h kGemvMma16*: up to
/// 16 rows, the weights streamed into mma fragments, split over k through
/// a scratch; LinearRowsMma16Params / LinearMultiRowsMma16Params): steps of
/// kMma16MinRows to kGemvMma16Tokens rows with PrefillForm::Chunk (a decode
/// batch of 9 to 16, a prompt's short chunk), within rounding of the
/// multi-row form.
inline constexpr const char *kCudaMma16RowsForms[] = {"linear", "linear_multi"};

/// Whether `kernel` has a narrow tensor-core form.
bool hasMma16RowsForm(const std::string &kernel);

/// Steps of fewer rows keep the multi-row form even with PrefillForm::Chunk
/// (a decode batch's rows stay bit for bit their single-row launches'),
/// except the projections' narrow form (kMma16MinRows).
constexpr size_t kMmaMinRows = 16;

/// The fewest rows of a step whose projections take the narrow form with
/// PrefillForm::Chunk: more than one pass of the multi-row form holds
/// (kGemvRowsPerPass), which would read the weights once a pass.
constexpr size_t kMma16MinRows = 9;

/// The kernels whose PTX has a multi-row form `k3_<kernel>_rows` that takes
/// every row's whole params from a device array ({rows, count}: e.g.
/// KdaDecodeRowsParams, grid y = the rows): kernels whose rows differ by
/// more than their arenas (their slots' states), and small per-row kernels
/// (embed, gated_act, argmax) whose arena-stride form would buy nothing more.
/// Only for rows of different sequences (a sequence's rows meet its states
/// in order), but see kCudaRowsAnySlotForms and kCudaRunForms.
inline constexpr const char *kCudaRowsArrayForms[] = {
    "kda_decode", "mla_cache_append", "mla_attend_clustered",
    "embed",      "gated_act",        "argmax"};

/// The array forms whose rows never depend on one another, so that rows of
/// one sequence (a prompt chunk) run together as well: each row writes only
/// its own position's cache row, or reads its cache through its own length,
/// or touches only its own arena (embed, gated_act).
inline constexpr const char *kCudaRowsAnySlotForms[] = {
    "mla_cache_append", "mla_attend_clustered", "embed", "gated_act"};

/// Whether `kernel`'s array form takes rows of one sequence together.
bool hasRowsAnySlotForm(const std::string &kernel);

/// The kernels whose PTX has a run form `k3_<kernel>_run` over the same
/// params array ({rows, count}) for consecutive rows of one sequence (a
/// prompt chunk: the rows meet the states in order, in one launch), bit for
/// bit one launch per row; only for launches in thread-block clusters
/// (kda_decode's clustered path).
inline constexpr const char *kCudaRunForms[] = {"kda_decode"};

/// Whether `kernel` has a run form.
bool hasRunForm(const std::string &kernel);

/// The array forms whose PTX also has `k3_<kernel>_rows_clustered`, the
/// same params and results for launches in thread-block clusters, compiled
/// for that path alone (kda_decode: fewer registers, more blocks an SM).
inline constexpr const char *kCudaClusteredRowsForms[] = {"kda_decode"};

/// The name of `kernel`'s multi-row form for a launch in clusters of
/// `clusterBlocks` blocks (`<kernel>_rows` or `<kernel>_rows_clustered`).
std::string rowsFormName(const std::string &kernel, int64_t clusterBlocks);

/// The array forms whose PTX also has a chunk form `k3_<kernel>_chunk` over
/// the same params array, for the rows of one sequence with
/// PrefillForm::Chunk, within rounding of the run or rows form:
/// kda_decode's run form (the chunk (WY / UT) form of the delta rule,
/// kKdaChunkMaxRows rows per launch, kKdaChunkSmemBytes of dynamic shared
/// memory; runs of at least kKdaChunkMinRows rows; K3C_KDA_CHUNK=0 keeps the
/// run form) and mla_attend_clustered's rows form (each cache row and W_UK /
/// W_UV read once per head and tile of kMlaChunkRows rows; steps of at least
/// kMlaChunkMinRows rows of one slot and mlaChunkShape; K3C_MLA_CHUNK=0 keeps
/// the rows form).
inline constexpr const char *kCudaChunkForms[] = {"kda_decode",
                                                  "mla_attend_clustered"};

/// Whether `kernel` has a chunk form.
bool hasChunkForm(const std::string &kernel);

/// The dynamic shared memory `kernel`'s chunk form takes (KdaParams.h
/// kKdaChunkSmemBytes, MlaParams.h kMlaChunkSmemBytes); 0 without one.
int64_t chunkFormSmemBytes(const std::string &kernel);

/// Whether `kernel` has a multi-row form over a params array.
bool hasRowsArrayForm(const std::string &kernel);

/// The params of such a form: the device address of the rows' params
/// array and the row count, as the kernels' `<Kernel>RowsParams` lay them out.
struct RowsArrayParams {
  uint64_t rows = 0;
  int32_t count = 0;
};

/// One launch of a multi-row form: its params struct (bytes, passed by
/// value) and the dynamic shared memory it needs.
struct RowsLaunch {
  std::vector<uint8_t> params;
  int64_t smem = 0;
  /// The launch's grid and block (x, y, z) where the form chooses its own
  /// (the tensor-core forms); zero: the plan's launch's.
  int64_t grid[3] = {0, 0, 0};
  int64_t block[3] = {0, 0, 0};
  /// Thread-block clusters of this shape (the tensor-core forms' split over
  /// k); ones: none.
  int64_t cluster[3] = {1, 1, 1};
};

/// The multi-row launch of `kernel` for rows whose bound params structs
/// (`size` bytes each, row 0 first) are `rows`, their arenas `arenaStride`
/// bytes apart: row r's params must be row 0's with each activation pointer
/// (null stays null) moved by r · arenaStride, every other byte the same.
/// None when they are not, when the kernel has no multi-row form, for
/// fewer than two rows, or for more than one launch of the form takes.
std::optional<RowsLaunch> rowsLaunch(const std::string &kernel,
                                     const std::vector<const void *> &rows,
                                     size_t size, uint64_t arenaStride);

/// The launches that run all `rows` (as rowsLaunch): one for the
/// projections; for moe_ffn, groups of consecutive rows, each as many as
/// one k3_moe_ffn_rows launch takes (kMoeRowsMax at most, fewer when the
/// shapes exceed its scratch; a last group may hold one row). Empty when
/// the rows cannot run together.
std::vector<RowsLaunch> rowsLaunches(const std::string &kernel,
                                     const std::vector<const void *> &rows,
                                     size_t size, uint64_t arenaStride);

/// The tensor-core launch of `kernel` (hasMmaRowsForm) for `rows` as
/// rowsLaunch takes them, on a device of `sms` SMs: the same params,
/// kGemvMmaSmemBytes, a block of kGemvMmaThreads, and a grid of
/// gemvMmaSplit(tiles, k, sms) blocks per kGemvMmaRows weight rows across
/// (in clusters of that many: the split over k), one per kGemvMmaTokens
/// rows down. None as rowsLaunch.
std::optional<RowsLaunch> mmaRowsLaunch(const std::string &kernel,
                                        const std::vector<const void *> &rows,
                                        size_t size, uint64_t arenaStride,
                                        int64_t sms);

/// The chunk-form launch of `kernel` (mla_attend_clustered only) for `n`
/// rows of one sequence, row 0's bound params `first` (`size` bytes), their
/// params array at device address `rowsArray`: RowsArrayParams {rowsArray,
/// n}, a grid of numHeads × ceil(n / kMlaChunkRows) blocks of
/// kMlaChunkThreads (no clusters), kMlaChunkSmemBytes. None for another
/// kernel, fewer than kMlaChunkMinRows rows, or a shape mlaChunkShape
/// refuses (the rows form runs them).
std::optional<RowsLaunch> mlaChunkLaunch(const std::string &kernel,
                                         const void *first, size_t size,
                                         size_t n, uint64_t rowsArray);

/// Entry points (without `k3_`) of the forms that the CUDA backend can leave
/// for the forms they replace (the general rows forms, the per-row argmax,
/// the wide tensor-core tiles): K3C_FORMS_OFF=name,... switches those off,
/// to time a step without them on the same binaries and plan.
inline constexpr const char *kCudaOptionalForms[] = {
    "kda_decode_rows_clustered",  "argmax_rows",
    "mla_attend_clustered_batch", "linear_rows_mma16",
    "linear_multi_rows_mma16",    "moe_chunk_gate_up_narrow",
    "moe_chunk_down_narrow"};

/// Whether entry point `entry` is in kCudaOptionalForms.
bool optionalForm(const std::string &entry);

/// Those of kCudaOptionalForms measured slower than the forms they replace
/// (the full Kimi-Linear geometry at batch 16 on the H200, docs/PERF.md
/// 2026-12-05: linear_multi 48.7 against 33.9 µs a launch, the MLA batch
/// form 119 against 94): the CUDA backend takes them only when
/// K3C_FORMS_ON names them (or is `all`), to time them again.
inline constexpr const char *kCudaFormsOffByDefault[] = {
    "linear_multi_rows_mma16", "mla_attend_clustered_batch"};

/// Whether entry point `entry` is in kCudaFormsOffByDefault.
bool offByDefault(const std::string &entry);

/// Those of kCudaOptionalForms written in a session whose device runs were
/// all refused: their GPU tests have not run, so the CUDA backend takes them
/// only with K3C_GPU_UNTESTED_FORMS=1, or a comma-separated list of their
/// names. The first GPU session runs cuda_test and `scripts/gpu-check.sh`
/// with it set and, once they pass, empties this list (the size is part of
/// the type: an empty list is an array of 0).
inline constexpr std::array<const char *, 0> kCudaGpuUntestedForms{};

/// Whether entry point `entry` is in kCudaGpuUntestedForms.
bool gpuUntested(const std::string &entry);

/// The array forms whose PTX also has a batch form `k3_<kernel>_batch` over
/// the same params array, for rows of any slots (a decode batch) with
/// PrefillForm::Chunk and at least kMlaChunkMinRows rows, within rounding
/// of the rows form: mla_attend_clustered (W_UK / W_UV read once per head
/// and tile of rows, each row attending its own cache; kMlaChunkSmemBytes).
inline constexpr const char *kCudaBatchForms[] = {"mla_attend_clustered"};

/// Whether `kernel` has a batch form.
bool hasBatchForm(const std::string &kernel);

/// The batch-form launch of `kernel` (mla_attend_clustered only) for `n`
/// rows of any sequences on a device of `sms` SMs, as mlaChunkLaunch
/// (row 0's params `first`, the array at `rowsArray`): a grid of numHeads ×
/// ceil(n / R) blocks, R rows a tile (1 to kMlaChunkRows) so that the grid
/// gives every SM about two blocks. None as mlaChunkLaunch.
std::optional<RowsLaunch> mlaBatchLaunch(const std::string &kernel,
                                         const void *first, size_t size,
                                         size_t n, uint64_t rowsArray,
                                         int64_t sms);

/// A narrow tensor-core launch (mma16RowsLaunch) and the scratch its split
/// over k needs (GemvSplitScratch; none for one part).
struct Mma16Launch {
  RowsLaunch launch;
  uint64_t partialBytes = 0; ///< fp32 sums, tiles · parts of them
  uint64_t counterBytes = 0; ///< one counter a tile, zero before the first
  size_t splitAt = 0;        ///< offset of the GemvSplitScratch in params
};

/// The narrow tensor-core launch of `kernel` (hasMma16RowsForm) for `rows`
/// as rowsLaunch takes them (kMma16MinRows is the caller's; at most
/// kGemvMma16Tokens), on a device of `sms` SMs whose launches may take
/// `smemCap` bytes of dynamic shared memory: gemvMma16SmemBytes(k), a block
/// of kGemvMma16Threads, one block an SM (fewer when the units are fewer),
/// gemvMma16Parts for that grid's warps; the scratch pointers null until
/// bindMma16Scratch. None as rowsLaunch, for more rows, k not a multiple of
/// kGemvMma16GroupK, x̂ wider than `smemCap`, or operands the kernel's fast
/// path does not read (MXFP4, a pointer or the arena stride not 16-byte
/// aligned).
std::optional<Mma16Launch>
mma16RowsLaunch(const std::string &kernel,
                const std::vector<const void *> &rows, size_t size,
                uint64_t arenaStride, int64_t sms, int64_t smemCap);

/// Points `l`'s split at its scratch (device addresses of at least
/// l.partialBytes and l.counterBytes; the counters zero).
void bindMma16Scratch(Mma16Launch &l, uint64_t partials, uint64_t counters);

/// The entry point (`k3_` + this, in the projections' module) of the
/// tensor-core forms' pre-norm (splitPreNorm).
inline constexpr const char *kCudaMmaPreNormKernel = "linear_rows_prenorm";

/// The pre-norm of a tensor-core launch `mma` of `kernel` (mmaRowsLaunch)
/// whose projection folds a norm: the k3_linear_rows_prenorm launch
/// (GemvParams.h LinearPreNormParams: one block of 256 per row) that writes
/// the rows' x̂ to `scratch` (device address, preNormScratchBytes), with
/// `mma`'s params rewritten to read x̂ there with no norm of their own (so
/// that no block of `mma` norms every row again). None, `mma` unchanged,
/// without a norm.
std::optional<RowsLaunch> splitPreNorm(const std::string &kernel,
                                       RowsLaunch &mma, uint64_t scratch);

/// Bytes of the scratch splitPreNorm's launch for `mma` writes: its rows of
/// k bf16 each, rows 16 bytes apart.
uint64_t preNormScratchBytes(const std::string &kernel, const RowsLaunch &mma);

/// The kernels of the MoE of a prompt chunk, in launch order (one
/// MoeChunkParams for all five; kernels/moe/Moe.cu).
inline constexpr const char *kCudaMoeChunkKernels[] = {
    "moe_chunk_route", "moe_chunk_plan", "moe_chunk_gate_up", "moe_chunk_down",
    "moe_chunk_combine"};

/// The narrow tiles of the MoE chunk's gate/up and down (the same params, a
/// grid z of ceil(rows / kMmaNarrowTokens), kMmaNarrowSmemBytes), in place
/// of kCudaMoeChunkKernels' third and fourth for chunks of at most
/// kMmaNarrowTokens rows (a decode batch of 16): the same bits.
inline constexpr const char *kCudaMoeChunkNarrowKernels[] = {
    "moe_chunk_gate_up_narrow", "moe_chunk_down_narrow"};

/// The MoE of a prompt chunk on the tensor cores (kernels/moe/MoeParams.h
/// MoeChunkParams) for `rows` rows (2 .. kMoeChunkRowsMax) of a moe_ffn
/// launch whose params differ only by the rows' arenas (`arenaStride` bytes
/// apart) and whose shapes moeChunkFits; the scratch pointers are the
/// caller's to set. None otherwise.
std::optional<MoeChunkParams>
moeChunkParams(const std::vector<const void *> &rows, size_t size,
               uint64_t arenaStride);

} // namespace k3

#endif // K3C_RUNTIME_EXEC_CUDA_ROWSFORMS_H
