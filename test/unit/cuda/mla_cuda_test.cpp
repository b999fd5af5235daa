//===- mla_cuda_test.cpp - k3_mla_* against the CPU MLA kernels
//------------===//
//
// k3_mla_cache_append and k3_mla_attend on fresh random inputs against
// mlaCacheAppendCpu / mlaAttendCpu: the K3 shapes (96 heads, P = 128,
// R = 64, L = 512, V = 128) at contexts 1 to 20000, small and odd shapes
// that take both of mla_attend's paths (the split path and the per-head
// path), grids smaller and larger than the work (the split path must give
// the same bits for every grid) and other block sizes. Outputs are bf16:
// every case reports max|diff| / max|ref|, the fraction of elements that
// differ and the largest difference in bf16 ulps.
//
//===----------------------------------------------------------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

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
};

/// The params of a run (host pointers; the caller swaps in device ones).
k3::MlaAttendParams attendParams(const AttendData &d, const AttendRun &run,
                                 const uint16_t *cache) {
  const AttendShape &s = d.s;
  k3::MlaAttendParams p;
  p.q = d.q.data();
  p.kvB = d.kvB.data();
  p.cache = cache;
  p.length = run.length;
  p.gate = run.gated ? d.gate.data() : nullptr;
  p.numHeads = s.heads;
  p.nopeDim = s.P;
  p.ropeDim = s.R;
  p.vDim = s.V;
  p.kvLoraRank = s.L;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.P + s.R));
  return p;
}

/// The cache of a run: `length` rows of the pool, then rows of NaN that must
/// never be read, after `cacheShift` elements of padding.
std::vector<uint16_t> attendCache(const AttendData &d, const AttendRun &run) {
  const int64_t width = d.s.L + d.s.R;
  std::vector<uint16_t> cache(run.cacheShift + (run.length + 2) * width,
                              uint16_t(0xFFFF));
  std::copy(d.rows.begin(), d.rows.begin() + run.length * width,
            cache.begin() + run.cacheShift);
  return cache;
}

/// k3_mla_attend's output for `run` (poisoned before the launch).
std::vector<uint16_t> gpuAttend(const AttendData &d, const AttendRun &run,
                                const Dev &dCache) {
  const AttendShape &s = d.s;
  k3::MlaAttendParams p =
      attendParams(d, run, dCache.get<uint16_t>() + run.cacheShift);
  Dev dOut = Dev::poisoned<uint16_t>(s.heads * s.V);
  p.q = d.dq.get<uint16_t>();
  p.kvB = d.dkvB.get<uint16_t>();
  p.gate = run.gated ? d.dgate.get<uint16_t>() : nullptr;
  p.out = dOut.get<uint16_t>();
  const int64_t grid = run.gridX > 0 ? run.gridX : s.heads;
  EXPECT_TRUE(launch("mla_attend", p, grid, run.blockX).isOk());
  return dOut.download<uint16_t>(s.heads * s.V);
}

std::string attendName(const AttendData &d, const AttendRun &run) {
  const AttendShape &s = d.s;
  char what[160];
  std::snprintf(what, sizeof(what),
                "attend N%lld P%lld R%lld L%lld V%lld T%lld%s g%lld b%lld%s",
                (long long)s.heads, (long long)s.P, (long long)s.R,
                (long long)s.L, (long long)s.V, (long long)run.length,
                run.gated ? " gated" : "",
                (long long)(run.gridX > 0 ? run.gridX : s.heads),
                (long long)run.blockX, run.cacheShift ? " shifted" : "");
  return what;
}

/// Runs `run` on the CPU and the GPU and compares; returns the GPU output.
std::vector<uint16_t> runAttend(const AttendData &d, const AttendRun &run,
                                double maxDiffering = 0.02) {
  const AttendShape &s = d.s;
  std::vector<uint16_t> cache = attendCache(d, run);
  k3::MlaAttendParams p = attendParams(d, run, cache.data() + run.cacheShift);
  std::vector<uint16_t> want(s.heads * s.V, 0xFFFF);
  p.out = want.data();
  k3::mlaAttendCpu(p);

  Dev dCache = Dev::of(cache);
  std::vector<uint16_t> got = gpuAttend(d, run, dCache);
  expectBf16Near(want, got, attendName(d, run), 1, maxDiffering);
  return got;
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

/// Small and odd shapes: the split path with small L, and the per-head
/// path's variants: 16-byte chunks at L > 512 (L = 1024, its limit; 1000)
/// and scalar ones (R or L not a multiple of 8; L = 999 near its limit,
/// which accumulates in shared memory; K3's L with a misaligned cache
/// pointer).
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

/// Long contexts at K3's shapes on the split path: 4096 rows (128 splits of
/// 2 tiles of 16 rows), 4097 (86 splits of 3 tiles, the last one 17 rows:
/// a tile of one row) and 20000 (125 splits of 10 tiles).
TEST(MlaCuda, AttendK3LongContext) {
  K3_REQUIRE_GPU();
  AttendData d({96, 128, 64, 512, 128}, 20000, 1.0f, 21);
  runAttend(d, {4096});
  runAttend(d, {4097, /*gated=*/false});
  runAttend(d, {20000});
}

/// Peaked softmaxes over long contexts: the splits' maxima differ by tens,
/// so the merge's rescaling by e^(m_s − M) matters.
TEST(MlaCuda, AttendPeakedSoftmaxLongContext) {
  K3_REQUIRE_GPU();
  AttendData d({16, 128, 64, 512, 128}, 6000, 8.0f, 23);
  runAttend(d, {3000});
  runAttend(d, {6000, /*gated=*/false});
}

/// The split path at small and odd shapes: heads not a multiple of its 16
/// per item, L not a multiple of 64 or 128, no rope part (R = 0), lengths
/// not a multiple of the 16-row tile, multi-tile splits (> 2048 rows).
TEST(MlaCuda, AttendSplitPathOddShapes) {
  K3_REQUIRE_GPU();
  {
    AttendData d({20, 40, 24, 136, 40}, 3000, 1.0f, 41);
    for (int64_t t : {1, 17, 1000, 3000})
      runAttend(d, {t});
  }
  {
    AttendData d({3, 16, 0, 64, 16}, 100, 1.0f, 42);
    for (int64_t t : {1, 100})
      runAttend(d, {t});
  }
  {
    AttendData d({17, 8, 64, 512, 8}, 2100, 4.0f, 43);
    runAttend(d, {2100});
    runAttend(d, {2100, /*gated=*/false});
  }
}

/// Any grid gives the same bits on the split path (its work split depends on
/// the shape only and every reduction has a fixed order): grids 1 and 7,
/// the codegen's 96, 264 and 528 (two and four blocks per SM on an H200) and
/// 1000, at contexts with multi-tile splits and a short last split (5000
/// rows: 105 splits of 3 tiles; 3000: 94 of 2); the back-to-back launches
/// also check that each launch leaves the work queue reset.
TEST(MlaCuda, AttendGridIndependentBits) {
  K3_REQUIRE_GPU();
  {
    AttendData d({96, 128, 64, 512, 128}, 5000, 1.0f, 31);
    const AttendRun base{5000};
    const std::vector<uint16_t> ref = runAttend(d, base);
    Dev dCache = Dev::of(attendCache(d, base));
    for (int64_t grid : {1, 7, 96, 264, 528, 1000}) {
      AttendRun r = base;
      r.gridX = grid;
      EXPECT_TRUE(gpuAttend(d, r, dCache) == ref) << attendName(d, r);
    }
  }
  {
    AttendData d({20, 40, 24, 136, 40}, 3000, 1.0f, 32);
    const AttendRun base{3000, /*gated=*/false};
    const std::vector<uint16_t> ref = runAttend(d, base);
    Dev dCache = Dev::of(attendCache(d, base));
    for (int64_t grid : {1, 3, 50, 264}) {
      AttendRun r = base;
      r.gridX = grid;
      EXPECT_TRUE(gpuAttend(d, r, dCache) == ref) << attendName(d, r);
    }
  }
}

/// Shapes beyond the split path's module scratch (N·L > 2^18 floats of q̂;
/// N > 1024 heads) take the per-head path at block 256, still right.
TEST(MlaCuda, AttendBeyondSplitScratch) {
  K3_REQUIRE_GPU();
  {
    AttendData d({520, 8, 8, 512, 8}, 64, 1.0f, 51);
    runAttend(d, {64});
  }
  {
    AttendData d({1030, 8, 8, 16, 8}, 64, 1.0f, 52);
    runAttend(d, {64});
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

/// Grids smaller than the work (the split path at K3's shapes with grid 7,
/// at a small shape with grid 1) and other block sizes (the per-head path,
/// heads block-stride: its online-softmax merge over 1 to 8 warps).
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

} // namespace
