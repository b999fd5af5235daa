//===- CpuBackend.h - Runs a plan with the CPU kernels ----------*- C++ -*-===//
//
// Binds a validated plan to memory once: 64-byte aligned arenas for the
// scratch buffers (one per row of a step: a step may run several sequences,
// and several prompt tokens of one), one zeroed allocation per resident
// state holding the plan's max_batch slots, and views into
// the memory-mapped checkpoint for the weights (stacked `{e}` experts become
// per-expert WeightRef tables, f32 vectors stored as bf16 are widened once).
// Every launch's params struct is filled at bind time; a step only writes the
// per-step inputs (token, pos, length) into the structs and calls the CPU
// entry points in plan order.
//
// Binding is where a plan meets a checkpoint, so it checks, per launch, that
// every pointer a kernel will touch is bound and large enough for the sizes
// the launch passes (PlanKernels.h), and that every weight exists with the
// plan's format and shape. The TensorStore must outlive the backend.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_CPUBACKEND_H
#define K3C_RUNTIME_EXEC_CPUBACKEND_H

#include "kernels/common/StepInputs.h"
#include "kernels/common/WeightRef.h"
#include "runtime/Status.h"
#include "runtime/exec/Backend.h"
#include "runtime/exec/PlanBinding.h"
#include "runtime/exec/RankGroup.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanKernels.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace k3 {

/// A plan bound to a checkpoint, executable on the CPU.
class CpuBackend final : public Backend {
public:
  ~CpuBackend() override;
  CpuBackend(const CpuBackend &) = delete;
  CpuBackend &operator=(const CpuBackend &) = delete;

  /// Validates `plan` (validatePlan), resolves its weights in `store` and
  /// fills every launch's params. Errors name the weight or the launch and
  /// field. The state starts zeroed. A rank of a tensor-parallel plan needs
  /// `comm`, its end of the rank group, for its collectives (it must
  /// outlive the backend); a plan of one rank ignores it. `progress`, when
  /// set, is told after each weight.
  static Expected<std::unique_ptr<CpuBackend>>
  bind(const PlanDoc &plan, const TensorStore &store,
       Communicator *comm = nullptr, const BindProgress &progress = {});

  /// Zeroes every resident state (start of a sequence).
  Status resetState() override;

  /// Runs one decode step: the launches in order with `token` at position
  /// `pos`. Errors (before anything runs): token outside [0, vocab), pos
  /// outside [0, max_seq).
  Status step(int64_t token, int64_t pos) override;

  /// The step's logits: fp32 [vocab], valid after step() until the next.
  const float *logits() const override { return logits_; }
  int64_t vocab() const override { return vocab_; }
  int64_t maxSeq() const override { return maxSeq_; }
  std::string name() const override { return "cpu"; }
  Status runLaunch(size_t index, int64_t token, int64_t pos) override;
  Status readArena(std::vector<uint8_t> &out) override;
  Status readState(size_t state, std::vector<uint8_t> &out) override;
  Status writeState(size_t state, const std::vector<uint8_t> &bytes) override;

  /// Steps of several rows: each row has its own arena, step block and
  /// step-local states (stateKindIsStepLocal), bound once (rows are added as
  /// a step needs them) and pointed at its slot's states before the step.
  int64_t maxBatch() const override { return slots_; }
  Status reserveRows(size_t rows) override {
    K3_RETURN_IF_ERROR(Backend::reserveRows(rows));
    return ensureRows(rows);
  }
  size_t boundRows() const override { return rows_.size(); }
  /// Chunk: kda_decode's chunk form over a slot's consecutive rows.
  Status setPrefillForm(PrefillForm form) override {
    chunkForm_ = form == PrefillForm::Chunk;
    return Status::ok();
  }
  Status resetSlot(int64_t slot) override;
  Status stepSlots(const std::vector<SlotStep> &rows) override;
  const float *rowLogits(size_t row) const override;
  Status readSlotState(int64_t slot, size_t state,
                       std::vector<uint8_t> &out) override;
  Status writeSlotState(int64_t slot, size_t state,
                        const std::vector<uint8_t> &bytes) override;

  bool chainsGreedy() const override { return chains_; }
  bool choosesRows() const override { return chains_; }
  Expected<GreedyChoice> rowChoice(size_t row) override;
  Expected<std::vector<GreedyChoice>> chainGreedy(int64_t more) override;

  /// Profiling: wall time (steady_clock) around each launch / the whole step
  /// (no graph: `replay` is ignored); the copy is one memcpy between two
  /// host buffers (256 MiB by default), on one thread.
  bool timesStepSlots() const override { return true; }
  Expected<std::vector<double>> timeLaunches(int64_t token,
                                             int64_t pos) override;
  Expected<double> timeStep(int64_t token, int64_t pos, bool replay) override;
  Expected<double> measureCopyGBps(uint64_t bytes) override;
  std::string copyMethod(uint64_t bytes) const override;

private:
  CpuBackend() = default;

  /// Runs launch `index` of a row: its CPU kernel, or a collective through
  /// comm_.
  Status run(const BoundLaunch &l, size_t index);

  struct Aligned {
    void operator()(uint8_t *p) const;
  };
  using Block = std::unique_ptr<uint8_t, Aligned>;

  /// What one row of a step runs on.
  struct Row {
    Block arena;
    /// Its copies of the step-local states (null for the others).
    std::vector<Block> local;
    int64_t step[kStepWords] = {};
    std::vector<BoundLaunch> launches;
    std::vector<std::vector<StatePatch>> patches; ///< per launch
    int64_t slot = -1; ///< the slot its state pointers point at
    const float *logits = nullptr;
  };

  /// Slot `slot`'s copy of state `state`; the slot must be in range.
  uint8_t *slotState(int64_t slot, size_t state) const {
    return states_[state].get() +
           static_cast<uint64_t>(slot) * stateStride_[state];
  }
  /// A zeroed 64-byte aligned block of at least `bytes` (at least 64).
  static Status allocate(uint64_t bytes, Block &out);
  /// What readSlotState / writeSlotState see: the slot's copy, or for a
  /// step-local state (one step's, not the sequence's) row 0's, the copy a
  /// one-row step and the launch-by-launch debugging paths use.
  uint8_t *stateAt(int64_t slot, size_t state) const {
    return stepLocal_[state] ? rows_[0]->local[state].get()
                             : slotState(slot, state);
  }
  /// Makes rows [0, n) exist (binding the launches of the new ones).
  Status ensureRows(size_t n);
  /// Points row `r`'s launches at slot `slot`'s states.
  void bindRowToSlot(Row &r, int64_t slot);
  /// Row 0 on slot 0 with the step inputs written: the one-row paths.
  Row &rowZero(int64_t token, int64_t pos);

  /// The plan (without its PTX), for binding rows as they are needed.
  PlanDoc plan_;
  /// The rank's end of its group (a tensor-parallel plan), else null.
  Communicator *comm_ = nullptr;
  int64_t vocab_ = 0, maxSeq_ = 0, slots_ = 1;
  uint64_t arenaBytes_ = 0;
  /// Per plan state, every slot's copy, slot s at s * stateStride_[i].
  std::vector<Block> states_;
  std::vector<uint64_t> stateBytes_, stateStride_;
  std::vector<bool> stepLocal_; ///< per plan state
  std::vector<ResolvedWeight> weights_;
  std::vector<PlanMemory::Weight> weightViews_;
  std::vector<std::unique_ptr<Row>> rows_;
  /// The logits of the last row of the last step.
  const float *logits_ = nullptr;
  /// The first launch of the plan's logits tail (logitsTailStart), and which
  /// rows of the last stepSlots() ran it.
  size_t logitsTail_ = 0;
  std::vector<bool> rowWantsLogits_;
  bool chains_ = false;
  /// PrefillForm::Chunk selected (setPrefillForm).
  bool chunkForm_ = false;
};

} // namespace k3

#endif // K3C_RUNTIME_EXEC_CPUBACKEND_H
