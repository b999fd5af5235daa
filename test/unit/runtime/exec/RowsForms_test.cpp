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

template <typename P>
std::optional<RowsLaunch> launchOf(const std::string &kernel,
                                   const std::vector<P> &rows) {
  std::vector<const void *> ptrs;
  for (const P &p : rows)
    ptrs.push_back(&p);
  return rowsLaunch(kernel, ptrs, sizeof(P), kStride);
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
  EXPECT_FALSE(hasRowsForm("moe_ffn"));
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

} // namespace
} // namespace k3
