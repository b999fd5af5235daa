//===- CudaBackend.cpp - Runs a plan with the CUDA kernels ----------------===//
#include "runtime/exec/cuda/CudaBackend.h"

#include "kernels/common/CpuParallel.h"
#include "runtime/exec/cuda/RowsForms.h"

#include "kernels/PtxModules.h"
#include "kernels/collective/CollectiveParams.h"
#include "kernels/gemv/GemvParams.h"
#include "kernels/kda/KdaParams.h"
#include "kernels/mla/MlaParams.h"
#include "kernels/moe/MoeParams.h"
#include "kernels/synthetic/SyntheticParams.h"
#include "runtime/plan/PlanKernels.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <set>

namespace k3 {

namespace {

/// A device allocation of `bytes` into `out`.
Status alloc(uint64_t bytes, cuda::DeviceBuffer &out) {
  Expected<cuda::DeviceBuffer> b = cuda::DeviceBuffer::create(bytes);
  if (!b)
    return b.status();
  out = b.take();
  return Status::ok();
}

/// measureCopyGBps: the default copy (far above the 60 MB L2) and its runs.
constexpr uint64_t kDefaultCopyBytes = 1ull << 30;
constexpr int kCopyRuns = 10;
/// timeLaunches' gate: one copy of this size takes ~30 µs on an H200 (and
/// evicts the L2, as the previous step's lm_head would); before the first
/// measurement the host is assumed to queue a launch and its event in
/// kGuessQueueUs; at most kMaxGateCopies copies are queued.
constexpr uint64_t kGateBytes = 64ull << 20;
constexpr double kGuessQueueUs = 10.0;
constexpr int64_t kMaxGateCopies = 4096;

using Clock = std::chrono::steady_clock;
double microsecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

/// The module of PTX text `ptx`, loaded once into `own` (a backend's
/// modules) or, without it, once per process (findCudaKernel and the
/// kernel tests). A load JIT-compiles the PTX for the device; the driver's
/// JIT cache makes a backend's load of a text loaded before cheap.
Expected<cuda::CUmodule> moduleFor(cuda::Driver &driver, const std::string &ptx,
                                   const std::string &what, CudaModules *own) {
  // The process's map may be used from several threads (a backend binds
  // into its own map on one thread).
  static std::mutex mutex;
  static std::map<std::string, cuda::CUmodule> process;
  std::unique_lock<std::mutex> lock(mutex, std::defer_lock);
  if (!own)
    lock.lock();
  std::map<std::string, cuda::CUmodule> &loaded = own ? own->byPtx : process;
  auto it = loaded.find(ptx);
  if (it != loaded.end())
    return it->second;
  Expected<cuda::CUmodule> mod = driver.loadModule(ptx);
  if (!mod)
    return mod.status().withContext(what);
  loaded.emplace(ptx, *mod);
  return *mod;
}

/// Environment variable `name` as an integer in [lo, hi]; `fallback` when it
/// is unset or empty. Errors: anything else, naming the variable.
Expected<int> envInt(const char *name, int lo, int hi, int fallback) {
  const char *e = std::getenv(name);
  if (!e || !*e)
    return fallback;
  char *end = nullptr;
  errno = 0;
  const long v = std::strtol(e, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi)
    return makeError(name, " must be an integer in [", lo, ", ", hi, "], got '",
                     e, "'");
  return static_cast<int>(v);
}

/// Environment variable `name` as a comma-separated list of kernel entry
/// names of `every` (a list of RowsForms.h; empty names skipped; unset, empty
/// or 0: none), or `all` (or `allAlias`): every name of it. Errors: a name
/// not in `every`, saying it is not `what`.
template <class List>
Expected<std::set<std::string>> formNames(const char *name, const List &every,
                                          const char *what,
                                          const char *allAlias = "all") {
  const char *e = std::getenv(name);
  const std::string list = e ? e : "";
  if (list == "all" || list == allAlias)
    return std::set<std::string>(std::begin(every), std::end(every));
  std::set<std::string> names;
  for (size_t at = 0; list != "0" && at < list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string entry = list.substr(at, comma - at);
    at = comma + 1;
    if (entry.empty())
      continue; // "a,,b" or a trailing comma
    if (std::find(std::begin(every), std::end(every), entry) == std::end(every))
      return makeError(name, " names '", entry, "', which is not ", what);
    names.insert(entry);
  }
  return names;
}

/// The developer override of the kernels' PTX: with K3C_PTX_DIR set, a
/// kernel that some DIR/<family>.ptx defines is loaded from that file
/// instead of the plan's or this binary's PTX (kernel variants measured
/// without rebuilding the host code or the plans; stderr names each file
/// once). Null when unset or no file there defines `kernel`.
const std::string *overridePtx(const std::string &kernel) {
  static std::mutex mutex;
  static bool scanned = false;
  static std::vector<std::pair<std::string, std::string>> files; // path, text
  std::lock_guard<std::mutex> lock(mutex);
  if (!scanned) {
    scanned = true;
    const char *dir = std::getenv("K3C_PTX_DIR");
    if (dir && *dir) {
      std::error_code ec;
      for (const auto &e : std::filesystem::directory_iterator(dir, ec)) {
        if (e.path().extension() != ".ptx")
          continue;
        std::ifstream in(e.path(), std::ios::binary);
        std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
        if (!text.empty()) {
          std::fprintf(stderr,
                       "k3c: K3C_PTX_DIR: kernels of %s replace the "
                       "built-in ones\n",
                       e.path().c_str());
          files.emplace_back(e.path().string(), std::move(text));
        }
      }
    }
  }
  for (const auto &[path, text] : files)
    if (ptxDefines(text, kernel))
      return &text;
  return nullptr;
}

/// The module that defines `k3_<kernel>`: from K3C_PTX_DIR (overridePtx),
/// else from `ptx` when given (a plan's own PTX), else from the PTX built
/// into this binary; loaded into `own` when given (moduleFor).
Expected<cuda::CUmodule> kernelModule(cuda::Driver &driver,
                                      const std::string &kernel,
                                      const std::string *ptx,
                                      CudaModules *own = nullptr) {
  if (const std::string *dev = overridePtx(kernel))
    return moduleFor(driver, *dev,
                     "K3C_PTX_DIR's PTX for kernel '" + kernel + "'", own);
  if (ptx)
    return moduleFor(driver, *ptx, "the plan's PTX for kernel '" + kernel + "'",
                     own);
  if (embeddedPtxModules().empty())
    return makeError("this build has no CUDA kernels (nvcc was not found "
                     "when it was configured) and the plan carries no PTX; "
                     "use --backend cpu");
  const PtxModule *m = ptxModuleFor(kernel);
  if (!m)
    return makeError("kernel '", kernel,
                     "' has no CUDA implementation in this build");
  return moduleFor(driver, std::string(m->ptx, m->size),
                   std::string("PTX module '") + m->name + "'", own);
}

/// `k3_<kernel>` of kernelModule; with `own`, the kernel's module is
/// recorded there too.
Expected<cuda::CUfunction> kernelFunction(cuda::Driver &driver,
                                          const std::string &kernel,
                                          const std::string *ptx,
                                          CudaModules *own = nullptr) {
  Expected<cuda::CUmodule> mod = kernelModule(driver, kernel, ptx, own);
  if (!mod)
    return mod.status();
  Expected<cuda::CUfunction> f = driver.function(*mod, "k3_" + kernel);
  if (f && own)
    own->byKernel.emplace(kernel, *mod);
  return f;
}

} // namespace

Expected<cuda::CUfunction> findCudaKernel(const std::string &kernel) {
  Expected<cuda::Driver *> driver = cuda::Driver::get();
  if (!driver)
    return driver.status();
  return kernelFunction(**driver, kernel, nullptr);
}

Expected<std::pair<cuda::CUdeviceptr, size_t>>
findCudaGlobal(const std::string &kernel, const std::string &variable) {
  Expected<cuda::Driver *> driver = cuda::Driver::get();
  if (!driver)
    return driver.status();
  Expected<cuda::CUmodule> mod = kernelModule(**driver, kernel, nullptr);
  if (!mod)
    return mod.status();
  return (*driver)->global(*mod, variable);
}

CudaBackend::~CudaBackend() {
  if (!driver_)
    return;
  // Work in flight reads the buffers freed after this (a bind that failed
  // may leave draws of synthetic weights queued on the null stream).
  if (stream_)
    (void)driver_->synchronize(stream_);
  if (drawnBytes_ > 0)
    (void)driver_->synchronize(nullptr);
  driver_->destroy(graphExec_);
  driver_->destroy(graph_);
  driver_->destroy(start_);
  driver_->destroy(end_);
  for (cuda::CUevent e : launchEvents_)
    driver_->destroy(e);
  driver_->destroy(stream_);
  for (const auto &[ptx, m] : modules_.byPtx)
    driver_->unloadModule(m);
}

Expected<std::pair<cuda::CUdeviceptr, size_t>>
CudaBackend::moduleGlobal(const std::string &kernel,
                          const std::string &variable) const {
  auto it = modules_.byKernel.find(kernel);
  if (it == modules_.byKernel.end())
    return makeError("kernel '", kernel, "' is not one this backend loaded");
  return driver_->global(it->second, variable);
}

std::string CudaBackend::name() const {
  return "cuda (" + driver_->deviceName() + ")";
}

Expected<std::unique_ptr<CudaBackend>>
CudaBackend::bind(const PlanDoc &plan, const TensorStore &store, bool useGraph,
                  Communicator *comm, const BindProgress &progress) {
  K3_RETURN_IF_ERROR(validatePlan(plan));
  K3_RETURN_IF_ERROR(checkPlanCommunicator(plan, comm));
  // Host-staged collectives stop the stream: no graph, no chained steps.
  if (plan.ranks > 1)
    useGraph = false;
  Expected<cuda::Driver *> driver = cuda::Driver::get();
  if (!driver)
    return driver.status();

  std::unique_ptr<CudaBackend> be(new CudaBackend());
  be->driver_ = *driver;
  cuda::Driver &d = **driver;
  be->vocab_ = plan.config.vocabSize;
  be->maxSeq_ = plan.maxSeq;
  be->logits_.assign(static_cast<size_t>(be->vocab_), 0.0f);
  be->lastLogits_ = be->logits_.data();
  be->slots_ = plan.maxBatch;
  be->plan_ = plan;
  be->plan_.ptxModules.clear(); // the functions are resolved below
  be->comm_ = plan.ranks > 1 ? comm : nullptr;

  // Every kernel first: a missing one is the most likely error. The plan's
  // own PTX wins over the binary's (it is what the plan was compiled with).
  // Resolved once per distinct kernel (a plan launches the same few kernels
  // many times; each lookup keys on a module's whole PTX text).
  std::map<std::string, cuda::CUfunction> byKernel;
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const PlanLaunch &l = plan.launches[i];
    auto known = byKernel.find(l.kernel);
    const KernelInfo *info = findKernel(l.kernel);
    if (known == byKernel.end() && info && info->collective) {
      // No kernel: the communicator runs it (runCollective).
      known = byKernel.emplace(l.kernel, nullptr).first;
    } else if (known == byKernel.end()) {
      Expected<cuda::CUfunction> f =
          kernelFunction(d, l.kernel, plan.ptxFor(l.kernel), &be->modules_);
      if (!f)
        return f.status().withContext("launch " + std::to_string(i));
      known = byKernel.emplace(l.kernel, *f).first;
    }
    be->functions_.push_back(known->second);
    Grid g;
    for (int a = 0; a < 3; ++a) {
      g.grid[a] = l.grid[a];
      g.block[a] = l.block[a];
      g.cluster[a] = l.cluster[a];
    }
    g.smem = l.smem;
    be->grids_.push_back(g);
  }

  // The projections' multi-row forms (steps of several rows), from the same
  // module as the launch's kernel; a PTX without them (an older plan's)
  // leaves those launches row by row, and so does K3C_ROWS_FORMS=0 (to
  // measure what they buy).
  const char *formsEnv = std::getenv("K3C_ROWS_FORMS");
  const bool useForms = !(formsEnv && std::string(formsEnv) == "0");
  // kda_decode's chunk form runs a prompt chunk's KDA rows unless
  // K3C_KDA_CHUNK=0 (the run form, bit for bit the decode): measured on the
  // H200 ~195 µs per 64 rows against ~4.9 µs a row (docs/PERF.md
  // 2026-12-04, twenty-first session).
  const char *chunkEnv = std::getenv("K3C_KDA_CHUNK");
  const bool useKdaChunk = !(chunkEnv && std::string(chunkEnv) == "0");
  // mla_attend_clustered's chunk form likewise (K3C_MLA_CHUNK=0: the rows
  // form, each row its own launch's bits).
  const char *mlaChunkEnv = std::getenv("K3C_MLA_CHUNK");
  const bool useMlaChunk = !(mlaChunkEnv && std::string(mlaChunkEnv) == "0");
  // The forms whose GPU tests have not run yet (kCudaGpuUntestedForms) only
  // with K3C_GPU_UNTESTED_FORMS=1 or a list of their names; otherwise the
  // forms they would replace. K3C_FORMS_OFF=name,... (or all) leaves those
  // optional forms (kCudaOptionalForms) for the forms they replace, to time a
  // step without them.
  Expected<std::set<std::string>> untestedNamed = formNames(
      "K3C_GPU_UNTESTED_FORMS", kCudaGpuUntestedForms,
      "a form waiting for its GPU tests (RowsForms.h kCudaGpuUntestedForms); "
      "give 1 for all",
      /*allAlias=*/"1");
  if (!untestedNamed)
    return untestedNamed.status();
  Expected<std::set<std::string>> off = formNames(
      "K3C_FORMS_OFF", kCudaOptionalForms,
      "a form the backend can leave (RowsForms.h kCudaOptionalForms), or all");
  if (!off)
    return off.status();
  // The forms measured slower than those they replace only with
  // K3C_FORMS_ON=name,... (or all).
  Expected<std::set<std::string>> on = formNames(
      "K3C_FORMS_ON", kCudaFormsOffByDefault,
      "a form off by default (RowsForms.h kCudaFormsOffByDefault), or all");
  if (!on)
    return on.status();
  auto allowed = [&](const std::string &entry) {
    return !off->count(entry) && (!offByDefault(entry) || on->count(entry)) &&
           (!gpuUntested(entry) || untestedNamed->count(entry));
  };
  // The MoE chunk's narrow tiles run as a pair (gate/up and down).
  if (allowed(kCudaMoeChunkNarrowKernels[0]) !=
      allowed(kCudaMoeChunkNarrowKernels[1]))
    return makeError("K3C_GPU_UNTESTED_FORMS or K3C_FORMS_OFF names one of ",
                     kCudaMoeChunkNarrowKernels[0], " and ",
                     kCudaMoeChunkNarrowKernels[1],
                     ", which run together: name both");
  const char *syncEnv = std::getenv("K3C_SYNC_STEPS");
  be->syncEachStep_ = syncEnv && std::string(syncEnv) == "1";
  // The tensor-core projections split k until the grid gives every SM this
  // many blocks (gemvMmaSplit; 1 by default): a knob to sweep on the GPU
  // without a rebuild, each split's bits covered by LinearRowsMmaCuda.
  Expected<int> blocksPerSm = envInt("K3C_MMA_BLOCKS_PER_SM", 1, 8, 1);
  if (!blocksPerSm)
    return blocksPerSm.status();
  be->mmaBlocksPerSm_ = *blocksPerSm;
  // The MoE chunk's plan kernel: the block (parallel, the default;
  // MoeChunkParams::parallelPlan) or thread 0 walking the pairs (serial, the
  // same places). With the route in 8 groups, a batch-16 step of the full
  // Kimi-Linear geometry took 14.34 ms against 16.46 (docs/PERF.md).
  if (const char *e = std::getenv("K3C_MOE_CHUNK_PLAN"); e && *e) {
    const std::string v = e;
    if (v != "serial" && v != "parallel")
      return makeError("K3C_MOE_CHUNK_PLAN must be serial or parallel, got '",
                       v, "'");
    be->moeParallelPlan_ = v == "parallel";
  }
  // The MoE chunk's route: blocks per row (k3_moe_chunk_route's grid y).
  Expected<int> routeGroups = envInt("K3C_MOE_CHUNK_ROUTE_GROUPS", 1, 64, 8);
  if (!routeGroups)
    return routeGroups.status();
  be->moeRouteGroups_ = *routeGroups;
  std::map<std::string, std::pair<cuda::CUfunction, int64_t>> rowsForms;
  std::map<std::string, cuda::CUfunction> mmaForms;
  std::map<std::string, std::pair<cuda::CUfunction, int64_t>> mma16Forms;
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const std::string &k = plan.launches[i].kernel;
    std::pair<cuda::CUfunction, int64_t> form{nullptr, 0};
    if (useForms && (hasRowsForm(k) || hasRowsArrayForm(k)) &&
        allowed(k + "_rows")) {
      std::string name = rowsFormName(k, plan.launches[i].cluster[0]);
      if (!allowed(name))
        name = k + "_rows";
      auto known = rowsForms.find(name);
      if (known == rowsForms.end()) {
        Expected<cuda::CUfunction> f =
            kernelFunction(d, name, plan.ptxFor(k), &be->modules_);
        // A plan's PTX from before the clustered form: the general one.
        if (!f && name != k + "_rows")
          f = kernelFunction(d, k + "_rows", plan.ptxFor(k), &be->modules_);
        Expected<int64_t> smem =
            f ? d.allowDynamicShared(*f) : Expected<int64_t>(f.status());
        if (f && smem)
          form = {*f, *smem};
        known = rowsForms.emplace(name, form).first;
      }
      form = known->second;
    }
    be->rowsFunctions_.push_back(form.first);
    be->rowsSmemCap_.push_back(form.second);
    be->rowsArray_.push_back(hasRowsArrayForm(k));
    cuda::CUfunction mma = nullptr;
    if (form.first && hasMmaRowsForm(k)) {
      auto known = mmaForms.find(k);
      if (known == mmaForms.end()) {
        Expected<cuda::CUfunction> f =
            kernelFunction(d, k + "_rows_mma", plan.ptxFor(k), &be->modules_);
        Expected<int64_t> smem =
            f ? d.allowDynamicShared(*f) : Expected<int64_t>(f.status());
        known =
            mmaForms
                .emplace(k,
                         f && smem && *smem >= kGemvMmaSmemBytes ? *f : nullptr)
                .first;
      }
      mma = known->second;
    }
    be->mmaFunctions_.push_back(mma);
    std::pair<cuda::CUfunction, int64_t> narrow{nullptr, 0};
    if (form.first && hasMma16RowsForm(k) && allowed(k + "_rows_mma16")) {
      auto known = mma16Forms.find(k);
      if (known == mma16Forms.end()) {
        Expected<cuda::CUfunction> f =
            kernelFunction(d, k + "_rows_mma16", plan.ptxFor(k), &be->modules_);
        Expected<int64_t> smem =
            f ? d.allowDynamicShared(*f) : Expected<int64_t>(f.status());
        known = mma16Forms
                    .emplace(k, f && smem ? std::make_pair(*f, *smem)
                                          : std::make_pair(nullptr, int64_t{0}))
                    .first;
      }
      narrow = known->second;
    }
    be->mma16Functions_.push_back(narrow.first);
    be->mma16SmemCap_.push_back(narrow.second);
    // The tensor-core forms' pre-norm, from the same module.
    cuda::CUfunction preNorm = nullptr;
    if (mma) {
      Expected<cuda::CUfunction> f = kernelFunction(
          d, kCudaMmaPreNormKernel, plan.ptxFor(k), &be->modules_);
      if (f)
        preNorm = *f;
    }
    be->preNormFunctions_.push_back(preNorm);
    cuda::CUfunction run = nullptr;
    if (form.first && hasRunForm(k) && plan.launches[i].cluster[0] > 1) {
      Expected<cuda::CUfunction> f =
          kernelFunction(d, k + "_run", plan.ptxFor(k), &be->modules_);
      if (f)
        run = *f;
    }
    be->runFunctions_.push_back(run);
    cuda::CUfunction chunk = nullptr;
    const bool kdaChunk = run && useKdaChunk;
    const bool mlaChunk = form.first && hasRowsAnySlotForm(k) && useMlaChunk;
    if ((kdaChunk || mlaChunk) && hasChunkForm(k)) {
      Expected<cuda::CUfunction> f =
          kernelFunction(d, k + "_chunk", plan.ptxFor(k), &be->modules_);
      Expected<int64_t> smem =
          f ? d.allowDynamicShared(*f) : Expected<int64_t>(f.status());
      if (f && smem && *smem >= chunkFormSmemBytes(k))
        chunk = *f;
    }
    be->chunkFunctions_.push_back(chunk);
    cuda::CUfunction batch = nullptr;
    if (form.first && hasBatchForm(k) && allowed(k + "_batch")) {
      Expected<cuda::CUfunction> f =
          kernelFunction(d, k + "_batch", plan.ptxFor(k), &be->modules_);
      Expected<int64_t> smem =
          f ? d.allowDynamicShared(*f) : Expected<int64_t>(f.status());
      // The batch form takes its chunk form's shared memory.
      if (f && smem && *smem >= chunkFormSmemBytes(k))
        batch = *f;
    }
    be->batchFunctions_.push_back(batch);
    // The MoE chunk kernels, once, from the moe_ffn launches' module; a
    // launch takes them only with bf16 weights everywhere.
    bool moeOk = false;
    if (form.first && k == "moe_ffn") {
      if (!be->moeChunk_[0]) {
        static_assert(std::size(kCudaMoeChunkKernels) == 5, "five steps");
        std::array<cuda::CUfunction, 5> fns{};
        bool all = true;
        for (int f = 0; f < 5 && all; ++f) {
          Expected<cuda::CUfunction> fn = kernelFunction(
              d, kCudaMoeChunkKernels[f], plan.ptxFor(k), &be->modules_);
          all = fn.hasValue();
          if (all)
            fns[f] = *fn;
        }
        for (int f : {2, 3}) {
          if (!all)
            break;
          Expected<int64_t> smem = d.allowDynamicShared(fns[f]);
          all = smem && *smem >= kMmaTileSmemBytes;
        }
        if (all)
          be->moeChunk_ = fns;
        // Their narrow tiles for chunks of few rows, both or neither.
        std::array<cuda::CUfunction, 2> narrowFns{};
        bool narrow = all;
        for (int f = 0; f < 2 && narrow; ++f) {
          narrow = allowed(kCudaMoeChunkNarrowKernels[f]);
          if (!narrow)
            break;
          Expected<cuda::CUfunction> fn = kernelFunction(
              d, kCudaMoeChunkNarrowKernels[f], plan.ptxFor(k), &be->modules_);
          Expected<int64_t> smem =
              fn ? d.allowDynamicShared(*fn) : Expected<int64_t>(fn.status());
          narrow = fn && smem && *smem >= kMmaNarrowSmemBytes;
          if (narrow)
            narrowFns[f] = *fn;
        }
        if (narrow)
          be->moeChunkNarrow_ = narrowFns;
      }
      moeOk = be->moeChunk_[0] != nullptr;
      for (const auto &[name, arg] : plan.launches[i].args)
        if (arg.kind == PlanArg::Kind::Weight &&
            plan.weights[static_cast<size_t>(arg.index)].format == "mxfp4")
          moeOk = false;
    }
    be->moeChunkOk_.push_back(moeOk);
  }

  PlanMemory mem;
  K3_RETURN_IF_ERROR(alloc(plan.arenaBytes, be->arena_).withContext("arena"));
  mem.arena = be->arena_.as<uint8_t>();
  K3_RETURN_IF_ERROR(alloc(kStepWords * sizeof(int64_t), be->step_)
                         .withContext("the step block"));
  mem.step = be->step_.as<int64_t>();
  be->chains_ = planChainsGreedy(plan) && !be->comm_;
  be->states_.resize(plan.states.size());
  for (size_t i = 0; i < plan.states.size(); ++i) {
    StateKind kind = StateKind::KdaState;
    parseStateKind(plan.states[i].kind, kind); // validatePlan checked it
    be->stepLocal_.push_back(stateKindIsStepLocal(kind));
    be->stateBytes_.push_back(plan.states[i].bytes);
    // Slots start 256-byte aligned, as cuMemAlloc's allocations do.
    be->stateStride_.push_back((plan.states[i].bytes + 255) / 256 * 256);
    // validatePlan bounds every slot's states together: no wrap.
    K3_RETURN_IF_ERROR(
        alloc(be->stateStride_[i] * static_cast<uint64_t>(be->slots_),
              be->states_[i])
            .withContext("state '" + plan.states[i].name + "'"));
    mem.states.push_back(be->states_[i].as<uint8_t>());
    mem.stateBytes.push_back(plan.states[i].bytes);
  }

  // Weights: resolve in the checkpoint as the CPU backend does, then copy
  // each piece to the device and rebuild the WeightRefs around the copies.
  // Synthetic weights that are plain normals stored bf16 (nearly all of a
  // model's bytes) are drawn on the device instead, the same bits
  // (kernels/synthetic): resolved through a store that does not make them
  // on the host (TensorStore::deferringDrawn), each drawn where the copy
  // would have gone. K3C_SYNTHETIC_ON_HOST=1 makes them on the host.
  const char *onHostEnv = std::getenv("K3C_SYNTHETIC_ON_HOST");
  TensorStore drawing = store;
  cuda::CUfunction drawFn = nullptr;
  if (!(onHostEnv && std::string(onHostEnv) == "1")) {
    drawing = store.deferringDrawn();
    // A build or a K3C_PTX_DIR without the kernel makes them on the host.
    if (drawing.defersDrawn())
      if (Expected<cuda::CUfunction> f =
              kernelFunction(d, kSyntheticNormalKernel, nullptr, &be->modules_))
        drawFn = *f;
    if (!drawFn)
      drawing = store;
  }
  auto upload = [&](const void *src, uint64_t bytes,
                    const std::string &what) -> Expected<const uint8_t *> {
    if (std::optional<std::pair<DrawnTensor, uint64_t>> drawn =
            drawFn ? drawing.drawnAt(src) : std::nullopt) {
      if (drawn->second + bytes > drawn->first.bytes)
        return makeError(what, ": ", bytes, " bytes from byte ", drawn->second,
                         " of a ", drawn->first.bytes, "-byte tensor");
      Expected<cuda::DeviceBuffer> b = cuda::DeviceBuffer::create(bytes);
      if (!b)
        return b.status().withContext("allocating " + what);
      SyntheticNormalParams p;
      p.out = b->as<uint16_t>();
      p.count = static_cast<int64_t>(bytes / 2);
      p.first = static_cast<int64_t>(drawn->second / 2);
      p.stream = drawn->first.stream;
      p.scale = drawn->first.scale;
      const int64_t perBlock =
          int64_t{kSyntheticThreads} * kSyntheticValuesPerThread;
      const int64_t grid[3] = {
          std::max<int64_t>(1, std::min<int64_t>((p.count + perBlock - 1) /
                                                     perBlock,
                                                 int64_t{d.smCount()} * 8)),
          1, 1};
      const int64_t block[3] = {kSyntheticThreads, 1, 1};
      if (Status st = d.launch(drawFn, grid, block, 0, nullptr, &p); !st)
        return st.withContext("drawing " + what + " on the device");
      be->drawnBytes_ += bytes;
      be->weightData_.push_back(b.take());
      return be->weightData_.back().as<const uint8_t>();
    }
    Expected<cuda::DeviceBuffer> b = cuda::DeviceBuffer::upload(src, bytes);
    if (!b)
      return b.status().withContext("uploading " + what);
    be->weightData_.push_back(b.take());
    return be->weightData_.back().as<const uint8_t>();
  };
  auto uploadRef = [&](const WeightRef &host, const PlanWeight &w,
                       const std::vector<int64_t> &shape,
                       WeightRef &out) -> Status {
    out = host;
    // Matrix rows and the elements per row (the conv weights [C, 1, W] are
    // 3-D: everything after the first dimension is one row).
    const uint64_t rows = static_cast<uint64_t>(shape[0]);
    uint64_t cols = 1;
    for (size_t i = 1; i < shape.size(); ++i)
      cols *= static_cast<uint64_t>(shape[i]);
    if (host.format == kWeightMxfp4) {
      Expected<const uint8_t *> p =
          upload(host.packed, rows * cols / 2, w.name + " (packed)");
      if (!p)
        return p.status();
      Expected<const uint8_t *> s =
          upload(host.scale, rows * cols / 32, w.name + " (scale)");
      if (!s)
        return s.status();
      out.packed = *p;
      out.scale = *s;
      return Status::ok();
    }
    if (host.bf16) {
      Expected<const uint8_t *> p = upload(host.bf16, rows * cols * 2, w.name);
      if (!p)
        return p.status();
      out.bf16 = reinterpret_cast<const uint16_t *>(*p);
    }
    return Status::ok();
  };
  const uint64_t totalBytes = planWeightsBytes(plan);
  uint64_t doneBytes = 0;
  for (size_t i = 0; i < plan.weights.size(); ++i) {
    const PlanWeight &w = plan.weights[i];
    ResolvedWeight host;
    // Only a bf16 matrix taken whole is bound as the store's bytes are
    // (a split weight's part is gathered, an f32 one widened, on the host).
    K3_RETURN_IF_ERROR(resolveWeight(
        w, w.format == "bf16" && !w.isSplit() ? drawing : store, host));
    PlanMemory::Weight dw;
    if (w.stacked()) {
      const std::vector<int64_t> each(w.shape.begin() + 1, w.shape.end());
      std::vector<WeightRef> table(host.table.size());
      for (size_t e = 0; e < table.size(); ++e)
        K3_RETURN_IF_ERROR(uploadRef(host.table[e], w, each, table[e]));
      Expected<const uint8_t *> t =
          upload(table.data(), table.size() * sizeof(WeightRef),
                 w.name + " (expert table)");
      if (!t)
        return t.status();
      dw.table = reinterpret_cast<const WeightRef *>(*t);
    } else if (w.format == "mxfp4" || w.format == "bf16") {
      K3_RETURN_IF_ERROR(uploadRef(host.ref, w, w.shape, dw.ref));
      if (w.format == "bf16") {
        dw.data = reinterpret_cast<const uint8_t *>(dw.ref.bf16);
        dw.bytes = host.bytes;
      }
    } else { // f32, or vector (bf16 or f32 as the checkpoint stores it)
      Expected<const uint8_t *> p = upload(host.data, host.bytes, w.name);
      if (!p)
        return p.status();
      dw.data = *p;
      dw.bytes = host.bytes;
    }
    dw.dtype = host.dtype;
    mem.weights.push_back(dw);
    // Made (synthetic) weights live in host memory only until copied: a
    // model larger than host memory passes through one weight at a time.
    store.releaseMade();
    if (progress)
      progress(doneBytes += planWeightBytes(w), totalBytes);
  }

  if (be->drawnBytes_ > 0)
    K3_RETURN_IF_ERROR(d.synchronize(nullptr).withContext(
        "drawing the synthetic weights on the device"));
  be->weightViews_ = mem.weights;
  be->launches_.resize(plan.launches.size());
  for (size_t i = 0; i < plan.launches.size(); ++i)
    K3_RETURN_IF_ERROR(bindLaunch(plan, i, mem, be->launches_[i]));
  be->logitsOffset_ = plan.buffers[plan.logitsBuffer].offset;
  be->logitsTail_ = logitsTailStart(plan);

  Expected<cuda::CUstream> stream = d.createStream();
  if (!stream)
    return stream.status();
  be->stream_ = *stream;
  Expected<cuda::CUevent> e0 = d.createEvent(), e1 = d.createEvent();
  if (!e0)
    return e0.status();
  if (!e1)
    return e1.status();
  be->start_ = *e0;
  be->end_ = *e1;

  if (useGraph && d.hasGraphs() && !be->launches_.empty()) {
    // One chain of kernel nodes in plan order; the input values baked in now
    // are replaced before every replay.
    Expected<cuda::CUgraph> graph = d.createGraph();
    if (!graph)
      return graph.status();
    be->graph_ = *graph;
    cuda::CUgraphNode prev = nullptr;
    for (size_t i = 0; i < be->launches_.size(); ++i) {
      const Grid &g = be->grids_[i];
      Expected<cuda::CUgraphNode> node =
          d.addKernelNode(*graph, prev, be->functions_[i], g.grid, g.block,
                          g.smem, be->launches_[i].params->data(),
                          /*programmatic=*/true, g.cluster);
      if (!node)
        return node.status().withContext("launch " + std::to_string(i));
      be->nodes_.push_back(*node);
      prev = *node;
    }
    Expected<cuda::CUgraphExec> exec = d.instantiate(*graph);
    if (!exec)
      return exec.status();
    be->graphExec_ = *exec;
  }
  K3_RETURN_IF_ERROR(be->resetState());
  return be;
}

Status CudaBackend::settle() {
  if (unsettledSteps_ == 0)
    return Status::ok();
  const int64_t steps = unsettledSteps_, rows = unsettledRows_;
  unsettledSteps_ = unsettledRows_ = 0;
  Status st = driver_->synchronize(stream_);
  return st ? st
            : st.withContext(std::to_string(steps) + " step(s) of " +
                             std::to_string(rows) +
                             " rows queued earlier and not waited for "
                             "(K3C_SYNC_STEPS=1 waits for each)");
}

Status CudaBackend::resetState() {
  K3_RETURN_IF_ERROR(settle());
  for (cuda::DeviceBuffer &s : states_)
    K3_RETURN_IF_ERROR(driver_->memset8(s.get(), 0, s.bytes()));
  // cuMemsetD8 may return before it is done, and it runs on the legacy
  // default stream, which our non-blocking stream does not wait for.
  return driver_->synchronize(nullptr).withContext("zeroing the state");
}

Status CudaBackend::setStep(int64_t token, int64_t pos) {
  K3_RETURN_IF_ERROR(settle());
  stepHost_[kStepToken] = token;
  stepHost_[kStepPos] = pos;
  stepHost_[kStepNonFinite] = 0;
  stepPos_ = pos + 1;
  return driver_->copyToDeviceAsync(step_.get(), stepHost_, sizeof(stepHost_),
                                    stream_);
}

Expected<std::vector<GreedyChoice>> CudaBackend::chainGreedy(int64_t more) {
  if (!chains_)
    return makeError(name(), ": the plan has no argmax writing the step "
                             "block; recompile it with this k3c");
  K3_RETURN_IF_ERROR(settle());
  if (rowsStep_) {
    // The chain goes on from the last row of the last step (a prompt
    // chunk's last token, whose argmax wrote the next token and position):
    // slot 0's own launches take over its step block.
    if (lastRows_ == 0)
      return makeError(name(), ": no step to chain greedy steps from (the "
                               "last step of rows failed)");
    const Row &last = *rows_[lastRows_ - 1];
    if (last.slot != 0)
      return makeError(name(),
                       ": chained greedy steps go on from slot 0; "
                       "the last step's last row was slot ",
                       last.slot);
    K3_RETURN_IF_ERROR(driver_->copyDeviceAsync(
        step_.get(), last.step, kStepWords * sizeof(int64_t), stream_));
    stepPos_ = last.stepHost[kStepPos] + 1;
    rowsStep_ = false;
    lastRows_ = 1;
    lastLogits_ = logits_.data();
  }
  if (more < 0 || more > maxSeq_ - stepPos_)
    return makeError("chaining ", more, " steps from position ", stepPos_,
                     " passes max_seq ", maxSeq_);
  const uint64_t slot = kStepWords * sizeof(int64_t);
  const uint64_t need = slot * static_cast<uint64_t>(more + 1);
  if (chainRing_.bytes() < need) {
    Expected<cuda::DeviceBuffer> ring = cuda::DeviceBuffer::create(need);
    if (!ring)
      return ring.status().withContext("the chained steps' ring");
    chainRing_ = ring.take();
  }
  K3_RETURN_IF_ERROR(
      driver_->copyDeviceAsync(chainRing_.get(), step_.get(), slot, stream_));
  for (int64_t i = 1; i <= more; ++i) {
    // The kernels read the token and position from the step block; the
    // graph's nodes (or the bound params) need no update.
    if (graphExec_) {
      K3_RETURN_IF_ERROR(driver_->launchGraph(graphExec_, stream_));
    } else {
      for (size_t l = 0; l < launches_.size(); ++l)
        K3_RETURN_IF_ERROR(launchBound(l));
    }
    K3_RETURN_IF_ERROR(driver_->copyDeviceAsync(
        chainRing_.get() + slot * static_cast<uint64_t>(i), step_.get(), slot,
        stream_));
  }
  std::vector<int64_t> ring(static_cast<size_t>(kStepWords * (more + 1)));
  K3_RETURN_IF_ERROR(
      driver_->copyToHostAsync(ring.data(), chainRing_.get(), need, stream_));
  if (Status st = driver_->synchronize(stream_); !st)
    return st.withContext("chained greedy steps from position " +
                          std::to_string(stepPos_));
  stepPos_ += more;
  std::vector<GreedyChoice> out(static_cast<size_t>(more + 1));
  for (int64_t i = 0; i <= more; ++i) {
    out[i].id = ring[i * kStepWords + kStepToken];
    out[i].nonFinite = ring[i * kStepWords + kStepNonFinite] != 0;
  }
  return out;
}

Status CudaBackend::step(int64_t token, int64_t pos) {
  K3_RETURN_IF_ERROR(checkStepInputs(token, pos, vocab_, maxSeq_));
  rowsStep_ = false;
  lastRows_ = 1;
  lastLogits_ = logits_.data();
  K3_RETURN_IF_ERROR(setStep(token, pos));
  K3_RETURN_IF_ERROR(driver_->record(start_, stream_));
  // Built only for an error (the step is the hot path).
  auto where = [pos] {
    return "decode step at position " + std::to_string(pos);
  };
  for (size_t i = 0; i < launches_.size(); ++i) {
    if (graphExec_ && launches_[i].inputs.empty())
      continue; // a graph node that never changes
    if (Status st = launchOne(i, token, pos); !st)
      return st.withContext(where());
  }
  if (graphExec_)
    if (Status st = driver_->launchGraph(graphExec_, stream_); !st)
      return st.withContext(where() + " (its graph)");
  K3_RETURN_IF_ERROR(driver_->record(end_, stream_));
  K3_RETURN_IF_ERROR(
      driver_->copyToHostAsync(logits_.data(), arena_.get() + logitsOffset_,
                               logits_.size() * sizeof(float), stream_));
  if (Status st = driver_->synchronize(stream_); !st)
    return st.withContext(where());
  Expected<float> ms = driver_->elapsedMs(start_, end_);
  if (!ms)
    return ms.status();
  lastStepMs_ = *ms;
  return Status::ok();
}

Status CudaBackend::launchOne(size_t index, int64_t token, int64_t pos) {
  if (!graphExec_)
    return launchDirect(index, token, pos);
  BoundLaunch &l = launches_[index];
  l.setInputs(token, pos);
  const Grid &g = grids_[index];
  // With a graph the node's params are replaced; it runs at the replay.
  Status st =
      driver_->setKernelNodeParams(graphExec_, nodes_[index], functions_[index],
                                   g.grid, g.block, g.smem, l.params->data());
  if (!st)
    return st.withContext("launch " + std::to_string(index) + " (" +
                          l.kernel->name + ")");
  return Status::ok();
}

Status CudaBackend::runLaunch(size_t index, int64_t token, int64_t pos) {
  if (index >= launches_.size())
    return makeError("launch ", index, " is out of range");
  if (graphExec_)
    return makeError("runLaunch needs a backend bound without a CUDA graph");
  K3_RETURN_IF_ERROR(setStep(token, pos));
  K3_RETURN_IF_ERROR(launchOne(index, token, pos));
  return driver_->synchronize(stream_).withContext(
      "launch " + std::to_string(index) + " (" + launches_[index].kernel->name +
      ")");
}

Status CudaBackend::readArena(std::vector<uint8_t> &out) {
  K3_RETURN_IF_ERROR(settle());
  out.resize(arena_.bytes());
  return driver_->copyToHost(out.data(), arena_.get(), out.size());
}

Status CudaBackend::readState(size_t state, std::vector<uint8_t> &out) {
  return readSlotState(0, state, out);
}

Status CudaBackend::writeState(size_t state,
                               const std::vector<uint8_t> &bytes) {
  return writeSlotState(0, state, bytes);
}

// A step-local state (one step's, not the sequence's) is read and written
// in slot 0's place: what step() and the debugging paths use.
Status CudaBackend::readSlotState(int64_t slot, size_t state,
                                  std::vector<uint8_t> &out) {
  K3_RETURN_IF_ERROR(checkStateAccess(slot, state, stateBytes_));
  K3_RETURN_IF_ERROR(settle());
  out.resize(stateBytes_[state]);
  return driver_->copyToHost(
      out.data(), slotState(stepLocal_[state] ? 0 : slot, state), out.size());
}

Status CudaBackend::writeSlotState(int64_t slot, size_t state,
                                   const std::vector<uint8_t> &bytes) {
  const size_t written = bytes.size();
  K3_RETURN_IF_ERROR(checkStateAccess(slot, state, stateBytes_, &written));
  K3_RETURN_IF_ERROR(settle());
  K3_RETURN_IF_ERROR(
      driver_->copyToDevice(slotState(stepLocal_[state] ? 0 : slot, state),
                            bytes.data(), bytes.size()));
  // A pageable host-to-device copy may return before its DMA is done (on
  // the legacy stream, see resetState).
  return driver_->synchronize(nullptr).withContext("writing a state");
}

Status CudaBackend::resetSlot(int64_t slot) {
  K3_RETURN_IF_ERROR(checkSlot(slot));
  K3_RETURN_IF_ERROR(settle());
  for (size_t i = 0; i < states_.size(); ++i)
    K3_RETURN_IF_ERROR(driver_->memset8(slotState(slot, i), 0, stateBytes_[i]));
  return driver_->synchronize(nullptr).withContext(
      "zeroing slot " + std::to_string(slot) + "'s state");
}

//===----------------------------------------------------------------------===//
// Steps of several rows
//===----------------------------------------------------------------------===//

Status CudaBackend::ensureRows(size_t n) {
  if (rows_.size() >= n)
    return Status::ok();
  // Queued steps read the rows about to be freed.
  K3_RETURN_IF_ERROR(settle());
  size_t count = 1;
  while (count < n)
    count *= 2;
  // The rows (and their logits) go: nothing may point into them.
  rowsStep_ = false;
  lastRows_ = 1;
  lastLogits_ = logits_.data();
  rows_.clear();
  rowArenaStride_ = (plan_.arenaBytes + 255) / 256 * 256;
  K3_RETURN_IF_ERROR(alloc(rowArenaStride_ * count, rowArenas_)
                         .withContext("the arenas of " + std::to_string(count) +
                                      " step rows"));
  const size_t stepBytes = kStepWords * sizeof(int64_t);
  K3_RETURN_IF_ERROR(alloc(stepBytes * count, rowSteps_)
                         .withContext("the step blocks of " +
                                      std::to_string(count) + " step rows"));
  std::vector<PlanMemory> mems(count);
  for (size_t index = 0; index < count; ++index) {
    const std::string what = " of step row " + std::to_string(index);
    auto row = std::make_unique<Row>();
    row->arena = rowArenas_.get() + rowArenaStride_ * index;
    row->step = rowSteps_.get() + stepBytes * index;
    row->local.resize(plan_.states.size());
    PlanMemory mem;
    mem.arena = reinterpret_cast<uint8_t *>(static_cast<uintptr_t>(row->arena));
    mem.stateBytes = stateBytes_;
    mem.weights = weightViews_;
    mem.step = reinterpret_cast<int64_t *>(static_cast<uintptr_t>(row->step));
    for (size_t i = 0; i < plan_.states.size(); ++i) {
      if (stepLocal_[i]) {
        K3_RETURN_IF_ERROR(
            alloc(stateBytes_[i], row->local[i])
                .withContext("state '" + plan_.states[i].name + "'" + what));
        K3_RETURN_IF_ERROR(
            driver_->memset8(row->local[i].get(), 0, stateBytes_[i]));
        mem.states.push_back(row->local[i].as<uint8_t>());
      } else {
        mem.states.push_back(reinterpret_cast<uint8_t *>(slotState(0, i)));
      }
    }
    row->slot = 0;
    mems[index] = std::move(mem);
    rows_.push_back(std::move(row));
  }
  // Binding a row's launches is host work only (~1 ms a row at Kimi-Linear
  // size: a 64-row chunk's first step spent ~58 ms here on the H200), each
  // row its own: on the CPU pool's threads.
  std::vector<Status> bound(count);
  cpu::parallelRows(static_cast<int64_t>(count), int64_t{1} << 40,
                    [&](int64_t begin, int64_t end) {
                      for (int64_t i = begin; i < end; ++i) {
                        Row &row = *rows_[static_cast<size_t>(i)];
                        bound[static_cast<size_t>(i)] = bindRowLaunches(
                            plan_, mems[static_cast<size_t>(i)], stepLocal_,
                            row.launches, row.patches);
                        row.logits.assign(static_cast<size_t>(vocab_), 0.0f);
                      }
                    });
  for (size_t index = 0; index < count; ++index)
    K3_RETURN_IF_ERROR(
        bound[index].withContext("binding step row " + std::to_string(index)));
  // The params arrays of the array forms: `count` rows each.
  size_t bytes = 0;
  rowParamsOffset_.assign(launches_.size(), 0);
  for (size_t l = 0; l < launches_.size(); ++l)
    if (rowsArray_[l] && rowsFunctions_[l]) {
      rowParamsOffset_[l] = bytes;
      bytes += (count * launches_[l].params->size() + 255) / 256 * 256;
    }
  if (bytes > 0)
    K3_RETURN_IF_ERROR(alloc(bytes, rowParams_)
                           .withContext("the step rows' params arrays"));
  rowsHostArrays_ = stepBytes * count;
  rowsHost_.assign(rowsHostArrays_ + bytes, 0);
  return driver_->synchronize(nullptr).withContext("zeroing the rows' states");
}

Status CudaBackend::uploadRows(size_t n, bool arrays) {
  const size_t stepBytes = kStepWords * sizeof(int64_t);
  for (size_t i = 0; i < n; ++i)
    std::memcpy(rowsHost_.data() + i * stepBytes, rows_[i]->stepHost,
                stepBytes);
  K3_RETURN_IF_ERROR(driver_->copyToDeviceAsync(
      rowSteps_.get(), rowsHost_.data(), n * stepBytes, stream_));
  uint8_t *const host = rowsHost_.data() + rowsHostArrays_;
  size_t end = 0;
  for (size_t l = 0; arrays && l < launches_.size(); ++l) {
    if (!rowsArray_[l] || !rowsFunctions_[l])
      continue;
    const size_t size = launches_[l].params->size();
    for (size_t i = 0; i < n; ++i)
      std::memcpy(host + rowParamsOffset_[l] + i * size,
                  rows_[i]->launches[l].params->data(), size);
    end = rowParamsOffset_[l] + n * size;
  }
  if (end == 0)
    return Status::ok();
  return driver_->copyToDeviceAsync(rowParams_.get(), host, end, stream_);
}

Expected<bool> CudaBackend::launchRows(size_t l,
                                       const std::vector<SlotStep> &rows,
                                       bool distinctSlots) {
  const size_t n = rows.size();
  const BoundLaunch &first = rows_[0]->launches[l];
  const Grid &g = grids_[l];
  if (!rowsFunctions_[l] || n < 2)
    return false;
  auto launchForm = [&](const int64_t grid[3], int64_t smem, void *params) {
    Status st = driver_->launch(rowsFunctions_[l], grid, g.block, smem, stream_,
                                params, /*programmatic=*/true, g.cluster);
    return st ? st
              : st.withContext("launch " + std::to_string(l) + " (" +
                               first.kernel->name + "'s multi-row form) of " +
                               std::to_string(n) + " rows");
  };
  if (rowsArray_[l] && !distinctSlots &&
      !hasRowsAnySlotForm(first.kernel->name)) {
    // A sequence's consecutive rows meet its states in order: one launch of
    // the run form per run of rows of one slot.
    if (!runFunctions_[l] || g.grid[1] != 1 || g.grid[2] != 1)
      return false;
    const size_t size = first.params->size();
    for (size_t a = 0; a < n;) {
      size_t b = a + 1;
      while (b < n && rows[b].slot == rows[a].slot)
        ++b;
      // With PrefillForm::Chunk, a long enough run takes the chunk form,
      // in pieces of at most kKdaChunkMaxRows rows.
      const bool chunk = chunkForm_ && chunkFunctions_[l] &&
                         b - a >= static_cast<size_t>(kKdaChunkMinRows);
      const size_t piece = chunk ? kKdaChunkMaxRows : b - a;
      for (size_t e = a; a < b; a = e) {
        e = std::min(b, a + piece);
        RowsArrayParams p;
        p.rows = rowParams_.get() + rowParamsOffset_[l] + a * size;
        p.count = static_cast<int32_t>(e - a);
        Status st = driver_->launch(
            chunk ? chunkFunctions_[l] : runFunctions_[l], g.grid, g.block,
            chunk ? kKdaChunkSmemBytes : g.smem, stream_, &p,
            /*programmatic=*/true, g.cluster);
        if (!st)
          return st.withContext(
              "launch " + std::to_string(l) + " (" + first.kernel->name +
              "'s " + (chunk ? "chunk" : "run") + " form) of rows " +
              std::to_string(a) + ".." + std::to_string(e - 1));
      }
    }
    ++launchesTogether_;
    return true;
  }
  // A form over the rows' params array with its own grid (no clusters).
  auto launchArrayForm = [&](cuda::CUfunction f, RowsLaunch &c,
                             const char *form) -> Expected<bool> {
    Status st =
        driver_->launch(f, c.grid, c.block, c.smem, stream_, c.params.data(),
                        /*programmatic=*/true, nullptr);
    if (!st)
      return st.withContext("launch " + std::to_string(l) + " (" +
                            first.kernel->name + "'s " + form + " form) of " +
                            std::to_string(n) + " rows");
    ++launchesTogether_;
    return true;
  };
  const uint64_t rowsArray = rowParams_.get() + rowParamsOffset_[l];
  if (rowsArray_[l] && chunkForm_ && chunkFunctions_[l] &&
      std::all_of(rows.begin(), rows.end(),
                  [&](const SlotStep &r) { return r.slot == rows[0].slot; })) {
    // The rows of one sequence share its cache: mla_attend_clustered's
    // chunk form reads it once per head and tile of rows.
    if (std::optional<RowsLaunch> c =
            mlaChunkLaunch(first.kernel->name, first.params->data(),
                           first.params->size(), n, rowsArray))
      return launchArrayForm(chunkFunctions_[l], *c, "chunk");
  }
  if (rowsArray_[l] && chunkForm_ && batchFunctions_[l] &&
      n >= static_cast<size_t>(kMlaChunkMinRows)) {
    // A batch's rows of different sequences: mla_attend_clustered's batch
    // form reads the head's weights once per tile of rows.
    if (std::optional<RowsLaunch> c = mlaBatchLaunch(
            first.kernel->name, first.params->data(), first.params->size(), n,
            rowsArray, driver_->smCount()))
      return launchArrayForm(batchFunctions_[l], *c, "batch");
  }
  if (rowsArray_[l]) {
    // Every row's own params (uploaded by uploadRowParams), grid y = rows.
    if (g.grid[1] != 1 || g.grid[2] != 1)
      return false;
    RowsArrayParams p;
    p.rows = rowParams_.get() + rowParamsOffset_[l];
    p.count = static_cast<int32_t>(n);
    const int64_t grid[3] = {g.grid[0], static_cast<int64_t>(n), 1};
    K3_RETURN_IF_ERROR(launchForm(grid, g.smem, &p));
    ++launchesTogether_;
    return true;
  }
  if (g.block[0] > 256 || g.block[1] != 1 || g.block[2] != 1)
    return false;
  std::vector<const void *> params(n);
  for (size_t r = 0; r < n; ++r)
    params[r] = rows_[r]->launches[l].params->data();
  if (chunkForm_ && n >= kMmaMinRows && moeChunkOk_[l]) {
    Expected<bool> moe = launchMoeChunk(l, params);
    if (!moe || *moe)
      return moe;
  }
  if (chunkForm_ && n >= kMma16MinRows && mma16Functions_[l]) {
    Expected<bool> narrow = launchMma16(l, params);
    if (!narrow || *narrow)
      return narrow;
  }
  if (chunkForm_ && n >= kMmaMinRows && mmaFunctions_[l]) {
    std::optional<RowsLaunch> mma =
        mmaRowsLaunch(first.kernel->name, params, first.params->size(),
                      rowArenaStride_, driver_->smCount() * mmaBlocksPerSm_);
    if (mma && preNormFunctions_[l]) {
      // x̂ once for all rows, not once per block of the tensor-core launch.
      const uint64_t need = preNormScratchBytes(first.kernel->name, *mma);
      if (need > 0 && preNormScratch_.bytes() < need) {
        K3_RETURN_IF_ERROR(driver_->synchronize(stream_));
        K3_RETURN_IF_ERROR(
            alloc(need, preNormScratch_).withContext("the pre-norm scratch"));
      }
      if (std::optional<RowsLaunch> norm =
              splitPreNorm(first.kernel->name, *mma, preNormScratch_.get());
          norm) {
        if (Status st =
                driver_->launch(preNormFunctions_[l], norm->grid, norm->block,
                                0, stream_, norm->params.data(),
                                /*programmatic=*/true, nullptr);
            !st)
          return st.withContext("launch " + std::to_string(l) + " (" +
                                first.kernel->name + "'s pre-norm) of " +
                                std::to_string(n) + " rows");
      }
    }
    if (mma) {
      Status st =
          driver_->launch(mmaFunctions_[l], mma->grid, mma->block, mma->smem,
                          stream_, mma->params.data(), /*programmatic=*/true,
                          mma->cluster[0] > 1 ? mma->cluster : nullptr);
      if (!st)
        return st.withContext("launch " + std::to_string(l) + " (" +
                              first.kernel->name + "'s tensor-core form) of " +
                              std::to_string(n) + " rows");
      ++launchesTogether_;
      return true;
    }
  }
  std::vector<RowsLaunch> forms = rowsLaunches(
      first.kernel->name, params, first.params->size(), rowArenaStride_);
  if (forms.empty())
    return false;
  for (const RowsLaunch &form : forms)
    if (form.smem > rowsSmemCap_[l])
      return false;
  for (RowsLaunch &form : forms)
    K3_RETURN_IF_ERROR(launchForm(g.grid, form.smem, form.params.data()));
  ++launchesTogether_;
  return true;
}

Status CudaBackend::growZeroed(uint64_t bytes, cuda::DeviceBuffer &buffer,
                               uint64_t &zeroed, const char *what) {
  if (bytes <= zeroed)
    return Status::ok();
  K3_RETURN_IF_ERROR(driver_->synchronize(stream_));
  // Counted again once the new buffer is zeroed (a failure half-way leaves
  // none counted, so the next launch allocates again).
  zeroed = 0;
  K3_RETURN_IF_ERROR(alloc(bytes, buffer).withContext(what));
  K3_RETURN_IF_ERROR(driver_->memset8(buffer.get(), 0, bytes));
  // cuMemsetD8 runs on the legacy default stream.
  K3_RETURN_IF_ERROR(driver_->synchronize(nullptr).withContext(
      std::string("zeroing ") + what));
  zeroed = bytes;
  return Status::ok();
}

Expected<bool>
CudaBackend::launchMma16(size_t l, const std::vector<const void *> &params) {
  const std::string &kernel = rows_[0]->launches[l].kernel->name;
  std::optional<Mma16Launch> m =
      mma16RowsLaunch(kernel, params, rows_[0]->launches[l].params->size(),
                      rowArenaStride_, driver_->smCount(), mma16SmemCap_[l]);
  if (!m)
    return false;
  if (m->partialBytes > mma16Partials_.bytes()) {
    K3_RETURN_IF_ERROR(driver_->synchronize(stream_));
    K3_RETURN_IF_ERROR(alloc(m->partialBytes, mma16Partials_)
                           .withContext("the narrow projections' sums"));
  }
  // Each launch leaves its tiles' counters at zero again.
  K3_RETURN_IF_ERROR(growZeroed(m->counterBytes, mma16Counters_,
                                mma16CounterBytes_,
                                "the narrow projections' counters"));
  bindMma16Scratch(*m, mma16Partials_.get(), mma16Counters_.get());
  if (Status st =
          driver_->launch(mma16Functions_[l], m->launch.grid, m->launch.block,
                          m->launch.smem, stream_, m->launch.params.data(),
                          /*programmatic=*/true, nullptr);
      !st)
    return st.withContext("launch " + std::to_string(l) + " (" + kernel +
                          "'s narrow tensor-core form) of " +
                          std::to_string(params.size()) + " rows");
  ++launchesTogether_;
  return true;
}

Expected<bool>
CudaBackend::launchMoeChunk(size_t l, const std::vector<const void *> &params) {
  const size_t size = rows_[0]->launches[l].params->size();
  std::vector<MoeChunkParams> groups;
  for (size_t a = 0; a < params.size(); a += kMoeChunkRowsMax) {
    std::vector<const void *> part(
        params.begin() + a,
        params.begin() + std::min(params.size(), a + kMoeChunkRowsMax));
    std::optional<MoeChunkParams> p =
        part.size() < 2 ? std::nullopt
                        : moeChunkParams(part, size, rowArenaStride_);
    if (!p)
      return false;
    groups.push_back(*p);
  }
  // One scratch for the largest group (launches of one stream in order).
  const uint64_t bytes = static_cast<uint64_t>(
      moeChunkScratchBytes(groups[0].one, groups[0].rows));
  // The route's arrival counters (MoeChunkParams::arrivals) start at 0;
  // each launch leaves them so.
  K3_RETURN_IF_ERROR(growZeroed(bytes, moeChunkScratch_, moeChunkScratchBytes_,
                                "the MoE chunk scratch"));
  const std::string what =
      "launch " + std::to_string(l) + " (moe_ffn's chunk form)";
  for (MoeChunkParams &c : groups) {
    c.parallelPlan = moeParallelPlan_ ? 1 : 0;
    const MoeExpertsParams &e = c.one.experts;
    moeChunkBindScratch(c, reinterpret_cast<uint8_t *>(
                               static_cast<uintptr_t>(moeChunkScratch_.get())));
    // A chunk of few rows on the narrow tiles (each expert serves a few).
    const bool narrow =
        moeChunkNarrow_[0] != nullptr && c.rows <= kMmaNarrowTokens;
    const int64_t tileTokens = narrow ? kMmaNarrowTokens : kMmaTileTokens;
    const int64_t tileSmem = narrow ? kMmaNarrowSmemBytes : kMmaTileSmemBytes;
    const int64_t tiles = (c.rows + tileTokens - 1) / tileTokens;
    const int64_t experts = e.numExperts + (e.sharedInterDim > 0 ? 1 : 0);
    const int64_t inter = std::max(e.interDim, e.sharedInterDim);
    const int64_t one[3] = {1, 1, 1};
    const int64_t rowsGrid[3] = {c.rows, 1, 1};
    const int64_t routeGrid[3] = {
        c.rows, std::min<int64_t>(moeRouteGroups_, e.numExperts), 1};
    const int64_t gateUp[3] = {inter / kMoeChunkInterTile, experts, tiles};
    const int64_t down[3] = {(e.dim + kMmaTileRows - 1) / kMmaTileRows, experts,
                             tiles};
    const int64_t block256[3] = {256, 1, 1};
    const int64_t tileBlock[3] = {kMmaTileThreads, 1, 1};
    struct Step {
      const int64_t *grid, *block;
      int64_t smem;
    } steps[5] = {{routeGrid, block256, 0},
                  {one, block256, 0},
                  {gateUp, tileBlock, tileSmem},
                  {down, tileBlock, tileSmem},
                  {rowsGrid, block256, 0}};
    for (int s = 0; s < 5; ++s) {
      const cuda::CUfunction f =
          narrow && (s == 2 || s == 3) ? moeChunkNarrow_[s - 2] : moeChunk_[s];
      if (Status st =
              driver_->launch(f, steps[s].grid, steps[s].block, steps[s].smem,
                              stream_, &c, /*programmatic=*/true, nullptr);
          !st)
        return st.withContext(what);
    }
  }
  ++launchesTogether_;
  return true;
}

void CudaBackend::bindRowToSlot(Row &r, int64_t slot) {
  if (r.slot == slot)
    return;
  for (size_t l = 0; l < r.launches.size(); ++l)
    applyStatePatches(r.launches[l], r.patches[l],
                      [&](size_t state) { return slotState(slot, state); });
  r.slot = slot;
}

Status CudaBackend::stepSlots(const std::vector<SlotStep> &rows) {
  std::vector<double> *const timed = launchTimes_;
  if (slots_ == 1 && rows.size() == 1 && !timed)
    return Backend::stepSlots(rows); // step(): the graph's path
  K3_RETURN_IF_ERROR(checkRows(rows));
  K3_RETURN_IF_ERROR(ensureRows(rows.size()));
  // Until this step has run, no row of the last one is readable (a step
  // that fails half-way leaves none: rowLogits, rowChoice refuse).
  rowsStep_ = true;
  lastRows_ = 0;
  rowWantsLogits_.clear();
  if (timed)
    K3_RETURN_IF_ERROR(ensureLaunchEvents());
  for (size_t i = 0; i < rows.size(); ++i) {
    Row &r = *rows_[i];
    bindRowToSlot(r, rows[i].slot);
    r.stepHost[kStepToken] = rows[i].token;
    r.stepHost[kStepPos] = rows[i].pos;
    r.stepHost[kStepNonFinite] = 0;
  }
  // The params-array forms (several rows' states at once for different
  // sequences, the run forms for one sequence's consecutive rows) take the
  // rows' params (inputs set) from one copy.
  std::set<int64_t> slots;
  for (const SlotStep &row : rows)
    slots.insert(row.slot);
  const bool distinctSlots = slots.size() == rows.size();
  if (rows.size() > 1) {
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t l = 0; l < launches_.size(); ++l)
        if (rowsArray_[l])
          rows_[i]->launches[l].setInputs(rows[i].token, rows[i].pos);
  }
  K3_RETURN_IF_ERROR(uploadRows(rows.size(), rows.size() > 1));
  // Launch-major, the rows in order (Backend.h): a slot's rows meet its
  // states in position order. Timed: event l + 1 closes launch l.
  if (timed)
    K3_RETURN_IF_ERROR(driver_->record(launchEvents_[0], stream_));
  // The logits tail runs for the rows that asked for logits: one such row
  // (a prompt chunk's last) alone; several run with the rest (a multi-row
  // form reads each weight once for all its rows, so dropping some saves
  // little).
  std::vector<size_t> wanted;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].logits)
      wanted.push_back(i);
  const bool tailAlone = wanted.size() < 2 && rows.size() > wanted.size();
  for (size_t l = 0; l < launches_.size(); ++l) {
    if (timed && l > 0)
      K3_RETURN_IF_ERROR(driver_->record(launchEvents_[l], stream_));
    const Grid &g = grids_[l];
    const bool alone = tailAlone && l >= logitsTail_;
    bool together = false;
    if (!alone) {
      Expected<bool> t = launchRows(l, rows, distinctSlots);
      if (!t)
        return t.status();
      together = *t;
    }
    if (together)
      continue;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (alone && !rows[i].logits)
        continue;
      BoundLaunch &bl = rows_[i]->launches[l];
      bl.setInputs(rows[i].token, rows[i].pos);
      if (bl.kernel->collective) {
        K3_RETURN_IF_ERROR(runCollective(l, bl).withContext(
            "step row " + std::to_string(i)));
        continue;
      }
      Status st =
          driver_->launch(functions_[l], g.grid, g.block, g.smem, stream_,
                          bl.params->data(), /*programmatic=*/true, g.cluster);
      if (!st)
        return st.withContext("launch " + std::to_string(l) + " (" +
                              bl.kernel->name + ") of step row " +
                              std::to_string(i));
    }
  }
  if (timed)
    K3_RETURN_IF_ERROR(
        driver_->record(launchEvents_[launches_.size()], stream_));
  // The logits the caller reads on the host; the others stay in the rows'
  // arenas (fetchRowLogits) and the caller reads the argmax's choice from
  // the step blocks, which come back whole (32 bytes a row).
  rowLogitsOnHost_.assign(rows.size(), false);
  for (size_t i : wanted)
    if (rows[i].hostLogits)
      K3_RETURN_IF_ERROR(copyRowLogits(i));
  if (chains_ && !wanted.empty()) {
    rowStepsBack_.resize(rows.size() * kStepWords);
    K3_RETURN_IF_ERROR(driver_->copyToHostAsync(
        rowStepsBack_.data(), rowSteps_.get(),
        rowStepsBack_.size() * sizeof(int64_t), stream_));
  }
  // Nothing to read back: the host goes on queuing the next step while
  // this one runs (unsettledSteps_); the next entry point that reads waits.
  const bool waitNow = !wanted.empty() || timed || comm_ || syncEachStep_;
  if (!waitNow) {
    ++unsettledSteps_;
    unsettledRows_ += static_cast<int64_t>(rows.size());
  } else if (unsettledSteps_ > 0) {
    K3_RETURN_IF_ERROR(settle().withContext(
        "a step of " + std::to_string(rows.size()) + " rows"));
  } else if (Status st = driver_->synchronize(stream_); !st) {
    return st.withContext("a step of " + std::to_string(rows.size()) + " rows");
  }
  if (timed) {
    timed->assign(launches_.size(), 0.0);
    for (size_t l = 0; l < launches_.size(); ++l) {
      Expected<float> ms =
          driver_->elapsedMs(launchEvents_[l], launchEvents_[l + 1]);
      if (!ms)
        return ms.status();
      (*timed)[l] = 1e3 * *ms;
    }
  }
  rowsStep_ = true;
  lastRows_ = rows.size();
  rowWantsLogits_.assign(rows.size(), false);
  for (size_t i : wanted)
    rowWantsLogits_[i] = true;
  lastLogits_ = rows_[rows.size() - 1]->logits.data();
  return Status::ok();
}

const float *CudaBackend::rowLogits(size_t row) const {
  if (!rowsStep_)
    return row + 1 == lastRows_ ? logits_.data() : nullptr;
  // lastRows_ is 0 until a rows step ends; then rowWantsLogits_ and
  // rowLogitsOnHost_ hold its lastRows_ rows.
  return row < lastRows_ && rowWantsLogits_[row] && rowLogitsOnHost_[row]
             ? rows_[row]->logits.data()
             : nullptr;
}

Status CudaBackend::copyRowLogits(size_t row) {
  Row &r = *rows_[row];
  K3_RETURN_IF_ERROR(
      driver_->copyToHostAsync(r.logits.data(), r.arena + logitsOffset_,
                               r.logits.size() * sizeof(float), stream_));
  rowLogitsOnHost_[row] = true;
  return Status::ok();
}

Status CudaBackend::fetchRowLogits(size_t row) {
  if (!rowsStep_ || rowLogits(row))
    return Backend::fetchRowLogits(row); // already on the host (or none)
  if (row >= lastRows_ || !rowWantsLogits_[row])
    return makeError(name(), ": step row ", row, " of ", lastRows_,
                     " has no logits");
  // The step was waited for (its rows asked for logits); its arenas stay
  // until the next step.
  K3_RETURN_IF_ERROR(copyRowLogits(row));
  return driver_->synchronize(stream_).withContext("the logits of step row " +
                                                   std::to_string(row));
}

Expected<GreedyChoice> CudaBackend::rowChoice(size_t row) {
  if (!chains_)
    return Backend::rowChoice(row);
  if (!rowsStep_) {
    // step(): the argmax wrote the backend's own step block.
    if (row + 1 != lastRows_)
      return makeError(name(), ": step row ", row, " of ", lastRows_,
                       " has no logits, so no greedy choice");
    K3_RETURN_IF_ERROR(settle());
    int64_t block[kStepWords];
    K3_RETURN_IF_ERROR(
        driver_->copyToHostAsync(block, step_.get(), sizeof(block), stream_));
    K3_RETURN_IF_ERROR(
        driver_->synchronize(stream_).withContext("the step's greedy choice"));
    return GreedyChoice{block[kStepToken], block[kStepNonFinite] != 0};
  }
  if (row >= lastRows_ || !rowWantsLogits_[row] ||
      rowStepsBack_.size() < (row + 1) * kStepWords)
    return makeError(name(), ": step row ", row, " of ", lastRows_,
                     " has no logits, so no greedy choice");
  const int64_t *block = rowStepsBack_.data() + row * kStepWords;
  return GreedyChoice{block[kStepToken], block[kStepNonFinite] != 0};
}

//===----------------------------------------------------------------------===//
// Profiling
//===----------------------------------------------------------------------===//

Status CudaBackend::launchDirect(size_t index, int64_t token, int64_t pos) {
  launches_[index].setInputs(token, pos);
  return launchBound(index);
}

Status CudaBackend::launchBound(size_t index) {
  const BoundLaunch &l = launches_[index];
  if (l.kernel->collective)
    return runCollective(index, l);
  const Grid &g = grids_[index];
  Status st =
      driver_->launch(functions_[index], g.grid, g.block, g.smem, stream_,
                      l.params->data(), /*programmatic=*/true, g.cluster);
  if (!st)
    return st.withContext("launch " + std::to_string(index) + " (" +
                          l.kernel->name + ")");
  return Status::ok();
}

Status CudaBackend::runCollective(size_t index, const BoundLaunch &l) {
  auto where = [&] {
    return "launch " + std::to_string(index) + " (" + l.kernel->name + ")";
  };
  if (!comm_)
    return makeError(where(), ": a collective in a plan bound without a "
                              "communicator");
  // Every launch before it has written its input.
  K3_RETURN_IF_ERROR(driver_->synchronize(stream_).withContext(where()));
  // The input comes down; `comm_` combines the ranks' copies on the host;
  // the result goes up on the step's stream, which is then drained (a
  // synchronous copy from pageable memory may return before its DMA is
  // done, unordered with the stream's next kernel).
  auto staged = [&](auto p, size_t inBytes, size_t outBytes) -> Status {
    auto device = [](const void *q) {
      return static_cast<cuda::CUdeviceptr>(reinterpret_cast<uintptr_t>(q));
    };
    const cuda::CUdeviceptr x = device(p.x), out = device(p.out);
    std::vector<uint8_t> hostX(inBytes), hostOut(outBytes);
    K3_RETURN_IF_ERROR(
        driver_->copyToHost(hostX.data(), x, inBytes).withContext(where()));
    p.x = reinterpret_cast<decltype(p.x)>(hostX.data());
    p.out = reinterpret_cast<decltype(p.out)>(hostOut.data());
    K3_RETURN_IF_ERROR(comm_->run(*l.kernel, &p, index));
    K3_RETURN_IF_ERROR(
        driver_->copyToDeviceAsync(out, hostOut.data(), outBytes, stream_)
            .withContext(where()));
    return driver_->synchronize(stream_).withContext(where());
  };
  if (l.kernel->name == "all_reduce") {
    AllReduceParams p;
    std::memcpy(&p, l.params->data(), sizeof(p));
    const size_t bytes = static_cast<size_t>(p.n) * sizeof(uint16_t);
    return staged(p, bytes, bytes);
  }
  if (l.kernel->name == "all_gather") {
    AllGatherParams p;
    std::memcpy(&p, l.params->data(), sizeof(p));
    const size_t part = static_cast<size_t>(p.n) * sizeof(float);
    return staged(p, part, part * static_cast<size_t>(p.ranks));
  }
  return makeError(where(), ": not a collective the CUDA backend runs");
}

Status CudaBackend::queueGate() {
  if (!gateSrc_.get()) {
    Expected<cuda::DeviceBuffer> src = cuda::DeviceBuffer::create(kGateBytes);
    if (!src)
      return src.status().withContext("the profiler's gate buffers");
    Expected<cuda::DeviceBuffer> dst = cuda::DeviceBuffer::create(kGateBytes);
    if (!dst)
      return dst.status().withContext("the profiler's gate buffers");
    K3_RETURN_IF_ERROR(driver_->memset8(src->get(), 0x5a, kGateBytes));
    K3_RETURN_IF_ERROR(driver_->synchronize(nullptr));
    // One copy to warm up, one timed.
    K3_RETURN_IF_ERROR(
        driver_->copyDeviceAsync(dst->get(), src->get(), kGateBytes, stream_));
    K3_RETURN_IF_ERROR(driver_->record(start_, stream_));
    K3_RETURN_IF_ERROR(
        driver_->copyDeviceAsync(dst->get(), src->get(), kGateBytes, stream_));
    K3_RETURN_IF_ERROR(driver_->record(end_, stream_));
    Expected<float> ms = driver_->elapsedMs(start_, end_);
    if (!ms)
      return ms.status();
    gateSrc_ = src.take();
    gateDst_ = dst.take();
    gateCopyUs_ = std::max(1.0, *ms * 1000.0);
    gateCopies_ = static_cast<int64_t>(std::ceil(
                      kGuessQueueUs * static_cast<double>(launches_.size()) /
                      gateCopyUs_)) +
                  1;
    gateCopies_ = std::min(gateCopies_, kMaxGateCopies);
  }
  for (int64_t i = 0; i < gateCopies_; ++i)
    K3_RETURN_IF_ERROR(driver_->copyDeviceAsync(gateDst_.get(), gateSrc_.get(),
                                                kGateBytes, stream_));
  return Status::ok();
}

Status CudaBackend::ensureLaunchEvents() {
  while (launchEvents_.size() < launches_.size() + 1) {
    Expected<cuda::CUevent> e = driver_->createEvent();
    if (!e)
      return e.status();
    launchEvents_.push_back(*e);
  }
  return Status::ok();
}

Expected<std::vector<double>> CudaBackend::timeLaunches(int64_t token,
                                                        int64_t pos) {
  K3_RETURN_IF_ERROR(checkStepInputs(token, pos, vocab_, maxSeq_));
  const size_t n = launches_.size();
  K3_RETURN_IF_ERROR(ensureLaunchEvents());
  K3_RETURN_IF_ERROR(setStep(token, pos));
  K3_RETURN_IF_ERROR(queueGate());
  // Event i + 1 closes launch i and opens launch i + 1: with the queue
  // ahead of the GPU the launches run back to back, as in a replay.
  const Clock::time_point t0 = Clock::now();
  K3_RETURN_IF_ERROR(driver_->record(launchEvents_[0], stream_));
  for (size_t i = 0; i < n; ++i) {
    K3_RETURN_IF_ERROR(launchDirect(i, token, pos));
    K3_RETURN_IF_ERROR(driver_->record(launchEvents_[i + 1], stream_));
  }
  const double queuedUs = microsecondsSince(t0);
  if (Status st = driver_->synchronize(stream_); !st)
    return st.withContext("profiled step at position " + std::to_string(pos));
  std::vector<double> us(n);
  for (size_t i = 0; i < n; ++i) {
    Expected<float> ms =
        driver_->elapsedMs(launchEvents_[i], launchEvents_[i + 1]);
    if (!ms)
      return ms.status();
    us[i] = *ms * 1000.0;
  }
  // Next time: copies for half as long again as this queuing took.
  gateCopies_ = std::min<int64_t>(
      kMaxGateCopies,
      static_cast<int64_t>(std::ceil(1.5 * queuedUs / gateCopyUs_)) + 1);
  return us;
}

Expected<double> CudaBackend::timeStep(int64_t token, int64_t pos,
                                       bool replay) {
  K3_RETURN_IF_ERROR(checkStepInputs(token, pos, vocab_, maxSeq_));
  const bool graph = replay && graphExec_;
  K3_RETURN_IF_ERROR(setStep(token, pos));
  if (graph)
    for (size_t i = 0; i < launches_.size(); ++i)
      if (!launches_[i].inputs.empty())
        K3_RETURN_IF_ERROR(launchOne(i, token, pos)); // updates the node
  K3_RETURN_IF_ERROR(driver_->record(start_, stream_));
  if (graph) {
    K3_RETURN_IF_ERROR(driver_->launchGraph(graphExec_, stream_));
  } else {
    for (size_t i = 0; i < launches_.size(); ++i)
      K3_RETURN_IF_ERROR(launchDirect(i, token, pos));
  }
  K3_RETURN_IF_ERROR(driver_->record(end_, stream_));
  if (Status st = driver_->synchronize(stream_); !st)
    return st.withContext("timed step at position " + std::to_string(pos));
  Expected<float> ms = driver_->elapsedMs(start_, end_);
  if (!ms)
    return ms.status();
  return *ms * 1000.0;
}

Expected<double> measureDeviceCopyGBps(uint64_t bytes) {
  Expected<cuda::Driver *> d = cuda::Driver::get();
  if (!d)
    return d.status();
  cuda::Driver &driver = **d;
  if (bytes == 0)
    bytes = kDefaultCopyBytes;
  Expected<cuda::DeviceBuffer> src = cuda::DeviceBuffer::create(bytes);
  if (!src)
    return src.status().withContext("the copy-bandwidth buffers");
  Expected<cuda::DeviceBuffer> dst = cuda::DeviceBuffer::create(bytes);
  if (!dst)
    return dst.status().withContext("the copy-bandwidth buffers");
  Expected<cuda::CUevent> start = driver.createEvent();
  if (!start)
    return start.status();
  Expected<cuda::CUevent> end = driver.createEvent();
  if (!end) {
    driver.destroy(*start);
    return end.status();
  }
  // Never zeros; the memsets and copies run on the legacy stream.
  auto run = [&]() -> Expected<double> {
    K3_RETURN_IF_ERROR(driver.memset8(src->get(), 0x5a, bytes));
    K3_RETURN_IF_ERROR(driver.memset8(dst->get(), 0x00, bytes));
    K3_RETURN_IF_ERROR(driver.synchronize(nullptr));
    K3_RETURN_IF_ERROR(
        driver.copyDeviceAsync(dst->get(), src->get(), bytes, nullptr));
    std::vector<double> ms;
    for (int r = 0; r < kCopyRuns; ++r) {
      K3_RETURN_IF_ERROR(driver.record(*start, nullptr));
      K3_RETURN_IF_ERROR(
          driver.copyDeviceAsync(dst->get(), src->get(), bytes, nullptr));
      K3_RETURN_IF_ERROR(driver.record(*end, nullptr));
      Expected<float> t = driver.elapsedMs(*start, *end);
      if (!t)
        return t.status();
      ms.push_back(*t);
    }
    // The buffers are freed on return: nothing may still use them.
    K3_RETURN_IF_ERROR(driver.synchronize(nullptr));
    std::sort(ms.begin(), ms.end());
    const double median = std::max(ms[ms.size() / 2], 1e-6);
    return 2.0 * static_cast<double>(bytes) / (median * 1e6);
  };
  Expected<double> gbps = run();
  driver.destroy(*start);
  driver.destroy(*end);
  return gbps;
}

Expected<double> CudaBackend::measureCopyGBps(uint64_t bytes) {
  // The plan's stream may still run work that the copy must not overlap.
  K3_RETURN_IF_ERROR(settle());
  K3_RETURN_IF_ERROR(driver_->synchronize(stream_));
  return measureDeviceCopyGBps(bytes);
}

std::string CudaBackend::copyMethod(uint64_t bytes) const {
  if (bytes == 0)
    bytes = kDefaultCopyBytes;
  return "device-to-device cuMemcpyDtoDAsync of " +
         std::to_string(bytes >> 20) + " MiB, read + write, median of " +
         std::to_string(kCopyRuns);
}

} // namespace k3
