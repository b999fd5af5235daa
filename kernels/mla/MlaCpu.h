//===- MlaCpu.h - MLA (full attention) ops on the CPU -------------*- C++
//-*-===//
#ifndef K3C_KERNELS_MLA_MLACPU_H
#define K3C_KERNELS_MLA_MLACPU_H

#include "kernels/mla/MlaParams.h"

namespace k3 {

/// Normalises the latent and writes one cache row.
void mlaCacheAppendCpu(const MlaCacheAppendParams &p);
/// Absorbed decode attention with the optional fused output gate
/// (`mla_attend`: with a handover length, only lengths above it).
void mlaAttendCpu(const MlaAttendParams &p);
/// The same attention as `mla_attend_clustered` launches it: with a
/// handover length, only lengths up to it (out untouched beyond).
void mlaAttendClusteredCpu(const MlaAttendParams &p);

} // namespace k3

#endif // K3C_KERNELS_MLA_MLACPU_H
