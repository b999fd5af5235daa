//===- HeadCpu.h - Greedy token choice on the CPU -----------------*- C++
//-*-===//
#ifndef K3C_KERNELS_HEAD_HEADCPU_H
#define K3C_KERNELS_HEAD_HEADCPU_H

#include "kernels/head/HeadParams.h"

namespace k3 {

/// Greedy choice: argmax of the logits, ties to the lowest index.
void argmaxCpu(const ArgmaxParams &p);

} // namespace k3

#endif // K3C_KERNELS_HEAD_HEADCPU_H
