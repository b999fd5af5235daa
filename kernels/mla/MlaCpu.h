//===- MlaCpu.h - MLA (full attention) ops on the CPU -------------*- C++
//-*-===//
#ifndef K3C_KERNELS_MLA_MLACPU_H
#define K3C_KERNELS_MLA_MLACPU_H

#include "kernels/mla/MlaParams.h"

namespace k3 {

/// Normalises the latent and writes one cache row.
void mlaCacheAppendCpu(const MlaCacheAppendParams &p);
/// Absorbed decode attention with the optional fused output gate.
void mlaAttendCpu(const MlaAttendParams &p);

} // namespace k3

#endif // K3C_KERNELS_MLA_MLACPU_H
