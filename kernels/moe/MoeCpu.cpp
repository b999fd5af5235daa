//===- MoeCpu.cpp - MoE ops on the CPU ------------------------------------===//
//
// Computes routing, gated MLPs and the routed-expert mix of one token
// (K3.md §5-6). The gated MLP is three cpu::gemvAcc products with bf16
// rounding of g, u, a and y (NUMERICS.md), so `gated_mlp` on one expert and
// `moe_experts` agree with chains of `linear` + `gated_act`. The router selects
// by repeated arg-max over the not-yet-chosen experts (O(k·E), fine for
// E <= 1024), scanning upwards with a strict `>` so ties go to the lower index.
//
// Limits: MXFP4 matrices need their column count % 32 == 0; scratch is
// allocated per call. An expert id outside [0, numExperts) (ids come from a
// buffer, so a bad plan or a corrupted router output can put anything there)
// is never used as an index: its slot's output is NaN, as in the CUDA
// kernel, so the whole mix is NaN and the decode's non-finite check stops.
//
//===----------------------------------------------------------------------===//
#include "kernels/moe/MoeCpu.h"
#include "kernels/common/CpuMath.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace k3 {

void routerCpu(const RouterParams &p) {
  std::vector<float> s(p.numExperts), rank(p.numExperts);
  const std::vector<float> hf =
      cpu::preparedInput(p.h, p.dim, p.normWeight, p.normEps);
  for (int64_t e = 0; e < p.numExperts; ++e) {
    s[e] = cpu::sigmoid(cpu::dotBf16(p.gate + e * p.dim, hf.data(), p.dim));
    rank[e] = s[e] + (p.bias ? p.bias[e] : 0.0f);
  }
  std::vector<char> taken(p.numExperts, 0);
  float sum = 0.0f;
  // A test mutant (k3-inject-mutant): every slot takes expert forceExpert
  // with its unbiased score, renormalised and scaled below as usual.
  for (int32_t k = 0; p.forceExpert >= 0 && k < p.topK; ++k) {
    p.outIds[k] = p.forceExpert;
    p.outWeights[k] = s[p.forceExpert];
    sum += s[p.forceExpert];
  }
  for (int32_t k = 0; p.forceExpert < 0 && k < p.topK; ++k) {
    int64_t best = -1;
    for (int64_t e = 0; e < p.numExperts; ++e) {
      if (taken[e])
        continue;
      // A NaN rank loses to any number, and to an earlier NaN.
      if (best < 0 || rank[e] > rank[best] ||
          (rank[best] != rank[best] && rank[e] == rank[e]))
        best = e;
    }
    taken[best] = 1;
    p.outIds[k] = static_cast<int32_t>(best);
    p.outWeights[k] = s[best];
    sum += s[best];
  }
  const float denom = p.renormalize ? sum + 1e-20f : 1.0f;
  for (int32_t k = 0; k < p.topK; ++k) {
    float w = p.outWeights[k];
    if (p.renormalize)
      w = w / denom;
    p.outWeights[k] = w * p.scaling;
  }
}

namespace {
/// The body of a gated MLP on an already prepared fp32 input: y = R(W2 a),
/// a = R(act(R(W1 x), R(W3 x))); `y` receives the bf16 values widened.
struct GatedMlpShape {
  int64_t inDim, interDim, outDim;
  int32_t activation;
  float beta1;
  int32_t hasBeta2;
  float beta2;
};

void gatedMlpBody(const GatedMlpShape &s, const WeightRef &w1,
                  const WeightRef &w3, const WeightRef &w2, const float *x,
                  float *y) {
  std::vector<float> g(s.interDim), u(s.interDim);
  cpu::gemvAcc(w1, s.interDim, s.inDim, x, g.data());
  cpu::gemvAcc(w3, s.interDim, s.inDim, x, u.data());
  for (int64_t i = 0; i < s.interDim; ++i)
    g[i] = roundBf16(cpu::gatedAct(s.activation, s.beta1, s.hasBeta2, s.beta2,
                                   roundBf16(g[i]), roundBf16(u[i])));
  cpu::gemvAcc(w2, s.outDim, s.interDim, g.data(), y);
  for (int64_t i = 0; i < s.outDim; ++i)
    y[i] = roundBf16(y[i]);
}
} // namespace

void gatedMlpCpu(const GatedMlpParams &p) {
  std::vector<float> y(p.outDim);
  const std::vector<float> x =
      cpu::preparedInput(p.x, p.inDim, p.normWeight, p.normEps);
  GatedMlpShape shape{p.inDim, p.interDim, p.outDim, p.activation,
                      p.beta1, p.hasBeta2, p.beta2};
  gatedMlpBody(shape, p.w1, p.w3, p.w2, x.data(), y.data());
  for (int64_t i = 0; i < p.outDim; ++i) {
    float v = y[i];
    if (p.residual)
      v = v + bf16ToFloat(p.residual[i]);
    p.out[i] = floatToBf16(v);
  }
}

namespace {
/// The end of moe_experts for one row: `acc` is the routed mix (fp32),
/// `shared` the shared expert's bf16 output widened (null without one).
void moeEpilogue(const MoeExpertsParams &p, float *acc, const float *shared) {
  // The routed mix is rounded first, then each optional sum is rounded as
  // the `linear` residual epilogue and `add` it replaces would round it.
  for (int64_t i = 0; i < p.dim; ++i)
    acc[i] = roundBf16(acc[i]);
  if (shared)
    for (int64_t i = 0; i < p.dim; ++i)
      acc[i] = roundBf16(acc[i] + shared[i]);
  for (int64_t i = 0; i < p.dim; ++i) {
    const float v = p.residual ? acc[i] + bf16ToFloat(p.residual[i]) : acc[i];
    p.out[i] = floatToBf16(v);
  }
}
} // namespace

void moeExpertsCpu(const MoeExpertsParams &p) {
  std::vector<float> y(p.dim), acc(p.dim, 0.0f);
  const std::vector<float> x =
      cpu::preparedInput(p.x, p.dim, p.normWeight, p.normEps);
  GatedMlpShape shape{p.dim,   p.interDim, p.dim,  p.activation,
                      p.beta1, p.hasBeta2, p.beta2};
  for (int32_t k = 0; k < p.topK; ++k) {
    const int32_t e = p.ids[k];
    if (e >= 0 && e < p.numExperts)
      gatedMlpBody(shape, p.w1[e], p.w3[e], p.w2[e], x.data(), y.data());
    else
      std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
    const float w = p.weights[k];
    for (int64_t i = 0; i < p.dim; ++i)
      acc[i] += w * y[i];
  }
  if (p.sharedInterDim > 0) {
    GatedMlpShape shared{p.dim,   p.sharedInterDim, p.dim,  p.activation,
                         p.beta1, p.hasBeta2,       p.beta2};
    gatedMlpBody(shared, p.sharedW1, p.sharedW3, p.sharedW2, x.data(),
                 y.data());
  }
  moeEpilogue(p, acc.data(), p.sharedInterDim > 0 ? y.data() : nullptr);
}

void moeFfnCpu(const MoeFfnParams &p) {
  routerCpu(p.router);
  moeExpertsCpu(p.experts);
}

namespace {

/// gatedMlpBody for several inputs: xs[i] -> ys[i], bit for bit as one call
/// per input (gemvAccRows sums each row as gemvAcc does).
void gatedMlpBodyRows(const GatedMlpShape &s, const WeightRef &w1,
                      const WeightRef &w3, const WeightRef &w2,
                      const std::vector<const float *> &xs,
                      const std::vector<float *> &ys) {
  const size_t m = xs.size();
  std::vector<std::vector<float>> g(m, std::vector<float>(s.interDim)),
      u(m, std::vector<float>(s.interDim));
  std::vector<float *> gp(m), up(m);
  std::vector<const float *> ga(m);
  for (size_t i = 0; i < m; ++i)
    gp[i] = g[i].data(), up[i] = u[i].data(), ga[i] = g[i].data();
  cpu::gemvAccRows(w1, s.interDim, s.inDim, xs.data(), gp.data(), m);
  cpu::gemvAccRows(w3, s.interDim, s.inDim, xs.data(), up.data(), m);
  for (size_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < s.interDim; ++i)
      g[r][i] =
          roundBf16(cpu::gatedAct(s.activation, s.beta1, s.hasBeta2, s.beta2,
                                  roundBf16(g[r][i]), roundBf16(u[r][i])));
  cpu::gemvAccRows(w2, s.outDim, s.interDim, ga.data(), ys.data(), m);
  for (size_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < s.outDim; ++i)
      ys[r][i] = roundBf16(ys[r][i]);
}

bool sameExperts(const MoeExpertsParams &a, const MoeExpertsParams &b) {
  return a.dim == b.dim && a.interDim == b.interDim && a.topK == b.topK &&
         a.numExperts == b.numExperts && a.w1 == b.w1 && a.w3 == b.w3 &&
         a.w2 == b.w2 && a.sharedInterDim == b.sharedInterDim &&
         a.sharedW1.bf16 == b.sharedW1.bf16 &&
         a.sharedW1.packed == b.sharedW1.packed &&
         a.activation == b.activation && a.beta1 == b.beta1 &&
         a.hasBeta2 == b.hasBeta2 && a.beta2 == b.beta2;
}

} // namespace

void moeExpertsRowsCpu(const MoeExpertsParams *const *rows, size_t m) {
  const MoeExpertsParams &p0 = *rows[0];
  for (size_t i = 1; i < m; ++i)
    if (!sameExperts(*rows[i], p0)) {
      for (size_t j = 0; j < m; ++j)
        moeExpertsCpu(*rows[j]);
      return;
    }
  const int64_t dim = p0.dim;
  const int32_t topK = p0.topK;
  std::vector<std::vector<float>> x(m);
  for (size_t i = 0; i < m; ++i)
    x[i] = cpu::preparedInput(rows[i]->x, dim, rows[i]->normWeight,
                              rows[i]->normEps);
  // y[i][k]: row i's k-th chosen expert's output; NaN for an id outside
  // [0, E), as the single-row form gives it.
  std::vector<std::vector<float>> y(
      m * topK,
      std::vector<float>(dim, std::numeric_limits<float>::quiet_NaN()));
  // The union, each expert once for the rows that chose it.
  std::vector<std::vector<std::pair<size_t, int32_t>>> users(p0.numExperts);
  for (size_t i = 0; i < m; ++i)
    for (int32_t k = 0; k < topK; ++k) {
      const int32_t e = rows[i]->ids[k];
      if (e >= 0 && e < p0.numExperts)
        users[e].push_back({i, k});
    }
  GatedMlpShape shape{dim,      p0.interDim, dim,      p0.activation,
                      p0.beta1, p0.hasBeta2, p0.beta2};
  for (int64_t e = 0; e < p0.numExperts; ++e) {
    if (users[e].empty())
      continue;
    std::vector<const float *> xs;
    std::vector<float *> ys;
    for (const auto &[i, k] : users[e]) {
      xs.push_back(x[i].data());
      ys.push_back(y[i * topK + k].data());
    }
    gatedMlpBodyRows(shape, p0.w1[e], p0.w3[e], p0.w2[e], xs, ys);
  }
  std::vector<std::vector<float>> shared;
  if (p0.sharedInterDim > 0) {
    GatedMlpShape s{dim,      p0.sharedInterDim, dim,      p0.activation,
                    p0.beta1, p0.hasBeta2,       p0.beta2};
    shared.assign(m, std::vector<float>(dim));
    std::vector<const float *> xs(m);
    std::vector<float *> ys(m);
    for (size_t i = 0; i < m; ++i)
      xs[i] = x[i].data(), ys[i] = shared[i].data();
    gatedMlpBodyRows(s, p0.sharedW1, p0.sharedW3, p0.sharedW2, xs, ys);
  }
  // Each row's mix in its own top-k order, then moeExpertsCpu's epilogue.
  std::vector<float> acc(dim);
  for (size_t r = 0; r < m; ++r) {
    const MoeExpertsParams &p = *rows[r];
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int32_t k = 0; k < topK; ++k) {
      const float w = p.weights[k];
      const std::vector<float> &yk = y[r * topK + k];
      for (int64_t i = 0; i < dim; ++i)
        acc[i] += w * yk[i];
    }
    moeEpilogue(p, acc.data(),
                p0.sharedInterDim > 0 ? shared[r].data() : nullptr);
  }
}

void moeFfnRowsCpu(const MoeFfnParams *const *rows, size_t m) {
  std::vector<const MoeExpertsParams *> experts(m);
  for (size_t i = 0; i < m; ++i) {
    routerCpu(rows[i]->router);
    experts[i] = &rows[i]->experts;
  }
  moeExpertsRowsCpu(experts.data(), m);
}

void moeChunkPlanCpu(const int32_t *ids, int rows, int topK, int64_t experts,
                     int32_t *offsets, int32_t *order, int32_t *pairAt) {
  std::vector<int32_t> next(static_cast<size_t>(experts) + 1, 0);
  const int pairs = rows * topK;
  for (int p = 0; p < pairs; ++p)
    ++next[static_cast<size_t>(ids[p])];
  int32_t at = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const int32_t n = next[static_cast<size_t>(e)];
    offsets[e] = next[static_cast<size_t>(e)] = at;
    at += n;
  }
  offsets[experts] = at;
  for (int p = 0; p < pairs; ++p) {
    const int32_t place = next[static_cast<size_t>(ids[p])]++;
    order[place] = p;
    pairAt[p] = place;
  }
}

} // namespace k3
