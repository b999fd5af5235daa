//===- Reference.cpp - Naive float64 reference of the K3 decode ops -------===//
//
// Loops written to be read against K3.md and NUMERICS.md, not to be fast.
//
//===----------------------------------------------------------------------===//
#include "test/reference/Reference.h"

#include "kernels/common/BF16.h"

#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

namespace k3 {
namespace ref {

//===----------------------------------------------------------------------===//
// Rounding and storage
//===----------------------------------------------------------------------===//

uint16_t toBf16Bits(double x) {
  if (std::isnan(x))
    return 0x7fc0;
  float f = static_cast<float>(x);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  // double -> float -> bf16 double-rounds wrongly only when the float lands
  // exactly on a bf16 midpoint (low half 0x8000) that x itself is not on:
  // step the float one ulp back towards x so the tie-break sees x's side.
  if (std::isfinite(f) && (bits & 0xffffu) == 0x8000u &&
      static_cast<double>(f) != x)
    f = std::nextafter(f, x > static_cast<double>(f)
                              ? std::numeric_limits<float>::infinity()
                              : -std::numeric_limits<float>::infinity());
  return floatToBf16(f);
}

double fromBf16Bits(uint16_t bits) { return bf16ToFloat(bits); }

double bf16Round(double x) { return fromBf16Bits(toBf16Bits(x)); }

Vec bf16Round(const Vec &x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = bf16Round(x[i]);
  return y;
}

Vec fromBf16(const uint16_t *data, int64_t n) {
  Vec y(n);
  for (int64_t i = 0; i < n; ++i)
    y[i] = fromBf16Bits(data[i]);
  return y;
}

Vec fromBf16(const std::vector<uint16_t> &data) {
  return fromBf16(data.data(), static_cast<int64_t>(data.size()));
}

/// IEEE half to double, written out from the format (no compiler _Float16).
static double halfToDouble(uint16_t h) {
  int sign = (h >> 15) & 1;
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(static_cast<double>(mant), -24);
  else if (exp == 31)
    v = mant ? std::numeric_limits<double>::quiet_NaN()
             : std::numeric_limits<double>::infinity();
  else
    v = std::ldexp(1.0 + mant / 1024.0, exp - 15);
  return sign ? -v : v;
}

Vec fromView(const TensorView &t, int64_t n) {
  if (n < 0)
    n = t.numel();
  assert(n <= t.numel() && "fromView: asked for more values than stored");
  Vec y(n);
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
    case DType::BF16:
      y[i] = fromBf16Bits(t.as<uint16_t>()[i]);
      break;
    case DType::F16:
      y[i] = halfToDouble(t.as<uint16_t>()[i]);
      break;
    case DType::F32:
      y[i] = t.as<float>()[i];
      break;
    case DType::F64:
      y[i] = t.as<double>()[i];
      break;
    default:
      assert(false && "fromView: not a floating-point tensor");
    }
  }
  return y;
}

double e2m1Value(uint8_t code) {
  // Decoded from the bit fields rather than a value table, so the table in
  // kernels/common/MXFP4.cpp is checked against an independent derivation.
  int sign = (code >> 3) & 1;
  int exp = (code >> 1) & 3;
  int mant = code & 1;
  double mag = exp == 0 ? 0.5 * mant // subnormal
                        : std::ldexp(1.0 + 0.5 * mant, exp - 1);
  return sign ? -mag : mag;
}

double e8m0Value(uint8_t e) {
  if (e == 255)
    return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, static_cast<int>(e) - 127);
}

WeightRef WeightRef::fromBf16(const uint16_t *w, int64_t rows, int64_t cols) {
  WeightRef r;
  r.rows = rows;
  r.cols = cols;
  r.bf16 = w;
  return r;
}

WeightRef WeightRef::fromMxfp4(const uint8_t *packed, const uint8_t *scale,
                               int64_t rows, int64_t cols) {
  assert(cols % 32 == 0 && "MXFP4 needs whole 32-input blocks");
  WeightRef r;
  r.rows = rows;
  r.cols = cols;
  r.packed = packed;
  r.scale = scale;
  return r;
}

WeightRef WeightRef::fromLinear(const LinearWeight &w) {
  if (!w.present())
    return WeightRef();
  if (w.mxfp4)
    return fromMxfp4(w.packed->as<uint8_t>(), w.scale->as<uint8_t>(), w.out,
                     w.in);
  assert(w.weight->dtype == DType::BF16 && "bf16 linear weight expected");
  return fromBf16(w.weight->as<uint16_t>(), w.out, w.in);
}

Vec WeightRef::row(int64_t r) const {
  assert(r >= 0 && r < rows);
  Vec y(cols);
  if (bf16) {
    for (int64_t c = 0; c < cols; ++c)
      y[c] = fromBf16Bits(bf16[r * cols + c]);
    return y;
  }
  assert(packed && scale && "row() of an absent weight");
  for (int64_t c = 0; c < cols; ++c) {
    uint8_t byte = packed[r * (cols / 2) + c / 2];
    uint8_t code = (c % 2 == 0) ? (byte & 0xf) : (byte >> 4);
    y[c] = e2m1Value(code) * e8m0Value(scale[r * (cols / 32) + c / 32]);
  }
  return y;
}

//===----------------------------------------------------------------------===//
// Elementwise math
//===----------------------------------------------------------------------===//

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double softplus(double x) {
  // log(1 + e^x) without overflow for large x.
  return x > 30.0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}
double softcap(double x, double beta) { return beta * std::tanh(x / beta); }

ActSpec ActSpec::fromConfig(const ModelConfig &c) {
  ActSpec s;
  s.act = c.hiddenAct;
  s.beta1 = c.situBeta;
  s.hasBeta2 = c.hasSituLinearBeta;
  s.beta2 = c.situLinearBeta;
  return s;
}

double situ(double g, double u, double beta1, bool hasBeta2, double beta2) {
  double up = hasBeta2 ? softcap(u, beta2) : u;
  return softcap(g, beta1) * sigmoid(g) * up;
}

double swiglu(double g, double u) { return silu(g) * u; }

double activate(const ActSpec &spec, double g, double u) {
  if (spec.act == Activation::SiTU)
    return situ(g, u, spec.beta1, spec.hasBeta2, spec.beta2);
  return swiglu(g, u);
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

Vec embed(const uint16_t *table, int64_t vocab, int64_t dim, int64_t token) {
  assert(token >= 0 && token < vocab && "token id out of range");
  return fromBf16(table + token * dim, dim);
}

Vec matvec(const WeightRef &w, const Vec &x) {
  assert(static_cast<int64_t>(x.size()) == w.cols && "matvec: width mismatch");
  Vec y(w.rows);
  for (int64_t r = 0; r < w.rows; ++r) {
    Vec row = w.row(r);
    double acc = 0.0;
    for (int64_t c = 0; c < w.cols; ++c)
      acc += row[c] * x[c];
    y[r] = acc;
  }
  return y;
}

Vec linear(const WeightRef &w, const Vec &x) { return bf16Round(matvec(w, x)); }

Vec rmsNorm(const Vec &x, const Vec &w, double eps) {
  assert(x.size() == w.size() && "rmsNorm: weight size mismatch");
  double ss = 0.0;
  for (double v : x)
    ss += v * v;
  double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = bf16Round(bf16Round(x[i] * inv) * w[i]);
  return y;
}

Vec add(const Vec &a, const Vec &b) {
  assert(a.size() == b.size());
  Vec y(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    y[i] = bf16Round(a[i] + b[i]);
  return y;
}

Vec activateRounded(const ActSpec &act, const Vec &g, const Vec &u) {
  assert(g.size() == u.size());
  Vec a(g.size());
  for (size_t i = 0; i < g.size(); ++i)
    a[i] = bf16Round(activate(act, g[i], u[i]));
  return a;
}

Vec gatedMlp(const WeightRef &gate, const WeightRef &up, const WeightRef &down,
             const Vec &x, const ActSpec &act) {
  Vec g = linear(gate, x);
  Vec u = linear(up, x);
  return linear(down, activateRounded(act, g, u));
}

//===--- KDA --------------------------------------------------------------===//

Vec shortConvSilu(const Vec &u, const Vec &w, int64_t width, Vec &history) {
  const int64_t channels = static_cast<int64_t>(u.size());
  const int64_t hist = width - 1;
  assert(static_cast<int64_t>(w.size()) == channels * width);
  assert(static_cast<int64_t>(history.size()) == channels * hist);
  Vec out(channels);
  for (int64_t c = 0; c < channels; ++c) {
    // Window u_{t-W+1} ... u_t: the W-1 stored inputs, then the new one.
    double acc = 0.0;
    for (int64_t i = 0; i < hist; ++i)
      acc += w[c * width + i] * history[c * hist + i];
    acc += w[c * width + hist] * u[c];
    out[c] = bf16Round(silu(acc));
    for (int64_t i = 0; i + 1 < hist; ++i)
      history[c * hist + i] = history[c * hist + i + 1];
    if (hist > 0)
      history[c * hist + hist - 1] = u[c];
  }
  return out;
}

Vec l2norm(const Vec &x, double eps) {
  double ss = 0.0;
  for (double v : x)
    ss += v * v;
  double inv = 1.0 / std::sqrt(ss + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = x[i] * inv;
  return y;
}

Vec kdaGateLowerBound(const Vec &f, const Vec &dtBias, const Vec &aLog,
                      int64_t heads, int64_t headDim, double lowerBound) {
  Vec g(heads * headDim);
  for (int64_t c = 0; c < heads * headDim; ++c) {
    double a = std::exp(aLog[c / headDim]);
    g[c] = lowerBound * sigmoid(a * (f[c] + dtBias[c]));
  }
  return g;
}

Vec kdaGateSoftplus(const Vec &f, const Vec &dtBias, const Vec &aLog,
                    int64_t heads, int64_t headDim) {
  Vec g(heads * headDim);
  for (int64_t c = 0; c < heads * headDim; ++c) {
    double a = std::exp(aLog[c / headDim]);
    g[c] = -a * softplus(f[c] + dtBias[c]);
  }
  return g;
}

Vec kdaBeta(const Vec &b) {
  Vec beta(b.size());
  for (size_t i = 0; i < b.size(); ++i)
    beta[i] = sigmoid(b[i]);
  return beta;
}

Vec kdaHeadStep(Vec &state, int64_t d, const Vec &q, const Vec &k, const Vec &v,
                const Vec &g, double beta) {
  // A = Diag(alpha) S: row i (key i) scaled by alpha_i = exp(g_i).
  Vec a(d * d);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j)
      a[i * d + j] = std::exp(g[i]) * state[i * d + j];
  // M = I - beta k k^T, then S = M A + beta k v^T, as full matrix products.
  Vec m(d * d);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t l = 0; l < d; ++l)
      m[i * d + l] = (i == l ? 1.0 : 0.0) - beta * k[i] * k[l];
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j) {
      double acc = beta * k[i] * v[j];
      for (int64_t l = 0; l < d; ++l)
        acc += m[i * d + l] * a[l * d + j];
      state[i * d + j] = acc;
    }
  // o = S^T q: o_j = sum_i S[i][j] q_i.
  Vec o(d, 0.0);
  for (int64_t j = 0; j < d; ++j)
    for (int64_t i = 0; i < d; ++i)
      o[j] += state[i * d + j] * q[i];
  return o;
}

/// Elements [h·n, h·n + n) of x.
static Vec slice(const Vec &x, int64_t h, int64_t n) {
  return Vec(x.begin() + h * n, x.begin() + (h + 1) * n);
}

Vec kdaRecurrence(Vec &state, int64_t heads, int64_t headDim, const Vec &q,
                  const Vec &k, const Vec &v, const Vec &g, const Vec &beta) {
  const int64_t d = headDim;
  Vec o(heads * d);
  for (int64_t h = 0; h < heads; ++h) {
    Vec s(state.begin() + h * d * d, state.begin() + (h + 1) * d * d);
    Vec oh = kdaHeadStep(s, d, slice(q, h, d), slice(k, h, d), slice(v, h, d),
                         slice(g, h, d), beta[h]);
    std::copy(s.begin(), s.end(), state.begin() + h * d * d);
    for (int64_t j = 0; j < d; ++j)
      o[h * d + j] = bf16Round(oh[j]);
  }
  return o;
}

Vec kdaGatedNorm(const Vec &o, const Vec &gt, const Vec &w, int64_t heads,
                 int64_t headDim, double eps) {
  Vec y(heads * headDim);
  for (int64_t h = 0; h < heads; ++h) {
    double ss = 0.0;
    for (int64_t i = 0; i < headDim; ++i)
      ss += o[h * headDim + i] * o[h * headDim + i];
    double inv = 1.0 / std::sqrt(ss / static_cast<double>(headDim) + eps);
    for (int64_t i = 0; i < headDim; ++i) {
      int64_t c = h * headDim + i;
      y[c] = bf16Round(o[c] * inv * w[i] * sigmoid(gt[c]));
    }
  }
  return y;
}

void KdaState::reset(const KdaRef &layer) {
  int64_t c = layer.heads * layer.headDim;
  convQ.assign(c * (layer.convWidth - 1), 0.0);
  convK.assign(c * (layer.convWidth - 1), 0.0);
  convV.assign(c * (layer.convWidth - 1), 0.0);
  state.assign(layer.heads * layer.headDim * layer.headDim, 0.0);
}

Vec kdaMix(const KdaRef &layer, KdaState &st, const Vec &uq, const Vec &uk,
           const Vec &uv, const Vec &f, const Vec &bLogit, const Vec &gt,
           KdaTrace *trace) {
  const int64_t heads = layer.heads, d = layer.headDim;
  KdaTrace local;
  KdaTrace &t = trace ? *trace : local;
  t.uq = uq;
  t.uk = uk;
  t.uv = uv;
  t.qc = shortConvSilu(uq, layer.qConv, layer.convWidth, st.convQ);
  t.kc = shortConvSilu(uk, layer.kConv, layer.convWidth, st.convK);
  t.vc = shortConvSilu(uv, layer.vConv, layer.convWidth, st.convV);

  t.q.assign(heads * d, 0.0);
  t.k.assign(heads * d, 0.0);
  const double qScale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t hh = 0; hh < heads; ++hh) {
    Vec qn = l2norm(slice(t.qc, hh, d));
    Vec kn = l2norm(slice(t.kc, hh, d));
    for (int64_t i = 0; i < d; ++i) {
      t.q[hh * d + i] = qn[i] * qScale;
      t.k[hh * d + i] = kn[i];
    }
  }

  t.f = f;
  t.g = layer.hasLowerBound
            ? kdaGateLowerBound(f, layer.dtBias, layer.aLog, heads, d,
                                layer.lowerBound)
            : kdaGateSoftplus(f, layer.dtBias, layer.aLog, heads, d);
  t.beta = kdaBeta(bLogit);
  t.o = kdaRecurrence(st.state, heads, d, t.q, t.k, t.vc, t.g, t.beta);
  t.gt = gt;
  t.y = kdaGatedNorm(t.o, gt, layer.oNorm, heads, d, layer.eps);
  return t.y;
}

Vec kda(const KdaRef &layer, KdaState &st, const Vec &h, KdaTrace *trace) {
  Vec uq = linear(layer.qProj, h);
  Vec uk = linear(layer.kProj, h);
  Vec uv = linear(layer.vProj, h);
  Vec f = linear(layer.fBProj, linear(layer.fAProj, h));
  Vec bLogit = linear(layer.bProj, h);
  Vec gt = layer.fullRankGate ? linear(layer.gProj, h)
                              : linear(layer.gBProj, linear(layer.gAProj, h));
  Vec y = kdaMix(layer, st, uq, uk, uv, f, bLogit, gt, trace);
  return linear(layer.oProj, y);
}

//===--- MLA --------------------------------------------------------------===//

Vec mlaAttendNaive(const MlaDims &dims, const Vec &q,
                   const std::vector<Vec> &cache, const WeightRef &kvB) {
  const int64_t n = dims.heads, p = dims.nope, r = dims.rope, l = dims.latent,
                vd = dims.value;
  const int64_t t = static_cast<int64_t>(cache.size());
  assert(kvB.rows == n * (p + vd) && kvB.cols == l);
  const double scale = 1.0 / std::sqrt(static_cast<double>(p + r));
  Vec o(n * vd);
  for (int64_t h = 0; h < n; ++h) {
    // This head's kv_b rows, transposed to [L][P+V] so that expanding a
    // cached latent is a sum of columns (the inner loop then has no
    // reduction, which keeps this naive form fast enough at K3's size).
    Vec wt(l * (p + vd));
    for (int64_t i = 0; i < p + vd; ++i) {
      Vec row = kvB.row(h * (p + vd) + i);
      for (int64_t c = 0; c < l; ++c)
        wt[c * (p + vd) + i] = row[c];
    }
    const double *qh = q.data() + h * (p + r);

    Vec scores(t);
    std::vector<Vec> values(t);
    for (int64_t j = 0; j < t; ++j) {
      const Vec &row = cache[j];
      assert(static_cast<int64_t>(row.size()) == l + r);
      // [k_nope_j | v_j] = W_kvb,h c_j: the per-head key and value of j.
      Vec kv(p + vd, 0.0);
      for (int64_t c = 0; c < l; ++c) {
        const double cj = row[c];
        const double *col = wt.data() + c * (p + vd);
        for (int64_t i = 0; i < p + vd; ++i)
          kv[i] += col[i] * cj;
      }
      double s = 0.0;
      for (int64_t i = 0; i < p; ++i)
        s += qh[i] * kv[i];
      for (int64_t i = 0; i < r; ++i)
        s += qh[p + i] * row[l + i]; // k_r: shared by all heads, unrotated
      scores[j] = s * scale;
      values[j].assign(kv.begin() + p, kv.end());
    }
    double mx = -std::numeric_limits<double>::infinity();
    for (double s : scores)
      mx = std::max(mx, s);
    double den = 0.0;
    for (double &s : scores) {
      s = std::exp(s - mx);
      den += s;
    }
    for (int64_t i = 0; i < vd; ++i) {
      double acc = 0.0;
      for (int64_t j = 0; j < t; ++j)
        acc += scores[j] / den * values[j][i];
      o[h * vd + i] = bf16Round(acc);
    }
  }
  return o;
}

Vec mlaCacheRow(const MlaRef &layer, const Vec &h) {
  const int64_t l = layer.dims.latent;
  Vec kv = linear(layer.kvAProj, h);
  Vec c = rmsNorm(Vec(kv.begin(), kv.begin() + l), layer.kvALayernorm,
                  layer.normEps);
  c.insert(c.end(), kv.begin() + l, kv.end());
  return c;
}

Vec mlaQuery(const MlaRef &layer, const Vec &h) {
  if (!layer.hasQLora)
    return linear(layer.qProj, h);
  return linear(layer.qBProj, rmsNorm(linear(layer.qAProj, h),
                                      layer.qALayernorm, layer.normEps));
}

Vec mla(const MlaRef &layer, MlaCache &cache, const Vec &h) {
  Vec q = mlaQuery(layer, h);
  cache.rows.push_back(mlaCacheRow(layer, h));
  Vec o = mlaAttendNaive(layer.dims, q, cache.rows, layer.kvBProj);
  if (layer.hasGate) {
    Vec gt = linear(layer.gProj, h);
    for (size_t i = 0; i < o.size(); ++i)
      o[i] = bf16Round(o[i] * sigmoid(gt[i]));
  }
  return linear(layer.oProj, o);
}

//===--- MoE --------------------------------------------------------------===//

namespace {
/// r.weights from r.scores at r.experts (K3.md §5: unbiased, renormalised,
/// scaled).
void setMixingWeights(Routing &r, bool renormalize, double scaling) {
  double sum = 0.0;
  for (int64_t i : r.experts)
    sum += r.scores[i];
  r.weights.clear();
  for (int64_t i : r.experts) {
    double w = r.scores[i];
    if (renormalize)
      w /= (sum + 1e-20);
    r.weights.push_back(w * scaling);
  }
}
} // namespace

Routing route(const WeightRef &gate, const Vec &bias, const Vec &h,
              int64_t topk, bool renormalize, double scaling) {
  Routing r;
  Vec logits = matvec(gate, h);
  const int64_t e = gate.rows;
  r.scores.resize(e);
  for (int64_t i = 0; i < e; ++i)
    r.scores[i] = sigmoid(logits[i]);
  // Repeated strict-greater argmax: an equal later candidate never displaces
  // an earlier one, which is "ties to the lower index".
  std::vector<bool> taken(e, false);
  for (int64_t k = 0; k < topk; ++k) {
    int64_t best = -1;
    for (int64_t i = 0; i < e; ++i) {
      if (taken[i])
        continue;
      if (best < 0 || r.scores[i] + bias[i] > r.scores[best] + bias[best])
        best = i;
    }
    taken[best] = true;
    r.experts.push_back(best);
  }
  setMixingWeights(r, renormalize, scaling);
  return r;
}

Vec expertMix(const std::vector<Vec> &outputs, const Vec &weights) {
  assert(!outputs.empty() && outputs.size() == weights.size());
  Vec acc(outputs[0].size(), 0.0);
  for (size_t k = 0; k < outputs.size(); ++k)
    for (size_t i = 0; i < acc.size(); ++i)
      acc[i] += weights[k] * outputs[k][i];
  return bf16Round(acc);
}

Vec moe(const MoeRef &layer, const Vec &h, Routing *routing, Vec *routedOut,
        Vec *sharedOut, const std::vector<int64_t> *experts) {
  Routing r = route(layer.router, layer.bias, h, layer.topk, layer.renormalize,
                    layer.scaling);
  if (experts) {
    r.experts = *experts;
    setMixingWeights(r, layer.renormalize, layer.scaling);
  }
  Vec z = layer.latent ? linear(layer.routedDown, h) : h;
  std::vector<Vec> ys;
  for (int64_t e : r.experts) {
    const MlpRef &ex = layer.experts[e];
    ys.push_back(gatedMlp(ex.gate, ex.up, ex.down, z, layer.act));
  }
  Vec routed = expertMix(ys, r.weights);
  if (layer.latent) {
    if (layer.latentNorm)
      routed = rmsNorm(routed, layer.routedNorm, layer.eps);
    routed = linear(layer.routedUp, routed);
  }
  if (routing)
    *routing = r;
  if (routedOut)
    *routedOut = routed;
  if (sharedOut)
    sharedOut->clear();
  if (!layer.hasShared)
    return routed;
  Vec shared = gatedMlp(layer.shared.gate, layer.shared.up, layer.shared.down,
                        h, layer.act);
  if (sharedOut)
    *sharedOut = shared;
  return add(routed, shared);
}

//===--- AttnRes and head -------------------------------------------------===//

Vec attnRes(const std::vector<Vec> &sources, const Vec &wNorm, const Vec &wProj,
            double eps, Vec *alpha) {
  assert(!sources.empty());
  const size_t n = sources.size(), dim = sources[0].size();
  Vec logit(n);
  for (size_t i = 0; i < n; ++i) {
    const Vec &v = sources[i];
    double ss = 0.0;
    for (double x : v)
      ss += x * x;
    double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
    double acc = 0.0;
    for (size_t d = 0; d < dim; ++d)
      acc += v[d] * inv * wNorm[d] * wProj[d];
    logit[i] = acc;
  }
  double mx = -std::numeric_limits<double>::infinity();
  for (double x : logit)
    mx = std::max(mx, x);
  Vec a(n);
  double den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    a[i] = std::exp(logit[i] - mx);
    den += a[i];
  }
  Vec out(dim, 0.0);
  for (size_t i = 0; i < n; ++i) {
    a[i] /= den;
    for (size_t d = 0; d < dim; ++d)
      out[d] += a[i] * sources[i][d];
  }
  if (alpha)
    *alpha = a;
  return bf16Round(out);
}

Vec lmHead(const WeightRef &w, const Vec &x) { return matvec(w, x); }

int64_t argmax(const Vec &x) {
  int64_t best = 0;
  for (int64_t i = 1; i < static_cast<int64_t>(x.size()); ++i)
    if (x[i] > x[best])
      best = i;
  return best;
}

int64_t argmax(const std::vector<float> &x) {
  int64_t best = 0;
  for (int64_t i = 1; i < static_cast<int64_t>(x.size()); ++i)
    if (x[i] > x[best])
      best = i;
  return best;
}

} // namespace ref
} // namespace k3
