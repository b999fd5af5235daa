//===- Npy_test.cpp - .npy logits dumps
//------------------------------------===//
#include "runtime/io/Npy.h"

#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cstring>

namespace k3 {
namespace {

TEST(NpyTest, HeaderBytesAndData) {
  const float data[6] = {1.0f, -2.5f, 3.0f, 0.0f, 1e-3f, 65504.0f};
  const std::string b = encodeNpyF32(data, 2, 3);
  ASSERT_GE(b.size(), 10u);
  EXPECT_EQ(b.substr(0, 6), std::string("\x93NUMPY", 6));
  EXPECT_EQ(b[6], 1);
  EXPECT_EQ(b[7], 0);
  const size_t len = static_cast<uint8_t>(b[8]) |
                     (static_cast<size_t>(static_cast<uint8_t>(b[9])) << 8);
  EXPECT_EQ((10 + len) % 64, 0u) << "data must start 64-byte aligned";
  const std::string dict = b.substr(10, len);
  EXPECT_EQ(dict.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': "
                       "(2, 3), }",
                       0),
            0u)
      << dict;
  EXPECT_EQ(dict.back(), '\n');
  ASSERT_EQ(b.size(), 10 + len + sizeof(data));
  EXPECT_EQ(std::memcmp(b.data() + 10 + len, data, sizeof(data)), 0);
}

TEST(NpyTest, WriteReadBack) {
  test::TempDir dir;
  std::vector<float> v(5 * 7);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(i) * 0.25f - 3.0f;
  ASSERT_TRUE(writeNpyF32(dir.file("a.npy"), v.data(), 5, 7).isOk());
  Expected<NpyF32> r = readNpyF32(dir.file("a.npy"));
  ASSERT_TRUE(r.hasValue()) << r.message();
  EXPECT_EQ(r->rows, 5);
  EXPECT_EQ(r->cols, 7);
  EXPECT_EQ(r->values, v);

  test::writeFile(dir.file("bad.npy"), "not numpy");
  EXPECT_ERROR_CONTAINS(readNpyF32(dir.file("bad.npy")), "not a .npy file");
  std::string cut = test::readFile(dir.file("a.npy"));
  test::writeFile(dir.file("cut.npy"), cut.substr(0, cut.size() - 4));
  EXPECT_ERROR_CONTAINS(readNpyF32(dir.file("cut.npy")), "data has");
}

} // namespace
} // namespace k3
