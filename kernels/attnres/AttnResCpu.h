//===- AttnResCpu.h - Block attention residuals on the CPU --------*- C++
//-*-===//
#ifndef K3C_KERNELS_ATTNRES_ATTNRESCPU_H
#define K3C_KERNELS_ATTNRES_ATTNRESCPU_H

#include "kernels/attnres/AttnResParams.h"

namespace k3 {

/// Softmax-weighted sum of the block list and the extra source, optionally
/// RMSNorm'd (normWeight).
void attnResCpu(const AttnResParams &p);
/// Copies src into row index of the block list.
void attnResCommitCpu(const AttnResCommitParams &p);

} // namespace k3

#endif // K3C_KERNELS_ATTNRES_ATTNRESCPU_H
