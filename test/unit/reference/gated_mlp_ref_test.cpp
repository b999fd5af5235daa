//===- gated_mlp_ref_test.cpp - gated_mlp against the float64 reference ---===//
//
// gatedMlpCpu (dense layer 0, shared experts) in its four forms, plain,
// fused pre-norm (normWeight / normEps), residual epilogue, and both,
// against the reference chain of NUMERICS.md:
//   x̂ = x or rmsNorm(x, w, eps) = R(R(x · rsqrt(mean x² + eps)) · w);
//   g = R(W1 x̂), u = R(W3 x̂), a = R(act(g, u)), y = R(W2 a);
//   out = y or R(y + residual)
// (ref::rmsNorm, ref::gatedMlp, ref::add). Shapes: K3's shared MLP (D = 7168,
// 2 × 3072 = 6144 wide, SiTU β1 = 4, β2 = 25, bf16 as the checkpoint stores
// it), Kimi-Linear's dense layer 0 (D = 2304, I = 9216, SwiGLU), an MXFP4
// SiTU MLP, and an odd one with outDim != inDim and SiTU without β2.
//
// Tolerance: the kernel rounds at the same points as the reference, so the
// only disagreements are rounding flips of x̂, g, u, a or y caused by fp32
// accumulation. A flip inside does travel: one u flip at |u| ≈ 10 moves
// a = SiTU(g, u) ≈ 32 by two ulps (0.25), which moves EVERY y_j by
// W2[j,i] · 0.25 ≈ 0.5% of max|y|, so ~10% of the outputs can round the
// other way and near-zero ones move by many of their own ulps (seen while
// calibrating: the kernel then equals the reference chain fed the kernel's
// own a). So: every element within 1 ulp plus 2^-8 · max|ref|, at most 20%
// of the elements inexact, max|diff|/max|ref| < 1e-2. Over 16 seeds the
// worst were 11% inexact and max|diff|/max|ref| = 5.5e-3; the seeds below
// give at most 0.6% and 2.5e-3 (printed).
//
// Every comparison is shown able to fail: its own output with the largest
// element moved by 5%, and kernel runs with a wrong parameter (the other
// activation; SiTU without its β2; the pre-norm or the residual left out).
// Outputs are poisoned with NaN first; inputs are random and non-zero.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/MXFP4.h"
#include "kernels/moe/MoeCpu.h"
#include "test/reference/Reference.h"
#include "test/reference/TestData.h"

#include "test/unit/reference/RefTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

using namespace k3;
using ref::Rng;
using ref::Vec;

namespace {

using reftest::agrees;
using reftest::Tolerance;

Tolerance mlpTolerance() {
  Tolerance tol;
  tol.ulps = 1;
  tol.slackOfMax = 0x1p-8;
  tol.maxInexact = 0.2;
  tol.maxRelErr = 1e-2;
  return tol;
}

struct MlpShape {
  int64_t in, inter, out;
  bool mxfp4;
  int32_t activation;
  int32_t hasBeta2;
  const char *name;
};

/// One matrix in the kernel's and the reference's view.
struct Matrix {
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> packed, scale;
  int64_t rows = 0, cols = 0;
  bool mxfp4 = false;

  Matrix(Rng &rng, int64_t r, int64_t c, double gain, bool fp4)
      : rows(r), cols(c), mxfp4(fp4) {
    // Uniform in ±a has standard deviation a/sqrt(3): a = gain·sqrt(3/cols)
    // gives W x a spread of about gain · rms(x).
    const double a = gain * std::sqrt(3.0 / static_cast<double>(cols));
    if (fp4) {
      std::vector<float> w(r * c);
      auto bits = reftest::fastRandomBf16(rng, r * c, a);
      for (int64_t i = 0; i < r * c; ++i)
        w[i] = static_cast<float>(ref::fromBf16Bits(bits[i]));
      quantizeMxfp4(w.data(), r, c, packed, scale);
    } else {
      bf16 = reftest::fastRandomBf16(rng, r * c, a);
    }
  }
  k3::WeightRef kernel() const {
    k3::WeightRef w;
    if (mxfp4) {
      w.format = kWeightMxfp4;
      w.packed = packed.data();
      w.scale = scale.data();
    } else {
      w.format = kWeightBf16;
      w.bf16 = bf16.data();
    }
    return w;
  }
  ref::WeightRef reference() const {
    return mxfp4 ? ref::WeightRef::fromMxfp4(packed.data(), scale.data(), rows,
                                             cols)
                 : ref::WeightRef::fromBf16(bf16.data(), rows, cols);
  }
};

class GatedMlpRef : public ::testing::TestWithParam<MlpShape> {};

TEST_P(GatedMlpRef, PlainPreNormResidualMatchReferenceChain) {
  const MlpShape s = GetParam();
  Rng rng(4100 + s.in + s.inter);
  // g spreads over a few units (SiTU's β1 = 4 softcap bends), u over ~10
  // (β2 = 25 bends in the tails), y stays O(1).
  Matrix w1(rng, s.inter, s.in, 2.5, s.mxfp4);
  Matrix w3(rng, s.inter, s.in, 10.0, s.mxfp4);
  Matrix w2(rng, s.out, s.inter, 1.0, s.mxfp4);
  auto x = ref::randomBf16(rng, s.in, 2.0);
  auto nw = ref::randomBf16Magnitude(rng, s.in, 0.5, 1.5);
  auto res = ref::randomBf16(rng, s.out, 2.0);
  const float eps = 1e-5f;

  struct Run {
    bool norm, residual;
    int32_t activation, hasBeta2;
  };
  auto run = [&](const Run &r) {
    auto out = ref::poisonedBf16(s.out);
    GatedMlpParams p;
    p.x = x.data();
    p.normWeight = r.norm ? nw.data() : nullptr;
    p.normEps = eps;
    p.w1 = w1.kernel();
    p.w3 = w3.kernel();
    p.w2 = w2.kernel();
    p.inDim = s.in;
    p.interDim = s.inter;
    p.outDim = s.out;
    p.activation = r.activation;
    p.beta1 = 4.0f;
    p.hasBeta2 = r.hasBeta2;
    p.beta2 = 25.0f;
    p.residual = r.residual ? res.data() : nullptr;
    p.out = out.data();
    gatedMlpCpu(p);
    return out;
  };

  ref::ActSpec act;
  act.act = s.activation == kActSiTU ? Activation::SiTU : Activation::SiLU;
  act.beta1 = 4.0;
  act.hasBeta2 = s.hasBeta2 != 0;
  act.beta2 = 25.0;
  const Vec xd = ref::fromBf16(x);
  const Vec xn = ref::rmsNorm(xd, ref::fromBf16(nw), eps);
  const Vec resd = ref::fromBf16(res);
  // The reference y for each input, computed once.
  const Vec yPlain =
      ref::gatedMlp(w1.reference(), w3.reference(), w2.reference(), xd, act);
  const Vec yNorm =
      ref::gatedMlp(w1.reference(), w3.reference(), w2.reference(), xn, act);

  const Tolerance tol = mlpTolerance();
  const int32_t otherAct = s.activation == kActSiTU ? kActSwiGLU : kActSiTU;
  for (bool norm : {false, true})
    for (bool residual : {false, true}) {
      const std::string tag = std::string("gated_mlp ") + s.name +
                              (norm ? " prenorm" : "") +
                              (residual ? " +residual" : "");
      const Vec &y = norm ? yNorm : yPlain;
      const Vec want = residual ? ref::add(y, resd) : y;
      const Run right{norm, residual, s.activation, s.hasBeta2};
      auto out = run(right);
      ref::Bf16Stats st;
      ::testing::AssertionResult ok = agrees(out, want, tol, &st);
      std::cout << "[" << tag << "] " << st.str() << "\n";
      EXPECT_TRUE(ok) << tag;

      // Able to fail: a 5% error; the other activation; the pre-norm and
      // the residual toggled; SiTU without β2.
      EXPECT_FALSE(agrees(reftest::perturbLargest(out, want), want, tol))
          << tag << ": 5% on the largest element passed";
      EXPECT_FALSE(
          agrees(run({norm, residual, otherAct, s.hasBeta2}), want, tol))
          << tag << ": the other activation passed";
      EXPECT_FALSE(
          agrees(run({!norm, residual, s.activation, s.hasBeta2}), want, tol))
          << tag << ": toggling the pre-norm passed";
      EXPECT_FALSE(
          agrees(run({norm, !residual, s.activation, s.hasBeta2}), want, tol))
          << tag << ": toggling the residual passed";
      if (s.activation == kActSiTU && s.hasBeta2) {
        EXPECT_FALSE(agrees(run({norm, residual, s.activation, 0}), want, tol))
            << tag << ": SiTU without beta2 passed";
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GatedMlpRef,
    ::testing::Values(
        // K3 shared experts: num_shared 2 × moe_intermediate 3072.
        MlpShape{7168, 6144, 7168, false, kActSiTU, 1, "K3_shared_situ"},
        // Kimi-Linear dense layer 0 (intermediate_size 9216), SwiGLU.
        MlpShape{2304, 9216, 2304, false, kActSwiGLU, 0, "KimiLinear_dense"},
        // MXFP4 weights (the routed-expert format) with SiTU.
        MlpShape{512, 192, 512, true, kActSiTU, 1, "mxfp4_situ"},
        // outDim != inDim, SiTU with a plain up branch.
        MlpShape{100, 37, 72, false, kActSiTU, 0, "odd_situ_noBeta2"}),
    [](const ::testing::TestParamInfo<MlpShape> &i) {
      return std::string(i.param.name);
    });

} // namespace
