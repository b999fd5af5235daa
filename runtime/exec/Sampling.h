//===- Sampling.h - Choosing the next token from the logits -----*- C++ -*-===//
//
// Greedy (argmax, ties to the lowest id: the rule of argmaxCpu, the
// table's argmax kernel) unless a temperature is set; then a token is drawn
// from softmax(logits / T) restricted to the top-p set: the smallest set of
// tokens, taken in order of probability (ties by lower id), whose
// cumulative probability reaches P. The draw uses the project's own PRNG
// (xoshiro256**, seeded through splitmix64) and only integer and double
// arithmetic of our own, never a std:: distribution (whose output differs
// between standard libraries), so a seed gives the same ids everywhere.
//
// One draw, precisely: w_i = exp((l_i - max l) / T) in double; W = sum of
// w_i in id order; the top-p set is the shortest prefix of the ids sorted by
// (w desc, id asc) whose running sum (in that order) reaches P * W (all ids
// when rounding keeps it below); u = next53() / 2^53; the chosen id is the
// first id of the set, in increasing id order, whose running sum of w (in
// that order) exceeds u * (sum of w over the set). Exactly one PRNG value is
// consumed per sampled token.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_SAMPLING_H
#define K3C_RUNTIME_EXEC_SAMPLING_H

#include "runtime/Status.h"

#include <array>
#include <cstdint>
#include <vector>

namespace k3 {

/// How the next token is chosen.
struct SamplingParams {
  /// 0: greedy (the default); > 0: sample from softmax(logits / T).
  double temperature = 0.0;
  /// Top-p (nucleus) mass in (0, 1]; 1 keeps every token. Only with T > 0.
  double topP = 1.0;
  /// PRNG seed; a sampler starts from it, so one seed gives one sequence.
  uint64_t seed = 0;

  bool greedy() const { return temperature == 0.0; }
};

/// Errors: a temperature that is negative or not finite, a top-p outside
/// (0, 1].
Status checkSamplingParams(const SamplingParams &params);

/// splitmix64 (Steele, Lea, Flood): advances `state` and returns the next
/// value; used to expand a seed into xoshiro's state.
uint64_t splitmix64(uint64_t &state);

/// xoshiro256** 1.0 (Blackman, Vigna).
class Rng {
public:
  /// The state is four splitmix64 outputs from `seed`.
  explicit Rng(uint64_t seed);
  /// A given state (for tests against the reference outputs); not all zero.
  static Rng fromState(const std::array<uint64_t, 4> &state);
  uint64_t next();
  /// A double in [0, 1) from the top 53 bits of next().
  double uniform();

private:
  Rng() = default;
  std::array<uint64_t, 4> s_{};
};

/// The greedy choice: argmax, ties to the lowest id, NaN skipped (argmaxCpu).
int64_t greedyToken(const float *logits, int64_t vocab);

/// The top-p set for `vocab` finite logits under `params` (temperature >
/// 0), in increasing id order: what Sampler::next draws from.
std::vector<int64_t> topPSet(const float *logits, int64_t vocab,
                             const SamplingParams &params);

/// Chooses tokens for one sequence. Not thread-safe; one per sequence.
class Sampler {
public:
  /// `params` must pass checkSamplingParams.
  explicit Sampler(const SamplingParams &params);
  /// The next token for `vocab` finite logits (see the file comment).
  int64_t next(const float *logits, int64_t vocab);

private:
  SamplingParams params_;
  Rng rng_;
  std::vector<double> w_;      ///< [vocab] exp((l - max) / T)
  std::vector<int32_t> order_; ///< ids, sorted by (w desc, id asc) in front
};

} // namespace k3

#endif // K3C_RUNTIME_EXEC_SAMPLING_H
