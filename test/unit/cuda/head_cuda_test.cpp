//===- head_cuda_test.cpp - k3_argmax against argmaxCpu -------------------===//
//
// The whole K3 vocabulary (163840 fp32 logits) with planted ties (the lowest
// index must win wherever the tied entries fall), NaN logits (never chosen;
// all NaN gives 0), -inf, odd sizes, a misaligned logits pointer, several
// blocks and other block sizes; the multi-row form (k3_argmax_rows) row by
// row. The answer is an index: exact equality.
//
//===----------------------------------------------------------------------===//
#include "test/unit/cuda/CudaTestUtil.h"

#include "kernels/head/HeadCpu.h"

namespace {

using namespace k3test;

constexpr int64_t kVocab = 163840;

/// argmax on both sides; `offset` floats of padding misalign the device copy.
void expectArgmax(const std::vector<float> &logits, const std::string &what,
                  int64_t grid = 1, int64_t block = 256, int64_t offset = 0,
                  int64_t expected = -1) {
  SCOPED_TRACE(what);
  k3::ArgmaxParams p;
  int64_t want = -7;
  p.logits = logits.data();
  p.n = static_cast<int64_t>(logits.size());
  p.outId = &want;
  k3::argmaxCpu(p);
  if (expected >= 0) {
    ASSERT_EQ(want, expected) << "the CPU reference itself";
  }

  std::vector<float> padded(offset, 1e30f); // padding would win if read
  padded.insert(padded.end(), logits.begin(), logits.end());
  Dev dLogits = Dev::of(padded), dOut = Dev::poisoned<int64_t>(1);
  p.logits = dLogits.get<float>() + offset;
  p.outId = dOut.get<int64_t>();
  ASSERT_TRUE(launch("argmax", p, grid, block).isOk());
  EXPECT_EQ(dOut.download<int64_t>(1)[0], want) << what;
}

TEST(ArgmaxCuda, FullVocabulary) {
  K3_REQUIRE_GPU();
  for (uint64_t seed : {1, 2, 3}) {
    Rand r(seed);
    std::vector<float> logits = r.f32(kVocab, 3.0f);
    expectArgmax(logits, "random " + std::to_string(seed));
  }
}

/// Equal maxima: the lowest index wins, wherever the copies are (same
/// thread, same warp, other warps, the tail).
TEST(ArgmaxCuda, TiesGoToTheLowestIndex) {
  K3_REQUIRE_GPU();
  Rand r(10);
  const std::vector<float> base = r.f32(kVocab, 3.0f);
  const std::vector<std::vector<int64_t>> plants = {
      {100000, 5000, 150000},   // different threads and warps
      {4, 5, 6, 7},             // one float4 of one thread
      {1024, 0},                // index 0 and the next chunk of thread 0
      {kVocab - 1, kVocab - 2}, // the very end
      {77777, 77777 - 1024},    // the same thread, one stride apart
      {2049, 2048 + 256 * 4 * 8 + 1}};
  for (const auto &plant : plants) {
    std::vector<float> logits = base;
    for (int64_t i : plant)
      logits[i] = 50.0f;
    const int64_t lowest = *std::min_element(plant.begin(), plant.end());
    expectArgmax(logits, "tie at " + std::to_string(lowest), 1, 256, 0, lowest);
  }
  // Every logit equal: index 0.
  expectArgmax(std::vector<float>(kVocab, 0.25f), "all equal", 1, 256, 0, 0);
  // -0 and +0 are equal: the first one wins.
  std::vector<float> zeros(kVocab, -1.0f);
  zeros[900] = 0.0f;
  zeros[300] = -0.0f;
  expectArgmax(zeros, "signed zeros", 1, 256, 0, 300);
}

TEST(ArgmaxCuda, NanAndInfinity) {
  K3_REQUIRE_GPU();
  Rand r(20);
  std::vector<float> logits = r.f32(kVocab, 3.0f);
  for (int64_t i = 0; i < kVocab; i += 7)
    logits[i] = NAN;
  logits[12345] = 1e6f;
  logits[12344] = NAN;
  expectArgmax(logits, "NaN around the max", 1, 256, 0, 12345);
  expectArgmax(std::vector<float>(kVocab, NAN), "all NaN", 1, 256, 0, 0);
  std::vector<float> inf(1000, -INFINITY);
  inf[3] = NAN;
  expectArgmax(inf, "all -inf", 1, 256, 0, 0);
  inf[500] = INFINITY;
  inf[700] = INFINITY;
  expectArgmax(inf, "+inf tie", 1, 256, 0, 500);
}

TEST(ArgmaxCuda, OddSizesAndMisaligned) {
  K3_REQUIRE_GPU();
  for (int64_t n :
       std::vector<int64_t>{1, 2, 3, 5, 37, 1023, 8195, kVocab - 3}) {
    Rand r(static_cast<uint64_t>(n));
    std::vector<float> logits = r.f32(n, 1.0f);
    logits[n - 1] = 10.0f; // in the tail that the float4 path leaves
    expectArgmax(logits, "n " + std::to_string(n), 1, 256, 0, n - 1);
    logits[n - 1] = -10.0f;
    expectArgmax(logits, "n " + std::to_string(n) + " misaligned", 1, 256, 1);
  }
}

TEST(ArgmaxCuda, AnyGridAndBlock) {
  K3_REQUIRE_GPU();
  Rand r(30);
  std::vector<float> logits = r.f32(kVocab, 3.0f);
  logits[99999] = 40.0f;
  logits[99998] = 40.0f;
  expectArgmax(logits, "grid 7", 7, 256, 0, 99998);
  expectArgmax(logits, "block 32", 1, 32, 0, 99998);
  expectArgmax(logits, "block 1024", 3, 1024, 0, 99998);
  expectArgmax(logits, "block 96 misaligned", 1, 96, 3, 99998);
}

/// k3_argmax_rows: M rows — each its own logits, id and step block — in one
/// launch, every row's id and next step (token, position + 1, the
/// non-finite flag) argmaxCpu's. A batch of 16 on the plan's grid of 64
/// (ties, NaN, +inf and a misaligned row among them), a grid above
/// kArgmaxRowsMaxParts, and rows past kArgmaxRowsSplit (scanned by one
/// block each). Outputs poisoned first.
TEST(ArgmaxCuda, RowsAsOneLaunchPerRow) {
  K3_REQUIRE_GPU();
  struct Case {
    int64_t rows, n, grid;
  };
  for (const Case &c : {Case{16, kVocab, 64}, Case{3, 9001, 100},
                        Case{k3::kArgmaxRowsSplit + 9, 4099, 64}}) {
    const std::string name = std::to_string(c.rows) + " rows of " +
                             std::to_string(c.n) + ", grid " +
                             std::to_string(c.grid);
    SCOPED_TRACE(name);
    Rand r(static_cast<uint64_t>(c.rows * 7 + c.n));
    // Row i's logits at i * pitch + (i % 3 == 2): every third row is
    // misaligned (the scalar path).
    const int64_t pitch = c.n + 4;
    std::vector<float> all = r.f32(c.rows * pitch, 3.0f);
    std::vector<int64_t> steps(c.rows * k3::kStepWords);
    for (int64_t i = 0; i < c.rows; ++i) {
      float *row = all.data() + i * pitch + (i % 3 == 2 ? 1 : 0);
      if (i % 4 == 1) { // a tie: the lower index wins
        row[(i * 131) % c.n] = 60.0f;
        row[(i * 131) % c.n / 2] = 60.0f;
      }
      if (i % 5 == 3)
        row[(i * 17) % c.n] = NAN;
      if (i % 7 == 6)
        row[c.n - 1] = INFINITY;
      steps[i * k3::kStepWords + k3::kStepPos] = 100 + i;
      steps[i * k3::kStepWords + k3::kStepToken] = -1;
    }
    Dev dLogits = Dev::of(all), dSteps = Dev::of(steps),
        dIds = Dev::poisoned<int64_t>(c.rows);
    std::vector<k3::ArgmaxParams> params(c.rows);
    for (int64_t i = 0; i < c.rows; ++i) {
      params[i].logits = dLogits.get<float>() + i * pitch + (i % 3 == 2);
      params[i].n = c.n;
      params[i].outId = dIds.get<int64_t>() + i;
      params[i].step = dSteps.get<int64_t>() + i * k3::kStepWords;
    }
    Dev array = Dev::of(params);
    k3::ArgmaxRowsParams rp;
    rp.rows = array.get<k3::ArgmaxParams>();
    rp.count = static_cast<int32_t>(c.rows);
    ASSERT_TRUE(launch("argmax_rows", rp, c.grid, 256, 0, 1, c.rows).isOk());
    const std::vector<int64_t> ids = dIds.download<int64_t>(c.rows),
                               gotSteps = dSteps.download<int64_t>(
                                   c.rows * k3::kStepWords);
    for (int64_t i = 0; i < c.rows; ++i) {
      k3::ArgmaxParams cpu;
      int64_t id = -7;
      std::vector<int64_t> step(steps.begin() + i * k3::kStepWords,
                                steps.begin() + (i + 1) * k3::kStepWords);
      cpu.logits = all.data() + i * pitch + (i % 3 == 2);
      cpu.n = c.n;
      cpu.outId = &id;
      cpu.step = step.data();
      k3::argmaxCpu(cpu);
      EXPECT_EQ(ids[i], id) << "row " << i;
      for (int w : {k3::kStepToken, k3::kStepPos, k3::kStepNonFinite})
        EXPECT_EQ(gotSteps[i * k3::kStepWords + w], step[w])
            << "row " << i << ", step word " << w;
    }
  }
}

} // namespace
