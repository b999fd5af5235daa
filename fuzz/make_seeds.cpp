//===- make_seeds.cpp - Seed inputs for the fuzzers -----------------------===//
//
// Writes small valid inputs of each format into <dir>/<fuzzer>/: the tiny
// presets' config.json (both forms) and a micro model's (every K3 feature,
// two layers, sizes of 32), a small safetensors file with every dtype the
// models use, and the smallest plan with every kind of argument. The
// committed corpus (fuzz/corpus/) was made with it; scripts/fuzz.sh runs it
// again so the seeds follow the formats. The whole decode plans of the micro
// model are k3c's, committed without their PTX (the fuzz build has no
// compiler): fuzz/corpus/plan/micro-{none,default}.json, the bodies of
//   k3c fuzz/corpus/config/micro.json --fusion=none|default --max-seq=8
// less "kernels" and "ptx_modules"; micro-prefetch.json is micro-default with
// an L2 prefetch hint (l2Prefetch, a weight at offset 16, and its bytes) on
// its kda_decode and mla_attend launches.
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Config.h"
#include "runtime/plan/Plan.h"
#include "runtime/model/Presets.h"
#include "runtime/io/Safetensors.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace {

bool write(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  return static_cast<bool>(out);
}

/// Every K3 feature (KDA with conv, MLA with q_lora and an output gate,
/// AttnRes, a dense first layer, latent MXFP4 MoE with a shared expert) at
/// sizes of 32.
k3::ModelConfig microConfig() {
  k3::ModelConfig c = *k3::presetConfig("tiny");
  c.vocabSize = 64;
  c.hiddenSize = 32;
  c.numLayers = 2;
  c.intermediateSize = 32;
  c.kda.numHeads = 1;
  c.kda.headDim = 32;
  c.numAttentionHeads = 1;
  c.numKeyValueHeads = 1;
  c.qLoraRank = 32;
  c.kvLoraRank = 32;
  c.qkNopeHeadDim = 16;
  c.qkRopeHeadDim = 16;
  c.vHeadDim = 16;
  c.numExperts = 4;
  c.numExpertsPerToken = 2;
  c.routedExpertHiddenSize = 32;
  c.moeIntermediateSize = 32;
  c.numSharedExperts = 1;
  c.attnResBlockSize = 1;
  c.maxPositionEmbeddings = 64;
  c.fullAttnLayers = {2};
  c.kdaLayers = {1};
  return c;
}

/// The smallest plan with every kind of argument: embed (a token input),
/// rms_norm, an AttnRes commit into a state, an MLA cache append (a pos
/// input) and the lm_head into the fp32 logits.
k3::PlanDoc minimalPlan(const k3::ModelConfig &c) {
  using A = k3::PlanArg;
  k3::PlanDoc p;
  p.maxSeq = 8;
  p.config = c;
  const int64_t D = c.hiddenSize, V = c.vocabSize, W = c.mlaCacheWidth();
  const A x = A::buffer(p.addBuffer("x", "bf16", D));
  const A n = A::buffer(p.addBuffer("n", "bf16", D));
  p.logitsBuffer = p.addBuffer("logits", "f32", V);
  const std::string mp = c.tensorPrefix + "model.";
  auto w = [&](const std::string &name, std::vector<int64_t> shape) {
    return A::weight(p.addWeight(name, "bf16", shape));
  };
  p.addLaunch("embed")
      .arg("table", w(mp + "embed_tokens.weight", {V, D}))
      .arg("vocab", A::integer(V))
      .arg("dim", A::integer(D))
      .arg("token", A::fromInput(k3::PlanInput::Token))
      .arg("out", x);
  p.addLaunch("attn_res_commit")
      .arg("src", x)
      .arg("blocks", A::state(p.addState("blocks", "attn_res_blocks", {2, D})))
      .arg("index", A::integer(1))
      .arg("dim", A::integer(D));
  p.addLaunch("rms_norm")
      .arg("x", x)
      .arg("w", w(mp + "norm.weight", {D}))
      .arg("out", n)
      .arg("n", A::integer(D))
      .arg("eps", A::number(1e-5));
  p.addLaunch("mla_cache_append")
      .arg("kv", n)
      .arg("normWeight", w(mp + "layers.1.self_attn.kv_a_layernorm.weight",
                           {c.kvLoraRank}))
      .arg("eps", A::number(1e-5))
      .arg("cache", A::state(p.addState("mla", "mla_cache", {8, W})))
      .arg("pos", A::fromInput(k3::PlanInput::Pos))
      .arg("kvLoraRank", A::integer(c.kvLoraRank))
      .arg("ropeDim", A::integer(c.qkRopeHeadDim));
  p.addLaunch("linear")
      .arg("x", n)
      .arg("w", w(c.tensorPrefix + "lm_head.weight", {V, D}))
      .arg("n", A::integer(V))
      .arg("k", A::integer(D))
      .arg("outF32", A::buffer(p.logitsBuffer));
  return p;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  namespace fs = std::filesystem;
  const fs::path dir = argv[1];
  for (const char *sub : {"config", "safetensors", "plan"})
    fs::create_directories(dir / sub);
  bool ok = true;

  ok &= write(dir / "config" / "tiny.json",
              k3::writeConfigJson(*k3::presetConfig("tiny")));
  ok &= write(dir / "config" / "tiny-linear.json",
              k3::writeConfigJson(*k3::presetConfig("tiny-linear")));
  const k3::ModelConfig micro = microConfig();
  if (k3::Status s = micro.validate(); !s) {
    std::fprintf(stderr, "make_seeds: %s\n", s.message().c_str());
    return 1;
  }
  ok &= write(dir / "config" / "micro.json", k3::writeConfigJson(micro));

  std::vector<k3::TensorData> tensors = {
      {"model.norm.weight", k3::DType::BF16, {4}, std::vector<uint8_t>(8, 1)},
      {"A_log", k3::DType::F32, {1, 1, 2, 1}, std::vector<uint8_t>(8, 2)},
      {"experts.0.w1.weight_packed", k3::DType::U8, {2, 16},
       std::vector<uint8_t>(32, 3)},
      {"experts.0.w1.weight_scale", k3::DType::U8, {2, 1},
       std::vector<uint8_t>(2, 127)},
      {"empty", k3::DType::F32, {0, 3}, {}},
  };
  const std::string st = (dir / "safetensors" / "small.safetensors").string();
  ok &= k3::writeSafetensors(st, tensors, {{"format", "pt"}}).isOk();

  const k3::PlanDoc minimal = minimalPlan(micro);
  if (k3::Status s = k3::validatePlan(minimal); !s) {
    std::fprintf(stderr, "make_seeds: %s\n", s.message().c_str());
    return 1;
  }
  ok &= write(dir / "plan" / "minimal.json", k3::serializePlanBody(minimal));
  // One whole file, header included (the header checks).
  ok &= write(dir / "plan" / "minimal.plan", k3::serializePlan(minimal));
  if (!ok) {
    std::fprintf(stderr, "make_seeds: cannot write into %s\n", argv[1]);
    return 1;
  }
  return 0;
}
