//===- KernelTrace.cuh - Work-item timelines of a traced build -*- CUDA -*-===//
//
// With -DK3C_KERNEL_TRACE (a variant build of a family, scripts/ptx-variant.sh;
// never in the shipped PTX) the including module gets a buffer of
// TraceEvent (TraceEvent.h) and K3C_TRACE_T0() / K3C_TRACE(kind, slot)
// record, from thread 0, an event from the T0 mark to now. Without it both
// macros are empty.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_KERNELTRACE_CUH
#define K3C_KERNELS_COMMON_KERNELTRACE_CUH

#include "kernels/common/TraceEvent.h"

#ifdef K3C_KERNEL_TRACE
// At global scope: the host finds the buffer by its unmangled name
// (cuModuleGetGlobal); each family is its own PTX module.
constexpr unsigned kTraceCap = 1u << 16;
__device__ k3::TraceEvent gTrace[kTraceCap];
__device__ unsigned gTraceCount;
namespace {
__device__ __forceinline__ unsigned long long traceNow() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void traceItem(unsigned kind, unsigned slot,
                                          unsigned long long t0) {
  if (threadIdx.x != 0)
    return;
  const unsigned i = atomicAdd(&gTraceCount, 1u);
  if (i < kTraceCap)
    gTrace[i] = {kind, slot, blockIdx.x, 0u, t0,
                 static_cast<uint64_t>(traceNow())};
}
} // namespace
#define K3C_TRACE_T0() const unsigned long long traceT0 = traceNow()
#define K3C_TRACE(kind, slot) traceItem(kind, slot, traceT0)
#else
#define K3C_TRACE_T0() (void)0
#define K3C_TRACE(kind, slot) (void)0
#endif

#endif // K3C_KERNELS_COMMON_KERNELTRACE_CUH
