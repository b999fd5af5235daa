//===- teacher_forced_test.cpp - Every layer of every plan, step by step --===//
//
// Each fusion strategy's compiled plan, on the CPU backend, teacher-forced
// with the same tokens as the float64 reference: every layer's stream after
// its mixer and after its FFN, and the logits, within absolute bounds at
// every step (TeacherForced.h). On planted models and on plain random ones
// (where free-running greedy decodes part at the first near-tie), for tiny,
// tiny-linear and tiny-odd (every dimension and scalar distinct). And one
// plan over one seed stored two ways (StoredDtypes): the conv filters and
// o_norm rounded to BF16, and the same values F32 as the published K3
// stores them: different results, each following its own reference.
//
//===----------------------------------------------------------------------===//
#include "test/unit/compiler/CompileTestUtil.h"
#include "test/reference/TeacherForced.h"

#include "kernels/common/BF16.h"
#include "runtime/model/Tensors.h"

#include <cmath>
#include <cstring>
#include <iostream>

namespace {

constexpr int64_t kSteps = 24;

/// (preset, "planted" | "random", fusion strategy).
using Param = std::tuple<std::string, std::string, std::string>;
class TeacherForced : public ::testing::TestWithParam<Param> {};

TEST_P(TeacherForced, EveryLayerAndTheLogitsFollowTheReference) {
  auto [preset, structure, strategyName] = GetParam();
  mlir::k3::FusionStrategy strategy;
  ASSERT_TRUE(mlir::k3::parseFusionStrategy(strategyName, strategy));
  const std::string &dir = k3test::madeModelDir(
      preset, /*seed=*/3,
      structure == "random" ? ::k3::Structure::Random
                            : ::k3::Structure::Planted);
  ::k3::Expected<::k3::ModelConfig> config =
      ::k3::parseConfigFile(dir + "/config.json");
  ASSERT_TRUE(config.hasValue()) << config.message();
  std::string text = k3test::compilePlan(*config, strategy, kSteps);
  ASSERT_FALSE(text.empty()) << "compilation failed";
  ::k3::Expected<::k3::PlanDoc> plan = ::k3::parsePlan(text);
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  auto session = ::k3::Session::open(plan.take(), dir);
  ASSERT_TRUE(session.hasValue()) << session.message();

  std::vector<int64_t> tokens =
      k3test::forcedTokens(config->vocabSize, kSteps, /*seed=*/11);
  for (const k3test::ForcedBounds &bounds :
       {k3test::ForcedBounds(), k3test::ForcedBounds::endToEnd()}) {
    k3test::ForcedResult r;
    ASSERT_NO_FATAL_FAILURE(k3test::teacherForcedCompare(
        *config, dir, **session, tokens, bounds, r));
    std::cout << "[teacher-forced " << (bounds.layerLocal ? "layer" : "e2e")
              << "] " << preset << "/" << structure << "/" << strategyName
              << ": " << r.diagnostic;
    EXPECT_TRUE(r.ok) << r.diagnostic;
    EXPECT_EQ(r.pointsCompared, 2 * config->numLayers * kSteps);
  }
}

std::string name(const ::testing::TestParamInfo<Param> &info) {
  std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param) +
                  "_" + std::get<2>(info.param);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

INSTANTIATE_TEST_SUITE_P(
    Presets, TeacherForced,
    ::testing::Combine(::testing::Values("tiny", "tiny-linear", "tiny-odd"),
                       ::testing::Values("planted", "random"),
                       ::testing::Values("none", "default", "max")),
    name);

/// (preset, fusion strategy).
using DtypeParam = std::tuple<std::string, std::string>;
class StoredDtypesForced : public ::testing::TestWithParam<DtypeParam> {};

/// Every value of `f32` (F32) is not changed by bf16 rounding into `bf16`
/// (BF16), and some value is not a bf16 value: the Published model stores
/// the Simple model's values unrounded.
void expectRoundsTo(const ::k3::TensorView *f32, const ::k3::TensorView *bf16) {
  ASSERT_TRUE(f32 && bf16);
  ASSERT_EQ(f32->dtype, ::k3::DType::F32) << f32->name;
  ASSERT_EQ(bf16->dtype, ::k3::DType::BF16) << bf16->name;
  ASSERT_EQ(f32->numel(), bf16->numel());
  int64_t notBf16 = 0;
  for (int64_t i = 0; i < f32->numel(); ++i) {
    float v;
    uint16_t b;
    std::memcpy(&v, f32->data + 4 * i, 4);
    std::memcpy(&b, bf16->data + 2 * i, 2);
    ASSERT_EQ(::k3::floatToBf16(v), b) << f32->name << " [" << i << "]";
    notBf16 += ::k3::roundBf16(v) != v;
  }
  EXPECT_GT(notBf16, 0) << f32->name << ": every value is a bf16 value";
}

TEST_P(StoredDtypesForced, F32AndBf16SmallWeightsEachFollowTheirReference) {
  auto [preset, strategyName] = GetParam();
  mlir::k3::FusionStrategy strategy;
  ASSERT_TRUE(mlir::k3::parseFusionStrategy(strategyName, strategy));
  const std::string &simple = k3test::madeModelDir(
      preset, /*seed=*/3, ::k3::Structure::Random, ::k3::StoredDtypes::Simple);
  const std::string &published =
      k3test::madeModelDir(preset, /*seed=*/3, ::k3::Structure::Random,
                           ::k3::StoredDtypes::Published);
  ::k3::Expected<::k3::ModelConfig> config =
      ::k3::parseConfigFile(simple + "/config.json");
  ASSERT_TRUE(config.hasValue()) << config.message();
  const bool k3Form = config->modelType == "kimi_k3";

  // What each model stores.
  {
    auto a = ::k3::TensorStore::open(simple);
    auto b = ::k3::TensorStore::open(published);
    ASSERT_TRUE(a.hasValue() && b.hasValue());
    using ::k3::TensorId;
    if (k3Form) {
      for (TensorId id : {TensorId::KdaQConv, TensorId::KdaKConv,
                          TensorId::KdaVConv, TensorId::KdaONorm}) {
        const std::string n = ::k3::tensorName(*config, id, 0);
        ASSERT_NO_FATAL_FAILURE(expectRoundsTo(b->find(n), a->find(n)));
      }
    } else {
      const std::string bias =
          ::k3::tensorName(*config, TensorId::MoeGateBias, 1);
      ASSERT_NO_FATAL_FAILURE(expectRoundsTo(a->find(bias), b->find(bias)));
    }
  }

  // One plan binds both; each follows its own float64 reference.
  std::string text = k3test::compilePlan(*config, strategy, kSteps);
  ASSERT_FALSE(text.empty()) << "compilation failed";
  std::vector<int64_t> tokens =
      k3test::forcedTokens(config->vocabSize, kSteps, /*seed=*/11);
  std::vector<std::vector<::k3::ProbedStep>> runs;
  for (const std::string *dir : {&simple, &published}) {
    ::k3::Expected<::k3::PlanDoc> plan = ::k3::parsePlan(text);
    ASSERT_TRUE(plan.hasValue()) << plan.message();
    auto session = ::k3::Session::open(plan.take(), *dir);
    ASSERT_TRUE(session.hasValue()) << session.message();
    k3test::ForcedResult r;
    ASSERT_NO_FATAL_FAILURE(k3test::teacherForcedCompare(
        *config, *dir, **session, tokens, k3test::ForcedBounds(), r));
    const char *which = dir == &simple ? "bf16" : "published";
    std::cout << "[teacher-forced " << which << "] " << preset << "/"
              << strategyName << ": " << r.diagnostic;
    EXPECT_TRUE(r.ok) << which << ": " << r.diagnostic;
    EXPECT_EQ(r.pointsCompared, 2 * config->numLayers * kSteps);
    auto steps = (*session)->teacherForce(tokens);
    ASSERT_TRUE(steps.hasValue()) << steps.message();
    runs.push_back(steps.take());
  }
  // The F32 values are used as stored: the logits differ from the bf16
  // model's (the router bias of the kimi_linear form only ranks experts,
  // so its rounding need not show).
  double maxDiff = 0;
  for (size_t s = 0; s < runs[0].size(); ++s)
    for (size_t v = 0; v < runs[0][s].logits.size(); ++v)
      maxDiff = std::max(maxDiff, std::fabs(double(runs[0][s].logits[v]) -
                                            double(runs[1][s].logits[v])));
  std::cout << "[stored dtypes] " << preset << "/" << strategyName
            << ": max |logit(bf16) - logit(published)| " << maxDiff << "\n";
  if (k3Form) {
    EXPECT_GT(maxDiff, 0.0) << "the F32 conv / o_norm values were rounded";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Presets, StoredDtypesForced,
    ::testing::Combine(::testing::Values("tiny", "tiny-linear", "tiny-odd"),
                       ::testing::Values("none", "default", "max")),
    [](const ::testing::TestParamInfo<DtypeParam> &info) {
      std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

} // namespace
