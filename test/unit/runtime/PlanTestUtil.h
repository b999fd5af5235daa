//===- PlanTestUtil.h - A hand-built decode plan for tests ------*- C++ -*-===//
//
// buildDecodePlan writes, with the PlanDoc API, the plan a compiler would
// emit for a whole decode step: the same launches CpuDecoder makes, in the
// same order, over arena buffers and resident states (K3.md §4 with AttnRes,
// KDA and MLA mixers, dense MLP or latent MoE with shared experts). Run
// through a Session it must reproduce CpuDecoder bit for bit. PlanStyle::Fine
// uses kda_conv x3 + kda_recurrent + kda_gated_norm and a separate
// mul_sigmoid for the MLA gate; PlanStyle::Finest further splits
// kda_recurrent into kda_l2norm x2 + kda_gate + sigmoid + kda_step and uses
// attn_res's fused output norm in front of the router. The kernel headers
// promise all of these are bit-identical to the fused forms.
//
// It doubles as a worked example of the plan contract for the compiler.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_UNIT_RUNTIME_PLANTESTUTIL_H
#define K3C_TEST_UNIT_RUNTIME_PLANTESTUTIL_H

#include "kernels/common/WeightRef.h"
#include "kernels/kda/KdaParams.h"
#include "runtime/plan/Plan.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace k3::test {

enum class PlanStyle { Fused, Fine, Finest };

/// `smallFormat` is the plan format of the KDA conv filters and o_norm:
/// "bf16" (the form plans had before "vector"), or "vector" (bound bf16 or
/// f32, as the checkpoint stores them, which is what k3c emits).
inline PlanDoc buildDecodePlan(const ModelConfig &c, int64_t maxSeq,
                               PlanStyle style = PlanStyle::Fused,
                               const char *smallFormat = "bf16") {
  const bool fine = style != PlanStyle::Fused;
  const bool finest = style == PlanStyle::Finest;
  using A = PlanArg;
  PlanDoc plan;
  plan.maxSeq = maxSeq;
  plan.config = c;
  plan.fusion = fine ? "none" : "default";

  const int64_t D = c.hiddenSize, V = c.vocabSize;
  const int64_t H = c.kda.numHeads, d = c.kda.headDim, C = c.kdaChannels();
  const int64_t W = c.kda.convSize;
  const int64_t N = c.numAttentionHeads, P = c.qkNopeHeadDim,
                R = c.qkRopeHeadDim, Vd = c.vHeadDim, L = c.kvLoraRank;
  const int64_t Dm = c.moeHiddenSize(), I = c.moeIntermediateSize,
                E = c.numExperts, SI = c.numSharedExperts * I;
  const int64_t wide = std::max({C, N * (P + R), N * Vd, L + R, D, int64_t(1)});
  const int64_t topK = std::max<int64_t>(c.numExpertsPerToken, 1);
  const int32_t act = c.hiddenAct == Activation::SiTU ? kActSiTU : kActSwiGLU;

  // Scratch (mirrors CpuDecoder's vectors).
  auto bf = [&](const char *n, int64_t e) {
    return A::buffer(plan.addBuffer(n, "bf16", std::max<int64_t>(e, 1)));
  };
  const A x = bf("x", D), p = bf("p", D), h = bf("h", D), m = bf("m", D),
          fin = bf("fin", D), hn = bf("hn", D), routed = bf("routed", D),
          ffn = bf("ffn", D);
  const A uq = bf("uq", wide), uk = bf("uk", wide), uv = bf("uv", wide),
          f = bf("f", wide), gt = bf("gt", wide), y = bf("y", wide),
          q = bf("q", wide), kv = bf("kv", wide), tq = bf("tq", wide),
          tk = bf("tk", wide), tv = bf("tv", wide), o = bf("o", wide);
  const A small1 = bf("small1", d), small2 = bf("small2", d),
          beta = bf("beta", H), qa = bf("qa", c.qLoraRank), z = bf("z", Dm),
          r = bf("r", Dm);
  const A ql = A::buffer(plan.addBuffer("ql", "f32", std::max<int64_t>(C, 1)));
  const A kl = A::buffer(plan.addBuffer("kl", "f32", std::max<int64_t>(C, 1)));
  const A gl = A::buffer(plan.addBuffer("gl", "f32", std::max<int64_t>(C, 1)));
  const A betaF =
      A::buffer(plan.addBuffer("beta_f32", "f32", std::max<int64_t>(H, 1)));
  const A ids = A::buffer(plan.addBuffer("ids", "i32", topK));
  const A rw = A::buffer(plan.addBuffer("route_weights", "f32", topK));
  plan.logitsBuffer = plan.addBuffer("logits", "f32", V);

  const std::string mp = c.tensorPrefix + "model.";
  auto wt = [&](const std::string &name, std::vector<int64_t> shape,
                const char *format = "bf16") {
    return A::weight(plan.addWeight(name, format, shape));
  };
  auto lin = [&](const std::string &name, int64_t out, int64_t in) {
    return wt(name + ".weight", {out, in});
  };
  auto num = [](double v) { return A::number(v); };
  auto i64 = [](int64_t v) { return A::integer(v); };

  int64_t blocks = -1;
  if (c.hasAttnRes()) {
    const int64_t maxBlocks =
        (c.numLayers + c.attnResBlockSize - 1) / c.attnResBlockSize;
    blocks =
        plan.addState("attn_res_blocks", "attn_res_blocks", {maxBlocks, D});
  }

  plan.addLaunch("embed")
      .arg("table", wt(mp + "embed_tokens.weight", {V, D}))
      .arg("vocab", i64(V))
      .arg("dim", i64(D))
      .arg("token", A::fromInput(PlanInput::Token))
      .arg("out", x);

  auto attnRes = [&](int64_t numBlocks, const A &extra, const std::string &w,
                     const A &out) {
    plan.addLaunch("attn_res")
        .arg("blocks", A::state(blocks))
        .arg("numBlocks", i64(numBlocks))
        .arg("extra", extra)
        .arg("wNorm", wt(w + "_norm.weight", {D}))
        .arg("wProj", wt(w + "_proj.weight", {1, D}))
        .arg("eps", num(c.rmsNormEps))
        .arg("dim", i64(D))
        .arg("out", out);
  };

  int64_t numBlocks = 0;
  for (int64_t l = 0; l < c.numLayers; ++l) {
    const std::string lp = mp + "layers." + std::to_string(l) + ".";
    const std::string sa = lp + "self_attn.";
    A hIn = x;
    bool pIsNone = false;
    if (c.hasAttnRes()) {
      if (numBlocks > 0) {
        attnRes(numBlocks, x, lp + "self_attention_res", h);
        hIn = h;
      }
      if (l % c.attnResBlockSize == 0) {
        plan.addLaunch("attn_res_commit")
            .arg("src", x)
            .arg("blocks", A::state(blocks))
            .arg("index", i64(numBlocks))
            .arg("dim", i64(D));
        ++numBlocks;
        pIsNone = true;
      }
    }
    const A inputLn = wt(lp + "input_layernorm.weight", {D});

    // The mixer: p = mixer(h) (+ x through o_proj's residual epilogue).
    if (!c.isMlaLayer(l)) {
      PlanLaunch &ml = plan.addLaunch("linear_multi");
      ml.arg("x", hIn).arg("k", i64(D)).arg("normWeight", inputLn);
      ml.arg("normEps", num(c.rmsNormEps));
      int n = 0;
      auto entry = [&](const A &w, int64_t rows, const A &out) {
        const std::string s = std::to_string(n++);
        ml.arg("w" + s, w).arg("n" + s, i64(rows)).arg("out" + s, out);
      };
      entry(lin(sa + "q_proj", C, D), C, uq);
      entry(lin(sa + "k_proj", C, D), C, uk);
      entry(lin(sa + "v_proj", C, D), C, uv);
      entry(lin(sa + "f_a_proj", d, D), d, small1);
      entry(lin(sa + "b_proj", H, D), H, beta);
      if (c.kda.fullRankGate)
        entry(lin(sa + "g_proj", C, D), C, gt);
      else
        entry(lin(sa + "g_a_proj", d, D), d, small2);
      ml.arg("count", i64(n));
      plan.addLaunch("linear")
          .arg("x", small1)
          .arg("w", lin(sa + "f_b_proj", C, d))
          .arg("n", i64(C))
          .arg("k", i64(d))
          .arg("out", f);
      if (!c.kda.fullRankGate)
        plan.addLaunch("linear")
            .arg("x", small2)
            .arg("w", lin(sa + "g_b_proj", C, d))
            .arg("n", i64(C))
            .arg("k", i64(d))
            .arg("out", gt);

      const int64_t st = plan.addState(lp + "kda", "kda_state", {H, d, d});
      const int64_t cs =
          plan.addState(lp + "conv", "conv_state", {3 * C, W - 1});
      const uint64_t third = static_cast<uint64_t>(C * (W - 1)) * 4;
      const A convQ = wt(sa + "q_conv1d.weight", {C, 1, W}, smallFormat),
              convK = wt(sa + "k_conv1d.weight", {C, 1, W}, smallFormat),
              convV = wt(sa + "v_conv1d.weight", {C, 1, W}, smallFormat);
      const A dtBias = wt(sa + "dt_bias", {C}, "f32"),
              aLog = wt(sa + "A_log", {H}, "f32");
      const A oNorm = wt(sa + "o_norm.weight", {d}, smallFormat);
      if (!fine) {
        plan.addLaunch("kda_decode")
            .arg("uq", uq)
            .arg("uk", uk)
            .arg("uv", uv)
            .arg("convQ", convQ)
            .arg("convK", convK)
            .arg("convV", convV)
            .arg("convStateQ", A::state(cs, 0))
            .arg("convStateK", A::state(cs, third))
            .arg("convStateV", A::state(cs, 2 * third))
            .arg("f", f)
            .arg("betaLogit", beta)
            .arg("dtBias", dtBias)
            .arg("aLog", aLog)
            .arg("state", A::state(st))
            .arg("gate", gt)
            .arg("normWeight", oNorm)
            .arg("out", y)
            .arg("numHeads", i64(H))
            .arg("headDim", i64(d))
            .arg("convWidth", i64(W))
            .arg("hasLowerBound", i64(c.kda.hasLowerBound ? 1 : 0))
            .arg("lowerBound", num(c.kda.gateLowerBound))
            .arg("normEps", num(c.rmsNormEps));
      } else {
        const A us[3] = {uq, uk, uv}, ts[3] = {tq, tk, tv},
                ws[3] = {convQ, convK, convV};
        for (int i = 0; i < 3; ++i)
          plan.addLaunch("kda_conv")
              .arg("u", us[i])
              .arg("weight", ws[i])
              .arg("state", A::state(cs, i * third))
              .arg("out", ts[i])
              .arg("channels", i64(C))
              .arg("width", i64(W));
        if (!finest) {
          plan.addLaunch("kda_recurrent")
              .arg("q", tq)
              .arg("k", tk)
              .arg("v", tv)
              .arg("f", f)
              .arg("betaLogit", beta)
              .arg("dtBias", dtBias)
              .arg("aLog", aLog)
              .arg("state", A::state(st))
              .arg("out", o)
              .arg("numHeads", i64(H))
              .arg("headDim", i64(d))
              .arg("hasLowerBound", i64(c.kda.hasLowerBound ? 1 : 0))
              .arg("lowerBound", num(c.kda.gateLowerBound));
        } else {
          plan.addLaunch("kda_l2norm")
              .arg("x", tq)
              .arg("out", ql)
              .arg("n", i64(C))
              .arg("headDim", i64(d))
              .arg("eps", num(kKdaL2NormEps))
              .arg("scale", num(kdaQueryScale(d)));
          plan.addLaunch("kda_l2norm")
              .arg("x", tk)
              .arg("out", kl)
              .arg("n", i64(C))
              .arg("headDim", i64(d))
              .arg("eps", num(kKdaL2NormEps))
              .arg("scale", num(1.0));
          plan.addLaunch("kda_gate")
              .arg("f", f)
              .arg("dtBias", dtBias)
              .arg("aLog", aLog)
              .arg("out", gl)
              .arg("numHeads", i64(H))
              .arg("headDim", i64(d))
              .arg("hasLowerBound", i64(c.kda.hasLowerBound ? 1 : 0))
              .arg("lowerBound", num(c.kda.gateLowerBound));
          plan.addLaunch("sigmoid")
              .arg("x", beta)
              .arg("out", betaF)
              .arg("n", i64(H));
          plan.addLaunch("kda_step")
              .arg("q", ql)
              .arg("k", kl)
              .arg("v", tv)
              .arg("g", gl)
              .arg("beta", betaF)
              .arg("state", A::state(st))
              .arg("out", o)
              .arg("numHeads", i64(H))
              .arg("headDim", i64(d));
        }
        plan.addLaunch("kda_gated_norm")
            .arg("o", o)
            .arg("gate", gt)
            .arg("weight", oNorm)
            .arg("out", y)
            .arg("numHeads", i64(H))
            .arg("headDim", i64(d))
            .arg("eps", num(c.rmsNormEps));
      }
      PlanLaunch &op = plan.addLaunch("linear");
      op.arg("x", y).arg("w", lin(sa + "o_proj", D, C)).arg("n", i64(D));
      op.arg("k", i64(C)).arg("out", p);
      if (!pIsNone)
        op.arg("residual", x);
    } else {
      const double mlaEps = 1e-6;
      PlanLaunch &ml = plan.addLaunch("linear_multi");
      ml.arg("x", hIn).arg("k", i64(D)).arg("normWeight", inputLn);
      ml.arg("normEps", num(c.rmsNormEps));
      int n = 0;
      auto entry = [&](const A &w, int64_t rows, const A &out) {
        const std::string s = std::to_string(n++);
        ml.arg("w" + s, w).arg("n" + s, i64(rows)).arg("out" + s, out);
      };
      if (c.qLoraRank > 0)
        entry(lin(sa + "q_a_proj", c.qLoraRank, D), c.qLoraRank, qa);
      else
        entry(lin(sa + "q_proj", N * (P + R), D), N * (P + R), q);
      entry(lin(sa + "kv_a_proj_with_mqa", L + R, D), L + R, kv);
      if (c.mlaUseOutputGate)
        entry(lin(sa + "g_proj", N * Vd, D), N * Vd, gt);
      ml.arg("count", i64(n));
      if (c.qLoraRank > 0)
        plan.addLaunch("linear")
            .arg("x", qa)
            .arg("w", lin(sa + "q_b_proj", N * (P + R), c.qLoraRank))
            .arg("n", i64(N * (P + R)))
            .arg("k", i64(c.qLoraRank))
            .arg("normWeight", wt(sa + "q_a_layernorm.weight", {c.qLoraRank}))
            .arg("normEps", num(mlaEps))
            .arg("out", q);
      const int64_t cache =
          plan.addState(lp + "mla_cache", "mla_cache", {maxSeq, L + R});
      plan.addLaunch("mla_cache_append")
          .arg("kv", kv)
          .arg("normWeight", wt(sa + "kv_a_layernorm.weight", {L}))
          .arg("eps", num(mlaEps))
          .arg("cache", A::state(cache))
          .arg("pos", A::fromInput(PlanInput::Pos))
          .arg("kvLoraRank", i64(L))
          .arg("ropeDim", i64(R));
      PlanLaunch &at = plan.addLaunch("mla_attend");
      at.arg("q", q).arg("kvB", lin(sa + "kv_b_proj", N * (P + Vd), L));
      at.arg("cache", A::state(cache));
      at.arg("length", A::fromInput(PlanInput::Length));
      at.arg("out", y).arg("numHeads", i64(N)).arg("nopeDim", i64(P));
      at.arg("ropeDim", i64(R)).arg("vDim", i64(Vd)).arg("kvLoraRank", i64(L));
      at.arg("scale", num(1.0f / std::sqrt(static_cast<float>(P + R))));
      if (c.mlaUseOutputGate) {
        if (!fine)
          at.arg("gate", gt);
        else
          plan.addLaunch("mul_sigmoid")
              .arg("x", y)
              .arg("gate", gt)
              .arg("out", y)
              .arg("n", i64(N * Vd));
      }
      PlanLaunch &op = plan.addLaunch("linear");
      op.arg("x", y).arg("w", lin(sa + "o_proj", D, N * Vd)).arg("n", i64(D));
      op.arg("k", i64(N * Vd)).arg("out", p);
      if (!pIsNone)
        op.arg("residual", x);
    }

    // The FFN: x = R(p + ffn(m)).
    const A postLn = wt(lp + "post_attention_layernorm.weight", {D});
    A mIn = p;
    // Finest: the MoE pre-norm rides on attn_res (its fused output norm).
    const bool normInAttnRes = finest && c.hasAttnRes() && !c.isDenseLayer(l);
    if (c.hasAttnRes()) {
      attnRes(numBlocks, p, lp + "mlp_res", normInAttnRes ? hn : m);
      if (normInAttnRes)
        plan.launches.back()
            .arg("normWeight", postLn)
            .arg("normEps", num(c.rmsNormEps));
      mIn = m;
    }
    auto gatedMlp = [&](PlanLaunch &g) -> PlanLaunch & {
      return g.arg("activation", i64(act))
          .arg("beta1", num(c.situBeta))
          .arg("hasBeta2", i64(c.hasSituLinearBeta ? 1 : 0))
          .arg("beta2", num(c.situLinearBeta));
    };
    if (c.isDenseLayer(l)) {
      const std::string mlp = lp + "mlp.";
      const int64_t Id = c.intermediateSize;
      gatedMlp(plan.addLaunch("gated_mlp"))
          .arg("x", mIn)
          .arg("normWeight", postLn)
          .arg("normEps", num(c.rmsNormEps))
          .arg("w1", lin(mlp + "gate_proj", Id, D))
          .arg("w3", lin(mlp + "up_proj", Id, D))
          .arg("w2", lin(mlp + "down_proj", D, Id))
          .arg("inDim", i64(D))
          .arg("interDim", i64(Id))
          .arg("outDim", i64(D))
          .arg("residual", p)
          .arg("out", x);
      continue;
    }
    const std::string moe = lp + "block_sparse_moe.";
    if (!normInAttnRes)
      plan.addLaunch("rms_norm")
          .arg("x", mIn)
          .arg("w", postLn)
          .arg("out", hn)
          .arg("n", i64(D))
          .arg("eps", num(c.rmsNormEps));
    plan.addLaunch("router")
        .arg("h", hn)
        .arg("gate", lin(moe + "gate", E, D))
        .arg("bias", wt(moe + "gate.e_score_correction_bias", {E}, "f32"))
        .arg("numExperts", i64(E))
        .arg("dim", i64(D))
        .arg("topK", i64(topK))
        .arg("renormalize", i64(c.moeRenormalize ? 1 : 0))
        .arg("scaling", num(c.routedScalingFactor))
        .arg("outIds", ids)
        .arg("outWeights", rw);
    auto expert = [&](const char *w, int64_t rows, int64_t cols) {
      const std::string base = moe + "experts.{e}." + w;
      return c.expertsMxfp4 ? wt(base, {E, rows, cols}, "mxfp4")
                            : wt(base + ".weight", {E, rows, cols});
    };
    PlanLaunch &ex = gatedMlp(plan.addLaunch("moe_experts"));
    ex.arg("ids", ids).arg("weights", rw).arg("topK", i64(topK));
    ex.arg("numExperts", i64(E)).arg("w1", expert("w1", I, Dm));
    ex.arg("w3", expert("w3", I, Dm)).arg("w2", expert("w2", Dm, I));
    ex.arg("dim", i64(Dm)).arg("interDim", i64(I));
    if (c.hasLatentMoe()) {
      plan.addLaunch("linear")
          .arg("x", hn)
          .arg("w", lin(moe + "routed_expert_down_proj", Dm, D))
          .arg("n", i64(Dm))
          .arg("k", i64(D))
          .arg("out", z);
      // moe_experts must run after the down projection: move it to the end.
      PlanLaunch moved = plan.launches[plan.launches.size() - 2];
      plan.launches.erase(plan.launches.end() - 2);
      moved.arg("x", z).arg("out", r);
      plan.launches.push_back(moved);
      if (c.latentMoeUseNorm)
        plan.addLaunch("rms_norm")
            .arg("x", r)
            .arg("w", wt(moe + "routed_expert_norm.weight", {Dm}))
            .arg("out", r)
            .arg("n", i64(Dm))
            .arg("eps", num(c.rmsNormEps));
      plan.addLaunch("linear")
          .arg("x", r)
          .arg("w", lin(moe + "routed_expert_up_proj", D, Dm))
          .arg("n", i64(D))
          .arg("k", i64(Dm))
          .arg("out", routed);
    } else {
      plan.launches.back().arg("x", hn).arg("out", routed);
    }
    A ffnOut = routed;
    if (SI > 0) {
      const std::string sh = moe + "shared_experts.";
      gatedMlp(plan.addLaunch("gated_mlp"))
          .arg("x", hn)
          .arg("w1", lin(sh + "gate_proj", SI, D))
          .arg("w3", lin(sh + "up_proj", SI, D))
          .arg("w2", lin(sh + "down_proj", D, SI))
          .arg("inDim", i64(D))
          .arg("interDim", i64(SI))
          .arg("outDim", i64(D))
          .arg("residual", routed)
          .arg("out", ffn);
      ffnOut = ffn;
    }
    plan.addLaunch("add")
        .arg("a", p)
        .arg("b", ffnOut)
        .arg("out", x)
        .arg("n", i64(D));
  }

  A finIn = x;
  if (c.hasAttnRes()) {
    attnRes(numBlocks, x, mp + "output_attn_res", fin);
    finIn = fin;
  }
  const std::string head = c.tieWordEmbeddings
                               ? mp + "embed_tokens.weight"
                               : c.tensorPrefix + "lm_head.weight";
  plan.addLaunch("linear", "k3.lm_head")
      .arg("x", finIn)
      .arg("w", wt(head, {V, D}))
      .arg("n", i64(V))
      .arg("k", i64(D))
      .arg("normWeight", wt(mp + "norm.weight", {D}))
      .arg("normEps", num(c.rmsNormEps))
      .arg("outF32", A::buffer(plan.logitsBuffer));
  return plan;
}

} // namespace k3::test

#endif // K3C_TEST_UNIT_RUNTIME_PLANTESTUTIL_H
