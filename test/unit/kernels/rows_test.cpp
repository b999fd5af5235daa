//===- rows_test.cpp - The multi-row forms of the CPU kernels -------------===//
//
// linearRowsCpu / linearMultiRowsCpu / moeExpertsRowsCpu run the rows of a
// step (several sequences, a prompt chunk) at once, each weight row read
// once for all of them (the MoE: each expert of the rows' union once);
// every row's output must equal its single-row call bit for bit, for bf16
// and MXFP4 weights, with and without the pre-norm, the residual, the fp32
// output and the shared expert, on fresh random inputs with the outputs
// poisoned first. Rows that do not share the weights fall back to one call
// each.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/BF16.h"
#include "kernels/gemv/GemvCpu.h"
#include "kernels/moe/MoeCpu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace k3 {
namespace {

std::vector<uint16_t> randomBf16(std::mt19937_64 &rng, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (uint16_t &x : v)
    x = floatToBf16(d(rng));
  return v;
}

struct Weights {
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> packed, scale;
  WeightRef ref;
};

Weights randomWeights(std::mt19937_64 &rng, int64_t n, int64_t k, bool mxfp4) {
  Weights w;
  if (!mxfp4) {
    w.bf16 = randomBf16(rng, n * k);
    w.ref.bf16 = w.bf16.data();
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255), exp(118, 126);
  w.packed.resize(n * k / 2);
  w.scale.resize(n * k / 32);
  for (uint8_t &b : w.packed)
    b = static_cast<uint8_t>(byte(rng));
  for (uint8_t &s : w.scale)
    s = static_cast<uint8_t>(exp(rng));
  w.ref.format = kWeightMxfp4;
  w.ref.packed = w.packed.data();
  w.ref.scale = w.scale.data();
  return w;
}

TEST(GemvRows, LinearRowsEqualSingleRows) {
  std::mt19937_64 rng(5);
  const int64_t n = 192, k = 256;
  const size_t m = 5;
  for (bool mxfp4 : {false, true})
    for (int variant = 0; variant < 3; ++variant) {
      Weights w = randomWeights(rng, n, k, mxfp4);
      const std::vector<uint16_t> norm = randomBf16(rng, k);
      std::vector<std::vector<uint16_t>> x(m), res(m), want(m), got(m);
      std::vector<std::vector<float>> wantF(m), gotF(m);
      std::vector<LinearParams> ps(m);
      std::vector<const LinearParams *> ptrs(m);
      for (size_t i = 0; i < m; ++i) {
        x[i] = randomBf16(rng, k);
        res[i] = randomBf16(rng, n);
        want[i].assign(n, 0x7fc0), got[i].assign(n, 0x7fc0);
        wantF[i].assign(n, NAN), gotF[i].assign(n, NAN);
        LinearParams &p = ps[i];
        p.x = x[i].data(), p.w = w.ref, p.n = n, p.k = k;
        if (variant >= 1)
          p.normWeight = norm.data(), p.residual = res[i].data();
        p.out = want[i].data();
        if (variant == 2)
          p.out = nullptr, p.outF32 = wantF[i].data();
        linearCpu(p);
        p.out = variant == 2 ? nullptr : got[i].data();
        if (variant == 2)
          p.outF32 = gotF[i].data();
        ptrs[i] = &p;
      }
      linearRowsCpu(ptrs.data(), m);
      for (size_t i = 0; i < m; ++i) {
        if (variant == 2)
          EXPECT_EQ(0, std::memcmp(wantF[i].data(), gotF[i].data(), n * 4))
              << mxfp4 << " row " << i;
        else
          EXPECT_EQ(want[i], got[i]) << mxfp4 << " " << variant << " row " << i;
      }
    }
}

TEST(GemvRows, LinearMultiRowsEqualSingleRows) {
  std::mt19937_64 rng(9);
  const int64_t k = 128;
  const size_t m = 4;
  Weights a = randomWeights(rng, 64, k, false), b = randomWeights(rng, 96, k, true);
  const std::vector<uint16_t> norm = randomBf16(rng, k);
  std::vector<std::vector<uint16_t>> x(m), want(m * 2), got(m * 2);
  std::vector<LinearMultiParams> ps(m);
  std::vector<const LinearMultiParams *> ptrs(m);
  for (size_t i = 0; i < m; ++i) {
    x[i] = randomBf16(rng, k);
    LinearMultiParams &p = ps[i];
    p.x = x[i].data(), p.k = k, p.normWeight = norm.data(), p.count = 2;
    p.entries[0].w = a.ref, p.entries[0].n = 64;
    p.entries[1].w = b.ref, p.entries[1].n = 96;
    for (int e = 0; e < 2; ++e) {
      want[2 * i + e].assign(p.entries[e].n, 0x7fc0);
      got[2 * i + e].assign(p.entries[e].n, 0x7fc0);
      p.entries[e].out = want[2 * i + e].data();
    }
    linearMultiCpu(p);
    for (int e = 0; e < 2; ++e)
      p.entries[e].out = got[2 * i + e].data();
    ptrs[i] = &p;
  }
  linearMultiRowsCpu(ptrs.data(), m);
  for (size_t i = 0; i < 2 * m; ++i)
    EXPECT_EQ(want[i], got[i]) << i;
}

TEST(GemvRows, RowsOfOtherWeightsRunOneByOne) {
  std::mt19937_64 rng(13);
  const int64_t n = 32, k = 64;
  Weights a = randomWeights(rng, n, k, false), b = randomWeights(rng, n, k, false);
  const std::vector<uint16_t> x = randomBf16(rng, k);
  std::vector<uint16_t> wantA(n), wantB(n), gotA(n, 0x7fc0), gotB(n, 0x7fc0);
  LinearParams pa, pb;
  pa.x = pb.x = x.data(), pa.n = pb.n = n, pa.k = pb.k = k;
  pa.w = a.ref, pb.w = b.ref;
  pa.out = wantA.data(), pb.out = wantB.data();
  linearCpu(pa), linearCpu(pb);
  pa.out = gotA.data(), pb.out = gotB.data();
  const LinearParams *ptrs[] = {&pa, &pb};
  linearRowsCpu(ptrs, 2);
  EXPECT_EQ(wantA, gotA);
  EXPECT_EQ(wantB, gotB);
  EXPECT_NE(gotA, gotB);
}

/// Rows that share some experts and not others, one with an id outside the
/// table (its mix is NaN, as alone), a shared expert, MXFP4 experts.
TEST(MoeRows, ExpertsRowsEqualSingleRows) {
  std::mt19937_64 rng(21);
  const int64_t dim = 64, inter = 32, E = 6;
  const int32_t topK = 3;
  std::vector<Weights> w1, w3, w2;
  std::vector<WeightRef> t1, t3, t2;
  for (int64_t e = 0; e < E; ++e) {
    w1.push_back(randomWeights(rng, inter, dim, e % 2 == 1));
    w3.push_back(randomWeights(rng, inter, dim, e % 2 == 1));
    w2.push_back(randomWeights(rng, dim, inter, e % 2 == 1));
  }
  for (int64_t e = 0; e < E; ++e)
    t1.push_back(w1[e].ref), t3.push_back(w3[e].ref), t2.push_back(w2[e].ref);
  Weights s1 = randomWeights(rng, 2 * inter, dim, false),
          s3 = randomWeights(rng, 2 * inter, dim, false),
          s2 = randomWeights(rng, dim, 2 * inter, false);
  const std::vector<uint16_t> norm = randomBf16(rng, dim);
  const int32_t ids[5][3] = {{0, 1, 2}, {2, 1, 0}, {5, 3, 1}, {4, 4, 0}, {1, 9, 2}};
  const size_t m = 5;
  for (bool withShared : {false, true}) {
    std::vector<std::vector<uint16_t>> x(m), res(m), want(m), got(m);
    std::vector<std::vector<float>> wts(m);
    std::vector<MoeExpertsParams> ps(m);
    std::vector<const MoeExpertsParams *> ptrs(m);
    for (size_t i = 0; i < m; ++i) {
      x[i] = randomBf16(rng, dim), res[i] = randomBf16(rng, dim);
      wts[i] = {0.5f, 0.3f, 0.2f + 0.01f * static_cast<float>(i)};
      want[i].assign(dim, 0x7fc0), got[i].assign(dim, 0x7fc0);
      MoeExpertsParams &p = ps[i];
      p.x = x[i].data(), p.ids = ids[i], p.weights = wts[i].data();
      p.topK = topK, p.numExperts = E;
      p.w1 = t1.data(), p.w3 = t3.data(), p.w2 = t2.data();
      p.dim = dim, p.interDim = inter;
      p.normWeight = norm.data(), p.residual = res[i].data();
      if (withShared) {
        p.sharedInterDim = 2 * inter;
        p.sharedW1 = s1.ref, p.sharedW3 = s3.ref, p.sharedW2 = s2.ref;
      }
      p.out = want[i].data();
      moeExpertsCpu(p);
      p.out = got[i].data();
      ptrs[i] = &p;
    }
    moeExpertsRowsCpu(ptrs.data(), m);
    for (size_t i = 0; i < m; ++i)
      EXPECT_EQ(0, std::memcmp(want[i].data(), got[i].data(), dim * 2))
          << withShared << " row " << i;
    EXPECT_TRUE(std::isnan(bf16ToFloat(got[4][0]))); // id 9 >= E
    EXPECT_FALSE(std::isnan(bf16ToFloat(got[0][0])));
  }
}

/// moeChunkPlanCpu (the places k3_moe_chunk_plan must give): each expert's
/// pairs at its offset, in pair order; order and pairAt inverse; a row
/// naming an expert twice keeps its pairs in rank order.
TEST(MoeRows, ChunkPlanPlacesEachExpertsPairsInOrder) {
  const int rows = 5, K = 3;
  const int64_t E = 6;
  const std::vector<int32_t> ids = {4, 1, 0, //
                                    1, 5, 4, //
                                    2, 2, 3, // a row naming 2 twice
                                    0, 4, 1, //
                                    5, 3, 2};
  std::vector<int32_t> offsets(E + 1, -1), order(rows * K, -1),
      pairAt(rows * K, -1);
  moeChunkPlanCpu(ids.data(), rows, K, E, offsets.data(), order.data(),
                  pairAt.data());
  // Counts 2, 3, 3, 2, 3, 2.
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 2, 5, 8, 10, 13, 15}));
  EXPECT_EQ(order, (std::vector<int32_t>{2, 9,     // expert 0
                                         1, 3, 11, // expert 1
                                         6, 7, 14, // expert 2
                                         8, 13,    // expert 3
                                         0, 5, 10, // expert 4
                                         4, 12})); // expert 5
  for (int p = 0; p < rows * K; ++p) {
    EXPECT_EQ(order[static_cast<size_t>(pairAt[static_cast<size_t>(p)])], p);
    const int32_t e = ids[static_cast<size_t>(p)];
    EXPECT_GE(pairAt[static_cast<size_t>(p)], offsets[static_cast<size_t>(e)]);
    EXPECT_LT(pairAt[static_cast<size_t>(p)],
              offsets[static_cast<size_t>(e) + 1]);
  }
}

} // namespace
} // namespace k3
