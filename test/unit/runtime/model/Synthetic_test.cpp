//===- Synthetic_test.cpp - Synthetic weights made in memory --------------===//
//
// `--weights synthetic:SEED` is the model k3-mkmodel writes, without the
// files: every tensor of every tiny preset equals, byte for byte, the one
// `k3-mkmodel --real-dtypes --seed SEED` writes (whatever the thread count,
// and again after the store let the bytes go); a decode over it gives the
// same tokens and logits as over the files; a malformed seed is refused,
// naming the argument. The tensors a backend may draw in its own memory
// (TensorStore::deferringDrawn, kernels/synthetic) are, drawn by the CPU
// implementation of that kernel, the made bytes again. (On the GPU,
// decode_cuda_test decodes over both, and synthetic_cuda_test compares the
// kernel with its CPU implementation.)
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Synthetic.h"

#include "kernels/synthetic/SyntheticCpu.h"
#include "runtime/exec/Session.h"
#include "runtime/model/Presets.h"
#include "tools/k3-mkmodel/ModelMaker.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace k3;

namespace {

ModelConfig preset(const std::string &name) {
  Expected<ModelConfig> c = presetConfig(name);
  EXPECT_TRUE(c) << c.message();
  return *c;
}

/// Every tensor of `made` equals the one of the same name in `files`, and
/// both hold the same names.
void expectSameTensors(const TensorStore &made, const TensorStore &files,
                       const std::string &what) {
  ASSERT_EQ(made.size(), files.size()) << what;
  for (const TensorView *f : files.all()) {
    const TensorView *m = made.find(f->name);
    ASSERT_NE(m, nullptr) << what << ": " << f->name;
    EXPECT_EQ(m->dtype, f->dtype) << what << ": " << f->name;
    EXPECT_EQ(m->shape, f->shape) << what << ": " << f->name;
    ASSERT_EQ(m->nbytes, f->nbytes) << what << ": " << f->name;
    EXPECT_EQ(std::memcmp(m->data, f->data, f->nbytes), 0)
        << what << ": " << f->name << " differs";
  }
}

} // namespace

TEST(SyntheticWeights, EqualTheMadeFilesByteForByte) {
  for (const char *name : {"tiny", "tiny-linear", "tiny-odd"}) {
    const ModelConfig c = preset(name);
    test::TempDir dir;
    ASSERT_TRUE(makeModel(c, 7, dir.path(), {}, 0, Structure::Planted, 2,
                          StoredDtypes::Published));
    Expected<TensorStore> files = TensorStore::open(dir.path());
    ASSERT_TRUE(files) << files.message();
    for (int threads : {1, 3}) {
      Expected<TensorStore> made =
          openSyntheticWeights(c, "synthetic:7", threads);
      ASSERT_TRUE(made) << made.message();
      expectSameTensors(*made, *files,
                        std::string(name) + ", " + std::to_string(threads) +
                            " threads");
      // Let go and made again: the same bytes.
      made->releaseMade();
      expectSameTensors(*made, *files, std::string(name) + ", made again");
    }
  }
}

TEST(SyntheticWeights, SeedsDiffer) {
  const ModelConfig c = preset("tiny");
  Expected<TensorStore> a = openSyntheticWeights(c, "synthetic:1");
  Expected<TensorStore> b = openSyntheticWeights(c, "synthetic:2");
  ASSERT_TRUE(a && b);
  std::string embed;
  for (const TensorSpec &s : expectedTensorSpecs(c))
    if (s.name.find("embed_tokens") != std::string::npos)
      embed = s.name;
  const TensorView *x = a->find(embed);
  const TensorView *y = b->find(embed);
  ASSERT_TRUE(x && y);
  ASSERT_EQ(x->nbytes, y->nbytes);
  EXPECT_NE(std::memcmp(x->data, y->data, x->nbytes), 0);
  EXPECT_EQ(a->find("no.such.tensor"), nullptr);
}

TEST(SyntheticWeights, MalformedSeedsAreRefused) {
  const ModelConfig c = preset("tiny");
  for (const char *bad :
       {"synthetic:", "synthetic:-1", "synthetic:12x", "synthetic: 3",
        "synthetic:99999999999999999999999", "synthetic:0x10"})
    EXPECT_ERROR_CONTAINS(openSyntheticWeights(c, bad),
                          std::string("--weights '") + bad +
                              "': synthetic weights are named synthetic:SEED");
  EXPECT_TRUE(isSyntheticWeights("synthetic:3"));
  EXPECT_FALSE(isSyntheticWeights("/tmp/synthetic:3"));
}

TEST(SyntheticWeights, DecodeEqualsTheFiles) {
  K3C_SKIP_WITHOUT_COMPILER();
  const ModelConfig c = preset("tiny");
  test::TempDir dir;
  ASSERT_TRUE(makeModel(c, 5, dir.path(), {}, 0, Structure::Planted, 0,
                        StoredDtypes::Published));
  Expected<PlanDoc> plan = test::compiledPlan(c, "default", 64);
  ASSERT_TRUE(plan) << plan.message();
  const std::vector<int64_t> prompt = {3, 1, 4, 1, 5};
  std::vector<std::vector<int64_t>> tokens;
  std::vector<std::vector<float>> logits;
  for (const std::string &weights : {dir.path(), std::string("synthetic:5")}) {
    Expected<std::unique_ptr<Session>> s = Session::open(*plan, weights);
    ASSERT_TRUE(s) << s.message();
    auto got = (*s)->generate(prompt, 12, /*keepLogits=*/true);
    ASSERT_TRUE(got) << got.message();
    tokens.push_back(got->tokens);
    logits.push_back(got->logits);
  }
  EXPECT_EQ(tokens[0], tokens[1]);
  EXPECT_EQ(logits[0], logits[1]);
  // Another seed is another model.
  Expected<std::unique_ptr<Session>> other =
      Session::open(*plan, "synthetic:6");
  ASSERT_TRUE(other) << other.message();
  auto got = (*other)->generate(prompt, 12, true);
  ASSERT_TRUE(got) << got.message();
  EXPECT_NE(got->logits, logits[0]);
}

TEST(SyntheticWeights, PiecesOfATensorEqualTheWhole) {
  const ModelConfig c = preset("tiny");
  ASSERT_TRUE(c.expertsMxfp4);
  const SyntheticWeights w(c, 3, Structure::Planted, StoredDtypes::Published);
  SyntheticScratch scratch;
  int mxfp4 = 0, dense = 0;
  for (size_t i = 0; i < w.specs().size(); ++i) {
    const TensorSpec &s = w.specs()[i];
    if (w.isMxfp4Packed(i)) {
      // Rows in uneven runs, against the whole matrix.
      const int64_t rows = s.shape[0];
      const size_t packed = *tensorByteSize(s.dtype, s.shape);
      const TensorSpec &sc = w.specs()[i + 1];
      const size_t scale = *tensorByteSize(sc.dtype, sc.shape);
      std::vector<uint8_t> p1(packed), s1(scale), p2(packed, 0xAB),
          s2(scale, 0xAB);
      w.generateMxfp4(i, 0, rows, p1.data(), s1.data(), scratch);
      for (int64_t r = 0; r < rows;) {
        const int64_t n = std::min<int64_t>(rows - r, 1 + r % 5);
        w.generateMxfp4(i, r, r + n, p2.data(), s2.data(), scratch);
        r += n;
      }
      EXPECT_EQ(p1, p2) << s.name;
      EXPECT_EQ(s1, s2) << sc.name;
      ++mxfp4;
    } else if (s.dtype == DType::BF16 && s.shape.size() == 2 && dense < 8) {
      const int64_t n = s.shape[0] * s.shape[1];
      std::vector<uint8_t> a(n * 2), b(n * 2, 0xAB);
      w.generateDense(i, 0, n, a.data(), scratch);
      const int64_t cut = n / 3 + 1;
      w.generateDense(i, 0, cut, b.data(), scratch);
      w.generateDense(i, cut, n, b.data() + cut * 2, scratch);
      EXPECT_EQ(a, b) << s.name;
      ++dense;
    }
  }
  EXPECT_GT(mxfp4, 0);
  EXPECT_GT(dense, 0);
}

TEST(SyntheticWeights, DrawnTensorsAsTheMadeBytes) {
  for (const char *name : {"tiny", "tiny-linear", "tiny-odd"}) {
    const ModelConfig c = preset(name);
    Expected<TensorStore> made = openSyntheticWeights(c, "synthetic:11");
    ASSERT_TRUE(made) << made.message();
    const TensorStore deferring = made->deferringDrawn();
    EXPECT_TRUE(deferring.defersDrawn());
    EXPECT_FALSE(made->defersDrawn());
    uint64_t drawnBytes = 0, allBytes = 0;
    bool expertDrawn = false, plantedDrawn = false;
    for (const TensorSpec &s : expectedTensorSpecs(c)) {
      const TensorView *d = deferring.find(s.name);
      const TensorView *m = made->find(s.name);
      ASSERT_NE(d, nullptr) << name << ": " << s.name;
      ASSERT_NE(m, nullptr) << name << ": " << s.name;
      EXPECT_EQ(d->dtype, m->dtype) << s.name;
      EXPECT_EQ(d->shape, m->shape) << s.name;
      ASSERT_EQ(d->nbytes, m->nbytes) << s.name;
      allBytes += m->nbytes;
      std::optional<std::pair<DrawnTensor, uint64_t>> at =
          deferring.drawnAt(d->data);
      if (!at) {
        // Made as before (the deferring store shares the made tensors).
        EXPECT_EQ(std::memcmp(d->data, m->data, m->nbytes), 0) << s.name;
        EXPECT_FALSE(made->drawnAt(m->data)) << s.name;
        continue;
      }
      ASSERT_EQ(d->dtype, DType::BF16) << s.name;
      EXPECT_EQ(at->second, 0u) << s.name;
      EXPECT_EQ(at->first.bytes, m->nbytes) << s.name;
      EXPECT_NE(d->data, m->data) << s.name;
      drawnBytes += m->nbytes;
      expertDrawn |= s.name.find(".experts.") != std::string::npos;
      plantedDrawn |= s.name.find("embed_tokens") != std::string::npos ||
                      s.name.find("lm_head") != std::string::npos ||
                      s.name.find(".gate.weight") != std::string::npos;
      // The whole tensor, then a piece from an odd value on, poisoned
      // first: the made bits.
      const int64_t n = static_cast<int64_t>(m->nbytes / 2);
      std::vector<uint16_t> got(static_cast<size_t>(n), 0x7fc1);
      SyntheticNormalParams p;
      p.out = got.data();
      p.count = n;
      p.stream = at->first.stream;
      p.scale = at->first.scale;
      syntheticNormalBf16Cpu(p);
      EXPECT_EQ(std::memcmp(got.data(), m->data, m->nbytes), 0)
          << name << ": " << s.name << " drawn differs from the made bytes";
      const int64_t from = n / 3 + 1;
      std::optional<std::pair<DrawnTensor, uint64_t>> piece =
          deferring.drawnAt(d->data + 2 * from);
      ASSERT_TRUE(piece) << s.name;
      EXPECT_EQ(piece->second, static_cast<uint64_t>(2 * from)) << s.name;
      std::vector<uint16_t> part(static_cast<size_t>(n - from), 0x7fc1);
      p.out = part.data();
      p.count = n - from;
      p.first = static_cast<int64_t>(piece->second / 2);
      syntheticNormalBf16Cpu(p);
      EXPECT_EQ(std::memcmp(part.data(), m->data + 2 * from, 2 * (n - from)),
                0)
          << s.name << " from value " << from;
      made->releaseMade();
    }
    // Nearly all of a model's bytes; the planted tensors never.
    EXPECT_GT(drawnBytes, allBytes / 2) << name;
    EXPECT_EQ(expertDrawn, !c.expertsMxfp4) << name;
    EXPECT_FALSE(plantedDrawn) << name;
    // Addresses outside the drawn views map to nothing.
    int local = 0;
    EXPECT_FALSE(deferring.drawnAt(&local));
    EXPECT_FALSE(deferring.drawnAt(nullptr));
  }
}

TEST(SyntheticWeights, FilesAreNeverDeferred) {
  const ModelConfig c = preset("tiny-linear");
  test::TempDir dir;
  ASSERT_TRUE(makeModel(c, 2, dir.path(), {}, 0, Structure::Planted, 0,
                        StoredDtypes::Published));
  Expected<TensorStore> files = TensorStore::open(dir.path());
  ASSERT_TRUE(files) << files.message();
  const TensorStore deferring = files->deferringDrawn();
  EXPECT_FALSE(deferring.defersDrawn());
  for (const TensorView *t : files->all()) {
    EXPECT_EQ(deferring.find(t->name), t) << t->name;
    EXPECT_FALSE(deferring.drawnAt(t->data)) << t->name;
  }
}
