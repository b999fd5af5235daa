//===- CpuBackend.cpp - Runs a plan with the CPU kernels ------------------===//
//
// Host memory for the arena and the states, the mmapped checkpoint for the
// weights, and the generic binder of PlanBinding.h for the params structs; a
// step writes the step inputs and calls the CPU entry points in order.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/CpuBackend.h"

#include "kernels/common/BF16.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace k3 {

namespace {
constexpr size_t kArenaAlign = 64;
/// The default copy of measureCopyGBps: well above any host cache.
constexpr uint64_t kDefaultCopyBytes = 256ull << 20;
constexpr int kCopyRuns = 5;

using Clock = std::chrono::steady_clock;
double microsecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}
} // namespace

void CpuBackend::Aligned::operator()(uint8_t *p) const { std::free(p); }

CpuBackend::~CpuBackend() = default;

namespace {
uint64_t rounded(uint64_t bytes) {
  return std::max<uint64_t>((bytes + kArenaAlign - 1) / kArenaAlign, 1) *
         kArenaAlign;
}
} // namespace

Expected<std::unique_ptr<CpuBackend>>
CpuBackend::bind(const PlanDoc &plan, const TensorStore &store,
                 Communicator *comm, const BindProgress &progress) {
  K3_RETURN_IF_ERROR(validatePlan(plan));
  K3_RETURN_IF_ERROR(checkPlanCommunicator(plan, comm));
  std::unique_ptr<CpuBackend> be(new CpuBackend());
  be->plan_ = plan;
  be->comm_ = plan.ranks > 1 ? comm : nullptr;
  be->plan_.ptxModules.clear(); // the CPU never reads it
  be->vocab_ = plan.config.vocabSize;
  be->maxSeq_ = plan.maxSeq;
  be->slots_ = plan.maxBatch;
  be->arenaBytes_ = plan.arenaBytes;
  be->logitsTail_ = logitsTailStart(plan);
  const uint64_t slots = static_cast<uint64_t>(plan.maxBatch);
  // validatePlan bounds every slot's states together, so these products
  // cannot wrap.
  be->states_.resize(plan.states.size());
  for (size_t i = 0; i < plan.states.size(); ++i) {
    StateKind kind = StateKind::KdaState;
    parseStateKind(plan.states[i].kind, kind); // validatePlan checked it
    be->stepLocal_.push_back(stateKindIsStepLocal(kind));
    be->stateBytes_.push_back(plan.states[i].bytes);
    be->stateStride_.push_back(rounded(plan.states[i].bytes));
    K3_RETURN_IF_ERROR(be->allocate(be->stateStride_[i] * slots, be->states_[i])
                           .withContext("state '" + plan.states[i].name + "'"));
  }
  be->weights_.resize(plan.weights.size());
  const uint64_t total = planWeightsBytes(plan);
  uint64_t done = 0;
  for (size_t i = 0; i < plan.weights.size(); ++i) {
    ResolvedWeight &w = be->weights_[i];
    K3_RETURN_IF_ERROR(resolveWeight(plan.weights[i], store, w));
    be->weightViews_.push_back(hostWeight(w));
    if (progress)
      progress(done += planWeightBytes(plan.weights[i]), total);
  }
  K3_RETURN_IF_ERROR(be->ensureRows(1));
  be->logits_ = be->rows_[0]->logits;
  be->chains_ = planChainsGreedy(plan);
  return be;
}

Status CpuBackend::allocate(uint64_t bytes, Block &out) {
  bytes = rounded(bytes);
  void *mem = std::aligned_alloc(kArenaAlign, bytes);
  if (!mem)
    return makeError("cannot allocate ", bytes, " bytes");
  std::memset(mem, 0, bytes);
  out.reset(static_cast<uint8_t *>(mem));
  return Status::ok();
}

Status CpuBackend::ensureRows(size_t n) {
  while (rows_.size() < n) {
    const size_t index = rows_.size();
    auto row = std::make_unique<Row>();
    K3_RETURN_IF_ERROR(
        allocate(arenaBytes_, row->arena)
            .withContext("the arena of step row " + std::to_string(index)));
    row->local.resize(plan_.states.size());
    PlanMemory mem;
    mem.arena = row->arena.get();
    mem.stateBytes = stateBytes_;
    mem.weights = weightViews_;
    mem.step = row->step;
    for (size_t i = 0; i < plan_.states.size(); ++i) {
      if (stepLocal_[i]) {
        K3_RETURN_IF_ERROR(allocate(stateBytes_[i], row->local[i])
                               .withContext("state '" + plan_.states[i].name +
                                            "' of step row " +
                                            std::to_string(index)));
        mem.states.push_back(row->local[i].get());
      } else {
        mem.states.push_back(slotState(0, i));
      }
    }
    K3_RETURN_IF_ERROR(
        bindRowLaunches(plan_, mem, stepLocal_, row->launches, row->patches));
    row->slot = 0;
    row->logits = reinterpret_cast<const float *>(
        row->arena.get() + plan_.buffers[plan_.logitsBuffer].offset);
    rows_.push_back(std::move(row));
  }
  return Status::ok();
}

void CpuBackend::bindRowToSlot(Row &r, int64_t slot) {
  if (r.slot == slot)
    return;
  for (size_t l = 0; l < r.launches.size(); ++l)
    applyStatePatches(r.launches[l], r.patches[l], [&](size_t state) {
      return reinterpret_cast<uintptr_t>(slotState(slot, state));
    });
  r.slot = slot;
}

CpuBackend::Row &CpuBackend::rowZero(int64_t token, int64_t pos) {
  Row &r = *rows_[0];
  bindRowToSlot(r, 0);
  r.step[kStepToken] = token;
  r.step[kStepPos] = pos;
  r.step[kStepNonFinite] = 0;
  logits_ = r.logits;
  lastRows_ = 1;
  rowWantsLogits_.assign(1, true);
  return r;
}

Expected<std::vector<GreedyChoice>> CpuBackend::chainGreedy(int64_t more) {
  if (!chains_)
    return makeError("cpu: the plan has no argmax writing the step block; "
                     "recompile it with this k3c");
  // The chain goes on from the last row of the last step (a prompt chunk's
  // last token, whose argmax wrote the next token and position): row 0
  // takes over its step block.
  Row &r = *rows_[0];
  const Row &last = *rows_[lastRows_ == 0 ? 0 : lastRows_ - 1];
  if (last.slot != 0)
    return makeError("cpu: chained greedy steps go on from slot 0; the last "
                     "step's last row was slot ",
                     last.slot);
  if (&last != &r)
    std::memcpy(r.step, last.step, sizeof(r.step));
  bindRowToSlot(r, 0);
  logits_ = r.logits;
  lastRows_ = 1;
  rowWantsLogits_.assign(1, true);
  const int64_t *step = r.step;
  if (more < 0 || more > maxSeq_ - step[kStepPos])
    return makeError("chaining ", more, " steps from position ", step[kStepPos],
                     " passes max_seq ", maxSeq_);
  std::vector<GreedyChoice> out;
  out.reserve(static_cast<size_t>(more) + 1);
  auto record = [&] {
    out.push_back({step[kStepToken], step[kStepNonFinite] != 0});
  };
  record();
  for (int64_t i = 0; i < more; ++i) {
    // The token and position come from the step block.
    for (size_t l = 0; l < r.launches.size(); ++l)
      K3_RETURN_IF_ERROR(run(r.launches[l], l));
    record();
  }
  return out;
}

Status CpuBackend::resetState() {
  for (size_t i = 0; i < states_.size(); ++i)
    std::memset(states_[i].get(), 0,
                stateStride_[i] * static_cast<uint64_t>(slots_));
  return Status::ok();
}

Status CpuBackend::resetSlot(int64_t slot) {
  K3_RETURN_IF_ERROR(checkSlot(slot));
  for (size_t i = 0; i < states_.size(); ++i)
    std::memset(slotState(slot, i), 0, stateBytes_[i]);
  return Status::ok();
}

Status CpuBackend::step(int64_t token, int64_t pos) {
  K3_RETURN_IF_ERROR(checkStepInputs(token, pos, vocab_, maxSeq_));
  Row &r = rowZero(token, pos);
  for (size_t i = 0; i < r.launches.size(); ++i) {
    r.launches[i].setInputs(token, pos);
    K3_RETURN_IF_ERROR(run(r.launches[i], i));
  }
  return Status::ok();
}

Status CpuBackend::run(const BoundLaunch &l, size_t index) {
  if (!l.kernel->collective) {
    l.runCpu();
    return Status::ok();
  }
  if (!comm_)
    return makeError("launch ", index, " (", l.kernel->name,
                     ") is a collective, and this plan has no other ranks");
  return comm_->run(*l.kernel, l.params->data(), index);
}

Status CpuBackend::stepSlots(const std::vector<SlotStep> &rows) {
  K3_RETURN_IF_ERROR(checkRows(rows));
  K3_RETURN_IF_ERROR(ensureRows(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) {
    Row &r = *rows_[i];
    bindRowToSlot(r, rows[i].slot);
    r.step[kStepToken] = rows[i].token;
    r.step[kStepPos] = rows[i].pos;
    r.step[kStepNonFinite] = 0;
  }
  // Launch-major: every row's launch l before any row's launch l + 1, the
  // rows in order, so a slot's rows meet its states in position order (a
  // launch reads a state only up to its row's position: the MLA cache's
  // later rows are past its length).
  // A kernel with a multi-row form (the projections) runs all rows in one
  // call, each weight row read once for them; with PrefillForm::Chunk,
  // kda_decode runs each slot's consecutive rows in its chunk form. The
  // logits tail runs only for the rows that asked for logits.
  std::vector<size_t> all(rows.size()), wanted;
  for (size_t i = 0; i < rows.size(); ++i) {
    all[i] = i;
    if (rows[i].logits)
      wanted.push_back(i);
  }
  std::vector<const void *> params;
  if (launchTimes_)
    launchTimes_->assign(plan_.launches.size(), 0.0);
  for (size_t l = 0; l < plan_.launches.size(); ++l) {
    const Clock::time_point t0 = Clock::now();
    const std::vector<size_t> &active = l < logitsTail_ ? all : wanted;
    if (active.empty())
      continue;
    const BoundLaunch &first = rows_[active[0]]->launches[l];
    const CpuRowsEntry together = chunkForm_ && first.cpuChunkRows
                                      ? first.cpuChunkRows
                                      : first.cpuRows;
    params.clear();
    for (size_t i : active) {
      BoundLaunch &bl = rows_[i]->launches[l];
      bl.setInputs(rows[i].token, rows[i].pos);
      if (together && active.size() > 1)
        params.push_back(bl.params->data());
      else
        K3_RETURN_IF_ERROR(run(bl, l));
    }
    if (together && active.size() > 1)
      together(params.data(), active.size());
    if (launchTimes_)
      (*launchTimes_)[l] = microsecondsSince(t0);
  }
  lastRows_ = rows.size();
  rowWantsLogits_.assign(rows.size(), false);
  for (size_t i : wanted)
    rowWantsLogits_[i] = true;
  logits_ = rows_[rows.size() - 1]->logits;
  return Status::ok();
}

const float *CpuBackend::rowLogits(size_t row) const {
  // The logits are in host memory whether or not the row asked to have
  // them there (SlotStep::hostLogits).
  return row < lastRows_ && rowWantsLogits_[row] ? rows_[row]->logits : nullptr;
}

Expected<GreedyChoice> CpuBackend::rowChoice(size_t row) {
  if (!chains_)
    return Backend::rowChoice(row);
  if (row >= lastRows_ || !rowWantsLogits_[row])
    return makeError("cpu: step row ", row, " of ", lastRows_,
                     " has no logits, so no greedy choice");
  // The plan's argmax wrote the row's step block (argmaxCpu).
  const int64_t *step = rows_[row]->step;
  return GreedyChoice{step[kStepToken], step[kStepNonFinite] != 0};
}

Status CpuBackend::runLaunch(size_t index, int64_t token, int64_t pos) {
  if (index >= plan_.launches.size())
    return makeError("launch ", index, " is out of range");
  BoundLaunch &l = rowZero(token, pos).launches[index];
  l.setInputs(token, pos);
  return run(l, index);
}

Status CpuBackend::readArena(std::vector<uint8_t> &out) {
  const uint8_t *arena = rows_[0]->arena.get();
  out.assign(arena, arena + arenaBytes_);
  return Status::ok();
}

Status CpuBackend::readState(size_t state, std::vector<uint8_t> &out) {
  return readSlotState(0, state, out);
}

Status CpuBackend::writeState(size_t state, const std::vector<uint8_t> &bytes) {
  return writeSlotState(0, state, bytes);
}

Status CpuBackend::readSlotState(int64_t slot, size_t state,
                                 std::vector<uint8_t> &out) {
  K3_RETURN_IF_ERROR(checkStateAccess(slot, state, stateBytes_));
  const uint8_t *at = stateAt(slot, state);
  out.assign(at, at + stateBytes_[state]);
  return Status::ok();
}

Status CpuBackend::writeSlotState(int64_t slot, size_t state,
                                  const std::vector<uint8_t> &bytes) {
  const size_t written = bytes.size();
  K3_RETURN_IF_ERROR(checkStateAccess(slot, state, stateBytes_, &written));
  std::memcpy(stateAt(slot, state), bytes.data(), bytes.size());
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Profiling
//===----------------------------------------------------------------------===//

Expected<std::vector<double>> CpuBackend::timeLaunches(int64_t token,
                                                       int64_t pos) {
  K3_RETURN_IF_ERROR(checkStepInputs(token, pos, vocab_, maxSeq_));
  Row &r = rowZero(token, pos);
  std::vector<double> us(r.launches.size());
  for (size_t i = 0; i < r.launches.size(); ++i) {
    BoundLaunch &l = r.launches[i];
    l.setInputs(token, pos);
    const Clock::time_point t0 = Clock::now();
    K3_RETURN_IF_ERROR(run(l, i));
    us[i] = microsecondsSince(t0);
  }
  return us;
}

Expected<double> CpuBackend::timeStep(int64_t token, int64_t pos, bool replay) {
  (void)replay; // no graph on the host
  K3_RETURN_IF_ERROR(checkStepInputs(token, pos, vocab_, maxSeq_));
  const Clock::time_point t0 = Clock::now();
  Row &r = rowZero(token, pos);
  for (size_t i = 0; i < r.launches.size(); ++i) {
    r.launches[i].setInputs(token, pos);
    K3_RETURN_IF_ERROR(run(r.launches[i], i));
  }
  return microsecondsSince(t0);
}

Expected<double> CpuBackend::measureCopyGBps(uint64_t bytes) {
  if (bytes == 0)
    bytes = kDefaultCopyBytes;
  Block src, dst;
  for (Block *b : {&src, &dst}) {
    void *mem = std::aligned_alloc(kArenaAlign, (bytes + kArenaAlign - 1) /
                                                    kArenaAlign * kArenaAlign);
    if (!mem)
      return makeError("cannot allocate ", bytes,
                       " bytes to measure the copy bandwidth");
    b->reset(static_cast<uint8_t *>(mem));
  }
  // Touch every page first (and never copy zeros).
  std::memset(src.get(), 0x5a, bytes);
  std::memset(dst.get(), 0, bytes);
  std::memcpy(dst.get(), src.get(), bytes);
  std::vector<double> us;
  for (int r = 0; r < kCopyRuns; ++r) {
    const Clock::time_point t0 = Clock::now();
    std::memcpy(dst.get(), src.get(), bytes);
    us.push_back(microsecondsSince(t0));
  }
  // Keep the copies observable.
  volatile uint8_t sink = dst.get()[bytes - 1];
  (void)sink;
  std::sort(us.begin(), us.end());
  const double median = std::max(us[us.size() / 2], 1e-3);
  return 2.0 * static_cast<double>(bytes) / (median * 1e3);
}

std::string CpuBackend::copyMethod(uint64_t bytes) const {
  if (bytes == 0)
    bytes = kDefaultCopyBytes;
  return "host memcpy of " + std::to_string(bytes >> 20) +
         " MiB, one thread, read + write";
}

} // namespace k3
