//===- dense_ref_test.cpp - gemv, norm, AttnRes, elementwise vs reference -===//
//
// The non-attention, non-MoE CPU kernels against the float64 reference:
// linear (bf16 and MXFP4 weights, fp32 output, folded pre-norm, residual
// epilogue), linear_multi, rms_norm, attn_res, embed, add, mul_sigmoid,
// gated_act, argmax. Outputs are poisoned with NaN first.
//
// Tolerances: a single rounding at the end (linear, rms_norm's two roundings
// from the same bf16 inputs, AttnRes, elementwise) must be within 1 bf16 ulp
// of the reference everywhere, plus a slack of 1e-5·max|ref| for sums that
// cancel towards zero; at most 1% of elements may be 1-ulp flips (measured
// values are printed). fp32 outputs: max|Δ|/max|ref| < 1e-5.
//
//===----------------------------------------------------------------------===//
#include "kernels/attnres/AttnResCpu.h"
#include "kernels/elementwise/ElementwiseCpu.h"
#include "kernels/embed/EmbedCpu.h"
#include "kernels/gemv/GemvCpu.h"
#include "kernels/head/HeadCpu.h"
#include "kernels/norm/NormCpu.h"
#include "test/reference/Reference.h"
#include "test/reference/TestData.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace k3;
using ref::Rng;
using ref::Vec;

namespace {

/// Asserts a single-rounding bf16 output agrees with the reference.
void expectOneRounding(const std::vector<uint16_t> &got, const Vec &want,
                       const std::string &what) {
  double maxRef = 0;
  for (double v : want)
    maxRef = std::max(maxRef, std::fabs(v));
  ref::Bf16Stats s = ref::compareBf16(got, want, 1e-5 * maxRef);
  std::cout << "[" << what << "] " << s.str() << "\n";
  EXPECT_EQ(s.beyond, 0) << what << ": " << s.str();
  EXPECT_LE(s.flipFraction(), 0.01) << what << ": " << s.str();
}

struct LinearShape {
  int64_t n, k;
  bool mxfp4;
};

class LinearRef : public ::testing::TestWithParam<LinearShape> {};

TEST_P(LinearRef, Bf16OutF32OutPreNormResidual) {
  const LinearShape s = GetParam();
  Rng rng(static_cast<uint64_t>(s.n * 31 + s.k));
  std::vector<uint16_t> w, x = ref::randomBf16(rng, s.k, 1.0);
  std::vector<uint8_t> packed, scale;
  k3::WeightRef kw;
  ref::WeightRef rw;
  if (s.mxfp4) {
    // Scales around 2^-6 give weights of ~0.01-0.1, as in a real expert.
    ref::randomMxfp4(rng, s.n, s.k, 119, 123, packed, scale);
    kw.format = kWeightMxfp4;
    kw.packed = packed.data();
    kw.scale = scale.data();
    rw = ref::WeightRef::fromMxfp4(packed.data(), scale.data(), s.n, s.k);
  } else {
    w = ref::randomBf16(rng, s.n * s.k, 1.0 / std::sqrt(double(s.k)));
    kw.format = kWeightBf16;
    kw.bf16 = w.data();
    rw = ref::WeightRef::fromBf16(w.data(), s.n, s.k);
  }
  const std::string tag = std::to_string(s.n) + "x" + std::to_string(s.k) +
                          (s.mxfp4 ? " mxfp4" : " bf16");
  Vec xd = ref::fromBf16(x);

  // Plain bf16 out.
  auto out = ref::poisonedBf16(s.n);
  LinearParams p;
  p.x = x.data();
  p.w = kw;
  p.n = s.n;
  p.k = s.k;
  p.out = out.data();
  linearCpu(p);
  Vec acc = ref::matvec(rw, xd);
  expectOneRounding(out, ref::bf16Round(acc), "linear " + tag);

  // fp32 out, unrounded.
  auto outF = ref::poisonedFloats(s.n);
  p.out = nullptr;
  p.outF32 = outF.data();
  linearCpu(p);
  ref::FloatStats fs = ref::compareFloat(outF, acc);
  std::cout << "[linear f32 " << tag << "] " << fs.str() << "\n";
  EXPECT_LT(fs.relErr(), 1e-5) << fs.str();

  // Pre-norm + residual: R(R(W · rmsNorm(x)) + r).
  auto nw = ref::randomBf16Magnitude(rng, s.k, 0.5, 1.5);
  auto res = ref::randomBf16(rng, s.n, 2.0);
  out = ref::poisonedBf16(s.n);
  p.outF32 = nullptr;
  p.out = out.data();
  p.normWeight = nw.data();
  p.normEps = 1e-5f;
  p.residual = res.data();
  linearCpu(p);
  Vec want =
      ref::add(ref::linear(rw, ref::rmsNorm(xd, ref::fromBf16(nw), 1e-5)),
               ref::fromBf16(res));
  // Three roundings (norm, linear, add): a flip in the normed x moves y by
  // far less than an ulp, but the last two roundings can each flip once.
  double maxRef = 0;
  for (double v : want)
    maxRef = std::max(maxRef, std::fabs(v));
  ref::Bf16Stats st = ref::compareBf16(out, want, 1e-5 * maxRef);
  std::cout << "[linear prenorm+residual " << tag << "] " << st.str() << "\n";
  EXPECT_LE(st.maxUlp, 2) << st.str();
  EXPECT_LE(st.flipFraction(), 0.02) << st.str();
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearRef,
    ::testing::Values(LinearShape{37, 333, false},    // odd, not lane-aligned
                      LinearShape{1536, 7168, false}, // K3 q_a_proj
                      LinearShape{7168, 2048, false}, // K3 o_proj, cut in K
                      LinearShape{576, 7168, false},  // K3 kv_a_proj
                      LinearShape{96, 7168, false},   // K3 b_proj
                      LinearShape{3072, 3584, true},  // K3 expert w1
                      LinearShape{3584, 3072, true},  // K3 expert w2
                      LinearShape{40, 96, true}),
    [](const ::testing::TestParamInfo<LinearShape> &i) {
      return "N" + std::to_string(i.param.n) + "_K" +
             std::to_string(i.param.k) + (i.param.mxfp4 ? "_mxfp4" : "_bf16");
    });

TEST(LinearMultiRef, EveryEntryEqualsItsLinear) {
  // KDA's projection set at a cut K3 width: q, k, v, f_a, b, g of one x.
  Rng rng(77);
  const int64_t k = 7168;
  const int64_t ns[] = {1024, 1024, 1024, 128, 96, 1024};
  auto x = ref::randomBf16(rng, k, 1.0);
  auto nw = ref::randomBf16Magnitude(rng, k, 0.5, 1.5);
  Vec xn = ref::rmsNorm(ref::fromBf16(x), ref::fromBf16(nw), 1e-5);
  LinearMultiParams p;
  p.x = x.data();
  p.k = k;
  p.normWeight = nw.data();
  p.normEps = 1e-5f;
  p.count = 6;
  std::vector<std::vector<uint16_t>> ws, outs;
  for (int i = 0; i < 6; ++i) {
    ws.push_back(ref::randomBf16(rng, ns[i] * k, 0.02));
    outs.push_back(ref::poisonedBf16(ns[i]));
  }
  for (int i = 0; i < 6; ++i) {
    p.entries[i].w.format = kWeightBf16;
    p.entries[i].w.bf16 = ws[i].data();
    p.entries[i].n = ns[i];
    p.entries[i].out = outs[i].data();
  }
  linearMultiCpu(p);
  for (int i = 0; i < 6; ++i) {
    Vec want =
        ref::linear(ref::WeightRef::fromBf16(ws[i].data(), ns[i], k), xn);
    // The normed x is rounded inside: a flip there can add a second ulp.
    ref::Bf16Stats s = ref::compareBf16(outs[i], want);
    std::cout << "[linear_multi entry " << i << "] " << s.str() << "\n";
    EXPECT_LE(s.maxUlp, 2) << s.str();
    EXPECT_LE(s.flipFraction(), 0.02) << s.str();
  }
}

TEST(RmsNormRef, MatchesAtModelWidths) {
  Rng rng(5);
  struct Case {
    int64_t n;
    float eps;
  } cases[] = {
      {7168, 1e-5f}, {512, 1e-6f}, {1536, 1e-6f}, {3584, 1e-5f}, {100, 1e-5f}};
  for (const Case &c : cases) {
    auto x = ref::randomBf16(rng, c.n, 3.0);
    auto w = ref::randomBf16Magnitude(rng, c.n, 0.2, 2.0);
    auto out = ref::poisonedBf16(c.n);
    RmsNormParams p;
    p.x = x.data();
    p.w = w.data();
    p.out = out.data();
    p.n = c.n;
    p.eps = c.eps;
    rmsNormCpu(p);
    Vec want = ref::rmsNorm(ref::fromBf16(x), ref::fromBf16(w), c.eps);
    ref::Bf16Stats s = ref::compareBf16(out, want);
    std::cout << "[rms_norm " << c.n << "] " << s.str() << "\n";
    // A flip of the inner R(x·rsqrt) moves the product by one ulp of n,
    // which the outer rounding turns into at most 2 ulps of the output.
    EXPECT_LE(s.maxUlp, 2) << s.str();
    EXPECT_LE(s.flipFraction(), 0.01) << s.str();
  }
}

TEST(AttnResRef, MatchesWithSeveralBlocks) {
  Rng rng(21);
  struct Case {
    int64_t dim, blocks;
    bool extra;
  } cases[] = {{7168, 7, true},
               {7168, 8, false},
               {7168, 0, true},
               {256, 1, true},
               {333, 3, true}};
  for (const Case &c : cases) {
    auto blocks = ref::randomBf16(rng, (c.blocks + 1) * c.dim, 2.0);
    // Give each source its own scale so the α differ visibly.
    for (int64_t b = 0; b < c.blocks; ++b)
      for (int64_t d = 0; d < c.dim; ++d)
        blocks[b * c.dim + d] = ref::toBf16Bits(
            ref::fromBf16Bits(blocks[b * c.dim + d]) * (0.5 + 0.3 * b));
    auto extra = ref::randomBf16(rng, c.dim, 2.0);
    auto wn = ref::randomBf16Magnitude(rng, c.dim, 0.5, 1.5);
    auto wp = ref::randomBf16(rng, c.dim, 0.05);
    auto out = ref::poisonedBf16(c.dim);
    AttnResParams p;
    p.blocks = blocks.data();
    p.numBlocks = c.blocks;
    p.extra = c.extra ? extra.data() : nullptr;
    p.wNorm = wn.data();
    p.wProj = wp.data();
    p.eps = 1e-5f;
    p.dim = c.dim;
    p.out = out.data();
    attnResCpu(p);
    std::vector<Vec> src;
    for (int64_t b = 0; b < c.blocks; ++b)
      src.push_back(ref::fromBf16(blocks.data() + b * c.dim, c.dim));
    if (c.extra)
      src.push_back(ref::fromBf16(extra));
    Vec alpha;
    Vec want =
        ref::attnRes(src, ref::fromBf16(wn), ref::fromBf16(wp), 1e-5, &alpha);
    expectOneRounding(out, want,
                      "attn_res D=" + std::to_string(c.dim) +
                          " n=" + std::to_string(src.size()));
  }
}

TEST(EmbedRef, CopiesTheRowExactly) {
  Rng rng(1);
  const int64_t vocab = 300, dim = 7168;
  auto table = ref::randomBf16(rng, vocab * dim, 1.0);
  for (int64_t tok : {int64_t(0), int64_t(123), vocab - 1}) {
    auto out = ref::poisonedBf16(dim);
    EmbedParams p;
    p.table = table.data();
    p.vocab = vocab;
    p.dim = dim;
    p.token = tok;
    p.out = out.data();
    embedCpu(p);
    Vec want = ref::embed(table.data(), vocab, dim, tok);
    ref::Bf16Stats s = ref::compareBf16(out, want);
    EXPECT_EQ(s.exact, dim) << "token " << tok << ": " << s.str();
  }
}

TEST(ElementwiseRef, AddMulSigmoidGatedAct) {
  Rng rng(8);
  const int64_t n = 12288;
  auto a = ref::randomBf16(rng, n, 4.0), b = ref::randomBf16(rng, n, 4.0);
  Vec ad = ref::fromBf16(a), bd = ref::fromBf16(b);

  auto out = ref::poisonedBf16(n);
  AddParams ap;
  ap.a = a.data();
  ap.b = b.data();
  ap.out = out.data();
  ap.n = n;
  addCpu(ap);
  expectOneRounding(out, ref::add(ad, bd), "add");

  out = ref::poisonedBf16(n);
  MulSigmoidParams mp;
  mp.x = a.data();
  mp.gate = b.data();
  mp.out = out.data();
  mp.n = n;
  mulSigmoidCpu(mp);
  Vec want(n);
  for (int64_t i = 0; i < n; ++i)
    want[i] = ref::bf16Round(ad[i] * ref::sigmoid(bd[i]));
  expectOneRounding(out, want, "mul_sigmoid");

  // SiTU with and without the linear beta, SwiGLU; g, u spread widely so
  // both softcaps bend.
  auto g = ref::randomBf16(rng, n, 12.0), u = ref::randomBf16(rng, n, 60.0);
  struct Act {
    int32_t act;
    int32_t hasBeta2;
    const char *name;
  } acts[] = {{kActSiTU, 1, "situ"},
              {kActSiTU, 0, "situ-no-beta2"},
              {kActSwiGLU, 0, "swiglu"}};
  for (const Act &ac : acts) {
    out = ref::poisonedBf16(n);
    GatedActParams gp;
    gp.g = g.data();
    gp.u = u.data();
    gp.out = out.data();
    gp.n = n;
    gp.activation = ac.act;
    gp.beta1 = 4.0f;
    gp.hasBeta2 = ac.hasBeta2;
    gp.beta2 = 25.0f;
    gatedActCpu(gp);
    ref::ActSpec spec;
    spec.act = ac.act == kActSiTU ? Activation::SiTU : Activation::SiLU;
    spec.beta1 = 4.0;
    spec.hasBeta2 = ac.hasBeta2;
    spec.beta2 = 25.0;
    expectOneRounding(
        out, ref::activateRounded(spec, ref::fromBf16(g), ref::fromBf16(u)),
        std::string("gated_act ") + ac.name);
  }
}

TEST(ArgmaxRef, LowestIdOnTiesAndSkipsNaN) {
  Rng rng(4);
  std::vector<float> logits = ref::randomFloats(rng, 163840, -10.0, 10.0);
  logits[5000] = 50.0f;
  logits[90000] = 50.0f; // tie: the lower id wins
  logits[100] = NAN;
  int64_t id = -1;
  ArgmaxParams p;
  p.logits = logits.data();
  p.n = static_cast<int64_t>(logits.size());
  p.outId = &id;
  argmaxCpu(p);
  EXPECT_EQ(id, 5000);
  Vec d(logits.begin(), logits.end());
  d[100] = -1e300; // the reference's argmax has no NaN rule
  EXPECT_EQ(ref::argmax(d), 5000);
}

} // namespace
