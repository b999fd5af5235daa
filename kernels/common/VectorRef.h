//===- VectorRef.h - Reading a bf16-or-fp32 weight on the CPU ---*- C++ -*-===//
//
// The one CPU reader of a VectorRef (kernels/common/WeightRef.h): element i
// as float, a bf16 value widened exactly, an fp32 value as it is. Kernels
// never branch on VectorRef::dtype themselves, so every kernel reads the two
// stored forms the same way (the CUDA twin is dev::vectorAt in
// CudaCommon.cuh).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_VECTORREF_H
#define K3C_KERNELS_COMMON_VECTORREF_H

#include "kernels/common/BF16.h"
#include "kernels/common/WeightRef.h"

#include <cstdint>

namespace k3 {

/// Element i of `v` in fp32 (exact for both stored dtypes).
inline float vectorAt(const VectorRef &v, int64_t i) {
  if (v.dtype == kVectorF32)
    return static_cast<const float *>(v.data)[i];
  return bf16ToFloat(static_cast<const uint16_t *>(v.data)[i]);
}

/// A VectorRef over bf16 values.
inline VectorRef bf16Vector(const uint16_t *data) {
  VectorRef v;
  v.data = data;
  v.dtype = kVectorBf16;
  return v;
}

/// A VectorRef over fp32 values.
inline VectorRef f32Vector(const float *data) {
  VectorRef v;
  v.data = data;
  v.dtype = kVectorF32;
  return v;
}

} // namespace k3

#endif // K3C_KERNELS_COMMON_VECTORREF_H
