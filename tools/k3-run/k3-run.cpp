//===- k3-run.cpp - Run a k3c plan: greedy decode from a prompt -----------===//
//
// A thin main over Session. Two modes: `k3-run PLAN --weights DIR ...` reads
// the plan file; a binary made by `k3c --emit=exe` is this program with a
// plan appended (Executable.h), and then PLAN is omitted. Generated ids go to
// stdout as they are produced (one flush per token); the timing summary goes
// to stderr so stdout stays machine-readable. With --check-against cpu the
// decode runs launch by launch and every launch is checked against the CPU
// kernels on the same inputs (runtime/Differential.h). With --profile the
// decode is followed by a profile of its next step (runtime/Profile.h): each
// launch timed alone, whole steps, by kernel and by layer part against the
// bytes they move and the measured copy bandwidth, printed to stderr. Exit
// codes: 0 ok, 1 runtime error (bad plan, weights, request), 2 bad command
// line, 3 a launch out of tolerance.
//
//===----------------------------------------------------------------------===//
#include "runtime/Differential.h"
#include "runtime/Executable.h"
#include "runtime/Npy.h"
#include "runtime/Plan.h"
#include "runtime/Profile.h"
#include "runtime/Session.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitMismatch = 3;

std::string g_prog = "k3-run";

void printHelp(std::FILE *out, bool embedded) {
  const char *p = g_prog.c_str();
  if (embedded)
    std::fprintf(out,
                 "usage: %s --weights DIR --prompt-ids IDS --max-new N "
                 "[options]\n\n"
                 "Decodes greedily with the plan built into this binary.\n",
                 p);
  else
    std::fprintf(out,
                 "usage: %s PLAN --weights DIR --prompt-ids IDS --max-new N "
                 "[options]\n\n"
                 "Decodes greedily with a plan made by k3c.\n",
                 p);
  std::fprintf(
      out,
      "\n"
      "The prompt is fed one token per step; each next token is the argmax\n"
      "of the logits (ties to the lowest id), with no stop at EOS. Generated\n"
      "ids are printed to stdout as they are produced; a timing summary goes\n"
      "to stderr.\n"
      "\n"
      "options:\n"
      "  --weights DIR        model directory (config.json + safetensors);\n"
      "                       its config must match the plan's\n"
      "  --prompt-ids IDS     comma-separated token ids, e.g. 1,2,3\n"
      "  --max-new N          tokens to generate (>= 1); prompt + N must not\n"
      "                       exceed the plan's max_seq\n"
      "  --backend cpu|cuda   where to run (default cpu); cuda needs an\n"
      "                       NVIDIA driver and a build with nvcc\n"
      "  --no-cuda-graph      launch kernel by kernel instead of replaying\n"
      "                       one CUDA graph per step (debugging, timing)\n"
      "  --check-against cpu  debugging: decode launch by launch and check\n"
      "                       each launch's outputs against the CPU kernels\n"
      "                       run on the same inputs, within that kernel's\n"
      "                       tolerance (bit-identical with --backend cpu);\n"
      "                       names the first launch out of tolerance\n"
      "                       (kernel, op, launch, step, field, errors) and\n"
      "                       exits 3, else prints one OK line to stderr\n"
      "  --profile            after the decode, profile its next step (the\n"
      "                       state refilled with the same tokens): each\n"
      "                       launch timed alone (CUDA events / wall clock),\n"
      "                       whole steps (graph replay and kernel by\n"
      "                       kernel), tables by kernel and by layer part\n"
      "                       with bytes, GB/s and the share of the copy\n"
      "                       bandwidth measured in this process, and the\n"
      "                       step against its bandwidth floor (stderr)\n"
      "  --profile-steps N    timed steps of each kind (default 20, after 3\n"
      "                       warm-up steps)\n"
      "  --logits-out FILE    write the logits that chose each generated\n"
      "                       token as float32 .npy [max_new, vocab]\n"
      "  --quiet              print only the generated ids\n"
      "  -h, --help           show this help\n"
      "\n"
      "exit status: 0 ok, 1 runtime error, 2 bad command line, 3 a launch\n"
      "out of tolerance (--check-against)\n");
}

int usageError(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", g_prog.c_str(), message.c_str());
  std::fprintf(stderr, "run '%s --help' for usage\n", g_prog.c_str());
  return kExitUsage;
}

int runtimeError(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", g_prog.c_str(), message.c_str());
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

bool parseIds(const std::string &text, std::vector<int64_t> &out) {
  out.clear();
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string piece = text.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    int64_t v = 0;
    if (!parseInt(piece, v))
      return false;
    out.push_back(v);
    if (comma == std::string::npos)
      return true;
    start = comma + 1;
  }
}

/// --profile: binds the plan again (the session is gone, so the memory is
/// free), refills the state with the tokens the decode fed, then profiles
/// the step the decode would take next.
int runProfile(const k3::PlanDoc &plan, const std::string &weights,
               k3::BackendKind kind, bool cudaGraph,
               const std::vector<int64_t> &prompt,
               const std::vector<int64_t> &generated, int64_t steps) {
  k3::Expected<std::unique_ptr<k3::BoundPlan>> bound =
      k3::bindPlan(plan, weights, kind, cudaGraph);
  if (!bound)
    return runtimeError(bound.message());
  k3::Backend &be = *(*bound)->backend;
  std::vector<int64_t> fed = prompt;
  fed.insert(fed.end(), generated.begin(), generated.end() - 1);
  k3::Status st = be.resetState();
  for (size_t i = 0; st && i < fed.size(); ++i)
    st = be.step(fed[i], static_cast<int64_t>(i));
  if (!st)
    return runtimeError(st.withContext("refilling the state").message());
  k3::ProfileOptions opt;
  opt.steps = steps;
  opt.pos = static_cast<int64_t>(fed.size());
  opt.token = generated.back();
  k3::Expected<k3::StepProfile> p = k3::profileStep(be, plan, opt);
  if (!p)
    return runtimeError(p.message());
  std::fprintf(stderr, "%s", k3::formatProfile(*p).c_str());
  return 0;
}

/// --check-against cpu: the ids on stdout as they are chosen, then the
/// differential's one-line verdict on stderr.
int runCheck(const k3::PlanDoc &plan, const std::string &weights,
             k3::BackendKind kind, const std::vector<int64_t> &prompt,
             int64_t maxNew, const std::string &logitsOut, bool quiet) {
  k3::DifferentialOptions opt;
  opt.keepLogits = !logitsOut.empty();
  bool printed = false;
  opt.onToken = [&](int64_t index, int64_t token) {
    printed = true;
    std::printf(index == 0 ? "%lld" : " %lld", static_cast<long long>(token));
    std::fflush(stdout);
  };
  std::string name;
  k3::Expected<k3::DifferentialReport> r =
      k3::checkAgainstCpu(plan, weights, kind, prompt, maxNew, opt, &name);
  if (printed)
    std::printf("\n");
  std::fflush(stdout);
  if (!r)
    return runtimeError(r.message());
  if (!r->ok()) {
    std::fprintf(stderr, "%s: error: %s\n", g_prog.c_str(),
                 r->summary(name).c_str());
    return kExitMismatch;
  }
  if (!logitsOut.empty()) {
    k3::Status s = k3::writeNpyF32(logitsOut, r->logits.data(), maxNew,
                                   plan.config.vocabSize);
    if (!s)
      return runtimeError(s.message());
  }
  if (!quiet)
    std::fprintf(stderr, "%s: %s\n", g_prog.c_str(), r->summary(name).c_str());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc > 0 && argv[0]) {
    g_prog = argv[0];
    const size_t slash = g_prog.rfind('/');
    if (slash != std::string::npos)
      g_prog = g_prog.substr(slash + 1);
  }

  // Executable mode: a plan after our own bytes.
  k3::Expected<std::optional<std::string>> embedded = k3::findEmbeddedPlan();
  if (!embedded)
    return runtimeError(embedded.message());
  const bool isExe = embedded->has_value();

  std::string planPath, weights, promptText, backend = "cpu", logitsOut,
                                             checkAgainst;
  int64_t maxNew = -1, profileSteps = 20;
  bool quiet = false, haveMaxNew = false, cudaGraph = true, profile = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string &out) -> bool {
      if (i + 1 >= argc)
        return false;
      out = argv[++i];
      return true;
    };
    if (a == "-h" || a == "--help") {
      printHelp(stdout, isExe);
      return 0;
    } else if (a == "--weights") {
      if (!value(weights))
        return usageError("--weights needs a directory");
    } else if (a == "--prompt-ids") {
      if (!value(promptText))
        return usageError("--prompt-ids needs a list like 1,2,3");
    } else if (a == "--max-new") {
      std::string v;
      if (!value(v) || !parseInt(v, maxNew) || maxNew < 1)
        return usageError("--max-new needs an integer >= 1");
      haveMaxNew = true;
    } else if (a == "--backend") {
      if (!value(backend))
        return usageError("--backend needs cpu or cuda");
    } else if (a == "--check-against") {
      if (!value(checkAgainst) || checkAgainst != "cpu")
        return usageError("--check-against needs cpu (the only reference)");
    } else if (a == "--logits-out") {
      if (!value(logitsOut))
        return usageError("--logits-out needs a file name");
    } else if (a == "--profile") {
      profile = true;
    } else if (a == "--profile-steps") {
      std::string v;
      if (!value(v) || !parseInt(v, profileSteps) || profileSteps < 1)
        return usageError("--profile-steps needs an integer >= 1");
      profile = true;
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--no-cuda-graph") {
      cudaGraph = false;
    } else if (!a.empty() && a[0] == '-') {
      return usageError("unknown option '" + a + "'");
    } else if (planPath.empty() && !isExe) {
      planPath = a;
    } else if (isExe) {
      return usageError("this executable carries its own plan; unexpected "
                        "argument '" +
                        a + "'");
    } else {
      return usageError("unexpected argument '" + a + "' (one PLAN only)");
    }
  }
  if (!isExe && planPath.empty())
    return usageError("no PLAN given");
  if (weights.empty())
    return usageError("--weights DIR is required");
  if (promptText.empty())
    return usageError("--prompt-ids is required");
  if (!haveMaxNew)
    return usageError("--max-new is required");
  std::vector<int64_t> prompt;
  if (!parseIds(promptText, prompt))
    return usageError("--prompt-ids must be comma-separated integers, got '" +
                      promptText + "'");
  if (backend != "cpu" && backend != "cuda")
    return usageError("--backend must be cpu or cuda, got '" + backend + "'");
  if (profile && !checkAgainst.empty())
    return usageError("--profile and --check-against are separate runs");

  k3::Expected<k3::PlanDoc> plan =
      isExe ? k3::parsePlan(**embedded, "embedded plan")
            : k3::readPlanFile(planPath);
  if (!plan)
    return runtimeError(plan.message());
  const k3::BackendKind kind =
      backend == "cuda" ? k3::BackendKind::Cuda : k3::BackendKind::Cpu;
  if (!checkAgainst.empty())
    return runCheck(*plan, weights, kind, prompt, maxNew, logitsOut, quiet);
  k3::Expected<std::unique_ptr<k3::Session>> session =
      k3::Session::open(plan.take(), weights, kind, cudaGraph);
  if (!session)
    return runtimeError(session.message());

  bool printed = false;
  k3::Expected<k3::GenerateResult> result = (*session)->generate(
      prompt, maxNew, !logitsOut.empty(), [&](int64_t index, int64_t token) {
        printed = true;
        std::printf(index == 0 ? "%lld" : " %lld",
                    static_cast<long long>(token));
        std::fflush(stdout);
      });
  if (!result) {
    if (printed)
      std::printf("\n");
    return runtimeError(result.message());
  }
  std::printf("\n");
  std::fflush(stdout);
  if (!logitsOut.empty()) {
    k3::Status s = k3::writeNpyF32(logitsOut, result->logits.data(), maxNew,
                                   result->vocab);
    if (!s)
      return runtimeError(s.message());
  }
  if (!quiet) {
    const double promptRate = result->promptSeconds > 0
                                  ? result->promptTokens / result->promptSeconds
                                  : 0.0;
    std::fprintf(stderr,
                 "%s: %lld tokens generated (%s); prompt %lld tokens in "
                 "%.3f s (%.1f tokens/s); decode %lld steps in %.3f s (%.1f "
                 "tokens/s)\n",
                 g_prog.c_str(), static_cast<long long>(result->tokens.size()),
                 (*session)->backendName().c_str(),
                 static_cast<long long>(result->promptTokens),
                 result->promptSeconds, promptRate,
                 static_cast<long long>(result->decodeSteps),
                 result->decodeSeconds, result->decodeTokensPerSecond());
  }
  if (profile) {
    k3::PlanDoc planCopy = (*session)->plan();
    session->reset(); // free the first binding's memory
    return runProfile(planCopy, weights, kind, cudaGraph, prompt,
                      result->tokens, profileSteps);
  }
  return 0;
}
