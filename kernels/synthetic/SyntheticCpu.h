//===- SyntheticCpu.h - Synthetic weights on the CPU --------------*- C++ -*-===//
#ifndef K3C_KERNELS_SYNTHETIC_SYNTHETICCPU_H
#define K3C_KERNELS_SYNTHETIC_SYNTHETICCPU_H

#include "kernels/synthetic/SyntheticParams.h"

namespace k3 {

/// k3_synthetic_normal_bf16 on the CPU: p.out[i] for i < p.count.
void syntheticNormalBf16Cpu(const SyntheticNormalParams &p);

} // namespace k3

#endif // K3C_KERNELS_SYNTHETIC_SYNTHETICCPU_H
