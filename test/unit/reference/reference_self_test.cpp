//===- reference_self_test.cpp - The float64 reference against K3.md ------===//
//
// The reference is only worth something if it is right, so its ops are
// checked here against hand-computed values and against the OTHER exact form
// K3.md gives (KDA delta-rule form, MLA absorbed form), written out again in
// this file: two independent derivations that agree in float64 are unlikely
// to share a mistake.
//
//===----------------------------------------------------------------------===//
#include "test/reference/Reference.h"
#include "test/reference/TestData.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace k3;
using namespace k3::ref;

namespace {

Vec randomVec(Rng &rng, int64_t n, double scale) {
  return fromBf16(randomBf16(rng, n, scale));
}

TEST(RefSelf, Bf16RoundingIsDirectFromDouble) {
  // 1 + 2^-8 is the bf16 midpoint between 1 and 1 + 2^-7; a hair above it
  // must round up even though the float nearest to it IS the midpoint.
  double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(bf16Round(x), 1.0 + std::ldexp(1.0, -7));
  EXPECT_EQ(bf16Round(-x), -(1.0 + std::ldexp(1.0, -7)));
  double y = 1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -30);
  EXPECT_EQ(bf16Round(y), 1.0);
  // Exact midpoint: ties to even (1.0 has an even mantissa).
  EXPECT_EQ(bf16Round(1.0 + std::ldexp(1.0, -8)), 1.0);
  EXPECT_EQ(bf16Round(1.0 + 3 * std::ldexp(1.0, -8)),
            1.0 + std::ldexp(1.0, -6));
  EXPECT_TRUE(std::isnan(bf16Round(NAN)));
  EXPECT_EQ(bf16UlpDistance(toBf16Bits(1.0), toBf16Bits(1.0078125)), 1);
  EXPECT_EQ(bf16UlpDistance(0x0000, 0x8000), 0);
  EXPECT_EQ(bf16UlpDistance(0x0001, 0x8001), 2);
}

TEST(RefSelf, L2NormEpsilonInsideTheRoot) {
  Vec y = l2norm({3.0, 4.0});
  EXPECT_DOUBLE_EQ(y[0], 3.0 / std::sqrt(25.0 + 1e-6));
  // For a tiny vector the difference from x / max(|x|, eps) is large.
  Vec t = l2norm({1e-4});
  EXPECT_NEAR(t[0], 1e-4 / std::sqrt(1e-8 + 1e-6), 1e-15);
  EXPECT_LT(t[0], 0.2);
}

TEST(RefSelf, RmsNormRoundsTwice) {
  Vec x = {1.0, 2.0, 3.0, 4.0};
  Vec w = {1.0, 0.5, 2.0, -1.0};
  Vec y = rmsNorm(x, w, 1e-5);
  double inv = 1.0 / std::sqrt(30.0 / 4.0 + 1e-5);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(y[i], bf16Round(bf16Round(x[i] * inv) * w[i]));
}

TEST(RefSelf, ActivationsFollowSection6) {
  EXPECT_NEAR(softcap(100.0, 4.0), 4.0, 1e-9);
  EXPECT_NEAR(softcap(0.01, 25.0), 0.01, 1e-8);
  EXPECT_EQ(situ(0.0, 3.0, 4, true, 25), 0.0);
  double g = 1.3, u = -2.1;
  EXPECT_DOUBLE_EQ(situ(g, u, 4, true, 25), 4 * std::tanh(g / 4) *
                                                (1 / (1 + std::exp(-g))) * 25 *
                                                std::tanh(u / 25));
  EXPECT_DOUBLE_EQ(situ(g, u, 4, false, 0),
                   4 * std::tanh(g / 4) / (1 + std::exp(-g)) * u);
  EXPECT_LE(std::fabs(situ(1e6, 1e6, 4, true, 25)), 100.0);
  EXPECT_DOUBLE_EQ(swiglu(g, u), g / (1 + std::exp(-g)) * u);
  EXPECT_NEAR(softplus(50.0), 50.0, 1e-12);
  EXPECT_NEAR(softplus(0.0), std::log(2.0), 1e-15);
}

TEST(RefSelf, ShortConvIsCausalAndShifts) {
  // An impulse at t = 0 on channel 0 walks through the window backwards:
  // out_t = SiLU(w[W-1-t] * 1).
  const int64_t width = 4;
  Vec w = {0.5, -1.0, 2.0, 0.25, 1, 1, 1, 1};
  Vec hist(2 * (width - 1), 0.0);
  for (int t = 0; t < 6; ++t) {
    Vec u = {t == 0 ? 1.0 : 0.0, 0.0};
    Vec out = shortConvSilu(u, w, width, hist);
    double want = t < width ? bf16Round(silu(w[width - 1 - t])) : 0.0;
    EXPECT_EQ(out[0], want) << "t = " << t;
    EXPECT_EQ(out[1], 0.0);
  }
}

TEST(RefSelf, KdaMatrixFormEqualsDeltaRuleForm) {
  // K3.md §2.7 step by step: decay the key axis, delta update, read out.
  Rng rng(5);
  const int64_t d = 16;
  Vec s0 = randomVec(rng, d * d, 1.0);
  for (int step = 0; step < 3; ++step) {
    Vec q = l2norm(randomVec(rng, d, 1.0));
    Vec k = l2norm(randomVec(rng, d, 1.0));
    Vec v = randomVec(rng, d, 1.0);
    Vec g(d);
    for (auto &x : g)
      x = rng.uniform(-5.0, -0.01);
    double beta = rng.uniform(0.05, 0.95);

    Vec delta = s0;
    for (int64_t i = 0; i < d; ++i)
      for (int64_t j = 0; j < d; ++j)
        delta[i * d + j] *= std::exp(g[i]);
    Vec stk(d, 0.0); // S^T k
    for (int64_t j = 0; j < d; ++j)
      for (int64_t i = 0; i < d; ++i)
        stk[j] += delta[i * d + j] * k[i];
    for (int64_t i = 0; i < d; ++i)
      for (int64_t j = 0; j < d; ++j)
        delta[i * d + j] += beta * k[i] * (v[j] - stk[j]);
    Vec oWant(d, 0.0);
    for (int64_t j = 0; j < d; ++j)
      for (int64_t i = 0; i < d; ++i)
        oWant[j] += delta[i * d + j] * q[i];

    Vec o = kdaHeadStep(s0, d, q, k, v, g, beta);
    for (int64_t i = 0; i < d * d; ++i)
      ASSERT_NEAR(s0[i], delta[i], 1e-12) << "state " << i;
    for (int64_t j = 0; j < d; ++j)
      ASSERT_NEAR(o[j], oWant[j], 1e-12) << "o " << j;
  }
}

TEST(RefSelf, KdaGates) {
  Vec f = {0.3, -1.2}, dt = {0.1, 0.4}, alog = {std::log(2.0)};
  Vec lb = kdaGateLowerBound(f, dt, alog, 1, 2, -5.0);
  EXPECT_DOUBLE_EQ(lb[0], -5.0 / (1 + std::exp(-2.0 * 0.4)));
  EXPECT_DOUBLE_EQ(lb[1], -5.0 / (1 + std::exp(-2.0 * -0.8)));
  Vec sp = kdaGateSoftplus(f, dt, alog, 1, 2);
  EXPECT_DOUBLE_EQ(sp[0], -2.0 * std::log1p(std::exp(0.4)));
  EXPECT_DOUBLE_EQ(sp[1], -2.0 * std::log1p(std::exp(-0.8)));
}

TEST(RefSelf, MlaNaiveEqualsAbsorbed) {
  // K3.md §3 absorbed form, written out here, against mlaAttendNaive.
  Rng rng(9);
  MlaDims dims{3, 8, 4, 32, 8};
  const int64_t n = dims.heads, p = dims.nope, r = dims.rope, l = dims.latent,
                vd = dims.value, t = 7;
  std::vector<uint16_t> kvb = randomBf16(rng, n * (p + vd) * l, 0.3);
  WeightRef w = WeightRef::fromBf16(kvb.data(), n * (p + vd), l);
  Vec q = randomVec(rng, n * (p + r), 1.0);
  std::vector<Vec> cache;
  for (int64_t j = 0; j < t; ++j)
    cache.push_back(randomVec(rng, l + r, 1.0));
  Vec o = mlaAttendNaive(dims, q, cache, w);
  for (int64_t h = 0; h < n; ++h) {
    Vec qhat(l, 0.0); // W_UK^T q_nope
    for (int64_t i = 0; i < p; ++i) {
      Vec row = w.row(h * (p + vd) + i);
      for (int64_t c = 0; c < l; ++c)
        qhat[c] += row[c] * q[h * (p + r) + i];
    }
    Vec s(t);
    double mx = -1e300;
    for (int64_t j = 0; j < t; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < l; ++c)
        acc += qhat[c] * cache[j][c];
      for (int64_t i = 0; i < r; ++i)
        acc += q[h * (p + r) + p + i] * cache[j][l + i];
      s[j] = acc / std::sqrt(double(p + r));
      mx = std::max(mx, s[j]);
    }
    double den = 0;
    for (auto &x : s)
      den += (x = std::exp(x - mx));
    Vec chat(l, 0.0);
    for (int64_t j = 0; j < t; ++j)
      for (int64_t c = 0; c < l; ++c)
        chat[c] += s[j] / den * cache[j][c];
    for (int64_t i = 0; i < vd; ++i) {
      Vec row = w.row(h * (p + vd) + p + i);
      double acc = 0;
      for (int64_t c = 0; c < l; ++c)
        acc += row[c] * chat[c];
      // Both forms round once at the end; allow for a rounding flip only.
      EXPECT_LE(std::fabs(o[h * vd + i] - acc), std::fabs(acc) * 0x1p-8 + 1e-12)
          << "head " << h << " value " << i;
    }
  }
}

TEST(RefSelf, RouterTiesAndWeights) {
  // Identical router rows give identical scores: ties go to lower indices.
  const int64_t e = 6, dim = 4;
  std::vector<uint16_t> gate(e * dim, toBf16Bits(0.25));
  WeightRef w = WeightRef::fromBf16(gate.data(), e, dim);
  Vec h = {1, 1, 1, 1};
  Routing r = route(w, Vec(e, 0.0), h, 3, true, 2.5);
  EXPECT_EQ(r.experts, (std::vector<int64_t>{0, 1, 2}));
  for (double x : r.weights)
    EXPECT_NEAR(x, 2.5 / 3.0, 1e-15);
  // The bias decides the ranking but not the weights.
  Vec bias = {0, 0, 0, 0, 0.5, 0.5};
  r = route(w, bias, h, 2, false, 1.0);
  EXPECT_EQ(r.experts, (std::vector<int64_t>{4, 5}));
  EXPECT_DOUBLE_EQ(r.weights[0], sigmoid(1.0));
}

TEST(RefSelf, AttnResMixesRawSources) {
  // Zero projection: all logits 0, result is the plain mean of the sources.
  Vec a = {1, 2, 3}, b = {3, 2, -1};
  Vec zero(3, 0.0), one(3, 1.0);
  Vec alpha;
  Vec m = attnRes({a, b}, one, zero, 1e-5, &alpha);
  EXPECT_EQ(m, (Vec{2, 2, 1}));
  EXPECT_DOUBLE_EQ(alpha[0], 0.5);
  // The logit uses the NORMALISED source, the mix the raw one: scaling a
  // source does not change its weight.
  Vec proj = {0.3, -0.2, 0.1};
  Vec a2 = {10, 20, 30};
  Vec al1, al2;
  attnRes({a, b}, one, proj, 0.0, &al1);
  attnRes({a2, b}, one, proj, 0.0, &al2);
  EXPECT_NEAR(al1[0], al2[0], 1e-12);
}

} // namespace
