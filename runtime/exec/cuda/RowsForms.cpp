//===- RowsForms.cpp - Params of the CUDA multi-row forms -----------------===//
#include "runtime/exec/cuda/RowsForms.h"

#include "kernels/elementwise/ElementwiseParams.h"
#include "kernels/embed/EmbedParams.h"
#include "kernels/gemv/GemvParams.h"
#include "kernels/head/HeadParams.h"
#include "kernels/kda/KdaParams.h"
#include "kernels/mla/MlaParams.h"
#include "kernels/moe/MoeParams.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace k3 {

namespace {

/// The byte offsets of the pointers in `kernel`'s params that move with a
/// row's arena (the activations), and its input width k.
bool movingFields(const std::string &kernel, const void *params,
                  std::vector<size_t> &moving, int64_t &k) {
  if (kernel == "linear_multi") {
    const auto &p = *static_cast<const LinearMultiParams *>(params);
    k = p.k;
    moving.push_back(offsetof(LinearMultiParams, x));
    for (int e = 0; e < p.count && e < kLinearMultiMax; ++e)
      moving.push_back(offsetof(LinearMultiParams, entries) +
                       e * sizeof(LinearMultiEntry) +
                       offsetof(LinearMultiEntry, out));
    return true;
  }
  if (kernel == "moe_ffn") {
    k = static_cast<const MoeFfnParams *>(params)->experts.dim;
    for (size_t off :
         {offsetof(MoeFfnParams, router) + offsetof(RouterParams, h),
          offsetof(MoeFfnParams, router) + offsetof(RouterParams, outIds),
          offsetof(MoeFfnParams, router) + offsetof(RouterParams, outWeights),
          offsetof(MoeFfnParams, experts) + offsetof(MoeExpertsParams, x),
          offsetof(MoeFfnParams, experts) + offsetof(MoeExpertsParams, ids),
          offsetof(MoeFfnParams, experts) +
              offsetof(MoeExpertsParams, weights),
          offsetof(MoeFfnParams, experts) +
              offsetof(MoeExpertsParams, residual),
          offsetof(MoeFfnParams, experts) + offsetof(MoeExpertsParams, out)})
      moving.push_back(off);
    return true;
  }
  if (kernel == "linear") {
    k = static_cast<const LinearParams *>(params)->k;
    for (size_t off :
         {offsetof(LinearParams, x), offsetof(LinearParams, residual),
          offsetof(LinearParams, out), offsetof(LinearParams, outF32)})
      moving.push_back(off);
    return true;
  }
  return false;
}

/// `bytes` with the pointer at `offset` moved by `delta`, unless null.
void movePointer(std::vector<uint8_t> &bytes, size_t offset, uint64_t delta) {
  uint64_t v;
  std::memcpy(&v, bytes.data() + offset, sizeof(v));
  if (v != 0)
    v += delta;
  std::memcpy(bytes.data() + offset, &v, sizeof(v));
}

/// Whether `rows` rows of the moe_ffn launch `params`, their pointers
/// `stride` bytes apart, fit one k3_moe_ffn_rows launch: its sizes
/// (moeFfnRowsFit), 16-byte aligned input, norm weight and stride, and one
/// input for the router and the experts (as k3.moe_ffn binds them).
bool moeRowsGroup(const void *params, size_t rows, uint64_t stride) {
  const auto &p = *static_cast<const MoeFfnParams *>(params);
  const MoeExpertsParams &e = p.experts;
  const auto aligned16 = [](const void *q) {
    return reinterpret_cast<uintptr_t>(q) % 16 == 0;
  };
  return moeFfnRowsFit(p, static_cast<int64_t>(rows)) && stride % 16 == 0 &&
         aligned16(e.x) && aligned16(e.normWeight) && p.router.h == e.x &&
         p.router.normWeight == e.normWeight &&
         p.router.normEps == e.normEps;
}

template <typename P> std::vector<uint8_t> bytesOf(const P &p) {
  std::vector<uint8_t> b(sizeof(P));
  std::memcpy(b.data(), &p, sizeof(P));
  return b;
}

} // namespace

bool hasRowsForm(const std::string &kernel) {
  return std::find(std::begin(kCudaRowsForms), std::end(kCudaRowsForms),
                   kernel) != std::end(kCudaRowsForms);
}

namespace {

/// Whether `rows` are row 0's params of `kernel` (a rows form's) with each
/// activation pointer moved by r · arenaStride; `k`: the input width.
bool movedByStride(const std::string &kernel,
                   const std::vector<const void *> &rows, size_t size,
                   uint64_t arenaStride, int64_t &k) {
  std::vector<size_t> moving;
  if (rows.empty() || !hasRowsForm(kernel) ||
      !movingFields(kernel, rows[0], moving, k))
    return false;
  const size_t expectSize = kernel == "linear"    ? sizeof(LinearParams)
                            : kernel == "moe_ffn" ? sizeof(MoeFfnParams)
                                                  : sizeof(LinearMultiParams);
  if (size != expectSize || arenaStride % 4 != 0)
    return false;
  const auto *base = static_cast<const uint8_t *>(rows[0]);
  std::vector<uint8_t> expect(size);
  for (size_t r = 1; r < rows.size(); ++r) {
    expect.assign(base, base + size);
    for (size_t off : moving)
      movePointer(expect, off, arenaStride * r);
    if (std::memcmp(expect.data(), rows[r], size) != 0)
      return false;
  }
  return true;
}

/// rowsLaunch for one or more rows (a moe_ffn group may hold one).
std::optional<RowsLaunch> formOf(const std::string &kernel,
                                 const std::vector<const void *> &rows,
                                 size_t size, uint64_t arenaStride) {
  int64_t k = 0;
  if (!movedByStride(kernel, rows, size, arenaStride, k))
    return std::nullopt;
  if (kernel == "moe_ffn" && !moeRowsGroup(rows[0], rows.size(), arenaStride))
    return std::nullopt;
  const auto *base = static_cast<const uint8_t *>(rows[0]);
  RowsLaunch out;
  const int64_t n = static_cast<int64_t>(rows.size());
  out.smem = gemvRowsSmemBytes(k, n);
  const int64_t bf16Stride = static_cast<int64_t>(arenaStride / 2);
  if (kernel == "moe_ffn") {
    MoeFfnRowsParams p;
    std::memcpy(&p.one, base, sizeof(p.one));
    p.rows = static_cast<int32_t>(n);
    p.stride = static_cast<int64_t>(arenaStride);
    out.smem = moeFfnRowsSmemBytes(p.one.experts.dim, p.one.experts.numExperts,
                                   p.one.experts.topK, n);
    out.params = bytesOf(p);
  } else if (kernel == "linear_multi") {
    LinearMultiRowsParams p;
    std::memcpy(&p.one, base, sizeof(p.one));
    p.rows = static_cast<int32_t>(n);
    p.xStride = bf16Stride;
    p.outStride = bf16Stride;
    out.params = bytesOf(p);
  } else {
    LinearRowsParams p;
    std::memcpy(&p.one, base, sizeof(p.one));
    p.rows = static_cast<int32_t>(n);
    p.xStride = bf16Stride;
    p.residualStride = bf16Stride;
    p.outStride = p.one.outF32 ? bf16Stride / 2 : bf16Stride;
    out.params = bytesOf(p);
  }
  return out;
}

} // namespace

bool hasRowsArrayForm(const std::string &kernel) {
  return std::find(std::begin(kCudaRowsArrayForms),
                   std::end(kCudaRowsArrayForms),
                   kernel) != std::end(kCudaRowsArrayForms);
}

// RowsArrayParams is each array form's params struct, byte for byte.
template <typename P> constexpr bool isRowsArray() {
  return sizeof(RowsArrayParams) == sizeof(P) &&
         offsetof(RowsArrayParams, rows) == offsetof(P, rows) &&
         offsetof(RowsArrayParams, count) == offsetof(P, count);
}
static_assert(isRowsArray<KdaDecodeRowsParams>() &&
                  isRowsArray<MlaCacheAppendRowsParams>() &&
                  isRowsArray<MlaAttendRowsParams>() &&
                  isRowsArray<EmbedRowsParams>() &&
                  isRowsArray<GatedActRowsParams>() &&
                  isRowsArray<ArgmaxRowsParams>(),
              "the array forms' params are {rows, count}");

std::optional<RowsLaunch> rowsLaunch(const std::string &kernel,
                                     const std::vector<const void *> &rows,
                                     size_t size, uint64_t arenaStride) {
  if (rows.size() < 2)
    return std::nullopt;
  return formOf(kernel, rows, size, arenaStride);
}

bool hasRowsAnySlotForm(const std::string &kernel) {
  return std::find(std::begin(kCudaRowsAnySlotForms),
                   std::end(kCudaRowsAnySlotForms),
                   kernel) != std::end(kCudaRowsAnySlotForms);
}

bool hasRunForm(const std::string &kernel) {
  return std::find(std::begin(kCudaRunForms), std::end(kCudaRunForms),
                   kernel) != std::end(kCudaRunForms);
}

std::string rowsFormName(const std::string &kernel, int64_t clusterBlocks) {
  const bool clustered = clusterBlocks > 1 &&
                         std::find(std::begin(kCudaClusteredRowsForms),
                                   std::end(kCudaClusteredRowsForms),
                                   kernel) != std::end(kCudaClusteredRowsForms);
  return kernel + (clustered ? "_rows_clustered" : "_rows");
}

bool hasChunkForm(const std::string &kernel) {
  return std::find(std::begin(kCudaChunkForms), std::end(kCudaChunkForms),
                   kernel) != std::end(kCudaChunkForms);
}

bool hasMmaRowsForm(const std::string &kernel) {
  return std::find(std::begin(kCudaMmaRowsForms), std::end(kCudaMmaRowsForms),
                   kernel) != std::end(kCudaMmaRowsForms);
}

int64_t chunkFormSmemBytes(const std::string &kernel) {
  if (kernel == "kda_decode")
    return kKdaChunkSmemBytes;
  if (kernel == "mla_attend_clustered")
    return kMlaChunkSmemBytes;
  return 0;
}

std::optional<RowsLaunch> mlaChunkLaunch(const std::string &kernel,
                                         const void *first, size_t size,
                                         size_t n, uint64_t rowsArray) {
  if (kernel != "mla_attend_clustered" || size != sizeof(MlaAttendParams) ||
      n < static_cast<size_t>(kMlaChunkMinRows))
    return std::nullopt;
  MlaAttendParams head;
  std::memcpy(&head, first, sizeof head);
  if (!mlaChunkShape(head))
    return std::nullopt;
  RowsArrayParams p;
  p.rows = rowsArray;
  p.count = static_cast<int32_t>(n);
  RowsLaunch l;
  l.params.resize(sizeof p);
  std::memcpy(l.params.data(), &p, sizeof p);
  l.smem = kMlaChunkSmemBytes;
  l.grid[0] = head.numHeads;
  l.grid[1] = static_cast<int64_t>((n + kMlaChunkRows - 1) / kMlaChunkRows);
  l.grid[2] = 1;
  l.block[0] = kMlaChunkThreads;
  l.block[1] = l.block[2] = 1;
  return l;
}

namespace {
/// Whether `names` (a list of RowsForms.h) holds `entry`.
template <typename List>
bool listed(const List &names, const std::string &entry) {
  return std::find(std::begin(names), std::end(names), entry) !=
         std::end(names);
}
} // namespace

bool optionalForm(const std::string &entry) {
  return listed(kCudaOptionalForms, entry);
}

bool gpuUntested(const std::string &entry) {
  return listed(kCudaGpuUntestedForms, entry);
}

bool offByDefault(const std::string &entry) {
  return listed(kCudaFormsOffByDefault, entry);
}

bool hasBatchForm(const std::string &kernel) {
  return std::find(std::begin(kCudaBatchForms), std::end(kCudaBatchForms),
                   kernel) != std::end(kCudaBatchForms);
}

std::optional<RowsLaunch> mlaBatchLaunch(const std::string &kernel,
                                         const void *first, size_t size,
                                         size_t n, uint64_t rowsArray,
                                         int64_t sms) {
  std::optional<RowsLaunch> l =
      mlaChunkLaunch(kernel, first, size, n, rowsArray);
  if (!l)
    return std::nullopt;
  // Rows per tile: the fewest that keep ~2 blocks an SM busy (each tile
  // reads its head's W_UK and W_UV once: more rows a tile, fewer reads).
  const int64_t heads = l->grid[0], rows = static_cast<int64_t>(n);
  const int64_t per = std::clamp<int64_t>((rows * heads + 2 * sms - 1) /
                                              std::max<int64_t>(1, 2 * sms),
                                          1, kMlaChunkRows);
  l->grid[1] = (rows + per - 1) / per;
  return l;
}

namespace {
/// The weight rows (all entries') and k of a projection's bound params.
void projectionShape(const std::string &kernel, const void *params,
                     int64_t &weightRows, int64_t &k) {
  weightRows = 0;
  if (kernel == "linear") {
    const auto &p = *static_cast<const LinearParams *>(params);
    weightRows = p.n;
    k = p.k;
    return;
  }
  const auto &p = *static_cast<const LinearMultiParams *>(params);
  for (int e = 0; e < p.count && e < kLinearMultiMax; ++e)
    weightRows += p.entries[e].n;
  k = p.k;
}

/// Whether a projection's bound params are what the tensor-core forms read
/// on their fast paths (the kernels' mmaTakes): bf16 weights, every
/// pointer 16-byte aligned.
bool tensorCoreReadable(const std::string &kernel, const void *params) {
  const auto aligned = [](const void *q) {
    return reinterpret_cast<uintptr_t>(q) % 16 == 0;
  };
  const auto bf16 = [&](const WeightRef &w) {
    return w.format == kWeightBf16 && aligned(w.bf16);
  };
  if (kernel == "linear") {
    const auto &p = *static_cast<const LinearParams *>(params);
    return bf16(p.w) && aligned(p.x) && aligned(p.normWeight);
  }
  const auto &p = *static_cast<const LinearMultiParams *>(params);
  bool ok = aligned(p.x) && aligned(p.normWeight);
  for (int e = 0; e < p.count && e < kLinearMultiMax; ++e)
    ok = ok && bf16(p.entries[e].w);
  return ok;
}

} // namespace

std::optional<RowsLaunch> mmaRowsLaunch(const std::string &kernel,
                                        const std::vector<const void *> &rows,
                                        size_t size, uint64_t arenaStride,
                                        int64_t sms) {
  if (!hasMmaRowsForm(kernel))
    return std::nullopt;
  std::optional<RowsLaunch> l = rowsLaunch(kernel, rows, size, arenaStride);
  if (!l)
    return std::nullopt;
  int64_t weightRows = 0, k = 0;
  projectionShape(kernel, rows[0], weightRows, k);
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t across =
      std::max<int64_t>(1, (weightRows + kGemvMmaRows - 1) / kGemvMmaRows);
  const int64_t down = (n + kGemvMmaTokens - 1) / kGemvMmaTokens;
  const int split = gemvMmaSplit(across * down, k, sms);
  l->smem = kGemvMmaSmemBytes;
  l->grid[0] = across * split;
  l->cluster[0] = split;
  l->grid[1] = down;
  l->grid[2] = 1;
  l->block[0] = kGemvMmaThreads;
  l->block[1] = l->block[2] = 1;
  return l;
}

static_assert(kMma16MinRows > size_t{kGemvRowsPerPass} &&
                  kMma16MinRows <= size_t{kGemvMma16Tokens},
              "the narrow form takes steps the multi-row form would read the "
              "weights twice for, and no more rows than it holds");

bool hasMma16RowsForm(const std::string &kernel) {
  return std::find(std::begin(kCudaMma16RowsForms),
                   std::end(kCudaMma16RowsForms),
                   kernel) != std::end(kCudaMma16RowsForms);
}

std::optional<Mma16Launch>
mma16RowsLaunch(const std::string &kernel,
                const std::vector<const void *> &rows, size_t size,
                uint64_t arenaStride, int64_t sms, int64_t smemCap) {
  if (!hasMma16RowsForm(kernel) || rows.size() > size_t(kGemvMma16Tokens))
    return std::nullopt;
  std::optional<RowsLaunch> multi = rowsLaunch(kernel, rows, size, arenaStride);
  if (!multi)
    return std::nullopt;
  int64_t weightRows = 0, k = 0;
  projectionShape(kernel, rows[0], weightRows, k);
  // What the kernel would refuse (and run one row at a time) is refused
  // here, so that such launches keep the other forms.
  if (weightRows <= 0 || k <= 0 || k % kGemvMma16GroupK != 0 ||
      gemvMma16SmemBytes(k) > smemCap || arenaStride % 16 != 0 ||
      !tensorCoreReadable(kernel, rows[0]))
    return std::nullopt;
  const int64_t tiles = (weightRows + kGemvMma16Rows - 1) / kGemvMma16Rows;
  const int64_t blocks = std::max<int64_t>(1, sms);
  const int parts =
      gemvMma16Parts(tiles, k / kGemvMma16GroupK, blocks * kGemvMma16Warps);
  const int64_t units = tiles * parts;
  Mma16Launch m;
  RowsLaunch &l = m.launch;
  // The multi-row params, then the split.
  const bool single = kernel == "linear";
  l.params.assign(single ? sizeof(LinearRowsMma16Params)
                         : sizeof(LinearMultiRowsMma16Params),
                  0);
  std::memcpy(l.params.data(), multi->params.data(), multi->params.size());
  m.splitAt = single ? offsetof(LinearRowsMma16Params, split)
                     : offsetof(LinearMultiRowsMma16Params, split);
  GemvSplitScratch split;
  split.parts = parts;
  std::memcpy(l.params.data() + m.splitAt, &split, sizeof(split));
  l.smem = gemvMma16SmemBytes(k);
  l.grid[0] = std::min(blocks, (units + kGemvMma16Warps - 1) / kGemvMma16Warps);
  l.grid[1] = l.grid[2] = 1;
  l.block[0] = kGemvMma16Threads;
  l.block[1] = l.block[2] = 1;
  if (parts > 1) {
    m.partialBytes =
        static_cast<uint64_t>(units) * kGemvMma16TileFloats * sizeof(float);
    m.counterBytes = static_cast<uint64_t>(tiles) * sizeof(uint32_t);
  }
  return m;
}

void bindMma16Scratch(Mma16Launch &l, uint64_t partials, uint64_t counters) {
  GemvSplitScratch split;
  uint8_t *at = l.launch.params.data() + l.splitAt;
  std::memcpy(&split, at, sizeof(split));
  split.partials = reinterpret_cast<float *>(static_cast<uintptr_t>(partials));
  split.counters =
      reinterpret_cast<uint32_t *>(static_cast<uintptr_t>(counters));
  std::memcpy(at, &split, sizeof(split));
}

namespace {
/// The x, its stride, the norm weight and eps, k and the rows of a
/// tensor-core launch's params (LinearRowsParams or LinearMultiRowsParams).
struct MmaInput {
  const uint16_t **x;
  int64_t *xStride;
  const uint16_t **normWeight;
  float eps;
  int64_t k;
  int32_t rows;
};
std::optional<MmaInput> mmaInput(const std::string &kernel, RowsLaunch &l) {
  if (kernel == "linear" && l.params.size() == sizeof(LinearRowsParams)) {
    auto *p = reinterpret_cast<LinearRowsParams *>(l.params.data());
    return MmaInput{&p->one.x,      &p->xStride, &p->one.normWeight,
                    p->one.normEps, p->one.k,    p->rows};
  }
  if (kernel == "linear_multi" &&
      l.params.size() == sizeof(LinearMultiRowsParams)) {
    auto *p = reinterpret_cast<LinearMultiRowsParams *>(l.params.data());
    return MmaInput{&p->one.x,      &p->xStride, &p->one.normWeight,
                    p->one.normEps, p->one.k,    p->rows};
  }
  return std::nullopt;
}
int64_t preNormStride(int64_t k) { return (k + 7) / 8 * 8; }
} // namespace

uint64_t preNormScratchBytes(const std::string &kernel, const RowsLaunch &mma) {
  RowsLaunch copy = mma;
  std::optional<MmaInput> in = mmaInput(kernel, copy);
  if (!in || !*in->normWeight)
    return 0;
  return static_cast<uint64_t>(in->rows) * preNormStride(in->k) * 2;
}

std::optional<RowsLaunch> splitPreNorm(const std::string &kernel,
                                       RowsLaunch &mma, uint64_t scratch) {
  std::optional<MmaInput> in = mmaInput(kernel, mma);
  if (!in || !*in->normWeight)
    return std::nullopt;
  LinearPreNormParams p;
  p.x = *in->x;
  p.xStride = *in->xStride;
  p.normWeight = *in->normWeight;
  p.normEps = in->eps;
  p.k = in->k;
  p.rows = in->rows;
  p.out = reinterpret_cast<uint16_t *>(static_cast<uintptr_t>(scratch));
  p.outStride = preNormStride(in->k);
  RowsLaunch norm;
  norm.params.resize(sizeof(p));
  std::memcpy(norm.params.data(), &p, sizeof(p));
  norm.grid[0] = in->rows;
  norm.grid[1] = norm.grid[2] = 1;
  norm.block[0] = 256;
  norm.block[1] = norm.block[2] = 1;
  *in->x = p.out;
  *in->xStride = p.outStride;
  *in->normWeight = nullptr;
  return norm;
}

std::optional<MoeChunkParams>
moeChunkParams(const std::vector<const void *> &rows, size_t size,
               uint64_t arenaStride) {
  int64_t k = 0;
  if (rows.size() < 2 || rows.size() > size_t(kMoeChunkRowsMax) ||
      !movedByStride("moe_ffn", rows, size, arenaStride, k))
    return std::nullopt;
  MoeChunkParams p;
  std::memcpy(&p.one, rows[0], sizeof(p.one));
  if (!moeChunkFits(p.one) || arenaStride % 16 != 0)
    return std::nullopt;
  p.rows = static_cast<int32_t>(rows.size());
  p.stride = static_cast<int64_t>(arenaStride);
  return p;
}

std::vector<RowsLaunch> rowsLaunches(const std::string &kernel,
                                     const std::vector<const void *> &rows,
                                     size_t size, uint64_t arenaStride) {
  if (kernel != "moe_ffn" || rows.size() < 2 || size != sizeof(MoeFfnParams)) {
    std::optional<RowsLaunch> one = rowsLaunch(kernel, rows, size, arenaStride);
    return one ? std::vector<RowsLaunch>{std::move(*one)}
               : std::vector<RowsLaunch>{};
  }
  // The largest group whose scratch fits; then the rows in such groups.
  size_t group = std::min<size_t>(rows.size(), kMoeRowsMax);
  while (group >= 2 && !moeRowsGroup(rows[0], group, arenaStride))
    --group;
  if (group < 2)
    return {};
  std::vector<RowsLaunch> out;
  for (size_t g = 0; g < rows.size(); g += group) {
    std::vector<const void *> part(
        rows.begin() + g, rows.begin() + std::min(rows.size(), g + group));
    std::optional<RowsLaunch> l = formOf(kernel, part, size, arenaStride);
    if (!l)
      return {};
    out.push_back(std::move(*l));
  }
  return out;
}

} // namespace k3
