//===- RefModel.cpp - Whole-model float64 reference decode ----------------===//
#include "test/reference/RefModel.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace k3 {
namespace ref {

namespace {

/// A required tensor view, or an error naming what is missing.
Status need(const TensorView *t, int64_t layer, const char *what) {
  if (t)
    return Status::ok();
  return makeError("reference: layer ", layer, ": ", what, " is not bound");
}

Status needLinear(const LinearWeight &w, int64_t layer, const char *what,
                  int64_t out, int64_t in) {
  if (!w.present())
    return makeError("reference: layer ", layer, ": ", what, " is not bound");
  if (w.out != out || w.in != in)
    return makeError("reference: layer ", layer, ": ", what, " is [", w.out,
                     ", ", w.in, "], expected [", out, ", ", in, "]");
  return Status::ok();
}

/// The vector of a [n] tensor, checking its size.
Expected<Vec> vecOf(const TensorView *t, int64_t n, int64_t layer,
                    const char *what) {
  K3_RETURN_IF_ERROR(need(t, layer, what));
  if (t->numel() < n)
    return makeError("reference: layer ", layer, ": ", what, " has ",
                     t->numel(), " values, expected ", n);
  return fromView(*t, n);
}

} // namespace

double rms(const Vec &x) {
  if (x.empty())
    return 0.0;
  double s = 0.0;
  for (double v : x)
    s += v * v;
  return std::sqrt(s / static_cast<double>(x.size()));
}

Expected<std::unique_ptr<RefModel>>
RefModel::create(const ModelConfig &c, const ModelWeights &w, int64_t maxSeq) {
  std::unique_ptr<RefModel> m(new RefModel());
  m->config_ = &c;
  m->maxSeq_ = maxSeq;
  m->act_ = ActSpec::fromConfig(c);
  const int64_t dim = c.hiddenSize;

  if (!w.embedTokens || w.embedTokens->dtype != DType::BF16 ||
      w.embedTokens->numel() != c.vocabSize * dim)
    return makeError("reference: embed_tokens missing or not bf16 [V, D]");
  m->embed_ = w.embedTokens->as<uint16_t>();
  auto fn = vecOf(w.norm, dim, -1, "model.norm");
  if (!fn)
    return fn.status();
  m->finalNorm_ = fn.take();
  if (!w.lmHead || w.lmHead->dtype != DType::BF16 ||
      w.lmHead->numel() != c.vocabSize * dim)
    return makeError("reference: lm_head missing or not bf16 [V, D]");
  m->lmHead_ = WeightRef::fromBf16(w.lmHead->as<uint16_t>(), c.vocabSize, dim);
  if (c.hasAttnRes()) {
    auto n = vecOf(w.outputAttnRes.norm, dim, -1, "output_attn_res_norm");
    auto p = vecOf(w.outputAttnRes.proj, dim, -1, "output_attn_res_proj");
    if (!n)
      return n.status();
    if (!p)
      return p.status();
    m->outResNorm_ = n.take();
    m->outResProj_ = p.take();
  }

  if (static_cast<int64_t>(w.layers.size()) != c.numLayers)
    return makeError("reference: ", w.layers.size(),
                     " layers bound, config "
                     "has ",
                     c.numLayers);

  for (int64_t l = 0; l < c.numLayers; ++l) {
    const LayerWeights &lw = w.layers[l];
    Layer L;
    // Layer kinds from the config alone (1-based full_attn_layers, K3.md §1).
    L.isMla = std::find(c.fullAttnLayers.begin(), c.fullAttnLayers.end(),
                        l + 1) != c.fullAttnLayers.end();
    L.isDense = l < c.firstKDenseReplace;
    if (L.isMla != lw.isMla || L.isDense != lw.isDense)
      return makeError(
          "reference: layer ", l, ": binding says ", lw.isMla ? "MLA" : "KDA",
          "/", lw.isDense ? "dense" : "MoE", ", config says ",
          L.isMla ? "MLA" : "KDA", "/", L.isDense ? "dense" : "MoE");

    auto in = vecOf(lw.inputLayernorm, dim, l, "input_layernorm");
    auto post =
        vecOf(lw.postAttentionLayernorm, dim, l, "post_attention_layernorm");
    if (!in)
      return in.status();
    if (!post)
      return post.status();
    L.inputNorm = in.take();
    L.postNorm = post.take();
    if (c.hasAttnRes()) {
      auto a =
          vecOf(lw.selfAttentionRes.norm, dim, l, "self_attention_res_norm");
      auto b =
          vecOf(lw.selfAttentionRes.proj, dim, l, "self_attention_res_proj");
      auto e = vecOf(lw.mlpRes.norm, dim, l, "mlp_res_norm");
      auto f = vecOf(lw.mlpRes.proj, dim, l, "mlp_res_proj");
      for (auto *x : {&a, &b, &e, &f})
        if (!*x)
          return x->status();
      L.attnResNorm = a.take();
      L.attnResProj = b.take();
      L.mlpResNorm = e.take();
      L.mlpResProj = f.take();
    }

    if (!L.isMla) {
      const KdaWeights &k = lw.kda;
      KdaRef &r = L.kda;
      r.heads = c.kda.numHeads;
      r.headDim = c.kda.headDim;
      r.convWidth = c.kda.convSize;
      const int64_t ch = r.heads * r.headDim, d = r.headDim;
      K3_RETURN_IF_ERROR(needLinear(k.qProj, l, "q_proj", ch, dim));
      K3_RETURN_IF_ERROR(needLinear(k.kProj, l, "k_proj", ch, dim));
      K3_RETURN_IF_ERROR(needLinear(k.vProj, l, "v_proj", ch, dim));
      K3_RETURN_IF_ERROR(needLinear(k.fAProj, l, "f_a_proj", d, dim));
      K3_RETURN_IF_ERROR(needLinear(k.fBProj, l, "f_b_proj", ch, d));
      K3_RETURN_IF_ERROR(needLinear(k.bProj, l, "b_proj", r.heads, dim));
      K3_RETURN_IF_ERROR(needLinear(k.oProj, l, "o_proj", dim, ch));
      r.qProj = WeightRef::fromLinear(k.qProj);
      r.kProj = WeightRef::fromLinear(k.kProj);
      r.vProj = WeightRef::fromLinear(k.vProj);
      r.fAProj = WeightRef::fromLinear(k.fAProj);
      r.fBProj = WeightRef::fromLinear(k.fBProj);
      r.bProj = WeightRef::fromLinear(k.bProj);
      r.oProj = WeightRef::fromLinear(k.oProj);
      auto qc = vecOf(k.qConv, ch * r.convWidth, l, "q_conv1d");
      auto kc = vecOf(k.kConv, ch * r.convWidth, l, "k_conv1d");
      auto vc = vecOf(k.vConv, ch * r.convWidth, l, "v_conv1d");
      auto dt = vecOf(k.dtBias, ch, l, "dt_bias");
      auto al = vecOf(k.aLog, r.heads, l, "A_log"); // first H (K3 pads)
      auto on = vecOf(k.oNorm, d, l, "o_norm");
      for (auto *x : {&qc, &kc, &vc, &dt, &al, &on})
        if (!*x)
          return x->status();
      r.qConv = qc.take();
      r.kConv = kc.take();
      r.vConv = vc.take();
      r.dtBias = dt.take();
      r.aLog = al.take();
      r.oNorm = on.take();
      r.fullRankGate = c.kda.fullRankGate;
      if (r.fullRankGate) {
        K3_RETURN_IF_ERROR(needLinear(k.gProj, l, "g_proj", ch, dim));
        r.gProj = WeightRef::fromLinear(k.gProj);
      } else {
        K3_RETURN_IF_ERROR(needLinear(k.gAProj, l, "g_a_proj", d, dim));
        K3_RETURN_IF_ERROR(needLinear(k.gBProj, l, "g_b_proj", ch, d));
        r.gAProj = WeightRef::fromLinear(k.gAProj);
        r.gBProj = WeightRef::fromLinear(k.gBProj);
      }
      r.hasLowerBound = c.kda.hasLowerBound;
      r.lowerBound = c.kda.gateLowerBound;
      r.eps = c.rmsNormEps;
    } else {
      const MlaWeights &a = lw.mla;
      MlaRef &r = L.mla;
      r.dims.heads = c.numAttentionHeads;
      r.dims.nope = c.qkNopeHeadDim;
      r.dims.rope = c.qkRopeHeadDim;
      r.dims.latent = c.kvLoraRank;
      r.dims.value = c.vHeadDim;
      const int64_t n = r.dims.heads, qw = n * (r.dims.nope + r.dims.rope);
      r.hasQLora = c.qLoraRank > 0;
      if (r.hasQLora) {
        K3_RETURN_IF_ERROR(
            needLinear(a.qAProj, l, "q_a_proj", c.qLoraRank, dim));
        K3_RETURN_IF_ERROR(
            needLinear(a.qBProj, l, "q_b_proj", qw, c.qLoraRank));
        auto qn = vecOf(a.qALayernorm, c.qLoraRank, l, "q_a_layernorm");
        if (!qn)
          return qn.status();
        r.qALayernorm = qn.take();
        r.qAProj = WeightRef::fromLinear(a.qAProj);
        r.qBProj = WeightRef::fromLinear(a.qBProj);
      } else {
        K3_RETURN_IF_ERROR(needLinear(a.qProj, l, "q_proj", qw, dim));
        r.qProj = WeightRef::fromLinear(a.qProj);
      }
      K3_RETURN_IF_ERROR(needLinear(a.kvAProj, l, "kv_a_proj_with_mqa",
                                    r.dims.latent + r.dims.rope, dim));
      K3_RETURN_IF_ERROR(needLinear(a.kvBProj, l, "kv_b_proj",
                                    n * (r.dims.nope + r.dims.value),
                                    r.dims.latent));
      K3_RETURN_IF_ERROR(
          needLinear(a.oProj, l, "o_proj", dim, n * r.dims.value));
      auto kn = vecOf(a.kvALayernorm, r.dims.latent, l, "kv_a_layernorm");
      if (!kn)
        return kn.status();
      r.kvALayernorm = kn.take();
      r.kvAProj = WeightRef::fromLinear(a.kvAProj);
      r.kvBProj = WeightRef::fromLinear(a.kvBProj);
      r.oProj = WeightRef::fromLinear(a.oProj);
      r.hasGate = c.mlaUseOutputGate;
      if (r.hasGate) {
        K3_RETURN_IF_ERROR(
            needLinear(a.gProj, l, "g_proj", n * r.dims.value, dim));
        r.gProj = WeightRef::fromLinear(a.gProj);
      }
      r.normEps = 1e-6; // q_a / kv_a layernorms (K3.md §1)
    }

    if (L.isDense) {
      const int64_t i = c.intermediateSize;
      K3_RETURN_IF_ERROR(needLinear(lw.mlp.gate, l, "mlp.gate_proj", i, dim));
      K3_RETURN_IF_ERROR(needLinear(lw.mlp.up, l, "mlp.up_proj", i, dim));
      K3_RETURN_IF_ERROR(needLinear(lw.mlp.down, l, "mlp.down_proj", dim, i));
      L.mlp.gate = WeightRef::fromLinear(lw.mlp.gate);
      L.mlp.up = WeightRef::fromLinear(lw.mlp.up);
      L.mlp.down = WeightRef::fromLinear(lw.mlp.down);
    } else {
      const MoeWeights &e = lw.moe;
      MoeRef &r = L.moe;
      const int64_t dm = c.hasLatentMoe() ? c.routedExpertHiddenSize : dim;
      const int64_t im = c.moeIntermediateSize;
      K3_RETURN_IF_ERROR(needLinear(e.gate, l, "gate", c.numExperts, dim));
      r.router = WeightRef::fromLinear(e.gate);
      auto b = vecOf(e.eScoreCorrectionBias, c.numExperts, l,
                     "e_score_correction_bias");
      if (!b)
        return b.status();
      r.bias = b.take();
      if (static_cast<int64_t>(e.experts.size()) != c.numExperts)
        return makeError("reference: layer ", l, ": ", e.experts.size(),
                         " experts bound, expected ", c.numExperts);
      for (const MlpWeights &x : e.experts) {
        K3_RETURN_IF_ERROR(needLinear(x.gate, l, "expert w1", im, dm));
        K3_RETURN_IF_ERROR(needLinear(x.up, l, "expert w3", im, dm));
        K3_RETURN_IF_ERROR(needLinear(x.down, l, "expert w2", dm, im));
        if (x.gate.mxfp4 != c.expertsMxfp4)
          return makeError("reference: layer ", l,
                           ": expert storage does not match the config");
        r.experts.push_back({WeightRef::fromLinear(x.gate),
                             WeightRef::fromLinear(x.up),
                             WeightRef::fromLinear(x.down)});
      }
      r.hasShared = c.numSharedExperts > 0;
      if (r.hasShared) {
        const int64_t si = c.numSharedExperts * im;
        K3_RETURN_IF_ERROR(
            needLinear(e.shared.gate, l, "shared gate", si, dim));
        K3_RETURN_IF_ERROR(needLinear(e.shared.up, l, "shared up", si, dim));
        K3_RETURN_IF_ERROR(
            needLinear(e.shared.down, l, "shared down", dim, si));
        r.shared = {WeightRef::fromLinear(e.shared.gate),
                    WeightRef::fromLinear(e.shared.up),
                    WeightRef::fromLinear(e.shared.down)};
      }
      r.latent = c.hasLatentMoe();
      if (r.latent) {
        K3_RETURN_IF_ERROR(
            needLinear(e.routedDown, l, "routed_expert_down_proj", dm, dim));
        K3_RETURN_IF_ERROR(
            needLinear(e.routedUp, l, "routed_expert_up_proj", dim, dm));
        r.routedDown = WeightRef::fromLinear(e.routedDown);
        r.routedUp = WeightRef::fromLinear(e.routedUp);
        r.latentNorm = c.latentMoeUseNorm;
        if (r.latentNorm) {
          auto rn = vecOf(e.routedNorm, dm, l, "routed_expert_norm");
          if (!rn)
            return rn.status();
          r.routedNorm = rn.take();
        }
      }
      r.topk = c.numExpertsPerToken;
      r.renormalize = c.moeRenormalize;
      r.scaling = c.routedScalingFactor;
      r.act = m->act_;
      r.eps = c.rmsNormEps;
    }
    m->layers_.push_back(std::move(L));
  }
  m->reset();
  return m;
}

void RefModel::reset() {
  pos_ = 0;
  kdaStates_.assign(layers_.size(), KdaState());
  mlaCaches_.assign(layers_.size(), MlaCache());
  for (size_t l = 0; l < layers_.size(); ++l)
    if (!layers_[l].isMla)
      kdaStates_[l].reset(layers_[l].kda);
  choices_.clear();
  outputAlphas_.clear();
  margins_.clear();
  stats_.clear();
}

Vec RefModel::step(int64_t token) {
  const ModelConfig &c = *config_;
  assert(pos_ < maxSeq_ && "RefModel::step past maxSeq");
  const double eps = c.rmsNormEps;
  const bool useAttnRes = c.hasAttnRes();
  std::vector<std::vector<int64_t>> stepChoices;
  Vec stepMargins;
  std::vector<LayerStats> stepStats(c.numLayers);

  Vec x = embed(embed_, c.vocabSize, c.hiddenSize, token);
  std::vector<Vec> blocks; // B: committed block representations (bf16)
  for (int64_t l = 0; l < c.numLayers; ++l) {
    Layer &L = layers_[l];
    LayerStats &st = stepStats[l];
    auto mixer = [&](const Vec &in) {
      Vec h = rmsNorm(in, L.inputNorm, eps);
      Vec a =
          L.isMla ? mla(L.mla, mlaCaches_[l], h) : kda(L.kda, kdaStates_[l], h);
      st.mixer = rms(a);
      return a;
    };
    // The FFN's output f; `base` is the stream it is added to (only used to
    // compare candidates at a router near-tie).
    auto ffn = [&](const Vec &in, const Vec &base) {
      Vec h = rmsNorm(in, L.postNorm, eps);
      if (L.isDense) {
        Vec f = gatedMlp(L.mlp.gate, L.mlp.up, L.mlp.down, h, act_);
        st.ffn = rms(f);
        return f;
      }
      Routing r;
      Vec routed, shared;
      Vec out = moe(L.moe, h, &r, &routed, &shared);
      // The gap between the last chosen and the best unchosen ranking score
      // (s + bias).
      auto rank = [&](int64_t e) { return r.scores[e] + L.moe.bias[e]; };
      int64_t next = -1;
      for (size_t e = 0; e < r.scores.size(); ++e)
        if (std::find(r.experts.begin(), r.experts.end(),
                      static_cast<int64_t>(e)) == r.experts.end() &&
            (next < 0 || rank(e) > rank(next)))
          next = static_cast<int64_t>(e);
      const double margin =
          next < 0 ? 1e300 : rank(r.experts.back()) - rank(next);
      stepMargins.push_back(margin);
      if (chooser_ && margin < tieMargin_) {
        ++nearTies_;
        std::vector<int64_t> swapped = r.experts;
        swapped.back() = next;
        Routing r2;
        Vec routed2, shared2;
        Vec out2 = moe(L.moe, h, &r2, &routed2, &shared2, &swapped);
        if (chooser_(l, {add(base, out), add(base, out2)}) == 1) {
          ++tiesSwapped_;
          r = r2;
          routed = routed2;
          shared = shared2;
          out = out2;
        }
      }
      st.ffn = rms(out);
      st.routed = rms(routed);
      st.shared = rms(shared);
      stepChoices.push_back(r.experts);
      return out;
    };

    if (!useAttnRes) {
      // Plain pre-norm residual (Kimi-Linear).
      st.stream = rms(x);
      if (trace_)
        trace_->push_back(x);
      Vec h = add(x, mixer(x));
      st.ffnStream = rms(h);
      if (trace_) {
        trace_->push_back(h);
        trace_->push_back(h);
      }
      if (override_)
        override_(l, 0, h);
      x = add(h, ffn(h, h));
      if (trace_)
        trace_->push_back(x);
      if (override_)
        override_(l, 1, x);
      continue;
    }

    // K3.md §4, line by line. `hasP` false is the "p = None" of the spec.
    Vec p = x;
    bool hasP = true;
    Vec h = p;
    Vec alpha;
    if (!blocks.empty()) {
      std::vector<Vec> src = blocks;
      src.push_back(p);
      h = attnRes(src, L.attnResNorm, L.attnResProj, eps, &alpha);
      for (double v : alpha)
        st.maxAlpha = std::max(st.maxAlpha, v);
    }
    if (l % c.attnResBlockSize == 0) {
      blocks.push_back(p);
      hasP = false;
    }
    st.stream = hasP ? rms(p) : 0.0;
    if (trace_)
      trace_->push_back(h);
    Vec a = mixer(h);
    p = hasP ? add(p, a) : a;
    st.ffnStream = rms(p);
    if (trace_)
      trace_->push_back(p);
    if (override_)
      override_(l, 0, p);
    std::vector<Vec> src = blocks;
    src.push_back(p);
    Vec m = attnRes(src, L.mlpResNorm, L.mlpResProj, eps, &alpha);
    for (double v : alpha)
      st.maxAlpha = std::max(st.maxAlpha, v);
    if (trace_)
      trace_->push_back(m);
    x = add(p, ffn(m, p));
    if (trace_)
      trace_->push_back(x);
    if (override_)
      override_(l, 1, x);
  }

  Vec last = x;
  if (useAttnRes) {
    std::vector<Vec> src = blocks;
    src.push_back(x);
    Vec alpha;
    last = attnRes(src, outResNorm_, outResProj_, eps, &alpha);
    outputAlphas_.push_back(alpha);
  }
  Vec logits = lmHead(lmHead_, rmsNorm(last, finalNorm_, eps));
  choices_.push_back(std::move(stepChoices));
  margins_.push_back(std::move(stepMargins));
  stats_.push_back(std::move(stepStats));
  ++pos_;
  return logits;
}

std::vector<int64_t> RefModel::greedy(const std::vector<int64_t> &prompt,
                                      int64_t maxNew,
                                      std::vector<Vec> *logits) {
  std::vector<int64_t> out;
  if (prompt.empty() || maxNew <= 0)
    return out;
  Vec last;
  for (int64_t t : prompt)
    last = step(t);
  for (int64_t s = 0; s < maxNew; ++s) {
    int64_t next = argmax(last);
    out.push_back(next);
    if (logits)
      logits->push_back(last);
    if (s + 1 < maxNew)
      last = step(next);
  }
  return out;
}

Expected<RefDecode> referenceGreedy(const ModelConfig &config,
                                    const ModelWeights &weights,
                                    const std::vector<int64_t> &prompt,
                                    int64_t maxNew) {
  for (int64_t t : prompt)
    if (t < 0 || t >= config.vocabSize)
      return makeError("reference: prompt token ", t, " outside [0, ",
                       config.vocabSize, ")");
  auto model = RefModel::create(config, weights,
                                static_cast<int64_t>(prompt.size()) + maxNew);
  if (!model)
    return model.status();
  RefDecode d;
  d.tokens = (*model)->greedy(prompt, maxNew, &d.logits);
  d.expertChoices = (*model)->expertChoices();
  d.outputAlphas = (*model)->outputAlphas();
  d.routingMargins = (*model)->routingMargins();
  d.layerStats = (*model)->layerStats();
  return d;
}

} // namespace ref
} // namespace k3
