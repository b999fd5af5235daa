//===- plan_fuzz.cpp - libFuzzer target: plan reader, validator, binder ---===//
//
// Input: a plan body (JSON) to which a correct header is prepended, so that
// mutations reach the JSON and the validation behind the CRC, the way a plan
// edited by hand and re-checksummed does; an input that starts with
// "K3CPLAN" is taken as a whole plan file (header checks).
//
// An accepted plan is then bound the way both backends bind it
// (PlanBinding.h) against memory made to the plan's own sizes: the arena,
// every state, and every weight at exactly its planned shape (no
// checkpoint). When that memory is small, every launch also runs on the CPU
// kernels at the smallest and the largest step inputs, with ASan watching:
// a plan that validates and binds must never make a kernel read or write
// outside what was bound, divide by zero or loop without end.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/StepInputs.h"
#include "runtime/plan/Plan.h"
#include "runtime/exec/PlanBinding.h"

#include "FuzzUtil.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

/// K3C_FUZZ_VERBOSE=1: print why an input was refused (to reproduce a run).
bool verbose() {
  static const bool v = std::getenv("K3C_FUZZ_VERBOSE") != nullptr;
  return v;
}

/// Plans whose memory exceeds this are bound against addresses that are
/// never dereferenced (the kernels do not run).
constexpr uint64_t kRunLimitBytes = uint64_t(32) << 20;

std::string withHeader(const char *body, size_t size) {
  char h[64];
  std::snprintf(h, sizeof(h), "K3CPLAN 1 %08x %zu\n", k3::crc32(body, size),
                size);
  return h + std::string(body, size);
}

/// Element bytes of a plan weight in its format (mxfp4: per element of the
/// packed + scale pair, rounded up below).
uint64_t weightElems(const k3::PlanWeight &w, size_t from) {
  uint64_t n = 1;
  for (size_t i = from; i < w.shape.size(); ++i)
    n *= static_cast<uint64_t>(w.shape[i]);
  return n;
}

/// Memory for one plan, owned here.
struct FakeMemory {
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<std::vector<k3::WeightRef>> tables;
  k3::PlanMemory mem;
  int64_t step[k3::kStepWords] = {}; ///< the step block (StepInputs.h)
  bool real = false;

  uint8_t *block(uint64_t bytes) {
    if (!real) // never dereferenced: bindLaunch only adds offsets
      return reinterpret_cast<uint8_t *>(uintptr_t(1) << 44);
    blocks.emplace_back(std::max<uint64_t>(bytes, 1), 0);
    return blocks.back().data();
  }
};

/// Bytes FakeMemory would allocate for `plan`.
uint64_t planBytes(const k3::PlanDoc &plan) {
  uint64_t total = plan.arenaBytes;
  for (const k3::PlanState &s : plan.states)
    total += s.bytes;
  for (const k3::PlanWeight &w : plan.weights) {
    const size_t from = w.stacked() ? 1 : 0;
    total += weightElems(w, from) * (w.format == "f32" ? 4 : 2);
  }
  return total;
}

void makeMemory(const k3::PlanDoc &plan, FakeMemory &f) {
  f.real = planBytes(plan) <= kRunLimitBytes;
  f.mem.arena = f.block(plan.arenaBytes);
  f.mem.step = f.step;
  for (const k3::PlanState &s : plan.states) {
    f.mem.states.push_back(f.block(s.bytes));
    f.mem.stateBytes.push_back(s.bytes);
  }
  for (const k3::PlanWeight &w : plan.weights) {
    k3::PlanMemory::Weight m;
    const size_t from = w.stacked() ? 1 : 0;
    const uint64_t elems = weightElems(w, from);
    k3::WeightRef ref;
    if (w.format == "mxfp4") {
      ref.format = k3::kWeightMxfp4;
      ref.packed = f.block(elems / 2);
      ref.scale = f.block(elems / 32 + 1);
    } else {
      const uint64_t bytes = elems * (w.format == "f32" ? 4 : 2);
      m.data = f.block(bytes);
      m.bytes = bytes;
      ref.format = k3::kWeightBf16;
      ref.bf16 = reinterpret_cast<const uint16_t *>(m.data);
    }
    m.ref = ref;
    if (w.stacked()) {
      // Every expert shares one matrix: the shape is what is checked.
      f.tables.emplace_back(static_cast<size_t>(w.shape[0]), ref);
      m.table = f.tables.back().data();
    }
    f.mem.weights.push_back(m);
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // One thread: the kernels' thread pool would only slow the fuzzer down.
  ::setenv("K3C_CPU_THREADS", "1", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = reinterpret_cast<const char *>(data);
  const bool raw = size >= 7 && std::memcmp(text, "K3CPLAN", 7) == 0;
  const std::string bytes = raw ? std::string(text, size)
                                : withHeader(text, size);
  k3::Expected<k3::PlanDoc> parsed = k3::parsePlan(bytes, "fuzz.plan");
  if (!parsed) {
    K3_FUZZ_CHECK(!parsed.message().empty(), "an error without a message");
    if (verbose())
      std::fprintf(stderr, "refused: %s\n", parsed.message().c_str());
    return 0;
  }
  const k3::PlanDoc &plan = *parsed;
  K3_FUZZ_CHECK(k3::validatePlan(plan).isOk(), "parsePlan skipped a check");
  // What the reader accepts, the writer writes back identically.
  k3::Expected<k3::PlanDoc> again =
      k3::parsePlan(k3::serializePlan(plan), "again");
  K3_FUZZ_CHECK(again.hasValue() && *again == plan,
                "the plan changed in the round trip");

  FakeMemory fake;
  makeMemory(plan, fake);
  std::vector<k3::BoundLaunch> launches(plan.launches.size());
  for (size_t i = 0; i < plan.launches.size(); ++i)
    if (k3::Status s = k3::bindLaunch(plan, i, fake.mem, launches[i]); !s) {
      if (verbose())
        std::fprintf(stderr, "refused at bind: %s\n", s.message().c_str());
      return 0; // refused: the error is the answer
    }
  if (verbose())
    std::fprintf(stderr, "bound%s\n", fake.real ? "; running" : "");
  if (!fake.real)
    return 0;
  const int64_t vocab = plan.config.vocabSize, maxSeq = plan.maxSeq;
  for (auto [token, pos] : {std::pair<int64_t, int64_t>{0, 0},
                            {vocab - 1, maxSeq - 1}}) {
    K3_FUZZ_CHECK(k3::checkStepInputs(token, pos, vocab, maxSeq).isOk(),
                  "the extreme step inputs are refused");
    fake.step[k3::kStepToken] = token;
    fake.step[k3::kStepPos] = pos;
    for (k3::BoundLaunch &l : launches) {
      l.setInputs(token, pos);
      l.runCpu();
    }
  }
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size,
                                          size_t maxSize, unsigned seed) {
  // Whole files (header checks) get byte mutations only; bodies also get
  // structural ones.
  if (size >= 7 && std::memcmp(data, "K3CPLAN", 7) == 0)
    return LLVMFuzzerMutate(data, size, maxSize);
  return k3::fuzz::mutateJson(data, size, maxSize, seed, "launches");
}
