//===- SyntheticCpu.cpp - Synthetic weights on the CPU --------------------===//
//
// The CPU implementation of k3_synthetic_normal_bf16, value by value from
// the shared helpers of SyntheticParams.h (the GPU test compares the two;
// the runtime tests compare this with the host maker's tensors).
//
//===----------------------------------------------------------------------===//
#include "kernels/synthetic/SyntheticCpu.h"

#include "kernels/common/BF16.h"

namespace k3 {

void syntheticNormalBf16Cpu(const SyntheticNormalParams &p) {
  for (int64_t i = 0; i < p.count; ++i)
    p.out[i] =
        floatToBf16(p.scale * syntheticNormalAt(p.stream, p.first + i));
}

} // namespace k3
