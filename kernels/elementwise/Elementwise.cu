//===- Elementwise.cu - Elementwise ops (CUDA) ----------------------------===//
//
// k3_add, k3_mul_sigmoid and k3_gated_act (ElementwiseParams.h): two bf16
// inputs, one bf16 output, each element computed in fp32 with one rounding
// at the end, exactly the expressions of the CPU kernels (the device expf /
// tanhf may differ from the host's in the last fp32 bit, which shows as a
// rare 1-ulp bf16 difference in the two activations).
//
// Grid: any; threads stride over 16-byte chunks (8 elements) when all three
// pointers are 16-byte aligned, else over elements. The compiler launches
// ceil(n / 256) blocks of 256 threads, more threads than chunks: the kernels
// are tiny and latency-bound, and the grid only has to cover the vector.
// Limits: none; `out` may alias either input (every element is read, then
// written, by the same thread).
//
//===----------------------------------------------------------------------===//
#include "kernels/common/CudaCommon.cuh"
#include "kernels/elementwise/ElementwiseParams.h"

using namespace k3;

namespace {

using dev::aligned16;
using dev::hiF;
using dev::loF;

/// out[i] = R(f(a[i], b[i])) for i < n, f on the widened bf16 inputs.
template <typename F>
__device__ __forceinline__ void map2(const uint16_t *a, const uint16_t *b,
                                     uint16_t *out, int64_t n, F f) {
  const int64_t start = dev::globalThread(), stride = dev::gridThreads();
  int64_t j = 0;
  if (aligned16(a) && aligned16(b) && aligned16(out)) {
    const uint4 *av = reinterpret_cast<const uint4 *>(a);
    const uint4 *bv = reinterpret_cast<const uint4 *>(b);
    uint4 *ov = reinterpret_cast<uint4 *>(out);
    const int64_t nv = n >> 3;
    for (int64_t c = start; c < nv; c += stride) {
      const uint4 x = av[c], y = bv[c];
      const uint32_t xs[4] = {x.x, x.y, x.z, x.w};
      const uint32_t ys[4] = {y.x, y.y, y.z, y.w};
      uint32_t o[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t lo = dev::fToBf16(f(loF(xs[i]), loF(ys[i])));
        const uint32_t hi = dev::fToBf16(f(hiF(xs[i]), hiF(ys[i])));
        o[i] = lo | (hi << 16);
      }
      ov[c] = make_uint4(o[0], o[1], o[2], o[3]);
    }
    j = nv << 3;
  }
  for (j += start; j < n; j += stride)
    out[j] = dev::fToBf16(f(dev::bf16ToF(a[j]), dev::bf16ToF(b[j])));
}

/// x · sigmoid(gate), as mulSigmoidCpu.
struct MulSigmoidOp {
  __device__ float operator()(float x, float gate) const {
    return x * dev::sigmoidF(gate);
  }
};

/// The gated activation of GatedActParams (SiTU or SwiGLU).
struct GatedActOp {
  int32_t activation;
  float beta1;
  int32_t hasBeta2;
  float beta2;
  __device__ float operator()(float g, float u) const {
    return dev::gatedActF(activation, beta1, hasBeta2, beta2, g, u);
  }
};

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

} // namespace

/// k3_add: out = R(a + b), the residual add.
extern "C" __global__ void k3_add(const AddParams p) {
  dev::enterStep();
  map2(p.a, p.b, p.out, p.n, AddOp{});
}

/// k3_mul_sigmoid: out = R(x · sigmoid(gate)), the MLA output gate.
extern "C" __global__ void k3_mul_sigmoid(const MulSigmoidParams p) {
  dev::enterStep();
  map2(p.x, p.gate, p.out, p.n, MulSigmoidOp{});
}

/// k3_gated_act: out = R(act(g, u)), SiTU or SwiGLU (K3.md §6).
extern "C" __global__ void k3_gated_act(const GatedActParams p) {
  dev::enterStep();
  map2(p.g, p.u, p.out, p.n,
       GatedActOp{p.activation, p.beta1, p.hasBeta2, p.beta2});
}

/// k3_gated_act_rows: k3_gated_act for several rows (GatedActRowsParams),
/// block (x, y) block x of row y's launch.
extern "C" __global__ void k3_gated_act_rows(const GatedActRowsParams rp) {
  __shared__ __align__(16) dev::RowParams<GatedActParams> row;
  dev::loadRowParams(rp.rows, row);
  dev::enterStep();
  const GatedActParams &p = row.get();
  map2(p.g, p.u, p.out, p.n,
       GatedActOp{p.activation, p.beta1, p.hasBeta2, p.beta2});
}
