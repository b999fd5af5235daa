//===- CompileTestUtil.h - Compile, run and compare plans in tests -*- C++
//-*-===//
//
// What the compiled-plan tests share: compile a config in process the way
// k3c does (optionally with a test mutant), make a model directory once per
// (preset, seed), run a plan on the CPU backend, and decode the same prompt
// with the float64 reference.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_UNIT_COMPILER_COMPILETESTUTIL_H
#define K3C_TEST_UNIT_COMPILER_COMPILETESTUTIL_H

#include "codegen/Codegen.h"
#include "import/Importer.h"
#include "passes/Passes.h"

#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/plan/Plan.h"
#include "runtime/model/Presets.h"
#include "runtime/exec/Session.h"
#include "test/reference/Compare.h"
#include "test/reference/RefModel.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

namespace k3test {

/// Compiles `config` to plan text with `strategy` and, unless `mutant` is
/// empty, the k3-inject-mutant kind `mutant` (skip-layer removes `layer`);
/// with `ranks` > 1, rank `rank`'s plan of a tensor-parallel split
/// (k3-partition-ranks, as k3c --tp --rank). "" on failure.
inline std::string compilePlan(const ::k3::ModelConfig &config,
                               mlir::k3::FusionStrategy strategy,
                               int64_t maxSeq, const std::string &mutant = "",
                               int64_t layer = 1, int64_t ranks = 1,
                               int64_t rank = 0) {
  using namespace mlir;
  DialectRegistry registry;
  registry.insert<mlir::k3::K3Dialect, func::FuncDialect>();
  mlir::k3::registerCodegen(registry);
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module = mlir::k3::importModel(ctx, config, maxSeq);
  PassManager pm(&ctx);
  if (ranks > 1) {
    mlir::k3::K3PartitionRanksOptions split;
    split.ranks = ranks;
    split.rank = rank;
    pm.addPass(mlir::k3::createK3PartitionRanks(split));
  }
  if (mutant.empty())
    mlir::k3::buildK3FusionPipeline(pm, strategy);
  else if (failed(mlir::k3::buildK3MutantPipeline(pm, strategy, mutant, layer)))
    return "";
  pm.addPass(mlir::k3::createConvertK3ToLaunch());
  pm.addPass(mlir::k3::createK3PlanBuffers());
  if (failed(pm.run(*module)))
    return "";
  std::string plan;
  if (failed(mlir::k3::emitPlan(
          *module, mlir::k3::stringifyFusionStrategy(strategy), plan)))
    return "";
  return plan;
}

/// A made model directory per (preset, seed, structure, stored dtypes),
/// shared by a test binary's tests and removed when it exits.
inline const std::string &
madeModelDir(const std::string &preset, uint64_t seed,
             ::k3::Structure structure = ::k3::Structure::Planted,
             ::k3::StoredDtypes dtypes = ::k3::StoredDtypes::Simple) {
  struct Dirs {
    std::map<std::string, std::string> byKey;
    ~Dirs() {
      std::error_code ec;
      for (auto &kv : byKey)
        std::filesystem::remove_all(kv.second, ec);
    }
  };
  static Dirs dirs;
  std::string key =
      preset + "-" + std::to_string(seed) +
      (structure == ::k3::Structure::Random ? "-random" : "") +
      (dtypes == ::k3::StoredDtypes::Published ? "-published" : "");
  auto it = dirs.byKey.find(key);
  if (it != dirs.byKey.end())
    return it->second;
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("k3c-test-" + key + "-" + std::to_string(::getpid())))
                        .string();
  ::k3::Expected<::k3::ModelConfig> c = ::k3::presetConfig(preset);
  EXPECT_TRUE(c.hasValue());
  ::k3::Status st = ::k3::makeModel(*c, seed, dir, {}, 0, structure, 0, dtypes);
  EXPECT_TRUE(st.isOk()) << (st.isOk() ? "" : st.message());
  return dirs.byKey[key] = dir;
}

/// A greedy decode: tokens and the logits rows that chose them.
struct Decode {
  std::vector<int64_t> tokens;
  ::k3::ref::LogitRows logits;
};

/// Runs plan text on `backend` over the weights in `dir`.
inline void runPlan(const std::string &text, const std::string &dir,
                    const std::vector<int64_t> &prompt, int64_t maxNew,
                    Decode &out,
                    ::k3::BackendKind backend = ::k3::BackendKind::Cpu,
                    bool cudaGraph = true) {
  ::k3::Expected<::k3::PlanDoc> plan = ::k3::parsePlan(text);
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  ::k3::Expected<std::unique_ptr<::k3::Session>> session =
      ::k3::Session::open(plan.take(), dir, backend, cudaGraph);
  ASSERT_TRUE(session.hasValue()) << session.message();
  ::k3::Expected<::k3::GenerateResult> got =
      (*session)->generate(prompt, maxNew, /*keepLogits=*/true);
  ASSERT_TRUE(got.hasValue()) << got.message();
  out.tokens = got->tokens;
  out.logits = ::k3::ref::logitRowsFromFlat(got->logits, got->vocab);
}

/// The float64 reference's greedy decode of the model in `dir`.
inline void referenceDecode(const ::k3::ModelConfig &config,
                            const std::string &dir,
                            const std::vector<int64_t> &prompt, int64_t maxNew,
                            ::k3::ref::RefDecode &out) {
  ::k3::Expected<::k3::TensorStore> store = ::k3::TensorStore::open(dir);
  ASSERT_TRUE(store.hasValue()) << store.message();
  ::k3::Expected<::k3::ModelWeights> weights =
      ::k3::bindModelWeights(config, *store);
  ASSERT_TRUE(weights.hasValue()) << weights.message();
  ::k3::Expected<::k3::ref::RefDecode> r =
      ::k3::ref::referenceGreedy(config, *weights, prompt, maxNew);
  ASSERT_TRUE(r.hasValue()) << r.message();
  out = r.take();
}

/// A gtest name for a (preset, strategy) parameter: "tiny_linear_default".
inline std::string
paramName(const ::testing::TestParamInfo<std::tuple<std::string, std::string>>
              &info) {
  std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
  for (char &c : n)
    if (c == '-')
      c = '_';
  return n;
}

} // namespace k3test

#endif // K3C_TEST_UNIT_COMPILER_COMPILETESTUTIL_H
