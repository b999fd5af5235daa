//===- gemv_cuda_test.cpp - k3_linear / k3_linear_multi against the CPU ---===//
//
// The CUDA projections against linearCpu / linearMultiCpu on random data at
// K3's shapes (7168 → 12288, 12288 → 7168, an lm_head slice with fp32 out,
// MXFP4 expert matrices 3584 × 3072 and 3072 × 3584) and at odd ones (k not
// a multiple of 8 or 32, tiny n, k wider than one staged chunk), with and
// without the folded norm and the residual epilogue, with the compiler's grid
// ceil(n / 8), a one-block grid and grids large enough to split rows over
// warps. The multi-row forms (k3_linear_rows, k3_linear_multi_rows) give
// each token the single-row kernel's bits, checked against it at the same
// shapes, and the CPU's values; their tensor-core forms (*_rows_mma) the
// CPU's values within the same tolerances, token by token.
//
// Tolerances: the kernels differ from the CPU only in summation order, so a
// bf16 output is the CPU's value or its bf16 neighbour (with a residual:
// within one ulp of R(y) plus one of the result), for at most kMaxDiffering
// of the elements, and max|diff| / max|ref| <= 1e-2; fp32 outputs are within
// 1e-5 of max|ref| (1e-4 with a folded norm: an element of the normed input
// can round to the neighbouring bf16 when the fp32 norm factor differs in its
// last bit). The tensor-core forms sum the squares in another order than
// the CPU (two threads per token, and across a cluster's split), so their
// norm factor often differs by a few ulps and a token's x̂ has a few such
// elements: one moves y by up to ~3e-4 of max|y| (a 4-sigma input times its
// weight, over a sum of 2304 products), so their fp32 bound is 1e-3.
//
//===----------------------------------------------------------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

#include "kernels/common/CpuMath.h"
#include "kernels/gemv/GemvCpu.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>

namespace {

using namespace k3test;

constexpr double kMaxDiffering = 0.02;
constexpr double kBf16RelErr = 1e-2;
constexpr double kF32RelErr = 1e-5;
constexpr double kF32NormRelErr = 1e-4;
constexpr double kF32MmaNormRelErr = 1e-3;

/// n bf16 values ~ normal(0, std), fast enough for 100M-element matrices:
/// xorshift indices into a table of 65536 normal samples.
std::vector<uint16_t> bigBf16(size_t n, float std, uint64_t seed) {
  Rand r(seed);
  const std::vector<uint16_t> table = r.bf16(65536, std);
  std::vector<uint16_t> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull | 1;
  for (size_t i = 0; i < n; i += 4) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    for (size_t j = 0; j < 4 && i + j < n; ++j)
      v[i + j] = table[(s >> (16 * j)) & 0xFFFF];
  }
  return v;
}

/// A RMSNorm weight of k elements ~ 1 + 0.2 · normal (bf16).
std::vector<uint16_t> normWeights(Rand &r, int64_t k) {
  std::vector<uint16_t> w(k);
  for (auto &v : w)
    v = k3::floatToBf16(1.0f + 0.2f * r.f32(1)[0]);
  return w;
}

/// One bf16 ulp at the magnitude of v (2^-133 at zero).
double bf16Ulp(double v) {
  int e = 0;
  std::frexp(std::fabs(v), &e);
  return v == 0 ? std::ldexp(1.0, -133) : std::ldexp(1.0, e - 8);
}

/// Checks bf16 `got` against the CPU's `want`: each element within one ulp
/// (with `residual`, one ulp of R(y) = want − residual plus one of want),
/// few differing, the relative error small, nothing left poisoned.
///
/// With a fused pre-norm (`normed`) the input x̂ = R(R(x·r)·w) is itself a
/// rounding of r, whose sum of squares the GPU adds in another order: a few
/// x̂ elements land one bf16 ulp apart (measured: at k = 33792 and x of std
/// 4, enough to move rows with a small |y| by 1.3%). Each such element
/// shifts y by about |W| · ulp(x̂), so normed rows get an absolute slack of
/// 2e-3 · max|want| and the differing-fraction bound is not applied; the
/// relative error bound is.
///
/// Every element also gets an absolute slack of 1e-5 · max|want|: the GPU
/// adds the k products in another order than the CPU, which moves the fp32
/// sum by ~1e-6 of its terms' size. Where y cancels to ~1e-5 of the row's
/// scale, one bf16 ulp of y is smaller than that (measured on the narrow
/// tensor-core form: want 3.72e-5, got 3.62e-5 beside a max|want| of ~4).
/// A wrong weight or token moves y by its whole scale.
void expectBf16Close(const std::vector<uint16_t> &want,
                     const std::vector<uint16_t> &got,
                     const std::vector<uint16_t> *residual,
                     const std::string &what, bool normed = false) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const std::vector<float> w = widen(want), g = widen(got);
  size_t beyond = 0, firstBeyond = 0, zeros = 0;
  double maxWant = 0;
  for (float v : w)
    maxWant = std::max(maxWant, std::fabs(double(v)));
  for (size_t i = 0; i < w.size(); ++i) {
    double tol = bf16Ulp(w[i]) + (normed ? 2e-3 : 1e-5) * maxWant;
    if (residual)
      tol += bf16Ulp(double(w[i]) - k3::bf16ToFloat((*residual)[i]));
    if (!(std::fabs(double(g[i]) - double(w[i])) <= tol) && beyond++ == 0)
      firstBeyond = i;
    zeros += w[i] == 0.0f;
  }
  const double rel = relErr(w, g), frac = fractionDiffering(want, got);
  std::printf("[   stats  ] %s: rel %.3g, differing %.3f%%\n", what.c_str(),
              rel, 100.0 * frac);
  EXPECT_EQ(beyond, 0u) << what << ": " << beyond
                        << " elements beyond one ulp, first " << firstBeyond
                        << ": want " << w[firstBeyond] << " got "
                        << g[firstBeyond];
  if (!normed) {
    EXPECT_LE(frac, kMaxDiffering) << what;
  }
  EXPECT_LE(rel, kBf16RelErr) << what;
  // The reference itself is not trivial (a test that cannot fail is none).
  EXPECT_LT(zeros, w.size() / 10 + 1) << what << ": reference mostly zero";
}

void expectF32Close(const std::vector<float> &want,
                    const std::vector<float> &got, double tol,
                    const std::string &what) {
  const double rel = relErr(want, got);
  std::printf("[   stats  ] %s: rel %.3g\n", what.c_str(), rel);
  EXPECT_LE(rel, tol) << what;
  size_t zeros = 0;
  for (float v : want)
    zeros += v == 0.0f;
  EXPECT_LT(zeros, want.size() / 10 + 1) << what << ": reference mostly zero";
}

/// A weight matrix on both sides, bf16 or MXFP4, optionally stored
/// `offset` elements (bf16) or bytes (MXFP4 packed) past a 16-byte boundary.
struct Matrix {
  int32_t format = k3::kWeightBf16;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> packed, scale;
  Dev dBf16, dPacked, dScale;
  int64_t offset = 0;

  static Matrix make(bool mxfp4, int64_t n, int64_t k, uint64_t seed,
                     int64_t offset = 0) {
    Matrix m;
    m.offset = offset;
    Rand r(seed);
    if (!mxfp4) {
      // std 1/sqrt(k)-ish keeps outputs O(1), as trained projections do.
      m.bf16 = bigBf16(offset + n * k, 1.0f / std::sqrt(float(k)), seed);
      m.dBf16 = Dev::of(m.bf16);
      return m;
    }
    m.format = k3::kWeightMxfp4;
    m.packed = r.bytes(offset + n * k / 2); // every E2M1 code, both signs
    m.scale.resize(n * k / 32);
    std::uniform_int_distribution<int> e(118, 123); // 2^-9 .. 2^-4
    for (auto &s : m.scale)
      s = static_cast<uint8_t>(e(r.gen()));
    m.dPacked = Dev::of(m.packed);
    m.dScale = Dev::of(m.scale);
    return m;
  }
  k3::WeightRef host() const {
    k3::WeightRef w;
    w.format = format;
    if (format == k3::kWeightBf16) {
      w.bf16 = bf16.data() + offset;
    } else {
      w.packed = packed.data() + offset;
      w.scale = scale.data();
    }
    return w;
  }
  k3::WeightRef device() const {
    k3::WeightRef w;
    w.format = format;
    if (format == k3::kWeightBf16) {
      w.bf16 = dBf16.get<uint16_t>() + offset;
    } else {
      w.packed = dPacked.get<uint8_t>() + offset;
      w.scale = dScale.get<uint8_t>();
    }
    return w;
  }
};

/// One `linear` launch configuration.
struct LinearCase {
  int64_t n, k;
  bool mxfp4 = false;
  bool norm = false;
  bool residual = false;
  bool f32 = false;
  int64_t grid = 0; ///< 0: the compiler's ceil(n / 8)
  int64_t block = 256;
  bool aliasResidual = false; ///< residual == out
  int64_t wOffset = 0;        ///< misalign the matrix by this much
  int64_t xOffset = 0;        ///< misalign x (and the norm weight)
  float eps = 1e-5f;
  int split = 1; ///< tensor-core forms: clusters of this many (split over k)
  int parts = 0; ///< the narrow form's split (0: gemvMma16Parts's)
  /// The narrow form leaves this launch to gemvBody per token (else the
  /// test checks that its fast path ran).
  bool fallback = false;
};

/// Which multi-row launch runRowsOf runs: the CUDA-core multi-row form (each
/// token the single-row kernel's bits), the tensor-core tile
/// (k3_*_rows_mma) or the narrow tensor-core form (k3_*_rows_mma16).
enum class RowsForm { Multi, Mma, Mma16 };

const char *formSuffix(RowsForm f) {
  return f == RowsForm::Multi ? "" : f == RowsForm::Mma ? "_mma" : "_mma16";
}

/// The device's SM count (the narrow form's grid: one block an SM).
int64_t smCount() {
  auto d = k3::cuda::Driver::get();
  return d ? (*d)->smCount() : 132;
}

/// A narrow launch's split for `weightRows` rows over k on `grid` blocks
/// (`parts` 0: gemvMma16Parts's), with its scratch: the sums poisoned, the
/// counters zero.
struct NarrowSplit {
  k3::GemvSplitScratch split;
  Dev partials, counters;
  int64_t tiles = 0;
  NarrowSplit(int64_t weightRows, int64_t k, int64_t grid, int parts) {
    tiles = (weightRows + k3::kGemvMma16Rows - 1) / k3::kGemvMma16Rows;
    split.parts = parts > 0
                      ? parts
                      : k3::gemvMma16Parts(tiles, k / k3::kGemvMma16GroupK,
                                           grid * k3::kGemvMma16Warps);
    partials =
        Dev::poisoned<float>(tiles * split.parts * k3::kGemvMma16TileFloats);
    counters = Dev::of(std::vector<uint32_t>(tiles, 0));
    split.partials = partials.get<float>();
    split.counters = counters.get<uint32_t>();
  }
  /// The sums poisoned again (a launch that stores none then shows).
  void repoison() {
    partials =
        Dev::poisoned<float>(tiles * split.parts * k3::kGemvMma16TileFloats);
    split.partials = partials.get<float>();
  }
  /// Every tile's counter is back at zero (for the next launch).
  void expectCountersReset(const std::string &what) {
    const std::vector<uint32_t> c = counters.download<uint32_t>(tiles);
    size_t nonzero = 0;
    for (uint32_t v : c)
      nonzero += v != 0;
    EXPECT_EQ(nonzero, 0u) << what << ": tiles' counters left set";
  }
};

std::string describe(const LinearCase &c) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "linear n=%lld k=%lld %s%s%s%s grid=%lld block=%lld%s%s%s",
                (long long)c.n, (long long)c.k, c.mxfp4 ? "mxfp4" : "bf16",
                c.norm ? " +norm" : "", c.residual ? " +residual" : "",
                c.f32 ? " f32" : "", (long long)c.grid, (long long)c.block,
                c.aliasResidual ? " residual==out" : "",
                c.wOffset ? " misaligned-w" : "",
                c.xOffset ? " misaligned-x" : "");
  return c.split > 1 ? buf + std::string(" split=") + std::to_string(c.split)
                     : std::string(buf);
}

void runLinear(LinearCase c, uint64_t seed) {
  if (c.grid == 0)
    c.grid = (c.n + 7) / 8;
  const std::string what = describe(c);
  SCOPED_TRACE(what);
  Rand r(seed);
  Matrix m = Matrix::make(c.mxfp4, c.n, c.k, seed + 1, c.wOffset);
  // Pre-norm inputs have the residual stream's larger magnitude.
  std::vector<uint16_t> x = r.bf16(c.xOffset + c.k, c.norm ? 4.0f : 1.0f);
  std::vector<uint16_t> normW(c.xOffset + c.k);
  for (auto &v : normW)
    v = k3::floatToBf16(1.0f + 0.2f * r.f32(1)[0]);
  std::vector<uint16_t> residual = r.bf16(c.n, 1.0f);
  Dev dX = Dev::of(x), dNormW = Dev::of(normW);

  k3::LinearParams p;
  p.x = x.data() + c.xOffset;
  p.w = m.host();
  p.n = c.n;
  p.k = c.k;
  p.normWeight = c.norm ? normW.data() + c.xOffset : nullptr;
  p.normEps = c.eps;
  // In place, out starts as the residual (the CPU too reads out[r] first).
  std::vector<uint16_t> want =
      c.aliasResidual ? residual : std::vector<uint16_t>(c.n, 0xFFFF);
  std::vector<float> wantF32(c.n, NAN);
  if (c.f32) {
    p.outF32 = wantF32.data();
  } else {
    p.out = want.data();
    if (c.residual)
      p.residual = c.aliasResidual ? p.out : residual.data();
  }
  k3::linearCpu(p);

  Dev dOut = c.aliasResidual ? Dev::of(residual) : Dev::poisoned<uint16_t>(c.n);
  Dev dOutF32 = Dev::poisoned<float>(c.n), dResidual = Dev::of(residual);
  p.x = dX.get<uint16_t>() + c.xOffset;
  p.w = m.device();
  p.normWeight = c.norm ? dNormW.get<uint16_t>() + c.xOffset : nullptr;
  p.out = c.f32 ? nullptr : dOut.get<uint16_t>();
  p.outF32 = c.f32 ? dOutF32.get<float>() : nullptr;
  p.residual = !c.residual       ? nullptr
               : c.aliasResidual ? p.out
                                 : dResidual.get<uint16_t>();
  ASSERT_TRUE(launch("linear", p, c.grid, c.block).isOk());
  if (c.f32) {
    expectF32Close(wantF32, dOutF32.download<float>(c.n),
                   c.norm ? kF32NormRelErr : kF32RelErr, what);
  } else {
    expectBf16Close(want, dOut.download<uint16_t>(c.n),
                    c.residual ? &residual : nullptr, what, c.norm);
  }
}

//===----------------------------------------------------------------------===//
// linear
//===----------------------------------------------------------------------===//

/// K3's widest projections at full size: KDA q/k/v/g (7168 → 12288) and
/// o_proj / MLA o (12288 → 7168, with the residual epilogue).
TEST(LinearCuda, K3ProjectionsBf16) {
  K3_REQUIRE_GPU();
  runLinear({12288, 7168}, 1);
  runLinear({12288, 7168, false, /*norm=*/true}, 2);
  runLinear({7168, 12288, false, false, /*residual=*/true}, 3);
}

/// The head: final norm folded into a 8192-row slice of lm_head (163840 ×
/// 7168 in K3), fp32 logits; and without the norm.
TEST(LinearCuda, LmHeadSliceF32) {
  K3_REQUIRE_GPU();
  LinearCase c{8192, 7168};
  c.f32 = true;
  runLinear(c, 4);
  c.norm = true;
  c.eps = 1e-5f;
  runLinear(c, 5);
}

/// MXFP4 matrices of a latent expert: w1/w3 (3072 × 3584), w2 (3584 × 3072).
TEST(LinearCuda, Mxfp4Experts) {
  K3_REQUIRE_GPU();
  runLinear({3072, 3584, /*mxfp4=*/true}, 6);
  runLinear({3584, 3072, true}, 7);
  runLinear({3584, 3072, true, /*norm=*/true, /*residual=*/true}, 8);
  LinearCase c{3584, 3072, true};
  c.f32 = true;
  runLinear(c, 9);
}

/// MLA's small projections (kv_a: 576 rows; q_a 1536 with eps 1e-6 norms).
TEST(LinearCuda, SmallProjections) {
  K3_REQUIRE_GPU();
  runLinear({576, 7168}, 10);
  LinearCase c{1536, 7168, false, true};
  c.eps = 1e-6f;
  runLinear(c, 11);
  runLinear({128, 7168, false, true}, 12);
}

/// Sizes the vector paths do not cover exactly: k % 8 != 0 (element-wise
/// path), k % 32 != 0, a partial last run of chunks, single rows.
TEST(LinearCuda, OddShapes) {
  K3_REQUIRE_GPU();
  runLinear({37, 100}, 20);
  runLinear({37, 100, false, true, true}, 21);
  runLinear({5, 8, false, true}, 22);
  runLinear({333, 1000}, 23);
  runLinear({1, 40, false, false, true}, 24);
  runLinear({7, 4104, false, true}, 25);
  runLinear({33, 96, true}, 26); // MXFP4, three blocks per row
  runLinear({9, 3, false, true}, 27);
  LinearCase c{37, 100};
  c.f32 = true;
  runLinear(c, 28);
}

/// k wider than one staged chunk (12288): an unfused dense down_proj
/// (33792), and an odd width spanning two chunks.
TEST(LinearCuda, WideInput) {
  K3_REQUIRE_GPU();
  runLinear({256, 33792, false, false, true}, 30);
  runLinear({64, 33792, false, true}, 31);
  runLinear({50, 20001, false, true}, 32);
  runLinear({40, 24576, true, true}, 33);
}

/// The grid-stride contract: one block for every row (and chunk), and a
/// grid larger than the compiler's, which splits each row over warps.
TEST(LinearCuda, AnyGrid) {
  K3_REQUIRE_GPU();
  LinearCase c{1000, 7168};
  c.grid = 1;
  runLinear(c, 40);
  c.norm = c.residual = true;
  runLinear(c, 41);
  c = {300, 3072, true};
  c.grid = 1;
  runLinear(c, 42);
  c = {100, 33792, false, true};
  c.grid = 3;
  runLinear(c, 43);
  // Split rows: 2, 4 and 8 warps per row.
  c = {576, 7168};
  c.grid = 2 * 72;
  runLinear(c, 44);
  c.grid = 4 * 72;
  c.residual = true;
  runLinear(c, 51);
  c.grid = 8 * 72;
  c.norm = true;
  runLinear(c, 45);
  c = {3, 3072, true, true};
  c.grid = 100;
  runLinear(c, 46);
  c = {64, 40000, false, true, true};
  c.grid = 64;
  runLinear(c, 47);
  c = {37, 100};
  c.grid = 50;
  runLinear(c, 48);
  // Other block sizes: 3 warps (no power-of-two split), 1024 threads.
  c = {77, 7168, false, true};
  c.block = 96;
  c.grid = 200;
  runLinear(c, 49);
  c.block = 1024;
  c.grid = 3;
  runLinear(c, 50);
}

/// The residual may alias the output (the in-place residual add).
TEST(LinearCuda, ResidualAliasesOut) {
  K3_REQUIRE_GPU();
  LinearCase c{7168, 12288, false, false, true};
  c.aliasResidual = true;
  runLinear(c, 60);
  c = {333, 1000, false, true, true};
  c.aliasResidual = true;
  c.grid = 1;
  runLinear(c, 61);
}

/// Pointers off the 16-byte grid (a launch argument with an offset) take the
/// element-wise paths.
TEST(LinearCuda, Misaligned) {
  K3_REQUIRE_GPU();
  LinearCase c{300, 7168, false, true, true};
  c.wOffset = 1;
  runLinear(c, 70);
  c.wOffset = 0;
  c.xOffset = 3;
  runLinear(c, 71);
  c = {64, 3072, true};
  c.wOffset = 8;
  runLinear(c, 72);
}

//===----------------------------------------------------------------------===//
// linear_multi
//===----------------------------------------------------------------------===//

void runMulti(const std::vector<std::pair<int64_t, bool>> &entries, int64_t k,
              bool norm, int64_t grid, uint64_t seed, const std::string &what) {
  SCOPED_TRACE(what);
  Rand r(seed);
  std::vector<uint16_t> x = r.bf16(k, norm ? 4.0f : 1.0f);
  const std::vector<uint16_t> normW = normWeights(r, k);
  Dev dX = Dev::of(x), dNormW = Dev::of(normW);
  std::vector<Matrix> m;
  std::vector<std::vector<uint16_t>> want;
  std::vector<Dev> dOut;
  k3::LinearMultiParams p;
  p.x = x.data();
  p.k = k;
  p.normWeight = norm ? normW.data() : nullptr;
  p.normEps = 1e-6f;
  p.count = static_cast<int32_t>(entries.size());
  int64_t total = 0;
  for (size_t e = 0; e < entries.size(); ++e) {
    const int64_t n = entries[e].first;
    m.push_back(Matrix::make(entries[e].second, n, k, seed + 10 + e));
    want.emplace_back(n, 0xFFFF);
    dOut.push_back(Dev::poisoned<uint16_t>(n));
    total += n;
  }
  for (size_t e = 0; e < entries.size(); ++e) {
    p.entries[e].w = m[e].host();
    p.entries[e].n = entries[e].first;
    p.entries[e].out = want[e].data();
  }
  k3::linearMultiCpu(p);
  p.x = dX.get<uint16_t>();
  p.normWeight = norm ? dNormW.get<uint16_t>() : nullptr;
  for (size_t e = 0; e < entries.size(); ++e) {
    p.entries[e].w = m[e].device();
    p.entries[e].out = dOut[e].get<uint16_t>();
  }
  ASSERT_TRUE(launch("linear_multi", p, grid ? grid : (total + 7) / 8).isOk());
  for (size_t e = 0; e < entries.size(); ++e)
    expectBf16Close(want[e], dOut[e].download<uint16_t>(entries[e].first),
                    nullptr, what + " entry " + std::to_string(e), norm);
}

/// KDA's projections of h (q, k, v slices, f_a, b, g_a) with the folded
/// input norm, and MLA's (q_a, kv_a, g slice), all over D = 7168.
TEST(LinearMultiCuda, K3Mixers) {
  K3_REQUIRE_GPU();
  runMulti({{2048, false},
            {2048, false},
            {2048, false},
            {128, false},
            {96, false},
            {128, false}},
           7168, true, 0, 80, "kda");
  runMulti({{1536, false}, {576, false}, {1024, false}}, 7168, true, 0, 81,
           "mla");
  runMulti({{4096, false}}, 7168, false, 0, 82, "single entry, no norm");
}

/// Eight entries of odd sizes, mixed bf16 / MXFP4, with the compiler-like
/// grid, one block, and a grid that splits rows.
TEST(LinearMultiCuda, MixedAndAnyGrid) {
  K3_REQUIRE_GPU();
  const std::vector<std::pair<int64_t, bool>> entries = {
      {1, false},   {37, true}, {64, false}, {5, true},
      {100, false}, {3, false}, {77, true},  {8, false}};
  runMulti(entries, 3072, true, 0, 90, "mixed");
  runMulti(entries, 3072, true, 1, 91, "mixed grid 1");
  runMulti(entries, 3072, false, 600, 92, "mixed split rows");
  runMulti({{37, false}, {5, false}}, 100, true, 0, 93, "k=100");
}

//===----------------------------------------------------------------------===//
// The multi-row forms (k3_linear_rows, k3_linear_multi_rows)
//===----------------------------------------------------------------------===//

/// Downloads `n` elements at `offset` of a device buffer.
template <typename T>
std::vector<T> slice(const Dev &d, size_t offset, size_t n) {
  const std::vector<T> all = d.download<T>(offset + n);
  return std::vector<T>(all.begin() + offset, all.end());
}

/// Expects `got` to be `want` bit for bit (the multi-row form against the
/// single-row kernel on the same token).
template <typename T>
void expectSameBits(const std::vector<T> &want, const std::vector<T> &got,
                    const std::string &what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&want[i], &got[i], sizeof(T)) != 0 && differ++ == 0)
      first = i;
  EXPECT_EQ(differ, 0u) << what << ": " << differ
                        << " elements differ from the single-row kernel's, "
                           "first "
                        << first;
}

/// Elements whose bits differ.
template <typename T>
size_t countDiffering(const std::vector<T> &a, const std::vector<T> &b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return n;
}

/// `tokens` tokens of linear case `c` in one k3_linear_rows launch, their
/// activations a few elements more than a row apart (x: k + 24, residual:
/// n + 16, out: n + 40) so a wrong stride shows: every token's output
/// equals k3_linear's launch on that token (same grid) bit for bit, and the
/// CPU's within the linear tolerances; the gaps between the tokens' outputs
/// stay poisoned. `smem` < 0: what the launch needs (gemvRowsSmemBytes);
/// else that many bytes (too few: the per-token fallback must still be
/// right).
/// `form` Mma: the tensor-core form (k3_linear_rows_mma, its grid of
/// ceil(n / kGemvMmaRows) × ceil(tokens / kGemvMmaTokens) unless c.grid
/// says across): every token against the CPU within the tolerances, no
/// bits against the single-row kernel (its sums are in another order).
/// Mma16: the narrow form (k3_linear_rows_mma16, one block an SM unless
/// c.grid says, c.parts), as Mma, and its counters back at zero after.
void runLinearRows(LinearCase c, int tokens, int64_t smem, uint64_t seed,
                   RowsForm form = RowsForm::Multi) {
  const bool mma = form != RowsForm::Multi;
  if (c.grid == 0)
    c.grid = form == RowsForm::Mma16 ? smCount()
             : mma ? (c.n + k3::kGemvMmaRows - 1) / k3::kGemvMmaRows * c.split
                   : (c.n + 7) / 8;
  const std::string what =
      describe(c) + " tokens=" + std::to_string(tokens) +
      (smem >= 0 ? " smem=" + std::to_string(smem) : std::string()) +
      formSuffix(form) +
      (c.parts ? " parts=" + std::to_string(c.parts) : std::string());
  SCOPED_TRACE(what);
  const int64_t xs = c.k + 24, rs = c.n + 16;
  const int64_t os = c.aliasResidual ? rs : c.n + 40;
  Rand r(seed);
  Matrix m = Matrix::make(c.mxfp4, c.n, c.k, seed + 1);
  const std::vector<uint16_t> x = r.bf16(tokens * xs, c.norm ? 4.0f : 1.0f);
  const std::vector<uint16_t> normW = normWeights(r, c.k);
  const std::vector<uint16_t> residual = r.bf16(tokens * rs, 1.0f);
  Dev dX = Dev::of(x), dNormW = Dev::of(normW), dRes = Dev::of(residual);
  Dev dOut = c.aliasResidual ? Dev::of(residual)
             : c.f32         ? Dev::poisoned<float>(tokens * os)
                             : Dev::poisoned<uint16_t>(tokens * os);

  k3::LinearRowsParams rp;
  k3::LinearParams &p = rp.one;
  p.x = dX.get<uint16_t>();
  p.w = m.device();
  p.n = c.n;
  p.k = c.k;
  p.normWeight = c.norm ? dNormW.get<uint16_t>() : nullptr;
  p.normEps = c.eps;
  if (c.f32) {
    p.outF32 = dOut.get<float>();
  } else {
    p.out = dOut.get<uint16_t>();
    if (c.residual)
      p.residual = c.aliasResidual ? p.out : dRes.get<uint16_t>();
  }
  rp.rows = tokens;
  rp.xStride = xs;
  rp.residualStride = rs;
  rp.outStride = os;
  std::optional<NarrowSplit> narrow;
  if (form == RowsForm::Mma16) {
    narrow.emplace(c.n, c.k, c.grid, c.parts);
    const k3::LinearRowsMma16Params mp{rp, narrow->split};
    ASSERT_TRUE(launch("linear_rows_mma16", mp, c.grid, k3::kGemvMma16Threads,
                       smem >= 0 ? smem : k3::gemvMma16SmemBytes(c.k))
                    .isOk());
    narrow->expectCountersReset(what);
  } else if (mma)
    ASSERT_TRUE(launch("linear_rows_mma", rp, c.grid, k3::kGemvMmaThreads,
                       smem >= 0 ? smem : k3::kGemvMmaSmemBytes, c.split,
                       (tokens + k3::kGemvMmaTokens - 1) / k3::kGemvMmaTokens)
                    .isOk());
  else
    ASSERT_TRUE(launch("linear_rows", rp, c.grid, c.block,
                       smem >= 0 ? smem : k3::gemvRowsSmemBytes(c.k, tokens))
                    .isOk());

  size_t notSingleRow = 0; // Mma16: outputs not the single-row kernel's
  for (int t = 0; t < tokens; ++t) {
    SCOPED_TRACE("token " + std::to_string(t));
    // The single-row kernel on this token, into a buffer of its own.
    k3::LinearParams one = p;
    one.x = p.x + t * xs;
    Dev dOne = c.aliasResidual
                   ? Dev::of(std::vector<uint16_t>(residual.begin() + t * rs,
                                                   residual.begin() + t * rs +
                                                       c.n))
               : c.f32 ? Dev::poisoned<float>(c.n)
                       : Dev::poisoned<uint16_t>(c.n);
    one.out = c.f32 ? nullptr : dOne.get<uint16_t>();
    one.outF32 = c.f32 ? dOne.get<float>() : nullptr;
    one.residual = !c.residual       ? nullptr
                   : c.aliasResidual ? one.out
                                     : p.residual + t * rs;
    if (!mma || form == RowsForm::Mma16) {
      ASSERT_TRUE(
          launch("linear", one, form == RowsForm::Mma16 ? 264 : c.grid, c.block)
              .isOk());
    }
    // The CPU on this token.
    k3::LinearParams cpu = one;
    cpu.x = x.data() + t * xs;
    cpu.w = m.host();
    cpu.normWeight = c.norm ? normW.data() : nullptr;
    const std::vector<uint16_t> res(residual.begin() + t * rs,
                                    residual.begin() + t * rs + c.n);
    std::vector<uint16_t> want = c.aliasResidual
                                     ? res
                                     : std::vector<uint16_t>(c.n, 0xFFFF);
    std::vector<float> wantF32(c.n, NAN);
    cpu.out = c.f32 ? nullptr : want.data();
    cpu.outF32 = c.f32 ? wantF32.data() : nullptr;
    cpu.residual = !c.residual       ? nullptr
                   : c.aliasResidual ? cpu.out
                                     : res.data();
    k3::linearCpu(cpu);
    const bool againstCpu = mma || t == 0 || t == tokens - 1;
    if (c.f32) {
      const std::vector<float> got = slice<float>(dOut, t * os, c.n);
      if (form == RowsForm::Mma16)
        notSingleRow += countDiffering(dOne.download<float>(c.n), got);
      if (!mma)
        expectSameBits(dOne.download<float>(c.n), got, what);
      if (againstCpu)
        expectF32Close(wantF32, got,
                       !c.norm ? kF32RelErr
                       : mma   ? kF32MmaNormRelErr
                               : kF32NormRelErr,
                       what);
    } else {
      const std::vector<uint16_t> got = slice<uint16_t>(dOut, t * os, c.n);
      if (form == RowsForm::Mma16)
        notSingleRow += countDiffering(dOne.download<uint16_t>(c.n), got);
      if (!mma)
        expectSameBits(dOne.download<uint16_t>(c.n), got, what);
      if (againstCpu)
        expectBf16Close(want, got, c.residual ? &res : nullptr, what, c.norm);
    }
  }
  if (form == RowsForm::Mma16 && !c.fallback) {
    // The fast path ran. A split stores its parts' sums, which the per-token
    // fallback never writes. Unsplit, the tensor cores add in another order
    // than the single-row kernel, so some outputs differ from its bits (with
    // bf16 outputs not always: ~1e-7 of a sum rarely moves a bf16 rounding,
    // and a split's outputs matched the single-row kernel's every bit at
    // several of these shapes on the H100).
    if (narrow->split.parts == 1) {
      EXPECT_GT(notSingleRow, 0u)
          << what << ": every output the single-row kernel's bits";
    } else {
      const std::vector<uint32_t> sums = narrow->partials.download<uint32_t>(
          narrow->tiles * narrow->split.parts * k3::kGemvMma16TileFloats);
      EXPECT_NE(std::count(sums.begin(), sums.end(), 0xFFFFFFFFu),
                static_cast<std::ptrdiff_t>(sums.size()))
          << what << ": no partial sum stored";
    }
  }
  // Nothing between the tokens' outputs was written.
  if (!c.aliasResidual) {
    const size_t elem = c.f32 ? 4 : 2;
    const std::vector<uint8_t> all =
        dOut.download<uint8_t>(static_cast<size_t>(tokens * os) * elem);
    size_t written = 0;
    for (int t = 0; t < tokens; ++t)
      for (size_t b = (t * os + c.n) * elem; b < (t + 1) * os * elem; ++b)
        written += all[b] != 0xFF;
    EXPECT_EQ(written, 0u) << what << ": bytes between tokens written";
  }
}

/// Kimi-Linear's and K3's projections, several tokens (one pass, a partial
/// pass, several passes): o_proj with the residual added in place, the
/// MLA / KDA widths with the folded norm, an lm_head slice in fp32.
TEST(LinearRowsCuda, ProjectionsOfSeveralTokens) {
  K3_REQUIRE_GPU();
  LinearCase oProj{2304, 4096};
  oProj.residual = oProj.aliasResidual = true;
  for (int tokens : {1, 2, 8, 9, 16})
    runLinearRows(oProj, tokens, -1, 200 + tokens);
  LinearCase normed{4096, 2304};
  normed.norm = true;
  runLinearRows(normed, 5, -1, 220);
  runLinearRows(normed, 64, -1, 221);
  LinearCase k3Wide{1024, 7168};
  k3Wide.norm = true;
  k3Wide.residual = true;
  runLinearRows(k3Wide, 8, -1, 230);
  LinearCase head{2000, 2304};
  head.f32 = true;
  head.norm = true;
  runLinearRows(head, 3, -1, 240);
}

/// Launches the multi-row form cannot stream take the single-row path per
/// token and give its bits as well: MXFP4, k not a multiple of 8, k wider
/// than a staged chunk, a grid that splits rows over warps, a one-block
/// grid (looping), and too little shared memory for a pass.
TEST(LinearRowsCuda, FallbacksAndAnyGrid) {
  K3_REQUIRE_GPU();
  LinearCase mx{512, 1024};
  mx.mxfp4 = true;
  runLinearRows(mx, 3, -1, 250);
  LinearCase odd{77, 100};
  odd.norm = true;
  runLinearRows(odd, 4, -1, 251);
  LinearCase wide{64, 16384};
  runLinearRows(wide, 2, -1, 252);
  LinearCase split{96, 2304};
  split.grid = 64;
  runLinearRows(split, 5, -1, 253);
  LinearCase looping{600, 2304};
  looping.grid = 1;
  looping.residual = true;
  runLinearRows(looping, 9, -1, 254);
  LinearCase small{1000, 2304};
  runLinearRows(small, 8, 1024, 255);
}

/// The tensor-core forms at the shapes of a prompt chunk: Kimi-Linear's
/// o_proj (residual in place) and a normed KDA width, K3's 7168-wide input,
/// an lm_head slice in fp32; partial token tiles (17, 100 tokens: a second
/// tile of 36), a weight count that is not a multiple of the tile (2000), a
/// grid smaller than the tiles (looping), k not a multiple of the stage
/// (1000); MXFP4 weights take the per-token fallback.
TEST(LinearRowsMmaCuda, ProjectionsOfAPromptChunk) {
  K3_REQUIRE_GPU();
  LinearCase oProj{2304, 4096};
  oProj.residual = oProj.aliasResidual = true;
  for (int tokens : {16, 64})
    runLinearRows(oProj, tokens, -1, 400 + tokens, RowsForm::Mma);
  LinearCase normed{4096, 2304};
  normed.norm = true;
  runLinearRows(normed, 100, -1, 420, RowsForm::Mma);
  LinearCase k3Wide{1024, 7168};
  k3Wide.norm = true;
  k3Wide.residual = true;
  runLinearRows(k3Wide, 17, -1, 430, RowsForm::Mma);
  LinearCase head{2000, 2304};
  head.f32 = true;
  head.norm = true;
  runLinearRows(head, 64, -1, 440, RowsForm::Mma);
  LinearCase looping{600, 1000};
  looping.grid = 3;
  looping.residual = true;
  runLinearRows(looping, 40, -1, 450, RowsForm::Mma);
  LinearCase mx{512, 1024};
  mx.mxfp4 = true;
  runLinearRows(mx, 20, -1, 460, RowsForm::Mma);
}

/// The tensor-core form split over k (clusters of 2, 4, 8: GemvParams.h
/// gemvMmaSplit): each against the CPU as above — o_proj with the residual
/// in place, a normed width (the norm's sums added across the cluster), an
/// lm_head slice in fp32, k not a multiple of the stage (a short last
/// share), fewer stages than blocks (empty shares), a grid of fewer
/// clusters than tiles (looping); and a split's outputs the same bits for
/// any grid of that split.
TEST(LinearRowsMmaCuda, SplitOverK) {
  K3_REQUIRE_GPU();
  for (int split : {2, 4, 8}) {
    LinearCase oProj{2304, 4096};
    oProj.residual = oProj.aliasResidual = true;
    oProj.split = split;
    runLinearRows(oProj, 64, -1, 470 + split, RowsForm::Mma);
    LinearCase normed{4096, 2304};
    normed.norm = true;
    normed.split = split;
    runLinearRows(normed, 100, -1, 480 + split, RowsForm::Mma);
  }
  LinearCase head{2000, 2304};
  head.f32 = true;
  head.norm = true;
  head.split = 4;
  runLinearRows(head, 64, -1, 490, RowsForm::Mma);
  LinearCase ragged{600, 1000};
  ragged.residual = true;
  ragged.norm = true;
  ragged.split = 4;
  runLinearRows(ragged, 40, -1, 491, RowsForm::Mma);
  LinearCase empty{300, 128}; // 2 stages for 8 blocks
  empty.norm = true;
  empty.split = 8;
  runLinearRows(empty, 20, -1, 492, RowsForm::Mma);
  LinearCase looping{2304, 4096};
  looping.residual = true;
  looping.split = 4;
  looping.grid = 3 * 4;
  runLinearRows(looping, 64, -1, 493, RowsForm::Mma);

  // The same bits from a grid of one cluster per tile and from 3 clusters.
  Rand r(494);
  const int64_t n = 2304, k = 4096, tokens = 64;
  Matrix m = Matrix::make(false, n, k, 495);
  const std::vector<uint16_t> x = r.bf16(tokens * k, 4.0f);
  const std::vector<uint16_t> normW = normWeights(r, k);
  Dev dX = Dev::of(x), dNormW = Dev::of(normW);
  std::vector<std::vector<uint16_t>> outs;
  for (int64_t grid : {n / k3::kGemvMmaRows * 4, int64_t{3 * 4}}) {
    Dev dOut = Dev::poisoned<uint16_t>(tokens * n);
    k3::LinearRowsParams rp;
    rp.one.x = dX.get<uint16_t>();
    rp.one.w = m.device();
    rp.one.n = n;
    rp.one.k = k;
    rp.one.normWeight = dNormW.get<uint16_t>();
    rp.one.normEps = 1e-6f;
    rp.one.out = dOut.get<uint16_t>();
    rp.rows = tokens;
    rp.xStride = k;
    rp.outStride = n;
    ASSERT_TRUE(launch("linear_rows_mma", rp, grid, k3::kGemvMmaThreads,
                       k3::kGemvMmaSmemBytes, 4)
                    .isOk());
    outs.push_back(dOut.download<uint16_t>(tokens * n));
  }
  expectSameBits(outs[0], outs[1], "split 4: 36 clusters against 3");
}

/// k3_linear_rows_prenorm (the tensor-core forms' x̂, written once per
/// chunk): every token's x̂ as cpu::rmsNormBf16 — an element may be its bf16
/// neighbour where the fp32 factor differs in its last bit (at most 1% of
/// them) — at Kimi-Linear's and K3's widths and an odd one (the element
/// tail), with strides between the tokens whose gaps stay poisoned, and a
/// grid wider than the rows.
TEST(LinearRowsMmaCuda, PreNormAsTheCpu) {
  K3_REQUIRE_GPU();
  for (int64_t k : {int64_t{2304}, int64_t{7168}, int64_t{1003}}) {
    SCOPED_TRACE("k=" + std::to_string(k));
    const int rows = 70;
    const int64_t xs = k + 24, os = k + 40;
    Rand r(600 + k);
    const std::vector<uint16_t> x = r.bf16(rows * xs, 4.0f);
    const std::vector<uint16_t> normW = normWeights(r, k);
    Dev dX = Dev::of(x), dW = Dev::of(normW);
    Dev dOut = Dev::poisoned<uint16_t>(rows * os);
    k3::LinearPreNormParams p;
    p.x = dX.get<uint16_t>();
    p.normWeight = dW.get<uint16_t>();
    p.out = dOut.get<uint16_t>();
    p.k = k;
    p.xStride = xs;
    p.outStride = os;
    p.normEps = 1e-6f;
    p.rows = rows;
    ASSERT_TRUE(launch("linear_rows_prenorm", p, rows + 3).isOk());
    const std::vector<uint16_t> all = dOut.download<uint16_t>(rows * os);
    size_t differing = 0, beyond = 0, gaps = 0;
    for (int t = 0; t < rows; ++t) {
      std::vector<uint16_t> want(k);
      k3::cpu::rmsNormBf16(x.data() + t * xs, normW.data(), k, 1e-6f,
                           want.data());
      for (int64_t i = 0; i < k; ++i) {
        const float w = k3::bf16ToFloat(want[i]);
        const float g = k3::bf16ToFloat(all[t * os + i]);
        differing += want[i] != all[t * os + i];
        beyond += !(std::fabs(double(g) - double(w)) <= bf16Ulp(w));
      }
      for (int64_t i = k; i < os; ++i)
        gaps += all[t * os + i] != 0xFFFF;
    }
    EXPECT_EQ(beyond, 0u);
    EXPECT_LE(differing, size_t(rows * k / 100));
    EXPECT_EQ(gaps, 0u);
  }
}

/// k3_linear_multi_rows: Kimi-Linear's KDA projections of h (q, k, v, f_a,
/// b, g_a with the folded norm) for several tokens, each token's entries
/// bit for bit k3_linear_multi's, the gaps between tokens untouched.
/// With RowsForm::Mma, k3_linear_multi_rows_mma for a prompt chunk (one
/// partial token tile, and two): tokens 0, 31 and the last against the CPU;
/// split over k in clusters of `split`. With RowsForm::Mma16,
/// k3_linear_multi_rows_mma16 for a decode batch (16 tokens, and 5), every
/// token against the CPU, with the entries `ns` (default KDA's).
void runKdaMultiRows(RowsForm form, int split = 1,
                     std::vector<int64_t> ns = {4096, 4096, 4096, 128, 32,
                                                128}) {
  const bool mma = form != RowsForm::Multi;
  const int64_t k = 2304;
  const std::vector<int> tokenCounts =
      form == RowsForm::Multi ? std::vector<int>{3, 8, 16}
      : form == RowsForm::Mma ? std::vector<int>{40, 70}
                              : std::vector<int>{16, 5};
  for (int tokens : tokenCounts) {
    const std::string what =
        "kda tokens=" + std::to_string(tokens) + formSuffix(form) +
        (split > 1 ? " split=" + std::to_string(split) : std::string());
    SCOPED_TRACE(what);
    Rand r(300 + tokens);
    const int64_t xs = k + 8, os = 4096 + 24;
    const std::vector<uint16_t> x = r.bf16(tokens * xs, 4.0f);
    const std::vector<uint16_t> normW = normWeights(r, k);
    Dev dX = Dev::of(x), dNormW = Dev::of(normW);
    std::vector<Matrix> m;
    std::vector<Dev> dOut;
    k3::LinearMultiRowsParams rp;
    k3::LinearMultiParams &p = rp.one;
    p.x = dX.get<uint16_t>();
    p.k = k;
    p.normWeight = dNormW.get<uint16_t>();
    p.normEps = 1e-6f;
    p.count = static_cast<int32_t>(ns.size());
    int64_t total = 0;
    for (size_t e = 0; e < ns.size(); ++e) {
      m.push_back(Matrix::make(false, ns[e], k, 310 + e));
      dOut.push_back(Dev::poisoned<uint16_t>(tokens * os));
      p.entries[e].w = m[e].device();
      p.entries[e].n = ns[e];
      p.entries[e].out = dOut[e].get<uint16_t>();
      total += ns[e];
    }
    rp.rows = tokens;
    rp.xStride = xs;
    rp.outStride = os;
    const int64_t grid = std::min<int64_t>((total + 7) / 8, 528);
    if (form == RowsForm::Mma16) {
      NarrowSplit narrow(total, k, smCount(), 0);
      const k3::LinearMultiRowsMma16Params mp{rp, narrow.split};
      ASSERT_TRUE(launch("linear_multi_rows_mma16", mp, smCount(),
                         k3::kGemvMma16Threads, k3::gemvMma16SmemBytes(k))
                      .isOk());
      narrow.expectCountersReset(what);
    } else if (mma)
      ASSERT_TRUE(
          launch("linear_multi_rows_mma", rp,
                 (total + k3::kGemvMmaRows - 1) / k3::kGemvMmaRows * split,
                 k3::kGemvMmaThreads, k3::kGemvMmaSmemBytes, split,
                 (tokens + k3::kGemvMmaTokens - 1) / k3::kGemvMmaTokens)
              .isOk());
    else
      ASSERT_TRUE(launch("linear_multi_rows", rp, grid, 256,
                         k3::gemvRowsSmemBytes(k, tokens))
                      .isOk());
    for (int t = 0; t < tokens; ++t) {
      k3::LinearMultiParams one = p;
      one.x = p.x + t * xs;
      std::vector<Dev> dOne;
      for (size_t e = 0; e < ns.size(); ++e) {
        dOne.push_back(Dev::poisoned<uint16_t>(ns[e]));
        one.entries[e].out = dOne[e].get<uint16_t>();
      }
      if (!mma) {
        ASSERT_TRUE(launch("linear_multi", one, grid).isOk());
        for (size_t e = 0; e < ns.size(); ++e)
          expectSameBits(dOne[e].download<uint16_t>(ns[e]),
                         slice<uint16_t>(dOut[e], t * os, ns[e]),
                         what + " token " + std::to_string(t) + " entry " +
                             std::to_string(e));
      }
      if (t == tokens - 1 || form == RowsForm::Mma16 ||
          (mma && (t == 0 || t == 31))) {
        // The CPU on the last token.
        k3::LinearMultiParams cpu = one;
        cpu.x = x.data() + t * xs;
        cpu.normWeight = normW.data();
        std::vector<std::vector<uint16_t>> want;
        for (size_t e = 0; e < ns.size(); ++e) {
          want.emplace_back(ns[e], 0xFFFF);
          cpu.entries[e].w = m[e].host();
          cpu.entries[e].out = want[e].data();
        }
        k3::linearMultiCpu(cpu);
        for (size_t e = 0; e < ns.size(); ++e)
          expectBf16Close(want[e], slice<uint16_t>(dOut[e], t * os, ns[e]),
                          nullptr,
                          what + " token " + std::to_string(t) + " cpu entry " +
                              std::to_string(e),
                          true);
      }
    }
    for (size_t e = 0; e < ns.size(); ++e) {
      const std::vector<uint16_t> all = dOut[e].download<uint16_t>(tokens * os);
      size_t written = 0;
      for (int t = 0; t < tokens; ++t)
        for (int64_t i = t * os + ns[e]; i < (t + 1) * os; ++i)
          written += all[i] != 0xFFFF;
      EXPECT_EQ(written, 0u) << what << " entry " << e;
    }
  }
}

TEST(LinearMultiRowsCuda, KdaProjectionsOfSeveralTokens) {
  K3_REQUIRE_GPU();
  runKdaMultiRows(RowsForm::Multi);
}

TEST(LinearMultiRowsMmaCuda, KdaProjectionsOfAPromptChunk) {
  K3_REQUIRE_GPU();
  runKdaMultiRows(RowsForm::Mma);
}

/// The KDA projections split over k by clusters of 2 and 4 (the folded
/// norm's sums of squares added across the cluster).
TEST(LinearMultiRowsMmaCuda, KdaProjectionsSplitOverK) {
  K3_REQUIRE_GPU();
  runKdaMultiRows(RowsForm::Mma, 2);
  runKdaMultiRows(RowsForm::Mma, 4);
}

/// The narrow tensor-core form (k3_linear_rows_mma16) at a decode batch's
/// shapes: Kimi-Linear's o_proj (residual in place; 16, 9 and 1 rows), a
/// normed KDA width, an lm_head slice in fp32 (normed), a weight count
/// that is not a multiple of the tile (600, 77); the split over k at 1, 3,
/// 13 (the o_proj's own) and 64 parts; a grid of one block and of 7
/// (looping over the units); and launches it does not take, which run the
/// single-row path per token: K3's 7168-wide input (its x̂ would not fit),
/// MXFP4, k not a multiple of 32, 17 rows.
TEST(LinearRowsMma16Cuda, ProjectionsOfADecodeBatch) {
  K3_REQUIRE_GPU();
  const RowsForm f = RowsForm::Mma16;
  LinearCase oProj{2304, 4096};
  oProj.residual = oProj.aliasResidual = true;
  for (int tokens : {16, 9, 1})
    runLinearRows(oProj, tokens, -1, 700 + tokens, f);
  for (int parts : {1, 3, 13, 64}) {
    LinearCase split = oProj;
    split.parts = parts;
    runLinearRows(split, 16, -1, 720 + parts, f);
  }
  LinearCase normed{4096, 2304};
  normed.norm = true;
  runLinearRows(normed, 16, -1, 790, f);
  LinearCase head{2000, 2304};
  head.f32 = true;
  head.norm = true;
  runLinearRows(head, 16, -1, 791, f);
  LinearCase ragged{600, 1024};
  ragged.residual = true;
  ragged.norm = true;
  ragged.parts = 5;
  runLinearRows(ragged, 12, -1, 792, f);
  LinearCase few{77, 2304};
  runLinearRows(few, 16, -1, 793, f);
  LinearCase one{2304, 4096};
  one.grid = 1;
  one.parts = 4;
  runLinearRows(one, 16, -1, 794, f);
  LinearCase seven{1000, 2304};
  seven.grid = 7;
  seven.norm = true;
  runLinearRows(seven, 16, -1, 795, f);
  // More parts than k groups: empty units add zeros.
  LinearCase empty{300, 1024};
  empty.parts = 40;
  empty.residual = true;
  runLinearRows(empty, 16, -1, 800, f);
  // Launches it leaves to the single-row path.
  LinearCase k3Wide{1024, 7168};
  k3Wide.norm = true;
  k3Wide.residual = true;
  k3Wide.grid = 8;
  k3Wide.fallback = true;
  runLinearRows(k3Wide, 16, 64 * 1024, 796, f);
  LinearCase mx{512, 1024};
  mx.mxfp4 = true;
  mx.fallback = true;
  runLinearRows(mx, 16, -1, 797, f);
  LinearCase odd{300, 1000};
  odd.norm = true;
  odd.fallback = true;
  runLinearRows(odd, 16, -1, 798, f);
  LinearCase seventeen = normed;
  seventeen.fallback = true;
  runLinearRows(seventeen, 17, -1, 799, f);
  // Without a norm, the per-token path's streamed x̂ is staged with no
  // barrier of its own: warps without a row (1100 rows over 132 × 16 warps)
  // must not overwrite the previous token's while others read it.
  LinearCase race{1100, 4096};
  race.fallback = true;
  runLinearRows(race, 17, -1, 801, f);
  runLinearRows(race, 16, 64 * 1024, 802, f);
}

/// The narrow form's outputs are the same bits for any grid of one split
/// (one block an SM, 5 blocks) and again on a second launch over the same
/// scratch (the counters reset by the first).
TEST(LinearRowsMma16Cuda, SameBitsForAnyGrid) {
  K3_REQUIRE_GPU();
  Rand r(800);
  const int64_t n = 2304, k = 4096, tokens = 16;
  Matrix m = Matrix::make(false, n, k, 801);
  const std::vector<uint16_t> x = r.bf16(tokens * k, 4.0f);
  const std::vector<uint16_t> normW = normWeights(r, k);
  Dev dX = Dev::of(x), dNormW = Dev::of(normW);
  NarrowSplit narrow(n, k, smCount(), 0);
  ASSERT_GT(narrow.split.parts, 1) << "the o_proj's split is over k";
  std::vector<std::vector<uint16_t>> outs;
  for (int64_t grid : {smCount(), int64_t{5}, smCount()}) {
    Dev dOut = Dev::poisoned<uint16_t>(tokens * n);
    k3::LinearRowsMma16Params p;
    p.rows.one.x = dX.get<uint16_t>();
    p.rows.one.w = m.device();
    p.rows.one.n = n;
    p.rows.one.k = k;
    p.rows.one.normWeight = dNormW.get<uint16_t>();
    p.rows.one.normEps = 1e-6f;
    p.rows.one.out = dOut.get<uint16_t>();
    p.rows.rows = tokens;
    p.rows.xStride = k;
    p.rows.outStride = n;
    narrow.repoison();
    p.split = narrow.split;
    ASSERT_TRUE(launch("linear_rows_mma16", p, grid, k3::kGemvMma16Threads,
                       k3::gemvMma16SmemBytes(k))
                    .isOk());
    narrow.expectCountersReset("grid " + std::to_string(grid));
    outs.push_back(dOut.download<uint16_t>(tokens * n));
  }
  expectSameBits(outs[0], outs[1], "one block an SM against 5");
  expectSameBits(outs[0], outs[2], "a second launch over the same scratch");
}

/// Two narrow launches back to back with programmatic dependent launch on
/// one stream, the second reading the first's output and both splitting k
/// over the same scratch (the step's order: each waits for the previous
/// grid before it touches an activation or the scratch): the second's
/// outputs the bits of the same two launches waited for one by one.
TEST(LinearRowsMma16Cuda, DependentLaunchesShareTheScratch) {
  K3_REQUIRE_GPU();
  auto d = k3::cuda::Driver::get();
  ASSERT_TRUE(d) << d.message();
  k3::Expected<k3::cuda::CUfunction> f =
      k3::findCudaKernel("linear_rows_mma16");
  ASSERT_TRUE(f) << f.message();
  ASSERT_TRUE((*d)->allowDynamicShared(*f));
  Rand r(810);
  const int64_t tokens = 16, k1 = 2304, n1 = 4096, n2 = 2304;
  Matrix w1 = Matrix::make(false, n1, k1, 811),
         w2 = Matrix::make(false, n2, n1, 812);
  Dev dX = Dev::of(r.bf16(tokens * k1, 1.0f));
  Dev dY1 = Dev::poisoned<uint16_t>(tokens * n1);
  const int64_t sms = smCount();
  // One scratch, sized for the larger split.
  NarrowSplit s1(n1, k1, sms, 0), s2(n2, n1, sms, 0);
  NarrowSplit &big =
      s1.tiles * s1.split.parts >= s2.tiles * s2.split.parts ? s1 : s2;
  const int64_t counters = std::max(s1.tiles, s2.tiles);
  Dev shared = Dev::poisoned<float>(big.tiles * big.split.parts *
                                    k3::kGemvMma16TileFloats);
  Dev zero = Dev::of(std::vector<uint32_t>(counters, 0));
  auto params = [&](const Dev &x, int64_t n, int64_t k, const Matrix &w,
                    Dev &out, int parts) {
    k3::LinearRowsMma16Params p;
    p.rows.one.x = x.get<uint16_t>();
    p.rows.one.w = w.device();
    p.rows.one.n = n;
    p.rows.one.k = k;
    p.rows.one.out = out.get<uint16_t>();
    p.rows.rows = static_cast<int32_t>(tokens);
    p.rows.xStride = k;
    p.rows.outStride = n;
    p.split.parts = parts;
    p.split.partials = shared.get<float>();
    p.split.counters = zero.get<uint32_t>();
    return p;
  };
  std::vector<std::vector<uint16_t>> outs;
  for (bool programmatic : {false, true}) {
    Dev dY2 = Dev::poisoned<uint16_t>(tokens * n2);
    k3::LinearRowsMma16Params a = params(dX, n1, k1, w1, dY1, s1.split.parts),
                              b = params(dY1, n2, n1, w2, dY2, s2.split.parts);
    k3::Expected<k3::cuda::CUstream> stream = (*d)->createStream();
    ASSERT_TRUE(stream) << stream.message();
    const int64_t block[3] = {k3::kGemvMma16Threads, 1, 1};
    for (auto [p, k] : {std::pair{&a, k1}, std::pair{&b, n1}}) {
      const int64_t grid[3] = {sms, 1, 1};
      ASSERT_TRUE((*d)->launch(*f, grid, block, k3::gemvMma16SmemBytes(k),
                               *stream, p, programmatic, nullptr));
      if (!programmatic) {
        ASSERT_TRUE((*d)->synchronize(*stream));
      }
    }
    ASSERT_TRUE((*d)->synchronize(*stream));
    (*d)->destroy(*stream);
    outs.push_back(dY2.download<uint16_t>(tokens * n2));
  }
  EXPECT_EQ(countDiffering(outs[0], outs[1]), 0u)
      << "dependent launches gave other bits than launches waited for";
  const std::vector<uint32_t> c = zero.download<uint32_t>(counters);
  EXPECT_EQ(std::count(c.begin(), c.end(), 0u),
            static_cast<std::ptrdiff_t>(counters));
  EXPECT_GT(s1.split.parts, 1);
  EXPECT_GT(s2.split.parts, 1);
}

/// The KDA projections of a decode batch in the narrow form, and entries
/// whose tiles straddle two of them (100, 36, 2000 rows).
TEST(LinearMultiRowsMma16Cuda, KdaProjectionsOfADecodeBatch) {
  K3_REQUIRE_GPU();
  runKdaMultiRows(RowsForm::Mma16);
  runKdaMultiRows(RowsForm::Mma16, 1, {100, 36, 2000});
}

} // namespace
