//===- SyntheticParams.h - Synthetic weights drawn where they are used -*- C++
//-*-===//
//
// The one statement of how a synthetic weight's values are drawn
// (runtime/model/Synthetic.cpp says which tensors and at what scale): every
// tensor has its own splitmix64 stream, and a normal value is the Irwin-Hall
// sum of four uniforms of 24 bits. Draw j (1-based) of a stream whose state
// is s is mix(s + j · gamma), so value n of a tensor, whose four draws are
// 4n + 1 .. 4n + 4, can be computed anywhere without the values before it:
// the host maker walks the stream, the GPU fills a tensor's values in
// parallel (k3_synthetic_normal_bf16), and both give the same bits.
// Plain C types only; the helpers compile for the host and the kernels.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_SYNTHETIC_SYNTHETICPARAMS_H
#define K3C_KERNELS_SYNTHETIC_SYNTHETICPARAMS_H

#include "kernels/common/HostDevice.h"

#include <cstdint>

namespace k3 {

/// splitmix64's state increment per draw.
constexpr uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ull;

/// splitmix64's output function of a state.
K3C_HOST_DEVICE inline uint64_t splitMixMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// A draw as a uniform value in [0, 1): its top 24 bits (exact in float).
K3C_HOST_DEVICE inline float uniform24(uint64_t draw) {
  return static_cast<float>(draw >> 40) * (1.0f / 16777216.0f);
}

/// Mean 0, std 1, bell-shaped (Irwin-Hall n = 4), bounded by ±2√3: the sum
/// in this order (no operation here can be contracted into an FMA, so the
/// host and nvcc round alike).
K3C_HOST_DEVICE inline float irwinHallNormal(float u1, float u2, float u3,
                                             float u4) {
  return ((u1 + u2 + u3 + u4) - 2.0f) * 1.7320508f;
}

/// Value `index` (std 1) of a tensor drawn by normals from `stream` (its
/// state before the first draw).
K3C_HOST_DEVICE inline float syntheticNormalAt(uint64_t stream,
                                               int64_t index) {
  const uint64_t s = stream + 4 * static_cast<uint64_t>(index) * kSplitMixGamma;
  return irwinHallNormal(uniform24(splitMixMix(s + kSplitMixGamma)),
                         uniform24(splitMixMix(s + 2 * kSplitMixGamma)),
                         uniform24(splitMixMix(s + 3 * kSplitMixGamma)),
                         uniform24(splitMixMix(s + 4 * kSplitMixGamma)));
}

/// `synthetic_normal_bf16`: out[i] = bf16(scale · syntheticNormalAt(stream,
/// first + i)) for i < count: values [first, first + count) of a synthetic
/// tensor of the Normal kind, as the host maker rounds them.
struct SyntheticNormalParams {
  uint16_t *out = nullptr; ///< [count] bf16
  int64_t count = 0;
  int64_t first = 0;   ///< the tensor index of out[0]
  uint64_t stream = 0; ///< the tensor's stream state before its first draw
  float scale = 0.0f;
};

/// The CUDA entry point (not a plan kernel: the CUDA backend launches it
/// when it binds synthetic weights).
constexpr const char *kSyntheticNormalKernel = "synthetic_normal_bf16";

/// Values per thread of k3_synthetic_normal_bf16 (one 16-byte store).
constexpr int kSyntheticValuesPerThread = 8;
/// Threads per block of k3_synthetic_normal_bf16.
constexpr int kSyntheticThreads = 256;

} // namespace k3

#endif // K3C_KERNELS_SYNTHETIC_SYNTHETICPARAMS_H
