//===- ProfileTestUtil.h - Layer probes for the hand-built plan -*- C++ -*-===//
//
// k3c plans carry probes "layers.<l>.mixer" and "layers.<l>.out"
// (docs/PLAN.md); the hand-built plan of PlanTestUtil.h does not. This adds
// them where the compiler would: after the launch that writes the mixer's
// output `p` (o_proj), and after the one that writes the layer's output `x`
// (the dense MLP or the MoE's final add).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_TEST_UNIT_RUNTIME_PROFILETESTUTIL_H
#define K3C_TEST_UNIT_RUNTIME_PROFILETESTUTIL_H

#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanKernels.h"

#include <string>

namespace k3::test {

/// Whether launch `l` writes buffer `buffer` through an output field.
inline bool launchWrites(const PlanLaunch &l, int64_t buffer) {
  const KernelInfo *info = findKernel(l.kernel);
  for (const auto &[name, arg] : l.args) {
    const KernelField *f = info ? info->field(name) : nullptr;
    if (arg.kind == PlanArg::Kind::Buffer && arg.index == buffer && f &&
        f->kind == FieldKind::PtrOut)
      return true;
  }
  return false;
}

inline int64_t bufferNamed(const PlanDoc &plan, const std::string &name) {
  for (size_t i = 0; i < plan.buffers.size(); ++i)
    if (plan.buffers[i].name == name)
      return static_cast<int64_t>(i);
  return -1;
}

/// Adds one mixer and one output probe per layer (see the file comment).
inline PlanDoc withLayerProbes(PlanDoc plan) {
  const int64_t p = bufferNamed(plan, "p"), x = bufferNamed(plan, "x");
  int64_t layer = 0;
  for (size_t i = 1; i < plan.launches.size(); ++i) {
    const std::string prefix = "layers." + std::to_string(layer);
    const int64_t after = static_cast<int64_t>(i) + 1;
    if (launchWrites(plan.launches[i], p)) {
      plan.probes.push_back({prefix + ".mixer", p, after});
    } else if (launchWrites(plan.launches[i], x)) {
      plan.probes.push_back({prefix + ".out", x, after});
      ++layer;
    }
  }
  return plan;
}

} // namespace k3::test

#endif // K3C_TEST_UNIT_RUNTIME_PROFILETESTUTIL_H
