//===- Synthetic_test.cpp - Synthetic weights made in memory --------------===//
//
// `--weights synthetic:SEED` is the model k3-mkmodel writes, without the
// files: every tensor of every tiny preset equals, byte for byte, the one
// `k3-mkmodel --real-dtypes --seed SEED` writes (whatever the thread count,
// and again after the store let the bytes go); a decode over it gives the
// same tokens and logits as over the files; a malformed seed is refused,
// naming the argument. (On the GPU, decode_cuda_test decodes over both.)
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Synthetic.h"

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
