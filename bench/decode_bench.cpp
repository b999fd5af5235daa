//===- decode_bench.cpp - Whole decode steps against the bandwidth floor --===//
//
// For each model directory and each plan compiled for it (one per fusion
// strategy: the GPU machine has no MLIR, so plans are made beforehand with
// k3c), binds the plan, fills the state with a prompt and greedy tokens up
// to the context, and times whole decode steps at that context position:
// the median of --steps steps after --warmup, with CUDA graph replay and
// kernel by kernel (the CPU backend has no graph: kernel by kernel only).
// The floor of a step is the plan's bytes per token at that context
// (runtime/exec/Profile.h launchBytes, the accounting of `k3c --report` and
// `k3-run --profile`) over the copy bandwidth measured in this process.
// Prints a table and writes JSON (bench/results/<model>-<date>.json).
//
//   decode_bench --weights DIR --plan none=P1 --plan default=P2 --plan max=P3
//                [--weights DIR2 --plan ...] [--backend cpu|cuda]
//                [--context 1024] [--prompt-len 64] [--steps 50]
//
// Exit codes: 0 ok, 1 runtime error, 2 bad command line.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Profile.h"
#include "runtime/exec/cuda/CudaBackend.h"
#include "runtime/exec/cuda/CudaDriver.h"
#include "runtime/exec/cuda/LaunchTrace.h"
#include "runtime/model/Config.h"
#include "runtime/plan/Plan.h"

#include "K3cCommit.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct PlanSpec {
  std::string label, path;
};

struct ModelSpec {
  std::string dir, name;
  std::vector<PlanSpec> plans;
};

struct Options {
  std::vector<ModelSpec> models;
  std::string backend = "cpu", commit = K3C_GIT_COMMIT,
              outDir = "bench/results", json;
  int64_t context = 1024, promptLen = 64, steps = 50, warmup = 5;
  int64_t batch = 1; ///< rows per step (--batch: a plan of >= N slots)
  bool timeline = false; ///< --timeline: each plan's replayed step per launch
  bool profile = false;  ///< --profile: a batch step launch by launch
  /// --prefill-form: how steps of several rows run (Backend::setPrefillForm).
  k3::PrefillForm form = k3::PrefillForm::Rows;
  uint64_t copyBytes = 0;
};

void printHelp() {
  std::printf(
      "usage: decode_bench --weights DIR [--model NAME] --plan [LABEL=]PLAN "
      "...\n"
      "                    [--weights DIR2 --plan ...] [options]\n"
      "\n"
      "Times whole decode steps of each plan (one per fusion strategy, made\n"
      "with k3c for that model) at one context position against the\n"
      "bandwidth floor: the plan's bytes per token over the copy bandwidth\n"
      "measured in this process. Each --plan belongs to the --weights before\n"
      "it; LABEL defaults to the plan's fusion. Rows per plan (mode): one\n"
      "CUDA graph replay per step (graph), the launches one by one\n"
      "(launches), and the decode a user runs: --steps greedy steps chosen\n"
      "on the device and queued back to back, the host's wait included\n"
      "(greedy-chain).\n"
      "\n"
      "--weights synthetic:SEED makes the plan's model in memory from SEED\n"
      "(the bytes k3-mkmodel --real-dtypes --seed SEED writes), so a model\n"
      "of any size runs without files.\n"
      "\n"
      "options:\n"
      "  --model NAME       the name of the last --weights in the results\n"
      "                     (default: its directory's name)\n"
      "  --backend cpu|cuda where to run (default cpu)\n"
      "  --context C        the step is timed at position C-1, attention\n"
      "                     over C cached rows (default 1024; at most the\n"
      "                     plan's max_seq)\n"
      "  --prompt-len P     the state is filled with P prompt tokens, then\n"
      "                     greedy tokens up to position C-2 (default 64,\n"
      "                     at most C)\n"
      "  --batch N          N sequences per step (a plan made with k3c\n"
      "                     --max-batch >= N): each slot filled with its\n"
      "                     own prompt, then steps of N rows at position\n"
      "                     C-1 timed on the host clock (mode batch-N;\n"
      "                     us/token is the step over N), greedy: only the\n"
      "                     plan's choices come back (where it has an\n"
      "                     argmax), not the rows' logits. Its floor counts\n"
      "                     each weight once per step, an expert table the\n"
      "                     expected union of N rows' top-k picks (about\n"
      "                     102 of 256 experts at N = 16), the states and\n"
      "                     cache rows once per row\n"
      "  --prefill-form rows|chunk\n"
      "                     how a step of several rows runs (k3-run's\n"
      "                     option): rows (default), the multi-row forms,\n"
      "                     bit for bit one row at a time; chunk, the\n"
      "                     tensor-core forms from 16 rows on, within\n"
      "                     rounding (what a batch-16 decode should use)\n"
      "  --profile          with --batch: after timing, 5 more steps with\n"
      "                     each plan launch timed on its own (events\n"
      "                     around it), the medians summed per kernel\n"
      "  --timeline         after timing a plan, print its replayed step\n"
      "                     launch by launch as the kernels saw it (the\n"
      "                     time between launches passing their dependent-\n"
      "                     launch waits), the median of 5 replays; needs\n"
      "                     K3C_PTX_DIR at every family built with\n"
      "                     -DK3C_LAUNCH_TRACE (scripts/ptx-variant.sh)\n"
      "  --steps N          timed steps per row, the median is reported\n"
      "                     (default 50)\n"
      "  --warmup W         untimed steps before them (default 5)\n"
      "  --copy-mb M        size of the copy-bandwidth measurement (default:\n"
      "                     1024 on a GPU, 256 on the CPU)\n"
      "  --commit HASH      the commit recorded (default: the one this\n"
      "                     binary was built at, %s)\n"
      "  --out-dir DIR      where <model>-<date>.json goes (default\n"
      "                     bench/results)\n"
      "  --json FILE        write every row to FILE instead\n"
      "  -h, --help         show this help\n",
      K3C_GIT_COMMIT);
}

int usageError(const std::string &message) {
  std::fprintf(stderr, "decode_bench: error: %s\n", message.c_str());
  std::fprintf(stderr, "run 'decode_bench --help' for usage\n");
  return kExitUsage;
}

int runtimeError(const std::string &message) {
  std::fprintf(stderr, "decode_bench: error: %s\n", message.c_str());
  return kExitFailure;
}

bool parseInt(const std::string &text, int64_t &out) {
  if (text.empty())
    return false;
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0')
    return false;
  out = v;
  return true;
}

/// A file-name-safe model name: the directory's last component.
std::string modelName(const std::string &dir) {
  std::string base = fs::path(dir).lexically_normal().filename().string();
  if (base.empty() || base == ".")
    base = fs::path(dir).lexically_normal().parent_path().filename().string();
  for (char &c : base)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' &&
        c != '.')
      c = '_';
  return base.empty() ? "model" : base;
}

std::string utcNow(const char *format) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), format, &tm);
  return buf;
}

/// "NVIDIA H200 (sm_90)" on the GPU; the host CPU's model name on the CPU.
std::string deviceName(k3::BackendKind kind) {
  if (kind == k3::BackendKind::Cuda) {
    k3::Expected<k3::cuda::Driver *> d = k3::cuda::Driver::get();
    return d ? (*d)->deviceName() : "cuda (unknown)";
  }
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size())
        return "cpu (" + line.substr(colon + 2) + ")";
    }
  return "cpu";
}

/// Deterministic prompt ids in [1, vocab) (never the same few rows).
std::vector<int64_t> promptIds(int64_t n, int64_t vocab) {
  std::vector<int64_t> ids;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(vocab > 1 ? 1 + static_cast<int64_t>((x >> 33) % (vocab - 1))
                            : 0);
  }
  return ids;
}

struct Row {
  std::string model, fusion, plan, backend;
  k3::ModelConfig config;
  bool graph = false;
  /// "graph" (one replay per step), "launches" (kernel by kernel) or
  /// "greedy-chain" (greedy steps chosen on the device and queued back to
  /// back, Backend::chainGreedy: the decode a user runs, host wait included).
  std::string mode;
  int64_t launches = 0;
  int64_t batch = 1; ///< rows per timed step
  double us = 0, usMin = 0, usMax = 0, floorUs = 0;
  uint64_t bytes = 0;
};

/// --profile with --batch: five steps of `step`'s rows with each plan
/// launch timed on its own (k3::profileStepRows), printed as k3-run
/// --profile prints a step's kernels and layer parts.
k3::Status printBatchProfile(const k3::PlanDoc &plan, k3::Backend &be,
                             const std::vector<k3::SlotStep> &step,
                             int64_t context, double copyGBps) {
  constexpr int kSteps = 5;
  k3::Expected<k3::StepProfile> p =
      k3::profileStepRows(be, plan, step, kSteps, context, copyGBps);
  if (!p)
    return p.status().withContext("--profile");
  std::fprintf(stderr,
               "decode_bench: a step of %zu rows launch by launch (events "
               "around each plan launch, median of %d; copy %.1f GB/s)\n%s",
               step.size(), kSteps, copyGBps,
               k3::formatProfileTables(*p).c_str());
  return k3::Status::ok();
}

/// --batch N: slot s filled with prompt s (greedy after it) up to position
/// context - 2, all slots stepping together; then steps of N rows, one per
/// slot at position context - 1, timed on the host clock (stepSlots waits
/// for its step). The floor counts every weight once (a batch-1 step's
/// bytes): a lower bound of the batch's, whose rows also read the experts
/// the others did not choose.
k3::Status benchBatch(const Options &o, const ModelSpec &m, const PlanSpec &ps,
                      const k3::PlanDoc &plan, k3::Backend &be,
                      double copyGBps, std::vector<Row> &rows) {
  if (be.maxBatch() < o.batch)
    return k3::makeError(ps.path, ": --batch ", o.batch,
                         " needs a plan of that many slots; it has ",
                         be.maxBatch(), " (k3c --max-batch)");
  const int64_t vocab = plan.config.vocabSize;
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t s = 0; s < o.batch; ++s) {
    std::vector<int64_t> p = promptIds(o.promptLen + s, vocab);
    prompts.emplace_back(p.begin() + s, p.end()); // a different prompt per slot
  }
  std::vector<k3::SlotStep> step(static_cast<size_t>(o.batch));
  // Greedy as a user's batch decodes: the plan's choices come back, not the
  // rows' logits (Backend::rowChoice), where the plan can.
  const bool device = be.choosesRows();
  k3::Status chosen = k3::Status::ok();
  auto tokenAt = [&](int64_t s, int64_t pos) -> int64_t {
    if (pos < o.promptLen)
      return prompts[static_cast<size_t>(s)][static_cast<size_t>(pos)];
    if (device) {
      k3::Expected<k3::GreedyChoice> c = be.rowChoice(static_cast<size_t>(s));
      if (!c) {
        chosen = c.status();
        return 0;
      }
      return c->id;
    }
    const float *l = be.rowLogits(static_cast<size_t>(s));
    return static_cast<int64_t>(std::max_element(l, l + vocab) - l);
  };
  auto setRows = [&](int64_t pos) {
    for (int64_t s = 0; s < o.batch; ++s) {
      k3::SlotStep &row = step[static_cast<size_t>(s)];
      row = {s, tokenAt(s, pos), pos};
      row.hostLogits = !device;
    }
    return chosen;
  };
  for (int64_t s = 0; s < o.batch; ++s)
    K3_RETURN_IF_ERROR(be.resetSlot(s));
  for (int64_t pos = 0; pos + 1 < o.context; ++pos) {
    K3_RETURN_IF_ERROR(setRows(pos));
    K3_RETURN_IF_ERROR(be.stepSlots(step));
  }
  K3_RETURN_IF_ERROR(setRows(o.context - 1));
  std::vector<double> us;
  for (int64_t i = -o.warmup; i < o.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    K3_RETURN_IF_ERROR(be.stepSlots(step));
    if (i >= 0)
      us.push_back(std::chrono::duration<double, std::micro>(
                       std::chrono::steady_clock::now() - t0)
                       .count());
  }
  Row r;
  r.model = m.name;
  r.fusion = ps.label.empty() ? plan.fusion : ps.label;
  r.plan = fs::path(ps.path).filename().string();
  r.backend = be.name();
  r.config = plan.config;
  r.mode = "batch-" + std::to_string(o.batch);
  r.batch = o.batch;
  r.launches = static_cast<int64_t>(plan.launches.size());
  const double n = static_cast<double>(o.batch);
  r.us = k3::median(us) / n;
  r.usMin = *std::min_element(us.begin(), us.end()) / n;
  r.usMax = *std::max_element(us.begin(), us.end()) / n;
  r.bytes = k3::stepBytes(plan, o.context, o.batch).total();
  r.floorUs = r.bytes / (copyGBps * 1e3) / n;
  rows.push_back(r);
  std::fprintf(stderr,
               "decode_bench: %s %s batch %lld: %.2f us per step (floor "
               "%.2f us: %s at %.1f GB/s)\n",
               r.model.c_str(), r.fusion.c_str(),
               static_cast<long long>(o.batch), r.us * n, r.floorUs * n,
               k3::formatBytes(static_cast<double>(r.bytes)).c_str(), copyGBps);
  if (o.profile)
    return printBatchProfile(plan, be, step, o.context, copyGBps);
  return k3::Status::ok();
}

/// --timeline: five replays of the step with the launch trace reset before
/// each, matched to the plan's launches; each launch's median span printed
/// (runtime/exec/cuda/LaunchTrace.h).
template <typename StepFn>
k3::Status printTimeline(const k3::PlanDoc &plan, const PlanSpec &ps,
                         const k3::Backend &be, StepFn step) {
  const auto *cuda = dynamic_cast<const k3::CudaBackend *>(&be);
  if (!cuda)
    return k3::makeError("--timeline needs the CUDA backend");
  k3::Expected<std::vector<uint64_t>> keys = k3::moduleKeys(plan, *cuda);
  if (!keys)
    return keys.status();
  constexpr int kReplays = 5;
  std::vector<std::vector<k3::TimelineRow>> runs;
  for (int r = 0; r < kReplays; ++r) {
    K3_RETURN_IF_ERROR(k3::resetLaunchTrace(*keys));
    K3_RETURN_IF_ERROR(step());
    k3::Expected<std::vector<k3::LaunchMark>> marks =
        k3::readLaunchTrace(*keys);
    if (!marks)
      return marks.status();
    k3::Expected<std::vector<k3::TimelineRow>> rows =
        k3::matchTimeline(plan, *keys, *marks);
    if (!rows)
      return rows.status().withContext(ps.path);
    runs.push_back(std::move(*rows));
  }
  std::vector<k3::TimelineRow> med = runs[0];
  for (size_t i = 0; i < med.size(); ++i) {
    std::vector<double> ready, span, early;
    for (const auto &run : runs) {
      ready.push_back(run[i].readyUs);
      span.push_back(run[i].spanUs);
      early.push_back(run[i].earlyUs);
    }
    med[i].readyUs = k3::median(ready);
    med[i].spanUs = k3::median(span);
    med[i].earlyUs = k3::median(early);
  }
  std::printf("timeline of %s (graph replay, median of %d):\n%s\n",
              ps.path.c_str(), kReplays, k3::formatTimeline(plan, med).c_str());
  return k3::Status::ok();
}

/// One model, one plan: bind, fill, time with and without the graph.
k3::Status benchPlan(const Options &o, const ModelSpec &m, const PlanSpec &ps,
                     k3::BackendKind kind, double &copyGBps,
                     std::string &copyMethod, std::vector<Row> &rows) {
  k3::Expected<k3::PlanDoc> plan = k3::readPlanFile(ps.path);
  if (!plan)
    return plan.status();
  if (o.context > plan->maxSeq)
    return k3::makeError(ps.path, ": --context ", o.context,
                         " exceeds the plan's max_seq ", plan->maxSeq,
                         "; compile it with a larger --max-seq");
  const auto t0 = std::chrono::steady_clock::now();
  k3::Expected<std::unique_ptr<k3::BoundPlan>> bound =
      k3::bindPlan(*plan, m.dir, kind, /*cudaGraph=*/true);
  if (!bound)
    return bound.status().withContext(ps.path);
  std::fprintf(stderr, "decode_bench: %s bound to %s in %.1f s\n",
               ps.path.c_str(), m.dir.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             t0)
                   .count());
  k3::Backend &be = *(*bound)->backend;
  if (copyGBps <= 0) {
    k3::Expected<double> c = be.measureCopyGBps(o.copyBytes);
    if (!c)
      return c.status();
    copyGBps = *c;
    copyMethod = be.copyMethod(o.copyBytes);
  }

  K3_RETURN_IF_ERROR(be.setPrefillForm(o.form));
  if (o.batch > 1)
    return benchBatch(o, m, ps, *plan, be, copyGBps, rows);

  // The state of a real decode at this context: the prompt, then the
  // greedy tokens after it.
  const int64_t vocab = plan->config.vocabSize;
  const std::vector<int64_t> prompt = promptIds(o.promptLen, vocab);
  auto tokenAt = [&](int64_t pos) {
    if (pos < o.promptLen)
      return prompt[static_cast<size_t>(pos)];
    const float *l = be.logits();
    return static_cast<int64_t>(std::max_element(l, l + vocab) - l);
  };
  K3_RETURN_IF_ERROR(be.resetState());
  for (int64_t pos = 0; pos + 1 < o.context; ++pos)
    K3_RETURN_IF_ERROR(be.step(tokenAt(pos), pos));
  const int64_t pos = o.context - 1, token = tokenAt(pos);

  const uint64_t bytes = k3::stepBytes(*plan, o.context).total();
  std::vector<bool> modes;
  if (be.replaysGraph())
    modes.push_back(true);
  modes.push_back(false);
  for (bool graph : modes) {
    std::vector<double> us;
    for (int64_t s = -o.warmup; s < o.steps; ++s) {
      k3::Expected<double> t = be.timeStep(token, pos, graph);
      if (!t)
        return t.status();
      if (s >= 0)
        us.push_back(*t);
    }
    Row r;
    r.model = m.name;
    r.fusion = ps.label.empty() ? plan->fusion : ps.label;
    r.plan = fs::path(ps.path).filename().string();
    r.backend = be.name();
    r.config = plan->config;
    r.graph = graph;
    r.mode = graph ? "graph" : "launches";
    r.launches = static_cast<int64_t>(plan->launches.size());
    r.us = k3::median(us);
    r.usMin = *std::min_element(us.begin(), us.end());
    r.usMax = *std::max_element(us.begin(), us.end());
    r.bytes = bytes;
    r.floorUs = bytes / (copyGBps * 1e3);
    rows.push_back(r);
    std::fprintf(stderr, "decode_bench: %s %s %s: %.2f us per token\n",
                 r.model.c_str(), r.fusion.c_str(),
                 graph ? "graph" : "kernel by kernel", r.us);
  }

  if (o.timeline && be.replaysGraph())
    K3_RETURN_IF_ERROR(printTimeline(*plan, ps, be, [&]() {
      return be.timeStep(token, pos, /*graph=*/true).status();
    }));

  // The decode as a user runs it: after the timed steps the step block
  // holds the next token and position; `steps` greedy steps from there,
  // chosen on the device and queued back to back, timed on the host clock
  // (the wait for the ids included).
  const int64_t chained = std::min(o.steps, plan->maxSeq - (pos + 1));
  if (be.chainsGreedy() && chained > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    k3::Expected<std::vector<k3::GreedyChoice>> c = be.chainGreedy(chained);
    if (!c)
      return c.status();
    const double us = std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - t0)
                          .count() /
                      static_cast<double>(chained);
    Row r = rows.back();
    r.graph = be.replaysGraph();
    r.mode = "greedy-chain";
    r.us = r.usMin = r.usMax = us;
    rows.push_back(r);
    std::fprintf(stderr, "decode_bench: %s %s greedy chain: %.2f us per token\n",
                 r.model.c_str(), r.fusion.c_str(), r.us);
  }
  return k3::Status::ok();
}

ojson rowJson(const Row &r, const Options &o, double copyGBps,
              const std::string &copyMethod, const std::string &gpu,
              const std::string &date, const std::string &time) {
  ojson j;
  j["model"] = r.model;
  j["geometry"] = {{"hidden", r.config.hiddenSize},
                   {"layers", r.config.numLayers},
                   {"experts", r.config.numExperts},
                   {"top_k", r.config.numExpertsPerToken},
                   {"vocab", r.config.vocabSize}};
  j["batch"] = r.batch;
  j["fusion"] = r.fusion;
  j["graph"] = r.graph;
  j["mode"] = r.mode;
  j["us_per_token"] = r.us;
  j["floor_us"] = r.floorUs;
  j["fraction_of_floor"] = r.us > 0 ? r.floorUs / r.us : 0.0;
  j["copy_gbps"] = copyGBps;
  j["gpu"] = gpu;
  j["commit"] = o.commit;
  j["date"] = date;
  j["time_utc"] = time;
  j["backend"] = r.backend;
  j["plan"] = r.plan;
  j["launches"] = r.launches;
  // A step of several rows moves r.bytes for all of them (each weight once).
  j["bytes_per_token"] =
      r.bytes / static_cast<uint64_t>(std::max<int64_t>(r.batch, 1));
  j["bytes_per_step"] = r.bytes;
  j["prefill_form"] = o.form == k3::PrefillForm::Chunk ? "chunk" : "rows";
  j["context"] = o.context;
  j["prompt_len"] = o.promptLen;
  j["steps"] = o.steps;
  j["warmup"] = o.warmup;
  j["us_min"] = r.usMin;
  j["us_max"] = r.usMax;
  j["copy_method"] = copyMethod;
  return j;
}

k3::Status writeJson(const std::string &path, const ojson &rows) {
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty())
    fs::create_directories(parent, ec);
  std::ofstream out(path);
  if (!out)
    return k3::makeError("cannot write ", path);
  out << ojson{{"benchmark", "decode_bench"}, {"results", rows}}.dump(2)
      << "\n";
  if (!out)
    return k3::makeError("cannot write ", path);
  return k3::Status::ok();
}

/// <dir>/<model>-<date>.json, or -2, -3, ... when that exists.
std::string resultPath(const std::string &dir, const std::string &model,
                       const std::string &date) {
  const std::string base = (fs::path(dir) / (model + "-" + date)).string();
  std::string path = base + ".json";
  for (int i = 2; fs::exists(path); ++i)
    path = base + "-" + std::to_string(i) + ".json";
  return path;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  bool promptGiven = false;
  int64_t copyMb = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string &out) -> bool {
      if (i + 1 >= argc)
        return false;
      out = argv[++i];
      return true;
    };
    auto intValue = [&](int64_t &out, int64_t min) -> bool {
      std::string v;
      return value(v) && parseInt(v, out) && out >= min;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      printHelp();
      return 0;
    } else if (a == "--weights") {
      if (!value(v))
        return usageError("--weights needs a model directory");
      o.models.push_back({v, modelName(v), {}});
    } else if (a == "--model") {
      if (!value(v) || o.models.empty())
        return usageError("--model NAME follows the --weights it names");
      o.models.back().name = modelName(v);
    } else if (a == "--plan") {
      if (!value(v))
        return usageError("--plan needs [LABEL=]PLAN");
      if (o.models.empty())
        return usageError("--plan follows the --weights it was compiled for");
      const size_t eq = v.find('=');
      PlanSpec ps;
      if (eq != std::string::npos && !fs::exists(v)) {
        ps.label = v.substr(0, eq);
        ps.path = v.substr(eq + 1);
      } else {
        ps.path = v;
      }
      o.models.back().plans.push_back(ps);
    } else if (a == "--backend") {
      if (!value(o.backend) || (o.backend != "cpu" && o.backend != "cuda"))
        return usageError("--backend needs cpu or cuda");
    } else if (a == "--context") {
      if (!intValue(o.context, 1))
        return usageError("--context needs an integer >= 1");
    } else if (a == "--batch") {
      if (!intValue(o.batch, 1))
        return usageError("--batch needs an integer >= 1");
    } else if (a == "--prompt-len") {
      if (!intValue(o.promptLen, 1))
        return usageError("--prompt-len needs an integer >= 1");
      promptGiven = true;
    } else if (a == "--steps") {
      if (!intValue(o.steps, 1))
        return usageError("--steps needs an integer >= 1");
    } else if (a == "--warmup") {
      if (!intValue(o.warmup, 0))
        return usageError("--warmup needs an integer >= 0");
    } else if (a == "--copy-mb") {
      if (!intValue(copyMb, 1))
        return usageError("--copy-mb needs an integer >= 1");
      o.copyBytes = static_cast<uint64_t>(copyMb) << 20;
    } else if (a == "--timeline") {
      o.timeline = true;
    } else if (a == "--profile") {
      o.profile = true;
    } else if (a == "--prefill-form") {
      if (!value(v) || (v != "rows" && v != "chunk"))
        return usageError("--prefill-form needs rows or chunk");
      o.form = v == "chunk" ? k3::PrefillForm::Chunk : k3::PrefillForm::Rows;
    } else if (a == "--commit") {
      if (!value(o.commit) || o.commit.empty())
        return usageError("--commit needs a hash");
    } else if (a == "--out-dir") {
      if (!value(o.outDir))
        return usageError("--out-dir needs a directory");
    } else if (a == "--json") {
      if (!value(o.json))
        return usageError("--json needs a file name");
    } else {
      return usageError("unexpected argument '" + a + "'");
    }
  }
  if (o.models.empty())
    return usageError("no --weights DIR given");
  if (o.profile && o.batch < 2)
    return usageError("--profile times a step of several rows: it needs "
                      "--batch N with N >= 2 (k3-run --profile profiles a "
                      "batch-1 step)");
  for (const ModelSpec &m : o.models)
    if (m.plans.empty())
      return usageError("no --plan given for " + m.dir);
  if (promptGiven && o.promptLen > o.context)
    return usageError("--prompt-len must not exceed --context");
  o.promptLen = std::min(o.promptLen, o.context);

  const k3::BackendKind kind =
      o.backend == "cuda" ? k3::BackendKind::Cuda : k3::BackendKind::Cpu;
  const std::string date = utcNow("%Y-%m-%d"), time = utcNow("%H:%M:%S");
  double copyGBps = 0;
  std::string copyMethod, gpu;
  std::vector<Row> rows;
  for (const ModelSpec &m : o.models)
    for (const PlanSpec &ps : m.plans) {
      k3::Status st = benchPlan(o, m, ps, kind, copyGBps, copyMethod, rows);
      if (!st)
        return runtimeError(st.message());
    }
  gpu = deviceName(kind);

  std::printf("decode at batch %lld, context %lld (prompt %lld), median of "
              "%lld steps after %lld warm-up; %s, commit %s\n",
              static_cast<long long>(o.batch),
              static_cast<long long>(o.context),
              static_cast<long long>(o.promptLen),
              static_cast<long long>(o.steps), static_cast<long long>(o.warmup),
              gpu.c_str(), o.commit.c_str());
  std::printf("copy bandwidth %.1f GB/s (%s)\n\n", copyGBps,
              copyMethod.c_str());
  std::printf("%-24s %-10s %-12s %8s %12s %12s %10s %9s %12s\n", "model",
              "fusion", "mode", "launches", "us/token", "floor us", "of floor",
              "tokens/s", "bytes/token");
  for (const Row &r : rows)
    std::printf(
        "%-24s %-10s %-12s %8lld %12.2f %12.2f %9.1f%% %9.1f %12s\n",
        r.model.c_str(), r.fusion.c_str(), r.mode.c_str(),
        static_cast<long long>(r.launches), r.us, r.floorUs,
        r.us > 0 ? 100.0 * r.floorUs / r.us : 0.0, r.us > 0 ? 1e6 / r.us : 0.0,
        k3::formatBytes(static_cast<double>(r.bytes) /
                        static_cast<double>(std::max<int64_t>(r.batch, 1)))
            .c_str());

  // JSON: one file per model (or every row in --json FILE).
  std::vector<std::pair<std::string, ojson>> files;
  for (const Row &r : rows) {
    const std::string key = o.json.empty() ? r.model : o.json;
    auto it = std::find_if(files.begin(), files.end(),
                           [&](const auto &f) { return f.first == key; });
    if (it == files.end()) {
      files.push_back({key, ojson::array()});
      it = files.end() - 1;
    }
    it->second.push_back(rowJson(r, o, copyGBps, copyMethod, gpu, date, time));
  }
  for (const auto &[key, array] : files) {
    const std::string path =
        o.json.empty() ? resultPath(o.outDir, key, date) : o.json;
    k3::Status st = writeJson(path, array);
    if (!st)
      return runtimeError(st.message());
    std::printf("\nwrote %s\n", path.c_str());
  }
  return 0;
}
