//===- moe_cuda_test.cpp - k3_router, k3_gated_mlp, k3_moe_experts --------===//
//
// Each CUDA entry point of kernels/moe/Moe.cu against its CPU twin
// (MoeCpu.cpp) on fresh random inputs, outputs poisoned on both sides:
//  * router: ids must match exactly (inputs are redrawn until every gap
//    between the top k + 1 ranks exceeds 1e-4, far above fp32 noise), the
//    weights to 1e-5 relative (sigmoid's expf may differ by an ulp);
//  * gated_mlp / moe_experts (bf16 outputs): max|diff| / max|ref| <= 1e-2,
//    at most 5% of the elements differing at all and at most 0.2% by more
//    than one bf16 ulp (and more than 1e-3 · max|ref|). The differences
//    come only from fp32 summation order (and expf / tanhf ulps), which
//    flips a bf16 rounding of g or u now and then: an emulation of both
//    orders at the K3 and Kimi-Linear expert shapes gives ~0.01% of g, u
//    and ~0.03% of y differing, and no mixed output. A missed rounding
//    point (say g not rounded) moves every y by about half an ulp: half of
//    the outputs would differ.
// Shapes: K3 (D = 7168, latent Dm = 3584, I = 3072, 896 experts top-16,
// MXFP4 experts, a dense slice I = 4096, shared experts 2 × 3072), Kimi-
// Linear (D = 2304, I = 1024, bf16 SwiGLU experts, 256 experts top-8), and
// small / odd ones (widths not multiples of 8 or 32, mixed formats, inputs
// longer than the kernels' shared-memory stage, topK above one mixing pass).
// The kernels are deterministic, so runs with other grids and block sizes
// (grid 1 included) must give the very same bits.
//
//===----------------------------------------------------------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

#include "kernels/common/CpuMath.h"
#include "kernels/common/MXFP4.h"
#include "kernels/moe/MoeCpu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

namespace {

using namespace k3test;

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

/// A fast deterministic generator (xorshift64*): the K3-sized expert tables
/// are hundreds of MB, too many for std::normal_distribution in a unit test.
class Fast {
public:
  explicit Fast(uint64_t seed) : s_(seed * 0x9e3779b97f4a7c15ull + 1) {}
  uint64_t next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545f4914f6cdd1dull;
  }
  /// bf16 values uniform in (-a, a), never zero.
  std::vector<uint16_t> bf16(size_t n, float a) {
    std::vector<uint16_t> v(n);
    for (size_t i = 0; i < n; i += 4) {
      uint64_t r = next();
      for (size_t j = i; j < std::min(n, i + 4); ++j, r >>= 16) {
        const float u = (static_cast<float>(r & 0xffff) + 0.5f) / 32768.0f;
        v[j] = k3::floatToBf16((u - 1.0f) * a);
      }
    }
    return v;
  }
  std::vector<uint8_t> bytes(size_t n) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; i += 8) {
      uint64_t r = next();
      for (size_t j = i; j < std::min(n, i + 8); ++j, r >>= 8)
        v[j] = static_cast<uint8_t>(r);
    }
    return v;
  }
  /// Integers uniform in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % uint64_t(hi - lo + 1));
  }

private:
  uint64_t s_;
};

/// A weight matrix with its host data and a device copy.
struct Matrix {
  int32_t format = k3::kWeightBf16;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> packed, scale;
  Dev dBf16, dPacked, dScale;

  void upload() {
    if (format == k3::kWeightBf16) {
      dBf16 = Dev::of(bf16);
    } else {
      dPacked = Dev::of(packed);
      dScale = Dev::of(scale);
    }
  }
  k3::WeightRef host() const {
    k3::WeightRef w;
    w.format = format;
    if (format == k3::kWeightBf16) {
      w.bf16 = bf16.data();
    } else {
      w.packed = packed.data();
      w.scale = scale.data();
    }
    return w;
  }
  k3::WeightRef dev() const {
    k3::WeightRef w;
    w.format = format;
    if (format == k3::kWeightBf16) {
      w.bf16 = dBf16.get<uint16_t>();
    } else {
      w.packed = dPacked.get<uint8_t>();
      w.scale = dScale.get<uint8_t>();
    }
    return w;
  }
};

/// A bf16 [rows, cols] matrix, values uniform in (-a, a).
Matrix bf16Matrix(int64_t rows, int64_t cols, float a, Fast &f) {
  Matrix m;
  m.bf16 = f.bf16(size_t(rows * cols), a);
  m.upload();
  return m;
}

/// An MXFP4 [rows, cols] matrix with uniformly random codes (all 16, ±0
/// included) and block exponents in [eLo, eHi]: a valid encoding drawn
/// directly, as quantising hundreds of MB of floats would be too slow here.
Matrix randomMxfp4(int64_t rows, int64_t cols, int eLo, int eHi, Fast &f) {
  Matrix m;
  m.format = k3::kWeightMxfp4;
  m.packed = f.bytes(size_t(rows * cols / 2));
  m.scale.resize(size_t(rows * cols / 32));
  for (auto &e : m.scale)
    e = static_cast<uint8_t>(f.range(eLo, eHi));
  m.upload();
  return m;
}

/// An MXFP4 [rows, cols] matrix quantised from normal(0, std) floats with
/// quantizeMxfp4 (the checkpoint path).
Matrix quantized(int64_t rows, int64_t cols, float std, Rand &r) {
  Matrix m;
  m.format = k3::kWeightMxfp4;
  std::vector<float> w = r.f32(size_t(rows * cols), std);
  k3::quantizeMxfp4(w.data(), rows, cols, m.packed, m.scale);
  m.upload();
  return m;
}

//===----------------------------------------------------------------------===//
// Comparison
//===----------------------------------------------------------------------===//

/// Checks bf16 outputs against the CPU's (see the file comment) and that the
/// output is not trivial (not all zero; relErr is ∞ on a poison NaN left).
void expectBf16Close(const std::vector<uint16_t> &want,
                     const std::vector<uint16_t> &got,
                     const std::string &what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const double rel = relErr(widen(want), widen(got));
  const double differing = fractionDiffering(want, got);
  double maxRef = 0;
  for (uint16_t v : want)
    maxRef = std::max(maxRef, std::fabs(double(k3::bf16ToFloat(v))));
  size_t far = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = k3::bf16ToFloat(want[i]), g = k3::bf16ToFloat(got[i]);
    int ex = 0;
    std::frexp(w, &ex);
    const double ulp = w != 0 ? std::ldexp(1.0, ex - 8) : 0.0;
    const double d = std::fabs(g - w);
    far += !(d <= ulp || d <= 1e-3 * maxRef);
  }
  const double farFrac = double(far) / double(want.size());
  std::printf("  %-44s rel %.2e, differing %.4f, > 1 ulp %.5f\n", what.c_str(),
              rel, differing, farFrac);
  EXPECT_GT(maxRef, 0.0) << what << ": the reference is all zero";
  EXPECT_LE(rel, 1e-2) << what;
  EXPECT_LE(differing, 0.05) << what;
  EXPECT_LE(farFrac, 0.002) << what;
}

//===----------------------------------------------------------------------===//
// router
//===----------------------------------------------------------------------===//

struct RouterOut {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

/// A router problem: host inputs, their device copies, CPU reference.
struct RouterCase {
  int64_t E = 0, D = 0;
  int32_t topK = 0;
  std::vector<uint16_t> h, gate;
  std::vector<float> bias;     ///< empty: no bias
  std::vector<uint16_t> normW; ///< empty: h is scored as it is
  int32_t renormalize = 1;
  float scaling = 1.0f;
  int32_t forceExpert = -1;
  Dev dH, dGate, dBias, dNorm;

  void upload() {
    dH = Dev::of(h);
    dGate = Dev::of(gate);
    if (!bias.empty())
      dBias = Dev::of(bias);
    if (!normW.empty())
      dNorm = Dev::of(normW);
  }
  /// What the gate rows are dotted with: h, or its RMSNorm.
  std::vector<uint16_t> scored() const {
    if (normW.empty())
      return h;
    std::vector<uint16_t> n(h.size());
    k3::cpu::rmsNormBf16(h.data(), normW.data(), D, 1e-5f, n.data());
    return n;
  }
  k3::RouterParams params(bool device) const {
    k3::RouterParams p;
    p.h = device ? dH.get<uint16_t>() : h.data();
    p.gate = device ? dGate.get<uint16_t>() : gate.data();
    p.bias =
        bias.empty() ? nullptr : (device ? dBias.get<float>() : bias.data());
    p.numExperts = E;
    p.dim = D;
    p.topK = topK;
    p.renormalize = renormalize;
    p.scaling = scaling;
    p.forceExpert = forceExpert;
    if (!normW.empty()) {
      p.normWeight = device ? dNorm.get<uint16_t>() : normW.data();
      p.normEps = 1e-5f;
    }
    return p;
  }
  RouterOut cpu() const {
    RouterOut o{std::vector<int32_t>(topK, -1),
                std::vector<float>(topK, std::nanf(""))};
    k3::RouterParams p = params(false);
    p.outIds = o.ids.data();
    p.outWeights = o.weights.data();
    k3::routerCpu(p);
    return o;
  }
  RouterOut gpu(int64_t grid, int64_t block = 256) const {
    Dev ids = Dev::poisoned<int32_t>(topK), w = Dev::poisoned<float>(topK);
    k3::RouterParams p = params(true);
    p.outIds = ids.get<int32_t>();
    p.outWeights = w.get<float>();
    k3::Status s = launch("router", p, grid, block);
    EXPECT_TRUE(s.isOk()) << (s.isOk() ? "" : s.message());
    return {ids.download<int32_t>(topK), w.download<float>(topK)};
  }
  /// The ranks s + bias in float64, best first (ties by index).
  std::vector<std::pair<double, int64_t>> ranks() const {
    std::vector<std::pair<double, int64_t>> r(E);
    const std::vector<uint16_t> x = scored();
    for (int64_t e = 0; e < E; ++e) {
      double dot = 0;
      for (int64_t j = 0; j < D; ++j)
        dot += double(k3::bf16ToFloat(gate[e * D + j])) * k3::bf16ToFloat(x[j]);
      r[e] = {1.0 / (1.0 + std::exp(-dot)) + (bias.empty() ? 0.0 : bias[e]), e};
    }
    std::sort(r.begin(), r.end(), [](auto a, auto b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    return r;
  }
  /// Whether the top topK + 1 ranks are at least `gap` apart.
  bool clearMargins(double gap) const {
    auto r = ranks();
    for (int64_t i = 0; i + 1 < E && i < topK; ++i)
      if (r[i].first - r[i + 1].first <= gap)
        return false;
    return true;
  }
};

/// A random router problem whose top k + 1 are clearly separated: gate rows
/// scaled so that the logits have std ~1.5, bias uniform in (-0.1, 0.1).
RouterCase randomRouter(int64_t E, int64_t D, int32_t topK, bool bias,
                        uint64_t seed, bool norm = false) {
  for (uint64_t attempt = 0;; ++attempt) {
    Fast f(seed * 1000 + attempt);
    Rand r(seed * 1000 + attempt);
    RouterCase c;
    c.E = E, c.D = D, c.topK = topK;
    c.h = r.bf16(size_t(D));
    if (norm) { // an un-normalised residual stream and a norm weight ~ 1
      for (uint16_t &v : c.h)
        v = k3::floatToBf16(7.0f * k3::bf16ToFloat(v));
      c.normW = f.bf16(size_t(D), 0.5f);
      for (uint16_t &v : c.normW)
        v = k3::floatToBf16(1.0f + k3::bf16ToFloat(v));
    }
    c.gate = f.bf16(size_t(E * D), float(1.5 * std::sqrt(3.0 / double(D))));
    if (bias) {
      std::vector<uint16_t> b = f.bf16(size_t(E), 0.1f);
      for (uint16_t v : b)
        c.bias.push_back(k3::bf16ToFloat(v));
    }
    if (c.clearMargins(1e-4) || attempt == 200) {
      EXPECT_LT(attempt, 200u) << "no well-separated draw";
      c.upload();
      return c;
    }
  }
}

void expectRouterMatches(const RouterOut &want, const RouterOut &got,
                         const std::string &what) {
  EXPECT_EQ(got.ids, want.ids) << what;
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  double maxRel = 0;
  for (size_t k = 0; k < want.weights.size(); ++k) {
    ASSERT_TRUE(std::isfinite(got.weights[k])) << what << " slot " << k;
    maxRel = std::max(
        maxRel, std::fabs(double(got.weights[k]) - double(want.weights[k])) /
                    std::fabs(double(want.weights[k])));
  }
  std::printf("  %-44s ids equal, weights rel %.2e\n", what.c_str(), maxRel);
  EXPECT_LE(maxRel, 1e-5) << what;
}

TEST(MoeCuda, RouterMatchesCpu) {
  K3_REQUIRE_GPU();
  struct Shape {
    int64_t E, D;
    int32_t topK;
    bool bias;
    int32_t renorm;
    float scaling;
    const char *name;
  };
  const Shape shapes[] = {
      {896, 7168, 16, true, 1, 2.827f, "K3 896 x 7168 top-16"},
      {256, 2304, 8, true, 1, 2.446f, "Kimi-Linear 256 x 2304 top-8"},
      {37, 100, 5, false, 0, 1.5f, "odd 37 x 100 top-5, no renorm"},
      {64, 9000, 6, true, 1, 1.0f, "h longer than the stage 64 x 9000"},
      {5, 7, 5, false, 1, 1.0f, "tiny 5 x 7, k = E"},
  };
  for (const Shape &s : shapes) {
    RouterCase c = randomRouter(s.E, s.D, s.topK, s.bias, uint64_t(s.E + s.D));
    c.renormalize = s.renorm;
    c.scaling = s.scaling;
    const RouterOut want = c.cpu();
    expectRouterMatches(want, c.gpu((s.E + 7) / 8), s.name);
    // Grid 1 (one block ranks what it scored) and a 64-thread block.
    const RouterOut one = c.gpu(1, 64);
    EXPECT_EQ(one.ids, want.ids) << s.name << " grid 1";
    EXPECT_EQ(std::memcmp(one.weights.data(),
                          c.gpu((s.E + 7) / 8).weights.data(),
                          sizeof(float) * size_t(s.topK)),
              0)
        << s.name << ": grid 1 gave other bits";
  }
}

/// The ranking's other paths: topK >= 32 and more warp survivors than the
/// stage holds count every key over all E; topK = 31 prunes the most.
TEST(MoeCuda, RouterRankPathsMatchCpu) {
  K3_REQUIRE_GPU();
  for (auto [E, D, topK] : {std::tuple<int64_t, int64_t, int32_t>{300, 128, 40},
                            {2000, 64, 31},
                            {8192, 32, 4},
                            {33, 64, 32}}) {
    RouterCase c = randomRouter(E, D, topK, true, uint64_t(E + topK));
    const RouterOut want = c.cpu();
    const std::string name = std::to_string(E) + " x " + std::to_string(D) +
                             " top-" + std::to_string(topK);
    expectRouterMatches(want, c.gpu((E + 7) / 8), name);
    expectRouterMatches(want, c.gpu(3, 96), name + " grid 3 x 96");
  }
}

/// The router with its input norm folded in (k3.moe_ffn's router): h is an
/// un-normalised residual stream; both the staged path (grid 1) and the
/// plan's one-row-per-warp path normalise it as the CPU does.
TEST(MoeCuda, RouterWithPreNormMatchesCpu) {
  K3_REQUIRE_GPU();
  for (auto [E, D, topK] : {std::tuple<int64_t, int64_t, int32_t>{256, 2304, 8},
                            {37, 100, 5},
                            {64, 9000, 6}}) {
    RouterCase c = randomRouter(E, D, topK, true, uint64_t(E * 7 + D), true);
    c.scaling = 2.446f;
    const RouterOut want = c.cpu();
    const std::string name = "pre-norm " + std::to_string(E) + " x " +
                             std::to_string(D) + " top-" + std::to_string(topK);
    expectRouterMatches(want, c.gpu((E + 7) / 8), name);
    expectRouterMatches(want, c.gpu(1, 64), name + " grid 1");
  }
}

/// Equal ranks go to the lower index: identical gate rows with equal bias
/// give bitwise equal ranks on both sides.
TEST(MoeCuda, RouterTiesGoToTheLowerIndex) {
  K3_REQUIRE_GPU();
  const int64_t E = 64, D = 256;
  Fast f(77);
  RouterCase c;
  c.E = E, c.D = D, c.topK = 8;
  c.h = f.bf16(size_t(D), 1.0f);
  // Tiny logits (s = 0.5 ± 0.003); the bias, 0.01 apart, sets the order.
  c.gate = f.bf16(size_t(E * D), 0.0005f);
  std::vector<int64_t> perm(E);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = E - 1; i > 0; --i)
    std::swap(perm[i], perm[f.range(0, i)]);
  for (int64_t e = 0; e < E; ++e)
    c.bias.push_back(0.01f * float(perm[e]));
  // Pairs of identical experts near the top: (7, 40) and (51, 50).
  for (auto [a, b] : {std::pair<int64_t, int64_t>{40, 7}, {51, 50}}) {
    std::copy(c.gate.begin() + a * D, c.gate.begin() + (a + 1) * D,
              c.gate.begin() + b * D);
  }
  c.bias[7] = c.bias[40] = 0.7f;
  c.bias[50] = c.bias[51] = 0.69f;
  c.upload();
  const RouterOut want = c.cpu();
  ASSERT_NE(std::find(want.ids.begin(), want.ids.end(), 7), want.ids.end());
  ASSERT_NE(std::find(want.ids.begin(), want.ids.end(), 50), want.ids.end());
  expectRouterMatches(want, c.gpu(8), "ties 64 x 256 top-8");
}

/// The test mutant: every slot routes to forceExpert.
TEST(MoeCuda, RouterForcedExpert) {
  K3_REQUIRE_GPU();
  RouterCase c = randomRouter(64, 512, 6, true, 5);
  c.forceExpert = 13;
  const RouterOut want = c.cpu();
  ASSERT_EQ(want.ids, std::vector<int32_t>(6, 13));
  expectRouterMatches(want, c.gpu(8), "forceExpert 13");
}

/// NaN ranks come after every number, by index; NaN weights stay NaN.
TEST(MoeCuda, RouterNaNRanksLast) {
  K3_REQUIRE_GPU();
  RouterCase c = randomRouter(16, 64, 16, false, 9);
  c.renormalize = 0;
  c.gate[3 * 64 + 5] = 0x7fc0; // experts 3 and 11 score NaN
  c.gate[11 * 64] = 0x7fc0;
  c.upload();
  const RouterOut want = c.cpu();
  const RouterOut got = c.gpu(2);
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(want.ids[14], 3);
  EXPECT_EQ(want.ids[15], 11);
  for (int k = 0; k < 16; ++k) {
    if (std::isnan(want.weights[k]))
      EXPECT_TRUE(std::isnan(got.weights[k])) << k;
    else
      EXPECT_NEAR(got.weights[k], want.weights[k],
                  1e-5 * std::fabs(want.weights[k]))
          << k;
  }
}

//===----------------------------------------------------------------------===//
// gated_mlp
//===----------------------------------------------------------------------===//

/// A gated-MLP problem with its weights; formats: 'b' bf16, 'm' random MXFP4,
/// 'q' quantizeMxfp4 (per matrix, w1 w3 w2).
struct MlpCase {
  int64_t in = 0, inter = 0, out = 0;
  int32_t activation = k3::kActSiTU;
  int32_t hasBeta2 = 1;
  bool norm = false, residual = false;
  std::vector<uint16_t> x, normW, res;
  Matrix w1, w3, w2;
  Dev dX, dNorm, dRes;

  k3::GatedMlpParams params(bool device) const {
    k3::GatedMlpParams p;
    p.x = device ? dX.get<uint16_t>() : x.data();
    p.normWeight =
        norm ? (device ? dNorm.get<uint16_t>() : normW.data()) : nullptr;
    p.normEps = 1e-5f;
    p.w1 = device ? w1.dev() : w1.host();
    p.w3 = device ? w3.dev() : w3.host();
    p.w2 = device ? w2.dev() : w2.host();
    p.inDim = in;
    p.interDim = inter;
    p.outDim = out;
    p.activation = activation;
    p.beta1 = 4.0f;
    p.hasBeta2 = hasBeta2;
    p.beta2 = 25.0f;
    p.residual =
        residual ? (device ? dRes.get<uint16_t>() : res.data()) : nullptr;
    return p;
  }
  std::vector<uint16_t> cpu() const {
    std::vector<uint16_t> o(size_t(out), 0xffff);
    k3::GatedMlpParams p = params(false);
    p.out = o.data();
    k3::gatedMlpCpu(p);
    return o;
  }
  std::vector<uint16_t> gpu(int64_t grid, int64_t block = 256) const {
    Dev o = Dev::poisoned<uint16_t>(size_t(out));
    k3::GatedMlpParams p = params(true);
    p.out = o.get<uint16_t>();
    k3::Status s = launch("gated_mlp", p, grid, block);
    EXPECT_TRUE(s.isOk()) << (s.isOk() ? "" : s.message());
    return o.download<uint16_t>(size_t(out));
  }
  int64_t planGrid() const { return std::max<int64_t>((inter + 7) / 8, 1); }
};

Matrix makeMatrix(char kind, int64_t rows, int64_t cols, Fast &f, Rand &r) {
  // bf16 weights ~ 1/sqrt(cols) (std a/√3), MXFP4 with 2^-6..2^-4 scales
  // (codes up to 6: comparable magnitudes), quantised normal(0, 0.05).
  const float a = float(std::sqrt(3.0 / double(cols)));
  if (kind == 'b')
    return bf16Matrix(rows, cols, a, f);
  if (kind == 'm')
    return randomMxfp4(rows, cols, 127 - 7, 127 - 5, f);
  return quantized(rows, cols, 0.05f, r);
}

MlpCase makeMlp(int64_t in, int64_t inter, int64_t out, const char *formats,
                int32_t activation, bool norm, bool residual, uint64_t seed) {
  Fast f(seed);
  Rand r(seed);
  MlpCase c;
  c.in = in, c.inter = inter, c.out = out;
  c.activation = activation;
  c.norm = norm, c.residual = residual;
  c.x = r.bf16(size_t(in), norm ? 3.0f : 1.0f);
  c.w1 = makeMatrix(formats[0], inter, in, f, r);
  c.w3 = makeMatrix(formats[1], inter, in, f, r);
  c.w2 = makeMatrix(formats[2], out, inter, f, r);
  c.dX = Dev::of(c.x);
  if (norm) {
    for (uint16_t v : f.bf16(size_t(in), 0.5f))
      c.normW.push_back(k3::floatToBf16(1.0f + k3::bf16ToFloat(v)));
    c.dNorm = Dev::of(c.normW);
  }
  if (residual) {
    c.res = r.bf16(size_t(out), 2.0f);
    c.dRes = Dev::of(c.res);
  }
  return c;
}

TEST(MoeCuda, GatedMlpMatchesCpu) {
  K3_REQUIRE_GPU();
  struct Shape {
    int64_t in, inter, out;
    const char *formats;
    int32_t act;
    bool norm, residual;
    const char *name;
  };
  const Shape shapes[] = {
      {7168, 4096, 7168, "bbb", k3::kActSiTU, true, true,
       "K3 dense slice 7168-4096-7168 norm+res"},
      {7168, 6144, 7168, "bbb", k3::kActSiTU, false, false,
       "K3 shared 7168-6144-7168"},
      {2304, 1024, 2304, "bbb", k3::kActSwiGLU, true, true,
       "Kimi shared 2304-1024-2304 SwiGLU"},
      {3584, 3072, 3584, "mmm", k3::kActSiTU, false, false,
       "K3 expert MXFP4 3584-3072-3584"},
      {256, 96, 160, "qqq", k3::kActSwiGLU, true, false,
       "quantised MXFP4 256-96-160"},
      {100, 37, 53, "bbb", k3::kActSiTU, true, true, "odd 100-37-53"},
      {8, 1, 3, "bbb", k3::kActSwiGLU, false, false, "tiny 8-1-3"},
      {9000, 40, 24, "bbb", k3::kActSiTU, true, false,
       "x longer than the stage 9000-40-24"},
      {512, 64, 96, "bqq", k3::kActSiTU, false, true,
       "mixed formats 512-64-96"},
  };
  uint64_t seed = 1;
  for (const Shape &s : shapes) {
    MlpCase c = makeMlp(s.in, s.inter, s.out, s.formats, s.act, s.norm,
                        s.residual, seed++);
    if (s.act == k3::kActSiTU && s.in == 100)
      c.hasBeta2 = 0; // SiTU with a plain up branch
    expectBf16Close(c.cpu(), c.gpu(c.planGrid()), s.name);
  }
}

/// Grid 1, small and large grids, 64- and 1024-thread blocks, and repeated
/// launches (the work queue resets itself) all give the same bits.
TEST(MoeCuda, GatedMlpAnyGridSameBits) {
  K3_REQUIRE_GPU();
  MlpCase c = makeMlp(2304, 1024, 2304, "bbb", k3::kActSwiGLU, true, true, 42);
  const std::vector<uint16_t> ref = c.gpu(c.planGrid());
  expectBf16Close(c.cpu(), ref, "Kimi shared (plan grid)");
  for (auto [grid, block] : {std::pair<int64_t, int64_t>{1, 256},
                             {1, 64},
                             {3, 64},
                             {528, 256},
                             {2, 1024},
                             {5000, 128},
                             {c.planGrid(), 256}})
    EXPECT_EQ(c.gpu(grid, block), ref) << "grid " << grid << " block " << block;
  MlpCase m = makeMlp(1024, 512, 768, "mmm", k3::kActSiTU, true, false, 43);
  const std::vector<uint16_t> mref = m.gpu(m.planGrid());
  expectBf16Close(m.cpu(), mref, "MXFP4 1024-512-768 (plan grid)");
  EXPECT_EQ(m.gpu(1, 32), mref) << "grid 1 block 32";
  EXPECT_EQ(m.gpu(7, 96), mref) << "grid 7 block 96";
}

/// `out` may alias `residual`.
TEST(MoeCuda, GatedMlpOutAliasesResidual) {
  K3_REQUIRE_GPU();
  MlpCase c = makeMlp(2304, 1024, 2304, "bbb", k3::kActSiTU, true, true, 7);
  const std::vector<uint16_t> want = c.cpu();
  Dev io = Dev::of(c.res);
  k3::GatedMlpParams p = c.params(true);
  p.residual = io.get<uint16_t>();
  p.out = io.get<uint16_t>();
  ASSERT_TRUE(launch("gated_mlp", p, c.planGrid()).isOk());
  const std::vector<uint16_t> got = io.download<uint16_t>(size_t(c.out));
  EXPECT_NE(got, c.res) << "the residual came back unchanged";
  expectBf16Close(want, got, "out aliasing residual");
}

//===----------------------------------------------------------------------===//
// moe_experts
//===----------------------------------------------------------------------===//

/// An expert table (w1, w3, w2 per expert) on both sides, plus x and the
/// routing (ids, weights).
struct ExpertsCase {
  int64_t dim = 0, inter = 0, numExperts = 0;
  int32_t topK = 0;
  int32_t activation = k3::kActSiTU;
  int32_t hasBeta2 = 1;
  std::vector<uint16_t> x;
  std::vector<int32_t> ids;
  std::vector<float> weights;
  std::vector<Matrix> w1, w3, w2;
  std::vector<k3::WeightRef> h1, h3, h2; ///< host tables
  Dev dX, dIds, dWeights, d1, d3, d2;    ///< device tables hold device ptrs
  /// k3.moe_ffn's parts, each optional: x's norm weight, the shared expert
  /// (sharedInter > 0) and the residual.
  std::vector<uint16_t> normW, residual;
  int64_t sharedInter = 0;
  Matrix s1, s3, s2;
  Dev dNorm, dResidual;

  void upload() {
    h1.clear(), h3.clear(), h2.clear();
    std::vector<k3::WeightRef> t1, t3, t2;
    for (int64_t e = 0; e < numExperts; ++e) {
      h1.push_back(w1[e].host()), t1.push_back(w1[e].dev());
      h3.push_back(w3[e].host()), t3.push_back(w3[e].dev());
      h2.push_back(w2[e].host()), t2.push_back(w2[e].dev());
    }
    d1 = Dev::of(t1), d3 = Dev::of(t3), d2 = Dev::of(t2);
    dX = Dev::of(x);
    dIds = Dev::of(ids);
    dWeights = Dev::of(weights);
    if (!normW.empty())
      dNorm = Dev::of(normW);
    if (!residual.empty())
      dResidual = Dev::of(residual);
  }
  k3::MoeExpertsParams params(bool device) const {
    k3::MoeExpertsParams p;
    p.x = device ? dX.get<uint16_t>() : x.data();
    p.ids = device ? dIds.get<int32_t>() : ids.data();
    p.weights = device ? dWeights.get<float>() : weights.data();
    p.topK = topK;
    p.numExperts = numExperts;
    p.w1 = device ? d1.get<k3::WeightRef>() : h1.data();
    p.w3 = device ? d3.get<k3::WeightRef>() : h3.data();
    p.w2 = device ? d2.get<k3::WeightRef>() : h2.data();
    p.dim = dim;
    p.interDim = inter;
    p.activation = activation;
    p.beta1 = 4.0f;
    p.hasBeta2 = hasBeta2;
    p.beta2 = 25.0f;
    if (!normW.empty()) {
      p.normWeight = device ? dNorm.get<uint16_t>() : normW.data();
      p.normEps = 1e-5f;
    }
    if (sharedInter > 0) {
      p.sharedInterDim = sharedInter;
      p.sharedW1 = device ? s1.dev() : s1.host();
      p.sharedW3 = device ? s3.dev() : s3.host();
      p.sharedW2 = device ? s2.dev() : s2.host();
    }
    if (!residual.empty())
      p.residual = device ? dResidual.get<uint16_t>() : residual.data();
    return p;
  }
  std::vector<uint16_t> cpu() const {
    std::vector<uint16_t> o(size_t(dim), 0xffff);
    k3::MoeExpertsParams p = params(false);
    p.out = o.data();
    k3::moeExpertsCpu(p);
    return o;
  }
  std::vector<uint16_t> gpu(int64_t grid, int64_t block = 256,
                            const char *kernel = "moe_experts") const {
    Dev o = Dev::poisoned<uint16_t>(size_t(dim));
    k3::MoeExpertsParams p = params(true);
    p.out = o.get<uint16_t>();
    k3::Status s = launch(kernel, p, grid, block);
    EXPECT_TRUE(s.isOk()) << (s.isOk() ? "" : s.message());
    return o.download<uint16_t>(size_t(dim));
  }
  int64_t planGrid() const {
    return std::max<int64_t>(topK * ((inter + 7) / 8), 1);
  }
};

/// `formats`: 'b' bf16, 'm' random MXFP4, 'q' quantizeMxfp4, 'x' alternate
/// (even experts bf16, odd random MXFP4). Distinct random experts, weights
/// like a renormalised, scaled router's.
ExpertsCase makeExperts(int64_t dim, int64_t inter, int64_t numExperts,
                        int32_t topK, char formats, int32_t activation,
                        uint64_t seed) {
  Fast f(seed);
  Rand r(seed);
  ExpertsCase c;
  c.dim = dim, c.inter = inter, c.numExperts = numExperts, c.topK = topK;
  c.activation = activation;
  c.x = r.bf16(size_t(dim));
  for (int64_t e = 0; e < numExperts; ++e) {
    const char kind = formats == 'x' ? (e % 2 ? 'm' : 'b') : formats;
    c.w1.push_back(makeMatrix(kind, inter, dim, f, r));
    c.w3.push_back(makeMatrix(kind, inter, dim, f, r));
    c.w2.push_back(makeMatrix(kind, dim, inter, f, r));
  }
  std::vector<int32_t> perm(static_cast<size_t>(numExperts));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = numExperts - 1; i > 0; --i)
    std::swap(perm[size_t(i)], perm[size_t(f.range(0, i))]);
  c.ids.assign(perm.begin(), perm.begin() + topK);
  for (int32_t k = 0; k < topK; ++k)
    c.weights.push_back(float(0.3 + 2.5 * double(f.range(1, 1000)) / 1000.0) /
                        float(topK));
  c.upload();
  return c;
}

/// An expert-mix case of MoeExpertsMatchCpu / MoeMxfp4Cuda.MatchesCpu.
struct ExpertsShape {
  int64_t dim, inter, experts;
  int32_t topK;
  char formats;
  int32_t act;
  const char *name;
};

TEST(MoeCuda, MoeExpertsMatchCpu) {
  K3_REQUIRE_GPU();
  const ExpertsShape shapes[] = {
      {3584, 3072, 32, 16, 'm', k3::kActSiTU,
       "K3 latent MXFP4 3584-3072, 32 experts top-16"},
      {2304, 1024, 12, 8, 'b', k3::kActSwiGLU,
       "Kimi bf16 2304-1024, 12 experts top-8"},
      {256, 96, 6, 3, 'q', k3::kActSiTU, "quantised MXFP4 256-96 top-3"},
      {100, 37, 5, 3, 'b', k3::kActSiTU, "odd bf16 100-37 top-3"},
      {512, 160, 8, 4, 'x', k3::kActSiTU, "mixed table 512-160 top-4"},
      {8448, 64, 4, 2, 'm', k3::kActSiTU, "x longer than the stage 8448-64"},
      {64, 32, 80, 70, 'b', k3::kActSwiGLU, "70 slots (two passes) 64-32"},
      {16, 8, 3, 1, 'b', k3::kActSwiGLU, "tiny 16-8 top-1"},
  };
  uint64_t seed = 100;
  for (const ExpertsShape &s : shapes) {
    ExpertsCase c = makeExperts(s.dim, s.inter, s.experts, s.topK, s.formats,
                                s.act, seed++);
    if (s.dim == 100)
      c.hasBeta2 = 0;
    expectBf16Close(c.cpu(), c.gpu(c.planGrid()), s.name);
  }
}

/// Adds k3.moe_ffn's parts to an experts case: an un-normalised x with a
/// norm weight, a bf16 shared expert of `sharedInter` rows (0: none) and
/// the residual x.
void addFfnParts(ExpertsCase &c, int64_t sharedInter, uint64_t seed) {
  Fast f(seed);
  Rand r(seed);
  for (uint16_t &v : c.x)
    v = k3::floatToBf16(6.0f * k3::bf16ToFloat(v));
  c.normW = f.bf16(size_t(c.dim), 0.5f);
  for (uint16_t &v : c.normW)
    v = k3::floatToBf16(1.0f + k3::bf16ToFloat(v));
  c.sharedInter = sharedInter;
  if (sharedInter > 0) {
    c.s1 = makeMatrix('b', sharedInter, c.dim, f, r);
    c.s3 = makeMatrix('b', sharedInter, c.dim, f, r);
    c.s2 = makeMatrix('b', c.dim, sharedInter, f, r);
  }
  c.residual = c.x;
  c.upload();
}

/// k3.moe_ffn's expert launch: x̂ = RMSNorm(x), the routed mix, the shared
/// expert and the residual, at Kimi-Linear's shape and at the corners (x
/// longer than the stage, two mixing passes, MXFP4 routed experts with a
/// bf16 shared one, no shared expert). Other grids give the same bits.
TEST(MoeCuda, MoeExpertsFfnMatchCpu) {
  K3_REQUIRE_GPU();
  struct Shape {
    int64_t dim, inter, experts;
    int32_t topK;
    char formats;
    int64_t shared;
    const char *name;
  };
  const Shape shapes[] = {
      {2304, 1024, 12, 8, 'b', 1024, "Kimi FFN bf16 2304-1024 top-8 + shared"},
      {512, 160, 8, 4, 'm', 320, "MXFP4 routed, bf16 shared 512-160/320"},
      {8448, 64, 4, 2, 'b', 96, "x longer than the stage 8448-64"},
      {64, 32, 80, 70, 'b', 40, "70 slots (two passes) + shared 64-32/40"},
      {100, 37, 5, 3, 'b', 0, "odd 100-37, norm and residual only"},
  };
  uint64_t seed = 300;
  for (const Shape &s : shapes) {
    ExpertsCase c = makeExperts(s.dim, s.inter, s.experts, s.topK, s.formats,
                                k3::kActSwiGLU, seed++);
    addFfnParts(c, s.shared, seed++);
    const std::vector<uint16_t> ref = c.gpu(528);
    expectBf16Close(c.cpu(), ref, s.name);
    EXPECT_EQ(c.gpu(1, 256), ref) << s.name << ": grid 1";
    EXPECT_EQ(c.gpu(37, 512), ref) << s.name << ": grid 37 block 512";
  }
}

/// moe_ffn: the router and the experts in one launch, the ids and weights
/// written and read inside it. Against routerCpu then moeExpertsCpu (CPU
/// moeFfnCpu) at Kimi-Linear's router shape (256 experts top-8, shared
/// expert, norm, residual) and small ones; ids exact (well-separated ranks),
/// the output as moe_experts'; other grids and block sizes give the same bits.
TEST(MoeCuda, MoeFfnMatchesCpu) {
  K3_REQUIRE_GPU();
  struct Shape {
    int64_t E, D, inter;
    int32_t topK;
    int64_t shared;
    const char *name;
  };
  const Shape shapes[] = {
      // (Expert widths below Kimi-Linear's 1024 keep the tables small.)
      {256, 2304, 32, 8, 256, "Kimi router 256 x 2304 top-8 + shared"},
      {32, 2304, 512, 8, 1024, "Kimi FFN 32 experts 2304-512 + shared"},
      {12, 256, 96, 3, 0, "12 experts top-3, no shared expert"},
  };
  uint64_t seed = 500;
  for (const Shape &s : shapes) {
    RouterCase r = randomRouter(s.E, s.D, s.topK, true, seed++, true);
    r.scaling = 2.446f;
    ExpertsCase c =
        makeExperts(s.D, s.inter, s.E, s.topK, 'b', k3::kActSwiGLU, seed++);
    addFfnParts(c, s.shared, seed++);
    // One input: the router's h and norm are the experts' x and norm.
    c.x = r.h;
    c.normW = r.normW;
    c.residual = r.h;
    c.upload();
    const RouterOut route = r.cpu();
    c.ids = route.ids;
    c.weights = route.weights;
    const std::vector<uint16_t> want = c.cpu();

    auto run = [&](int64_t grid, int64_t block, bool hinted = false) {
      Dev ids = Dev::poisoned<int32_t>(size_t(s.topK));
      Dev wts = Dev::poisoned<float>(size_t(s.topK));
      Dev out = Dev::poisoned<uint16_t>(size_t(s.D));
      k3::MoeFfnParams p;
      p.router = r.params(true);
      p.router.outIds = ids.get<int32_t>();
      p.router.outWeights = wts.get<float>();
      p.experts = c.params(true);
      p.experts.x = p.router.h;
      p.experts.normWeight = p.router.normWeight;
      p.experts.residual = p.router.h;
      p.experts.ids = ids.get<int32_t>();
      p.experts.weights = wts.get<float>();
      p.experts.out = out.get<uint16_t>();
      if (hinted) { // an L2 prefetch of the router's gate: no bit changes
        p.l2Prefetch.data = p.router.gate;
        p.l2Prefetch.bytes = s.E * s.D * 2 / 16 * 16;
      }
      k3::Status st = launch("moe_ffn", p, grid, block);
      EXPECT_TRUE(st.isOk()) << (st.isOk() ? "" : st.message());
      EXPECT_EQ(ids.download<int32_t>(size_t(s.topK)), route.ids) << s.name;
      return out.download<uint16_t>(size_t(s.D));
    };
    const std::vector<uint16_t> got = run(528, 256);
    expectBf16Close(want, got, s.name);
    EXPECT_EQ(run(1, 256), got) << s.name << ": grid 1";
    EXPECT_EQ(run(41, 512), got) << s.name << ": grid 41 block 512";
    EXPECT_EQ(run(528, 256, true), got) << s.name << ": an L2 prefetch hint";
  }
}

/// One K3 expert with weight 1: out = y exactly, so the expert's own
/// rounding points are checked as tightly as gated_mlp's.
TEST(MoeCuda, MoeExpertsSingleK3Expert) {
  K3_REQUIRE_GPU();
  ExpertsCase c = makeExperts(3584, 3072, 4, 1, 'm', k3::kActSiTU, 3);
  c.weights = {1.0f};
  c.dWeights = Dev::of(c.weights);
  expectBf16Close(c.cpu(), c.gpu(c.planGrid()), "K3 one expert, weight 1");
}

/// Other grids and block sizes, and repeated launches, give the same bits.
TEST(MoeCuda, MoeExpertsAnyGridSameBits) {
  K3_REQUIRE_GPU();
  ExpertsCase c = makeExperts(1024, 512, 8, 4, 'm', k3::kActSiTU, 7);
  const std::vector<uint16_t> ref = c.gpu(c.planGrid());
  expectBf16Close(c.cpu(), ref, "MXFP4 1024-512 top-4 (plan grid)");
  for (auto [grid, block] : {std::pair<int64_t, int64_t>{1, 256},
                             {1, 32},
                             {7, 64},
                             {528, 256},
                             {2, 1024},
                             {5000, 128},
                             {c.planGrid(), 256}})
    EXPECT_EQ(c.gpu(grid, block), ref) << "grid " << grid << " block " << block;
  ExpertsCase b = makeExperts(2304, 1024, 10, 8, 'b', k3::kActSwiGLU, 8);
  const std::vector<uint16_t> bref = b.gpu(b.planGrid());
  EXPECT_EQ(b.gpu(1, 256), bref) << "bf16 grid 1";
  EXPECT_EQ(b.gpu(33, 512), bref) << "bf16 grid 33 block 512";
}

//===----------------------------------------------------------------------===//
// moe_experts_mxfp4
//===----------------------------------------------------------------------===//

/// moe_experts_mxfp4 with the plan's grid (four blocks an SM) and block.
std::vector<uint16_t> mxfp4Gpu(const ExpertsCase &c, int64_t grid = 528,
                               int64_t block = k3::kMoeMxfp4Threads) {
  return c.gpu(grid, block, "moe_experts_mxfp4");
}

/// The tensor-core form against the CPU (moeExpertsCpu) at K3's latent
/// shape and smaller ones within its limits: random codes with several
/// scale ranges, quantised normal weights, a residual, SwiGLU; both
/// activations from x of a wide dynamic range (each MXFP4 block of x is
/// scaled on its own into fp16).
TEST(MoeMxfp4Cuda, MatchesCpu) {
  K3_REQUIRE_GPU();
  const ExpertsShape shapes[] = {
      {3584, 3072, 32, 16, 'm', k3::kActSiTU,
       "K3 latent MXFP4 3584-3072, 32 experts top-16"},
      {1024, 512, 8, 4, 'q', k3::kActSiTU, "quantised 1024-512 top-4"},
      {512, 1536, 6, 3, 'm', k3::kActSwiGLU, "SwiGLU 512-1536 top-3"},
      {4096, 4096, 3, 2, 'q', k3::kActSiTU, "the largest 4096-4096 top-2"},
  };
  uint64_t seed = 700;
  for (const ExpertsShape &s : shapes) {
    ExpertsCase c = makeExperts(s.dim, s.inter, s.experts, s.topK, s.formats,
                                s.act, seed++);
    // x over ~2^-12 .. 2^6: one block in 8 scaled down, one in 8 up.
    Fast f(seed++);
    for (size_t i = 0; i < c.x.size(); ++i) {
      const int64_t band = f.range(0, 7);
      const float scale = band == 0 ? 1.0f / 4096.0f : band == 1 ? 64.0f : 1.0f;
      c.x[i] = k3::floatToBf16(scale * k3::bf16ToFloat(c.x[i]));
    }
    c.residual = c.x;
    c.upload();
    expectBf16Close(c.cpu(), mxfp4Gpu(c), s.name);
  }
  // Scales over 2^-30 .. 2^3 (the codes' products far apart within a row).
  Fast f(seed++);
  ExpertsCase c = makeExperts(1024, 1024, 4, 2, 'm', k3::kActSiTU, seed++);
  for (std::vector<Matrix> *t : {&c.w1, &c.w3, &c.w2})
    for (Matrix &m : *t) {
      for (uint8_t &e : m.scale)
        e = static_cast<uint8_t>(f.range(127 - 30, 127 + 3));
      m.upload();
    }
  c.upload();
  expectBf16Close(c.cpu(), mxfp4Gpu(c), "scales 2^-30 .. 2^3");
}

/// One K3 expert with weight 1: out = y, each rounding point as tight as
/// the CUDA-core form's (MoeCuda.MoeExpertsSingleK3Expert).
TEST(MoeMxfp4Cuda, SingleK3Expert) {
  K3_REQUIRE_GPU();
  ExpertsCase c = makeExperts(3584, 3072, 4, 1, 'm', k3::kActSiTU, 3);
  c.weights = {1.0f};
  c.dWeights = Dev::of(c.weights);
  expectBf16Close(c.cpu(), mxfp4Gpu(c), "K3 one expert, weight 1");
}

/// Any grid gives the same bits (an item's rows are summed in one order),
/// as do repeated launches (the queue and counters reset themselves).
TEST(MoeMxfp4Cuda, AnyGridSameBits) {
  K3_REQUIRE_GPU();
  ExpertsCase c = makeExperts(3584, 3072, 16, 8, 'm', k3::kActSiTU, 11);
  const std::vector<uint16_t> ref = mxfp4Gpu(c);
  expectBf16Close(c.cpu(), ref, "K3 16 experts top-8 (plan grid)");
  for (int64_t grid : {1, 3, 132, 528, 528, 5000})
    EXPECT_EQ(mxfp4Gpu(c, grid), ref) << "grid " << grid;
}

/// An expert id outside the table, or a scale byte of 255 (NaN), makes what
/// it touches NaN, as on the CPU; other slots are unharmed (checked by the
/// CPU's output where it is a number).
TEST(MoeMxfp4Cuda, NaNsWhereTheCpuHasThem) {
  K3_REQUIRE_GPU();
  ExpertsCase c = makeExperts(1024, 512, 8, 4, 'm', k3::kActSiTU, 13);
  c.ids[2] = 8; // == numExperts
  c.upload();
  for (uint16_t v : mxfp4Gpu(c))
    EXPECT_TRUE(std::isnan(k3::bf16ToFloat(v)));
  ExpertsCase d = makeExperts(1024, 512, 8, 4, 'm', k3::kActSiTU, 14);
  // A NaN scale in W2 of the first slot's expert: rows 5 and 700 are NaN.
  Matrix &w2 = d.w2[size_t(d.ids[0])];
  w2.scale[size_t(5 * 512 / 32 + 3)] = 255;
  w2.scale[size_t(700 * 512 / 32)] = 255;
  w2.upload();
  d.upload();
  const std::vector<uint16_t> want = d.cpu(), got = mxfp4Gpu(d);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(std::isnan(k3::bf16ToFloat(want[i])),
              std::isnan(k3::bf16ToFloat(got[i])))
        << "row " << i;
  EXPECT_TRUE(std::isnan(k3::bf16ToFloat(got[5])));
  EXPECT_TRUE(std::isnan(k3::bf16ToFloat(got[700])));
  std::vector<uint16_t> wantNum, gotNum;
  for (size_t i = 0; i < want.size(); ++i)
    if (!std::isnan(k3::bf16ToFloat(want[i])))
      wantNum.push_back(want[i]), gotNum.push_back(got[i]);
  expectBf16Close(wantNum, gotNum, "the rows without a NaN scale");
}

/// Outside its limits (moeExpertsMxfp4Fits, the block size, bf16 experts)
/// the output is NaN, never a wrong number.
TEST(MoeMxfp4Cuda, OutsideItsLimitsIsNaN) {
  K3_REQUIRE_GPU();
  auto allNaN = [](const std::vector<uint16_t> &v, const char *what) {
    for (uint16_t x : v)
      if (!std::isnan(k3::bf16ToFloat(x))) {
        ADD_FAILURE() << what << ": a number where NaN was expected";
        return;
      }
  };
  allNaN(mxfp4Gpu(makeExperts(256, 512, 4, 2, 'm', k3::kActSiTU, 20)),
         "dim 256");
  allNaN(mxfp4Gpu(makeExperts(512, 544, 4, 2, 'm', k3::kActSiTU, 21)),
         "interDim 544");
  allNaN(mxfp4Gpu(makeExperts(4608, 512, 4, 2, 'm', k3::kActSiTU, 22)),
         "dim 4608");
  allNaN(mxfp4Gpu(makeExperts(512, 512, 4, 2, 'b', k3::kActSiTU, 23)),
         "bf16 experts");
  ExpertsCase c = makeExperts(512, 512, 4, 2, 'm', k3::kActSiTU, 24);
  allNaN(mxfp4Gpu(c, 528, 128), "block 128");
  addFfnParts(c, 0, 25); // a norm weight
  allNaN(mxfp4Gpu(c), "with a norm");
}

/// The plan's chain: router on the device writes ids / weights that
/// moe_experts reads where they are; the CPU chain the same.
TEST(MoeCuda, RouterThenExperts) {
  K3_REQUIRE_GPU();
  const int64_t E = 16;
  RouterCase r = randomRouter(E, 512, 4, true, 21);
  r.scaling = 2.5f;
  ExpertsCase c = makeExperts(512, 256, E, 4, 'm', k3::kActSiTU, 22);
  const RouterOut route = r.cpu();
  c.ids = route.ids;
  c.weights = route.weights;
  const std::vector<uint16_t> want = c.cpu();

  Dev ids = Dev::poisoned<int32_t>(4), wts = Dev::poisoned<float>(4);
  k3::RouterParams rp = r.params(true);
  rp.outIds = ids.get<int32_t>();
  rp.outWeights = wts.get<float>();
  ASSERT_TRUE(launch("router", rp, 1).isOk());
  Dev out = Dev::poisoned<uint16_t>(512);
  k3::MoeExpertsParams p = c.params(true);
  p.ids = ids.get<int32_t>();
  p.weights = wts.get<float>();
  p.out = out.get<uint16_t>();
  ASSERT_TRUE(launch("moe_experts", p, c.planGrid()).isOk());
  EXPECT_EQ(ids.download<int32_t>(4), route.ids);
  expectBf16Close(want, out.download<uint16_t>(512), "router -> experts");
}

} // namespace

//===----------------------------------------------------------------------===//
// moe_ffn_rows
//===----------------------------------------------------------------------===//

/// moe_ffn's multi-row form (k3_moe_ffn_rows): M tokens in one launch over
/// the union of the experts they choose, each token's h, ids, weights and
/// out in its own arena, the arenas a fixed stride apart (as the CUDA
/// backend lays out a batch). Every byte of the arenas after the launch is
/// what M single-row moe_ffn launches leave (ids, weights, outputs bit for
/// bit; the gaps untouched), at any grid; each token's output is near the
/// CPU's. Shapes: Kimi-Linear's router (256 experts top-8) with a shared
/// expert, Kimi-Linear's width with 32 experts (tokens share experts),
/// MXFP4 routed experts, no shared expert; 1, 2, 7 and 16 tokens.
TEST(MoeFfnRowsCuda, EveryTokenAsTheSingleRowLaunch) {
  K3_REQUIRE_GPU();
  struct Shape {
    int64_t E, D, inter;
    int32_t topK;
    int64_t shared;
    char formats;
    const char *name;
  };
  const Shape shapes[] = {
      {256, 2304, 32, 8, 256, 'b', "Kimi router 256 x 2304 top-8 + shared"},
      {32, 2304, 512, 8, 1024, 'b', "Kimi FFN 32 experts 2304-512 + shared"},
      {16, 512, 160, 4, 320, 'm', "MXFP4 routed 16 experts 512-160 + shared"},
      {12, 256, 96, 3, 0, 'b', "12 experts top-3, no shared expert"},
  };
  uint64_t seed = 900;
  for (const Shape &s : shapes) {
    RouterCase r = randomRouter(s.E, s.D, s.topK, true, seed++, true);
    r.scaling = 2.446f;
    ExpertsCase c =
        makeExperts(s.D, s.inter, s.E, s.topK, s.formats, k3::kActSwiGLU,
                    seed++);
    addFfnParts(c, s.shared, seed++);
    // A token's arena: h (= x = residual), ids, weights, out, a gap.
    auto up16 = [](int64_t b) { return (b + 15) / 16 * 16; };
    const int64_t offIds = up16(s.D * 2), offW = offIds + up16(s.topK * 4),
                  offOut = offW + up16(s.topK * 4),
                  stride = up16(offOut + s.D * 2) + 48;
    for (int M : {1, 2, 7, 16}) {
      const std::string what = std::string(s.name) + ", " +
                               std::to_string(M) + " tokens";
      // Each token's h with well-separated ranks (the CPU check).
      std::vector<std::vector<uint16_t>> hs;
      Rand rh(seed * 7919 + M);
      while (int(hs.size()) < M) {
        r.h = rh.bf16(size_t(s.D), 7.0f);
        if (r.clearMargins(1e-4))
          hs.push_back(r.h);
      }
      std::vector<uint8_t> arena(size_t(M * stride), 0xFF);
      for (int t = 0; t < M; ++t)
        std::memcpy(arena.data() + t * stride, hs[t].data(), s.D * 2);
      const k3::RouterParams rp = r.params(true);
      const k3::MoeExpertsParams ep = c.params(true);
      // Token t's params within the arena at `base`.
      auto tokenParams = [&](uint8_t *base, int t) {
        uint8_t *a = base + t * stride;
        k3::MoeFfnParams p;
        p.router = rp;
        p.router.h = reinterpret_cast<const uint16_t *>(a);
        p.router.outIds = reinterpret_cast<int32_t *>(a + offIds);
        p.router.outWeights = reinterpret_cast<float *>(a + offW);
        p.experts = ep;
        p.experts.x = p.router.h;
        p.experts.normWeight = p.router.normWeight;
        p.experts.normEps = p.router.normEps;
        p.experts.residual = p.router.h;
        p.experts.ids = p.router.outIds;
        p.experts.weights = p.router.outWeights;
        p.experts.out = reinterpret_cast<uint16_t *>(a + offOut);
        return p;
      };
      // M single-row launches.
      Dev single = Dev::of(arena);
      for (int t = 0; t < M; ++t) {
        k3::Status st =
            launch("moe_ffn", tokenParams(single.get<uint8_t>(), t), 528, 256);
        ASSERT_TRUE(st.isOk()) << st.message();
      }
      const std::vector<uint8_t> want = single.download<uint8_t>(arena.size());
      auto rows = [&](int64_t grid, int64_t block) {
        Dev d = Dev::of(arena);
        k3::MoeFfnRowsParams p;
        p.one = tokenParams(d.get<uint8_t>(), 0);
        p.rows = M;
        p.stride = stride;
        const int64_t smem = k3::moeFfnRowsSmemBytes(s.D, s.E, s.topK, M);
        k3::Status st = launch("moe_ffn_rows", p, grid, block, smem);
        EXPECT_TRUE(st.isOk()) << (st.isOk() ? "" : st.message());
        return d.download<uint8_t>(arena.size());
      };
      const std::vector<uint8_t> got = rows(528, 256);
      EXPECT_TRUE(got == want) << what << ": not the single-row launches' bytes";
      EXPECT_TRUE(rows(1, 256) == want) << what << ": grid 1";
      EXPECT_TRUE(rows(41, 128) == want) << what << ": grid 41 block 128";
      // Each token against the CPU (router then experts).
      for (int t = 0; t < M; ++t) {
        std::vector<int32_t> ids(size_t(s.topK), -1);
        std::vector<float> w(size_t(s.topK));
        std::vector<uint16_t> out(size_t(s.D), 0xffff);
        k3::MoeFfnParams p;
        p.router = r.params(false);
        p.router.h = hs[t].data();
        p.router.outIds = ids.data();
        p.router.outWeights = w.data();
        p.experts = c.params(false);
        p.experts.x = hs[t].data();
        p.experts.normWeight = p.router.normWeight;
        p.experts.normEps = p.router.normEps;
        p.experts.residual = hs[t].data();
        p.experts.ids = ids.data();
        p.experts.weights = w.data();
        p.experts.out = out.data();
        k3::moeFfnCpu(p);
        std::vector<int32_t> gotIds(size_t(s.topK));
        std::memcpy(gotIds.data(), got.data() + t * stride + offIds,
                    s.topK * 4);
        EXPECT_EQ(gotIds, ids) << what << ", token " << t;
        std::vector<uint16_t> gotOut(size_t(s.D));
        std::memcpy(gotOut.data(), got.data() + t * stride + offOut, s.D * 2);
        if (t == 0 || t == M - 1)
          expectBf16Close(out, gotOut, what + ", token " + std::to_string(t));
      }
    }
  }
}

namespace {

/// k3_moe_chunk_plan in both forms (MoeChunkParams::parallelPlan 0 and 1)
/// against moeChunkPlanCpu: offsets, order and pairAt bit for bit, outputs
/// poisoned first, for rows of distinct random experts (the router's) at 2
/// to 256 rows (one to eight 32-row bitmap words), 12 to 1024 experts (one
/// to four bitmap passes), top-1 to top-32, and rows that name an expert
/// twice (a forced expert: the parallel form's walk). Each row's ids sit in
/// an arena row of its own, a stride apart, as in a step.
TEST(MoeChunkCuda, PlanAsTheCpu) {
  K3_REQUIRE_GPU();
  struct Case {
    int64_t E;
    int K, rows;
    bool twice;
  };
  const Case cases[] = {{12, 3, 2, false},     {12, 3, 70, false},
                        {256, 8, 16, false},   {256, 8, 256, false},
                        {256, 32, 256, false}, {1024, 8, 97, false},
                        {1000, 1, 256, false}, {300, 5, 33, false},
                        {256, 8, 40, true},    {12, 12, 256, false}};
  std::mt19937_64 rng(77);
  for (const Case &c : cases) {
    const std::string what = std::to_string(c.rows) + " rows, " +
                             std::to_string(c.E) + " experts, top-" +
                             std::to_string(c.K) + (c.twice ? ", twice" : "");
    SCOPED_TRACE(what);
    const int pairs = c.rows * c.K;
    std::vector<int32_t> ids(static_cast<size_t>(pairs));
    std::vector<int32_t> all(static_cast<size_t>(c.E));
    for (int64_t e = 0; e < c.E; ++e)
      all[size_t(e)] = int32_t(e);
    for (int t = 0; t < c.rows; ++t) {
      std::shuffle(all.begin(), all.end(), rng);
      for (int k = 0; k < c.K; ++k)
        ids[size_t(t * c.K + k)] = all[size_t(k)];
      if (c.twice && t % 3 == 1)
        ids[size_t(t * c.K + c.K - 1)] = ids[size_t(t * c.K)];
    }
    const int64_t stride = 4 * c.K + 48;
    std::vector<uint8_t> arena(size_t(c.rows * stride), 0xEE);
    for (int t = 0; t < c.rows; ++t)
      std::memcpy(arena.data() + t * stride, ids.data() + t * c.K, 4 * c.K);
    std::vector<int32_t> offsets(static_cast<size_t>(c.E + 1)),
        order(static_cast<size_t>(pairs)), pairAt(static_cast<size_t>(pairs));
    k3::moeChunkPlanCpu(ids.data(), c.rows, c.K, c.E, offsets.data(),
                        order.data(), pairAt.data());
    Dev d = Dev::of(arena);
    for (int32_t parallel : {0, 1}) {
      SCOPED_TRACE(parallel ? "parallel" : "serial");
      Dev off = Dev::poisoned<int32_t>(size_t(c.E + 1));
      Dev ord = Dev::poisoned<int32_t>(size_t(pairs));
      Dev at = Dev::poisoned<int32_t>(size_t(pairs));
      k3::MoeChunkParams p;
      p.one.experts.numExperts = c.E;
      p.one.experts.topK = c.K;
      p.one.experts.ids = d.get<int32_t>();
      p.rows = c.rows;
      p.stride = stride;
      p.offsets = off.get<int32_t>();
      p.order = ord.get<int32_t>();
      p.pairAt = at.get<int32_t>();
      p.parallelPlan = parallel;
      ASSERT_TRUE(launch("moe_chunk_plan", p, 1, 256).isOk());
      EXPECT_EQ(off.download<int32_t>(size_t(c.E + 1)), offsets);
      EXPECT_EQ(ord.download<int32_t>(size_t(pairs)), order);
      EXPECT_EQ(at.download<int32_t>(size_t(pairs)), pairAt);
    }
  }
}

/// The MoE of a prompt chunk on the tensor cores (k3_moe_chunk_route, _plan,
/// _gate_up, _down, _combine, as the CUDA backend launches them with
/// PrefillForm::Chunk): M tokens of arenas a stride apart, each token's ids
/// the CPU router's (well-separated ranks), its weights within 1e-4 and its
/// output the CPU's
/// moeFfnCpu within the bf16 tolerances (tokens 0, M / 2, M - 1), at
/// Kimi-Linear's router and the stand-in's experts; two token tiles; no
/// shared expert. 16 tokens route in groups of experts (grid y > 1) and
/// plan serially, 70 route a block per row and plan in parallel. The bytes
/// between the tokens' outputs stay untouched. 5 and 16 tokens again with the
/// narrow tiles of gate/up and down (k3_moe_chunk_*_narrow): the same bytes,
/// outputs and the pairs' activations and expert outputs before the combine.
TEST(MoeChunkCuda, EveryTokenAsTheCpu) {
  K3_REQUIRE_GPU();
  struct Shape {
    int64_t E, D, inter;
    int32_t topK;
    int64_t shared;
    const char *name;
  };
  const Shape shapes[] = {
      {256, 2304, 64, 8, 256, "Kimi router 256 x 2304 top-8 + shared"},
      {32, 2304, 512, 8, 1024, "Kimi FFN 32 experts 2304-512 + shared"},
      {12, 256, 96, 3, 0, "12 experts top-3, no shared expert"},
  };
  uint64_t seed = 1900;
  for (const Shape &s : shapes) {
    RouterCase r = randomRouter(s.E, s.D, s.topK, true, seed++, true);
    r.scaling = 2.446f;
    ExpertsCase c =
        makeExperts(s.D, s.inter, s.E, s.topK, 'b', k3::kActSwiGLU, seed++);
    addFfnParts(c, s.shared, seed++);
    auto up16 = [](int64_t b) { return (b + 15) / 16 * 16; };
    const int64_t offIds = up16(s.D * 2), offW = offIds + up16(s.topK * 4),
                  offOut = offW + up16(s.topK * 4),
                  stride = up16(offOut + s.D * 2) + 48;
    for (int M : {5, 16, 70}) {
      const std::string what =
          std::string(s.name) + ", " + std::to_string(M) + " tokens";
      SCOPED_TRACE(what);
      std::vector<std::vector<uint16_t>> hs;
      Rand rh(seed * 7919 + M);
      while (int(hs.size()) < M) {
        r.h = rh.bf16(size_t(s.D), 7.0f);
        if (r.clearMargins(1e-4))
          hs.push_back(r.h);
      }
      std::vector<uint8_t> arena(size_t(M * stride), 0xFF);
      for (int t = 0; t < M; ++t)
        std::memcpy(arena.data() + t * stride, hs[t].data(), s.D * 2);
      Dev d = Dev::of(arena);
      // The chunk's params over the arena at `a` (the arena's layout).
      auto chunkParams = [&](uint8_t *a) {
        k3::MoeChunkParams q;
        q.one.router = r.params(true);
        q.one.router.h = reinterpret_cast<const uint16_t *>(a);
        q.one.router.outIds = reinterpret_cast<int32_t *>(a + offIds);
        q.one.router.outWeights = reinterpret_cast<float *>(a + offW);
        q.one.experts = c.params(true);
        q.one.experts.x = q.one.router.h;
        q.one.experts.normWeight = q.one.router.normWeight;
        q.one.experts.normEps = q.one.router.normEps;
        q.one.experts.residual = q.one.router.h;
        q.one.experts.ids = q.one.router.outIds;
        q.one.experts.weights = q.one.router.outWeights;
        q.one.experts.out = reinterpret_cast<uint16_t *>(a + offOut);
        q.rows = M;
        q.stride = stride;
        return q;
      };
      k3::MoeChunkParams p = chunkParams(d.get<uint8_t>());
      ASSERT_TRUE(k3::moeChunkFits(p.one));
      // Poisoned but for the route's arrival counters, which the runtime
      // zeroes once.
      std::vector<uint8_t> scratchHost(
          size_t(k3::moeChunkScratchBytes(p.one, M)), 0xFF);
      std::fill(scratchHost.begin(),
                scratchHost.begin() + 4 * k3::kMoeChunkRowsMax, uint8_t(0));
      Dev scratch = Dev::of(scratchHost);
      k3::moeChunkBindScratch(p, scratch.get<uint8_t>());
      ASSERT_EQ(reinterpret_cast<uint8_t *>(p.arrivals),
                scratch.get<uint8_t>());
      const int64_t tiles = (M + k3::kMmaTileTokens - 1) / k3::kMmaTileTokens;
      const int64_t experts = s.E + (s.shared > 0 ? 1 : 0);
      const int64_t inter = std::max(s.inter, s.shared);
      // The route in one block per row (70 tokens) and in groups of the
      // experts, the last group of a row ranking them (16: 8 groups for
      // Kimi's 256 experts, 3 uneven ones for 32, 16 for 12 experts: four
      // groups empty).
      const int64_t groups = M == 70 ? 1
                                     : (s.E >= 256  ? 8
                                        : s.E == 32 ? 3
                                                    : 16);
      ASSERT_TRUE(launch3("moe_chunk_route", p, {M, groups, 1}, 256, 0).isOk());
      // Every row's counter is back to zero for the next launch.
      const std::vector<uint8_t> counters =
          scratch.download<uint8_t>(4 * k3::kMoeChunkRowsMax);
      EXPECT_TRUE(std::all_of(counters.begin(), counters.end(),
                              [](uint8_t b) { return b == 0; }));
      if (groups > 1) {
        // The same ids, weights and x̂ bits as one block per row.
        const std::vector<uint8_t> grouped = d.download<uint8_t>(arena.size());
        const std::vector<uint16_t> xhatGrouped =
            Dev::downloadFrom<uint16_t>(p.xhat, size_t(M * s.D));
        ASSERT_TRUE(launch3("moe_chunk_route", p, {M, 1, 1}, 256, 0).isOk());
        EXPECT_TRUE(d.download<uint8_t>(arena.size()) == grouped)
            << "ids or weights differ between 1 and " << groups << " groups";
        EXPECT_TRUE(Dev::downloadFrom<uint16_t>(p.xhat, size_t(M * s.D)) ==
                    xhatGrouped);
      }
      // The parallel plan for the 70-token case (PlanAsTheCpu checks both
      // forms' places bit for bit).
      p.parallelPlan = M == 70 ? 1 : 0;
      ASSERT_TRUE(launch("moe_chunk_plan", p, 1, 256).isOk());
      // gate_up and down: a grid of (column tiles, experts, token tiles).
      for (const char *k : {"moe_chunk_gate_up", "moe_chunk_down"}) {
        const bool gu = std::string(k) == "moe_chunk_gate_up";
        const int64_t x = gu ? inter / k3::kMoeChunkInterTile
                             : (s.D + k3::kMmaTileRows - 1) / k3::kMmaTileRows;
        ASSERT_TRUE(launch3(k, p, {x, experts, tiles}, k3::kMmaTileThreads,
                            k3::kMmaTileSmemBytes)
                        .isOk());
      }
      ASSERT_TRUE(launch("moe_chunk_combine", p, M, 256).isOk());
      const std::vector<uint8_t> got = d.download<uint8_t>(arena.size());
      if (M <= k3::kMmaNarrowTokens) {
        // The narrow tiles of gate/up and down (a batch's chunk), from a
        // fresh arena and scratch: the same bytes.
        Dev d2 = Dev::of(arena), scratch2 = Dev::of(scratchHost);
        k3::MoeChunkParams q = chunkParams(d2.get<uint8_t>());
        k3::moeChunkBindScratch(q, scratch2.get<uint8_t>());
        q.parallelPlan = p.parallelPlan;
        ASSERT_TRUE(launch3("moe_chunk_route", q, {M, 1, 1}, 256, 0).isOk());
        ASSERT_TRUE(launch("moe_chunk_plan", q, 1, 256).isOk());
        const int64_t narrowTiles =
            (M + k3::kMmaNarrowTokens - 1) / k3::kMmaNarrowTokens;
        for (const char *k :
             {"moe_chunk_gate_up_narrow", "moe_chunk_down_narrow"}) {
          const bool gu = std::string(k) == "moe_chunk_gate_up_narrow";
          const int64_t x =
              gu ? inter / k3::kMoeChunkInterTile
                 : (s.D + k3::kMmaTileRows - 1) / k3::kMmaTileRows;
          ASSERT_TRUE(launch3(k, q, {x, experts, narrowTiles},
                              k3::kMmaTileThreads, k3::kMmaNarrowSmemBytes)
                          .isOk());
        }
        ASSERT_TRUE(launch("moe_chunk_combine", q, M, 256).isOk());
        EXPECT_TRUE(d2.download<uint8_t>(arena.size()) == got)
            << "the narrow tiles' bytes differ from the wide tiles'";
        // And before the combine rounds them: every pair's activation and
        // output, the shared expert's.
        const size_t pairs = size_t(M) * size_t(s.topK);
        auto same = [](const uint16_t *a, const uint16_t *b, size_t n) {
          return Dev::downloadFrom<uint16_t>(a, n) ==
                 Dev::downloadFrom<uint16_t>(b, n);
        };
        EXPECT_TRUE(same(p.act, q.act, pairs * size_t(s.inter)));
        EXPECT_TRUE(same(p.y, q.y, pairs * size_t(s.D)));
        if (s.shared > 0) {
          EXPECT_TRUE(same(p.sharedAct, q.sharedAct, size_t(M * s.shared)));
          EXPECT_TRUE(same(p.sharedY, q.sharedY, size_t(M * s.D)));
        }
      }
      for (int t = 0; t < M; ++t) {
        SCOPED_TRACE("token " + std::to_string(t));
        // Nothing past the token's output (the arena's gap) was written.
        for (int64_t b = offOut + s.D * 2; b < stride; ++b)
          ASSERT_EQ(got[size_t(t * stride + b)], 0xFF) << "byte " << b;
        std::vector<int32_t> ids(size_t(s.topK), -1);
        std::vector<float> w(size_t(s.topK));
        std::vector<uint16_t> out(size_t(s.D), 0xffff);
        k3::MoeFfnParams q;
        q.router = r.params(false);
        q.router.h = hs[t].data();
        q.router.outIds = ids.data();
        q.router.outWeights = w.data();
        q.experts = c.params(false);
        q.experts.x = hs[t].data();
        q.experts.normWeight = q.router.normWeight;
        q.experts.normEps = q.router.normEps;
        q.experts.residual = hs[t].data();
        q.experts.ids = ids.data();
        q.experts.weights = w.data();
        q.experts.out = out.data();
        k3::routerCpu(q.router);
        std::vector<int32_t> gotIds(size_t(s.topK));
        std::memcpy(gotIds.data(), got.data() + t * stride + offIds,
                    s.topK * 4);
        EXPECT_EQ(gotIds, ids);
        std::vector<float> gotW(size_t(s.topK));
        std::memcpy(gotW.data(), got.data() + t * stride + offW, s.topK * 4);
        // 1e-4: an element of x̂ may round to the neighbouring bf16 when the
        // fp32 norm factor (its sum in another order) differs in its last
        // bit, which moves a score by ~1e-5 (5e-5 seen on the H200).
        for (int k = 0; k < s.topK; ++k)
          EXPECT_NEAR(gotW[k], w[k], 1e-4 * std::fabs(w[k])) << k;
        if (t == 0 || t == M / 2 || t == M - 1) {
          k3::moeExpertsCpu(q.experts);
          std::vector<uint16_t> gotOut(size_t(s.D));
          std::memcpy(gotOut.data(), got.data() + t * stride + offOut, s.D * 2);
          expectBf16Close(out, gotOut, what + ", token " + std::to_string(t));
        }
      }
    }
  }
}

} // namespace
