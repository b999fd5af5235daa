//===- Config.h - Model configuration (config.json) -------------*- C++ -*-===//
//
// The model variants k3c compiles: Kimi K3 (`model_type: kimi_k3`, text fields
// under `text_config`), Kimi-Linear (`model_type: kimi_linear`, fields at top
// level) and the project's presets, which are written in one of those two
// forms. Field names follow the Hugging Face config exactly (K3.md §10), so a
// published checkpoint's config.json parses unchanged.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_MODEL_CONFIG_H
#define K3C_RUNTIME_MODEL_CONFIG_H

#include "runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

/// Activation of every gated MLP of the model (`hidden_act`).
enum class Activation { SiTU, SiLU };

/// KDA geometry (`linear_attn_config`).
struct KdaConfig {
  int64_t numHeads = 0;      ///< num_heads (H)
  int64_t headDim = 0;       ///< head_dim (d); C = H * d
  int64_t convSize = 0;      ///< short_conv_kernel_size (W)
  bool fullRankGate = false; ///< use_full_rank_gate: g_proj [C, D], else g_a/g_b
  bool hasLowerBound = false;    ///< gate_lower_bound present and not null
  float gateLowerBound = 0.0f;   ///< in [-5, 0) when hasLowerBound
};

/// Everything of a model variant that changes the decode math.
struct ModelConfig {
  /// "kimi_k3" or "kimi_linear" (the top-level model_type).
  std::string modelType;
  /// Prefix of every tensor name: "language_model." for K3, "" otherwise.
  std::string tensorPrefix;

  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;        ///< D
  int64_t numLayers = 0;         ///< num_hidden_layers
  int64_t intermediateSize = 0;  ///< dense MLP width (layers < firstKDenseReplace)
  Activation hiddenAct = Activation::SiLU;
  float situBeta = 4.0f;         ///< activation_situ_beta (β1)
  bool hasSituLinearBeta = false;
  float situLinearBeta = 0.0f;   ///< activation_situ_linear_beta (β2), if present
  float rmsNormEps = 1e-5f;
  bool tieWordEmbeddings = false;

  // MLA (full attention) layers.
  int64_t numAttentionHeads = 0; ///< N
  int64_t numKeyValueHeads = 0;
  int64_t qLoraRank = 0;         ///< 0 when q_lora_rank is null (direct q_proj)
  int64_t kvLoraRank = 0;        ///< L
  int64_t qkNopeHeadDim = 0;     ///< P
  int64_t qkRopeHeadDim = 0;     ///< R (never rotated: mla_use_nope)
  int64_t vHeadDim = 0;          ///< V
  bool mlaUseNope = true;
  bool mlaUseOutputGate = false;

  // KDA (linear attention) layers.
  KdaConfig kda;
  /// 1-based layer numbers, as in config.json.
  std::vector<int64_t> fullAttnLayers;
  std::vector<int64_t> kdaLayers;

  // MoE.
  int64_t firstKDenseReplace = 0;
  int64_t moeLayerFreq = 1;
  int64_t numExperts = 0;
  int64_t numExpertsPerToken = 0;  ///< top-k
  int64_t moeIntermediateSize = 0; ///< I, per routed expert
  int64_t numSharedExperts = 0;
  int64_t routedExpertHiddenSize = 0; ///< Dm; 0 = no latent MoE (Dm = D)
  bool latentMoeUseNorm = false;
  std::string routerActivation = "sigmoid";
  std::string topkMethod = "noaux_tc";
  bool useGroupedTopk = false;
  int64_t numExpertGroup = 1;
  int64_t topkGroup = 1;
  bool moeRenormalize = true;
  float routedScalingFactor = 1.0f;
  /// True when routed experts are stored MXFP4 (quantization_config of the
  /// compressed-tensors kind with format mxfp4-pack-quantized).
  bool expertsMxfp4 = false;

  int64_t attnResBlockSize = 0; ///< 0 = plain residuals (no AttnRes)

  int64_t maxPositionEmbeddings = 0;
  int64_t bosTokenId = -1, eosTokenId = -1, padTokenId = -1;

  // Derived helpers.
  bool isMlaLayer(int64_t layer0) const;  ///< layer0 is 0-based
  bool isDenseLayer(int64_t layer0) const { return layer0 < firstKDenseReplace; }
  bool hasAttnRes() const { return attnResBlockSize > 0; }
  bool hasLatentMoe() const { return routedExpertHiddenSize > 0; }
  int64_t moeHiddenSize() const {          ///< Dm
    return hasLatentMoe() ? routedExpertHiddenSize : hiddenSize;
  }
  int64_t kdaChannels() const { return kda.numHeads * kda.headDim; } ///< C
  int64_t mlaCacheWidth() const { return kvLoraRank + qkRopeHeadDim; } ///< L+R
  /// Checks every relation between fields; names the offending field.
  Status validate() const;
};

/// Field-by-field equality, floats compared exactly: what the round trip
/// parseConfigText(writeConfigJson(c)) == c promises.
bool operator==(const KdaConfig &a, const KdaConfig &b);
bool operator==(const ModelConfig &a, const ModelConfig &b);
inline bool operator!=(const ModelConfig &a, const ModelConfig &b) {
  return !(a == b);
}

/// Parses a config.json (K3 or Kimi-Linear form) and validates it.
Expected<ModelConfig> parseConfigFile(const std::string &path);
/// Same, from the JSON text; `origin` names the source in error messages.
Expected<ModelConfig> parseConfigText(const std::string &text,
                                      const std::string &origin = "config.json");
/// Serialises to config.json text in the Hugging Face form of its modelType
/// (K3: text fields under text_config), including quantization_config when
/// expertsMxfp4. parseConfigText(writeConfigJson(c)) == c.
std::string writeConfigJson(const ModelConfig &config);

} // namespace k3

#endif // K3C_RUNTIME_MODEL_CONFIG_H
