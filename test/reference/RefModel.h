//===- RefModel.h - Whole-model float64 reference decode --------*- C++ -*-===//
//
// The K3.md §4 layer recurrence over the ops of Reference.h, with its own
// per-sequence state (conv histories, KDA states, MLA caches). It reads the
// weights through the runtime's ModelWeights views but decides every layer's
// kind (KDA or MLA, dense or MoE) from the config itself and checks the
// binding agrees, so a binder bug cannot silently make both sides agree.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_REFERENCE_REFMODEL_H
#define K3C_TEST_REFERENCE_REFMODEL_H

#include "runtime/model/Config.h"
#include "runtime/model/ModelWeights.h"
#include "runtime/Status.h"
#include "test/reference/Reference.h"

#include <functional>
#include <memory>
#include <vector>

namespace k3 {
namespace ref {

/// RMS sizes of one layer's activations at one step (0 where absent).
struct LayerStats {
  double stream = 0;    ///< the stream the mixer output is added to (0: none)
  double mixer = 0;     ///< mixer output a (after o_proj)
  double ffnStream = 0; ///< the stream the FFN output is added to
  double ffn = 0;       ///< FFN output f (dense MLP, or routed + shared)
  double routed = 0;    ///< MoE routed term (after the latent up-projection)
  double shared = 0;    ///< MoE shared-expert term
  /// AttnRes (K3): largest α of the pre-mixer and pre-FFN AttnRes; 0 when
  /// the layer has none.
  double maxAlpha = 0;
};

/// Root mean square of `x` (0 for an empty vector).
double rms(const Vec &x);

class RefModel {
public:
  /// Checks `weights` against `config` and prepares empty state for up to
  /// `maxSeq` positions. `config` and `weights` (and the TensorStore behind
  /// them) must outlive the model.
  static Expected<std::unique_ptr<RefModel>> create(const ModelConfig &config,
                                                    const ModelWeights &weights,
                                                    int64_t maxSeq);

  /// Feeds one token at the next position; returns the logits (unrounded).
  Vec step(int64_t token);

  /// Feeds `prompt` one token per step, then generates `maxNew` tokens
  /// greedily (ties to the lowest id). Returns the generated tokens; when
  /// `logits` is given, row s is the logits that chose generated token s.
  std::vector<int64_t> greedy(const std::vector<int64_t> &prompt,
                              int64_t maxNew,
                              std::vector<Vec> *logits = nullptr);

  /// Forgets the sequence (position 0, zero state).
  void reset();

  int64_t position() const { return pos_; }

  /// When set, every step appends per layer the mixer input (h), the stream
  /// after the mixer (p), the FFN input (m) and the stream after the FFN (x);
  /// p and x are the rows a plan's probes "layers.<l>.mixer" and
  /// "layers.<l>.out" hold (docs/PLAN.md).
  void setTrace(std::vector<Vec> *trace) { trace_ = trace; }

  /// Teacher-forced checks: at a MoE layer whose router margin (the k-th
  /// minus the best unchosen ranking score) is below `margin`, the
  /// reference computes the layer's output both with its own top-k (0) and
  /// with the boundary pair swapped (1), and continues with the candidate
  /// `choose(layer, candidates)` returns: the one the compared run is
  /// nearest to. Only such near-ties, where rounding noise may decide, are
  /// taken either way; everything else follows the reference alone.
  using TieChooser =
      std::function<size_t(int64_t layer, const std::vector<Vec> &candidates)>;
  void setTieChooser(TieChooser choose, double margin) {
    chooser_ = std::move(choose);
    tieMargin_ = margin;
  }
  /// Layer-local checks: after computing the stream after layer `layer`'s
  /// mixer (`point` 0) or its FFN (`point` 1), the reference lets
  /// `replace` overwrite it (with the compared run's value) and goes on
  /// from there, so each layer is measured from the same input on both
  /// sides and errors do not compound from layer to layer. The trace keeps
  /// the reference's own values.
  using StreamOverride =
      std::function<void(int64_t layer, int point, Vec &stream)>;
  void setStreamOverride(StreamOverride replace) {
    override_ = std::move(replace);
  }

  /// Near-ties met so far, and how many of them followed the swapped pair.
  int64_t nearTies() const { return nearTies_; }
  int64_t tiesSwapped() const { return tiesSwapped_; }

  /// Experts chosen at every step so far: [step][moe layer] -> top-k ids.
  const std::vector<std::vector<std::vector<int64_t>>> &expertChoices() const {
    return choices_;
  }
  /// Router margins at every step: [step][moe layer] -> the gap between the
  /// k-th and (k+1)-th ranking score (s + bias). A tiny gap means fp32
  /// noise in a kernel can legitimately choose a different expert.
  const std::vector<Vec> &routingMargins() const { return margins_; }
  /// AttnRes weights α of the final (output) AttnRes at every step.
  const std::vector<Vec> &outputAlphas() const { return outputAlphas_; }
  /// Activation sizes at every step: [step][layer]. Shows whether a made
  /// model is well conditioned (sublayer outputs a modest correction to
  /// the stream they are added to).
  const std::vector<std::vector<LayerStats>> &layerStats() const {
    return stats_;
  }

private:
  RefModel() = default;

  struct Layer {
    bool isMla = false;
    bool isDense = false;
    Vec inputNorm, postNorm;
    Vec attnResNorm, attnResProj, mlpResNorm, mlpResProj; // AttnRes only
    KdaRef kda;
    MlaRef mla;
    MlpRef mlp;
    MoeRef moe;
  };

  const ModelConfig *config_ = nullptr;
  int64_t maxSeq_ = 0;
  int64_t pos_ = 0;
  const uint16_t *embed_ = nullptr;
  Vec finalNorm_;
  WeightRef lmHead_;
  Vec outResNorm_, outResProj_;
  ActSpec act_;
  std::vector<Layer> layers_;
  std::vector<KdaState> kdaStates_;
  std::vector<MlaCache> mlaCaches_;
  std::vector<std::vector<std::vector<int64_t>>> choices_;
  std::vector<Vec> outputAlphas_;
  std::vector<Vec> margins_;
  std::vector<std::vector<LayerStats>> stats_;
  std::vector<Vec> *trace_ = nullptr;
  TieChooser chooser_;
  StreamOverride override_;
  double tieMargin_ = 0;
  int64_t nearTies_ = 0, tiesSwapped_ = 0;
};

/// A whole reference greedy decode, for end-to-end checks of any decoder.
struct RefDecode {
  std::vector<int64_t> tokens; ///< generated tokens
  std::vector<Vec> logits;     ///< row s chose tokens[s]
  /// [step][moe layer] -> top-k expert ids, for every step fed.
  std::vector<std::vector<std::vector<int64_t>>> expertChoices;
  std::vector<Vec> outputAlphas;   ///< final AttnRes α per step (K3 only)
  std::vector<Vec> routingMargins; ///< [step][moe layer], see RefModel
  std::vector<std::vector<LayerStats>> layerStats; ///< [step][layer]
};

/// Builds a RefModel for prompt + maxNew positions and decodes greedily.
Expected<RefDecode> referenceGreedy(const ModelConfig &config,
                                    const ModelWeights &weights,
                                    const std::vector<int64_t> &prompt,
                                    int64_t maxNew);

} // namespace ref
} // namespace k3

#endif // K3C_TEST_REFERENCE_REFMODEL_H
