//===- fusion_test.cpp - Fused CPU kernels equal their fine chains --------===//
//
// Every fused entry point must round at the same points as the chain of fine
// entry points it replaces (NUMERICS.md), so the two give the same bits. Also
// checks that an MXFP4 projection equals a bf16 one on the dequantised
// weights. Inputs are random and non-zero.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"

#include "kernels/attnres/AttnResCpu.h"
#include "kernels/common/MXFP4.h"
#include "kernels/common/VectorRef.h"
#include "kernels/elementwise/ElementwiseCpu.h"
#include "kernels/gemv/GemvCpu.h"
#include "kernels/kda/KdaCpu.h"
#include "kernels/mla/MlaCpu.h"
#include "kernels/moe/MoeCpu.h"
#include "kernels/norm/NormCpu.h"

#include <algorithm>
#include <cmath>

using namespace k3;
using namespace k3::test;

namespace {

WeightRef bf16Ref(const std::vector<uint16_t> &w) {
  WeightRef r;
  r.format = kWeightBf16;
  r.bf16 = w.data();
  return r;
}

/// A random MXFP4 matrix and the same values as a bf16 matrix.
struct Mxfp4Matrix {
  std::vector<uint8_t> packed, scale;
  std::vector<uint16_t> dequant; ///< bf16 [rows, cols], exact
  WeightRef ref() const {
    WeightRef r;
    r.format = kWeightMxfp4;
    r.packed = packed.data();
    r.scale = scale.data();
    return r;
  }
};

/// Scales stay in the normal range (2^-10 .. 2^-4) so bf16 holds every
/// dequantised value exactly.
Mxfp4Matrix randomMxfp4(Rng &rng, int64_t rows, int64_t cols) {
  Mxfp4Matrix m;
  m.packed = randomBytes(rng, rows * cols / 2, 0, 255);
  m.scale = randomBytes(rng, rows * cols / 32, 117, 123);
  m.dequant.resize(rows * cols);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    dequantMxfp4Row(m.packed.data(), m.scale.data(), cols, r, row.data());
    for (int64_t c = 0; c < cols; ++c) {
      m.dequant[r * cols + c] = floatToBf16(row[c]);
      EXPECT_EQ(bf16ToFloat(m.dequant[r * cols + c]), row[c]);
    }
  }
  return m;
}

} // namespace

TEST(LinearFusion, PreNormEqualsRmsNormThenLinear) {
  Rng rng(1);
  const int64_t n = 37, k = 96;
  auto x = randomBf16(rng, k, 3.0f);
  auto nw = randomBf16(rng, k, 1.5f);
  auto w = randomBf16(rng, n * k, 0.2f);
  Mxfp4Matrix mx = randomMxfp4(rng, n, k);

  for (WeightRef ref : {bf16Ref(w), mx.ref()}) {
    std::vector<uint16_t> normed(k), chain(n), fused(n);
    RmsNormParams np;
    np.x = x.data();
    np.w = nw.data();
    np.out = normed.data();
    np.n = k;
    np.eps = 1e-5f;
    rmsNormCpu(np);
    LinearParams lp;
    lp.x = normed.data();
    lp.w = ref;
    lp.n = n;
    lp.k = k;
    lp.out = chain.data();
    linearCpu(lp);

    lp.x = x.data();
    lp.normWeight = nw.data();
    lp.normEps = 1e-5f;
    lp.out = fused.data();
    linearCpu(lp);
    EXPECT_TRUE(sameBits(chain, fused));

    // The fp32 output is the unrounded value of the same sums.
    std::vector<float> f32(n);
    lp.out = nullptr;
    lp.outF32 = f32.data();
    linearCpu(lp);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(floatToBf16(f32[i]), fused[i]) << i;
  }
}

TEST(LinearFusion, ResidualEpilogueEqualsAdd) {
  Rng rng(2);
  const int64_t n = 64, k = 50;
  auto x = randomBf16(rng, k, 1.0f);
  auto w = randomBf16(rng, n * k, 0.3f);
  auto res = randomBf16(rng, n, 2.0f);
  std::vector<uint16_t> y(n), chain(n), fused(n);
  LinearParams lp;
  lp.x = x.data();
  lp.w = bf16Ref(w);
  lp.n = n;
  lp.k = k;
  lp.out = y.data();
  linearCpu(lp);
  AddParams ap;
  ap.a = y.data();
  ap.b = res.data();
  ap.out = chain.data();
  ap.n = n;
  addCpu(ap);

  lp.residual = res.data();
  lp.out = fused.data();
  linearCpu(lp);
  EXPECT_TRUE(sameBits(chain, fused));

  // In place: residual and out the same buffer.
  std::vector<uint16_t> inPlace = res;
  lp.residual = inPlace.data();
  lp.out = inPlace.data();
  linearCpu(lp);
  EXPECT_TRUE(sameBits(chain, inPlace));
}

TEST(LinearFusion, MultiEqualsSeparateLinears) {
  Rng rng(3);
  const int64_t k = 64;
  const int64_t ns[3] = {16, 5, 40};
  auto x = randomBf16(rng, k, 2.0f);
  auto nw = randomBf16(rng, k, 1.0f);
  std::vector<std::vector<uint16_t>> ws, multi(3), single(3);
  LinearMultiParams mp;
  mp.x = x.data();
  mp.k = k;
  mp.normWeight = nw.data();
  mp.normEps = 1e-6f;
  mp.count = 3;
  for (int i = 0; i < 3; ++i) {
    ws.push_back(randomBf16(rng, ns[i] * k, 0.25f));
    multi[i].resize(ns[i]);
    single[i].resize(ns[i]);
  }
  for (int i = 0; i < 3; ++i) {
    mp.entries[i].w = bf16Ref(ws[i]);
    mp.entries[i].n = ns[i];
    mp.entries[i].out = multi[i].data();
    LinearParams lp;
    lp.x = x.data();
    lp.w = bf16Ref(ws[i]);
    lp.n = ns[i];
    lp.k = k;
    lp.normWeight = nw.data();
    lp.normEps = 1e-6f;
    lp.out = single[i].data();
    linearCpu(lp);
  }
  linearMultiCpu(mp);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(sameBits(single[i], multi[i])) << "entry " << i;
}

TEST(LinearFusion, Mxfp4EqualsBf16OnDequantisedWeights) {
  Rng rng(4);
  const int64_t n = 48, k = 160;
  auto x = randomBf16(rng, k, 2.0f);
  Mxfp4Matrix mx = randomMxfp4(rng, n, k);
  std::vector<float> a(n), b(n);
  LinearParams lp;
  lp.x = x.data();
  lp.n = n;
  lp.k = k;
  lp.w = mx.ref();
  lp.outF32 = a.data();
  linearCpu(lp);
  lp.w = bf16Ref(mx.dequant);
  lp.outF32 = b.data();
  linearCpu(lp);
  EXPECT_TRUE(sameBits(a, b));
  bool anyNonZero = false;
  for (float v : a)
    anyNonZero |= v != 0.0f;
  EXPECT_TRUE(anyNonZero);
}

namespace {
struct KdaCase {
  int64_t H = 3, d = 16, W = 4;
  int64_t C() const { return H * d; }
};

/// The conv filters and o_norm of a KDA test layer, bf16 or f32 (values
/// that bf16 cannot hold, as the published K3 stores them).
struct KdaSmallWeights {
  std::vector<uint16_t> bf16[4];
  std::vector<float> f32[4];
  VectorRef q, k, v, norm;
  KdaSmallWeights(Rng &rng, int64_t C, int64_t W, int64_t d, bool f32Weights) {
    const int64_t n[4] = {C * W, C * W, C * W, d};
    const float scale[4] = {0.6f, 0.6f, 0.6f, 1.2f};
    VectorRef refs[4];
    for (int i = 0; i < 4; ++i) {
      if (f32Weights) {
        f32[i] = randomF32(rng, n[i], scale[i]);
        refs[i] = f32Vector(f32[i].data());
      } else {
        bf16[i] = randomBf16(rng, n[i], scale[i]);
        refs[i] = bf16Vector(bf16[i].data());
      }
    }
    q = refs[0], k = refs[1], v = refs[2], norm = refs[3];
  }
};

/// The gated delta-rule step as `--fusion=none` launches it:
/// kda_l2norm(q, 1/sqrt d), kda_l2norm(k, 1), kda_gate, sigmoid(betaLogit),
/// kda_step; the fp32 intermediates are left in qn, kn, g and b.
struct KdaStepChain {
  std::vector<float> qn, kn, g, b;
  void run(const uint16_t *q, const uint16_t *k, const uint16_t *v,
           const uint16_t *f, const uint16_t *betaLogit, const float *dtBias,
           const float *aLog, float *state, uint16_t *out, int64_t H,
           int64_t d, bool lowerBound) {
    const int64_t C = H * d;
    qn.assign(C, 0.f), kn.assign(C, 0.f), g.assign(C, 0.f), b.assign(H, 0.f);
    KdaL2NormParams lp;
    lp.n = C, lp.headDim = d;
    lp.x = q, lp.out = qn.data(), lp.scale = kdaQueryScale(d);
    kdaL2NormStepCpu(lp);
    lp.x = k, lp.out = kn.data(), lp.scale = 1.0f;
    kdaL2NormStepCpu(lp);
    KdaGateParams gp;
    gp.f = f, gp.dtBias = dtBias, gp.aLog = aLog;
    gp.out = g.data(), gp.numHeads = H, gp.headDim = d;
    gp.hasLowerBound = lowerBound, gp.lowerBound = -5.0f;
    kdaGateCpu(gp);
    SigmoidParams bp;
    bp.x = betaLogit, bp.out = b.data(), bp.n = H;
    sigmoidCpu(bp);
    KdaStepParams sp;
    sp.q = qn.data(), sp.k = kn.data(), sp.v = v, sp.g = g.data();
    sp.beta = b.data(), sp.state = state, sp.out = out;
    sp.numHeads = H, sp.headDim = d;
    kdaStepCpu(sp);
  }
};

void runKdaFusion(bool lowerBound, uint64_t seed, bool f32Weights = false) {
  Rng rng(seed);
  KdaCase kc;
  const int64_t C = kc.C(), H = kc.H, d = kc.d, W = kc.W;
  KdaSmallWeights sw(rng, C, W, d, f32Weights);
  const VectorRef convQ = sw.q, convK = sw.k, convV = sw.v, onw = sw.norm;
  auto dtBias = randomF32(rng, C, 1.0f);
  auto aLog = randomF32(rng, H, 1.0f);

  // Two copies of every state: one for the chain, one for the fused call.
  std::vector<float> cqA(C * (W - 1), 0.f), ckA = cqA, cvA = cqA;
  std::vector<float> cqB = cqA, ckB = cqA, cvB = cqA;
  std::vector<float> sA(H * d * d, 0.f), sB = sA;

  for (int t = 0; t < 6; ++t) {
    auto uq = randomBf16(rng, C, 2.0f), uk = randomBf16(rng, C, 2.0f),
         uv = randomBf16(rng, C, 2.0f), f = randomBf16(rng, C, 2.0f),
         beta = randomBf16(rng, H, 3.0f), gt = randomBf16(rng, C, 3.0f);

    // Chain of fine ops.
    std::vector<uint16_t> q(C), k(C), v(C), o(C), chain(C);
    KdaConvParams cp;
    cp.channels = C;
    cp.width = static_cast<int32_t>(W);
    cp.u = uq.data(), cp.weight = convQ, cp.state = cqA.data(),
    cp.out = q.data();
    kdaConvCpu(cp);
    cp.u = uk.data(), cp.weight = convK, cp.state = ckA.data(),
    cp.out = k.data();
    kdaConvCpu(cp);
    cp.u = uv.data(), cp.weight = convV, cp.state = cvA.data(),
    cp.out = v.data();
    kdaConvCpu(cp);
    KdaStepChain step;
    step.run(q.data(), k.data(), v.data(), f.data(), beta.data(),
             dtBias.data(), aLog.data(), sA.data(), o.data(), H, d,
             lowerBound);
    KdaGatedNormParams gp;
    gp.o = o.data(), gp.gate = gt.data(), gp.weight = onw,
    gp.out = chain.data();
    gp.numHeads = H, gp.headDim = d, gp.eps = 1e-5f;
    kdaGatedNormCpu(gp);

    // Fused.
    std::vector<uint16_t> fused(C);
    KdaDecodeParams dp;
    dp.uq = uq.data(), dp.uk = uk.data(), dp.uv = uv.data();
    dp.convQ = convQ, dp.convK = convK, dp.convV = convV;
    dp.convStateQ = cqB.data(), dp.convStateK = ckB.data(),
    dp.convStateV = cvB.data();
    dp.f = f.data(), dp.betaLogit = beta.data(), dp.dtBias = dtBias.data(),
    dp.aLog = aLog.data(), dp.state = sB.data(), dp.gate = gt.data(),
    dp.normWeight = onw, dp.out = fused.data();
    dp.numHeads = H, dp.headDim = d, dp.convWidth = static_cast<int32_t>(W);
    dp.hasLowerBound = lowerBound, dp.lowerBound = -5.0f, dp.normEps = 1e-5f;
    kdaDecodeCpu(dp);

    EXPECT_TRUE(sameBits(chain, fused)) << "token " << t;
    EXPECT_TRUE(sameBits(sA, sB)) << "token " << t;
    EXPECT_TRUE(sameBits(cqA, cqB)) << "token " << t;
    EXPECT_TRUE(sameBits(cvA, cvB)) << "token " << t;
  }
  bool anyNonZero = false;
  for (float s : sA)
    anyNonZero |= s != 0.0f && std::isfinite(s);
  EXPECT_TRUE(anyNonZero);
}
} // namespace

TEST(KdaFusion, DecodeEqualsChainLowerBoundGate) { runKdaFusion(true, 5); }
TEST(KdaFusion, DecodeEqualsChainSoftplusGate) { runKdaFusion(false, 6); }
// The published K3 stores the conv filters and o_norm F32.
TEST(KdaFusion, DecodeEqualsChainF32Weights) { runKdaFusion(true, 7, true); }
TEST(KdaFusion, DecodeEqualsChainF32WeightsSoftplusGate) {
  runKdaFusion(false, 8, true);
}

TEST(KdaFusion, Bf16WeightsEqualTheirF32Widening) {
  // A bf16 filter / o_norm and the same values stored f32 (exact widening)
  // give the same bits: the f32 path reads as stored, the bf16 path widens,
  // and the math after is one and the same.
  Rng rng(9);
  KdaCase kc;
  const int64_t C = kc.C(), H = kc.H, d = kc.d, W = kc.W;
  KdaSmallWeights sw(rng, C, W, d, /*f32Weights=*/false);
  std::vector<float> wide[4];
  for (int i = 0; i < 4; ++i)
    for (uint16_t b : sw.bf16[i])
      wide[i].push_back(bf16ToFloat(b));
  auto dtBias = randomF32(rng, C, 1.0f), aLog = randomF32(rng, H, 1.0f);
  std::vector<float> cqA(C * (W - 1), 0.f), ckA = cqA, cvA = cqA;
  std::vector<float> cqB = cqA, ckB = cqA, cvB = cqA;
  std::vector<float> sA(H * d * d, 0.f), sB = sA;
  for (int t = 0; t < 4; ++t) {
    auto uq = randomBf16(rng, C, 2.0f), uk = randomBf16(rng, C, 2.0f),
         uv = randomBf16(rng, C, 2.0f), f = randomBf16(rng, C, 2.0f),
         beta = randomBf16(rng, H, 3.0f), gt = randomBf16(rng, C, 3.0f);
    std::vector<uint16_t> outA(C), outB(C);
    KdaDecodeParams dp;
    dp.uq = uq.data(), dp.uk = uk.data(), dp.uv = uv.data();
    dp.f = f.data(), dp.betaLogit = beta.data(), dp.dtBias = dtBias.data(),
    dp.aLog = aLog.data(), dp.gate = gt.data();
    dp.numHeads = H, dp.headDim = d, dp.convWidth = static_cast<int32_t>(W);
    dp.hasLowerBound = 1, dp.lowerBound = -5.0f, dp.normEps = 1e-5f;
    dp.convQ = sw.q, dp.convK = sw.k, dp.convV = sw.v, dp.normWeight = sw.norm;
    dp.convStateQ = cqA.data(), dp.convStateK = ckA.data(),
    dp.convStateV = cvA.data(), dp.state = sA.data(), dp.out = outA.data();
    kdaDecodeCpu(dp);
    dp.convQ = f32Vector(wide[0].data()), dp.convK = f32Vector(wide[1].data()),
    dp.convV = f32Vector(wide[2].data()),
    dp.normWeight = f32Vector(wide[3].data());
    dp.convStateQ = cqB.data(), dp.convStateK = ckB.data(),
    dp.convStateV = cvB.data(), dp.state = sB.data(), dp.out = outB.data();
    kdaDecodeCpu(dp);
    EXPECT_TRUE(sameBits(outA, outB)) << "token " << t;
    EXPECT_TRUE(sameBits(sA, sB)) << "token " << t;
  }
}

namespace {
/// The `--fusion=none` step's intermediates are what they claim over
/// several tokens: unit-norm k, g below zero (above the lower bound when it
/// is set), and a state that moves.
void runKdaSplit(bool lowerBound, uint64_t seed) {
  Rng rng(seed);
  const int64_t H = 3, d = 24, C = H * d;
  auto dtBias = randomF32(rng, C, 1.0f);
  auto aLog = randomF32(rng, H, 1.0f);
  std::vector<float> state(H * d * d, 0.f);
  for (int t = 0; t < 5; ++t) {
    auto q = randomBf16(rng, C, 2.0f), k = randomBf16(rng, C, 2.0f),
         v = randomBf16(rng, C, 2.0f), f = randomBf16(rng, C, 2.0f),
         beta = randomBf16(rng, H, 3.0f);
    std::vector<uint16_t> out(C);
    KdaStepChain step;
    step.run(q.data(), k.data(), v.data(), f.data(), beta.data(),
             dtBias.data(), aLog.data(), state.data(), out.data(), H, d,
             lowerBound);
    for (int64_t h = 0; h < H; ++h) {
      float kk = 0.0f;
      for (int64_t i = 0; i < d; ++i)
        kk += step.kn[h * d + i] * step.kn[h * d + i];
      EXPECT_NEAR(kk, 1.0f, 1e-4f) << "token " << t << " head " << h;
    }
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_LT(step.g[c], 0.0f) << c;
      if (lowerBound) {
        EXPECT_GT(step.g[c], -5.0f) << c;
      }
    }
  }
  bool anyNonZero = false;
  for (float s : state)
    anyNonZero |= s != 0.0f && std::isfinite(s);
  EXPECT_TRUE(anyNonZero);
}
} // namespace

TEST(KdaFusion, SplitIntermediatesLowerBoundGate) { runKdaSplit(true, 12); }
TEST(KdaFusion, SplitIntermediatesSoftplusGate) { runKdaSplit(false, 13); }

TEST(AttnResFusion, NormEqualsAttnResThenRmsNorm) {
  Rng rng(14);
  const int64_t D = 72, maxBlocks = 6;
  auto blocks = randomBf16(rng, maxBlocks * D, 2.0f);
  auto extra = randomBf16(rng, D, 3.0f);
  auto wNorm = randomBf16(rng, D, 1.0f);
  auto wProj = randomBf16(rng, D, 0.5f);
  auto nw = randomBf16(rng, D, 1.5f);
  for (int64_t nb : {int64_t(1), int64_t(4)}) {
    for (bool withExtra : {false, true}) {
      std::vector<uint16_t> mix(D), chain(D), fused(D);
      AttnResParams ap;
      ap.blocks = blocks.data(), ap.numBlocks = nb;
      ap.extra = withExtra ? extra.data() : nullptr;
      ap.wNorm = wNorm.data(), ap.wProj = wProj.data(), ap.eps = 1e-5f;
      ap.dim = D, ap.out = mix.data();
      attnResCpu(ap);
      RmsNormParams np;
      np.x = mix.data(), np.w = nw.data(), np.out = chain.data(), np.n = D;
      np.eps = 1e-6f;
      rmsNormCpu(np);

      ap.normWeight = nw.data(), ap.normEps = 1e-6f, ap.out = fused.data();
      attnResCpu(ap);
      EXPECT_TRUE(sameBits(chain, fused)) << nb << " " << withExtra;
      EXPECT_FALSE(sameBits(mix, fused)) << nb << " " << withExtra;
    }
  }
}

TEST(AttnResCommit, CopiesRow) {
  Rng rng(15);
  const int64_t D = 40, maxBlocks = 4;
  auto blocks = randomBf16(rng, maxBlocks * D, 1.0f);
  auto src = randomBf16(rng, D, 1.0f);
  std::vector<uint16_t> expect = blocks;
  std::copy(src.begin(), src.end(), expect.begin() + 2 * D);
  AttnResCommitParams cp;
  cp.blocks = blocks.data(), cp.src = src.data(), cp.index = 2, cp.dim = D;
  attnResCommitCpu(cp);
  EXPECT_TRUE(sameBits(expect, blocks));
  // A row onto itself is a no-op.
  cp.src = blocks.data() + 2 * D;
  attnResCommitCpu(cp);
  EXPECT_TRUE(sameBits(expect, blocks));
}

TEST(MlaFusion, GateEqualsMulSigmoid) {
  Rng rng(7);
  const int64_t N = 3, P = 16, R = 8, V = 12, L = 32, T = 5;
  auto q = randomBf16(rng, N * (P + R), 2.0f);
  auto kvB = randomBf16(rng, N * (P + V) * L, 0.3f);
  auto cache = randomBf16(rng, 8 * (L + R), 1.5f); // maxSeq 8, T used
  auto gate = randomBf16(rng, N * V, 3.0f);
  std::vector<uint16_t> o(N * V), chain(N * V), fused(N * V);
  MlaAttendParams ap;
  ap.q = q.data(), ap.kvB = kvB.data(), ap.cache = cache.data(), ap.length = T;
  ap.numHeads = N, ap.nopeDim = P, ap.ropeDim = R, ap.vDim = V,
  ap.kvLoraRank = L;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(P + R));
  ap.out = o.data();
  mlaAttendCpu(ap);
  MulSigmoidParams mp;
  mp.x = o.data(), mp.gate = gate.data(), mp.out = chain.data(), mp.n = N * V;
  mulSigmoidCpu(mp);
  ap.gate = gate.data();
  ap.out = fused.data();
  mlaAttendCpu(ap);
  EXPECT_TRUE(sameBits(chain, fused));
}

namespace {
/// gated_mlp (pre-norm + residual) against rms_norm, linear ×2, gated_act,
/// linear, add.
void runGatedMlpFusion(int32_t act, bool mxfp4, uint64_t seed) {
  Rng rng(seed);
  const int64_t in = 64, inter = 96, out = 64;
  auto x = randomBf16(rng, in, 2.0f);
  auto nw = randomBf16(rng, in, 1.0f);
  auto res = randomBf16(rng, out, 1.0f);
  Mxfp4Matrix m1 = randomMxfp4(rng, inter, in),
              m3 = randomMxfp4(rng, inter, in),
              m2 = randomMxfp4(rng, out, inter);
  auto b1 = randomBf16(rng, inter * in, 0.3f),
       b3 = randomBf16(rng, inter * in, 0.3f),
       b2 = randomBf16(rng, out * inter, 0.2f);
  WeightRef w1 = mxfp4 ? m1.ref() : bf16Ref(b1);
  WeightRef w3 = mxfp4 ? m3.ref() : bf16Ref(b3);
  WeightRef w2 = mxfp4 ? m2.ref() : bf16Ref(b2);

  std::vector<uint16_t> xn(in), g(inter), u(inter), a(inter), y(out),
      chain(out), fused(out);
  RmsNormParams np;
  np.x = x.data(), np.w = nw.data(), np.out = xn.data(), np.n = in;
  rmsNormCpu(np);
  LinearParams lp;
  lp.x = xn.data(), lp.k = in, lp.n = inter;
  lp.w = w1, lp.out = g.data();
  linearCpu(lp);
  lp.w = w3, lp.out = u.data();
  linearCpu(lp);
  GatedActParams ga;
  ga.g = g.data(), ga.u = u.data(), ga.out = a.data(), ga.n = inter;
  ga.activation = act;
  gatedActCpu(ga);
  lp.x = a.data(), lp.k = inter, lp.n = out, lp.w = w2, lp.out = y.data();
  linearCpu(lp);
  AddParams ad;
  ad.a = y.data(), ad.b = res.data(), ad.out = chain.data(), ad.n = out;
  addCpu(ad);

  GatedMlpParams gp;
  gp.x = x.data(), gp.normWeight = nw.data();
  gp.w1 = w1, gp.w3 = w3, gp.w2 = w2;
  gp.inDim = in, gp.interDim = inter, gp.outDim = out;
  gp.activation = act;
  gp.residual = res.data(), gp.out = fused.data();
  gatedMlpCpu(gp);
  EXPECT_TRUE(sameBits(chain, fused));
}
} // namespace

TEST(MlpFusion, SiTUBf16) { runGatedMlpFusion(kActSiTU, false, 8); }
TEST(MlpFusion, SiTUMxfp4) { runGatedMlpFusion(kActSiTU, true, 9); }
TEST(MlpFusion, SwiGLUBf16) { runGatedMlpFusion(kActSwiGLU, false, 10); }

TEST(MoeFusion, ExpertsEqualWeightedSumOfGatedMlps) {
  Rng rng(11);
  const int64_t E = 6, dim = 64, inter = 32;
  const int32_t topK = 3;
  std::vector<Mxfp4Matrix> m1, m3, m2;
  std::vector<WeightRef> w1, w3, w2;
  for (int64_t e = 0; e < E; ++e) {
    m1.push_back(randomMxfp4(rng, inter, dim));
    m3.push_back(randomMxfp4(rng, inter, dim));
    m2.push_back(randomMxfp4(rng, dim, inter));
  }
  for (int64_t e = 0; e < E; ++e) {
    w1.push_back(m1[e].ref());
    w3.push_back(m3[e].ref());
    w2.push_back(m2[e].ref());
  }
  auto z = randomBf16(rng, dim, 2.0f);
  std::vector<int32_t> ids = {4, 0, 2};
  std::vector<float> weights = {0.5f, 0.3125f, 0.1875f};

  std::vector<float> acc(dim, 0.0f);
  for (int32_t k = 0; k < topK; ++k) {
    std::vector<uint16_t> y(dim);
    GatedMlpParams gp;
    gp.x = z.data();
    gp.w1 = w1[ids[k]], gp.w3 = w3[ids[k]], gp.w2 = w2[ids[k]];
    gp.inDim = dim, gp.interDim = inter, gp.outDim = dim;
    gp.out = y.data();
    gatedMlpCpu(gp);
    for (int64_t i = 0; i < dim; ++i)
      acc[i] += weights[k] * bf16ToFloat(y[i]);
  }
  std::vector<uint16_t> expect(dim), got(dim);
  for (int64_t i = 0; i < dim; ++i)
    expect[i] = floatToBf16(acc[i]);

  MoeExpertsParams ep;
  ep.x = z.data(), ep.ids = ids.data(), ep.weights = weights.data();
  ep.topK = topK, ep.numExperts = E;
  ep.w1 = w1.data(), ep.w3 = w3.data(), ep.w2 = w2.data();
  ep.dim = dim, ep.interDim = inter, ep.out = got.data();
  moeExpertsCpu(ep);
  EXPECT_TRUE(sameBits(expect, got));
}

/// k3.moe_ffn's one expert launch (norm, routed mix, shared expert, residual)
/// against the seven-op chain it replaces, on random bf16 weights: the same
/// bits. The same launch without its residual must differ (the check can
/// fail).
TEST(MoeFusion, FfnEqualsNormExpertsSharedExpertAndResidual) {
  Rng rng(21);
  const int64_t E = 5, dim = 64, inter = 32, sharedInter = 48;
  const int32_t topK = 2;
  const float eps = 1e-5f;
  std::vector<std::vector<uint16_t>> m1, m3, m2;
  std::vector<WeightRef> w1, w3, w2;
  for (int64_t e = 0; e < E; ++e) {
    m1.push_back(randomBf16(rng, inter * dim, 0.2f));
    m3.push_back(randomBf16(rng, inter * dim, 0.2f));
    m2.push_back(randomBf16(rng, dim * inter, 0.2f));
  }
  for (int64_t e = 0; e < E; ++e) {
    w1.push_back(bf16Ref(m1[e]));
    w3.push_back(bf16Ref(m3[e]));
    w2.push_back(bf16Ref(m2[e]));
  }
  auto s1 = randomBf16(rng, sharedInter * dim, 0.2f);
  auto s3 = randomBf16(rng, sharedInter * dim, 0.2f);
  auto s2 = randomBf16(rng, dim * sharedInter, 0.2f);
  auto h = randomBf16(rng, dim, 3.0f);
  auto normW = randomBf16(rng, dim, 1.0f);
  std::vector<int32_t> ids = {3, 1};
  std::vector<float> weights = {0.625f, 1.375f};

  // The chain: rms_norm, moe_experts, the shared gated MLP with the routed
  // mix as its residual (linear's epilogue), then the layer's add.
  std::vector<uint16_t> n(dim), routed(dim), t(dim), chain(dim);
  RmsNormParams np;
  np.x = h.data(), np.w = normW.data(), np.out = n.data(), np.n = dim;
  np.eps = eps;
  rmsNormCpu(np);
  MoeExpertsParams ep;
  ep.x = n.data(), ep.ids = ids.data(), ep.weights = weights.data();
  ep.topK = topK, ep.numExperts = E;
  ep.w1 = w1.data(), ep.w3 = w3.data(), ep.w2 = w2.data();
  ep.dim = dim, ep.interDim = inter, ep.activation = kActSwiGLU;
  ep.out = routed.data();
  moeExpertsCpu(ep);
  GatedMlpParams gp;
  gp.x = n.data(), gp.w1 = bf16Ref(s1), gp.w3 = bf16Ref(s3), gp.w2 = bf16Ref(s2);
  gp.inDim = dim, gp.interDim = sharedInter, gp.outDim = dim;
  gp.activation = kActSwiGLU, gp.residual = routed.data(), gp.out = t.data();
  gatedMlpCpu(gp);
  AddParams ap;
  ap.a = h.data(), ap.b = t.data(), ap.out = chain.data(), ap.n = dim;
  addCpu(ap);

  std::vector<uint16_t> fused(dim), noResidual(dim);
  MoeExpertsParams fp = ep;
  fp.x = h.data(), fp.normWeight = normW.data(), fp.normEps = eps;
  fp.sharedInterDim = sharedInter;
  fp.sharedW1 = bf16Ref(s1), fp.sharedW3 = bf16Ref(s3), fp.sharedW2 = bf16Ref(s2);
  fp.residual = h.data(), fp.out = fused.data();
  moeExpertsCpu(fp);
  EXPECT_TRUE(sameBits(chain, fused));
  fp.residual = nullptr, fp.out = noResidual.data();
  moeExpertsCpu(fp);
  EXPECT_FALSE(sameBits(chain, noResidual));
  EXPECT_TRUE(sameBits(t, noResidual)); // without the add: the shared sum
}

/// The router with its input norm folded in ranks and weighs exactly as
/// rms_norm then the router.
TEST(MoeFusion, RouterPreNormEqualsRmsNormThenRouter) {
  Rng rng(22);
  const int64_t E = 16, dim = 96;
  const int32_t topK = 4;
  auto gate = randomBf16(rng, E * dim, 0.3f);
  auto bias = randomF32(rng, E, 0.05f);
  auto h = randomBf16(rng, dim, 4.0f);
  auto normW = randomBf16(rng, dim, 1.0f);
  std::vector<uint16_t> n(dim);
  RmsNormParams np;
  np.x = h.data(), np.w = normW.data(), np.out = n.data(), np.n = dim;
  rmsNormCpu(np);
  std::vector<int32_t> ids0(topK), ids1(topK);
  std::vector<float> w0(topK), w1(topK);
  RouterParams rp;
  rp.h = n.data(), rp.gate = gate.data(), rp.bias = bias.data();
  rp.numExperts = E, rp.dim = dim, rp.topK = topK, rp.scaling = 2.5f;
  rp.outIds = ids0.data(), rp.outWeights = w0.data();
  routerCpu(rp);
  rp.h = h.data(), rp.normWeight = normW.data(), rp.normEps = np.eps;
  rp.outIds = ids1.data(), rp.outWeights = w1.data();
  routerCpu(rp);
  EXPECT_EQ(ids0, ids1);
  EXPECT_TRUE(sameBits(w0, w1));
}
