//===- mla_ref_test.cpp - MLA CPU kernels against the float64 reference ---===//
//
// mla_cache_append and mla_attend (with and without the fused output gate)
// at K3's geometry (N = 96 heads, P = 128, R = 64, L = 512, V = 128,
// hidden 7168), at the same per-head dims with N = 4, and at an odd small
// shape, plus the whole MLA mixer as a chain of kernels (linear, cache
// append, attend, o_proj) against the reference's mla() over several tokens.
// The kernels use the ABSORBED form (q̂ = W_UKᵀ q_nope, ĉ = Σ p_j c_j,
// o = W_UV ĉ); the reference the NAIVE one (per-head keys and values expanded
// from every cached latent), so an algebra slip in either shows up. There is
// no fused "MLA decode" kernel entry: the chain test plays that part.
//
// Tolerances: the attention output is rounded once (fp32 in the kernel,
// float64 in the reference), so every element must be within 1 bf16 ulp of
// the reference plus 1e-5·max|ref| (outputs that cancel towards zero), at
// most 1% of them inexact, max|diff|/max|ref| < 1e-2. The gated output
// rounds twice (R(R(o)·sigmoid(g))): at most 2 ulps. A cache row rounds as
// rms_norm does (at most 2 ulps on c, k_r copied exactly). The mixer chain
// rounds at q, kv, the cache row, o and o_proj, so a flip can travel:
// max|diff|/max|ref| < 1e-2 and at most 5% inexact elements.
//
// The score scale: the reference derives its own, 1/sqrt(P+R) in float64,
// from the dims (mlaAttendNaive takes no scale), and the kernel gets the fp32
// value the runtime passes (kernelScale below, as the plans compute it), so the two sides never share a constant. The "distinct" shape
// has P, R, V, L and every sum of them that a kernel could mistake for P+R
// different (P = 24, R = 8, V = 20, L = 40: P+R = 32, L+R = 48, P+V = 44,
// V+R = 28), so a dims mix-up cannot hide behind equal sizes (K3 has
// P = V = 128).
//
// Every comparison is shown able to fail: a copy of the kernel output with
// its largest element moved by 5% must be rejected, and so must the outputs
// of the kernel run with a scale derived from the wrong dims: 1/sqrt(L+R)
// (K3.md §3 warns of it), 1/sqrt(P) (q_r forgotten), 1/sqrt(L) and
// 1/sqrt(P+V); the mixer chain rejects 1/sqrt(L+R) too.
//
//===----------------------------------------------------------------------===//
#include "kernels/gemv/GemvCpu.h"
#include "kernels/mla/MlaCpu.h"
#include "test/reference/Compare.h"
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

/// `got` with the element of largest |want| moved by 5%.
std::vector<uint16_t> perturbLargest(const std::vector<uint16_t> &got,
                                     const Vec &want) {
  size_t big = 0;
  for (size_t i = 1; i < want.size(); ++i)
    if (std::fabs(want[i]) > std::fabs(want[big]))
      big = i;
  std::vector<uint16_t> bad = got;
  bad[big] = ref::toBf16Bits(ref::fromBf16Bits(got[big]) * 1.05);
  return bad;
}

/// Asserts `got` passes and a 5% perturbation of it does not.
void expectAgrees(const std::vector<uint16_t> &got, const Vec &want,
                  const Tolerance &tol, const std::string &what) {
  ref::Bf16Stats s;
  ::testing::AssertionResult ok = agrees(got, want, tol, &s);
  std::cout << "[" << what << "] " << s.str() << "\n";
  EXPECT_TRUE(ok) << what;
  EXPECT_FALSE(agrees(perturbLargest(got, want), want, tol))
      << what << ": a 5% error in the largest element was not caught";
}

struct MlaShape {
  int64_t heads, nope, rope, latent, value, hidden;
  const char *name;
};

/// The score scale the kernel is given for dims whose score sums over
/// `dotDims` = P+R values: 1/sqrt in fp32, as the runtime computes it.
float kernelScale(int64_t dotDims) {
  return 1.0f / std::sqrt(static_cast<float>(dotDims));
}

ref::MlaDims dimsOf(const MlaShape &s) {
  ref::MlaDims d;
  d.heads = s.heads;
  d.nope = s.nope;
  d.rope = s.rope;
  d.latent = s.latent;
  d.value = s.value;
  return d;
}

class MlaRef : public ::testing::TestWithParam<MlaShape> {};

TEST_P(MlaRef, CacheAppendMatchesCacheRow) {
  const MlaShape s = GetParam();
  const int64_t L = s.latent, R = s.rope, W = L + R, D = s.hidden;
  const int64_t tokens = 8, maxSeq = tokens + 3;
  Rng rng(1000 + s.heads);
  auto kvA = ref::randomBf16(rng, W * D, std::sqrt(3.0 / D));
  auto lnW = ref::randomBf16Magnitude(rng, L, 0.5, 1.5);
  ref::MlaRef layer;
  layer.dims = dimsOf(s);
  layer.kvAProj = ref::WeightRef::fromBf16(kvA.data(), W, D);
  layer.kvALayernorm = ref::fromBf16(lnW);
  layer.normEps = 1e-6;

  auto cache = ref::poisonedBf16(maxSeq * W);
  std::vector<uint16_t> gotC;
  Vec wantC;
  for (int64_t t = 0; t < tokens; ++t) {
    Vec h = ref::fromBf16(ref::randomBf16(rng, D, 2.0));
    // The kernel's input is R(kv_a h), exactly the reference's.
    auto kv = ref::toBf16(ref::linear(layer.kvAProj, h));
    MlaCacheAppendParams p;
    p.kv = kv.data();
    p.normWeight = lnW.data();
    p.eps = 1e-6f;
    p.cache = cache.data();
    p.pos = t;
    p.kvLoraRank = L;
    p.ropeDim = R;
    mlaCacheAppendCpu(p);

    Vec want = ref::mlaCacheRow(layer, h);
    ASSERT_EQ(static_cast<int64_t>(want.size()), W);
    gotC.insert(gotC.end(), cache.begin() + t * W, cache.begin() + t * W + L);
    wantC.insert(wantC.end(), want.begin(), want.begin() + L);
    for (int64_t i = 0; i < R; ++i)
      ASSERT_EQ(ref::fromBf16Bits(cache[t * W + L + i]), want[L + i])
          << "row " << t << " k_r " << i;
  }
  // The normalised latents c of all rows: rms_norm's two roundings, so an
  // inner flip can become 2 ulps.
  Tolerance tol;
  tol.ulps = 2;
  expectAgrees(gotC, wantC, tol, std::string("mla_cache_append ") + s.name);
  // Rows past the last append are untouched.
  for (int64_t i = tokens * W; i < maxSeq * W; ++i)
    ASSERT_EQ(cache[i], ref::kBf16Poison) << "element " << i;
}

TEST_P(MlaRef, AttendMatchesNaiveForm) {
  const MlaShape s = GetParam();
  const int64_t N = s.heads, P = s.nope, R = s.rope, L = s.latent, V = s.value,
                W = L + R, maxSeq = 64;
  Rng rng(2000 + s.heads);
  // Cache rows as the model makes them: c normalised by kv_a_layernorm
  // (bf16), k_r a raw bf16 projection.
  auto lnW = ref::randomBf16Magnitude(rng, L, 0.5, 1.5);
  std::vector<uint16_t> cache;
  std::vector<Vec> rows;
  for (int64_t j = 0; j < maxSeq; ++j) {
    Vec kv = ref::fromBf16(ref::randomBf16(rng, W, 2.0));
    Vec row =
        ref::rmsNorm(Vec(kv.begin(), kv.begin() + L), ref::fromBf16(lnW), 1e-6);
    row.insert(row.end(), kv.begin() + L, kv.end());
    auto bits = ref::toBf16(row);
    cache.insert(cache.end(), bits.begin(), bits.end());
    rows.push_back(row);
  }
  // Scales give scores with a standard deviation of about 1.5, so the
  // softmax is neither flat nor one-hot and a wrong score scale shows.
  auto q = ref::randomBf16(rng, N * (P + R), 2.5);
  auto kvB = ref::randomBf16(rng, N * (P + V) * L, std::sqrt(3.0 / L));
  auto gate = ref::randomBf16(rng, N * V, 3.0);
  ref::WeightRef kvBRef = ref::WeightRef::fromBf16(kvB.data(), N * (P + V), L);
  Vec qd = ref::fromBf16(q), gd = ref::fromBf16(gate);

  auto run = [&](int64_t length, const uint16_t *g, float scale) {
    auto out = ref::poisonedBf16(N * V);
    MlaAttendParams p;
    p.q = q.data();
    p.kvB = kvB.data();
    p.cache = cache.data();
    p.length = length;
    p.gate = g;
    p.out = out.data();
    p.numHeads = N;
    p.nopeDim = P;
    p.ropeDim = R;
    p.vDim = V;
    p.kvLoraRank = L;
    p.scale = scale;
    mlaAttendCpu(p);
    return out;
  };
  const float scale = kernelScale(P + R);
  Vec previous;
  for (int64_t length : {int64_t(1), int64_t(7), int64_t(64)}) {
    const std::string tag =
        std::string(s.name) + " T=" + std::to_string(length);
    std::vector<Vec> attended(rows.begin(), rows.begin() + length);
    Vec want = ref::mlaAttendNaive(dimsOf(s), qd, attended, kvBRef);
    Tolerance tol;
    auto out = run(length, nullptr, scale);
    expectAgrees(out, want, tol, "mla_attend " + tag);

    // The fused gate: R(R(o) · sigmoid(g)), two roundings.
    Vec wantGated(want.size());
    for (size_t i = 0; i < want.size(); ++i)
      wantGated[i] = ref::bf16Round(want[i] * ref::sigmoid(gd[i]));
    Tolerance gatedTol;
    gatedTol.ulps = 2;
    expectAgrees(run(length, gate.data(), scale), wantGated, gatedTol,
                 "mla_attend+gate " + tag);

    if (length > 1) {
      // Attention must matter: more cached rows change the output, and a
      // scale derived from the wrong dims is rejected.
      EXPECT_GT(ref::rowRelErr(want, previous), 0.05) << tag;
      const struct {
        int64_t dims;
        const char *what;
      } wrongScales[] = {{L + R, "1/sqrt(L+R)"},
                         {P, "1/sqrt(P)"},
                         {L, "1/sqrt(L)"},
                         {P + V, "1/sqrt(P+V)"}};
      for (const auto &w : wrongScales) {
        auto wrong = run(length, nullptr, kernelScale(w.dims));
        EXPECT_FALSE(agrees(wrong, want, tol))
            << tag << ": scale " << w.what << " passed";
      }
    }
    previous = want;
  }
}

/// The whole MLA mixer (K3.md §3): projections, cache append, attention with
/// the optional fused gate, o_proj, as the CPU decoder chains the kernels.
struct MixerShape {
  MlaShape mla;
  int64_t qLora; ///< 0: direct q_proj (Kimi-Linear)
  bool gate;     ///< mla_use_output_gate (K3)
};

class MlaMixerRef : public ::testing::TestWithParam<MixerShape> {};

TEST_P(MlaMixerRef, KernelChainMatchesReferenceMla) {
  const MixerShape ms = GetParam();
  const MlaShape s = ms.mla;
  const int64_t N = s.heads, P = s.nope, R = s.rope, L = s.latent, V = s.value,
                D = s.hidden, W = L + R, Q = ms.qLora;
  const int64_t tokens = 6;
  Rng rng(3000 + s.heads);
  auto scaled = [&](int64_t rows, int64_t cols, double gain) {
    return ref::randomBf16(rng, rows * cols, gain * std::sqrt(3.0 / cols));
  };
  std::vector<uint16_t> qA, qALn, qB, qProj;
  if (Q > 0) {
    qA = scaled(Q, D, 2.0);
    qALn = ref::randomBf16Magnitude(rng, Q, 0.5, 1.5);
    qB = scaled(N * (P + R), Q, 2.0);
  } else {
    qProj = scaled(N * (P + R), D, 2.0);
  }
  auto kvA = scaled(W, D, 2.0);
  auto kvALn = ref::randomBf16Magnitude(rng, L, 0.5, 1.5);
  auto kvB = scaled(N * (P + V), L, 1.0);
  std::vector<uint16_t> gProj;
  if (ms.gate)
    gProj = scaled(N * V, D, 3.0);
  auto oProj = scaled(D, N * V, 1.0);

  ref::MlaRef layer;
  layer.dims = dimsOf(s);
  layer.hasQLora = Q > 0;
  if (Q > 0) {
    layer.qAProj = ref::WeightRef::fromBf16(qA.data(), Q, D);
    layer.qALayernorm = ref::fromBf16(qALn);
    layer.qBProj = ref::WeightRef::fromBf16(qB.data(), N * (P + R), Q);
  } else {
    layer.qProj = ref::WeightRef::fromBf16(qProj.data(), N * (P + R), D);
  }
  layer.kvAProj = ref::WeightRef::fromBf16(kvA.data(), W, D);
  layer.kvALayernorm = ref::fromBf16(kvALn);
  layer.kvBProj = ref::WeightRef::fromBf16(kvB.data(), N * (P + V), L);
  layer.hasGate = ms.gate;
  if (ms.gate)
    layer.gProj = ref::WeightRef::fromBf16(gProj.data(), N * V, D);
  layer.oProj = ref::WeightRef::fromBf16(oProj.data(), D, N * V);
  layer.normEps = 1e-6;
  ref::MlaCache refCache;

  auto bf16W = [](const std::vector<uint16_t> &w) {
    k3::WeightRef r;
    r.format = kWeightBf16;
    r.bf16 = w.data();
    return r;
  };
  auto linear = [&](const uint16_t *x, const std::vector<uint16_t> &w,
                    int64_t n, int64_t k, const uint16_t *normWeight,
                    uint16_t *out) {
    LinearParams p;
    p.x = x;
    p.w = bf16W(w);
    p.n = n;
    p.k = k;
    p.normWeight = normWeight;
    p.normEps = 1e-6f;
    p.out = out;
    linearCpu(p);
  };
  auto cache = ref::poisonedBf16(tokens * W);
  for (int64_t t = 0; t < tokens; ++t) {
    auto h = ref::randomBf16(rng, D, 2.0);
    auto q = ref::poisonedBf16(N * (P + R));
    if (Q > 0) {
      auto qa = ref::poisonedBf16(Q);
      linear(h.data(), qA, Q, D, nullptr, qa.data());
      linear(qa.data(), qB, N * (P + R), Q, qALn.data(), q.data());
    } else {
      linear(h.data(), qProj, N * (P + R), D, nullptr, q.data());
    }
    auto kv = ref::poisonedBf16(W);
    linear(h.data(), kvA, W, D, nullptr, kv.data());
    auto gt = ref::poisonedBf16(N * V);
    if (ms.gate)
      linear(h.data(), gProj, N * V, D, nullptr, gt.data());

    MlaCacheAppendParams ap;
    ap.kv = kv.data();
    ap.normWeight = kvALn.data();
    ap.eps = 1e-6f;
    ap.cache = cache.data();
    ap.pos = t;
    ap.kvLoraRank = L;
    ap.ropeDim = R;
    mlaCacheAppendCpu(ap);

    auto o = ref::poisonedBf16(N * V);
    MlaAttendParams at;
    at.q = q.data();
    at.kvB = kvB.data();
    at.cache = cache.data();
    at.length = t + 1;
    at.gate = ms.gate ? gt.data() : nullptr;
    at.out = o.data();
    at.numHeads = N;
    at.nopeDim = P;
    at.ropeDim = R;
    at.vDim = V;
    at.kvLoraRank = L;
    at.scale = kernelScale(P + R);
    mlaAttendCpu(at);

    auto out = ref::poisonedBf16(D);
    linear(o.data(), oProj, D, N * V, nullptr, out.data());

    Vec want = ref::mla(layer, refCache, ref::fromBf16(h));
    Tolerance tol;
    tol.ulps = INFINITY; // flips travel: bounded by the next two lines
    tol.maxInexact = 0.05;
    tol.maxRelErr = 1e-2;
    expectAgrees(out, want, tol,
                 std::string("mla mixer ") + s.name + " step " +
                     std::to_string(t));

    if (t == tokens - 1) {
      // The whole chain with the attention scaled by 1/sqrt(L+R) fails.
      auto o2 = ref::poisonedBf16(N * V);
      at.out = o2.data();
      at.scale = kernelScale(L + R);
      mlaAttendCpu(at);
      auto out2 = ref::poisonedBf16(D);
      linear(o2.data(), oProj, D, N * V, nullptr, out2.data());
      EXPECT_FALSE(agrees(out2, want, tol))
          << s.name << ": the chain with scale 1/sqrt(L+R) passed";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaRef,
    ::testing::Values(MlaShape{96, 128, 64, 512, 128, 7168, "K3"},
                      MlaShape{4, 128, 64, 512, 128, 7168, "N4"},
                      MlaShape{3, 12, 6, 36, 10, 40, "odd"},
                      // P, R, V, L and their sums all different.
                      MlaShape{5, 24, 8, 40, 20, 72, "distinct"}),
    [](const ::testing::TestParamInfo<MlaShape> &i) {
      return std::string(i.param.name);
    });

INSTANTIATE_TEST_SUITE_P(
    Shapes, MlaMixerRef,
    ::testing::Values(
        // K3 per-head dims, 4 heads, cut hidden / q_lora, output gate.
        MixerShape{{4, 128, 64, 512, 128, 256, "N4_qlora_gate"}, 96, true},
        // Kimi-Linear form (direct q_proj, no gate) at odd sizes.
        MixerShape{{3, 12, 6, 36, 10, 40, "odd_qproj"}, 0, false},
        // All dims distinct, q_lora and the gate.
        MixerShape{{5, 24, 8, 40, 20, 72, "distinct_qlora_gate"}, 36, true}),
    [](const ::testing::TestParamInfo<MixerShape> &i) {
      return std::string(i.param.mla.name);
    });

} // namespace
