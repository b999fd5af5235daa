//===- LaunchTrace.h - Where a replayed step's time goes, per launch -*- C++
//-*-===//
//
// A build of every kernel family with -DK3C_LAUNCH_TRACE (scripts/
// ptx-variant.sh, loaded through K3C_PTX_DIR) records, per launch, when its
// block (0, 0, 0) reached the dependent-launch wait and when it passed it
// (kernels/common/KernelTrace.cuh). Since every kernel of a step waits there
// for the one before it to complete, the time between two launches passing
// their waits is what the first one added to the step, inside a CUDA graph
// replay, with nothing on the host in the way: the kernels' own timeline,
// which events around single launches (k3-run --profile) overstate by each
// launch's fixed cost. `decode_bench --timeline` prints it.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_CUDA_LAUNCHTRACE_H
#define K3C_RUNTIME_EXEC_CUDA_LAUNCHTRACE_H

#include "runtime/Status.h"
#include "runtime/plan/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

class CudaBackend;

/// One launch of a traced step.
struct LaunchMark {
  uint64_t module = 0;  ///< which module recorded it (a key, moduleKeys)
  uint64_t grid = 0;    ///< the launch's %gridid
  uint64_t reached = 0; ///< ns: block (0, 0, 0) at the wait
  uint64_t passed = 0;  ///< ns: and past it
};

/// The module key of each launch of `plan` as `backend` (bound to it) loaded
/// the kernels (its kernel's module: families share one; every backend has
/// its own). Errors: a kernel the backend did not load, or a module without
/// the trace buffer (not a -DK3C_LAUNCH_TRACE build), named.
Expected<std::vector<uint64_t>> moduleKeys(const PlanDoc &plan,
                                           const CudaBackend &backend);

/// Zeroes the trace buffers of the modules `keys` names.
Status resetLaunchTrace(const std::vector<uint64_t> &keys);

/// The launches recorded since the reset in the modules `keys` names (one
/// mark per launch, the first of its block's waits), in the order they
/// passed their waits.
Expected<std::vector<LaunchMark>>
readLaunchTrace(const std::vector<uint64_t> &keys);

/// One launch of the step's timeline.
struct TimelineRow {
  size_t launch = 0;  ///< index in the plan
  double readyUs = 0; ///< passed its wait, from the first launch's
  /// Until the next launch passed its wait: what this launch added to the
  /// step (0 for the last, whose end no later launch marks).
  double spanUs = 0;
  /// How long block (0, 0, 0) sat at the wait: > 0 when the launch was
  /// resident before the one before it ended (the dependent launch's
  /// early start).
  double earlyUs = 0;
};

/// Matches the marks of one step to the plan's launches (the i-th mark in
/// wait order to launch i; `keys` from moduleKeys). Errors: a count or a
/// module that does not match (the step is not the plan's, or the trace
/// buffers overflowed), saying at which launch.
Expected<std::vector<TimelineRow>>
matchTimeline(const PlanDoc &plan, const std::vector<uint64_t> &keys,
              const std::vector<LaunchMark> &marks);

/// The timeline as text: a line per launch, then per kernel the launches,
/// the µs they added to the step (sum, mean) and the mean early start.
std::string formatTimeline(const PlanDoc &plan,
                           const std::vector<TimelineRow> &rows);

} // namespace k3

#endif // K3C_RUNTIME_EXEC_CUDA_LAUNCHTRACE_H
