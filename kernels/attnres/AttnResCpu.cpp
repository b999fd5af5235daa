//===- AttnResCpu.cpp - Block attention residuals on the CPU --------------===//
//
// Computes AttnRes (K3.md §4) in fp32: w = wNorm·wProj once (a product of two
// bf16 values is exact in fp32), then per source one pass for mean(V²) and
// one for Σ (V·r)·w, a max-subtracted softmax, and the α-weighted sum of the
// raw sources in source order (blocks, then extra), rounded once. AttnRes
// logits of a real model sit close together, so nothing here is rounded early.
// With normWeight the rounded mix goes through cpu::rmsNormBf16 in place, the
// very helper rms_norm uses, so the fusion equals attn_res + rms_norm bitwise.
// attn_res_commit is a row copy (memmove: src may be the row itself).
// Limits: at least one source.
//
//===----------------------------------------------------------------------===//
#include "kernels/attnres/AttnResCpu.h"
#include "kernels/common/CpuMath.h"

#include <cstring>
#include <vector>

namespace k3 {

void attnResCpu(const AttnResParams &p) {
  const int64_t D = p.dim;
  const int64_t n = p.numBlocks + (p.extra ? 1 : 0);
  std::vector<const uint16_t *> src(n);
  for (int64_t i = 0; i < p.numBlocks; ++i)
    src[i] = p.blocks + i * D;
  if (p.extra)
    src[n - 1] = p.extra;

  std::vector<float> w(D), v(D), key(D), logit(n);
  for (int64_t d = 0; d < D; ++d)
    w[d] = bf16ToFloat(p.wNorm[d]) * bf16ToFloat(p.wProj[d]);
  float maxLogit = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    cpu::widen(src[i], D, v.data());
    float mean = cpu::dot(v.data(), v.data(), D) / static_cast<float>(D);
    float r = 1.0f / std::sqrt(mean + p.eps);
    for (int64_t d = 0; d < D; ++d)
      key[d] = v[d] * r;
    logit[i] = cpu::dot(key.data(), w.data(), D);
    if (i == 0 || logit[i] > maxLogit)
      maxLogit = logit[i];
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    logit[i] = std::exp(logit[i] - maxLogit);
    sum += logit[i];
  }
  std::vector<float> acc(D, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float alpha = logit[i] / sum;
    for (int64_t d = 0; d < D; ++d)
      acc[d] += alpha * bf16ToFloat(src[i][d]);
  }
  for (int64_t d = 0; d < D; ++d)
    p.out[d] = floatToBf16(acc[d]);
  if (p.normWeight)
    cpu::rmsNormBf16(p.out, p.normWeight, D, p.normEps, p.out);
}

void attnResCommitCpu(const AttnResCommitParams &p) {
  std::memmove(p.blocks + p.index * p.dim, p.src,
               static_cast<size_t>(p.dim) * sizeof(uint16_t));
}

} // namespace k3
