//===- attnres_cuda_test.cpp - k3_attn_res* against the CPU kernels -------===//
//
// k3_attn_res, k3_attn_res_clustered and k3_attn_res_commit on fresh
// random inputs against attnResCpu / attnResCommitCpu: K3's hidden size
// (D = 7168) with 1 to 8 committed blocks plus the partial sum, with and
// without the fused RMSNorm; the tiny model's D = 256; odd sizes and
// misaligned rows (the scalar path); more sources than one sweep; other
// grids and block sizes; the clustered form's cluster sizes, agreement of
// its blocks, and NaN outside its limits. attn_res outputs are bf16 and
// compared in ulps; the commit is an exact copy, compared bit for bit,
// including the in-place case (src = the row).
//
//===----------------------------------------------------------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

#include "kernels/attnres/AttnResCpu.h"

#include <algorithm>
#include <cstdio>

namespace {

using namespace k3test;

//===----------------------------------------------------------------------===//
// attn_res
//===----------------------------------------------------------------------===//

struct AttnResCase {
  int64_t dim, numBlocks;
  bool extra = true, norm = false;
  int64_t gridX = 1, blockX = 256;
  /// Elements the device `extra` pointer is shifted by (1: misaligned, which
  /// takes the scalar path).
  int64_t extraShift = 0;
  /// Blocks per thread-block cluster (1: none); the kernel, attn_res or
  /// attn_res_clustered.
  int64_t clusterX = 1;
  const char *kernel = "attn_res";
};

void runAttnRes(const AttnResCase &c) {
  const int64_t D = c.dim;
  Rand r(
      static_cast<uint64_t>(D * 131 + c.numBlocks * 7 + c.extra * 3 + c.norm));
  // Sources of different sizes, as the residual stream grows over depth
  // (the embedding is small, later blocks larger); 2 spare rows of NaN that
  // must never be read.
  const int64_t maxBlocks = c.numBlocks + 2;
  std::vector<uint16_t> blocks(maxBlocks * D, 0xFFFF);
  for (int64_t i = 0; i < c.numBlocks; ++i) {
    std::vector<uint16_t> row = r.bf16(D, 0.05f * float(1 << (i % 7)));
    std::copy(row.begin(), row.end(), blocks.begin() + i * D);
  }
  std::vector<uint16_t> extra(c.extraShift + D);
  {
    std::vector<uint16_t> e = r.bf16(D, 1.5f);
    std::copy(e.begin(), e.end(), extra.begin() + c.extraShift);
  }
  std::vector<uint16_t> wNorm = bf16Around(r, D, 1.0f, 0.1f);
  // Logits of about unit spread (a real model's sit close together), so
  // every source has a say in the mix.
  std::vector<uint16_t> wProj = r.bf16(D, 0.8f / std::sqrt(float(D)));
  std::vector<uint16_t> normW = bf16Around(r, D, 1.0f, 0.2f);

  k3::AttnResParams p;
  p.blocks = blocks.data();
  p.numBlocks = c.numBlocks;
  p.extra = c.extra ? extra.data() + c.extraShift : nullptr;
  p.wNorm = wNorm.data();
  p.wProj = wProj.data();
  p.eps = 1e-5f;
  p.dim = D;
  p.normWeight = c.norm ? normW.data() : nullptr;
  p.normEps = 1e-5f;
  std::vector<uint16_t> want(D, 0xFFFF);
  p.out = want.data();
  k3::attnResCpu(p);

  Dev dBlocks = Dev::of(blocks), dExtra = Dev::of(extra);
  Dev dWNorm = Dev::of(wNorm), dWProj = Dev::of(wProj), dNormW = Dev::of(normW);
  Dev dOut = Dev::poisoned<uint16_t>(D);
  p.blocks = dBlocks.get<uint16_t>();
  p.extra = c.extra ? dExtra.get<uint16_t>() + c.extraShift : nullptr;
  p.wNorm = dWNorm.get<uint16_t>();
  p.wProj = dWProj.get<uint16_t>();
  p.normWeight = c.norm ? dNormW.get<uint16_t>() : nullptr;
  p.out = dOut.get<uint16_t>();
  ASSERT_TRUE(launch(c.kernel, p, c.gridX, c.blockX, 0, c.clusterX).isOk());
  std::vector<uint16_t> got = dOut.download<uint16_t>(D);

  char what[200];
  std::snprintf(what, sizeof(what),
                "%s D%lld blocks %lld%s%s g%lld b%lld c%lld%s", c.kernel,
                (long long)D, (long long)c.numBlocks, c.extra ? " +extra" : "",
                c.norm ? " norm" : "", (long long)c.gridX, (long long)c.blockX,
                (long long)c.clusterX, c.extraShift ? " shifted" : "");
  // The mix differs from the CPU's only where the logits' summation order
  // moves α across a rounding tie (well under 1% of the elements). The
  // fused norm adds two effects: a flipped mix element can end 2 ulps off,
  // and the flips shift mean(x²), so r, by ~1e-7; x takes few distinct
  // bf16 values, so whole groups of equal x·r lying at a rounding tie flip
  // together (about 1% of the elements at K3's D).
  if (c.norm)
    expectBf16Near(want, got, what, /*ulps=*/2, /*maxDiffering=*/0.05);
  else
    expectBf16Near(want, got, what, /*ulps=*/1, /*maxDiffering=*/0.02);
  // The mix is not trivially one source: it differs from each of them.
  std::vector<uint16_t> ex(extra.begin() + c.extraShift, extra.end());
  if (!c.norm && c.numBlocks + c.extra > 1) {
    EXPECT_NE(got, ex) << what;
  }
}

/// K3: D = 7168, 1 to 8 committed blocks plus the partial sum; the fused
/// pre-norm of the next mixer / FFN; only the partial sum (n = 1).
TEST(AttnResCuda, K3MatchesCpu) {
  K3_REQUIRE_GPU();
  for (int64_t nb : {0, 1, 4, 8})
    for (bool norm : {false, true})
      runAttnRes({7168, nb, true, norm});
  runAttnRes({7168, 3, /*extra=*/false, false});
  runAttnRes({7168, 3, /*extra=*/false, true});
}

/// The tiny model (D = 256), odd sizes (1000: chunks of 8 but not a multiple
/// of the block; 37: the scalar path), a misaligned partial sum at K3's D
/// (scalar path), and more sources than one sweep (13, and 64, the limit).
TEST(AttnResCuda, SmallAndOddShapes) {
  K3_REQUIRE_GPU();
  runAttnRes({256, 2, true, false});
  runAttnRes({256, 2, true, true});
  runAttnRes({1000, 5, true, true});
  runAttnRes({37, 3, true, false});
  runAttnRes({37, 3, true, true});
  runAttnRes({7168, 4, true, true, 1, 256, /*extraShift=*/1});
  runAttnRes({7168, 12, true, true});
  runAttnRes({256, 63, true, false});
  runAttnRes({256, 64, false, true});
}

/// Any grid (extra blocks must not disturb block 0's result) and other
/// block sizes.
TEST(AttnResCuda, AnyGridAndBlock) {
  K3_REQUIRE_GPU();
  runAttnRes({7168, 8, true, true, /*gridX=*/4, 256});
  runAttnRes({7168, 8, true, false, 1, /*blockX=*/32});
  runAttnRes({7168, 8, true, true, 2, /*blockX=*/128});
  runAttnRes({1000, 5, true, true, 1, /*blockX=*/512});
  runAttnRes({37, 3, true, true, 3, /*blockX=*/64});
}

//===----------------------------------------------------------------------===//
// attn_res_clustered
//===----------------------------------------------------------------------===//

/// A case of the clustered form on the launch codegen gives it: one cluster
/// of attnResClusterBlocks(D, n) blocks of kAttnResClusterThreads.
AttnResCase clustered(int64_t dim, int64_t numBlocks, bool extra, bool norm) {
  const int64_t cl = k3::attnResClusterBlocks(dim, numBlocks + extra);
  EXPECT_GT(cl, 0) << "D " << dim << " sources " << numBlocks + extra;
  AttnResCase c{dim, numBlocks, extra, norm, cl, k3::kAttnResClusterThreads};
  c.clusterX = cl;
  c.kernel = "attn_res_clustered";
  return c;
}

/// K3 (D = 7168: a cluster of 8, 112 chunks a block) with 1 to 9 sources,
/// with and without the fused norm; the tiny model's D = 256 (one block, no
/// cluster); D = 1000 (125 chunks: one block, threads left idle), 2048 (a
/// cluster of 2) and 8192 (the largest: every thread of 8 blocks a chunk).
TEST(AttnResCuda, ClusteredMatchesCpu) {
  K3_REQUIRE_GPU();
  for (int64_t nb : {0, 1, 4, 8})
    for (bool norm : {false, true})
      runAttnRes(clustered(7168, nb, true, norm));
  runAttnRes(clustered(7168, 3, /*extra=*/false, false));
  runAttnRes(clustered(7168, 9, /*extra=*/false, true));
  for (int64_t D : {256, 1000, 2048, 8192})
    for (bool norm : {false, true})
      runAttnRes(clustered(D, 5, true, norm));
  EXPECT_EQ(k3::attnResClusterBlocks(7168, 9), 8);
  EXPECT_EQ(k3::attnResClusterBlocks(256, 3), 1);
  EXPECT_EQ(k3::attnResClusterBlocks(2048, 3), 2);
}

/// Extra clusters of a larger grid return at once (the first computes it
/// all), and other shapes than codegen's: D = 2048 on a cluster of 4
/// blocks of 64 threads.
TEST(AttnResCuda, ClusteredOtherLaunches) {
  K3_REQUIRE_GPU();
  AttnResCase c = clustered(7168, 8, true, true);
  c.gridX = 24;
  runAttnRes(c);
  c = clustered(2048, 4, true, true);
  c.gridX = 4;
  c.clusterX = 4;
  c.blockX = 64;
  runAttnRes(c);
}

/// Every block of the cluster mixes with the same α (the per-source sums
/// added in rank order in each): sources, and the fused norm's weight,
/// repeat with the period of one block's slice while wNorm / wProj do not
/// (so every block's own share of the logits differs), and every block's
/// slice of the output comes out the same bits. Also the same bits from a
/// grid of one cluster and of three.
TEST(AttnResCuda, ClusteredBlocksAgreeBitForBit) {
  K3_REQUIRE_GPU();
  const int64_t D = 7168, nb = 8, cl = k3::attnResClusterBlocks(D, nb + 1);
  ASSERT_EQ(cl, 8);
  const int64_t slice = D / cl; // 112 chunks of 8
  Rand r(4242);
  auto periodic = [&](float scale) {
    std::vector<uint16_t> one = r.bf16(slice, scale), all(D);
    for (int64_t i = 0; i < D; ++i)
      all[i] = one[i % slice];
    return all;
  };
  std::vector<uint16_t> blocks;
  for (int64_t i = 0; i < nb; ++i) {
    std::vector<uint16_t> row = periodic(0.05f * float(1 << i));
    blocks.insert(blocks.end(), row.begin(), row.end());
  }
  std::vector<uint16_t> extra = periodic(1.5f);
  std::vector<uint16_t> wNorm = bf16Around(r, D, 1.0f, 0.1f);
  std::vector<uint16_t> wProj = r.bf16(D, 0.8f / std::sqrt(float(D)));
  std::vector<uint16_t> normW(D);
  {
    std::vector<uint16_t> one = bf16Around(r, slice, 1.0f, 0.2f);
    for (int64_t i = 0; i < D; ++i)
      normW[i] = one[i % slice];
  }
  Dev dBlocks = Dev::of(blocks), dExtra = Dev::of(extra);
  Dev dWNorm = Dev::of(wNorm), dWProj = Dev::of(wProj), dNormW = Dev::of(normW);
  std::vector<uint16_t> first;
  for (bool norm : {false, true})
    for (int64_t grid : {cl, 3 * cl}) {
      Dev dOut = Dev::poisoned<uint16_t>(D);
      k3::AttnResParams p;
      p.blocks = dBlocks.get<uint16_t>();
      p.numBlocks = nb;
      p.extra = dExtra.get<uint16_t>();
      p.wNorm = dWNorm.get<uint16_t>();
      p.wProj = dWProj.get<uint16_t>();
      p.dim = D;
      p.normWeight = norm ? dNormW.get<uint16_t>() : nullptr;
      p.out = dOut.get<uint16_t>();
      ASSERT_TRUE(launch("attn_res_clustered", p, grid,
                         k3::kAttnResClusterThreads, 0, cl)
                      .isOk());
      std::vector<uint16_t> got = dOut.download<uint16_t>(D);
      for (int64_t b = 1; b < cl; ++b)
        EXPECT_TRUE(std::equal(got.begin(), got.begin() + slice,
                               got.begin() + b * slice))
            << "block " << b << "'s slice differs from block 0's"
            << (norm ? " (norm)" : "") << " grid " << grid;
      if (grid == cl)
        first = got;
      else
        EXPECT_EQ(got, first) << "grid " << grid << (norm ? " (norm)" : "");
    }
}

/// Outside its limits the clustered form writes NaN over all of out: 10
/// sources, a D not of whole chunks, more chunks than the cluster's
/// threads (K3's D on a cluster of 4 blocks of 128), a misaligned source.
TEST(AttnResCuda, ClusteredOutsideItsLimitsIsNaN) {
  K3_REQUIRE_GPU();
  struct Bad {
    int64_t dim, numBlocks, clusterX, extraShift;
    const char *why;
  };
  for (const Bad &b :
       {Bad{7168, 9, 8, 0, "10 sources"}, Bad{1004, 2, 1, 0, "D % 8 != 0"},
        Bad{7168, 2, 4, 0, "224 chunks a block of 128"},
        Bad{7168, 2, 8, 1, "a misaligned partial sum"}}) {
    const int64_t D = b.dim;
    Rand r(static_cast<uint64_t>(D + b.numBlocks));
    std::vector<uint16_t> blocks = r.bf16(b.numBlocks * D, 1.0f);
    std::vector<uint16_t> extra = r.bf16(D + b.extraShift, 1.0f);
    std::vector<uint16_t> w = bf16Around(r, D, 1.0f, 0.1f);
    Dev dBlocks = Dev::of(blocks), dExtra = Dev::of(extra), dW = Dev::of(w);
    Dev dOut = Dev::of(r.bf16(D, 1.0f)); // finite: NaN must be written
    k3::AttnResParams p;
    p.blocks = dBlocks.get<uint16_t>();
    p.numBlocks = b.numBlocks;
    p.extra = dExtra.get<uint16_t>() + b.extraShift;
    p.wNorm = dW.get<uint16_t>();
    p.wProj = dW.get<uint16_t>();
    p.dim = D;
    p.out = dOut.get<uint16_t>();
    ASSERT_TRUE(launch("attn_res_clustered", p, b.clusterX,
                       k3::kAttnResClusterThreads, 0, b.clusterX)
                    .isOk());
    std::vector<uint16_t> got = dOut.download<uint16_t>(D);
    for (int64_t i = 0; i < D; ++i)
      ASSERT_EQ(got[i], 0x7fc0) << b.why << ": out[" << i << "]";
  }
}

//===----------------------------------------------------------------------===//
// attn_res_commit
//===----------------------------------------------------------------------===//

struct CommitCase {
  int64_t dim, maxBlocks, index;
  int64_t gridX = 1, blockX = 256;
  int64_t srcShift = 0; ///< 1: a misaligned src (scalar path)
  bool inPlace = false; ///< src is the destination row itself
};

void runCommit(const CommitCase &c) {
  const int64_t D = c.dim;
  Rand r(static_cast<uint64_t>(D * 17 + c.index * 5 + c.srcShift));
  std::vector<uint16_t> blocks = r.bf16(c.maxBlocks * D, 2.0f);
  std::vector<uint16_t> src(c.srcShift + D);
  {
    std::vector<uint16_t> s = r.bf16(D, 2.0f);
    std::copy(s.begin(), s.end(), src.begin() + c.srcShift);
  }
  // The destination row is poisoned on both sides (unless it is the source).
  if (!c.inPlace)
    std::fill(blocks.begin() + c.index * D, blocks.begin() + (c.index + 1) * D,
              uint16_t(0xFFFF));

  k3::AttnResCommitParams p;
  std::vector<uint16_t> want = blocks;
  p.blocks = want.data();
  p.src = c.inPlace ? want.data() + c.index * D : src.data() + c.srcShift;
  p.index = c.index;
  p.dim = D;
  k3::attnResCommitCpu(p);

  Dev dBlocks = Dev::of(blocks), dSrc = Dev::of(src);
  p.blocks = dBlocks.get<uint16_t>();
  p.src = c.inPlace ? dBlocks.get<uint16_t>() + c.index * D
                    : dSrc.get<uint16_t>() + c.srcShift;
  ASSERT_TRUE(launch("attn_res_commit", p, c.gridX, c.blockX).isOk());
  std::vector<uint16_t> got = dBlocks.download<uint16_t>(blocks.size());
  EXPECT_EQ(got, want) << "commit D " << D << " index " << c.index << " grid "
                       << c.gridX << " block " << c.blockX << " shift "
                       << c.srcShift << (c.inPlace ? " in place" : "");
  if (!c.inPlace) { // the reference itself copied the source
    EXPECT_TRUE(std::equal(want.begin() + c.index * D,
                           want.begin() + (c.index + 1) * D,
                           src.begin() + c.srcShift));
  }
}

TEST(AttnResCuda, CommitMatchesCpu) {
  K3_REQUIRE_GPU();
  for (int64_t index : {0, 4, 8})
    runCommit({7168, 9, index});
  runCommit({256, 3, 1});
  runCommit({37, 4, 3});
  runCommit({7168, 9, 2, 1, 256, /*srcShift=*/1});
}

/// src may be the destination row itself (AttnResCommitParams allows it);
/// the row must come out unchanged.
TEST(AttnResCuda, CommitInPlace) {
  K3_REQUIRE_GPU();
  runCommit({7168, 9, 5, 1, 256, 0, /*inPlace=*/true});
  runCommit({37, 4, 2, 1, 256, 0, /*inPlace=*/true});
}

TEST(AttnResCuda, CommitAnyGrid) {
  K3_REQUIRE_GPU();
  runCommit({7168, 9, 3, /*gridX=*/1, /*blockX=*/32});
  runCommit({7168, 9, 3, /*gridX=*/7, /*blockX=*/64});
  runCommit({37, 4, 1, /*gridX=*/3, /*blockX=*/32});
}

} // namespace
