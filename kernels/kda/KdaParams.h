//===- KdaParams.h - Parameters of the KDA (linear attention) ops -*- C++
//-*-===//
//
// The contract between codegen, the runtime and the KDA kernels (CPU and
// CUDA). Plain C types only. K3.md §2 is the math, NUMERICS.md "KDA" the
// rounding points. The projections around the mixer (q/k/v/f_a/b/g in,
// f_b and g_b, o_proj out) are `linear`/`linear_multi`; these ops are what
// sits between them.
//
// Channel c belongs to head c / d (C = H·d). The recurrent state of a layer
// is [H, d, d] fp32 indexed [head][key][value]; the conv state of each of
// q, k, v is [C, W-1] fp32 holding the last W-1 conv inputs of each channel,
// oldest first (exact bf16 values). Both are zero at the start of a sequence
// and updated in place. The conv filters and o_norm are VectorRefs: bf16 or
// fp32 as the checkpoint stores them (the published K3: F32), read in fp32.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_KDA_KDAPARAMS_H
#define K3C_KERNELS_KDA_KDAPARAMS_H

#include "kernels/common/WeightRef.h"

#include <cmath>
#include <cstdint>

namespace k3 {

/// Largest rank r of a low-rank gate folded into `kda_decode` (fRank,
/// gRank; Kimi-Linear and K3: 128): the kernel stages the rank-r input in
/// shared memory and sums each row in one thread.
constexpr int64_t kKdaMaxFoldedRank = 256;

/// The epsilon inside the root of KDA's q/k l2norm (K3.md §2.3).
constexpr float kKdaL2NormEps = 1e-6f;

/// The query scale 1/sqrt(d) exactly as every kernel computes it (fp32). The
/// compiler carries this value, not the double 1/sqrt(d): they differ unless
/// d is a power of 4 (d = 128: 0.08838834613... vs 0.08838834764...).
inline float kdaQueryScale(int64_t d) {
  return 1.0f / std::sqrt(static_cast<float>(d));
}

/// `kda_conv`: one step of the depthwise causal short conv + SiLU for one of
/// q, k, v: out[c] = R(SiLU(Σ_{i<W-1} w[c,i]·state[c,i] + w[c,W-1]·u[c]))
/// (fp32, i ascending), then the state shifts left and takes u[c].
struct KdaConvParams {
  const uint16_t *u = nullptr;      ///< [C] bf16, this token's projection
  VectorRef weight;                 ///< [C, 1, W] bf16 or fp32 (q/k/v_conv1d)
  float *state = nullptr;           ///< [C, W-1] fp32, in place
  uint16_t *out = nullptr;          ///< [C] bf16; must not alias u
  int64_t channels = 0;             ///< C
  int32_t width = 4;                ///< W (short_conv_kernel_size), >= 1
};

/// The gated delta rule step of every head (K3.md §2.3-2.7) as the four
/// launches of `--fusion=none` (kda_decode computes the same inside):
/// q = l2norm(q̃)/sqrt(d), k = l2norm(k̃) (eps kKdaL2NormEps inside the root);
/// z = f + dtBias, a = exp(aLog[h]),
///   g = lowerBound · sigmoid(a·z) (hasLowerBound) or −a·softplus(z);
/// β = sigmoid(betaLogit[h]);
/// S ← Diag(exp(g)) S; S ← S + k ⊗ (β·(v − Sᵀk)); o = R(Sᵀq). All fp32.
///
/// `kda_l2norm` (part 1 of 4): per head of headDim values,
/// out = x / sqrt(Σ x² + eps) · scale in fp32, in that order (the sum in
/// dot-lane order, then one multiply by 1/sqrt(·), then one by scale;
/// scale == 1 skips the second multiply). For q, scale must be
/// 1.0f / std::sqrt(float(d)) computed in fp32, for k 1, to match
/// kda_decode bit for bit.
struct KdaL2NormParams {
  const uint16_t *x = nullptr; ///< [n] bf16, q̃ or k̃ (kda_conv output)
  float *out = nullptr;        ///< [n] fp32, normalised (and scaled)
  int64_t n = 0;               ///< C = H·d, a multiple of headDim
  int64_t headDim = 0;         ///< d
  float eps = kKdaL2NormEps;   ///< inside the root
  float scale = 1.0f;          ///< 1/sqrt(d) for q, 1 for k
};

/// `kda_gate` (part 2 of 4): the decay gate of every channel, fp32:
/// z = f + dtBias, a = exp(aLog[c / d]), g = lowerBound · sigmoid(a·z)
/// (hasLowerBound) or −a·softplus(z). Writes g, not exp(g).
struct KdaGateParams {
  const uint16_t *f = nullptr;   ///< [C] bf16, R(f_b(R(f_a h)))
  const float *dtBias = nullptr; ///< [C] fp32
  const float *aLog = nullptr;   ///< [H] fp32
  float *out = nullptr;          ///< [C] fp32, g
  int64_t numHeads = 0;          ///< H
  int64_t headDim = 0;           ///< d
  int32_t hasLowerBound = 0;     ///< 1: K3's sigmoid gate; 0: softplus
  float lowerBound = -5.0f;      ///< gate_lower_bound, used when set
};

/// `sigmoid` (part 3 of 4, β): out[i] = sigmoid(x[i]) in fp32, unrounded.
struct SigmoidParams {
  const uint16_t *x = nullptr; ///< [n] bf16, e.g. R(b_proj h) [H]
  float *out = nullptr;        ///< [n] fp32
  int64_t n = 0;
};

/// `kda_step` (part 4 of 4): the delta-rule update of every head on
/// prepared inputs: S ← Diag(exp(g)) S; S ← S + k ⊗ (β·(v − Sᵀk));
/// o = R(Sᵀq); all fp32, the same two passes over the state as kda_decode.
/// kda_l2norm(q, 1/sqrt d), kda_l2norm(k, 1), kda_gate, sigmoid(betaLogit)
/// and this step give kda_decode's recurrent bits.
struct KdaStepParams {
  const float *q = nullptr;    ///< [C] fp32, normalised and scaled
  const float *k = nullptr;    ///< [C] fp32, normalised
  const uint16_t *v = nullptr; ///< [C] bf16, ṽ
  const float *g = nullptr;    ///< [C] fp32, kda_gate output
  const float *beta = nullptr; ///< [H] fp32, sigmoid output
  float *state = nullptr;      ///< [H, d, d] fp32 [key][value], in place
  uint16_t *out = nullptr;     ///< [C] bf16, o
  int64_t numHeads = 0;        ///< H
  int64_t headDim = 0;         ///< d
};

/// The chunk form of kda_step (no plan kernel yet: the CPU reference for a
/// multi-row KDA kernel): T consecutive tokens of one sequence in one call,
/// by the WY / UT form of the gated delta rule instead of T rank-1 updates.
/// Per head, with G_t = g_1 + ... + g_t (per key channel, the log decay
/// since the chunk's start) and S0 the state before it:
///   A[s][r] = Σ_c k_s[c] k_r[c] exp(G_s[c] − G_r[c])     (r < s)
///   w_s = β_s (v_s − S0ᵀ (exp(G_s) ⊙ k_s) − Σ_{r<s} A[s][r] w_r)
///   B[t][s] = Σ_c q_t[c] k_s[c] exp(G_t[c] − G_s[c])     (s ≤ t)
///   o_t = S0ᵀ (exp(G_t) ⊙ q_t) + Σ_{s≤t} B[t][s] w_s
///   S_T = exp(G_T) ⊙rows S0 + Σ_s (exp(G_T − G_s) ⊙ k_s) w_sᵀ
/// (every exponent ≤ 0: nothing overflows however long the chunk). It
/// equals T kda_step calls within fp32 rounding (the sums are reassociated),
/// not bit for bit. Inputs are [T, C] rows, contiguous.
struct KdaChunkParams {
  const float *q = nullptr;    ///< [T, C] fp32, normalised and scaled
  const float *k = nullptr;    ///< [T, C] fp32, normalised
  const uint16_t *v = nullptr; ///< [T, C] bf16
  const float *g = nullptr;    ///< [T, C] fp32 log decay (kda_gate), ≤ 0
  const float *beta = nullptr; ///< [T, H] fp32
  float *state = nullptr;      ///< [H, d, d] fp32 [key][value], in place
  uint16_t *out = nullptr;     ///< [T, C] bf16, o
  int64_t tokens = 0;          ///< T
  int64_t numHeads = 0;        ///< H
  int64_t headDim = 0;         ///< d
};

/// `kda_gated_norm`: per head h, y_h = R(o_h · rsqrt(mean(o_h²) + eps) · w ·
/// sigmoid(gt_h)) with one rounding at the end (fp32 inside).
struct KdaGatedNormParams {
  const uint16_t *o = nullptr;      ///< [C] bf16, kda_step output
  const uint16_t *gate = nullptr;   ///< [C] bf16, gt = R(g_proj h)
  VectorRef weight;                 ///< [d] bf16 or fp32, o_norm (all heads)
  uint16_t *out = nullptr;          ///< [C] bf16; may alias o
  int64_t numHeads = 0;
  int64_t headDim = 0;
  float eps = 1e-5f; ///< rms_norm_eps
};

/// `kda_decode` (the KDA fusion): kda_conv of q, k and v, the step above
/// (kda_l2norm ×2, kda_gate, sigmoid, kda_step) and kda_gated_norm in one
/// call, rounding at the same points as that chain (q̃, k̃, ṽ and o are
/// rounded to bf16 in between), so the result is bit-identical to it. Output y = the gated-norm output (o_proj's input).
///
/// The gate's low-rank second projections may be folded in (k3-fuse-kda's
/// low-rank form): with `fB`, f is not read but computed as R(fB · fA), the
/// `linear` f_b_proj would give, bit for bit on the CPU; with `gB`, the output
/// gate gt = R(gB · gA) is computed and written to `gateOut` (the kernel's
/// blocks read back one another's channels there) instead of read from
/// `gate`. That takes the two k = r launches between the input projections
/// and this one off the step.
struct KdaDecodeParams {
  const uint16_t *uq = nullptr;         ///< [C] bf16, R(q_proj h)
  const uint16_t *uk = nullptr;         ///< [C] bf16
  const uint16_t *uv = nullptr;         ///< [C] bf16
  VectorRef convQ;                      ///< [C, 1, W] bf16 or fp32
  VectorRef convK;                      ///< [C, 1, W] bf16 or fp32
  VectorRef convV;                      ///< [C, 1, W] bf16 or fp32
  float *convStateQ = nullptr;          ///< [C, W-1] fp32, in place
  float *convStateK = nullptr;          ///< [C, W-1] fp32, in place
  float *convStateV = nullptr;          ///< [C, W-1] fp32, in place
  const uint16_t *f = nullptr;          ///< [C] bf16
  const uint16_t *betaLogit = nullptr;  ///< [H] bf16
  const float *dtBias = nullptr;        ///< [C] fp32
  const float *aLog = nullptr;          ///< [H] fp32
  float *state = nullptr;               ///< [H, d, d] fp32, in place
  const uint16_t *gate = nullptr;       ///< [C] bf16, gt
  VectorRef normWeight;                 ///< [d] bf16 or fp32, o_norm
  uint16_t *out = nullptr;              ///< [C] bf16, y
  int64_t numHeads = 0;
  int64_t headDim = 0;
  int32_t convWidth = 4;
  int32_t hasLowerBound = 0;
  float lowerBound = -5.0f;
  float normEps = 1e-5f; ///< o_norm eps (rms_norm_eps)
  // The folded low-rank gate projections (all null / 0 when not folded).
  const uint16_t *fA = nullptr; ///< [fRank] bf16, R(f_a_proj h)
  const uint16_t *fB = nullptr; ///< [C, fRank] bf16, f_b_proj; f unread
  int64_t fRank = 0;            ///< r of f_a / f_b, with fB
  const uint16_t *gA = nullptr; ///< [gRank] bf16, R(g_a_proj h)
  const uint16_t *gB = nullptr; ///< [C, gRank] bf16, g_b_proj; gate unread
  uint16_t *gateOut = nullptr;  ///< [C] bf16, gt = R(gB · gA), with gB
  int64_t gRank = 0;            ///< r of g_a / g_b, with gB
  /// The next launch's weight (o_proj), asked of L2 while the step's
  /// latency chain leaves the HBM idle; none when empty.
  L2Prefetch l2Prefetch;
};

/// The multi-row form of `kda_decode` (k3_kda_decode_rows): the KDA token of
/// `count` rows in one launch, grid (the single launch's x, count, 1),
/// clusters as its. Row y's whole params are rows[y] in device memory (the
/// rows' states are their own slots', anywhere), so each row's output and
/// states are exactly its own k3_kda_decode launch's at that grid.x. The
/// rows must be different sequences (a sequence's tokens meet its state in
/// order: a prompt chunk's rows run one by one).
struct KdaDecodeRowsParams {
  const KdaDecodeParams *rows = nullptr; ///< [count] in device memory
  int32_t count = 0;
};

/// k3_kda_decode_chunk (the chunk form of kda_decode's run form, for prompt
/// chunks with PrefillForm::Chunk): at most this many rows per launch (a
/// longer run is cut into pieces of it), and the dynamic shared memory it
/// takes: q, k and the cumulative log decay of every row and key channel, a
/// block's 32 value columns of v, w (rows padded by 4) and o, the two row ×
/// row products, the
/// state slice, the output gate, and small per-row and per-channel sums
/// (Kda.cu's ChunkShared, which static_asserts this size).
constexpr int kKdaChunkMaxRows = 64;
constexpr int64_t kKdaChunkSmemBytes =
    4 * (3 * kKdaChunkMaxRows * 128 + 4 * kKdaChunkMaxRows * 32 +
         4 * kKdaChunkMaxRows + 2 * kKdaChunkMaxRows * kKdaChunkMaxRows +
         128 * 32 + kKdaChunkMaxRows + 4 * kKdaChunkMaxRows + 128);
/// Runs shorter than this keep the run form (bit for bit one launch per
/// row) even with PrefillForm::Chunk.
constexpr int kKdaChunkMinRows = 4;

} // namespace k3

#endif // K3C_KERNELS_KDA_KDAPARAMS_H
