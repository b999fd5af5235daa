//===- CudaBackendHost_test.cpp - The CUDA backend's host code, no GPU ----===//
//
// The CUDA backend over the fake driver (FakeCudaDriver.cpp, loaded through
// K3C_CUDA_DRIVER) and stub PTX that declares every entry point the backend
// may look up (K3C_PTX_DIR): no kernel runs, so no value is checked here
// (cuda_test does that on a GPU); what is checked is the host code around
// them, in CI and under the sanitizers: binding every tiny plan (the weights
// drawn on the "device" too), steps one by one and as a graph, prompt
// chunks and batches through the multi-row forms, sessions on other threads
// and side by side, every allocation, module, stream, event and graph given
// back when a session ends, and an allocation that fails anywhere in a bind
// ending it with an error that names the call, leaking nothing.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/RankGroup.h"
#include "runtime/exec/Session.h"
#include "runtime/exec/cuda/CudaBackend.h"
#include "runtime/model/Presets.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanKernels.h"
#include "tools/k3-mkmodel/ModelMaker.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/FakeCuda.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace k3;

namespace {

/// A prompt of n ids (t · mul + add) mod 4096 (the real-geometry test's
/// vocabulary).
std::vector<int64_t> promptOf(int64_t n, int64_t mul, int64_t add) {
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < n; ++t)
    ids.push_back((t * mul + add) % 4096);
  return ids;
}

/// FakeCudaDriver.cpp's counters (its Stats).
struct FakeStats {
  long long liveAllocs, liveBytes, liveModules, moduleLoads, launches,
      graphLaunches, liveStreams, liveEvents, liveGraphs, liveExecs,
      liveFunctions;
};

/// Before main: the fake driver and the stub PTX for every CUDA call of
/// this process (the folder removed at exit).
struct FakeDriverSetup {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("k3c-stub-ptx-" + std::to_string(::getpid()));
  FakeDriverSetup() {
    test::writeStubPtx(dir.string());
    ::setenv("K3C_CUDA_DRIVER", K3C_FAKE_CUDA_DRIVER, 1);
    ::setenv("K3C_PTX_DIR", dir.c_str(), 1);
  }
  ~FakeDriverSetup() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};
const FakeDriverSetup kFakeDriver;

FakeStats stats() {
  static void (*fn)(FakeStats *) = [] {
    void *lib = ::dlopen(K3C_FAKE_CUDA_DRIVER, RTLD_NOW | RTLD_LOCAL);
    return lib ? reinterpret_cast<void (*)(FakeStats *)>(
                     ::dlsym(lib, "k3fake_stats"))
               : nullptr;
  }();
  FakeStats s{};
  if (fn)
    fn(&s);
  return s;
}

/// The fake driver's k3fake_<name>(long long).
void fakeCall(const char *name, long long n) {
  void *lib = ::dlopen(K3C_FAKE_CUDA_DRIVER, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  auto fn = reinterpret_cast<void (*)(long long)>(::dlsym(lib, name));
  ASSERT_NE(fn, nullptr) << name;
  fn(n);
  ::dlclose(lib); // the driver's own handle keeps it loaded
}
void failAllocAfter(long long n) { fakeCall("k3fake_fail_alloc_after", n); }

/// Launches of kernel `k3_<kernel>` so far (k3fake_launches_of).
long long launchesOf(const std::string &kernel) {
  void *lib = ::dlopen(K3C_FAKE_CUDA_DRIVER, RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(lib, nullptr) << ::dlerror();
  auto fn = reinterpret_cast<long long (*)(const char *)>(
      ::dlsym(lib, "k3fake_launches_of"));
  EXPECT_NE(fn, nullptr);
  const long long n = fn ? fn(("k3_" + kernel).c_str()) : 0;
  ::dlclose(lib);
  return n;
}
void failLaunchAfter(long long n) { fakeCall("k3fake_fail_launch_after", n); }

/// Nothing the backend holds outlives it: what is live now equals `before`.
void expectAllGivenBack(const FakeStats &before, const std::string &what) {
  const FakeStats now = stats();
  EXPECT_EQ(now.liveAllocs, before.liveAllocs) << what << ": allocations";
  EXPECT_EQ(now.liveBytes, before.liveBytes) << what << ": bytes";
  EXPECT_EQ(now.liveModules, before.liveModules) << what << ": modules";
  EXPECT_EQ(now.liveStreams, before.liveStreams) << what << ": streams";
  EXPECT_EQ(now.liveEvents, before.liveEvents) << what << ": events";
  EXPECT_EQ(now.liveGraphs, before.liveGraphs) << what << ": graphs";
  EXPECT_EQ(now.liveExecs, before.liveExecs) << what << ": graph execs";
}

Expected<PlanDoc> plan(const std::string &preset, const std::string &fusion,
                       int64_t maxBatch = 1) {
  Expected<ModelConfig> c = presetConfig(preset);
  if (!c)
    return c.status();
  return test::compiledPlan(*c, fusion, 256, maxBatch);
}

Expected<std::unique_ptr<Session>> openCuda(const PlanDoc &p, bool graph) {
  return Session::open(p, "synthetic:1", BackendKind::Cuda, graph);
}

const std::vector<int64_t> kPrompt = {1, 17, 300, 42, 5, 999, 123, 64, 7};

} // namespace

TEST(CudaBackendHost, TheFakeDriverIsTheDriver) {
  ASSERT_TRUE(std::filesystem::exists(kFakeDriver.dir / "stub.ptx"));
  Expected<cuda::Driver *> d = cuda::Driver::get();
  ASSERT_TRUE(d) << d.message();
  EXPECT_EQ((*d)->deviceName(), "k3c fake driver (sm_90)");
}

/// Every tiny plan binds, decodes token by token (graph and launch by
/// launch) and in prompt chunks (both prefill forms), and gives back all it
/// took when the session ends.
TEST(CudaBackendHost, BindsStepsAndGivesBackEverything) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *preset : {"tiny", "tiny-linear", "tiny-odd"}) {
    for (const char *fusion : {"none", "default", "max"}) {
      Expected<PlanDoc> p = plan(preset, fusion);
      ASSERT_TRUE(p) << p.message();
      for (bool graph : {true, false}) {
        const std::string what = std::string(preset) + " " + fusion +
                                 (graph ? ", graph" : ", no graph");
        const FakeStats before = stats();
        {
          Expected<std::unique_ptr<Session>> s = openCuda(*p, graph);
          ASSERT_TRUE(s) << what << ": " << s.message();
          const auto &be = dynamic_cast<const CudaBackend &>((*s)->backend());
          EXPECT_EQ(be.usesGraph(), graph) << what;
          EXPECT_GT(be.drawnBytes(), 0u) << what << ": nothing drawn";
          for (PrefillForm form : {PrefillForm::Rows, PrefillForm::Chunk}) {
            ASSERT_TRUE((*s)->setPrefillForm(form));
            GenerateOptions o;
            o.maxNew = 4;
            o.deviceGreedy = false;
            o.prefillChunk = 4; // prompt chunks of several rows
            const long long launches = stats().launches;
            Expected<GenerateResult> g = (*s)->generate(kPrompt, o);
            ASSERT_TRUE(g) << what << ": " << g.message();
            EXPECT_EQ(g->tokens.size(), 4u) << what;
            EXPECT_GT(stats().launches, launches) << what;
          }
        }
        expectAllGivenBack(before, what);
      }
    }
  }
}

/// Weights from files are copied, never drawn, and the draw's kernel is not
/// even loaded; synthetic ones are drawn unless K3C_SYNTHETIC_ON_HOST=1.
TEST(CudaBackendHost, FilesAreCopiedSyntheticWeightsDrawn) {
  K3C_SKIP_WITHOUT_COMPILER();
  Expected<ModelConfig> c = presetConfig("tiny-linear");
  ASSERT_TRUE(c) << c.message();
  Expected<PlanDoc> p = plan("tiny-linear", "default");
  ASSERT_TRUE(p) << p.message();
  test::TempDir dir;
  ASSERT_TRUE(makeModel(*c, 1, dir.path(), {}, 0, Structure::Planted, 0,
                        StoredDtypes::Published));
  // The functions a bound backend looked up (the stub PTX is one module).
  auto bound = [&](const std::string &weights, uint64_t &drawn,
                   long long &functions) {
    const FakeStats before = stats();
    Expected<std::unique_ptr<Session>> s =
        Session::open(*p, weights, BackendKind::Cuda, true);
    ASSERT_TRUE(s) << weights << ": " << s.message();
    drawn = dynamic_cast<const CudaBackend &>((*s)->backend()).drawnBytes();
    functions = stats().liveFunctions - before.liveFunctions;
  };
  uint64_t drawnFiles = 1, drawnMade = 0, drawnOnHost = 1;
  long long fnFiles = 0, fnMade = 0, fnOnHost = 0;
  bound(dir.path(), drawnFiles, fnFiles);
  bound("synthetic:1", drawnMade, fnMade);
  ::setenv("K3C_SYNTHETIC_ON_HOST", "1", 1);
  bound("synthetic:1", drawnOnHost, fnOnHost);
  ::unsetenv("K3C_SYNTHETIC_ON_HOST");
  EXPECT_EQ(drawnFiles, 0u);
  EXPECT_GT(drawnMade, 0u);
  EXPECT_EQ(drawnOnHost, 0u);
  EXPECT_EQ(fnMade, fnFiles + 1) << "the draw's kernel";
  EXPECT_EQ(fnOnHost, fnFiles);
}

/// A batched plan's slots: several sequences a step through the rows forms
/// (the MoE chunk kernels, the device's row choices), joining and leaving.
TEST(CudaBackendHost, BatchesStepRowsAndGiveBackEverything) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *preset : {"tiny", "tiny-linear"}) {
    Expected<PlanDoc> p = plan(preset, "default", 4);
    ASSERT_TRUE(p) << p.message();
    const FakeStats before = stats();
    {
      Expected<std::unique_ptr<Session>> s = openCuda(*p, true);
      ASSERT_TRUE(s) << s.message();
      for (PrefillForm form : {PrefillForm::Rows, PrefillForm::Chunk}) {
        ASSERT_TRUE((*s)->setPrefillForm(form));
        std::vector<SequenceRequest> reqs(6);
        for (size_t i = 0; i < reqs.size(); ++i) {
          reqs[i].prompt =
              std::vector<int64_t>(kPrompt.begin(), kPrompt.begin() + 2 + i);
          reqs[i].options.maxNew = 2 + static_cast<int64_t>(i % 3);
        }
        Expected<BatchResult> r = (*s)->generateBatch(reqs);
        ASSERT_TRUE(r) << preset << ": " << r.message();
        ASSERT_EQ(r->sequences.size(), reqs.size());
        for (size_t i = 0; i < reqs.size(); ++i) {
          ASSERT_TRUE(r->sequences[i]) << r->sequences[i].message();
          EXPECT_EQ(r->sequences[i]->tokens.size(),
                    static_cast<size_t>(reqs[i].options.maxNew));
        }
      }
    }
    expectAllGivenBack(before, preset);
  }
}

/// Sessions opened on one thread step on others, two at a time, each with
/// its own modules (the kernels' module-scope scratch: CudaModules).
TEST(CudaBackendHost, SessionsStepOnOtherThreadsWithTheirOwnModules) {
  K3C_SKIP_WITHOUT_COMPILER();
  Expected<PlanDoc> p = plan("tiny-linear", "default");
  ASSERT_TRUE(p) << p.message();
  const FakeStats before = stats();
  {
    Expected<std::unique_ptr<Session>> a = openCuda(*p, true);
    ASSERT_TRUE(a) << a.message();
    const long long oneSession = stats().liveModules - before.liveModules;
    EXPECT_GT(oneSession, 0);
    Expected<std::unique_ptr<Session>> b = openCuda(*p, false);
    ASSERT_TRUE(b) << b.message();
    EXPECT_EQ(stats().liveModules - before.liveModules, 2 * oneSession)
        << "the second session shares the first one's modules";
    Session *sessions[2] = {a->get(), b->get()};
    std::atomic<int> ready{0};
    Status got[2] = {Status::ok(), Status::ok()};
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)
      threads.emplace_back([&, i] {
        ++ready;
        while (ready.load() < 2) {
        }
        GenerateOptions o;
        o.maxNew = 8;
        o.deviceGreedy = false;
        Expected<GenerateResult> g = sessions[i]->generate(kPrompt, o);
        got[i] = g ? Status::ok() : g.status();
      });
    for (std::thread &t : threads)
      t.join();
    EXPECT_TRUE(got[0]) << got[0].message();
    EXPECT_TRUE(got[1]) << got[1].message();
  }
  expectAllGivenBack(before, "two sessions");
}

/// An allocation that fails anywhere in a bind ends it with an error that
/// names the call and what was being allocated, and gives back what the
/// bind had taken.
TEST(CudaBackendHost, AFailedAllocationIsAnErrorAndLeaksNothing) {
  K3C_SKIP_WITHOUT_COMPILER();
  Expected<PlanDoc> p = plan("tiny", "default");
  ASSERT_TRUE(p) << p.message();
  // How many allocations a bind and a first prompt chunk take.
  FakeStats before = stats();
  long long allocs = 0;
  {
    Expected<std::unique_ptr<Session>> s = openCuda(*p, true);
    ASSERT_TRUE(s) << s.message();
    allocs = stats().liveAllocs - before.liveAllocs;
  }
  ASSERT_GT(allocs, 10);
  for (long long n : {0LL, 1LL, 2LL, allocs / 3, allocs / 2, allocs - 1}) {
    before = stats();
    failAllocAfter(n);
    {
      Expected<std::unique_ptr<Session>> s = openCuda(*p, true);
      failAllocAfter(-1);
      ASSERT_FALSE(s) << "allocation " << n << " failed, the bind did not";
      EXPECT_NE(s.message().find("cuMemAlloc"), std::string::npos)
          << s.message();
      EXPECT_NE(s.message().find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos)
          << s.message();
    }
    expectAllGivenBack(before, "allocation " + std::to_string(n) + " failed");
  }
}

/// A launch the device refuses ends the step with an error that names the
/// launch and its kernel, token by token and in a batch; the session then
/// decodes again from a reset state, and gives back everything at the end.
TEST(CudaBackendHost, AFailedLaunchEndsTheStepNamed) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (bool graph : {false, true}) {
    Expected<PlanDoc> p = plan("tiny-linear", "default", 4);
    ASSERT_TRUE(p) << p.message();
    const FakeStats before = stats();
    {
      Expected<std::unique_ptr<Session>> s = openCuda(*p, graph);
      ASSERT_TRUE(s) << s.message();
      GenerateOptions o;
      o.maxNew = 6;
      o.deviceGreedy = false;
      o.prefillChunk = 1;
      // The launches (kernels and graphs) of a whole decode.
      const FakeStats start = stats();
      ASSERT_TRUE((*s)->generate(kPrompt, o));
      const long long total = stats().graphLaunches - start.graphLaunches +
                              stats().launches - start.launches;
      ASSERT_GT(total, 8);
      for (long long n : {0LL, 7LL, total / 2, total - 1}) {
        failLaunchAfter(n);
        Expected<GenerateResult> g = (*s)->generate(kPrompt, o);
        failLaunchAfter(-1);
        ASSERT_FALSE(g) << "launch " << n << " failed, the decode did not";
        EXPECT_NE(g.message().find("CUDA_ERROR"), std::string::npos)
            << g.message();
        // Where: a plan launch, or the step's graph at its position.
        EXPECT_TRUE(g.message().find("launch ") != std::string::npos ||
                    g.message().find("at position") != std::string::npos)
            << g.message();
        Expected<GenerateResult> again = (*s)->generate(kPrompt, o);
        ASSERT_TRUE(again) << "after a failed launch " << n << ": "
                           << again.message();
        EXPECT_EQ(again->tokens.size(), 6u);
      }
      // A batch: the step fails for its sequences, the session goes on.
      std::vector<SequenceRequest> reqs(3);
      for (SequenceRequest &r : reqs) {
        r.prompt = kPrompt;
        r.options.maxNew = 3;
      }
      failLaunchAfter(50);
      Expected<BatchResult> r = (*s)->generateBatch(reqs);
      failLaunchAfter(-1);
      const bool failed =
          !r || std::any_of(r->sequences.begin(), r->sequences.end(),
                            [](const auto &q) { return !q; });
      EXPECT_TRUE(failed) << "a launch failed, every sequence finished";
      Expected<BatchResult> again = (*s)->generateBatch(reqs);
      ASSERT_TRUE(again) << again.message();
      for (const auto &q : again->sequences)
        EXPECT_TRUE(q) << q.message();
    }
    expectAllGivenBack(before, graph ? "graph" : "no graph");
  }
}

/// The ranks of a tensor-parallel plan on the one "GPU", side by side (no
/// lock between them: each backend has its own modules), their collectives
/// staged through the host; everything given back at the end.
TEST(CudaBackendHost, TensorParallelRanksStepSideBySide) {
#ifndef K3C_TEST_K3C
  GTEST_SKIP() << "needs k3c for the rank plans";
#else
  Expected<ModelConfig> c = presetConfig("tiny-linear");
  ASSERT_TRUE(c) << c.message();
  test::TempDir dir;
  test::writeFile(dir.file("config.json"), writeConfigJson(*c));
  std::vector<PlanDoc> plans;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string out = dir.file("r" + std::to_string(rank) + ".plan");
    test::RunResult r = test::runCommand(
        std::string(K3C_TEST_K3C) + " " + dir.file("config.json") + " -o " +
            out + " --max-seq 64 --tp 2 --rank " + std::to_string(rank),
        dir);
    ASSERT_EQ(r.exitCode, 0) << r.err;
    Expected<PlanDoc> p = parsePlan(test::readFile(out), out);
    ASSERT_TRUE(p) << p.message();
    plans.push_back(p.take());
  }
  const FakeStats before = stats();
  std::atomic<int> decoded{0};
  Status st = runRanks(
      std::move(plans), "synthetic:1", std::chrono::seconds(60),
      [&](int64_t, Session &s) -> Status {
        GenerateOptions o;
        o.maxNew = 5;
        o.deviceGreedy = false;
        Expected<GenerateResult> g = s.generate(kPrompt, o);
        if (!g)
          return g.status();
        if (g->tokens.size() == 5)
          ++decoded;
        return Status::ok();
      },
      BackendKind::Cuda);
  EXPECT_TRUE(st) << st.message();
  EXPECT_EQ(decoded.load(), 2);
  expectAllGivenBack(before, "two ranks");
#endif
}

/// The MoE chunk's variants (K3C_MOE_CHUNK_PLAN, K3C_MOE_CHUNK_ROUTE_GROUPS:
/// their scratch sized and bound on the host), the tensor-core split knob,
/// and a prefix snapshot taken and restored into a batch: no error, nothing
/// leaked (under the sanitizers, no scratch written past its end on the
/// host).
TEST(CudaBackendHost, ChunkVariantsAndSnapshots) {
  K3C_SKIP_WITHOUT_COMPILER();
  Expected<PlanDoc> p = plan("tiny-linear", "default", 4);
  ASSERT_TRUE(p) << p.message();
  struct Knobs {
    const char *plan, *groups, *blocks;
  };
  for (const Knobs &k : {Knobs{"serial", "1", "1"}, Knobs{"parallel", "8", "3"},
                         Knobs{"parallel", "64", "8"}}) {
    ::setenv("K3C_MOE_CHUNK_PLAN", k.plan, 1);
    ::setenv("K3C_MOE_CHUNK_ROUTE_GROUPS", k.groups, 1);
    ::setenv("K3C_MMA_BLOCKS_PER_SM", k.blocks, 1);
    const std::string what = std::string(k.plan) + ", " + k.groups +
                             " groups, " + k.blocks + " blocks per SM";
    const FakeStats before = stats();
    {
      Expected<std::unique_ptr<Session>> s = openCuda(*p, true);
      ASSERT_TRUE(s) << what << ": " << s.message();
      ASSERT_TRUE((*s)->setPrefillForm(PrefillForm::Chunk));
      Expected<PrefixSnapshot> snap =
          (*s)->snapshotPrefix({kPrompt.begin(), kPrompt.begin() + 5});
      ASSERT_TRUE(snap) << what << ": " << snap.message();
      std::vector<SequenceRequest> reqs(5);
      for (size_t i = 0; i < reqs.size(); ++i) {
        reqs[i].prompt = kPrompt;
        reqs[i].options.maxNew = 3;
        if (i % 2 == 0)
          reqs[i].options.prefix = &*snap;
      }
      const long long routes = launchesOf("moe_chunk_route");
      Expected<BatchResult> r = (*s)->generateBatch(reqs);
      ASSERT_TRUE(r) << what << ": " << r.message();
      for (const auto &q : r->sequences)
        EXPECT_TRUE(q) << what << ": " << q.message();
      // The MoE's chunk form ran (the tiny plans' KDA and MLA shapes take
      // no chunk forms: those need the real geometry's clusters).
      EXPECT_GT(launchesOf("moe_chunk_route"), routes) << what;
    }
    expectAllGivenBack(before, what);
  }
  ::unsetenv("K3C_MOE_CHUNK_PLAN");
  ::unsetenv("K3C_MOE_CHUNK_ROUTE_GROUPS");
  ::unsetenv("K3C_MMA_BLOCKS_PER_SM");
}

/// The real Kimi-Linear geometry (five layers, MLA the fourth and the last;
/// 8 experts; a small vocabulary, so that the planted tables are quick to
/// make; the last layer's attention is in the logits tail, which prompt
/// rows skip, the fourth's is not): its KDA
/// and MLA launches are clustered, so a prompt chunk takes the chunk forms
/// of kda_decode and mla_attend_clustered, and a batch the MoE's, the
/// clustered rows form of kda_decode and argmax's rows form.
TEST(CudaBackendHost, RealGeometryTakesTheChunkForms) {
  K3C_SKIP_WITHOUT_COMPILER();
  Expected<ModelConfig> c = presetConfig("kimi-linear-48b", 5, 8);
  ASSERT_TRUE(c) << c.message();
  c->vocabSize = 4096;
  c->bosTokenId = c->eosTokenId = c->padTokenId = -1;
  ASSERT_TRUE(c->validate()) << c->validate().message();
  Expected<PlanDoc> p = test::compiledPlan(*c, "default", 256, 4);
  ASSERT_TRUE(p) << p.message();
  const FakeStats before = stats();
  {
    Expected<std::unique_ptr<Session>> s = openCuda(*p, true);
    ASSERT_TRUE(s) << s.message();
    ASSERT_TRUE((*s)->setPrefillForm(PrefillForm::Chunk));
    const long long kda = launchesOf("kda_decode_chunk"),
                    mla = launchesOf("mla_attend_clustered_chunk"),
                    moe = launchesOf("moe_chunk_route"),
                    kdaRows = launchesOf("kda_decode_rows_clustered"),
                    argmaxRows = launchesOf("argmax_rows"),
                    mlaBatch = launchesOf("mla_attend_clustered_batch");
    std::vector<SequenceRequest> reqs(3);
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].prompt = promptOf(40 + static_cast<int64_t>(i), 37, 11);
      reqs[i].options.maxNew = 3;
    }
    // One sequence's prompt in one chunk (MLA's chunk form takes the rows
    // of one slot), then a batch.
    GenerateOptions o;
    o.maxNew = 3;
    o.deviceGreedy = false;
    Expected<GenerateResult> g = (*s)->generate(reqs[0].prompt, o);
    ASSERT_TRUE(g) << g.message();
    Expected<BatchResult> r = (*s)->generateBatch(reqs);
    ASSERT_TRUE(r) << r.message();
    for (const auto &q : r->sequences)
      EXPECT_TRUE(q) << q.message();
    EXPECT_GT(launchesOf("kda_decode_chunk"), kda);
    EXPECT_GT(launchesOf("mla_attend_clustered_chunk"), mla);
    EXPECT_GT(launchesOf("moe_chunk_route"), moe);
    // The batch's decode rows: kda_decode's clustered rows form.
    EXPECT_GT(launchesOf("kda_decode_rows_clustered"), kdaRows);
    EXPECT_GT(launchesOf("argmax_rows"), argmaxRows);
    // Not the forms off by default (kCudaFormsOffByDefault).
    EXPECT_EQ(launchesOf("mla_attend_clustered_batch"), mlaBatch);
    // A chunk of 16 rows: the projections' narrow tensor-core form (its
    // split's scratch allocated and bound on the host) where one matrix is
    // read, not where several are (off by default), and the MoE's narrow
    // tiles.
    const long long narrow = launchesOf("linear_rows_mma16"),
                    narrowMulti = launchesOf("linear_multi_rows_mma16");
    const long long moeNarrow = launchesOf("moe_chunk_gate_up_narrow"),
                    moeWide = launchesOf("moe_chunk_gate_up");
    Expected<GenerateResult> g16 = (*s)->generate(promptOf(16, 53, 7), o);
    ASSERT_TRUE(g16) << g16.message();
    EXPECT_GT(launchesOf("linear_rows_mma16"), narrow);
    EXPECT_EQ(launchesOf("linear_multi_rows_mma16"), narrowMulti);
    EXPECT_GT(launchesOf("moe_chunk_gate_up_narrow"), moeNarrow);
    EXPECT_EQ(launchesOf("moe_chunk_down_narrow"),
              launchesOf("moe_chunk_gate_up_narrow"));
    EXPECT_EQ(launchesOf("moe_chunk_gate_up"), moeWide);
    // A chunk of 12 rows (kMma16MinRows to 16): the narrow projections too.
    const long long narrow12 = launchesOf("linear_rows_mma16");
    Expected<GenerateResult> g12 = (*s)->generate(promptOf(12, 41, 5), o);
    ASSERT_TRUE(g12) << g12.message();
    EXPECT_GT(launchesOf("linear_rows_mma16"), narrow12);
  }
  {
    // K3C_FORMS_ON=all: the forms off by default too; a name that is not
    // off by default is refused.
    ::setenv("K3C_FORMS_ON", "linear_rows_mma16", 1);
    Expected<std::unique_ptr<Session>> bad = openCuda(*p, true);
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.message().find("K3C_FORMS_ON names 'linear_rows_mma16'"),
              std::string::npos)
        << bad.message();
    ::setenv("K3C_FORMS_ON", "all", 1);
    Expected<std::unique_ptr<Session>> s = openCuda(*p, true);
    ::unsetenv("K3C_FORMS_ON");
    ASSERT_TRUE(s) << s.message();
    ASSERT_TRUE((*s)->setPrefillForm(PrefillForm::Chunk));
    const long long mlaBatch = launchesOf("mla_attend_clustered_batch"),
                    narrowMulti = launchesOf("linear_multi_rows_mma16");
    std::vector<SequenceRequest> reqs(3);
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].prompt = promptOf(20 + static_cast<int64_t>(i), 29, 3);
      reqs[i].options.maxNew = 3;
    }
    Expected<BatchResult> r = (*s)->generateBatch(reqs);
    ASSERT_TRUE(r) << r.message();
    for (const auto &q : r->sequences)
      EXPECT_TRUE(q) << q.message();
    EXPECT_GT(launchesOf("mla_attend_clustered_batch"), mlaBatch);
    GenerateOptions o;
    o.maxNew = 2;
    Expected<GenerateResult> g16 = (*s)->generate(promptOf(16, 53, 7), o);
    ASSERT_TRUE(g16) << g16.message();
    EXPECT_GT(launchesOf("linear_multi_rows_mma16"), narrowMulti);
  }
  {
    // K3C_FORMS_OFF naming the narrow projections: the clustered KDA rows
    // still taken; a name that is no optional form and one of a pair that
    // runs together are refused.
    ::setenv("K3C_FORMS_OFF", "linear_rows_mma16,,linear_multi_rows_mma16,", 1);
    Expected<std::unique_ptr<Session>> s = openCuda(*p, true);
    ASSERT_TRUE(s) << s.message();
    ASSERT_TRUE((*s)->setPrefillForm(PrefillForm::Chunk));
    const long long narrow = launchesOf("linear_multi_rows_mma16") +
                             launchesOf("linear_rows_mma16"),
                    multi = launchesOf("linear_multi_rows"),
                    clustered = launchesOf("kda_decode_rows_clustered");
    // A chunk of 12 rows (more than a pass of the multi-row form), then a
    // batch of 3.
    GenerateOptions o;
    o.maxNew = 2;
    Expected<GenerateResult> g = (*s)->generate(promptOf(12, 41, 5), o);
    ASSERT_TRUE(g) << g.message();
    std::vector<SequenceRequest> reqs(3);
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].prompt = {int64_t(i) + 1, 2, 3};
      reqs[i].options.maxNew = 2;
    }
    Expected<BatchResult> r = (*s)->generateBatch(reqs);
    ASSERT_TRUE(r) << r.message();
    EXPECT_EQ(launchesOf("linear_multi_rows_mma16") +
                  launchesOf("linear_rows_mma16"),
              narrow);
    // 12 rows: the bit-exact multi-row form instead.
    EXPECT_GT(launchesOf("linear_multi_rows"), multi);
    EXPECT_GT(launchesOf("kda_decode_rows_clustered"), clustered);
    ::setenv("K3C_FORMS_OFF", "linear_rows_mma", 1);
    Expected<std::unique_ptr<Session>> bad = openCuda(*p, true);
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.message().find("K3C_FORMS_OFF names 'linear_rows_mma'"),
              std::string::npos)
        << bad.message();
    ::setenv("K3C_FORMS_OFF", "moe_chunk_down_narrow", 1);
    Expected<std::unique_ptr<Session>> half = openCuda(*p, true);
    ASSERT_FALSE(half);
    EXPECT_NE(half.message().find("name both"), std::string::npos)
        << half.message();
    ::unsetenv("K3C_FORMS_OFF");
    // No form waits for its GPU tests now: a name there is refused.
    ::setenv("K3C_GPU_UNTESTED_FORMS", "argmax_rows", 1);
    Expected<std::unique_ptr<Session>> tested = openCuda(*p, true);
    ASSERT_FALSE(tested);
    EXPECT_NE(tested.message().find("K3C_GPU_UNTESTED_FORMS names "
                                    "'argmax_rows'"),
              std::string::npos)
        << tested.message();
    ::unsetenv("K3C_GPU_UNTESTED_FORMS");
  }
  {
    // Every optional form off (K3C_FORMS_OFF=all): the general rows forms
    // and the wide tiles.
    ::setenv("K3C_FORMS_OFF", "all", 1);
    Expected<std::unique_ptr<Session>> s = openCuda(*p, true);
    ::unsetenv("K3C_FORMS_OFF");
    ASSERT_TRUE(s) << s.message();
    const long long general = launchesOf("kda_decode_rows"),
                    clustered = launchesOf("kda_decode_rows_clustered"),
                    argmaxRows = launchesOf("argmax_rows"),
                    narrow = launchesOf("linear_multi_rows_mma16") +
                             launchesOf("linear_rows_mma16"),
                    moeNarrow = launchesOf("moe_chunk_gate_up_narrow"),
                    moeWide = launchesOf("moe_chunk_gate_up");
    std::vector<SequenceRequest> reqs(3);
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].prompt = {1, 2, 3};
      reqs[i].options.maxNew = 3;
    }
    Expected<BatchResult> r = (*s)->generateBatch(reqs);
    ASSERT_TRUE(r) << r.message();
    EXPECT_GT(launchesOf("kda_decode_rows"), general);
    EXPECT_EQ(launchesOf("kda_decode_rows_clustered"), clustered);
    EXPECT_EQ(launchesOf("argmax_rows"), argmaxRows);
    // A chunk of 16 rows: the wide tensor-core tile.
    ASSERT_TRUE((*s)->setPrefillForm(PrefillForm::Chunk));
    GenerateOptions o;
    o.maxNew = 2;
    Expected<GenerateResult> g16 = (*s)->generate(promptOf(16, 53, 7), o);
    ASSERT_TRUE(g16) << g16.message();
    EXPECT_EQ(launchesOf("linear_multi_rows_mma16") +
                  launchesOf("linear_rows_mma16"),
              narrow);
    EXPECT_EQ(launchesOf("moe_chunk_gate_up_narrow"), moeNarrow);
    EXPECT_GT(launchesOf("moe_chunk_gate_up"), moeWide);
  }
  expectAllGivenBack(before, "kimi-linear-48b, 5 layers");
}
