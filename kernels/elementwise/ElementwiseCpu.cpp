//===- ElementwiseCpu.cpp - Elementwise ops on the CPU --------------------===//
//
// Computes the residual add, the sigmoid output gate and the gated-MLP
// activation, one element at a time in fp32 with one rounding to bf16 at the
// end. The fused kernels (linear's residual epilogue, mla_attend's gate,
// gated_mlp) use the same expressions from CpuMath.h, so they agree bit for
// bit with these. Limits: none.
//
//===----------------------------------------------------------------------===//
#include "kernels/elementwise/ElementwiseCpu.h"
#include "kernels/common/CpuMath.h"

namespace k3 {

void addCpu(const AddParams &p) {
  for (int64_t i = 0; i < p.n; ++i)
    p.out[i] = floatToBf16(bf16ToFloat(p.a[i]) + bf16ToFloat(p.b[i]));
}

void mulSigmoidCpu(const MulSigmoidParams &p) {
  for (int64_t i = 0; i < p.n; ++i)
    p.out[i] =
        floatToBf16(bf16ToFloat(p.x[i]) * cpu::sigmoid(bf16ToFloat(p.gate[i])));
}

void gatedActCpu(const GatedActParams &p) {
  for (int64_t i = 0; i < p.n; ++i)
    p.out[i] =
        floatToBf16(cpu::gatedAct(p.activation, p.beta1, p.hasBeta2, p.beta2,
                                  bf16ToFloat(p.g[i]), bf16ToFloat(p.u[i])));
}

} // namespace k3
