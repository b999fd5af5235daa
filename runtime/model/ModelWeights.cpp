//===- ModelWeights.cpp - A model's tensors, by role ----------------------===//
//
// One walk over the model (walkModel) names every tensor K3.md §10 defines,
// with its role, dtype and shape. Binding runs the walk against a
// TensorStore; expectedTensorSpecs runs it to list what the model maker
// writes. Because both come from the same walk, a checkpoint the maker
// writes always binds, and a name can only be wrong in one place.
//
//===----------------------------------------------------------------------===//
#include "runtime/model/ModelWeights.h"

#include <algorithm>
#include <sstream>

namespace k3 {

namespace {

std::string shapeText(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string describe(DType t, const std::vector<int64_t> &shape) {
  return std::string(dtypeName(t)) + " " + shapeText(shape);
}

/// What the walk asks for, one call per tensor (or per linear layer, which
/// is one or two tensors).
class Visitor {
public:
  virtual ~Visitor() = default;
  /// A bf16 tensor of exactly `shape` (norm weights, embeddings).
  virtual void bf16(const std::string &name, std::vector<int64_t> shape,
                    const TensorView *&dst) = 0;
  /// An fp32 vector (dt_bias, e_score_correction_bias); bf16 is accepted
  /// too, as ModelWeights.h promises.
  virtual void f32(const std::string &name, std::vector<int64_t> shape,
                   const TensorView *&dst) = 0;
  /// The router's e_score_correction_bias: an fp32 vector that the
  /// published K3 stores F32 and Kimi-Linear BF16.
  virtual void routerBias(const std::string &name, std::vector<int64_t> shape,
                          const TensorView *&dst) {
    f32(name, std::move(shape), dst);
  }
  /// A small weight the kernels read in the dtype it is stored in (the KDA
  /// conv filters and o_norm): BF16 or F32 (K3.md §10 "Stored dtypes").
  virtual void vector(const std::string &name, std::vector<int64_t> shape,
                      const TensorView *&dst) = 0;
  /// KDA A_log: fp32 with at least `heads` values, any shape.
  virtual void aLog(const std::string &name, int64_t heads,
                    const TensorView *&dst) = 0;
  /// A bf16 Linear `module.weight` [out, in].
  virtual void linear(const std::string &module, int64_t out, int64_t in,
                      LinearWeight &dst) = 0;
  /// A routed expert's Linear: bf16 `.weight` or MXFP4 `.weight_packed` +
  /// `.weight_scale`.
  virtual void expert(const std::string &module, int64_t out, int64_t in,
                      LinearWeight &dst) = 0;
  /// False once the visitor has failed: the walk stops early.
  virtual bool good() const { return true; }
};

void walkMlp(Visitor &v, const std::string &p, int64_t width, int64_t in,
             MlpWeights &w) {
  v.linear(p + "gate_proj", width, in, w.gate);
  v.linear(p + "up_proj", width, in, w.up);
  v.linear(p + "down_proj", in, width, w.down);
}

void walkKda(Visitor &v, const ModelConfig &c, const std::string &p,
             KdaWeights &w) {
  const int64_t D = c.hiddenSize, H = c.kda.numHeads, d = c.kda.headDim;
  const int64_t C = c.kdaChannels(), W = c.kda.convSize;
  v.linear(p + "q_proj", C, D, w.qProj);
  v.linear(p + "k_proj", C, D, w.kProj);
  v.linear(p + "v_proj", C, D, w.vProj);
  v.vector(p + "q_conv1d.weight", {C, 1, W}, w.qConv);
  v.vector(p + "k_conv1d.weight", {C, 1, W}, w.kConv);
  v.vector(p + "v_conv1d.weight", {C, 1, W}, w.vConv);
  v.linear(p + "f_a_proj", d, D, w.fAProj);
  v.linear(p + "f_b_proj", C, d, w.fBProj);
  v.f32(p + "dt_bias", {C}, w.dtBias);
  v.aLog(p + "A_log", H, w.aLog);
  v.linear(p + "b_proj", H, D, w.bProj);
  if (c.kda.fullRankGate) {
    v.linear(p + "g_proj", C, D, w.gProj);
  } else {
    v.linear(p + "g_a_proj", d, D, w.gAProj);
    v.linear(p + "g_b_proj", C, d, w.gBProj);
  }
  v.vector(p + "o_norm.weight", {d}, w.oNorm);
  v.linear(p + "o_proj", D, C, w.oProj);
}

void walkMla(Visitor &v, const ModelConfig &c, const std::string &p,
             MlaWeights &w) {
  const int64_t D = c.hiddenSize, N = c.numAttentionHeads;
  const int64_t P = c.qkNopeHeadDim, R = c.qkRopeHeadDim, V = c.vHeadDim;
  const int64_t L = c.kvLoraRank, Q = c.qLoraRank;
  if (Q > 0) {
    v.linear(p + "q_a_proj", Q, D, w.qAProj);
    v.bf16(p + "q_a_layernorm.weight", {Q}, w.qALayernorm);
    v.linear(p + "q_b_proj", N * (P + R), Q, w.qBProj);
  } else {
    v.linear(p + "q_proj", N * (P + R), D, w.qProj);
  }
  v.linear(p + "kv_a_proj_with_mqa", L + R, D, w.kvAProj);
  v.bf16(p + "kv_a_layernorm.weight", {L}, w.kvALayernorm);
  v.linear(p + "kv_b_proj", N * (P + V), L, w.kvBProj);
  if (c.mlaUseOutputGate)
    v.linear(p + "g_proj", N * V, D, w.gProj);
  v.linear(p + "o_proj", D, N * V, w.oProj);
}

void walkMoe(Visitor &v, const ModelConfig &c, const std::string &p,
             MoeWeights &w) {
  const int64_t D = c.hiddenSize, E = c.numExperts;
  const int64_t I = c.moeIntermediateSize, Dm = c.moeHiddenSize();
  v.linear(p + "gate", E, D, w.gate);
  v.routerBias(p + "gate.e_score_correction_bias", {E}, w.eScoreCorrectionBias);
  w.experts.resize(static_cast<size_t>(E));
  for (int64_t e = 0; e < E && v.good(); ++e) {
    std::string ep = p + "experts." + std::to_string(e) + ".";
    MlpWeights &x = w.experts[static_cast<size_t>(e)];
    v.expert(ep + "w1", I, Dm, x.gate);
    v.expert(ep + "w2", Dm, I, x.down);
    v.expert(ep + "w3", I, Dm, x.up);
  }
  if (c.numSharedExperts > 0)
    walkMlp(v, p + "shared_experts.", c.numSharedExperts * I, D, w.shared);
  if (c.hasLatentMoe()) {
    v.linear(p + "routed_expert_down_proj", Dm, D, w.routedDown);
    v.linear(p + "routed_expert_up_proj", D, Dm, w.routedUp);
    if (c.latentMoeUseNorm)
      v.bf16(p + "routed_expert_norm.weight", {Dm}, w.routedNorm);
  }
}

void walkAttnRes(Visitor &v, const ModelConfig &c, const std::string &p,
                 AttnResWeights &w) {
  v.bf16(p + "_norm.weight", {c.hiddenSize}, w.norm);
  v.bf16(p + "_proj.weight", {1, c.hiddenSize}, w.proj);
}

/// The whole model, in the order the tensors are listed and written.
void walkModel(Visitor &v, const ModelConfig &c, ModelWeights &w) {
  const std::string m = c.tensorPrefix + "model.";
  const int64_t D = c.hiddenSize;
  v.bf16(m + "embed_tokens.weight", {c.vocabSize, D}, w.embedTokens);
  w.layers.resize(static_cast<size_t>(c.numLayers));
  for (int64_t i = 0; i < c.numLayers && v.good(); ++i) {
    LayerWeights &l = w.layers[static_cast<size_t>(i)];
    std::string p = m + "layers." + std::to_string(i) + ".";
    v.bf16(p + "input_layernorm.weight", {D}, l.inputLayernorm);
    v.bf16(p + "post_attention_layernorm.weight", {D},
           l.postAttentionLayernorm);
    if (c.hasAttnRes()) {
      walkAttnRes(v, c, p + "self_attention_res", l.selfAttentionRes);
      walkAttnRes(v, c, p + "mlp_res", l.mlpRes);
    }
    l.isMla = c.isMlaLayer(i);
    if (l.isMla)
      walkMla(v, c, p + "self_attn.", l.mla);
    else
      walkKda(v, c, p + "self_attn.", l.kda);
    l.isDense = c.isDenseLayer(i);
    if (l.isDense)
      walkMlp(v, p + "mlp.", c.intermediateSize, D, l.mlp);
    else
      walkMoe(v, c, p + "block_sparse_moe.", l.moe);
  }
  v.bf16(m + "norm.weight", {D}, w.norm);
  if (c.hasAttnRes())
    walkAttnRes(v, c, m + "output_attn_res", w.outputAttnRes);
  if (c.tieWordEmbeddings)
    w.lmHead = w.embedTokens;
  else
    v.bf16(c.tensorPrefix + "lm_head.weight", {c.vocabSize, D}, w.lmHead);
}

//===----------------------------------------------------------------------===//
// Listing
//===----------------------------------------------------------------------===//

class SpecCollector : public Visitor {
public:
  SpecCollector(const ModelConfig &c, StoredDtypes dtypes)
      : config_(c), published_(dtypes == StoredDtypes::Published) {}
  std::vector<TensorSpec> specs;

  void bf16(const std::string &name, std::vector<int64_t> shape,
            const TensorView *&) override {
    specs.push_back({name, DType::BF16, std::move(shape)});
  }
  void f32(const std::string &name, std::vector<int64_t> shape,
           const TensorView *&) override {
    specs.push_back({name, DType::F32, std::move(shape)});
  }
  void routerBias(const std::string &name, std::vector<int64_t> shape,
                  const TensorView *&) override {
    const bool bf16 = published_ && config_.modelType == "kimi_linear";
    specs.push_back({name, bf16 ? DType::BF16 : DType::F32, std::move(shape)});
  }
  void vector(const std::string &name, std::vector<int64_t> shape,
              const TensorView *&) override {
    const bool f32 = published_ && config_.modelType == "kimi_k3";
    specs.push_back({name, f32 ? DType::F32 : DType::BF16, std::move(shape)});
  }
  void aLog(const std::string &name, int64_t heads,
            const TensorView *&) override {
    // The layouts the published checkpoints use (K3.md §10).
    if (config_.modelType == "kimi_k3")
      specs.push_back({name, DType::F32, {std::max<int64_t>(heads, 128)}});
    else
      specs.push_back({name, DType::F32, {1, 1, heads, 1}});
  }
  void linear(const std::string &module, int64_t out, int64_t in,
              LinearWeight &) override {
    specs.push_back({module + ".weight", DType::BF16, {out, in}});
  }
  void expert(const std::string &module, int64_t out, int64_t in,
              LinearWeight &dst) override {
    if (!config_.expertsMxfp4)
      return linear(module, out, in, dst);
    specs.push_back({module + ".weight_packed", DType::U8, {out, in / 2}});
    specs.push_back({module + ".weight_scale", DType::U8, {out, in / 32}});
  }

private:
  const ModelConfig &config_;
  bool published_;
};

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

class Binder : public Visitor {
public:
  Binder(const ModelConfig &c, const TensorStore &s) : config_(c), store_(s) {}
  Status status;

  bool good() const override { return status.isOk(); }

  void bf16(const std::string &name, std::vector<int64_t> shape,
            const TensorView *&dst) override {
    dst = exact(name, {DType::BF16}, shape);
  }
  void f32(const std::string &name, std::vector<int64_t> shape,
           const TensorView *&dst) override {
    dst = exact(name, {DType::F32, DType::BF16}, shape);
  }
  void vector(const std::string &name, std::vector<int64_t> shape,
              const TensorView *&dst) override {
    dst = exact(name, {DType::F32, DType::BF16}, shape, "F32 or BF16");
  }
  void aLog(const std::string &name, int64_t heads,
            const TensorView *&dst) override {
    if (!good())
      return;
    const TensorView *t = store_.find(name);
    if (!t) {
      status = makeError("missing tensor '", name,
                         "' (expected F32 with at "
                         "least ",
                         heads, " values)");
      return;
    }
    if (t->dtype != DType::F32 || t->numel() < heads) {
      status = makeError("tensor '", name, "': expected F32 with at least ",
                         heads, " values (one per KDA head), found ",
                         describe(t->dtype, t->shape));
      return;
    }
    dst = t;
  }
  void linear(const std::string &module, int64_t out, int64_t in,
              LinearWeight &dst) override {
    dst = LinearWeight();
    dst.out = out;
    dst.in = in;
    dst.weight = exact(module + ".weight", {DType::BF16}, {out, in});
  }
  void expert(const std::string &module, int64_t out, int64_t in,
              LinearWeight &dst) override {
    if (!good())
      return;
    // MXFP4 when the config says so, or (per expert) when only the packed
    // form is present.
    bool packed =
        config_.expertsMxfp4 || (!store_.find(module + ".weight") &&
                                 store_.find(module + ".weight_packed"));
    if (!packed)
      return linear(module, out, in, dst);
    dst = LinearWeight();
    dst.mxfp4 = true;
    dst.out = out;
    dst.in = in;
    if (in % 32 != 0) {
      status = makeError("tensor '", module, ".weight_packed': input size ", in,
                         " is not a multiple of 32, so it cannot be MXFP4");
      return;
    }
    dst.packed = exact(module + ".weight_packed", {DType::U8}, {out, in / 2});
    dst.scale = exact(module + ".weight_scale", {DType::U8}, {out, in / 32});
  }

private:
  /// `name` in one of `dtypes` with exactly `shape`; messages say
  /// `wantText` (default: the first dtype) for what was expected.
  const TensorView *exact(const std::string &name,
                          std::initializer_list<DType> dtypes,
                          const std::vector<int64_t> &shape,
                          const char *wantText = nullptr) {
    if (!good())
      return nullptr;
    const TensorView *t = store_.find(name);
    const std::string want =
        (wantText ? std::string(wantText)
                  : std::string(dtypeName(*dtypes.begin()))) +
        " " + shapeText(shape);
    if (!t) {
      status = makeError("missing tensor '", name, "' (expected ", want, ")");
      return nullptr;
    }
    bool dtypeOk =
        std::find(dtypes.begin(), dtypes.end(), t->dtype) != dtypes.end();
    if (!dtypeOk || t->shape != shape) {
      status = makeError("tensor '", name, "': expected ", want, ", found ",
                         describe(t->dtype, t->shape));
      return nullptr;
    }
    return t;
  }

  const ModelConfig &config_;
  const TensorStore &store_;
};

} // namespace

std::vector<TensorSpec> expectedTensorSpecs(const ModelConfig &config,
                                            StoredDtypes dtypes) {
  SpecCollector collector(config, dtypes);
  ModelWeights scratch;
  walkModel(collector, config, scratch);
  return std::move(collector.specs);
}

std::vector<std::string> expectedTensorNames(const ModelConfig &config) {
  std::vector<std::string> names;
  for (TensorSpec &s : expectedTensorSpecs(config))
    names.push_back(std::move(s.name));
  return names;
}

Expected<ModelWeights> bindModelWeights(const ModelConfig &config,
                                        const TensorStore &store) {
  K3_RETURN_IF_ERROR(config.validate());
  Binder binder(config, store);
  ModelWeights weights;
  walkModel(binder, config, weights);
  if (!binder.status)
    return binder.status;
  return weights;
}

} // namespace k3
