//===- k3-run.cpp - Run a k3c plan: decode from prompts -------------------===//
//
// A thin main over Session. Two modes: `k3-run PLAN --weights DIR ...` reads
// the plan file; a binary made by `k3c --emit=exe` is this program with a
// plan appended (Executable.h), and then PLAN is omitted. The command line is
// parsed with CLI11; every value is then checked here so that the messages
// say what a good value looks like (docs/RUN.md has the whole reference).
//
// Prompts come from --prompt-ids or a --prompts file and are decoded one
// after another (batch 1). Generated ids go to stdout as they are produced
// (one flush per token), one line per prompt, prefixed by the prompt's line
// number when a file has several; the timing summary goes to stderr so
// stdout stays machine-readable. A sequence ends at --max-new tokens or when
// it emits a stop id (--stop-ids, and the config's eos_token_id unless
// --ignore-eos). Tokens are greedy unless --temperature asks for sampling
// (runtime/exec/Sampling.h). --snapshot-out / --snapshot-in save and restore the
// state after a shared prefix (SnapshotFile.h).
//
// With --check-against cpu the decode runs launch by launch and every launch
// is checked against the CPU kernels on the same inputs
// (runtime/exec/Differential.h). With --profile the decode is followed by a
// profile of its next step (runtime/exec/Profile.h). Exit codes: 0 ok, 1 runtime
// error (bad plan, weights, prompts file, snapshot, request), 2 bad command
// line, 3 a launch out of tolerance.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Differential.h"
#include "runtime/exec/Profile.h"
#include "runtime/exec/RankGroup.h"
#include "runtime/exec/Session.h"
#include "runtime/io/AtomicFile.h"
#include "runtime/io/Npy.h"
#include "runtime/plan/Executable.h"
#include "runtime/plan/Plan.h"
#include "tools/k3-run/PromptFile.h"
#include "tools/k3-run/SnapshotFile.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitMismatch = 3;

std::string g_prog = "k3-run";

int usageError(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", g_prog.c_str(), message.c_str());
  std::fprintf(stderr, "run '%s --help' for usage\n", g_prog.c_str());
  return kExitUsage;
}

int runtimeError(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", g_prog.c_str(), message.c_str());
  return kExitFailure;
}

//===----------------------------------------------------------------------===//
// The command line
//===----------------------------------------------------------------------===//

/// Every option as given (values as text: they are checked below, with
/// messages of our own).
struct Args {
  std::string plan, weights, promptIds, prompts, maxNew, stopIds, temperature,
      topP, seed, snapshotOut, snapshotIn, prefixLen, batch, prefillChunk,
      prefillForm, backend = "cpu", checkAgainst, logitsOut, profileSteps;
  bool ignoreEos = false, noCudaGraph = false, profile = false, quiet = false,
       hostGreedy = false;
  std::vector<std::string> extras; ///< what CLI11 did not recognise
  /// Plans after the first: the other ranks of a tensor-parallel model.
  std::vector<std::string> rankPlans;
};

/// CLI11's layout with our usage line, since the plan is positional only
/// for k3-run and absent in an executable.
class HelpFormatter : public CLI::Formatter {
public:
  explicit HelpFormatter(std::string usage) : usage_(std::move(usage)) {
    column_width(24);
    label("Positionals", "Plan");
  }
  /// The usage line, the description, the positionals, each group of
  /// options (one blank line between them: CLI11 2.1 puts two) and the
  /// footer.
  std::string make_help(const CLI::App *app, std::string,
                        CLI::AppFormatMode) const override {
    std::string out = usage_ + "\n" + app->get_description() + "\n";
    out += make_positionals(app);
    for (const std::string &group : app->get_groups()) {
      std::vector<const CLI::Option *> opts =
          app->get_options([&](const CLI::Option *opt) {
            return opt->get_group() == group && opt->nonpositional();
          });
      if (!group.empty() && !opts.empty())
        out += make_group(group, false, opts);
    }
    return out + "\n" + make_footer(app);
  }

private:
  std::string usage_;
};

std::string footer(bool embedded) {
  const std::string run =
      "  " + g_prog + (embedded ? "" : " model.plan") + " --weights /tmp/tiny ";
  std::string examples;
  for (const char *e :
       {"--prompt-ids 1,2,3 --max-new 32",
        "--prompts prompts.txt --max-new 64 \\\n"
        "      --stop-ids 7,9 --temperature 0.7 --top-p 0.9 --seed 1",
        "--prompt-ids 1,2,3,4,5 --max-new 8 \\\n"
        "      --snapshot-out prefix.snap --prefix-len 3",
        "--prompt-ids 1,2,3,9 --max-new 8 --snapshot-in prefix.snap",
        "--prompt-ids 1,2,3 --max-new 8 --backend cuda --check-against cpu"})
    examples += run + e + "\n";
  if (!embedded)
    examples += "  " + g_prog +
                " rank0.plan rank1.plan --weights /tmp/tiny --prompt-ids "
                "1,2,3 --max-new 8\n"
                "      (a model split by k3c --tp 2 --rank 0 / --rank 1)\n";
  return "How it decodes:\n"
         "  Each prompt is fed --prefill-chunk tokens per step (a row per\n"
         "  token, launch by launch over the chunk), then tokens are chosen\n"
         "  one at a time: the argmax of the logits (ties to the lowest id),\n"
         "  or a sample with --temperature. A sequence ends after --max-new\n"
         "  tokens or at a stop id (printed as its last id). Prompts are\n"
         "  decoded one after another, or up to --batch of them together\n"
         "  with a plan compiled by k3c --max-batch B (each in its own slot;\n"
         "  a sequence's tokens do not depend on the others). The ids of each\n"
         "  go to stdout on one line (\"LINE: ids\" when a --prompts file has\n"
         "  several; a batch prints each line when it and those before it are\n"
         "  done); a timing summary with prefill and decode tokens/s goes to\n"
         "  stderr.\n"
         "\n"
         "Examples:\n" +
         examples +
         "\n"
         "exit status: 0 ok, 1 runtime error, 2 bad command line, 3 a launch\n"
         "out of tolerance (--check-against)\n"
         "See docs/RUN.md for the prompts and snapshot file formats.";
}

/// Declares every option on `app`, bound to `a`.
void declareOptions(CLI::App &app, Args &a, bool embedded) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.allow_extras();
  app.set_help_flag(); // added last, in the output group
  app.formatter(std::make_shared<HelpFormatter>(
      "usage: " + g_prog + (embedded ? "" : " PLAN") +
      " --weights DIR (--prompt-ids IDS | --prompts FILE) --max-new N "
      "[options]\n"));
  app.footer(footer(embedded));
  const char *model = "Model and prompts";
  if (!embedded)
    app.add_option("PLAN", a.plan,
                   "a plan made by k3c (model.plan); a tensor-parallel\n"
                   "model (k3c --tp N --rank R) is its N plans,\n"
                   "in any order, run together (each rank a thread;\n"
                   "with --backend cuda all on the one GPU)")
        ->type_name("")
        ->group(model);
  app.add_option("--weights", a.weights,
                 "model directory (config.json + safetensors);\n"
                 "its config must match the plan's. Or\n"
                 "synthetic:SEED: the plan's model with weights\n"
                 "made in memory from SEED (the bytes\n"
                 "k3-mkmodel --real-dtypes --seed SEED writes;\n"
                 "any size, no files: the GPU gets them one\n"
                 "weight at a time)")
      ->type_name("DIR")
      ->group(model);
  app.add_option("--prompt-ids", a.promptIds,
                 "one prompt: token ids separated by commas\n"
                 "or spaces, e.g. 1,2,3 or \"1 2 3\"")
      ->type_name("IDS")
      ->group(model);
  app.add_option("--prompts", a.prompts,
                 "several prompts, one line of ids each, e.g.\n"
                 "  1,2,3\n"
                 "  # a comment\n"
                 "  1 5 9\n"
                 "(blank lines and # comments are skipped;\n"
                 "errors name the file and line)")
      ->type_name("FILE")
      ->group(model);
  app.add_option("--batch", a.batch,
                 "decode up to N prompts together, each in its\n"
                 "own slot (N <= the plan's max_batch, set by\n"
                 "k3c --max-batch; default: max_batch)")
      ->type_name("N")
      ->group(model);
  app.add_option("--prefill-chunk", a.prefillChunk,
                 "feed each prompt N tokens per step (default 64;\n"
                 "1: one token per step); the same ids either way")
      ->type_name("N")
      ->group(model);
  app.add_option("--prefill-form", a.prefillForm,
                 "how a step of several rows runs (a prompt's\n"
                 "chunks, a batch's decode steps): rows, bit for bit\n"
                 "as one step per token; chunk, within rounding of\n"
                 "it: KDA in the chunk (WY) form of the delta rule,\n"
                 "and on the GPU the projections and the MoE of 16\n"
                 "rows or more on the tensor cores and MLA over tiles\n"
                 "of rows (several times faster there); auto\n"
                 "(default), chunk with --backend cuda and rows\n"
                 "otherwise (--check-against and tensor-parallel\n"
                 "models: rows)")
      ->type_name("auto|rows|chunk")
      ->group(model);
  app.add_option("--max-new", a.maxNew,
                 "the most tokens to generate per prompt (>= 1);\n"
                 "prompt + N must not exceed the plan's max_seq")
      ->type_name("N")
      ->group(model);

  const char *stop = "Stopping";
  app.add_option("--stop-ids", a.stopIds,
                 "end a sequence when it emits one of these ids\n"
                 "(printed as its last id), e.g. 7,9")
      ->type_name("IDS")
      ->group(stop);
  app.add_flag("--ignore-eos", a.ignoreEos,
               "do not stop at the config's eos_token_id\n"
               "(by default it is a stop id)")
      ->group(stop);

  const char *sampling = "Sampling (greedy without --temperature)";
  app.add_option("--temperature", a.temperature,
                 "sample from softmax(logits / T), T > 0,\n"
                 "e.g. --temperature 0.7")
      ->type_name("T")
      ->group(sampling);
  app.add_option("--top-p", a.topP,
                 "sample only from the smallest set of most\n"
                 "likely tokens (ties by lower id) whose\n"
                 "probability reaches P, 0 < P <= 1 (default 1),\n"
                 "e.g. --top-p 0.9")
      ->type_name("P")
      ->group(sampling);
  app.add_option("--seed", a.seed,
                 "sampling seed (default 0): one seed gives one\n"
                 "sequence for a prompt, on every machine")
      ->type_name("S")
      ->group(sampling);

  const char *snap = "Prefix snapshots";
  app.add_option("--snapshot-out", a.snapshotOut,
                 "save the state after the first prompt's first\n"
                 "--prefix-len tokens (default: all of them) to\n"
                 "FILE, written atomically; prompts that start\n"
                 "with that prefix then restore it")
      ->type_name("FILE")
      ->group(snap);
  app.add_option("--prefix-len", a.prefixLen,
                 "with --snapshot-out: the prefix length, e.g.\n"
                 "--prefix-len 3")
      ->type_name("N")
      ->group(snap);
  app.add_option("--snapshot-in", a.snapshotIn,
                 "restore a snapshot made with this plan instead\n"
                 "of feeding its tokens; every prompt must start\n"
                 "with them")
      ->type_name("FILE")
      ->group(snap);

  const char *where = "Backend";
  app.add_option("--backend", a.backend,
                 "where to run (default cpu); cuda needs an\n"
                 "NVIDIA driver and a build with nvcc")
      ->type_name("cpu|cuda")
      ->group(where);
  app.add_flag("--no-cuda-graph", a.noCudaGraph,
               "launch kernel by kernel instead of replaying\n"
               "one CUDA graph per step (debugging, timing)")
      ->group(where);
  app.add_flag("--host-greedy", a.hostGreedy,
               "choose greedy tokens on the host from the copied\n"
               "logits, waiting for each step (by default the\n"
               "plan's argmax chooses them on the device and the\n"
               "steps run back to back; in a batch only each\n"
               "row's id comes back; the same tokens)")
      ->group(where);

  const char *output = "Output";
  app.add_option("--logits-out", a.logitsOut,
                 "write the logits that chose each generated\n"
                 "token as float32 .npy [tokens, vocab] (the\n"
                 "rows of every prompt, in output order)")
      ->type_name("FILE")
      ->group(output);
  app.add_flag("--quiet", a.quiet, "print only the generated ids")
      ->group(output);
  app.set_help_flag("-h,--help", "show this help")->group(output);

  const char *debug = "Debugging and profiling";
  app.add_option("--check-against", a.checkAgainst,
                 "decode launch by launch (greedily, --max-new\n"
                 "steps) and check each launch's outputs against\n"
                 "the CPU kernels run on the same inputs, within\n"
                 "that kernel's tolerance (bit-identical with\n"
                 "--backend cpu); names the first launch out of\n"
                 "tolerance (kernel, op, launch, step, field,\n"
                 "errors) and exits 3, else prints one OK line")
      ->type_name("cpu")
      ->group(debug);
  app.add_flag("--profile", a.profile,
               "after the decode, profile the last prompt's\n"
               "prefill (its chunks timed launch by launch: a\n"
               "table by kernel and by layer part) and the\n"
               "next decode step (the state refilled with the\n"
               "same tokens): each\n"
               "launch timed alone (CUDA events / wall clock),\n"
               "whole steps (graph replay and kernel by\n"
               "kernel), tables by kernel and by layer part\n"
               "with bytes, GB/s and the share of the copy\n"
               "bandwidth measured in this process, and the\n"
               "step against its bandwidth floor (stderr)")
      ->group(debug);
  app.add_option("--profile-steps", a.profileSteps,
                 "timed steps of each kind (default 20, after 3\n"
                 "warm-up steps); implies --profile")
      ->type_name("N")
      ->group(debug);
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

bool parseU64(const std::string &text, uint64_t &out) {
  if (text.empty() || text[0] < '0' || text[0] > '9')
    return false;
  errno = 0;
  char *end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0')
    return false;
  out = v;
  return true;
}

bool parseFinite(const std::string &text, double &out) {
  if (text.empty())
    return false;
  errno = 0;
  char *end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v))
    return false;
  out = v;
  return true;
}

/// The checked request.
struct Request {
  bool embedded = false;
  std::vector<k3::Prompt> prompts; ///< from --prompt-ids when given
  int64_t maxNew = 0, profileSteps = 20, prefixLen = 0; ///< 0: whole prompt
  int64_t batch = 0; ///< --batch; 0: the plan's max_batch
  int64_t prefillChunk = k3::kDefaultPrefillChunk;
  k3::PrefillForm prefillForm = k3::PrefillForm::Rows;
  std::vector<int64_t> stopIds;
  k3::SamplingParams sampling;
  k3::BackendKind kind = k3::BackendKind::Cpu;
};

/// The checks that need nothing but the command line; "" when all pass.
std::string checkArgs(Args &a, Request &r) {
  for (const std::string &x : a.extras) {
    if (!x.empty() && x[0] == '-')
      return "unknown option '" + x + "'";
    if (r.embedded)
      return "this executable carries its own plan; unexpected argument '" + x +
             "'";
    a.rankPlans.push_back(x); // the other ranks' plans
  }
  if (!a.rankPlans.empty()) {
    // A tensor-parallel model runs its ranks as threads on the CPU backend,
    // one prompt after another.
    const std::pair<bool, const char *> unsupported[] = {
        {!a.checkAgainst.empty(), "--check-against"},
        {a.profile || !a.profileSteps.empty(), "--profile"},
        {!a.snapshotIn.empty() || !a.snapshotOut.empty(), "snapshots"},
        {!a.batch.empty(), "--batch"},
        {a.prefillForm == "chunk", "--prefill-form chunk"}};
    for (const auto &[given, what] : unsupported)
      if (given)
        return std::string(what) +
               " does not run a tensor-parallel model (several PLANs, one "
               "per rank) yet";
  }
  if (!r.embedded && a.plan.empty())
    return "no PLAN given";
  if (a.weights.empty())
    return "--weights DIR is required";
  if (a.promptIds.empty() && a.prompts.empty())
    return "--prompt-ids IDS or --prompts FILE is required";
  if (!a.promptIds.empty() && !a.prompts.empty())
    return "--prompt-ids and --prompts are alternatives; give one";
  if (a.maxNew.empty())
    return "--max-new is required";
  if (!parseInt(a.maxNew, r.maxNew) || r.maxNew < 1)
    return "--max-new needs an integer >= 1";
  if (!a.batch.empty() && (!parseInt(a.batch, r.batch) || r.batch < 1))
    return "--batch needs an integer >= 1, got '" + a.batch + "'";
  if (!a.prefillChunk.empty() &&
      (!parseInt(a.prefillChunk, r.prefillChunk) || r.prefillChunk < 1 ||
       r.prefillChunk > k3::kMaxStepRows))
    return "--prefill-chunk needs an integer in [1, " +
           std::to_string(k3::kMaxStepRows) + "], got '" + a.prefillChunk + "'";
  if (a.prefillForm == "chunk")
    r.prefillForm = k3::PrefillForm::Chunk;
  else if (!a.prefillForm.empty() && a.prefillForm != "rows" &&
           a.prefillForm != "auto")
    return "--prefill-form needs auto, rows or chunk, got '" + a.prefillForm +
           "'";
  // auto: the GPU's fast form where nothing compares bits.
  if ((a.prefillForm.empty() || a.prefillForm == "auto") &&
      a.backend == "cuda" && a.checkAgainst.empty() && a.rankPlans.empty())
    r.prefillForm = k3::PrefillForm::Chunk;
  if (r.prefillForm == k3::PrefillForm::Chunk && !a.checkAgainst.empty())
    return "--check-against compares one token per step; it takes no "
           "--prefill-form chunk";
  if (!a.promptIds.empty()) {
    k3::Prompt p;
    if (k3::Status s = k3::parseIdList(a.promptIds, p.ids); !s)
      return "--prompt-ids must be comma- or space-separated integers, got '" +
             a.promptIds + "': " + s.message();
    r.prompts.push_back(std::move(p));
  }
  if (!a.stopIds.empty())
    if (k3::Status s = k3::parseIdList(a.stopIds, r.stopIds); !s)
      return "--stop-ids must be comma- or space-separated integers, got '" +
             a.stopIds + "': " + s.message();
  if (!a.temperature.empty() &&
      (!parseFinite(a.temperature, r.sampling.temperature) ||
       r.sampling.temperature <= 0))
    return "--temperature needs a number > 0, got '" + a.temperature +
           "' (leave it out for greedy decoding)";
  if (!a.topP.empty() && (!parseFinite(a.topP, r.sampling.topP) ||
                          !(r.sampling.topP > 0 && r.sampling.topP <= 1)))
    return "--top-p needs a number in (0, 1], got '" + a.topP + "'";
  if (!a.seed.empty() && !parseU64(a.seed, r.sampling.seed))
    return "--seed needs an integer in [0, 2^64), got '" + a.seed + "'";
  if ((!a.topP.empty() || !a.seed.empty()) && a.temperature.empty())
    return std::string(a.topP.empty() ? "--seed" : "--top-p") +
           " applies only when sampling: add --temperature T";
  if (!a.prefixLen.empty()) {
    if (a.snapshotOut.empty())
      return "--prefix-len goes with --snapshot-out";
    if (!parseInt(a.prefixLen, r.prefixLen) || r.prefixLen < 1)
      return "--prefix-len needs an integer >= 1";
    if (!r.prompts.empty() &&
        r.prefixLen > static_cast<int64_t>(r.prompts[0].ids.size()))
      return "--prefix-len " + a.prefixLen + " is longer than the prompt (" +
             std::to_string(r.prompts[0].ids.size()) + " tokens)";
  }
  if (!a.snapshotOut.empty() && !a.snapshotIn.empty())
    return "--snapshot-out and --snapshot-in are separate runs";
  if (a.backend != "cpu" && a.backend != "cuda")
    return "--backend must be cpu or cuda, got '" + a.backend + "'";
  r.kind = a.backend == "cuda" ? k3::BackendKind::Cuda : k3::BackendKind::Cpu;
  if (!a.checkAgainst.empty()) {
    if (a.checkAgainst != "cpu")
      return "--check-against needs cpu (the only reference)";
    if (!a.temperature.empty())
      return "--check-against decodes greedily; drop --temperature";
    if (!a.snapshotIn.empty() || !a.snapshotOut.empty())
      return "--check-against decodes from a fresh state; drop the snapshot "
             "options";
  }
  if (!a.profileSteps.empty() &&
      (!parseInt(a.profileSteps, r.profileSteps) || r.profileSteps < 1))
    return "--profile-steps needs an integer >= 1";
  if ((a.profile || !a.profileSteps.empty()) && !a.checkAgainst.empty())
    return "--profile and --check-against are separate runs";
  if (!a.batch.empty() && !a.checkAgainst.empty())
    return "--check-against decodes one prompt at a time; drop --batch";
  return "";
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

/// Where a prompt came from, for messages: "FILE:LINE" or "".
std::string where(const Args &a, const k3::Prompt &p) {
  return p.line > 0 ? a.prompts + ":" + std::to_string(p.line) : "";
}

k3::Status inContext(const k3::Status &s, const std::string &context) {
  return context.empty() ? s : s.withContext(context);
}

/// Prints one sequence's ids as they come: "LINE: " first when the run has
/// several prompts; nothing after a stop id (for --check-against, whose
/// decode goes on to --max-new).
class IdPrinter {
public:
  IdPrinter(const k3::Prompt &p, bool numbered,
            const std::vector<int64_t> &stopIds)
      : line_(numbered ? p.line : 0), stopIds_(stopIds) {}
  void operator()(int64_t, int64_t token) {
    if (done_)
      return;
    if (printed_ == 0 && line_ > 0)
      std::printf("%lld: ", static_cast<long long>(line_));
    std::printf(printed_ == 0 ? "%lld" : " %lld",
                static_cast<long long>(token));
    std::fflush(stdout);
    ++printed_;
    done_ =
        std::find(stopIds_.begin(), stopIds_.end(), token) != stopIds_.end();
  }
  /// Ends the line (once something or nothing was printed).
  void finish() {
    std::printf("\n");
    std::fflush(stdout);
  }
  bool any() const { return printed_ > 0; }
  int64_t printed() const { return printed_; }

private:
  int64_t line_;
  const std::vector<int64_t> &stopIds_;
  int64_t printed_ = 0;
  bool done_ = false;
};

/// --profile: binds the plan again (the session is gone, so the memory is
/// free), refills the state with the tokens the decode fed — the prompt in
/// the run's chunks, timed (the prefill table) — then profiles the step the
/// decode would take next.
int runProfile(const k3::PlanDoc &plan, const std::string &weights,
               const Request &req, bool cudaGraph,
               const std::vector<int64_t> &prompt,
               const std::vector<int64_t> &generated) {
  k3::Expected<std::unique_ptr<k3::BoundPlan>> bound =
      k3::bindPlan(plan, weights, req.kind, cudaGraph);
  if (!bound)
    return runtimeError(bound.message());
  k3::Backend &be = *(*bound)->backend;
  k3::Status st = be.setPrefillForm(req.prefillForm);
  if (st && be.timesStepSlots()) {
    k3::Expected<k3::PrefillProfile> pre =
        k3::profilePrefill(be, plan, prompt, req.prefillChunk);
    if (!pre)
      return runtimeError(pre.message());
    std::fprintf(stderr, "%s\n", k3::formatPrefillProfile(*pre).c_str());
  } else if (st) {
    st = be.resetState();
    for (size_t i = 0; st && i < prompt.size(); ++i)
      st = be.step(prompt[i], static_cast<int64_t>(i));
  }
  std::vector<int64_t> fed = prompt;
  fed.insert(fed.end(), generated.begin(), generated.end() - 1);
  for (size_t i = prompt.size(); st && i < fed.size(); ++i)
    st = be.step(fed[i], static_cast<int64_t>(i));
  if (!st)
    return runtimeError(st.withContext("refilling the state").message());
  k3::ProfileOptions opt;
  opt.steps = req.profileSteps;
  opt.pos = static_cast<int64_t>(fed.size());
  opt.token = generated.back();
  k3::Expected<k3::StepProfile> p = k3::profileStep(be, plan, opt);
  if (!p)
    return runtimeError(p.message());
  std::fprintf(stderr, "%s", k3::formatProfile(*p).c_str());
  return 0;
}

/// --check-against cpu: per prompt, the ids on stdout as they are chosen
/// (cut at a stop id as in a plain run), then the differential's one-line
/// verdict on stderr.
int runCheck(const Args &a, const Request &r, const k3::PlanDoc &plan,
             const std::vector<int64_t> &stopIds) {
  const bool numbered = r.prompts.size() > 1;
  std::vector<float> logits;
  std::string verdict;
  for (const k3::Prompt &p : r.prompts) {
    k3::DifferentialOptions opt;
    opt.keepLogits = !a.logitsOut.empty();
    IdPrinter print(p, numbered, stopIds);
    opt.onToken = [&](int64_t index, int64_t token) { print(index, token); };
    std::string name;
    k3::Expected<k3::DifferentialReport> rep = k3::checkAgainstCpu(
        plan, a.weights, r.kind, p.ids, r.maxNew, opt, &name);
    if (print.any())
      print.finish();
    if (!rep)
      return runtimeError(inContext(rep.status(), where(a, p)).message());
    if (!rep->ok()) {
      std::fprintf(stderr, "%s: error: %s%s\n", g_prog.c_str(),
                   p.line > 0 ? (where(a, p) + ": ").c_str() : "",
                   rep->summary(name).c_str());
      return kExitMismatch;
    }
    const size_t rows = static_cast<size_t>(print.printed()) *
                        static_cast<size_t>(plan.config.vocabSize);
    logits.insert(logits.end(), rep->logits.begin(),
                  rep->logits.begin() + static_cast<std::ptrdiff_t>(std::min(
                                            rows, rep->logits.size())));
    if (!a.quiet)
      verdict += g_prog + ": " +
                 (numbered ? where(a, p) + ": " : std::string()) +
                 rep->summary(name) + "\n";
  }
  if (!a.logitsOut.empty()) {
    const int64_t vocab = plan.config.vocabSize;
    k3::Status s =
        k3::writeNpyF32(a.logitsOut, logits.data(),
                        static_cast<int64_t>(logits.size()) / vocab, vocab);
    if (!s)
      return runtimeError(s.message());
  }
  std::fprintf(stderr, "%s", verdict.c_str());
  return 0;
}

/// The decode's totals over every prompt, for the summary line.
struct Totals {
  int64_t prompts = 0, tokens = 0, fed = 0, restored = 0, decodeSteps = 0,
          stopped = 0, lastStop = -1;
  /// A batched decode: its steps and the most sequences one step ran.
  int64_t batchSteps = 0, maxActive = 0, maxRows = 0;
  double prefillSeconds = 0, decodeSeconds = 0;
  /// Step rows bound before the first prompt (Session::reserveRows), and
  /// how long that took: not part of the prefill time.
  int64_t boundRows = 0;
  double bindSeconds = 0;
  /// Opening the session: the plan bound to its weights (read, made or
  /// drawn, and copied to the backend).
  double loadSeconds = 0;
  void add(const k3::GenerateResult &g) {
    ++prompts;
    tokens += static_cast<int64_t>(g.tokens.size());
    fed += g.promptTokens - g.restoredTokens;
    restored += g.restoredTokens;
    decodeSteps += g.decodeSteps;
    prefillSeconds += g.promptSeconds;
    decodeSeconds += g.decodeSeconds;
    if (g.stopped) {
      ++stopped;
      lastStop = g.tokens.back();
    }
  }
};

std::string rate(int64_t n, double seconds) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.1f", seconds > 0 ? n / seconds : 0.0);
  return b;
}

std::string seconds(double s) {
  char b[64];
  std::snprintf(b, sizeof(b), "%.3f", s);
  return b;
}

/// "1 token", "3 tokens".
std::string count(int64_t n, const char *what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

/// "6 tokens generated, ended by stop id 2 (cpu); prefill 3 tokens in
/// 0.015 s (204.0 tokens/s); decode 5 steps in 0.016 s (314.4 tokens/s)".
std::string summary(const Totals &t, const std::string &backend) {
  std::string s;
  if (t.prompts > 1)
    s += std::to_string(t.prompts) + " prompts, ";
  s += count(t.tokens, "token") + " generated";
  if (t.prompts == 1 && t.stopped)
    s += ", ended by stop id " + std::to_string(t.lastStop);
  else if (t.stopped)
    s += ", " + std::to_string(t.stopped) + " ended by a stop id";
  s += " (" + backend + "); prefill " + count(t.fed, "token");
  if (t.restored)
    s += " (+" + std::to_string(t.restored) + " restored from the snapshot)";
  s += " in " + seconds(t.prefillSeconds) + " s (" +
       rate(t.fed, t.prefillSeconds) + " tokens/s); decode " +
       count(t.decodeSteps, "step") + " in " + seconds(t.decodeSeconds) +
       " s (" + rate(t.decodeSteps, t.decodeSeconds) + " tokens/s)";
  if (t.boundRows > 1)
    s += "; " + count(t.boundRows, "step row") + " bound in " +
         seconds(t.bindSeconds) + " s before the prompts";
  if (t.batchSteps > 0)
    s += "; batched: " + count(t.batchSteps, "step") + ", up to " +
         count(t.maxActive, "sequence") + " and " + count(t.maxRows, "token") +
         " per step";
  if (t.loadSeconds > 0)
    s += "; weights loaded in " + seconds(t.loadSeconds) + " s";
  return s;
}

/// Lines on stderr while a long load binds the weights (a 98 GB checkpoint
/// takes minutes to copy to a GPU): one every kLoadReportSeconds, the first
/// after that long, none for a load that ends sooner.
constexpr double kLoadReportSeconds = 5.0;
k3::BindProgress loadProgress(std::chrono::steady_clock::time_point start) {
  auto last = std::make_shared<double>(0.0);
  return [start, last](uint64_t done, uint64_t total) {
    const double t =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (t - *last < kLoadReportSeconds)
      return;
    *last = t;
    std::fprintf(
        stderr, "%s: loading the weights: %.1f of %.1f GB (%.0f%%) in %.0f s\n",
        g_prog.c_str(), done / 1e9, total / 1e9,
        total ? 100.0 * done / total : 100.0, t);
  };
}

bool startsWith(const std::vector<int64_t> &ids,
                const std::vector<int64_t> &prefix) {
  return prefix.size() <= ids.size() &&
         std::equal(prefix.begin(), prefix.end(), ids.begin());
}

std::string idList(const std::vector<int64_t> &ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 8; ++i)
    s += (i ? "," : "") + std::to_string(ids[i]);
  if (ids.size() > 8)
    s += ",...";
  return s;
}

/// Several PLANs: the ranks of a tensor-parallel model (k3c --tp N --rank R),
/// `first` already read. Every rank decodes every prompt on its own thread
/// (runRanks; with --backend cuda all ranks on the one GPU, collectives
/// host-staged); rank 0 prints, and every rank must have chosen the same
/// tokens.
int runRanksCli(const Args &a, const Request &req, k3::PlanDoc first,
                const std::vector<int64_t> &stopIds) {
  const int64_t vocab = first.config.vocabSize;
  std::vector<std::string> paths = {a.plan};
  paths.insert(paths.end(), a.rankPlans.begin(), a.rankPlans.end());
  std::vector<k3::PlanDoc> plans;
  plans.push_back(std::move(first));
  for (size_t i = 1; i < paths.size(); ++i) {
    std::string bytes;
    if (k3::Status s = k3::readRegularFile(paths[i], k3::kMaxPlanFileBytes,
                                           bytes, "plan file");
        !s)
      return runtimeError(s.message());
    k3::Expected<k3::PlanDoc> p = k3::parsePlan(bytes, paths[i]);
    if (!p)
      return runtimeError(p.message());
    plans.push_back(p.take());
  }
  k3::Expected<std::vector<k3::PlanDoc>> ordered =
      k3::orderRankPlans(std::move(plans), paths);
  if (!ordered)
    return runtimeError(ordered.message());
  k3::Expected<std::chrono::milliseconds> timeout = k3::rankGroupTimeout();
  if (!timeout)
    return runtimeError(timeout.message());
  const int64_t ranks = static_cast<int64_t>(ordered->size());
  const bool numbered = req.prompts.size() > 1;
  Totals totals;
  std::vector<float> logits;
  std::vector<std::vector<std::vector<int64_t>>> chosen(
      static_cast<size_t>(ranks));
  k3::Status st = k3::runRanks(
      ordered.take(), a.weights, *timeout,
      [&](int64_t rank, k3::Session &ses) -> k3::Status {
        // Every request is checked before the first step.
        for (const k3::Prompt &p : req.prompts)
          if (k3::Status s = ses.checkPrompt(p.ids, req.maxNew); !s)
            return inContext(s, where(a, p));
        for (const k3::Prompt &p : req.prompts) {
          k3::GenerateOptions opt;
          opt.maxNew = req.maxNew;
          opt.keepLogits = rank == 0 && !a.logitsOut.empty();
          opt.stopIds = stopIds;
          opt.sampling = req.sampling;
          opt.prefillChunk = req.prefillChunk;
          std::optional<IdPrinter> print;
          if (rank == 0) {
            print.emplace(p, numbered, stopIds);
            opt.onToken = [&](int64_t i, int64_t t) { (*print)(i, t); };
          }
          k3::Expected<k3::GenerateResult> g = ses.generate(p.ids, opt);
          if (print && (g || print->any()))
            print->finish();
          if (!g)
            return inContext(g.status(), where(a, p));
          chosen[static_cast<size_t>(rank)].push_back(g->tokens);
          if (rank == 0) {
            totals.add(*g);
            logits.insert(logits.end(), g->logits.begin(), g->logits.end());
          }
        }
        return k3::Status::ok();
      },
      a.backend == "cuda" ? k3::BackendKind::Cuda : k3::BackendKind::Cpu);
  if (!st)
    return runtimeError(st.message());
  for (int64_t r = 1; r < ranks; ++r)
    if (chosen[static_cast<size_t>(r)] != chosen[0])
      return runtimeError("rank " + std::to_string(r) +
                          " chose other tokens than rank 0: the ranks' "
                          "collectives did not give them the same logits");
  if (!a.logitsOut.empty())
    if (k3::Status s =
            k3::writeNpyF32(a.logitsOut, logits.data(),
                            static_cast<int64_t>(logits.size()) / vocab, vocab);
        !s)
      return runtimeError(s.message());
  if (!a.quiet)
    std::fprintf(stderr, "%s: %s\n", g_prog.c_str(),
                 summary(totals, a.backend + ", " + std::to_string(ranks) +
                                     " tensor-parallel ranks")
                     .c_str());
  return 0;
}

} // namespace

/// The whole run; main() adds the check that the tokens reached stdout.
int run(int argc, char **argv);

int main(int argc, char **argv) {
  const int rc = run(argc, argv);
  // The tokens are the run's result: a full disk or a closed pipe behind
  // stdout is a failure, not a silent success.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "%s: error: writing to standard output failed: %s\n",
                 g_prog.c_str(), std::strerror(errno));
    return rc == 0 ? kExitFailure : rc;
  }
  return rc;
}

int run(int argc, char **argv) {
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
  Request req;
  req.embedded = embedded->has_value();

  Args a;
  CLI::App app(req.embedded ? "Decodes with the plan built into this binary."
                            : "Decodes with a plan made by k3c.",
               g_prog);
  declareOptions(app, a, req.embedded);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError &e) {
    return usageError(e.what());
  }
  a.extras = app.remaining();
  if (std::string why = checkArgs(a, req); !why.empty())
    return usageError(why);

  // Outputs never replace an input (the plan, a prompts or snapshot file,
  // the checkpoint's files, this binary) or a device; checked before any
  // work, so a refused target costs nothing.
  {
    std::vector<std::string> inputs = {a.plan, a.prompts, a.snapshotIn,
                                       "/proc/self/exe", a.weights};
    std::error_code ec;
    if (!a.weights.empty() && std::filesystem::is_directory(a.weights, ec))
      for (const auto &e : std::filesystem::directory_iterator(a.weights, ec))
        inputs.push_back(e.path().string());
    for (const std::string *out : {&a.logitsOut, &a.snapshotOut})
      if (!out->empty())
        if (k3::Status s = k3::checkOutputTarget(*out, inputs); !s)
          return runtimeError(s.message());
  }

  // The plan, and its bytes for the snapshot identity.
  std::string planBytes;
  if (req.embedded) {
    planBytes = std::move(**embedded);
  } else if (k3::Status s = k3::readRegularFile(a.plan, k3::kMaxPlanFileBytes,
                                                planBytes, "plan file");
             !s) {
    return runtimeError(s.message());
  }
  k3::Expected<k3::PlanDoc> plan =
      k3::parsePlan(planBytes, req.embedded ? "embedded plan" : a.plan);
  if (!plan)
    return runtimeError(plan.message());
  const uint64_t planId = k3::planIdentity(planBytes);
  planBytes.clear();
  planBytes.shrink_to_fit();

  if (!a.prompts.empty()) {
    k3::Expected<std::vector<k3::Prompt>> ps = k3::readPromptsFile(a.prompts);
    if (!ps)
      return runtimeError(ps.message());
    req.prompts = ps.take();
    if (req.prefixLen > static_cast<int64_t>(req.prompts[0].ids.size()))
      return runtimeError(where(a, req.prompts[0]) + ": --prefix-len " +
                          a.prefixLen + " is longer than the prompt (" +
                          std::to_string(req.prompts[0].ids.size()) +
                          " tokens)");
  }

  // Stop ids: the command line's and EOS.
  const int64_t vocab = plan->config.vocabSize;
  std::vector<int64_t> stopIds = req.stopIds;
  for (int64_t id : stopIds)
    if (id < 0 || id >= vocab)
      return runtimeError("--stop-ids: id " + std::to_string(id) +
                          " is outside the vocabulary [0, " +
                          std::to_string(vocab) + ")");
  const int64_t eos = plan->config.eosTokenId;
  if (!a.ignoreEos && eos >= 0 && eos < vocab &&
      std::find(stopIds.begin(), stopIds.end(), eos) == stopIds.end())
    stopIds.push_back(eos);

  if (!a.checkAgainst.empty())
    return runCheck(a, req, *plan, stopIds);

  if (!a.rankPlans.empty())
    return runRanksCli(a, req, plan.take(), stopIds);

  const auto opened = std::chrono::steady_clock::now();
  k3::Expected<std::unique_ptr<k3::Session>> session = k3::Session::open(
      plan.take(), a.weights, req.kind, !a.noCudaGraph, nullptr,
      a.quiet ? k3::BindProgress() : loadProgress(opened));
  if (!session)
    return runtimeError(session.message());
  const double loadSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - opened)
          .count();
  k3::Session &ses = **session;
  if (k3::Status s = ses.setPrefillForm(req.prefillForm); !s)
    return runtimeError("--prefill-form chunk: " + s.message());

  // Every request is checked before the first step, so that a bad line 3
  // does not leave lines 1 and 2 decoded behind it.
  std::optional<k3::PrefixSnapshot> snapshot;
  if (!a.snapshotIn.empty()) {
    k3::Expected<k3::PrefixSnapshot> s =
        k3::readSnapshotFile(a.snapshotIn, ses.plan(), planId);
    if (!s)
      return runtimeError(s.message());
    snapshot = s.take();
  }
  for (const k3::Prompt &p : req.prompts) {
    if (k3::Status s = ses.checkPrompt(p.ids, req.maxNew); !s)
      return runtimeError(inContext(s, where(a, p)).message());
    if (snapshot && !startsWith(p.ids, snapshot->tokens))
      return runtimeError(
          (p.line > 0 ? where(a, p) : std::string("--prompt-ids")) +
          ": the prompt does not start with the snapshot's " +
          std::to_string(snapshot->tokens.size()) + " tokens (" +
          idList(snapshot->tokens) + ") from " + a.snapshotIn);
  }
  if (!a.snapshotOut.empty()) {
    const std::vector<int64_t> &first = req.prompts[0].ids;
    const size_t n =
        req.prefixLen > 0 ? static_cast<size_t>(req.prefixLen) : first.size();
    k3::Expected<k3::PrefixSnapshot> s = ses.snapshotPrefix(
        std::vector<int64_t>(first.begin(), first.begin() + n));
    if (!s)
      return runtimeError(s.message());
    std::vector<std::string> inputs;
    if (!a.plan.empty())
      inputs.push_back(a.plan);
    if (!a.prompts.empty())
      inputs.push_back(a.prompts);
    if (k3::Status w = k3::writeSnapshotFile(a.snapshotOut, *s, ses.plan(),
                                             planId, inputs);
        !w)
      return runtimeError(w.message());
    if (!a.quiet)
      std::fprintf(stderr, "%s: snapshot of the first %s written to %s\n",
                   g_prog.c_str(),
                   count(static_cast<int64_t>(n), "prompt token").c_str(),
                   a.snapshotOut.c_str());
    snapshot = s.take();
  }

  const bool numbered = req.prompts.size() > 1;
  Totals totals;
  totals.loadSeconds = loadSeconds;
  std::vector<float> logits;
  k3::GenerateResult last;
  auto optionsFor = [&](const k3::Prompt &p) {
    k3::GenerateOptions opt;
    opt.maxNew = req.maxNew;
    opt.keepLogits = !a.logitsOut.empty();
    opt.deviceGreedy = !a.hostGreedy;
    opt.stopIds = stopIds;
    opt.sampling = req.sampling;
    opt.prefillChunk = req.prefillChunk;
    if (snapshot && startsWith(p.ids, snapshot->tokens))
      opt.prefix = &*snapshot;
    return opt;
  };
  const int64_t slots = ses.plan().maxBatch;
  if (req.batch > slots)
    return runtimeError(
        "--batch " + std::to_string(req.batch) +
        " is more than the plan's max_batch of " + std::to_string(slots) +
        "; compile the plan with k3c --max-batch " + std::to_string(req.batch));
  if (slots == 1) {
    // The prompts' chunks run as steps of up to --prefill-chunk rows: their
    // room is bound now, once, not inside the first prompt's prefill time.
    size_t longest = 0;
    for (const k3::Prompt &p : req.prompts)
      longest = std::max(longest, p.ids.size());
    const size_t rows =
        std::min(static_cast<size_t>(req.prefillChunk), longest);
    if (rows > 1) {
      const auto t0 = std::chrono::steady_clock::now();
      if (k3::Status s = ses.reserveRows(rows); !s)
        return runtimeError("binding " + std::to_string(rows) +
                            " step rows: " + s.message());
      totals.boundRows = static_cast<int64_t>(rows);
      totals.bindSeconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
    }
  }
  if (slots > 1) {
    // Batched: every prompt a request; each line is printed once it and
    // those before it are done, so stdout keeps the prompts' order.
    std::vector<k3::SequenceRequest> reqs;
    for (const k3::Prompt &p : req.prompts)
      reqs.push_back({p.ids, optionsFor(p)});
    size_t printed = 0;
    int failures = 0;
    k3::BatchOptions bo;
    bo.batch =
        req.batch == 0 ? std::min<int64_t>(slots, reqs.size()) : req.batch;
    std::vector<std::optional<k3::Expected<k3::GenerateResult>>> kept(
        reqs.size());
    bo.onFinish = [&](size_t i, const k3::Expected<k3::GenerateResult> &g) {
      kept[i] = g;
      for (; printed < reqs.size() && kept[printed]; ++printed) {
        const k3::Prompt &p = req.prompts[printed];
        const k3::Expected<k3::GenerateResult> &r = *kept[printed];
        if (!r) {
          ++failures;
          runtimeError(inContext(r.status(), where(a, p)).message());
          continue;
        }
        IdPrinter print(p, numbered, stopIds);
        for (size_t t = 0; t < r->tokens.size(); ++t)
          print(static_cast<int64_t>(t), r->tokens[t]);
        print.finish();
      }
    };
    k3::Expected<k3::BatchResult> b = ses.generateBatch(reqs, bo);
    if (!b)
      return runtimeError(b.message());
    for (k3::Expected<k3::GenerateResult> &g : b->sequences) {
      if (!g)
        continue;
      totals.add(*g);
      logits.insert(logits.end(), g->logits.begin(), g->logits.end());
      last = g.take();
    }
    totals.batchSteps = b->steps;
    totals.maxActive = b->maxActive;
    totals.maxRows = b->maxRows;
    if (failures > 0) {
      if (!a.quiet)
        std::fprintf(stderr, "%s: %d of %zu sequences failed\n", g_prog.c_str(),
                     failures, reqs.size());
      return kExitFailure;
    }
  }
  for (const k3::Prompt &p :
       slots > 1 ? std::vector<k3::Prompt>() : req.prompts) {
    IdPrinter print(p, numbered, stopIds);
    k3::GenerateOptions opt = optionsFor(p);
    opt.onToken = [&](int64_t index, int64_t token) { print(index, token); };
    k3::Expected<k3::GenerateResult> g = ses.generate(p.ids, opt);
    if (!g) {
      if (print.any())
        print.finish();
      return runtimeError(inContext(g.status(), where(a, p)).message());
    }
    print.finish();
    totals.add(*g);
    logits.insert(logits.end(), g->logits.begin(), g->logits.end());
    last = g.take();
  }
  if (!a.logitsOut.empty()) {
    k3::Status s =
        k3::writeNpyF32(a.logitsOut, logits.data(),
                        static_cast<int64_t>(logits.size()) / vocab, vocab);
    if (!s)
      return runtimeError(s.message());
  }
  if (!a.quiet)
    std::fprintf(stderr, "%s: %s\n", g_prog.c_str(),
                 summary(totals, ses.backendName()).c_str());
  if (a.profile || !a.profileSteps.empty()) {
    k3::PlanDoc planCopy = ses.plan();
    session->reset(); // free the first binding's memory
    return runProfile(planCopy, a.weights, req, !a.noCudaGraph,
                      req.prompts.back().ids, last.tokens);
  }
  return 0;
}
