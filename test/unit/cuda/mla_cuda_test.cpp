//===- mla_cuda_test.cpp - k3_mla_* against the CPU MLA kernels
//------------===//
//
// k3_mla_cache_append and k3_mla_attend on fresh random inputs against
// mlaCacheAppendCpu / mlaAttendCpu: the K3 shapes (96 heads, P = 128,
// R = 64, L = 512, V = 128) at contexts 1, 7, 64 and 1000, small and odd
// shapes that take the kernels' other paths, grids smaller than the work
// and other block sizes. Outputs are bf16: every case reports max|diff| /
// max|ref|, the fraction of elements that differ and the largest difference
// in bf16 ulps.
//
//===----------------------------------------------------------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

#include "kernels/common/StepInputs.h"
#include "kernels/mla/MlaCpu.h"

#include <algorithm>
#include <cstdio>

namespace {

using namespace k3test;

//===----------------------------------------------------------------------===//
// mla_cache_append
//===----------------------------------------------------------------------===//

struct AppendCase {
  int64_t L, R, maxSeq, pos;
  int64_t gridX = 1, blockX = 256;
};

void runAppend(const AppendCase &c) {
  const int64_t width = c.L + c.R;
  Rand r(static_cast<uint64_t>(c.L * 1009 + c.R * 31 + c.pos));
  std::vector<uint16_t> kv = r.bf16(width, 1.5f);
  std::vector<uint16_t> w = bf16Around(r, c.L, 1.0f, 0.2f);
  // Earlier rows hold data the append must leave alone; the target row is
  // poisoned on both sides.
  std::vector<uint16_t> cache = r.bf16(c.maxSeq * width);
  std::fill(cache.begin() + c.pos * width, cache.begin() + (c.pos + 1) * width,
            uint16_t(0xFFFF));

  k3::MlaCacheAppendParams p;
  p.kv = kv.data();
  p.normWeight = w.data();
  p.eps = 1e-6f;
  p.pos = c.pos;
  p.kvLoraRank = c.L;
  p.ropeDim = c.R;
  std::vector<uint16_t> want = cache;
  p.cache = want.data();
  k3::mlaCacheAppendCpu(p);

  Dev dKv = Dev::of(kv), dW = Dev::of(w), dCache = Dev::of(cache);
  p.kv = dKv.get<uint16_t>();
  p.normWeight = dW.get<uint16_t>();
  p.cache = dCache.get<uint16_t>();
  ASSERT_TRUE(launch("mla_cache_append", p, c.gridX, c.blockX).isOk());
  std::vector<uint16_t> got = dCache.download<uint16_t>(cache.size());

  const std::string what =
      "append L " + std::to_string(c.L) + " R " + std::to_string(c.R) +
      " pos " + std::to_string(c.pos) + " grid " + std::to_string(c.gridX) +
      " block " + std::to_string(c.blockX);
  // Every other row is untouched.
  for (int64_t j = 0; j < c.maxSeq; ++j) {
    if (j == c.pos)
      continue;
    ASSERT_TRUE(std::equal(got.begin() + j * width,
                           got.begin() + (j + 1) * width,
                           want.begin() + j * width))
        << what << ": row " << j << " changed";
  }
  const auto row = [&](const std::vector<uint16_t> &v, int64_t from,
                       int64_t to) {
    return std::vector<uint16_t>(v.begin() + c.pos * width + from,
                                 v.begin() + c.pos * width + to);
  };
  // The normalised latent: only mean(x²) is summed in another order.
  expectBf16Near(row(want, 0, c.L), row(got, 0, c.L), what, 1, 0.01);
  // The rope part is an exact copy.
  EXPECT_EQ(row(got, c.L, width), row(want, c.L, width)) << what;
}

TEST(MlaCuda, CacheAppendMatchesCpu) {
  K3_REQUIRE_GPU();
  // K3 (L = 512, R = 64) at the first, a middle and the last row.
  for (int64_t pos : {0, 37, 63})
    runAppend({512, 64, 64, pos});
  // Small and odd widths (scalar sizes, fewer elements than threads).
  runAppend({64, 32, 8, 5});
  runAppend({37, 5, 3, 1});
  runAppend({300, 3, 4, 2});
  runAppend({1, 1, 2, 1});
}

/// Grid-stride contract: more blocks than needed, and fewer threads than
/// elements; the row is written once and right either way.
TEST(MlaCuda, CacheAppendAnyGrid) {
  K3_REQUIRE_GPU();
  runAppend({512, 64, 16, 9, /*gridX=*/3, /*blockX=*/256});
  runAppend({512, 64, 16, 9, /*gridX=*/1, /*blockX=*/64});
  runAppend({37, 5, 3, 2, /*gridX=*/5, /*blockX=*/32});
}

/// mla_cache_append's multi-row form (k3_mla_cache_append_rows): M rows,
/// each its own cache (a batch's slots), kv and position — one row reading
/// its position from a step block — in one launch, each row's params from a
/// device array: every cache byte as M single-row launches leave it, at
/// K3's widths and odd ones, grids 1 and 3.
TEST(MlaCuda, CacheAppendRowsAsOneLaunchPerRow) {
  K3_REQUIRE_GPU();
  for (const AppendCase &c : {AppendCase{512, 64, 16, 0, 1, 256},
                              AppendCase{37, 5, 8, 0, 3, 32}}) {
    for (int M : {2, 5}) {
      const int64_t width = c.L + c.R;
      Rand r(static_cast<uint64_t>(c.L * 7 + M));
      const std::vector<uint16_t> w = bf16Around(r, c.L, 1.0f, 0.2f);
      Dev dW = Dev::of(w);
      std::vector<std::vector<uint16_t>> caches;
      std::vector<Dev> kvs, single, rows, steps;
      std::vector<k3::MlaCacheAppendParams> params;
      for (int i = 0; i < M; ++i) {
        caches.push_back(r.bf16(c.maxSeq * width));
        kvs.push_back(Dev::of(r.bf16(width, 1.5f)));
        single.push_back(Dev::of(caches.back()));
        rows.push_back(Dev::of(caches.back()));
        std::vector<int64_t> step(k3::kStepWords, 0);
        step[k3::kStepPos] = (3 * i + 1) % c.maxSeq;
        steps.push_back(Dev::of(step));
      }
      for (int i = 0; i < M; ++i) {
        k3::MlaCacheAppendParams p;
        p.kv = kvs[i].get<uint16_t>();
        p.normWeight = dW.get<uint16_t>();
        p.eps = 1e-6f;
        p.pos = (5 * i + 2) % c.maxSeq;
        p.kvLoraRank = c.L;
        p.ropeDim = c.R;
        if (i == 1) // this row's position from its step block
          p.step = steps[i].get<int64_t>();
        p.cache = single[i].get<uint16_t>();
        ASSERT_TRUE(launch("mla_cache_append", p, c.gridX, c.blockX).isOk());
        p.cache = rows[i].get<uint16_t>();
        params.push_back(p);
      }
      Dev array = Dev::of(params);
      k3::MlaCacheAppendRowsParams rp;
      rp.rows = array.get<k3::MlaCacheAppendParams>();
      rp.count = M;
      ASSERT_TRUE(launch("mla_cache_append_rows", rp, c.gridX, c.blockX, 0, 1,
                         M)
                      .isOk());
      for (int i = 0; i < M; ++i) {
        const auto want = single[i].download<uint16_t>(caches[i].size());
        EXPECT_EQ(rows[i].download<uint16_t>(caches[i].size()), want)
            << "append rows L " << c.L << ", " << M << " rows, row " << i;
        EXPECT_NE(want, caches[i]) << "row " << i << " appended nothing";
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// mla_attend
//===----------------------------------------------------------------------===//

struct AttendShape {
  int64_t heads, P, R, L, V;
};

/// The per-shape tensors: q, kv_b_proj and the gate (uploaded once) and a
/// pool of cache rows.
struct AttendData {
  AttendShape s;
  std::vector<uint16_t> q, kvB, gate, rows;
  Dev dq, dkvB, dgate;

  AttendData(const AttendShape &shape, int64_t maxRows, float qStd,
             uint64_t seed)
      : s(shape) {
    Rand r(seed);
    q = r.bf16(s.heads * (s.P + s.R), qStd);
    // Projection-like weights (std 0.05); the latent is RMS-normalised (~1).
    kvB = r.bf16(s.heads * (s.P + s.V) * s.L, 0.05f);
    gate = r.bf16(s.heads * s.V, 2.0f);
    rows = r.bf16(maxRows * (s.L + s.R), 1.0f);
    dq = Dev::of(q);
    dkvB = Dev::of(kvB);
    dgate = Dev::of(gate);
  }
};

struct AttendRun {
  int64_t length;
  bool gated = true;
  int64_t gridX = 0; ///< 0: the codegen grid (numHeads)
  int64_t blockX = 256;
  /// Elements the device cache pointer is shifted by (1: misaligned, which
  /// takes the scalar path).
  int64_t cacheShift = 0;
  /// Blocks per thread-block cluster: > 1 launches mla_attend_clustered
  /// (kMlaClusterBlocks, grid kMlaClusterBlocks · N), else mla_attend.
  int64_t clusterX = 1;
};

/// mla_attend's params for shape `s` over `length` rows, with K3.md §3's
/// scale; the pointers are the caller's.
k3::MlaAttendParams attendParams(const AttendShape &s, int64_t length) {
  k3::MlaAttendParams p;
  p.length = length;
  p.numHeads = s.heads;
  p.nopeDim = s.P;
  p.ropeDim = s.R;
  p.vDim = s.V;
  p.kvLoraRank = s.L;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.P + s.R));
  return p;
}

/// Checks mla_attend against the CPU on `run`; `bits`, when given, receives
/// the GPU's output.
void runAttend(const AttendData &d, const AttendRun &run,
               double maxDiffering = 0.02,
               std::vector<uint16_t> *bits = nullptr) {
  const AttendShape &s = d.s;
  const int64_t width = s.L + s.R;
  // The cache: `length` rows, then rows of NaN that must never be read.
  std::vector<uint16_t> cache(run.cacheShift + (run.length + 2) * width,
                              uint16_t(0xFFFF));
  std::copy(d.rows.begin(), d.rows.begin() + run.length * width,
            cache.begin() + run.cacheShift);

  k3::MlaAttendParams p = attendParams(s, run.length);
  p.q = d.q.data();
  p.kvB = d.kvB.data();
  p.cache = cache.data() + run.cacheShift;
  p.gate = run.gated ? d.gate.data() : nullptr;
  std::vector<uint16_t> want(s.heads * s.V, 0xFFFF);
  p.out = want.data();
  k3::mlaAttendCpu(p);

  Dev dCache = Dev::of(cache);
  Dev dOut = Dev::poisoned<uint16_t>(want.size());
  p.q = d.dq.get<uint16_t>();
  p.kvB = d.dkvB.get<uint16_t>();
  p.cache = dCache.get<uint16_t>() + run.cacheShift;
  p.gate = run.gated ? d.dgate.get<uint16_t>() : nullptr;
  p.out = dOut.get<uint16_t>();
  const int64_t grid = run.gridX > 0 ? run.gridX : s.heads;
  const char *kernel = run.clusterX > 1 ? "mla_attend_clustered" : "mla_attend";
  ASSERT_TRUE(launch(kernel, p, grid, run.blockX, 0, run.clusterX).isOk());
  std::vector<uint16_t> got = dOut.download<uint16_t>(want.size());
  // An L2 prefetch hint (here of kv_b_proj itself, whole 16-byte pieces
  // from a 16-byte offset) changes no bit.
  p.l2Prefetch.data = d.dkvB.get<uint8_t>() + 16;
  p.l2Prefetch.bytes = (static_cast<int64_t>(d.kvB.size()) * 2 - 16) / 16 * 16;
  ASSERT_TRUE(launch(kernel, p, grid, run.blockX, 0, run.clusterX).isOk());
  EXPECT_EQ(dOut.download<uint16_t>(want.size()), got)
      << kernel << " with an L2 prefetch hint";
  p.l2Prefetch = {};

  char what[192];
  std::snprintf(what, sizeof(what),
                "%s N%lld P%lld R%lld L%lld V%lld T%lld%s g%lld b%lld c%lld%s",
                kernel, (long long)s.heads, (long long)s.P, (long long)s.R,
                (long long)s.L, (long long)s.V, (long long)run.length,
                run.gated ? " gated" : "", (long long)grid,
                (long long)run.blockX, (long long)run.clusterX,
                run.cacheShift ? " shifted" : "");
  expectBf16Near(want, got, what, 1, maxDiffering);
  if (bits)
    *bits = got;
}

/// K3's shapes at the contexts of a short decode and a longer one, with and
/// without the output gate.
TEST(MlaCuda, AttendK3MatchesCpu) {
  K3_REQUIRE_GPU();
  AttendData d({96, 128, 64, 512, 128}, 1000, 1.0f, 42);
  for (int64_t t : {1, 7, 64, 1000})
    runAttend(d, {t});
  runAttend(d, {64, /*gated=*/false});
  runAttend(d, {1000, /*gated=*/false});
}

/// Large q: peaked softmaxes (scores spread over tens), where the running
/// max and the rescaling of the online softmax matter.
TEST(MlaCuda, AttendPeakedSoftmax) {
  K3_REQUIRE_GPU();
  AttendData d({8, 128, 64, 512, 128}, 1000, 8.0f, 7);
  for (int64_t t : {7, 64, 1000})
    runAttend(d, {t});
}

/// Small and odd shapes: the 16-byte path with small L, the wide-L vector
/// path (L = 1024, its limit), and the scalar path (R or L not a multiple of
/// 8; L = 999 near its limit; K3's L with a misaligned cache pointer).
TEST(MlaCuda, AttendSmallAndOddShapes) {
  K3_REQUIRE_GPU();
  {
    AttendData d({4, 32, 32, 64, 32}, 1000, 1.0f, 1);
    for (int64_t t : {1, 7, 64, 1000})
      runAttend(d, {t});
  }
  {
    AttendData d({3, 20, 12, 40, 24}, 1000, 1.0f, 2);
    for (int64_t t : {1, 7, 64, 1000})
      runAttend(d, {t});
  }
  {
    AttendData d({2, 64, 64, 1024, 64}, 64, 1.0f, 3);
    for (int64_t t : {1, 7, 64})
      runAttend(d, {t});
  }
  {
    AttendData d({2, 16, 8, 1000, 8}, 64, 1.0f, 4);
    runAttend(d, {64});
  }
  {
    AttendData d({2, 7, 5, 999, 9}, 64, 1.0f, 5);
    for (int64_t t : {1, 64})
      runAttend(d, {t});
  }
  {
    AttendData d({5, 128, 64, 512, 128}, 64, 1.0f, 6);
    runAttend(d, {64, true, 0, 256, /*cacheShift=*/1});
    runAttend(d, {7, false, 0, 256, /*cacheShift=*/1});
  }
}

/// A latent rank over the kernel's limit (L <= 1024) is refused loudly: every
/// output is NaN rather than a silently wrong value.
TEST(MlaCuda, AttendUnsupportedShapeWritesNaN) {
  K3_REQUIRE_GPU();
  AttendData d({2, 16, 16, 2048, 16}, 4, 1.0f, 14);
  k3::MlaAttendParams p;
  p.q = d.dq.get<uint16_t>();
  p.kvB = d.dkvB.get<uint16_t>();
  Dev dCache = Dev::of(d.rows);
  p.cache = dCache.get<uint16_t>();
  p.length = 4;
  p.numHeads = 2;
  p.nopeDim = 16;
  p.ropeDim = 16;
  p.vDim = 16;
  p.kvLoraRank = 2048;
  p.scale = 0.125f;
  Dev dOut = Dev::of(std::vector<uint16_t>(32, 0));
  p.out = dOut.get<uint16_t>();
  ASSERT_TRUE(launch("mla_attend", p, 2).isOk());
  for (uint16_t v : dOut.download<uint16_t>(32))
    EXPECT_TRUE(std::isnan(k3::bf16ToFloat(v)));
}

/// Grid-stride over heads (grids smaller than numHeads, down to 1) and
/// other block sizes (the online-softmax merge over 1 to 8 warps).
TEST(MlaCuda, AttendAnyGridAndBlock) {
  K3_REQUIRE_GPU();
  AttendData k3({96, 128, 64, 512, 128}, 64, 1.0f, 11);
  runAttend(k3, {64, true, /*gridX=*/7});
  AttendData small({4, 32, 32, 64, 32}, 1000, 1.0f, 12);
  runAttend(small, {1000, true, /*gridX=*/1});
  runAttend(small, {1000, true, 2, /*blockX=*/32});
  runAttend(small, {64, false, 4, /*blockX=*/64});
  runAttend(small, {7, true, 3, /*blockX=*/128});
  AttendData odd({3, 20, 12, 40, 24}, 1000, 1.0f, 13);
  runAttend(odd, {1000, true, /*gridX=*/1, /*blockX=*/96});
}

/// Split over the cache (grid = heads × S, S = 2..16; the kernel uses
/// min(S, length / max(256, 8 · heads)) splits): contexts too short to
/// split, at the boundaries of 1, 2 and 16 splits and between (splits of
/// unequal length), the scalar path split too; a grid that is not a
/// multiple of the heads (the spare blocks return).
TEST(MlaCuda, AttendSplitOverTheCache) {
  K3_REQUIRE_GPU();
  AttendData k3({96, 128, 64, 512, 128}, 2400, 1.0f, 21);
  for (int64_t t : {1, 767, 768, 1536, 2400})
    runAttend(k3, {t, true, /*gridX=*/96 * 3});
  runAttend(k3, {2400, false, /*gridX=*/96 * 3 + 50});
  AttendData kl({32, 128, 64, 512, 128}, 4200, 1.0f, 22);
  for (int64_t sp : {2, 8, 16})
    for (int64_t t : {1, 255, 256, 513, 1000, 4095, 4096, 4200})
      runAttend(kl, {t, true, /*gridX=*/32 * sp});
  AttendData peaked({8, 128, 64, 512, 128}, 4200, 8.0f, 23);
  runAttend(peaked, {4200, true, /*gridX=*/8 * 16});
  runAttend(peaked, {7, true, /*gridX=*/8 * 16});
  AttendData odd({3, 20, 12, 40, 24}, 4200, 1.0f, 24);
  runAttend(odd, {4200, true, /*gridX=*/3 * 5, /*blockX=*/96});
  runAttend(odd, {3, true, /*gridX=*/3 * 4});
  // Repeated launches reuse the arrival counters (each combine resets its
  // head's): a second run of the same split still matches.
  runAttend(kl, {1000, true, /*gridX=*/32 * 8});
}

/// The all-heads form (from 4096 rows, blockDim 256, L <= 512 and R <= 64,
/// multiples of 8: the plans' shapes) cuts its work from the context alone:
/// whatever the grid (one block doing every phase, fewer blocks than items,
/// one per SM, more blocks than items), the output bits are the same, and
/// equal the CPU's within the usual bound. Kimi-Linear's heads with 4 and 8
/// head quads per item (4096, 8200 rows); 5 heads (2 quads, the second
/// partly empty) with V = 40 (the last output item partly empty); 4 heads
/// (one quad per item: its 8 warps split the rows and merge in shared
/// memory).
TEST(MlaCuda, AttendAllHeadsSameBitsForAnyGrid) {
  K3_REQUIRE_GPU();
  for (const AttendShape &shape :
       {AttendShape{32, 128, 64, 512, 128}, AttendShape{5, 16, 8, 64, 40},
        AttendShape{4, 32, 32, 64, 32}}) {
    AttendData d(shape, 8200, 1.0f, 31);
    for (int64_t t : {4096, 8200}) {
      std::vector<uint16_t> first;
      for (int64_t grid : {132, 1, 5, 700}) {
        std::vector<uint16_t> got;
        runAttend(d, {t, true, grid}, 0.02, &got);
        if (first.empty())
          first = got;
        else
          EXPECT_EQ(got, first) << "N" << shape.heads << " T" << t
                                << " grid " << grid;
      }
    }
  }
}

/// Around the switch between the two forms (4095 rows per head, 4096 all
/// heads) and long contexts: Kimi-Linear's 32 heads, K3's 96 (three groups
/// of 32 heads, ranges capped by the partials' scratch), peaked softmaxes.
TEST(MlaCuda, AttendAllHeadsLongContext) {
  K3_REQUIRE_GPU();
  AttendData kl({32, 128, 64, 512, 128}, 9000, 1.0f, 41);
  for (int64_t t : {4095, 4096, 8191, 8192, 9000})
    runAttend(kl, {t, true, /*gridX=*/132});
  AttendData k3({96, 128, 64, 512, 128}, 9000, 1.0f, 42);
  runAttend(k3, {9000, true, /*gridX=*/132});
  runAttend(k3, {4500, false, /*gridX=*/64});
  AttendData peaked({32, 128, 64, 512, 128}, 9000, 8.0f, 43);
  runAttend(peaked, {9000, true, /*gridX=*/132});
}

/// The production lengths of the tensor-core B items (Kimi-Linear's 32 heads
/// at 32K cached rows, K3's 96 at 16K; 256 and 128 rows per range): the
/// softmax runs over many 16-row tiles, so a wrong rescale between tiles, a
/// dropped term of q̂ or of the rope, or two heads' fragments swapped shows
/// here; peaked scores too.
TEST(MlaCuda, AttendAllHeadsProductionLengths) {
  K3_REQUIRE_GPU();
  AttendData kl({32, 128, 64, 512, 128}, 32768, 1.0f, 44);
  runAttend(kl, {32768, true, /*gridX=*/132});
  runAttend(kl, {32760, false, /*gridX=*/132});
  AttendData peaked({32, 128, 64, 512, 128}, 32768, 8.0f, 45);
  runAttend(peaked, {32768, true, /*gridX=*/132});
  AttendData k3({96, 128, 64, 512, 128}, 16384, 1.0f, 46);
  runAttend(k3, {16384, true, /*gridX=*/132});
}

/// The clustered form (a cluster of C blocks per head, grid C·N, up to 4096
/// rows; Kimi-Linear's and K3's head shape): contexts shorter than the
/// cluster (blocks without rows), around a split boundary, up to the
/// switch; Kimi-Linear's 32 heads, K3's 96 (more clusters than SMs), 2
/// heads, R = 8 (the smallest rope it takes), peaked softmaxes, with and
/// without the gate.
TEST(MlaCuda, AttendClusteredMatchesCpu) {
  K3_REQUIRE_GPU();
  const int64_t C = k3::kMlaClusterBlocks;
  AttendData kl({32, 128, 64, 512, 128}, 4096, 1.0f, 51);
  for (int64_t t : {1, 2, 3, 4, 5, 72, 1000, 1023, 1024, 1025, 4096})
    for (bool gated : {true, false})
      runAttend(kl, {t, gated, 32 * C, 256, 0, C});
  AttendData k3({96, 128, 64, 512, 128}, 2000, 1.0f, 52);
  runAttend(k3, {2000, true, 96 * C, 256, 0, C});
  runAttend(k3, {7, false, 96 * C, 256, 0, C});
  AttendData two({2, 128, 8, 512, 128}, 600, 1.0f, 53);
  runAttend(two, {600, true, 2 * C, 256, 0, C});
  AttendData peaked({32, 128, 64, 512, 128}, 3000, 8.0f, 54);
  runAttend(peaked, {3000, true, 32 * C, 256, 0, C});
  runAttend(peaked, {9, true, 32 * C, 256, 0, C});
}

/// mla_attend_clustered's multi-row form (k3_mla_attend_clustered_rows): the
/// rows of a prompt chunk — one cache, row t attending its first
/// start + t + 1 rows with its own q, gate and out — in one launch, each
/// row bit for bit its own mla_attend_clustered launch, the last row
/// against the CPU; Kimi-Linear's 32 heads and K3's 96, 1, 3 and 64 rows.
TEST(MlaCuda, AttendClusteredRowsAsOneLaunchPerRow) {
  K3_REQUIRE_GPU();
  const int64_t C = k3::kMlaClusterBlocks;
  for (int64_t heads : {32, 96}) {
    for (int64_t T : {1, 3, 64}) {
      const AttendShape sh{heads, 128, 64, 512, 128};
      const int64_t start = 950, width = sh.L + sh.R;
      SCOPED_TRACE("N" + std::to_string(heads) + " rows " + std::to_string(T));
      Rand r(static_cast<uint64_t>(60 + heads + T));
      const std::vector<uint16_t> kvB =
          r.bf16(sh.heads * (sh.P + sh.V) * sh.L, 0.05f);
      const std::vector<uint16_t> cache = r.bf16((start + T) * width, 1.0f);
      const int64_t qn = sh.heads * (sh.P + sh.R), on = sh.heads * sh.V;
      const std::vector<uint16_t> q = r.bf16(T * qn, 1.0f),
                                  gate = r.bf16(T * on, 2.0f);
      Dev dKvB = Dev::of(kvB), dCache = Dev::of(cache), dQ = Dev::of(q),
          dGate = Dev::of(gate);
      Dev single = Dev::poisoned<uint16_t>(T * on),
          together = Dev::poisoned<uint16_t>(T * on);
      std::vector<k3::MlaAttendParams> rows;
      for (int64_t t = 0; t < T; ++t) {
        k3::MlaAttendParams p = attendParams(sh, start + t + 1);
        p.q = dQ.get<uint16_t>() + t * qn;
        p.kvB = dKvB.get<uint16_t>();
        p.cache = dCache.get<uint16_t>();
        p.gate = dGate.get<uint16_t>() + t * on;
        p.out = single.get<uint16_t>() + t * on;
        ASSERT_TRUE(
            launch("mla_attend_clustered", p, heads * C, 256, 0, C).isOk());
        p.out = together.get<uint16_t>() + t * on;
        rows.push_back(p);
      }
      Dev array = Dev::of(rows);
      k3::MlaAttendRowsParams rp;
      rp.rows = array.get<k3::MlaAttendParams>();
      rp.count = static_cast<int32_t>(T);
      ASSERT_TRUE(
          launch("mla_attend_clustered_rows", rp, heads * C, 256, 0, C, T)
              .isOk());
      const std::vector<uint16_t> want = single.download<uint16_t>(T * on),
                                  got = together.download<uint16_t>(T * on);
      EXPECT_EQ(want, got);
      // The last row against the CPU (the single launches are checked
      // against it in AttendClusteredMatchesCpu).
      k3::MlaAttendParams cpu = attendParams(sh, start + T);
      cpu.q = q.data() + (T - 1) * qn;
      cpu.kvB = kvB.data();
      cpu.cache = cache.data();
      cpu.gate = gate.data() + (T - 1) * on;
      std::vector<uint16_t> ref(on, 0xFFFF);
      cpu.out = ref.data();
      k3::mlaAttendCpu(cpu);
      expectBf16Near(ref, std::vector<uint16_t>(got.end() - on, got.end()),
                     "clustered rows, last row", 1, 0.02);
    }
  }
}

/// mla_attend_clustered's chunk form (k3_mla_attend_clustered_chunk): the
/// rows of a prompt chunk — one cache, row t attending its first start + t
/// + 1 rows (one row's length from its step block) with its own q, gate and
/// out — a block per head and tile of 16 rows. Every row within the bf16
/// rule of the CPU (and so of the rows form); Kimi-Linear's 32 heads and
/// K3's 96, 1 to 64 rows (a partial last tile), from an empty cache and
/// from 950 rows, with and without the gate. Then the handover (rows past
/// it left alone, poison kept) and a row of another cache (NaN).
TEST(MlaCuda, AttendChunkAsTheCpu) {
  K3_REQUIRE_GPU();
  const int64_t Q = k3::kMlaChunkRows;
  for (int64_t heads : {32, 96}) {
    for (int64_t T : {1, 16, 37, 64}) {
      for (int64_t start : {0, 950}) {
        const bool gated = (T + start) % 2 == 1;
        const AttendShape sh{heads, 128, 64, 512, 128};
        const int64_t width = sh.L + sh.R;
        SCOPED_TRACE("N" + std::to_string(heads) + " rows " +
                     std::to_string(T) + " from " + std::to_string(start) +
                     (gated ? " gated" : ""));
        Rand r(static_cast<uint64_t>(70 + heads + T + start));
        const std::vector<uint16_t> kvB =
            r.bf16(sh.heads * (sh.P + sh.V) * sh.L, 0.05f);
        const std::vector<uint16_t> cache = r.bf16((start + T) * width, 1.0f);
        const int64_t qn = sh.heads * (sh.P + sh.R), on = sh.heads * sh.V;
        const std::vector<uint16_t> q = r.bf16(T * qn, 1.0f),
                                    gate = r.bf16(T * on, 2.0f);
        Dev dKvB = Dev::of(kvB), dCache = Dev::of(cache), dQ = Dev::of(q),
            dGate = Dev::of(gate), out = Dev::poisoned<uint16_t>(T * on);
        std::vector<int64_t> step(k3::kStepWords, 0);
        step[k3::kStepPos] = start + T / 2; // row T / 2's length: its own
        Dev dStep = Dev::of(step);
        std::vector<k3::MlaAttendParams> rows;
        for (int64_t t = 0; t < T; ++t) {
          k3::MlaAttendParams p = attendParams(sh, start + t + 1);
          p.q = dQ.get<uint16_t>() + t * qn;
          p.kvB = dKvB.get<uint16_t>();
          p.cache = dCache.get<uint16_t>();
          p.gate = gated ? dGate.get<uint16_t>() + t * on : nullptr;
          p.out = out.get<uint16_t>() + t * on;
          if (t == T / 2) {
            p.length = 0;
            p.step = dStep.get<int64_t>();
          }
          rows.push_back(p);
        }
        Dev array = Dev::of(rows);
        k3::MlaAttendRowsParams rp;
        rp.rows = array.get<k3::MlaAttendParams>();
        rp.count = static_cast<int32_t>(T);
        ASSERT_TRUE(launch("mla_attend_clustered_chunk", rp, heads,
                           k3::kMlaChunkThreads, k3::kMlaChunkSmemBytes, 1,
                           (T + Q - 1) / Q)
                        .isOk());
        const std::vector<uint16_t> got = out.download<uint16_t>(T * on);
        for (int64_t t = 0; t < T; ++t) {
          k3::MlaAttendParams cpu = attendParams(sh, start + t + 1);
          cpu.q = q.data() + t * qn;
          cpu.kvB = kvB.data();
          cpu.cache = cache.data();
          cpu.gate = gated ? gate.data() + t * on : nullptr;
          std::vector<uint16_t> ref(on, 0xFFFF);
          cpu.out = ref.data();
          k3::mlaAttendCpu(cpu);
          expectBf16Near(ref,
                         std::vector<uint16_t>(got.begin() + t * on,
                                               got.begin() + (t + 1) * on),
                         "chunk row " + std::to_string(t), 1, 0.02);
        }
        if (T == 37) {
          // A NaN at position start + 20 of the chunk's cache: the rows
          // that do not attend it (t < 20) keep their bits (their rounds
          // skip the rows past their lengths), the others are NaN, as in
          // the rows form.
          std::vector<uint16_t> bad = cache;
          bad[size_t((start + 20) * width + 7)] = 0x7FC0;
          Dev dBad = Dev::of(bad), nanOut = Dev::poisoned<uint16_t>(T * on);
          std::vector<k3::MlaAttendParams> badRows = rows;
          for (int64_t t = 0; t < T; ++t) {
            badRows[size_t(t)].cache = dBad.get<uint16_t>();
            badRows[size_t(t)].out = nanOut.get<uint16_t>() + t * on;
          }
          Dev badArray = Dev::of(badRows);
          k3::MlaAttendRowsParams bp = rp;
          bp.rows = badArray.get<k3::MlaAttendParams>();
          ASSERT_TRUE(launch("mla_attend_clustered_chunk", bp, heads,
                             k3::kMlaChunkThreads, k3::kMlaChunkSmemBytes, 1,
                             (T + Q - 1) / Q)
                          .isOk());
          const std::vector<uint16_t> n = nanOut.download<uint16_t>(T * on);
          for (int64_t t = 0; t < T; ++t) {
            const int64_t len = t == T / 2 ? start + T / 2 + 1 : start + t + 1;
            const std::vector<uint16_t> row(n.begin() + t * on,
                                            n.begin() + (t + 1) * on),
                want(got.begin() + t * on, got.begin() + (t + 1) * on);
            if (len <= start + 20) {
              EXPECT_EQ(row, want) << "row " << t << " does not attend the NaN";
            } else {
              for (uint16_t x : row)
                ASSERT_GT(x & 0x7FFFu, 0x7F80u) << "row " << t << " attends it";
            }
          }
        }
        if (T != 37 || start != 950)
          continue;
        // The handover: rows attending more than start + 20 rows are the
        // next launch's; a row of another cache is NaN.
        Dev other = Dev::of(cache), again = Dev::poisoned<uint16_t>(T * on);
        for (int64_t t = 0; t < T; ++t) {
          rows[t].handover = start + 20;
          rows[t].out = again.get<uint16_t>() + t * on;
        }
        rows[3].cache = other.get<uint16_t>();
        Dev array2 = Dev::of(rows);
        rp.rows = array2.get<k3::MlaAttendParams>();
        ASSERT_TRUE(launch("mla_attend_clustered_chunk", rp, heads,
                           k3::kMlaChunkThreads, k3::kMlaChunkSmemBytes, 1,
                           (T + Q - 1) / Q)
                        .isOk());
        const std::vector<uint16_t> h = again.download<uint16_t>(T * on);
        for (int64_t t = 0; t < T; ++t) {
          const std::vector<uint16_t> row(h.begin() + t * on,
                                          h.begin() + (t + 1) * on),
              want(got.begin() + t * on, got.begin() + (t + 1) * on);
          const int64_t len = t == T / 2 ? start + T / 2 + 1 : start + t + 1;
          if (t == 3) {
            for (uint16_t x : row)
              ASSERT_EQ(x & 0x7FFFu, 0x7FC0u) << "row 3 (another cache)";
          } else if (len > start + 20) {
            EXPECT_EQ(row, std::vector<uint16_t>(on, 0xFFFF))
                << "row " << t << " is past the handover";
          } else {
            EXPECT_EQ(row, want) << "row " << t;
          }
        }
      }
    }
  }
}

/// mla_attend_clustered's batch form (k3_mla_attend_clustered_batch): rows
/// of different sequences, each with its own cache, length, q, gate and out,
/// a block per (head, tile of ceil(count / grid y) rows). Every row within
/// the bf16 rule of the CPU; Kimi-Linear's 32 heads and K3's 96; 1 to 37
/// rows in tiles of 1 to 16 rows; lengths from 1 to 1000 (rounds of 32
/// cache rows, partial ones); one row's length from its step block. Then a
/// NaN in one row's cache (that row NaN, the others their bits), the
/// handover (rows past it left alone) and a row of other weights than its
/// tile's first (NaN).
TEST(MlaCuda, AttendBatchAsTheCpu) {
  K3_REQUIRE_GPU();
  const AttendShape kl{32, 128, 64, 512, 128};
  for (int64_t heads : {32, 96}) {
    for (int64_t T : {1, 5, 16, 37}) {
      for (int64_t per : {1, 3, 16}) {
        const int64_t tiles = (T + per - 1) / per;
        const bool gated = (T + per) % 2 == 0;
        const AttendShape sh{heads, kl.P, kl.R, kl.L, kl.V};
        const int64_t width = sh.L + sh.R;
        const std::string what = "N" + std::to_string(heads) + " rows " +
                                 std::to_string(T) + " in tiles of " +
                                 std::to_string(per) + (gated ? " gated" : "");
        SCOPED_TRACE(what);
        Rand r(static_cast<uint64_t>(170 + heads + 7 * T + per));
        const std::vector<uint16_t> kvB =
            r.bf16(sh.heads * (sh.P + sh.V) * sh.L, 0.05f);
        const int64_t qn = sh.heads * (sh.P + sh.R), on = sh.heads * sh.V;
        const std::vector<uint16_t> q = r.bf16(T * qn, 1.0f),
                                    gate = r.bf16(T * on, 2.0f);
        // Row t: its own cache of len[t] rows (1, 31, 32, 33, 100, 1000...).
        const int64_t lens[] = {1, 33, 1000, 32, 100, 31, 64, 7};
        std::vector<int64_t> len(T);
        std::vector<std::vector<uint16_t>> caches(T);
        std::vector<Dev> dCaches;
        for (int64_t t = 0; t < T; ++t) {
          len[t] = lens[(t + per) % 8] + t;
          caches[t] = r.bf16(len[t] * width, 1.0f);
          dCaches.push_back(Dev::of(caches[t]));
        }
        Dev dKvB = Dev::of(kvB), dQ = Dev::of(q), dGate = Dev::of(gate),
            out = Dev::poisoned<uint16_t>(T * on);
        std::vector<int64_t> step(k3::kStepWords, 0);
        step[k3::kStepPos] = len[T / 2] - 1; // row T / 2's length: its own
        Dev dStep = Dev::of(step);
        std::vector<k3::MlaAttendParams> rows;
        for (int64_t t = 0; t < T; ++t) {
          k3::MlaAttendParams p = attendParams(sh, len[t]);
          p.q = dQ.get<uint16_t>() + t * qn;
          p.kvB = dKvB.get<uint16_t>();
          p.cache = dCaches[t].get<uint16_t>();
          p.gate = gated ? dGate.get<uint16_t>() + t * on : nullptr;
          p.out = out.get<uint16_t>() + t * on;
          if (t == T / 2) {
            p.length = 0;
            p.step = dStep.get<int64_t>();
          }
          rows.push_back(p);
        }
        auto run = [&](const std::vector<k3::MlaAttendParams> &rs) {
          Dev array = Dev::of(rs);
          k3::MlaAttendRowsParams rp;
          rp.rows = array.get<k3::MlaAttendParams>();
          rp.count = static_cast<int32_t>(rs.size());
          ASSERT_TRUE(launch("mla_attend_clustered_batch", rp, heads,
                             k3::kMlaChunkThreads, k3::kMlaChunkSmemBytes, 1,
                             tiles)
                          .isOk());
        };
        run(rows);
        const std::vector<uint16_t> got = out.download<uint16_t>(T * on);
        for (int64_t t = 0; t < T; ++t) {
          k3::MlaAttendParams cpu = attendParams(sh, len[t]);
          cpu.q = q.data() + t * qn;
          cpu.kvB = kvB.data();
          cpu.cache = caches[t].data();
          cpu.gate = gated ? gate.data() + t * on : nullptr;
          std::vector<uint16_t> ref(on, 0xFFFF);
          cpu.out = ref.data();
          k3::mlaAttendCpu(cpu);
          expectBf16Near(ref,
                         std::vector<uint16_t>(got.begin() + t * on,
                                               got.begin() + (t + 1) * on),
                         "batch row " + std::to_string(t), 1, 0.02);
        }
        if (T != 37 || per != 3)
          continue;
        // A NaN in row 4's cache (its last row): row 4 NaN, the others
        // their bits; the handover at 40 rows: rows longer are left alone;
        // row 5 of other weights than its tile's first row (3): NaN.
        std::vector<uint16_t> bad = caches[4];
        bad[size_t((len[4] - 1) * width + 7)] = 0x7FC0;
        Dev dBad = Dev::of(bad), dOther = Dev::of(kvB),
            again = Dev::poisoned<uint16_t>(T * on);
        std::vector<k3::MlaAttendParams> changed = rows;
        for (int64_t t = 0; t < T; ++t) {
          changed[t].out = again.get<uint16_t>() + t * on;
          changed[t].handover = 40;
        }
        changed[4].cache = dBad.get<uint16_t>();
        changed[5].kvB = dOther.get<uint16_t>();
        run(changed);
        const std::vector<uint16_t> h = again.download<uint16_t>(T * on);
        for (int64_t t = 0; t < T; ++t) {
          const std::vector<uint16_t> row(h.begin() + t * on,
                                          h.begin() + (t + 1) * on),
              want(got.begin() + t * on, got.begin() + (t + 1) * on);
          if (len[t] > 40) {
            EXPECT_EQ(row, std::vector<uint16_t>(on, 0xFFFF))
                << "row " << t << " is past the handover";
          } else if (t == 4 || t == 5) {
            for (uint16_t x : row)
              ASSERT_GT(x & 0x7FFFu, 0x7F80u) << "row " << t << " is NaN";
          } else {
            EXPECT_EQ(row, want) << "row " << t;
          }
        }
        ASSERT_LE(len[4], 40) << "row 4 attends its NaN";
        ASSERT_LE(len[5], 40) << "row 5 is attended";
      }
    }
  }
}

/// mla_attend_clustered outside its limits writes NaN (never a silent
/// wrong answer): beyond 4096 rows, another head shape, a launch without
/// clusters or a grid that is not 4 blocks per head.
TEST(MlaCuda, AttendClusteredOutsideItsLimitsWritesNaN) {
  K3_REQUIRE_GPU();
  struct Case {
    AttendShape shape;
    int64_t length, grid, cluster;
  };
  const AttendShape kl{2, 128, 64, 512, 128};
  const int64_t C = k3::kMlaClusterBlocks;
  for (const Case &c :
       {Case{kl, 4097, 2 * C, C}, Case{{2, 64, 64, 512, 128}, 9, 2 * C, C},
        Case{kl, 9, 2 * C, 1}, Case{kl, 9, 3 * C, C}}) {
    AttendData d(c.shape, c.length, 1.0f, 56);
    k3::MlaAttendParams p;
    p.q = d.dq.get<uint16_t>();
    p.kvB = d.dkvB.get<uint16_t>();
    Dev dCache = Dev::of(d.rows);
    p.cache = dCache.get<uint16_t>();
    p.length = c.length;
    p.numHeads = c.shape.heads;
    p.nopeDim = c.shape.P;
    p.ropeDim = c.shape.R;
    p.vDim = c.shape.V;
    p.kvLoraRank = c.shape.L;
    p.scale = 0.07f;
    const size_t n = static_cast<size_t>(c.shape.heads * c.shape.V);
    Dev dOut = Dev::of(std::vector<uint16_t>(n, 0));
    p.out = dOut.get<uint16_t>();
    ASSERT_TRUE(
        launch("mla_attend_clustered", p, c.grid, 256, 0, c.cluster).isOk());
    for (uint16_t v : dOut.download<uint16_t>(n))
      ASSERT_TRUE(std::isnan(k3::bf16ToFloat(v)))
          << "T" << c.length << " P" << c.shape.P << " grid " << c.grid
          << " cluster " << c.cluster;
  }
}

/// A plan whose cache holds more rows than mla_attend_clustered attends
/// runs it and then mla_attend, both with handover = kMlaClusteredMaxRows
/// (codegen): on each side of the handover one launch writes the output (as
/// the CPU does, bf16 tolerance) and the other leaves it untouched (the
/// poison stays), at Kimi-Linear's shape on the codegen grids.
TEST(MlaCuda, AttendHandoverPairWritesOnce) {
  K3_REQUIRE_GPU();
  const int64_t C = k3::kMlaClusterBlocks, H = k3::kMlaClusteredMaxRows;
  const AttendShape s{32, 128, 64, 512, 128};
  AttendData d(s, H + 904, 1.0f, 57);
  Dev dCache = Dev::of(d.rows);
  const size_t n = static_cast<size_t>(s.heads * s.V);
  for (int64_t len : {int64_t(1), int64_t(1024), H, H + 1, H + 904}) {
    k3::MlaAttendParams p = attendParams(s, len);
    p.q = d.q.data();
    p.kvB = d.kvB.data();
    p.cache = d.rows.data();
    p.gate = d.gate.data();
    std::vector<uint16_t> want(n, 0xFFFF);
    p.out = want.data();
    k3::mlaAttendCpu(p);
    p.handover = H;
    p.q = d.dq.get<uint16_t>();
    p.kvB = d.dkvB.get<uint16_t>();
    p.cache = dCache.get<uint16_t>();
    p.gate = d.dgate.get<uint16_t>();
    Dev dOut = Dev::poisoned<uint16_t>(n);
    p.out = dOut.get<uint16_t>();
    ASSERT_TRUE(
        launch("mla_attend_clustered", p, s.heads * C, 256, 0, C).isOk());
    const std::vector<uint16_t> afterFirst = dOut.download<uint16_t>(n);
    ASSERT_TRUE(launch("mla_attend", p, 132, 256).isOk());
    const std::vector<uint16_t> got = dOut.download<uint16_t>(n);
    const std::vector<uint16_t> poison(n, 0xFFFF);
    if (len <= H)
      EXPECT_EQ(got, afterFirst) << "mla_attend wrote below the handover";
    else
      EXPECT_EQ(afterFirst, poison) << "the clustered launch wrote above it";
    char what[96];
    std::snprintf(what, sizeof(what), "handover pair T%lld",
                  static_cast<long long>(len));
    expectBf16Near(want, got, what, 1, 0.02);
  }
}

} // namespace
