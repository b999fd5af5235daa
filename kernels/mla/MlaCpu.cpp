//===- MlaCpu.cpp - MLA (full attention) ops on the CPU -------------------===//
//
// Computes the cache append and the absorbed-form attention of one decode
// token (K3.md §3). Per head: q̂ = W_UKᵀ q_nope by walking W_UK's P rows
// (row-major); one score per cached row (two dots: L latent + R rope values);
// a max-subtracted fp32 softmax; ĉ = Σ_j p_j c_j over the cache rows; then
// o = W_UV ĉ (V dots of length L). Nothing is rounded before o. The gate, when
// given, is applied to R(o) as mul_sigmoid does.
//
// Limits: length >= 1; the CPU version allocates O(length + L) fp32 scratch.
// A plan whose cache outgrows mla_attend_clustered runs it and mla_attend as a
// pair split at MlaAttendParams::handover; each twin here attends its side.
//
//===----------------------------------------------------------------------===//
#include "kernels/mla/MlaCpu.h"
#include "kernels/common/CpuMath.h"

#include <cstring>
#include <vector>

namespace k3 {

void mlaCacheAppendCpu(const MlaCacheAppendParams &p) {
  const int64_t width = p.kvLoraRank + p.ropeDim;
  const int64_t pos = p.step ? p.step[kStepPos] : p.pos;
  uint16_t *row = p.cache + pos * width;
  cpu::rmsNormBf16(p.kv, p.normWeight, p.kvLoraRank, p.eps, row);
  std::memcpy(row + p.kvLoraRank, p.kv + p.kvLoraRank,
              sizeof(uint16_t) * p.ropeDim);
}

namespace {

/// The attention over cache rows [0, T) (the file comment's steps).
void attend(const MlaAttendParams &p, int64_t T) {
  const int64_t L = p.kvLoraRank, R = p.ropeDim, P = p.nopeDim, V = p.vDim;
  const int64_t width = L + R;

  // The cache widened once for all heads: [T, L+R] fp32.
  std::vector<float> cache(T * width);
  cpu::widen(p.cache, T * width, cache.data());

  std::vector<float> qNope(P), qRope(R), qHat(L), score(T), cHat(L);
  for (int64_t h = 0; h < p.numHeads; ++h) {
    const uint16_t *qh = p.q + h * (P + R);
    cpu::widen(qh, P, qNope.data());
    cpu::widen(qh + P, R, qRope.data());
    const uint16_t *wUK = p.kvB + h * (P + V) * L;
    const uint16_t *wUV = wUK + P * L;

    // q̂[l] = Σ_p W_UK[p][l] q_nope[p], p ascending.
    for (int64_t l = 0; l < L; ++l)
      qHat[l] = 0.0f;
    for (int64_t i = 0; i < P; ++i) {
      const uint16_t *row = wUK + i * L;
      const float qi = qNope[i];
      for (int64_t l = 0; l < L; ++l)
        qHat[l] += bf16ToFloat(row[l]) * qi;
    }

    float maxScore = 0.0f;
    for (int64_t j = 0; j < T; ++j) {
      const float *cj = cache.data() + j * width;
      float s =
          (cpu::dot(qHat.data(), cj, L) + cpu::dot(qRope.data(), cj + L, R)) *
          p.scale;
      score[j] = s;
      if (j == 0 || s > maxScore)
        maxScore = s;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < T; ++j) {
      score[j] = std::exp(score[j] - maxScore);
      sum += score[j];
    }
    const float invSum = 1.0f / sum;

    for (int64_t l = 0; l < L; ++l)
      cHat[l] = 0.0f;
    for (int64_t j = 0; j < T; ++j) {
      const float pj = score[j] * invSum;
      const float *cj = cache.data() + j * width;
      for (int64_t l = 0; l < L; ++l)
        cHat[l] += pj * cj[l];
    }

    for (int64_t i = 0; i < V; ++i) {
      const int64_t c = h * V + i;
      float o = roundBf16(cpu::dotBf16(wUV + i * L, cHat.data(), L));
      if (p.gate)
        o = o * cpu::sigmoid(bf16ToFloat(p.gate[c]));
      p.out[c] = floatToBf16(o);
    }
  }
}

/// The attention of the launch `clustered` names, when the context is its
/// own (mlaAttendOwnsRows); else out is left to the other launch.
void attendIfOwned(const MlaAttendParams &p, bool clustered) {
  const int64_t T = p.step ? p.step[kStepPos] + 1 : p.length;
  if (mlaAttendOwnsRows(p, clustered, T))
    attend(p, T);
}

} // namespace

void mlaAttendCpu(const MlaAttendParams &p) {
  attendIfOwned(p, /*clustered=*/false);
}

void mlaAttendClusteredCpu(const MlaAttendParams &p) {
  attendIfOwned(p, /*clustered=*/true);
}

} // namespace k3
