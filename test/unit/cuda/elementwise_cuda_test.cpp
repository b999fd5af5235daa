//===- elementwise_cuda_test.cpp - k3_add / k3_mul_sigmoid / k3_gated_act -===//
//
// Each op against its CPU twin at K3's widths (D = 7168, KDA/MLA 96 × 128 =
// 12288, expert I = 3072, shared 6144, dense 33792) and odd ones, in place
// (out == either input), misaligned, with a one-block grid and other block
// sizes. `add` is one IEEE addition and rounding: bit-exact. The activations
// call the device expf / tanhf, which may differ from the host's in the last
// fp32 bit: at most one bf16 ulp, for at most 0.1% of the elements.
//
//===----------------------------------------------------------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

#include "kernels/elementwise/ElementwiseCpu.h"

#include <cstdio>
#include <functional>

namespace {

using namespace k3test;

constexpr double kMaxDiffering = 1e-3;

/// Where the output goes.
enum class Out { Fresh, AliasFirst, AliasSecond };

struct Case {
  int64_t n;
  Out out = Out::Fresh;
  int64_t grid = 0; ///< 0: the compiler's ceil(n / 256)
  int64_t block = 256;
  int64_t offset = 0; ///< misalign all three pointers by this many elements
};

/// Runs `kernel` on inputs a, b. `bind(params, a, b, out)` fills the
/// params' pointers (host or device), `cpu(params)` is the CPU twin.
template <typename P>
void runBinary(
    const std::string &kernel, P p, const Case &c, float stdA, float stdB,
    uint64_t seed, bool exact,
    const std::function<void(P &, uint16_t *, uint16_t *, uint16_t *)> &bind,
    const std::function<void(const P &)> &cpu) {
  char what[200];
  std::snprintf(what, sizeof what, "%s n=%lld grid=%lld block=%lld%s%s",
                kernel.c_str(), (long long)c.n, (long long)c.grid,
                (long long)c.block,
                c.out == Out::AliasFirst    ? " out==first"
                : c.out == Out::AliasSecond ? " out==second"
                                            : "",
                c.offset ? " misaligned" : "");
  SCOPED_TRACE(what);
  Rand r(seed);
  const int64_t len = c.offset + c.n;
  std::vector<uint16_t> a = r.bf16(len, stdA), b = r.bf16(len, stdB);

  // CPU, in place where asked.
  std::vector<uint16_t> ha = a, hb = b, hout(len, 0xFFFF);
  uint16_t *out = c.out == Out::AliasFirst    ? ha.data()
                  : c.out == Out::AliasSecond ? hb.data()
                                              : hout.data();
  bind(p, ha.data() + c.offset, hb.data() + c.offset, out + c.offset);
  p.n = c.n;
  cpu(p);
  std::vector<uint16_t> want(out + c.offset, out + len);

  Dev dA = Dev::of(a), dB = Dev::of(b), dOut = Dev::poisoned<uint16_t>(len);
  const Dev &dRes = c.out == Out::AliasFirst    ? dA
                    : c.out == Out::AliasSecond ? dB
                                                : dOut;
  bind(p, dA.get<uint16_t>() + c.offset, dB.get<uint16_t>() + c.offset,
       dRes.get<uint16_t>() + c.offset);
  const int64_t grid = c.grid ? c.grid : (c.n + 255) / 256;
  ASSERT_TRUE(launch(kernel, p, grid, c.block).isOk());
  std::vector<uint16_t> got = dRes.download<uint16_t>(len);
  got.erase(got.begin(), got.begin() + c.offset);

  const double frac = fractionDiffering(want, got);
  std::printf("[   stats  ] %s: differing %.4f%%\n", what, 100.0 * frac);
  if (exact) {
    EXPECT_EQ(got, want);
  } else {
    EXPECT_LE(maxUlpDistance(want, got), 1);
    EXPECT_LE(frac, kMaxDiffering);
    EXPECT_LE(relErr(widen(want), widen(got)), 1e-2);
  }
  // The result is neither input (long enough vectors cannot match by luck).
  if (c.n >= 32) {
    EXPECT_NE(got, std::vector<uint16_t>(a.begin() + c.offset, a.end()));
    EXPECT_NE(got, std::vector<uint16_t>(b.begin() + c.offset, b.end()));
  }
}

const std::vector<Case> &cases() {
  static const std::vector<Case> all = [] {
    std::vector<Case> v;
    for (int64_t n : {7168, 12288, 3072, 6144, 33792, 1, 7, 37, 1001})
      v.push_back({n});
    v.push_back({7168, Out::AliasFirst});
    v.push_back({7168, Out::AliasSecond});
    v.push_back({37, Out::AliasFirst});
    v.push_back({7168, Out::Fresh, 1});        // one block for everything
    v.push_back({33792, Out::AliasSecond, 1}); // one block, in place
    v.push_back({12288, Out::Fresh, 3, 64});
    v.push_back({7168, Out::Fresh, 2, 1024});
    v.push_back({7168, Out::Fresh, 0, 256, 1}); // misaligned
    v.push_back({1001, Out::AliasFirst, 1, 96, 3});
    return v;
  }();
  return all;
}

TEST(AddCuda, MatchesCpuBitForBit) {
  K3_REQUIRE_GPU();
  uint64_t seed = 1;
  for (const Case &c : cases())
    runBinary<k3::AddParams>(
        "add", {}, c, 4.0f, 1.0f, seed++, /*exact=*/true,
        [](k3::AddParams &p, uint16_t *a, uint16_t *b, uint16_t *out) {
          p.a = a;
          p.b = b;
          p.out = out;
        },
        [](const k3::AddParams &p) { k3::addCpu(p); });
}

TEST(MulSigmoidCuda, MatchesCpu) {
  K3_REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Case &c : cases())
    runBinary<k3::MulSigmoidParams>(
        "mul_sigmoid", {}, c, 1.0f, 3.0f, seed++, /*exact=*/false,
        [](k3::MulSigmoidParams &p, uint16_t *x, uint16_t *g, uint16_t *out) {
          p.x = x;
          p.gate = g;
          p.out = out;
        },
        [](const k3::MulSigmoidParams &p) { k3::mulSigmoidCpu(p); });
}

/// SiTU with and without the linear beta (K3) and SwiGLU (Kimi-Linear); g
/// and u wide enough (std 4 and 12) that both softcaps bend.
TEST(GatedActCuda, MatchesCpu) {
  K3_REQUIRE_GPU();
  uint64_t seed = 200;
  for (int variant = 0; variant < 3; ++variant) {
    k3::GatedActParams base;
    base.activation = variant == 2 ? k3::kActSwiGLU : k3::kActSiTU;
    base.beta1 = 4.0f;
    base.hasBeta2 = variant == 0 ? 1 : 0;
    base.beta2 = 25.0f;
    for (const Case &c : cases())
      runBinary<k3::GatedActParams>(
          "gated_act", base, c, 4.0f, 12.0f, seed++, /*exact=*/false,
          [](k3::GatedActParams &p, uint16_t *g, uint16_t *u, uint16_t *out) {
            p.g = g;
            p.u = u;
            p.out = out;
          },
          [](const k3::GatedActParams &p) { k3::gatedActCpu(p); });
  }
}

/// The multi-row form (k3_gated_act_rows): M rows in one launch, each
/// row's own g, u and output (one in place) and the same activation, params
/// from a device array: every row the bytes its single-row launch writes,
/// outputs poisoned first, at Kimi-Linear's dense width and an odd one.
TEST(GatedActCuda, RowsAsOneLaunchPerRow) {
  K3_REQUIRE_GPU();
  for (int variant = 0; variant < 2; ++variant) {
    for (int64_t n : {int64_t(9216), int64_t(1001)}) {
      const int M = 5;
      Rand r(static_cast<uint64_t>(n + variant));
      std::vector<std::vector<uint16_t>> gs, us;
      std::vector<Dev> dg, du, single, rows, rowsG;
      std::vector<k3::GatedActParams> params;
      for (int i = 0; i < M; ++i) {
        gs.push_back(r.bf16(n, 4.0f));
        us.push_back(r.bf16(n, 12.0f));
        dg.push_back(Dev::of(gs.back()));
        du.push_back(Dev::of(us.back()));
        single.push_back(Dev::poisoned<uint16_t>(n));
        rows.push_back(Dev::poisoned<uint16_t>(n));
        rowsG.push_back(Dev::of(gs.back())); // row 2 writes over its g
      }
      for (int i = 0; i < M; ++i) {
        k3::GatedActParams p;
        p.activation = variant ? k3::kActSwiGLU : k3::kActSiTU;
        p.g = dg[i].get<uint16_t>();
        p.u = du[i].get<uint16_t>();
        p.n = n;
        p.out = single[i].get<uint16_t>();
        ASSERT_TRUE(launch("gated_act", p, (n + 255) / 256).isOk());
        if (i == 2) {
          p.g = rowsG[i].get<uint16_t>();
          p.out = rowsG[i].get<uint16_t>();
        } else {
          p.out = rows[i].get<uint16_t>();
        }
        params.push_back(p);
      }
      Dev array = Dev::of(params);
      k3::GatedActRowsParams rp;
      rp.rows = array.get<k3::GatedActParams>();
      rp.count = M;
      ASSERT_TRUE(
          launch("gated_act_rows", rp, (n + 255) / 256, 256, 0, 1, M).isOk());
      for (int i = 0; i < M; ++i) {
        const auto want = single[i].download<uint16_t>(n);
        EXPECT_NE(want, gs[i]) << "row " << i << " wrote nothing";
        EXPECT_EQ((i == 2 ? rowsG[i] : rows[i]).download<uint16_t>(n), want)
            << "rows form n " << n << ", row " << i;
      }
    }
  }
}

} // namespace
