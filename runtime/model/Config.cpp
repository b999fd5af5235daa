//===- Config.cpp - Model configuration (config.json) ---------------------===//
//
// Reads and writes the Hugging Face config.json of Kimi K3 (text fields under
// text_config) and Kimi-Linear (fields at top level). The reader is strict
// about types and relations, because a silently misread field would make the
// compiled decode step compute a different model: every error names the JSON
// field, spelled as it appears in the file.
//
// nlohmann::json reports problems by throwing; those exceptions are caught
// here and turned into Status values, so none escapes the library.
//
//===----------------------------------------------------------------------===//
#include "runtime/model/Config.h"
#include "runtime/io/AtomicFile.h"
#include "runtime/io/JsonCheck.h"
#include "runtime/model/Tensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace k3 {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr const char *kK3ModelType = "kimi_k3";
constexpr const char *kLinearModelType = "kimi_linear";
constexpr const char *kK3Architecture = "KimiK3ForConditionalGeneration";
constexpr const char *kLinearArchitecture = "KimiLinearForCausalLM";
constexpr const char *kMxfp4Format = "mxfp4-pack-quantized";
constexpr const char *kCompressedTensors = "compressed-tensors";

/// Upper bounds on the size fields (ModelConfig::validate). Far above any
/// real model (K3: vocab 163840, hidden 7168, 93 layers, 896 experts) and far
/// below what would overflow a size computed from them; a config beyond them
/// is corrupted or hostile, and refusing it up front keeps every later
/// allocation (layer tables, tensor names, the compiler's types) bounded.
constexpr int64_t kMaxVocab = int64_t(1) << 22;
constexpr int64_t kMaxHidden = 65536;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxIntermediate = int64_t(1) << 20;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxRank = 65536;   ///< q_lora_rank, kv_lora_rank
constexpr int64_t kMaxHeadDim = 4096; ///< MLA and KDA head widths
constexpr int64_t kMaxConv = 64;      ///< short_conv_kernel_size
constexpr int64_t kMaxExperts = 65536;
constexpr int64_t kMaxSharedExperts = 1024;
constexpr int64_t kMaxPositions = (int64_t(1) << 31) - 1;

//===----------------------------------------------------------------------===//
// Typed field access
//===----------------------------------------------------------------------===//

const char *jsonTypeName(const json &v) {
  switch (v.type()) {
  case json::value_t::null:
    return "null";
  case json::value_t::boolean:
    return "a boolean";
  case json::value_t::number_integer:
  case json::value_t::number_unsigned:
    return "an integer";
  case json::value_t::number_float:
    return "a floating-point number";
  case json::value_t::string:
    return "a string";
  case json::value_t::array:
    return "an array";
  case json::value_t::object:
    return "an object";
  default:
    return "an unsupported JSON value";
  }
}

/// One JSON object whose fields are read with type checks. `where` is the
/// object's path in the file ("text_config." or ""), so messages name the
/// field the way a user finds it in config.json.
class FieldReader {
public:
  FieldReader(const json &obj, std::string where)
      : obj_(obj), where_(std::move(where)) {}

  std::string path(const std::string &key) const { return where_ + key; }
  bool has(const std::string &key) const { return obj_.contains(key); }
  bool isNull(const std::string &key) const {
    return obj_.contains(key) && obj_.at(key).is_null();
  }
  /// Absent or null: both mean "not set" for the nullable fields of §10.
  bool unset(const std::string &key) const { return !has(key) || isNull(key); }

  Status requireInt(const std::string &key, int64_t &out) const {
    if (!has(key))
      return missing(key);
    return toInt(key, obj_.at(key), out);
  }
  Status optionalInt(const std::string &key, int64_t &out,
                     int64_t fallback) const {
    if (unset(key)) {
      out = fallback;
      return Status::ok();
    }
    return toInt(key, obj_.at(key), out);
  }
  Status requireFloat(const std::string &key, float &out) const {
    if (!has(key))
      return missing(key);
    return toFloat(key, obj_.at(key), out);
  }
  Status optionalFloat(const std::string &key, float &out,
                       float fallback) const {
    if (unset(key)) {
      out = fallback;
      return Status::ok();
    }
    return toFloat(key, obj_.at(key), out);
  }
  /// A float that may be absent or null; `present` says which.
  Status nullableFloat(const std::string &key, bool &present,
                       float &out) const {
    present = !unset(key);
    if (!present) {
      out = 0.0f;
      return Status::ok();
    }
    return toFloat(key, obj_.at(key), out);
  }
  Status optionalBool(const std::string &key, bool &out, bool fallback) const {
    if (unset(key)) {
      out = fallback;
      return Status::ok();
    }
    const json &v = obj_.at(key);
    if (!v.is_boolean())
      return wrongType(key, "a boolean", v);
    out = v.get<bool>();
    return Status::ok();
  }
  Status requireString(const std::string &key, std::string &out) const {
    if (!has(key))
      return missing(key);
    const json &v = obj_.at(key);
    if (!v.is_string())
      return wrongType(key, "a string", v);
    out = v.get<std::string>();
    return Status::ok();
  }
  Status optionalString(const std::string &key, std::string &out,
                        const std::string &fallback) const {
    if (unset(key)) {
      out = fallback;
      return Status::ok();
    }
    return requireString(key, out);
  }
  Status requireIntList(const std::string &key,
                        std::vector<int64_t> &out) const {
    if (!has(key))
      return missing(key);
    const json &v = obj_.at(key);
    if (!v.is_array())
      return wrongType(key, "an array of integers", v);
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      int64_t x = 0;
      K3_RETURN_IF_ERROR(
          toInt(key + "[" + std::to_string(i) + "]", v.at(i), x));
      out.push_back(x);
    }
    return Status::ok();
  }
  /// A token id: an integer, null (→ -1), or a list whose first entry counts
  /// (some checkpoints list several end-of-sequence tokens).
  Status tokenId(const std::string &key, int64_t &out) const {
    out = -1;
    if (unset(key))
      return Status::ok();
    const json &v = obj_.at(key);
    if (v.is_array()) {
      if (v.empty())
        return Status::ok();
      return toInt(key + "[0]", v.at(0), out);
    }
    return toInt(key, v, out);
  }

private:
  Status missing(const std::string &key) const {
    return makeError("required field ", path(key), " is missing");
  }
  Status wrongType(const std::string &key, const char *expected,
                   const json &v) const {
    return makeError(path(key), ": expected ", expected, ", found ",
                     jsonTypeName(v));
  }
  Status toInt(const std::string &key, const json &v, int64_t &out) const {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return makeError(path(key), ": integer ", u, " is out of range");
      out = static_cast<int64_t>(u);
      return Status::ok();
    }
    if (v.is_number_integer()) {
      out = v.get<int64_t>();
      return Status::ok();
    }
    return wrongType(key, "an integer", v);
  }
  Status toFloat(const std::string &key, const json &v, float &out) const {
    if (!v.is_number())
      return wrongType(key, "a number", v);
    double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max())
      return makeError(path(key), ": ", d, " is not a finite float");
    out = static_cast<float>(d);
    return Status::ok();
  }

  const json &obj_;
  std::string where_;
};

/// Reads `quantization_config`. Only compressed-tensors with the MXFP4 pack
/// format is understood; anything else would load weights the kernels cannot
/// read, so it is an error rather than ignored.
Status parseQuantization(const json &q, const std::string &where, bool &mxfp4) {
  mxfp4 = false;
  if (q.is_null())
    return Status::ok();
  if (!q.is_object())
    return makeError(where, ": expected an object, found ", jsonTypeName(q));
  FieldReader r(q, where + ".");
  std::string method;
  K3_RETURN_IF_ERROR(r.requireString("quant_method", method));
  if (method != kCompressedTensors)
    return makeError(r.path("quant_method"), ": '", method,
                     "' is not supported (only '", kCompressedTensors,
                     "' with format '", kMxfp4Format, "')");
  // The format may sit at the top of the config or in each config group.
  std::set<std::string> formats;
  if (!r.unset("format")) {
    std::string f;
    K3_RETURN_IF_ERROR(r.requireString("format", f));
    // "mixed-precision" only says the groups carry their own formats.
    if (f != "mixed-precision")
      formats.insert(f);
  }
  if (!r.unset("config_groups")) {
    const json &groups = q.at("config_groups");
    if (!groups.is_object())
      return makeError(r.path("config_groups"), ": expected an object, found ",
                       jsonTypeName(groups));
    for (auto it = groups.begin(); it != groups.end(); ++it) {
      std::string gwhere = r.path("config_groups." + it.key());
      if (!it.value().is_object())
        return makeError(gwhere, ": expected an object, found ",
                         jsonTypeName(it.value()));
      FieldReader g(it.value(), gwhere + ".");
      if (!g.unset("format")) {
        std::string f;
        K3_RETURN_IF_ERROR(g.requireString("format", f));
        formats.insert(f);
      }
    }
  }
  if (formats.empty())
    return makeError(where, ": no format given (expected '", kMxfp4Format,
                     "' at the top or in config_groups)");
  for (const std::string &f : formats)
    if (f != kMxfp4Format)
      return makeError(where, ": format '", f, "' is not supported (only '",
                       kMxfp4Format, "' for the routed experts)");
  if (!r.unset("ignore") && !q.at("ignore").is_array())
    return makeError(r.path("ignore"), ": expected an array, found ",
                     jsonTypeName(q.at("ignore")));
  mxfp4 = true;
  return Status::ok();
}

/// Reads the text-model fields (K3.md §10) from `r` into `c`.
Status parseTextFields(const FieldReader &r, const json &text, ModelConfig &c) {
  K3_RETURN_IF_ERROR(r.requireInt("vocab_size", c.vocabSize));
  K3_RETURN_IF_ERROR(r.requireInt("hidden_size", c.hiddenSize));
  K3_RETURN_IF_ERROR(r.requireInt("num_hidden_layers", c.numLayers));
  K3_RETURN_IF_ERROR(r.optionalInt("intermediate_size", c.intermediateSize, 0));

  std::string act;
  K3_RETURN_IF_ERROR(r.requireString("hidden_act", act));
  if (act == "situ")
    c.hiddenAct = Activation::SiTU;
  else if (act == "silu")
    c.hiddenAct = Activation::SiLU;
  else
    return makeError(r.path("hidden_act"), ": '", act,
                     "' is not supported (expected 'situ' or 'silu')");
  K3_RETURN_IF_ERROR(r.optionalFloat("activation_situ_beta", c.situBeta, 4.0f));
  K3_RETURN_IF_ERROR(r.nullableFloat("activation_situ_linear_beta",
                                     c.hasSituLinearBeta, c.situLinearBeta));
  K3_RETURN_IF_ERROR(r.requireFloat("rms_norm_eps", c.rmsNormEps));

  K3_RETURN_IF_ERROR(r.requireInt("num_attention_heads", c.numAttentionHeads));
  K3_RETURN_IF_ERROR(r.optionalInt("num_key_value_heads", c.numKeyValueHeads,
                                   c.numAttentionHeads));
  K3_RETURN_IF_ERROR(r.optionalInt("q_lora_rank", c.qLoraRank, 0));
  K3_RETURN_IF_ERROR(r.requireInt("kv_lora_rank", c.kvLoraRank));
  K3_RETURN_IF_ERROR(r.requireInt("qk_nope_head_dim", c.qkNopeHeadDim));
  K3_RETURN_IF_ERROR(r.requireInt("qk_rope_head_dim", c.qkRopeHeadDim));
  K3_RETURN_IF_ERROR(r.requireInt("v_head_dim", c.vHeadDim));
  // Absent means RoPE in the reference code; validate() rejects that.
  K3_RETURN_IF_ERROR(r.optionalBool("mla_use_nope", c.mlaUseNope, false));
  K3_RETURN_IF_ERROR(
      r.optionalBool("mla_use_output_gate", c.mlaUseOutputGate, false));

  if (!r.has("linear_attn_config"))
    return makeError("required field ", r.path("linear_attn_config"),
                     " is missing");
  const json &lin = text.at("linear_attn_config");
  if (!lin.is_object())
    return makeError(r.path("linear_attn_config"),
                     ": expected an object, found ", jsonTypeName(lin));
  FieldReader l(lin, r.path("linear_attn_config."));
  K3_RETURN_IF_ERROR(l.requireIntList("full_attn_layers", c.fullAttnLayers));
  K3_RETURN_IF_ERROR(l.requireIntList("kda_layers", c.kdaLayers));
  K3_RETURN_IF_ERROR(l.requireInt("num_heads", c.kda.numHeads));
  K3_RETURN_IF_ERROR(l.requireInt("head_dim", c.kda.headDim));
  K3_RETURN_IF_ERROR(l.requireInt("short_conv_kernel_size", c.kda.convSize));
  K3_RETURN_IF_ERROR(
      l.optionalBool("use_full_rank_gate", c.kda.fullRankGate, false));
  K3_RETURN_IF_ERROR(l.nullableFloat("gate_lower_bound", c.kda.hasLowerBound,
                                     c.kda.gateLowerBound));

  K3_RETURN_IF_ERROR(
      r.optionalInt("first_k_dense_replace", c.firstKDenseReplace, 0));
  K3_RETURN_IF_ERROR(r.optionalInt("moe_layer_freq", c.moeLayerFreq, 1));
  K3_RETURN_IF_ERROR(r.requireInt("num_experts", c.numExperts));
  K3_RETURN_IF_ERROR(
      r.requireInt("num_experts_per_token", c.numExpertsPerToken));
  K3_RETURN_IF_ERROR(
      r.requireInt("moe_intermediate_size", c.moeIntermediateSize));
  K3_RETURN_IF_ERROR(
      r.optionalInt("num_shared_experts", c.numSharedExperts, 0));
  K3_RETURN_IF_ERROR(
      r.optionalInt("routed_expert_hidden_size", c.routedExpertHiddenSize, 0));
  K3_RETURN_IF_ERROR(
      r.optionalBool("latent_moe_use_norm", c.latentMoeUseNorm, false));
  K3_RETURN_IF_ERROR(r.optionalString("moe_router_activation_func",
                                      c.routerActivation, "sigmoid"));
  K3_RETURN_IF_ERROR(r.optionalString("topk_method", c.topkMethod, "noaux_tc"));
  K3_RETURN_IF_ERROR(
      r.optionalBool("use_grouped_topk", c.useGroupedTopk, false));
  K3_RETURN_IF_ERROR(r.optionalInt("num_expert_group", c.numExpertGroup, 1));
  K3_RETURN_IF_ERROR(r.optionalInt("topk_group", c.topkGroup, 1));
  K3_RETURN_IF_ERROR(r.optionalBool("moe_renormalize", c.moeRenormalize, true));
  K3_RETURN_IF_ERROR(
      r.optionalFloat("routed_scaling_factor", c.routedScalingFactor, 1.0f));
  K3_RETURN_IF_ERROR(
      r.optionalInt("attn_res_block_size", c.attnResBlockSize, 0));
  K3_RETURN_IF_ERROR(
      r.optionalInt("max_position_embeddings", c.maxPositionEmbeddings, 0));
  K3_RETURN_IF_ERROR(r.tokenId("bos_token_id", c.bosTokenId));
  K3_RETURN_IF_ERROR(r.tokenId("eos_token_id", c.eosTokenId));
  K3_RETURN_IF_ERROR(r.tokenId("pad_token_id", c.padTokenId));
  return Status::ok();
}

Expected<ModelConfig> parseConfigJson(const json &top) {
  if (!top.is_object())
    return makeError("expected a JSON object at the top level, found ",
                     jsonTypeName(top));
  FieldReader topReader(top, "");
  ModelConfig c;
  K3_RETURN_IF_ERROR(topReader.requireString("model_type", c.modelType));

  const json *text = &top;
  std::string where;
  if (c.modelType == kK3ModelType) {
    if (!top.contains("text_config"))
      return makeError("required field text_config is missing (model_type ",
                       kK3ModelType, " keeps the text model there)");
    text = &top.at("text_config");
    if (!text->is_object())
      return makeError("text_config: expected an object, found ",
                       jsonTypeName(*text));
    where = "text_config.";
    std::string inner;
    K3_RETURN_IF_ERROR(
        FieldReader(*text, where)
            .optionalString("model_type", inner, kLinearModelType));
    if (inner != kLinearModelType)
      return makeError("text_config.model_type: '", inner,
                       "' is not supported (expected '", kLinearModelType,
                       "')");
    c.tensorPrefix = "language_model.";
  } else if (c.modelType == kLinearModelType) {
    c.tensorPrefix = "";
  } else {
    return makeError("model_type: unknown model_type '", c.modelType,
                     "' (expected '", kK3ModelType, "' or '", kLinearModelType,
                     "')");
  }

  FieldReader r(*text, where);
  K3_RETURN_IF_ERROR(parseTextFields(r, *text, c));
  // Token ids of a K3 config may sit at the top level instead.
  if (text != &top) {
    const std::pair<const char *, int64_t *> ids[] = {
        {"bos_token_id", &c.bosTokenId},
        {"eos_token_id", &c.eosTokenId},
        {"pad_token_id", &c.padTokenId}};
    for (const auto &[key, dst] : ids)
      if (r.unset(key))
        K3_RETURN_IF_ERROR(topReader.tokenId(key, *dst));
  }

  // tie_word_embeddings may sit at either level of a K3 config; when both
  // say something they must agree.
  bool tiedText = false, tiedTop = false;
  K3_RETURN_IF_ERROR(r.optionalBool("tie_word_embeddings", tiedText, false));
  c.tieWordEmbeddings = tiedText;
  if (text != &top) {
    K3_RETURN_IF_ERROR(
        topReader.optionalBool("tie_word_embeddings", tiedTop, false));
    bool hasText = !r.unset("tie_word_embeddings");
    bool hasTop = !topReader.unset("tie_word_embeddings");
    if (hasText && hasTop && tiedText != tiedTop)
      return makeError("tie_word_embeddings (", tiedTop ? "true" : "false",
                       ") contradicts text_config.tie_word_embeddings (",
                       tiedText ? "true" : "false", ")");
    c.tieWordEmbeddings = hasText ? tiedText : tiedTop;
  }

  // quantization_config: top level (the Hugging Face place), or inside
  // text_config for a K3 config written that way.
  if (top.contains("quantization_config")) {
    K3_RETURN_IF_ERROR(parseQuantization(
        top.at("quantization_config"), "quantization_config", c.expertsMxfp4));
  } else if (text != &top && text->contains("quantization_config")) {
    K3_RETURN_IF_ERROR(parseQuantization(text->at("quantization_config"),
                                         "text_config.quantization_config",
                                         c.expertsMxfp4));
  }
  K3_RETURN_IF_ERROR(c.validate());
  return c;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

/// The shortest decimal that reads back as exactly `f`, as a JSON number, so
/// config.json says 1e-05 rather than 9.999999747378752e-06 and the round
/// trip through float is exact.
ordered_json floatJson(float f) {
  char buf[64];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f)
      break;
  }
  return ordered_json(std::strtod(buf, nullptr));
}

ordered_json tokenJson(int64_t id) {
  return id < 0 ? ordered_json(nullptr) : ordered_json(id);
}

/// Module names (tensor names without ".weight") of every Linear that stays
/// bf16: all of them except the routed experts. compressed-tensors matches
/// its ignore list against module names, so these are listed one by one.
std::vector<std::string> bf16LinearModules(const ModelConfig &c) {
  std::vector<std::string> out;
  // The routed experts are skipped below, and no other name depends on
  // their number: walk a one-expert model, so the walk costs the same for
  // 896 experts as for one.
  ModelConfig one = c;
  one.numExperts = 1;
  one.numExpertsPerToken = 1;
  forEachModelTensor(one, [&](const ModelTensor &t) {
    if (t.entry->linear && t.entry->dtypes != TensorDtypes::Expert)
      out.push_back(t.name);
    return true;
  });
  return out;
}

ordered_json quantizationJson(const ModelConfig &c) {
  ordered_json weights = {{"num_bits", 4},       {"type", "float"},
                          {"symmetric", true},   {"group_size", 32},
                          {"strategy", "group"}, {"dynamic", false},
                          {"actorder", nullptr}, {"observer", "minmax"}};
  ordered_json group = {{"targets", ordered_json::array({"Linear"})},
                        {"weights", weights},
                        {"input_activations", nullptr},
                        {"output_activations", nullptr},
                        {"format", kMxfp4Format}};
  ordered_json q;
  q["quant_method"] = kCompressedTensors;
  q["format"] = kMxfp4Format;
  q["quantization_status"] = "compressed";
  q["config_groups"] = {{"group_0", group}};
  q["kv_cache_scheme"] = nullptr;
  q["ignore"] = bf16LinearModules(c);
  return q;
}

ordered_json textJson(const ModelConfig &c, bool nested) {
  ordered_json t;
  if (nested)
    t["model_type"] = kLinearModelType;
  t["vocab_size"] = c.vocabSize;
  t["hidden_size"] = c.hiddenSize;
  t["num_hidden_layers"] = c.numLayers;
  t["intermediate_size"] = c.intermediateSize;
  t["hidden_act"] = c.hiddenAct == Activation::SiTU ? "situ" : "silu";
  // A SiLU model only carries the SiTU betas when they were set to something
  // other than the defaults (so the round trip stays exact).
  if (c.hiddenAct == Activation::SiTU || c.situBeta != 4.0f ||
      c.hasSituLinearBeta) {
    t["activation_situ_beta"] = floatJson(c.situBeta);
    t["activation_situ_linear_beta"] = c.hasSituLinearBeta
                                           ? floatJson(c.situLinearBeta)
                                           : ordered_json(nullptr);
  }
  t["rms_norm_eps"] = floatJson(c.rmsNormEps);
  t["tie_word_embeddings"] = c.tieWordEmbeddings;
  t["num_attention_heads"] = c.numAttentionHeads;
  t["num_key_value_heads"] = c.numKeyValueHeads;
  t["q_lora_rank"] =
      c.qLoraRank > 0 ? ordered_json(c.qLoraRank) : ordered_json(nullptr);
  t["kv_lora_rank"] = c.kvLoraRank;
  t["qk_nope_head_dim"] = c.qkNopeHeadDim;
  t["qk_rope_head_dim"] = c.qkRopeHeadDim;
  t["v_head_dim"] = c.vHeadDim;
  t["mla_use_nope"] = c.mlaUseNope;
  t["mla_use_output_gate"] = c.mlaUseOutputGate;
  ordered_json lin;
  lin["full_attn_layers"] = c.fullAttnLayers;
  lin["kda_layers"] = c.kdaLayers;
  lin["num_heads"] = c.kda.numHeads;
  lin["head_dim"] = c.kda.headDim;
  lin["short_conv_kernel_size"] = c.kda.convSize;
  lin["use_full_rank_gate"] = c.kda.fullRankGate;
  lin["gate_lower_bound"] = c.kda.hasLowerBound
                                ? floatJson(c.kda.gateLowerBound)
                                : ordered_json(nullptr);
  t["linear_attn_config"] = lin;
  t["first_k_dense_replace"] = c.firstKDenseReplace;
  t["moe_layer_freq"] = c.moeLayerFreq;
  t["num_experts"] = c.numExperts;
  t["num_experts_per_token"] = c.numExpertsPerToken;
  t["moe_intermediate_size"] = c.moeIntermediateSize;
  t["num_shared_experts"] = c.numSharedExperts;
  if (c.routedExpertHiddenSize > 0)
    t["routed_expert_hidden_size"] = c.routedExpertHiddenSize;
  t["latent_moe_use_norm"] = c.latentMoeUseNorm;
  t["moe_router_activation_func"] = c.routerActivation;
  t["topk_method"] = c.topkMethod;
  t["use_grouped_topk"] = c.useGroupedTopk;
  t["num_expert_group"] = c.numExpertGroup;
  t["topk_group"] = c.topkGroup;
  t["moe_renormalize"] = c.moeRenormalize;
  t["routed_scaling_factor"] = floatJson(c.routedScalingFactor);
  if (c.attnResBlockSize > 0)
    t["attn_res_block_size"] = c.attnResBlockSize;
  t["max_position_embeddings"] = c.maxPositionEmbeddings;
  t["bos_token_id"] = tokenJson(c.bosTokenId);
  t["eos_token_id"] = tokenJson(c.eosTokenId);
  t["pad_token_id"] = tokenJson(c.padTokenId);
  t["torch_dtype"] = "bfloat16";
  return t;
}

std::string fieldName(const ModelConfig &c, const std::string &key) {
  return (c.modelType == kK3ModelType ? "text_config." : "") + key;
}

bool sameFloat(float a, float b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

} // namespace

//===----------------------------------------------------------------------===//
// ModelConfig
//===----------------------------------------------------------------------===//

bool ModelConfig::isMlaLayer(int64_t layer0) const {
  return std::find(fullAttnLayers.begin(), fullAttnLayers.end(), layer0 + 1) !=
         fullAttnLayers.end();
}

Status ModelConfig::validate() const {
  auto f = [this](const std::string &key) { return fieldName(*this, key); };
  auto positive = [&](int64_t v, const char *key) -> Status {
    if (v <= 0)
      return makeError(f(key), " must be positive, got ", v);
    return Status::ok();
  };
  // A size field in [1, max]: larger than any GPU could hold.
  auto bounded = [&](int64_t v, const char *key, int64_t max) -> Status {
    K3_RETURN_IF_ERROR(positive(v, key));
    if (v > max)
      return makeError(f(key), " = ", v, " exceeds the limit of ", max,
                       " (larger than any GPU could hold: the config is "
                       "corrupted)");
    return Status::ok();
  };

  if (modelType == kK3ModelType) {
    if (tensorPrefix != "language_model.")
      return makeError("tensor prefix '", tensorPrefix,
                       "' contradicts model_type ", kK3ModelType,
                       " (expected 'language_model.')");
  } else if (modelType == kLinearModelType) {
    if (!tensorPrefix.empty())
      return makeError("tensor prefix '", tensorPrefix,
                       "' contradicts model_type ", kLinearModelType,
                       " (expected none)");
  } else {
    return makeError("model_type: unknown model_type '", modelType,
                     "' (expected '", kK3ModelType, "' or '", kLinearModelType,
                     "')");
  }

  K3_RETURN_IF_ERROR(bounded(vocabSize, "vocab_size", kMaxVocab));
  K3_RETURN_IF_ERROR(bounded(hiddenSize, "hidden_size", kMaxHidden));
  K3_RETURN_IF_ERROR(bounded(numLayers, "num_hidden_layers", kMaxLayers));
  if (!(rmsNormEps > 0.0f) || !std::isfinite(rmsNormEps))
    return makeError(f("rms_norm_eps"), " must be a positive number, got ",
                     rmsNormEps);

  if (hiddenAct == Activation::SiTU) {
    if (situBeta == 0.0f || !std::isfinite(situBeta))
      return makeError(f("activation_situ_beta"),
                       " must be finite and non-zero for hidden_act situ, got ",
                       situBeta);
    if (hasSituLinearBeta &&
        (situLinearBeta == 0.0f || !std::isfinite(situLinearBeta)))
      return makeError(f("activation_situ_linear_beta"),
                       " must be finite and non-zero (or null), got ",
                       situLinearBeta);
  }

  // MLA.
  K3_RETURN_IF_ERROR(
      bounded(numAttentionHeads, "num_attention_heads", kMaxHeads));
  K3_RETURN_IF_ERROR(
      bounded(numKeyValueHeads, "num_key_value_heads", kMaxHeads));
  if (qLoraRank < 0)
    return makeError(f("q_lora_rank"), " must be positive or null, got ",
                     qLoraRank);
  if (qLoraRank > 0)
    K3_RETURN_IF_ERROR(bounded(qLoraRank, "q_lora_rank", kMaxRank));
  K3_RETURN_IF_ERROR(bounded(kvLoraRank, "kv_lora_rank", kMaxRank));
  K3_RETURN_IF_ERROR(
      bounded(qkNopeHeadDim, "qk_nope_head_dim", kMaxHeadDim));
  K3_RETURN_IF_ERROR(
      bounded(qkRopeHeadDim, "qk_rope_head_dim", kMaxHeadDim));
  K3_RETURN_IF_ERROR(bounded(vHeadDim, "v_head_dim", kMaxHeadDim));
  if (!mlaUseNope)
    return makeError(f("mla_use_nope"),
                     " is false or absent: MLA with rotary position embedding "
                     "is not supported; k3c implements only the NoPE form "
                     "(mla_use_nope: true)");

  // KDA.
  const std::string lin = f("linear_attn_config.");
  K3_RETURN_IF_ERROR(
      bounded(kda.numHeads, "linear_attn_config.num_heads", kMaxHeads));
  K3_RETURN_IF_ERROR(
      bounded(kda.headDim, "linear_attn_config.head_dim", kMaxHeadDim));
  K3_RETURN_IF_ERROR(bounded(kda.convSize,
                             "linear_attn_config.short_conv_kernel_size",
                             kMaxConv));
  if (kda.hasLowerBound &&
      !(kda.gateLowerBound >= -5.0f && kda.gateLowerBound < 0.0f))
    return makeError(lin, "gate_lower_bound must be in [-5, 0) or null, got ",
                     kda.gateLowerBound);

  // full_attn_layers and kda_layers must partition 1..num_hidden_layers.
  std::vector<int> owner(static_cast<size_t>(numLayers) + 1, 0);
  auto mark = [&](const std::vector<int64_t> &list, const char *key,
                  int id) -> Status {
    for (int64_t n : list) {
      if (n < 1 || n > numLayers)
        return makeError(lin, key, ": layer ", n,
                         " is out of range (layers are numbered 1..", numLayers,
                         ")");
      if (owner[n] == id)
        return makeError(lin, key, ": layer ", n, " is listed twice");
      if (owner[n] != 0)
        return makeError(lin,
                         "full_attn_layers and kda_layers both list layer ", n,
                         " (each layer is either MLA or KDA)");
      owner[n] = id;
    }
    return Status::ok();
  };
  K3_RETURN_IF_ERROR(mark(fullAttnLayers, "full_attn_layers", 1));
  K3_RETURN_IF_ERROR(mark(kdaLayers, "kda_layers", 2));
  for (int64_t n = 1; n <= numLayers; ++n)
    if (owner[n] == 0)
      return makeError(
          lin, "full_attn_layers and kda_layers do not cover layer ", n,
          " of 1..", numLayers, " (together they must list every layer once)");

  // Dense MLP and MoE.
  if (firstKDenseReplace < 0 || firstKDenseReplace > numLayers)
    return makeError(f("first_k_dense_replace"), " must be in [0, ", numLayers,
                     "], got ", firstKDenseReplace);
  if (firstKDenseReplace > 0)
    K3_RETURN_IF_ERROR(
        bounded(intermediateSize, "intermediate_size", kMaxIntermediate));
  else if (intermediateSize < 0 || intermediateSize > kMaxIntermediate)
    return makeError(f("intermediate_size"), " = ", intermediateSize,
                     " is outside [0, ", kMaxIntermediate, "]");
  if (moeLayerFreq != 1)
    return makeError(
        f("moe_layer_freq"), " = ", moeLayerFreq,
        " is not supported (every layer from first_k_dense_replace "
        "on must be MoE: moe_layer_freq 1)");
  K3_RETURN_IF_ERROR(bounded(numExperts, "num_experts", kMaxExperts));
  K3_RETURN_IF_ERROR(positive(numExpertsPerToken, "num_experts_per_token"));
  if (numExpertsPerToken > numExperts)
    return makeError(f("num_experts_per_token"), " (", numExpertsPerToken,
                     ") exceeds num_experts (", numExperts, ")");
  K3_RETURN_IF_ERROR(bounded(moeIntermediateSize, "moe_intermediate_size",
                             kMaxIntermediate));
  if (numSharedExperts < 0)
    return makeError(f("num_shared_experts"), " must be >= 0, got ",
                     numSharedExperts);
  if (numSharedExperts > 0)
    K3_RETURN_IF_ERROR(bounded(numSharedExperts, "num_shared_experts",
                               kMaxSharedExperts));
  if (routedExpertHiddenSize < 0)
    return makeError(f("routed_expert_hidden_size"),
                     " must be positive or absent, got ",
                     routedExpertHiddenSize);
  if (routedExpertHiddenSize > 0)
    K3_RETURN_IF_ERROR(bounded(routedExpertHiddenSize,
                               "routed_expert_hidden_size", kMaxHidden));
  if (routerActivation != "sigmoid")
    return makeError(f("moe_router_activation_func"), ": '", routerActivation,
                     "' is not supported (only 'sigmoid')");
  if (topkMethod != "noaux_tc")
    return makeError(f("topk_method"), ": '", topkMethod,
                     "' is not supported (only 'noaux_tc')");
  K3_RETURN_IF_ERROR(
      bounded(numExpertGroup, "num_expert_group", kMaxExperts));
  if (topkGroup <= 0 || topkGroup > numExpertGroup)
    return makeError(f("topk_group"),
                     " must be in [1, num_expert_group = ", numExpertGroup,
                     "], got ", topkGroup);
  if (useGroupedTopk && numExpertGroup > 1)
    return makeError(f("use_grouped_topk"),
                     " with num_expert_group = ", numExpertGroup,
                     " is not supported: k3c routes with a single expert "
                     "group (set num_expert_group to 1)");
  if (!(routedScalingFactor > 0.0f) || !std::isfinite(routedScalingFactor))
    return makeError(f("routed_scaling_factor"),
                     " must be a positive number, got ", routedScalingFactor);
  if (expertsMxfp4) {
    // MXFP4 blocks of 32 run along each expert matrix's input dimension:
    // Dm for w1/w3, I for w2.
    if (moeIntermediateSize % 32 != 0)
      return makeError(f("moe_intermediate_size"), " (", moeIntermediateSize,
                       ") must be a multiple of 32 for MXFP4 experts");
    if (moeHiddenSize() % 32 != 0)
      return makeError(
          f(hasLatentMoe() ? "routed_expert_hidden_size" : "hidden_size"), " (",
          moeHiddenSize(), ") must be a multiple of 32 for MXFP4 experts");
  }

  if (attnResBlockSize < 0)
    return makeError(f("attn_res_block_size"),
                     " must be positive or absent, got ", attnResBlockSize);
  if (attnResBlockSize > 0)
    K3_RETURN_IF_ERROR(
        bounded(attnResBlockSize, "attn_res_block_size", kMaxLayers));
  if (maxPositionEmbeddings < 0 || maxPositionEmbeddings > kMaxPositions)
    return makeError(f("max_position_embeddings"), " = ",
                     maxPositionEmbeddings, " is outside [0, ", kMaxPositions,
                     "]");
  for (auto [id, key] :
       {std::pair<int64_t, const char *>{bosTokenId, "bos_token_id"},
        {eosTokenId, "eos_token_id"},
        {padTokenId, "pad_token_id"}})
    if (id < -1 || id >= vocabSize)
      return makeError(f(key), " (", id, ") is outside the vocabulary (",
                       vocabSize, ")");
  return Status::ok();
}

bool operator==(const KdaConfig &a, const KdaConfig &b) {
  return a.numHeads == b.numHeads && a.headDim == b.headDim &&
         a.convSize == b.convSize && a.fullRankGate == b.fullRankGate &&
         a.hasLowerBound == b.hasLowerBound &&
         sameFloat(a.gateLowerBound, b.gateLowerBound);
}

bool operator==(const ModelConfig &a, const ModelConfig &b) {
  return a.modelType == b.modelType && a.tensorPrefix == b.tensorPrefix &&
         a.vocabSize == b.vocabSize && a.hiddenSize == b.hiddenSize &&
         a.numLayers == b.numLayers &&
         a.intermediateSize == b.intermediateSize &&
         a.hiddenAct == b.hiddenAct && sameFloat(a.situBeta, b.situBeta) &&
         a.hasSituLinearBeta == b.hasSituLinearBeta &&
         sameFloat(a.situLinearBeta, b.situLinearBeta) &&
         sameFloat(a.rmsNormEps, b.rmsNormEps) &&
         a.tieWordEmbeddings == b.tieWordEmbeddings &&
         a.numAttentionHeads == b.numAttentionHeads &&
         a.numKeyValueHeads == b.numKeyValueHeads &&
         a.qLoraRank == b.qLoraRank && a.kvLoraRank == b.kvLoraRank &&
         a.qkNopeHeadDim == b.qkNopeHeadDim &&
         a.qkRopeHeadDim == b.qkRopeHeadDim && a.vHeadDim == b.vHeadDim &&
         a.mlaUseNope == b.mlaUseNope &&
         a.mlaUseOutputGate == b.mlaUseOutputGate && a.kda == b.kda &&
         a.fullAttnLayers == b.fullAttnLayers && a.kdaLayers == b.kdaLayers &&
         a.firstKDenseReplace == b.firstKDenseReplace &&
         a.moeLayerFreq == b.moeLayerFreq && a.numExperts == b.numExperts &&
         a.numExpertsPerToken == b.numExpertsPerToken &&
         a.moeIntermediateSize == b.moeIntermediateSize &&
         a.numSharedExperts == b.numSharedExperts &&
         a.routedExpertHiddenSize == b.routedExpertHiddenSize &&
         a.latentMoeUseNorm == b.latentMoeUseNorm &&
         a.routerActivation == b.routerActivation &&
         a.topkMethod == b.topkMethod && a.useGroupedTopk == b.useGroupedTopk &&
         a.numExpertGroup == b.numExpertGroup && a.topkGroup == b.topkGroup &&
         a.moeRenormalize == b.moeRenormalize &&
         sameFloat(a.routedScalingFactor, b.routedScalingFactor) &&
         a.expertsMxfp4 == b.expertsMxfp4 &&
         a.attnResBlockSize == b.attnResBlockSize &&
         a.maxPositionEmbeddings == b.maxPositionEmbeddings &&
         a.bosTokenId == b.bosTokenId && a.eosTokenId == b.eosTokenId &&
         a.padTokenId == b.padTokenId;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

Expected<ModelConfig> parseConfigText(const std::string &text,
                                      const std::string &origin) {
  // Depth and duplicate keys first: the tree parser would silently keep the
  // last of two equal keys, and a deep document would exhaust the stack.
  K3_RETURN_IF_ERROR(checkJsonText(text).withContext(origin));
  json top;
  try {
    top = json::parse(text);
  } catch (const std::exception &e) {
    return makeError(origin, ": invalid JSON: ", e.what());
  }
  try {
    Expected<ModelConfig> c = parseConfigJson(top);
    if (!c)
      return c.status().withContext(origin);
    return c;
  } catch (const std::exception &e) {
    // The readers check types before every access, so this is a bug; still
    // no exception leaves the library.
    return makeError(origin, ": unexpected JSON error: ", e.what());
  }
}

Expected<ModelConfig> parseConfigFile(const std::string &path) {
  // A regular file of bounded size: not /dev/zero (read until memory runs
  // out), not a FIFO (blocks forever).
  std::string text;
  K3_RETURN_IF_ERROR(
      readRegularFile(path, kMaxJsonFileBytes, text, "config file"));
  return parseConfigText(text, path);
}

std::string writeConfigJson(const ModelConfig &c) {
  ordered_json top;
  if (c.modelType == kK3ModelType) {
    top["architectures"] = ordered_json::array({kK3Architecture});
    top["model_type"] = kK3ModelType;
    top["tie_word_embeddings"] = c.tieWordEmbeddings;
    top["text_config"] = textJson(c, /*nested=*/true);
  } else {
    top["architectures"] = ordered_json::array({kLinearArchitecture});
    top["model_type"] = c.modelType;
    ordered_json text = textJson(c, /*nested=*/false);
    for (auto &item : text.items())
      top[item.key()] = item.value();
  }
  top["torch_dtype"] = "bfloat16";
  if (c.expertsMxfp4)
    top["quantization_config"] = quantizationJson(c);
  return top.dump(2) + "\n";
}

} // namespace k3
