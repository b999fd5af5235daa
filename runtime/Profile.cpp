//===- Profile.cpp - Where a decode step's time goes ----------------------===//
//
// The byte accounting is written once here for `k3c --report` (EmitPlan.cpp
// calls launchBytes on the plan it emits), the profiler and the decode
// benchmark, so a floor means the same thing everywhere. Times are medians
// over the timed steps: one slow step (a page fault, a clock change) moves
// a median little.
//
//===----------------------------------------------------------------------===//
#include "runtime/Profile.h"

#include "runtime/CpuBackend.h"
#include "runtime/PlanBinding.h"
#include "runtime/PlanKernels.h"
#include "runtime/Session.h"
#include "runtime/cuda/CudaBackend.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

namespace k3 {

namespace {

/// A whole weight in its plan format (MXFP4: packed nibbles + one scale
/// byte per 32 values; a "vector" weight, bf16 or f32 as the checkpoint
/// stores it, at its smaller bf16 size: the plan does not know, and the
/// difference is under 0.1% of a KDA layer's bytes).
uint64_t weightBytes(const PlanWeight &w) {
  uint64_t n = 1;
  for (int64_t d : w.shape)
    n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  if (w.format == "mxfp4")
    return n / 2 + n / 32;
  return n * (w.format == "f32" ? 4 : 2);
}

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

void appendf(std::string &out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void appendf(std::string &out, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  out += buf;
}

} // namespace

//===----------------------------------------------------------------------===//
// Bytes
//===----------------------------------------------------------------------===//

LaunchBytes launchBytes(const PlanDoc &plan, size_t index,
                        int64_t contextRows) {
  LaunchBytes b;
  if (index >= plan.launches.size())
    return b;
  const PlanLaunch &l = plan.launches[index];
  const KernelInfo *info = findKernel(l.kernel);
  int64_t topK = 0;
  if (const PlanArg *k = l.find("topK"); k && k->kind == PlanArg::Kind::Int)
    topK = k->intValue;
  for (const auto &[name, arg] : l.args) {
    if (!arg.isPointer() || arg.index < 0)
      continue;
    const size_t at = static_cast<size_t>(arg.index);
    const KernelField *f = info ? info->field(name) : nullptr;
    const bool out = f && f->kind == FieldKind::PtrOut;
    uint64_t bytes = 0;
    if (arg.kind == PlanArg::Kind::Buffer) {
      if (at >= plan.buffers.size())
        continue;
      bytes = plan.buffers[at].bytes;
    } else if (arg.kind == PlanArg::Kind::Weight) {
      if (at >= plan.weights.size())
        continue;
      const PlanWeight &w = plan.weights[at];
      bytes = weightBytes(w);
      // The embedding reads one bf16 row of its table.
      if (l.kernel == "embed" && w.shape.size() >= 2)
        bytes = static_cast<uint64_t>(w.shape[1]) * 2;
      // Only the routed top-k experts of a stacked table are read.
      if (f && f->kind == FieldKind::WeightTable && topK > 0 &&
          !w.shape.empty() && w.shape[0] > 0)
        bytes = bytes / static_cast<uint64_t>(w.shape[0]) *
                static_cast<uint64_t>(topK);
    } else { // state
      if (at >= plan.states.size())
        continue;
      const PlanState &s = plan.states[at];
      bytes = s.bytes;
      if (s.kind == "mla_cache") {
        // [max_seq, L+R] bf16: the append writes one row, the attend reads
        // the rows of the context.
        if (l.kernel == "mla_cache_append") {
          if (s.shape.size() >= 2)
            b.written += static_cast<uint64_t>(s.shape[1]) * 2;
        } else {
          const int64_t rows = s.shape.empty() ? 0 : s.shape[0];
          if (contextRows > 0 && rows > 0 && contextRows < rows)
            bytes = bytes / static_cast<uint64_t>(rows) *
                    static_cast<uint64_t>(contextRows);
          b.read += bytes;
        }
        continue;
      }
      if (s.kind == "attn_res_blocks" && s.shape.size() >= 2) {
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
      if (s.kind == "conv_state")
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
  return b;
}

LaunchBytes stepBytes(const PlanDoc &plan, int64_t contextRows) {
  LaunchBytes sum;
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const LaunchBytes b = launchBytes(plan, i, contextRows);
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
      p.part = writesBuffer(l, plan.logitsBuffer) ? "head" : "step";
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

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

Expected<std::unique_ptr<BoundPlan>> bindPlan(const PlanDoc &plan,
                                              const std::string &weightsDir,
                                              BackendKind kind,
                                              bool cudaGraph) {
  const std::string configPath =
      (std::filesystem::path(weightsDir) / "config.json").string();
  Expected<ModelConfig> weightsConfig = parseConfigFile(configPath);
  if (!weightsConfig)
    return weightsConfig.status();
  K3_RETURN_IF_ERROR(checkConfigsMatch(plan.config, *weightsConfig));
  std::unique_ptr<BoundPlan> bound(new BoundPlan());
  Expected<TensorStore> store = TensorStore::open(weightsDir);
  if (!store)
    return store.status();
  bound->store = store.take();
  if (kind == BackendKind::Cuda) {
    Expected<std::unique_ptr<CudaBackend>> be =
        CudaBackend::bind(plan, bound->store, cudaGraph);
    if (!be)
      return be.status().withContext("binding the plan to " + weightsDir +
                                     " on the GPU");
    bound->backend = be.take();
  } else {
    Expected<std::unique_ptr<CpuBackend>> be =
        CpuBackend::bind(plan, bound->store);
    if (!be)
      return be.status().withContext("binding the plan to " + weightsDir);
    bound->backend = be.take();
  }
  return bound;
}

//===----------------------------------------------------------------------===//
// Timing
//===----------------------------------------------------------------------===//

double median(std::vector<double> values) {
  if (values.empty())
    return 0.0;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : 0.5 * (values[m - 1] + values[m]);
}

StepProfile summarizeProfile(const PlanDoc &plan,
                             const std::vector<double> &launchUs,
                             const std::vector<LaunchBytes> &bytes) {
  StepProfile p;
  p.fusion = plan.fusion;
  p.launchUs = launchUs;
  p.bytes = bytes;
  p.parts = launchParts(plan);
  p.total.name = "total";
  std::map<std::string, ProfileRow> kernels, parts;
  std::map<std::string, std::set<int64_t>> layers;
  const size_t n = plan.launches.size();
  for (size_t i = 0; i < n; ++i) {
    const double us = i < launchUs.size() ? launchUs[i] : 0.0;
    const uint64_t b = i < bytes.size() ? bytes[i].total() : 0;
    for (ProfileRow *row : {&kernels[plan.launches[i].kernel],
                            &parts[p.parts[i].part], &p.total}) {
      ++row->launches;
      row->us += us;
      row->bytes += b;
    }
    if (p.parts[i].layer >= 0)
      layers[p.parts[i].part].insert(p.parts[i].layer);
  }
  auto rows = [](std::map<std::string, ProfileRow> &m) {
    std::vector<ProfileRow> out;
    for (auto &[name, row] : m) {
      row.name = name;
      out.push_back(row);
    }
    std::stable_sort(
        out.begin(), out.end(),
        [](const ProfileRow &a, const ProfileRow &b) { return a.us > b.us; });
    return out;
  };
  p.kernels = rows(kernels);
  for (auto &[name, row] : parts)
    row.layers = static_cast<int64_t>(layers[name].size());
  p.byPart = rows(parts);
  return p;
}

Expected<StepProfile> profileStep(Backend &backend, const PlanDoc &plan,
                                  const ProfileOptions &o) {
  if (o.steps < 1)
    return makeError("a profile needs at least one timed step, got ", o.steps);
  if (o.warmup < 0)
    return makeError("warm-up steps must be >= 0, got ", o.warmup);
  K3_RETURN_IF_ERROR(
      checkStepInputs(o.token, o.pos, backend.vocab(), backend.maxSeq())
          .withContext("the profiled step"));
  Expected<double> copy = backend.measureCopyGBps(o.copyBytes);
  if (!copy)
    return copy.status();

  const size_t n = plan.launches.size();
  std::vector<std::vector<double>> perLaunch(n);
  std::vector<double> launchByLaunch;
  for (int64_t s = -o.warmup; s < o.steps; ++s) {
    Expected<std::vector<double>> t = backend.timeLaunches(o.token, o.pos);
    if (!t)
      return t.status();
    if (t->size() != n)
      return makeError("the backend timed ", t->size(),
                       " launches, the plan has ", n);
    if (s < 0)
      continue;
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
      perLaunch[i].push_back((*t)[i]);
      sum += (*t)[i];
    }
    launchByLaunch.push_back(sum);
  }
  auto timeSteps = [&](bool replay) -> Expected<double> {
    std::vector<double> us;
    for (int64_t s = -o.warmup; s < o.steps; ++s) {
      Expected<double> t = backend.timeStep(o.token, o.pos, replay);
      if (!t)
        return t.status();
      if (s >= 0)
        us.push_back(*t);
    }
    return median(us);
  };
  Expected<double> plain = timeSteps(false);
  if (!plain)
    return plain.status();
  double replay = 0;
  if (backend.replaysGraph()) {
    Expected<double> r = timeSteps(true);
    if (!r)
      return r.status();
    replay = *r;
  }

  std::vector<double> launchUs(n);
  std::vector<LaunchBytes> bytes(n);
  for (size_t i = 0; i < n; ++i) {
    launchUs[i] = median(perLaunch[i]);
    bytes[i] = launchBytes(plan, i, o.pos + 1);
  }
  StepProfile p = summarizeProfile(plan, launchUs, bytes);
  p.backend = backend.name();
  p.copyMethod = backend.copyMethod(o.copyBytes);
  p.copyGBps = *copy;
  p.pos = o.pos;
  p.steps = o.steps;
  p.warmup = o.warmup;
  p.launchByLaunchUs = median(launchByLaunch);
  p.plainUs = *plain;
  p.replayUs = replay;
  return p;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

std::string formatBytes(double bytes) {
  char buf[64];
  if (bytes < 1e3)
    std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  else if (bytes < 1e6)
    std::snprintf(buf, sizeof(buf), "%.1f KB", bytes / 1e3);
  else if (bytes < 1e9)
    std::snprintf(buf, sizeof(buf), "%.2f MB", bytes / 1e6);
  else
    std::snprintf(buf, sizeof(buf), "%.2f GB", bytes / 1e9);
  return buf;
}

std::string formatProfile(const StepProfile &p) {
  std::string out;
  appendf(out,
          "profile: %lld launches on %s, fusion %s, position %lld (context "
          "%lld); %lld timed steps after %lld warm-up, each launch's median\n",
          static_cast<long long>(p.total.launches), p.backend.c_str(),
          p.fusion.c_str(), static_cast<long long>(p.pos),
          static_cast<long long>(p.pos + 1), static_cast<long long>(p.steps),
          static_cast<long long>(p.warmup));
  appendf(out, "copy bandwidth: %.1f GB/s (%s)\n", p.copyGBps,
          p.copyMethod.c_str());
  auto share = [&](const ProfileRow &r) {
    return p.copyGBps > 0 ? 100.0 * r.gbps() / p.copyGBps : 0.0;
  };
  auto table = [&](const char *what, const std::vector<ProfileRow> &rows,
                   bool withLayers) {
    appendf(out, "\n%-18s", what);
    if (withLayers)
      appendf(out, " %6s", "layers");
    appendf(out, " %9s %11s %10s %12s %9s %8s\n", "launches", "us/step",
            "us/launch", "bytes/step", "GB/s", "of copy");
    std::vector<const ProfileRow *> all;
    for (const ProfileRow &r : rows)
      all.push_back(&r);
    all.push_back(&p.total);
    for (const ProfileRow *r : all) {
      appendf(out, "%-18s", r->name.c_str());
      if (withLayers) {
        if (r->layers > 0)
          appendf(out, " %6lld", static_cast<long long>(r->layers));
        else
          appendf(out, " %6s", "");
      }
      appendf(out, " %9lld %11.2f %10.2f %12s %9.1f %7.1f%%\n",
              static_cast<long long>(r->launches), r->us,
              r->launches ? r->us / r->launches : 0.0,
              formatBytes(static_cast<double>(r->bytes)).c_str(), r->gbps(),
              share(*r));
    }
  };
  table("kernel", p.kernels, false);
  table("layer part", p.byPart, true);
  appendf(out,
          "\nstep per token: launch by launch %.2f us (sum of launch "
          "medians %.2f us), plain %.2f us",
          p.launchByLaunchUs, p.total.us, p.plainUs);
  if (p.replayUs > 0)
    appendf(out, ", graph replay %.2f us", p.replayUs);
  appendf(out, "\n");
  appendf(out,
          "floor: %s per token / %.1f GB/s = %.3f us; the step (%s) is at "
          "%.1f%% of the floor\n",
          formatBytes(static_cast<double>(p.total.bytes)).c_str(), p.copyGBps,
          p.floorUs(), p.replayUs > 0 ? "graph replay" : "plain",
          100.0 * p.fractionOfFloor());
  return out;
}

} // namespace k3
