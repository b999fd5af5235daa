//===- TensorSlice_test.cpp - One rank's part of a checkpoint tensor ------===//
//
// Every rank's part, put back together in rank order, is the whole tensor;
// a part along the first dimension is a view into the original bytes (no
// copy), a part along a later one a gathered copy; an MXFP4 matrix split by
// its inputs dequantises to the whole's columns, each rank whole 32-input
// blocks; bad splits are refused naming the tensor.
//
//===----------------------------------------------------------------------===//
#include "runtime/io/TensorSlice.h"

#include "kernels/common/MXFP4.h"

#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace k3;

namespace {

/// A tensor of `shape` whose element i (uint16) is i * 7 + 3.
struct Made {
  std::vector<uint16_t> values;
  TensorView view;
  explicit Made(std::vector<int64_t> shape, const std::string &name = "w") {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    values.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      values[i] = static_cast<uint16_t>(i * 7 + 3);
    view.name = name;
    view.dtype = DType::BF16;
    view.shape = std::move(shape);
    view.data = reinterpret_cast<const uint8_t *>(values.data());
    view.nbytes = values.size() * 2;
  }
  uint16_t at(const std::vector<int64_t> &index) const {
    int64_t flat = 0;
    for (size_t d = 0; d < index.size(); ++d)
      flat = flat * view.shape[d] + index[d];
    return values[static_cast<size_t>(flat)];
  }
};

uint16_t elem(const TensorView &v, int64_t flat) {
  uint16_t x;
  std::memcpy(&x, v.data + flat * 2, 2);
  return x;
}

} // namespace

TEST(TensorSlice, RowsAreViewsColumnsAreCopies) {
  const Made m({6, 8});
  for (int64_t ranks : {1, 2, 3, 6}) {
    for (int64_t r = 0; r < ranks; ++r) {
      Expected<TensorSlice> s = sliceTensor(m.view, {0, r, ranks});
      ASSERT_TRUE(s) << s.message();
      EXPECT_FALSE(s->copied());
      EXPECT_EQ(s->view.shape, (std::vector<int64_t>{6 / ranks, 8}));
      EXPECT_EQ(s->view.data, m.view.data + r * (6 / ranks) * 8 * 2);
      EXPECT_EQ(s->view.nbytes, size_t(6 / ranks * 8 * 2));
    }
  }
  for (int64_t ranks : {2, 4, 8}) {
    const int64_t part = 8 / ranks;
    for (int64_t r = 0; r < ranks; ++r) {
      Expected<TensorSlice> s = sliceTensor(m.view, {1, r, ranks});
      ASSERT_TRUE(s) << s.message();
      EXPECT_TRUE(s->copied());
      ASSERT_EQ(s->view.shape, (std::vector<int64_t>{6, part}));
      for (int64_t i = 0; i < 6; ++i)
        for (int64_t j = 0; j < part; ++j)
          EXPECT_EQ(elem(s->view, i * part + j), m.at({i, r * part + j}))
              << ranks << " ranks, part " << r << ", [" << i << ", " << j
              << "]";
    }
  }
  // A split of one rank is the whole tensor, a view.
  Expected<TensorSlice> whole = sliceTensor(m.view, {1, 0, 1});
  ASSERT_TRUE(whole);
  EXPECT_EQ(std::memcmp(whole->view.data, m.view.data, m.view.nbytes), 0);
}

TEST(TensorSlice, ThreeDimensions) {
  // A conv filter [C, 1, W]: channels (dimension 0) are contiguous.
  const Made m({4, 1, 6}, "conv");
  Expected<TensorSlice> c = sliceTensor(m.view, {0, 1, 2});
  ASSERT_TRUE(c) << c.message();
  EXPECT_FALSE(c->copied());
  EXPECT_EQ(c->view.shape, (std::vector<int64_t>{2, 1, 6}));
  EXPECT_EQ(elem(c->view, 0), m.at({2, 0, 0}));
  // Along the last dimension: a copy of every (channel, 1) run's part.
  Expected<TensorSlice> w = sliceTensor(m.view, {2, 2, 3});
  ASSERT_TRUE(w) << w.message();
  EXPECT_TRUE(w->copied());
  ASSERT_EQ(w->view.shape, (std::vector<int64_t>{4, 1, 2}));
  for (int64_t ch = 0; ch < 4; ++ch)
    for (int64_t k = 0; k < 2; ++k)
      EXPECT_EQ(elem(w->view, ch * 2 + k), m.at({ch, 0, 4 + k}));
}

TEST(TensorSlice, BadSplitsNameTheTensor) {
  const Made m({6, 8}, "model.layers.0.o_proj.weight");
  EXPECT_ERROR_CONTAINS(sliceTensor(m.view, {0, 0, 4}),
                        "tensor 'model.layers.0.o_proj.weight' [6, 8], part 0 "
                        "of 4 along dimension 0: 6 is not divisible by 4");
  EXPECT_ERROR_CONTAINS(sliceTensor(m.view, {2, 0, 2}),
                        "the tensor has no dimension 2");
  EXPECT_ERROR_CONTAINS(sliceTensor(m.view, {0, 2, 2}),
                        "the part must be in [0, ranks)");
  EXPECT_ERROR_CONTAINS(sliceTensor(m.view, {0, 0, 0}),
                        "the part must be in [0, ranks)");
  EXPECT_ERROR_CONTAINS(sliceTensor(m.view, {-1, 0, 2}),
                        "the tensor has no dimension -1");
  TensorView shortBytes = m.view;
  shortBytes.nbytes -= 2;
  EXPECT_ERROR_CONTAINS(sliceTensor(shortBytes, {0, 0, 2}),
                        "94 bytes for a shape of 96");
}

TEST(TensorSlice, Mxfp4ByRowsAndByInputs) {
  constexpr int64_t rows = 4, in = 128;
  std::vector<float> w(rows * in);
  for (int64_t i = 0; i < rows * in; ++i)
    w[i] = static_cast<float>((i * 37) % 101 - 50) / 8.0f;
  std::vector<uint8_t> packed, scale;
  quantizeMxfp4(w.data(), rows, in, packed, scale);
  TensorView p{"e.weight_packed",
               DType::U8,
               {rows, in / 2},
               packed.data(),
               packed.size()};
  TensorView s{
      "e.weight_scale", DType::U8, {rows, in / 32}, scale.data(), scale.size()};
  std::vector<float> whole(in), part(in);
  for (int64_t ranks : {2, 4}) {
    const int64_t each = in / ranks;
    for (int64_t r = 0; r < ranks; ++r) {
      auto sl = sliceMxfp4(p, s, {1, r, ranks});
      ASSERT_TRUE(sl) << sl.message();
      EXPECT_EQ(sl->first.view.shape, (std::vector<int64_t>{rows, each / 2}));
      EXPECT_EQ(sl->second.view.shape, (std::vector<int64_t>{rows, each / 32}));
      for (int64_t row = 0; row < rows; ++row) {
        dequantMxfp4Row(packed.data(), scale.data(), in, row, whole.data());
        dequantMxfp4Row(sl->first.view.data, sl->second.view.data, each, row,
                        part.data());
        for (int64_t j = 0; j < each; ++j)
          EXPECT_EQ(part[j], whole[r * each + j])
              << ranks << " ranks, part " << r << ", row " << row;
      }
    }
  }
  auto byRows = sliceMxfp4(p, s, {0, 1, 2});
  ASSERT_TRUE(byRows) << byRows.message();
  EXPECT_FALSE(byRows->first.copied());
  EXPECT_EQ(byRows->first.view.data, packed.data() + 2 * (in / 2));
  EXPECT_EQ(byRows->second.view.data, scale.data() + 2 * (in / 32));
  EXPECT_ERROR_CONTAINS(sliceMxfp4(p, s, {1, 0, 8}),
                        "128 inputs over 8 ranks do not give every rank whole "
                        "32-input blocks (a multiple of 256 inputs)");
  EXPECT_ERROR_CONTAINS(sliceMxfp4(s, p, {0, 0, 2}), "are not an MXFP4 matrix");
}
