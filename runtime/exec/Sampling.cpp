//===- Sampling.cpp - Choosing the next token from the logits -------------===//
//
// The top-p set is found without sorting the whole vocabulary: the front of
// the order is selected (nth_element) and sorted in growing chunks until its
// running sum reaches P * W, which is usually after a few dozen ids. The
// chosen id is then found by walking the ids in increasing order, so with
// P = 1 nothing is sorted at all.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Sampling.h"

#include "kernels/head/HeadCpu.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace k3 {

Status checkSamplingParams(const SamplingParams &params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0)
    return makeError("the temperature must be a finite number > 0 (or 0 for "
                     "greedy), got ",
                     params.temperature);
  if (!(params.topP > 0 && params.topP <= 1))
    return makeError("top-p must be in (0, 1], got ", params.topP);
  return Status::ok();
}

uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
} // namespace

Rng::Rng(uint64_t seed) {
  uint64_t sm = seed;
  for (uint64_t &v : s_)
    v = splitmix64(sm);
}

Rng Rng::fromState(const std::array<uint64_t, 4> &state) {
  Rng r;
  r.s_ = state;
  return r;
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

int64_t greedyToken(const float *logits, int64_t vocab) {
  int64_t id = 0;
  ArgmaxParams am;
  am.logits = logits;
  am.n = vocab;
  am.outId = &id;
  argmaxCpu(am);
  return id;
}

namespace {

/// w[i] = exp((l_i - max l) / T); returns their sum in id order.
double softmaxWeights(const float *logits, size_t n, double temperature,
                      std::vector<double> &w) {
  float maxLogit = logits[0];
  for (size_t i = 1; i < n; ++i)
    maxLogit = std::max(maxLogit, logits[i]);
  w.resize(n);
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    w[i] = std::exp((static_cast<double>(logits[i]) - maxLogit) / temperature);
    total += w[i];
  }
  return total;
}

/// The top-p set of `w` as a membership test: ids up to and including the
/// returned cut in (w desc, id asc) order, or every id (-1).
int32_t topPCut(const std::vector<double> &w, double total, double topP,
                std::vector<int32_t> &order) {
  if (topP >= 1)
    return -1;
  const size_t n = w.size();
  auto before = [&](int32_t a, int32_t b) {
    return w[a] > w[b] || (w[a] == w[b] && a < b);
  };
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  const double threshold = topP * total;
  double running = 0;
  size_t sorted = 0, chunk = 64;
  while (sorted < n) {
    const size_t end = std::min(n, sorted + chunk);
    std::nth_element(order.begin() + sorted, order.begin() + end - 1,
                     order.end(), before);
    std::sort(order.begin() + sorted, order.begin() + end, before);
    for (; sorted < end; ++sorted) {
      running += w[order[sorted]];
      if (running >= threshold)
        return order[sorted];
    }
    chunk *= 4;
  }
  return -1; // rounding kept the sum below P * W: every id
}

/// Whether id `i` is in the set that `cut` ends.
bool inSet(const std::vector<double> &w, int32_t cut, int32_t i) {
  return cut < 0 || !(w[cut] > w[i] || (w[cut] == w[i] && cut < i));
}

} // namespace

std::vector<int64_t> topPSet(const float *logits, int64_t vocab,
                             const SamplingParams &params) {
  std::vector<double> w;
  std::vector<int32_t> order;
  const double total =
      softmaxWeights(logits, static_cast<size_t>(vocab), params.temperature, w);
  const int32_t cut = topPCut(w, total, params.topP, order);
  std::vector<int64_t> ids;
  for (int32_t i = 0; i < static_cast<int32_t>(vocab); ++i)
    if (inSet(w, cut, i))
      ids.push_back(i);
  return ids;
}

Sampler::Sampler(const SamplingParams &params)
    : params_(params), rng_(params.seed) {}

int64_t Sampler::next(const float *logits, int64_t vocab) {
  if (params_.greedy() || vocab <= 1)
    return greedyToken(logits, vocab);
  const size_t n = static_cast<size_t>(vocab);
  const double total = softmaxWeights(logits, n, params_.temperature, w_);
  const double u = rng_.uniform();
  const int32_t cut = topPCut(w_, total, params_.topP, order_);

  double setSum = 0;
  for (size_t i = 0; i < n; ++i)
    if (inSet(w_, cut, static_cast<int32_t>(i)))
      setSum += w_[i];
  const double target = u * setSum;
  double running = 0;
  int64_t last = -1; // the last id of the set with w > 0
  for (size_t i = 0; i < n; ++i) {
    if (w_[i] == 0 || !inSet(w_, cut, static_cast<int32_t>(i)))
      continue;
    running += w_[i];
    last = static_cast<int64_t>(i);
    if (running > target)
      return last;
  }
  // Only reachable through rounding (target == setSum).
  return last >= 0 ? last : greedyToken(logits, vocab);
}

} // namespace k3
