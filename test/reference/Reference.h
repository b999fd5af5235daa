//===- Reference.h - Naive float64 reference of the K3 decode ops -*- C++
//-*-===//
//
// An independent implementation of K3.md, used only by tests to hold the CPU
// kernels (and, through them, the CUDA kernels and the compiled plans) to the
// math. Every op does its arithmetic in float64 and rounds to bf16 (`R`) at
// exactly the storage points of docs/NUMERICS.md, so a correct fp32 kernel
// differs from it only by fp32 accumulation error and the rare bf16 rounding
// flip that error causes.
//
// Deliberately naive: no blocking, no fusion, no shared code with kernels/.
// Where K3.md gives two equal forms, this file uses the one the kernels do NOT
// use (the KDA matrix form, MLA's naive per-head expansion), so an algebra slip
// in the fast form shows up as a disagreement. MXFP4 is decoded here from the
// K3.md §7 table, not through kernels/common/MXFP4.h.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_REFERENCE_REFERENCE_H
#define K3C_TEST_REFERENCE_REFERENCE_H

#include "runtime/model/Config.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/io/Tensor.h"

#include <cstdint>
#include <vector>

namespace k3 {
namespace ref {

using Vec = std::vector<double>;

//===----------------------------------------------------------------------===//
// Rounding and storage
//===----------------------------------------------------------------------===//

/// R(x): the bf16 value nearest to `x` (ties to even), computed from the
/// double directly (not through a float, whose own rounding could move a value
/// onto a bf16 midpoint). NaN stays NaN, overflow goes to ±inf.
double bf16Round(double x);
/// R applied to every element.
Vec bf16Round(const Vec &x);
/// The bf16 bit pattern of R(x).
uint16_t toBf16Bits(double x);
/// The exact value of a bf16 bit pattern.
double fromBf16Bits(uint16_t bits);
/// Widens a bf16 buffer exactly.
Vec fromBf16(const uint16_t *data, int64_t n);
/// Widens a bf16 buffer exactly.
Vec fromBf16(const std::vector<uint16_t> &data);

/// The first `n` values of a BF16/F16/F32/F64 tensor (all of it when n < 0),
/// exactly. Other dtypes are a programming error (asserts).
Vec fromView(const TensorView &t, int64_t n = -1);

/// Value of an FP4 E2M1 code (low 4 bits), from K3.md §7: bit 3 is the sign,
/// bits 2..1 the exponent (bias 1), bit 0 the mantissa; exponent 0 is
/// subnormal (0 or 0.5).
double e2m1Value(uint8_t code);
/// 2^(e − 127); NaN for e = 255.
double e8m0Value(uint8_t e);

/// A read-only linear weight [rows, cols] in bf16 or MXFP4 storage, decoded a
/// row at a time (so a K3-sized matrix is never widened to float64 at once).
struct WeightRef {
  int64_t rows = 0, cols = 0;
  const uint16_t *bf16 = nullptr;  ///< [rows, cols], or null when MXFP4
  const uint8_t *packed = nullptr; ///< [rows, cols/2] E2M1, low nibble even
  const uint8_t *scale = nullptr;  ///< [rows, cols/32] E8M0

  static WeightRef fromBf16(const uint16_t *w, int64_t rows, int64_t cols);
  static WeightRef fromMxfp4(const uint8_t *packed, const uint8_t *scale,
                             int64_t rows, int64_t cols);
  /// Either kind, from the runtime's binding; absent weights give rows = 0.
  static WeightRef fromLinear(const LinearWeight &w);

  bool present() const { return bf16 || packed; }
  /// Row `r`, exactly (MXFP4 dequantisation is exact in double).
  Vec row(int64_t r) const;
};

//===----------------------------------------------------------------------===//
// Elementwise math (all double, no rounding)
//===----------------------------------------------------------------------===//

double sigmoid(double x);
double silu(double x);
double softplus(double x);
/// softcap(x, β) = β · tanh(x / β) (K3.md §6).
double softcap(double x, double beta);

/// Which gated activation an MLP uses, with its parameters.
struct ActSpec {
  Activation act = Activation::SiLU;
  double beta1 = 4.0;    ///< SiTU gate softcap
  bool hasBeta2 = false; ///< SiTU up-branch softcap; plain u when false
  double beta2 = 25.0;
  static ActSpec fromConfig(const ModelConfig &c);
};

/// SiTU(g, u) = softcap(g, β1) · sigmoid(g) · softcap(u, β2) (or · u).
double situ(double g, double u, double beta1, bool hasBeta2, double beta2);
/// SwiGLU: SiLU(g) · u.
double swiglu(double g, double u);
/// The activation of `spec`, unrounded.
double activate(const ActSpec &spec, double g, double u);

//===----------------------------------------------------------------------===//
// Ops (NUMERICS.md rounding points)
//===----------------------------------------------------------------------===//

/// x = E[token], exact.
Vec embed(const uint16_t *table, int64_t vocab, int64_t dim, int64_t token);

/// Σ_k W[n,k] x[k] in double, unrounded.
Vec matvec(const WeightRef &w, const Vec &x);
/// Linear: R(W x).
Vec linear(const WeightRef &w, const Vec &x);

/// RMSNorm: n = R(x / sqrt(mean(x²) + eps)); out = R(n · w).
Vec rmsNorm(const Vec &x, const Vec &w, double eps);

/// Residual add R(a + b).
Vec add(const Vec &a, const Vec &b);

/// Gated MLP: g = R(W1 x), u = R(W3 x), a = R(act(g, u)), y = R(W2 a).
Vec gatedMlp(const WeightRef &gate, const WeightRef &up, const WeightRef &down,
             const Vec &x, const ActSpec &act);

/// The middle of a gated MLP: R(act(g[i], u[i])).
Vec activateRounded(const ActSpec &act, const Vec &g, const Vec &u);

//===--- KDA --------------------------------------------------------------===//

/// Depthwise causal short convolution + SiLU over one token, per channel c:
/// out[c] = R(SiLU(Σ_{i<W} w[c·W + i] · u_{t−W+1+i}[c])) with u_t = `u`.
/// `history` holds the previous W−1 inputs, channel-major, oldest first
/// ([C, W−1]); it is shifted to include `u` on return. Zeros before start.
Vec shortConvSilu(const Vec &u, const Vec &w, int64_t width, Vec &history);

/// x / sqrt(Σ x² + eps): the epsilon is INSIDE the root (K3.md §2.3).
Vec l2norm(const Vec &x, double eps = 1e-6);

/// Lower-bound decay gate (K3): g[c] = lb · sigmoid(exp(A_log[h]) · z[c]),
/// z = f + dt_bias, head h = c / d.
Vec kdaGateLowerBound(const Vec &f, const Vec &dtBias, const Vec &aLog,
                      int64_t heads, int64_t headDim, double lowerBound);
/// Softplus decay gate (no lower bound): g[c] = −exp(A_log[h]) · softplus(z).
Vec kdaGateSoftplus(const Vec &f, const Vec &dtBias, const Vec &aLog,
                    int64_t heads, int64_t headDim);

/// β = sigmoid(b) per head (b already R(b_proj h)).
Vec kdaBeta(const Vec &b);

/// One head of the delta-rule recurrence in the MATRIX form of K3.md §2.7:
/// S ← (I − β k kᵀ) · Diag(exp(g)) · S + β k vᵀ, returns o = Sᵀ q (unrounded).
/// S is [d, d] indexed [key][value]; Diag scales the key axis (rows).
Vec kdaHeadStep(Vec &state, int64_t d, const Vec &q, const Vec &k, const Vec &v,
                const Vec &g, double beta);

/// All heads: `q`, `k` already l2-normalised (q also scaled by 1/sqrt(d)),
/// `v`, `g` [H·d], `beta` [H], `state` [H, d, d]. Returns R(o) [H·d].
Vec kdaRecurrence(Vec &state, int64_t heads, int64_t headDim, const Vec &q,
                  const Vec &k, const Vec &v, const Vec &g, const Vec &beta);

/// Gated output norm per head:
/// y = R(o · rsqrt(mean_head(o²) + eps) · w[i] · sigmoid(gt)), one rounding.
Vec kdaGatedNorm(const Vec &o, const Vec &gt, const Vec &w, int64_t heads,
                 int64_t headDim, double eps);

/// One KDA layer's weights, as the reference reads them.
struct KdaRef {
  int64_t heads = 0, headDim = 0, convWidth = 0;
  WeightRef qProj, kProj, vProj; ///< [C, D]
  Vec qConv, kConv, vConv;       ///< [C, W]
  WeightRef fAProj, fBProj;      ///< [d, D], [C, d]
  Vec dtBias;                    ///< [C]
  Vec aLog;                      ///< [H]
  WeightRef bProj;               ///< [H, D]
  bool fullRankGate = true;
  WeightRef gProj;          ///< [C, D] when fullRankGate
  WeightRef gAProj, gBProj; ///< [d, D], [C, d] otherwise
  Vec oNorm;                ///< [d]
  WeightRef oProj;          ///< [D, C]
  bool hasLowerBound = false;
  double lowerBound = 0.0;
  double eps = 1e-5; ///< o_norm eps (rms_norm_eps)
};

/// One KDA layer's per-sequence state.
struct KdaState {
  Vec convQ, convK, convV; ///< [C, W−1] each, oldest first
  Vec state;               ///< [H, d, d] (key, value)
  void reset(const KdaRef &layer);
};

/// Intermediate values of one KDA step, for tests of partial kernels.
struct KdaTrace {
  Vec uq, uk, uv; ///< R(W h)
  Vec qc, kc, vc; ///< conv + SiLU outputs (bf16)
  Vec q, k;       ///< l2-normalised (q scaled), unrounded
  Vec f, g, beta; ///< R(f_b(R(f_a h))), log-decay, β
  Vec o;          ///< R(Sᵀ q)
  Vec gt;         ///< R(g_proj h)
  Vec y;          ///< gated norm output
};

/// The KDA mixer between its projections (what a fused KDA kernel does):
/// conv + SiLU of the bf16 projections uq, uk, uv; l2norm; gate from
/// f = R(f_b(R(f_a h))); β = sigmoid(bLogit); recurrence; gated norm with
/// gt. Returns y (bf16), o_proj's input.
Vec kdaMix(const KdaRef &layer, KdaState &st, const Vec &uq, const Vec &uk,
           const Vec &uv, const Vec &f, const Vec &bLogit, const Vec &gt,
           KdaTrace *trace = nullptr);

/// A whole KDA mixer step on h = R(input_layernorm(x)): returns R(o_proj y).
Vec kda(const KdaRef &layer, KdaState &st, const Vec &h,
        KdaTrace *trace = nullptr);

//===--- MLA --------------------------------------------------------------===//

/// MLA geometry.
struct MlaDims {
  int64_t heads = 0;  ///< N
  int64_t nope = 0;   ///< P
  int64_t rope = 0;   ///< R (never rotated)
  int64_t latent = 0; ///< L (kv_lora_rank)
  int64_t value = 0;  ///< V
};

/// MLA attention core in the NAIVE form of K3.md §3: for every head h and
/// cached row j = [c_j | k_r_j], expand k_nope = W_UK,h c_j and
/// v = W_UV,h c_j (kv_b rows h·(P+V) … : P key rows then V value rows), score
/// (q_nope·k_nope + q_r·k_r) / sqrt(P+R), softmax over j, o_h = Σ p_j v_j.
/// q is [N·(P+R)] (per head [nope | rope]); returns R(o) [N·V].
Vec mlaAttendNaive(const MlaDims &dims, const Vec &q,
                   const std::vector<Vec> &cache, const WeightRef &kvB);

struct MlaRef {
  MlaDims dims;
  bool hasQLora = true;
  WeightRef qAProj;  ///< [q_lora, D]
  Vec qALayernorm;   ///< [q_lora]
  WeightRef qBProj;  ///< [N(P+R), q_lora]
  WeightRef qProj;   ///< [N(P+R), D] when !hasQLora
  WeightRef kvAProj; ///< [L+R, D]
  Vec kvALayernorm;  ///< [L]
  WeightRef kvBProj; ///< [N(P+V), L]
  bool hasGate = false;
  WeightRef gProj;       ///< [N·V, D]
  WeightRef oProj;       ///< [D, N·V]
  double normEps = 1e-6; ///< q_a / kv_a layernorm eps
};

/// The MLA cache of one layer: one bf16 row [c | k_r] (L+R) per position.
struct MlaCache {
  std::vector<Vec> rows;
};

/// The cache row of `h`: [RMSNorm(R(kv_a h)[:L]) | R(kv_a h)[L:]].
Vec mlaCacheRow(const MlaRef &layer, const Vec &h);
/// The query of `h`: R(q_b(RMSNorm(R(q_a h)))) or R(q_proj h).
Vec mlaQuery(const MlaRef &layer, const Vec &h);
/// A whole MLA mixer step: appends h's row to `cache`, attends, gates
/// (o = R(o · sigmoid(R(g_proj h)))), returns R(o_proj o).
Vec mla(const MlaRef &layer, MlaCache &cache, const Vec &h);

//===--- MoE --------------------------------------------------------------===//

/// The router's decision for one token.
struct Routing {
  std::vector<int64_t> experts; ///< top-k, best first
  Vec weights;                  ///< mixing weights (renormalised, scaled)
  Vec scores;                   ///< s = sigmoid(W_gate h), all experts
};

/// Router (K3.md §5): s = sigmoid(W_gate h) (double, unrounded), rank by
/// s + bias with ties to the lower index, weights = s at the chosen indices,
/// / (Σ + 1e-20) when renormalize, × scaling.
Routing route(const WeightRef &gate, const Vec &bias, const Vec &h,
              int64_t topk, bool renormalize, double scaling);

/// Expert mix R(Σ_k w_k y_k) over bf16 expert outputs.
Vec expertMix(const std::vector<Vec> &outputs, const Vec &weights);

struct MlpRef {
  WeightRef gate, up, down;
};

struct MoeRef {
  WeightRef router; ///< [E, D]
  Vec bias;         ///< [E] e_score_correction_bias
  std::vector<MlpRef> experts;
  bool hasShared = false;
  MlpRef shared;
  bool latent = false;
  WeightRef routedDown; ///< [Dm, D]
  WeightRef routedUp;   ///< [D, Dm]
  bool latentNorm = false;
  Vec routedNorm; ///< [Dm]
  int64_t topk = 0;
  bool renormalize = true;
  double scaling = 1.0;
  ActSpec act;
  double eps = 1e-5; ///< routed_expert_norm eps
};

/// A whole MoE FFN on h = post_attention_layernorm output (NUMERICS.md MoE).
/// `routedOut` / `sharedOut`, when given, receive the two bf16 terms of the
/// final sum (routed after the latent up-projection; shared empty when the
/// layer has none), so a caller can see how much each moves the residual.
///
/// `experts`, when given, replaces the router's top-k choice (the mixing
/// weights are then those of these experts): a teacher-forced check uses it
/// to follow the compared run at a router near-tie.
Vec moe(const MoeRef &layer, const Vec &h, Routing *routing = nullptr,
        Vec *routedOut = nullptr, Vec *sharedOut = nullptr,
        const std::vector<int64_t> *experts = nullptr);

//===--- AttnRes and head -------------------------------------------------===//

/// AttnRes over bf16 sources: key_i = V_i / sqrt(mean(V_i²) + eps),
/// logit_i = Σ_d key_i[d] · wNorm[d] · wProj[d], α = softmax, R(Σ α_i V_i).
Vec attnRes(const std::vector<Vec> &sources, const Vec &wNorm, const Vec &wProj,
            double eps, Vec *alpha = nullptr);

/// lm_head: W x in double, NOT rounded (fp32 logits in the kernels).
Vec lmHead(const WeightRef &w, const Vec &x);

/// Index of the largest value, ties to the lowest index.
int64_t argmax(const Vec &x);
/// Same over floats (for candidate logits).
int64_t argmax(const std::vector<float> &x);

} // namespace ref
} // namespace k3

#endif // K3C_TEST_REFERENCE_REFERENCE_H
