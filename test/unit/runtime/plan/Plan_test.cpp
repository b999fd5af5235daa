//===- Plan_test.cpp - Plan reader/writer and validation ------------------===//
//
// The plan file is a security boundary: each corruption must be reported as
// what it is (truncation, checksum, version, bad index, unknown kernel or
// field), and no mutation of the bytes may crash the reader.
//
//===----------------------------------------------------------------------===//
#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanKernels.h"
#include "runtime/model/Presets.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>

namespace k3 {
namespace {

/// k3c's plan of the tiny preset with `fusion`, without PTX (as a compiler
/// built without CUDA writes it), so that the tests below see the same plan
/// whatever the compiler was built with. The tests using it skip in a build
/// without the compiler (CompiledPlan.h).
PlanDoc tinyPlan(const std::string &fusion = "default") {
  Expected<PlanDoc> p = test::compiledPresetPlan("tiny", fusion, 64);
  EXPECT_TRUE(p.hasValue()) << p.message();
  if (!p)
    return PlanDoc();
  p->kernelModules.clear();
  p->ptxModules.clear();
  return p.take();
}

/// Re-serialises after `edit` so that header and CRC stay consistent: the
/// error must come from validation, not from the checksum.
template <typename F> std::string edited(F &&edit) {
  PlanDoc plan = tinyPlan();
  edit(plan);
  return serializePlan(plan);
}

/// The plan's last `linear` launch: the head (the argmax follows it).
PlanLaunch &lastLinear(PlanDoc &p) {
  for (auto l = p.launches.rbegin(); l != p.launches.rend(); ++l)
    if (l->kernel == "linear")
      return *l;
  return p.launches.back();
}

/// A header for `body` that matches it.
std::string withHeader(const std::string &body, int version = 1) {
  char h[64];
  std::snprintf(h, sizeof(h), "K3CPLAN %d %08x %zu\n", version,
                crc32(body.data(), body.size()), body.size());
  return h + body;
}

TEST(PlanTest, Crc32MatchesZlib) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
}

TEST(PlanTest, TinyPlanValidates) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *fusion : test::kFusionStrategies) {
    PlanDoc plan = tinyPlan(fusion);
    Status s = validatePlan(plan);
    EXPECT_TRUE(s.isOk()) << s.message();
  }
}

TEST(PlanTest, RoundTrip) {
  K3C_SKIP_WITHOUT_COMPILER();
  for (const char *fusion : test::kFusionStrategies) {
    PlanDoc plan = tinyPlan(fusion);
    plan.kernelModules["linear"] = "gemv";
    plan.ptxModules["gemv"] = "// ptx\n.version 8.0\n";
    plan.launches[0].grid = {4, 2, 1};
    plan.launches[0].block = {128, 1, 1};
    plan.launches[0].cluster = {2, 2, 1};
    plan.launches[0].smem = 4096;
    const std::string bytes = serializePlan(plan);
    EXPECT_NE(bytes.find("\"cluster\":[2,2,1]"), std::string::npos);
    Expected<PlanDoc> back = parsePlan(bytes);
    ASSERT_TRUE(back.hasValue()) << back.message();
    EXPECT_TRUE(*back == plan);
    EXPECT_EQ(back->launches[0].cluster, plan.launches[0].cluster);
    // A launch without clusters writes no "cluster" (plans read as before).
    EXPECT_EQ(serializePlan(tinyPlan(fusion)).find("\"cluster\""),
              std::string::npos);
    // And the writer is deterministic.
    EXPECT_EQ(serializePlan(*back), bytes);
  }
}

TEST(PlanTest, FloatArgsKeepTheirKindAndValue) {
  K3C_SKIP_WITHOUT_COMPILER();
  PlanDoc plan = tinyPlan();
  const std::string bytes = serializePlan(plan);
  Expected<PlanDoc> back = parsePlan(bytes);
  ASSERT_TRUE(back.hasValue()) << back.message();
  const PlanArg *eps = back->launches[1].find("normEps");
  if (!eps) // the first launch after embed may be an attn_res_commit
    for (const PlanLaunch &l : back->launches)
      if ((eps = l.find("normEps")))
        break;
  ASSERT_NE(eps, nullptr);
  EXPECT_EQ(eps->kind, PlanArg::Kind::Float);
  EXPECT_EQ(static_cast<float>(eps->floatValue), 1e-5f);
}

/// The logits tail (what a prompt row that asks for no logits skips) starts
/// past the last KDA / MLA state write and holds the lm_head and the argmax;
/// a launch that writes a sequence state, or one the table lacks, ends it.
TEST(PlanTest, LogitsTailStartsPastTheLastStateWrite) {
  K3C_SKIP_WITHOUT_COMPILER();
  EXPECT_EQ(logitsTailStart(PlanDoc()), 0u);
  for (const char *preset : {"tiny", "tiny-linear"})
    for (const char *fusion : test::kFusionStrategies) {
      SCOPED_TRACE(std::string(preset) + " " + fusion);
      Expected<PlanDoc> made = test::compiledPresetPlan(preset, fusion, 64);
      ASSERT_TRUE(made.hasValue()) << made.message();
      PlanDoc plan = made.take();
      const size_t n = plan.launches.size(), tail = logitsTailStart(plan);
      size_t lastState = 0, head = 0;
      for (size_t i = 0; i < n; ++i) {
        const std::string &k = plan.launches[i].kernel;
        if (k == "kda_decode" || k == "mla_cache_append" || k == "kda_step" ||
            k == "kda_conv")
          lastState = i;
        if (k == "linear")
          head = i;
      }
      EXPECT_GT(tail, lastState);
      EXPECT_LE(tail, head);
      EXPECT_EQ(plan.launches.back().kernel, "argmax");
      // A state write at the end leaves no tail; a kernel the table lacks
      // ends the tail after it.
      PlanDoc writes = plan;
      writes.launches.push_back(plan.launches[lastState]);
      EXPECT_EQ(logitsTailStart(writes), n + 1);
      PlanDoc unknown = plan;
      unknown.launches[head].kernel = "no_such_kernel";
      EXPECT_EQ(logitsTailStart(unknown), head + 1);
    }
}

TEST(PlanTest, NotAPlan) {
  EXPECT_ERROR_CONTAINS(parsePlan("hello world"), "not a k3c plan");
  EXPECT_ERROR_CONTAINS(parsePlan(""), "not a k3c plan");
  EXPECT_ERROR_CONTAINS(parsePlan("K3CPLAN 1 zzzzzzzz 5\n{...}"),
                        "checksum is 8 hex digits");
  EXPECT_ERROR_CONTAINS(parsePlan("K3CPLAN 1 00000000"), "header line");
}

TEST(PlanTest, Truncated) {
  K3C_SKIP_WITHOUT_COMPILER();
  const std::string bytes = serializePlan(tinyPlan());
  const std::string cut = bytes.substr(0, bytes.size() - 100);
  EXPECT_ERROR_CONTAINS(parsePlan(cut, "model.plan"), "plan is truncated");
  EXPECT_ERROR_CONTAINS(parsePlan(cut, "model.plan"), "model.plan: ");
  EXPECT_ERROR_CONTAINS(parsePlan(bytes + "xx"), "unexpected bytes");
}

TEST(PlanTest, FlippedByteFailsTheChecksum) {
  K3C_SKIP_WITHOUT_COMPILER();
  std::string bytes = serializePlan(tinyPlan());
  bytes[bytes.size() / 2] ^= 0x20;
  EXPECT_ERROR_CONTAINS(parsePlan(bytes), "checksum mismatch");
}

TEST(PlanTest, BadVersion) {
  K3C_SKIP_WITHOUT_COMPILER();
  const std::string v2 = edited([](PlanDoc &p) { p.version = 2; });
  EXPECT_ERROR_CONTAINS(parsePlan(v2), "plan version 2 is not supported");
  EXPECT_ERROR_CONTAINS(parsePlan(v2), "reads version 1");
  // Header says 1, body says 2.
  const std::string body = serializePlanBody([] {
    PlanDoc p = tinyPlan();
    p.version = 2;
    return p;
  }());
  EXPECT_ERROR_CONTAINS(parsePlan(withHeader(body)), "version 2");
}

TEST(PlanTest, MaxBatch) {
  K3C_SKIP_WITHOUT_COMPILER();
  // k3c --max-batch writes it; it survives the round trip.
  Expected<PlanDoc> batched = test::compiledPresetPlan("tiny", "default", 64);
  ASSERT_TRUE(batched.hasValue()) << batched.message();
  EXPECT_EQ(batched->maxBatch, 1);
  Expected<ModelConfig> c = presetConfig("tiny");
  ASSERT_TRUE(c.hasValue());
  Expected<PlanDoc> four = test::compiledPlan(*c, "default", 64, 4);
  ASSERT_TRUE(four.hasValue()) << four.message();
  EXPECT_EQ(four->maxBatch, 4);
  // Only max_batch differs: the launches, buffers and states are one
  // sequence's, whatever the batch.
  PlanDoc same = *four;
  same.maxBatch = 1;
  EXPECT_TRUE(same == *batched);
  Expected<PlanDoc> back = parsePlan(serializePlan(*four));
  ASSERT_TRUE(back.hasValue()) << back.message();
  EXPECT_EQ(back->maxBatch, 4);
  EXPECT_TRUE(*back == *four);

  // Out of range.
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) { p.maxBatch = 0; })),
                        "max_batch 0 is out of range [1, 1024]");
  EXPECT_ERROR_CONTAINS(
      parsePlan(edited([](PlanDoc &p) { p.maxBatch = 1025; })),
      "max_batch 1025 is out of range [1, 1024]");
  // Not an integer.
  std::string body = serializePlanBody(tinyPlan());
  const std::string key = "\"max_batch\": 1,\n";
  const size_t at = body.find(key);
  ASSERT_NE(at, std::string::npos);
  std::string text = body;
  text.replace(at, key.size(), "\"max_batch\": \"4\",\n");
  EXPECT_ERROR_CONTAINS(parsePlan(withHeader(text)), "max_batch");
  // Absent (a plan written before it): one sequence.
  text = body;
  text.erase(at, key.size());
  Expected<PlanDoc> old = parsePlan(withHeader(text));
  ASSERT_TRUE(old.hasValue()) << old.message();
  EXPECT_EQ(old->maxBatch, 1);
  // Every slot's memory counts against the resident cap.
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.maxBatch = 1024;
                          p.arenaBytes = uint64_t(1) << 30;
                          p.buffers.back().offset = 0;
                        })),
                        "(1024 slots)");
}

/// Moves the launch just added to the front (the plan's argmax must stay
/// its last launch).
void firstLaunch(PlanDoc &p) {
  std::rotate(p.launches.begin(), p.launches.end() - 1, p.launches.end());
}

TEST(PlanTest, TensorParallelFields) {
  K3C_SKIP_WITHOUT_COMPILER();
  // A rank's plan: rank, ranks and each split weight's part survive the
  // round trip.
  const std::string two = edited([](PlanDoc &p) {
    p.rank = 1;
    p.ranks = 2;
    p.weights[0].split = {0, 1, 2};
  });
  Expected<PlanDoc> back = parsePlan(two);
  ASSERT_TRUE(back.hasValue()) << back.message();
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->ranks, 2);
  EXPECT_TRUE(back->weights[0].isSplit());
  EXPECT_EQ(back->weights[0].fullShape()[0], 2 * back->weights[0].shape[0]);
  EXPECT_TRUE(*back == *parsePlan(serializePlan(*back)));
  // A plan of one rank writes neither field.
  EXPECT_EQ(serializePlanBody(tinyPlan()).find("\"ranks\""), std::string::npos);

  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) { p.ranks = 65; })),
                        "ranks 65 is out of range [1, 64]");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.ranks = 2;
                          p.rank = 2;
                        })),
                        "rank 2 is out of range [0, 2)");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.ranks = 2;
                          p.weights[0].split = {0, 0, 4};
                        })),
                        "split as rank 0 of 4, but the plan is rank 0 of 2");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.ranks = 2;
                          p.weights[0].split = {5, 0, 2};
                        })),
                        "split axis 5 is outside the shape's");
  // A collective needs other ranks; an all_gather over the plan's ranks.
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          PlanLaunch &l = p.addLaunch("all_reduce");
                          l.arg("x", PlanArg::buffer(0));
                          l.arg("out", PlanArg::buffer(0));
                          l.arg("n", PlanArg::integer(1));
                          firstLaunch(p); // the argmax stays last
                        })),
                        "the collective 'all_reduce' in a plan of one rank");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.ranks = 2;
                          PlanLaunch &l = p.addLaunch("all_gather");
                          l.arg("x", PlanArg::buffer(0));
                          l.arg("out", PlanArg::buffer(0));
                          l.arg("n", PlanArg::integer(1));
                          l.arg("ranks", PlanArg::integer(4));
                          firstLaunch(p);
                        })),
                        "all_gather over 4 ranks in a plan of 2");
  // A split that is not an object.
  std::string body = serializePlanBody(tinyPlan());
  // (The weights' first key is "name"; the config has a "format" too.)
  const std::string key = "\"weights\": [\n  {";
  const size_t at = body.find(key);
  ASSERT_NE(at, std::string::npos);
  body.insert(at + key.size(), "\"split\": 3, ");
  EXPECT_ERROR_CONTAINS(parsePlan(withHeader(body)), "weights[0].split");
}

TEST(PlanTest, PtxModules) {
  K3C_SKIP_WITHOUT_COMPILER();
  // A kernel naming a module the plan does not carry.
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.kernelModules["linear"] = "gemv";
                        })),
                        "kernels.linear.module: names 'gemv', which "
                        "ptx_modules lacks");
  // Two kernels of one family share one copy of the module's text.
  const std::string bytes = edited([](PlanDoc &p) {
    p.kernelModules["kda_decode"] = "kda";
    p.kernelModules["kda_step"] = "kda";
    p.ptxModules["kda"] = ".entry k3_kda_decode( .entry k3_kda_step(";
  });
  Expected<PlanDoc> back = parsePlan(bytes);
  ASSERT_TRUE(back.hasValue()) << back.message();
  ASSERT_NE(back->ptxFor("kda_step"), nullptr);
  EXPECT_EQ(back->ptxFor("kda_step"), back->ptxFor("kda_decode"));
  EXPECT_EQ(back->ptxFor("linear"), nullptr);
  EXPECT_EQ(bytes.find("k3_kda_step"), bytes.rfind("k3_kda_step"));
  // A kernel entry names its module, nothing else.
  std::string body = bytes.substr(bytes.find('\n') + 1);
  const std::string modules = "\"ptx_modules\"";
  body = body.substr(0, body.find(modules)) + modules + ": {}\n}";
  const size_t k = body.find("\"kernels\"");
  body = body.substr(0, k) +
         "\"kernels\": {\"linear\": {\"pxt\": \".entry k3_linear(\"}},\n" +
         body.substr(body.find(modules));
  EXPECT_ERROR_CONTAINS(parsePlan(withHeader(body)),
                        "kernels.linear: expected {\"module\": \"...\"}");
}

TEST(PlanTest, InvalidJsonBody) {
  EXPECT_ERROR_CONTAINS(parsePlan(withHeader("{\"version\": 1,")),
                        "not valid JSON");
  EXPECT_ERROR_CONTAINS(parsePlan(withHeader("[1, 2]")), "expected a JSON");
  EXPECT_ERROR_CONTAINS(parsePlan(withHeader("{\"version\": 1}")),
                        "max_seq: missing");
}

TEST(PlanTest, OutOfRangeIndices) {
  K3C_SKIP_WITHOUT_COMPILER();
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.launches[0].arg("out", PlanArg::buffer(9999));
                        })),
                        "buffer index 9999 is out of range");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.launches[0].arg("table", PlanArg::weight(-1));
                        })),
                        "weight index -1 is out of range");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          for (PlanLaunch &l : p.launches)
                            if (l.kernel == "kda_decode")
                              l.arg("state", PlanArg::state(500));
                        })),
                        "state index 500 is out of range");
  const int64_t pastTheEnd = static_cast<int64_t>(tinyPlan().buffers.size());
  EXPECT_ERROR_CONTAINS(
      parsePlan(edited([&](PlanDoc &p) { p.logitsBuffer = pastTheEnd; })),
      "logits buffer index " + std::to_string(pastTheEnd));
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.launches[0].arg("out", PlanArg::buffer(0, 1 << 20));
                        })),
                        "offset 1048576 is outside");
}

TEST(PlanTest, BufferOutsideArena) {
  K3C_SKIP_WITHOUT_COMPILER();
  EXPECT_ERROR_CONTAINS(
      parsePlan(edited([](PlanDoc &p) { p.arenaBytes -= 512; })),
      "outside the arena");
  EXPECT_ERROR_CONTAINS(
      parsePlan(edited([](PlanDoc &p) { p.buffers[1].offset += 8; })),
      "not 256-byte aligned");
  EXPECT_ERROR_CONTAINS(
      parsePlan(edited([](PlanDoc &p) { p.buffers[0].dtype = "f16"; })),
      "unknown dtype 'f16'");
}

TEST(PlanTest, UnknownKernelAndField) {
  K3C_SKIP_WITHOUT_COMPILER();
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.launches[2].kernel = "frobnicate";
                        })),
                        "unknown kernel 'frobnicate'");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.launches[0].arg("bogus", PlanArg::integer(1));
                        })),
                        "'bogus' is not a field of EmbedParams");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.launches[0].arg("bogus", PlanArg::integer(1));
                        })),
                        "launch 0 (embed");
}

TEST(PlanTest, WrongArgKinds) {
  K3C_SKIP_WITHOUT_COMPILER();
  // A weight on an output pointer.
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.launches[0].arg("out", PlanArg::weight(0));
                        })),
                        "read-only");
  // A number on a pointer, a pointer on a number, an input on a float.
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.launches[0].arg("out", PlanArg::integer(3));
                        })),
                        "is a pointer field");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          p.launches[0].arg("dim", PlanArg::buffer(0));
                        })),
                        "is an integer field");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          for (PlanLaunch &l : p.launches)
                            if (l.kernel == "rms_norm")
                              l.arg("eps", PlanArg::fromInput(PlanInput::Pos));
                        })),
                        "is a float field");
  // A bf16 buffer where the kernel wants fp32.
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          lastLinear(p).arg("outF32", PlanArg::buffer(0));
                        })),
                        "points to f32 but the buffer holds bf16");
  // A stacked weight on a single WeightRef.
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          int64_t stacked = -1;
                          for (size_t i = 0; i < p.weights.size(); ++i)
                            if (p.weights[i].stacked())
                              stacked = i;
                          lastLinear(p).arg("w", PlanArg::weight(stacked));
                        })),
                        "is stacked");
  // An int32 field out of range.
  EXPECT_ERROR_CONTAINS(parsePlan(edited([](PlanDoc &p) {
                          for (PlanLaunch &l : p.launches)
                            if (l.kernel == "router")
                              l.arg("topK", PlanArg::integer(int64_t(1) << 40));
                        })),
                        "out of range");
}

TEST(PlanTest, VectorWeights) {
  K3C_SKIP_WITHOUT_COMPILER();
  // A plan whose conv filters and o_norm are "vector" weights (bf16 or f32
  // as the checkpoint stores them) validates and round-trips, in every
  // strategy's plan (kda_conv / kda_gated_norm / kda_decode take them).
  for (const char *fusion : test::kFusionStrategies) {
    PlanDoc plan = tinyPlan(fusion);
    Status s = validatePlan(plan);
    EXPECT_TRUE(s.isOk()) << s.message();
    Expected<PlanDoc> back = parsePlan(serializePlan(plan));
    ASSERT_TRUE(back.hasValue()) << back.message();
    EXPECT_TRUE(*back == plan);
  }
  auto vectorPlan = [&](const std::function<void(PlanDoc &)> &edit) {
    PlanDoc plan = tinyPlan("none");
    edit(plan);
    return parsePlan(serializePlan(plan));
  };
  auto weightIndex = [](const PlanDoc &p, const std::string &suffix) {
    for (size_t i = 0; i < p.weights.size(); ++i)
      if (p.weights[i].name.size() >= suffix.size() &&
          p.weights[i].name.compare(p.weights[i].name.size() - suffix.size(),
                                    suffix.size(), suffix) == 0)
        return static_cast<int64_t>(i);
    return int64_t(-1);
  };
  auto firstLaunch = [](PlanDoc &p, const char *kernel) -> PlanLaunch & {
    for (PlanLaunch &l : p.launches)
      if (l.kernel == kernel)
        return l;
    ADD_FAILURE() << "no " << kernel;
    return p.launches[0];
  };
  // A vector weight on a raw pointer field (rms_norm's bf16 `w`).
  EXPECT_ERROR_CONTAINS(
      vectorPlan([&](PlanDoc &p) {
        firstLaunch(p, "rms_norm")
            .arg("w", PlanArg::weight(weightIndex(p, "o_norm.weight")));
      }),
      "only a VectorRef field can take it");
  // A VectorRef field given a buffer, an offset, an MXFP4 or a stacked
  // weight.
  EXPECT_ERROR_CONTAINS(
      vectorPlan([&](PlanDoc &p) {
        firstLaunch(p, "kda_conv").arg("weight", PlanArg::buffer(0));
      }),
      "'weight' is a VectorRef field of KdaConvParams; it "
      "needs a weight, not a buffer");
  EXPECT_ERROR_CONTAINS(vectorPlan([&](PlanDoc &p) {
                          PlanLaunch &l = firstLaunch(p, "kda_gated_norm");
                          PlanArg w = *l.find("weight");
                          w.offset = 2;
                          l.arg("weight", w);
                        }),
                        "an offset is not allowed on a VectorRef field");
  EXPECT_ERROR_CONTAINS(
      vectorPlan([&](PlanDoc &p) {
        int64_t stacked = -1;
        for (size_t i = 0; i < p.weights.size(); ++i)
          if (p.weights[i].stacked())
            stacked = static_cast<int64_t>(i);
        firstLaunch(p, "kda_conv").arg("weight", PlanArg::weight(stacked));
      }),
      "a VectorRef field takes a vector, bf16 or f32 weight");
  // A stacked vector weight, and an unknown format.
  EXPECT_ERROR_CONTAINS(
      vectorPlan([&](PlanDoc &p) {
        p.weights[weightIndex(p, "o_norm.weight")].name =
            "experts.{e}.o_norm.weight";
        p.weights[weightIndex(p, "o_norm.weight")].shape = {2, 64};
      }),
      "a vector weight cannot be stacked");
  EXPECT_ERROR_CONTAINS(vectorPlan([&](PlanDoc &p) {
                          p.weights[weightIndex(p, "o_norm.weight")].format =
                              "f16";
                        }),
                        "unknown format 'f16' (expected bf16, f32, vector or "
                        "mxfp4)");
}

/// One row of docs/PLAN.md's "Kernels (entry points)" table: the kernel
/// name and the params struct (the first word of its column).
struct DocKernel {
  std::string name, params;
};

/// The kernel table of docs/PLAN.md, in order, read from the source tree.
std::vector<DocKernel> docKernelTable() {
  std::ifstream in(std::string(K3C_SOURCE_DIR) + "/docs/PLAN.md");
  EXPECT_TRUE(in.good()) << "cannot read " << K3C_SOURCE_DIR
                         << "/docs/PLAN.md";
  std::vector<DocKernel> rows;
  std::string line;
  bool inTable = false;
  // The first backquoted word of a cell (`linear` -> linear).
  auto quoted = [](const std::string &cell) {
    size_t a = cell.find('`');
    size_t b = a == std::string::npos ? a : cell.find('`', a + 1);
    return b == std::string::npos ? std::string()
                                  : cell.substr(a + 1, b - a - 1);
  };
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      inTable = line.find("Kernels (entry points)") != std::string::npos;
      continue;
    }
    if (!inTable || line.rfind("| `", 0) != 0)
      continue;
    size_t bar = line.find('|', 1);
    if (bar == std::string::npos)
      continue;
    size_t bar2 = line.find('|', bar + 1);
    rows.push_back({quoted(line.substr(1, bar - 1)),
                    quoted(line.substr(bar + 1, bar2 - bar - 1))});
  }
  return rows;
}

TEST(PlanTest, KernelTableFollowsThePlanDoc) {
  // docs/PLAN.md and kernelTable() list the same entry points, in the same
  // order, with the same params structs; a kernel added to one and not the
  // other fails here.
  std::vector<DocKernel> doc = docKernelTable();
  const std::vector<KernelInfo> &table = kernelTable();
  ASSERT_GE(doc.size(), 20u) << "docs/PLAN.md's kernel table was not found "
                                "or has lost rows";
  std::vector<std::string> docNames, tableNames;
  for (const DocKernel &d : doc)
    docNames.push_back(d.name);
  for (const KernelInfo &k : table)
    tableNames.push_back(k.name);
  EXPECT_EQ(docNames, tableNames);
  for (const DocKernel &d : doc) {
    const KernelInfo *k = findKernel(d.name);
    if (!k)
      continue; // reported by the comparison above
    EXPECT_EQ(k->paramsName, d.params) << d.name;
    EXPECT_FALSE(k->fields.empty()) << d.name;
  }
  // A kernel the table does not have is refused by name.
  if (test::haveCompiler())
    EXPECT_ERROR_CONTAINS(
        parsePlan(edited([&](PlanDoc &p) { p.launches[2].kernel = "nope"; })),
        "unknown kernel 'nope'");

  const KernelInfo *lm = findKernel("linear_multi");
  ASSERT_NE(lm, nullptr);
  EXPECT_NE(lm->field("w7"), nullptr);
  EXPECT_NE(lm->field("out7"), nullptr);
  EXPECT_NE(lm->field("n7"), nullptr);
  EXPECT_EQ(lm->field("w8"), nullptr);
}

/// The validator's rules for the step block ({"input": "step"},
/// kernels/common/StepInputs.h): a pointer input of int64 fields only, the
/// scalar input it replaces bound too, written by the last launch only.
TEST(PlanTest, StepBlockRules) {
  const PlanDoc ok = tinyPlan();
  ASSERT_TRUE(validatePlan(ok).isOk());
  ASSERT_EQ(ok.launches.back().kernel, "argmax");
  const PlanArg step = PlanArg::fromInput(PlanInput::Step);
  EXPECT_ERROR_CONTAINS(parsePlan(edited([&](PlanDoc &p) {
                          p.launches[0].arg("vocab", step);
                        })),
                        "the step block binds a pointer field");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([&](PlanDoc &p) {
                          p.launches[0].arg("table", step);
                        })),
                        "is not an int64 pointer");
  EXPECT_ERROR_CONTAINS(
      parsePlan(edited([&](PlanDoc &p) {
        p.launches[0].arg("step", PlanArg::fromInput(PlanInput::Pos));
      })),
      "input 'pos' is a scalar");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([&](PlanDoc &p) {
                          p.launches[0].arg("token", PlanArg::integer(3));
                        })),
                        "with the step block bound, 'token' must be the "
                        "input 'token' too");
  EXPECT_ERROR_CONTAINS(parsePlan(edited([&](PlanDoc &p) {
                          std::swap(p.launches[p.launches.size() - 2],
                                    p.launches.back());
                        })),
                        "only the last launch may write the step block");
}

TEST(PlanTest, FileRoundTrip) {
  K3C_SKIP_WITHOUT_COMPILER();
  test::TempDir dir;
  PlanDoc plan = tinyPlan();
  ASSERT_TRUE(writePlanFile(dir.file("m.plan"), plan).isOk());
  Expected<PlanDoc> back = readPlanFile(dir.file("m.plan"));
  ASSERT_TRUE(back.hasValue()) << back.message();
  EXPECT_TRUE(*back == plan);
  EXPECT_ERROR_CONTAINS(readPlanFile(dir.file("none.plan")), "cannot open");
}

/// Mutated bodies with a valid header: every one must parse or fail cleanly.
TEST(PlanTest, MutationsNeverCrash) {
  K3C_SKIP_WITHOUT_COMPILER();
  const std::string body = serializePlanBody(tinyPlan());
  std::mt19937 rng(1234);
  const char junk[] = "{}[]\":,0123456789-.e \x00\xff";
  int errors = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::string b = body;
    const int edits = 1 + iter % 4;
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % b.size();
      switch (rng() % 3) {
      case 0:
        b[at] = junk[rng() % (sizeof(junk) - 1)];
        break;
      case 1:
        b.erase(at, 1 + rng() % 16);
        break;
      default:
        b.insert(at, 1, junk[rng() % (sizeof(junk) - 1)]);
        break;
      }
      if (b.empty())
        b = "{";
    }
    Expected<PlanDoc> r = parsePlan(withHeader(b));
    if (!r) {
      ++errors;
      EXPECT_FALSE(r.message().empty()) << "iteration " << iter;
      continue;
    }
    // What the reader accepts is a valid plan that writes back to itself
    // (e.g. a digit changed inside a size), not a half-read document.
    Status valid = validatePlan(*r);
    EXPECT_TRUE(valid.isOk()) << "iteration " << iter << ": "
                              << valid.message();
    Expected<PlanDoc> again = parsePlan(serializePlan(*r));
    ASSERT_TRUE(again.hasValue()) << "iteration " << iter << ": "
                                  << again.message();
    EXPECT_TRUE(*again == *r) << "iteration " << iter;
  }
  // Most edits break the JSON or a binding (249 of these 300 did); a reader
  // that accepted nearly everything would not be checking.
  EXPECT_GT(errors, 200);
}

} // namespace
} // namespace k3
