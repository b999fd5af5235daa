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

  auto allocate = [](uint64_t bytes, Block &out) -> Status {
    const uint64_t rounded =
        std::max<uint64_t>((bytes + kArenaAlign - 1) / kArenaAlign, 1) *
        kArenaAlign;
    void *mem = std::aligned_alloc(kArenaAlign, rounded);
    if (!mem)
      return makeError("cannot allocate ", rounded, " bytes");
    std::memset(mem, 0, rounded);
    out.reset(static_cast<uint8_t *>(mem));
    return Status::ok();
  };
  K3_RETURN_IF_ERROR(
      allocate(plan.arenaBytes, be->arena_).withContext("arena"));
  be->arenaBytes_ = plan.arenaBytes;
  be->states_.resize(plan.states.size());
  for (size_t i = 0; i < plan.states.size(); ++i) {
    K3_RETURN_IF_ERROR(allocate(plan.states[i].bytes, be->states_[i])
                           .withContext("state '" + plan.states[i].name + "'"));
    be->stateBytes_.push_back(plan.states[i].bytes);
  }
  be->weights_.resize(plan.weights.size());
  PlanMemory mem;
  mem.arena = be->arena_.get();
  for (size_t i = 0; i < plan.states.size(); ++i)
    mem.states.push_back(be->states_[i].get());
  mem.stateBytes = be->stateBytes_;
  mem.step = be->step_;
  for (size_t i = 0; i < plan.weights.size(); ++i) {
    ResolvedWeight &w = be->weights_[i];
    K3_RETURN_IF_ERROR(resolveWeight(plan.weights[i], store, w));
    mem.weights.push_back(hostWeight(w));
  }
  be->launches_.resize(plan.launches.size());
  for (size_t i = 0; i < plan.launches.size(); ++i)
    K3_RETURN_IF_ERROR(bindLaunch(plan, i, mem, be->launches_[i]));
  be->logits_ = reinterpret_cast<const float *>(
      be->arena_.get() + plan.buffers[plan.logitsBuffer].offset);
  be->chains_ = planChainsGreedy(plan);
  return be;
}

void CpuBackend::setStep(int64_t token, int64_t pos) {
  step_[kStepToken] = token;
  step_[kStepPos] = pos;
  step_[kStepNonFinite] = 0;
}

Expected<std::vector<GreedyChoice>> CpuBackend::chainGreedy(int64_t more) {
  if (!chains_)
    return makeError("cpu: the plan has no argmax writing the step block; "
                     "recompile it with this k3c");
  if (more < 0 || more > maxSeq_ - step_[kStepPos])
    return makeError("chaining ", more, " steps from position ",
                     step_[kStepPos], " passes max_seq ", maxSeq_);
  std::vector<GreedyChoice> out;
  out.reserve(static_cast<size_t>(more) + 1);
  auto record = [&] {
    out.push_back({step_[kStepToken], step_[kStepNonFinite] != 0});
  };
  record();
  for (int64_t i = 0; i < more; ++i) {
    for (BoundLaunch &l : launches_)
      l.runCpu(); // the token and position come from the step block
    record();
  }
  return out;
}

Status CpuBackend::resetState() {
  for (size_t i = 0; i < states_.size(); ++i)
    std::memset(states_[i].get(), 0, stateBytes_[i]);
  return Status::ok();
}

Status CpuBackend::step(int64_t token, int64_t pos) {
  K3_RETURN_IF_ERROR(checkStepInputs(token, pos, vocab_, maxSeq_));
  setStep(token, pos);
  for (BoundLaunch &l : launches_) {
    l.setInputs(token, pos);
    l.runCpu();
  }
  return Status::ok();
}

Status CpuBackend::runLaunch(size_t index, int64_t token, int64_t pos) {
  if (index >= launches_.size())
    return makeError("launch ", index, " is out of range");
  setStep(token, pos);
  launches_[index].setInputs(token, pos);
  launches_[index].runCpu();
  return Status::ok();
}

Status CpuBackend::readArena(std::vector<uint8_t> &out) {
  out.assign(arena_.get(), arena_.get() + arenaBytes_);
  return Status::ok();
}

Status CpuBackend::readState(size_t state, std::vector<uint8_t> &out) {
  if (state >= states_.size())
    return makeError("state ", state, " is out of range");
  out.assign(states_[state].get(), states_[state].get() + stateBytes_[state]);
  return Status::ok();
}

Status CpuBackend::writeState(size_t state, const std::vector<uint8_t> &bytes) {
  if (state >= states_.size())
    return makeError("state ", state, " is out of range");
  if (bytes.size() != stateBytes_[state])
    return makeError("state ", state, " holds ", stateBytes_[state],
                     " bytes, the snapshot has ", bytes.size());
  std::memcpy(states_[state].get(), bytes.data(), bytes.size());
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Profiling
//===----------------------------------------------------------------------===//

Expected<std::vector<double>> CpuBackend::timeLaunches(int64_t token,
                                                       int64_t pos) {
  K3_RETURN_IF_ERROR(checkStepInputs(token, pos, vocab_, maxSeq_));
  std::vector<double> us(launches_.size());
  setStep(token, pos);
  for (size_t i = 0; i < launches_.size(); ++i) {
    BoundLaunch &l = launches_[i];
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
  for (BoundLaunch &l : launches_) {
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
