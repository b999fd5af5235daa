//===- ProfileTool_test.cpp - k3-run --profile and decode_bench -----------===//
//
// Runs the built tools on a tiny model and k3c's plans of it (their layer
// probes included; CompiledPlan.h), on the CPU backend: `k3-run --profile` decodes as without it and
// prints the kernel and layer-part tables; decode_bench prints its table and
// writes JSON with every field. No timing is checked for its size.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/model/Presets.h"
#include "runtime/exec/Profile.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <regex>

namespace k3 {
namespace {

constexpr int64_t kMaxSeq = 32;

using test::RunResult;
RunResult run(const std::string &cmd, const test::TempDir &dir) {
  return test::runCommand(cmd, dir);
}

class ProfileToolTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir = new test::TempDir();
    Expected<ModelConfig> c = presetConfig("tiny");
    ASSERT_TRUE(c.hasValue());
    config = *c;
    ASSERT_TRUE(makeModel(config, 3, dir->file("model")).isOk());
    if (!test::haveCompiler())
      return;
    Expected<PlanDoc> d = test::compiledPlan(config, "default", kMaxSeq);
    Expected<PlanDoc> n = test::compiledPlan(config, "none", kMaxSeq);
    ASSERT_TRUE(d.hasValue()) << d.message();
    ASSERT_TRUE(n.hasValue()) << n.message();
    fused = d.take();
    fine = n.take();
    test::writeFile(dir->file("fused.plan"), serializePlan(fused));
    test::writeFile(dir->file("fine.plan"), serializePlan(fine));
  }
  static void TearDownTestSuite() { delete dir; }
  void SetUp() override { K3C_SKIP_WITHOUT_COMPILER(); }

  static std::string k3run() { return K3C_RUN_PATH; }
  static std::string bench() { return K3C_DECODE_BENCH_PATH; }
  static std::string decode() {
    return " --weights " + dir->file("model") +
           " --prompt-ids 1,2,3 --max-new 4";
  }

  static test::TempDir *dir;
  static ModelConfig config;
  static PlanDoc fused, fine;
};
test::TempDir *ProfileToolTest::dir = nullptr;
ModelConfig ProfileToolTest::config;
PlanDoc ProfileToolTest::fused, ProfileToolTest::fine;

TEST_F(ProfileToolTest, K3RunProfilePrintsTheTables) {
  const RunResult plain = run(
      k3run() + " " + dir->file("fused.plan") + decode() + " --quiet", *dir);
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  const RunResult r = run(k3run() + " " + dir->file("fused.plan") + decode() +
                              " --quiet --profile --profile-steps 3",
                          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  // The decode is the same; the profile goes to stderr.
  EXPECT_EQ(r.out, plain.out);
  // The next step after 3 prompt tokens and 4 generated: position 6.
  EXPECT_TRUE(test::contains(
      r.err, "profile: " + std::to_string(fused.launches.size()) +
                 " launches on cpu, fusion default, position 6 (context 7); 3 "
                 "timed steps after 3 warm-up"))
      << r.err;
  for (const char *want :
       {"copy bandwidth: ", "\nkernel ", "\nlayer part ", "\nkda mixer ",
        "\nmla mixer ", "\nmoe ", "\ndense mlp ", "\nattn_res ", "\nhead ",
        "\nembed ", "\ntotal ", "step per token: launch by launch", "floor: "})
    EXPECT_TRUE(test::contains(r.err, want)) << want << "\n" << r.err;
  for (const PlanLaunch &l : fused.launches)
    EXPECT_TRUE(test::contains(r.err, "\n" + l.kernel + " ")) << l.kernel;
  // Two "total" rows (kernels, parts), each with every launch.
  const std::string totalRow = std::to_string(fused.launches.size()) + " ";
  size_t totals = 0;
  for (size_t at = r.err.find("\ntotal "); at != std::string::npos;
       at = r.err.find("\ntotal ", at + 1)) {
    ++totals;
    EXPECT_TRUE(test::contains(r.err.substr(at, 60), totalRow))
        << r.err.substr(at, 60);
  }
  // The prefill's two (3 prompt tokens in one chunk), then the step's two.
  EXPECT_EQ(totals, 4u);
  EXPECT_TRUE(test::contains(r.err, "prefill profile: 3 prompt tokens in 1 "
                                    "chunks of 64 rows on cpu"))
      << r.err;
  EXPECT_LT(r.err.find("prefill profile: "), r.err.find("\nprofile: "));
}

TEST_F(ProfileToolTest, K3RunProfileUsage) {
  const RunResult help = run(k3run() + " --help", *dir);
  EXPECT_TRUE(test::contains(help.out, "--profile ")) << help.out;
  EXPECT_TRUE(test::contains(help.out, "--profile-steps N")) << help.out;
  for (const std::string &args :
       {std::string(" --profile --check-against cpu"),
        std::string(" --profile-steps 0"), std::string(" --profile-steps")}) {
    const RunResult r =
        run(k3run() + " " + dir->file("fused.plan") + decode() + args, *dir);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
    EXPECT_TRUE(test::contains(r.err, "error:")) << r.err;
  }
}

TEST_F(ProfileToolTest, DecodeBenchWritesEveryField) {
  const std::string out = dir->file("results");
  const RunResult r =
      run(bench() + " --weights " + dir->file("model") + " --plan fine=" +
              dir->file("fine.plan") + " --plan " + dir->file("fused.plan") +
              " --context 12 --prompt-len 4 --steps 50 --warmup 2 "
              "--copy-mb 8 --out-dir " +
              out,
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  for (const char *want :
       {"context 12 (prompt 4), median of 50 steps", "copy bandwidth",
        "us/token", "floor us", "of floor", "\nmodel ", "wrote "})
    EXPECT_TRUE(test::contains(r.out, want)) << want << "\n" << r.out;

  // One file, bench/results-style: <model>-<date>.json.
  std::vector<std::string> files;
  for (const auto &e : std::filesystem::directory_iterator(out))
    files.push_back(e.path().filename().string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_TRUE(std::regex_match(files[0],
                               std::regex(R"(model-\d{4}-\d{2}-\d{2}\.json)")))
      << files[0];
  const nlohmann::json j = nlohmann::json::parse(
      test::readFile(out + "/" + files[0]), nullptr, /*exceptions=*/false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j.value("benchmark", ""), "decode_bench");
  ASSERT_TRUE(j.contains("results") && j["results"].is_array());
  // The CPU has no graph: per plan a kernel-by-kernel row, then the greedy
  // chain (k3c's plans end with the argmax that writes the step block).
  ASSERT_EQ(j["results"].size(), 4u);
  const PlanDoc *plans[] = {&fine, &fused};
  const char *labels[] = {"fine", "default"};
  for (size_t k = 0; k < 4; ++k) {
    const size_t i = k / 2;
    const nlohmann::json &row = j["results"][k];
    EXPECT_EQ(row["mode"], k % 2 ? "greedy-chain" : "launches") << k;
    for (const char *field : {"model", "geometry", "batch", "fusion", "graph",
                              "us_per_token", "floor_us", "fraction_of_floor",
                              "copy_gbps", "gpu", "commit", "date"})
      EXPECT_TRUE(row.contains(field)) << field;
    EXPECT_EQ(row["model"], "model");
    EXPECT_EQ(row["geometry"]["hidden"], config.hiddenSize);
    EXPECT_EQ(row["geometry"]["layers"], config.numLayers);
    EXPECT_EQ(row["geometry"]["experts"], config.numExperts);
    EXPECT_EQ(row["geometry"]["top_k"], config.numExpertsPerToken);
    EXPECT_EQ(row["batch"], 1);
    EXPECT_EQ(row["fusion"], labels[i]);
    EXPECT_EQ(row["graph"], false);
    EXPECT_GT(row["us_per_token"].get<double>(), 0.0);
    EXPECT_GT(row["floor_us"].get<double>(), 0.0);
    EXPECT_GT(row["copy_gbps"].get<double>(), 0.0);
    EXPECT_NEAR(row["fraction_of_floor"].get<double>(),
                row["floor_us"].get<double>() /
                    row["us_per_token"].get<double>(),
                1e-9);
    EXPECT_NEAR(row["floor_us"].get<double>(),
                stepBytes(*plans[i], 12).total() /
                    (row["copy_gbps"].get<double>() * 1e3),
                1e-6);
    EXPECT_EQ(row["bytes_per_token"].get<uint64_t>(),
              stepBytes(*plans[i], 12).total());
    EXPECT_EQ(row["launches"], plans[i]->launches.size());
    EXPECT_EQ(row["context"], 12);
    EXPECT_EQ(row["steps"], 50);
    EXPECT_TRUE(test::contains(row["gpu"].get<std::string>(), "cpu"));
    EXPECT_FALSE(row["commit"].get<std::string>().empty());
    EXPECT_TRUE(std::regex_match(row["date"].get<std::string>(),
                                 std::regex(R"(\d{4}-\d{2}-\d{2})")));
  }

  // The same day again: a second file; --commit and --json are honoured.
  RunResult again = run(bench() + " --weights " + dir->file("model") +
                            " --model m2 --plan " + dir->file("fused.plan") +
                            " --context 4 --steps 2 --copy-mb 8 --commit "
                            "abc123 --json " +
                            dir->file("one.json"),
                        *dir);
  ASSERT_EQ(again.exitCode, 0) << again.err;
  const nlohmann::json one = nlohmann::json::parse(
      test::readFile(dir->file("one.json")), nullptr, false);
  ASSERT_FALSE(one.is_discarded());
  ASSERT_EQ(one["results"].size(), 2u); // kernel by kernel, greedy chain
  EXPECT_EQ(one["results"][0]["commit"], "abc123");
  EXPECT_EQ(one["results"][0]["model"], "m2");
  again = run(bench() + " --weights " + dir->file("model") + " --plan " +
                  dir->file("fused.plan") +
                  " --context 4 --steps 2 --copy-mb 8 --out-dir " + out,
              *dir);
  ASSERT_EQ(again.exitCode, 0) << again.err;
  EXPECT_TRUE(std::filesystem::exists(
      out + "/" + files[0].substr(0, files[0].size() - 5) + "-2.json"));
}

/// --batch N: a plan of N slots, each filled with its own prompt, then steps
/// of N rows; the row reports the step over N and a floor of the bytes of a
/// step of N rows (each weight once, the experts' expected union) over N.
/// --profile prints the step's kernels; --prefill-form chunk is recorded.
/// Too few slots is an error naming the plan's.
TEST_F(ProfileToolTest, DecodeBenchBatch) {
  Expected<PlanDoc> b = test::compiledPlan(config, "default", kMaxSeq, 4);
  ASSERT_TRUE(b.hasValue()) << b.message();
  test::writeFile(dir->file("b4.plan"), serializePlan(*b));
  const std::string w = " --weights " + dir->file("model");
  const std::string p = " --plan " + dir->file("b4.plan");
  const RunResult r = run(bench() + w + p +
                              " --batch 4 --context 10 --prompt-len 3 "
                              "--steps 3 --warmup 1 --copy-mb 8 --profile "
                              "--prefill-form chunk --json " +
                              dir->file("batch.json"),
                          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_TRUE(test::contains(r.out, "decode at batch 4, context 10")) << r.out;
  const nlohmann::json j = nlohmann::json::parse(
      test::readFile(dir->file("batch.json")), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  ASSERT_EQ(j["results"].size(), 1u);
  const nlohmann::json &row = j["results"][0];
  EXPECT_EQ(row["batch"], 4);
  EXPECT_EQ(row["mode"], "batch-4");
  EXPECT_GT(row["us_per_token"].get<double>(), 0.0);
  EXPECT_NEAR(row["floor_us"].get<double>(),
              stepBytes(*b, 10, 4).total() /
                  (row["copy_gbps"].get<double>() * 1e3) / 4.0,
              1e-6);
  EXPECT_EQ(row["bytes_per_step"].get<uint64_t>(),
            stepBytes(*b, 10, 4).total());
  EXPECT_EQ(row["prefill_form"], "chunk");
  // Four rows read more than one row but less than four rows' weights.
  EXPECT_GT(stepBytes(*b, 10, 4).total(), stepBytes(*b, 10).total());
  EXPECT_LT(stepBytes(*b, 10, 4).total(), 4 * stepBytes(*b, 10).total());
  // --profile: the kernels of a step of 4 rows, and their total.
  EXPECT_TRUE(test::contains(r.err, "a step of 4 rows launch by launch"))
      << r.err;
  EXPECT_TRUE(test::contains(r.err, "\nmoe_experts ")) << r.err;
  EXPECT_TRUE(test::contains(r.err, "\ntotal ")) << r.err;
  RunResult lone = run(bench() + w + p + " --profile --context 4", *dir);
  EXPECT_EQ(lone.exitCode, 2) << lone.err;
  EXPECT_TRUE(test::contains(lone.err, "it needs --batch N with N >= 2"))
      << lone.err;
  lone = run(bench() + w + p + " --prefill-form wy", *dir);
  EXPECT_EQ(lone.exitCode, 2) << lone.err;
  EXPECT_TRUE(test::contains(lone.err, "--prefill-form needs rows or chunk"))
      << lone.err;
  RunResult bad = run(bench() + w + p + " --batch 5 --context 4 --copy-mb 8",
                      *dir);
  EXPECT_EQ(bad.exitCode, 1) << bad.err;
  EXPECT_TRUE(test::contains(bad.err, "it has 4 (k3c --max-batch)"))
      << bad.err;
  bad = run(bench() + w + p + " --batch 0", *dir);
  EXPECT_EQ(bad.exitCode, 2) << bad.err;
}

TEST_F(ProfileToolTest, DecodeBenchErrors) {
  const RunResult help = run(bench() + " --help", *dir);
  EXPECT_EQ(help.exitCode, 0);
  EXPECT_TRUE(test::contains(help.out, "--plan [LABEL=]PLAN")) << help.out;
  const std::string w = " --weights " + dir->file("model");
  const std::string p = " --plan " + dir->file("fused.plan");
  for (const std::string &args :
       {std::string(""), p + w, w, w + p + " --backend tpu",
        w + p + " --context 0", w + p + " --steps 0",
        w + p + " --context 4 --prompt-len 5", w + p + " --bogus"}) {
    const RunResult r = run(bench() + args, *dir);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
    EXPECT_TRUE(test::contains(r.err, "error:")) << r.err;
  }
  RunResult r = run(bench() + w + p + " --context 33 --copy-mb 8", *dir);
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_TRUE(test::contains(r.err, "exceeds the plan's max_seq 32")) << r.err;
  r = run(bench() + w + " --plan " + dir->file("nope.plan"), *dir);
  EXPECT_EQ(r.exitCode, 1) << r.err;
}

} // namespace
} // namespace k3
