//===- k3c.cpp - The k3c compiler driver ----------------------------------===//
//
// config.json → k3 IR → fused k3 IR → k3l launches → plan (→ executable).
// Every stage can be printed (--emit), the fusion strategy chosen
// (--fusion) or replaced by a pipeline string (--k3-pipeline), and MLIR's
// usual debugging flags apply (--mlir-print-ir-after-all, --mlir-timing, ...).
// --help lists k3c's own options and those MLIR flags only, not the hundreds
// of LLVM backend options linked in with MLIR.
//
// Every output (-o) is written to a temporary file next to the target and
// renamed over it when complete (runtime/io/AtomicFile.h): an existing target
// must be a regular file that is not one of the inputs, and a failed write is
// an error, never a truncated file.
//
//===----------------------------------------------------------------------===//
#include "codegen/Codegen.h"
#include "import/Importer.h"
#include "kernels/collective/CollectiveParams.h"
#include "passes/Passes.h"

#include "runtime/io/AtomicFile.h"
#include "runtime/model/Config.h"
#include "runtime/model/Presets.h"
#include "runtime/plan/Executable.h"
#include "runtime/plan/Plan.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory k3cCat("k3c options");
/// MLIR's IR-printing, pass-manager, timing and context flags (registered
/// without a category; moved here so --help can show them and hide the
/// rest).
static cl::OptionCategory mlirCat("MLIR debugging options");

static cl::opt<std::string>
    inputPath(cl::Positional,
              cl::desc("<model directory | config.json | preset:NAME>"),
              cl::cat(k3cCat));
static cl::opt<std::string> outputPath("o",
                                       cl::desc("Output file ('-' = stdout)"),
                                       cl::value_desc("path"), cl::init("-"),
                                       cl::cat(k3cCat));
enum class Emit { Mlir, Fused, Launch, Plan, Exe };
static cl::opt<Emit> emit(
    "emit", cl::desc("What to write"), cl::init(Emit::Plan),
    cl::values(
        clEnumValN(Emit::Mlir, "mlir", "the imported k3 IR"),
        clEnumValN(Emit::Fused, "fused", "k3 IR after the fusion pipeline"),
        clEnumValN(Emit::Launch, "launch", "k3l launch IR, buffers planned"),
        clEnumValN(Emit::Plan, "plan", "the plan file (docs/PLAN.md)"),
        clEnumValN(Emit::Exe, "exe",
                   "an executable: the runtime with the plan embedded")),
    cl::cat(k3cCat));
static cl::opt<std::string>
    fusion("fusion", cl::desc("Fusion strategy: none | default | max"),
           cl::init("default"), cl::cat(k3cCat));
static cl::opt<std::string> k3Pipeline(
    "k3-pipeline",
    cl::desc(
        "Replace the strategy's k3 pipeline by this textual pipeline, "
        "e.g. 'builtin.module(func.func(k3-decompose-layers,k3-fuse-kda))'"),
    cl::init(""), cl::cat(k3cCat));
static cl::opt<std::string> mutant(
    "mutant",
    cl::desc("Test only: compile a deliberately wrong graph (k3-inject-mutant "
             "kind: attn-res-skip | router-expert0 | skip-layer), with "
             "any --fusion"),
    cl::init(""), cl::cat(k3cCat));
static cl::opt<int64_t> mutantLayer("mutant-layer",
                                    cl::desc("The layer --mutant=skip-layer "
                                             "removes"),
                                    cl::init(1), cl::cat(k3cCat));
/// The plan format's bound on max_seq (docs/PLAN.md).
constexpr int64_t kMaxSeqLimit = int64_t(1) << 24;
static cl::opt<int64_t>
    maxSeq("max-seq",
           cl::desc("Planned maximum context (prompt + generated), at most "
                    "2^24"),
           cl::init(4096), cl::cat(k3cCat));
static cl::opt<int64_t> maxBatch(
    "max-batch",
    cl::desc("Sequences the plan decodes together (slots, each with its own "
             "state), 1 to 1024"),
    cl::init(1), cl::cat(k3cCat));
static cl::opt<int64_t> tensorParallel(
    "tp",
    cl::desc("Tensor-parallel ranks: split the model's heads, MLP and expert "
             "intermediate dimensions and vocabulary over N ranks, one plan "
             "per rank (--rank), with all-reduce / all-gather collectives "
             "(docs/PLAN.md \"Tensor-parallel plans\"); default 1"),
    cl::init(1), cl::cat(k3cCat));
static cl::opt<int64_t> tensorRank(
    "rank",
    cl::desc("With --tp N: the rank whose plan to emit, 0 to N-1 (run k3c "
             "once per rank)"),
    cl::init(-1), cl::cat(k3cCat));
static cl::opt<bool> kdaClusters(
    "kda-clusters",
    cl::desc("Launch kda_decode of 128-wide heads as a cluster of 4 blocks "
             "per head (Hopper; default on; =false for the global-memory "
             "form, to compare)"),
    cl::init(true), cl::cat(k3cCat));
static cl::opt<bool> mlaClusters(
    "mla-clusters",
    cl::desc("Attend with mla_attend_clustered (a cluster of 4 blocks per "
             "head) where the heads have the K3 / Kimi-Linear shape and fit "
             "the SMs, for contexts of at most 4096 tokens (with --max-seq "
             "above it, an mla_attend launch after it attends the longer "
             "ones; Hopper; default on; =false for mla_attend alone, to "
             "compare)"),
    cl::init(true), cl::cat(k3cCat));
static cl::opt<bool> attnResClusters(
    "attn-res-clusters",
    cl::desc("Mix AttnRes sources with attn_res_clustered (one cluster of up "
             "to 8 blocks, a slice of the hidden size each) where at most 9 "
             "sources and D <= 8192 fit it (Hopper; default on; =false for "
             "attn_res on one block, to compare)"),
    cl::init(true), cl::cat(k3cCat));
static cl::opt<bool> moeMxfp4Mma(
    "moe-mxfp4-mma",
    cl::desc("Run routed MXFP4 experts with moe_experts_mxfp4 where their "
             "sizes fit it (dim and interDim multiples of 512 up to 4096, no "
             "norm or shared expert in the launch: K3's latent experts): "
             "their rows through a shared-memory ring into the tensor cores "
             "(Hopper; default on; =false for moe_experts on the CUDA cores, "
             "to compare)"),
    cl::init(true), cl::cat(k3cCat));
static cl::opt<std::string> l2Prefetch(
    "l2-prefetch",
    cl::desc("Kernels whose launches fetch the next large weight into L2 "
             "while their own work leaves the memory idle (k3-prefetch-"
             "weights): a comma-separated list of kda_decode, mla_attend, "
             "mla_attend_clustered, moe_ffn, or 'none' (the default: on the "
             "H200 every form "
             "made the Kimi-Linear step slower, docs/PERF.md)"),
    cl::init("none"), cl::cat(k3cCat));
static cl::opt<bool>
    report("report",
           cl::desc("Print the kernel report (bytes per token, "
                    "bandwidth floor) to stderr"),
           cl::init(false), cl::cat(k3cCat));
static cl::opt<double>
    bandwidth("report-bandwidth",
              cl::desc("Device bandwidth in GB/s for the report's floor (H200 "
                       "measured ~4300)"),
              cl::init(4300.0), cl::cat(k3cCat));

/// The config file `in` names: a directory's config.json or the file itself;
/// "" for preset:NAME.
static std::string configPath(const std::string &in) {
  if (in.rfind("preset:", 0) == 0)
    return "";
  if (llvm::sys::fs::is_directory(in))
    return (llvm::Twine(in) + "/config.json").str();
  return in;
}

/// Reads the config: a directory's config.json, a file, or preset:NAME.
static ::k3::Expected<::k3::ModelConfig> loadConfig(const std::string &in) {
  if (in.rfind("preset:", 0) == 0)
    return ::k3::presetConfig(in.substr(7));
  return ::k3::parseConfigFile(configPath(in));
}

/// Shows k3c's options and MLIR's debugging flags in --help; hides the LLVM
/// backend options MLIR links in (hundreds of them).
static void hideUnrelatedOptions() {
  for (auto &entry : cl::getRegisteredOptions())
    if (entry.first.starts_with("mlir-"))
      entry.second->addCategory(mlirCat);
  cl::HideUnrelatedOptions({&k3cCat, &mlirCat});
}

/// Writes `bytes` to standard output; a failed write (a closed pipe, a full
/// disk) is an error.
static int writeStdout(llvm::StringRef bytes) {
  llvm::raw_fd_ostream &os = llvm::outs();
  os << bytes;
  os.flush();
  if (os.has_error()) {
    llvm::errs() << "k3c: writing to standard output failed: "
                 << os.error().message() << "\n";
    os.clear_error();
    return 1;
  }
  return 0;
}

/// Writes `bytes` to `path` through an AtomicFile (inputs never replaced).
static int writeOutput(const std::string &path, llvm::StringRef bytes,
                       const ::k3::OutputOptions &options) {
  if (path == "-")
    return writeStdout(bytes);
  ::k3::Status st = ::k3::writeFileAtomic(
      path, std::string_view(bytes.data(), bytes.size()), options);
  if (!st) {
    llvm::errs() << "k3c: " << st.message() << "\n";
    return 1;
  }
  return 0;
}

/// The executable: the runtime binary at `runtime` (without a plan it may
/// already carry) + `plan` + the 16-byte trailer (docs/PLAN.md), written
/// through an AtomicFile with mode 0777 & ~umask.
static ::k3::Status writeExe(const std::string &runtime,
                             const std::string &plan, const std::string &out,
                             ::k3::OutputOptions options) {
  ::k3::Expected<std::optional<std::string>> embedded =
      ::k3::findEmbeddedPlan(runtime);
  if (!embedded)
    return embedded.status();
  std::string binary;
  K3_RETURN_IF_ERROR(::k3::readRegularFile(runtime, uint64_t(1) << 32, binary,
                                           "runtime binary"));
  const size_t carried =
      *embedded ? (*embedded)->size() + ::k3::kExeTrailerSize : 0;
  if (carried > binary.size())
    return ::k3::makeError(runtime, ": changed while it was read");
  binary.resize(binary.size() - carried);
  unsigned char trailer[::k3::kExeTrailerSize];
  uint64_t len = plan.size();
  for (int i = 0; i < 8; ++i, len >>= 8)
    trailer[i] = static_cast<unsigned char>(len & 0xFF);
  std::memcpy(trailer + 8, ::k3::kExeTrailerMagic, 8);
  options.executable = true;
  ::k3::Expected<std::unique_ptr<::k3::AtomicFile>> f =
      ::k3::AtomicFile::create(out, options);
  if (!f)
    return f.status();
  K3_RETURN_IF_ERROR((*f)->write(binary));
  K3_RETURN_IF_ERROR((*f)->write(plan));
  K3_RETURN_IF_ERROR((*f)->write(trailer, sizeof(trailer)));
  return (*f)->commit();
}

static void printReport(const std::vector<mlir::k3::LaunchReport> &rows,
                        llvm::raw_ostream &os) {
  int64_t totalR = 0, totalW = 0;
  llvm::StringMap<std::tuple<int64_t, int64_t, int64_t>> byKernel;
  for (const mlir::k3::LaunchReport &r : rows) {
    auto &[n, rd, wr] = byKernel[r.kernel];
    ++n;
    rd += r.bytesRead;
    wr += r.bytesWritten;
    totalR += r.bytesRead;
    totalW += r.bytesWritten;
  }
  os << llvm::format("%-18s %8s %14s %14s %12s\n", "kernel", "launches",
                     "read B/token", "write B/token", "floor us");
  std::vector<std::string> names;
  for (auto &e : byKernel)
    names.push_back(e.getKey().str());
  llvm::sort(names);
  double bw = bandwidth * 1e9;
  for (const std::string &n : names) {
    auto [cnt, rd, wr] = byKernel[n];
    os << llvm::format("%-18s %8lld %14lld %14lld %12.3f\n", n.c_str(),
                       (long long)cnt, (long long)rd, (long long)wr,
                       (rd + wr) / bw * 1e6);
  }
  os << llvm::format("%-18s %8zu %14lld %14lld %12.3f\n", "total", rows.size(),
                     (long long)totalR, (long long)totalW,
                     (totalR + totalW) / bw * 1e6);
  os << llvm::format("bandwidth floor: %.3f us/token at %.0f GB/s "
                     "(MLA cache counted at the planned max context)\n",
                     (totalR + totalW) / bw * 1e6, bandwidth.getValue());
}

static std::string selfDirectory() {
  std::string exe = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
  return llvm::sys::path::parent_path(exe).str();
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  hideUnrelatedOptions();
  cl::ParseCommandLineOptions(
      argc, argv,
      "k3c: compile a Kimi K3 / Kimi-Linear model variant to a decode plan\n\n"
      "  k3c MODEL_DIR|config.json|preset:NAME -o OUT "
      "[--emit=mlir|fused|launch|plan|exe]\n"
      "      [--fusion=none|default|max] [--max-seq N] [--max-batch B] "
      "[--tp N --rank R] [--report]\n\n"
      "  The executable (--emit=exe) runs as: ./OUT --weights DIR --prompt-ids "
      "1,2,3 --max-new N\n");
  if (inputPath.empty()) {
    llvm::errs() << "k3c: no input; give a model directory, a config.json or "
                    "preset:NAME (see --help)\n";
    return 2;
  }
  mlir::k3::FusionStrategy strategy;
  if (!mlir::k3::parseFusionStrategy(fusion, strategy)) {
    llvm::errs() << "k3c: unknown --fusion '" << fusion
                 << "'; use none, default or max\n";
    return 2;
  }
  if (!mutant.empty() && !k3Pipeline.empty()) {
    llvm::errs() << "k3c: --mutant and --k3-pipeline do not combine; add "
                    "k3-inject-mutant to the pipeline string instead\n";
    return 2;
  }
  if (maxSeq <= 0 || maxSeq > kMaxSeqLimit) {
    llvm::errs() << "k3c: --max-seq must be in [1, 2^24 = " << kMaxSeqLimit
                 << "], got " << maxSeq << "\n";
    return 2;
  }
  if (maxBatch < 1 || maxBatch > ::k3::kMaxPlanBatch) {
    llvm::errs() << "k3c: --max-batch must be in [1, " << ::k3::kMaxPlanBatch
                 << "], got " << maxBatch << "\n";
    return 2;
  }
  if (tensorParallel < 1 || tensorParallel > ::k3::kMaxRanks) {
    llvm::errs() << "k3c: --tp must be in [1, " << ::k3::kMaxRanks << "], got "
                 << tensorParallel << "\n";
    return 2;
  }
  if (tensorParallel > 1 && (tensorRank < 0 || tensorRank >= tensorParallel)) {
    llvm::errs() << "k3c: --tp " << tensorParallel << " needs --rank R in [0, "
                 << tensorParallel
                 << "): one plan per rank, run k3c once for each\n";
    return 2;
  }
  if (tensorParallel == 1 && tensorRank > 0) {
    llvm::errs() << "k3c: --rank " << tensorRank << " needs --tp N with N > "
                 << tensorRank << "\n";
    return 2;
  }
  if (tensorParallel > 1 && emit == Emit::Exe) {
    llvm::errs() << "k3c: --emit=exe makes an executable of one plan; a "
                    "tensor-parallel model is one plan per rank (--emit=plan) "
                    "that k3-run runs together\n";
    return 2;
  }
  if (emit == Emit::Exe && outputPath == "-") {
    llvm::errs() << "k3c: --emit=exe needs -o PATH\n";
    return 2;
  }
  // The files the output must never replace: the config it was made from,
  // the runtime an executable is made of, and k3c itself.
  const std::string runtime = selfDirectory() + "/" K3C_RUNTIME_NAME;
  ::k3::OutputOptions outputOptions;
  outputOptions.inputs = {configPath(inputPath), runtime,
                          llvm::sys::fs::getMainExecutable(nullptr, nullptr)};
  // Refuse a bad target before the work, not after it.
  if (outputPath != "-") {
    ::k3::Status target =
        ::k3::checkOutputTarget(outputPath, outputOptions.inputs);
    if (!target) {
      llvm::errs() << "k3c: " << target.message() << "\n";
      return 1;
    }
  }
  ::k3::Expected<::k3::ModelConfig> config = loadConfig(inputPath);
  if (!config) {
    llvm::errs() << "k3c: " << config.message() << "\n";
    return 1;
  }

  DialectRegistry registry;
  registry.insert<mlir::k3::K3Dialect, func::FuncDialect>();
  mlir::k3::registerCodegen(registry);
  mlir::k3::registerK3Pipelines();
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();

  // Diagnostics without a location (the importer's config checks) read as
  // k3c's own errors; located ones go to MLIR's usual printer.
  ScopedDiagnosticHandler unlocated(&ctx, [](Diagnostic &d) {
    if (!isa<UnknownLoc>(d.getLocation()))
      return failure();
    llvm::errs() << "k3c: "
                 << (d.getSeverity() == DiagnosticSeverity::Error ? "error: "
                                                                  : "")
                 << d.str() << "\n";
    return success();
  });
  OwningOpRef<ModuleOp> module = mlir::k3::importModel(ctx, *config, maxSeq);
  if (!module)
    return 1;
  if (maxBatch > 1)
    module->getOperation()->setAttr(
        mlir::k3::kMaxBatchAttrName,
        IntegerAttr::get(IntegerType::get(&ctx, 64), maxBatch));
  if (failed(verify(*module))) {
    llvm::errs()
        << "k3c: internal error: the imported module does not verify\n";
    return 1;
  }

  DefaultTimingManager tm;
  applyDefaultTimingManagerCLOptions(tm);
  TimingScope timing = tm.getRootScope();

  auto write = [&](llvm::function_ref<void(llvm::raw_ostream &)> body) -> int {
    std::string text;
    llvm::raw_string_ostream os(text);
    body(os);
    os.flush();
    return writeOutput(outputPath, text, outputOptions);
  };

  if (emit == Emit::Mlir)
    return write([&](llvm::raw_ostream &os) { module->print(os); });

  PassManager pm(&ctx);
  if (failed(applyPassManagerCLOptions(pm)))
    return 1;
  pm.enableTiming(timing);
  if (tensorParallel > 1) {
    mlir::k3::K3PartitionRanksOptions split;
    split.ranks = tensorParallel;
    split.rank = tensorRank;
    pm.addPass(mlir::k3::createK3PartitionRanks(split));
  }
  if (!k3Pipeline.empty()) {
    if (failed(parsePassPipeline(k3Pipeline, pm, llvm::errs())))
      return 2;
  } else if (!mutant.empty()) {
    if (failed(mlir::k3::buildK3MutantPipeline(pm, strategy, mutant,
                                               mutantLayer))) {
      llvm::errs() << "k3c: unknown --mutant '" << mutant
                   << "'; use attn-res-skip, router-expert0, skip-layer or "
                      "tp-no-all-reduce\n";
      return 2;
    }
  } else {
    mlir::k3::buildK3FusionPipeline(pm, strategy);
  }
  if (emit != Emit::Fused) {
    mlir::k3::ConvertK3ToLaunchOptions lowering;
    lowering.kdaClusters = kdaClusters;
    lowering.mlaClusters = mlaClusters;
    lowering.attnResClusters = attnResClusters;
    lowering.moeMxfp4Mma = moeMxfp4Mma;
    pm.addPass(mlir::k3::createConvertK3ToLaunch(lowering));
    if (l2Prefetch != "none") {
      mlir::k3::K3PrefetchWeightsOptions prefetch;
      for (llvm::StringRef k : llvm::split(l2Prefetch, ',')) {
        if (k.trim().empty())
          continue;
        const ::k3::KernelInfo *info = ::k3::findKernel(k.trim().str());
        if (!info || !info->field(::k3::kL2PrefetchField)) {
          llvm::errs() << "k3c: --l2-prefetch: '" << k.trim()
                       << "' cannot prefetch; use kda_decode, mla_attend, "
                          "mla_attend_clustered, moe_ffn or 'none'\n";
          return 2;
        }
        prefetch.kernels.push_back(k.trim().str());
      }
      if (prefetch.kernels.empty()) {
        llvm::errs() << "k3c: --l2-prefetch needs kernel names or 'none'\n";
        return 2;
      }
      pm.addPass(mlir::k3::createK3PrefetchWeights(prefetch));
    }
    pm.addPass(mlir::k3::createK3PlanBuffers());
  }
  if (failed(pm.run(*module)))
    return 1;
  if (emit == Emit::Fused || emit == Emit::Launch)
    return write([&](llvm::raw_ostream &os) { module->print(os); });

  std::string plan;
  std::vector<mlir::k3::LaunchReport> rows;
  if (failed(mlir::k3::emitPlan(
          *module, mlir::k3::stringifyFusionStrategy(strategy), plan, &rows)))
    return 1;
  if (report)
    printReport(rows, llvm::errs());
  if (emit == Emit::Plan)
    return write([&](llvm::raw_ostream &os) { os << plan; });

  ::k3::Status st = writeExe(runtime, plan, outputPath, outputOptions);
  if (!st) {
    llvm::errs() << "k3c: " << st.message() << "\n";
    return 1;
  }
  return 0;
}
