//===- PlanBytes.cpp - What each launch of a plan moves -------------------===//
//
// The byte accounting is written once here for `k3c --report` (EmitPlan.cpp
// calls launchBytes on the plan it emits), the profiler and the decode
// benchmark, so a floor means the same thing everywhere.
//
//===----------------------------------------------------------------------===//
#include "runtime/plan/PlanBytes.h"

#include "runtime/plan/PlanKernels.h"

#include "kernels/common/StepInputs.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace k3 {

namespace {

bool startsWith(const std::string &s, const char *prefix) {
  return s.rfind(prefix, 0) == 0;
}

/// Whether launch `l` binds buffer `buffer` to an output field.
bool writesBuffer(const PlanLaunch &l, int64_t buffer) {
  const KernelInfo *info = findKernel(l.kernel);
  for (const auto &[name, arg] : l.args) {
    if (arg.kind != PlanArg::Kind::Buffer || arg.index != buffer)
      continue;
    const KernelField *f = info ? info->field(name) : nullptr;
    if (f && f->kind == FieldKind::PtrOut)
      return true;
  }
  return false;
}

/// Parses "layers.<l>.mixer" / "layers.<l>.out"; false for other names.
bool parseLayerProbe(const std::string &name, int64_t &layer, bool &mixer) {
  if (!startsWith(name, "layers."))
    return false;
  const size_t dot = name.find('.', 7);
  if (dot == std::string::npos || dot == 7)
    return false;
  const std::string num = name.substr(7, dot - 7);
  if (num.find_first_not_of("0123456789") != std::string::npos ||
      num.size() > 9)
    return false;
  const std::string what = name.substr(dot + 1);
  if (what != "mixer" && what != "out")
    return false;
  layer = std::stoll(num);
  mixer = what == "mixer";
  return true;
}

} // namespace

//===----------------------------------------------------------------------===//
// Bytes
//===----------------------------------------------------------------------===//

double expertsRead(int64_t experts, int64_t topK, int64_t rows) {
  if (experts <= 0 || topK <= 0 || rows <= 0)
    return 0.0;
  const double e = static_cast<double>(experts);
  const double k = std::min(static_cast<double>(topK), e);
  if (rows == 1)
    return k;
  // Each expert is missed by one row with probability 1 - k/E.
  return e * (1.0 - std::pow(1.0 - k / e, static_cast<double>(rows)));
}

LaunchBytes launchBytes(const PlanDoc &plan, size_t index, int64_t contextRows,
                        int64_t rows) {
  rows = std::max<int64_t>(rows, 1);
  // Weights are read once per step whatever its rows; everything else
  // (states, buffers, cache rows, the embedded row) once per row: the
  // per-row bytes go to `b` and are scaled at the end, the weights' to `w`.
  LaunchBytes b, w;
  if (index >= plan.launches.size())
    return b;
  const PlanLaunch &l = plan.launches[index];
  const KernelInfo *info = findKernel(l.kernel);
  int64_t topK = 0;
  // moe_ffn nests moe_experts' fields under "experts.".
  for (const char *name : {"topK", "experts.topK"})
    if (const PlanArg *k = l.find(name); k && k->kind == PlanArg::Kind::Int)
      topK = k->intValue;
  for (const auto &[name, arg] : l.args) {
    const KernelField *f = info ? info->field(name) : nullptr;
    const bool out = f && f->kind == FieldKind::PtrOut;
    if (arg.kind == PlanArg::Kind::Input && arg.input == PlanInput::Step) {
      // The step block (32 bytes, in L2): counted where the argmax
      // rewrites it, not where a kernel reads one word of it.
      if (out) {
        b.read += kStepWords * sizeof(int64_t);
        b.written += kStepWords * sizeof(int64_t);
      }
      continue;
    }
    // A prefetch hint moves the bytes the launch it serves counts.
    if (!arg.isPointer() || arg.index < 0 ||
        (f && f->kind == FieldKind::Prefetch))
      continue;
    const size_t at = static_cast<size_t>(arg.index);
    uint64_t bytes = 0;
    if (arg.kind == PlanArg::Kind::Buffer) {
      if (at >= plan.buffers.size())
        continue;
      bytes = plan.buffers[at].bytes;
    } else if (arg.kind == PlanArg::Kind::Weight) {
      if (at >= plan.weights.size())
        continue;
      const PlanWeight &pw = plan.weights[at];
      // A "vector" weight counts at its bf16 size (under 0.1% of a KDA
      // layer's bytes when the checkpoint stores it f32).
      bytes = planWeightBytes(pw);
      // The embedding reads one bf16 row of its table per row.
      if (l.kernel == "embed" && pw.shape.size() >= 2) {
        b.read += static_cast<uint64_t>(pw.shape[1]) * 2;
        continue;
      }
      // Only the routed experts of a stacked table are read.
      if (f && f->kind == FieldKind::WeightTable && topK > 0 &&
          !pw.shape.empty() && pw.shape[0] > 0)
        bytes = static_cast<uint64_t>(std::llround(
            static_cast<double>(bytes / static_cast<uint64_t>(pw.shape[0])) *
            expertsRead(pw.shape[0], topK, rows)));
      w.read += bytes;
      continue;
    } else { // state
      if (at >= plan.states.size())
        continue;
      const PlanState &s = plan.states[at];
      bytes = s.bytes;
      if (s.is(StateKind::MlaCache)) {
        // [max_seq, L+R] bf16: the append writes one row, the attend reads
        // the rows of the context.
        if (l.kernel == "mla_cache_append") {
          if (s.shape.size() >= 2)
            b.written += static_cast<uint64_t>(s.shape[1]) * 2;
        } else {
          const int64_t cacheRows = s.shape.empty() ? 0 : s.shape[0];
          if (contextRows > 0 && cacheRows > 0 && contextRows < cacheRows)
            bytes = bytes / static_cast<uint64_t>(cacheRows) *
                    static_cast<uint64_t>(contextRows);
          b.read += bytes;
        }
        continue;
      }
      if (s.is(StateKind::AttnResBlocks) && s.shape.size() >= 2) {
        // [max_blocks, D] bf16: a commit writes one row, attn_res reads the
        // numBlocks committed rows.
        const uint64_t row = static_cast<uint64_t>(s.shape[1]) * 2;
        if (out) {
          b.written += row;
          continue;
        }
        const PlanArg *nb = l.find("numBlocks");
        if (nb && nb->kind == PlanArg::Kind::Int && nb->intValue >= 0 &&
            nb->intValue < s.shape[0])
          bytes = row * static_cast<uint64_t>(nb->intValue);
      }
      // A conv-state argument covers one of q/k/v: a third of the slot.
      if (s.is(StateKind::ConvState))
        bytes /= 3;
      // Recurrent and conv state: read and written in place.
      if (out) {
        b.read += bytes;
        b.written += bytes;
        continue;
      }
    }
    (out ? b.written : b.read) += bytes;
  }
  const uint64_t n = static_cast<uint64_t>(rows);
  return {w.read + b.read * n, w.written + b.written * n};
}

LaunchBytes stepBytes(const PlanDoc &plan, int64_t contextRows, int64_t rows) {
  LaunchBytes sum;
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const LaunchBytes b = launchBytes(plan, i, contextRows, rows);
    sum.read += b.read;
    sum.written += b.written;
  }
  return sum;
}

//===----------------------------------------------------------------------===//
// Layer parts
//===----------------------------------------------------------------------===//

std::vector<LaunchPart> launchParts(const PlanDoc &plan) {
  struct Segment {
    int64_t end; ///< the probe's `after`: launches before it
    int64_t layer;
    bool mixer;
  };
  std::vector<Segment> segments;
  for (const PlanProbe &p : plan.probes) {
    int64_t layer = 0;
    bool mixer = false;
    if (parseLayerProbe(p.name, layer, mixer))
      segments.push_back({p.after, layer, mixer});
  }
  std::stable_sort(
      segments.begin(), segments.end(),
      [](const Segment &a, const Segment &b) { return a.end < b.end; });

  const size_t n = plan.launches.size();
  std::vector<LaunchPart> parts(n);
  size_t s = 0;
  for (size_t i = 0; i < n; ++i) {
    const PlanLaunch &l = plan.launches[i];
    LaunchPart &p = parts[i];
    while (s < segments.size() && segments[s].end <= static_cast<int64_t>(i))
      ++s;
    if (l.kernel == "embed") {
      p.part = "embed";
      continue;
    }
    if (segments.empty()) {
      p.part = writesBuffer(l, plan.logitsBuffer) || l.kernel == "argmax"
                   ? "head"
                   : "step";
    } else if (s < segments.size()) {
      const Segment &seg = segments[s];
      p.layer = seg.layer;
      if (seg.mixer)
        p.part = plan.config.isMlaLayer(seg.layer) ? "mla mixer" : "kda mixer";
      else
        p.part = plan.config.isDenseLayer(seg.layer) ? "dense mlp" : "moe";
    } else {
      p.part = "head";
    }
    if (startsWith(l.kernel, "attn_res"))
      p.part = "attn_res";
  }
  return parts;
}

} // namespace k3
