//===- TeacherForced.h - Layer checks against the reference ---*- C++ -*-===//
//
// The strong end-to-end check. A free-running greedy decode is a weak test:
// one near-tie flips a token and the rest compares nothing, and with a
// planted bigram a large logit error never changes an argmax. Here both
// sides are fed the same tokens (teacher forcing), and at every step the
// plan's probes (the stream after each layer's mixer and after its FFN,
// docs/PLAN.md) and its logits are compared with the float64 reference's
// trace in absolute terms:
//   - each stream by its RMS error in units of the stream's RMS;
//   - the logits by max |Δ| in nats and by KL(ref ‖ got) of the softmax.
// Random (unplanted) models work too: nothing compounds through the argmax.
// Where a router's top-k is a near-tie (margin below the rounding noise),
// the reference follows whichever of the two routings the plan's layer
// output is nearer to; anything else is a real difference.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_REFERENCE_TEACHERFORCED_H
#define K3C_TEST_REFERENCE_TEACHERFORCED_H

#include "runtime/model/ModelWeights.h"
#include "runtime/io/Safetensors.h"
#include "runtime/exec/Session.h"
#include "test/reference/RefModel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

namespace k3test {

/// Bounds of the teacher-forced check, layer-local (the default) or end to
/// end. Measured on tiny, tiny-linear and tiny-odd, planted and random
/// models, every strategy, 24 steps (teacher_forced_test's output, CPU):
///   layer-local: worst point 2.6e-3 stream units, worst logit 3.5e-3 nats,
///                KL 5.5e-7;
///   end to end:  worst point 7.8e-2 (tiny random, where bf16 flips
///                compound through AttnRes and KDA), worst logit 0.30 nats,
///                KL 4.6e-3.
/// The graph mutants miss these by orders of magnitude (mutant_decode_test).
struct ForcedBounds {
  /// Layer-local: the reference continues from the plan's stream after
  /// every probe, so each point measures one sublayer's own error (tight
  /// bounds); otherwise only the tokens are shared and errors compound
  /// through the layers (end to end).
  bool layerLocal = true;
  double streamRms = 1e-2; ///< per layer point and step, in stream RMS units
  double logitAbs = 2e-2;  ///< nats, per step
  double klNats = 1e-4;    ///< KL(ref ‖ got), per step
  /// A router margin below this is a near-tie either routing may take: the
  /// scores are sigmoids in (0, 1) computed from bf16 inputs that differ by
  /// ~1e-3 relative between two correct implementations.
  double tieMargin = 2e-3;

  /// The end-to-end bounds (about 2-3x the measured worst).
  static ForcedBounds endToEnd() {
    ForcedBounds b;
    b.layerLocal = false;
    b.streamRms = 0.2;
    b.logitAbs = 1.0;
    b.klNats = 2e-2;
    return b;
  }
};

/// What one teacher-forced comparison measured.
struct ForcedResult {
  bool ok = true;
  double worstStream = 0; ///< RMS error in stream units
  std::string worstStreamAt;
  double worstLogit = 0; ///< nats
  double worstKl = 0;
  int64_t worstLogitStep = -1;
  int64_t steps = 0, pointsCompared = 0;
  int64_t nearTies = 0, tiesSwapped = 0;
  std::string diagnostic; ///< the first failure and the measured maxima
};

/// RMS error ‖got − ref‖ / √n, in units of `scale` (an RMS); ∞ on a size
/// mismatch or NaN.
inline double rmsError(const ::k3::ref::Vec &ref, const std::vector<float> &got,
                       double scale) {
  if (ref.size() != got.size() || ref.empty())
    return std::numeric_limits<double>::infinity();
  double num = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
  }
  const double r =
      std::sqrt(num / static_cast<double>(ref.size())) / std::max(scale, 1e-300);
  return std::isnan(r) ? std::numeric_limits<double>::infinity() : r;
}
/// Relative RMS error ‖got − ref‖ / ‖ref‖.
inline double relRms(const ::k3::ref::Vec &ref, const std::vector<float> &got) {
  return rmsError(ref, got, ::k3::ref::rms(ref));
}

/// KL(p_ref ‖ p_got) of the softmaxes of two logit rows, in nats.
inline double klDivergence(const ::k3::ref::Vec &ref,
                           const std::vector<float> &got) {
  const double mr = *std::max_element(ref.begin(), ref.end());
  double mg = -std::numeric_limits<double>::infinity();
  for (float g : got)
    mg = std::max(mg, static_cast<double>(g));
  double zr = 0, zg = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    zr += std::exp(ref[i] - mr);
    zg += std::exp(static_cast<double>(got[i]) - mg);
  }
  double kl = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double lr = ref[i] - mr - std::log(zr);
    const double lg = static_cast<double>(got[i]) - mg - std::log(zg);
    kl += std::exp(lr) * (lr - lg);
  }
  return std::isnan(kl) ? std::numeric_limits<double>::infinity()
                        : std::max(kl, 0.0);
}

/// Teacher-forces `tokens` through `session` and the float64 reference of
/// the model in `dir`, and compares every probe and the logits.
inline void teacherForcedCompare(const ::k3::ModelConfig &config,
                                 const std::string &dir,
                                 ::k3::Session &session,
                                 const std::vector<int64_t> &tokens,
                                 const ForcedBounds &bounds,
                                 ForcedResult &out) {
  ::k3::Expected<std::vector<::k3::ProbedStep>> got =
      session.teacherForce(tokens);
  ASSERT_TRUE(got.hasValue()) << got.message();
  const ::k3::PlanDoc &plan = session.plan();

  // Every layer must be probed after its mixer and after its FFN.
  std::map<std::string, size_t> probeIndex;
  for (size_t i = 0; i < plan.probes.size(); ++i)
    probeIndex[plan.probes[i].name] = i;
  std::vector<size_t> mixerProbe(config.numLayers), outProbe(config.numLayers);
  for (int64_t l = 0; l < config.numLayers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    ASSERT_TRUE(probeIndex.count(p + "mixer") && probeIndex.count(p + "out"))
        << "the plan does not probe layer " << l;
    mixerProbe[l] = probeIndex[p + "mixer"];
    outProbe[l] = probeIndex[p + "out"];
  }

  ::k3::Expected<::k3::TensorStore> store = ::k3::TensorStore::open(dir);
  ASSERT_TRUE(store.hasValue()) << store.message();
  ::k3::Expected<::k3::ModelWeights> weights =
      ::k3::bindModelWeights(config, *store);
  ASSERT_TRUE(weights.hasValue()) << weights.message();
  auto model = ::k3::ref::RefModel::create(
      config, *weights, static_cast<int64_t>(tokens.size()));
  ASSERT_TRUE(model.hasValue()) << model.message();
  ::k3::ref::RefModel &ref = **model;

  size_t step = 0;
  ref.setTieChooser(
      [&](int64_t layer, const std::vector<::k3::ref::Vec> &candidates) {
        const std::vector<float> &plan = (*got)[step].probes[outProbe[layer]];
        size_t best = 0;
        for (size_t c = 1; c < candidates.size(); ++c)
          if (relRms(candidates[c], plan) < relRms(candidates[best], plan))
            best = c;
        return best;
      },
      bounds.tieMargin);
  if (bounds.layerLocal)
    ref.setStreamOverride([&](int64_t layer, int point, ::k3::ref::Vec &v) {
      const std::vector<float> &p =
          (*got)[step].probes[point == 0 ? mixerProbe[layer] : outProbe[layer]];
      if (p.size() == v.size())
        v.assign(p.begin(), p.end());
    });
  std::vector<::k3::ref::Vec> trace;
  ref.setTrace(&trace);

  std::ostringstream fail;
  for (step = 0; step < tokens.size(); ++step) {
    trace.clear();
    ::k3::ref::Vec logits = ref.step(tokens[step]);
    const ::k3::ProbedStep &ps = (*got)[step];
    ASSERT_EQ(trace.size(), static_cast<size_t>(4 * config.numLayers));
    for (int64_t l = 0; l < config.numLayers; ++l) {
      // The reference's trace per layer: mixer input, stream after the
      // mixer, FFN input, stream after the FFN.
      for (auto [what, refIdx, probe] :
           {std::tuple<const char *, size_t, size_t>{"mixer", 4 * l + 1,
                                                     mixerProbe[l]},
            {"out", 4 * l + 3, outProbe[l]}}) {
        // In units of the stream's own scale: the larger of the value's
        // RMS and the layer input's (a block-committing layer's mixer point
        // is the bare mixer output, often much smaller than the stream).
        const double scale = std::max(::k3::ref::rms(trace[refIdx]),
                                      ::k3::ref::rms(trace[4 * l]));
        const double e = rmsError(trace[refIdx], ps.probes[probe], scale);
        ++out.pointsCompared;
        if (std::getenv("K3C_TF_VERBOSE") && e > 5e-3)
          std::cout << "  step " << step << " layers." << l << "." << what
                    << " error " << e << "\n";
        if (!(e <= out.worstStream)) {
          out.worstStream = e;
          out.worstStreamAt = "step " + std::to_string(step) + " layers." +
                              std::to_string(l) + "." + what;
        }
        if (!(e <= bounds.streamRms) && out.ok) {
          out.ok = false;
          fail << "first failure: step " << step << " layers." << l << "."
               << what << " RMS error " << e << " (stream units) > "
               << bounds.streamRms << "\n";
        }
      }
    }
    double maxAbs = 0;
    for (size_t v = 0; v < logits.size(); ++v) {
      const double d =
          std::fabs(static_cast<double>(ps.logits[v]) - logits[v]);
      maxAbs = std::isnan(d) ? std::numeric_limits<double>::infinity()
                             : std::max(maxAbs, d);
    }
    const double kl = klDivergence(logits, ps.logits);
    if (maxAbs > out.worstLogit) {
      out.worstLogit = maxAbs;
      out.worstLogitStep = static_cast<int64_t>(step);
    }
    out.worstKl = std::max(out.worstKl, kl);
    if ((maxAbs > bounds.logitAbs || kl > bounds.klNats) && out.ok) {
      out.ok = false;
      fail << "first failure: step " << step << " logits max |d| " << maxAbs
           << " nats (bound " << bounds.logitAbs << "), KL " << kl
           << " (bound " << bounds.klNats << ")\n";
    }
  }
  out.steps = static_cast<int64_t>(tokens.size());
  out.nearTies = ref.nearTies();
  out.tiesSwapped = ref.tiesSwapped();
  std::ostringstream d;
  d << fail.str() << "worst stream error " << out.worstStream << " at "
    << out.worstStreamAt << "; worst logit error " << out.worstLogit
    << " nats at step " << out.worstLogitStep << "; worst KL " << out.worstKl
    << "; " << out.pointsCompared << " layer points over " << out.steps
    << " steps; router near-ties " << out.nearTies << " (" << out.tiesSwapped
    << " followed the swapped pair)\n";
  out.diagnostic = d.str();
}

/// `n` token ids in [1, vocab): the prompt, then a fixed pseudo-random
/// sequence (teacher forcing needs no greedy continuation).
inline std::vector<int64_t> forcedTokens(int64_t vocab, int64_t n,
                                         uint64_t seed) {
  std::vector<int64_t> t;
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    t.push_back(1 + static_cast<int64_t>(s % static_cast<uint64_t>(vocab - 1)));
  }
  return t;
}

} // namespace k3test

#endif // K3C_TEST_REFERENCE_TEACHERFORCED_H
