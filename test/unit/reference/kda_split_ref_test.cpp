//===- kda_split_ref_test.cpp - The unfused KDA step vs the reference -----===//
//
// The four launches of the recurrent step that `--fusion=none` runs (and
// kda_decode computes inside), each against Reference.h on its own:
//  * kda_l2norm (kdaL2NormStepCpu): per head x / sqrt(Σ x² + 1e-6) · scale,
//    q (scale kdaQueryScale(d)) and k (scale 1), at K3 (96 × 128), the twin
//    (8 × 32), Kimi-Linear (32 × 128) and an odd shape; and at ‖x‖² ≈ ε:
//    heads with Σ x² = 0, ≈ 1e-7, ≈ 1e-6, ≈ 1e-5 where the epsilon INSIDE
//    the root (K3.md §2.3) differs from max(‖x‖, eps), ‖x‖ + eps or
//    max(‖x‖², eps): test-local fp32 versions of those wrong forms must be
//    rejected by the same comparison.
//  * kda_gate (kdaGateCpu): g = lb · sigmoid(exp(A_log) · (f + dt_bias)) with
//    lb = −3.5 and −5 (K3), and g = −exp(A_log) · softplus(f + dt_bias) (the
//    twin, Kimi-Linear), including |z| up to ~24 where sigmoid and softplus
//    saturate.
//  * kda_step (kdaStepCpu): several steps from a random non-zero state, the
//    kernel's fp32 state against the reference's float64 MATRIX form
//    S = (I − β k kᵀ) Diag(exp g) S + β k vᵀ (ref::kdaRecurrence).
//
// Tolerances (fp32 outputs, element-wise): l2norm within 1e-6 relative of
// the head's largest |ref| (a 128-term fp32 sum, a sqrt, two multiplies);
// gate within 1e-6 · (1 + |a·z| + |z|) of |ref| (sigmoid/softplus amplify
// the fp32 error of z = f + dt_bias and of a·z by up to |a·z|, |z|), plus
// FLT_MIN where the exact g is below fp32's normal range; step:
// o (bf16) within 1 ulp + 1e-5 · max|o| with at most 1% flips, state
// max|Δ|/max|ref| < 1e-5. Measured values are printed.
//
// Every comparison is shown able to fail: a perturbed output, and kernel
// runs with a wrong parameter (q's scale left out; lb −5 instead of −3.5;
// the other gate form; dt_bias dropped; A_log of the wrong head; q and k
// swapped; no decay; β of the wrong head). Outputs are poisoned with NaN.
//
//===----------------------------------------------------------------------===//
#include "kernels/kda/KdaCpu.h"
#include "test/reference/Reference.h"
#include "test/reference/TestData.h"

#include "test/unit/reference/RefTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>

using namespace k3;
using ref::Rng;
using ref::Vec;

namespace {

struct KdaShape {
  int64_t heads, headDim;
  const char *name;
};

std::string shapeName(const ::testing::TestParamInfo<KdaShape> &i) {
  return std::string(i.param.name);
}

const KdaShape kShapes[] = {
    {96, 128, "K3"}, {8, 32, "twin"}, {32, 128, "KimiLinear"}, {3, 5, "odd"}};

//===----------------------------------------------------------------------===//
// kda_l2norm
//===----------------------------------------------------------------------===//

/// Per head h of d values: max_i |got_i − want_i| / max_i |want_i| must be
/// below `relTol`; a head whose reference is all zero must be exactly zero.
/// `worst` receives the largest per-head relative error.
::testing::AssertionResult headsAgree(const std::vector<float> &got,
                                      const Vec &want, int64_t d, double relTol,
                                      double *worst = nullptr) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size mismatch";
  double w = 0;
  for (size_t h = 0; h * d < want.size(); ++h) {
    double maxRef = 0, maxErr = 0;
    for (int64_t i = 0; i < d; ++i) {
      const size_t c = h * d + i;
      if (!std::isfinite(got[c]))
        return ::testing::AssertionFailure()
               << "head " << h << " element " << i << " is " << got[c];
      maxRef = std::max(maxRef, std::fabs(want[c]));
      maxErr = std::max(maxErr, std::fabs(got[c] - want[c]));
    }
    if (maxRef == 0) {
      if (maxErr != 0)
        return ::testing::AssertionFailure()
               << "head " << h << ": want zeros, got max |x| " << maxErr;
      continue;
    }
    const double rel = maxErr / maxRef;
    w = std::max(w, rel);
    if (!(rel <= relTol))
      return ::testing::AssertionFailure()
             << "head " << h << ": relative error " << rel << " > " << relTol;
  }
  if (worst)
    *worst = w;
  return ::testing::AssertionSuccess() << "worst head rel err " << w;
}

constexpr double kL2Tol = 1e-6;

/// The reference kda_l2norm: per head l2norm (eps inside the root), times
/// `scale` (double).
Vec refL2Norm(const Vec &x, int64_t d, double scale) {
  Vec y(x.size());
  for (size_t h = 0; h * d < x.size(); ++h) {
    Vec n = ref::l2norm(Vec(x.begin() + h * d, x.begin() + (h + 1) * d), 1e-6);
    for (int64_t i = 0; i < d; ++i)
      y[h * d + i] = n[i] * scale;
  }
  return y;
}

std::vector<float> runL2Norm(const std::vector<uint16_t> &x, int64_t d,
                             float scale) {
  std::vector<float> out = ref::poisonedFloats(x.size());
  KdaL2NormParams p;
  p.x = x.data();
  p.out = out.data();
  p.n = static_cast<int64_t>(x.size());
  p.headDim = d;
  p.eps = kKdaL2NormEps;
  p.scale = scale;
  kdaL2NormStepCpu(p);
  return out;
}

class KdaL2NormRef : public ::testing::TestWithParam<KdaShape> {};

TEST_P(KdaL2NormRef, QAndKMatchReference) {
  const KdaShape s = GetParam();
  const int64_t d = s.headDim, c = s.heads * d;
  Rng rng(5100 + s.heads);
  auto x = ref::randomBf16(rng, c, 2.0);
  const Vec xd = ref::fromBf16(x);
  const double qScale = 1.0 / std::sqrt(static_cast<double>(d));
  for (bool isQ : {true, false}) {
    const std::string tag =
        std::string("kda_l2norm ") + s.name + (isQ ? " q" : " k");
    const float scale = isQ ? kdaQueryScale(d) : 1.0f;
    auto out = runL2Norm(x, d, scale);
    const Vec want = refL2Norm(xd, d, isQ ? qScale : 1.0);
    double worst = 0;
    EXPECT_TRUE(headsAgree(out, want, d, kL2Tol, &worst)) << tag;
    std::cout << "[" << tag << "] worst head rel err " << worst << "\n";

    // Able to fail: the largest element of a head off by 1e-5 relative; q
    // without its scale (and k with q's).
    auto bad = out;
    const int64_t h0 = s.heads / 2;
    int64_t big = h0 * d;
    for (int64_t i = h0 * d; i < (h0 + 1) * d; ++i)
      if (std::fabs(want[i]) > std::fabs(want[big]))
        big = i;
    bad[big] *= 1.0f + 1e-5f;
    EXPECT_FALSE(headsAgree(bad, want, d, kL2Tol)) << tag;
    EXPECT_FALSE(headsAgree(runL2Norm(x, d, isQ ? 1.0f : kdaQueryScale(d)),
                            want, d, kL2Tol))
        << tag << ": the wrong scale passed";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, KdaL2NormRef, ::testing::ValuesIn(kShapes),
                         shapeName);

/// Wrong epsilon placements, in fp32 as a kernel would write them.
struct WrongL2 {
  const char *name;
  std::function<float(float sumSq)> inv; ///< the factor applied to x
};

TEST(KdaL2NormEpsilon, InsideTheRootAtTinyNorms) {
  // K3 heads of d = 128 with Σ x² = 0, ≈ 1e-7, ≈ 1e-6, ≈ 1e-5 (where the
  // epsilon's placement matters), then ≈ 1e-3 and ordinary heads.
  const int64_t d = 128;
  const double targets[] = {0, 1e-7, 1e-6, 1e-5, 1e-3, 1.0, 50.0};
  const int64_t heads = sizeof(targets) / sizeof(targets[0]);
  Rng rng(5200);
  std::vector<uint16_t> x;
  std::vector<double> sums;
  for (double t : targets) {
    Vec v = ref::fromBf16(ref::randomBf16(rng, d, 1.0));
    double ss = 0;
    for (double e : v)
      ss += e * e;
    const double k = std::sqrt(t / ss);
    double actual = 0;
    for (double e : v) {
      const uint16_t b = ref::toBf16Bits(e * k);
      x.push_back(b);
      actual += ref::fromBf16Bits(b) * ref::fromBf16Bits(b);
    }
    sums.push_back(actual);
  }
  for (int64_t h = 1; h < heads; ++h)
    ASSERT_NEAR(sums[h], targets[h], 0.05 * targets[h]) << "head " << h;
  ASSERT_EQ(sums[0], 0.0);
  const Vec xd = ref::fromBf16(x);

  const float eps = kKdaL2NormEps;
  const WrongL2 wrong[] = {
      {"x / max(|x|, eps)",
       [=](float ss) { return 1.0f / std::max(std::sqrt(ss), eps); }},
      {"x / max(|x|, 1e-12) (F.normalize)",
       [](float ss) { return 1.0f / std::max(std::sqrt(ss), 1e-12f); }},
      {"x / (|x| + eps)",
       [=](float ss) { return 1.0f / (std::sqrt(ss) + eps); }},
      {"x / sqrt(max(|x|^2, eps))",
       [=](float ss) { return 1.0f / std::sqrt(std::max(ss, eps)); }},
      {"x / sqrt(|x|^2 + eps^2)",
       [=](float ss) { return 1.0f / std::sqrt(ss + eps * eps); }},
  };

  for (bool isQ : {false, true}) {
    const std::string tag =
        std::string("kda_l2norm tiny norms ") + (isQ ? "q" : "k");
    const float scale = isQ ? kdaQueryScale(d) : 1.0f;
    const Vec want =
        refL2Norm(xd, d, isQ ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0);
    auto out = runL2Norm(x, d, scale);
    double worst = 0;
    EXPECT_TRUE(headsAgree(out, want, d, kL2Tol, &worst)) << tag;
    std::cout << "[" << tag << "] worst head rel err " << worst
              << "; output norms:";
    for (int64_t h = 0; h < heads; ++h) {
      double n = 0;
      for (int64_t i = 0; i < d; ++i)
        n += want[h * d + i] * want[h * d + i];
      std::cout << " " << std::sqrt(n) / (isQ ? scale : 1.0f);
    }
    std::cout << "\n";

    // Each wrong placement of the epsilon is rejected (on the tiny heads).
    for (const WrongL2 &w : wrong) {
      std::vector<float> bad(x.size());
      for (int64_t h = 0; h < heads; ++h) {
        float ss = 0;
        for (int64_t i = 0; i < d; ++i) {
          const float v = static_cast<float>(xd[h * d + i]);
          ss += v * v;
        }
        const float inv = w.inv(ss);
        for (int64_t i = 0; i < d; ++i) {
          float v = static_cast<float>(xd[h * d + i]) * inv;
          bad[h * d + i] = scale != 1.0f ? v * scale : v;
        }
      }
      EXPECT_FALSE(headsAgree(bad, want, d, kL2Tol))
          << tag << ": " << w.name << " passed";
    }
  }
}

//===----------------------------------------------------------------------===//
// kda_gate
//===----------------------------------------------------------------------===//

struct GateCase {
  KdaShape shape;
  bool lowerBound;
  double lb;
  const char *name;
};

struct GateInputs {
  std::vector<uint16_t> f;
  std::vector<float> dtBias, aLog;
  Vec fd, dt, al;
  GateInputs(const KdaShape &s, uint64_t seed) {
    Rng rng(seed);
    const int64_t c = s.heads * s.headDim;
    f = ref::randomBf16(rng, c, 3.0);
    // A few channels far out, where sigmoid and softplus saturate.
    for (int64_t i = 0; i < c; i += 7)
      f[i] = ref::toBf16Bits(rng.signedUniform(8.0, 24.0));
    dtBias = ref::randomFloats(rng, c, -1.0, 1.0);
    aLog = ref::randomFloats(rng, s.heads, -1.5, 1.5);
    for (auto &a : aLog)
      if (a == 0.0f)
        a = 0.25f;
    fd = ref::fromBf16(f);
    dt.assign(dtBias.begin(), dtBias.end());
    al.assign(aLog.begin(), aLog.end());
  }
};

class KdaGateRef : public ::testing::TestWithParam<GateCase> {};

TEST_P(KdaGateRef, MatchesReferenceGate) {
  const GateCase gc = GetParam();
  const KdaShape s = gc.shape;
  const int64_t d = s.headDim, c = s.heads * d;
  GateInputs in(s, 5300 + s.heads + (gc.lowerBound ? 1 : 0));

  auto run = [&](bool lowerBound, float lb, const float *dtBias,
                 const float *aLog) {
    std::vector<float> out = ref::poisonedFloats(c);
    KdaGateParams p;
    p.f = in.f.data();
    p.dtBias = dtBias;
    p.aLog = aLog;
    p.out = out.data();
    p.numHeads = s.heads;
    p.headDim = d;
    p.hasLowerBound = lowerBound;
    p.lowerBound = lb;
    kdaGateCpu(p);
    return out;
  };
  const Vec want =
      gc.lowerBound
          ? ref::kdaGateLowerBound(in.fd, in.dt, in.al, s.heads, d, gc.lb)
          : ref::kdaGateSoftplus(in.fd, in.dt, in.al, s.heads, d);
  // Per-element bound: the fp32 error of z and a·z, amplified by the
  // slope of log sigmoid / log softplus (at most |a·z|, |z|).
  constexpr double kGateTol = 1e-6;
  Vec bound(c), cond(c);
  for (int64_t i = 0; i < c; ++i) {
    const double z = in.fd[i] + in.dt[i], a = std::exp(in.al[i / d]);
    // Plus FLT_MIN: where sigmoid(a·z) < 1e-38 (a·z < −88) fp32 has no
    // normal number for g and returns ~0 (exp(g) = 1 either way).
    cond[i] = 1.0 + std::fabs(a * z) + std::fabs(z);
    bound[i] = kGateTol * cond[i] * std::fabs(want[i]) + 0x1p-126;
  }
  auto agrees = [&](const std::vector<float> &got, double *worst) {
    double w = 0;
    for (int64_t i = 0; i < c; ++i) {
      if (!std::isfinite(got[i]) || !(want[i] < 0))
        return ::testing::AssertionFailure()
               << "element " << i << ": " << got[i] << " vs " << want[i];
      const double err = std::fabs(got[i] - want[i]);
      if (std::fabs(want[i]) > 1e-30)
        w = std::max(w, err / (std::fabs(want[i]) * cond[i]));
      if (!(err <= bound[i]))
        return ::testing::AssertionFailure()
               << "element " << i << ": " << got[i] << " vs " << want[i]
               << " (bound " << bound[i] << ")";
    }
    if (worst)
      *worst = w;
    return ::testing::AssertionSuccess();
  };

  const float lb = static_cast<float>(gc.lb);
  auto out = run(gc.lowerBound, lb, in.dtBias.data(), in.aLog.data());
  double worst = 0;
  EXPECT_TRUE(agrees(out, &worst)) << gc.name;
  double gMin = 0, gMax = -INFINITY;
  for (double g : want) {
    gMin = std::min(gMin, g);
    gMax = std::max(gMax, g);
  }
  std::cout << "[kda_gate " << gc.name
            << "] max |diff| / (|ref| (1 + |a z| + |z|)) = " << worst
            << ", g in [" << gMin << ", " << gMax << "]\n";
  if (gc.lowerBound) {
    // The bound is really approached (the test can tell −3.5 from −5).
    EXPECT_LT(gMin, 0.99 * gc.lb);
    EXPECT_GE(gMin, gc.lb);
  }

  // Able to fail: a perturbed element; the other lower bound (a kernel that
  // hard-codes −5); the other gate form; dt_bias dropped; A_log shifted by
  // one head.
  int64_t tight = 0; // the element with the tightest relative bound
  for (int64_t i = 1; i < c; ++i)
    if (bound[i] / std::fabs(want[i]) < bound[tight] / std::fabs(want[tight]))
      tight = i;
  auto bad = out;
  bad[tight] *= 1.0f + 1e-4f;
  EXPECT_FALSE(agrees(bad, nullptr)) << gc.name << ": perturbed element";
  if (gc.lowerBound) {
    const float other = gc.lb == -5.0 ? -3.5f : -5.0f;
    EXPECT_FALSE(
        agrees(run(true, other, in.dtBias.data(), in.aLog.data()), nullptr))
        << gc.name << ": lower bound " << other << " passed";
  }
  EXPECT_FALSE(agrees(run(!gc.lowerBound, gc.lowerBound ? lb : -5.0f,
                          in.dtBias.data(), in.aLog.data()),
                      nullptr))
      << gc.name << ": the other gate form passed";
  std::vector<float> zeros(c, 0.0f);
  EXPECT_FALSE(
      agrees(run(gc.lowerBound, lb, zeros.data(), in.aLog.data()), nullptr))
      << gc.name << ": dt_bias dropped";
  std::vector<float> rotated(in.aLog.begin() + 1, in.aLog.end());
  rotated.push_back(in.aLog[0]);
  EXPECT_FALSE(
      agrees(run(gc.lowerBound, lb, in.dtBias.data(), rotated.data()), nullptr))
      << gc.name << ": A_log of the wrong head passed";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KdaGateRef,
    ::testing::Values(
        GateCase{{96, 128, "K3"}, true, -3.5, "K3_lb_m3p5"},
        GateCase{{96, 128, "K3"}, true, -5.0, "K3_lb_m5"},
        GateCase{{8, 32, "twin"}, false, 0.0, "twin_softplus"},
        GateCase{{32, 128, "KimiLinear"}, false, 0.0, "KimiLinear_softplus"},
        GateCase{{3, 5, "odd"}, true, -3.5, "odd_lb_m3p5"}),
    [](const ::testing::TestParamInfo<GateCase> &i) {
      return std::string(i.param.name);
    });

//===----------------------------------------------------------------------===//
// kda_step
//===----------------------------------------------------------------------===//

struct StepCase {
  KdaShape shape;
  bool lowerBound;
  int steps;
};

/// One step's prepared inputs, as the kernel gets them (fp32 q, k, g, β;
/// bf16 v) and their exact double values for the reference.
struct StepInputs {
  std::vector<float> q, k, g, beta;
  std::vector<uint16_t> v;
  Vec qd, kd, gd, betad, vd;

  StepInputs(Rng &rng, const KdaShape &s, bool lowerBound) {
    const int64_t d = s.headDim, c = s.heads * d;
    // q, k: l2-normalised random vectors (q also scaled), rounded to fp32
    // once; both sides then use those very values.
    Vec qn = refL2Norm(ref::fromBf16(ref::randomBf16(rng, c, 2.0)), d,
                       1.0 / std::sqrt(static_cast<double>(d)));
    Vec kn = refL2Norm(ref::fromBf16(ref::randomBf16(rng, c, 2.0)), d, 1.0);
    Vec f = ref::fromBf16(ref::randomBf16(rng, c, 3.0));
    std::vector<float> dt = ref::randomFloats(rng, c, -1.0, 1.0);
    std::vector<float> al = ref::randomFloats(rng, s.heads, -1.0, 1.0);
    Vec gv = lowerBound
                 ? ref::kdaGateLowerBound(f, Vec(dt.begin(), dt.end()),
                                          Vec(al.begin(), al.end()), s.heads, d,
                                          -5.0)
                 : ref::kdaGateSoftplus(f, Vec(dt.begin(), dt.end()),
                                        Vec(al.begin(), al.end()), s.heads, d);
    Vec bv = ref::kdaBeta(ref::fromBf16(ref::randomBf16(rng, s.heads, 3.0)));
    auto toF = [](const Vec &x) {
      return std::vector<float>(x.begin(), x.end());
    };
    q = toF(qn);
    k = toF(kn);
    g = toF(gv);
    beta = toF(bv);
    v = ref::randomBf16(rng, c, 2.0);
    qd.assign(q.begin(), q.end());
    kd.assign(k.begin(), k.end());
    gd.assign(g.begin(), g.end());
    betad.assign(beta.begin(), beta.end());
    vd = ref::fromBf16(v);
  }
};

class KdaStepRef : public ::testing::TestWithParam<StepCase> {};

TEST_P(KdaStepRef, StateAndOutputMatchMatrixFormOverSteps) {
  const StepCase sc = GetParam();
  const KdaShape s = sc.shape;
  const int64_t H = s.heads, d = s.headDim, c = H * d;
  Rng rng(5400 + H + sc.steps);
  // A random non-zero starting state, shared by both sides, so the very
  // first step already decays something.
  std::vector<float> state = ref::randomFloats(rng, H * d * d, -0.5, 0.5);
  Vec refState(state.begin(), state.end());

  reftest::Tolerance tol;
  tol.ulps = 1;
  tol.slackOfMax = 1e-5;
  tol.maxInexact = 0.01;
  tol.maxRelErr = 1e-3;
  constexpr double kStateTol = 1e-5;

  auto run = [&](std::vector<float> &st, const std::vector<float> &q,
                 const std::vector<float> &k, const std::vector<float> &g,
                 const std::vector<float> &beta,
                 const std::vector<uint16_t> &v) {
    auto out = ref::poisonedBf16(c);
    KdaStepParams p;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.g = g.data();
    p.beta = beta.data();
    p.state = st.data();
    p.out = out.data();
    p.numHeads = H;
    p.headDim = d;
    kdaStepCpu(p);
    return out;
  };

  for (int t = 0; t < sc.steps; ++t) {
    StepInputs in(rng, s, sc.lowerBound);
    const std::vector<float> before = state;
    auto out = run(state, in.q, in.k, in.g, in.beta, in.v);
    const Vec want = ref::kdaRecurrence(refState, H, d, in.qd, in.kd, in.vd,
                                        in.gd, in.betad);
    ref::Bf16Stats os;
    ::testing::AssertionResult ok = reftest::agrees(out, want, tol, &os);
    ref::FloatStats ss = ref::compareFloat(state, refState);
    const std::string tag =
        std::string("kda_step ") + s.name + " step " + std::to_string(t);
    std::cout << "[" << tag << "] o: " << os.str() << "; state rel "
              << ss.relErr() << "\n";
    EXPECT_TRUE(ok) << tag;
    EXPECT_LT(ss.relErr(), kStateTol) << tag << ": " << ss.str();

    // Able to fail (each on a copy of the state before this step): a 5%
    // output error, a 1e-4 error in the largest state entry, q and k
    // swapped, no decay (g = 0), β of the wrong head.
    EXPECT_FALSE(reftest::agrees(reftest::perturbLargest(out, want), want, tol))
        << tag << ": perturbed output passed";
    {
      auto st = state;
      size_t big = 0;
      for (size_t i = 1; i < st.size(); ++i)
        if (std::fabs(refState[i]) > std::fabs(refState[big]))
          big = i;
      st[big] *= 1.0f + 1e-4f;
      EXPECT_GE(ref::compareFloat(st, refState).relErr(), kStateTol)
          << tag << ": perturbed state passed";
    }
    auto wrongRun = [&](const std::vector<float> &q,
                        const std::vector<float> &k,
                        const std::vector<float> &g,
                        const std::vector<float> &beta, const char *what) {
      auto st = before;
      auto o = run(st, q, k, g, beta, in.v);
      const bool oOk = reftest::agrees(o, want, tol);
      const bool sOk = ref::compareFloat(st, refState).relErr() < kStateTol;
      EXPECT_FALSE(oOk && sOk) << tag << ": " << what << " passed";
    };
    wrongRun(in.k, in.q, in.g, in.beta, "q and k swapped");
    wrongRun(in.q, in.k, std::vector<float>(c, 0.0f), in.beta, "no decay");
    if (H > 1) {
      std::vector<float> rot(in.beta.begin() + 1, in.beta.end());
      rot.push_back(in.beta[0]);
      wrongRun(in.q, in.k, in.g, rot, "beta of the wrong head");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KdaStepRef,
    ::testing::Values(StepCase{{96, 128, "K3"}, true, 3},
                      StepCase{{8, 32, "twin"}, false, 8},
                      StepCase{{32, 128, "KimiLinear"}, false, 3},
                      StepCase{{3, 5, "odd"}, true, 6}),
    [](const ::testing::TestParamInfo<StepCase> &i) {
      return std::string(i.param.shape.name);
    });

} // namespace
