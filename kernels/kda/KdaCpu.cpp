//===- KdaCpu.cpp - KDA (linear attention) ops on the CPU -----------------===//
//
// Computes one decode token of a KDA layer between its projections
// (K3.md §2, NUMERICS.md "KDA"):
//  * kda_conv: per channel, the W-tap causal conv over the W-1 stored inputs
//    and this one, SiLU, rounded to bf16; the state shifts by one;
//  * the recurrent step as the launches of `--fusion=none`: kda_l2norm (q
//    with scale 1/sqrt(d), k with 1) and kda_gate write fp32 q, k, g;
//    sigmoid writes fp32 β; kda_step runs two passes over each head's d×d
//    state in row (key) order: (1) decay row i by exp(g_i) and accumulate
//    Sᵀk, (2) add k_i·u and accumulate o = Sᵀq; o rounded to bf16;
//  * kda_gated_norm: per head RMSNorm · o_norm weight · sigmoid(gate), one
//    rounding;
//  * the conv filters and o_norm are read through vectorAt (bf16 widened,
//    fp32 as stored), so the math is fp32 whatever the checkpoint stores;
//  * kda_decode: kda_conv ×3, the recurrent step and kda_gated_norm in
//    sequence through bf16 scratch; the step calls the very helpers the
//    launches above use (l2NormHead, gateHead, stepHead), so kda_decode is
//    the `--fusion=none` chain by construction (fp32 intermediates are kept
//    unrounded, and exp(g) is taken inside the step in both; the CUDA kernel
//    keeps the same rounding points); with the low-rank gate projections
//    folded in (fB / gB), f and gt come from linearCpu first, so the folded
//    form is the unfolded one bit for bit;
// Limits: any H, d, W >= 1; kda_l2norm needs n a multiple of headDim (a
// trailing partial head is left unwritten). kda_decode allocates 4·C bf16 (5·C
// with a folded f_b) and 8·d fp32 of scratch, kda_step 5·d fp32.
//
//===----------------------------------------------------------------------===//
#include "kernels/kda/KdaCpu.h"
#include "kernels/common/CpuMath.h"
#include "kernels/common/VectorRef.h"
#include "kernels/gemv/GemvCpu.h"

#include <cmath>
#include <vector>

namespace k3 {

void kdaL2NormCpu(float *x, int64_t n, float eps) {
  float inv = 1.0f / std::sqrt(cpu::dot(x, x, n) + eps);
  for (int64_t i = 0; i < n; ++i)
    x[i] = x[i] * inv;
}

void kdaConvCpu(const KdaConvParams &p) {
  const int64_t hist = p.width - 1;
  for (int64_t c = 0; c < p.channels; ++c) {
    const int64_t w = c * p.width; // the channel's first filter tap
    float *s = p.state + c * hist;
    float u = bf16ToFloat(p.u[c]);
    // Fused multiply-adds in the CUDA kernel's order (taps ascending): with
    // fp32 filters a product is inexact, and a mul + add that rounds it
    // first lands 1 fp32 ulp away often enough to flip the bf16 rounding
    // of q/k/v below, which the recurrent state then carries. (With bf16
    // filters every product is exact and both forms agree.)
    float acc = 0.0f;
    for (int64_t i = 0; i < hist; ++i)
      acc = std::fma(vectorAt(p.weight, w + i), s[i], acc);
    acc = std::fma(vectorAt(p.weight, w + hist), u, acc);
    for (int64_t i = 0; i + 1 < hist; ++i)
      s[i] = s[i + 1];
    if (hist > 0)
      s[hist - 1] = u;
    p.out[c] = floatToBf16(cpu::silu(acc));
  }
}

namespace {

/// One head of l2norm: out = widen(x) / sqrt(Σ x² + eps), then · scale unless
/// scale is 1. Shared by kda_decode and kda_l2norm.
void l2NormHead(const uint16_t *x, int64_t d, float eps, float scale,
                float *out) {
  cpu::widen(x, d, out);
  kdaL2NormCpu(out, d, eps);
  if (scale != 1.0f)
    for (int64_t i = 0; i < d; ++i)
      out[i] = out[i] * scale;
}

/// One head of the decay gate: g[i] in (lb, 0) or (-inf, 0).
void gateHead(const uint16_t *f, const float *dtBias, float aLog, int64_t d,
              int32_t hasLowerBound, float lowerBound, float *g) {
  const float a = std::exp(aLog);
  for (int64_t i = 0; i < d; ++i) {
    float z = bf16ToFloat(f[i]) + dtBias[i];
    g[i] = hasLowerBound ? lowerBound * cpu::sigmoid(a * z)
                         : -a * cpu::softplus(z);
  }
}

/// Scratch of one head's step (d floats each).
struct StepScratch {
  std::vector<float> v, decay, kS, u, o;
  explicit StepScratch(int64_t d) : v(d), decay(d), kS(d), u(d), o(d) {}
};

/// One head of the delta-rule step on the [d, d] state S (row = key).
void stepHead(const float *q, const float *k, const uint16_t *vBf16,
              const float *g, float beta, float *S, int64_t d, StepScratch &t,
              uint16_t *out) {
  float *v = t.v.data(), *decay = t.decay.data(), *kS = t.kS.data(),
        *u = t.u.data(), *o = t.o.data();
  cpu::widen(vBf16, d, v);
  for (int64_t i = 0; i < d; ++i)
    decay[i] = std::exp(g[i]);
  // Pass 1: S ← Diag(exp(g)) S and kS = Sᵀk on the decayed state.
  for (int64_t j = 0; j < d; ++j)
    kS[j] = 0.0f;
  for (int64_t i = 0; i < d; ++i) {
    float *row = S + i * d;
    const float e = decay[i], ki = k[i];
    for (int64_t j = 0; j < d; ++j) {
      row[j] = row[j] * e;
      kS[j] += row[j] * ki;
    }
  }
  for (int64_t j = 0; j < d; ++j)
    u[j] = beta * (v[j] - kS[j]);
  // Pass 2: S ← S + k ⊗ u and o = Sᵀq on the updated state.
  for (int64_t j = 0; j < d; ++j)
    o[j] = 0.0f;
  for (int64_t i = 0; i < d; ++i) {
    float *row = S + i * d;
    const float ki = k[i], qi = q[i];
    for (int64_t j = 0; j < d; ++j) {
      row[j] += ki * u[j];
      o[j] += row[j] * qi;
    }
  }
  for (int64_t j = 0; j < d; ++j)
    out[j] = floatToBf16(o[j]);
}

/// The delta rule's inputs of head h from the conv outputs q̃, k̃ (bf16):
/// kda_l2norm of q (scale 1/sqrt d) and k, kda_gate into q, k, g (d floats
/// each); returns β = sigmoid of its logit. The very helpers those launches
/// use, so kda_decode is the `--fusion=none` chain by construction.
float stepInputsHead(const KdaDecodeParams &p, int64_t h, const uint16_t *qt,
                     const uint16_t *kt, float *q, float *k, float *g) {
  const int64_t d = p.headDim, c0 = h * d;
  l2NormHead(qt + c0, d, kKdaL2NormEps, kdaQueryScale(d), q);
  l2NormHead(kt + c0, d, kKdaL2NormEps, 1.0f, k);
  gateHead(p.f + c0, p.dtBias + c0, p.aLog[h], d, p.hasLowerBound,
           p.lowerBound, g);
  return cpu::sigmoid(bf16ToFloat(p.betaLogit[h]));
}

/// kda_decode's recurrent step of every head on the conv outputs q̃, k̃, ṽ
/// (bf16): per head its inputs (stepInputsHead), then kda_step.
void recurrentHeads(const KdaDecodeParams &p, const uint16_t *qt,
                    const uint16_t *kt, const uint16_t *vt, uint16_t *out) {
  const int64_t d = p.headDim;
  std::vector<float> q(d), k(d), g(d);
  StepScratch scratch(d);
  for (int64_t h = 0; h < p.numHeads; ++h) {
    const float beta =
        stepInputsHead(p, h, qt, kt, q.data(), k.data(), g.data());
    stepHead(q.data(), k.data(), vt + h * d, g.data(), beta,
             p.state + h * d * d, d, scratch, out + h * d);
  }
}

} // namespace

void kdaL2NormStepCpu(const KdaL2NormParams &p) {
  const int64_t d = p.headDim;
  for (int64_t c0 = 0; c0 + d <= p.n; c0 += d)
    l2NormHead(p.x + c0, d, p.eps, p.scale, p.out + c0);
}

void kdaGateCpu(const KdaGateParams &p) {
  const int64_t d = p.headDim;
  for (int64_t h = 0; h < p.numHeads; ++h)
    gateHead(p.f + h * d, p.dtBias + h * d, p.aLog[h], d, p.hasLowerBound,
             p.lowerBound, p.out + h * d);
}

void sigmoidCpu(const SigmoidParams &p) {
  for (int64_t i = 0; i < p.n; ++i)
    p.out[i] = cpu::sigmoid(bf16ToFloat(p.x[i]));
}

void kdaStepCpu(const KdaStepParams &p) {
  const int64_t d = p.headDim;
  StepScratch scratch(d);
  for (int64_t h = 0; h < p.numHeads; ++h) {
    const int64_t c0 = h * d;
    stepHead(p.q + c0, p.k + c0, p.v + c0, p.g + c0, p.beta[h],
             p.state + h * d * d, d, scratch, p.out + c0);
  }
}

void kdaChunkCpu(const KdaChunkParams &p) {
  const int64_t T = p.tokens, H = p.numHeads, d = p.headDim, C = H * d;
  if (T <= 0)
    return; // no tokens: the state stays as it is
  std::vector<float> G(static_cast<size_t>(T * d));   // [T, d] cumulative
  std::vector<float> w(static_cast<size_t>(T * d));   // [T, d] pseudo-values
  std::vector<float> decayed(static_cast<size_t>(d)); // exp(G) ⊙ x
  std::vector<float> o(static_cast<size_t>(d));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t c0 = h * d;
    float *S = p.state + h * d * d;
    auto at = [&](const float *x, int64_t t) { return x + t * C + c0; };
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < d; ++c)
        G[t * d + c] = (t ? G[(t - 1) * d + c] : 0.0f) + at(p.g, t)[c];

    // S0ᵀ (exp(G_t) ⊙ x): the chunk's start state seen from token t.
    auto fromStart = [&](const float *x, int64_t t, float *out) {
      for (int64_t c = 0; c < d; ++c)
        decayed[c] = std::exp(G[t * d + c]) * x[c];
      for (int64_t j = 0; j < d; ++j)
        out[j] = 0.0f;
      for (int64_t c = 0; c < d; ++c)
        for (int64_t j = 0; j < d; ++j)
          out[j] += decayed[c] * S[c * d + j];
    };
    // Σ_c x[c] k_r[c] exp(G_t[c] − G_r[c]).
    auto between = [&](const float *x, int64_t t, int64_t r) {
      const float *kr = at(p.k, r);
      float acc = 0.0f;
      for (int64_t c = 0; c < d; ++c)
        acc += x[c] * kr[c] * std::exp(G[t * d + c] - G[r * d + c]);
      return acc;
    };

    // The UT transform as a forward substitution: w_s from w_0 .. w_{s-1}.
    for (int64_t s = 0; s < T; ++s) {
      float *ws = &w[s * d];
      fromStart(at(p.k, s), s, ws);
      const float beta = p.beta[s * H + h];
      const uint16_t *vs = p.v + s * C + c0;
      for (int64_t j = 0; j < d; ++j)
        ws[j] = bf16ToFloat(vs[j]) - ws[j];
      for (int64_t r = 0; r < s; ++r) {
        const float a = between(at(p.k, s), s, r);
        for (int64_t j = 0; j < d; ++j)
          ws[j] -= a * w[r * d + j];
      }
      for (int64_t j = 0; j < d; ++j)
        ws[j] *= beta;
    }
    // Outputs against the start state (before it is overwritten).
    for (int64_t t = 0; t < T; ++t) {
      fromStart(at(p.q, t), t, o.data());
      for (int64_t s = 0; s <= t; ++s) {
        const float b = between(at(p.q, t), t, s);
        for (int64_t j = 0; j < d; ++j)
          o[j] += b * w[s * d + j];
      }
      uint16_t *out = p.out + t * C + c0;
      for (int64_t j = 0; j < d; ++j)
        out[j] = floatToBf16(o[j]);
    }
    // The state after the chunk.
    const float *GT = &G[(T - 1) * d];
    for (int64_t c = 0; c < d; ++c) {
      const float keep = std::exp(GT[c]);
      float *row = S + c * d;
      for (int64_t j = 0; j < d; ++j)
        row[j] *= keep;
      for (int64_t s = 0; s < T; ++s) {
        const float f = std::exp(GT[c] - G[s * d + c]) * at(p.k, s)[c];
        for (int64_t j = 0; j < d; ++j)
          row[j] += f * w[s * d + j];
      }
    }
  }
}

void kdaGatedNormCpu(const KdaGatedNormParams &p) {
  const int64_t d = p.headDim;
  std::vector<float> o(d);
  for (int64_t h = 0; h < p.numHeads; ++h) {
    const int64_t c0 = h * d;
    cpu::widen(p.o + c0, d, o.data());
    float mean = cpu::dot(o.data(), o.data(), d) / static_cast<float>(d);
    float r = 1.0f / std::sqrt(mean + p.eps);
    for (int64_t i = 0; i < d; ++i) {
      float y = o[i] * r * vectorAt(p.weight, i) *
                cpu::sigmoid(bf16ToFloat(p.gate[c0 + i]));
      p.out[c0 + i] = floatToBf16(y);
    }
  }
}

namespace {

/// What kda_decode computes of one token before the delta rule: the folded
/// low-rank gates (f into `f`, gt into p.gateOut) and the three convs into
/// q̃, k̃, ṽ (bf16; the conv states advance). Returns the params with f and
/// gate pointing at what the rest reads.
KdaDecodeParams prepareToken(const KdaDecodeParams &params,
                             std::vector<uint16_t> &f, uint16_t *q,
                             uint16_t *k, uint16_t *v) {
  KdaDecodeParams p = params;
  const int64_t C = p.numHeads * p.headDim;
  // The folded low-rank gate projections: the very `linear` they replace.
  auto lowRank = [C](const uint16_t *a, const uint16_t *b, int64_t rank,
                     uint16_t *out) {
    LinearParams l;
    l.x = a;
    l.w.bf16 = b;
    l.n = C;
    l.k = rank;
    l.out = out;
    linearCpu(l);
  };
  if (p.fB) {
    f.resize(C);
    lowRank(p.fA, p.fB, p.fRank, f.data());
    p.f = f.data();
  }
  if (p.gB) {
    lowRank(p.gA, p.gB, p.gRank, p.gateOut);
    p.gate = p.gateOut;
  }

  KdaConvParams conv;
  conv.channels = C;
  conv.width = p.convWidth;
  const uint16_t *inputs[3] = {p.uq, p.uk, p.uv};
  const VectorRef weights[3] = {p.convQ, p.convK, p.convV};
  float *states[3] = {p.convStateQ, p.convStateK, p.convStateV};
  uint16_t *outs[3] = {q, k, v};
  for (int i = 0; i < 3; ++i) {
    conv.u = inputs[i];
    conv.weight = weights[i];
    conv.state = states[i];
    conv.out = outs[i];
    kdaConvCpu(conv);
  }
  return p;
}

/// kda_decode's last part: y = kda_gated_norm(o) into p.out.
void gatedNormOut(const KdaDecodeParams &p, const uint16_t *o) {
  KdaGatedNormParams norm;
  norm.o = o;
  norm.gate = p.gate;
  norm.weight = p.normWeight;
  norm.out = p.out;
  norm.numHeads = p.numHeads;
  norm.headDim = p.headDim;
  norm.eps = p.normEps;
  kdaGatedNormCpu(norm);
}

} // namespace

void kdaDecodeCpu(const KdaDecodeParams &params) {
  const int64_t C = params.numHeads * params.headDim;
  std::vector<uint16_t> q(C), k(C), v(C), o(C), f;
  const KdaDecodeParams p = prepareToken(params, f, q.data(), k.data(),
                                         v.data());
  recurrentHeads(p, q.data(), k.data(), v.data(), o.data());
  gatedNormOut(p, o.data());
}

void kdaDecodeChunkCpu(const KdaDecodeParams *const *rows, size_t n) {
  if (n == 0)
    return;
  const KdaDecodeParams &first = *rows[0];
  const int64_t H = first.numHeads, d = first.headDim, C = H * d;
  const int64_t T = static_cast<int64_t>(n);
  std::vector<uint16_t> qt(C), kt(C), v(T * C), o(T * C), f;
  std::vector<float> q(T * C), k(T * C), g(T * C), beta(T * H);
  std::vector<KdaDecodeParams> prepared(n);
  // Each token as kda_decode prepares it (the conv states advance token by
  // token), then normalised, gated and β as its recurrent step would.
  for (int64_t t = 0; t < T; ++t) {
    const KdaDecodeParams &p = prepared[t] =
        prepareToken(*rows[t], f, qt.data(), kt.data(), v.data() + t * C);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t tc = t * C + h * d;
      beta[t * H + h] = stepInputsHead(p, h, qt.data(), kt.data(),
                                       q.data() + tc, k.data() + tc,
                                       g.data() + tc);
    }
  }
  KdaChunkParams c;
  c.q = q.data();
  c.k = k.data();
  c.v = v.data();
  c.g = g.data();
  c.beta = beta.data();
  c.state = first.state;
  c.out = o.data();
  c.tokens = T;
  c.numHeads = H;
  c.headDim = d;
  kdaChunkCpu(c);
  for (int64_t t = 0; t < T; ++t)
    gatedNormOut(prepared[t], o.data() + t * C);
}

void kdaDecodeRowsChunkCpu(const KdaDecodeParams *const *rows, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && rows[j]->state == rows[i]->state)
      ++j;
    if (j - i == 1)
      kdaDecodeCpu(*rows[i]);
    else
      kdaDecodeChunkCpu(rows + i, j - i);
    i = j;
  }
}

} // namespace k3
