//===- WeightRef.h - A weight matrix in one of the storage formats -*- C++
//-*-===//
//
// Projections are stored bf16, except K3's routed experts, which are MXFP4
// (K3.md §7). Every params struct that takes a matrix takes a WeightRef, so a
// kernel serves both formats and the compiler chooses by a field, not by an
// entry point. Small weights read element by element (conv filters, o_norm)
// are a VectorRef: bf16 or fp32, as stored. Plain C types only: the header
// is shared with the .cu kernels and the runtime.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_WEIGHTREF_H
#define K3C_KERNELS_COMMON_WEIGHTREF_H

#include <cstdint>

namespace k3 {

/// Storage formats of a weight matrix (WeightRef::format).
enum : int32_t {
  kWeightBf16 = 0, ///< bf16 [rows, cols], row-major
  kWeightMxfp4 =
      1, ///< packed U8 [rows, cols/2] + E8M0 scales U8 [rows, cols/32]
};

/// A row-major weight matrix [rows, cols]; its shape travels in the params
/// struct that uses it. Exactly the pointers of `format` are non-null.
struct WeightRef {
  int32_t format = kWeightBf16;
  const uint16_t *bf16 = nullptr; ///< [rows, cols] bf16 (kWeightBf16)
  /// [rows, cols/2] u8, two E2M1 codes per byte, even column in the low
  /// nibble (kWeightMxfp4); cols % 32 == 0.
  const uint8_t *packed = nullptr;
  const uint8_t *scale = nullptr; ///< [rows, cols/32] u8 E8M0 (kWeightMxfp4)
};

/// Stored dtypes of a small weight read element by element
/// (VectorRef::dtype).
enum : int32_t {
  kVectorBf16 = 0, ///< bf16, widened exactly
  kVectorF32 = 1,  ///< fp32, used as it is
};

/// A small weight the kernels read element by element in fp32 — the KDA
/// short-conv filters [C, 1, W] and o_norm [d] — in the dtype the checkpoint
/// stores it: the published K3 stores these F32, Kimi-Linear BF16 (K3.md §10
/// "Stored dtypes"). The runtime fills `dtype` at bind time from the
/// checkpoint, so one plan binds either, and an F32 value is never rounded
/// to bf16. Read it only through the shared readers: vectorAt() in
/// kernels/common/VectorRef.h on the CPU; dev::vectorAt (or dev::withVector
/// with dev::elemF in a loop) in CudaCommon.cuh.
struct VectorRef {
  const void *data = nullptr; ///< [n] bf16 or fp32, as `dtype` says
  int32_t dtype = kVectorBf16;
};

/// Bytes of a later launch's weight that a latency-bound launch asks L2 to
/// fetch while it runs (`k3-prefetch-weights`): its own work moves little
/// memory, so the HBM would otherwise idle, and the later launch then reads
/// those bytes from L2. A hint: no kernel reads through `data`, and a null
/// or empty one issues nothing. Every block of the launch asks for its share
/// before its griddepcontrol.wait (a weight depends on no earlier kernel).
struct L2Prefetch {
  const void *data = nullptr; ///< [bytes] u8, 16-byte aligned, a weight
  int64_t bytes = 0;          ///< a multiple of 16; 0: none
};

/// Activations of a gated MLP (GatedMlpParams::activation and friends).
enum : int32_t {
  kActSiTU = 0, ///< softcap(g, β1) · sigmoid(g) · softcap(u, β2) (K3.md §6)
  kActSwiGLU = 1, ///< SiLU(g) · u
};

} // namespace k3

#endif // K3C_KERNELS_COMMON_WEIGHTREF_H
