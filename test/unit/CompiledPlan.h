//===- CompiledPlan.h - Decode plans compiled by the built k3c --*- C++ -*-===//
//
// The runtime-side tests that run a whole decode step take their plans from
// the compiler, never from a hand-written recipe: compiledPlan() writes the
// config.json, runs the built k3c on it (`--fusion`, `--max-seq`) and parses
// the plan it wrote, once per (config, strategy, max_seq) in a test binary.
// The test's CMake target names the k3c binary through K3C_TEST_K3C
// (k3c_use_compiled_plans in test/unit/CMakeLists.txt); a build without the
// compiler (K3C_ENABLE_COMPILER=OFF: make test-sanitize, the fuzz build) has
// none, and K3C_SKIP_WITHOUT_COMPILER() skips the test with that reason.
//
// The three strategies give the runtime every decode kernel but the
// fusion-only ones: `none` the finest launches (kda_conv x3, kda_l2norm x2,
// kda_gate, sigmoid, kda_step, kda_gated_norm, mul_sigmoid, gated_act),
// `default` linear_multi, kda_decode and mla_attend's gate, `max` also
// gated_mlp and attn_res's fused output norm.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_UNIT_RUNTIME_COMPILEDPLAN_H
#define K3C_TEST_UNIT_RUNTIME_COMPILEDPLAN_H

#include "runtime/model/Config.h"
#include "runtime/model/Presets.h"
#include "runtime/plan/Plan.h"

#include "test/unit/TestUtil.h"

#include <map>
#include <string>

namespace k3::test {

/// The fusion strategies of k3c, finest first.
inline const char *const kFusionStrategies[] = {"none", "default", "max"};

/// Whether this build has a k3c to compile plans with.
inline bool haveCompiler() {
#ifdef K3C_TEST_K3C
  return true;
#else
  return false;
#endif
}

/// k3c's plan for `config` with `fusion` (none | default | max),
/// `maxSeq` and `maxBatch` (k3c --max-batch); an error naming what failed
/// (no compiler, k3c's stderr, the parser's message).
inline Expected<PlanDoc> compiledPlan(const ModelConfig &config,
                                      const std::string &fusion, int64_t maxSeq,
                                      int64_t maxBatch = 1) {
#ifndef K3C_TEST_K3C
  (void)config, (void)fusion, (void)maxSeq, (void)maxBatch;
  return Status::error("this build has no k3c (K3C_ENABLE_COMPILER=OFF)");
#else
  const std::string json = writeConfigJson(config);
  static std::map<std::string, PlanDoc> cache;
  const std::string key = fusion + " " + std::to_string(maxSeq) + " " +
                          std::to_string(maxBatch) + " " + json;
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second;
  TempDir dir;
  writeFile(dir.file("config.json"), json);
  const std::string out = dir.file("model.plan");
  RunResult r = runCommand(
      std::string(K3C_TEST_K3C) + " " + dir.file("config.json") + " -o " + out +
          " --fusion=" + fusion + " --max-seq=" + std::to_string(maxSeq) +
          " --max-batch=" + std::to_string(maxBatch),
      dir);
  if (r.exitCode != 0)
    return Status::error("k3c --fusion=" + fusion + " failed (exit " +
                         std::to_string(r.exitCode) + "): " + r.err);
  Expected<PlanDoc> plan = parsePlan(readFile(out), out);
  if (!plan)
    return plan;
  return cache[key] = plan.take();
#endif
}

/// compiledPlan() of a preset's config.
inline Expected<PlanDoc> compiledPresetPlan(const std::string &preset,
                                            const std::string &fusion,
                                            int64_t maxSeq) {
  Expected<ModelConfig> c = presetConfig(preset);
  if (!c)
    return c.status();
  return compiledPlan(*c, fusion, maxSeq);
}

} // namespace k3::test

/// Skips the current test in a build without k3c.
#define K3C_SKIP_WITHOUT_COMPILER()                                            \
  do {                                                                         \
    if (!::k3::test::haveCompiler())                                           \
      GTEST_SKIP() << "needs a plan compiled by k3c; this build has no "       \
                      "compiler (K3C_ENABLE_COMPILER=OFF)";                    \
  } while (0)

/// Declares `PlanDoc var` = compiledPlan(config, fusion, maxSeq), skipping
/// the test without a compiler and failing it when k3c fails.
#define K3C_COMPILED_PLAN(var, config, fusion, maxSeq)                         \
  K3C_SKIP_WITHOUT_COMPILER();                                                 \
  ::k3::PlanDoc var;                                                           \
  do {                                                                         \
    ::k3::Expected<::k3::PlanDoc> k3_plan_ =                                   \
        ::k3::test::compiledPlan((config), (fusion), (maxSeq));                \
    ASSERT_TRUE(k3_plan_.hasValue()) << k3_plan_.message();                    \
    var = k3_plan_.take();                                                     \
  } while (0)

#endif // K3C_TEST_UNIT_RUNTIME_COMPILEDPLAN_H
