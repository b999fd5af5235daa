//===- teacher_forced_test.cpp - Every layer of every plan, step by step --===//
//
// Each fusion strategy's compiled plan, on the CPU backend, teacher-forced
// with the same tokens as the float64 reference: every layer's stream after
// its mixer and after its FFN, and the logits, within absolute bounds at
// every step (TeacherForced.h). On planted models and on plain random ones
// (where free-running greedy decodes part at the first near-tie), for tiny,
// tiny-linear and tiny-odd (every dimension and scalar distinct).
//
//===----------------------------------------------------------------------===//
#include "test/unit/compiler/CompileTestUtil.h"
#include "test/reference/TeacherForced.h"

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

} // namespace
