//===- MoeCpu.h - MoE ops on the CPU ------------------------------*- C++
//-*-===//
#ifndef K3C_KERNELS_MOE_MOECPU_H
#define K3C_KERNELS_MOE_MOECPU_H

#include "kernels/moe/MoeParams.h"

#include <cstddef>
#include <cstdint>

namespace k3 {

/// Sigmoid top-k routing with bias-corrected ranking.
void routerCpu(const RouterParams &p);
/// One gated MLP with optional pre-norm and residual epilogue.
void gatedMlpCpu(const GatedMlpParams &p);
/// The weighted mix of the routed experts' outputs.
void moeExpertsCpu(const MoeExpertsParams &p);
/// router, then moe_experts on the ids and weights it wrote.
void moeFfnCpu(const MoeFfnParams &p);

/// What k3_moe_chunk_plan computes from `rows` rows of `topK` expert ids
/// (ids[t · topK + k], each in [0, experts)): offsets[e] the first place of
/// expert e's pairs (exclusive sums of the counts; offsets[experts] the
/// pairs), order[place] the pair t · topK + k at each place — each expert's
/// pairs in pair order — and pairAt its inverse.
void moeChunkPlanCpu(const int32_t *ids, int rows, int topK, int64_t experts,
                     int32_t *offsets, int32_t *order, int32_t *pairAt);

/// The multi-row forms (the rows of a step, one launch bound per row):
/// every expert of the union the rows chose runs once for all rows that
/// chose it, each weight row read once for them, and each row's mix is summed
/// in its own top-k order, so every row equals its single-row call bit for
/// bit. Rows that do not share the weights and sizes run one by one.
void moeExpertsRowsCpu(const MoeExpertsParams *const *rows, size_t m);
void moeFfnRowsCpu(const MoeFfnParams *const *rows, size_t m);

} // namespace k3

#endif // K3C_KERNELS_MOE_MOECPU_H
