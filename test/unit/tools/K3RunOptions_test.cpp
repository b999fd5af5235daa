//===- K3RunOptions_test.cpp - k3-run's serving options end to end --------===//
//
// Runs the built k3-run (and an executable made from it) on a tiny model with
// the options a user of batch-1 decode expects: --prompts files (line
// numbers on the output and in errors), stop ids and the config's EOS,
// prefix snapshots saved and restored (the same ids as the full prompt;
// another plan's, truncated and corrupted snapshots refused), sampling
// (greedy limits, a seed's fixed sequence), the prefill/decode summary and
// the help. k3-run runs k3c's `default` plan; the ids are checked against a
// Session decoding in process with the `none` plan (another fusion
// strategy, bit-identical by the kernels' contract), not against k3-run.
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Config.h"
#include "runtime/plan/Executable.h"
#include "tools/k3-mkmodel/ModelMaker.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/io/Npy.h"
#include "runtime/model/Presets.h"
#include "runtime/exec/Session.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

namespace k3 {
namespace {

using test::RunResult;
RunResult run(const std::string &cmd, const test::TempDir &dir) {
  return test::runCommand(cmd, dir);
}

using Ids = std::vector<int64_t>;

std::string join(const Ids &ids, size_t n = SIZE_MAX) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < n; ++i)
    s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

std::string csv(const Ids &ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i)
    s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

/// What the `none` plan decodes greedily from a prompt.
struct Ref {
  Ids ids;
  std::vector<std::vector<float>> logits;
};

constexpr int64_t kNew = 6;

class K3RunOptionsTest : public ::testing::Test {
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
    // The same model, another plan (other launches, the same states).
    Expected<PlanDoc> none = test::compiledPlan(config, "none", 32);
    ASSERT_TRUE(none.hasValue()) << none.message();
    test::writeFile(dir->file("other.plan"), serializePlan(*none));

    Expected<std::unique_ptr<Session>> dec =
        Session::open(none.take(), dir->file("model"));
    ASSERT_TRUE(dec.hasValue()) << dec.message();
    for (const Ids &p : std::vector<Ids>{{1, 2, 3},
                                         {1, 5, 9},
                                         {7, 8},
                                         {4, 5},
                                         {1, 2, 3, 4, 5},
                                         {1, 2, 3, 9}}) {
      Ref &r = refs[p];
      Expected<GenerateResult> g = (*dec)->generate(p, kNew, true);
      ASSERT_TRUE(g.hasValue()) << g.message();
      r.ids = g->tokens;
      ASSERT_EQ(g->logits.size(), kNew * config.vocabSize);
      for (int64_t row = 0; row < kNew; ++row)
        r.logits.emplace_back(g->logits.begin() + row * config.vocabSize,
                              g->logits.begin() +
                                  (row + 1) * config.vocabSize);
      // EOS (2 in tiny) is a stop id by default: these decodes must not
      // meet it, or the plain runs below would end early.
      ASSERT_EQ(std::count(r.ids.begin(), r.ids.end(), config.eosTokenId), 0)
          << csv(p);
    }
  }
  static void TearDownTestSuite() { delete dir; }
  void SetUp() override { K3C_SKIP_WITHOUT_COMPILER(); }

  static std::string tool() { return K3C_RUN_PATH; }
  static std::string k3run(const std::string &args) {
    return tool() + " " + dir->file("m.plan") + " --weights " +
           dir->file("model") + " " + args;
  }
  static const Ref &ref(const Ids &prompt) { return refs.at(prompt); }
  static std::string line(const Ids &prompt, size_t n = kNew) {
    return join(ref(prompt).ids, n) + "\n";
  }

  static test::TempDir *dir;
  static ModelConfig config;
  static std::string plan;
  static std::map<Ids, Ref> refs;
};
test::TempDir *K3RunOptionsTest::dir = nullptr;
ModelConfig K3RunOptionsTest::config;
std::string K3RunOptionsTest::plan;
std::map<Ids, Ref> K3RunOptionsTest::refs;

//===----------------------------------------------------------------------===//
// --prompts
//===----------------------------------------------------------------------===//

TEST_F(K3RunOptionsTest, PromptsFileDecodesEveryLine) {
  test::writeFile(dir->file("p.txt"), "# three prompts\n"
                                      "1,2,3\n"
                                      "\n"
                                      "1 5 9   # spaces, and a comment\n"
                                      "7, 8\n");
  RunResult r = run(k3run("--prompts " + dir->file("p.txt") +
                          " --max-new 5 --logits-out " + dir->file("p.npy")),
                    *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "2: " + line({1, 2, 3}, 5) + "4: " + line({1, 5, 9}, 5) +
                       "5: " + line({7, 8}, 5));
  EXPECT_TRUE(test::contains(r.err, "3 prompts, 15 tokens generated (cpu)"))
      << r.err;
  // The logits of every prompt, in output order.
  Expected<NpyF32> npy = readNpyF32(dir->file("p.npy"));
  ASSERT_TRUE(npy.hasValue()) << npy.message();
  ASSERT_EQ(npy->rows, 15);
  const std::vector<Ids> order = {{1, 2, 3}, {1, 5, 9}, {7, 8}};
  for (int64_t row = 0; row < 15; ++row) {
    const std::vector<float> &want = ref(order[row / 5]).logits[row % 5];
    EXPECT_TRUE(std::equal(want.begin(), want.end(),
                           npy->values.begin() + row * config.vocabSize))
        << "row " << row;
  }

  // One prompt in a file: no line number.
  test::writeFile(dir->file("one.txt"), "\n# just one\n4 5\n");
  r = run(k3run("--prompts " + dir->file("one.txt") + " --max-new 6 --quiet"),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({4, 5}));
  EXPECT_EQ(r.err, "");
  // --prompt-ids takes spaces too.
  r = run(k3run("--prompt-ids '4 5' --max-new 6 --quiet"), *dir);
  EXPECT_EQ(r.out, line({4, 5}));
}

TEST_F(K3RunOptionsTest, PromptsFileErrorsNameTheFileAndLine) {
  // A bad id on line 3: nothing is decoded.
  const std::string bad = dir->file("bad.txt");
  test::writeFile(bad, "1,2\n3\n4,x\n");
  RunResult r = run(k3run("--prompts " + bad + " --max-new 4"), *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, bad + ":3: 'x' is not a token id"))
      << r.err;
  EXPECT_EQ(r.out, "");
  // An id outside the vocabulary on line 3: lines 1 and 2 are not decoded
  // either (every prompt is checked first).
  test::writeFile(bad, "1,2\n3\n4,5000\n");
  r = run(k3run("--prompts " + bad + " --max-new 4"), *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(
      r.err, bad + ":3: prompt token 1 has id 5000, outside the vocabulary"))
      << r.err;
  EXPECT_EQ(r.out, "");
  // Too long for the plan on line 2.
  test::writeFile(bad, "1\n" + csv(Ids(30, 7)) + "\n");
  r = run(k3run("--prompts " + bad + " --max-new 4"), *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, bad + ":2: the prompt (30 tokens)"))
      << r.err;
  test::writeFile(bad, "# nothing\n\n");
  r = run(k3run("--prompts " + bad + " --max-new 4"), *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "no prompts")) << r.err;
  r = run(k3run("--prompts " + dir->file("missing.txt") + " --max-new 4"),
          *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "cannot open the prompts file")) << r.err;
  // Usage errors.
  for (const std::string &args :
       {"--prompts " + bad + " --prompt-ids 1 --max-new 4",
        std::string("--max-new 4"), std::string("--prompts")}) {
    r = run(k3run(args), *dir);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
    EXPECT_TRUE(test::contains(r.err, "error:")) << r.err;
  }
}

//===----------------------------------------------------------------------===//
// Stop ids and EOS
//===----------------------------------------------------------------------===//

TEST_F(K3RunOptionsTest, StopIdsEndTheSequence) {
  const Ids &full = ref({1, 2, 3}).ids;
  RunResult r = run(k3run("--prompt-ids 1,2,3 --max-new 6 --stop-ids " +
                          std::to_string(full[2]) + " --logits-out " +
                          dir->file("s.npy")),
                    *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3}, 3)); // the stop id is printed
  EXPECT_TRUE(test::contains(r.err, "3 tokens generated, ended by stop id " +
                                        std::to_string(full[2])))
      << r.err;
  EXPECT_TRUE(test::contains(r.err, "decode 2 steps")) << r.err;
  Expected<NpyF32> npy = readNpyF32(dir->file("s.npy"));
  ASSERT_TRUE(npy.hasValue()) << npy.message();
  EXPECT_EQ(npy->rows, 3);

  // Several, space-separated: the first one met ends it.
  r = run(k3run("--prompt-ids 1,2,3 --max-new 6 --quiet --stop-ids '" +
                std::to_string(full[4]) + " " + std::to_string(full[1]) + "'"),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3}, 2));
  // Per prompt in a file: each line ends at its own stop.
  test::writeFile(dir->file("stop.txt"), "1,2,3\n7,8\n");
  r = run(k3run("--prompts " + dir->file("stop.txt") +
                " --max-new 6 --stop-ids " + std::to_string(full[2])),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const Ids &other = ref({7, 8}).ids;
  const size_t otherLen =
      std::find(other.begin(), other.end(), full[2]) - other.begin();
  EXPECT_EQ(r.out, "1: " + line({1, 2, 3}, 3) + "2: " +
                       line({7, 8}, std::min<size_t>(otherLen + 1, kNew)));
  // --check-against prints the same ids (its check still covers every step).
  r = run(k3run("--prompt-ids 1,2,3 --max-new 6 --check-against cpu "
                "--stop-ids " +
                std::to_string(full[2]) + " --logits-out " +
                dir->file("c.npy")),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3}, 3));
  EXPECT_TRUE(test::contains(r.err, "check against cpu OK")) << r.err;
  npy = readNpyF32(dir->file("c.npy"));
  ASSERT_TRUE(npy.hasValue()) << npy.message();
  EXPECT_EQ(npy->rows, 3);

  r = run(k3run("--prompt-ids 1,2,3 --max-new 6 --stop-ids 5000"), *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "--stop-ids: id 5000 is outside")) << r.err;
  r = run(k3run("--prompt-ids 1,2,3 --max-new 6 --stop-ids 1,x"), *dir);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(test::contains(r.err, "--stop-ids must be")) << r.err;
}

TEST_F(K3RunOptionsTest, EosFromTheConfigStopsUnlessIgnored) {
  // The same weights under a config whose eos_token_id is the third token
  // the model decodes.
  const Ids &full = ref({1, 2, 3}).ids;
  ModelConfig c = config;
  c.eosTokenId = full[2];
  const std::string eosDir = dir->file("eos-model");
  std::filesystem::create_directories(eosDir);
  test::writeFile(eosDir + "/config.json", writeConfigJson(c));
  std::filesystem::copy_file(dir->file("model") + "/model.safetensors",
                             eosDir + "/model.safetensors");
  Expected<PlanDoc> eosPlan = test::compiledPlan(c, "default", 32);
  ASSERT_TRUE(eosPlan.hasValue()) << eosPlan.message();
  test::writeFile(dir->file("eos.plan"), serializePlan(*eosPlan));
  const std::string base = tool() + " " + dir->file("eos.plan") +
                           " --weights " + eosDir +
                           " --prompt-ids 1,2,3 --max-new 6 --quiet";
  RunResult r = run(base, *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3}, 3));
  r = run(base + " --ignore-eos", *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3}));
}

//===----------------------------------------------------------------------===//
// Prefix snapshots
//===----------------------------------------------------------------------===//

TEST_F(K3RunOptionsTest, SnapshotRoundTripGivesTheFullPromptsIds) {
  test::TempDir snaps;
  const std::string s = snaps.file("prefix.snap");
  RunResult r =
      run(k3run("--prompt-ids 1,2,3,4,5 --max-new 6 --snapshot-out " + s +
                " --prefix-len 3 --logits-out " + dir->file("full.npy")),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3, 4, 5}));
  EXPECT_TRUE(test::contains(r.err, "snapshot of the first 3 prompt tokens "
                                    "written to " +
                                        s))
      << r.err;
  EXPECT_TRUE(test::contains(r.err, "(+3 restored from the snapshot)"))
      << r.err;
  // Written atomically: the file and nothing else.
  std::vector<std::string> names;
  for (const auto &e : std::filesystem::directory_iterator(snaps.path()))
    names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"prefix.snap"});

  // Restored: the same ids and bit-identical logits as the full prompt.
  r = run(k3run("--prompt-ids 1,2,3,4,5 --max-new 6 --snapshot-in " + s +
                " --logits-out " + dir->file("restored.npy")),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3, 4, 5}));
  EXPECT_TRUE(test::contains(r.err, "prefill 2 tokens (+3 restored from the "
                                    "snapshot)"))
      << r.err;
  Expected<NpyF32> npy = readNpyF32(dir->file("restored.npy"));
  ASSERT_TRUE(npy.hasValue()) << npy.message();
  ASSERT_EQ(npy->rows, kNew);
  for (int64_t row = 0; row < kNew; ++row) {
    const std::vector<float> &want = ref({1, 2, 3, 4, 5}).logits[row];
    EXPECT_TRUE(std::equal(want.begin(), want.end(),
                           npy->values.begin() + row * config.vocabSize))
        << "row " << row;
  }
  EXPECT_EQ(test::readFile(dir->file("restored.npy")),
            test::readFile(dir->file("full.npy")));
  // The whole prompt is the prefix: its first token comes from the
  // snapshot's logits.
  r = run(k3run("--prompt-ids 1,2,3 --max-new 6 --quiet --snapshot-in " + s),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3}));
  // Every prompt of a file that shares the prefix.
  test::writeFile(dir->file("shared.txt"), "1,2,3,9\n1 2 3 4 5\n1,2,3\n");
  r = run(k3run("--prompts " + dir->file("shared.txt") +
                " --max-new 6 --snapshot-in " + s),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "1: " + line({1, 2, 3, 9}) + "2: " + line({1, 2, 3, 4, 5}) +
                       "3: " + line({1, 2, 3}));
  // --snapshot-out without --prefix-len: the whole (first) prompt.
  const std::string whole = snaps.file("whole.snap");
  r = run(k3run("--prompt-ids 1,2,3,4,5 --max-new 6 --quiet --snapshot-out " +
                whole),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3, 4, 5}));
  r = run(k3run("--prompt-ids 1,2,3,4,5 --max-new 6 --quiet --snapshot-in " +
                whole),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3, 4, 5}));
  // An executable made from the same plan bytes has the same identity.
  ASSERT_TRUE(writeExecutable(tool(), plan, dir->file("snap-model")).isOk());
  r = run(dir->file("snap-model") + " --weights " + dir->file("model") +
              " --prompt-ids 1,2,3,9 --max-new 6 --quiet --snapshot-in " + s,
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3, 9}));
}

TEST_F(K3RunOptionsTest, BadSnapshotsAreRefused) {
  test::TempDir snaps;
  const std::string s = snaps.file("p.snap");
  RunResult r =
      run(k3run("--prompt-ids 1,2,3 --max-new 2 --quiet --snapshot-out " + s),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const std::string bytes = test::readFile(s);
  ASSERT_GT(bytes.size(), 1000u);

  // Made by another plan (same model and states, other launches).
  r = run(tool() + " " + dir->file("other.plan") + " --weights " +
              dir->file("model") +
              " --prompt-ids 1,2,3 --max-new 2 --snapshot-in " + s,
          *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, s + ": the snapshot was made with another "
                                        "plan"))
      << r.err;
  EXPECT_EQ(r.out, "");
  // Truncated, at a few lengths.
  for (size_t n : {size_t(0), size_t(20), bytes.size() / 2, bytes.size() - 1}) {
    test::writeFile(snaps.file("cut.snap"), bytes.substr(0, n));
    r = run(k3run("--prompt-ids 1,2,3 --max-new 2 --snapshot-in " +
                  snaps.file("cut.snap")),
            *dir);
    EXPECT_EQ(r.exitCode, 1) << n;
    EXPECT_TRUE(test::contains(r.err, n == 0 ? "not a k3 prefix snapshot"
                                             : "the snapshot is truncated"))
        << n << ": " << r.err;
    EXPECT_EQ(r.out, "");
  }
  // One bit flipped in the states.
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 4;
  test::writeFile(snaps.file("flip.snap"), flipped);
  r = run(k3run("--prompt-ids 1,2,3 --max-new 2 --snapshot-in " +
                snaps.file("flip.snap")),
          *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "the snapshot is corrupted")) << r.err;
  // Not a snapshot at all.
  r = run(k3run("--prompt-ids 1,2,3 --max-new 2 --snapshot-in " +
                dir->file("m.plan")),
          *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "not a k3 prefix snapshot")) << r.err;
  r = run(k3run("--prompt-ids 1,2,3 --max-new 2 --snapshot-in " +
                snaps.file("none.snap")),
          *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "cannot open the snapshot file")) << r.err;
  // A prompt that does not start with the snapshot's tokens.
  r = run(k3run("--prompt-ids 1,2,4 --max-new 2 --snapshot-in " + s), *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "--prompt-ids: the prompt does not start "
                                    "with the snapshot's 3 tokens (1,2,3)"))
      << r.err;
  test::writeFile(dir->file("mixed.txt"), "1,2,3,4\n\n1,2\n");
  r = run(k3run("--prompts " + dir->file("mixed.txt") +
                " --max-new 2 --snapshot-in " + s),
          *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, dir->file("mixed.txt") +
                                        ":3: the prompt does not start"))
      << r.err;
  EXPECT_EQ(r.out, "");
  // The snapshot may not replace the plan it was made from.
  r = run(k3run("--prompt-ids 1,2,3 --max-new 2 --snapshot-out " +
                dir->file("m.plan")),
          *dir);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(test::contains(r.err, "the output is the input")) << r.err;
  EXPECT_EQ(test::readFile(dir->file("m.plan")), plan);

  // Usage errors.
  for (const std::string &args : std::vector<std::string>{
           "--prompt-ids 1,2,3 --max-new 2 --prefix-len 2",
           "--prompt-ids 1,2,3 --max-new 2 --snapshot-out x --prefix-len 4",
           "--prompt-ids 1,2,3 --max-new 2 --snapshot-out x --prefix-len 0",
           "--prompt-ids 1,2,3 --max-new 2 --snapshot-out x --snapshot-in " + s,
           "--prompt-ids 1,2,3 --max-new 2 --check-against cpu --snapshot-in " +
               s}) {
    r = run(k3run(args), *dir);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
    EXPECT_TRUE(test::contains(r.err, "error:")) << r.err;
  }
}

//===----------------------------------------------------------------------===//
// Sampling
//===----------------------------------------------------------------------===//

TEST_F(K3RunOptionsTest, SamplingLimitsAndSeeds) {
  const std::string base = k3run("--prompt-ids 1,2,3 --max-new 6 --quiet ");
  // The greedy limits.
  RunResult r = run(base + "--temperature 1e-6", *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3}));
  r = run(base + "--temperature 1 --top-p 1e-9 --seed 3", *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3}));
  // Hot enough to leave the planted path (the made model's top logit is
  // about 100 above the rest): a seed gives one sequence, another seed
  // another.
  const std::string hot = base + "--temperature 100 --top-p 0.9 --seed ";
  RunResult a = run(hot + "5", *dir), b = run(hot + "5", *dir),
            c = run(hot + "6", *dir);
  ASSERT_EQ(a.exitCode, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, line({1, 2, 3}));
  EXPECT_NE(a.out, c.out);
  // Each prompt of a file starts from the seed: the same prompt twice gives
  // the same ids, as when run alone.
  test::writeFile(dir->file("twice.txt"), "1,2,3\n1,2,3\n");
  r = run(k3run("--prompts " + dir->file("twice.txt") +
                " --max-new 6 --quiet --temperature 100 --top-p 0.9 --seed 5"),
          *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "1: " + a.out + "2: " + a.out);

  for (const char *args :
       {"--top-p 0 --temperature 1", "--top-p 1.5 --temperature 1",
        "--top-p nan --temperature 1", "--top-p 0.9", "--seed 1",
        "--temperature 0", "--temperature -1", "--temperature abc",
        "--temperature inf", "--temperature 1 --seed -1",
        "--temperature 1 --check-against cpu"}) {
    r = run(base + args, *dir);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
    EXPECT_TRUE(test::contains(r.err, "error:")) << r.err;
  }
  r = run(base + "--top-p 0", *dir);
  EXPECT_TRUE(test::contains(r.err, "--top-p needs a number in (0, 1]"))
      << r.err;
}

//===----------------------------------------------------------------------===//
// Summary and help
//===----------------------------------------------------------------------===//

TEST_F(K3RunOptionsTest, SummaryReportsPrefillAndDecodeSeparately) {
  RunResult r = run(k3run("--prompt-ids 1,2,3 --max-new 6"), *dir);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, line({1, 2, 3}));
  EXPECT_TRUE(test::contains(r.err, "6 tokens generated (cpu); prefill 3 "
                                    "tokens in "))
      << r.err;
  EXPECT_TRUE(test::contains(r.err, " tokens/s); decode 5 steps in ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

//===----------------------------------------------------------------------===//
// Outputs
//===----------------------------------------------------------------------===//

/// An output that is an input is refused before any work (the input stays
/// as it was); stdout that cannot be written fails the run; a request too
/// long for the plan says so without an overflowed total.
TEST_F(K3RunOptionsTest, OutputsNeverReplaceInputsAndLostStdoutFails) {
  const std::string planBefore = test::readFile(dir->file("m.plan"));
  const std::string configBefore =
      test::readFile(dir->file("model") + "/config.json");
  for (const std::string &target :
       {dir->file("m.plan"), dir->file("model") + "/config.json"}) {
    RunResult r = run(k3run("--prompt-ids 1,2,3 --max-new 2 --logits-out " +
                            target),
                      *dir);
    EXPECT_EQ(r.exitCode, 1) << target << "\n" << r.err;
    EXPECT_NE(r.err.find("the output is the input"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "") << "nothing decoded before the refusal";
  }
  RunResult snap = run(k3run("--prompt-ids 1,2,3 --max-new 1 --snapshot-out " +
                             dir->file("m.plan")),
                       *dir);
  EXPECT_EQ(snap.exitCode, 1) << snap.err;
  EXPECT_EQ(test::readFile(dir->file("m.plan")), planBefore);
  EXPECT_EQ(test::readFile(dir->file("model") + "/config.json"),
            configBefore);

  if (std::filesystem::exists("/dev/full")) {
    RunResult full =
        run("{ " + k3run("--prompt-ids 1,2,3 --max-new 2 >/dev/full") +
                "; echo rc=$?; }",
            *dir);
    EXPECT_EQ(full.out, "rc=1\n") << full.err;
    EXPECT_NE(full.err.find("writing to standard output failed"),
              std::string::npos)
        << full.err;
  }

  RunResult huge =
      run(k3run("--prompt-ids 1,2,3 --max-new 9223372036854775807"), *dir);
  EXPECT_EQ(huge.exitCode, 1) << huge.err;
  EXPECT_NE(huge.err.find("max_new (9223372036854775807) exceeds the plan's "
                          "max_seq of 32"),
            std::string::npos)
      << huge.err;
  EXPECT_EQ(huge.err.find("-922"), std::string::npos) << huge.err;
}

TEST_F(K3RunOptionsTest, HelpExplainsEveryOption) {
  ASSERT_TRUE(writeExecutable(tool(), plan, dir->file("help-model")).isOk());
  for (const std::string &cmd : {tool(), dir->file("help-model")}) {
    RunResult r = run(cmd + " --help", *dir);
    ASSERT_EQ(r.exitCode, 0) << r.err;
    for (const char *opt : {"--weights DIR",
                            "--prompt-ids IDS",
                            "--prompts FILE",
                            "--max-new N",
                            "--stop-ids IDS",
                            "--ignore-eos",
                            "--temperature T",
                            "--top-p P",
                            "--seed S",
                            "--snapshot-out FILE",
                            "--prefix-len N",
                            "--snapshot-in FILE",
                            "--backend cpu|cuda",
                            "--no-cuda-graph",
                            "--host-greedy",
                            "--logits-out FILE",
                            "--quiet",
                            "--check-against cpu",
                            "--profile",
                            "--profile-steps N",
                            "-h,--help",
                            "Examples:",
                            "exit status:"})
      EXPECT_TRUE(test::contains(r.out, opt)) << opt << "\n" << r.out;
  }
}

} // namespace
} // namespace k3
