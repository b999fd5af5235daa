//===- CollectiveParams.h - Parameters of the collectives -------*- C++ -*-===//
//
// The contract between codegen, the runtime and the collectives of a
// tensor-parallel plan (docs/PLAN.md "Tensor-parallel plans"). A collective
// is a launch like any other in the plan's order, but no kernel of this
// library computes it: the backend's communicator does (the CPU backend's
// in-process rank group, runtime/exec/RankGroup.h). Every rank runs the same
// collectives in the same order with the same sizes; the rank group checks
// that and names the rank that differs.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COLLECTIVE_COLLECTIVEPARAMS_H
#define K3C_KERNELS_COLLECTIVE_COLLECTIVEPARAMS_H

#include <cstdint>

namespace k3 {

/// The most ranks a plan may be split over (a sanity cap: the plan
/// validator and the collectives' checks refuse more).
inline constexpr int64_t kMaxRanks = 64;

/// `all_reduce`: out = R(sum over ranks r = 0 .. ranks-1 of x_r), each
/// element summed in fp32 in rank order, so every rank gets the same bits.
/// x is this rank's partial sum (a row-parallel projection's output).
struct AllReduceParams {
  const uint16_t *x = nullptr; ///< [n] bf16, this rank's partial sum
  uint16_t *out = nullptr;     ///< [n] bf16, the same on every rank
  int64_t n = 0;
};

/// `all_gather`: out[r·n + i] = x_r[i] for every rank r (the vocabulary
/// parts of the logits, rank order).
struct AllGatherParams {
  const float *x = nullptr; ///< [n] fp32, this rank's part
  float *out = nullptr;     ///< [ranks · n] fp32, the same on every rank
  int64_t n = 0;
  int64_t ranks = 0;
};

} // namespace k3

#endif // K3C_KERNELS_COLLECTIVE_COLLECTIVEPARAMS_H
