//===- K3cTool_test.cpp - k3c's outputs, inputs and help ------------------===//
//
// Runs the built k3c: every output goes through a temporary file and a
// rename (a failed write leaves the old target, concurrent builds of one
// executable never mix), non-regular targets and inputs are refused, a
// config whose sizes would overflow is refused naming the config field
// (never as an MLIR verifier message), and --help lists k3c's own options
// and the MLIR debugging flags only. Every command runs under `timeout`, so
// a hang fails the test instead of stalling it.
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Config.h"
#include "runtime/plan/Executable.h"
#include "runtime/model/Presets.h"

#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <sys/stat.h>
#include <sys/wait.h>

namespace k3 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

using test::RunResult;

/// Runs `args` after k3c under a 120 s timeout (shell syntax allowed).
RunResult k3c(const std::string &args, const test::TempDir &dir,
              const std::string &prefix = "") {
  return test::runCommand(
      prefix + "timeout 120 " + std::string(K3C_K3C_PATH) + " " + args, dir);
}

/// Files of `dir` other than stderr.txt.
std::vector<std::string> outputs(const test::TempDir &dir) {
  std::vector<std::string> v;
  for (const auto &e : fs::directory_iterator(dir.path()))
    if (e.path().filename() != "stderr.txt")
      v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

std::string tinyConfigText() {
  Expected<ModelConfig> c = presetConfig("tiny");
  EXPECT_TRUE(c.hasValue());
  return writeConfigJson(*c);
}

TEST(K3cTool, HelpShowsK3cAndMlirOptionsOnly) {
  test::TempDir dir;
  RunResult r = k3c("--help", dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_LT(std::count(r.out.begin(), r.out.end(), '\n'), 120) << r.out;
  for (const char *want :
       {"--emit=", "--fusion=", "--max-seq=", "--max-batch=", "--report",
        "--mlir-print-ir-after-all", "--mlir-timing", "MLIR debugging options",
        "k3c options"})
    EXPECT_TRUE(test::contains(r.out, want)) << want;
  for (const char *unwanted : {"--x86-", "--aarch64-", "--polly", "--amdgpu"})
    EXPECT_FALSE(test::contains(r.out, unwanted)) << unwanted;
}

TEST(K3cTool, RefusesToOverwriteItsInput) {
  test::TempDir dir;
  const std::string cfg = tinyConfigText();
  test::writeFile(dir.file("cfg.json"), cfg);
  RunResult r = k3c(dir.file("cfg.json") + " -o " + dir.file("cfg.json"), dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "the output is the input")) << r.err;
  EXPECT_EQ(test::readFile(dir.file("cfg.json")), cfg);
  // A model directory's config.json, too.
  fs::create_directory(dir.file("model"));
  test::writeFile(dir.file("model/config.json"), cfg);
  r = k3c(dir.file("model") + " -o " + dir.file("model/config.json"), dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_EQ(test::readFile(dir.file("model/config.json")), cfg);
}

TEST(K3cTool, RefusesNonRegularTargets) {
  test::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  RunResult r = k3c("preset:tiny -o " + dir.file("fifo"), dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "refusing to replace a FIFO")) << r.err;
  r = k3c("preset:tiny --emit=exe -o " + dir.path(), dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "refusing to replace a directory"))
      << r.err;
  // The null device is a sink: accepted, and never replaced (as root a
  // rename would have put the executable there).
  r = k3c("preset:tiny --emit=exe -o /dev/null", dir);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  // A FIFO as the input config does not block.
  r = k3c(dir.file("fifo") + " -o " + dir.file("x.plan"), dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "the config file is a FIFO")) << r.err;
}

TEST(K3cTool, AFailedWriteFailsAndKeepsTheOldTarget) {
  test::TempDir dir;
  test::writeFile(dir.file("out.plan"), "previous plan");
  // A 64-block file size limit: the plan (megabytes with its PTX, hundreds
  // of kilobytes without) does not fit. SIGXFSZ ignored, so write() fails
  // with EFBIG as on a full disk.
  RunResult r = k3c("preset:tiny -o " + dir.file("out.plan"), dir,
                    "trap '' XFSZ; ulimit -f 64; ");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "write failed")) << r.err;
  EXPECT_EQ(test::readFile(dir.file("out.plan")), "previous plan");
  EXPECT_EQ(outputs(dir), std::vector<std::string>{"out.plan"});
  // Standard output on a full device.
  r = k3c("preset:tiny --emit=mlir > /dev/full", dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "writing to standard output failed"))
      << r.err;
}

TEST(K3cTool, ConcurrentExecutablesNeverMix) {
  test::TempDir dir;
  const std::string out = dir.file("model-exe");
  const std::string one = "preset:tiny --emit=exe -o " + out;
  RunResult r = k3c(one + " & " + K3C_K3C_PATH + " " + one + " & wait", dir);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(outputs(dir), std::vector<std::string>{"model-exe"});
  Expected<std::optional<std::string>> plan = findEmbeddedPlan(out);
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  EXPECT_TRUE(plan->has_value());
  struct stat st;
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_NE(st.st_mode & 0100, 0u) << "not executable";
}

TEST(K3cTool, OversizedConfigsNameTheField) {
  test::TempDir dir;
  json j = json::parse(tinyConfigText());
  j["text_config"]["num_hidden_layers"] = 100000;
  test::writeFile(dir.file("layers.json"), j.dump());
  RunResult r = k3c(dir.file("layers.json") + " -o " + dir.file("a.plan"), dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "text_config.num_hidden_layers = 100000 "
                                    "exceeds the limit of 1024"))
      << r.err;

  // Each size in range, their product not: the importer refuses it naming
  // the fields, before any op is built.
  j = json::parse(tinyConfigText());
  j["text_config"]["num_experts"] = 65536;
  j["text_config"]["moe_intermediate_size"] = 1048576;
  j["text_config"]["routed_expert_hidden_size"] = 65536;
  test::writeFile(dir.file("experts.json"), j.dump());
  r = k3c(dir.file("experts.json") + " --emit=mlir -o " + dir.file("a.mlir"),
          dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "k3c: error: config: the routed experts"))
      << r.err;
  EXPECT_TRUE(test::contains(r.err, "num_experts (65536) * "
                                    "moe_intermediate_size (1048576) * "
                                    "routed_expert_hidden_size (65536)"))
      << r.err;
  EXPECT_FALSE(test::contains(r.err, "op expects")) << r.err;

  r = k3c("preset:tiny --max-seq 4611686018427387904 -o " + dir.file("b.plan"),
          dir);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(test::contains(r.err, "--max-seq must be in [1, 2^24")) << r.err;

  for (const char *bad : {"0", "1025", "-3"}) {
    r = k3c(std::string("preset:tiny --max-batch ") + bad + " -o " +
                dir.file("c.plan"),
            dir);
    EXPECT_EQ(r.exitCode, 2) << bad;
    EXPECT_TRUE(test::contains(r.err, "--max-batch must be in [1, 1024], got " +
                                          std::string(bad)))
        << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir.file("c.plan")));
  }
}

} // namespace
} // namespace k3
