//===- EmbedCpu.h - Embedding lookup on the CPU -------------------*- C++
//-*-===//
#ifndef K3C_KERNELS_EMBED_EMBEDCPU_H
#define K3C_KERNELS_EMBED_EMBEDCPU_H

#include "kernels/embed/EmbedParams.h"

namespace k3 {

/// Copies row `p.token` of the table to `p.out`.
void embedCpu(const EmbedParams &p);

} // namespace k3

#endif // K3C_KERNELS_EMBED_EMBEDCPU_H
