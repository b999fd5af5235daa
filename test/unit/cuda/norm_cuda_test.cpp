//===- norm_cuda_test.cpp - k3_rms_norm against rmsNormCpu ----------------===//
//
// K3's norm widths (D = 7168, latent Dm = 3584, q_a 1536, kv_a L = 512) and
// odd ones, eps 1e-5 and 1e-6, in place (out == x), misaligned, with a grid
// of several blocks and other block sizes. Tolerance: the fp32 factor may
// differ from the CPU's in its last bit (sum order), so an element may be
// the neighbouring bf16 of the CPU's: at most one ulp, for at most 1% of the
// elements (in practice almost none).
//
//===----------------------------------------------------------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

#include "kernels/norm/NormCpu.h"

#include <cstdio>

namespace {

using namespace k3test;

constexpr double kMaxDiffering = 0.01;

struct NormCase {
  int64_t n;
  float eps = 1e-5f;
  int64_t grid = 1; ///< the compiler's grid
  int64_t block = 256;
  bool inPlace = false;
  int64_t offset = 0; ///< misalign x, w and out by this many elements
};

void runNorm(const NormCase &c, uint64_t seed) {
  char what[160];
  std::snprintf(what, sizeof what,
                "rms_norm n=%lld eps=%g grid=%lld block=%lld%s%s",
                (long long)c.n, c.eps, (long long)c.grid, (long long)c.block,
                c.inPlace ? " in-place" : "", c.offset ? " misaligned" : "");
  SCOPED_TRACE(what);
  Rand r(seed);
  // The residual stream grows over the layers: a magnitude well off 1.
  std::vector<uint16_t> x = r.bf16(c.offset + c.n, 6.0f);
  std::vector<uint16_t> w(c.offset + c.n);
  for (auto &v : w)
    v = k3::floatToBf16(1.0f + 0.3f * r.f32(1)[0]);

  k3::RmsNormParams p;
  std::vector<uint16_t> want =
      c.inPlace ? x : std::vector<uint16_t>(c.offset + c.n, 0xFFFF);
  p.x = (c.inPlace ? want.data() : x.data()) + c.offset;
  p.w = w.data() + c.offset;
  p.out = want.data() + c.offset;
  p.n = c.n;
  p.eps = c.eps;
  k3::rmsNormCpu(p);

  Dev dX = Dev::of(x), dW = Dev::of(w),
      dOut = Dev::poisoned<uint16_t>(c.offset + c.n);
  p.x = dX.get<uint16_t>() + c.offset;
  p.w = dW.get<uint16_t>() + c.offset;
  p.out = c.inPlace ? dX.get<uint16_t>() + c.offset
                    : dOut.get<uint16_t>() + c.offset;
  ASSERT_TRUE(launch("rms_norm", p, c.grid, c.block).isOk());
  std::vector<uint16_t> got =
      (c.inPlace ? dX : dOut).download<uint16_t>(c.offset + c.n);
  want.erase(want.begin(), want.begin() + c.offset);
  got.erase(got.begin(), got.begin() + c.offset);

  const double frac = fractionDiffering(want, got);
  std::printf("[   stats  ] %s: differing %.3f%%\n", what, 100.0 * frac);
  EXPECT_LE(maxUlpDistance(want, got), 1);
  EXPECT_LE(frac, kMaxDiffering);
  EXPECT_LE(relErr(widen(want), widen(got)), 1e-2);
  // Not the input, not the poison: the normalised vector has rms ~ 1.
  EXPECT_NE(got, std::vector<uint16_t>(x.begin() + c.offset, x.end()));
}

TEST(RmsNormCuda, K3Widths) {
  K3_REQUIRE_GPU();
  runNorm({7168}, 1);
  runNorm({3584}, 2);
  runNorm({1536, 1e-6f}, 3);
  runNorm({512, 1e-6f}, 4);
  runNorm({12288}, 5); // wider than the register path: two passes
}

TEST(RmsNormCuda, OddSizes) {
  K3_REQUIRE_GPU();
  runNorm({1}, 10);
  runNorm({7}, 11);
  runNorm({37}, 12);
  runNorm({1000}, 13);
  runNorm({8199}, 14);
  runNorm({8192}, 15);
}

/// out == x, as the plan may give it.
TEST(RmsNormCuda, InPlace) {
  K3_REQUIRE_GPU();
  NormCase c{7168};
  c.inPlace = true;
  runNorm(c, 20);
  c = {12288};
  c.inPlace = true;
  runNorm(c, 21);
  c = {37};
  c.inPlace = true;
  runNorm(c, 22);
}

TEST(RmsNormCuda, Misaligned) {
  K3_REQUIRE_GPU();
  NormCase c{7168};
  c.offset = 1;
  runNorm(c, 30);
  c.offset = 5;
  c.inPlace = true;
  runNorm(c, 31);
}

/// Any grid and block: extra blocks leave; 64 or 1024 threads change the
/// register path's capacity and the reduction's shape.
TEST(RmsNormCuda, AnyGrid) {
  K3_REQUIRE_GPU();
  NormCase c{7168};
  c.grid = 28;
  runNorm(c, 40);
  c.inPlace = true;
  runNorm(c, 41);
  c = {7168};
  c.block = 64;
  runNorm(c, 42);
  c.block = 1024;
  runNorm(c, 43);
  c = {3584};
  c.block = 32;
  c.grid = 5;
  runNorm(c, 44);
}

} // namespace
