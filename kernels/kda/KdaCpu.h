//===- KdaCpu.h - KDA (linear attention) ops on the CPU -----------*- C++
//-*-===//
#ifndef K3C_KERNELS_KDA_KDACPU_H
#define K3C_KERNELS_KDA_KDACPU_H

#include "kernels/kda/KdaParams.h"

#include <cstddef>
#include <cstdint>

namespace k3 {

/// Short causal conv + SiLU of one token for one of q/k/v.
void kdaConvCpu(const KdaConvParams &p);
/// The gated delta-rule step as the launches of `--fusion=none`: per-head
/// l2norm (+ scale) of bf16 q̃ or k̃ into fp32.
void kdaL2NormStepCpu(const KdaL2NormParams &p);
/// The decay gate g of every channel (fp32).
void kdaGateCpu(const KdaGateParams &p);
/// Elementwise fp32 sigmoid of bf16 values (β).
void sigmoidCpu(const SigmoidParams &p);
/// The delta-rule state update and o = R(Sᵀq) on prepared q, k, g, β.
void kdaStepCpu(const KdaStepParams &p);
/// KdaChunkParams: T tokens at once in the WY / UT form (KdaParams.h).
void kdaChunkCpu(const KdaChunkParams &p);
/// Per-head RMSNorm times o_norm weight times sigmoid(gate).
void kdaGatedNormCpu(const KdaGatedNormParams &p);
/// Conv ×3 + the gated delta-rule step + gated norm in one call.
void kdaDecodeCpu(const KdaDecodeParams &p);
/// kda_decode of n consecutive tokens of one sequence (rows[t]: token t's
/// params, every row with the same state and conv states) in the chunk form:
/// each token's convs, gates, l2norms and β as kdaDecodeCpu computes them
/// (the conv states advance token by token), the delta rule of all n at
/// once by kdaChunkCpu, each token's gated norm. Equals n kdaDecodeCpu calls
/// within fp32 rounding (the delta rule's sums are reassociated), not bit for
/// bit: the prefill form of a prompt chunk.
void kdaDecodeChunkCpu(const KdaDecodeParams *const *rows, size_t n);
/// kda_decode over a step's rows: each run of consecutive rows with the same
/// state (one sequence's tokens in order) in the chunk form
/// (kdaDecodeChunkCpu), a run of one row by kdaDecodeCpu.
void kdaDecodeRowsChunkCpu(const KdaDecodeParams *const *rows, size_t n);

/// In-place l2norm with the epsilon inside the root (K3.md §2.3):
/// x ← x / sqrt(Σ x² + eps), fp32 (sum in cpu::dot order).
void kdaL2NormCpu(float *x, int64_t n, float eps = kKdaL2NormEps);

} // namespace k3

#endif // K3C_KERNELS_KDA_KDACPU_H
