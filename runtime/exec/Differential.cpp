//===- Differential.cpp - A backend checked launch by launch --------------===//
//
// The reference side is a host copy of the plan's memory bound with the same
// binder as CpuBackend (PlanBinding.h): before launch i it holds exactly the
// candidate's arena and states, the CPU entry point of launch i runs on it,
// and then the candidate's memory after launch i is read back and becomes the
// reference's memory for launch i + 1. Which elements a launch writes comes
// from its kernel's own extent check (PlanKernels.h) evaluated with the
// step's inputs, so arena bytes shared by buffers whose lifetimes do not
// overlap are never compared under the wrong buffer's element type.
//
//===----------------------------------------------------------------------===//
#include "kernels/common/StepInputs.h"
#include "runtime/exec/Differential.h"

#include "kernels/common/BF16.h"
#include "kernels/head/HeadCpu.h"
#include "runtime/exec/CpuBackend.h"
#include "runtime/exec/PlanBinding.h"
#include "runtime/exec/Session.h"
#include "runtime/exec/cuda/CudaBackend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>

namespace k3 {

//===----------------------------------------------------------------------===//
// The tolerance table
//===----------------------------------------------------------------------===//
//
// Every bound is for one launch on identical inputs (the run feeds the CPU
// the candidate's own inputs), so it is the kernel's own error only: how the
// CUDA implementation's arithmetic may differ from the CPU one's. Relative
// bounds are of max|CPU value| over the elements the launch writes, the same
// measure the kernel tests under test/unit/cuda assert at K3's sizes.

namespace {

/// A bf16 output: the CUDA kernel sums (or applies expf, rsqrtf) in another
/// order or with FMA, so its fp32 result differs from the CPU's in the last
/// bits and, after the one bf16 rounding, is the CPU's value or its bf16
/// neighbour. One ulp of the largest element is at most 2^-7 = 7.8e-3 of
/// max|ref|, so 1e-2 admits one ulp anywhere (a second ulp only below the
/// largest magnitudes); every bf16 kernel test asserts this 1e-2.
constexpr double kBf16 = 1e-2;
/// An fp32 result of a sum (a projection, a norm, the KDA state update):
/// summation order and FMA only. The kernel tests measure <= 1e-5 of
/// max|ref| at K3's sizes, 1e-4 where a folded norm moves an input of the
/// sum by one bf16 ulp; 1e-4 keeps that margin.
constexpr double kF32Sum = 1e-4;
/// An fp32 elementwise function (sigmoid, the decay gate's softplus or
/// sigmoid: expf / log1pf ulps, no sums). The kernel tests assert 1e-6.
constexpr double kF32Elementwise = 1e-5;

struct ToleranceRow {
  const char *kernel;
  const char *field; ///< "" = every output field of the kernel
  bool exact;
  double rel;
  const char *reason;
};

const ToleranceRow kTable[] = {
    {"embed", "out", true, 0, "a copy of one table row, no arithmetic"},
    {"rms_norm", "out", false, kBf16,
     "bf16 of an fp32 norm (sum of squares in another order)"},
    {"linear", "out", false, kBf16,
     "bf16 of an fp32 dot product (another order, FMA; folded norm and "
     "residual included)"},
    {"linear", "outF32", false, kF32Sum,
     "fp32 dot product in another order (the logits); 1e-4 covers a folded "
     "norm moving an input by one bf16 ulp"},
    {"linear_multi", "", false, kBf16, "bf16 of fp32 dot products, as linear"},
    {"add", "out", false, kBf16, "bf16 of one fp32 add"},
    {"mul_sigmoid", "out", false, kBf16,
     "bf16 of x * sigmoid(gate) (expf ulps)"},
    {"gated_act", "out", false, kBf16,
     "bf16 of the gated activation (expf / tanhf ulps)"},
    {"kda_conv", "state", true, 0,
     "the conv state shifts and stores the bf16-valued inputs: copies"},
    {"kda_conv", "out", false, kBf16, "bf16 of silu(conv) (a W-term sum)"},
    {"kda_l2norm", "out", false, kF32Sum,
     "fp32 l2 norm (sum of squares in another order)"},
    {"kda_gate", "out", false, kF32Elementwise,
     "fp32 decay gate, elementwise (expf / log1pf ulps)"},
    {"sigmoid", "out", false, kF32Elementwise, "fp32 sigmoid (expf ulps)"},
    {"kda_step", "state", false, kF32Sum,
     "fp32 delta-rule state update (d-term sums in another order)"},
    {"kda_step", "out", false, kBf16, "bf16 of the readout q . S"},
    {"kda_gated_norm", "out", false, kBf16, "bf16 of the gated per-head norm"},
    {"kda_decode", "convStateQ", true, 0,
     "the conv state stores the bf16-valued inputs: copies"},
    {"kda_decode", "convStateK", true, 0,
     "the conv state stores the bf16-valued inputs: copies"},
    {"kda_decode", "convStateV", true, 0,
     "the conv state stores the bf16-valued inputs: copies"},
    {"kda_decode", "state", false, kF32Sum,
     "fp32 delta-rule state update (d-term sums in another order)"},
    {"kda_decode", "out", false, kBf16, "bf16 of the gated, normed readout"},
    {"kda_decode", "gateOut", true, 0,
     "the folded g_b rows, summed in linearCpu's order (bf16 products are "
     "exact in fp32)"},
    {"mla_cache_append", "cache", false, kBf16,
     "bf16 of the normed latent row (earlier rows are the candidate's own)"},
    {"mla_attend", "out", false, kBf16,
     "bf16 of the attention output (softmax and sums in another order)"},
    {"mla_attend_clustered", "out", false, kBf16,
     "bf16 of the attention output (softmax and sums in another order)"},
    {"router", "outIds", true, 0,
     "the top-k expert ids: the same experts unless two scores tie within "
     "fp32 rounding, and a different expert changes the layer's output"},
    {"router", "outWeights", false, kF32Sum,
     "fp32 sigmoid scores renormalised over the top k (a k-term sum)"},
    {"gated_mlp", "out", false, kBf16,
     "bf16 of the MLP output (its bf16 rounding points may flip an ulp)"},
    {"moe_experts", "out", false, kBf16,
     "bf16 of the weighted expert sum (its bf16 rounding points may flip "
     "an ulp)"},
    {"moe_experts_mxfp4", "out", false, kBf16,
     "bf16 of the weighted expert sum, as moe_experts' (the experts' rows "
     "on the tensor cores, their sums in another order)"},
    {"moe_ffn", "router.outIds", true, 0, "the top-k expert ids (as router's)"},
    {"moe_ffn", "router.outWeights", false, kF32Sum,
     "fp32 renormalised top-k scores (as router's)"},
    {"moe_ffn", "experts.out", false, kBf16,
     "bf16 of the FFN output (as moe_experts')"},
    {"attn_res", "out", false, kBf16,
     "bf16 of the softmax mix of the blocks (and the folded norm)"},
    {"attn_res_clustered", "out", false, kBf16,
     "bf16 of the softmax mix of the blocks (and the folded norm), as "
     "attn_res'"},
    {"attn_res_commit", "blocks", true, 0,
     "a copy of the source row into the block slot"},
    {"argmax", "outId", true, 0, "the chosen token id"},
    {"argmax", "step", true, 0,
     "the next step's inputs (not compared: the "
     "step block is neither arena nor state)"},
};

} // namespace

Tolerance kernelTolerance(const std::string &kernel, const std::string &field,
                          ElemType elem) {
  for (const ToleranceRow &r : kTable)
    if (kernel == r.kernel && (!*r.field || field == r.field))
      return Tolerance{r.exact, r.rel, r.reason};
  switch (elem) {
  case ElemType::BF16:
    return Tolerance{false, kBf16, "a bf16 output (default for bf16)"};
  case ElemType::F32:
    return Tolerance{false, kF32Sum, "an fp32 output (default for fp32)"};
  default:
    return Tolerance{true, 0, "an integer output (default: exact)"};
  }
}

//===----------------------------------------------------------------------===//
// Comparing one output range
//===----------------------------------------------------------------------===//

namespace {

double valueAt(const uint8_t *p, int64_t i, ElemType elem) {
  switch (elem) {
  case ElemType::BF16: {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    return bf16ToFloat(v);
  }
  case ElemType::F32: {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
  case ElemType::I32: {
    int32_t v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
  case ElemType::I64: {
    int64_t v;
    std::memcpy(&v, p + 8 * i, 8);
    return static_cast<double>(v);
  }
  case ElemType::U8:
    return p[i];
  case ElemType::None:
    break;
  }
  return 0.0;
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

} // namespace

OutputDiff compareOutput(const uint8_t *want, const uint8_t *got, int64_t elems,
                         ElemType elem, const Tolerance &tol) {
  OutputDiff d;
  d.elems = elems;
  const size_t es = std::max<size_t>(elemTypeSize(elem), 1);
  for (int64_t i = 0; i < elems; ++i) {
    const bool same = std::memcmp(want + i * es, got + i * es, es) == 0;
    d.differing += !same;
    const double w = valueAt(want, i, elem), g = valueAt(got, i, elem);
    if (std::isfinite(w))
      d.maxRef = std::max(d.maxRef, std::fabs(w));
    double e = 0.0;
    if (same || (std::isnan(w) && std::isnan(g)) ||
        (std::isinf(w) && std::isinf(g) && (w > 0) == (g > 0)))
      e = 0.0;
    else if (!std::isfinite(w) || !std::isfinite(g))
      e = std::numeric_limits<double>::infinity();
    else
      e = std::fabs(g - w);
    if (e > d.maxAbs || (d.worst < 0 && !same)) {
      d.maxAbs = std::max(d.maxAbs, e);
      d.worst = i;
      d.want = w;
      d.got = g;
    }
  }
  d.rel = d.maxRef > 0 ? d.maxAbs / d.maxRef : d.maxAbs;
  if (tol.exact) {
    d.ok = d.differing == 0;
    d.ratio = d.ok ? 0.0 : std::numeric_limits<double>::infinity();
  } else {
    d.ok = d.maxAbs <= tol.rel * d.maxRef;
    d.ratio = tol.rel > 0    ? d.rel / tol.rel
              : d.maxAbs > 0 ? std::numeric_limits<double>::infinity()
                             : 0.0;
  }
  return d;
}

//===----------------------------------------------------------------------===//
// Reports
//===----------------------------------------------------------------------===//

namespace {

/// "cuda (NVIDIA H200 (sm_90))" -> "cuda".
std::string shortName(const std::string &backend) {
  return backend.substr(0, backend.find(' '));
}

} // namespace

std::string LaunchMismatch::describe(const std::string &candidate) const {
  // The candidate's values by its backend's name ("candidate" when that is
  // the CPU as well).
  std::string c = shortName(candidate);
  if (c == "cpu")
    c = "candidate";
  std::ostringstream os;
  os << "launch " << launch << " (" << kernel;
  if (!op.empty())
    os << ", op " << op;
  os << ") at step " << step << " (position " << pos << ", token " << token
     << "): ";
  if (field == "(outside its outputs)") {
    os << "changed " << diff.differing << " arena byte(s) outside the "
       << "outputs its kernel declares, the first at byte " << offset << " (in "
       << target << "; cpu " << static_cast<int>(diff.want) << ", " << c << " "
       << static_cast<int>(diff.got) << ")";
    return os.str();
  }
  os << "field '" << field << "' -> " << target << " (" << diff.elems << " "
     << elemTypeName(elem) << " from byte " << offset << ") differs from the "
     << "cpu's: max abs error " << sci(diff.maxAbs);
  if (diff.worst >= 0)
    os << " at element " << diff.worst << " (cpu " << sci(diff.want) << ", "
       << c << " " << sci(diff.got) << ")";
  os << ", rel " << sci(diff.rel) << " of max|cpu| " << sci(diff.maxRef) << ", "
     << diff.differing << " of " << diff.elems
     << " elements differ; tolerance ";
  if (tolerance.exact)
    os << "exact";
  else
    os << "rel " << sci(tolerance.rel);
  os << " (" << tolerance.reason << ")";
  return os.str();
}

std::string DifferentialReport::summary(const std::string &candidate) const {
  if (mismatch)
    return "check against cpu FAILED: " + mismatch->describe(candidate);
  std::ostringstream os;
  os << "check against cpu OK: " << steps << " steps x " << launchesPerStep
     << " launches on " << shortName(candidate) << ", " << outputsCompared
     << " outputs ";
  if (bitIdentical)
    os << "bit-identical";
  else
    os << "within their kernels' tolerances (closest: " << sci(worstRatio)
       << " of its tolerance, " << worstWhere << ")";
  return os.str();
}

//===----------------------------------------------------------------------===//
// The reference: the CPU kernels over a host copy of the candidate's memory
//===----------------------------------------------------------------------===//

namespace {

constexpr size_t kAlign = 64;

struct FreeBlock {
  void operator()(uint8_t *p) const { std::free(p); }
};
using Block = std::unique_ptr<uint8_t, FreeBlock>;

Status allocate(uint64_t bytes, Block &out) {
  const uint64_t rounded =
      std::max<uint64_t>((bytes + kAlign - 1) / kAlign, 1) * kAlign;
  void *mem = std::aligned_alloc(kAlign, rounded);
  if (!mem)
    return makeError("cannot allocate ", rounded, " bytes");
  std::memset(mem, 0, rounded);
  out.reset(static_cast<uint8_t *>(mem));
  return Status::ok();
}

/// The plan bound to host memory as CpuBackend binds it.
struct Reference {
  Block arena;
  int64_t step[kStepWords] = {}; ///< the step block (StepInputs.h)
  std::vector<Block> states;
  std::vector<ResolvedWeight> weights;
  std::vector<BoundLaunch> launches;

  Status bind(const PlanDoc &plan, const TensorStore &store) {
    K3_RETURN_IF_ERROR(validatePlan(plan));
    K3_RETURN_IF_ERROR(allocate(plan.arenaBytes, arena).withContext("arena"));
    PlanMemory mem;
    mem.arena = arena.get();
    mem.step = step;
    states.resize(plan.states.size());
    for (size_t i = 0; i < plan.states.size(); ++i) {
      K3_RETURN_IF_ERROR(allocate(plan.states[i].bytes, states[i]));
      mem.states.push_back(states[i].get());
      mem.stateBytes.push_back(plan.states[i].bytes);
    }
    weights.resize(plan.weights.size());
    for (size_t i = 0; i < plan.weights.size(); ++i) {
      K3_RETURN_IF_ERROR(resolveWeight(plan.weights[i], store, weights[i]));
      const ResolvedWeight &w = weights[i];
      mem.weights.push_back(hostWeight(w));
    }
    launches.resize(plan.launches.size());
    for (size_t i = 0; i < plan.launches.size(); ++i)
      K3_RETURN_IF_ERROR(bindLaunch(plan, i, mem, launches[i]));
    return Status::ok();
  }
};

/// Records the element count each pointer field's check asks for.
class ExtentRecorder final : public ExtentChecker {
public:
  std::map<std::string, int64_t> elems;
  Status need(const char *field, int64_t n) override {
    elems[field] = n;
    return Status::ok();
  }
  Status optional(const char *field, int64_t n) override {
    return need(field, n);
  }
  Status needMatrix(const char *, int64_t, int64_t) override {
    return Status::ok();
  }
  Status needTable(const char *, int64_t, int64_t, int64_t) override {
    return Status::ok();
  }
};

/// One output range of a launch.
struct Output {
  std::string field;
  bool isState = false;
  size_t index = 0;       ///< the state (isState)
  uint64_t begin = 0;     ///< byte offset in the arena, or in the state
  uint64_t argOffset = 0; ///< the arg's own offset (for reports)
  int64_t elems = 0;
  ElemType elem = ElemType::None;
  std::string target;
};

/// The outputs launch `index` writes with the inputs already set in `bound`:
/// each PtrOut field's extent from the kernel's check (the rest of its
/// buffer or state where the check names none).
std::vector<Output> outputsOf(const PlanDoc &plan, size_t index,
                              const BoundLaunch &bound) {
  const PlanLaunch &l = plan.launches[index];
  ExtentRecorder rec;
  if (bound.kernel->check)
    (void)bound.kernel->check(bound.params->data(), rec);
  std::vector<Output> outs;
  for (const auto &[name, arg] : l.args) {
    const KernelField *f = bound.kernel->field(name);
    if (!f || f->kind != FieldKind::PtrOut)
      continue;
    Output o;
    o.field = name;
    o.elem = f->elem;
    o.argOffset = arg.offset;
    uint64_t avail = 0;
    if (arg.kind == PlanArg::Kind::Buffer) {
      const PlanBuffer &b = plan.buffers[arg.index];
      o.begin = b.offset + arg.offset;
      avail = b.bytes - arg.offset;
      o.target = "buffer '" + b.name + "'";
    } else if (arg.kind == PlanArg::Kind::State) {
      o.isState = true;
      o.index = static_cast<size_t>(arg.index);
      o.begin = arg.offset;
      avail = plan.states[arg.index].bytes - arg.offset;
      o.target = "state '" + plan.states[arg.index].name + "'";
    } else {
      continue;
    }
    const uint64_t es = std::max<size_t>(elemTypeSize(f->elem), 1);
    auto it = rec.elems.find(name);
    const uint64_t most = avail / es;
    o.elems = static_cast<int64_t>(
        it == rec.elems.end()
            ? most
            : std::min<uint64_t>(std::max<int64_t>(it->second, 0), most));
    outs.push_back(std::move(o));
  }
  return outs;
}

/// The plan buffer that holds arena byte `at` ("the arena" if none).
std::string bufferAt(const PlanDoc &plan, uint64_t at) {
  for (const PlanBuffer &b : plan.buffers)
    if (at >= b.offset && at < b.offset + b.bytes)
      return "buffer '" + b.name + "'";
  return "the arena (no buffer)";
}

} // namespace

//===----------------------------------------------------------------------===//
// The run
//===----------------------------------------------------------------------===//

Expected<DifferentialReport>
runDifferential(const PlanDoc &plan, const TensorStore &store,
                Backend &candidate, const std::vector<int64_t> &prompt,
                int64_t maxNew, const DifferentialOptions &options) {
  const int64_t vocab = plan.config.vocabSize;
  if (candidate.vocab() != vocab || candidate.maxSeq() != plan.maxSeq)
    return makeError("the ", candidate.name(),
                     " backend is not bound to this plan (vocab ",
                     candidate.vocab(), ", max_seq ", candidate.maxSeq(),
                     "; the plan has ", vocab, ", ", plan.maxSeq, ")");
  if (plan.ranks > 1)
    return makeError("the plan is rank ", plan.rank, " of ", plan.ranks,
                     " of a tensor-parallel plan: the differential check "
                     "runs plans of one rank");
  if (prompt.empty())
    return makeError("the prompt is empty; it needs at least one token");
  if (maxNew < 1)
    return makeError("max_new must be at least 1, got ", maxNew);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      return makeError("prompt token ", i, " has id ", prompt[i],
                       ", outside the vocabulary [0, ", vocab, ")");
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n > plan.maxSeq - maxNew)
    return makeError("the prompt (", n, " tokens) + max_new (", maxNew,
                     ") = ", n + maxNew,
                     " tokens exceeds the plan's max_seq of ", plan.maxSeq);
  if (plan.logitsBuffer < 0 ||
      static_cast<size_t>(plan.logitsBuffer) >= plan.buffers.size())
    return makeError("the plan has no logits buffer");

  Reference ref;
  K3_RETURN_IF_ERROR(
      ref.bind(plan, store).withContext("binding the CPU reference"));

  // Start from the candidate's own memory: its states after the reset and
  // whatever its arena holds (the CUDA arena is not zeroed).
  K3_RETURN_IF_ERROR(candidate.resetState());
  std::vector<uint8_t> arena;
  std::vector<std::vector<uint8_t>> states(plan.states.size());
  auto readArena = [&]() -> Status {
    K3_RETURN_IF_ERROR(candidate.readArena(arena));
    if (arena.size() != plan.arenaBytes)
      return makeError("the ", candidate.name(), " backend's arena has ",
                       arena.size(), " bytes, the plan's ", plan.arenaBytes);
    return Status::ok();
  };
  auto readState = [&](size_t s) -> Status {
    K3_RETURN_IF_ERROR(candidate.readState(s, states[s]));
    if (states[s].size() != plan.states[s].bytes)
      return makeError("the ", candidate.name(), " backend's state '",
                       plan.states[s].name, "' has ", states[s].size(),
                       " bytes, the plan's ", plan.states[s].bytes);
    return Status::ok();
  };
  K3_RETURN_IF_ERROR(readArena());
  std::memcpy(ref.arena.get(), arena.data(), arena.size());
  for (size_t s = 0; s < plan.states.size(); ++s) {
    K3_RETURN_IF_ERROR(readState(s));
    std::memcpy(ref.states[s].get(), states[s].data(), states[s].size());
  }

  DifferentialReport report;
  report.launchesPerStep = plan.launches.size();
  const int64_t steps = n + maxNew - 1;
  const uint64_t logitsAt = plan.buffers[plan.logitsBuffer].offset;
  std::vector<char> stateRead(plan.states.size());
  std::vector<std::pair<uint64_t, uint64_t>> written; // arena [begin, end)

  for (int64_t step = 0; step < steps; ++step) {
    const int64_t pos = step;
    const int64_t token = step < n ? prompt[step] : report.tokens[step - n];
    for (size_t i = 0; i < plan.launches.size(); ++i) {
      const PlanLaunch &l = plan.launches[i];
      BoundLaunch &bound = ref.launches[i];
      bound.setInputs(token, pos);
      if (i == 0) { // a host-driven step's inputs (as CpuBackend::step)
        ref.step[kStepToken] = token;
        ref.step[kStepPos] = pos;
        ref.step[kStepNonFinite] = 0;
      }
      const std::vector<Output> outs = outputsOf(plan, i, bound);
      bound.runCpu();
      K3_RETURN_IF_ERROR(candidate.runLaunch(i, token, pos)
                             .withContext("step " + std::to_string(step) +
                                          ", launch " + std::to_string(i) +
                                          " (" + l.kernel + ")"));
      K3_RETURN_IF_ERROR(readArena());
      std::fill(stateRead.begin(), stateRead.end(), 0);
      written.clear();

      auto fail = [&](LaunchMismatch m) {
        m.step = step;
        m.pos = pos;
        m.token = token;
        m.launch = i;
        m.kernel = l.kernel;
        m.op = l.op;
        report.mismatch = std::move(m);
        report.steps = step + 1;
      };
      for (const Output &o : outs) {
        const uint8_t *want, *got;
        if (o.isState) {
          if (!stateRead[o.index]) {
            K3_RETURN_IF_ERROR(readState(o.index));
            stateRead[o.index] = 1;
          }
          want = ref.states[o.index].get() + o.begin;
          got = states[o.index].data() + o.begin;
        } else {
          want = ref.arena.get() + o.begin;
          got = arena.data() + o.begin;
          written.emplace_back(o.begin,
                               o.begin + o.elems * elemTypeSize(o.elem));
        }
        const Tolerance tol =
            options.exact
                ? Tolerance{true, 0,
                            "bit-identical: the candidate runs the CPU "
                            "kernels too"}
                : kernelTolerance(l.kernel, o.field, o.elem);
        const OutputDiff d = compareOutput(want, got, o.elems, o.elem, tol);
        ++report.outputsCompared;
        report.bitIdentical &= d.differing == 0;
        const std::string key = l.kernel + "." + o.field;
        double &byField = report.worstByField[key];
        byField = std::max(byField, d.ratio);
        if (d.ratio > report.worstRatio || report.worstWhere.empty()) {
          report.worstRatio = std::max(report.worstRatio, d.ratio);
          report.worstWhere = "launch " + std::to_string(i) + " (" + l.kernel +
                              " '" + o.field + "', step " +
                              std::to_string(step) + ")";
        }
        if (!d.ok) {
          LaunchMismatch m;
          m.field = o.field;
          m.target = o.target;
          m.offset = o.argOffset;
          m.elem = o.elem;
          m.diff = d;
          m.tolerance = tol;
          fail(std::move(m));
          return report;
        }
      }

      // Arena bytes outside the declared outputs must not have changed (the
      // CPU kernel left them as they were before the launch).
      std::sort(written.begin(), written.end());
      uint64_t at = 0, changed = 0, first = 0;
      auto scan = [&](uint64_t from, uint64_t to) {
        if (from >= to || std::memcmp(ref.arena.get() + from,
                                      arena.data() + from, to - from) == 0)
          return;
        for (uint64_t b = from; b < to; ++b)
          if (ref.arena.get()[b] != arena[b] && changed++ == 0)
            first = b;
      };
      for (const auto &[b, e] : written) {
        scan(at, b);
        at = std::max(at, e);
      }
      scan(at, plan.arenaBytes);
      if (changed) {
        LaunchMismatch m;
        m.field = "(outside its outputs)";
        m.target = bufferAt(plan, first);
        m.offset = first;
        m.elem = ElemType::U8;
        m.diff.ok = false;
        m.diff.elems = static_cast<int64_t>(plan.arenaBytes);
        m.diff.differing = static_cast<int64_t>(changed);
        m.diff.worst = static_cast<int64_t>(first);
        m.diff.want = ref.arena.get()[first];
        m.diff.got = arena[first];
        m.diff.ratio = std::numeric_limits<double>::infinity();
        m.tolerance = Tolerance{true, 0, "bytes a launch does not write"};
        report.bitIdentical = false;
        fail(std::move(m));
        return report;
      }

      // The candidate's memory after this launch is the reference's input
      // to the next.
      std::memcpy(ref.arena.get(), arena.data(), arena.size());
      for (size_t s = 0; s < stateRead.size(); ++s)
        if (stateRead[s])
          std::memcpy(ref.states[s].get(), states[s].data(), states[s].size());
    }
    report.steps = step + 1;

    if (step >= n - 1) {
      std::vector<float> logits(static_cast<size_t>(vocab));
      std::memcpy(logits.data(), arena.data() + logitsAt,
                  logits.size() * sizeof(float));
      int64_t id = 0;
      ArgmaxParams p;
      p.logits = logits.data();
      p.n = vocab;
      p.outId = &id;
      argmaxCpu(p);
      if (options.keepLogits)
        report.logits.insert(report.logits.end(), logits.begin(), logits.end());
      if (options.onToken)
        options.onToken(static_cast<int64_t>(report.tokens.size()), id);
      report.tokens.push_back(id);
    }
  }
  return report;
}

Expected<DifferentialReport>
checkAgainstCpu(const PlanDoc &plan, const std::string &weightsDir,
                BackendKind kind, const std::vector<int64_t> &prompt,
                int64_t maxNew, DifferentialOptions options,
                std::string *candidateName) {
  Expected<TensorStore> store = openWeightsFor(plan, weightsDir);
  if (!store)
    return store.status();
  Expected<std::unique_ptr<Backend>> bound =
      bindBackend(plan, *store, kind, /*cudaGraph=*/false, weightsDir);
  if (!bound)
    return bound.status();
  std::unique_ptr<Backend> backend = bound.take();
  if (kind == BackendKind::Cpu)
    options.exact = true; // the same kernels: bit for bit
  if (candidateName)
    *candidateName = backend->name();
  return runDifferential(plan, *store, *backend, prompt, maxNew, options);
}

} // namespace k3
