//===- kda_cuda_test.cpp - The KDA CUDA kernels against KdaCpu
//-------------===//
//
// Every entry point of kernels/kda/Kda.cu against its CPU twin on fresh
// random inputs, at the production shapes (K3: 96 heads × 128, lower-bound
// gate; Kimi-Linear: 32 × 128, softplus gate; the tiny models' 4 × 64) and at
// odd ones (head dims that are not multiples of 4, heads larger than a
// block's registers hold), with the plans' grid, a grid of 1 and a grid of
// H · 4 (one block per state slice), and with blocks of 32 to 1024 threads
// (kda_decode: 512).
// The recurrent kernels run 4 consecutive tokens on a random non-zero state,
// and the state is compared after every token. The kernels that read the
// conv filters and o_norm (kda_conv, kda_gated_norm, kda_decode) run with
// them stored bf16 (Kimi-Linear) and f32 (the published K3: values bf16
// cannot hold, read unrounded) — the *F32Weights* tests.
//
// Tolerances: fp32 outputs and the state by max|diff| / max|ref| (the CUDA
// sums run in another order and use FMA); bf16 outputs must be finite, within
// 1 ulp of the CPU value for all but a rare few elements, with a bounded
// fraction of differing elements. Between CUDA kernels (the unfused chain
// against kda_decode) the bits must match.
//
//===----------------------------------------------------------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

#include "kernels/common/VectorRef.h"
#include "kernels/kda/KdaCpu.h"
#include "runtime/exec/cuda/RowsForms.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace {

using namespace k3test;

/// fp32 results and the state: relative error bound.
constexpr double kF32Tol = 1e-5;
/// fp32 results of one elementwise op (no sums, only exp/log1p ulps).
constexpr double kF32ElemTol = 1e-6;
/// The state after kda_decode with fp32 conv filters (K3's stored dtype).
/// q/k/v are the conv outputs rounded to bf16: with bf16-valued filters and
/// inputs the four-tap sums are mostly exact, so both sides round the same
/// value; with fp32 filters they are not, and the CPU's and GPU's SiLU
/// (glibc expf against CUDA's expf, each within an ulp) leave a value near
/// a bf16 rounding midpoint on either side now and then. One such flip of
/// one k element (2^-8 of it) moves its head's state by ~1e-4 of the
/// state's largest entry (9.7e-5 measured on the H200, 96 heads, a flip at
/// token 0); a flip of a large ṽ element moves a whole value column by
/// β·k_i·2^-8·|ṽ_j|, 5.6e-4 measured (16 heads, folded rank 256, one token
/// from equal states); a wrong decay axis, gate or β moves it by O(1).
constexpr double kF32FlipStateTol = 1e-3;
/// The y rule with fp32 filters: such a flip moves one value column of a
/// head (128 y values) by a few ulps and a q flip all of them by less, so a
/// token may have ~1% of y more than 1 ulp off and ~3% differing (11 and 55
/// of 2048 measured); a real error moves most of y by many ulps.
constexpr double kF32FlipOver1Ulp = 0.01, kF32FlipDiffering = 0.05;

/// Distance in bf16 ulps (ordered bit patterns; ±0 are 0 apart).
int bf16Ulps(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t v) {
    return (v & 0x8000u) ? -static_cast<int>(v & 0x7fffu) : static_cast<int>(v);
  };
  return std::abs(ordered(a) - ordered(b));
}

/// The bf16 acceptance rule of every test: finite (not the poison), not all
/// zero, max|diff| / max|ref| <= 1e-2, at most `maxOver1Ulp` of the elements
/// more than 1 ulp from the CPU value and at most `maxDiffering` differing.
void expectBf16Near(const std::vector<uint16_t> &want,
                    const std::vector<uint16_t> &got, const std::string &what,
                    double maxDiffering = 0.02, double maxOver1Ulp = 1e-3) {
  ASSERT_EQ(want.size(), got.size()) << what;
  size_t over = 0;
  bool nonZero = false;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(k3::bf16ToFloat(got[i])))
        << what << ": element " << i << " not written (poison)";
    nonZero |= k3::bf16ToFloat(want[i]) != 0.0f;
    over += bf16Ulps(want[i], got[i]) > 1;
  }
  EXPECT_TRUE(nonZero) << what << ": trivial (all-zero) reference";
  EXPECT_LE(relErr(widen(want), widen(got)), 1e-2) << what;
  EXPECT_LE(double(over) / double(want.size()), maxOver1Ulp)
      << what << ": " << over << " elements more than 1 ulp apart";
  EXPECT_LE(fractionDiffering(want, got), maxDiffering) << what;
}

void expectF32Near(const std::vector<float> &want,
                   const std::vector<float> &got, double tol,
                   const std::string &what) {
  EXPECT_LE(relErr(want, got), tol) << what;
  bool nonZero = false;
  for (float w : want)
    nonZero |= w != 0.0f;
  EXPECT_TRUE(nonZero) << what << ": trivial (all-zero) reference";
}

/// bf16 values widened to fp32: what a conv state holds.
std::vector<float> bf16Valued(Rand &r, size_t n, float std) {
  return widen(r.bf16(n, std));
}

/// o_norm weights around 1, as trained RMSNorm weights are.
std::vector<uint16_t> normWeights(Rand &r, size_t n) {
  std::vector<uint16_t> w;
  for (float x : r.uniform(n, 0.5f, 1.5f))
    w.push_back(k3::floatToBf16(x));
  return w;
}

/// A conv filter or o_norm in the dtype a checkpoint stores it: bf16
/// (Kimi-Linear), or f32 values bf16 cannot hold (the published K3).
struct SmallWeight {
  bool f32 = false;
  std::vector<uint16_t> bf16;
  std::vector<float> fp32;
  /// Conv taps, normal(0, std); bf16 draws exactly what r.bf16 would.
  static SmallWeight taps(Rand &r, size_t n, float std, bool f32) {
    SmallWeight w;
    w.f32 = f32;
    if (f32)
      w.fp32 = r.f32(n, std);
    else
      w.bf16 = r.bf16(n, std);
    return w;
  }
  /// o_norm weights around 1; bf16 draws exactly what normWeights would.
  static SmallWeight norm(Rand &r, size_t n, bool f32) {
    SmallWeight w;
    w.f32 = f32;
    if (f32)
      w.fp32 = r.uniform(n, 0.5f, 1.5f);
    else
      w.bf16 = normWeights(r, n);
    return w;
  }
  k3::VectorRef host() const {
    return f32 ? k3::f32Vector(fp32.data()) : k3::bf16Vector(bf16.data());
  }
  Dev upload() const { return f32 ? Dev::of(fp32) : Dev::of(bf16); }
  /// The VectorRef of a device copy made by upload().
  k3::VectorRef on(const Dev &d) const {
    return f32 ? k3::f32Vector(d.get<float>())
               : k3::bf16Vector(d.get<uint16_t>());
  }
};

const char *dtypeName(bool f32) { return f32 ? " f32 weights" : ""; }

/// Bit-identical vectors; on failure reports the count and the first
/// difference (not the whole, possibly megabyte-long, vectors).
template <typename T>
void expectSameBits(const std::vector<T> &want, const std::vector<T> &got,
                    const std::string &what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  size_t n = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], sizeof(T)) != 0 && n++ == 0)
      first = i;
  EXPECT_EQ(n, 0u) << what << ": " << n << " of " << want.size()
                   << " differ, first at " << first << " (want "
                   << double(want[first]) << ", got " << double(got[first])
                   << ")";
}

/// One shape of the recurrent kernels and how to launch it.
struct RecCase {
  int64_t heads, headDim;
  int32_t hasLowerBound;
  int64_t grid, block;
  std::string name() const {
    return std::to_string(heads) + "x" + std::to_string(headDim) +
           (hasLowerBound ? " lb" : " softplus") + " grid " +
           std::to_string(grid) + " block " + std::to_string(block);
  }
};

/// K3, Kimi-Linear and the tiny models with the plans' grid (H), one block
/// per slice (H·4) and one block; heads not a multiple of 4 (scalar state
/// path); a head too big for the block's registers (rows written back and
/// re-read); blocks of 1024 (one block per head) and 64 threads.
std::vector<RecCase> recurrentCases() {
  return {{96, 128, 1, 96, 256},  {96, 128, 1, 384, 256}, {96, 128, 1, 1, 256},
          {96, 128, 1, 96, 1024}, {32, 128, 0, 32, 256},  {4, 64, 0, 4, 256},
          {3, 6, 1, 3, 256},      {5, 9, 0, 40, 64},      {2, 200, 1, 2, 32},
          {2, 130, 0, 7, 256}};
}

/// Per-token inputs of the recurrent step (bf16 q̃, k̃, ṽ, f, β logit).
struct TokenInputs {
  std::vector<uint16_t> q, k, v, f, betaLogit;
  TokenInputs(Rand &r, int64_t H, int64_t d)
      : q(r.bf16(H * d)), k(r.bf16(H * d)), v(r.bf16(H * d)), f(r.bf16(H * d)),
        betaLogit(r.bf16(H)) {}
};

/// Per-layer parameters of the gate.
struct GateWeights {
  std::vector<float> dtBias, aLog;
  GateWeights(Rand &r, int64_t H, int64_t d)
      : dtBias(r.f32(H * d)), aLog(r.uniform(H, 0.0f, 2.7f)) {}
};

//===----------------------------------------------------------------------===//
// kda_conv
//===----------------------------------------------------------------------===//

void convMatchesCpu(bool f32) {
  struct Case {
    int64_t channels;
    int32_t width;
    int64_t grid;
  };
  for (Case c : {Case{96 * 128, 4, 48}, Case{96 * 128, 4, 1}, Case{37, 3, 1},
                 Case{5, 1, 2}}) {
    const std::string name = std::to_string(c.channels) + " W " +
                             std::to_string(c.width) + " grid " +
                             std::to_string(c.grid) + dtypeName(f32);
    Rand r(static_cast<uint64_t>(c.channels * 7 + c.width));
    const int64_t C = c.channels, hist = c.width - 1;
    SmallWeight weight = SmallWeight::taps(r, C * c.width, 0.3f, f32);
    std::vector<float> state = bf16Valued(r, C * hist, 1.0f);
    Dev dWeight = weight.upload(), dState = Dev::of(state);
    for (int step = 0; step < 3; ++step) {
      std::vector<uint16_t> u = r.bf16(C);
      k3::KdaConvParams p;
      p.u = u.data();
      p.weight = weight.host();
      p.state = state.data();
      std::vector<uint16_t> want(C, 0xFFFF);
      p.out = want.data();
      p.channels = C;
      p.width = c.width;
      k3::kdaConvCpu(p);

      Dev dU = Dev::of(u), dOut = Dev::poisoned<uint16_t>(C);
      p.u = dU.get<uint16_t>();
      p.weight = weight.on(dWeight);
      p.state = dState.get<float>();
      p.out = dOut.get<uint16_t>();
      ASSERT_TRUE(launch("kda_conv", p, c.grid).isOk()) << name;
      expectBf16Near(want, dOut.download<uint16_t>(C), name + " out");
      // The shift copies exact values: the state matches bit for bit.
      expectSameBits(state, dState.download<float>(C * hist), name + " state");
    }
  }
}

TEST(KdaCuda, ConvMatchesCpuOverSteps) {
  K3_REQUIRE_GPU();
  convMatchesCpu(false);
}

TEST(KdaCuda, ConvF32WeightsMatchCpuOverSteps) {
  K3_REQUIRE_GPU();
  convMatchesCpu(true);
}

//===----------------------------------------------------------------------===//
// kda_l2norm, kda_gate, sigmoid
//===----------------------------------------------------------------------===//

TEST(KdaCuda, L2NormMatchesCpu) {
  K3_REQUIRE_GPU();
  struct Case {
    int64_t n, headDim;
    bool qScale;
    int64_t grid;
  };
  // The last case has a trailing partial head, which stays unwritten.
  for (Case c : {Case{96 * 128, 128, true, 96}, Case{96 * 128, 128, false, 96},
                 Case{4 * 64, 64, true, 1}, Case{3 * 7 + 4, 7, true, 2}}) {
    const std::string name =
        std::to_string(c.n) + "/" + std::to_string(c.headDim) +
        (c.qScale ? " q" : " k") + " grid " + std::to_string(c.grid);
    Rand r(static_cast<uint64_t>(c.n + c.headDim));
    std::vector<uint16_t> x = r.bf16(c.n, 2.0f);
    k3::KdaL2NormParams p;
    p.x = x.data();
    std::vector<float> want(c.n);
    std::memset(want.data(), 0xFF, c.n * sizeof(float));
    p.out = want.data();
    p.n = c.n;
    p.headDim = c.headDim;
    p.scale = c.qScale ? 1.0f / std::sqrt(static_cast<float>(c.headDim)) : 1;
    k3::kdaL2NormStepCpu(p);

    Dev dX = Dev::of(x), dOut = Dev::poisoned<float>(c.n);
    p.x = dX.get<uint16_t>();
    p.out = dOut.get<float>();
    ASSERT_TRUE(launch("kda_l2norm", p, c.grid).isOk()) << name;
    std::vector<float> got = dOut.download<float>(c.n);
    const int64_t full = c.n / c.headDim * c.headDim;
    expectF32Near(std::vector<float>(want.begin(), want.begin() + full),
                  std::vector<float>(got.begin(), got.begin() + full),
                  kF32ElemTol * 10, name);
    for (int64_t i = full; i < c.n; ++i)
      EXPECT_TRUE(std::isnan(got[i])) << name << ": wrote past the heads";
  }
}

TEST(KdaCuda, GateMatchesCpu) {
  K3_REQUIRE_GPU();
  struct Case {
    int64_t heads, headDim;
    int32_t hasLowerBound;
    int64_t grid;
  };
  for (Case c : {Case{96, 128, 1, 96}, Case{32, 128, 0, 32}, Case{3, 5, 1, 1},
                 Case{3, 5, 0, 1}}) {
    const std::string name = std::to_string(c.heads) + "x" +
                             std::to_string(c.headDim) +
                             (c.hasLowerBound ? " lb" : " softplus");
    Rand r(static_cast<uint64_t>(c.heads * 3 + c.hasLowerBound));
    const int64_t C = c.heads * c.headDim;
    std::vector<uint16_t> f = r.bf16(C, 2.0f);
    GateWeights gw(r, c.heads, c.headDim);
    k3::KdaGateParams p;
    p.f = f.data();
    p.dtBias = gw.dtBias.data();
    p.aLog = gw.aLog.data();
    std::vector<float> want(C);
    p.out = want.data();
    p.numHeads = c.heads;
    p.headDim = c.headDim;
    p.hasLowerBound = c.hasLowerBound;
    p.lowerBound = -5.0f;
    k3::kdaGateCpu(p);

    Dev dF = Dev::of(f), dDt = Dev::of(gw.dtBias), dA = Dev::of(gw.aLog);
    Dev dOut = Dev::poisoned<float>(C);
    p.f = dF.get<uint16_t>();
    p.dtBias = dDt.get<float>();
    p.aLog = dA.get<float>();
    p.out = dOut.get<float>();
    ASSERT_TRUE(launch("kda_gate", p, c.grid).isOk()) << name;
    expectF32Near(want, dOut.download<float>(C), kF32ElemTol, name);
  }
}

TEST(KdaCuda, SigmoidMatchesCpu) {
  K3_REQUIRE_GPU();
  for (auto [n, grid] :
       {std::pair<int64_t, int64_t>{96, 1}, {1000, 1}, {7, 3}, {5000, 20}}) {
    Rand r(static_cast<uint64_t>(n));
    std::vector<uint16_t> x = r.bf16(n, 3.0f);
    k3::SigmoidParams p;
    p.x = x.data();
    std::vector<float> want(n);
    p.out = want.data();
    p.n = n;
    k3::sigmoidCpu(p);
    Dev dX = Dev::of(x), dOut = Dev::poisoned<float>(n);
    p.x = dX.get<uint16_t>();
    p.out = dOut.get<float>();
    ASSERT_TRUE(launch("sigmoid", p, grid).isOk()) << n;
    expectF32Near(want, dOut.download<float>(n), kF32ElemTol,
                  "sigmoid " + std::to_string(n));
  }
}

//===----------------------------------------------------------------------===//
// kda_step
//===----------------------------------------------------------------------===//

/// kda_step's prepared fp32 inputs of one token, made by the CPU ops that
/// make them in a `--fusion=none` plan.
struct StepInputs {
  std::vector<float> q, k, g, beta;
  std::vector<uint16_t> v;
  StepInputs(const TokenInputs &t, const GateWeights &gw, int64_t H, int64_t d,
             int32_t hasLowerBound)
      : q(H * d), k(H * d), g(H * d), beta(H), v(t.v) {
    k3::KdaL2NormParams l;
    l.n = H * d;
    l.headDim = d;
    l.x = t.q.data();
    l.out = q.data();
    l.scale = k3::kdaQueryScale(d);
    k3::kdaL2NormStepCpu(l);
    l.x = t.k.data();
    l.out = k.data();
    l.scale = 1.0f;
    k3::kdaL2NormStepCpu(l);
    k3::KdaGateParams gp;
    gp.f = t.f.data();
    gp.dtBias = gw.dtBias.data();
    gp.aLog = gw.aLog.data();
    gp.out = g.data();
    gp.numHeads = H;
    gp.headDim = d;
    gp.hasLowerBound = hasLowerBound;
    k3::kdaGateCpu(gp);
    k3::SigmoidParams sp;
    sp.x = t.betaLogit.data();
    sp.out = beta.data();
    sp.n = H;
    k3::sigmoidCpu(sp);
  }
};

TEST(KdaCuda, StepMatchesCpuOverSteps) {
  K3_REQUIRE_GPU();
  for (const RecCase &c : recurrentCases()) {
    const int64_t H = c.heads, d = c.headDim, C = H * d;
    Rand r(static_cast<uint64_t>(H * 1000 + d + c.grid));
    GateWeights gw(r, H, d);
    std::vector<float> state = r.f32(H * d * d, 0.5f);
    Dev dState = Dev::of(state);
    for (int step = 0; step < 4; ++step) {
      const std::string name = c.name() + " token " + std::to_string(step);
      StepInputs in(TokenInputs(r, H, d), gw, H, d, c.hasLowerBound);
      k3::KdaStepParams p;
      p.q = in.q.data();
      p.k = in.k.data();
      p.v = in.v.data();
      p.g = in.g.data();
      p.beta = in.beta.data();
      p.state = state.data();
      std::vector<uint16_t> want(C, 0xFFFF);
      p.out = want.data();
      p.numHeads = H;
      p.headDim = d;
      k3::kdaStepCpu(p);

      Dev dQ = Dev::of(in.q), dK = Dev::of(in.k), dV = Dev::of(in.v),
          dG = Dev::of(in.g), dB = Dev::of(in.beta),
          dOut = Dev::poisoned<uint16_t>(C);
      p.q = dQ.get<float>();
      p.k = dK.get<float>();
      p.v = dV.get<uint16_t>();
      p.g = dG.get<float>();
      p.beta = dB.get<float>();
      p.state = dState.get<float>();
      p.out = dOut.get<uint16_t>();
      ASSERT_TRUE(launch("kda_step", p, c.grid, c.block).isOk()) << name;
      expectBf16Near(want, dOut.download<uint16_t>(C), name + " out");
      expectF32Near(state, dState.download<float>(H * d * d), kF32Tol,
                    name + " state");
    }
  }
}

/// The recurrent step as a `--fusion=none` plan launches it on the GPU:
/// kda_l2norm of q̃ (scale 1/sqrt d) and k̃, kda_gate, sigmoid of β's logit,
/// then kda_step on `state` with `grid` and `block` (kda_decode's bits with
/// the same grid and block, DecodeIsTheChainBitForBit). All pointers are on
/// the device.
k3::Status launchStepChain(int64_t H, int64_t d, int32_t hasLowerBound,
                           int64_t grid, int64_t block, const uint16_t *qt,
                           const uint16_t *kt, const uint16_t *v,
                           const uint16_t *f, const uint16_t *betaLogit,
                           const float *dtBias, const float *aLog,
                           float *state, uint16_t *out) {
  const int64_t C = H * d;
  Dev dQ = Dev::poisoned<float>(C), dK = Dev::poisoned<float>(C),
      dG = Dev::poisoned<float>(C), dB = Dev::poisoned<float>(H);
  k3::KdaL2NormParams l;
  l.n = C;
  l.headDim = d;
  l.x = qt;
  l.out = dQ.get<float>();
  l.scale = k3::kdaQueryScale(d);
  k3::Status s = launch("kda_l2norm", l, H);
  if (!s.isOk())
    return s;
  l.x = kt;
  l.out = dK.get<float>();
  l.scale = 1.0f;
  if (!(s = launch("kda_l2norm", l, H)).isOk())
    return s;
  k3::KdaGateParams gp;
  gp.f = f;
  gp.dtBias = dtBias;
  gp.aLog = aLog;
  gp.out = dG.get<float>();
  gp.numHeads = H;
  gp.headDim = d;
  gp.hasLowerBound = hasLowerBound;
  gp.lowerBound = -5.0f;
  if (!(s = launch("kda_gate", gp, H)).isOk())
    return s;
  k3::SigmoidParams sp;
  sp.x = betaLogit;
  sp.out = dB.get<float>();
  sp.n = H;
  if (!(s = launch("sigmoid", sp, 1)).isOk())
    return s;
  k3::KdaStepParams p;
  p.q = dQ.get<float>();
  p.k = dK.get<float>();
  p.v = v;
  p.g = dG.get<float>();
  p.beta = dB.get<float>();
  p.state = state;
  p.out = out;
  p.numHeads = H;
  p.headDim = d;
  return launch("kda_step", p, grid, block);
}

//===----------------------------------------------------------------------===//
// kda_gated_norm
//===----------------------------------------------------------------------===//

void gatedNormMatchesCpu(bool f32) {
  struct Case {
    int64_t heads, headDim, grid;
    bool alias; // out == o, allowed by the params header
  };
  for (Case c :
       {Case{96, 128, 96, false}, Case{96, 128, 1, true},
        Case{32, 128, 32, true}, Case{3, 7, 2, false}, Case{4, 64, 4, true}}) {
    const std::string name =
        std::to_string(c.heads) + "x" + std::to_string(c.headDim) + " grid " +
        std::to_string(c.grid) + (c.alias ? " aliased" : "") + dtypeName(f32);
    Rand r(static_cast<uint64_t>(c.heads * 5 + c.headDim + c.alias));
    const int64_t C = c.heads * c.headDim;
    std::vector<uint16_t> o = r.bf16(C, 0.3f), gate = r.bf16(C, 1.5f);
    SmallWeight weight = SmallWeight::norm(r, c.headDim, f32);
    k3::KdaGatedNormParams p;
    p.o = o.data();
    p.gate = gate.data();
    p.weight = weight.host();
    std::vector<uint16_t> want(C, 0xFFFF);
    p.out = want.data();
    p.numHeads = c.heads;
    p.headDim = c.headDim;
    p.eps = 1e-5f;
    k3::kdaGatedNormCpu(p);

    Dev dO = Dev::of(o), dGate = Dev::of(gate), dW = weight.upload();
    Dev dOut = Dev::poisoned<uint16_t>(C);
    p.o = dO.get<uint16_t>();
    p.gate = dGate.get<uint16_t>();
    p.weight = weight.on(dW);
    p.out = c.alias ? dO.get<uint16_t>() : dOut.get<uint16_t>();
    ASSERT_TRUE(launch("kda_gated_norm", p, c.grid).isOk()) << name;
    expectBf16Near(want, (c.alias ? dO : dOut).download<uint16_t>(C), name);
  }
}

TEST(KdaCuda, GatedNormMatchesCpu) {
  K3_REQUIRE_GPU();
  gatedNormMatchesCpu(false);
}

TEST(KdaCuda, GatedNormF32WeightMatchesCpu) {
  K3_REQUIRE_GPU();
  gatedNormMatchesCpu(true);
}

//===----------------------------------------------------------------------===//
// kda_decode
//===----------------------------------------------------------------------===//

/// The layer weights and per-token inputs of kda_decode.
struct DecodeLayer {
  int64_t H, d, C;
  int32_t W;
  SmallWeight convQ, convK, convV, normWeight;
  GateWeights gw;
  DecodeLayer(Rand &r, int64_t heads, int64_t headDim, int32_t width,
              bool f32 = false)
      : H(heads), d(headDim), C(heads * headDim), W(width),
        convQ(SmallWeight::taps(r, C * W, 0.3f, f32)),
        convK(SmallWeight::taps(r, C * W, 0.3f, f32)),
        convV(SmallWeight::taps(r, C * W, 0.3f, f32)),
        normWeight(SmallWeight::norm(r, headDim, f32)), gw(r, heads, headDim) {}
};

struct DecodeToken {
  std::vector<uint16_t> uq, uk, uv, f, betaLogit, gate;
  /// The low-rank gate inputs R(f_a h), R(g_a h) (rank r; empty at 0).
  std::vector<uint16_t> fA, gA;
  DecodeToken(Rand &r, const DecodeLayer &l, int64_t rank = 0)
      : uq(r.bf16(l.C)), uk(r.bf16(l.C)), uv(r.bf16(l.C)), f(r.bf16(l.C, 2.0f)),
        betaLogit(r.bf16(l.H)), gate(r.bf16(l.C, 1.5f)), fA(r.bf16(rank)),
        gA(r.bf16(rank)) {}
};

/// The folded low-rank second projections f_b, g_b [C, r] (r = 0: none),
/// scaled so f and gt keep the magnitudes of DecodeToken's.
struct LowRankWeights {
  int64_t rank = 0;
  std::vector<uint16_t> fB, gB;
  LowRankWeights(Rand &r, int64_t C, int64_t rank)
      : rank(rank),
        fB(r.bf16(C * rank, rank ? 2.0f / std::sqrt(float(rank)) : 0.0f)),
        gB(r.bf16(C * rank, rank ? 1.5f / std::sqrt(float(rank)) : 0.0f)) {}
};

/// The device copies of one layer's weights and states.
struct DecodeDev {
  Dev convQ, convK, convV, normWeight, dtBias, aLog;
  Dev sQ, sK, sV, state;
  DecodeDev(const DecodeLayer &l, const std::vector<float> &convState,
            const std::vector<float> &state)
      : convQ(l.convQ.upload()), convK(l.convK.upload()),
        convV(l.convV.upload()), normWeight(l.normWeight.upload()),
        dtBias(Dev::of(l.gw.dtBias)), aLog(Dev::of(l.gw.aLog)),
        sQ(Dev::of(convState)), sK(Dev::of(convState)), sV(Dev::of(convState)),
        state(Dev::of(state)) {}
};

/// Two layers' device states (recurrent and q/k/v conv) bit-identical.
void expectSameStates(const DecodeDev &want, const DecodeDev &got,
                      const DecodeLayer &l, const std::string &name) {
  const int64_t conv = l.C * (l.W - 1);
  expectSameBits(want.state.download<float>(l.H * l.d * l.d),
                 got.state.download<float>(l.H * l.d * l.d), name + " state");
  expectSameBits(want.sQ.download<float>(conv), got.sQ.download<float>(conv),
                 name + " conv q");
  expectSameBits(want.sK.download<float>(conv), got.sK.download<float>(conv),
                 name + " conv k");
  expectSameBits(want.sV.download<float>(conv), got.sV.download<float>(conv),
                 name + " conv v");
}

/// The scalar params of kda_decode (the caller sets the pointers).
k3::KdaDecodeParams decodeParams(const DecodeLayer &l, int32_t hasLowerBound) {
  k3::KdaDecodeParams p;
  p.numHeads = l.H;
  p.headDim = l.d;
  p.convWidth = l.W;
  p.hasLowerBound = hasLowerBound;
  p.lowerBound = -5.0f;
  p.normEps = 1e-5f;
  return p;
}

/// kda_decode's params over host memory for token `t` of layer `l` (the
/// CPU's side), the states and outputs the caller's; with lr.rank > 0 the
/// folded low-rank gates (f and the gate unbound, gateOut written).
k3::KdaDecodeParams hostDecodeParams(const DecodeLayer &l, const DecodeToken &t,
                                     const LowRankWeights &lr,
                                     int32_t hasLowerBound, float *sQ,
                                     float *sK, float *sV, float *state,
                                     uint16_t *out, uint16_t *gateOut) {
  k3::KdaDecodeParams p = decodeParams(l, hasLowerBound);
  p.uq = t.uq.data();
  p.uk = t.uk.data();
  p.uv = t.uv.data();
  p.convQ = l.convQ.host();
  p.convK = l.convK.host();
  p.convV = l.convV.host();
  p.convStateQ = sQ;
  p.convStateK = sK;
  p.convStateV = sV;
  p.f = t.f.data();
  p.betaLogit = t.betaLogit.data();
  p.dtBias = l.gw.dtBias.data();
  p.aLog = l.gw.aLog.data();
  p.state = state;
  p.gate = t.gate.data();
  p.normWeight = l.normWeight.host();
  p.out = out;
  if (lr.rank) {
    p.f = p.gate = nullptr;
    p.fA = t.fA.data();
    p.fB = lr.fB.data();
    p.fRank = lr.rank;
    p.gA = t.gA.data();
    p.gB = lr.gB.data();
    p.gRank = lr.rank;
    p.gateOut = gateOut;
  }
  return p;
}

/// One token's kda_decode inputs on the device and the params bound to
/// them (and to a layer's device copies); out (and gateOut) poisoned.
/// With lr.rank > 0, f and the gate come from the folded low-rank form (f
/// and gate unbound) and gateOut receives the computed gate.
struct DecodeBound {
  Dev uq, uk, uv, f, bl, gate, out, fA, gA, fB, gB, gOut;
  k3::KdaDecodeParams p;
  DecodeBound(const DecodeLayer &l, const DecodeToken &t, DecodeDev &dv,
              int32_t hasLowerBound, const LowRankWeights *lr,
              k3::L2Prefetch prefetch)
      : uq(Dev::of(t.uq)), uk(Dev::of(t.uk)), uv(Dev::of(t.uv)),
        f(Dev::of(t.f)), bl(Dev::of(t.betaLogit)), gate(Dev::of(t.gate)),
        out(Dev::poisoned<uint16_t>(l.C)) {
    const bool low = lr && lr->rank > 0;
    if (low) {
      fA = Dev::of(t.fA);
      gA = Dev::of(t.gA);
      fB = Dev::of(lr->fB);
      gB = Dev::of(lr->gB);
      gOut = Dev::poisoned<uint16_t>(l.C);
    }
    p = decodeParams(l, hasLowerBound);
    p.uq = uq.get<uint16_t>();
    p.uk = uk.get<uint16_t>();
    p.uv = uv.get<uint16_t>();
    p.convQ = l.convQ.on(dv.convQ);
    p.convK = l.convK.on(dv.convK);
    p.convV = l.convV.on(dv.convV);
    p.convStateQ = dv.sQ.get<float>();
    p.convStateK = dv.sK.get<float>();
    p.convStateV = dv.sV.get<float>();
    p.f = f.get<uint16_t>();
    p.betaLogit = bl.get<uint16_t>();
    p.dtBias = dv.dtBias.get<float>();
    p.aLog = dv.aLog.get<float>();
    p.state = dv.state.get<float>();
    p.gate = gate.get<uint16_t>();
    p.normWeight = l.normWeight.on(dv.normWeight);
    p.out = out.get<uint16_t>();
    if (low) {
      p.f = nullptr;
      p.gate = nullptr;
      p.fA = fA.get<uint16_t>();
      p.fB = fB.get<uint16_t>();
      p.fRank = lr->rank;
      p.gA = gA.get<uint16_t>();
      p.gB = gB.get<uint16_t>();
      p.gRank = lr->rank;
      p.gateOut = gOut.get<uint16_t>();
    }
    p.l2Prefetch = prefetch;
  }
};

/// kda_decode on the GPU for one token; returns y (DecodeBound's inputs;
/// *gateOut receives the folded gate when there is one).
std::vector<uint16_t> runDecodeGpu(const DecodeLayer &l, const DecodeToken &t,
                                   DecodeDev &dv, int32_t hasLowerBound,
                                   int64_t grid, int64_t block,
                                   const LowRankWeights *lr = nullptr,
                                   std::vector<uint16_t> *gateOut = nullptr,
                                   int64_t cluster = 1,
                                   k3::L2Prefetch prefetch = {}) {
  DecodeBound b(l, t, dv, hasLowerBound, lr, prefetch);
  k3::Status s = launch("kda_decode", b.p, grid, block, 0, cluster);
  EXPECT_TRUE(s.isOk()) << (s.isOk() ? "" : s.message());
  if (lr && lr->rank > 0 && gateOut)
    *gateOut = b.gOut.download<uint16_t>(l.C);
  return b.out.download<uint16_t>(l.C);
}

struct DecodeCase {
  int64_t heads, headDim;
  int32_t width, hasLowerBound;
  int64_t grid, block;
  int64_t rank = 0;    ///< > 0: f_b / g_b of this rank folded in
  int64_t cluster = 1; ///< > 1: launched in clusters of this many blocks
  std::string name() const {
    return std::to_string(heads) + "x" + std::to_string(headDim) + " W " +
           std::to_string(width) + (hasLowerBound ? " lb" : " softplus") +
           " grid " + std::to_string(grid) + " block " + std::to_string(block) +
           (rank ? " low-rank " + std::to_string(rank) : "") +
           (cluster > 1 ? " cluster " + std::to_string(cluster) : "");
  }
};

void decodeMatchesCpu(bool f32) {
  // K3 with the plans' grid, one block per slice (the head finished by the
  // last of its 4 blocks), one block, one block per head (512 threads);
  // Kimi-Linear; tiny; odd heads (scalar state path, W = 3 and 1); a head of
  // 130 split into 9 slices across 7 blocks; a head of 200 on 32 threads
  // (50 slices, rows past the registers written back and re-read). Then the
  // folded low-rank gates (Kimi-Linear's r = 128 at the plans' grid, whole
  // heads and a looping grid, a block of d threads (no threads past d: the
  // rows before the convs); r = 64 on tiny; r = 40; r = 12, the element-wise
  // path; a head of 130 over 7 blocks). Then the clustered path (a head of
  // 128 on a cluster of 4 blocks): K3 and Kimi-Linear as planned, folded
  // rows staged in shared memory (r = 128, 64, 40) or read from L2 (r = 256,
  // and r = 12 element by element), conv widths 4, 3, 2 and 1.
  for (const DecodeCase &c : {DecodeCase{96, 128, 4, 1, 96, 256},
                              DecodeCase{96, 128, 4, 1, 384, 256},
                              DecodeCase{96, 128, 4, 1, 1, 256},
                              DecodeCase{96, 128, 4, 1, 96, 512},
                              DecodeCase{32, 128, 4, 0, 32, 256},
                              DecodeCase{4, 64, 4, 0, 4, 256},
                              DecodeCase{3, 6, 3, 1, 3, 256},
                              DecodeCase{5, 9, 1, 0, 40, 64},
                              DecodeCase{2, 130, 4, 0, 7, 256},
                              DecodeCase{2, 200, 4, 1, 3, 32},
                              DecodeCase{32, 128, 4, 0, 128, 256, 128},
                              DecodeCase{32, 128, 4, 1, 32, 512, 128},
                              DecodeCase{32, 128, 4, 0, 5, 256, 128},
                              DecodeCase{32, 128, 4, 1, 128, 128, 128},
                              DecodeCase{4, 64, 4, 0, 8, 256, 64},
                              DecodeCase{4, 64, 4, 1, 4, 128, 40},
                              DecodeCase{3, 6, 3, 1, 3, 256, 12},
                              DecodeCase{2, 130, 4, 0, 7, 256, 24},
                              DecodeCase{96, 128, 4, 1, 384, 256, 0, 4},
                              DecodeCase{32, 128, 4, 0, 128, 256, 128, 4},
                              DecodeCase{32, 128, 4, 1, 128, 256, 0, 4},
                              DecodeCase{8, 128, 3, 0, 32, 256, 64, 4},
                              DecodeCase{4, 128, 2, 1, 16, 256, 40, 4},
                              DecodeCase{16, 128, 4, 0, 64, 256, 256, 4},
                              DecodeCase{8, 128, 1, 1, 32, 256, 12, 4}}) {
    const int64_t H = c.heads, d = c.headDim;
    Rand r(static_cast<uint64_t>(H * 4000 + d + c.grid + c.block + c.rank));
    DecodeLayer l(r, H, d, c.width, f32);
    const LowRankWeights lr(r, l.C, c.rank);
    const int64_t hist = c.width - 1, C = l.C;
    std::vector<float> sQ = bf16Valued(r, C * hist, 1.0f),
                       sK = bf16Valued(r, C * hist, 1.0f),
                       sV = bf16Valued(r, C * hist, 1.0f),
                       state = r.f32(H * d * d, 0.5f);
    DecodeDev dv(l, sQ, state); // each token re-uploads the CPU's states
    for (int step = 0; step < 4; ++step) {
      const std::string name =
          c.name() + dtypeName(f32) + " token " + std::to_string(step);
      DecodeToken t(r, l, c.rank);
      std::vector<uint16_t> want(C, 0xFFFF), wantGate(C, 0xFFFF), gotGate;
      k3::KdaDecodeParams p = hostDecodeParams(
          l, t, lr, c.hasLowerBound, sQ.data(), sK.data(), sV.data(),
          state.data(), want.data(), wantGate.data());
      // Teacher-forced: the GPU starts every token from the CPU's states,
      // so each token is compared alone and a rounding flip of one token
      // (kF32FlipStateTol) is not carried into the next token's check.
      dv.state = Dev::of(state);
      dv.sQ = Dev::of(sQ);
      dv.sK = Dev::of(sK);
      dv.sV = Dev::of(sV);
      k3::kdaDecodeCpu(p);

      std::vector<uint16_t> got = runDecodeGpu(
          l, t, dv, c.hasLowerBound, c.grid, c.block, &lr, &gotGate, c.cluster);
      if (f32)
        expectBf16Near(want, got, name + " y", kF32FlipDiffering,
                       kF32FlipOver1Ulp);
      else
        expectBf16Near(want, got, name + " y");
      if (c.rank)
        expectSameBits(wantGate, gotGate, name + " gate");
      expectF32Near(state, dv.state.download<float>(H * d * d),
                    f32 ? kF32FlipStateTol : kF32Tol, name + " state");
      expectSameBits(sQ, dv.sQ.download<float>(C * hist), name + " conv q");
      expectSameBits(sK, dv.sK.download<float>(C * hist), name + " conv k");
      expectSameBits(sV, dv.sV.download<float>(C * hist), name + " conv v");
    }
  }
}

/// An L2 prefetch hint (k3-prefetch-weights) changes no bit: kda_decode
/// asking L2 for three whole pieces and a partial one of a buffer (at a
/// 16-byte offset) against the same launch without the hint, from equal
/// states, sliced and clustered, over two tokens.
TEST(KdaCuda, L2PrefetchChangesNoBit) {
  K3_REQUIRE_GPU();
  for (const DecodeCase &c : {DecodeCase{32, 128, 4, 0, 128, 256, 128, 4},
                              DecodeCase{96, 128, 4, 1, 384, 256}}) {
    Rand r(static_cast<uint64_t>(c.heads * 6000 + c.grid));
    DecodeLayer l(r, c.heads, c.headDim, c.width, false);
    const LowRankWeights lr(r, l.C, c.rank);
    const std::vector<float> conv = bf16Valued(r, l.C * (c.width - 1), 1.0f),
                             state = r.f32(l.H * l.d * l.d, 0.5f);
    DecodeDev plain(l, conv, state), hinted(l, conv, state);
    const int64_t bytes = 3 * 16384 + 48;
    Dev target = Dev::of(r.bf16(static_cast<size_t>(bytes / 2 + 8)));
    k3::L2Prefetch hint;
    hint.data = target.get<uint8_t>() + 16;
    hint.bytes = bytes;
    for (int step = 0; step < 2; ++step) {
      const std::string name = c.name() + " token " + std::to_string(step);
      DecodeToken t(r, l, c.rank);
      std::vector<uint16_t> gate0, gate1;
      const std::vector<uint16_t> y0 = runDecodeGpu(
          l, t, plain, c.hasLowerBound, c.grid, c.block, &lr, &gate0, c.cluster);
      const std::vector<uint16_t> y1 =
          runDecodeGpu(l, t, hinted, c.hasLowerBound, c.grid, c.block, &lr,
                       &gate1, c.cluster, hint);
      expectSameBits(y0, y1, name + " y");
      expectSameBits(gate0, gate1, name + " gate");
      expectSameStates(plain, hinted, l, name);
    }
  }
}

TEST(KdaCuda, DecodeMatchesCpuOverSteps) {
  K3_REQUIRE_GPU();
  decodeMatchesCpu(false);
}

TEST(KdaCuda, DecodeF32WeightsMatchCpuOverSteps) {
  K3_REQUIRE_GPU();
  decodeMatchesCpu(true);
}

/// kda_conv ×3, the step chain (launchStepChain) and kda_gated_norm on the
/// GPU give
/// kda_decode's bits (same grid and block for the state kernels): with one
/// block per slice (the decode finishes heads across blocks), the plans'
/// grid, and a cluster of 4 blocks per head.
void decodeIsTheChain(bool f32) {
  for (const DecodeCase &c :
       {DecodeCase{96, 128, 4, 1, 384, 256}, DecodeCase{96, 128, 4, 1, 96, 256},
        DecodeCase{2, 130, 4, 0, 7, 256},
        DecodeCase{96, 128, 4, 1, 384, 256, 0, 4}}) {
    const int64_t H = c.heads, d = c.headDim;
    Rand r(static_cast<uint64_t>(H * 5000 + d + c.grid));
    DecodeLayer l(r, H, d, c.width, f32);
    const int64_t hist = c.width - 1, C = l.C;
    std::vector<float> conv = bf16Valued(r, C * hist, 1.0f),
                       state = r.f32(H * d * d, 0.5f);
    DecodeDev fused(l, conv, state), chain(l, conv, state);
    for (int step = 0; step < 2; ++step) {
      const std::string name =
          c.name() + dtypeName(f32) + " token " + std::to_string(step);
      DecodeToken t(r, l);
      std::vector<uint16_t> y =
          runDecodeGpu(l, t, fused, c.hasLowerBound, c.grid, c.block, nullptr,
                       nullptr, c.cluster);

      Dev uq = Dev::of(t.uq), uk = Dev::of(t.uk), uv = Dev::of(t.uv),
          qt = Dev::poisoned<uint16_t>(C), kt = Dev::poisoned<uint16_t>(C),
          vt = Dev::poisoned<uint16_t>(C);
      k3::KdaConvParams cp;
      cp.channels = C;
      cp.width = c.width;
      const Dev *us[3] = {&uq, &uk, &uv};
      const k3::VectorRef ws[3] = {l.convQ.on(chain.convQ),
                                   l.convK.on(chain.convK),
                                   l.convV.on(chain.convV)};
      Dev *ss[3] = {&chain.sQ, &chain.sK, &chain.sV}, *os[3] = {&qt, &kt, &vt};
      for (int i = 0; i < 3; ++i) {
        cp.u = us[i]->get<uint16_t>();
        cp.weight = ws[i];
        cp.state = ss[i]->get<float>();
        cp.out = os[i]->get<uint16_t>();
        ASSERT_TRUE(launch("kda_conv", cp, (C + 255) / 256).isOk());
      }
      Dev f = Dev::of(t.f), bl = Dev::of(t.betaLogit), gate = Dev::of(t.gate),
          o = Dev::poisoned<uint16_t>(C), out = Dev::poisoned<uint16_t>(C);
      ASSERT_TRUE(launchStepChain(H, d, c.hasLowerBound, c.grid, c.block,
                                  qt.get<uint16_t>(), kt.get<uint16_t>(),
                                  vt.get<uint16_t>(), f.get<uint16_t>(),
                                  bl.get<uint16_t>(),
                                  chain.dtBias.get<float>(),
                                  chain.aLog.get<float>(),
                                  chain.state.get<float>(), o.get<uint16_t>())
                      .isOk());
      k3::KdaGatedNormParams np;
      np.o = o.get<uint16_t>();
      np.gate = gate.get<uint16_t>();
      np.weight = l.normWeight.on(chain.normWeight);
      np.out = out.get<uint16_t>();
      np.numHeads = H;
      np.headDim = d;
      np.eps = 1e-5f;
      ASSERT_TRUE(launch("kda_gated_norm", np, H).isOk());
      std::vector<uint16_t> want = out.download<uint16_t>(C);
      expectBf16Near(want, y, name + " (non-trivial)", 0.0, 0.0);
      expectSameBits(want, y, name + " y");
      expectSameStates(chain, fused, l, name);
    }
  }
}

TEST(KdaCuda, DecodeIsTheChainBitForBit) {
  K3_REQUIRE_GPU();
  decodeIsTheChain(false);
}

TEST(KdaCuda, DecodeF32WeightsIsTheChainBitForBit) {
  K3_REQUIRE_GPU();
  decodeIsTheChain(true);
}

/// The clustered path gives the sliced path's bits (the plans' grid without
/// clusters: the same sums in the same order), folded gates included: y, the
/// gate, the state and the conv states over three tokens.
TEST(KdaCuda, ClusteredDecodeIsTheSlicedDecodeBitForBit) {
  K3_REQUIRE_GPU();
  for (const DecodeCase &c : {DecodeCase{32, 128, 4, 0, 128, 256, 128, 4},
                              DecodeCase{96, 128, 4, 1, 384, 256, 0, 4},
                              DecodeCase{8, 128, 3, 1, 32, 256, 12, 4},
                              DecodeCase{16, 128, 4, 0, 64, 256, 256, 4}}) {
    for (bool f32 : {false, true}) {
      const int64_t H = c.heads, d = c.headDim;
      Rand r(static_cast<uint64_t>(H * 7000 + c.rank + c.width));
      DecodeLayer l(r, H, d, c.width, f32);
      const LowRankWeights lr(r, l.C, c.rank);
      const int64_t hist = c.width - 1, C = l.C;
      std::vector<float> conv = bf16Valued(r, C * hist, 1.0f),
                         state = r.f32(H * d * d, 0.5f);
      DecodeDev clustered(l, conv, state), sliced(l, conv, state);
      for (int step = 0; step < 3; ++step) {
        const std::string name =
            c.name() + dtypeName(f32) + " token " + std::to_string(step);
        DecodeToken t(r, l, c.rank);
        std::vector<uint16_t> gateC, gateS;
        std::vector<uint16_t> yC =
            runDecodeGpu(l, t, clustered, c.hasLowerBound, c.grid, c.block, &lr,
                         &gateC, c.cluster);
        std::vector<uint16_t> yS = runDecodeGpu(
            l, t, sliced, c.hasLowerBound, c.grid, c.block, &lr, &gateS, 1);
        expectBf16Near(yS, yC, name + " (non-trivial)", 0.0, 0.0);
        expectSameBits(yS, yC, name + " y");
        expectSameBits(gateS, gateC, name + " gate");
        expectSameStates(sliced, clustered, l, name);
      }
    }
  }
}

/// A clustered launch outside the path's one shape (a head of 64; a grid of
/// 8 blocks per head; 128 threads) writes NaN and leaves the state alone.
TEST(KdaCuda, ClusteredDecodeOutsideItsShapeWritesNaN) {
  K3_REQUIRE_GPU();
  for (const DecodeCase &c : {DecodeCase{4, 64, 4, 0, 16, 256, 0, 4},
                              DecodeCase{4, 128, 4, 0, 32, 256, 0, 4},
                              DecodeCase{4, 128, 4, 0, 16, 128, 0, 4}}) {
    const int64_t H = c.heads, d = c.headDim;
    Rand r(static_cast<uint64_t>(H * 9000 + d + c.grid + c.block));
    DecodeLayer l(r, H, d, c.width, false);
    const int64_t hist = c.width - 1, C = l.C;
    std::vector<float> conv = bf16Valued(r, C * hist, 1.0f),
                       state = r.f32(H * d * d, 0.5f);
    DecodeDev dv(l, conv, state);
    DecodeToken t(r, l);
    std::vector<uint16_t> y =
        runDecodeGpu(l, t, dv, c.hasLowerBound, c.grid, c.block, nullptr,
                     nullptr, c.cluster);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_TRUE(std::isnan(k3::bf16ToFloat(y[i]))) << c.name() << " " << i;
    expectSameBits(state, dv.state.download<float>(H * d * d),
                   c.name() + " state");
  }
}

} // namespace

/// kda_decode's multi-row form (k3_kda_decode_rows): M rows — each its own
/// states (a batch's slots) and inputs — in one launch, each row's params
/// read from a device array; every row's output, folded gate and states
/// bit for bit its own k3_kda_decode launch's at the same grid. Kimi-Linear
/// as planned (clusters of 4, folded low-rank gates), K3's sliced grid (a
/// head over 4 blocks, the slices counted per row), whole heads, a head of
/// 130 over 7 blocks; 2 and 5 rows. The clustered launches also through
/// k3_kda_decode_rows_clustered (the backend's choice for them).
TEST(KdaCuda, DecodeRowsAsOneLaunchPerRow) {
  K3_REQUIRE_GPU();
  for (const DecodeCase &c : {DecodeCase{32, 128, 4, 0, 128, 256, 128, 4},
                              DecodeCase{32, 128, 4, 1, 128, 256, 0, 4},
                              DecodeCase{96, 128, 4, 1, 384, 256, 0, 4},
                              DecodeCase{96, 128, 4, 1, 384, 256},
                              DecodeCase{4, 64, 4, 0, 4, 256, 64},
                              DecodeCase{2, 130, 4, 0, 7, 256}}) {
    std::vector<std::string> forms = {"kda_decode_rows"};
    if (c.cluster > 1)
      forms.push_back(k3::rowsFormName("kda_decode", c.cluster));
    for (const std::string &form : forms)
      for (int M : {2, 5}) {
        const std::string name =
            c.name() + ", " + std::to_string(M) + " rows, " + form;
        const int64_t H = c.heads, d = c.headDim;
        Rand r(static_cast<uint64_t>(H * 31 + d + M + c.rank));
        DecodeLayer l(r, H, d, c.width);
        const LowRankWeights lr(r, l.C, c.rank);
        const int64_t conv = l.C * (c.width - 1);
        std::vector<std::unique_ptr<DecodeDev>> single, rows;
        std::vector<std::unique_ptr<DecodeBound>> bs, br;
        std::vector<k3::KdaDecodeParams> params;
        for (int i = 0; i < M; ++i) {
          const std::vector<float> sConv = bf16Valued(r, conv, 1.0f),
                                   state = r.f32(H * d * d, 0.5f);
          single.push_back(std::make_unique<DecodeDev>(l, sConv, state));
          rows.push_back(std::make_unique<DecodeDev>(l, sConv, state));
          const DecodeToken t(r, l, c.rank);
          bs.push_back(std::make_unique<DecodeBound>(
              l, t, *single.back(), c.hasLowerBound, &lr, k3::L2Prefetch{}));
          br.push_back(std::make_unique<DecodeBound>(
              l, t, *rows.back(), c.hasLowerBound, &lr, k3::L2Prefetch{}));
          params.push_back(br.back()->p);
          k3::Status s =
              launch("kda_decode", bs.back()->p, c.grid, c.block, 0, c.cluster);
          ASSERT_TRUE(s.isOk()) << s.message();
        }
        Dev array = Dev::of(params);
        k3::KdaDecodeRowsParams rp;
        rp.rows = array.get<k3::KdaDecodeParams>();
        rp.count = M;
        k3::Status s = launch(form, rp, c.grid, c.block, 0, c.cluster, M);
        ASSERT_TRUE(s.isOk()) << s.message();
        for (int i = 0; i < M; ++i) {
          const std::string row = name + ", row " + std::to_string(i);
          expectSameBits(bs[i]->out.download<uint16_t>(l.C),
                         br[i]->out.download<uint16_t>(l.C), row + " out");
          if (c.rank > 0)
            expectSameBits(bs[i]->gOut.download<uint16_t>(l.C),
                           br[i]->gOut.download<uint16_t>(l.C), row + " gate");
          expectSameStates(*single[i], *rows[i], l, row);
        }
      }
  }
}

namespace {

/// kda_decode's clustered launches as the plans make them: Kimi-Linear with
/// its folded low-rank gates and unfolded, K3's 96 heads.
const DecodeCase kPlannedClusterCases[] = {
    DecodeCase{32, 128, 4, 0, 128, 256, 128, 4},
    DecodeCase{32, 128, 4, 1, 128, 256, 0, 4},
    DecodeCase{96, 128, 4, 1, 384, 256, 0, 4}};

/// A launch of a rows-array form of kda_decode (`kernel`) over `count` copies
/// of one Kimi-Linear token's params that the kernel refuses (its limits):
/// every output NaN, the state untouched.
void expectRowsRefused(const std::string &kernel, int count, int64_t smem,
                       int64_t cluster, uint64_t seed) {
  Rand r(seed);
  DecodeLayer l(r, 32, 128, 4);
  const std::vector<float> sConv = bf16Valued(r, l.C * 3, 1.0f),
                           state = r.f32(32 * 128 * 128, 0.5f);
  DecodeDev dev(l, sConv, state);
  const DecodeToken t(r, l);
  DecodeBound b(l, t, dev, 0, nullptr, k3::L2Prefetch{});
  Dev array = Dev::of(std::vector<k3::KdaDecodeParams>(count, b.p));
  k3::KdaDecodeRowsParams rp;
  rp.rows = array.get<k3::KdaDecodeParams>();
  rp.count = count;
  ASSERT_TRUE(launch(kernel, rp, 128, 256, smem, cluster).isOk()) << kernel;
  for (uint16_t v : b.out.download<uint16_t>(l.C))
    ASSERT_TRUE(std::isnan(k3::bf16ToFloat(v))) << kernel;
  EXPECT_EQ(dev.state.download<float>(32 * 128 * 128), state) << kernel;
}

/// kda_decode's run form (k3_kda_decode_run): T consecutive tokens of one
/// sequence — one state, each token its own inputs — in one launch on the
/// clustered grid; every token's output and folded gate, and the states
/// after the last, bit for bit T launches of k3_kda_decode on that state.
/// Kimi-Linear as planned (folded low-rank gates) and unfolded, K3's 96
/// heads; 1, 2, 7 and 64 tokens. A launch without clusters writes NaN.
TEST(KdaCuda, DecodeRunIsOneLaunchPerToken) {
  K3_REQUIRE_GPU();
  for (const DecodeCase &c : kPlannedClusterCases) {
    for (int T : {1, 2, 7, 64}) {
      const std::string name = c.name() + ", " + std::to_string(T) + " tokens";
      SCOPED_TRACE(name);
      const int64_t H = c.heads, d = c.headDim;
      Rand r(static_cast<uint64_t>(H * 17 + T + c.rank));
      DecodeLayer l(r, H, d, c.width);
      const LowRankWeights lr(r, l.C, c.rank);
      const std::vector<float> sConv = bf16Valued(r, l.C * (c.width - 1), 1.0f),
                               state = r.f32(H * d * d, 0.5f);
      DecodeDev single(l, sConv, state), run(l, sConv, state);
      std::vector<std::unique_ptr<DecodeBound>> bs, br;
      std::vector<k3::KdaDecodeParams> params;
      for (int i = 0; i < T; ++i) {
        const DecodeToken t(r, l, c.rank);
        bs.push_back(std::make_unique<DecodeBound>(
            l, t, single, c.hasLowerBound, &lr, k3::L2Prefetch{}));
        br.push_back(std::make_unique<DecodeBound>(l, t, run, c.hasLowerBound,
                                                   &lr, k3::L2Prefetch{}));
        params.push_back(br.back()->p);
        k3::Status s =
            launch("kda_decode", bs.back()->p, c.grid, c.block, 0, c.cluster);
        ASSERT_TRUE(s.isOk()) << s.message();
      }
      Dev array = Dev::of(params);
      k3::KdaDecodeRowsParams rp;
      rp.rows = array.get<k3::KdaDecodeParams>();
      rp.count = T;
      k3::Status s =
          launch("kda_decode_run", rp, c.grid, c.block, 0, c.cluster);
      ASSERT_TRUE(s.isOk()) << s.message();
      for (int i = 0; i < T; ++i) {
        const std::string tok = name + ", token " + std::to_string(i);
        expectSameBits(bs[i]->out.download<uint16_t>(l.C),
                       br[i]->out.download<uint16_t>(l.C), tok + " out");
        if (c.rank > 0)
          expectSameBits(bs[i]->gOut.download<uint16_t>(l.C),
                         br[i]->gOut.download<uint16_t>(l.C), tok + " gate");
      }
      expectSameStates(single, run, l, name);
      // The state moved (a run that wrote nothing would not pass the
      // comparison above only by luck).
      EXPECT_NE(run.state.download<float>(H * d * d), state) << name;
    }
  }
  // Without clusters: NaN out, the state untouched.
  expectRowsRefused("kda_decode_run", 1, 0, 1, 5);
  expectRowsRefused("kda_decode_rows_clustered", 3, 0, 1, 6);
}

} // namespace

namespace {

/// kda_decode's chunk form (k3_kda_decode_chunk): T consecutive tokens of one
/// sequence in the chunk (WY / UT) form on the GPU against the CPU's chunk
/// form (kdaDecodeChunkCpu) from the same states: within fp32 rounding (the
/// sums run in other orders), the conv states and folded gates bit for bit.
/// Kimi-Linear as planned (folded rank 128) and K3's 96 heads, 1 to 64
/// tokens; then more than 64 rows: NaN out, the states untouched.
TEST(KdaCuda, DecodeChunkAsTheCpuChunkForm) {
  K3_REQUIRE_GPU();
  for (const DecodeCase &c : kPlannedClusterCases) {
    for (int T : {1, 5, 16, 64}) {
      const std::string name = c.name() + ", " + std::to_string(T) + " tokens";
      SCOPED_TRACE(name);
      const int64_t H = c.heads, d = c.headDim, C = H * d;
      const int64_t conv = C * (c.width - 1);
      Rand r(static_cast<uint64_t>(H * 31 + T + c.rank));
      DecodeLayer l(r, H, d, c.width);
      const LowRankWeights lr(r, C, c.rank);
      const std::vector<float> sConv = bf16Valued(r, conv, 1.0f),
                               state0 = r.f32(H * d * d, 0.5f);
      std::vector<float> sQ = sConv, sK = sConv, sV = sConv, state = state0;
      DecodeDev dev(l, sConv, state0);
      std::vector<DecodeToken> tokens;
      for (int i = 0; i < T; ++i)
        tokens.emplace_back(r, l, c.rank);
      // The CPU's chunk form.
      std::vector<std::vector<uint16_t>> want(T), wantGate(T);
      std::vector<k3::KdaDecodeParams> host(T);
      std::vector<const k3::KdaDecodeParams *> hostRows;
      for (int i = 0; i < T; ++i) {
        want[i].assign(C, 0xFFFF);
        wantGate[i].assign(C, 0xFFFF);
        host[i] = hostDecodeParams(l, tokens[i], lr, c.hasLowerBound, sQ.data(),
                                   sK.data(), sV.data(), state.data(),
                                   want[i].data(), wantGate[i].data());
        hostRows.push_back(&host[i]);
      }
      k3::kdaDecodeChunkCpu(hostRows.data(), hostRows.size());
      // The GPU's, in one launch.
      std::vector<std::unique_ptr<DecodeBound>> bound;
      std::vector<k3::KdaDecodeParams> params;
      for (int i = 0; i < T; ++i) {
        bound.push_back(std::make_unique<DecodeBound>(
            l, tokens[i], dev, c.hasLowerBound, &lr, k3::L2Prefetch{}));
        params.push_back(bound.back()->p);
      }
      Dev array = Dev::of(params);
      k3::KdaDecodeRowsParams rp;
      rp.rows = array.get<k3::KdaDecodeParams>();
      rp.count = T;
      k3::Status s = launch("kda_decode_chunk", rp, c.grid, c.block,
                            k3::kKdaChunkSmemBytes, c.cluster);
      ASSERT_TRUE(s.isOk()) << s.message();
      for (int i = 0; i < T; ++i) {
        const std::string tok = name + ", token " + std::to_string(i);
        expectBf16Near(want[i], bound[i]->out.download<uint16_t>(C), tok + " y",
                       0.05, 0.01);
        if (c.rank)
          expectSameBits(wantGate[i], bound[i]->gOut.download<uint16_t>(C),
                         tok + " gate");
      }
      const std::vector<float> got = dev.state.download<float>(H * d * d);
      std::printf("  %s: state rel err %.3g\n", name.c_str(),
                  relErr(state, got));
      expectF32Near(state, got, kF32FlipStateTol, name + " state");
      EXPECT_NE(state, state0) << name;
      expectSameBits(sQ, dev.sQ.download<float>(conv), name + " conv q");
      expectSameBits(sK, dev.sK.download<float>(conv), name + " conv k");
      expectSameBits(sV, dev.sV.download<float>(conv), name + " conv v");
    }
  }
  // 65 rows: NaN out, the state untouched.
  expectRowsRefused("kda_decode_chunk", k3::kKdaChunkMaxRows + 1,
                    k3::kKdaChunkSmemBytes, 4, 7);
}

} // namespace
