//===- Synthetic.cu - Synthetic weights drawn on the GPU ------------------===//
//
// k3_synthetic_normal_bf16 (SyntheticNormalParams): values [first, first +
// count) of a synthetic tensor of the Normal kind, the bits the host maker
// writes (runtime/model/Synthetic.cpp), so that `--weights synthetic:SEED`
// fills the large weights in device memory instead of making them on the
// host and copying them. Grid: any (a grid-stride loop); thread t of the
// grid takes kSyntheticValuesPerThread consecutive values per turn and stores
// them as one 16-byte word where out + i is 16-byte aligned, value by value
// otherwise. Limits: none (count 0 writes nothing).
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CudaCommon.cuh"
#include "kernels/synthetic/SyntheticParams.h"

using namespace k3;

extern "C" __global__ void __launch_bounds__(kSyntheticThreads)
    k3_synthetic_normal_bf16(const SyntheticNormalParams p) {
  constexpr int64_t kPer = kSyntheticValuesPerThread;
  static_assert(kPer == 8, "eight values a 16-byte store");
  const int64_t step = dev::gridThreads() * kPer;
  for (int64_t i = dev::globalThread() * kPer; i < p.count; i += step) {
    uint16_t v[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      v[j] = dev::fToBf16(
          __fmul_rn(p.scale, syntheticNormalAt(p.stream, p.first + i + j)));
    if (i + kPer <= p.count &&
        reinterpret_cast<uintptr_t>(p.out + i) % 16 == 0) {
      uint4 w;
      w.x = v[0] | static_cast<uint32_t>(v[1]) << 16;
      w.y = v[2] | static_cast<uint32_t>(v[3]) << 16;
      w.z = v[4] | static_cast<uint32_t>(v[5]) << 16;
      w.w = v[6] | static_cast<uint32_t>(v[7]) << 16;
      *reinterpret_cast<uint4 *>(p.out + i) = w;
    } else {
      for (int j = 0; j < kPer && i + j < p.count; ++j)
        p.out[i + j] = v[j];
    }
  }
}
