//===- BadInput_test.cpp - Every bad input ends in a clear error ----------===//
//
// One test per class of bad input a fuzzing pass found in the tools' inputs
// (config.json, safetensors headers and shards, plans whose CRC was
// recomputed after an edit, the weights' values): each must end in an error
// that names the file, field or tensor, never in a signal, an allocation
// failure or a hang. Run under ASan/UBSan by `make test-sanitize`.
//
//===----------------------------------------------------------------------===//
#include "kernels/attnres/AttnResParams.h"
#include "kernels/common/BF16.h"
#include "kernels/mla/MlaParams.h"
#include "kernels/moe/MoeCpu.h"
#include "runtime/exec/PlanBinding.h"
#include "runtime/exec/Session.h"
#include "runtime/io/Npy.h"
#include "runtime/io/Safetensors.h"
#include "runtime/model/Config.h"
#include "runtime/model/Presets.h"
#include "runtime/model/Tensors.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanBytes.h"
#include "tools/k3-mkmodel/ModelMaker.h"

#include "test/unit/CompiledPlan.h"
#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

namespace k3 {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

ModelConfig tinyConfig() {
  Expected<ModelConfig> c = presetConfig("tiny");
  EXPECT_TRUE(c.hasValue());
  return *c;
}

/// The tiny config.json after `edit` of its text_config.
template <typename F> std::string editedConfig(F &&edit) {
  json j = json::parse(writeConfigJson(tinyConfig()));
  edit(j["text_config"]);
  return j.dump();
}

//===----------------------------------------------------------------------===//
// config.json
//===----------------------------------------------------------------------===//

TEST(BadConfig, HugeSizesAreRefusedNamingTheField) {
  const std::pair<const char *, int64_t> cases[] = {
      {"num_hidden_layers", int64_t(1) << 40},
      {"num_experts", int64_t(1) << 40},
      {"hidden_size", int64_t(1) << 20},
      {"vocab_size", int64_t(1) << 30},
      {"moe_intermediate_size", int64_t(1) << 40},
      {"kv_lora_rank", int64_t(1) << 58},
      {"num_attention_heads", int64_t(1) << 58},
  };
  for (const auto &[field, value] : cases) {
    const std::string text =
        editedConfig([&](json &t) { t[field] = value; });
    EXPECT_ERROR_CONTAINS(parseConfigText(text, "cfg.json"),
                          std::string("cfg.json: text_config.") + field +
                              " = " + std::to_string(value) +
                              " exceeds the limit");
  }
  EXPECT_ERROR_CONTAINS(parseConfigText(editedConfig([](json &t) {
                          t["linear_attn_config"]["num_heads"] =
                              int64_t(1) << 58;
                        })),
                        "text_config.linear_attn_config.num_heads = "
                        "288230376151711744 exceeds the limit of 1024");
}

TEST(BadConfig, LargestAcceptedSizesStayCheap) {
  // The quantization ignore list no longer walks every expert's names: 1024
  // layers of 65536 MXFP4 experts serialise at once.
  Expected<ModelConfig> c = presetConfig("k3");
  ASSERT_TRUE(c.hasValue());
  ModelConfig big = *c;
  big.numLayers = 1024;
  big.numExperts = 65536;
  big.fullAttnLayers.clear();
  big.kdaLayers.clear();
  for (int64_t n = 1; n <= big.numLayers; ++n)
    (n % 4 == 0 ? big.fullAttnLayers : big.kdaLayers).push_back(n);
  ASSERT_TRUE(big.validate().isOk()) << big.validate().message();
  const std::string text = writeConfigJson(big);
  Expected<ModelConfig> back = parseConfigText(text);
  ASSERT_TRUE(back.hasValue()) << back.message();
  EXPECT_EQ(*back, big);
}

TEST(BadConfig, NegativeTokenIdsAreRefused) {
  EXPECT_ERROR_CONTAINS(parseConfigText(editedConfig([](json &t) {
                          t["bos_token_id"] = -5;
                        })),
                        "text_config.bos_token_id (-5) is outside the "
                        "vocabulary");
}

TEST(BadConfig, DuplicateKeysAreRefused) {
  std::string text = writeConfigJson(tinyConfig());
  const std::string key = "\"hidden_size\": 256,";
  ASSERT_NE(text.find(key), std::string::npos);
  text.replace(text.find(key), key.size(), key + " \"hidden_size\": 512,");
  EXPECT_ERROR_CONTAINS(parseConfigText(text, "cfg.json"),
                        "cfg.json: duplicate key 'hidden_size' in "
                        "text_config");
}

TEST(BadConfig, DeepNestingIsRefusedBeforeParsing) {
  const int depth = 150000;
  const std::string text = "{\"model_type\": " + std::string(depth, '[') +
                           std::string(depth, ']') + "}";
  EXPECT_ERROR_CONTAINS(parseConfigText(text, "cfg.json"),
                        "JSON nested deeper than 64 levels");
}

TEST(BadConfig, OnlyBoundedRegularFilesAreRead) {
  EXPECT_ERROR_CONTAINS(parseConfigFile("/dev/zero"),
                        "/dev/zero: the config file is a character device");
  test::TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("config.json").c_str(), 0600), 0);
  // Would block forever in a plain open().
  EXPECT_ERROR_CONTAINS(parseConfigFile(dir.file("config.json")),
                        "the config file is a FIFO");
  test::writeFile(dir.file("big.json"), std::string((16 << 20) + 1, ' '));
  EXPECT_ERROR_CONTAINS(parseConfigFile(dir.file("big.json")),
                        "more than the 16777216 bytes accepted");
}

//===----------------------------------------------------------------------===//
// safetensors
//===----------------------------------------------------------------------===//

std::string craft(const std::string &header, const std::string &data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

TEST(BadSafetensors, DuplicateTensorNames) {
  test::TempDir dir;
  test::writeFile(
      dir.file("a.safetensors"),
      craft(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
            R"("t":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
            std::string(8, 'x')));
  EXPECT_ERROR_CONTAINS(SafetensorsFile::open(dir.file("a.safetensors")),
                        "a.safetensors: header: duplicate key 't'");
}

TEST(BadSafetensors, DeepHeader) {
  test::TempDir dir;
  test::writeFile(dir.file("a.safetensors"),
                  craft("{\"__metadata__\":" + std::string(100000, '[') +
                            std::string(100000, ']') + "}",
                        ""));
  EXPECT_ERROR_CONTAINS(SafetensorsFile::open(dir.file("a.safetensors")),
                        "nested deeper than 64 levels");
}

TEST(BadSafetensors, ZeroSizedTensorWithHugeDimensions) {
  test::TempDir dir;
  test::writeFile(
      dir.file("a.safetensors"),
      craft(R"({"t":{"dtype":"U8","shape":[4611686018427387904,3,0],)"
            R"("data_offsets":[0,0]}})",
            ""));
  EXPECT_ERROR_CONTAINS(SafetensorsFile::open(dir.file("a.safetensors")),
                        "tensor 't': shape [4611686018427387904, 3, 0] has "
                        "more elements than fit 64 bits");
}

TEST(BadSafetensors, IndexFileChecks) {
  test::TempDir dir;
  ASSERT_EQ(
      ::mkfifo(dir.file("model.safetensors.index.json").c_str(), 0600), 0);
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()),
                        "the shard index is a FIFO");
  fs::remove(dir.file("model.safetensors.index.json"));
  test::writeFile(dir.file("model.safetensors.index.json"),
                  R"({"weight_map": {"a": "x.safetensors", "a": "y"}})");
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()),
                        "duplicate key 'a' in weight_map");
}

TEST(BadSafetensors, ShardSmallerThanItsHeader) {
  test::TempDir dir;
  const std::string path = dir.file("model.safetensors");
  ASSERT_TRUE(writeSafetensors(path, {TensorData{"w", DType::U8, {64},
                                                 std::vector<uint8_t>(64, 1)}})
                  .isOk());
  ASSERT_EQ(::truncate(path.c_str(), fs::file_size(path) - 10), 0);
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()),
                        "the shard is smaller than its header says");
  EXPECT_ERROR_CONTAINS(TensorStore::open(dir.path()), "tensor 'w'");
}

TEST(BadSafetensors, ShardTruncatedOrModifiedAfterLoad) {
  test::TempDir dir;
  const std::string path = dir.file("model.safetensors");
  ASSERT_TRUE(writeSafetensors(path, {TensorData{"w", DType::U8, {4096},
                                                 std::vector<uint8_t>(4096, 1)}})
                  .isOk());
  Expected<TensorStore> store = TensorStore::open(dir.path());
  ASSERT_TRUE(store.hasValue()) << store.message();
  ASSERT_TRUE(store->checkUnchanged().isOk());
  // Truncated while mapped: reading the lost pages would be SIGBUS; the
  // store notices from the size it recorded (without touching the pages).
  ASSERT_EQ(::truncate(path.c_str(), 100), 0);
  EXPECT_ERROR_CONTAINS(store->checkUnchanged(), "model.safetensors: the "
                                                 "shard shrank from");
  Expected<TensorStore> store2 = TensorStore::open(dir.path());
  EXPECT_FALSE(store2.hasValue());
}

//===----------------------------------------------------------------------===//
// Plans (re-serialised after the edit, so the CRC is right)
//===----------------------------------------------------------------------===//

/// One made tiny model for the binding tests.
const test::TempDir &tinyModel() {
  static test::TempDir dir;
  static const bool made = [] {
    Status s = makeModel(tinyConfig(), 5, dir.path());
    EXPECT_TRUE(s.isOk()) << s.message();
    return s.isOk();
  }();
  (void)made;
  return dir;
}

/// k3c's `none` plan of tiny (kda_step and the other finest launches;
/// CompiledPlan.h). The tests using it skip in a build without the compiler.
PlanDoc tinyPlan(const std::string &fusion = "none") {
  Expected<PlanDoc> p = test::compiledPlan(tinyConfig(), fusion, 16);
  EXPECT_TRUE(p.hasValue()) << p.message();
  return p ? p.take() : PlanDoc();
}

/// parsePlan and, when it accepts the plan, the CPU binding: the first
/// error either gives.
Status loadAndBind(const PlanDoc &edited) {
  Expected<PlanDoc> plan = parsePlan(serializePlan(edited), "edited.plan");
  if (!plan)
    return plan.status();
  Expected<std::unique_ptr<Session>> s =
      Session::open(plan.take(), tinyModel().path());
  if (!s)
    return s.status();
  return Status::ok();
}

/// The first launch of `kernel`.
PlanLaunch &launchOf(PlanDoc &plan, const std::string &kernel) {
  for (PlanLaunch &l : plan.launches)
    if (l.kernel == kernel)
      return l;
  ADD_FAILURE() << "no " << kernel << " launch";
  return plan.launches[0];
}

TEST(BadPlan, TheUneditedPlanBinds) {
  K3C_SKIP_WITHOUT_COMPILER();
  Status s = loadAndBind(tinyPlan());
  EXPECT_TRUE(s.isOk()) << s.message();
}

TEST(BadPlan, SizeFieldsThatWouldWrap) {
  K3C_SKIP_WITHOUT_COMPILER();
  // 2^58 heads: numHeads * headDim * 4 bytes wrapped to 0 before.
  PlanDoc p = tinyPlan();
  launchOf(p, "kda_step").arg("numHeads", PlanArg::integer(int64_t(1) << 58));
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "kda_step: numHeads = "
                                        "288230376151711744 is larger than "
                                        "any buffer");
  // Each factor in range, the product not.
  p = tinyPlan();
  launchOf(p, "kda_step")
      .arg("numHeads", PlanArg::integer(int64_t(1) << 30))
      .arg("headDim", PlanArg::integer(int64_t(1) << 30));
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "numHeads * headDim = 1073741824 * "
                                        "1073741824 is larger than any");
  p = tinyPlan();
  launchOf(p, "mla_attend").arg("numHeads", PlanArg::integer(int64_t(1) << 39));
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "mla_attend: numHeads * (nopeDim + "
                                        "ropeDim)");
  p = tinyPlan();
  launchOf(p, "embed").arg("vocab", PlanArg::integer(int64_t(1) << 33));
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "embed: vocab * dim");
}

TEST(BadPlan, FieldsThatSizeAKernelVectorAreCheckedFirst) {
  K3C_SKIP_WITHOUT_COMPILER();
  // The CPU router allocates numExperts floats, moe_experts interDim: each
  // must be covered by a weight before anything is allocated.
  PlanDoc p = tinyPlan();
  launchOf(p, "router").arg("numExperts", PlanArg::integer(int64_t(1) << 39));
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "router: numExperts * dim");
  p = tinyPlan();
  launchOf(p, "moe_experts")
      .arg("interDim", PlanArg::integer(int64_t(1) << 39));
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "'w1' is used as [549755813888, ");
}

/// The folded low-rank gate of kda_decode (tiny's f_b, rank 64): a rank the
/// kernel cannot stage, one its weight does not cover, or none at all.
TEST(BadPlan, FoldedLowRankGateRanks) {
  K3C_SKIP_WITHOUT_COMPILER();
  PlanDoc p = tinyPlan("default");
  ASSERT_NE(launchOf(p, "kda_decode").find("fB"), nullptr);
  EXPECT_TRUE(loadAndBind(p).isOk());
  launchOf(p, "kda_decode").arg("fRank", PlanArg::integer(257));
  EXPECT_ERROR_CONTAINS(loadAndBind(p),
                        "kda_decode: fRank must be at most 256, got 257");
  p = tinyPlan("default");
  launchOf(p, "kda_decode").arg("fRank", PlanArg::integer(128));
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "'fA' needs 128 bf16 elements");
  p = tinyPlan("default");
  launchOf(p, "kda_decode").arg("fRank", PlanArg::integer(0));
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "kda_decode: fRank must be positive");
}

/// The split of a long cache between mla_attend_clustered and mla_attend
/// (MlaAttendParams::handover, optional): never negative, and never above
/// the rows the clustered form attends.
TEST(BadPlan, MlaAttendHandover) {
  K3C_SKIP_WITHOUT_COMPILER();
  PlanDoc p = tinyPlan();
  launchOf(p, "mla_attend").arg("handover", PlanArg::integer(8));
  EXPECT_TRUE(loadAndBind(p).isOk());
  launchOf(p, "mla_attend").arg("handover", PlanArg::integer(-1));
  EXPECT_ERROR_CONTAINS(loadAndBind(p),
                        "mla_attend: handover must be >= 0, got -1");
  p = tinyPlan();
  PlanLaunch &l = launchOf(p, "mla_attend");
  l.kernel = "mla_attend_clustered";
  p.kernelModules.erase("mla_attend");
  EXPECT_TRUE(loadAndBind(p).isOk());
  l.arg("handover", PlanArg::integer(k3::kMlaClusteredMaxRows + 1));
  EXPECT_ERROR_CONTAINS(loadAndBind(p),
                        "mla_attend_clustered: handover must be at most 4096 "
                        "(the clustered form's rows), got 4097");
}

/// attn_res_clustered's limits (AttnResParams.h): at most 9 sources, a
/// hidden size of whole 8-element chunks that one cluster's threads hold;
/// the plan is refused naming the launch, not left to the kernel's NaN.
TEST(BadPlan, AttnResClusteredLimits) {
  K3C_SKIP_WITHOUT_COMPILER();
  // The tiny plan's AttnRes launches take the clustered form (k3c's
  // default); the one-block form binds the same params.
  PlanDoc p = tinyPlan();
  EXPECT_TRUE(loadAndBind(p).isOk());
  launchOf(p, "attn_res_clustered").kernel = "attn_res";
  EXPECT_TRUE(loadAndBind(p).isOk());
  p = tinyPlan();
  launchOf(p, "attn_res_clustered")
      .arg("numBlocks", PlanArg::integer(k3::kAttnResClusterMaxSources));
  EXPECT_ERROR_CONTAINS(loadAndBind(p),
                        "attn_res_clustered: takes at most 9 sources "
                        "(numBlocks + extra), got 10");
  p = tinyPlan();
  launchOf(p, "attn_res_clustered").arg("dim", PlanArg::integer(252));
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "attn_res_clustered: dim must be a "
                                        "multiple of 8 and at most 8192, "
                                        "got 252");
  p = tinyPlan();
  launchOf(p, "attn_res_clustered").arg("dim", PlanArg::integer(8200));
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "at most 8192, got 8200");
}

/// moe_experts_mxfp4 takes only sizes its kernel holds (moeExpertsMxfp4Fits):
/// the tiny plan's experts (128 -> 128), named as that form, are refused
/// with the sizes it needs, before anything runs.
TEST(BadPlan, MoeExpertsMxfp4Limits) {
  K3C_SKIP_WITHOUT_COMPILER();
  PlanDoc p = tinyPlan();
  launchOf(p, "moe_experts").kernel = "moe_experts_mxfp4";
  EXPECT_ERROR_CONTAINS(loadAndBind(p),
                        "moe_experts_mxfp4: dim (128) and interDim (128) "
                        "must be multiples of 512 and at most 4096");
}

/// An L2 prefetch hint (k3-prefetch-weights): any whole 16-byte pieces of a
/// bf16 or f32 weight bind, moving no bytes of their own launch; anything
/// else is refused naming the field.
TEST(BadPlan, L2PrefetchHints) {
  K3C_SKIP_WITHOUT_COMPILER();
  const PlanDoc base = tinyPlan("default");
  int64_t oProj = -1, stacked = -1;
  for (size_t i = 0; i < base.weights.size(); ++i) {
    const PlanWeight &w = base.weights[i];
    if (oProj < 0 && w.format == "bf16" &&
        w.name.find("o_proj.weight") != std::string::npos)
      oProj = static_cast<int64_t>(i);
    if (w.stacked())
      stacked = static_cast<int64_t>(i);
  }
  ASSERT_GE(oProj, 0);
  ASSERT_GE(stacked, 0);
  const PlanWeight &w = base.weights[static_cast<size_t>(oProj)];
  const int64_t bytes = w.shape[0] * w.shape[1] * 2;
  auto hinted = [&](PlanArg target, int64_t n) {
    PlanDoc p = base;
    launchOf(p, "kda_decode")
        .arg("l2Prefetch", target)
        .arg("l2PrefetchBytes", PlanArg::integer(n));
    return p;
  };
  PlanDoc ok = hinted(PlanArg::weight(oProj), bytes);
  EXPECT_TRUE(loadAndBind(ok).isOk()) << loadAndBind(ok).message();
  size_t at = 0;
  while (ok.launches[at].kernel != "kda_decode")
    ++at;
  EXPECT_EQ(launchBytes(ok, at).total(), launchBytes(base, at).total());
  EXPECT_ERROR_CONTAINS(loadAndBind(hinted(PlanArg::weight(oProj), bytes + 16)),
                        "'l2Prefetch' needs " + std::to_string(bytes + 16) +
                            " u8 elements but weight '" + w.name + "' holds " +
                            std::to_string(bytes));
  EXPECT_ERROR_CONTAINS(loadAndBind(hinted(PlanArg::weight(oProj), 8)),
                        "kda_decode: l2PrefetchBytes must be a non-negative "
                        "multiple of 16, got 8");
  EXPECT_ERROR_CONTAINS(loadAndBind(hinted(PlanArg::weight(oProj, 8), 16)),
                        "'l2Prefetch': offset 8 must be a multiple of 16");
  EXPECT_ERROR_CONTAINS(loadAndBind(hinted(PlanArg::buffer(0), 16)),
                        "'l2Prefetch' is an L2 prefetch of KdaDecodeParams; "
                        "it needs a weight, not a buffer");
  EXPECT_ERROR_CONTAINS(loadAndBind(hinted(PlanArg::weight(stacked), 16)),
                        "an L2 prefetch takes a bf16 or f32 weight");
  PlanDoc noBytes = base;
  launchOf(noBytes, "kda_decode").arg("l2Prefetch", PlanArg::weight(oProj));
  EXPECT_ERROR_CONTAINS(loadAndBind(noBytes), "l2PrefetchBytes");
}

TEST(BadPlan, InputsAreCheckedAtTheirSmallestValue) {
  K3C_SKIP_WITHOUT_COMPILER();
  // headDim = pos is 0 at step 0: a division by zero (and an endless loop
  // in the kernel) if only the largest value were checked.
  PlanDoc p = tinyPlan();
  launchOf(p, "kda_l2norm")
      .arg("headDim", PlanArg::fromInput(PlanInput::Pos))
      .arg("n", PlanArg::fromInput(PlanInput::Pos));
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "kda_l2norm: n must be positive, "
                                        "got 0");
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "with the step inputs at token 0, "
                                        "pos 0, length 1");
  // And at the largest: the cache must hold position max_seq - 1.
  p = tinyPlan();
  p.maxSeq = 1 << 20;
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "with the step inputs at token 1023, "
                                        "pos 1048575, length 1048576");
}

TEST(BadPlan, DeepOrDuplicatedJson) {
  K3C_SKIP_WITHOUT_COMPILER();
  std::string body = serializePlanBody(tinyPlan());
  const std::string key = "\"max_seq\": 16";
  ASSERT_NE(body.find(key), std::string::npos);
  std::string dup = body;
  dup.replace(dup.find(key), key.size(), key + ", \"max_seq\": 4096");
  auto withHeader = [](const std::string &b) {
    char h[64];
    std::snprintf(h, sizeof(h), "K3CPLAN 1 %08x %zu\n", crc32(b.data(), b.size()),
                  b.size());
    return h + b;
  };
  EXPECT_ERROR_CONTAINS(parsePlan(withHeader(dup), "m.plan"),
                        "m.plan: duplicate key 'max_seq' in the top-level "
                        "object");
  const std::string deep = "{\"fusion\": " + std::string(150000, '[') +
                           std::string(150000, ']') + "}";
  EXPECT_ERROR_CONTAINS(parsePlan(withHeader(deep), "m.plan"),
                        "nested deeper than 64 levels");
}

TEST(BadPlan, LaunchShapesOutsideCudaLimits) {
  K3C_SKIP_WITHOUT_COMPILER();
  PlanDoc p = tinyPlan();
  p.launches[0].grid = {0, 1, 1};
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "outside CUDA's limits");
  p = tinyPlan();
  p.launches[0].block = {1024, 2, 1};
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "block of 2048 threads exceeds 1024");
  p = tinyPlan();
  p.launches[0].smem = 1 << 20;
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "smem 1048576 bytes exceeds");
  p = tinyPlan();
  p.launches[0].grid = {6, 1, 1};
  p.launches[0].cluster = {4, 1, 1};
  EXPECT_ERROR_CONTAINS(loadAndBind(p),
                        "cluster [4, 1, 1] does not divide the grid [6, 1, 1]");
  p = tinyPlan();
  p.launches[0].grid = {16, 1, 1};
  p.launches[0].cluster = {16, 1, 1};
  EXPECT_ERROR_CONTAINS(loadAndBind(p),
                        "cluster of 16 blocks exceeds the portable 8");
}

TEST(BadPlan, LaunchOrder) {
  K3C_SKIP_WITHOUT_COMPILER();
  // A launch that reads a buffer no earlier launch wrote in this step.
  PlanDoc p = tinyPlan();
  p.launches.insert(p.launches.begin(), p.launches[1]);
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "before any launch of the step "
                                        "writes it");
  // The logits never written.
  p = tinyPlan();
  while (!p.launches.empty() && !p.launches.back().find("outF32"))
    p.launches.pop_back();
  ASSERT_FALSE(p.launches.empty());
  p.launches.pop_back();
  p.probes.clear();
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "is never written by a launch");
}

TEST(BadPlan, MoreResidentMemoryThanAnyGpu) {
  K3C_SKIP_WITHOUT_COMPILER();
  PlanDoc p = tinyPlan();
  p.arenaBytes = uint64_t(1) << 39;
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "more than the 274877906944 (256 "
                                        "GiB) any GPU could hold");
  p = tinyPlan();
  for (PlanWeight &w : p.weights)
    if (w.stacked()) {
      w.shape[0] = 1 << 20;
      break;
    }
  EXPECT_ERROR_CONTAINS(loadAndBind(p), "1048576 experts exceed the limit");
}

//===----------------------------------------------------------------------===//
// Kernels and weights
//===----------------------------------------------------------------------===//

TEST(BadRouting, ExpertIdsOutsideTheTableGiveNaN) {
  // A corrupted router output must not index the expert tables.
  const int64_t D = 32, I = 32, E = 2;
  std::vector<uint16_t> w(I * D, 0x3c00), x(D, 0x3f80), out(D, 0);
  WeightRef ref;
  ref.bf16 = w.data();
  std::vector<WeightRef> table(E, ref);
  const float weights[2] = {0.5f, 0.5f};
  for (std::vector<int32_t> ids : {std::vector<int32_t>{1, 7},
                                   std::vector<int32_t>{-1, 0},
                                   std::vector<int32_t>{0, 1 << 30}}) {
    MoeExpertsParams p;
    p.x = x.data();
    p.ids = ids.data();
    p.weights = weights;
    p.topK = 2;
    p.numExperts = E;
    p.w1 = p.w3 = p.w2 = table.data();
    p.dim = D;
    p.interDim = I;
    p.activation = kActSwiGLU;
    p.out = out.data();
    moeExpertsCpu(p);
    for (int64_t i = 0; i < D; ++i)
      ASSERT_TRUE(std::isnan(bf16ToFloat(out[i]))) << "id " << ids[1];
  }
  std::vector<int32_t> ok = {0, 1};
  MoeExpertsParams p;
  p.x = x.data();
  p.ids = ok.data();
  p.weights = weights;
  p.topK = 2;
  p.numExperts = E;
  p.w1 = p.w3 = p.w2 = table.data();
  p.dim = D;
  p.interDim = I;
  p.activation = kActSwiGLU;
  p.out = out.data();
  moeExpertsCpu(p);
  EXPECT_FALSE(std::isnan(bf16ToFloat(out[0])));
}

/// Overwrites tensor `name` of the single-file checkpoint in `dir` with
/// `value` (bf16 bits) from element `first` on (`count` elements, or to the
/// end).
void poison(const std::string &dir, const std::string &name, uint16_t value,
            int64_t first = 0, int64_t count = -1) {
  std::string file;
  for (const auto &e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") {
      Expected<std::unique_ptr<SafetensorsFile>> f =
          SafetensorsFile::open(e.path().string());
      ASSERT_TRUE(f.hasValue()) << f.message();
      if ((*f)->find(name))
        file = e.path().string();
    }
  ASSERT_FALSE(file.empty()) << "no shard holds " << name;
  const std::string bytes = test::readFile(file);
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | static_cast<uint8_t>(bytes[i]);
  const json header = json::parse(bytes.substr(8, headerLen));
  const uint64_t begin = header[name]["data_offsets"][0];
  const uint64_t end = header[name]["data_offsets"][1];
  const int64_t n = static_cast<int64_t>((end - begin) / 2);
  if (count < 0)
    count = n - first;
  std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
  out.seekp(static_cast<std::streamoff>(8 + headerLen + begin + 2 * first));
  for (int64_t i = 0; i < count; ++i)
    out.write(reinterpret_cast<const char *>(&value), 2);
  ASSERT_TRUE(out.good());
}

TEST(BadWeights, NonFiniteLogitsStopTheDecode) {
  K3C_SKIP_WITHOUT_COMPILER();
  const ModelConfig c = tinyConfig();
  const std::string head = tensorName(
      c, c.tieWordEmbeddings ? TensorId::EmbedTokens : TensorId::LmHead);
  // One lm_head row of +Inf: logit 37 is non-finite, the others are not.
  {
    test::TempDir dir;
    ASSERT_TRUE(makeModel(c, 9, dir.path()).isOk());
    poison(dir.path(), head, 0x7f80, 37 * c.hiddenSize, c.hiddenSize);
    Expected<std::unique_ptr<Session>> s =
        Session::open(tinyPlan("default"), dir.path());
    ASSERT_TRUE(s.hasValue()) << s.message();
    Expected<GenerateResult> r = (*s)->generate({1, 2, 3}, 4);
    EXPECT_ERROR_CONTAINS(r, "decode step 0 (the logits after position 2) "
                             "is not finite: logits[37] = ");
  }
  // NaN weights everywhere in the final norm: every logit NaN (argmax alone
  // would decode "0 0 0 ..." and exit 0).
  {
    test::TempDir dir;
    ASSERT_TRUE(makeModel(c, 9, dir.path()).isOk());
    poison(dir.path(), tensorName(c, TensorId::FinalNorm), 0x7fc0);
    Expected<std::unique_ptr<Session>> s =
        Session::open(tinyPlan("default"), dir.path());
    ASSERT_TRUE(s.hasValue()) << s.message();
    Expected<GenerateResult> r = (*s)->generate({5}, 3);
    EXPECT_ERROR_CONTAINS(r, "decode step 0 (the logits after position 0) "
                             "is not finite: logits[0] = ");
    EXPECT_ERROR_CONTAINS(r, "nan; stopping instead of choosing a token");
  }
}

/// In a batch, the sequence whose logits are not finite ends alone with the
/// message generate() gives; the others decode on and match their decode
/// alone.
TEST(BadWeights, NonFiniteLogitsEndOneSequenceOfABatch) {
  K3C_SKIP_WITHOUT_COMPILER();
  const ModelConfig c = tinyConfig();
  ASSERT_FALSE(c.tieWordEmbeddings);
  test::TempDir dir;
  ASSERT_TRUE(makeModel(c, 9, dir.path()).isOk());
  // Token 13's embedding row NaN: a sequence that feeds it goes non-finite.
  poison(dir.path(), tensorName(c, TensorId::EmbedTokens), 0x7fc0,
         13 * c.hiddenSize, c.hiddenSize);
  Expected<PlanDoc> plan = test::compiledPlan(c, "default", 64, 3);
  ASSERT_TRUE(plan.hasValue()) << plan.message();
  Expected<std::unique_ptr<Session>> s = Session::open(plan.take(), dir.path());
  ASSERT_TRUE(s.hasValue()) << s.message();
  std::vector<SequenceRequest> reqs(4);
  reqs[0].prompt = {1, 2, 3};
  reqs[1].prompt = {4, 13, 5};
  reqs[2].prompt = {6, 7};
  reqs[3].prompt = {8};
  // Chosen on the device (the default: the argmax flags the non-finite
  // row, whose logits then come to the host for the message) and on the
  // host.
  for (bool device : {true, false}) {
    SCOPED_TRACE(device ? "device choice" : "host choice");
    for (SequenceRequest &r : reqs) {
      r.options.maxNew = 6;
      r.options.deviceGreedy = device;
    }
    Expected<BatchResult> b = (*s)->generateBatch(reqs);
    ASSERT_TRUE(b.hasValue()) << b.message();
    EXPECT_ERROR_CONTAINS(b->sequences[1],
                          "decode step 0 (the logits after position 2) is not "
                          "finite: logits[0] = ");
    for (size_t i : {size_t(0), size_t(2), size_t(3)}) {
      ASSERT_TRUE(b->sequences[i].hasValue()) << b->sequences[i].message();
      Expected<GenerateResult> alone = (*s)->generate(reqs[i].prompt, 6);
      ASSERT_TRUE(alone.hasValue()) << alone.message();
      EXPECT_EQ(b->sequences[i]->tokens, alone->tokens) << i;
    }
  }
}

TEST(BadNpy, HugeShapeIsAnError) {
  test::TempDir dir;
  std::string bytes = encodeNpyF32(nullptr, 0, 0);
  const std::string from = "(0, 0)", to = "(4611686018427387904, 8)";
  bytes.replace(bytes.find(from), from.size(), to);
  test::writeFile(dir.file("a.npy"), bytes);
  EXPECT_ERROR_CONTAINS(readNpyF32(dir.file("a.npy")), "is too large");
}

} // namespace
} // namespace k3
