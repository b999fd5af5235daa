//===- Importer.cpp - config.json to a k3 module --------------------------===//
//
// Walks the model's layers and emits one decode step (K3.md §4). Every
// weight's name, shape and element type come from the tensor table
// (runtime/model/Tensors.h); the ops' verifiers check the shapes agree.
//
//===----------------------------------------------------------------------===//
#include "import/Importer.h"

#include "dialect/K3Dialect.h"
#include "runtime/model/Tensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"

#include <initializer_list>
#include <string>
#include <utility>

using namespace mlir;
using namespace mlir::k3;
using ::k3::ModelConfig;
using ::k3::TensorId;

namespace {

/// Emits the ops of one decode step while walking the model's layers. The
/// config is checked first (importModel): every size below fits.
class ModuleBuilder {
public:
  ModuleBuilder(MLIRContext &ctx, const ModelConfig &c, int64_t maxSeq)
      : c_(c), maxSeq_(maxSeq), b_(&ctx), loc_(UnknownLoc::get(&ctx)) {}

  OwningOpRef<ModuleOp> build();

private:
  // Types.
  RankedTensorType bf16(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, b_.getBF16Type());
  }
  RankedTensorType f32(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, b_.getF32Type());
  }
  Location at(const std::string &what) {
    return NameLoc::get(b_.getStringAttr(what));
  }

  // Leaves.
  Value weight(const std::string &name, Type type) {
    return WeightOp::create(b_, loc_, type, b_.getStringAttr(name),
                            /*split=*/nullptr);
  }
  /// Tensor `id` of layer `layer` (-1 for the model's own), typed by the
  /// dtypes the table allows: bf16; a small weight bound in the dtype the
  /// checkpoint stores (bf16 or f32: the published K3 stores the KDA convs
  /// and o_norm F32, Kimi-Linear BF16), so one plan serves both (K3.md §10
  /// "Stored dtypes"); f32 for the fp32 vectors (A_log: its first H values,
  /// however the checkpoint pads or shapes it); the routed experts stacked
  /// as `experts.{e}.<which>`, bf16 or MXFP4.
  Value weight(TensorId id, int64_t layer = -1) {
    const ::k3::TensorEntry &e = ::k3::tensorEntry(id);
    std::vector<int64_t> shape = ::k3::tensorShape(c_, id);
    std::string name = ::k3::tensorName(c_, id, layer);
    switch (e.dtypes) {
    case ::k3::TensorDtypes::BF16:
      return weight(name, bf16(shape));
    case ::k3::TensorDtypes::Small:
      return weight(name, VectorWeightType::get(b_.getContext(), shape));
    case ::k3::TensorDtypes::F32:
    case ::k3::TensorDtypes::RouterBias:
    case ::k3::TensorDtypes::ALog:
      return weight(name, f32(shape));
    case ::k3::TensorDtypes::Expert:
      break;
    }
    shape.insert(shape.begin(), c_.numExperts);
    if (c_.expertsMxfp4)
      return weight(::k3::tensorBaseName(c_, id, layer),
                    Mxfp4Type::get(b_.getContext(), shape));
    return weight(name, bf16(shape));
  }
  Value state(const std::string &slot, Type type) {
    return StateOp::create(b_, loc_, type, b_.getStringAttr(slot));
  }

  Value rmsNorm(Value x, Value w, double eps) {
    return RmsNormOp::create(b_, loc_, x.getType(), x, w,
                             b_.getF64FloatAttr(eps));
  }
  Value add(Value a, Value b) {
    return AddOp::create(b_, loc_, a.getType(), a, b);
  }
  /// Names `v` as point `what` of layer `layer` for teacher-forced checks
  /// (k3.probe); returns `v`.
  Value probe(Value v, int64_t layer, const char *what) {
    ProbeOp::create(b_, loc_, v,
                    b_.getStringAttr("layers." + std::to_string(layer) + "." +
                                     what));
    return v;
  }
  /// AttnRes over the committed blocks and `p` (K3.md §4), with weights
  /// `normId` and `projId` of layer `layer`; `where` names the op.
  Value attnRes(Value p, TensorId normId, TensorId projId, int64_t layer,
                const std::string &where) {
    int64_t D = c_.hiddenSize;
    Value norm = weight(normId, layer);
    Value proj = weight(projId, layer);
    return AttnResOp::create(b_, at(where), bf16({D}), blocks_, p,
                             norm, proj, Value(),
                             b_.getI64IntegerAttr(committed_),
                             b_.getF64FloatAttr(c_.rmsNormEps));
  }
  ActivationAttr activation() {
    return ActivationAttr::get(b_.getContext(),
                               c_.hiddenAct == ::k3::Activation::SiTU
                                   ? Activation::situ
                                   : Activation::silu);
  }
  FloatAttr situBeta() {
    return c_.hiddenAct == ::k3::Activation::SiTU
               ? b_.getF64FloatAttr(c_.situBeta)
               : FloatAttr();
  }
  FloatAttr situLinearBeta() {
    return c_.hiddenAct == ::k3::Activation::SiTU && c_.hasSituLinearBeta
               ? b_.getF64FloatAttr(c_.situLinearBeta)
               : FloatAttr();
  }

  Value kda(int64_t layer, Value h);
  Value mla(int64_t layer, Value h);
  Value ffn(int64_t layer, Value h);

  const ModelConfig &c_;
  int64_t maxSeq_;
  OpBuilder b_;
  Location loc_;
  Value token_, pos_, blocks_;
  int64_t committed_ = 0;
};

std::string layerPrefix(const ModelConfig &c, int64_t layer) {
  return c.tensorPrefix + "model.layers." + std::to_string(layer) + ".";
}

Value ModuleBuilder::kda(int64_t layer, Value h) {
  const ::k3::KdaConfig &k = c_.kda;
  int64_t D = c_.hiddenSize, H = k.numHeads, d = k.headDim, C = H * d,
          W = k.convSize;
  std::string p = layerPrefix(c_, layer) + "self_attn.";
  std::string slot = "layers." + std::to_string(layer);
  Value conv = state(slot + ".conv",
                     ConvStateType::get(b_.getContext(), 3 * C, W - 1));
  Value st = state(slot + ".kda", KdaStateType::get(b_.getContext(), H, d, d));
  Value q = weight(TensorId::KdaQProj, layer);
  Value kp = weight(TensorId::KdaKProj, layer);
  Value v = weight(TensorId::KdaVProj, layer);
  Value qc = weight(TensorId::KdaQConv, layer);
  Value kc = weight(TensorId::KdaKConv, layer);
  Value vc = weight(TensorId::KdaVConv, layer);
  Value fa = weight(TensorId::KdaFAProj, layer);
  Value fb = weight(TensorId::KdaFBProj, layer);
  Value dt = weight(TensorId::KdaDtBias, layer);
  Value alog = weight(TensorId::KdaALog, layer);
  Value bp = weight(TensorId::KdaBProj, layer);
  Value on = weight(TensorId::KdaONorm, layer);
  Value o = weight(TensorId::KdaOProj, layer);
  Value g, ga, gb;
  if (k.fullRankGate) {
    g = weight(TensorId::KdaGProj, layer);
  } else {
    ga = weight(TensorId::KdaGAProj, layer);
    gb = weight(TensorId::KdaGBProj, layer);
  }
  FloatAttr lb;
  if (k.hasLowerBound)
    lb = b_.getF64FloatAttr(k.gateLowerBound);
  auto config = KdaConfigAttr::get(b_.getContext(), H, d, W, k.fullRankGate, lb);
  return KdaOp::create(b_, at(p + "kda"), bf16({D}), h, conv, st, q, kp, v, qc,
                       kc, vc, fa, fb, dt, alog, bp, on, o, g, ga, gb, config,
                       b_.getF64FloatAttr(c_.rmsNormEps));
}

Value ModuleBuilder::mla(int64_t layer, Value h) {
  int64_t D = c_.hiddenSize, N = c_.numAttentionHeads, P = c_.qkNopeHeadDim,
          R = c_.qkRopeHeadDim, L = c_.kvLoraRank, V = c_.vHeadDim,
          Q = c_.qLoraRank;
  std::string p = layerPrefix(c_, layer) + "self_attn.";
  Value cache = state("layers." + std::to_string(layer) + ".mla",
                      MlaCacheType::get(b_.getContext(), maxSeq_, L + R));
  Value qa, qan, qb, q;
  if (Q > 0) {
    qa = weight(TensorId::MlaQAProj, layer);
    qan = weight(TensorId::MlaQALayernorm, layer);
    qb = weight(TensorId::MlaQBProj, layer);
  } else {
    q = weight(TensorId::MlaQProj, layer);
  }
  Value kva = weight(TensorId::MlaKvAProj, layer);
  Value kvan = weight(TensorId::MlaKvALayernorm, layer);
  Value kvb = weight(TensorId::MlaKvBProj, layer);
  Value o = weight(TensorId::MlaOProj, layer);
  Value g;
  if (c_.mlaUseOutputGate)
    g = weight(TensorId::MlaGProj, layer);
  auto config = MlaConfigAttr::get(b_.getContext(), N, Q, L, P, R, V,
                                   c_.mlaUseOutputGate);
  return MlaOp::create(b_, at(p + "mla"), bf16({D}), h, pos_, cache, qa, qan,
                       qb, q, kva, kvan, kvb, o, g, config);
}

Value ModuleBuilder::ffn(int64_t layer, Value h) {
  int64_t D = c_.hiddenSize;
  std::string lp = layerPrefix(c_, layer);
  if (c_.isDenseLayer(layer)) {
    std::string p = lp + "mlp.";
    // Created in the order the IR has always listed them.
    Value down = weight(TensorId::MlpDownProj, layer);
    Value up = weight(TensorId::MlpUpProj, layer);
    Value gate = weight(TensorId::MlpGateProj, layer);
    return DenseMlpOp::create(b_, at(p + "dense_mlp"), bf16({D}), h, gate, up,
                              down, activation(), situBeta(), situLinearBeta());
  }
  std::string p = lp + "block_sparse_moe.";
  int64_t E = c_.numExperts, I = c_.moeIntermediateSize,
          S = c_.numSharedExperts;
  Value gate = weight(TensorId::MoeGate, layer);
  Value bias = weight(TensorId::MoeGateBias, layer);
  Value w1 = weight(TensorId::ExpertW1, layer);
  Value w3 = weight(TensorId::ExpertW3, layer);
  Value w2 = weight(TensorId::ExpertW2, layer);
  Value s1, s3, s2;
  if (S > 0) {
    s1 = weight(TensorId::SharedGateProj, layer);
    s3 = weight(TensorId::SharedUpProj, layer);
    s2 = weight(TensorId::SharedDownProj, layer);
  }
  auto config = MoeConfigAttr::get(
      b_.getContext(), E, c_.numExpertsPerToken, I, S, c_.moeRenormalize,
      b_.getF64FloatAttr(c_.routedScalingFactor));
  if (!c_.hasLatentMoe())
    return MoeOp::create(b_, at(p + "moe"), bf16({D}), h, gate, bias, w1, w3,
                         w2, s1, s3, s2, config, activation(), situBeta(),
                         situLinearBeta());
  Value down = weight(TensorId::RoutedExpertDownProj, layer);
  Value up = weight(TensorId::RoutedExpertUpProj, layer);
  Value norm;
  if (c_.latentMoeUseNorm)
    norm = weight(TensorId::RoutedExpertNorm, layer);
  return LatentMoeOp::create(b_, at(p + "latent_moe"), bf16({D}), h, gate,
                             bias, down, up, norm, w1, w3, w2, s1, s3, s2,
                             config, b_.getF64FloatAttr(c_.rmsNormEps),
                             activation(), situBeta(), situLinearBeta());
}

OwningOpRef<ModuleOp> ModuleBuilder::build() {
  MLIRContext *ctx = b_.getContext();
  ctx->loadDialect<K3Dialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc_);
  module->getOperation()->setAttr(
      kConfigAttrName, b_.getStringAttr(::k3::writeConfigJson(c_)));
  module->getOperation()->setAttr(kMaxSeqAttrName,
                                  b_.getI64IntegerAttr(maxSeq_));
  int64_t D = c_.hiddenSize, V = c_.vocabSize;
  b_.setInsertionPointToEnd(module->getBody());
  auto fnType =
      b_.getFunctionType({b_.getI32Type(), b_.getIndexType()}, {f32({V})});
  auto fn = func::FuncOp::create(b_, loc_, kDecodeStepName, fnType);
  Block *entry = fn.addEntryBlock();
  b_.setInsertionPointToStart(entry);
  token_ = entry->getArgument(0);
  pos_ = entry->getArgument(1);

  std::string mp = c_.tensorPrefix + "model.";
  Value x = EmbedOp::create(b_, at(mp + "embed_tokens"), bf16({D}), token_,
                            weight(TensorId::EmbedTokens));
  bool hasAttnRes = c_.hasAttnRes();
  if (hasAttnRes) {
    int64_t blocks = (c_.numLayers + c_.attnResBlockSize - 1) /
                     c_.attnResBlockSize;
    blocks_ = state("attn_res",
                    AttnResBlocksType::get(ctx, blocks, D));
  }
  for (int64_t l = 0; l < c_.numLayers; ++l) {
    std::string lp = layerPrefix(c_, l);
    Value inNorm = weight(TensorId::InputLayernorm, l);
    Value postNorm = weight(TensorId::PostAttentionLayernorm, l);
    auto mixer = [&](Value h) {
      Value n = rmsNorm(h, inNorm, c_.rmsNormEps);
      return c_.isMlaLayer(l) ? mla(l, n) : kda(l, n);
    };
    auto mlp = [&](Value m) {
      return ffn(l, rmsNorm(m, postNorm, c_.rmsNormEps));
    };
    if (!hasAttnRes) {
      // Plain pre-norm residual: h = x + Mixer(norm(x)); x = h + FFN(norm(h)).
      Value h = probe(add(x, mixer(x)), l, "mixer");
      x = probe(add(h, mlp(h)), l, "out");
      continue;
    }
    // K3.md §4: p is the partial block, B the committed blocks.
    Value p = x;
    Value h = committed_ > 0
                  ? attnRes(p, TensorId::SelfAttentionResNorm,
                            TensorId::SelfAttentionResProj, l,
                            lp + "self_attention_res")
                  : p;
    bool commit = l % c_.attnResBlockSize == 0;
    if (commit) {
      AttnResCommitOp::create(b_, at(lp + "attn_res_commit"), blocks_, p,
                              b_.getI64IntegerAttr(committed_));
      ++committed_;
    }
    Value a = mixer(h);
    p = probe(commit ? a : add(p, a), l, "mixer");
    Value m = attnRes(p, TensorId::MlpResNorm, TensorId::MlpResProj, l,
                      lp + "mlp_res");
    x = probe(add(p, mlp(m)), l, "out");
  }
  Value final = hasAttnRes ? attnRes(x, TensorId::OutputAttnResNorm,
                                     TensorId::OutputAttnResProj, -1,
                                     mp + "output_attn_res")
                          : x;
  Value n = rmsNorm(final, weight(TensorId::FinalNorm), c_.rmsNormEps);
  Value head = weight(c_.tieWordEmbeddings ? TensorId::EmbedTokens
                                           : TensorId::LmHead);
  Value logits = LmHeadOp::create(b_, at(c_.tensorPrefix + "lm_head"), f32({V}),
                                  n, head);
  func::ReturnOp::create(b_, loc_, logits);
  return module;
}

//===----------------------------------------------------------------------===//
// Config checks
//===----------------------------------------------------------------------===//

/// The largest tensor or state a plan may hold (docs/PLAN.md: 1 TiB), and its
/// largest max_seq.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 40;
constexpr int64_t kMaxSeqLimit = int64_t(1) << 24;

/// One factor of a derived size: the config field it comes from and its
/// value.
using Factor = std::pair<const char *, int64_t>;

/// elemBytes times the product of `factors`, or an error naming the fields
/// (joined by " * ") when that is not positive or exceeds kMaxTensorBytes.
/// Never wraps: every step is checked.
std::string checkTensor(const char *what, int64_t elemBytes,
                        std::initializer_list<Factor> factors) {
  int64_t n = elemBytes;
  bool ok = true;
  std::string fields;
  for (const Factor &f : factors) {
    fields += (fields.empty() ? "" : " * ") + std::string(f.first) + " (" +
              std::to_string(f.second) + ")";
    if (f.second <= 0 || __builtin_mul_overflow(n, f.second, &n) ||
        n > kMaxTensorBytes)
      ok = false;
  }
  if (ok)
    return "";
  return std::string(what) + " needs " + fields + " * " +
         std::to_string(elemBytes) +
         " bytes, which is not positive or exceeds the 2^40 bytes a plan "
         "tensor may hold";
}

/// The first size the module would build that overflows or exceeds what a
/// plan can hold, as a message naming the config fields; "" when none.
/// ModelConfig::validate bounds each field; this bounds their products,
/// before any type is built (a wrapped size would otherwise surface as
/// "'k3l.state' op expects a positive size but got -48...").
std::string checkSizes(const ModelConfig &c, int64_t maxSeq) {
  if (maxSeq < 1 || maxSeq > kMaxSeqLimit)
    return "max_seq " + std::to_string(maxSeq) + " is outside [1, " +
           std::to_string(kMaxSeqLimit) + "]";
  const Factor V{"vocab_size", c.vocabSize}, D{"hidden_size", c.hiddenSize},
      H{"linear_attn_config.num_heads", c.kda.numHeads},
      d{"linear_attn_config.head_dim", c.kda.headDim},
      N{"num_attention_heads", c.numAttentionHeads},
      L{"kv_lora_rank", c.kvLoraRank},
      I{"moe_intermediate_size", c.moeIntermediateSize},
      E{"num_experts", c.numExperts},
      Dm{c.hasLatentMoe() ? "routed_expert_hidden_size" : "hidden_size",
         c.moeHiddenSize()},
      T{"max_seq", maxSeq};
  const Factor PR{"qk_nope_head_dim + qk_rope_head_dim",
                  c.qkNopeHeadDim + c.qkRopeHeadDim},
      PV{"qk_nope_head_dim + v_head_dim", c.qkNopeHeadDim + c.vHeadDim},
      LR{"kv_lora_rank + qk_rope_head_dim", c.kvLoraRank + c.qkRopeHeadDim};
  std::string e;
  auto check = [&](const char *what, int64_t bytes,
                   std::initializer_list<Factor> f) {
    if (e.empty())
      e = checkTensor(what, bytes, f);
  };
  check("embed_tokens", 2, {V, D});
  check("the KDA state", 4, {H, d, d});
  check("the KDA projections", 2, {H, d, D});
  check("the KDA conv state", 4,
        {{"3", 3}, H, d, {"short_conv_kernel_size", c.kda.convSize}});
  check("the MLA q projection", 2,
        {N, PR, c.qLoraRank > 0 ? Factor{"q_lora_rank", c.qLoraRank} : D});
  check("kv_b_proj", 2, {N, PV, L});
  check("o_proj", 2, {D, N, {"v_head_dim", c.vHeadDim}});
  check("the MLA cache", 2, {T, LR});
  if (c.firstKDenseReplace > 0)
    check("the dense MLP", 2, {{"intermediate_size", c.intermediateSize}, D});
  check("the router gate", 2, {E, D});
  check("the routed experts (one matrix, all experts)", 2, {E, I, Dm});
  if (c.numSharedExperts > 0)
    check("the shared experts", 2,
          {{"num_shared_experts", c.numSharedExperts}, I, D});
  if (c.hasAttnRes())
    check("the AttnRes blocks", 2,
          {{"num_hidden_layers / attn_res_block_size",
            (c.numLayers + c.attnResBlockSize - 1) / c.attnResBlockSize},
           D});
  return e;
}

} // namespace

OwningOpRef<ModuleOp> mlir::k3::importModel(MLIRContext &ctx,
                                            const ModelConfig &config,
                                            int64_t maxSeq) {
  // A config that did not come through the reader, or sizes that are each in
  // range but multiply past what a plan can hold: refused here, naming the
  // config field, instead of as a wrapped size in some op's verifier.
  ::k3::Status valid = config.validate();
  std::string sizes = valid ? checkSizes(config, maxSeq) : "";
  if (!valid || !sizes.empty()) {
    emitError(UnknownLoc::get(&ctx))
        << "config: " << (valid ? sizes : valid.message());
    return nullptr;
  }
  return ModuleBuilder(ctx, config, maxSeq).build();
}
