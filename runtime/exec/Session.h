//===- Session.h - The greedy decode loop over a bound plan -----*- C++ -*-===//
//
// A Session owns everything a run needs: the plan, the memory-mapped
// checkpoint and the backend bound to both. generate() is the whole decode
// of one sequence: reset the state, feed the prompt one token per step,
// then choose each next token (greedily: argmax, ties to the lowest id; or
// sampled, runtime/exec/Sampling.h) until max_new tokens or a stop id,
// reporting every token as it is chosen and optionally keeping the logits
// that chose it (K3.md §10: row s chose generated token s).
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_SESSION_H
#define K3C_RUNTIME_EXEC_SESSION_H

#include "runtime/exec/Backend.h"
#include "runtime/model/Config.h"
#include "runtime/plan/Plan.h"
#include "runtime/io/Safetensors.h"
#include "runtime/exec/Sampling.h"
#include "runtime/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace k3 {

class Communicator;

/// Compares the plan's config with the weights' config through their
/// canonical writeConfigJson text; on a difference the error names the
/// first differing field with both values.
Status checkConfigsMatch(const ModelConfig &planConfig,
                         const ModelConfig &weightsConfig);

/// The checkpoint in `weightsDir` for `plan`: its config.json must match the
/// plan's (checkConfigsMatch) before the tensors are opened. Or, when
/// `weightsDir` is "synthetic:SEED", the plan's config's synthetic weights
/// made in memory (openSyntheticWeights, runtime/model/Synthetic.h).
Expected<TensorStore> openWeightsFor(const PlanDoc &plan,
                                     const std::string &weightsDir);

/// `plan` bound to `store` on `kind` (`cudaGraph`: the CUDA backend builds
/// its graph); errors say where (`weightsDir`, "on the GPU"). `comm`: the
/// rank's end of its group, for a tensor-parallel plan (RankGroup.h).
/// `progress`: told as the weights are bound (BindProgress).
Expected<std::unique_ptr<Backend>>
bindBackend(const PlanDoc &plan, const TensorStore &store, BackendKind kind,
            bool cudaGraph, const std::string &weightsDir,
            Communicator *comm = nullptr, const BindProgress &progress = {});

/// Called with each generated token as soon as it is chosen (index s =
/// 0 .. maxNew-1).
using TokenCallback = std::function<void(int64_t index, int64_t token)>;

/// What one generate() call produced.
struct GenerateResult {
  /// The generated ids: maxNew, or fewer when a stop id ended the sequence
  /// (it is the last one then).
  std::vector<int64_t> tokens;
  /// tokens.size() * vocab fp32 when logits were requested, row s = the
  /// logits that chose tokens[s]; empty otherwise.
  std::vector<float> logits;
  int64_t vocab = 0;
  int64_t promptTokens = 0;
  /// Of those, restored from a prefix snapshot instead of fed.
  int64_t restoredTokens = 0;
  bool stopped = false;     ///< a stop id ended the sequence
  double promptSeconds = 0; ///< the restore and the steps that fed the prompt
  int64_t decodeSteps = 0;  ///< steps after the prompt (tokens.size() - 1)
  double decodeSeconds = 0; ///< those steps plus every token choice
  /// Generated tokens per second of decode (prompt excluded); 0 when no
  /// decode step ran.
  double decodeTokensPerSecond() const {
    return decodeSeconds > 0 ? decodeSteps / decodeSeconds : 0.0;
  }
};

/// The per-sequence state after a prompt prefix (every resident state: KDA
/// and conv states, MLA caches, AttnRes blocks) and the logits that follow
/// it, kept on the host, so requests sharing the prefix skip its steps.
struct PrefixSnapshot {
  std::vector<int64_t> tokens;              ///< the prefix
  std::vector<std::vector<uint8_t>> states; ///< per plan state
  std::vector<float> logits;                ///< [vocab] after the prefix
  /// Test lever (a graph mutant of the runtime): restore the first KDA
  /// layer's state into the second KDA layer's slot and the other way round,
  /// the bug a slot-keyed cache can have. Never set outside tests.
  bool mutantSwapKdaSlots = false;
};

/// The prompt tokens fed per step by default (GenerateOptions::prefillChunk).
constexpr int64_t kDefaultPrefillChunk = 64;

/// How generate() decodes one sequence.
struct GenerateOptions {
  int64_t maxNew = 1; ///< the most tokens to generate (>= 1)
  /// Keep the logits that chose each token (GenerateResult::logits).
  bool keepLogits = false;
  TokenCallback onToken; ///< may be empty
  /// Restore this snapshot (its tokens must start the prompt) instead of
  /// feeding its tokens; may be null.
  const PrefixSnapshot *prefix = nullptr;
  /// The sequence ends as soon as it emits one of these (kept as its last
  /// token); empty: always maxNew tokens. E.g. the config's eos_token_id.
  std::vector<int64_t> stopIds;
  /// Greedy by default; a fresh Sampler from these per sequence, so one
  /// seed gives one sequence for one prompt.
  SamplingParams sampling;
  /// Greedy without logits: let the plan choose each token on the device
  /// and run the steps back to back (Backend::chainGreedy; only the ids
  /// come back, kChainSteps at a time), when the backend and plan can.
  /// The same tokens as the host's argmax; false forces the host loop.
  bool deviceGreedy = true;
  /// The prompt is fed this many tokens per step (Backend::stepSlots: one
  /// row per token, launch by launch over the chunk; the same tokens and
  /// logits as one step per token, bit for bit on the CPU); 1: one token per
  /// step. At least 1, at most kMaxStepRows.
  int64_t prefillChunk = kDefaultPrefillChunk;
};

/// Chained greedy steps between two looks at the ids (stop ids, the
/// callback): a stop id wastes at most this many steps.
constexpr int64_t kChainSteps = 16;

/// One sequence of a batched decode (Session::generateBatch).
struct SequenceRequest {
  std::vector<int64_t> prompt;
  /// As for generate(). deviceGreedy (greedy, no keepLogits): the plan's
  /// argmax chooses the sequence's tokens on the device and only the ids
  /// come back (Backend::rowChoice), when the backend and plan can; the
  /// steps are not chained (the batch's other sequences need the host
  /// between steps). The same tokens as the host's argmax.
  GenerateOptions options;
};

/// How generateBatch() schedules its sequences.
struct BatchOptions {
  /// The most sequences decoded together: 0 = the plan's max_batch; more
  /// than max_batch is an error. Requests beyond it wait for a free slot.
  int64_t batch = 0;
  /// Called once per request when it ends (finished, stopped or failed),
  /// in the order they end; may be empty.
  std::function<void(size_t request, const Expected<GenerateResult> &)>
      onFinish;
  /// Test levers (mutants of the scheduler; never set outside tests), each
  /// a bug a slot-keyed batch can have:
  /// restore a prefix snapshot into the next slot instead of the sequence's;
  bool mutantSnapshotWrongSlot = false;
  /// a sequence joining a slot used before starts at its predecessor's last
  /// position (a stale MLA length) instead of its own;
  bool mutantStalePosition = false;
  /// after this many batched steps, the first two sequences' states are
  /// swapped (-1: never).
  int64_t mutantSwapStatesAfter = -1;
};

/// What one generateBatch() call produced.
struct BatchResult {
  /// Per request, in request order: its result, or the error that ended it
  /// alone (the others went on).
  std::vector<Expected<GenerateResult>> sequences;
  int64_t steps = 0;      ///< batched steps run
  int64_t maxActive = 0;  ///< the most sequences one step ran
  int64_t maxRows = 0;    ///< the most rows (tokens) one step ran
  int64_t promptRows = 0; ///< rows that fed prompt tokens
};

/// What a teacher-forced step computed: every plan probe's values (plan
/// order, as fp32) and the step's logits.
struct ProbedStep {
  std::vector<std::vector<float>> probes; ///< [probe] values
  std::vector<float> logits;              ///< [vocab]
};

/// A plan bound to a checkpoint on a backend.
class Session {
public:
  /// Reads `weightsDir`/config.json and refuses a config that differs from
  /// the plan's, opens the checkpoint and binds the plan to it on `kind`
  /// (errors of the CUDA backend: no GPU or driver, a kernel without a CUDA
  /// implementation). `cudaGraph`: the CUDA backend replays one CUDA graph
  /// per step (else it launches kernel by kernel).
  /// `comm`: the rank's communicator when `plan` is one rank of a
  /// tensor-parallel plan (runRanks in RankGroup.h opens those).
  /// `progress`, when set, is told as the weights are bound (BindProgress).
  static Expected<std::unique_ptr<Session>>
  open(PlanDoc plan, const std::string &weightsDir,
       BackendKind kind = BackendKind::Cpu, bool cudaGraph = true,
       Communicator *comm = nullptr, const BindProgress &progress = {});

  /// Decodes one sequence (see the file comment). Errors, before anything
  /// runs: those of checkPrompt(), a prefix that does not start the prompt,
  /// sampling parameters that checkSamplingParams refuses.
  Expected<GenerateResult> generate(const std::vector<int64_t> &prompt,
                                    const GenerateOptions &options);
  /// Greedy, no stop ids: generate(prompt, {maxNew, keepLogits, onToken,
  /// prefix}).
  Expected<GenerateResult> generate(const std::vector<int64_t> &prompt,
                                    int64_t maxNew, bool keepLogits = false,
                                    const TokenCallback &onToken = {},
                                    const PrefixSnapshot *prefix = nullptr);

  /// Decodes several sequences together, each in its own slot of the plan
  /// (docs/PLAN.md "max_batch"): a step feeds every live sequence its next
  /// prompt token or its last chosen one, at its own position. Sequences
  /// join as slots free up (request order) and leave when done; a slot is
  /// cleared when its sequence leaves. A sequence's tokens do not depend on
  /// the others or on its slot: on the CPU they are bit-identical to
  /// generate()'s. A request that fails its checks (checkPrompt, the
  /// sampling parameters, a prefix that does not start it) or meets
  /// non-finite logits ends alone with its error. The time of each step is
  /// shared among its rows: prompt rows count as the sequence's prefill,
  /// the others as its decode. Errors (the whole call): batch out of range.
  Expected<BatchResult> generateBatch(const std::vector<SequenceRequest> &reqs,
                                      const BatchOptions &options = {});

  /// The request checks of generate(), for callers that check a batch of
  /// requests before decoding any: empty prompt, a token outside
  /// [0, vocab), maxNew < 1, or prompt + maxNew above the plan's max_seq.
  Status checkPrompt(const std::vector<int64_t> &prompt, int64_t maxNew) const;

  /// Feeds `prefix` from a fresh state and returns the snapshot after it.
  /// generate() with that snapshot and a prompt that starts with the prefix
  /// restores it and feeds only the rest: bit-identical to feeding the
  /// whole prompt. Errors: as generate()'s prompt checks.
  Expected<PrefixSnapshot> snapshotPrefix(const std::vector<int64_t> &prefix);

  /// Teacher forcing for checks: from a fresh state, feeds `tokens[i]` at
  /// position i (the caller's tokens, never the argmax), launch by launch,
  /// and reads every plan probe (docs/PLAN.md) as soon as the launches that
  /// compute it have run. Errors: no tokens, a token outside the
  /// vocabulary, more tokens than the plan's max_seq.
  Expected<std::vector<ProbedStep>>
  teacherForce(const std::vector<int64_t> &tokens);

  const PlanDoc &plan() const { return plan_; }
  /// The backend's name ("cpu", "cuda (NVIDIA H200 (sm_90))").
  std::string backendName() const { return backend_->name(); }
  /// The backend the plan is bound to.
  const Backend &backend() const { return *backend_; }
  /// How later prompt chunks run the KDA token (Backend::setPrefillForm:
  /// Rows, bit for bit one step per token, or Chunk, the chunk form within
  /// fp32 rounding). Errors: a form the backend lacks (CUDA: Chunk, for now).
  Status setPrefillForm(PrefillForm form) {
    return backend_->setPrefillForm(form);
  }
  /// Binds room for steps of up to `rows` rows before the first prompt
  /// (Backend::reserveRows): the first prompt chunk then pays only for its
  /// launches.
  Status reserveRows(size_t rows) { return backend_->reserveRows(rows); }
  /// Step rows the backend has bound (Backend::boundRows).
  size_t boundRows() const { return backend_->boundRows(); }

private:
  Session() = default;
  /// Writes a snapshot's states back into `slot` (the mutant lever applied).
  Status restore(const PrefixSnapshot &snap, int64_t slot = 0);
  /// Feeds prompt[first, n) to slot 0, `chunk` tokens per step.
  Status feed(const std::vector<int64_t> &prompt, int64_t first, int64_t chunk);
  /// The checks of generate() before anything runs.
  Status checkRequest(const std::vector<int64_t> &prompt,
                      const GenerateOptions &options) const;
  PlanDoc plan_;
  TensorStore store_;
  std::unique_ptr<Backend> backend_;
};

} // namespace k3

#endif // K3C_RUNTIME_EXEC_SESSION_H
