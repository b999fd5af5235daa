//===- synthetic_cuda_test.cpp - k3_synthetic_normal_bf16 against the CPU ===//
//
// The device draw of synthetic weights gives the bits of its CPU
// implementation (which runtime_synthetic_test checks against the host
// maker's tensors): an expert matrix of Kimi-Linear's production shape,
// pieces that start at an odd value, an output that is not 16-byte aligned,
// fewer values than a thread's eight, and a grid smaller than the work.
// Outputs are poisoned first. (decode_cuda_test decodes a plan over weights
// drawn this way against the same model's files.)
//
//===----------------------------------------------------------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

#include "kernels/synthetic/SyntheticCpu.h"

namespace {

using namespace k3test;

TEST(SyntheticCuda, NormalAsTheCpu) {
  K3_REQUIRE_GPU();
  Rand r(41);
  struct Case {
    int64_t count, first, outOffset, grid;
  };
  // Kimi-Linear's w1 [1024, 2304] whole; a piece from an odd value into an
  // output 2 bytes past an aligned start; a tail shorter than eight; a
  // grid of 3 blocks over 1.1 M values.
  for (const Case &c : {Case{1024 * 2304, 0, 0, 1152}, Case{12345, 777, 1, 7},
                        Case{5, 3, 0, 1}, Case{1100003, 0, 0, 3}}) {
    k3::SyntheticNormalParams p;
    p.count = c.count;
    p.first = c.first;
    p.stream = r.gen()();
    p.scale = 0.06f / std::sqrt(1024.0f) * (1.0f + 0.1f * (c.grid % 5));
    std::vector<uint16_t> want(static_cast<size_t>(c.count));
    p.out = want.data();
    k3::syntheticNormalBf16Cpu(p);

    const size_t n = static_cast<size_t>(c.count + c.outOffset + 8);
    Dev out = Dev::poisoned<uint16_t>(n);
    p.out = out.get<uint16_t>() + c.outOffset;
    ASSERT_TRUE(launch(k3::kSyntheticNormalKernel, p, c.grid,
                       k3::kSyntheticThreads)
                    .isOk());
    const std::vector<uint16_t> all = out.download<uint16_t>(n);
    const std::vector<uint16_t> got(all.begin() + c.outOffset,
                                    all.begin() + c.outOffset + c.count);
    EXPECT_EQ(got, want) << c.count << " values from " << c.first;
    // Nothing written outside [out, out + count).
    for (int64_t i = 0; i < c.outOffset; ++i)
      EXPECT_EQ(all[static_cast<size_t>(i)], 0xFFFF);
    for (size_t i = static_cast<size_t>(c.outOffset + c.count); i < n; ++i)
      EXPECT_EQ(all[i], 0xFFFF) << "past the end at " << i;
    // Not trivially right: values differ and are not all the same sign.
    int64_t negative = 0;
    for (uint16_t v : want)
      negative += v >> 15;
    EXPECT_GT(negative, 0);
    EXPECT_LT(negative, c.count);
  }
}

} // namespace
