//===- Session.cpp - The greedy decode loop over a bound plan -------------===//
//
// Every request is checked before the first step so that a bad request never
// leaves a half-decoded sequence behind, and the greedy choice uses the CPU
// entry point argmaxCpu (through Sampler), the argmax kernel of the table, so
// host-side and device-side greedy decode cannot drift in their tie rules.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/Session.h"

#include "kernels/common/BF16.h"
#include "runtime/exec/CpuBackend.h"
#include "runtime/exec/cuda/CudaBackend.h"
#include "runtime/model/Synthetic.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

namespace k3 {

namespace {

using ojson = nlohmann::ordered_json;

/// The path of the first difference between two JSON values, with both
/// values, or "" when equal.
std::string firstDifference(const ojson &a, const ojson &b,
                            const std::string &path) {
  if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      const std::string p = path.empty() ? it.key() : path + "." + it.key();
      auto jt = b.find(it.key());
      if (jt == b.end())
        return p + " (plan: " + it.value().dump() + ", weights: absent)";
      std::string d = firstDifference(it.value(), *jt, p);
      if (!d.empty())
        return d;
    }
    for (auto jt = b.begin(); jt != b.end(); ++jt)
      if (a.find(jt.key()) == a.end())
        return (path.empty() ? jt.key() : path + "." + jt.key()) +
               " (plan: absent, weights: " + jt.value().dump() + ")";
    return "";
  }
  if (a == b)
    return "";
  return (path.empty() ? std::string("config") : path) + " (plan: " + a.dump() +
         ", weights: " + b.dump() + ")";
}

/// The first non-finite value of the `vocab` logits that choose generated
/// token `s` (fed at position `pos`), as an error; ok when all are finite.
/// One pass over a row per token: cheap next to the step that made it.
Status checkFiniteLogits(const float *logits, int64_t vocab, int64_t s,
                         int64_t pos, const TensorStore &store) {
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isfinite(logits[i]))
      continue;
    std::string why = "the weights or the plan produce NaN/Inf (check the "
                      "checkpoint for non-finite values)";
    if (Status changed = store.checkUnchanged(); !changed)
      why = changed.message();
    return makeError("decode step ", s, " (the logits after position ", pos,
                     ") is not finite: logits[", i, "] = ", logits[i],
                     "; stopping instead of choosing a token from them: ",
                     why);
  }
  return Status::ok();
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

} // namespace

Status checkConfigsMatch(const ModelConfig &planConfig,
                         const ModelConfig &weightsConfig) {
  const std::string a = writeConfigJson(planConfig);
  const std::string b = writeConfigJson(weightsConfig);
  if (a == b)
    return Status::ok();
  std::string field;
  try {
    field = firstDifference(ojson::parse(a), ojson::parse(b), "");
  } catch (const std::exception &) {
    // Both come from writeConfigJson, so this is not expected; the generic
    // message below still applies.
  }
  if (field.empty())
    field = "(unknown field)";
  return makeError("the plan was compiled for a different model than the "
                   "weights: first difference at ",
                   field, "; recompile the plan for these weights");
}

Expected<TensorStore> openWeightsFor(const PlanDoc &plan,
                                     const std::string &weightsDir) {
  if (isSyntheticWeights(weightsDir))
    return openSyntheticWeights(plan.config, weightsDir);
  Expected<ModelConfig> weightsConfig = parseConfigFile(
      (std::filesystem::path(weightsDir) / "config.json").string());
  if (!weightsConfig)
    return weightsConfig.status();
  K3_RETURN_IF_ERROR(checkConfigsMatch(plan.config, *weightsConfig));
  return TensorStore::open(weightsDir);
}

Expected<std::unique_ptr<Backend>>
bindBackend(const PlanDoc &plan, const TensorStore &store, BackendKind kind,
            bool cudaGraph, const std::string &weightsDir, Communicator *comm,
            const BindProgress &progress) {
  if (kind == BackendKind::Cuda) {
    Expected<std::unique_ptr<CudaBackend>> be =
        CudaBackend::bind(plan, store, cudaGraph, comm, progress);
    if (!be)
      return be.status().withContext("binding the plan to " + weightsDir +
                                     " on the GPU");
    return std::unique_ptr<Backend>(be.take());
  }
  Expected<std::unique_ptr<CpuBackend>> be =
      CpuBackend::bind(plan, store, comm, progress);
  if (!be)
    return be.status().withContext("binding the plan to " + weightsDir);
  return std::unique_ptr<Backend>(be.take());
}

Expected<std::unique_ptr<Session>>
Session::open(PlanDoc plan, const std::string &weightsDir, BackendKind kind,
              bool cudaGraph, Communicator *comm,
              const BindProgress &progress) {
  Expected<TensorStore> store = openWeightsFor(plan, weightsDir);
  if (!store)
    return store.status();
  std::unique_ptr<Session> s(new Session());
  s->plan_ = std::move(plan);
  s->store_ = store.take();
  Expected<std::unique_ptr<Backend>> be = bindBackend(
      s->plan_, s->store_, kind, cudaGraph, weightsDir, comm, progress);
  if (!be)
    return be.status();
  s->backend_ = be.take();
  return s;
}

Expected<PrefixSnapshot>
Session::snapshotPrefix(const std::vector<int64_t> &prefix) {
  K3_RETURN_IF_ERROR(checkPrompt(prefix, 1));
  K3_RETURN_IF_ERROR(backend_->resetState());
  K3_RETURN_IF_ERROR(feed(prefix, 0, kDefaultPrefillChunk));
  PrefixSnapshot snap;
  snap.tokens = prefix;
  snap.states.resize(plan_.states.size());
  for (size_t i = 0; i < plan_.states.size(); ++i)
    K3_RETURN_IF_ERROR(backend_->readState(i, snap.states[i]));
  snap.logits.assign(backend_->logits(),
                     backend_->logits() + backend_->vocab());
  return snap;
}

Expected<std::vector<ProbedStep>>
Session::teacherForce(const std::vector<int64_t> &tokens) {
  if (tokens.empty())
    return makeError("teacher forcing needs at least one token");
  for (size_t t = 0; t < tokens.size(); ++t)
    K3_RETURN_IF_ERROR(checkStepInputs(tokens[t], static_cast<int64_t>(t),
                                       backend_->vocab(), backend_->maxSeq())
                           .withContext("teacher-forced token " +
                                        std::to_string(t)));
  K3_RETURN_IF_ERROR(backend_->resetState());
  // Buffer contents as fp32 (bf16 widened exactly).
  auto values = [&](const std::vector<uint8_t> &arena, int64_t buffer) {
    const PlanBuffer &b = plan_.buffers[static_cast<size_t>(buffer)];
    std::vector<float> v(static_cast<size_t>(b.elems));
    const uint8_t *at = arena.data() + b.offset;
    for (size_t i = 0; i < v.size(); ++i) {
      if (b.dtype == "bf16") {
        bf16_t h;
        std::memcpy(&h, at + 2 * i, 2);
        v[i] = bf16ToFloat(h);
      } else {
        std::memcpy(&v[i], at + 4 * i, 4);
      }
    }
    return v;
  };
  std::vector<ProbedStep> out(tokens.size());
  std::vector<uint8_t> arena;
  const size_t launches = plan_.launches.size();
  for (size_t t = 0; t < tokens.size(); ++t) {
    ProbedStep &ps = out[t];
    ps.probes.resize(plan_.probes.size());
    size_t next = 0; // first probe not read yet
    for (size_t l = 0; l < launches; ++l) {
      K3_RETURN_IF_ERROR(
          backend_->runLaunch(l, tokens[t], static_cast<int64_t>(t))
              .withContext("teacher-forced step " + std::to_string(t)));
      if (next == plan_.probes.size() ||
          plan_.probes[next].after != static_cast<int64_t>(l + 1))
        continue;
      K3_RETURN_IF_ERROR(backend_->readArena(arena));
      for (; next < plan_.probes.size() &&
             plan_.probes[next].after == static_cast<int64_t>(l + 1);
           ++next)
        ps.probes[next] = values(arena, plan_.probes[next].buffer);
    }
    K3_RETURN_IF_ERROR(backend_->readArena(arena));
    ps.logits = values(arena, plan_.logitsBuffer);
    ps.logits.resize(static_cast<size_t>(backend_->vocab()));
  }
  return out;
}

Status Session::restore(const PrefixSnapshot &snap, int64_t slot) {
  if (snap.states.size() != plan_.states.size() ||
      snap.logits.size() != static_cast<size_t>(backend_->vocab()))
    return makeError("the prefix snapshot was not made with this plan (",
                     snap.states.size(), " states, ", plan_.states.size(),
                     " expected)");
  const int64_t toSlot = slot;
  std::vector<size_t> order(snap.states.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  if (snap.mutantSwapKdaSlots) {
    std::vector<size_t> kda;
    for (size_t i = 0; i < plan_.states.size(); ++i)
      if (plan_.states[i].is(StateKind::KdaState))
        kda.push_back(i);
    if (kda.size() >= 2)
      std::swap(order[kda[0]], order[kda[1]]);
  }
  for (size_t i = 0; i < order.size(); ++i)
    K3_RETURN_IF_ERROR(
        backend_->writeSlotState(toSlot, order[i], snap.states[i])
            .withContext("restoring the prefix snapshot"));
  return Status::ok();
}

Status Session::checkPrompt(const std::vector<int64_t> &prompt,
                            int64_t maxNew) const {
  const int64_t vocab = backend_->vocab();
  if (prompt.empty())
    return makeError("the prompt is empty; it needs at least one token "
                     "(e.g. BOS = ",
                     plan_.config.bosTokenId, ")");
  if (maxNew < 1)
    return makeError("max_new must be at least 1, got ", maxNew);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      return makeError("prompt token ", i, " has id ", prompt[i],
                       ", outside the vocabulary [0, ", vocab, ")");
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n > backend_->maxSeq() - maxNew)
    return makeError(
        "the prompt (", n, " tokens) + max_new (", maxNew, ") exceeds the "
        "plan's max_seq of ", backend_->maxSeq(),
        "; shorten the request or compile with a larger "
        "--max-seq");
  return Status::ok();
}

Expected<GenerateResult> Session::generate(const std::vector<int64_t> &prompt,
                                           int64_t maxNew, bool keepLogits,
                                           const TokenCallback &onToken,
                                           const PrefixSnapshot *prefix) {
  GenerateOptions options;
  options.maxNew = maxNew;
  options.keepLogits = keepLogits;
  options.onToken = onToken;
  options.prefix = prefix;
  return generate(prompt, options);
}

Status Session::feed(const std::vector<int64_t> &prompt, int64_t first,
                     int64_t chunk) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  std::vector<SlotStep> rows;
  for (int64_t i = first; i < n; i += chunk) {
    const int64_t end = std::min(n, i + chunk);
    rows.clear();
    appendPromptRows(rows, prompt, i, end);
    K3_RETURN_IF_ERROR(backend_->stepSlots(rows));
  }
  return Status::ok();
}

Status Session::checkRequest(const std::vector<int64_t> &prompt,
                             const GenerateOptions &options) const {
  K3_RETURN_IF_ERROR(checkPrompt(prompt, options.maxNew));
  K3_RETURN_IF_ERROR(checkSamplingParams(options.sampling));
  if (options.prefillChunk < 1 || options.prefillChunk > kMaxStepRows)
    return makeError("the prefill chunk must be in [1, ", kMaxStepRows,
                     "] tokens, got ", options.prefillChunk);
  const PrefixSnapshot *prefix = options.prefix;
  if (prefix && (prefix->tokens.size() > prompt.size() ||
                 !std::equal(prefix->tokens.begin(), prefix->tokens.end(),
                             prompt.begin())))
    return makeError("the prefix snapshot (", prefix->tokens.size(),
                     " tokens) is not a prefix of the prompt");
  return Status::ok();
}

Expected<GenerateResult> Session::generate(const std::vector<int64_t> &prompt,
                                           const GenerateOptions &options) {
  const int64_t vocab = backend_->vocab();
  const int64_t maxNew = options.maxNew;
  const PrefixSnapshot *prefix = options.prefix;
  K3_RETURN_IF_ERROR(checkRequest(prompt, options));
  const int64_t n = static_cast<int64_t>(prompt.size());

  GenerateResult r;
  r.vocab = vocab;
  r.promptTokens = n;
  r.tokens.reserve(maxNew);
  if (options.keepLogits)
    r.logits.reserve(static_cast<size_t>(maxNew * vocab));
  auto t0 = std::chrono::steady_clock::now();
  int64_t first = 0;
  if (prefix) {
    K3_RETURN_IF_ERROR(restore(*prefix));
    first = static_cast<int64_t>(prefix->tokens.size());
  } else {
    K3_RETURN_IF_ERROR(backend_->resetState());
  }
  r.restoredTokens = first;
  K3_RETURN_IF_ERROR(feed(prompt, first, options.prefillChunk));
  r.promptSeconds = secondsSince(t0);

  t0 = std::chrono::steady_clock::now();
  // Records step s's token and reports it; true when it is a stop id.
  auto emit = [&](int64_t s, int64_t id) {
    r.tokens.push_back(id);
    if (options.onToken)
      options.onToken(s, id);
    r.stopped = std::find(options.stopIds.begin(), options.stopIds.end(),
                          id) != options.stopIds.end();
    return r.stopped;
  };
  const bool chained = options.deviceGreedy && options.sampling.greedy() &&
                       !options.keepLogits && first < n &&
                       backend_->chainsGreedy();
  if (chained) {
    // The last prompt step chose tokens[0] on the device; each chained step
    // takes the previous choice and chooses the next.
    bool firstChunk = true;
    while (static_cast<int64_t>(r.tokens.size()) < maxNew && !r.stopped) {
      const int64_t have = static_cast<int64_t>(r.tokens.size());
      const int64_t more = firstChunk ? std::min(kChainSteps, maxNew - 1)
                                      : std::min(kChainSteps, maxNew - have);
      Expected<std::vector<GreedyChoice>> cs = backend_->chainGreedy(more);
      if (!cs)
        return cs.status();
      // A later chunk's first entry repeats the previous chunk's last.
      for (size_t c = firstChunk ? 0 : 1; c < cs->size(); ++c) {
        const int64_t s = static_cast<int64_t>(r.tokens.size());
        if ((*cs)[c].nonFinite) {
          // The failing step's logits are gone (later steps of the chunk
          // overwrote them): decode again on the host, which stops at the
          // same step with the logit and the cause named. The tokens
          // before it were already reported.
          GenerateOptions again = options;
          again.deviceGreedy = false;
          again.onToken = [&options, s](int64_t i, int64_t id) {
            if (i >= s && options.onToken)
              options.onToken(i, id);
          };
          return generate(prompt, again);
        }
        if (emit(s, (*cs)[c].id))
          break;
      }
      firstChunk = false;
    }
    r.decodeSteps = static_cast<int64_t>(r.tokens.size()) - 1;
    r.decodeSeconds = secondsSince(t0);
    return r;
  }
  Sampler sampler(options.sampling);
  for (int64_t s = 0; s < maxNew; ++s) {
    // The logits of the last prompt token: the snapshot's when the whole
    // prompt was the prefix.
    const float *logits =
        s == 0 && first == n ? prefix->logits.data() : backend_->logits();
    // argmax skips NaN: without this a broken model decodes "0 0 0 ...".
    K3_RETURN_IF_ERROR(checkFiniteLogits(logits, vocab, s, n - 1 + s, store_));
    if (options.keepLogits)
      r.logits.insert(r.logits.end(), logits, logits + vocab);
    const int64_t id = sampler.next(logits, vocab);
    if (emit(s, id))
      break;
    if (s + 1 < maxNew) {
      K3_RETURN_IF_ERROR(backend_->step(id, n + s));
      ++r.decodeSteps;
    }
  }
  r.decodeSeconds = secondsSince(t0);
  return r;
}

//===----------------------------------------------------------------------===//
// Batched decode
//===----------------------------------------------------------------------===//

namespace {

/// A sequence in a slot.
struct LiveSequence {
  size_t request = 0;
  int64_t slot = 0;
  int64_t fed = 0;       ///< tokens fed so far (prompt, then chosen ones)
  int64_t base = 0;      ///< the position of the first token (0)
  int64_t lastToken = 0; ///< the last chosen token (fed once the prompt is)
  int64_t pos() const { return base + fed; }
  GenerateResult result;
  std::unique_ptr<Sampler> sampler;
};

} // namespace

Expected<BatchResult>
Session::generateBatch(const std::vector<SequenceRequest> &reqs,
                       const BatchOptions &options) {
  const int64_t slots = backend_->maxBatch();
  const int64_t batch = options.batch == 0 ? slots : options.batch;
  if (batch < 1 || batch > slots)
    return makeError("a batch of ", batch, " sequences is more than the ",
                     slots, " the plan holds (max_batch ", slots,
                     "; compile with k3c --max-batch ", batch, ")");
  const int64_t vocab = backend_->vocab();
  BatchResult out;
  std::vector<std::optional<Expected<GenerateResult>>> done(reqs.size());
  auto finish = [&](size_t request, Expected<GenerateResult> r) {
    if (options.onFinish)
      options.onFinish(request, r);
    done[request] = std::move(r);
  };

  std::vector<LiveSequence> live;
  std::vector<bool> busy(static_cast<size_t>(batch), false);
  /// The last position a slot's previous sequence fed (the stale-position
  /// mutant's lever).
  std::vector<int64_t> lastPos(static_cast<size_t>(batch), 0);
  size_t next = 0; // the first request not started

  // Takes `id` as sequence `q`'s next token, or ends it with `failed`;
  // false when it ended (done, stopped, or failed: `finish` was called and
  // its slot cleared).
  auto accept = [&](LiveSequence &q, int64_t id, Status failed) -> bool {
    const SequenceRequest &req = reqs[q.request];
    GenerateResult &r = q.result;
    const int64_t s = static_cast<int64_t>(r.tokens.size());
    const bool ok = failed.isOk();
    if (ok) {
      r.tokens.push_back(id);
      if (req.options.onToken)
        req.options.onToken(s, id);
      r.stopped =
          std::find(req.options.stopIds.begin(), req.options.stopIds.end(),
                    id) != req.options.stopIds.end();
      q.lastToken = id;
      if (!r.stopped &&
          static_cast<int64_t>(r.tokens.size()) < req.options.maxNew)
        return true;
    }
    r.decodeSteps =
        std::max<int64_t>(static_cast<int64_t>(r.tokens.size()) - 1, 0);
    lastPos[static_cast<size_t>(q.slot)] = q.pos();
    busy[static_cast<size_t>(q.slot)] = false;
    Status cleared = backend_->resetSlot(q.slot);
    if (!ok)
      finish(q.request, failed);
    else if (!cleared)
      finish(q.request,
             cleared.withContext("clearing slot " + std::to_string(q.slot)));
    else
      finish(q.request, std::move(r));
    return false;
  };
  // Chooses sequence `q`'s next token from `logits` (its sampler; refused
  // when one is not finite); false when it ended.
  auto choose = [&](LiveSequence &q, const float *logits) -> bool {
    GenerateResult &r = q.result;
    const int64_t s = static_cast<int64_t>(r.tokens.size());
    Status finite = checkFiniteLogits(logits, vocab, s, q.pos() - 1, store_);
    if (!finite)
      return accept(q, 0, finite);
    if (reqs[q.request].options.keepLogits)
      r.logits.insert(r.logits.end(), logits, logits + vocab);
    return accept(q, q.sampler->next(logits, vocab), Status::ok());
  };
  // Greedy sequences that keep no logits take the plan's choice from the
  // device (Backend::rowChoice): only the ids come back, not a row of
  // vocabulary floats each, and the host makes no pass over them.
  auto choosesOnDevice = [&](const LiveSequence &q) {
    const GenerateOptions &o = reqs[q.request].options;
    return o.deviceGreedy && o.sampling.greedy() && !o.keepLogits &&
           backend_->choosesRows();
  };
  // Sequence `q`'s next token from row `row` of the last step.
  auto chooseFromRow = [&](LiveSequence &q, size_t row) -> bool {
    if (!choosesOnDevice(q))
      return choose(q, backend_->rowLogits(row));
    Expected<GreedyChoice> c = backend_->rowChoice(row);
    if (!c)
      return accept(q, 0, c.status());
    if (!c->nonFinite)
      return accept(q, c->id, Status::ok());
    // A NaN or ±Inf logit: the host's check names it.
    if (Status st = backend_->fetchRowLogits(row); !st)
      return accept(q, 0, st);
    return choose(q, backend_->rowLogits(row));
  };

  // Starts request `i` in a free slot; false when it ended at once (a
  // failed check, or a snapshot covering the prompt whose first choice
  // ended it).
  auto join = [&](size_t i, int64_t slot) -> bool {
    const SequenceRequest &req = reqs[i];
    if (Status st = checkRequest(req.prompt, req.options); !st) {
      finish(i, st);
      return false;
    }
    LiveSequence q;
    q.request = i;
    q.slot = slot;
    q.sampler = std::make_unique<Sampler>(req.options.sampling);
    q.result.vocab = vocab;
    q.result.promptTokens = static_cast<int64_t>(req.prompt.size());
    const PrefixSnapshot *prefix = req.options.prefix;
    Status st = Status::ok();
    if (prefix) {
      const int64_t into =
          options.mutantSnapshotWrongSlot ? (slot + 1) % slots : slot;
      st = backend_->resetSlot(slot);
      if (st)
        st = restore(*prefix, into);
      q.fed = static_cast<int64_t>(prefix->tokens.size());
    } else {
      st = backend_->resetSlot(slot);
      q.base =
          options.mutantStalePosition ? lastPos[static_cast<size_t>(slot)] : 0;
    }
    if (!st) {
      finish(i, st.withContext("slot " + std::to_string(slot)));
      return false;
    }
    q.result.restoredTokens = q.fed;
    busy[static_cast<size_t>(slot)] = true;
    if (prefix && q.fed == q.result.promptTokens) {
      // The whole prompt was the prefix: its logits choose the first token.
      if (!choose(q, prefix->logits.data()))
        return false;
    }
    live.push_back(std::move(q));
    return true;
  };

  while (next < reqs.size() || !live.empty()) {
    for (int64_t slot = 0; slot < batch && next < reqs.size(); ++slot)
      if (!busy[static_cast<size_t>(slot)])
        join(next++, slot);
    if (live.empty())
      continue;

    // A sequence still in its prompt feeds up to its chunk of prompt tokens
    // (consecutive rows of its slot), the others their last choice.
    std::vector<SlotStep> rows;
    std::vector<size_t> lastRow; // per live sequence: its last row
    int64_t promptRows = 0;
    for (const LiveSequence &q : live) {
      const std::vector<int64_t> &prompt = reqs[q.request].prompt;
      const int64_t n = static_cast<int64_t>(prompt.size());
      if (q.fed < n) {
        const int64_t end =
            std::min(n, q.fed + reqs[q.request].options.prefillChunk);
        appendPromptRows(rows, prompt, q.fed, end, q.slot, q.base);
        promptRows += end - q.fed;
      } else {
        rows.push_back({q.slot, q.lastToken, q.pos()});
      }
      lastRow.push_back(rows.size() - 1);
      rows.back().hostLogits = !choosesOnDevice(q);
    }
    const auto t0 = std::chrono::steady_clock::now();
    Status st = backend_->stepSlots(rows);
    const double share = secondsSince(t0) / static_cast<double>(rows.size());
    if (!st)
      return st.withContext("batched step " + std::to_string(out.steps));
    ++out.steps;
    out.maxActive =
        std::max<int64_t>(out.maxActive, static_cast<int64_t>(live.size()));
    out.maxRows =
        std::max<int64_t>(out.maxRows, static_cast<int64_t>(rows.size()));
    out.promptRows += promptRows;

    std::vector<LiveSequence> still;
    for (size_t k = 0; k < live.size(); ++k) {
      LiveSequence &q = live[k];
      const int64_t n = q.result.promptTokens;
      const size_t first = k == 0 ? 0 : lastRow[k - 1] + 1;
      const int64_t mine = static_cast<int64_t>(lastRow[k] + 1 - first);
      (q.fed < n ? q.result.promptSeconds : q.result.decodeSeconds) +=
          share * static_cast<double>(mine);
      q.fed += mine;
      if (q.fed < n) { // more prompt to feed
        still.push_back(std::move(q));
        continue;
      }
      if (chooseFromRow(q, lastRow[k]))
        still.push_back(std::move(q));
    }
    live = std::move(still);

    if (out.steps == options.mutantSwapStatesAfter && live.size() >= 2) {
      std::vector<uint8_t> a, b;
      for (size_t i = 0; i < plan_.states.size(); ++i) {
        K3_RETURN_IF_ERROR(backend_->readSlotState(live[0].slot, i, a));
        K3_RETURN_IF_ERROR(backend_->readSlotState(live[1].slot, i, b));
        K3_RETURN_IF_ERROR(backend_->writeSlotState(live[0].slot, i, b));
        K3_RETURN_IF_ERROR(backend_->writeSlotState(live[1].slot, i, a));
      }
    }
  }
  for (std::optional<Expected<GenerateResult>> &r : done)
    out.sequences.push_back(std::move(*r));
  return out;
}

} // namespace k3
