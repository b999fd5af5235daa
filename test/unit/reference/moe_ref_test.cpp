//===- moe_ref_test.cpp - MoE CPU kernels against the float64 reference ---===//
//
// router and moe_experts against the reference's route() and expert mix
// (gatedMlp per expert, then expertMix):
//  * the router at K3's size (D = 7168, E = 896, top-16, sigmoid scores,
//    e_score_correction_bias for the ranking only, renormalised, scaling 1),
//    at Kimi-Linear's (D = 2304, E = 256, top-8, scaling 2.446), without
//    renormalisation, without a bias, and with k = E (with a bias, the top-k
//    SET must differ from the unbiased one, and the kernel run without the
//    bias must match the unbiased reference); a K3 case whose bias is built
//    to pull the 300th expert to the top and push the best one out; plus the
//    forceExpert mutant (every slot routes to the forced expert with its
//    unbiased score, renormalised and scaled as usual, MoeParams.h /
//    MoeCpu.cpp);
//  * the expert mix with MXFP4 experts (quantised from random weights with
//    quantizeMxfp4) and SiTU (β1 = 4, β2 = 25) at K3's per-expert size
//    (latent Dm = 3584, moe_intermediate I = 3072), top-2 from a table of
//    32 (the float64 reference decodes ~0.4 s of MXFP4 per expert), and
//    top-16 of 32 at a cut size; with bf16 experts and SwiGLU at
//    Kimi-Linear's size (Dm = 2304, I = 1024, top-8 of 16) and odd sizes
//    (including every slot on one expert, as forceExpert routes).
//
// Inputs are drawn so that no two of the top k + 1 ranking values
// s + bias lie within 1e-4 of each other (fp32 scores are good to ~1e-6), so
// the expert ids must be identical, in rank order; the weights must agree
// within 1e-6 relative. Expert mix: the kernel rounds g, u, a and each y to
// bf16 like the reference, so a flip inside one expert can move the mix by
// a fraction of an ulp of max|y|: every element within 1 ulp plus 2^-8 of
// max|ref|, at most 2% of the elements inexact, max|diff|/max|ref| < 1e-2.
//
// Every comparison is shown able to fail: the expert mix rejects its own
// output with the largest element moved by 5% and the output computed with
// two ids swapped against their weights; the router comparison rejects
// swapped ids, a foreign id, a weight off by 1e-5 relative, weights taken
// from the biased scores and the kernel run without its bias.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/MXFP4.h"
#include "kernels/moe/MoeCpu.h"
#include "test/reference/Reference.h"
#include "test/reference/TestData.h"

#include "test/unit/reference/RefTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <utility>

using namespace k3;
using ref::Rng;
using ref::Vec;

namespace {

//===----------------------------------------------------------------------===//
// Router
//===----------------------------------------------------------------------===//

/// The smallest gap between consecutive ranking values s + bias among the
/// best k + 1 experts (k + 1 capped at E): how far the draw is from a tie
/// that fp32 noise could break either way.
double rankingMargin(const ref::Routing &r, const Vec &bias, int64_t k) {
  Vec v(r.scores.size());
  for (size_t e = 0; e < v.size(); ++e)
    v[e] = r.scores[e] + bias[e];
  std::sort(v.begin(), v.end(), std::greater<double>());
  const int64_t n = std::min<int64_t>(k + 1, static_cast<int64_t>(v.size()));
  double margin = INFINITY;
  for (int64_t i = 0; i + 1 < n; ++i)
    margin = std::min(margin, v[i] - v[i + 1]);
  return margin;
}

/// The ids as a sorted list (the top-k as a set).
std::vector<int64_t> idSet(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  return ids;
}

/// The router's output against the reference: the same ids in the same
/// order and each weight within `relTol` of the reference's, relatively.
/// `maxRel` receives the largest relative weight error.
::testing::AssertionResult routingAgrees(const std::vector<int32_t> &ids,
                                         const std::vector<float> &w,
                                         const std::vector<int64_t> &wantIds,
                                         const Vec &wantW, double relTol,
                                         double *maxRel = nullptr) {
  if (ids.size() != wantIds.size() || w.size() != wantW.size())
    return ::testing::AssertionFailure() << "wrong output size";
  double worst = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] != wantIds[k])
      return ::testing::AssertionFailure()
             << "slot " << k << ": expert " << ids[k] << ", reference "
             << wantIds[k];
    if (!std::isfinite(w[k]) || !(wantW[k] > 0))
      return ::testing::AssertionFailure()
             << "slot " << k << ": weight " << w[k] << ", reference "
             << wantW[k];
    worst = std::max(worst, std::fabs(w[k] - wantW[k]) / wantW[k]);
  }
  if (maxRel)
    *maxRel = worst;
  if (!(worst <= relTol))
    return ::testing::AssertionFailure()
           << "weight relative error " << worst << " > " << relTol;
  return ::testing::AssertionSuccess();
}

struct RouterShape {
  int64_t dim, experts;
  int32_t topK;
  bool renormalize;
  double scaling;
  bool bias;
  const char *name;
};

/// One router layer's weights and a token whose ranking has no near-tie.
struct RouterInputs {
  std::vector<uint16_t> gate, h;
  std::vector<float> bias; ///< empty when the shape has none
  Vec biasD;               ///< the bias in double (zeros when none)
  ref::Routing want;
  double margin = 0;
  int draws = 0;

  RouterInputs(const RouterShape &s, uint64_t seed) {
    Rng rng(seed);
    // Logits with a spread of ~1.5 (scores over most of (0, 1)); the bias
    // (±0.1) reorders the best experts.
    gate = ref::randomBf16(rng, s.experts * s.dim, 3.0 / std::sqrt(s.dim));
    biasD.assign(s.experts, 0.0);
    if (s.bias) {
      bias = ref::randomFloats(rng, s.experts, -0.1, 0.1);
      biasD.assign(bias.begin(), bias.end());
    }
    ref::WeightRef g = ref::WeightRef::fromBf16(gate.data(), s.experts, s.dim);
    // Redraw the token until the ranking is clear of ties, with the bias
    // and (the test also runs the router without it) without.
    for (draws = 1; draws <= 50; ++draws) {
      h = ref::randomBf16(rng, s.dim, 1.5);
      want = ref::route(g, biasD, ref::fromBf16(h), s.topK, s.renormalize,
                        s.scaling);
      margin = rankingMargin(want, biasD, s.topK);
      if (s.bias)
        margin =
            std::min(margin, rankingMargin(want, Vec(s.experts, 0.0), s.topK));
      if (margin > 1e-4)
        break;
    }
  }

  RouterParams params(const RouterShape &s, std::vector<int32_t> &ids,
                      std::vector<float> &w) const {
    ids.assign(s.topK, -1);
    w.assign(s.topK, NAN);
    RouterParams p;
    p.h = h.data();
    p.gate = gate.data();
    p.bias = s.bias ? bias.data() : nullptr;
    p.numExperts = s.experts;
    p.dim = s.dim;
    p.topK = s.topK;
    p.renormalize = s.renormalize ? 1 : 0;
    p.scaling = static_cast<float>(s.scaling);
    p.outIds = ids.data();
    p.outWeights = w.data();
    return p;
  }
};

class RouterRef : public ::testing::TestWithParam<RouterShape> {};

TEST_P(RouterRef, SameExpertsAndWeights) {
  const RouterShape s = GetParam();
  RouterInputs in(s, 500 + s.experts);
  ASSERT_GT(in.margin, 1e-4) << "no tie-free token in 50 draws";
  std::vector<int32_t> ids;
  std::vector<float> w;
  routerCpu(in.params(s, ids, w));

  double maxRel = 0;
  EXPECT_TRUE(
      routingAgrees(ids, w, in.want.experts, in.want.weights, 1e-6, &maxRel));
  std::cout << "[router " << s.name << "] margin " << in.margin << " (draw "
            << in.draws << "), max weight rel err " << maxRel << "\n";
  if (s.renormalize) {
    double sum = 0;
    for (float x : w)
      sum += x;
    EXPECT_NEAR(sum, s.scaling, 1e-5 * s.scaling);
  }
  if (s.bias && s.topK < s.experts) {
    // The bias must matter for this draw: the SET of experts chosen by s
    // alone differs from the one chosen by s + bias (not merely the order).
    // And the kernel without the bias matches the reference without it.
    ref::Routing plain =
        ref::route(ref::WeightRef::fromBf16(in.gate.data(), s.experts, s.dim),
                   Vec(s.experts, 0.0), ref::fromBf16(in.h), s.topK,
                   s.renormalize, s.scaling);
    EXPECT_NE(idSet(plain.experts), idSet(in.want.experts))
        << "the bias does not change the top-k set";
    ASSERT_GT(rankingMargin(plain, Vec(s.experts, 0.0), s.topK), 1e-4);
    std::vector<int32_t> plainIds;
    std::vector<float> plainW;
    RouterParams p = in.params(s, plainIds, plainW);
    p.bias = nullptr;
    routerCpu(p);
    EXPECT_TRUE(
        routingAgrees(plainIds, plainW, plain.experts, plain.weights, 1e-6))
        << "without the bias";
    // The biased reference rejects the unbiased kernel run.
    EXPECT_FALSE(routingAgrees(plainIds, plainW, in.want.experts,
                               in.want.weights, 1e-6));
    int64_t changed = 0;
    for (int64_t e : in.want.experts)
      changed += std::find(plain.experts.begin(), plain.experts.end(), e) ==
                 plain.experts.end();
    std::cout << "[router " << s.name << "] the bias swaps " << changed
              << " of " << s.topK << " experts into the top-k\n";
  }

  // The comparison can fail: swapped ids, a foreign id, a weight off by
  // 1e-5 relative.
  if (s.topK > 1) {
    auto bad = ids;
    std::swap(bad[0], bad[1]);
    EXPECT_FALSE(routingAgrees(bad, w, in.want.experts, in.want.weights, 1e-6));
  }
  if (s.topK < s.experts) {
    auto bad = ids;
    for (int32_t e = 0; e < s.experts; ++e)
      if (std::find(ids.begin(), ids.end(), e) == ids.end()) {
        bad.back() = e;
        break;
      }
    EXPECT_FALSE(routingAgrees(bad, w, in.want.experts, in.want.weights, 1e-6));
  }
  auto badW = w;
  badW[s.topK / 2] *= 1.0f + 1e-5f;
  EXPECT_FALSE(
      routingAgrees(ids, badW, in.want.experts, in.want.weights, 1e-6));
}

TEST_P(RouterRef, ForceExpertFillsEverySlot) {
  const RouterShape s = GetParam();
  RouterInputs in(s, 600 + s.experts);
  for (int32_t forced : {0, static_cast<int32_t>(s.experts - 1)}) {
    std::vector<int32_t> ids;
    std::vector<float> w;
    RouterParams p = in.params(s, ids, w);
    p.forceExpert = forced;
    routerCpu(p);
    // Documented: every slot routes to the forced expert with its UNBIASED
    // score, then renormalised (Σ = k·s) and scaled as usual.
    const double sf = in.want.scores[forced];
    const double each =
        (s.renormalize ? sf / (s.topK * sf + 1e-20) : sf) * s.scaling;
    std::vector<int64_t> wantIds(s.topK, forced);
    double maxRel = 0;
    EXPECT_TRUE(
        routingAgrees(ids, w, wantIds, Vec(s.topK, each), 1e-6, &maxRel))
        << "forceExpert " << forced;
    if (forced == 0)
      std::cout << "[router " << s.name << " forceExpert 0] weight " << w[0]
                << ", max rel err " << maxRel << "\n";
  }
}

TEST(RouterBiasRef, BiasPullsALowExpertInAndPushesTheBestOut) {
  // K3's router (D = 7168, E = 896, top-16, renormalised, scaling 1) with a
  // bias built to reorder the top-k: ±0.05 noise everywhere, −0.6 on the
  // expert with the best unbiased score, +0.6 on the one ranked 300th. The
  // kernel must pick the reference's ids (the promoted one in, the demoted
  // one out) with the UNBIASED scores as weights.
  const int64_t D = 7168, E = 896;
  const int32_t K = 16;
  Rng rng(640);
  auto gate = ref::randomBf16(rng, E * D, 3.0 / std::sqrt(D));
  const ref::WeightRef g = ref::WeightRef::fromBf16(gate.data(), E, D);
  std::vector<float> bias;
  Vec biasD;
  std::vector<uint16_t> h;
  ref::Routing plain, want;
  int64_t best = -1, promoted = -1;
  int draws = 0;
  for (draws = 1; draws <= 50; ++draws) {
    h = ref::randomBf16(rng, D, 1.5);
    plain = ref::route(g, Vec(E, 0.0), ref::fromBf16(h), E, true, 1.0);
    best = plain.experts[0];
    promoted = plain.experts[299];
    bias = ref::randomFloats(rng, E, -0.05, 0.05);
    bias[best] = -0.6f;
    bias[promoted] = 0.6f;
    biasD.assign(bias.begin(), bias.end());
    want = ref::route(g, biasD, ref::fromBf16(h), K, true, 1.0);
    if (rankingMargin(want, biasD, K) > 1e-4)
      break;
  }
  ASSERT_GT(rankingMargin(want, biasD, K), 1e-4) << "no tie-free draw";
  ASSERT_EQ(want.experts[0], promoted);
  ASSERT_EQ(std::count(want.experts.begin(), want.experts.end(), best), 0);
  plain.experts.resize(K);
  EXPECT_NE(idSet(plain.experts), idSet(want.experts));

  std::vector<int32_t> ids(K, -1);
  std::vector<float> w(K, NAN);
  RouterParams p;
  p.h = h.data();
  p.gate = gate.data();
  p.bias = bias.data();
  p.numExperts = E;
  p.dim = D;
  p.topK = K;
  p.renormalize = 1;
  p.scaling = 1.0f;
  p.outIds = ids.data();
  p.outWeights = w.data();
  routerCpu(p);
  double maxRel = 0;
  EXPECT_TRUE(routingAgrees(ids, w, want.experts, want.weights, 1e-6, &maxRel));
  std::cout << "[router K3 reordering bias] draw " << draws << ": expert "
            << promoted << " (unbiased rank 300, s = " << want.scores[promoted]
            << ") first, expert " << best
            << " (unbiased best, s = " << want.scores[best]
            << ") out; weight of the promoted " << w[0]
            << ", max weight rel err " << maxRel << "\n";
  // The promoted expert's weight is its low unbiased score, not s + 0.6.
  EXPECT_LT(w[0], w[1]);

  // Able to fail: weights from the biased scores (s + bias, renormalised)
  // are rejected, and so is the kernel run without its bias.
  std::vector<float> biasedW(K);
  double sum = 0;
  for (int32_t k = 0; k < K; ++k)
    sum += want.scores[want.experts[k]] + biasD[want.experts[k]];
  for (int32_t k = 0; k < K; ++k)
    biasedW[k] = static_cast<float>(
        (want.scores[want.experts[k]] + biasD[want.experts[k]]) / sum);
  EXPECT_FALSE(routingAgrees(ids, biasedW, want.experts, want.weights, 1e-6))
      << "biased weights passed";
  std::vector<int32_t> ids2(K, -1);
  std::vector<float> w2(K, NAN);
  p.bias = nullptr;
  p.outIds = ids2.data();
  p.outWeights = w2.data();
  routerCpu(p);
  EXPECT_FALSE(routingAgrees(ids2, w2, want.experts, want.weights, 1e-6))
      << "the router without its bias passed";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RouterRef,
    ::testing::Values(
        RouterShape{7168, 896, 16, true, 1.0, true, "K3"},
        RouterShape{2304, 256, 8, true, 2.446, true, "KimiLinear"},
        RouterShape{7168, 896, 16, false, 1.0, true, "K3_noRenorm"},
        RouterShape{333, 64, 6, true, 1.5, false, "noBias"},
        RouterShape{40, 7, 7, true, 1.0, true, "allExperts"}),
    [](const ::testing::TestParamInfo<RouterShape> &i) {
      return std::string(i.param.name);
    });

//===----------------------------------------------------------------------===//
// Expert mix
//===----------------------------------------------------------------------===//

/// A bf16 output against the reference: all finite, at least half non-zero,
/// every element within 1 ulp plus slackOfMax·max|ref|, at most maxInexact
/// of them not exact, max|diff|/max|ref| < maxRelErr (RefTestUtil.h).
::testing::AssertionResult agrees(const std::vector<uint16_t> &got,
                                  const Vec &want, double slackOfMax,
                                  double maxInexact, double maxRelErr,
                                  ref::Bf16Stats *stats = nullptr) {
  reftest::Tolerance tol;
  tol.ulps = 1;
  tol.slackOfMax = slackOfMax;
  tol.maxInexact = maxInexact;
  tol.maxRelErr = maxRelErr;
  return reftest::agrees(got, want, tol, stats);
}

/// The expert-mix tolerance of the file comment.
::testing::AssertionResult mixAgrees(const std::vector<uint16_t> &got,
                                     const Vec &want,
                                     ref::Bf16Stats *stats = nullptr) {
  return agrees(got, want, 0x1p-8, 0.02, 1e-2, stats);
}

/// n floats uniform in [−scale, scale), two per 64-bit draw: cheaper than
/// randomBf16 for the expert matrices (11M entries each at K3's size).
std::vector<float> randomWeights(Rng &rng, int64_t n, double scale) {
  std::vector<float> w(n);
  for (int64_t i = 0; i < n; i += 2) {
    uint64_t r = rng.raw();
    w[i] = static_cast<float>(scale * ((r >> 40) * 0x1p-23 - 1.0));
    if (i + 1 < n)
      w[i + 1] =
          static_cast<float>(scale * (((r >> 8) & 0xffffff) * 0x1p-23 - 1.0));
  }
  return w;
}

/// One routed expert, w1 / w3 [I, Dm] and w2 [Dm, I], bf16 or MXFP4.
struct Expert {
  std::vector<uint16_t> bf16[3];
  std::vector<uint8_t> packed[3], scale[3];
  int64_t rows[3], cols[3];
  bool mxfp4 = false;

  Expert(Rng &rng, int64_t dim, int64_t inter, bool fp4) : mxfp4(fp4) {
    rows[0] = rows[1] = cols[2] = inter;
    cols[0] = cols[1] = rows[2] = dim;
    // g spreads over a few units (SiTU's gate softcap β1 = 4 bends), u over
    // ~10 (the β2 = 25 softcap bends in the tails), y stays O(1).
    const double gain[3] = {2.5, 15.0, 1.0};
    for (int m = 0; m < 3; ++m) {
      const double a = gain[m] / std::sqrt(static_cast<double>(cols[m]));
      if (fp4) {
        auto w = randomWeights(rng, rows[m] * cols[m], a);
        quantizeMxfp4(w.data(), rows[m], cols[m], packed[m], scale[m]);
      } else {
        auto w = randomWeights(rng, rows[m] * cols[m], a);
        bf16[m].resize(w.size());
        for (size_t i = 0; i < w.size(); ++i) {
          bf16[m][i] = ref::toBf16Bits(w[i]);
          if ((bf16[m][i] & 0x7fff) == 0) // no zero weights
            bf16[m][i] = ref::toBf16Bits(a / 2);
        }
      }
    }
  }

  k3::WeightRef kernel(int m) const {
    k3::WeightRef r;
    if (mxfp4) {
      r.format = kWeightMxfp4;
      r.packed = packed[m].data();
      r.scale = scale[m].data();
    } else {
      r.format = kWeightBf16;
      r.bf16 = bf16[m].data();
    }
    return r;
  }

  ref::WeightRef reference(int m) const {
    return mxfp4 ? ref::WeightRef::fromMxfp4(packed[m].data(), scale[m].data(),
                                             rows[m], cols[m])
                 : ref::WeightRef::fromBf16(bf16[m].data(), rows[m], cols[m]);
  }
};

struct MixShape {
  int64_t dim, inter, tableSize;
  std::vector<int32_t> ids;
  bool mxfp4;
  int32_t activation;
  int32_t hasBeta2;
  double scaling; ///< the weights sum to this
  const char *name;
};

class MoeExpertsRef : public ::testing::TestWithParam<MixShape> {};

TEST_P(MoeExpertsRef, MixMatchesReference) {
  const MixShape s = GetParam();
  const int32_t k = static_cast<int32_t>(s.ids.size());
  Rng rng(700 + s.dim + s.inter);
  // One expert per distinct routed id. Every other table entry is a decoy:
  // the first expert with w1 and w3 swapped, so a kernel reading the wrong
  // id gets different weights (without the cost of another K3 expert).
  std::vector<int32_t> distinct = s.ids;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<Expert> experts;
  for (size_t i = 0; i < distinct.size(); ++i)
    experts.emplace_back(rng, s.dim, s.inter, s.mxfp4);
  std::vector<const Expert *> table(s.tableSize, nullptr);
  for (size_t i = 0; i < distinct.size(); ++i)
    table[distinct[i]] = &experts[i];
  std::vector<k3::WeightRef> w1(s.tableSize), w3(s.tableSize), w2(s.tableSize);
  for (int64_t e = 0; e < s.tableSize; ++e) {
    const bool decoy = table[e] == nullptr;
    const Expert &ex = decoy ? experts[0] : *table[e];
    w1[e] = ex.kernel(decoy ? 1 : 0);
    w3[e] = ex.kernel(decoy ? 0 : 1);
    w2[e] = ex.kernel(2);
  }

  // Router-like weights: sigmoid scores renormalised and scaled.
  std::vector<float> weights(k);
  double sum = 0;
  for (auto &x : weights)
    sum += (x = static_cast<float>(rng.uniform(0.3, 0.95)));
  for (auto &x : weights)
    x = static_cast<float>(x / sum * s.scaling);
  auto x = ref::randomBf16(rng, s.dim, 2.0);

  auto run = [&](const std::vector<int32_t> &ids) {
    auto out = ref::poisonedBf16(s.dim);
    MoeExpertsParams p;
    p.x = x.data();
    p.ids = ids.data();
    p.weights = weights.data();
    p.topK = k;
    p.numExperts = s.tableSize;
    p.w1 = w1.data();
    p.w3 = w3.data();
    p.w2 = w2.data();
    p.dim = s.dim;
    p.interDim = s.inter;
    p.activation = s.activation;
    p.beta1 = 4.0f;
    p.hasBeta2 = s.hasBeta2;
    p.beta2 = 25.0f;
    p.out = out.data();
    moeExpertsCpu(p);
    return out;
  };
  auto out = run(s.ids);

  ref::ActSpec act;
  act.act = s.activation == kActSiTU ? Activation::SiTU : Activation::SiLU;
  act.beta1 = 4.0;
  act.hasBeta2 = s.hasBeta2 != 0;
  act.beta2 = 25.0;
  Vec xd = ref::fromBf16(x);
  std::vector<Vec> ys;
  for (int32_t e : s.ids) {
    const Expert &ex = *table[e];
    ys.push_back(ref::gatedMlp(ex.reference(0), ex.reference(1),
                               ex.reference(2), xd, act));
  }
  Vec want = ref::expertMix(ys, Vec(weights.begin(), weights.end()));

  ref::Bf16Stats st;
  ::testing::AssertionResult ok = mixAgrees(out, want, &st);
  std::cout << "[moe_experts " << s.name << "] " << st.str() << "\n";
  EXPECT_TRUE(ok);

  // The comparison can fail: 5% on the largest element; two ids swapped
  // against their weights (a kernel rerun; the reference is not rerun).
  size_t big = 0;
  for (size_t i = 1; i < want.size(); ++i)
    if (std::fabs(want[i]) > std::fabs(want[big]))
      big = i;
  auto bad = out;
  bad[big] = ref::toBf16Bits(ref::fromBf16Bits(out[big]) * 1.05);
  EXPECT_FALSE(mixAgrees(bad, want)) << "a 5% error was not caught";
  if (s.ids[0] != s.ids[1]) {
    auto swapped = s.ids;
    std::swap(swapped[0], swapped[1]);
    EXPECT_FALSE(mixAgrees(run(swapped), want)) << "swapped ids passed";
  }
}

/// A MixShape with its routed ids last (keeps the table below readable).
MixShape mix(const char *name, int64_t dim, int64_t inter, int64_t tableSize,
             bool mxfp4, int32_t activation, int32_t hasBeta2, double scaling,
             std::vector<int32_t> ids) {
  return MixShape{dim,   inter,      tableSize, std::move(ids),
                  mxfp4, activation, hasBeta2,  scaling,
                  name};
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeExpertsRef,
    ::testing::Values(
        // K3 per-expert size (latent 3584, intermediate 3072), MXFP4, SiTU;
        // two experts keep the float64 reference near 2 s.
        mix("K3_mxfp4_situ_top2", 3584, 3072, 32, true, kActSiTU, 1, 1.0,
            {21, 4}),
        // All 16 slots of K3's top-k, at a cut size.
        mix("cut_mxfp4_situ_top16", 256, 128, 32, true, kActSiTU, 1, 1.0,
            {3, 17, 28, 0, 9, 31, 12, 5, 22, 14, 7, 26, 1, 19, 10, 24}),
        // Kimi-Linear per-expert size, bf16, SwiGLU, top-8 of 16.
        mix("KimiLinear_bf16_swiglu_top8", 2304, 1024, 16, false, kActSwiGLU, 0,
            2.446, {9, 2, 15, 6, 0, 11, 4, 13}),
        // Odd sizes, SiTU without the linear beta.
        mix("odd_bf16_situ_noBeta2", 100, 37, 5, false, kActSiTU, 0, 1.0,
            {4, 1, 2}),
        // Every slot on one expert (what forceExpert routes).
        mix("forced_mxfp4_situ", 96, 64, 4, true, kActSiTU, 1, 1.0,
            {0, 0, 0, 0})),
    [](const ::testing::TestParamInfo<MixShape> &i) {
      return std::string(i.param.name);
    });

} // namespace
