//===- CpuParallel.h - Row-parallel loops for the CPU kernels ---*- C++ -*-===//
//
// The CPU kernels are the numerical ground truth, so parallelism may never
// change a bit: work is split only over independent outputs (GEMV rows),
// each computed exactly as the serial loop computes it. A small process-wide
// pool (hardware threads; K3C_CPU_THREADS overrides, 1 = serial) runs the
// chunks; the calling thread takes chunks too. Concurrent callers are served
// one at a time.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_KERNELS_COMMON_CPUPARALLEL_H
#define K3C_KERNELS_COMMON_CPUPARALLEL_H

#include <cstdint>
#include <functional>

namespace k3 {
namespace cpu {

/// Threads the pool uses (>= 1).
int cpuThreads();

/// Calls fn(begin, end) on disjoint ranges covering [0, n). Serial (one call
/// fn(0, n)) when the pool has one thread or `work` (an estimate of the
/// multiply-adds) is below the point where threads pay off.
void parallelRows(int64_t n, int64_t work,
                  const std::function<void(int64_t, int64_t)> &fn);

} // namespace cpu
} // namespace k3

#endif // K3C_KERNELS_COMMON_CPUPARALLEL_H
