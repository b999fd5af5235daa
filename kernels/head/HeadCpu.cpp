//===- HeadCpu.cpp - Greedy token choice on the CPU -----------------------===//
//
// Computes the index of the largest fp32 logit. A strict `>` while scanning
// upwards keeps the lowest index among equal maxima (K3.md §10); NaN compares
// false, so it is never chosen.
//
//===----------------------------------------------------------------------===//
#include "kernels/head/HeadCpu.h"

#include <cmath>

namespace k3 {

void argmaxCpu(const ArgmaxParams &p) {
  int64_t best = -1;
  float bestValue = 0.0f;
  for (int64_t i = 0; i < p.n; ++i) {
    float v = p.logits[i];
    if (v != v) // NaN
      continue;
    if (best < 0 || v > bestValue) {
      best = i;
      bestValue = v;
    }
  }
  const int64_t id = best < 0 ? 0 : best;
  if (p.outId)
    *p.outId = id;
  if (p.step) {
    bool nonFinite = false;
    for (int64_t i = 0; i < p.n && !nonFinite; ++i)
      nonFinite = !std::isfinite(p.logits[i]);
    p.step[kStepToken] = id;
    p.step[kStepPos] += 1;
    p.step[kStepNonFinite] = nonFinite ? 1 : 0;
  }
}

} // namespace k3
