//===- KdaCpu.cpp - KDA (linear attention) ops on the CPU -----------------===//
//
// Computes one decode token of a KDA layer between its projections
// (K3.md §2, NUMERICS.md "KDA"):
//  * kda_conv: per channel, the W-tap causal conv over the W-1 stored inputs
//    and this one, SiLU, rounded to bf16; the state shifts by one;
//  * kda_recurrent: per head, l2norm + scale of q, l2norm of k, the decay gate
//    and β, then two passes over the head's d×d state in row (key) order:
//    (1) decay row i by exp(g_i) and accumulate Sᵀk, (2) add k_i·u and
//    accumulate o = Sᵀq; o rounded to bf16;
//  * kda_gated_norm: per head RMSNorm · o_norm weight · sigmoid(gate), one
//    rounding;
//  * kda_decode: those three in sequence through bf16 scratch, so it is the
//    chain by construction (the CUDA kernel keeps the same rounding points).
// Limits: any H, d, W >= 1. kda_decode allocates 4·C bf16 of scratch.
//
//===----------------------------------------------------------------------===//
#include "kernels/kda/KdaCpu.h"
#include "kernels/common/CpuMath.h"

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
    const uint16_t *w = p.weight + c * p.width;
    float *s = p.state + c * hist;
    float u = bf16ToFloat(p.u[c]);
    float acc = 0.0f;
    for (int64_t i = 0; i < hist; ++i)
      acc += bf16ToFloat(w[i]) * s[i];
    acc += bf16ToFloat(w[hist]) * u;
    for (int64_t i = 0; i + 1 < hist; ++i)
      s[i] = s[i + 1];
    if (hist > 0)
      s[hist - 1] = u;
    p.out[c] = floatToBf16(cpu::silu(acc));
  }
}

void kdaRecurrentCpu(const KdaRecurrentParams &p) {
  const int64_t d = p.headDim;
  const float qScale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> q(d), k(d), v(d), decay(d), kS(d), u(d), o(d);
  for (int64_t h = 0; h < p.numHeads; ++h) {
    const int64_t c0 = h * d;
    cpu::widen(p.q + c0, d, q.data());
    cpu::widen(p.k + c0, d, k.data());
    cpu::widen(p.v + c0, d, v.data());
    kdaL2NormCpu(q.data(), d);
    kdaL2NormCpu(k.data(), d);
    for (int64_t i = 0; i < d; ++i)
      q[i] = q[i] * qScale;

    // Decay gate per key channel: g in (lb, 0) or (-inf, 0); exp(g) in (0, 1).
    const float a = std::exp(p.aLog[h]);
    for (int64_t i = 0; i < d; ++i) {
      float z = bf16ToFloat(p.f[c0 + i]) + p.dtBias[c0 + i];
      float g = p.hasLowerBound ? p.lowerBound * cpu::sigmoid(a * z)
                                : -a * cpu::softplus(z);
      decay[i] = std::exp(g);
    }
    const float beta = cpu::sigmoid(bf16ToFloat(p.betaLogit[h]));

    float *S = p.state + h * d * d;
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
      p.out[c0 + j] = floatToBf16(o[j]);
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
      float y = o[i] * r * bf16ToFloat(p.weight[i]) *
                cpu::sigmoid(bf16ToFloat(p.gate[c0 + i]));
      p.out[c0 + i] = floatToBf16(y);
    }
  }
}

void kdaDecodeCpu(const KdaDecodeParams &p) {
  const int64_t C = p.numHeads * p.headDim;
  std::vector<uint16_t> q(C), k(C), v(C), o(C);

  KdaConvParams conv;
  conv.channels = C;
  conv.width = p.convWidth;
  const uint16_t *inputs[3] = {p.uq, p.uk, p.uv};
  const uint16_t *weights[3] = {p.convQ, p.convK, p.convV};
  float *states[3] = {p.convStateQ, p.convStateK, p.convStateV};
  uint16_t *outs[3] = {q.data(), k.data(), v.data()};
  for (int i = 0; i < 3; ++i) {
    conv.u = inputs[i];
    conv.weight = weights[i];
    conv.state = states[i];
    conv.out = outs[i];
    kdaConvCpu(conv);
  }

  KdaRecurrentParams rec;
  rec.q = q.data();
  rec.k = k.data();
  rec.v = v.data();
  rec.f = p.f;
  rec.betaLogit = p.betaLogit;
  rec.dtBias = p.dtBias;
  rec.aLog = p.aLog;
  rec.state = p.state;
  rec.out = o.data();
  rec.numHeads = p.numHeads;
  rec.headDim = p.headDim;
  rec.hasLowerBound = p.hasLowerBound;
  rec.lowerBound = p.lowerBound;
  kdaRecurrentCpu(rec);

  KdaGatedNormParams norm;
  norm.o = o.data();
  norm.gate = p.gate;
  norm.weight = p.normWeight;
  norm.out = p.out;
  norm.numHeads = p.numHeads;
  norm.headDim = p.headDim;
  norm.eps = p.normEps;
  kdaGatedNormCpu(norm);
}

} // namespace k3
