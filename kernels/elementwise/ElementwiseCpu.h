//===- ElementwiseCpu.h - Elementwise ops on the CPU --------------*- C++
//-*-===//
#ifndef K3C_KERNELS_ELEMENTWISE_ELEMENTWISECPU_H
#define K3C_KERNELS_ELEMENTWISE_ELEMENTWISECPU_H

#include "kernels/elementwise/ElementwiseParams.h"

namespace k3 {

/// out = R(a + b).
void addCpu(const AddParams &p);
/// out = R(x · sigmoid(gate)).
void mulSigmoidCpu(const MulSigmoidParams &p);
/// out = R(act(g, u)).
void gatedActCpu(const GatedActParams &p);

} // namespace k3

#endif // K3C_KERNELS_ELEMENTWISE_ELEMENTWISECPU_H
