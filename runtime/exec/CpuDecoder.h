//===- CpuDecoder.h - Hand-written CPU decode of a whole model ----*- C++
//-*-===//
//
// Decodes one sequence on the CPU straight from (ModelConfig, ModelWeights),
// calling the CPU kernel entry points in the order of K3.md §4: AttnRes
// recurrence (K3) or plain pre-norm residuals (Kimi-Linear), the dense MLP at
// layer < first_k_dense_replace, KDA or MLA mixers, latent or full-hidden
// MoE with shared experts, the final AttnRes, the final norm and lm_head.
//
// It stands in for the compiled plan until the compiler exists, and later
// cross-checks it: it uses the fused entry points (linear_multi with the
// folded pre-norm, kda_decode, mla_attend with its gate, moe_experts, residual
// epilogues), which are bit-identical to the fine ones.
//
// Per-sequence state (KDA recurrent and conv state, MLA latent caches
// [maxSeq, L+R], the AttnRes block list, scratch) is allocated once in
// create(). The weights' bytes are not copied: the TensorStore behind the
// ModelWeights must outlive the decoder.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_CPUDECODER_H
#define K3C_RUNTIME_EXEC_CPUDECODER_H

#include "kernels/common/WeightRef.h"
#include "runtime/model/Config.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/Status.h"

#include <cstdint>
#include <vector>

namespace k3 {

/// Greedy CPU decoding of one sequence of at most maxSeq positions.
class CpuDecoder {
public:
  /// Checks that every weight the decode reads is present with a usable
  /// dtype and the config's shape, and allocates the state for `maxSeq`
  /// positions (>= 1). Errors name the offending tensor.
  static Expected<CpuDecoder> create(const ModelConfig &config,
                                     const ModelWeights &weights,
                                     int64_t maxSeq);

  /// Feeds `token` at the next position and returns the fp32 logits [vocab]
  /// that follow it. Errors: token outside [0, vocab), context full.
  Expected<std::vector<float>> step(int64_t token);

  /// Forgets the sequence: zero state, position 0.
  void reset();

  /// Resets, feeds `prompt` one token per step, then generates `maxNew`
  /// tokens greedily (argmax, ties to the lowest id; no stop at EOS).
  /// `logits`, when given, receives maxNew rows: row s is the logits that
  /// chose generated token s (row 0 follows the last prompt token; K3.md
  /// §10). Errors: empty prompt, a bad token, or prompt + maxNew - 1
  /// positions exceeding maxSeq (checked before anything runs).
  Expected<std::vector<int64_t>>
  greedy(const std::vector<int64_t> &prompt, int64_t maxNew,
         std::vector<std::vector<float>> *logits = nullptr);

  /// Debugging aid for numerics work: when set, every step appends, per
  /// layer, the mixer input (h), the stream after the mixer (p), the FFN
  /// input (m) and the stream after the FFN (x), as fp32
  /// rows of [hidden]. May be null (the default: no tracing).
  void setTrace(std::vector<std::vector<float>> *trace) { trace_ = trace; }

  /// Positions fed so far.
  int64_t position() const { return pos_; }
  int64_t maxSeq() const { return maxSeq_; }

private:
  CpuDecoder() = default;

  /// Appends bf16 row `v` [hidden] to trace_ when tracing.
  void traceRow(const uint16_t *v);
  std::vector<std::vector<float>> *trace_ = nullptr;

  /// Everything one layer reads, resolved to raw pointers at create(), and
  /// its per-sequence state.
  struct Layer {
    const uint16_t *inputLn = nullptr, *postLn = nullptr;          ///< [D]
    const uint16_t *attnResNorm = nullptr, *attnResProj = nullptr; ///< [D]
    const uint16_t *mlpResNorm = nullptr, *mlpResProj = nullptr;   ///< [D]
    bool isMla = false, isDense = false;

    // KDA.
    WeightRef q, k, v, fA, fB, b, g, gA, gB, o;
    VectorRef convQ, convK, convV; ///< [C, 1, W] bf16 or f32, as stored
    VectorRef oNorm;               ///< [d] bf16 or f32, as stored
    /// Aligned copies of conv / o_norm tensors misaligned in the checkpoint.
    std::vector<float> vectorCopies[4];
    std::vector<float> dtBias, aLog; ///< [C], [H] fp32 copies
    std::vector<float> state;        ///< [H, d, d]
    std::vector<float> convStateQ, convStateK, convStateV; ///< [C, W-1]

    // MLA (q, g, o above are reused for q_proj, g_proj, o_proj).
    WeightRef qA, qB, kvA;
    const uint16_t *kvB = nullptr; ///< [N(P+V), L]
    const uint16_t *qALn = nullptr, *kvALn = nullptr;
    std::vector<uint16_t> cache; ///< [maxSeq, L+R]

    // Dense MLP or shared experts.
    WeightRef mlpGate, mlpUp, mlpDown;
    bool hasShared = false;
    // MoE.
    const uint16_t *router = nullptr;  ///< [E, D]
    std::vector<float> routerBias;     ///< [E]
    std::vector<WeightRef> w1, w3, w2; ///< [E] expert tables
    WeightRef routedDown, routedUp;
    const uint16_t *routedNorm = nullptr; ///< [Dm], may be null
  };

  void runKda(Layer &layer, const uint16_t *h, const uint16_t *residual,
              uint16_t *out);
  void runMla(Layer &layer, const uint16_t *h, const uint16_t *residual,
              uint16_t *out);
  void runFfn(Layer &layer, const uint16_t *m, const uint16_t *residual,
              uint16_t *out);

  ModelConfig config_;
  int64_t maxSeq_ = 0;
  int64_t pos_ = 0;

  const uint16_t *embed_ = nullptr;                              ///< [V, D]
  const uint16_t *finalNorm_ = nullptr;                          ///< [D]
  WeightRef lmHead_;                                             ///< [V, D]
  const uint16_t *outResNorm_ = nullptr, *outResProj_ = nullptr; ///< [D]
  std::vector<Layer> layers_;

  // AttnRes block list of the current token: [maxBlocks, D] bf16.
  std::vector<uint16_t> blocks_;
  int64_t numBlocks_ = 0;

  // Scratch, sized once for the widest layer.
  std::vector<uint16_t> x_, p_, h_, m_, fin_;       ///< [D]
  std::vector<uint16_t> uq_, uk_, uv_, f_, gt_, y_; ///< [max(C, N·V, ...)]
  std::vector<uint16_t> small1_, small2_, beta_;    ///< f_a / g_a / b outs
  std::vector<uint16_t> qa_, q_, kv_;               ///< MLA
  std::vector<uint16_t> hn_, z_, r_, routed_, ffn_; ///< MoE
  std::vector<int32_t> ids_;
  std::vector<float> routeWeights_;
};

} // namespace k3

#endif // K3C_RUNTIME_EXEC_CPUDECODER_H
