//===- RowsForms_test.cpp - The CUDA multi-row forms' params ---------------===//
//
// rowsLaunch (runtime/exec/cuda/RowsForms.h) decides, for every launch of a
// step of several rows, whether the CUDA backend may run the rows in one
// multi-row launch: only when each row's bound params are row 0's with the
// activations moved by whole arenas. A wrong "yes" would compute one row's
// projection from another row's input (or a state), so the refusals are
// tested as carefully as the params it builds. Host code: runs in CI.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/cuda/RowsForms.h"

#include "kernels/gemv/GemvParams.h"
#include "kernels/kda/KdaParams.h"
#include "kernels/mla/MlaParams.h"
#include "kernels/moe/MoeParams.h"

#include <gtest/gtest.h>

#include <cstring>

namespace k3 {
namespace {

constexpr uint64_t kStride = 1 << 20; // bytes between two rows' arenas

template <typename T> T *at(uint64_t address) {
  return reinterpret_cast<T *>(static_cast<uintptr_t>(address));
}

/// Row r's `linear` params: x, residual and out in its arena, the weight
/// and norm shared.
LinearParams linearRow(int r, bool residual = true, bool f32 = false) {
  LinearParams p{};
  const uint64_t arena = 0x10000000ull + r * kStride;
  p.x = at<const uint16_t>(arena + 256);
  p.w.bf16 = at<const uint16_t>(0x70000000ull);
  p.n = 2304;
  p.k = 4096;
  p.normWeight = at<const uint16_t>(0x71000000ull);
  p.normEps = 1e-6f;
  if (f32) {
    p.outF32 = at<float>(arena + 8192);
  } else {
    p.out = at<uint16_t>(arena + 8192);
    if (residual)
      p.residual = p.out;
  }
  return p;
}

/// The rows' params as the backend hands them over: a pointer each.
template <typename P>
std::vector<const void *> pointersTo(const std::vector<P> &rows) {
  std::vector<const void *> ptrs;
  for (const P &p : rows)
    ptrs.push_back(&p);
  return ptrs;
}

template <typename P>
std::optional<RowsLaunch> launchOf(const std::string &kernel,
                                   const std::vector<P> &rows) {
  return rowsLaunch(kernel, pointersTo(rows), sizeof(P), kStride);
}

TEST(RowsForms, LinearRowsAStrideApart) {
  std::vector<LinearParams> rows;
  for (int r = 0; r < 5; ++r)
    rows.push_back(linearRow(r));
  const auto form = launchOf("linear", rows);
  ASSERT_TRUE(form.has_value());
  ASSERT_EQ(form->params.size(), sizeof(LinearRowsParams));
  LinearRowsParams p;
  std::memcpy(&p, form->params.data(), sizeof(p));
  EXPECT_EQ(std::memcmp(&p.one, &rows[0], sizeof(LinearParams)), 0);
  EXPECT_EQ(p.rows, 5);
  EXPECT_EQ(p.xStride, int64_t(kStride / 2)); // bf16 elements
  EXPECT_EQ(p.residualStride, int64_t(kStride / 2));
  EXPECT_EQ(p.outStride, int64_t(kStride / 2));
  EXPECT_EQ(form->smem, gemvRowsSmemBytes(4096, 5));
  // fp32 output (the lm_head): its stride counts floats.
  std::vector<LinearParams> f32 = {linearRow(0, false, true),
                                   linearRow(1, false, true)};
  const auto f = launchOf("linear", f32);
  ASSERT_TRUE(f.has_value());
  std::memcpy(&p, f->params.data(), sizeof(p));
  EXPECT_EQ(p.outStride, int64_t(kStride / 4));
  EXPECT_EQ(p.one.residual, nullptr); // null stays null
}

TEST(RowsForms, LinearRowsThatDifferOtherwiseRunRowByRow) {
  std::vector<LinearParams> rows = {linearRow(0), linearRow(1), linearRow(2)};
  ASSERT_TRUE(launchOf("linear", rows).has_value());
  auto with = [&](auto change) {
    std::vector<LinearParams> v = rows;
    change(v[2]);
    return launchOf("linear", v).has_value();
  };
  // x bound to one buffer for every row (a state, not the arena).
  EXPECT_FALSE(with([&](LinearParams &p) { p.x = rows[0].x; }));
  // out two arenas on, or in the wrong row's arena.
  EXPECT_FALSE(with([&](LinearParams &p) { p.out = rows[1].out; }));
  EXPECT_FALSE(with([&](LinearParams &p) { p.out += 8; }));
  // A different weight, size or norm epsilon.
  EXPECT_FALSE(with([&](LinearParams &p) { p.w.bf16 += 16; }));
  EXPECT_FALSE(with([&](LinearParams &p) { p.n = 2303; }));
  EXPECT_FALSE(with([&](LinearParams &p) { p.normEps = 1e-5f; }));
  // The residual given in one row only.
  EXPECT_FALSE(with([&](LinearParams &p) { p.residual = nullptr; }));
  // One row, or a kernel without a multi-row form.
  EXPECT_FALSE(launchOf("linear", std::vector<LinearParams>{rows[0]}));
  EXPECT_FALSE(launchOf("rms_norm", rows).has_value());
  EXPECT_TRUE(hasRowsForm("linear_multi"));
  EXPECT_TRUE(hasRowsForm("moe_ffn"));
  EXPECT_FALSE(hasRowsForm("kda_decode"));
}

/// The tensor-core forms: the multi-row form's params, their own block,
/// shared memory and grid (weight-row tiles across, token tiles down).
TEST(RowsForms, MmaFormsTileWeightRowsAndTokens) {
  std::vector<LinearParams> rows;
  for (int r = 0; r < 70; ++r)
    rows.push_back(linearRow(r));
  const std::vector<const void *> ptrs = pointersTo(rows);
  const auto mma =
      mmaRowsLaunch("linear", ptrs, sizeof(LinearParams), kStride, 1);
  ASSERT_TRUE(mma.has_value());
  const auto plain = launchOf("linear", rows);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(mma->params, plain->params);
  EXPECT_EQ(mma->smem, kGemvMmaSmemBytes);
  EXPECT_EQ(mma->block[0], kGemvMmaThreads);
  EXPECT_EQ(mma->grid[0], 2304 / kGemvMmaRows);
  EXPECT_EQ(mma->grid[1], 2); // 64 + 6 tokens
  EXPECT_EQ(mma->grid[2], 1);
  EXPECT_EQ(mma->cluster[0], 1); // 72 tiles fill a device of one SM
  // On 132 SMs the 72 tiles (k = 4096: 64 stages) split over k in two.
  const auto split =
      mmaRowsLaunch("linear", ptrs, sizeof(LinearParams), kStride, 132);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->grid[0], 2 * 2304 / kGemvMmaRows);
  EXPECT_EQ(split->grid[1], 2);
  EXPECT_EQ(split->cluster[0], 2);
  EXPECT_EQ(split->params, plain->params);
  EXPECT_EQ(plain->grid[0], 0); // the plan's grid
  // linear_multi: the entries' rows are one index space.
  LinearMultiParams m{};
  m.x = at<const uint16_t>(0x20000000ull);
  m.k = 2304;
  m.count = 3;
  for (int e = 0; e < 3; ++e) {
    m.entries[e].w.bf16 = at<const uint16_t>(0x70000000ull + e * 0x1000000);
    m.entries[e].n = e == 2 ? 32 : 4096;
    m.entries[e].out = at<uint16_t>(0x20000000ull + 0x10000 * (e + 1));
  }
  LinearMultiParams m1 = m;
  m1.x += kStride / 2;
  for (int e = 0; e < 3; ++e)
    m1.entries[e].out += kStride / 2;
  const std::vector<const void *> two = {&m, &m1};
  const auto multi = mmaRowsLaunch("linear_multi", two,
                                   sizeof(LinearMultiParams), kStride, 132);
  ASSERT_TRUE(multi.has_value());
  // 129 tiles, short of 132 SMs: split in two.
  EXPECT_EQ(multi->grid[0],
            2 * ((8192 + 32 + kGemvMmaRows - 1) / kGemvMmaRows));
  EXPECT_EQ(multi->grid[1], 1);
  EXPECT_EQ(multi->cluster[0], 2);
  // The split: every SM a block, at most 8, each share >= 4 stages.
  EXPECT_EQ(gemvMmaSplit(36, 4096, 132), 4);
  EXPECT_EQ(gemvMmaSplit(36, 4096, 264), 8);
  EXPECT_EQ(gemvMmaSplit(1, 1 << 20, 1000), kGemvMmaMaxSplit);
  EXPECT_EQ(gemvMmaSplit(36, 512, 132), 2); // 8 stages: two shares of 4
  EXPECT_EQ(gemvMmaSplit(36, 448, 132), 1); // 7 stages
  EXPECT_EQ(gemvMmaSplit(200, 4096, 132), 1);
  // No tensor-core form: the MoE, a kernel without rows form, rows that
  // cannot run together.
  EXPECT_FALSE(hasMmaRowsForm("moe_ffn"));
  EXPECT_FALSE(
      mmaRowsLaunch("rms_norm", ptrs, sizeof(LinearParams), kStride, 132));
  rows[3].x = rows[0].x;
  EXPECT_FALSE(
      mmaRowsLaunch("linear", ptrs, sizeof(LinearParams), kStride, 132));
}

/// The narrow tensor-core forms: the multi-row params followed by the
/// split, one block of kGemvMma16Threads an SM (fewer when the units are
/// fewer), x̂ of 16 rows in shared memory, the k split chosen for the
/// grid's warps, and the scratch the split needs (none for one part),
/// bound at the split's offset; what the kernel would leave to one launch
/// per row is refused.
TEST(RowsForms, NarrowFormsSplitKForTheGridsWarps) {
  std::vector<LinearParams> rows;
  for (int r = 0; r < 16; ++r)
    rows.push_back(linearRow(r));
  const std::vector<const void *> ptrs = pointersTo(rows);
  const int64_t cap = 227 * 1024;
  auto m =
      mma16RowsLaunch("linear", ptrs, sizeof(LinearParams), kStride, 132, cap);
  ASSERT_TRUE(m.has_value());
  const auto plain = launchOf("linear", rows);
  ASSERT_TRUE(plain.has_value());
  ASSERT_EQ(m->launch.params.size(), sizeof(LinearRowsMma16Params));
  EXPECT_TRUE(std::equal(plain->params.begin(), plain->params.end(),
                         m->launch.params.begin()));
  LinearRowsMma16Params p;
  std::memcpy(&p, m->launch.params.data(), sizeof(p));
  // Kimi-Linear's o_proj: 144 tiles of 128 groups over 132 × 16 warps.
  EXPECT_EQ(p.split.parts, 13);
  EXPECT_EQ(p.split.partials, nullptr);
  EXPECT_EQ(m->launch.smem, 16 * 4096 * 2);
  EXPECT_EQ(m->launch.block[0], kGemvMma16Threads);
  EXPECT_EQ(m->launch.grid[0], (144 * 13 + 15) / 16); // 117 blocks
  EXPECT_EQ(m->launch.grid[1], 1);
  EXPECT_EQ(m->partialBytes, uint64_t{144} * 13 * 256 * 4);
  EXPECT_EQ(m->counterBytes, uint64_t{144} * 4);
  bindMma16Scratch(*m, 0x50000000ull, 0x51000000ull);
  std::memcpy(&p, m->launch.params.data(), sizeof(p));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.split.partials), 0x50000000ull);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.split.counters), 0x51000000ull);
  EXPECT_EQ(p.split.parts, 13);
  EXPECT_EQ(p.rows.rows, 16);
  // The parts: rounds of units times a unit's groups (+ 2 + parts / 2 with
  // a split: its arrival and the last part's reading of every part).
  EXPECT_EQ(gemvMma16Parts(144, 128, 132 * 16), 13);
  EXPECT_EQ(gemvMma16Parts(784, 72, 132 * 16), 5);   // KDA's q/k/v/...
  EXPECT_EQ(gemvMma16Parts(10240, 72, 132 * 16), 1); // the lm_head
  EXPECT_EQ(gemvMma16Parts(5, 72, 132 * 16), 9);     // 77 rows
  EXPECT_EQ(gemvMma16Parts(1, 3, 16), 1); // a split pays its reduction
  // A long k over one tile: ~sqrt(2 · groups) parts, not the most (the
  // reduction reads every part).
  EXPECT_EQ(gemvMma16Parts(1, 1024, 10000), 41);
  // The lm_head (fp32 out): one part, no scratch.
  std::vector<LinearParams> head;
  for (int r = 0; r < 16; ++r) {
    head.push_back(linearRow(r, false, true));
    head.back().n = 163840;
    head.back().k = 2304;
  }
  auto h = mma16RowsLaunch("linear", pointersTo(head), sizeof(LinearParams),
                           kStride, 132, cap);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->launch.grid[0], 132);
  EXPECT_EQ(h->partialBytes, 0u);
  EXPECT_EQ(h->counterBytes, 0u);
  // linear_multi: its own params struct, the entries' rows one space.
  LinearMultiParams a{};
  a.x = at<const uint16_t>(0x20000000ull);
  a.k = 2304;
  a.count = 2;
  for (int e = 0; e < 2; ++e) {
    a.entries[e].w.bf16 = at<const uint16_t>(0x70000000ull + e * 0x1000000);
    a.entries[e].n = e == 1 ? 40 : 4096;
    a.entries[e].out = at<uint16_t>(0x20000000ull + 0x10000 * (e + 1));
  }
  LinearMultiParams b = a;
  b.x += kStride / 2;
  for (int e = 0; e < 2; ++e)
    b.entries[e].out += kStride / 2;
  auto multi = mma16RowsLaunch("linear_multi", {&a, &b},
                               sizeof(LinearMultiParams), kStride, 132, cap);
  ASSERT_TRUE(multi.has_value());
  ASSERT_EQ(multi->launch.params.size(), sizeof(LinearMultiRowsMma16Params));
  LinearMultiRowsMma16Params mp;
  std::memcpy(&mp, multi->launch.params.data(), sizeof(mp));
  EXPECT_EQ(mp.rows.rows, 2);
  EXPECT_EQ(mp.split.parts, gemvMma16Parts(259, 72, 132 * 16)); // 4136 rows
  EXPECT_EQ(multi->splitAt, offsetof(LinearMultiRowsMma16Params, split));
  // Refused: more rows than a tile of tokens, k not a multiple of 32, x̂
  // wider than the shared memory, the MoE, rows that cannot run together.
  std::vector<LinearParams> many = rows;
  many.push_back(linearRow(16));
  EXPECT_FALSE(mma16RowsLaunch("linear", pointersTo(many), sizeof(LinearParams),
                               kStride, 132, cap));
  std::vector<LinearParams> odd = rows;
  for (LinearParams &q : odd)
    q.k = 4008;
  EXPECT_FALSE(mma16RowsLaunch("linear", pointersTo(odd), sizeof(LinearParams),
                               kStride, 132, cap));
  EXPECT_FALSE(mma16RowsLaunch("linear", ptrs, sizeof(LinearParams), kStride,
                               132, 16 * 4096 * 2 - 1));
  // What the kernel's fast path does not read: MXFP4 weights, x off 16 bytes.
  std::vector<LinearParams> mx = rows;
  for (LinearParams &q : mx)
    q.w.format = kWeightMxfp4;
  EXPECT_FALSE(mma16RowsLaunch("linear", pointersTo(mx), sizeof(LinearParams),
                               kStride, 132, cap));
  std::vector<LinearParams> off = rows;
  for (LinearParams &q : off)
    q.x += 4;
  EXPECT_FALSE(mma16RowsLaunch("linear", pointersTo(off), sizeof(LinearParams),
                               kStride, 132, cap));
  EXPECT_FALSE(hasMma16RowsForm("moe_ffn"));
  EXPECT_FALSE(mma16RowsLaunch("moe_ffn", ptrs, sizeof(LinearParams), kStride,
                               132, cap));
  rows[3].x = rows[0].x;
  EXPECT_FALSE(mma16RowsLaunch("linear", pointersTo(rows), sizeof(LinearParams),
                               kStride, 132, cap));
}

/// A tensor-core launch whose projection folds a norm splits off its
/// pre-norm: one block of 256 per row writing x̂ to the scratch, rows 16
/// bytes apart, and the launch reading it there with no norm; without a
/// norm nothing splits.
TEST(RowsForms, MmaFormsSplitOffTheirPreNorm) {
  std::vector<LinearParams> rows;
  for (int r = 0; r < 20; ++r)
    rows.push_back(linearRow(r));
  const std::vector<const void *> ptrs = pointersTo(rows);
  auto mma = mmaRowsLaunch("linear", ptrs, sizeof(LinearParams), kStride, 132);
  ASSERT_TRUE(mma.has_value());
  const uint64_t scratch = 0x40000000ull;
  EXPECT_EQ(preNormScratchBytes("linear", *mma), uint64_t{20} * 4096 * 2);
  const RowsLaunch before = *mma;
  auto norm = splitPreNorm("linear", *mma, scratch);
  ASSERT_TRUE(norm.has_value());
  EXPECT_EQ(norm->grid[0], 20);
  EXPECT_EQ(norm->block[0], 256);
  LinearPreNormParams n;
  ASSERT_EQ(norm->params.size(), sizeof(n));
  std::memcpy(&n, norm->params.data(), sizeof(n));
  EXPECT_EQ(n.x, rows[0].x);
  EXPECT_EQ(n.xStride, static_cast<int64_t>(kStride / 2));
  EXPECT_EQ(n.normWeight, rows[0].normWeight);
  EXPECT_EQ(n.normEps, rows[0].normEps);
  EXPECT_EQ(n.k, 4096);
  EXPECT_EQ(n.rows, 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(n.out), scratch);
  EXPECT_EQ(n.outStride, 4096);
  LinearRowsParams p;
  std::memcpy(&p, mma->params.data(), sizeof(p));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.one.x), scratch);
  EXPECT_EQ(p.xStride, 4096);
  EXPECT_EQ(p.one.normWeight, nullptr);
  EXPECT_EQ(mma->grid[0], before.grid[0]);
  // Nothing left to split; and a projection without a norm has none.
  EXPECT_EQ(preNormScratchBytes("linear", *mma), 0u);
  EXPECT_FALSE(splitPreNorm("linear", *mma, scratch).has_value());
  for (LinearParams &r : rows)
    r.normWeight = nullptr;
  auto plain =
      mmaRowsLaunch("linear", ptrs, sizeof(LinearParams), kStride, 132);
  ASSERT_TRUE(plain.has_value());
  const RowsLaunch kept = *plain;
  EXPECT_FALSE(splitPreNorm("linear", *plain, scratch).has_value());
  EXPECT_EQ(plain->params, kept.params);
}

TEST(RowsForms, LinearMultiMovesEveryEntrysOut) {
  auto row = [](int r) {
    LinearMultiParams p{};
    const uint64_t arena = 0x20000000ull + r * kStride;
    p.x = at<const uint16_t>(arena);
    p.k = 2304;
    p.count = 3;
    for (int e = 0; e < 3; ++e) {
      p.entries[e].w.bf16 = at<const uint16_t>(0x70000000ull + e * 0x1000000);
      p.entries[e].n = 4096 >> e;
      p.entries[e].out = at<uint16_t>(arena + 0x10000 * (e + 1));
    }
    return p;
  };
  std::vector<LinearMultiParams> rows = {row(0), row(1), row(2), row(3)};
  const auto form = launchOf("linear_multi", rows);
  ASSERT_TRUE(form.has_value());
  LinearMultiRowsParams p;
  ASSERT_EQ(form->params.size(), sizeof(p));
  std::memcpy(&p, form->params.data(), sizeof(p));
  EXPECT_EQ(p.rows, 4);
  EXPECT_EQ(p.xStride, int64_t(kStride / 2));
  EXPECT_EQ(p.outStride, int64_t(kStride / 2));
  EXPECT_EQ(std::memcmp(&p.one, &rows[0], sizeof(LinearMultiParams)), 0);
  // The last entry's out not moved with its row: row by row.
  rows[3].entries[2].out = rows[0].entries[2].out;
  EXPECT_FALSE(launchOf("linear_multi", rows).has_value());
}

/// Row r's `moe_ffn` params at Kimi-Linear's shape: h (= x = residual),
/// the router's ids and weights (= the experts'), out in its arena; gate,
/// bias, norm, expert tables and shared expert shared.
MoeFfnParams moeRow(int r) {
  MoeFfnParams p{};
  const uint64_t arena = 0x30000000ull + r * kStride;
  RouterParams &q = p.router;
  MoeExpertsParams &e = p.experts;
  q.h = at<const uint16_t>(arena + 0x100);
  q.normWeight = at<const uint16_t>(0x71000000ull);
  q.normEps = 1e-6f;
  q.gate = at<const uint16_t>(0x72000000ull);
  q.bias = at<const float>(0x73000000ull);
  q.numExperts = 256;
  q.dim = 2304;
  q.topK = 8;
  q.scaling = 2.446f;
  q.outIds = at<int32_t>(arena + 0x2000);
  q.outWeights = at<float>(arena + 0x2100);
  e.x = q.h;
  e.ids = q.outIds;
  e.weights = q.outWeights;
  e.topK = 8;
  e.numExperts = 256;
  e.w1 = at<const WeightRef>(0x74000000ull);
  e.w3 = at<const WeightRef>(0x75000000ull);
  e.w2 = at<const WeightRef>(0x76000000ull);
  e.dim = 2304;
  e.interDim = 1024;
  e.normWeight = q.normWeight;
  e.normEps = q.normEps;
  e.sharedInterDim = 1024;
  e.sharedW1.bf16 = at<const uint16_t>(0x77000000ull);
  e.residual = q.h;
  e.out = at<uint16_t>(arena + 0x3000);
  return p;
}

TEST(RowsForms, MoeFfnInGroupsOfTheUnionKernel) {
  std::vector<MoeFfnParams> rows;
  for (int r = 0; r < 37; ++r)
    rows.push_back(moeRow(r));
  const std::vector<const void *> ptrs = pointersTo(rows);
  // 37 rows: groups of 16, 16 and 5, each from its first row's params.
  const std::vector<RowsLaunch> forms =
      rowsLaunches("moe_ffn", ptrs, sizeof(MoeFfnParams), kStride);
  ASSERT_EQ(forms.size(), 3u);
  const int sizes[] = {16, 16, 5};
  for (size_t g = 0; g < 3; ++g) {
    MoeFfnRowsParams p;
    ASSERT_EQ(forms[g].params.size(), sizeof(p));
    std::memcpy(&p, forms[g].params.data(), sizeof(p));
    EXPECT_EQ(p.rows, sizes[g]);
    EXPECT_EQ(p.stride, int64_t(kStride));
    EXPECT_EQ(std::memcmp(&p.one, &rows[g * 16], sizeof(MoeFfnParams)), 0);
    EXPECT_EQ(forms[g].smem, moeFfnRowsSmemBytes(2304, 256, 8, sizes[g]));
  }
  // One launch takes at most kMoeRowsMax rows; a group of one is fine.
  EXPECT_FALSE(rowsLaunch("moe_ffn", ptrs, sizeof(MoeFfnParams), kStride));
  std::vector<const void *> seventeen(ptrs.begin(), ptrs.begin() + 17);
  EXPECT_EQ(rowsLaunches("moe_ffn", seventeen, sizeof(MoeFfnParams), kStride)
                .size(),
            2u);
  // K3's shape (896 experts top-16, 3584 wide, 3072 + 6144 rows): its
  // activations and outputs cap the group below kMoeRowsMax.
  for (MoeFfnParams &p : rows) {
    p.router.numExperts = p.experts.numExperts = 896;
    p.router.topK = p.experts.topK = 16;
    p.router.dim = p.experts.dim = 3584;
    p.experts.interDim = 3072;
    p.experts.sharedInterDim = 6144;
  }
  const std::vector<RowsLaunch> k3 =
      rowsLaunches("moe_ffn", ptrs, sizeof(MoeFfnParams), kStride);
  ASSERT_FALSE(k3.empty());
  MoeFfnRowsParams first;
  std::memcpy(&first, k3[0].params.data(), sizeof(first));
  EXPECT_TRUE(moeFfnRowsFit(first.one, first.rows));
  EXPECT_FALSE(moeFfnRowsFit(first.one, first.rows + 1));
}

/// mla_attend_clustered's chunk form: {rows array, n}, a block of
/// kMlaChunkThreads per head and tile of kMlaChunkRows rows,
/// kMlaChunkSmemBytes; none below kMlaChunkMinRows rows, for another head
/// shape, a misaligned operand or another kernel; the chunk forms' shared
/// memory as their kernels state it.
TEST(RowsForms, MlaChunkLaunchOfAPromptChunk) {
  MlaAttendParams p;
  p.q = reinterpret_cast<const uint16_t *>(uintptr_t{0x10000});
  p.kvB = reinterpret_cast<const uint16_t *>(uintptr_t{0x20000});
  p.cache = reinterpret_cast<const uint16_t *>(uintptr_t{0x30000});
  p.out = reinterpret_cast<uint16_t *>(uintptr_t{0x40000});
  p.numHeads = 32;
  p.nopeDim = 128;
  p.ropeDim = 64;
  p.vDim = 128;
  p.kvLoraRank = 512;
  const uint64_t array = 0x50000;
  std::optional<RowsLaunch> l =
      mlaChunkLaunch("mla_attend_clustered", &p, sizeof p, 257, array);
  ASSERT_TRUE(l.has_value());
  ASSERT_EQ(l->params.size(), sizeof(RowsArrayParams));
  RowsArrayParams rp;
  std::memcpy(&rp, l->params.data(), sizeof rp);
  EXPECT_EQ(rp.rows, array);
  EXPECT_EQ(rp.count, 257);
  EXPECT_EQ(l->grid[0], 32);
  EXPECT_EQ(l->grid[1], (257 + kMlaChunkRows - 1) / kMlaChunkRows);
  EXPECT_EQ(l->grid[2], 1);
  EXPECT_EQ(l->block[0], kMlaChunkThreads);
  EXPECT_EQ(l->smem, kMlaChunkSmemBytes);
  EXPECT_EQ(l->cluster[0], 1);
  EXPECT_FALSE(mlaChunkLaunch("mla_attend_clustered", &p, sizeof p,
                              kMlaChunkMinRows - 1, array));
  EXPECT_FALSE(mlaChunkLaunch("mla_attend", &p, sizeof p, 64, array));
  EXPECT_FALSE(
      mlaChunkLaunch("mla_attend_clustered", &p, sizeof p - 8, 64, array));
  MlaAttendParams other = p;
  other.kvLoraRank = 256;
  EXPECT_FALSE(
      mlaChunkLaunch("mla_attend_clustered", &other, sizeof other, 64, array));
  other = p;
  other.q += 4; // 8 bytes off
  EXPECT_FALSE(
      mlaChunkLaunch("mla_attend_clustered", &other, sizeof other, 64, array));
  EXPECT_EQ(chunkFormSmemBytes("kda_decode"), kKdaChunkSmemBytes);
  EXPECT_EQ(chunkFormSmemBytes("mla_attend_clustered"), kMlaChunkSmemBytes);
  EXPECT_EQ(chunkFormSmemBytes("linear"), 0);
  for (const char *k : kCudaChunkForms)
    EXPECT_GT(chunkFormSmemBytes(k), 0) << k;
}

/// mla_attend_clustered's batch form: the chunk form's launch with R rows a
/// tile, R the fewest that give the 132 SMs about two blocks each (1 to
/// kMlaChunkRows); none where the chunk form has none.
TEST(RowsForms, MlaBatchLaunchOfADecodeBatch) {
  MlaAttendParams p;
  p.q = reinterpret_cast<const uint16_t *>(uintptr_t{0x10000});
  p.kvB = reinterpret_cast<const uint16_t *>(uintptr_t{0x20000});
  p.cache = reinterpret_cast<const uint16_t *>(uintptr_t{0x30000});
  p.out = reinterpret_cast<uint16_t *>(uintptr_t{0x40000});
  p.numHeads = 32;
  p.nopeDim = 128;
  p.ropeDim = 64;
  p.vDim = 128;
  p.kvLoraRank = 512;
  const uint64_t array = 0x50000;
  struct Case {
    int64_t heads, rows, tiles;
  };
  // 32 heads x 16 rows = 512 row-heads over 264 blocks: 2 rows a tile;
  // 64 rows: 8 a tile; 300 rows: 16 a tile (the most); K3's 96 heads x 16
  // rows: 6 a tile.
  for (const Case &c : {Case{32, 16, 8}, Case{32, 64, 8}, Case{32, 300, 19},
                        Case{96, 16, 3}, Case{32, 17, 6}}) {
    p.numHeads = c.heads;
    std::optional<RowsLaunch> l = mlaBatchLaunch(
        "mla_attend_clustered", &p, sizeof p, size_t(c.rows), array, 132);
    ASSERT_TRUE(l.has_value()) << c.heads << " heads, " << c.rows << " rows";
    RowsArrayParams rp;
    std::memcpy(&rp, l->params.data(), sizeof rp);
    EXPECT_EQ(rp.rows, array);
    EXPECT_EQ(rp.count, c.rows);
    EXPECT_EQ(l->grid[0], c.heads);
    EXPECT_EQ(l->grid[1], c.tiles) << c.heads << " heads, " << c.rows;
    EXPECT_LE((c.rows + l->grid[1] - 1) / l->grid[1], kMlaChunkRows);
    EXPECT_EQ(l->block[0], kMlaChunkThreads);
    EXPECT_EQ(l->smem, kMlaChunkSmemBytes);
  }
  p.numHeads = 32;
  EXPECT_FALSE(mlaBatchLaunch("mla_attend_clustered", &p, sizeof p,
                              kMlaChunkMinRows - 1, array, 132));
  EXPECT_FALSE(mlaBatchLaunch("mla_attend", &p, sizeof p, 64, array, 132));
  EXPECT_TRUE(hasBatchForm("mla_attend_clustered"));
  EXPECT_FALSE(hasBatchForm("kda_decode"));
}

/// The MoE of a prompt chunk: row 0's params with the rows' count and
/// stride, for up to kMoeChunkRowsMax rows of one pattern whose shapes the
/// kernels take; none otherwise.
TEST(RowsForms, MoeChunkParamsOfAPromptChunk) {
  std::vector<MoeFfnParams> rows;
  for (int r = 0; r < 64; ++r)
    rows.push_back(moeRow(r));
  auto of = [](const std::vector<MoeFfnParams> &v) {
    return moeChunkParams(pointersTo(v), sizeof(MoeFfnParams), kStride);
  };
  const std::optional<MoeChunkParams> c = of(rows);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(std::memcmp(&c->one, &rows[0], sizeof(MoeFfnParams)), 0);
  EXPECT_EQ(c->rows, 64);
  EXPECT_EQ(c->stride, int64_t(kStride));
  EXPECT_EQ(c->xhat, nullptr); // the caller's scratch
  EXPECT_GT(moeChunkScratchBytes(c->one, 64), moeChunkScratchBytes(c->one, 16));
  // The scratch parts: in order, 256-byte aligned, each as large as its
  // rows need, within the counted bytes.
  MoeChunkParams bound = *c;
  const int64_t bytes = moeChunkScratchBytes(c->one, 64);
  std::vector<uint8_t> scratch(static_cast<size_t>(bytes) + 256);
  uint8_t *base =
      scratch.data() +
      (256 - reinterpret_cast<uintptr_t>(scratch.data()) % 256) % 256;
  EXPECT_EQ(moeChunkBindScratch(bound, base), bytes);
  const MoeExpertsParams &e = c->one.experts;
  const int64_t pairs = 64 * e.topK;
  // The route's arrival counters first, for every row count alike.
  EXPECT_EQ(reinterpret_cast<uint8_t *>(bound.arrivals), base);
  const std::pair<const void *, int64_t> parts[] = {
      {bound.arrivals, kMoeChunkRowsMax * 4},
      {bound.scores, 64 * e.numExperts * 4},
      {bound.xhat, 64 * e.dim * 2},
      {bound.pairAt, pairs * 4},
      {bound.order, pairs * 4},
      {bound.offsets, (e.numExperts + 1) * 4},
      {bound.act, pairs * e.interDim * 2},
      {bound.y, pairs * e.dim * 2},
      {bound.sharedAct, 64 * e.sharedInterDim * 2},
      {bound.sharedY, 64 * e.dim * 2}};
  int64_t end = 0;
  for (const auto &[ptr, need] : parts) {
    const int64_t off = static_cast<const uint8_t *>(ptr) - base;
    EXPECT_EQ(off % 256, 0);
    EXPECT_GE(off, end);
    end = off + need;
  }
  EXPECT_LE(end, bytes);
  // One row, more than a group, a row out of the pattern.
  EXPECT_FALSE(of({rows[0]}));
  std::vector<MoeFfnParams> many;
  for (int r = 0; r <= kMoeChunkRowsMax; ++r)
    many.push_back(moeRow(r));
  EXPECT_FALSE(of(many));
  std::vector<MoeFfnParams> v = rows;
  v[5].experts.out = rows[4].experts.out;
  EXPECT_FALSE(of(v));
  // Shapes outside the kernels' tiles: an expert width not a multiple of
  // 32, a shared width not a multiple of 32, more experts than ranked; a
  // router forced to one expert (the router-expert0 mutant: every rank of
  // every row, more pairs for it than the grid's token tiles hold).
  for (auto change : {+[](MoeFfnParams &p) { p.experts.interDim = 1000; },
                      +[](MoeFfnParams &p) { p.experts.sharedInterDim = 100; },
                      +[](MoeFfnParams &p) {
                        p.router.numExperts = p.experts.numExperts = 2048;
                      },
                      +[](MoeFfnParams &p) { p.router.forceExpert = 0; }}) {
    std::vector<MoeFfnParams> w = rows;
    for (MoeFfnParams &p : w)
      change(p);
    EXPECT_FALSE(of(w));
  }
}

TEST(RowsForms, MoeFfnRowsThatCannotRunTogether) {
  std::vector<MoeFfnParams> rows = {moeRow(0), moeRow(1), moeRow(2)};
  auto together = [](const std::vector<MoeFfnParams> &v, uint64_t stride) {
    return !rowsLaunches("moe_ffn", pointersTo(v), sizeof(MoeFfnParams), stride)
                .empty();
  };
  ASSERT_TRUE(together(rows, kStride));
  auto with = [&](auto change) {
    std::vector<MoeFfnParams> v = rows;
    change(v[2]);
    return together(v, kStride);
  };
  // A row's ids in another row's arena, its output not moved, its weights
  // shared with row 0 (each would mix rows).
  EXPECT_FALSE(with([&](MoeFfnParams &p) { p.router.outIds = rows[1].router.outIds; }));
  EXPECT_FALSE(with([&](MoeFfnParams &p) { p.experts.out = rows[0].experts.out; }));
  EXPECT_FALSE(
      with([&](MoeFfnParams &p) { p.experts.weights = rows[0].experts.weights; }));
  // Another expert table or bias.
  EXPECT_FALSE(with([&](MoeFfnParams &p) { p.experts.w2 += 1; }));
  EXPECT_FALSE(with([&](MoeFfnParams &p) { p.router.bias += 4; }));
  auto all = [&](auto change) {
    std::vector<MoeFfnParams> v = rows;
    for (MoeFfnParams &p : v)
      change(p);
    return together(v, kStride);
  };
  // The router reading another input than the experts; a misaligned input;
  // a width the stage does not take.
  EXPECT_FALSE(all([](MoeFfnParams &p) { p.experts.x += 8; p.experts.residual += 8; }));
  EXPECT_FALSE(all([](MoeFfnParams &p) {
    p.router.h += 4;
    p.experts.x += 4;
  }));
  EXPECT_FALSE(all([](MoeFfnParams &p) { p.router.dim = p.experts.dim = 2300; }));
  // Arenas not 16 bytes apart.
  std::vector<MoeFfnParams> odd;
  for (int r = 0; r < 3; ++r) {
    MoeFfnParams p = moeRow(0);
    const uint64_t d = r * (kStride + 8);
    for (const uint16_t **q : {&p.router.h, &p.experts.x, &p.experts.residual})
      *q = at<const uint16_t>(reinterpret_cast<uintptr_t>(*q) + d);
    p.router.outIds = at<int32_t>(reinterpret_cast<uintptr_t>(p.router.outIds) + d);
    p.experts.ids = p.router.outIds;
    p.router.outWeights =
        at<float>(reinterpret_cast<uintptr_t>(p.router.outWeights) + d);
    p.experts.weights = p.router.outWeights;
    p.experts.out = at<uint16_t>(reinterpret_cast<uintptr_t>(p.experts.out) + d);
    odd.push_back(p);
  }
  EXPECT_FALSE(together(odd, kStride + 8));
}

} // namespace
} // namespace k3
