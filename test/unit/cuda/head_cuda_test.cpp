//===- head_cuda_test.cpp - k3_argmax against argmaxCpu -------------------===//
//
// The whole K3 vocabulary (163840 fp32 logits) with planted ties (the lowest
// index must win wherever the tied entries fall), NaN logits (never chosen;
// all NaN gives 0), -inf, odd sizes, a misaligned logits pointer, several
// blocks and other block sizes. The answer is an index: exact equality.
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

} // namespace
