//===- K3RunTool_test.cpp - The k3-run command line -----------------------===//
//
// Runs the built k3-run (and a model executable made from it) on a tiny
// model with k3c's `default` plan: ids on stdout and the .npy dump matching
// what a Session decodes in process with the `none` plan (another fusion
// strategy: bit-identical by the kernels' contract), the
// launch-by-launch check against the CPU kernels, and the exit codes of usage
// errors, runtime errors and corrupted plans.
//
//===----------------------------------------------------------------------===//
#include "runtime/plan/Executable.h"
#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/io/Npy.h"
#include "runtime/model/Presets.h"
#include "runtime/exec/Session.h"
#include "runtime/exec/cuda/CudaDriver.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/FakeCuda.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace k3 {
namespace {

using test::RunResult;
RunResult run(const std::string &cmd, const test::TempDir &dir) {
  return test::runCommand(cmd, dir);
}

class K3RunToolTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir = new test::TempDir();
    Expected<ModelConfig> c = presetConfig("tiny");
    ASSERT_TRUE(c.hasValue());
    config = *c;
    ASSERT_TRUE(makeModel(config, 3, dir->file("model")).isOk());
    if (!test::haveCompiler())
      return;
    Expected<PlanDoc> compiled = test::compiledPlan(config, "default", 32);
    ASSERT_TRUE(compiled.hasValue()) << compiled.message();
    plan = serializePlan(*compiled);
    test::writeFile(dir->file("m.plan"), plan);

    // The expected ids and logits: the `none` plan, in process.
    Expected<PlanDoc> none = test::compiledPlan(config, "none", 32);
    ASSERT_TRUE(none.hasValue()) << none.message();
    Expected<std::unique_ptr<Session>> s =
        Session::open(none.take(), dir->file("model"));
    ASSERT_TRUE(s.hasValue()) << s.message();
    Expected<GenerateResult> g = (*s)->generate({1, 2, 3}, 6, true);
    ASSERT_TRUE(g.hasValue()) << g.message();
    ASSERT_EQ(g->logits.size(), 6u * config.vocabSize);
    logits.clear();
    for (int64_t row = 0; row < 6; ++row)
      logits.emplace_back(g->logits.begin() + row * config.vocabSize,
                          g->logits.begin() + (row + 1) * config.vocabSize);
    expected.clear();
    for (size_t i = 0; i < g->tokens.size(); ++i)
      expected += (i ? " " : "") + std::to_string(g->tokens[i]);
    expected += "\n";
  }
  static void TearDownTestSuite() { delete dir; }
  void SetUp() override { K3C_SKIP_WITHOUT_COMPILER(); }

  static std::string tool() { return K3C_RUN_PATH; }
  static std::string common() {
    return " --weights " + dir->file("model") +
           " --prompt-ids 1,2,3 --max-new 6";
  }

  static test::TempDir *dir;
  static ModelConfig config;
  static std::string plan, expected;
  static std::vector<std::vector<float>> logits;
};
test::TempDir *K3RunToolTest::dir = nullptr;
ModelConfig K3RunToolTest::config;
std::string K3RunToolTest::plan, K3RunToolTest::expected;
std::vector<std::vector<float>> K3RunToolTest::logits;

TEST_F(K3RunToolTest, GeneratesWhatTheNonePlanGenerates) {
  RunResult r = run(tool() + " " + dir->file("m.plan") + common() +
                        " --logits-out " + dir->file("l.npy"),
                    *dir);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, expected);
  EXPECT_TRUE(test::contains(r.err, "tokens/s")) << r.err;
  Expected<NpyF32> npy = readNpyF32(dir->file("l.npy"));
  ASSERT_TRUE(npy.hasValue()) << npy.message();
  ASSERT_EQ(npy->rows, 6);
  ASSERT_EQ(npy->cols, config.vocabSize);
  for (int64_t s = 0; s < 6; ++s)
    EXPECT_TRUE(std::equal(logits[s].begin(), logits[s].end(),
                           npy->values.begin() + s * config.vocabSize));

  r = run(tool() + " " + dir->file("m.plan") + common() + " --quiet", *dir);
  EXPECT_EQ(r.exitCode, 0);
  EXPECT_EQ(r.out, expected);
  EXPECT_EQ(r.err, "");
}

TEST_F(K3RunToolTest, CheckAgainstCpu) {
  // CPU against the CPU kernels: every launch bit-identical, the same ids
  // and logits as a plain run.
  RunResult r =
      run(tool() + " " + dir->file("m.plan") + common() +
              " --check-against cpu --logits-out " + dir->file("c.npy"),
          *dir);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, expected);
  EXPECT_TRUE(test::contains(r.err, "check against cpu OK: 8 steps x "))
      << r.err;
  EXPECT_TRUE(test::contains(r.err, "bit-identical")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  Expected<NpyF32> npy = readNpyF32(dir->file("c.npy"));
  ASSERT_TRUE(npy.hasValue()) << npy.message();
  ASSERT_EQ(npy->rows, 6);
  for (int64_t s = 0; s < 6; ++s)
    EXPECT_TRUE(std::equal(logits[s].begin(), logits[s].end(),
                           npy->values.begin() + s * config.vocabSize));

  r = run(tool() + " " + dir->file("m.plan") + common() +
              " --backend cpu --check-against cpu --quiet",
          *dir);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, expected);
  EXPECT_EQ(r.err, "");
}

TEST_F(K3RunToolTest, ExecutableMode) {
  ASSERT_TRUE(writeExecutable(tool(), plan, dir->file("tiny-model")).isOk());
  RunResult r = run(dir->file("tiny-model") + common(), *dir);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, expected);
  r = run(dir->file("tiny-model") + " --help", *dir);
  EXPECT_EQ(r.exitCode, 0);
  EXPECT_TRUE(test::contains(r.out, "built into this binary"));
  r = run(dir->file("tiny-model") + " " + dir->file("m.plan") + common(), *dir);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(test::contains(r.err, "carries its own plan")) << r.err;
}

/// A plan compiled with --max-batch decodes a prompts file together: the
/// same lines (in the file's order) and logits as the batch-1 plan decoding
/// one prompt after another.
TEST_F(K3RunToolTest, BatchedPromptsAsIfOneByOne) {
  Expected<PlanDoc> batched = test::compiledPlan(config, "default", 32, 3);
  ASSERT_TRUE(batched.hasValue()) << batched.message();
  test::writeFile(dir->file("b.plan"), serializePlan(*batched));
  test::writeFile(dir->file("five.txt"),
                  "1,2,3\n# a comment\n7\n4 4 4 4 4\n\n9,8\n1,2,3\n");
  const std::string args = " --weights " + dir->file("model") + " --prompts " +
                           dir->file("five.txt") +
                           " --max-new 5 --stop-ids 100 --logits-out ";
  RunResult one = run(tool() + " " + dir->file("m.plan") + args +
                          dir->file("one.npy") + " --prefill-chunk 1",
                      *dir);
  ASSERT_EQ(one.exitCode, 0) << one.err;
  EXPECT_EQ(std::count(one.out.begin(), one.out.end(), '\n'), 5) << one.out;
  for (const char *batch :
       {"", " --batch 2", " --batch 3", " --prefill-chunk 1",
        " --batch 2 --prefill-chunk 2", " --prefill-chunk 1 --prefill-form chunk"}) {
    RunResult r = run(tool() + " " + dir->file("b.plan") + args +
                          dir->file("b.npy") + batch,
                      *dir);
    ASSERT_EQ(r.exitCode, 0) << batch << ": " << r.err;
    EXPECT_EQ(r.out, one.out) << batch;
    EXPECT_TRUE(test::contains(r.err, "; batched: ")) << r.err;
    EXPECT_TRUE(test::contains(r.err, "prefill ")) << r.err;
    EXPECT_EQ(test::readFile(dir->file("b.npy")),
              test::readFile(dir->file("one.npy")))
        << batch;
  }
  // A snapshot of a shared prefix, made and restored with the batched plan
  // (into whichever slot each prompt gets): the same lines again.
  RunResult snap = run(tool() + " " + dir->file("b.plan") + " --weights " +
                           dir->file("model") +
                           " --prompt-ids 1,2,3 --max-new 1 --snapshot-out " +
                           dir->file("p.snap") + " --prefix-len 2",
                       *dir);
  ASSERT_EQ(snap.exitCode, 0) << snap.err;
  test::writeFile(dir->file("shared.txt"), "1,2,3\n1,2\n1,2,9,9\n");
  const std::string shared = " --weights " + dir->file("model") +
                             " --prompts " + dir->file("shared.txt") +
                             " --max-new 4 --stop-ids 100";
  RunResult plain = run(tool() + " " + dir->file("m.plan") + shared, *dir);
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  RunResult restored = run(tool() + " " + dir->file("b.plan") + shared +
                               " --snapshot-in " + dir->file("p.snap"),
                           *dir);
  ASSERT_EQ(restored.exitCode, 0) << restored.err;
  EXPECT_EQ(restored.out, plain.out);
  EXPECT_TRUE(test::contains(restored.err, "(+6 restored from the snapshot)"))
      << restored.err;
  // Another plan's snapshot is refused, naming it.
  RunResult other = run(tool() + " " + dir->file("m.plan") + shared +
                            " --snapshot-in " + dir->file("p.snap"),
                        *dir);
  EXPECT_EQ(other.exitCode, 1);
  EXPECT_TRUE(test::contains(other.err, "plan")) << other.err;

  RunResult big = run(tool() + " " + dir->file("b.plan") + args +
                          dir->file("x.npy") + " --batch 4",
                      *dir);
  EXPECT_EQ(big.exitCode, 1);
  EXPECT_TRUE(test::contains(big.err, "--batch 4 is more than the plan's "
                                      "max_batch of 3; compile the plan with "
                                      "k3c --max-batch 4"))
      << big.err;
  EXPECT_FALSE(std::filesystem::exists(dir->file("x.npy")));
  // --batch 2 with a batch-1 plan is refused the same way.
  big = run(tool() + " " + dir->file("m.plan") + common() + " --batch 2", *dir);
  EXPECT_EQ(big.exitCode, 1);
  EXPECT_TRUE(test::contains(big.err, "max_batch of 1")) << big.err;
}

/// A GPU that fails (over the fake driver: an allocation while binding, a
/// launch at any step) ends k3-run with an error that says where, exit 1,
/// no signal, and no half-written --logits-out file; with nothing failing
/// the same run writes it.
TEST_F(K3RunToolTest, GpuFailuresAreErrorsNotSignals) {
  const std::string ptxDir = dir->file("stub-ptx");
  test::writeStubPtx(ptxDir);
  const std::string out = dir->file("gpu.npy");
  auto runWith = [&](const std::string &env) {
    std::filesystem::remove(out);
    return run(
        "K3C_CUDA_DRIVER=" K3C_FAKE_CUDA_DRIVER " K3C_PTX_DIR=" + ptxDir + " " +
            env + " " + tool() + " " + dir->file("m.plan") + common() +
            " --backend cuda --logits-out " + out,
        *dir);
  };
  RunResult ok = runWith("");
  EXPECT_EQ(ok.exitCode, 0) << ok.err;
  EXPECT_TRUE(std::filesystem::exists(out));
  for (const std::string env :
       {"K3C_FAKE_FAIL_ALLOC_AFTER=5", "K3C_FAKE_FAIL_LAUNCH_AFTER=0",
        "K3C_FAKE_FAIL_LAUNCH_AFTER=25", "K3C_FAKE_FAIL_LAUNCH_AFTER=90"}) {
    RunResult r = runWith(env);
    EXPECT_EQ(r.exitCode, 1) << env << ": " << r.err;
    EXPECT_TRUE(test::contains(r.err, "k3-run: error: ")) << env << r.err;
    EXPECT_TRUE(test::contains(r.err, "CUDA_ERROR")) << env << r.err;
    EXPECT_TRUE(test::contains(r.err, "launch ") ||
                test::contains(r.err, "at position") ||
                test::contains(r.err, "binding the plan"))
        << env << ": the error does not say where: " << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << env;
  }
}

TEST_F(K3RunToolTest, UsageErrorsExitTwo) {
  RunResult help = run(tool() + " --help", *dir);
  EXPECT_EQ(help.exitCode, 0);
  EXPECT_TRUE(test::contains(help.out, "--backend cpu|cuda")) << help.out;
  EXPECT_TRUE(test::contains(help.out, "--no-cuda-graph")) << help.out;
  EXPECT_TRUE(test::contains(help.out, "--check-against cpu")) << help.out;
  EXPECT_TRUE(test::contains(help.out, "--batch N")) << help.out;
  EXPECT_TRUE(test::contains(help.out, "--prefill-form auto|rows|chunk"))
      << help.out;
  for (const std::string &args :
       {std::string(""), " " + dir->file("m.plan"),
        " " + dir->file("m.plan") + " --weights x --prompt-ids 1",
        " " + dir->file("m.plan") + common() + " --bogus",
        " " + dir->file("m.plan") +
            " --weights x --prompt-ids 1,a "
            "--max-new 3",
        " " + dir->file("m.plan") + " --weights x --prompt-ids 1 --max-new 0",
        " " + dir->file("m.plan") + common() + " --backend tpu",
        " " + dir->file("m.plan") + common() + " --check-against cuda",
        " " + dir->file("m.plan") + common() + " --batch 0",
        " " + dir->file("m.plan") + common() + " --prefill-chunk 0",
        " " + dir->file("m.plan") + common() + " --prefill-chunk 4097",
        " " + dir->file("m.plan") + common() + " --prefill-form wy",
        " " + dir->file("m.plan") + common() +
            " --prefill-form chunk --check-against cpu",
        " " + dir->file("m.plan") + common() + " --batch two",
        " " + dir->file("m.plan") + common() + " --batch 2 --check-against cpu",
        " " + dir->file("m.plan") + common() + " --check-against"}) {
    RunResult r = run(tool() + args, *dir);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
    EXPECT_TRUE(test::contains(r.err, "error:")) << r.err;
  }
}

TEST_F(K3RunToolTest, RuntimeErrorsExitOne) {
  RunResult r;
  if (!cuda::Driver::get().hasValue()) {
    // No GPU here: --backend cuda must say why, not crash.
    r = run(tool() + " " + dir->file("m.plan") + common() + " --backend cuda",
            *dir);
    EXPECT_EQ(r.exitCode, 1);
    EXPECT_TRUE(test::contains(r.err, "on the GPU: no")) << r.err;
    r = run(tool() + " " + dir->file("m.plan") + common() +
                " --backend cuda --check-against cpu",
            *dir);
    EXPECT_EQ(r.exitCode, 1);
    EXPECT_TRUE(test::contains(r.err, "on the GPU: no")) << r.err;
  }

  test::writeFile(dir->file("cut.plan"), plan.substr(0, plan.size() / 2));
  r = run(tool() + " " + dir->file("cut.plan") + common(), *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "plan is truncated")) << r.err;

  std::string flipped = plan;
  flipped[flipped.size() - 40] ^= 1;
  test::writeFile(dir->file("flip.plan"), flipped);
  r = run(tool() + " " + dir->file("flip.plan") + common(), *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "checksum mismatch")) << r.err;

  r = run(tool() + " " + dir->file("m.plan") + " --weights " +
              dir->file("model") + " --prompt-ids 1,5000 --max-new 2",
          *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "id 5000")) << r.err;
  EXPECT_EQ(r.out, "");

  r = run(tool() + " " + dir->file("m.plan") + " --weights " +
              dir->file("model") + " --prompt-ids 1,2,3 --max-new 30",
          *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "max_seq of 32")) << r.err;

  r = run(tool() + " " + dir->file("nope.plan") + common(), *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "cannot open")) << r.err;
}

} // namespace
} // namespace k3
