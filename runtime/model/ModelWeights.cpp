//===- ModelWeights.cpp - A model's tensors, by role ----------------------===//
//
// Binding runs the walk of the tensor table (forEachModelTensor) against a
// TensorStore: each tensor's name, shape and allowed dtypes come from the
// table, and slotOf says which field of ModelWeights it fills. The model
// maker writes what expectedTensorSpecs lists from the same walk, so a
// checkpoint the maker writes always binds, and a name can only be wrong in
// one place.
//
//===----------------------------------------------------------------------===//
#include "runtime/model/ModelWeights.h"

#include <algorithm>

namespace k3 {

namespace {

std::string describe(DType t, const std::vector<int64_t> &shape) {
  return std::string(dtypeName(t)) + " " + shapeString(shape);
}

/// The field a tensor fills: a plain view, or a Linear.
struct Slot {
  const TensorView **view = nullptr;
  LinearWeight *linear = nullptr;
};

Slot viewSlot(const TensorView *&v) {
  Slot s;
  s.view = &v;
  return s;
}
Slot linearSlot(LinearWeight &l) {
  Slot s;
  s.linear = &l;
  return s;
}

/// Where tensor `t` goes in `w` (whose layers and experts are sized).
Slot slotOf(ModelWeights &w, const ModelTensor &t) {
  using I = TensorId;
  switch (t.entry->id) {
  case I::EmbedTokens:
    return viewSlot(w.embedTokens);
  case I::FinalNorm:
    return viewSlot(w.norm);
  case I::OutputAttnResNorm:
    return viewSlot(w.outputAttnRes.norm);
  case I::OutputAttnResProj:
    return viewSlot(w.outputAttnRes.proj);
  case I::LmHead:
    return viewSlot(w.lmHead);
  default:
    break;
  }
  LayerWeights &l = w.layers[static_cast<size_t>(t.layer)];
  KdaWeights &k = l.kda;
  MlaWeights &a = l.mla;
  MoeWeights &m = l.moe;
  switch (t.entry->id) {
  case I::InputLayernorm:
    return viewSlot(l.inputLayernorm);
  case I::PostAttentionLayernorm:
    return viewSlot(l.postAttentionLayernorm);
  case I::SelfAttentionResNorm:
    return viewSlot(l.selfAttentionRes.norm);
  case I::SelfAttentionResProj:
    return viewSlot(l.selfAttentionRes.proj);
  case I::MlpResNorm:
    return viewSlot(l.mlpRes.norm);
  case I::MlpResProj:
    return viewSlot(l.mlpRes.proj);
  case I::KdaQProj:
    return linearSlot(k.qProj);
  case I::KdaKProj:
    return linearSlot(k.kProj);
  case I::KdaVProj:
    return linearSlot(k.vProj);
  case I::KdaQConv:
    return viewSlot(k.qConv);
  case I::KdaKConv:
    return viewSlot(k.kConv);
  case I::KdaVConv:
    return viewSlot(k.vConv);
  case I::KdaFAProj:
    return linearSlot(k.fAProj);
  case I::KdaFBProj:
    return linearSlot(k.fBProj);
  case I::KdaDtBias:
    return viewSlot(k.dtBias);
  case I::KdaALog:
    return viewSlot(k.aLog);
  case I::KdaBProj:
    return linearSlot(k.bProj);
  case I::KdaGProj:
    return linearSlot(k.gProj);
  case I::KdaGAProj:
    return linearSlot(k.gAProj);
  case I::KdaGBProj:
    return linearSlot(k.gBProj);
  case I::KdaONorm:
    return viewSlot(k.oNorm);
  case I::KdaOProj:
    return linearSlot(k.oProj);
  case I::MlaQAProj:
    return linearSlot(a.qAProj);
  case I::MlaQALayernorm:
    return viewSlot(a.qALayernorm);
  case I::MlaQBProj:
    return linearSlot(a.qBProj);
  case I::MlaQProj:
    return linearSlot(a.qProj);
  case I::MlaKvAProj:
    return linearSlot(a.kvAProj);
  case I::MlaKvALayernorm:
    return viewSlot(a.kvALayernorm);
  case I::MlaKvBProj:
    return linearSlot(a.kvBProj);
  case I::MlaGProj:
    return linearSlot(a.gProj);
  case I::MlaOProj:
    return linearSlot(a.oProj);
  case I::MlpGateProj:
    return linearSlot(l.mlp.gate);
  case I::MlpUpProj:
    return linearSlot(l.mlp.up);
  case I::MlpDownProj:
    return linearSlot(l.mlp.down);
  case I::MoeGate:
    return linearSlot(m.gate);
  case I::MoeGateBias:
    return viewSlot(m.eScoreCorrectionBias);
  case I::ExpertW1:
    return linearSlot(m.experts[static_cast<size_t>(t.expert)].gate);
  case I::ExpertW2:
    return linearSlot(m.experts[static_cast<size_t>(t.expert)].down);
  case I::ExpertW3:
    return linearSlot(m.experts[static_cast<size_t>(t.expert)].up);
  case I::SharedGateProj:
    return linearSlot(m.shared.gate);
  case I::SharedUpProj:
    return linearSlot(m.shared.up);
  case I::SharedDownProj:
    return linearSlot(m.shared.down);
  case I::RoutedExpertDownProj:
    return linearSlot(m.routedDown);
  case I::RoutedExpertUpProj:
    return linearSlot(m.routedUp);
  case I::RoutedExpertNorm:
    return viewSlot(m.routedNorm);
  default:
    return Slot();
  }
}

class Binder {
public:
  Binder(const ModelConfig &c, const TensorStore &s) : config_(c), store_(s) {}
  Status status;

  bool good() const { return status.isOk(); }

  /// Binds one tensor of the walk; false once binding has failed.
  bool bind(ModelWeights &w, const ModelTensor &t) {
    const TensorEntry &e = *t.entry;
    Slot slot = slotOf(w, t);
    if (e.dtypes == TensorDtypes::ALog)
      aLog(t.name, t.shape[0], *slot.view);
    else if (e.dtypes == TensorDtypes::Expert)
      expert(t.name, t.shape[0], t.shape[1], *slot.linear);
    else if (slot.linear)
      linear(t.name, e.dtypes, t.shape[0], t.shape[1], *slot.linear);
    else
      *slot.view = exact(e.linear ? t.name + ".weight" : t.name, e.dtypes,
                         t.shape);
    return good();
  }

private:
  /// KDA A_log: F32 with at least `heads` values, any shape.
  void aLog(const std::string &name, int64_t heads, const TensorView *&dst) {
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
  /// A Linear `module.weight` [out, in].
  void linear(const std::string &module, TensorDtypes dtypes, int64_t out,
              int64_t in, LinearWeight &dst) {
    dst = LinearWeight();
    dst.out = out;
    dst.in = in;
    dst.weight = exact(module + ".weight", dtypes, {out, in});
  }
  /// A routed expert's Linear: bf16 `.weight` or MXFP4 `.weight_packed` +
  /// `.weight_scale`.
  void expert(const std::string &module, int64_t out, int64_t in,
              LinearWeight &dst) {
    // MXFP4 when the config says so, or (per expert) when only the packed
    // form is present.
    bool packed =
        config_.expertsMxfp4 || (!store_.find(module + ".weight") &&
                                 store_.find(module + ".weight_packed"));
    if (!packed)
      return linear(module, TensorDtypes::Expert, out, in, dst);
    dst = LinearWeight();
    dst.mxfp4 = true;
    dst.out = out;
    dst.in = in;
    if (in % 32 != 0) {
      status = makeError("tensor '", module, ".weight_packed': input size ", in,
                         " is not a multiple of 32, so it cannot be MXFP4");
      return;
    }
    dst.packed = exact(module + ".weight_packed", {DType::U8}, "U8",
                       {out, in / 2});
    dst.scale = exact(module + ".weight_scale", {DType::U8}, "U8",
                      {out, in / 32});
  }

  /// `name` in a dtype `dtypes` allows, with exactly `shape`.
  const TensorView *exact(const std::string &name, TensorDtypes dtypes,
                          const std::vector<int64_t> &shape) {
    return exact(name, [&](DType t) { return tensorDtypeAllowed(dtypes, t); },
                 tensorDtypesText(dtypes), shape);
  }
  /// `name` in a dtype `allowed` admits with exactly `shape`; messages say
  /// `wantText` for what was expected.
  template <typename Allowed>
  const TensorView *exact(const std::string &name, Allowed allowed,
                          const char *wantText,
                          const std::vector<int64_t> &shape) {
    if (!good())
      return nullptr;
    const TensorView *t = store_.find(name);
    const std::string want = std::string(wantText) + " " + shapeString(shape);
    if (!t) {
      status = makeError("missing tensor '", name, "' (expected ", want, ")");
      return nullptr;
    }
    if (!allowed(t->dtype) || t->shape != shape) {
      status = makeError("tensor '", name, "': expected ", want, ", found ",
                         describe(t->dtype, t->shape));
      return nullptr;
    }
    return t;
  }
  const TensorView *exact(const std::string &name,
                          std::initializer_list<DType> dtypes,
                          const char *wantText,
                          const std::vector<int64_t> &shape) {
    return exact(
        name,
        [&](DType t) {
          return std::find(dtypes.begin(), dtypes.end(), t) != dtypes.end();
        },
        wantText, shape);
  }

  const ModelConfig &config_;
  const TensorStore &store_;
};

} // namespace

Expected<ModelWeights> bindModelWeights(const ModelConfig &config,
                                        const TensorStore &store) {
  K3_RETURN_IF_ERROR(config.validate());
  ModelWeights weights;
  weights.layers.resize(static_cast<size_t>(config.numLayers));
  for (int64_t i = 0; i < config.numLayers; ++i) {
    LayerWeights &l = weights.layers[static_cast<size_t>(i)];
    l.isMla = config.isMlaLayer(i);
    l.isDense = config.isDenseLayer(i);
    if (!l.isDense)
      l.moe.experts.resize(static_cast<size_t>(config.numExperts));
  }
  Binder binder(config, store);
  forEachModelTensor(config, [&](const ModelTensor &t) {
    return binder.bind(weights, t);
  });
  if (!binder.status)
    return binder.status;
  if (config.tieWordEmbeddings)
    weights.lmHead = weights.embedTokens;
  return weights;
}

} // namespace k3
