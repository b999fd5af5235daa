//===- PlanBinding_test.cpp - Plan weights resolved and bound -------------===//
//
// The binder keeps a "vector" weight (the KDA conv filters and o_norm) in the
// dtype the checkpoint stores, F32 or BF16, tells the kernel which through
// the VectorRef it writes into the params struct, checks extents in that
// dtype's elements, copies a tensor that is misaligned in the file instead
// of reading it unaligned, and refuses any other dtype naming the tensor.
// Plans written before "vector" (bf16 conv weights) bind as before.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/PlanBinding.h"

#include "kernels/common/BF16.h"
#include "kernels/kda/KdaParams.h"

#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cstring>

namespace k3 {
namespace {

/// Raw bytes of `values`.
template <typename T> std::vector<uint8_t> bytesOf(const std::vector<T> &v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// A checkpoint with a 3-byte tensor first, so the tensors after it sit at
/// odd offsets: "f32" [6] F32, "bf16" [6] BF16, then aligned copies of both
/// ("f32a", "bf16a", after a padding tensor), and an F16 "f16" [6].
class VectorWeights : public ::testing::Test {
protected:
  void SetUp() override {
    for (int i = 0; i < 6; ++i) {
      f32.push_back(0.1f * static_cast<float>(i + 1) - 0.35f); // not bf16
      bf16.push_back(floatToBf16(f32.back()));
    }
    std::vector<TensorData> ts = {{"odd", DType::U8, {3}, {1, 2, 3}},
                                  {"f32", DType::F32, {6, 1, 1}, bytesOf(f32)},
                                  {"bf16", DType::BF16, {6}, bytesOf(bf16)},
                                  {"pad", DType::U8, {1}, {0}},
                                  {"f32a", DType::F32, {6, 1, 1}, bytesOf(f32)},
                                  {"bf16a", DType::BF16, {6}, bytesOf(bf16)},
                                  {"f16", DType::F16, {6}, bytesOf(bf16)}};
    ASSERT_TRUE(writeSafetensors(dir.file("model.safetensors"), ts));
    Expected<TensorStore> s = TensorStore::open(dir.path());
    ASSERT_TRUE(s) << s.message();
    store = s.take();
  }
  PlanWeight vector(const std::string &name,
                    std::vector<int64_t> shape = {6, 1, 1}) {
    PlanWeight w;
    w.name = name;
    w.format = "vector";
    w.shape = std::move(shape);
    return w;
  }
  test::TempDir dir;
  TensorStore store;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
};

TEST_F(VectorWeights, KeptInTheStoredDtype) {
  struct Case {
    const char *name;
    int32_t dtype;
    bool inPlace;
  };
  for (Case c :
       {Case{"f32a", kVectorF32, true}, Case{"bf16a", kVectorBf16, true},
        Case{"f32", kVectorF32, false}, Case{"bf16", kVectorBf16, false}}) {
    SCOPED_TRACE(c.name);
    ResolvedWeight r;
    // Shapes compare without their size-1 dimensions: [6] binds [6, 1, 1].
    ASSERT_TRUE(resolveWeight(vector(c.name, {6}), store, r));
    const TensorView *t = store.find(c.name);
    EXPECT_EQ(r.dtype, c.dtype);
    const size_t size = c.dtype == kVectorF32 ? 4 : 2;
    EXPECT_EQ(r.bytes, 6 * size);
    EXPECT_EQ(r.data == t->data, c.inPlace) << "copied only when misaligned";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data) % size, 0u);
    // The stored bytes, never converted.
    EXPECT_EQ(std::memcmp(r.data, t->data, r.bytes), 0);
    const PlanMemory::Weight m = hostWeight(r);
    EXPECT_EQ(m.data, r.data);
    EXPECT_EQ(m.bytes, r.bytes);
    EXPECT_EQ(m.dtype, r.dtype);
  }
}

TEST_F(VectorWeights, OtherDtypesAndShapesAreRefusedByName) {
  ResolvedWeight r;
  Status s = resolveWeight(vector("f16", {6}), store, r);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "weight 'f16': the plan expects F32 or BF16 [6], "
                         "the checkpoint has F16 [6]");
  s = resolveWeight(vector("f32", {3, 2}), store, r);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "weight 'f32': the plan expects F32 or BF16 [3, 2], "
                         "the checkpoint has F32 [6, 1, 1]");
  // A bf16 weight (a projection, say) stays bf16 only.
  PlanWeight w = vector("f32a");
  w.format = "bf16";
  s = resolveWeight(w, store, r);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "weight 'f32a': the plan expects BF16 [6, 1, 1], "
                         "the checkpoint has F32 [6, 1, 1]");
}

/// One kda_conv launch over weight `w` (channels x width taps).
PlanDoc convPlan(const PlanWeight &w, int64_t channels, int64_t width) {
  PlanDoc plan;
  plan.maxSeq = 4;
  plan.config.vocabSize = 16;
  const int64_t u = plan.addBuffer("u", "bf16", channels);
  const int64_t out = plan.addBuffer("out", "bf16", channels);
  plan.addState("layers.0.conv", "conv_state", {channels, width - 1});
  plan.weights.push_back(w);
  PlanLaunch l;
  l.kernel = "kda_conv";
  l.arg("u", PlanArg::buffer(u))
      .arg("weight", PlanArg::weight(0))
      .arg("state", PlanArg::state(0))
      .arg("out", PlanArg::buffer(out))
      .arg("channels", PlanArg::integer(channels))
      .arg("width", PlanArg::integer(width));
  plan.launches.push_back(l);
  return plan;
}

Status bindConv(const PlanDoc &plan, const TensorStore &store,
                ResolvedWeight &w, std::vector<uint8_t> &arena,
                std::vector<uint8_t> &state, BoundLaunch &out) {
  K3_RETURN_IF_ERROR(resolveWeight(plan.weights[0], store, w));
  PlanMemory mem;
  arena.assign(plan.arenaBytes, 0);
  state.assign(plan.states[0].bytes, 0);
  mem.arena = arena.data();
  mem.states = {state.data()};
  mem.stateBytes = {plan.states[0].bytes};
  mem.weights = {hostWeight(w)};
  return bindLaunch(plan, 0, mem, out);
}

TEST_F(VectorWeights, BoundAsAVectorRefOfTheStoredDtype) {
  for (const char *name : {"f32", "bf16a"}) {
    SCOPED_TRACE(name);
    PlanDoc plan = convPlan(vector(name), 2, 3);
    ResolvedWeight w;
    std::vector<uint8_t> arena, state;
    BoundLaunch l;
    Status s = bindConv(plan, store, w, arena, state, l);
    ASSERT_TRUE(s) << s.message();
    KdaConvParams p;
    std::memcpy(&p, l.params->data(), sizeof(p));
    EXPECT_EQ(p.weight.data, w.data);
    EXPECT_EQ(p.weight.dtype,
              std::string(name) == "f32" ? kVectorF32 : kVectorBf16);
    l.runCpu(); // reads every tap in its stored dtype
  }
  // A plan written before "vector" (the conv filter bf16) binds as bf16.
  PlanWeight old = vector("bf16a");
  old.format = "bf16";
  PlanDoc plan = convPlan(old, 2, 3);
  ResolvedWeight w;
  std::vector<uint8_t> arena, state;
  BoundLaunch l;
  ASSERT_TRUE(bindConv(plan, store, w, arena, state, l));
  KdaConvParams p;
  std::memcpy(&p, l.params->data(), sizeof(p));
  EXPECT_EQ(p.weight.dtype, kVectorBf16);
}

TEST_F(VectorWeights, ExtentsAreCountedInTheStoredDtype) {
  // 3 channels x 3 taps = 9 elements of a 6-element weight: the message
  // counts f32 (or bf16) elements, as stored.
  for (const char *name : {"f32a", "bf16a"}) {
    SCOPED_TRACE(name);
    PlanDoc plan = convPlan(vector(name), 3, 3);
    ResolvedWeight w;
    std::vector<uint8_t> arena, state;
    BoundLaunch l;
    Status s = bindConv(plan, store, w, arena, state, l);
    ASSERT_FALSE(s);
    const std::string dt = std::string(name) == "f32a" ? "f32" : "bf16";
    EXPECT_TRUE(test::contains(s.message(), "'weight' needs 9 " + dt +
                                                " elements but weight '" +
                                                name + "' holds 6"))
        << s.message();
  }
}

/// A tensor-parallel rank's weights: each split plan weight binds exactly
/// its part of the checkpoint tensor (TensorSlice), whatever the format.
class SplitWeights : public ::testing::Test {
protected:
  void SetUp() override {
    for (int i = 0; i < 4 * 64; ++i)
      m.push_back(floatToBf16(0.01f * static_cast<float>(i % 97) - 0.4f));
    for (int i = 0; i < 4 * 32; ++i)
      packed.push_back(static_cast<uint8_t>((i * 37 + 11) & 0xFF));
    for (int i = 0; i < 4 * 2; ++i)
      scale.push_back(static_cast<uint8_t>(118 + i % 5));
    for (int e = 0; e < 2; ++e)
      for (int i = 0; i < 4 * 8; ++i)
        experts[e].push_back(floatToBf16(static_cast<float>(100 * e + i)));
    for (int i = 0; i < 8; ++i)
      aLog.push_back(0.5f * static_cast<float>(i) + 0.25f);
    std::vector<TensorData> ts = {
        {"m", DType::BF16, {4, 64}, bytesOf(m)},
        {"x.weight_packed", DType::U8, {4, 32}, packed},
        {"x.weight_scale", DType::U8, {4, 2}, scale},
        {"s.0", DType::BF16, {4, 8}, bytesOf(experts[0])},
        {"s.1", DType::BF16, {4, 8}, bytesOf(experts[1])},
        {"a", DType::F32, {8}, bytesOf(aLog)}};
    ASSERT_TRUE(writeSafetensors(dir.file("model.safetensors"), ts));
    Expected<TensorStore> s = TensorStore::open(dir.path());
    ASSERT_TRUE(s) << s.message();
    store = s.take();
  }
  static PlanWeight split(const std::string &name, const std::string &format,
                          std::vector<int64_t> shape, int axis, int64_t rank) {
    PlanWeight w;
    w.name = name;
    w.format = format;
    w.shape = std::move(shape);
    w.split = {axis, rank, 2};
    return w;
  }
  test::TempDir dir;
  TensorStore store;
  std::vector<uint16_t> m, experts[2];
  std::vector<uint8_t> packed, scale;
  std::vector<float> aLog;
};

TEST_F(SplitWeights, EachRankBindsItsPart) {
  for (int64_t rank : {0, 1}) {
    SCOPED_TRACE(rank);
    // bf16 by rows (a column-parallel projection): rows 2r, 2r+1, in place.
    ResolvedWeight rows;
    ASSERT_TRUE(resolveWeight(split("m", "bf16", {2, 64}, 0, rank), store,
                              rows));
    EXPECT_EQ(rows.bytes, 2u * 64 * 2);
    EXPECT_EQ(std::memcmp(rows.ref.bf16, m.data() + rank * 2 * 64, rows.bytes),
              0);
    // bf16 by inputs (a row-parallel projection): columns 32r .. 32r+31.
    ResolvedWeight cols;
    ASSERT_TRUE(resolveWeight(split("m", "bf16", {4, 32}, 1, rank), store,
                              cols));
    for (int64_t row = 0; row < 4; ++row)
      for (int64_t c = 0; c < 32; ++c)
        ASSERT_EQ(cols.ref.bf16[row * 32 + c], m[row * 64 + rank * 32 + c])
            << row << ", " << c;
    // MXFP4 by inputs: each row's 16 packed bytes and 1 scale of the part.
    ResolvedWeight mx;
    ASSERT_TRUE(resolveWeight(split("x", "mxfp4", {4, 32}, 1, rank), store,
                              mx));
    ASSERT_EQ(mx.ref.format, kWeightMxfp4);
    for (int64_t row = 0; row < 4; ++row) {
      for (int64_t b = 0; b < 16; ++b)
        ASSERT_EQ(mx.ref.packed[row * 16 + b], packed[row * 32 + rank * 16 + b]);
      ASSERT_EQ(mx.ref.scale[row], scale[row * 2 + rank]);
    }
    // Stacked experts, split inside each expert (axis 1 of [E, rows, in]).
    ResolvedWeight st;
    ASSERT_TRUE(resolveWeight(split("s.{e}", "bf16", {2, 2, 8}, 1, rank),
                              store, st));
    ASSERT_EQ(st.table.size(), 2u);
    for (int e = 0; e < 2; ++e)
      EXPECT_EQ(std::memcmp(st.table[e].bf16, experts[e].data() + rank * 16,
                            16 * sizeof(uint16_t)),
                0);
    // A padded f32 vector (K3's A_log): its first 2 x 2 values are split.
    ResolvedWeight a;
    ASSERT_TRUE(resolveWeight(split("a", "f32", {2}, 0, rank), store, a));
    const float *v = reinterpret_cast<const float *>(a.data);
    EXPECT_EQ(v[0], aLog[rank * 2]);
    EXPECT_EQ(v[1], aLog[rank * 2 + 1]);
  }
}

TEST_F(SplitWeights, APartThatIsNotTheCheckpointsIsRefusedByName) {
  ResolvedWeight r;
  Status s = resolveWeight(split("m", "bf16", {4, 48}, 1, 0), store, r);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "weight 'm': the plan splits [4, 96] over 2 ranks, "
                         "the checkpoint has BF16 [4, 64]");
  s = resolveWeight(split("x", "mxfp4", {4, 64}, 1, 1), store, r);
  ASSERT_FALSE(s);
  EXPECT_TRUE(test::contains(s.message(), "weight 'x.weight_packed'"))
      << s.message();
}

} // namespace
} // namespace k3
