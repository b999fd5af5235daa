//===- smoke_test.cpp - Small closed-form checks of the CPU kernels -------===//
//
// Rules that are easy to state exactly (router ranking and ties, argmax ties,
// the conv window, the first KDA step from a zero state, one-row attention,
// the split of a long cache's attention between its two launches,
// AttnRes over identical sources), plus one run of the heaviest ops at real
// K3 widths to keep their cost in check.
//
//===----------------------------------------------------------------------===//
#include "KernelTestUtil.h"

#include "kernels/attnres/AttnResCpu.h"
#include "kernels/common/CpuMath.h"
#include "kernels/common/VectorRef.h"
#include "kernels/embed/EmbedCpu.h"
#include "kernels/gemv/GemvCpu.h"
#include "kernels/head/HeadCpu.h"
#include "kernels/kda/KdaCpu.h"
#include "kernels/mla/MlaCpu.h"
#include "kernels/moe/MoeCpu.h"

#include <chrono>
#include <cmath>
#include <limits>

using namespace k3;
using namespace k3::test;

namespace {
/// Router over `E` experts whose gate rows are given; returns ids, weights.
void route(const std::vector<uint16_t> &gate, const std::vector<float> &bias,
           const std::vector<uint16_t> &h, int64_t E, int32_t k, bool renorm,
           float scaling, std::vector<int32_t> &ids, std::vector<float> &w) {
  ids.assign(k, -1);
  w.assign(k, 0.0f);
  RouterParams p;
  p.h = h.data();
  p.gate = gate.data();
  p.bias = bias.empty() ? nullptr : bias.data();
  p.numExperts = E;
  p.dim = static_cast<int64_t>(h.size());
  p.topK = k;
  p.renormalize = renorm;
  p.scaling = scaling;
  p.outIds = ids.data();
  p.outWeights = w.data();
  routerCpu(p);
}
} // namespace

TEST(Router, TiesGoToTheLowerIndexAndWeightsAreRenormalised) {
  Rng rng(21);
  const int64_t D = 32, E = 8;
  auto h = randomBf16(rng, D, 1.0f);
  auto rowA = randomBf16(rng, D, 0.5f), rowB = randomBf16(rng, D, 0.5f);
  // Experts 1, 3, 6 share row A; the others share row B.
  std::vector<uint16_t> gate;
  for (int64_t e = 0; e < E; ++e) {
    const auto &row = (e == 1 || e == 3 || e == 6) ? rowA : rowB;
    gate.insert(gate.end(), row.begin(), row.end());
  }
  std::vector<float> sig(2);
  for (int i = 0; i < 2; ++i) {
    std::vector<float> hf(D);
    cpu::widen(h.data(), D, hf.data());
    sig[i] = cpu::sigmoid(cpu::dotBf16((i ? rowB : rowA).data(), hf.data(), D));
  }
  ASSERT_NE(sig[0], sig[1]);
  const bool aWins = sig[0] > sig[1];

  std::vector<int32_t> ids;
  std::vector<float> w;
  route(gate, {}, h, E, 2, true, 2.5f, ids, w);
  if (aWins) {
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ(ids[1], 3);
  } else {
    EXPECT_EQ(ids[0], 0);
    EXPECT_EQ(ids[1], 2);
  }
  // Equal scores renormalise to 1/2 each, then the scaling.
  EXPECT_FLOAT_EQ(w[0], 1.25f);
  EXPECT_FLOAT_EQ(w[1], 1.25f);

  // Four picks cross the group boundary: 3 from the winner, then the lowest
  // of the other group; weights proportional to the unbiased scores.
  route(gate, {}, h, E, 4, true, 1.0f, ids, w);
  float win = std::max(sig[0], sig[1]), lose = std::min(sig[0], sig[1]);
  std::vector<int32_t> expect = aWins ? std::vector<int32_t>{1, 3, 6, 0}
                                      : std::vector<int32_t>{0, 2, 4, 1};
  EXPECT_EQ(ids, expect);
  float sum = 3 * win + lose;
  EXPECT_NEAR(w[0], win / sum, 1e-6f);
  EXPECT_NEAR(w[3], lose / sum, 1e-6f);
}

TEST(Router, BiasRanksButWeightsStayUnbiased) {
  Rng rng(22);
  const int64_t D = 16, E = 5;
  auto h = randomBf16(rng, D, 1.0f);
  auto gate = randomBf16(rng, E * D, 0.5f);
  // The unbiased top-2, then a huge bias on the two lowest-scoring experts
  // forces them to the top instead, in bias order: the bias must change the
  // choice, not confirm it.
  std::vector<int32_t> ids;
  std::vector<float> w;
  route(gate, std::vector<float>(E, 0.0f), h, E, E, false, 1.0f, ids, w);
  const int32_t worst = ids[E - 1], secondWorst = ids[E - 2];
  std::vector<float> bias(E, 0.0f);
  bias[worst] = 20.0f;
  bias[secondWorst] = 10.0f;
  route(gate, bias, h, E, 2, false, 3.0f, ids, w);
  EXPECT_EQ(ids[0], worst);
  EXPECT_EQ(ids[1], secondWorst);
  std::vector<float> hf(D);
  cpu::widen(h.data(), D, hf.data());
  for (int k = 0; k < 2; ++k) {
    float s =
        cpu::sigmoid(cpu::dotBf16(gate.data() + ids[k] * D, hf.data(), D));
    EXPECT_EQ(w[k], s * 3.0f) << k; // no renormalisation, just the scaling
  }
}

TEST(Head, ArgmaxTiesGoToTheLowestIdAndSkipNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits = {nan, 1.0f, 3.0f, -2.0f, 3.0f, nan, 3.0f};
  int64_t id = -1;
  ArgmaxParams p;
  p.logits = logits.data();
  p.n = static_cast<int64_t>(logits.size());
  p.outId = &id;
  argmaxCpu(p);
  EXPECT_EQ(id, 2);
}

TEST(Embed, CopiesTheRow) {
  Rng rng(23);
  auto table = randomBf16(rng, 7 * 5, 1.0f);
  std::vector<uint16_t> out(5);
  EmbedParams p;
  p.table = table.data();
  p.vocab = 7;
  p.dim = 5;
  p.token = 4;
  p.out = out.data();
  embedCpu(p);
  EXPECT_TRUE(sameBits(
      out, std::vector<uint16_t>(table.begin() + 20, table.begin() + 25)));
}

TEST(Kda, ConvSlidesTheWindow) {
  // One channel, W = 4, weights 1, 2, 3, 4: out_t = SiLU(u_{t-3} + 2u_{t-2} +
  // 3u_{t-1} + 4u_t) with zeros before the start.
  std::vector<uint16_t> w = {floatToBf16(1), floatToBf16(2), floatToBf16(3),
                             floatToBf16(4)};
  std::vector<float> state(3, 0.0f);
  const float us[5] = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f};
  for (int t = 0; t < 5; ++t) {
    uint16_t u = floatToBf16(us[t]), out = 0;
    KdaConvParams p;
    p.u = &u;
    p.weight = bf16Vector(w.data());
    p.state = state.data();
    p.out = &out;
    p.channels = 1;
    p.width = 4;
    kdaConvCpu(p);
    float acc = 0.0f;
    for (int i = 0; i < 4; ++i) {
      int src = t - 3 + i;
      acc += (i + 1) * (src >= 0 ? us[src] : 0.0f);
    }
    EXPECT_EQ(bf16ToFloat(out), roundBf16(acc / (1.0f + std::exp(-acc))))
        << "t = " << t;
    EXPECT_EQ(state[2], us[t]);
  }
}

TEST(Kda, ConvReadsF32WeightsAsStored) {
  // F32 filter taps that bf16 cannot hold (as the published K3 stores
  // them): the sum uses them unrounded, in fp32, i ascending.
  const std::vector<float> w = {0.1f, -0.7f, 1.3f, 0.9f};
  std::vector<float> state(3, 0.0f), stateB(3, 0.0f);
  std::vector<uint16_t> wb;
  for (float x : w)
    wb.push_back(floatToBf16(x));
  const float us[4] = {0.5f, -1.0f, 2.0f, 0.25f};
  bool differs = false;
  for (int t = 0; t < 4; ++t) {
    uint16_t u = floatToBf16(us[t]), out = 0, outB = 0;
    KdaConvParams p;
    p.u = &u;
    p.weight = f32Vector(w.data());
    p.state = state.data();
    p.out = &out;
    p.channels = 1;
    p.width = 4;
    kdaConvCpu(p);
    float acc = 0.0f;
    for (int i = 0; i < 4; ++i) {
      int src = t - 3 + i;
      acc += w[i] * (src >= 0 ? us[src] : 0.0f);
    }
    EXPECT_EQ(bf16ToFloat(out), roundBf16(acc / (1.0f + std::exp(-acc))))
        << "t = " << t;
    // The same taps rounded to bf16 first: another (also correct) result.
    p.weight = bf16Vector(wb.data());
    p.state = stateB.data();
    p.out = &outB;
    kdaConvCpu(p);
    differs |= out != outB;
  }
  EXPECT_TRUE(differs) << "the f32 taps were rounded to bf16";
}

TEST(Kda, GatedNormReadsF32WeightAsStored) {
  const int64_t d = 4;
  const std::vector<float> w = {1.01f, 0.93f, 1.07f, 0.99f};
  std::vector<uint16_t> o = {floatToBf16(0.5f), floatToBf16(-1.5f),
                             floatToBf16(2.0f), floatToBf16(0.75f)};
  std::vector<uint16_t> gate(d, floatToBf16(0.3f)), out(d);
  KdaGatedNormParams p;
  p.o = o.data(), p.gate = gate.data(), p.weight = f32Vector(w.data());
  p.out = out.data(), p.numHeads = 1, p.headDim = d, p.eps = 1e-5f;
  kdaGatedNormCpu(p);
  float sq[4];
  for (int i = 0; i < 4; ++i)
    sq[i] = bf16ToFloat(o[i]) * bf16ToFloat(o[i]);
  const float ss = (sq[0] + sq[1]) + (sq[2] + sq[3]); // cpu::dot's lanes
  const float r = 1.0f / std::sqrt(ss / d + 1e-5f);
  const float sg = 1.0f / (1.0f + std::exp(-bf16ToFloat(gate[0])));
  for (int64_t i = 0; i < d; ++i)
    EXPECT_EQ(out[i], floatToBf16(bf16ToFloat(o[i]) * r * w[i] * sg))
        << "i = " << i;
}

TEST(Kda, FirstStepFromZeroStateIsBetaVTimesKq) {
  // From S = 0: S = k ⊗ (β v), o = Sᵀq = β v (k·q) with normalised k, q.
  Rng rng(24);
  const int64_t H = 2, d = 8, C = H * d;
  auto q = randomBf16(rng, C, 1.0f), k = randomBf16(rng, C, 1.0f),
       v = randomBf16(rng, C, 1.0f), f = randomBf16(rng, C, 1.0f);
  auto beta = randomBf16(rng, H, 2.0f);
  auto dt = randomF32(rng, C, 1.0f), aLog = randomF32(rng, H, 1.0f);
  std::vector<float> state(H * d * d, 0.0f);
  std::vector<uint16_t> o(C);
  // The step as `--fusion=none` launches it: kda_l2norm ×2, kda_gate,
  // sigmoid, kda_step.
  std::vector<float> qn(C), kn(C), g(C), b(H);
  KdaL2NormParams lp;
  lp.n = C, lp.headDim = d;
  lp.x = q.data(), lp.out = qn.data(), lp.scale = kdaQueryScale(d);
  kdaL2NormStepCpu(lp);
  lp.x = k.data(), lp.out = kn.data(), lp.scale = 1.0f;
  kdaL2NormStepCpu(lp);
  KdaGateParams gp;
  gp.f = f.data(), gp.dtBias = dt.data(), gp.aLog = aLog.data();
  gp.out = g.data(), gp.numHeads = H, gp.headDim = d;
  gp.hasLowerBound = 1, gp.lowerBound = -5.0f;
  kdaGateCpu(gp);
  SigmoidParams bp;
  bp.x = beta.data(), bp.out = b.data(), bp.n = H;
  sigmoidCpu(bp);
  KdaStepParams p;
  p.q = qn.data(), p.k = kn.data(), p.v = v.data(), p.g = g.data();
  p.beta = b.data(), p.state = state.data(), p.out = o.data();
  p.numHeads = H, p.headDim = d;
  kdaStepCpu(p);
  for (int64_t h = 0; h < H; ++h) {
    double qq = 0, kk = 0, kq = 0;
    for (int64_t i = 0; i < d; ++i) {
      double a = bf16ToFloat(q[h * d + i]), b = bf16ToFloat(k[h * d + i]);
      qq += a * a, kk += b * b, kq += a * b;
    }
    double kqn = kq / std::sqrt(qq + 1e-6) / std::sqrt(kk + 1e-6) /
                 std::sqrt(static_cast<double>(d));
    double b = 1.0 / (1.0 + std::exp(-double(bf16ToFloat(beta[h]))));
    for (int64_t j = 0; j < d; ++j) {
      double expect = b * bf16ToFloat(v[h * d + j]) * kqn;
      EXPECT_NEAR(bf16ToFloat(o[h * d + j]), expect,
                  std::fabs(expect) * 1e-2 + 1e-6)
          << h << "," << j;
    }
  }
}

TEST(Mla, OneCachedRowGivesWuvTimesLatent) {
  // With one position the softmax is exactly 1, so o_h = R(W_UV,h · c): the
  // V rows of each head through `linear` on c give the same bits.
  Rng rng(25);
  const int64_t N = 2, P = 8, R = 4, V = 6, L = 16;
  auto q = randomBf16(rng, N * (P + R), 1.0f);
  auto kvB = randomBf16(rng, N * (P + V) * L, 0.5f);
  auto cache = randomBf16(rng, L + R, 1.0f);
  std::vector<uint16_t> o(N * V);
  MlaAttendParams p;
  p.q = q.data(), p.kvB = kvB.data(), p.cache = cache.data(), p.length = 1;
  p.out = o.data(), p.numHeads = N, p.nopeDim = P, p.ropeDim = R, p.vDim = V,
  p.kvLoraRank = L;
  // The scale K3.md §3 derives from the dims; with one row the softmax is 1
  // whatever the scale (the reference tests check the scale itself).
  p.scale = 1.0f / std::sqrt(static_cast<float>(P + R));
  mlaAttendCpu(p);
  for (int64_t h = 0; h < N; ++h) {
    std::vector<uint16_t> expect(V);
    LinearParams lp;
    lp.x = cache.data();
    lp.w.bf16 = kvB.data() + (h * (P + V) + P) * L;
    lp.n = V, lp.k = L, lp.out = expect.data();
    linearCpu(lp);
    EXPECT_TRUE(sameBits(expect, std::vector<uint16_t>(o.begin() + h * V,
                                                       o.begin() + h * V + V)));
  }
}

/// A long cache's two attend launches (MlaAttendParams::handover): the
/// clustered twin attends lengths up to the handover and leaves out alone
/// above it, mla_attend the other way round, so the pair run in plan order
/// writes exactly what one unsplit attend writes, on both sides of the
/// handover; and with no handover each attends every length.
TEST(Mla, HandoverSplitsTheLengthsBetweenTheTwoLaunches) {
  Rng rng(27);
  const int64_t N = 2, P = 8, R = 8, L = 16, V = 8, T = 12, H = 5;
  auto q = randomBf16(rng, N * (P + R), 1.0f);
  auto kvB = randomBf16(rng, N * (P + V) * L, 0.3f);
  auto cache = randomBf16(rng, T * (L + R), 1.0f);
  const uint16_t kPoison = 0x7fa1; // a NaN no kernel writes
  MlaAttendParams p;
  p.q = q.data(), p.kvB = kvB.data(), p.cache = cache.data();
  p.numHeads = N, p.nopeDim = P, p.ropeDim = R, p.vDim = V, p.kvLoraRank = L;
  p.scale = 1.0f / std::sqrt(static_cast<float>(P + R));
  for (int64_t len : {int64_t(1), H, H + 1, T}) {
    p.length = len;
    std::vector<uint16_t> want(N * V, kPoison);
    p.handover = 0;
    p.out = want.data();
    mlaAttendCpu(p);
    std::vector<uint16_t> alone(N * V, kPoison);
    p.out = alone.data();
    mlaAttendClusteredCpu(p);
    EXPECT_TRUE(sameBits(alone, want)) << "no handover, length " << len;

    p.handover = H;
    std::vector<uint16_t> clustered(N * V, kPoison), plain(N * V, kPoison);
    p.out = clustered.data();
    mlaAttendClusteredCpu(p);
    p.out = plain.data();
    mlaAttendCpu(p);
    const std::vector<uint16_t> untouched(N * V, kPoison);
    EXPECT_TRUE(sameBits(len <= H ? clustered : plain, want)) << len;
    EXPECT_TRUE(sameBits(len <= H ? plain : clustered, untouched)) << len;
    std::vector<uint16_t> pair(N * V, kPoison);
    p.out = pair.data();
    mlaAttendClusteredCpu(p);
    mlaAttendCpu(p);
    EXPECT_TRUE(sameBits(pair, want)) << "the pair, length " << len;
  }
}

TEST(AttnRes, IdenticalSourcesReturnTheSource) {
  Rng rng(26);
  const int64_t D = 40;
  auto v = randomBf16(rng, D, 2.0f);
  auto wn = randomBf16(rng, D, 1.0f), wp = randomBf16(rng, D, 1.0f);
  std::vector<uint16_t> blocks = v;
  blocks.insert(blocks.end(), v.begin(), v.end());
  std::vector<uint16_t> out(D);
  AttnResParams p;
  p.blocks = blocks.data(), p.numBlocks = 2, p.extra = v.data();
  p.wNorm = wn.data(), p.wProj = wp.data(), p.dim = D, p.out = out.data();
  attnResCpu(p);
  // Three equal weights 1/3 sum to v up to fp32 rounding, far below bf16.
  EXPECT_TRUE(sameBits(out, v));
  p.numBlocks = 0; // a single source is returned as is
  attnResCpu(p);
  EXPECT_TRUE(sameBits(out, v));
}

TEST(AttnRes, PrefersTheSourceWithTheLargerLogit) {
  const int64_t D = 4;
  std::vector<uint16_t> wn(D, floatToBf16(1.0f)), wp(D, floatToBf16(1.0f));
  // Source a: all +1 (logit 4); source b: all -1 (logit -4).
  std::vector<uint16_t> a(D, floatToBf16(1.0f)), b(D, floatToBf16(-1.0f));
  std::vector<uint16_t> out(D);
  AttnResParams p;
  p.blocks = a.data(), p.numBlocks = 1, p.extra = b.data();
  p.wNorm = wn.data(), p.wProj = wp.data(), p.dim = D, p.out = out.data();
  attnResCpu(p);
  // α_a = 1/(1+e^-8): out = 2α_a - 1.
  float alpha = 1.0f / (1.0f + std::exp(-8.0f));
  EXPECT_NEAR(bf16ToFloat(out[0]), 2 * alpha - 1, 4e-3f);
}

TEST(RealDims, K3SizedOpsRunAndWriteEveryOutput) {
  Rng rng(27);
  auto start = std::chrono::steady_clock::now();
  // One KDA projection (C = 12288 from D = 7168) and the KDA step of 96 heads.
  const int64_t D = 7168, H = 96, d = 128, C = H * d;
  auto x = randomBf16(rng, D, 1.0f);
  auto w = randomBf16(rng, C * D, 0.02f);
  std::vector<uint16_t> u(C);
  LinearParams lp;
  lp.x = x.data(), lp.w.bf16 = w.data(), lp.n = C, lp.k = D, lp.out = u.data();
  linearCpu(lp);
  std::vector<float> conv(C * 3, 0.0f), state(H * d * d, 0.0f);
  auto cw = randomBf16(rng, C * 4, 0.5f), f = randomBf16(rng, C, 1.0f),
       gt = randomBf16(rng, C, 1.0f), beta = randomBf16(rng, H, 1.0f),
       onw = randomBf16(rng, d, 1.0f);
  auto dt = randomF32(rng, C, 1.0f), aLog = randomF32(rng, H, 1.0f);
  std::vector<float> conv2 = conv, conv3 = conv;
  // Outputs start as NaN so that the finiteness checks below prove that
  // every element was written.
  const uint16_t kNaN = 0x7FC0;
  std::vector<uint16_t> y(C, kNaN);
  KdaDecodeParams kp;
  kp.uq = kp.uk = kp.uv = u.data();
  kp.convQ = kp.convK = kp.convV = bf16Vector(cw.data());
  kp.convStateQ = conv.data(), kp.convStateK = conv2.data(),
  kp.convStateV = conv3.data();
  kp.f = f.data(), kp.betaLogit = beta.data(), kp.dtBias = dt.data(),
  kp.aLog = aLog.data(), kp.state = state.data(), kp.gate = gt.data(),
  kp.normWeight = bf16Vector(onw.data()), kp.out = y.data();
  kp.numHeads = H, kp.headDim = d, kp.hasLowerBound = 1;
  kdaDecodeCpu(kp);

  // 16 MXFP4 latent experts (3584 -> 3072 -> 3584).
  const int64_t Dm = 3584, I = 3072, E = 16;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<WeightRef> w1(E), w3(E), w2(E);
  auto mx = [&](int64_t rows, int64_t cols) {
    WeightRef r;
    r.format = kWeightMxfp4;
    bytes.push_back(randomBytes(rng, rows * cols / 2, 0, 255));
    r.packed = bytes.back().data();
    bytes.push_back(randomBytes(rng, rows * cols / 32, 118, 121));
    r.scale = bytes.back().data();
    return r;
  };
  bytes.reserve(6 * E);
  for (int64_t e = 0; e < E; ++e) {
    w1[e] = mx(I, Dm);
    w3[e] = mx(I, Dm);
    w2[e] = mx(Dm, I);
  }
  auto z = randomBf16(rng, Dm, 1.0f);
  std::vector<int32_t> ids(E);
  std::vector<float> weights(E, 1.0f / E);
  for (int64_t e = 0; e < E; ++e)
    ids[e] = static_cast<int32_t>(e);
  std::vector<uint16_t> r(Dm, kNaN);
  MoeExpertsParams ep;
  ep.x = z.data(), ep.ids = ids.data(), ep.weights = weights.data(),
  ep.topK = E, ep.numExperts = E, ep.w1 = w1.data(), ep.w3 = w3.data(),
  ep.w2 = w2.data(), ep.dim = Dm, ep.interDim = I, ep.out = r.data();
  moeExpertsCpu(ep);

  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  // Printed, never asserted: speed is bench/'s business, and a sanitizer
  // build on a busy CI machine is no measure of it.
  std::printf("K3-sized linear + kda_decode + 16 experts: %.2f s\n", seconds);
  // Written, finite, and not all zero (a kernel that returned early would
  // leave NaN; one that dropped its inputs, zeros).
  for (const std::vector<uint16_t> *out : {&y, &r}) {
    int64_t nonzero = 0;
    for (uint16_t v : *out) {
      ASSERT_TRUE(std::isfinite(bf16ToFloat(v)));
      nonzero += bf16ToFloat(v) != 0.0f;
    }
    EXPECT_GT(nonzero, static_cast<int64_t>(out->size()) / 2);
  }
}
