//===- Session_test.cpp - Plans run through the CPU backend ---------------===//
//
// The hand-built decode plan (PlanTestUtil.h) must reproduce CpuDecoder
// exactly: same tokens and bit-identical logits, for the fused, fine and finest
// launch sequences, over models whose KDA conv filters and o_norm are stored
// BF16 and F32 (the published K3's dtypes; a plan with "vector" weights binds
// both). Also the request and binding errors, and the options of generate()
// (stop ids, sampling, a prefix).
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/CpuDecoder.h"
#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/model/Presets.h"
#include "runtime/exec/Session.h"

#include "PlanTestUtil.h"
#include "TestUtil.h"

#include <gtest/gtest.h>

#include "kernels/common/BF16.h"

#include <algorithm>
#include <cstring>
#include <fstream>

namespace k3 {
namespace {

constexpr int64_t kMaxSeq = 64;

/// One made model per preset and stored dtypes, shared by the tests of this
/// file.
class ModelDir {
public:
  ModelDir(const std::string &preset, StoredDtypes dtypes) {
    Expected<ModelConfig> c = presetConfig(preset);
    EXPECT_TRUE(c.hasValue());
    config = *c;
    Status s = makeModel(config, 7, dir.path(), {}, 0, Structure::Planted, 0,
                         dtypes);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
  test::TempDir dir;
  ModelConfig config;
};

ModelDir &model(const std::string &preset,
                StoredDtypes dtypes = StoredDtypes::Simple) {
  static std::map<std::string, std::unique_ptr<ModelDir>> models;
  auto &m = models[preset + (dtypes == StoredDtypes::Published ? "+" : "")];
  if (!m)
    m = std::make_unique<ModelDir>(preset, dtypes);
  return *m;
}

using test::PlanStyle;

std::unique_ptr<Session>
openSession(const std::string &preset, PlanStyle style = PlanStyle::Fused,
            StoredDtypes dtypes = StoredDtypes::Simple,
            const char *smallFormat = "bf16") {
  ModelDir &m = model(preset, dtypes);
  Expected<std::unique_ptr<Session>> s = Session::open(
      test::buildDecodePlan(m.config, kMaxSeq, style, smallFormat),
      m.dir.path());
  EXPECT_TRUE(s.hasValue()) << s.message();
  return s ? s.take() : nullptr;
}

struct Case {
  const char *preset;
  PlanStyle style;
  StoredDtypes dtypes = StoredDtypes::Simple;
  const char *smallFormat = "bf16"; ///< plan format of conv / o_norm
};

class SessionMatchesCpuDecoder : public ::testing::TestWithParam<Case> {};

TEST_P(SessionMatchesCpuDecoder, SixteenTokensBitIdentical) {
  const Case c = GetParam();
  ModelDir &m = model(c.preset, c.dtypes);
  Expected<TensorStore> store = TensorStore::open(m.dir.path());
  ASSERT_TRUE(store.hasValue()) << store.message();
  Expected<ModelWeights> w = bindModelWeights(m.config, *store);
  ASSERT_TRUE(w.hasValue()) << w.message();
  Expected<CpuDecoder> dec = CpuDecoder::create(m.config, *w, kMaxSeq);
  ASSERT_TRUE(dec.hasValue()) << dec.message();
  const std::vector<int64_t> prompt = {1, 17, 300, 5};
  std::vector<std::vector<float>> refLogits;
  Expected<std::vector<int64_t>> ref = dec->greedy(prompt, 16, &refLogits);
  ASSERT_TRUE(ref.hasValue()) << ref.message();

  std::unique_ptr<Session> s =
      openSession(c.preset, c.style, c.dtypes, c.smallFormat);
  ASSERT_NE(s, nullptr);
  std::vector<int64_t> streamed;
  for (int run = 0; run < 2; ++run) { // the second run checks the reset
    streamed.clear();
    Expected<GenerateResult> r =
        s->generate(prompt, 16, true, [&](int64_t i, int64_t t) {
          EXPECT_EQ(i, static_cast<int64_t>(streamed.size()));
          streamed.push_back(t);
        });
    ASSERT_TRUE(r.hasValue()) << r.message();
    EXPECT_EQ(r->tokens, *ref);
    EXPECT_EQ(streamed, *ref);
    ASSERT_EQ(r->logits.size(), 16u * m.config.vocabSize);
    for (int64_t row = 0; row < 16; ++row)
      EXPECT_EQ(std::memcmp(r->logits.data() + row * m.config.vocabSize,
                            refLogits[row].data(),
                            sizeof(float) * m.config.vocabSize),
                0)
          << "logits row " << row << " differ";
    EXPECT_EQ(r->promptTokens, 4);
    EXPECT_EQ(r->decodeSteps, 15);
  }
}

std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  static const char *const kStyles[] = {"_fused", "_fine", "_finest"};
  std::string n = std::string(info.param.preset) +
                  kStyles[static_cast<int>(info.param.style)] +
                  (info.param.dtypes == StoredDtypes::Published ? "_published"
                                                                : "") +
                  (std::string(info.param.smallFormat) == "vector" ? "_vector"
                                                                   : "");
  for (char &ch : n)
    if (ch == '-')
      ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(
    Presets, SessionMatchesCpuDecoder,
    ::testing::Values(Case{"tiny", PlanStyle::Fused},
                      Case{"tiny", PlanStyle::Fine},
                      Case{"tiny", PlanStyle::Finest},
                      Case{"tiny-linear", PlanStyle::Fused},
                      Case{"tiny-linear", PlanStyle::Fine},
                      Case{"tiny-linear", PlanStyle::Finest},
                      // One "vector" plan binds BF16 and F32 conv / o_norm.
                      Case{"tiny", PlanStyle::Fused, StoredDtypes::Simple,
                           "vector"},
                      Case{"tiny", PlanStyle::Fused, StoredDtypes::Published,
                           "vector"},
                      Case{"tiny", PlanStyle::Fine, StoredDtypes::Published,
                           "vector"},
                      Case{"tiny", PlanStyle::Finest, StoredDtypes::Published,
                           "vector"},
                      // Kimi-Linear's BF16 router bias (an f32 weight).
                      Case{"tiny-linear", PlanStyle::Fused,
                           StoredDtypes::Published, "vector"}),
    caseName);

TEST(SessionTest, StoredDtypesOfSmallWeights) {
  // The error of the issue: a plan that fixes the conv filters to bf16
  // refuses the published K3's F32 ones, naming the tensor; the "vector"
  // plan binds them (SessionMatchesCpuDecoder), and F16 is refused either
  // way.
  ModelDir &m = model("tiny", StoredDtypes::Published);
  const std::string conv =
      "language_model.model.layers.0.self_attn.q_conv1d.weight";
  EXPECT_ERROR_CONTAINS(
      Session::open(test::buildDecodePlan(m.config, kMaxSeq), m.dir.path()),
      "weight '" + conv + "': the plan expects BF16 [256, 1, 4], the "
                          "checkpoint has F32 [256, 1, 4]");
  // The same with an F16 conv filter, on a copy of the checkpoint.
  Expected<TensorStore> store = TensorStore::open(m.dir.path());
  ASSERT_TRUE(store.hasValue()) << store.message();
  const std::string qProj =
      "language_model.model.layers.0.self_attn.q_proj.weight";
  auto rewritten = [&](const std::string &name, DType dtype,
                       test::TempDir &dir) {
    std::vector<TensorData> tensors;
    for (const TensorView *v : store->all()) {
      std::vector<uint8_t> bytes(v->data, v->data + v->nbytes);
      DType t = v->dtype;
      std::vector<int64_t> shape = v->shape;
      if (v->name == name && dtype == DType::F16) {
        t = DType::F16; // same bytes per element as BF16, half of F32
        bytes.resize(v->nbytes / dtypeSize(v->dtype) * 2);
      } else if (v->name == name && dtype == DType::F32) {
        t = DType::F32;
        std::vector<uint8_t> wide(v->nbytes * 2);
        for (size_t i = 0; i < v->nbytes / 2; ++i) {
          const float f = bf16ToFloat(v->as<uint16_t>()[i]);
          std::memcpy(wide.data() + 4 * i, &f, 4);
        }
        bytes = std::move(wide);
      }
      tensors.push_back({v->name, t, shape, std::move(bytes)});
    }
    ASSERT_TRUE(writeSafetensors(dir.file("model.safetensors"), tensors));
    std::ifstream in(m.dir.file("config.json"));
    std::ofstream out(dir.file("config.json"));
    out << in.rdbuf();
  };
  {
    test::TempDir f16;
    ASSERT_NO_FATAL_FAILURE(rewritten(conv, DType::F16, f16));
    EXPECT_ERROR_CONTAINS(
        Session::open(test::buildDecodePlan(m.config, kMaxSeq,
                                            PlanStyle::Fused, "vector"),
                      f16.path()),
        "weight '" + conv + "': the plan expects F32 or BF16 [256, 1, 4], "
                            "the checkpoint has F16 [256, 1, 4]");
  }
  {
    // Only the small weights may be F32: an F32 projection is refused.
    test::TempDir f32;
    ASSERT_NO_FATAL_FAILURE(rewritten(qProj, DType::F32, f32));
    EXPECT_ERROR_CONTAINS(
        Session::open(test::buildDecodePlan(m.config, kMaxSeq,
                                            PlanStyle::Fused, "vector"),
                      f32.path()),
        "weight '" + qProj + "': the plan expects BF16 [256, 256], the "
                             "checkpoint has F32 [256, 256]");
  }
}

TEST(SessionTest, RequestErrors) {
  std::unique_ptr<Session> s = openSession("tiny");
  ASSERT_NE(s, nullptr);
  const int64_t V = s->plan().config.vocabSize;
  EXPECT_ERROR_CONTAINS(s->generate({1, V}, 4), "id 1024");
  EXPECT_ERROR_CONTAINS(s->generate({1, V}, 4), "[0, 1024)");
  EXPECT_ERROR_CONTAINS(s->generate({-3}, 4), "id -3");
  EXPECT_ERROR_CONTAINS(s->generate({}, 4), "prompt is empty");
  EXPECT_ERROR_CONTAINS(s->generate({1}, 0), "max_new must be at least 1");
  std::vector<int64_t> longPrompt(60, 1);
  EXPECT_ERROR_CONTAINS(s->generate(longPrompt, 5), "(60 tokens)");
  EXPECT_ERROR_CONTAINS(s->generate(longPrompt, 5), "max_new (5)");
  EXPECT_ERROR_CONTAINS(s->generate(longPrompt, 5), "max_seq of 64");
  // Exactly max_seq is fine.
  EXPECT_TRUE(s->generate(longPrompt, 4).hasValue());
}

TEST(SessionTest, GenerateOptionsStopIdsAndSampling) {
  std::unique_ptr<Session> s = openSession("tiny");
  ASSERT_NE(s, nullptr);
  const int64_t V = s->plan().config.vocabSize;
  const std::vector<int64_t> prompt = {1, 17, 300};
  Expected<GenerateResult> full = s->generate(prompt, 8, true);
  ASSERT_TRUE(full.hasValue()) << full.message();
  ASSERT_EQ(full->tokens.size(), 8u);
  EXPECT_FALSE(full->stopped);

  // A stop id ends the sequence with it; its logits rows are the first ones
  // of the full decode.
  GenerateOptions opt;
  opt.maxNew = 8;
  opt.keepLogits = true;
  opt.stopIds = {full->tokens[3], V - 1};
  std::vector<int64_t> streamed;
  opt.onToken = [&](int64_t, int64_t t) { streamed.push_back(t); };
  Expected<GenerateResult> r = s->generate(prompt, opt);
  ASSERT_TRUE(r.hasValue()) << r.message();
  const std::vector<int64_t> four(full->tokens.begin(),
                                  full->tokens.begin() + 4);
  EXPECT_EQ(r->tokens, four);
  EXPECT_EQ(streamed, four);
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->decodeSteps, 3);
  ASSERT_EQ(r->logits.size(), 4u * V);
  EXPECT_TRUE(std::equal(r->logits.begin(), r->logits.end(),
                         full->logits.begin()));
  // On the first token: no decode step at all.
  opt.stopIds = {full->tokens[0]};
  r = s->generate(prompt, opt);
  ASSERT_TRUE(r.hasValue()) << r.message();
  EXPECT_EQ(r->tokens.size(), 1u);
  EXPECT_EQ(r->decodeSteps, 0);
  // An id it never emits: all of max_new.
  opt.stopIds = {V - 1};
  opt.onToken = {};
  r = s->generate(prompt, opt);
  ASSERT_TRUE(r.hasValue()) << r.message();
  EXPECT_EQ(r->tokens, full->tokens);
  EXPECT_FALSE(r->stopped);

  // Sampling: T -> 0 is greedy; one seed is one sequence; bad parameters
  // are refused before anything runs.
  opt.stopIds.clear();
  opt.sampling.temperature = 1e-6;
  r = s->generate(prompt, opt);
  ASSERT_TRUE(r.hasValue()) << r.message();
  EXPECT_EQ(r->tokens, full->tokens);
  opt.sampling.temperature = 100; // flat enough to leave the planted path
  opt.sampling.seed = 5;
  Expected<GenerateResult> a = s->generate(prompt, opt);
  Expected<GenerateResult> b = s->generate(prompt, opt);
  ASSERT_TRUE(a.hasValue() && b.hasValue());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_NE(a->tokens, full->tokens);
  opt.sampling.topP = 0;
  EXPECT_ERROR_CONTAINS(s->generate(prompt, opt), "top-p must be in (0, 1]");
  opt.sampling.topP = 1;
  opt.sampling.temperature = -1;
  EXPECT_ERROR_CONTAINS(s->generate(prompt, opt), "temperature");

  // A snapshot through the options: its tokens are restored, not fed.
  Expected<PrefixSnapshot> snap = s->snapshotPrefix({1, 17});
  ASSERT_TRUE(snap.hasValue()) << snap.message();
  GenerateOptions withPrefix;
  withPrefix.maxNew = 8;
  withPrefix.prefix = &*snap;
  r = s->generate(prompt, withPrefix);
  ASSERT_TRUE(r.hasValue()) << r.message();
  EXPECT_EQ(r->tokens, full->tokens);
  EXPECT_EQ(r->restoredTokens, 2);
  EXPECT_EQ(r->promptTokens, 3);
}

TEST(SessionTest, ConfigMismatch) {
  ModelDir &m = model("tiny");
  PlanDoc plan = test::buildDecodePlan(m.config, kMaxSeq);
  plan.config.rmsNormEps = 1e-6f;
  EXPECT_ERROR_CONTAINS(Session::open(plan, m.dir.path()), "rms_norm_eps");
  EXPECT_ERROR_CONTAINS(Session::open(plan, m.dir.path()), "different model");
  plan = test::buildDecodePlan(m.config, kMaxSeq);
  plan.config.vocabSize = 2048;
  EXPECT_ERROR_CONTAINS(Session::open(plan, m.dir.path()), "vocab_size");
}

TEST(SessionTest, BindErrors) {
  ModelDir &m = model("tiny");
  PlanDoc plan = test::buildDecodePlan(m.config, kMaxSeq);
  plan.weights[3].name = "model.nothing_here.weight";
  EXPECT_ERROR_CONTAINS(Session::open(plan, m.dir.path()),
                        "weight 'model.nothing_here.weight' is missing");

  plan = test::buildDecodePlan(m.config, kMaxSeq);
  plan.weights[0].shape = {1024, 128};
  EXPECT_ERROR_CONTAINS(Session::open(plan, m.dir.path()), "[1024, 128]");

  // A launch that would write past its buffer.
  plan = test::buildDecodePlan(m.config, kMaxSeq);
  for (PlanLaunch &l : plan.launches)
    if (l.kernel == "add")
      l.arg("n", PlanArg::integer(m.config.hiddenSize + 1));
  EXPECT_ERROR_CONTAINS(Session::open(plan, m.dir.path()),
                        "'a' needs 257 bf16 elements");
  // A weight used as a larger matrix than it is.
  plan = test::buildDecodePlan(m.config, kMaxSeq);
  plan.launches.back().arg("n", PlanArg::integer(m.config.vocabSize + 1));
  EXPECT_ERROR_CONTAINS(Session::open(plan, m.dir.path()),
                        "is used as [1025, 256]");

  // A KV cache too short for the plan's max_seq.
  plan = test::buildDecodePlan(m.config, kMaxSeq);
  for (PlanState &st : plan.states)
    if (st.kind == "mla_cache") {
      st.shape[0] = 8;
      st.bytes = 8 * st.shape[1] * 2;
    }
  EXPECT_ERROR_CONTAINS(Session::open(plan, m.dir.path()), "'cache' needs");

  // More experts used than the table holds.
  plan = test::buildDecodePlan(m.config, kMaxSeq);
  for (PlanLaunch &l : plan.launches)
    if (l.kernel == "moe_experts")
      l.arg("numExperts", PlanArg::integer(m.config.numExperts * 2));
  EXPECT_ERROR_CONTAINS(Session::open(plan, m.dir.path()), "experts");

  // A required pointer left out.
  plan = test::buildDecodePlan(m.config, kMaxSeq);
  for (PlanLaunch &l : plan.launches)
    if (l.kernel == "router")
      l.args.erase(l.args.begin());
  EXPECT_ERROR_CONTAINS(Session::open(plan, m.dir.path()),
                        "'h' is required but not given");
}

} // namespace
} // namespace k3
