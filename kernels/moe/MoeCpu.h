//===- MoeCpu.h - MoE ops on the CPU ------------------------------*- C++
//-*-===//
#ifndef K3C_KERNELS_MOE_MOECPU_H
#define K3C_KERNELS_MOE_MOECPU_H

#include "kernels/moe/MoeParams.h"

namespace k3 {

/// Sigmoid top-k routing with bias-corrected ranking.
void routerCpu(const RouterParams &p);
/// One gated MLP with optional pre-norm and residual epilogue.
void gatedMlpCpu(const GatedMlpParams &p);
/// The weighted mix of the routed experts' outputs.
void moeExpertsCpu(const MoeExpertsParams &p);
/// router, then moe_experts on the ids and weights it wrote.
void moeFfnCpu(const MoeFfnParams &p);

} // namespace k3

#endif // K3C_KERNELS_MOE_MOECPU_H
