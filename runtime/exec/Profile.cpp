//===- Profile.cpp - Where a decode step's time goes ----------------------===//
//
// Times against the byte accounting of runtime/plan/PlanBytes.h. Times are medians
// over the timed steps: one slow step (a page fault, a clock change) moves
// a median little.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Profile.h"

#include "runtime/exec/CpuBackend.h"
#include "runtime/exec/PlanBinding.h"
#include "runtime/plan/PlanKernels.h"
#include "runtime/exec/Session.h"
#include "runtime/exec/cuda/CudaBackend.h"

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

namespace k3 {

namespace {

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
// Binding
//===----------------------------------------------------------------------===//

Expected<std::unique_ptr<BoundPlan>> bindPlan(const PlanDoc &plan,
                                              const std::string &weightsDir,
                                              BackendKind kind,
                                              bool cudaGraph) {
  Expected<TensorStore> store = openWeightsFor(plan, weightsDir);
  if (!store)
    return store.status();
  std::unique_ptr<BoundPlan> bound(new BoundPlan());
  bound->store = store.take();
  Expected<std::unique_ptr<Backend>> be =
      bindBackend(plan, bound->store, kind, cudaGraph, weightsDir);
  if (!be)
    return be.status();
  bound->backend = be.take();
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

Expected<StepProfile> profileStepRows(Backend &backend, const PlanDoc &plan,
                                      const std::vector<SlotStep> &rows,
                                      int64_t steps, int64_t contextRows,
                                      double copyGBps) {
  if (steps < 1)
    return makeError("a profile needs at least one timed step, got ", steps);
  const size_t n = plan.launches.size();
  std::vector<std::vector<double>> perLaunch(n);
  for (int64_t s = 0; s < steps; ++s) {
    Expected<std::vector<double>> t = backend.timeStepSlots(rows);
    if (!t)
      return t.status();
    for (size_t i = 0; i < n && i < t->size(); ++i)
      perLaunch[i].push_back((*t)[i]);
  }
  std::vector<double> launchUs(n, 0.0);
  std::vector<LaunchBytes> bytes(n);
  const int64_t m = static_cast<int64_t>(rows.size());
  for (size_t i = 0; i < n; ++i) {
    if (!perLaunch[i].empty())
      launchUs[i] = median(perLaunch[i]);
    bytes[i] = launchBytes(plan, i, contextRows, m);
  }
  StepProfile p = summarizeProfile(plan, launchUs, bytes);
  p.backend = backend.name();
  p.steps = steps;
  p.copyGBps = copyGBps;
  return p;
}

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

Expected<PrefillProfile> profilePrefill(Backend &backend, const PlanDoc &plan,
                                        const std::vector<int64_t> &prompt,
                                        int64_t chunk) {
  if (prompt.empty())
    return makeError("a prefill profile needs a prompt");
  if (chunk < 1 || chunk > kMaxStepRows)
    return makeError("the prefill chunk must be in [1, ", kMaxStepRows,
                     "] tokens, got ", chunk);
  K3_RETURN_IF_ERROR(backend.resetState());
  PrefillProfile out;
  out.backend = backend.name();
  out.tokens = static_cast<int64_t>(prompt.size());
  out.chunk = chunk;
  std::vector<double> sum(plan.launches.size(), 0.0);
  std::vector<SlotStep> rows;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < out.tokens; i += chunk) {
    rows.clear();
    appendPromptRows(rows, prompt, i, std::min(out.tokens, i + chunk));
    const auto s0 = std::chrono::steady_clock::now();
    Expected<std::vector<double>> us = backend.timeStepSlots(rows);
    if (!us)
      return us.status().withContext("prompt chunk at position " +
                                     std::to_string(i));
    const double stepUs = std::chrono::duration<double, std::micro>(
                              std::chrono::steady_clock::now() - s0)
                              .count();
    out.stepsUs += stepUs;
    if (out.chunks == 0)
      out.firstStepUs = stepUs;
    else
      out.slowestStepUs = std::max(out.slowestStepUs, stepUs);
    for (size_t l = 0; l < sum.size() && l < us->size(); ++l)
      sum[l] += (*us)[l];
    ++out.chunks;
  }
  out.wallUs = std::chrono::duration<double, std::micro>(
                   std::chrono::steady_clock::now() - t0)
                   .count();
  out.launches = summarizeProfile(plan, sum, {});
  return out;
}

std::string formatPrefillProfile(const PrefillProfile &p) {
  std::string out;
  appendf(out,
          "prefill profile: %lld prompt tokens in %lld chunks of %lld rows on "
          "%s: %.2f ms (%.1f tokens/s); each plan launch's time over all its "
          "rows, summed over the chunks\n",
          static_cast<long long>(p.tokens), static_cast<long long>(p.chunks),
          static_cast<long long>(p.chunk), p.backend.c_str(), p.wallUs / 1e3,
          p.tokensPerSecond());
  const double total = p.launches.total.us;
  appendf(out,
          "host: %.2f ms in the chunks' steps (their launches %.2f ms, the "
          "rest the steps' own work before the first launch and after the "
          "last), %.2f ms between the steps; first step %.2f ms, slowest "
          "other %.2f ms\n",
          p.stepsUs / 1e3, total / 1e3, (p.wallUs - p.stepsUs) / 1e3,
          p.firstStepUs / 1e3, p.slowestStepUs / 1e3);
  auto table = [&](const char *what, const std::vector<ProfileRow> &rows) {
    appendf(out, "\n%-18s %9s %11s %11s %7s\n", what, "launches", "ms",
            "us/chunk", "share");
    std::vector<const ProfileRow *> all;
    for (const ProfileRow &r : rows)
      all.push_back(&r);
    all.push_back(&p.launches.total);
    for (const ProfileRow *r : all)
      appendf(out, "%-18s %9lld %11.3f %11.1f %6.1f%%\n", r->name.c_str(),
              static_cast<long long>(r->launches), r->us / 1e3,
              p.chunks ? r->us / static_cast<double>(p.chunks) : 0.0,
              total > 0 ? 100.0 * r->us / total : 0.0);
  };
  table("kernel", p.launches.kernels);
  table("layer part", p.launches.byPart);
  return out;
}

std::string formatProfileTables(const StepProfile &p) {
  std::string out;
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
  return out;
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
  out += formatProfileTables(p);
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
