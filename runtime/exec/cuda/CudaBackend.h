//===- CudaBackend.h - Runs a plan with the CUDA kernels --------*- C++ -*-===//
//
// The GPU twin of CpuBackend: the arena, the resident states and the weights
// live in device memory (weights are copied once at bind time; stacked
// experts get a device table of per-expert WeightRefs), every launch's params
// struct is filled by the same binder with device addresses, and a step
// patches the step inputs and launches `k3_<kernel>` from the PTX built into
// the binary, in plan order on one stream. The logits come back to the host
// after the last launch.
//
// A batched plan (max_batch B > 1) gets B slots of every state, one device
// allocation per state with slot s at s · stride; step() and the graph run
// slot 0. A step of several rows (stepSlots) runs each row's own launches
// (its arena, step block and step-local states, bound when a step first
// needs that many rows, re-pointed at its slot's states before the step),
// launch-major with the rows in order: the same kernels and params as
// step(), so a row computes what it computes alone. A step of rows that ask
// for no logits is not waited for (unsettledSteps_). The projections
// (`linear`, `linear_multi`) run once for all rows in their multi-row form
// (GemvParams.h), which reads each weight once per pass of up to 8 rows and
// gives each row the single-row kernel's bits; every other launch runs once
// per row. A plan of one slot takes this path too for steps of several rows
// (prompt chunks).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_CUDA_CUDABACKEND_H
#define K3C_RUNTIME_EXEC_CUDA_CUDABACKEND_H

#include "kernels/common/StepInputs.h"
#include "runtime/exec/Backend.h"
#include "runtime/exec/PlanBinding.h"
#include "runtime/exec/RankGroup.h"
#include "runtime/exec/cuda/CudaDriver.h"
#include "runtime/exec/cuda/RowsForms.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/Plan.h"

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace k3 {

/// The CUDA entry point `k3_<kernel>` of the embedded PTX (modules load once
/// per process, apart from every CudaBackend's own: CudaModules). Errors: no
/// GPU or driver, no CUDA kernels in this build, no such entry point.
/// K3C_PTX_DIR (a developer override, see CudaBackend.cpp) comes first.
Expected<cuda::CUfunction> findCudaKernel(const std::string &kernel);

/// The device-to-device copy bandwidth in GB/s (read + write bytes, the
/// median of a few copies of `bytes`, 0: 1 GiB), on the legacy stream: the
/// yardstick every benchmark prints its fractions against.
Expected<double> measureDeviceCopyGBps(uint64_t bytes = 0);

/// The address and size of `variable`, a __device__ variable of the module
/// that defines `k3_<kernel>` (e.g. a kernel's trace buffer in a traced
/// build of its family).
Expected<std::pair<cuda::CUdeviceptr, size_t>>
findCudaGlobal(const std::string &kernel, const std::string &variable);

/// The PTX modules one CUDA backend loaded: by PTX text, and each kernel's.
/// Every backend loads its own, so each has its own copy of the kernels'
/// module-scope scratch (arrival counters, partials, the MoE work queues:
/// docs/KERNELS.md "Module-level scratch"), and two backends of one process
/// may run steps at the same time.
struct CudaModules {
  std::map<std::string, cuda::CUmodule> byPtx;
  std::map<std::string, cuda::CUmodule> byKernel;
};

class CudaBackend final : public Backend {
public:
  ~CudaBackend() override;
  CudaBackend(const CudaBackend &) = delete;
  CudaBackend &operator=(const CudaBackend &) = delete;

  /// Validates `plan`, loads the embedded PTX, uploads the weights and binds
  /// every launch. Errors: no GPU or driver, a kernel without a CUDA
  /// implementation in this build (named), the binding errors of CpuBackend.
  /// With `useGraph` (and a driver that has CUDA graphs) a step replays one
  /// graph of all launches, updating only the nodes that take step inputs.
  ///
  /// A tensor-parallel rank's plan needs `comm` (checkPlanCommunicator). Its
  /// collectives are host-staged: at each one the stream is drained, the
  /// rank's input is copied to the host, `comm` combines the ranks' inputs
  /// there (RankGroup: ranks as threads, which may share one GPU), and the
  /// result is copied back. Such a plan runs launch by launch (no graph, no
  /// chained greedy steps), the ranks' kernels side by side (each backend
  /// has its own modules, CudaModules): a way to run a rank's kernels, at
  /// its split shapes, on a GPU, not a fast one (collectives on the device,
  /// NCCL, one GPU per rank, are not built yet).
  /// `progress`, when set, is told after each weight is on the device.
  static Expected<std::unique_ptr<CudaBackend>>
  bind(const PlanDoc &plan, const TensorStore &store, bool useGraph = true,
       Communicator *comm = nullptr, const BindProgress &progress = {});

  Status resetState() override;
  Status step(int64_t token, int64_t pos) override;
  const float *logits() const override { return lastLogits_; }
  int64_t vocab() const override { return vocab_; }
  int64_t maxSeq() const override { return maxSeq_; }
  std::string name() const override;
  Status runLaunch(size_t index, int64_t token, int64_t pos) override;
  Status readArena(std::vector<uint8_t> &out) override;
  Status readState(size_t state, std::vector<uint8_t> &out) override;
  Status writeState(size_t state, const std::vector<uint8_t> &bytes) override;
  /// Chained greedy steps: graph replays (or the launches one by one) queued
  /// back to back, each followed by a device-to-device copy of the step
  /// block into a ring; one copy of the ring to the host at the end.
  bool chainsGreedy() const override { return chains_; }
  bool choosesRows() const override { return chains_; }
  Expected<GreedyChoice> rowChoice(size_t row) override;
  Status fetchRowLogits(size_t row) override;
  Expected<std::vector<GreedyChoice>> chainGreedy(int64_t more) override;

  /// Steps of several rows (file comment); a step of one row in a plan of
  /// one slot is step() (graph and all).
  int64_t maxBatch() const override { return slots_; }
  Status resetSlot(int64_t slot) override;
  Status stepSlots(const std::vector<SlotStep> &rows) override;
  const float *rowLogits(size_t row) const override;
  Status readSlotState(int64_t slot, size_t state,
                       std::vector<uint8_t> &out) override;
  Status writeSlotState(int64_t slot, size_t state,
                        const std::vector<uint8_t> &bytes) override;

  /// Profiling (Backend.h). timeLaunches brackets every launch with events
  /// and, so that an event pair holds device time only (not the host's
  /// launch latency on an idle GPU), first queues device-to-device copies
  /// that keep the GPU busy until the host has queued the whole step; the
  /// number of copies follows the measured queuing time. timeStep replays
  /// the graph (`replay`, when bound with one) or launches one by one, both
  /// between two events. measureCopyGBps: cuMemcpyDtoDAsync between two
  /// device buffers (1 GiB by default), timed with events.
  Expected<std::vector<double>> timeLaunches(int64_t token,
                                             int64_t pos) override;
  Expected<double> timeStep(int64_t token, int64_t pos, bool replay) override;
  bool replaysGraph() const override { return graphExec_ != nullptr; }
  bool timesStepSlots() const override { return true; }
  Status reserveRows(size_t rows) override {
    K3_RETURN_IF_ERROR(Backend::reserveRows(rows));
    return ensureRows(rows);
  }
  size_t boundRows() const override { return rows_.size(); }
  /// PrefillForm::Chunk: steps of kMmaMinRows rows or more run the
  /// projections (RowsForms.h kCudaMmaRowsForms) and the MoE (bf16 experts:
  /// kCudaMoeChunkKernels) on the tensor cores, a slot's runs of KDA rows the
  /// chunk form of kda_decode and its steps of kMlaChunkMinRows rows or more
  /// mla_attend_clustered's chunk form (RowsForms.h kCudaChunkForms), all
  /// within rounding of the multi-row forms; everything else as Rows.
  Status setPrefillForm(PrefillForm form) override {
    chunkForm_ = form == PrefillForm::Chunk;
    return Status::ok();
  }
  Expected<double> measureCopyGBps(uint64_t bytes) override;
  std::string copyMethod(uint64_t bytes) const override;

  /// Launches run in a multi-row form (one launch for several rows) since
  /// bind: what the tests check the projections' fast path by.
  int64_t launchesTogether() const { return launchesTogether_; }
  /// Device time of the last step's launches (ms), for benchmarks.
  float lastStepMs() const { return lastStepMs_; }
  /// Whether steps replay a CUDA graph (else one cuLaunchKernel per launch).
  bool usesGraph() const { return graphExec_ != nullptr; }
  /// Weight bytes that bind drew on the device (synthetic weights,
  /// kernels/synthetic) instead of copying them from the host.
  uint64_t drawnBytes() const { return drawnBytes_; }
  /// The address and size of `variable` in the module of `k3_<kernel>` as
  /// this backend loaded it (a traced build's buffers, LaunchTrace.h).
  /// Errors: a kernel the plan does not launch, no such variable.
  Expected<std::pair<cuda::CUdeviceptr, size_t>>
  moduleGlobal(const std::string &kernel, const std::string &variable) const;

private:
  CudaBackend() = default;
  /// Launch `index` with the step inputs: a kernel launch, or, with a graph,
  /// the node's params replaced for the next replay.
  Status launchOne(size_t index, int64_t token, int64_t pos);
  /// Launch `index` on the stream now, graph or not (profiling).
  Status launchDirect(size_t index, int64_t token, int64_t pos);
  /// Launches `index` on the stream with its params as they are bound.
  Status launchBound(size_t index);
  /// Runs collective launch `index` whose bound params are `l`'s (bind's
  /// comment: host-staged through comm_).
  Status runCollective(size_t index, const BoundLaunch &l);
  /// launchEvents_ has one event per plan launch and one more.
  Status ensureLaunchEvents();
  /// Queues the copies that keep the GPU busy ahead of timeLaunches.
  Status queueGate();
  /// Queues the write of a host-driven step's inputs into the step block.
  Status setStep(int64_t token, int64_t pos);
  /// Waits for the steps of rows that stepSlots() left running (see
  /// unsettledSteps_); every entry point but stepSlots() calls it before it
  /// touches device memory or the rows. Errors: a failed kernel of those
  /// steps, named as theirs.
  Status settle();

  /// What one row of a several-row step runs on.
  struct Row {
    cuda::CUdeviceptr arena = 0; ///< in rowArenas_, rowArenaStride_ apart
    cuda::CUdeviceptr step = 0;  ///< in rowSteps_, row r's block at r
    std::vector<cuda::DeviceBuffer> local; ///< step-local states (else empty)
    std::vector<BoundLaunch> launches;
    std::vector<std::vector<StatePatch>> patches; ///< per launch
    int64_t slot = -1;
    int64_t stepHost[kStepWords] = {}; ///< staged for the step block copy
    std::vector<float> logits;
  };
  /// Slot `slot`'s copy of state `state` (device address).
  cuda::CUdeviceptr slotState(int64_t slot, size_t state) const {
    return states_[state].get() +
           static_cast<uint64_t>(slot) * stateStride_[state];
  }
  /// Queues the copy of row `row`'s logits to its host copy (the row's
  /// rowLogits once the stream has it).
  Status copyRowLogits(size_t row);
  /// Makes rows [0, n) exist: when there are fewer, every row is made
  /// again (their arenas are one allocation, so it moves) for a power of
  /// two >= n rows.
  Status ensureRows(size_t n);
  /// Launch `l` once for the first `n` rows of the step (its multi-row
  /// form, rowsFunctions_[l]) when the rows' params differ only by their
  /// arenas; false when it cannot (the caller launches row by row).
  Expected<bool> launchRows(size_t l, const std::vector<SlotStep> &rows,
                            bool distinctSlots);
  /// Writes the first `n` rows' step blocks and, for each launch with a
  /// params-array form (rowsArray_), their bound params (`arrays`) into
  /// rowsHost_ and queues one copy of each to the device.
  Status uploadRows(size_t n, bool arrays);
  /// Points row `r`'s launches at slot `slot`'s states.
  void bindRowToSlot(Row &r, int64_t slot);

  cuda::Driver *driver_ = nullptr;
  cuda::CUstream stream_ = nullptr;
  cuda::CUevent start_ = nullptr, end_ = nullptr;
  int64_t vocab_ = 0, maxSeq_ = 0;
  cuda::DeviceBuffer arena_;
  /// Per plan state, every slot's copy (slot s at s * stateStride_[i]).
  std::vector<cuda::DeviceBuffer> states_;
  std::vector<uint64_t> stateBytes_, stateStride_;
  std::vector<bool> stepLocal_; ///< per plan state
  int64_t slots_ = 1;
  /// The plan (without its PTX) and the device weights, for binding rows.
  PlanDoc plan_;
  std::vector<PlanMemory::Weight> weightViews_;
  std::vector<std::unique_ptr<Row>> rows_;
  /// Every row's arena, row r at r · rowArenaStride_ (256-byte aligned),
  /// and every row's step block (kStepWords each, in row order).
  cuda::DeviceBuffer rowArenas_, rowSteps_;
  uint64_t rowArenaStride_ = 0;
  /// Per launch, the multi-row form of its kernel (kernels/gemv: `linear`,
  /// `linear_multi`) when the PTX has one, else null; and the dynamic shared
  /// memory its launches may ask for (bytes).
  std::vector<cuda::CUfunction> rowsFunctions_;
  std::vector<int64_t> rowsSmemCap_;
  /// Per launch, the tensor-core form of its multi-row form
  /// (kCudaMmaRowsForms) when the PTX has one and the device gives it
  /// kGemvMmaSmemBytes, else null; used with chunkForm_.
  std::vector<cuda::CUfunction> mmaFunctions_;
  /// Per launch with a tensor-core form, k3_linear_rows_prenorm of its
  /// module (null: the form norms in its own blocks), and the rows' x̂
  /// (RowsForms.h splitPreNorm).
  std::vector<cuda::CUfunction> preNormFunctions_;
  cuda::DeviceBuffer preNormScratch_;
  /// Per launch, the narrow tensor-core form (kCudaMma16RowsForms) when
  /// the PTX has one, else null, and the dynamic shared memory it may take;
  /// used with chunkForm_ for steps of kMma16MinRows to kGemvMma16Tokens
  /// rows.
  /// Its split's scratch: the fp32 partial sums and the tiles' arrival
  /// counters (zero between launches), grown on demand.
  std::vector<cuda::CUfunction> mma16Functions_;
  std::vector<int64_t> mma16SmemCap_;
  cuda::DeviceBuffer mma16Partials_, mma16Counters_;
  /// The counters' bytes zeroed so far (a failed zeroing counts none).
  uint64_t mma16CounterBytes_ = 0;
  /// Per launch, the run form of its array form (kCudaRunForms) for a
  /// clustered launch whose PTX has one, else null: a sequence's
  /// consecutive rows in one launch.
  std::vector<cuda::CUfunction> runFunctions_;
  /// Per launch with a run form or a rows form of any slot, its chunk form
  /// (kCudaChunkForms) when the PTX has one and the device lends it its
  /// shared memory, else null.
  std::vector<cuda::CUfunction> chunkFunctions_;
  /// Per launch with a batch form (kCudaBatchForms) that the PTX has and
  /// the device lends its shared memory, that form, else null.
  std::vector<cuda::CUfunction> batchFunctions_;
  /// The MoE of a prompt chunk on the tensor cores (kernels/moe
  /// MoeChunkParams): route, plan, gate/up, down, combine, from the
  /// moe_ffn launches' module (null when its PTX lacks them); per launch,
  /// whether its weights are all bf16 (the kernels' limit); their scratch.
  std::array<cuda::CUfunction, 5> moeChunk_{};
  /// kCudaMoeChunkNarrowKernels (gate/up and down on narrow tiles, for
  /// chunks of at most kMmaNarrowTokens rows) when allowed and in the PTX,
  /// else null.
  std::array<cuda::CUfunction, 2> moeChunkNarrow_{};
  std::vector<bool> moeChunkOk_;
  cuda::DeviceBuffer moeChunkScratch_;
  uint64_t moeChunkScratchBytes_ = 0;
  /// Runs launch `l` (a moe_ffn) for the rows whose bound params are
  /// `params` as MoE chunks, groups of kMoeChunkRowsMax rows; false when
  /// it cannot (the caller takes the multi-row form).
  Expected<bool> launchMoeChunk(size_t l,
                                const std::vector<const void *> &params);
  /// Grows `buffer` to at least `bytes`, zeroed, when `zeroed` (the bytes
  /// zeroed so far) is fewer: a scratch whose counters each launch leaves
  /// at zero. Waits for the stream first (the old buffer may be in use).
  Status growZeroed(uint64_t bytes, cuda::DeviceBuffer &buffer,
                    uint64_t &zeroed, const char *what);
  /// Runs launch `l` (a projection) for the rows whose bound params are
  /// `params` in its narrow tensor-core form (mma16RowsLaunch), growing the
  /// split's scratch first; false when the form does not take them.
  Expected<bool> launchMma16(size_t l, const std::vector<const void *> &params);
  bool chunkForm_ = false;
  /// Per launch, whether rowsFunctions_[l] takes a params array
  /// (kCudaRowsArrayForms); the arrays of all rows (rows_.size() of them
  /// per such launch, at rowParamsOffset_[l]) and their host copy.
  std::vector<bool> rowsArray_;
  std::vector<size_t> rowParamsOffset_;
  cuda::DeviceBuffer rowParams_;
  /// The host copy of the rows' step blocks, then (from rowsHostArrays_)
  /// their params arrays at rowParamsOffset_: pageable, so a copy from it
  /// is staged before the call returns and it may be rewritten at once.
  std::vector<uint8_t> rowsHost_;
  size_t rowsHostArrays_ = 0;
  int64_t launchesTogether_ = 0;
  /// What logits() returns: logits_ after step(), the last row's after
  /// stepSlots().
  const float *lastLogits_ = nullptr;
  bool rowsStep_ = false; ///< the last step was stepSlots' rows
  /// The first launch of the plan's logits tail (logitsTailStart), which
  /// rows of the last stepSlots() asked for logits, and which of those have
  /// them on the host (SlotStep::hostLogits, fetchRowLogits).
  size_t logitsTail_ = 0;
  std::vector<bool> rowWantsLogits_, rowLogitsOnHost_;
  /// The step blocks of the last stepSlots()'s rows as the plan's argmax
  /// left them (kStepWords per row): rowChoice() reads them.
  std::vector<int64_t> rowStepsBack_;
  std::vector<cuda::DeviceBuffer> weightData_; ///< bf16/f32/packed/scale
  uint64_t drawnBytes_ = 0;                     ///< drawnBytes()
  std::vector<BoundLaunch> launches_;
  struct Grid {
    int64_t grid[3], block[3], cluster[3], smem;
  };
  std::vector<Grid> grids_;
  std::vector<cuda::CUfunction> functions_;
  CudaModules modules_; ///< unloaded by the destructor
  cuda::CUgraph graph_ = nullptr;
  cuda::CUgraphExec graphExec_ = nullptr;
  std::vector<cuda::CUgraphNode> nodes_; ///< per launch, with a graph
  uint64_t logitsOffset_ = 0;
  std::vector<float> logits_;
  /// The step block (kernels/common/StepInputs.h), its host staging copy,
  /// and the ring chainGreedy copies each step's block into.
  cuda::DeviceBuffer step_, chainRing_;
  int64_t stepHost_[kStepWords] = {};
  int64_t stepPos_ = 0; ///< the position the step block holds next
  bool chains_ = false;
  float lastStepMs_ = 0;
  /// The rank's communicator (a tensor-parallel plan's), else null.
  Communicator *comm_ = nullptr;
  /// Steps of rows queued and not waited for, and their rows: a step whose
  /// rows ask for no logits (a prompt chunk but the last) returns once it
  /// is queued, so that the host queues the next chunk while the GPU runs
  /// this one (the host's launch work is off the GPU's critical path).
  /// K3C_SYNC_STEPS=1 waits for every step (a failing kernel then names its
  /// own step).
  int64_t unsettledSteps_ = 0, unsettledRows_ = 0;
  bool syncEachStep_ = false;
  /// K3C_MMA_BLOCKS_PER_SM: the blocks per SM the tensor-core projections'
  /// split over k aims at (mmaRowsLaunch's `sms` is the SMs times this).
  int mmaBlocksPerSm_ = 1;
  /// The MoE chunk's plan kernel in its parallel form
  /// (MoeChunkParams::parallelPlan; K3C_MOE_CHUNK_PLAN=serial: thread 0).
  bool moeParallelPlan_ = true;
  /// K3C_MOE_CHUNK_ROUTE_GROUPS: blocks per row of the MoE chunk's route
  /// (1: one block scores and ranks a row).
  int moeRouteGroups_ = 8;
  // Profiling, made on first use: an event per launch boundary, and the
  // gate's copy buffers with the device time of one copy and the copies the
  // next timeLaunches queues.
  std::vector<cuda::CUevent> launchEvents_;
  cuda::DeviceBuffer gateSrc_, gateDst_;
  double gateCopyUs_ = 0;
  int64_t gateCopies_ = 0;
};

} // namespace k3

#endif // K3C_RUNTIME_EXEC_CUDA_CUDABACKEND_H
