//===- Config_test.cpp - config.json parsing, validation, round trip ------===//
//
// The two literals below mirror the field layout of the published configs
// (K3: text model under text_config plus a compressed-tensors
// quantization_config; Kimi-Linear: fields at top level, nulls where the
// model has no such feature) at small sizes. Each validation error has a
// test that checks the message names the offending field.
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Config.h"
#include "runtime/model/Presets.h"

#include "test/unit/TestUtil.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace k3;
using json = nlohmann::json;

namespace {

const char *kK3Json = R"json({
  "architectures": ["KimiK3ForConditionalGeneration"],
  "model_type": "kimi_k3",
  "auto_map": {"AutoConfig": "configuration_kimi_k3.KimiK3Config"},
  "vision_config": {"hidden_size": 64, "num_hidden_layers": 2},
  "tie_word_embeddings": false,
  "text_config": {
    "model_type": "kimi_linear",
    "vocab_size": 1024,
    "hidden_size": 256,
    "num_hidden_layers": 8,
    "intermediate_size": 512,
    "hidden_act": "situ",
    "activation_situ_beta": 4.0,
    "activation_situ_linear_beta": 25.0,
    "rms_norm_eps": 1e-05,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": 128,
    "kv_lora_rank": 64,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 32,
    "v_head_dim": 32,
    "mla_use_nope": true,
    "mla_use_output_gate": true,
    "linear_attn_config": {
      "full_attn_layers": [4, 8],
      "kda_layers": [1, 2, 3, 5, 6, 7],
      "num_heads": 4,
      "head_dim": 64,
      "short_conv_kernel_size": 4,
      "use_full_rank_gate": true,
      "gate_lower_bound": -5.0
    },
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "num_experts": 16,
    "num_experts_per_token": 4,
    "moe_intermediate_size": 128,
    "num_shared_experts": 2,
    "routed_expert_hidden_size": 128,
    "latent_moe_use_norm": true,
    "moe_router_activation_func": "sigmoid",
    "topk_method": "noaux_tc",
    "use_grouped_topk": true,
    "num_expert_group": 1,
    "topk_group": 1,
    "moe_renormalize": true,
    "routed_scaling_factor": 1.0,
    "attn_res_block_size": 3,
    "max_position_embeddings": 4096,
    "rope_theta": 50000.0,
    "bos_token_id": 1,
    "eos_token_id": [2, 3],
    "pad_token_id": 0,
    "torch_dtype": "bfloat16"
  },
  "quantization_config": {
    "quant_method": "compressed-tensors",
    "format": "mxfp4-pack-quantized",
    "quantization_status": "compressed",
    "config_groups": {
      "group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 4, "type": "float", "group_size": 32,
                    "strategy": "group", "symmetric": true, "dynamic": false},
        "input_activations": null,
        "format": "mxfp4-pack-quantized"
      }
    },
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*"],
    "kv_cache_scheme": null
  }
})json";

const char *kLinearJson = R"json({
  "architectures": ["KimiLinearForCausalLM"],
  "auto_map": {"AutoConfig": "configuration_kimi.KimiLinearConfig",
               "AutoModel": "modeling_kimi.KimiLinearModel"},
  "model_type": "kimi_linear",
  "vocab_size": 1024,
  "hidden_size": 256,
  "num_hidden_layers": 8,
  "intermediate_size": 512,
  "hidden_act": "silu",
  "rms_norm_eps": 1e-05,
  "tie_word_embeddings": false,
  "num_attention_heads": 4,
  "num_key_value_heads": 4,
  "q_lora_rank": null,
  "kv_lora_rank": 64,
  "qk_nope_head_dim": 32,
  "qk_rope_head_dim": 32,
  "v_head_dim": 32,
  "mla_use_nope": true,
  "linear_attn_config": {
    "full_attn_layers": [4, 8],
    "kda_layers": [1, 2, 3, 5, 6, 7],
    "num_heads": 4,
    "head_dim": 64,
    "short_conv_kernel_size": 4
  },
  "first_k_dense_replace": 1,
  "moe_layer_freq": 1,
  "num_experts": 16,
  "num_experts_per_token": 4,
  "moe_intermediate_size": 128,
  "num_shared_experts": 1,
  "moe_router_activation_func": "sigmoid",
  "topk_method": "noaux_tc",
  "use_grouped_topk": true,
  "num_expert_group": 1,
  "topk_group": 1,
  "moe_renormalize": true,
  "routed_scaling_factor": 2.446,
  "max_position_embeddings": 4096,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "pad_token_id": null,
  "use_cache": true,
  "torch_dtype": "bfloat16"
})json";

/// Parses `j` and expects an error whose message contains `needle`.
void expectParseError(const json &j, const std::string &needle) {
  Expected<ModelConfig> c = parseConfigText(j.dump(), "test.json");
  ASSERT_FALSE(c) << "expected an error mentioning " << needle;
  EXPECT_TRUE(test::contains(c.message(), needle))
      << "message: " << c.message() << "\nwanted: " << needle;
  EXPECT_TRUE(test::contains(c.message(), "test.json"))
      << "the origin is missing: " << c.message();
}

json k3Json() { return json::parse(kK3Json); }
json linearJson() { return json::parse(kLinearJson); }

} // namespace

//===----------------------------------------------------------------------===//
// Accepted forms
//===----------------------------------------------------------------------===//

TEST(Config, ParsesK3Form) {
  Expected<ModelConfig> c = parseConfigText(kK3Json);
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->modelType, "kimi_k3");
  EXPECT_EQ(c->tensorPrefix, "language_model.");
  EXPECT_EQ(c->vocabSize, 1024);
  EXPECT_EQ(c->hiddenSize, 256);
  EXPECT_EQ(c->numLayers, 8);
  EXPECT_EQ(c->intermediateSize, 512);
  EXPECT_EQ(c->hiddenAct, Activation::SiTU);
  EXPECT_EQ(c->situBeta, 4.0f);
  EXPECT_TRUE(c->hasSituLinearBeta);
  EXPECT_EQ(c->situLinearBeta, 25.0f);
  EXPECT_EQ(c->rmsNormEps, 1e-5f);
  EXPECT_FALSE(c->tieWordEmbeddings);
  EXPECT_EQ(c->numAttentionHeads, 4);
  EXPECT_EQ(c->qLoraRank, 128);
  EXPECT_EQ(c->kvLoraRank, 64);
  EXPECT_EQ(c->qkNopeHeadDim, 32);
  EXPECT_EQ(c->qkRopeHeadDim, 32);
  EXPECT_EQ(c->vHeadDim, 32);
  EXPECT_TRUE(c->mlaUseNope);
  EXPECT_TRUE(c->mlaUseOutputGate);
  EXPECT_EQ(c->kda.numHeads, 4);
  EXPECT_EQ(c->kda.headDim, 64);
  EXPECT_EQ(c->kda.convSize, 4);
  EXPECT_TRUE(c->kda.fullRankGate);
  EXPECT_TRUE(c->kda.hasLowerBound);
  EXPECT_EQ(c->kda.gateLowerBound, -5.0f);
  EXPECT_EQ(c->fullAttnLayers, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(c->kdaLayers, (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(c->firstKDenseReplace, 1);
  EXPECT_EQ(c->numExperts, 16);
  EXPECT_EQ(c->numExpertsPerToken, 4);
  EXPECT_EQ(c->moeIntermediateSize, 128);
  EXPECT_EQ(c->numSharedExperts, 2);
  EXPECT_EQ(c->routedExpertHiddenSize, 128);
  EXPECT_TRUE(c->latentMoeUseNorm);
  EXPECT_TRUE(c->useGroupedTopk); // allowed: one group
  EXPECT_EQ(c->routedScalingFactor, 1.0f);
  EXPECT_TRUE(c->expertsMxfp4);
  EXPECT_EQ(c->attnResBlockSize, 3);
  EXPECT_EQ(c->maxPositionEmbeddings, 4096);
  EXPECT_EQ(c->bosTokenId, 1);
  EXPECT_EQ(c->eosTokenId, 2); // first of a list
  EXPECT_EQ(c->padTokenId, 0);
  // Derived helpers.
  EXPECT_TRUE(c->isMlaLayer(3));
  EXPECT_TRUE(c->isMlaLayer(7));
  EXPECT_FALSE(c->isMlaLayer(0));
  EXPECT_TRUE(c->isDenseLayer(0));
  EXPECT_FALSE(c->isDenseLayer(1));
  EXPECT_TRUE(c->hasAttnRes());
  EXPECT_TRUE(c->hasLatentMoe());
  EXPECT_EQ(c->moeHiddenSize(), 128);
  EXPECT_EQ(c->kdaChannels(), 256);
  EXPECT_EQ(c->mlaCacheWidth(), 96);
}

TEST(Config, ParsesKimiLinearForm) {
  Expected<ModelConfig> c = parseConfigText(kLinearJson);
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->modelType, "kimi_linear");
  EXPECT_EQ(c->tensorPrefix, "");
  EXPECT_EQ(c->hiddenAct, Activation::SiLU);
  EXPECT_FALSE(c->hasSituLinearBeta);
  EXPECT_EQ(c->qLoraRank, 0); // null: direct q_proj
  EXPECT_FALSE(c->mlaUseOutputGate);
  EXPECT_FALSE(c->kda.fullRankGate);
  EXPECT_FALSE(c->kda.hasLowerBound);
  EXPECT_EQ(c->routedExpertHiddenSize, 0); // absent: no latent MoE
  EXPECT_FALSE(c->hasLatentMoe());
  EXPECT_EQ(c->moeHiddenSize(), 256);
  EXPECT_EQ(c->numSharedExperts, 1);
  EXPECT_EQ(c->attnResBlockSize, 0); // absent: plain residuals
  EXPECT_FALSE(c->hasAttnRes());
  EXPECT_FALSE(c->expertsMxfp4);
  EXPECT_EQ(c->routedScalingFactor, 2.446f);
  EXPECT_EQ(c->padTokenId, -1); // null
}

TEST(Config, NullsMeanAbsent) {
  json j = k3Json();
  json &t = j["text_config"];
  t["q_lora_rank"] = nullptr;
  t["attn_res_block_size"] = nullptr;
  t["activation_situ_linear_beta"] = nullptr;
  t["linear_attn_config"]["gate_lower_bound"] = nullptr;
  t.erase("routed_expert_hidden_size");
  t["moe_intermediate_size"] = 128;
  Expected<ModelConfig> c = parseConfigText(j.dump());
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->qLoraRank, 0);
  EXPECT_EQ(c->attnResBlockSize, 0);
  EXPECT_FALSE(c->hasSituLinearBeta);
  EXPECT_FALSE(c->kda.hasLowerBound);
  EXPECT_EQ(c->routedExpertHiddenSize, 0);

  t.erase("attn_res_block_size");
  t["linear_attn_config"].erase("gate_lower_bound");
  c = parseConfigText(j.dump());
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->attnResBlockSize, 0);
  EXPECT_FALSE(c->kda.hasLowerBound);
}

TEST(Config, TiedEmbeddingsAtEitherLevel) {
  json j = k3Json();
  j["tie_word_embeddings"] = true;
  Expected<ModelConfig> c = parseConfigText(j.dump());
  ASSERT_TRUE(c) << c.message();
  EXPECT_TRUE(c->tieWordEmbeddings);

  j.erase("tie_word_embeddings");
  j["text_config"]["tie_word_embeddings"] = true;
  c = parseConfigText(j.dump());
  ASSERT_TRUE(c) << c.message();
  EXPECT_TRUE(c->tieWordEmbeddings);

  json l = linearJson();
  l["tie_word_embeddings"] = true;
  c = parseConfigText(l.dump());
  ASSERT_TRUE(c) << c.message();
  EXPECT_TRUE(c->tieWordEmbeddings);
}

TEST(Config, K3TokenIdsAtTopLevel) {
  json j = k3Json();
  j["text_config"].erase("bos_token_id");
  j["text_config"]["eos_token_id"] = nullptr;
  j["bos_token_id"] = 7;
  j["eos_token_id"] = 8;
  Expected<ModelConfig> c = parseConfigText(j.dump());
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->bosTokenId, 7);
  EXPECT_EQ(c->eosTokenId, 8);
  EXPECT_EQ(c->padTokenId, 0); // text_config wins where it has a value
}

TEST(Config, QuantizationFormatInGroupOnly) {
  json j = k3Json();
  j["quantization_config"].erase("format");
  Expected<ModelConfig> c = parseConfigText(j.dump());
  ASSERT_TRUE(c) << c.message();
  EXPECT_TRUE(c->expertsMxfp4);
  j.erase("quantization_config");
  c = parseConfigText(j.dump());
  ASSERT_TRUE(c) << c.message();
  EXPECT_FALSE(c->expertsMxfp4);
}

TEST(Config, ParseFile) {
  test::TempDir dir;
  test::writeFile(dir.file("config.json"), kK3Json);
  Expected<ModelConfig> c = parseConfigFile(dir.file("config.json"));
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->hiddenSize, 256);
  EXPECT_ERROR_CONTAINS(parseConfigFile(dir.file("nope.json")), "nope.json");
}

//===----------------------------------------------------------------------===//
// Round trip
//===----------------------------------------------------------------------===//

TEST(Config, RoundTripLiterals) {
  for (const char *text : {kK3Json, kLinearJson}) {
    Expected<ModelConfig> c = parseConfigText(text);
    ASSERT_TRUE(c) << c.message();
    std::string written = writeConfigJson(*c);
    Expected<ModelConfig> back = parseConfigText(written, "written");
    ASSERT_TRUE(back) << back.message() << "\n" << written;
    EXPECT_TRUE(*back == *c) << written;
  }
}

TEST(Config, RoundTripPresets) {
  for (const std::string &name : presetNames()) {
    Expected<ModelConfig> c = presetConfig(name);
    ASSERT_TRUE(c) << name << ": " << c.message();
    std::string written = writeConfigJson(*c);
    Expected<ModelConfig> back = parseConfigText(written, name);
    ASSERT_TRUE(back) << back.message();
    EXPECT_TRUE(*back == *c) << name << "\n" << written;
  }
}

TEST(Config, RoundTripOddValues) {
  Expected<ModelConfig> c0 = presetConfig("tiny-linear");
  ASSERT_TRUE(c0);
  ModelConfig c = *c0;
  c.rmsNormEps = 1e-6f;
  c.routedScalingFactor = 2.8269f;
  c.situBeta = 3.3f; // a SiLU model with non-default betas keeps them
  c.hasSituLinearBeta = true;
  c.situLinearBeta = 0.1f;
  c.tieWordEmbeddings = true;
  c.kda.hasLowerBound = true;
  c.kda.gateLowerBound = -0.3f;
  c.eosTokenId = -1;
  Expected<ModelConfig> back = parseConfigText(writeConfigJson(c));
  ASSERT_TRUE(back) << back.message();
  EXPECT_TRUE(*back == c);
}

TEST(Config, WrittenK3FormHasTheContractFields) {
  Expected<ModelConfig> c = presetConfig("tiny");
  ASSERT_TRUE(c);
  json j = json::parse(writeConfigJson(*c));
  EXPECT_EQ(j["model_type"], "kimi_k3");
  EXPECT_EQ(j["architectures"],
            json::array({"KimiK3ForConditionalGeneration"}));
  EXPECT_EQ(j["text_config"]["model_type"], "kimi_linear");
  EXPECT_EQ(j["text_config"]["hidden_size"], 256);
  const json &q = j["quantization_config"];
  EXPECT_EQ(q["quant_method"], "compressed-tensors");
  EXPECT_EQ(q["config_groups"]["group_0"]["format"], "mxfp4-pack-quantized");
  // The ignore list names what stays bf16 and no routed expert.
  std::vector<std::string> ignore = q["ignore"];
  auto has = [&](const std::string &m) {
    return std::find(ignore.begin(), ignore.end(), m) != ignore.end();
  };
  EXPECT_TRUE(has("language_model.lm_head"));
  EXPECT_TRUE(has("language_model.model.layers.1.block_sparse_moe.gate"));
  EXPECT_TRUE(has(
      "language_model.model.layers.1.block_sparse_moe.shared_experts.up_proj"));
  EXPECT_TRUE(has("language_model.model.layers.1.block_sparse_moe."
                  "routed_expert_down_proj"));
  EXPECT_TRUE(has("language_model.model.layers.3.self_attn.kv_b_proj"));
  EXPECT_TRUE(has("language_model.model.layers.2.mlp_res_proj"));
  EXPECT_TRUE(has("language_model.model.output_attn_res_proj"));
  for (const std::string &m : ignore)
    EXPECT_FALSE(test::contains(m, ".experts.")) << m;

  Expected<ModelConfig> l = presetConfig("tiny-linear");
  ASSERT_TRUE(l);
  json lj = json::parse(writeConfigJson(*l));
  EXPECT_EQ(lj["model_type"], "kimi_linear");
  EXPECT_FALSE(lj.contains("text_config"));
  EXPECT_FALSE(lj.contains("quantization_config"));
  EXPECT_TRUE(lj["q_lora_rank"].is_null());
  EXPECT_FALSE(lj.contains("attn_res_block_size"));
  EXPECT_FALSE(lj.contains("routed_expert_hidden_size"));
}

//===----------------------------------------------------------------------===//
// Errors: each names the field
//===----------------------------------------------------------------------===//

TEST(ConfigErrors, InvalidJson) {
  EXPECT_ERROR_CONTAINS(parseConfigText("{\"model_type\": ", "bad.json"),
                        "bad.json: invalid JSON");
  EXPECT_ERROR_CONTAINS(parseConfigText("[1, 2]"), "top level");
}

TEST(ConfigErrors, UnknownModelType) {
  json j = linearJson();
  j["model_type"] = "llama";
  expectParseError(j, "model_type: unknown model_type 'llama'");
  j.erase("model_type");
  expectParseError(j, "model_type is missing");
  json k = k3Json();
  k["text_config"]["model_type"] = "deepseek_v3";
  expectParseError(k, "text_config.model_type");
  k = k3Json();
  k.erase("text_config");
  expectParseError(k, "text_config is missing");
}

TEST(ConfigErrors, MissingRequiredField) {
  json j = k3Json();
  j["text_config"].erase("hidden_size");
  expectParseError(j, "required field text_config.hidden_size is missing");
  j = linearJson();
  j["linear_attn_config"].erase("num_heads");
  expectParseError(j, "linear_attn_config.num_heads is missing");
  j = linearJson();
  j.erase("linear_attn_config");
  expectParseError(j, "linear_attn_config is missing");
}

TEST(ConfigErrors, WrongJsonType) {
  json j = k3Json();
  j["text_config"]["hidden_size"] = "256";
  expectParseError(j, "text_config.hidden_size: expected an integer, found a "
                      "string");
  j = linearJson();
  j["rms_norm_eps"] = "1e-5";
  expectParseError(j, "rms_norm_eps: expected a number");
  j = linearJson();
  j["mla_use_nope"] = 1;
  expectParseError(j, "mla_use_nope: expected a boolean");
  j = linearJson();
  j["linear_attn_config"]["full_attn_layers"] = 4;
  expectParseError(j, "full_attn_layers: expected an array");
  j = linearJson();
  j["linear_attn_config"]["kda_layers"][2] = 3.5;
  expectParseError(j, "kda_layers[2]: expected an integer");
  j = linearJson();
  j["linear_attn_config"] = "x";
  expectParseError(j, "linear_attn_config: expected an object");
  j = linearJson();
  j["hidden_size"] = 256.0;
  expectParseError(j, "hidden_size: expected an integer");
}

TEST(ConfigErrors, LayersDoNotPartition) {
  json j = linearJson();
  j["linear_attn_config"]["kda_layers"] = {1, 2, 3, 4, 5, 6, 7};
  expectParseError(j, "full_attn_layers and kda_layers both list layer 4");
  j = linearJson();
  j["linear_attn_config"]["kda_layers"] = {1, 2, 3, 5, 6};
  expectParseError(j, "do not cover layer 7");
  j = linearJson();
  j["linear_attn_config"]["full_attn_layers"] = {4, 8, 9};
  expectParseError(j, "full_attn_layers: layer 9 is out of range");
  j = linearJson();
  j["linear_attn_config"]["kda_layers"] = {0, 1, 2, 3, 5, 6, 7};
  expectParseError(j, "kda_layers: layer 0 is out of range");
  j = linearJson();
  j["linear_attn_config"]["full_attn_layers"] = {4, 4, 8};
  expectParseError(j, "full_attn_layers: layer 4 is listed twice");
}

TEST(ConfigErrors, TopKAboveExperts) {
  json j = linearJson();
  j["num_experts_per_token"] = 17;
  expectParseError(j, "num_experts_per_token (17) exceeds num_experts (16)");
}

TEST(ConfigErrors, NonPositiveDims) {
  const char *keys[] = {
      "qk_nope_head_dim", "qk_rope_head_dim",    "v_head_dim",
      "kv_lora_rank",     "num_attention_heads", "hidden_size",
      "vocab_size",       "num_experts",         "moe_intermediate_size"};
  for (const char *key : keys) {
    json j = linearJson();
    j[key] = 0;
    expectParseError(j, std::string(key) + " must be positive");
  }
  json j = k3Json();
  j["text_config"]["linear_attn_config"]["head_dim"] = -64;
  expectParseError(j, "text_config.linear_attn_config.head_dim must be "
                      "positive");
  j = linearJson();
  j["linear_attn_config"]["num_heads"] = 0;
  expectParseError(j, "linear_attn_config.num_heads must be positive");
  j = linearJson();
  j["linear_attn_config"]["short_conv_kernel_size"] = 0;
  expectParseError(j, "short_conv_kernel_size must be positive");
  j = linearJson();
  j["q_lora_rank"] = -1;
  expectParseError(j, "q_lora_rank");
  j = linearJson();
  j["first_k_dense_replace"] = 1;
  j["intermediate_size"] = 0;
  expectParseError(j, "intermediate_size must be positive");
}

TEST(ConfigErrors, GateLowerBoundRange) {
  for (double lb : {-5.5, 0.0, 1.0}) {
    json j = k3Json();
    j["text_config"]["linear_attn_config"]["gate_lower_bound"] = lb;
    expectParseError(j, "gate_lower_bound must be in [-5, 0)");
  }
  json j = k3Json();
  j["text_config"]["linear_attn_config"]["gate_lower_bound"] = -5.0;
  EXPECT_TRUE(parseConfigText(j.dump()));
}

TEST(ConfigErrors, Mxfp4NeedsMultiplesOf32) {
  json j = k3Json();
  j["text_config"]["routed_expert_hidden_size"] = 100;
  expectParseError(j, "text_config.routed_expert_hidden_size (100) must be a "
                      "multiple of 32 for MXFP4");
  j = k3Json();
  j["text_config"]["moe_intermediate_size"] = 80;
  expectParseError(j, "text_config.moe_intermediate_size (80) must be a "
                      "multiple of 32");
  // Without latent MoE the experts read the hidden size.
  j = k3Json();
  j["text_config"].erase("routed_expert_hidden_size");
  j["text_config"]["hidden_size"] = 264;
  expectParseError(j, "text_config.hidden_size (264) must be a multiple of 32");
  // Unquantised experts have no such constraint.
  j = linearJson();
  j["moe_intermediate_size"] = 80;
  EXPECT_TRUE(parseConfigText(j.dump()));
}

TEST(ConfigErrors, UnsupportedActivationAndRouter) {
  json j = linearJson();
  j["hidden_act"] = "gelu";
  expectParseError(j, "hidden_act: 'gelu' is not supported");
  j = linearJson();
  j["moe_router_activation_func"] = "softmax";
  expectParseError(j, "moe_router_activation_func: 'softmax' is not "
                      "supported");
  j = linearJson();
  j["topk_method"] = "greedy";
  expectParseError(j, "topk_method: 'greedy' is not supported");
  j = k3Json();
  j["text_config"]["activation_situ_beta"] = 0.0;
  expectParseError(j, "activation_situ_beta");
  j = linearJson();
  j["moe_layer_freq"] = 2;
  expectParseError(j, "moe_layer_freq");
  j = linearJson();
  j["routed_scaling_factor"] = -1.0;
  expectParseError(j, "routed_scaling_factor");
  j = linearJson();
  j["rms_norm_eps"] = 0.0;
  expectParseError(j, "rms_norm_eps");
}

TEST(ConfigErrors, GroupedTopKNotSupported) {
  json j = linearJson();
  j["num_expert_group"] = 8;
  j["topk_group"] = 4;
  expectParseError(j, "use_grouped_topk with num_expert_group = 8 is not "
                      "supported");
  j = linearJson();
  j["topk_group"] = 2;
  expectParseError(j, "topk_group");
}

TEST(ConfigErrors, RopeNotSupported) {
  json j = linearJson();
  j["mla_use_nope"] = false;
  expectParseError(j, "mla_use_nope is false or absent: MLA with rotary "
                      "position embedding is not supported");
  j.erase("mla_use_nope");
  expectParseError(j, "mla_use_nope");
}

TEST(ConfigErrors, Quantization) {
  json j = k3Json();
  j["quantization_config"]["quant_method"] = "gptq";
  expectParseError(j, "quantization_config.quant_method: 'gptq' is not "
                      "supported");
  j = k3Json();
  j["quantization_config"]["format"] = "pack-quantized";
  expectParseError(j, "quantization_config: format 'pack-quantized' is not "
                      "supported");
  j = k3Json();
  j["quantization_config"]["config_groups"]["group_0"]["format"] =
      "float-quantized";
  expectParseError(j, "format 'float-quantized'");
  j = k3Json();
  j["quantization_config"].erase("format");
  j["quantization_config"]["config_groups"]["group_0"].erase("format");
  expectParseError(j, "quantization_config: no format");
  j = k3Json();
  j["quantization_config"]["format"] = "mixed-precision"; // groups decide
  EXPECT_TRUE(parseConfigText(j.dump()));
  j = k3Json();
  j["quantization_config"]["ignore"] = "lm_head";
  expectParseError(j, "quantization_config.ignore: expected an array");
}

TEST(ConfigErrors, TiedEmbeddingsContradiction) {
  json j = k3Json();
  j["tie_word_embeddings"] = true;
  j["text_config"]["tie_word_embeddings"] = false;
  expectParseError(j, "tie_word_embeddings (true) contradicts "
                      "text_config.tie_word_embeddings (false)");
}

TEST(ConfigErrors, TokenIdOutsideVocabulary) {
  json j = linearJson();
  j["eos_token_id"] = 5000;
  expectParseError(j, "eos_token_id (5000) is outside the vocabulary");
}

TEST(ConfigErrors, ValidateOnBuiltConfig) {
  Expected<ModelConfig> c = presetConfig("tiny");
  ASSERT_TRUE(c);
  ModelConfig bad = *c;
  bad.modelType = "gpt2";
  EXPECT_ERROR_CONTAINS(bad.validate(), "unknown model_type 'gpt2'");
  bad = *c;
  bad.tensorPrefix = "";
  EXPECT_ERROR_CONTAINS(bad.validate(), "tensor prefix");
  bad = *c;
  bad.numExpertsPerToken = 20;
  EXPECT_ERROR_CONTAINS(bad.validate(), "text_config.num_experts_per_token");
}
