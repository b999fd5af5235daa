//===- LaunchTrace.cpp - Where a replayed step's time goes, per launch ----===//
//
// The host side of -DK3C_LAUNCH_TRACE builds (LaunchTrace.h): finding each
// module's buffer, reading it back, and matching its marks to the plan.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/cuda/LaunchTrace.h"

#include "kernels/common/TraceEvent.h"
#include "runtime/exec/cuda/CudaBackend.h"
#include "runtime/plan/PlanBytes.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace k3 {

namespace {

/// The buffer of the module whose trace counter lives at `key`.
struct TraceBuffer {
  cuda::CUdeviceptr count = 0, events = 0;
  size_t capacity = 0; ///< events
};

std::map<uint64_t, TraceBuffer> &buffers() {
  static std::map<uint64_t, TraceBuffer> b;
  return b;
}

} // namespace

Expected<std::vector<uint64_t>> moduleKeys(const PlanDoc &plan,
                                           const CudaBackend &backend) {
  std::map<std::string, uint64_t> byKernel;
  std::vector<uint64_t> keys;
  for (const PlanLaunch &l : plan.launches) {
    auto it = byKernel.find(l.kernel);
    if (it == byKernel.end()) {
      auto count = backend.moduleGlobal(l.kernel, "gTraceCount");
      auto events = backend.moduleGlobal(l.kernel, "gTrace");
      if (!count || !events)
        return makeError("kernel ", l.kernel,
                         ": its module has no launch trace (build every "
                         "family with -DK3C_LAUNCH_TRACE, scripts/"
                         "ptx-variant.sh, and point K3C_PTX_DIR at them)");
      const uint64_t key = count->first;
      buffers()[key] = {count->first, events->first,
                        events->second / sizeof(TraceEvent)};
      it = byKernel.emplace(l.kernel, key).first;
    }
    keys.push_back(it->second);
  }
  return keys;
}

Status resetLaunchTrace(const std::vector<uint64_t> &keys) {
  Expected<cuda::Driver *> driver = cuda::Driver::get();
  if (!driver)
    return driver.status();
  for (uint64_t key : std::set<uint64_t>(keys.begin(), keys.end()))
    K3_RETURN_IF_ERROR((*driver)->memset8(buffers().at(key).count, 0, 4));
  return Status::ok();
}

Expected<std::vector<LaunchMark>>
readLaunchTrace(const std::vector<uint64_t> &keys) {
  Expected<cuda::Driver *> driver = cuda::Driver::get();
  if (!driver)
    return driver.status();
  std::map<std::pair<uint64_t, uint64_t>, LaunchMark> byGrid;
  for (uint64_t key : std::set<uint64_t>(keys.begin(), keys.end())) {
    const TraceBuffer &b = buffers().at(key);
    unsigned n = 0;
    K3_RETURN_IF_ERROR((*driver)->copyToHost(&n, b.count, 4));
    if (n > b.capacity)
      return makeError("launch trace: ", n, " events overflowed a buffer of ",
                       b.capacity);
    std::vector<TraceEvent> ev(n);
    if (n > 0)
      K3_RETURN_IF_ERROR(
          (*driver)->copyToHost(ev.data(), b.events, n * sizeof(TraceEvent)));
    for (const TraceEvent &e : ev) {
      if (e.kind != kTraceLaunch)
        continue;
      const uint64_t grid = uint64_t(e.pad) << 32 | e.slot;
      auto [it, fresh] = byGrid.try_emplace({key, grid});
      if (fresh || e.t1 < it->second.passed)
        it->second = {key, grid, e.t0, e.t1};
    }
  }
  std::vector<LaunchMark> marks;
  for (auto &[k, m] : byGrid)
    marks.push_back(m);
  std::sort(marks.begin(), marks.end(),
            [](const LaunchMark &a, const LaunchMark &b) {
              return a.passed < b.passed;
            });
  return marks;
}

Expected<std::vector<TimelineRow>>
matchTimeline(const PlanDoc &plan, const std::vector<uint64_t> &keys,
              const std::vector<LaunchMark> &marks) {
  if (keys.size() != plan.launches.size())
    return makeError("launch trace: ", keys.size(), " module keys for ",
                     plan.launches.size(), " launches");
  if (marks.size() != plan.launches.size())
    return makeError("launch trace: ", marks.size(),
                     " launches recorded, the plan has ", plan.launches.size());
  std::vector<TimelineRow> rows;
  for (size_t i = 0; i < marks.size(); ++i) {
    if (marks[i].module != keys[i])
      return makeError("launch trace: launch ", i, " (",
                       plan.launches[i].kernel,
                       ") passed its wait in another kernel's order");
    TimelineRow r;
    r.launch = i;
    r.readyUs = (marks[i].passed - marks[0].passed) / 1e3;
    r.spanUs = i + 1 < marks.size()
                   ? (marks[i + 1].passed - marks[i].passed) / 1e3
                   : 0.0;
    r.earlyUs = (marks[i].passed - marks[i].reached) / 1e3;
    rows.push_back(r);
  }
  return rows;
}

std::string formatTimeline(const PlanDoc &plan,
                           const std::vector<TimelineRow> &rows) {
  const std::vector<LaunchPart> parts = launchParts(plan);
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%5s  %-22s %-12s %5s %10s %9s %9s\n", "#",
                "kernel", "part", "layer", "ready us", "span us", "early us");
  out += line;
  struct Sum {
    int64_t n = 0;
    double span = 0, early = 0;
  };
  std::map<std::string, Sum> byKernel;
  double total = 0;
  for (const TimelineRow &r : rows) {
    const PlanLaunch &l = plan.launches[r.launch];
    const LaunchPart &p = parts[r.launch];
    std::snprintf(
        line, sizeof(line), "%5zu  %-22s %-12s %5lld %10.2f %9.2f %9.2f\n",
        r.launch, l.kernel.c_str(), p.part.c_str(),
        static_cast<long long>(p.layer), r.readyUs, r.spanUs, r.earlyUs);
    out += line;
    Sum &s = byKernel[l.kernel];
    ++s.n, s.span += r.spanUs, s.early += r.earlyUs;
    total += r.spanUs;
  }
  std::vector<std::pair<std::string, Sum>> sorted(byKernel.begin(),
                                                  byKernel.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto &a, const auto &b) {
    return a.second.span > b.second.span;
  });
  std::snprintf(line, sizeof(line), "\n%-22s %8s %10s %10s %7s %10s\n",
                "kernel", "launches", "span us", "mean us", "share",
                "early us");
  out += line;
  for (const auto &[k, s] : sorted) {
    std::snprintf(line, sizeof(line),
                  "%-22s %8lld %10.2f %10.2f %6.1f%% %10.2f\n", k.c_str(),
                  static_cast<long long>(s.n), s.span, s.span / s.n,
                  total > 0 ? 100.0 * s.span / total : 0.0, s.early / s.n);
    out += line;
  }
  std::snprintf(line, sizeof(line),
                "%-22s %8zu %10.2f   (first wait passed to last; the last "
                "launch's own time not included)\n",
                "step", rows.size(), total);
  out += line;
  return out;
}

} // namespace k3
