//===- TraceEvent.h - Timeline events of a traced kernel build -*- C++ -*-===//
//
// A family built with -DK3C_KERNEL_TRACE (scripts/ptx-variant.sh; never the
// shipped PTX) records one event per work item of its queue kernels in the
// module's `gTrace` (`gTraceCount` of them, KernelTrace.cuh), which
// `kernel_bench --only FAMILY --trace` reads and prints as a timeline. What
// `kind` and `slot` mean is the family's (MoeTraceKind, MlaTraceKind).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_TRACEEVENT_H
#define K3C_KERNELS_COMMON_TRACEEVENT_H

#include <cstdint>

namespace k3 {

/// The kind of a launch event (a -DK3C_LAUNCH_TRACE build, KernelTrace.cuh):
/// block (0, 0, 0) reached the dependent-launch wait at t0 and passed it at
/// t1; slot and pad hold the low and high words of the launch's %gridid.
constexpr uint32_t kTraceLaunch = 0xffffffffu;

/// One event of a traced launch.
struct TraceEvent {
  uint32_t kind;  ///< the family's kind of item or phase
  uint32_t slot;  ///< the family's sub-index (e.g. moe: the expert slot)
  uint32_t block; ///< blockIdx.x
  uint32_t pad;
  uint64_t t0, t1; ///< ns (%globaltimer)
};

} // namespace k3

#endif // K3C_KERNELS_COMMON_TRACEEVENT_H
