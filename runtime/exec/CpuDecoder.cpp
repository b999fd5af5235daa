//===- CpuDecoder.cpp - Hand-written CPU decode of a whole model ----------===//
//
// One decode step is a fixed sequence of CPU kernel calls (see step()); the
// only logic here is the AttnRes bookkeeping of K3.md §4, the choice between
// layer kinds, and resolving ModelWeights to raw pointers once at create().
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/CpuDecoder.h"

#include "kernels/attnres/AttnResCpu.h"
#include "kernels/elementwise/ElementwiseCpu.h"
#include "kernels/embed/EmbedCpu.h"
#include "kernels/gemv/GemvCpu.h"
#include "kernels/head/HeadCpu.h"
#include "kernels/kda/KdaCpu.h"
#include "kernels/mla/MlaCpu.h"
#include "kernels/moe/MoeCpu.h"
#include "kernels/norm/NormCpu.h"

#include "kernels/common/BF16.h"
#include "runtime/io/Tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace k3 {

//===----------------------------------------------------------------------===//
// Resolving weights
//===----------------------------------------------------------------------===//

namespace {

/// A bf16 vector or matrix with `numel` elements.
Status resolveBf16(const TensorView *t, int64_t numel, const std::string &what,
                   const uint16_t *&out) {
  if (!t)
    return makeError(what, ": tensor missing from the model weights");
  if (t->dtype != DType::BF16)
    return makeError(t->name, " (", what, "): expected BF16, found ",
                     dtypeName(t->dtype));
  if (t->numel() != numel)
    return makeError(t->name, " (", what, "): expected ", numel,
                     " elements, found shape ", shapeString(t->shape));
  out = t->as<uint16_t>();
  return Status::ok();
}

/// A small weight read element by element (conv filters, o_norm), kept in
/// the dtype the checkpoint stores (BF16 or F32, K3.md §10); a tensor that
/// is misaligned in the file is copied into `copy`.
Status resolveVector(const TensorView *t, int64_t numel,
                     const std::string &what, VectorRef &out,
                     std::vector<float> &copy) {
  if (!t)
    return makeError(what, ": tensor missing from the model weights");
  if (t->dtype != DType::BF16 && t->dtype != DType::F32)
    return makeError(t->name, " (", what, "): expected F32 or BF16, found ",
                     dtypeName(t->dtype));
  if (t->numel() != numel)
    return makeError(t->name, " (", what, "): expected ", numel,
                     " elements, found shape ", shapeString(t->shape));
  const size_t size = t->dtype == DType::F32 ? 4 : 2;
  out.dtype = t->dtype == DType::F32 ? kVectorF32 : kVectorBf16;
  out.data = t->data;
  if (reinterpret_cast<uintptr_t>(t->data) % size != 0) {
    copy.resize((numel * size + 3) / 4);
    std::memcpy(copy.data(), t->data, numel * size);
    out.data = copy.data();
  }
  return Status::ok();
}

/// The first `count` values of an F32 or BF16 tensor, widened to fp32 (A_log
/// may be zero-padded beyond the heads, K3.md §1).
Status resolveFloats(const TensorView *t, int64_t count,
                     const std::string &what, std::vector<float> &out) {
  if (!t)
    return makeError(what, ": tensor missing from the model weights");
  if (t->numel() < count)
    return makeError(t->name, " (", what, "): expected at least ", count,
                     " elements, found shape ", shapeString(t->shape));
  out.resize(count);
  if (t->dtype == DType::F32) {
    std::memcpy(out.data(), t->data, sizeof(float) * count);
  } else if (t->dtype == DType::BF16) {
    for (int64_t i = 0; i < count; ++i)
      out[i] = bf16ToFloat(t->as<uint16_t>()[i]);
  } else {
    return makeError(t->name, " (", what, "): expected F32 or BF16, found ",
                     dtypeName(t->dtype));
  }
  return Status::ok();
}

/// A projection [rows, cols] in bf16 or MXFP4.
Status resolveLinear(const LinearWeight &w, int64_t rows, int64_t cols,
                     const std::string &what, WeightRef &out) {
  if (!w.present())
    return makeError(what, ": weight missing from the model weights");
  if (w.out != rows || w.in != cols)
    return makeError(what, ": expected [", rows, ", ", cols, "], found [",
                     w.out, ", ", w.in, "]");
  out = WeightRef();
  if (!w.mxfp4) {
    out.format = kWeightBf16;
    return resolveBf16(w.weight, rows * cols, what, out.bf16);
  }
  if (cols % 32 != 0)
    return makeError(what, ": MXFP4 needs the input width (", cols,
                     ") to be a multiple of 32");
  if (!w.packed || !w.scale || w.packed->dtype != DType::U8 ||
      w.scale->dtype != DType::U8 || w.packed->numel() != rows * cols / 2 ||
      w.scale->numel() != rows * cols / 32)
    return makeError(what, ": MXFP4 weight needs U8 packed [", rows, ", ",
                     cols / 2, "] and U8 scale [", rows, ", ", cols / 32, "]");
  out.format = kWeightMxfp4;
  out.packed = w.packed->as<uint8_t>();
  out.scale = w.scale->as<uint8_t>();
  return Status::ok();
}

int32_t activationOf(const ModelConfig &c) {
  return c.hiddenAct == Activation::SiTU ? kActSiTU : kActSwiGLU;
}

} // namespace

Expected<CpuDecoder> CpuDecoder::create(const ModelConfig &config,
                                        const ModelWeights &weights,
                                        int64_t maxSeq) {
  if (maxSeq < 1)
    return makeError("CpuDecoder: maxSeq must be at least 1, got ", maxSeq);
  if (static_cast<int64_t>(weights.layers.size()) != config.numLayers)
    return makeError("CpuDecoder: the weights have ", weights.layers.size(),
                     " layers but the config has ", config.numLayers);
  if (config.numExpertGroup > 1 && config.topkGroup < config.numExpertGroup)
    return makeError("CpuDecoder: group-limited routing (num_expert_group ",
                     config.numExpertGroup, ", topk_group ", config.topkGroup,
                     ") is not supported");

  const ModelConfig &c = config;
  const int64_t D = c.hiddenSize, V = c.vocabSize;
  const int64_t H = c.kda.numHeads, d = c.kda.headDim, C = c.kdaChannels();
  const int64_t W = c.kda.convSize;
  const int64_t N = c.numAttentionHeads, P = c.qkNopeHeadDim,
                R = c.qkRopeHeadDim, Vd = c.vHeadDim, L = c.kvLoraRank;
  const int64_t Dm = c.moeHiddenSize(), I = c.moeIntermediateSize,
                E = c.numExperts, SI = c.numSharedExperts * I;

  CpuDecoder dec;
  dec.config_ = config;
  dec.maxSeq_ = maxSeq;
  K3_RETURN_IF_ERROR(resolveBf16(weights.embedTokens, V * D,
                                 "model.embed_tokens", dec.embed_));
  K3_RETURN_IF_ERROR(
      resolveBf16(weights.norm, D, "model.norm", dec.finalNorm_));
  if (!weights.lmHead)
    return makeError("lm_head: tensor missing from the model weights");
  dec.lmHead_.format = kWeightBf16;
  K3_RETURN_IF_ERROR(
      resolveBf16(weights.lmHead, V * D, "lm_head", dec.lmHead_.bf16));
  if (c.hasAttnRes()) {
    K3_RETURN_IF_ERROR(resolveBf16(weights.outputAttnRes.norm, D,
                                   "output_attn_res_norm", dec.outResNorm_));
    K3_RETURN_IF_ERROR(resolveBf16(weights.outputAttnRes.proj, D,
                                   "output_attn_res_proj", dec.outResProj_));
  }

  dec.layers_.resize(c.numLayers);
  for (int64_t l = 0; l < c.numLayers; ++l) {
    const LayerWeights &lw = weights.layers[l];
    Layer &ly = dec.layers_[l];
    const std::string at = "layer " + std::to_string(l) + " ";
    ly.isMla = lw.isMla;
    ly.isDense = lw.isDense;
    K3_RETURN_IF_ERROR(
        resolveBf16(lw.inputLayernorm, D, at + "input_layernorm", ly.inputLn));
    K3_RETURN_IF_ERROR(resolveBf16(lw.postAttentionLayernorm, D,
                                   at + "post_attention_layernorm", ly.postLn));
    if (c.hasAttnRes()) {
      K3_RETURN_IF_ERROR(resolveBf16(lw.selfAttentionRes.norm, D,
                                     at + "self_attention_res_norm",
                                     ly.attnResNorm));
      K3_RETURN_IF_ERROR(resolveBf16(lw.selfAttentionRes.proj, D,
                                     at + "self_attention_res_proj",
                                     ly.attnResProj));
      K3_RETURN_IF_ERROR(
          resolveBf16(lw.mlpRes.norm, D, at + "mlp_res_norm", ly.mlpResNorm));
      K3_RETURN_IF_ERROR(
          resolveBf16(lw.mlpRes.proj, D, at + "mlp_res_proj", ly.mlpResProj));
    }

    if (!ly.isMla) {
      const KdaWeights &k = lw.kda;
      const std::string sa = at + "self_attn.";
      K3_RETURN_IF_ERROR(resolveLinear(k.qProj, C, D, sa + "q_proj", ly.q));
      K3_RETURN_IF_ERROR(resolveLinear(k.kProj, C, D, sa + "k_proj", ly.k));
      K3_RETURN_IF_ERROR(resolveLinear(k.vProj, C, D, sa + "v_proj", ly.v));
      K3_RETURN_IF_ERROR(resolveVector(k.qConv, C * W, sa + "q_conv1d",
                                       ly.convQ, ly.vectorCopies[0]));
      K3_RETURN_IF_ERROR(resolveVector(k.kConv, C * W, sa + "k_conv1d",
                                       ly.convK, ly.vectorCopies[1]));
      K3_RETURN_IF_ERROR(resolveVector(k.vConv, C * W, sa + "v_conv1d",
                                       ly.convV, ly.vectorCopies[2]));
      K3_RETURN_IF_ERROR(resolveLinear(k.fAProj, d, D, sa + "f_a_proj", ly.fA));
      K3_RETURN_IF_ERROR(resolveLinear(k.fBProj, C, d, sa + "f_b_proj", ly.fB));
      K3_RETURN_IF_ERROR(resolveFloats(k.dtBias, C, sa + "dt_bias", ly.dtBias));
      K3_RETURN_IF_ERROR(resolveFloats(k.aLog, H, sa + "A_log", ly.aLog));
      K3_RETURN_IF_ERROR(resolveLinear(k.bProj, H, D, sa + "b_proj", ly.b));
      if (c.kda.fullRankGate) {
        K3_RETURN_IF_ERROR(resolveLinear(k.gProj, C, D, sa + "g_proj", ly.g));
      } else {
        K3_RETURN_IF_ERROR(
            resolveLinear(k.gAProj, d, D, sa + "g_a_proj", ly.gA));
        K3_RETURN_IF_ERROR(
            resolveLinear(k.gBProj, C, d, sa + "g_b_proj", ly.gB));
      }
      K3_RETURN_IF_ERROR(resolveVector(k.oNorm, d, sa + "o_norm", ly.oNorm,
                                       ly.vectorCopies[3]));
      K3_RETURN_IF_ERROR(resolveLinear(k.oProj, D, C, sa + "o_proj", ly.o));
      ly.state.assign(H * d * d, 0.0f);
      ly.convStateQ.assign(C * (W - 1), 0.0f);
      ly.convStateK.assign(C * (W - 1), 0.0f);
      ly.convStateV.assign(C * (W - 1), 0.0f);
    } else {
      const MlaWeights &m = lw.mla;
      const std::string sa = at + "self_attn.";
      if (c.qLoraRank > 0) {
        K3_RETURN_IF_ERROR(
            resolveLinear(m.qAProj, c.qLoraRank, D, sa + "q_a_proj", ly.qA));
        K3_RETURN_IF_ERROR(resolveBf16(m.qALayernorm, c.qLoraRank,
                                       sa + "q_a_layernorm", ly.qALn));
        K3_RETURN_IF_ERROR(resolveLinear(m.qBProj, N * (P + R), c.qLoraRank,
                                         sa + "q_b_proj", ly.qB));
      } else {
        K3_RETURN_IF_ERROR(
            resolveLinear(m.qProj, N * (P + R), D, sa + "q_proj", ly.q));
      }
      K3_RETURN_IF_ERROR(resolveLinear(m.kvAProj, L + R, D,
                                       sa + "kv_a_proj_with_mqa", ly.kvA));
      K3_RETURN_IF_ERROR(
          resolveBf16(m.kvALayernorm, L, sa + "kv_a_layernorm", ly.kvALn));
      WeightRef kvB;
      K3_RETURN_IF_ERROR(
          resolveLinear(m.kvBProj, N * (P + Vd), L, sa + "kv_b_proj", kvB));
      if (kvB.format != kWeightBf16)
        return makeError(sa, "kv_b_proj: must be bf16 (mla_attend reads it "
                             "directly)");
      ly.kvB = kvB.bf16;
      if (c.mlaUseOutputGate)
        K3_RETURN_IF_ERROR(
            resolveLinear(m.gProj, N * Vd, D, sa + "g_proj", ly.g));
      K3_RETURN_IF_ERROR(
          resolveLinear(m.oProj, D, N * Vd, sa + "o_proj", ly.o));
      ly.cache.assign(maxSeq * (L + R), 0);
    }

    if (ly.isDense) {
      const std::string mp = at + "mlp.";
      const int64_t Id = c.intermediateSize;
      K3_RETURN_IF_ERROR(
          resolveLinear(lw.mlp.gate, Id, D, mp + "gate_proj", ly.mlpGate));
      K3_RETURN_IF_ERROR(
          resolveLinear(lw.mlp.up, Id, D, mp + "up_proj", ly.mlpUp));
      K3_RETURN_IF_ERROR(
          resolveLinear(lw.mlp.down, D, Id, mp + "down_proj", ly.mlpDown));
    } else {
      const MoeWeights &moe = lw.moe;
      const std::string mp = at + "block_sparse_moe.";
      WeightRef gate;
      K3_RETURN_IF_ERROR(resolveLinear(moe.gate, E, D, mp + "gate", gate));
      if (gate.format != kWeightBf16)
        return makeError(mp, "gate: the router weight must be bf16");
      ly.router = gate.bf16;
      K3_RETURN_IF_ERROR(resolveFloats(moe.eScoreCorrectionBias, E,
                                       mp + "gate.e_score_correction_bias",
                                       ly.routerBias));
      if (static_cast<int64_t>(moe.experts.size()) != E)
        return makeError(mp, "experts: expected ", E, ", found ",
                         moe.experts.size());
      ly.w1.resize(E);
      ly.w3.resize(E);
      ly.w2.resize(E);
      for (int64_t e = 0; e < E; ++e) {
        const std::string ex = mp + "experts." + std::to_string(e) + ".";
        const MlpWeights &x = moe.experts[e];
        K3_RETURN_IF_ERROR(resolveLinear(x.gate, I, Dm, ex + "w1", ly.w1[e]));
        K3_RETURN_IF_ERROR(resolveLinear(x.up, I, Dm, ex + "w3", ly.w3[e]));
        K3_RETURN_IF_ERROR(resolveLinear(x.down, Dm, I, ex + "w2", ly.w2[e]));
      }
      ly.hasShared = SI > 0;
      if (ly.hasShared) {
        const std::string sh = mp + "shared_experts.";
        K3_RETURN_IF_ERROR(resolveLinear(moe.shared.gate, SI, D,
                                         sh + "gate_proj", ly.mlpGate));
        K3_RETURN_IF_ERROR(
            resolveLinear(moe.shared.up, SI, D, sh + "up_proj", ly.mlpUp));
        K3_RETURN_IF_ERROR(resolveLinear(moe.shared.down, D, SI,
                                         sh + "down_proj", ly.mlpDown));
      }
      if (c.hasLatentMoe()) {
        K3_RETURN_IF_ERROR(resolveLinear(moe.routedDown, Dm, D,
                                         mp + "routed_expert_down_proj",
                                         ly.routedDown));
        K3_RETURN_IF_ERROR(resolveLinear(
            moe.routedUp, D, Dm, mp + "routed_expert_up_proj", ly.routedUp));
        if (c.latentMoeUseNorm)
          K3_RETURN_IF_ERROR(resolveBf16(
              moe.routedNorm, Dm, mp + "routed_expert_norm", ly.routedNorm));
      }
    }
  }

  // Scratch: every mixer-width buffer holds the widest of C, N(P+R), N·V.
  const int64_t wide = std::max({C, N * (P + R), N * Vd, L + R, D, int64_t(1)});
  for (auto *buf : {&dec.x_, &dec.p_, &dec.h_, &dec.m_, &dec.fin_, &dec.hn_,
                    &dec.routed_, &dec.ffn_})
    buf->assign(D, 0);
  for (auto *buf : {&dec.uq_, &dec.uk_, &dec.uv_, &dec.f_, &dec.gt_, &dec.y_,
                    &dec.q_, &dec.kv_})
    buf->assign(wide, 0);
  dec.small1_.assign(std::max<int64_t>(d, 1), 0);
  dec.small2_.assign(std::max<int64_t>(d, 1), 0);
  dec.beta_.assign(std::max<int64_t>(H, 1), 0);
  dec.qa_.assign(std::max<int64_t>(c.qLoraRank, 1), 0);
  dec.z_.assign(std::max<int64_t>(Dm, 1), 0);
  dec.r_.assign(std::max<int64_t>(Dm, 1), 0);
  dec.ids_.assign(std::max<int64_t>(c.numExpertsPerToken, 1), 0);
  dec.routeWeights_.assign(std::max<int64_t>(c.numExpertsPerToken, 1), 0.0f);
  if (c.hasAttnRes()) {
    const int64_t maxBlocks =
        (c.numLayers + c.attnResBlockSize - 1) / c.attnResBlockSize;
    dec.blocks_.assign(maxBlocks * D, 0);
  }
  return dec;
}

//===----------------------------------------------------------------------===//
// Decoding
//===----------------------------------------------------------------------===//

void CpuDecoder::reset() {
  pos_ = 0;
  numBlocks_ = 0;
  for (Layer &ly : layers_) {
    std::fill(ly.state.begin(), ly.state.end(), 0.0f);
    std::fill(ly.convStateQ.begin(), ly.convStateQ.end(), 0.0f);
    std::fill(ly.convStateK.begin(), ly.convStateK.end(), 0.0f);
    std::fill(ly.convStateV.begin(), ly.convStateV.end(), 0.0f);
    std::fill(ly.cache.begin(), ly.cache.end(), 0);
  }
}

namespace {

/// out = R(W x) (+ residual, then R), bf16: one `linear`.
void project(const WeightRef &w, int64_t n, int64_t k, const uint16_t *x,
             uint16_t *out, const uint16_t *residual = nullptr) {
  LinearParams lp;
  lp.x = x;
  lp.w = w;
  lp.n = n;
  lp.k = k;
  lp.residual = residual;
  lp.out = out;
  linearCpu(lp);
}

/// A linear_multi over x (pre-normed by `norm`) with no entries yet.
LinearMultiParams multiProjection(const uint16_t *x, int64_t k,
                                  const uint16_t *norm, float eps) {
  LinearMultiParams mp;
  mp.x = x;
  mp.k = k;
  mp.normWeight = norm;
  mp.normEps = eps;
  return mp;
}

void addProjection(LinearMultiParams &mp, const WeightRef &w, int64_t n,
                   uint16_t *out) {
  LinearMultiEntry &e = mp.entries[mp.count++];
  e.w = w;
  e.n = n;
  e.out = out;
}

} // namespace

/// KDA mixer (K3.md §2): one linear_multi for everything read from h, the
/// low-rank f_b (and g_b), kda_decode, o_proj with the residual epilogue.
void CpuDecoder::runKda(Layer &ly, const uint16_t *h, const uint16_t *residual,
                        uint16_t *out) {
  const ModelConfig &c = config_;
  const int64_t D = c.hiddenSize, H = c.kda.numHeads, d = c.kda.headDim,
                C = c.kdaChannels();
  LinearMultiParams mp = multiProjection(h, D, ly.inputLn, c.rmsNormEps);
  auto add = [&](const WeightRef &w, int64_t n, uint16_t *o) {
    addProjection(mp, w, n, o);
  };
  add(ly.q, C, uq_.data());
  add(ly.k, C, uk_.data());
  add(ly.v, C, uv_.data());
  add(ly.fA, d, small1_.data());
  add(ly.b, H, beta_.data());
  if (c.kda.fullRankGate)
    add(ly.g, C, gt_.data());
  else
    add(ly.gA, d, small2_.data());
  linearMultiCpu(mp);

  project(ly.fB, C, d, small1_.data(), f_.data());
  if (!c.kda.fullRankGate)
    project(ly.gB, C, d, small2_.data(), gt_.data());

  KdaDecodeParams kp;
  kp.uq = uq_.data();
  kp.uk = uk_.data();
  kp.uv = uv_.data();
  kp.convQ = ly.convQ;
  kp.convK = ly.convK;
  kp.convV = ly.convV;
  kp.convStateQ = ly.convStateQ.data();
  kp.convStateK = ly.convStateK.data();
  kp.convStateV = ly.convStateV.data();
  kp.f = f_.data();
  kp.betaLogit = beta_.data();
  kp.dtBias = ly.dtBias.data();
  kp.aLog = ly.aLog.data();
  kp.state = ly.state.data();
  kp.gate = gt_.data();
  kp.normWeight = ly.oNorm;
  kp.out = y_.data();
  kp.numHeads = H;
  kp.headDim = d;
  kp.convWidth = static_cast<int32_t>(c.kda.convSize);
  kp.hasLowerBound = c.kda.hasLowerBound ? 1 : 0;
  kp.lowerBound = c.kda.gateLowerBound;
  kp.normEps = c.rmsNormEps;
  kdaDecodeCpu(kp);

  project(ly.o, D, C, y_.data(), out, residual);
}

/// MLA mixer (K3.md §3, absorbed form): q (via q_a + norm + q_b, or q_proj),
/// kv_a and the gate from h; the cache append at this position; attention
/// with the fused gate; o_proj with the residual epilogue.
void CpuDecoder::runMla(Layer &ly, const uint16_t *h, const uint16_t *residual,
                        uint16_t *out) {
  const ModelConfig &c = config_;
  const int64_t D = c.hiddenSize, N = c.numAttentionHeads, P = c.qkNopeHeadDim,
                R = c.qkRopeHeadDim, Vd = c.vHeadDim, L = c.kvLoraRank;
  // The q_a / kv_a layernorms use eps 1e-6 (K3.md §1), not rms_norm_eps.
  constexpr float kMlaNormEps = 1e-6f;
  LinearMultiParams mp = multiProjection(h, D, ly.inputLn, c.rmsNormEps);
  auto add = [&](const WeightRef &w, int64_t n, uint16_t *o) {
    addProjection(mp, w, n, o);
  };
  if (c.qLoraRank > 0)
    add(ly.qA, c.qLoraRank, qa_.data());
  else
    add(ly.q, N * (P + R), q_.data());
  add(ly.kvA, L + R, kv_.data());
  if (c.mlaUseOutputGate)
    add(ly.g, N * Vd, gt_.data());
  linearMultiCpu(mp);

  if (c.qLoraRank > 0) {
    LinearParams lp;
    lp.x = qa_.data();
    lp.w = ly.qB;
    lp.n = N * (P + R);
    lp.k = c.qLoraRank;
    lp.normWeight = ly.qALn;
    lp.normEps = kMlaNormEps;
    lp.out = q_.data();
    linearCpu(lp);
  }

  MlaCacheAppendParams ap;
  ap.kv = kv_.data();
  ap.normWeight = ly.kvALn;
  ap.eps = kMlaNormEps;
  ap.cache = ly.cache.data();
  ap.pos = pos_;
  ap.kvLoraRank = L;
  ap.ropeDim = R;
  mlaCacheAppendCpu(ap);

  MlaAttendParams at;
  at.q = q_.data();
  at.kvB = ly.kvB;
  at.cache = ly.cache.data();
  at.length = pos_ + 1;
  at.gate = c.mlaUseOutputGate ? gt_.data() : nullptr;
  at.out = y_.data();
  at.numHeads = N;
  at.nopeDim = P;
  at.ropeDim = R;
  at.vDim = Vd;
  at.kvLoraRank = L;
  at.scale = 1.0f / std::sqrt(static_cast<float>(P + R));
  mlaAttendCpu(at);

  project(ly.o, D, N * Vd, y_.data(), out, residual);
}

/// FFN (dense MLP or MoE) on m, pre-normed by post_attention_layernorm;
/// out = R(residual + FFN).
void CpuDecoder::runFfn(Layer &ly, const uint16_t *m, const uint16_t *residual,
                        uint16_t *out) {
  const ModelConfig &c = config_;
  const int64_t D = c.hiddenSize, Dm = c.moeHiddenSize();
  GatedMlpParams gp;
  gp.activation = activationOf(c);
  gp.beta1 = c.situBeta;
  gp.hasBeta2 = c.hasSituLinearBeta ? 1 : 0;
  gp.beta2 = c.situLinearBeta;
  gp.w1 = ly.mlpGate;
  gp.w3 = ly.mlpUp;
  gp.w2 = ly.mlpDown;
  gp.inDim = D;
  gp.outDim = D;

  if (ly.isDense) {
    gp.x = m;
    gp.normWeight = ly.postLn;
    gp.normEps = c.rmsNormEps;
    gp.interDim = c.intermediateSize;
    gp.residual = residual;
    gp.out = out;
    gatedMlpCpu(gp);
    return;
  }

  RmsNormParams np;
  np.x = m;
  np.w = ly.postLn;
  np.out = hn_.data();
  np.n = D;
  np.eps = c.rmsNormEps;
  rmsNormCpu(np);

  RouterParams rp;
  rp.h = hn_.data();
  rp.gate = ly.router;
  rp.bias = ly.routerBias.data();
  rp.numExperts = c.numExperts;
  rp.dim = D;
  rp.topK = static_cast<int32_t>(c.numExpertsPerToken);
  rp.renormalize = c.moeRenormalize ? 1 : 0;
  rp.scaling = c.routedScalingFactor;
  rp.outIds = ids_.data();
  rp.outWeights = routeWeights_.data();
  routerCpu(rp);

  MoeExpertsParams ep;
  ep.x = hn_.data();
  ep.ids = ids_.data();
  ep.weights = routeWeights_.data();
  ep.topK = rp.topK;
  ep.numExperts = c.numExperts;
  ep.w1 = ly.w1.data();
  ep.w3 = ly.w3.data();
  ep.w2 = ly.w2.data();
  ep.dim = Dm;
  ep.interDim = c.moeIntermediateSize;
  ep.activation = gp.activation;
  ep.beta1 = gp.beta1;
  ep.hasBeta2 = gp.hasBeta2;
  ep.beta2 = gp.beta2;
  if (c.hasLatentMoe()) {
    project(ly.routedDown, Dm, D, hn_.data(), z_.data());
    ep.x = z_.data();
    ep.out = r_.data();
    moeExpertsCpu(ep);
    if (ly.routedNorm) {
      np.x = r_.data();
      np.w = ly.routedNorm;
      np.out = r_.data();
      np.n = Dm;
      rmsNormCpu(np);
    }
    project(ly.routedUp, D, Dm, r_.data(), routed_.data());
  } else {
    ep.out = routed_.data();
    moeExpertsCpu(ep);
  }

  const uint16_t *ffnOut = routed_.data();
  if (ly.hasShared) {
    // out = R(routed + shared(h)): the residual epilogue of the shared MLP.
    gp.x = hn_.data();
    gp.interDim = c.numSharedExperts * c.moeIntermediateSize;
    gp.residual = routed_.data();
    gp.out = ffn_.data();
    gatedMlpCpu(gp);
    ffnOut = ffn_.data();
  }
  AddParams sum;
  sum.a = residual;
  sum.b = ffnOut;
  sum.out = out;
  sum.n = D;
  addCpu(sum);
}

void CpuDecoder::traceRow(const uint16_t *v) {
  if (!trace_)
    return;
  std::vector<float> row(config_.hiddenSize);
  for (int64_t i = 0; i < config_.hiddenSize; ++i)
    row[i] = bf16ToFloat(v[i]);
  trace_->push_back(std::move(row));
}

Expected<std::vector<float>> CpuDecoder::step(int64_t token) {
  const ModelConfig &c = config_;
  if (token < 0 || token >= c.vocabSize)
    return makeError("token id ", token, " is outside the vocabulary [0, ",
                     c.vocabSize, ")");
  if (pos_ >= maxSeq_)
    return makeError("context full: all ", maxSeq_,
                     " positions are used; reset() or create the decoder with "
                     "a larger maxSeq");
  const int64_t D = c.hiddenSize;

  EmbedParams ep;
  ep.table = embed_;
  ep.vocab = c.vocabSize;
  ep.dim = D;
  ep.token = token;
  ep.out = x_.data();
  embedCpu(ep);

  // K3.md §4. x_ holds x (then p's predecessor), p_ the partial sum p.
  numBlocks_ = 0;
  AttnResParams ar;
  ar.blocks = blocks_.data();
  ar.eps = c.rmsNormEps;
  ar.dim = D;
  for (int64_t l = 0; l < c.numLayers; ++l) {
    Layer &ly = layers_[l];
    const uint16_t *h = x_.data();
    bool pIsNone = false;
    if (c.hasAttnRes()) {
      if (numBlocks_ > 0) {
        ar.numBlocks = numBlocks_;
        ar.extra = x_.data();
        ar.wNorm = ly.attnResNorm;
        ar.wProj = ly.attnResProj;
        ar.out = h_.data();
        attnResCpu(ar);
        h = h_.data();
      }
      if (l % c.attnResBlockSize == 0) { // commit p as a block
        std::memcpy(blocks_.data() + numBlocks_ * D, x_.data(),
                    sizeof(uint16_t) * D);
        ++numBlocks_;
        pIsNone = true;
      }
    }
    // p = a, or R(p + a) through o_proj's residual epilogue.
    const uint16_t *residual = pIsNone ? nullptr : x_.data();
    traceRow(h);
    if (ly.isMla)
      runMla(ly, h, residual, p_.data());
    else
      runKda(ly, h, residual, p_.data());

    traceRow(p_.data());
    const uint16_t *m = p_.data();
    if (c.hasAttnRes()) {
      ar.numBlocks = numBlocks_;
      ar.extra = p_.data();
      ar.wNorm = ly.mlpResNorm;
      ar.wProj = ly.mlpResProj;
      ar.out = m_.data();
      attnResCpu(ar);
      m = m_.data();
    }
    traceRow(m);
    runFfn(ly, m, p_.data(), x_.data()); // x = R(p + f)
    traceRow(x_.data());
  }

  const uint16_t *fin = x_.data();
  if (c.hasAttnRes()) {
    ar.numBlocks = numBlocks_;
    ar.extra = x_.data();
    ar.wNorm = outResNorm_;
    ar.wProj = outResProj_;
    ar.out = fin_.data();
    attnResCpu(ar);
    fin = fin_.data();
  }
  std::vector<float> logits(c.vocabSize);
  LinearParams hp;
  hp.x = fin;
  hp.w = lmHead_;
  hp.n = c.vocabSize;
  hp.k = D;
  hp.normWeight = finalNorm_;
  hp.normEps = c.rmsNormEps;
  hp.outF32 = logits.data();
  linearCpu(hp);
  ++pos_;
  return logits;
}

Expected<std::vector<int64_t>>
CpuDecoder::greedy(const std::vector<int64_t> &prompt, int64_t maxNew,
                   std::vector<std::vector<float>> *logits) {
  if (prompt.empty())
    return makeError("greedy: the prompt is empty (it needs at least one "
                     "token, e.g. BOS)");
  if (maxNew < 0)
    return makeError("greedy: maxNew must be >= 0, got ", maxNew);
  const int64_t positions =
      static_cast<int64_t>(prompt.size()) + std::max<int64_t>(maxNew - 1, 0);
  if (positions > maxSeq_)
    return makeError("greedy: ", prompt.size(), " prompt tokens + ", maxNew,
                     " new need ", positions,
                     " positions, but the decoder "
                     "holds ",
                     maxSeq_);
  reset();
  if (logits)
    logits->clear();
  Expected<std::vector<float>> last = Status::error("unset");
  for (int64_t t : prompt) {
    last = step(t);
    if (!last)
      return last.status();
  }
  std::vector<int64_t> out;
  for (int64_t s = 0; s < maxNew; ++s) {
    int64_t id = 0;
    ArgmaxParams am;
    am.logits = last->data();
    am.n = static_cast<int64_t>(last->size());
    am.outId = &id;
    argmaxCpu(am);
    out.push_back(id);
    if (logits)
      logits->push_back(last.take());
    if (s + 1 < maxNew) {
      last = step(id);
      if (!last)
        return last.status();
    }
  }
  return out;
}

} // namespace k3
