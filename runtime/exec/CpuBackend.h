//===- CpuBackend.h - Runs a plan with the CPU kernels ----------*- C++ -*-===//
//
// Binds a validated plan to memory once: one 64-byte aligned arena for the
// scratch buffers, one zeroed allocation per resident state (each holding
// the plan's max_batch slots: slot s's arena and states at s times their
// rounded size, its launches bound to them), and views into
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
#include "runtime/exec/Backend.h"
#include "runtime/plan/Plan.h"
#include "runtime/exec/PlanBinding.h"
#include "runtime/plan/PlanKernels.h"
#include "runtime/io/Safetensors.h"
#include "runtime/Status.h"

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
  /// field. The state starts zeroed.
  static Expected<std::unique_ptr<CpuBackend>> bind(const PlanDoc &plan,
                                                    const TensorStore &store);

  /// Zeroes every resident state (start of a sequence).
  Status resetState() override;

  /// Runs one decode step: the launches in order with `token` at position
  /// `pos`. Errors (before anything runs): token outside [0, vocab), pos
  /// outside [0, max_seq).
  Status step(int64_t token, int64_t pos) override;

  /// The step's logits: fp32 [vocab], valid after step() until the next.
  const float *logits() const override { return logits_[0]; }
  int64_t vocab() const override { return vocab_; }
  int64_t maxSeq() const override { return maxSeq_; }
  std::string name() const override { return "cpu"; }
  Status runLaunch(size_t index, int64_t token, int64_t pos) override;
  Status readArena(std::vector<uint8_t> &out) override;
  Status readState(size_t state, std::vector<uint8_t> &out) override;
  Status writeState(size_t state, const std::vector<uint8_t> &bytes) override;

  /// Batched decode: every slot's launches were bound at bind time; a step
  /// runs the launches in plan order, each for every row (launch-major, as
  /// a GPU would), so a row computes exactly what it computes alone.
  int64_t maxBatch() const override { return slots_; }
  Status resetSlot(int64_t slot) override;
  Status stepSlots(const std::vector<SlotStep> &rows) override;
  const float *slotLogits(int64_t slot) const override;
  Status readSlotState(int64_t slot, size_t state,
                       std::vector<uint8_t> &out) override;
  Status writeSlotState(int64_t slot, size_t state,
                        const std::vector<uint8_t> &bytes) override;

  bool chainsGreedy() const override { return chains_; }
  Expected<std::vector<GreedyChoice>> chainGreedy(int64_t more) override;

  /// Profiling: wall time (steady_clock) around each launch / the whole step
  /// (no graph: `replay` is ignored); the copy is one memcpy between two
  /// host buffers (256 MiB by default), on one thread.
  Expected<std::vector<double>> timeLaunches(int64_t token,
                                             int64_t pos) override;
  Expected<double> timeStep(int64_t token, int64_t pos, bool replay) override;
  Expected<double> measureCopyGBps(uint64_t bytes) override;
  std::string copyMethod(uint64_t bytes) const override;

private:
  CpuBackend() = default;
  /// Writes a host-driven step's inputs into slot `slot`'s step block.
  void setStep(int64_t token, int64_t pos, int64_t slot = 0);
  /// Slot `slot`'s copy of state `state`; the slot must be in range.
  uint8_t *slotState(int64_t slot, size_t state) const {
    return states_[state].get() + static_cast<uint64_t>(slot) * stateStride_[state];
  }
  int64_t *stepBlock(int64_t slot) { return steps_.data() + slot * kStepWords; }
  /// An error naming `slot` when it is not one of the plan's.
  Status checkSlot(int64_t slot) const;

  struct Aligned {
    void operator()(uint8_t *p) const;
  };
  using Block = std::unique_ptr<uint8_t, Aligned>;

  int64_t vocab_ = 0, maxSeq_ = 0, slots_ = 1;
  /// Every slot's arena, slot s at s * arenaStride_ (arenaBytes_ rounded up
  /// to the alignment).
  Block arena_;
  uint64_t arenaBytes_ = 0, arenaStride_ = 0;
  /// Per plan state, every slot's copy, slot s at s * stateStride_[i].
  std::vector<Block> states_;
  std::vector<uint64_t> stateBytes_, stateStride_;
  std::vector<ResolvedWeight> weights_;
  /// Per slot, the plan's launches bound to that slot's memory.
  std::vector<std::vector<BoundLaunch>> launches_;
  /// Per slot, its logits in its arena.
  std::vector<const float *> logits_;
  /// Per slot, the step block (kernels/common/StepInputs.h), kStepWords
  /// each; and whether the plan's argmax writes it.
  std::vector<int64_t> steps_;
  bool chains_ = false;
};

} // namespace k3

#endif // K3C_RUNTIME_EXEC_CPUBACKEND_H
