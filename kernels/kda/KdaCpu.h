//===- KdaCpu.h - KDA (linear attention) ops on the CPU -----------*- C++
//-*-===//
#ifndef K3C_KERNELS_KDA_KDACPU_H
#define K3C_KERNELS_KDA_KDACPU_H

#include "kernels/kda/KdaParams.h"

#include <cstdint>

namespace k3 {

/// Short causal conv + SiLU of one token for one of q/k/v.
void kdaConvCpu(const KdaConvParams &p);
/// Gated delta-rule step of every head.
void kdaRecurrentCpu(const KdaRecurrentParams &p);
/// Per-head RMSNorm times o_norm weight times sigmoid(gate).
void kdaGatedNormCpu(const KdaGatedNormParams &p);
/// Conv ×3 + recurrent step + gated norm in one call.
void kdaDecodeCpu(const KdaDecodeParams &p);

/// In-place l2norm with the epsilon inside the root (K3.md §2.3):
/// x ← x / sqrt(Σ x² + eps), fp32 (sum in cpu::dot order).
void kdaL2NormCpu(float *x, int64_t n, float eps = kKdaL2NormEps);

} // namespace k3

#endif // K3C_KERNELS_KDA_KDACPU_H
