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

Expected<std::unique_ptr<CpuBackend>>
CpuBackend::bind(const PlanDoc &plan, const TensorStore &store) {
  K3_RETURN_IF_ERROR(validatePlan(plan));
  std::unique_ptr<CpuBackend> be(new CpuBackend());
  be->vocab_ = plan.config.vocabSize;
  be->maxSeq_ = plan.maxSeq;
  be->slots_ = plan.maxBatch;
  const uint64_t slots = static_cast<uint64_t>(plan.maxBatch);

  auto rounded = [](uint64_t bytes) {
    return std::max<uint64_t>((bytes + kArenaAlign - 1) / kArenaAlign, 1) *
           kArenaAlign;
  };
  // validatePlan bounds every slot's arena and states together, so these
  // products cannot wrap.
  auto allocate = [](uint64_t bytes, Block &out) -> Status {
    void *mem = std::aligned_alloc(kArenaAlign, bytes);
    if (!mem)
      return makeError("cannot allocate ", bytes, " bytes");
    std::memset(mem, 0, bytes);
    out.reset(static_cast<uint8_t *>(mem));
    return Status::ok();
  };
  be->arenaBytes_ = plan.arenaBytes;
  be->arenaStride_ = rounded(plan.arenaBytes);
  K3_RETURN_IF_ERROR(allocate(be->arenaStride_ * slots, be->arena_)
                         .withContext(slots > 1 ? "arena (every slot)"
                                                : "arena"));
  be->states_.resize(plan.states.size());
  for (size_t i = 0; i < plan.states.size(); ++i) {
    be->stateBytes_.push_back(plan.states[i].bytes);
    be->stateStride_.push_back(rounded(plan.states[i].bytes));
    K3_RETURN_IF_ERROR(allocate(be->stateStride_[i] * slots, be->states_[i])
                           .withContext("state '" + plan.states[i].name + "'"));
  }
  be->steps_.assign(slots * kStepWords, 0);
  be->weights_.resize(plan.weights.size());
  PlanMemory mem;
  mem.stateBytes = be->stateBytes_;
  for (size_t i = 0; i < plan.weights.size(); ++i) {
    ResolvedWeight &w = be->weights_[i];
    K3_RETURN_IF_ERROR(resolveWeight(plan.weights[i], store, w));
    mem.weights.push_back(hostWeight(w));
  }
  // Each slot's launches see only that slot's arena, states and step block;
  // the weights are shared.
  be->launches_.resize(slots);
  for (uint64_t slot = 0; slot < slots; ++slot) {
    mem.arena = be->arena_.get() + slot * be->arenaStride_;
    mem.states.clear();
    for (size_t i = 0; i < plan.states.size(); ++i)
      mem.states.push_back(be->slotState(static_cast<int64_t>(slot), i));
    mem.step = be->stepBlock(static_cast<int64_t>(slot));
    std::vector<BoundLaunch> &ls = be->launches_[slot];
    ls.resize(plan.launches.size());
    for (size_t i = 0; i < plan.launches.size(); ++i) {
      Status st = bindLaunch(plan, i, mem, ls[i]);
      if (!st)
        return slots > 1 ? st.withContext("slot " + std::to_string(slot)) : st;
    }
    be->logits_.push_back(reinterpret_cast<const float *>(
        mem.arena + plan.buffers[plan.logitsBuffer].offset));
  }
  be->chains_ = planChainsGreedy(plan);
  return be;
}

void CpuBackend::setStep(int64_t token, int64_t pos, int64_t slot) {
  int64_t *step = stepBlock(slot);
  step[kStepToken] = token;
  step[kStepPos] = pos;
  step[kStepNonFinite] = 0;
}

Status CpuBackend::checkSlot(int64_t slot) const {
  if (slot < 0 || slot >= slots_)
    return makeError("slot ", slot, " is outside the plan's ", slots_,
                     " slots (max_batch)");
  return Status::ok();
}

Expected<std::vector<GreedyChoice>> CpuBackend::chainGreedy(int64_t more) {
  if (!chains_)
    return makeError("cpu: the plan has no argmax writing the step block; "
                     "recompile it with this k3c");
  const int64_t *step = stepBlock(0);
  if (more < 0 || more > maxSeq_ - step[kStepPos])
    return makeError("chaining ", more, " steps from position ",
                     step[kStepPos], " passes max_seq ", maxSeq_);
  std::vector<GreedyChoice> out;
  out.reserve(static_cast<size_t>(more) + 1);
  auto record = [&] {
    out.push_back({step[kStepToken], step[kStepNonFinite] != 0});
  };
  record();
  for (int64_t i = 0; i < more; ++i) {
    for (BoundLaunch &l : launches_[0])
      l.runCpu(); // the token and position come from the step block
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
  setStep(token, pos);
  for (BoundLaunch &l : launches_[0]) {
    l.setInputs(token, pos);
    l.runCpu();
  }
  return Status::ok();
}

Status CpuBackend::stepSlots(const std::vector<SlotStep> &rows) {
  if (rows.empty())
    return makeError("a batched step needs at least one row");
  std::vector<bool> taken(static_cast<size_t>(slots_), false);
  for (const SlotStep &r : rows) {
    K3_RETURN_IF_ERROR(checkSlot(r.slot));
    if (taken[static_cast<size_t>(r.slot)])
      return makeError("slot ", r.slot, " is given twice in one step");
    taken[static_cast<size_t>(r.slot)] = true;
    K3_RETURN_IF_ERROR(checkStepInputs(r.token, r.pos, vocab_, maxSeq_)
                           .withContext("slot " + std::to_string(r.slot)));
  }
  for (const SlotStep &r : rows)
    setStep(r.token, r.pos, r.slot);
  for (size_t l = 0; l < launches_[0].size(); ++l)
    for (const SlotStep &r : rows) {
      BoundLaunch &bl = launches_[static_cast<size_t>(r.slot)][l];
      bl.setInputs(r.token, r.pos);
      bl.runCpu();
    }
  return Status::ok();
}

const float *CpuBackend::slotLogits(int64_t slot) const {
  return slot >= 0 && slot < slots_ ? logits_[static_cast<size_t>(slot)]
                                    : nullptr;
}

Status CpuBackend::runLaunch(size_t index, int64_t token, int64_t pos) {
  if (index >= launches_[0].size())
    return makeError("launch ", index, " is out of range");
  setStep(token, pos);
  launches_[0][index].setInputs(token, pos);
  launches_[0][index].runCpu();
  return Status::ok();
}

Status CpuBackend::readArena(std::vector<uint8_t> &out) {
  out.assign(arena_.get(), arena_.get() + arenaBytes_);
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
  K3_RETURN_IF_ERROR(checkSlot(slot));
  if (state >= states_.size())
    return makeError("state ", state, " is out of range");
  const uint8_t *at = slotState(slot, state);
  out.assign(at, at + stateBytes_[state]);
  return Status::ok();
}

Status CpuBackend::writeSlotState(int64_t slot, size_t state,
                                  const std::vector<uint8_t> &bytes) {
  K3_RETURN_IF_ERROR(checkSlot(slot));
  if (state >= states_.size())
    return makeError("state ", state, " is out of range");
  if (bytes.size() != stateBytes_[state])
    return makeError("state ", state, " holds ", stateBytes_[state],
                     " bytes, the snapshot has ", bytes.size());
  std::memcpy(slotState(slot, state), bytes.data(), bytes.size());
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Profiling
//===----------------------------------------------------------------------===//

Expected<std::vector<double>> CpuBackend::timeLaunches(int64_t token,
                                                       int64_t pos) {
  K3_RETURN_IF_ERROR(checkStepInputs(token, pos, vocab_, maxSeq_));
  std::vector<double> us(launches_[0].size());
  setStep(token, pos);
  for (size_t i = 0; i < launches_[0].size(); ++i) {
    BoundLaunch &l = launches_[0][i];
    l.setInputs(token, pos);
    const Clock::time_point t0 = Clock::now();
    l.runCpu();
    us[i] = microsecondsSince(t0);
  }
  return us;
}

Expected<double> CpuBackend::timeStep(int64_t token, int64_t pos, bool replay) {
  (void)replay; // no graph on the host
  K3_RETURN_IF_ERROR(checkStepInputs(token, pos, vocab_, maxSeq_));
  const Clock::time_point t0 = Clock::now();
  setStep(token, pos);
  for (BoundLaunch &l : launches_[0]) {
    l.setInputs(token, pos);
    l.runCpu();
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
