//===- Backend.h - What a plan runs on --------------------------*- C++ -*-===//
//
// A plan bound to a checkpoint on one kind of hardware. The Session drives
// it one decode step at a time: the CPU backend runs the CPU kernels, the
// CUDA backend the PTX ones, over the same plan and the same binder.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_BACKEND_H
#define K3C_RUNTIME_EXEC_BACKEND_H

#include "runtime/Status.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace k3 {

/// Which backend a Session binds the plan to.
enum class BackendKind { Cpu, Cuda };

/// What a plan's on-device greedy choice (its `argmax` launch bound to the
/// step block, kernels/common/StepInputs.h) picked after one step.
struct GreedyChoice {
  int64_t id = 0;
  bool nonFinite = false; ///< a logit of that step was NaN or ±Inf
};

/// One row of a step (Backend::stepSlots): the slot that holds the
/// sequence's state, and the token it feeds at position `pos`.
struct SlotStep {
  int64_t slot = 0;
  int64_t token = 0;
  int64_t pos = 0;
  /// Whether anyone reads the row's logits (rowLogits). A row without
  /// (a prompt token before the prompt's last) may skip the plan's logits
  /// tail (logitsTailStart: the final norm, the lm_head, the argmax, and
  /// whatever else past the last state write); its rowLogits is null then.
  bool logits = true;
  /// With `logits`: whether they come back to the host after the step
  /// (rowLogits). A greedy caller that needs only the id sets it false and
  /// reads rowChoice(), the plan's on-device argmax: 32 bytes back instead
  /// of the vocabulary's floats (655 KB a row for Kimi), and no host pass
  /// over them; fetchRowLogits() brings them when it needs them after all
  /// (a non-finite choice's message).
  bool hostLogits = true;
};

/// Appends the rows of prompt tokens [from, to) for slot `slot` at
/// positions base + t to `rows`: only the prompt's last token asks for its
/// logits. Session's prefill and the prefill profile build their rows here.
void appendPromptRows(std::vector<SlotStep> &rows,
                      const std::vector<int64_t> &prompt, int64_t from,
                      int64_t to, int64_t slot = 0, int64_t base = 0);

/// The most rows one step may have (several sequences, prompt chunks).
constexpr int64_t kMaxStepRows = 4096;

/// How a step's consecutive rows of one sequence (a prompt chunk) run (the
/// CPU: the KDA token, kda_decode; the CUDA backend: the projections and
/// the MoE of steps of 16 rows or more on the tensor cores, KDA in its chunk
/// form, MLA's attend over tiles of rows): Rows, each row exactly what one
/// step per token computes (bit for bit); Chunk, within rounding of Rows,
/// not bit for bit: on the CPU the KDA tokens all at once in the chunk (WY /
/// UT) form of the delta rule (kernels/kda/KdaCpu.h kdaDecodeChunkCpu), on
/// the GPU also bf16 products summed in fp32 by the tensor cores and other
/// summation orders. Single rows (decode) are the same in both.
enum class PrefillForm { Rows, Chunk };

/// Called while a backend binds a plan, after each plan weight is in place:
/// the plan format's bytes of the weights bound so far and of them all
/// (planWeightBytes), for a progress report on a long load.
using BindProgress =
    std::function<void(uint64_t bytesDone, uint64_t bytesTotal)>;

class Backend {
public:
  virtual ~Backend() = default;
  /// Zeroes every resident state (start of a sequence).
  virtual Status resetState() = 0;
  /// Runs one decode step: the launches in order with `token` at position
  /// `pos`. Errors (before anything runs): token outside [0, vocab), pos
  /// outside [0, max_seq); a failed launch.
  virtual Status step(int64_t token, int64_t pos) = 0;
  /// The logits of the last row of the last step: fp32 [vocab], valid
  /// until the next step (when that row asked for them: SlotStep::logits).
  virtual const float *logits() const = 0;
  virtual int64_t vocab() const = 0;
  virtual int64_t maxSeq() const = 0;
  /// "cpu", or "cuda (NVIDIA H200 (sm_90))".
  virtual std::string name() const = 0;

  /// Debugging (differential runs of two backends, launch by launch): runs
  /// only launch `index` of the plan with the step inputs `token`, `pos`
  /// (no range checks), and copies the arena (every scratch buffer) or state
  /// `state` to the host.
  virtual Status runLaunch(size_t index, int64_t token, int64_t pos) = 0;
  virtual Status readArena(std::vector<uint8_t> &out) = 0;
  virtual Status readState(size_t state, std::vector<uint8_t> &out) = 0;
  /// Overwrites resident state `state` with `bytes` (exactly its size):
  /// restoring a prefix snapshot.
  virtual Status writeState(size_t state,
                            const std::vector<uint8_t> &bytes) = 0;

  /// Steps of several rows (docs/PLAN.md "max_batch"). The backend holds
  /// maxBatch() slots, each a copy of every state, so sequences in
  /// different slots never share memory; each row of a step has its own
  /// arena. A step runs the launches in plan order, each for every row in
  /// the order given, so a slot's rows (consecutive positions of one
  /// sequence: a chunk of its prompt) meet its state in position order, and
  /// every row computes exactly what it computes alone: one step per token.
  /// step(), readState() and writeState() are slot 0's. The defaults serve
  /// a backend of one slot that runs a step per row.
  virtual int64_t maxBatch() const { return 1; }
  /// The PrefillForm of later steps (Rows at first). Errors: a form this
  /// backend lacks (the default lacks Chunk).
  virtual Status setPrefillForm(PrefillForm form) {
    if (form == PrefillForm::Rows)
      return Status::ok();
    return makeError("the ", name(),
                     " backend has no chunk form of kda_decode yet (its "
                     "prompt chunks run row by row)");
  }
  /// Binds room for steps of up to `rows` rows now (their arenas and every
  /// launch's params), so that the first such step does not pay for it: a
  /// server or k3-run does this once, before the first step (26 ms for 256
  /// rows at Kimi-Linear size on the H200). Outputs are the same either way;
  /// binding more rows than before drops the last step's row logits
  /// (rowLogits, logits). Errors: more than kMaxStepRows, or the memory. The
  /// default (a backend that runs a step per row) binds nothing.
  virtual Status reserveRows(size_t rows) {
    if (rows > static_cast<size_t>(kMaxStepRows))
      return makeError("cannot reserve ", rows, " step rows: at most ",
                       kMaxStepRows);
    return Status::ok();
  }
  /// Step rows bound so far (reserveRows, or the steps before); 0 for a
  /// backend that binds none.
  virtual size_t boundRows() const { return 0; }
  /// Zeroes slot `slot`'s states (a sequence joins it). Errors: no such slot.
  virtual Status resetSlot(int64_t slot) {
    K3_RETURN_IF_ERROR(checkSlot(slot));
    return resetState();
  }
  /// One step of `rows`. Errors, before anything runs: no rows or more than
  /// kMaxStepRows, a slot out of range, a slot's rows not at consecutive
  /// positions in order, a row's step() input errors (named with its slot).
  virtual Status stepSlots(const std::vector<SlotStep> &rows);
  /// Row `row`'s logits after the last stepSlots(): fp32 [vocab]; null for
  /// a row out of range or one that did not ask for them, and until
  /// fetchRowLogits() for one that left them on the device
  /// (SlotStep::hostLogits false); the default keeps only the last row's.
  virtual const float *rowLogits(size_t row) const {
    return row + 1 == lastRows_ ? logits() : nullptr;
  }
  /// Brings row `row`'s logits to the host after a step that left them on
  /// the device (SlotStep::hostLogits false); rowLogits(row) returns them
  /// afterwards. Errors: a row out of range or without logits, the copy.
  virtual Status fetchRowLogits(size_t row) {
    if (!rowLogits(row))
      return makeError(name(), ": step row ", row, " of ", lastRows_,
                       " has no logits");
    return Status::ok();
  }
  /// Whether rowChoice() works: the plan's argmax writes each row's greedy
  /// choice into its step block (as for chainsGreedy()).
  virtual bool choosesRows() const { return false; }
  /// The plan's greedy choice for row `row` of the last step (stepSlots()
  /// or step()): the argmax of its logits, the lowest index among equal
  /// maxima as the host's greedy Sampler, and whether any logit was NaN or
  /// ±Inf. Errors: choosesRows() false, a row out of range or without
  /// logits.
  virtual Expected<GreedyChoice> rowChoice(size_t row) {
    (void)row;
    return makeError(name(), " cannot report the rows' greedy choices with "
                             "this plan (it has no argmax writing the step "
                             "block; recompile it with this k3c)");
  }
  /// readState / writeState of slot `slot`.
  virtual Status readSlotState(int64_t slot, size_t state,
                               std::vector<uint8_t> &out) {
    K3_RETURN_IF_ERROR(checkSlot(slot));
    return readState(state, out);
  }
  virtual Status writeSlotState(int64_t slot, size_t state,
                                const std::vector<uint8_t> &bytes) {
    K3_RETURN_IF_ERROR(checkSlot(slot));
    return writeState(state, bytes);
  }

  /// Greedy decode without the host in the loop, for plans whose argmax
  /// writes the step block: whether this backend and plan can.
  virtual bool chainsGreedy() const { return false; }
  /// The choice of the last step run (step() or a chained one), then `more`
  /// steps each taking the previous choice as its token at the next
  /// position, queued back to back; the host waits once. Returns more + 1
  /// choices. logits() is stale afterwards. Errors: the backend cannot
  /// (chainsGreedy() false), or the positions would pass max_seq.
  virtual Expected<std::vector<GreedyChoice>> chainGreedy(int64_t more) {
    (void)more;
    return makeError(name(), " cannot chain greedy steps with this plan");
  }

  /// Profiling (runtime/exec/Profile.h: `k3-run --profile`, bench/decode_bench).
  /// Each runs real decode steps (the state advances as in step()) with
  /// step()'s input checks; the defaults say the backend cannot.
  ///
  /// One step run launch by launch, each launch timed alone: µs per launch
  /// in plan order (the CUDA backend: device time between events around
  /// each launch, with the queue kept ahead of the GPU; the CPU: wall time).
  virtual Expected<std::vector<double>> timeLaunches(int64_t token,
                                                     int64_t pos) {
    (void)token;
    (void)pos;
    return makeError(name(), " cannot time single launches");
  }
  /// One whole step, in µs: with `replay` and a backend that has one
  /// (replaysGraph()), one CUDA graph replay; else the launches one by one
  /// as step() issues them without a graph. The logits stay on the device.
  virtual Expected<double> timeStep(int64_t token, int64_t pos, bool replay) {
    (void)token;
    (void)pos;
    (void)replay;
    return makeError(name(), " cannot time steps");
  }
  /// One stepSlots(rows) (the state advances, the same checks) with every
  /// plan launch timed over all its rows: µs per plan launch in plan order
  /// (the CUDA backend: device time between events around each launch's
  /// rows, the host's queueing included where the GPU waits for it; the
  /// CPU: wall time). What a prompt chunk spends where (`k3-run --profile`).
  /// Errors: stepSlots'; a backend that cannot time.
  Expected<std::vector<double>>
  timeStepSlots(const std::vector<SlotStep> &rows);
  /// Whether timeStepSlots() can time this backend's launches.
  virtual bool timesStepSlots() const { return false; }
  /// Whether timeStep(…, true) replays a CUDA graph.
  virtual bool replaysGraph() const { return false; }
  /// The memory's copy bandwidth in GB/s (bytes read + written per second)
  /// from copying `bytes` between two buffers of this backend's memory
  /// (0: the backend's default size), median of several copies.
  virtual Expected<double> measureCopyGBps(uint64_t bytes) {
    (void)bytes;
    return makeError(name(), " cannot measure its copy bandwidth");
  }
  /// What measureCopyGBps(bytes) copies, in words ("device-to-device
  /// cuMemcpy of 1024 MiB").
  virtual std::string copyMethod(uint64_t bytes) const {
    (void)bytes;
    return "none";
  }

protected:
  /// An error naming `slot` when it is not one of the maxBatch() slots.
  Status checkSlot(int64_t slot) const;
  /// The checks of stepSlots() every backend makes: the rows' slots, their
  /// order, their inputs.
  Status checkRows(const std::vector<SlotStep> &rows) const;
  /// The checks of readSlotState / writeSlotState: the slot, and `state`
  /// one of `stateBytes` (each state's size); with `written`, a write of
  /// that many bytes, which must be the state's size.
  Status checkStateAccess(int64_t slot, size_t state,
                          const std::vector<uint64_t> &stateBytes,
                          const size_t *written = nullptr) const;

  /// Rows the last stepSlots() ran (a one-row step: 1); rowLogits' bound.
  size_t lastRows_ = 0;
  /// Set by timeStepSlots() for one stepSlots(): the backend adds each plan
  /// launch's µs (all its rows) at its index (sized to the plan's launches).
  std::vector<double> *launchTimes_ = nullptr;
};

} // namespace k3

#endif // K3C_RUNTIME_EXEC_BACKEND_H
