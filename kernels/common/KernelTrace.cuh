//===- KernelTrace.cuh - Work-item timelines of a traced build -*- CUDA -*-===//
//
// With -DK3C_KERNEL_TRACE (a variant build of a family, scripts/ptx-variant.sh;
// never in the shipped PTX) the including module gets a buffer of
// TraceEvent (TraceEvent.h) and K3C_TRACE_T0() / K3C_TRACE(kind, slot)
// record, from thread 0, an event from the T0 mark to now. Without it both
// macros are empty.
//
// With -DK3C_LAUNCH_TRACE (every family built so: the timeline of a whole
// step, `decode_bench --timeline`) the buffer exists too and
// dev::waitForPriorGrids (CudaCommon.cuh) records one kTraceLaunch event per
// launch: block (0, 0, 0) reaching the dependent-launch wait (t0) and
// passing it (t1). The item macros stay empty unless K3C_KERNEL_TRACE is
// also set, so the launches run their shipped code but for that event.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_KERNELTRACE_CUH
#define K3C_KERNELS_COMMON_KERNELTRACE_CUH

#include "kernels/common/TraceEvent.h"

#if defined(K3C_KERNEL_TRACE) || defined(K3C_LAUNCH_TRACE)
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
#endif

#ifdef K3C_LAUNCH_TRACE
#define K3C_LAUNCH_TRACE_ON 1
namespace {
/// The dependent-launch wait of block (0, 0, 0), timed (kTraceLaunch; slot
/// and pad: the low and high words of %gridid, which tells launches apart).
__device__ __forceinline__ void waitTraced() {
  const bool first = (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x |
                      blockIdx.y | blockIdx.z) == 0;
  const unsigned long long t0 = first ? traceNow() : 0ull;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (!first)
    return;
  const unsigned long long t1 = traceNow();
  unsigned long long grid;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
  const unsigned i = atomicAdd(&gTraceCount, 1u);
  if (i < kTraceCap)
    gTrace[i] = {k3::kTraceLaunch,
                 static_cast<uint32_t>(grid),
                 0u,
                 static_cast<uint32_t>(grid >> 32),
                 t0,
                 t1};
}
} // namespace
#else
#define K3C_LAUNCH_TRACE_ON 0
#endif

#ifdef K3C_KERNEL_TRACE
#define K3C_TRACE_T0() const unsigned long long traceT0 = traceNow()
#define K3C_TRACE(kind, slot) traceItem(kind, slot, traceT0)
#else
#define K3C_TRACE_T0() (void)0
#define K3C_TRACE(kind, slot) (void)0
#endif

#endif // K3C_KERNELS_COMMON_KERNELTRACE_CUH
