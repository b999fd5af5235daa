//===- Plan.cpp - The k3c plan: document, reader, writer ------------------===//
//
// Reading goes header -> length -> CRC -> JSON -> structure -> semantics, each
// stage trusting only what the previous one proved, so a truncated or
// corrupted file is reported as such rather than as a confusing JSON error.
// nlohmann::json reports problems by throwing; every call into it sits inside
// a try block and becomes a Status here.
//
//===----------------------------------------------------------------------===//
#include "runtime/plan/Plan.h"

#include "kernels/collective/CollectiveParams.h"
#include "runtime/io/AtomicFile.h"
#include "runtime/io/JsonCheck.h"
#include "runtime/plan/PlanKernels.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

namespace k3 {

using ojson = nlohmann::ordered_json;

namespace {

/// No single buffer, state or arena may exceed this: larger is certainly a
/// corrupted plan, and refusing it keeps allocation sizes far from overflow.
constexpr uint64_t kMaxPlanBytes = uint64_t(1) << 40;
constexpr int64_t kMaxPlanSeq = int64_t(1) << 24;
/// The arena and the states together: what a backend allocates at bind,
/// bounded by what a GPU could hold (an H200 has 141 GB).
constexpr uint64_t kMaxResidentBytes = uint64_t(1) << 38;
/// Experts of one stacked ({e}) weight: the config's bound on num_experts.
constexpr int64_t kMaxPlanExperts = 65536;
/// CUDA's launch limits (any device): grid, threads per block, and the
/// largest dynamic shared memory a block may opt into (sm_90: 227 KiB).
constexpr int64_t kMaxGridX = (int64_t(1) << 31) - 1;
constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kMaxBlockThreads = 1024;
constexpr int64_t kMaxBlockZ = 64;
constexpr int64_t kMaxSmem = 227 * 1024;
/// Blocks of a thread-block cluster that every Hopper part runs (the
/// portable cluster size).
constexpr int64_t kMaxClusterBlocks = 8;
const char kMagic[] = "K3CPLAN ";

} // namespace

//===----------------------------------------------------------------------===//
// Small pieces
//===----------------------------------------------------------------------===//

const char *planInputName(PlanInput input) {
  switch (input) {
  case PlanInput::Token:
    return "token";
  case PlanInput::Pos:
    return "pos";
  case PlanInput::Length:
    return "length";
  case PlanInput::Step:
    return "step";
  }
  return "?";
}

PlanArg PlanArg::integer(int64_t v) {
  PlanArg a;
  a.kind = Kind::Int;
  a.intValue = v;
  return a;
}
PlanArg PlanArg::number(double v) {
  PlanArg a;
  a.kind = Kind::Float;
  a.floatValue = v;
  return a;
}
PlanArg PlanArg::buffer(int64_t index, uint64_t offset) {
  PlanArg a;
  a.kind = Kind::Buffer;
  a.index = index;
  a.offset = offset;
  return a;
}
PlanArg PlanArg::state(int64_t index, uint64_t offset) {
  PlanArg a = buffer(index, offset);
  a.kind = Kind::State;
  return a;
}
PlanArg PlanArg::weight(int64_t index, uint64_t offset) {
  PlanArg a = buffer(index, offset);
  a.kind = Kind::Weight;
  return a;
}
PlanArg PlanArg::fromInput(PlanInput in) {
  PlanArg a;
  a.kind = Kind::Input;
  a.input = in;
  return a;
}

bool operator==(const PlanArg &a, const PlanArg &b) {
  if (a.kind != b.kind)
    return false;
  switch (a.kind) {
  case PlanArg::Kind::Int:
    return a.intValue == b.intValue;
  case PlanArg::Kind::Float:
    return a.floatValue == b.floatValue;
  case PlanArg::Kind::Buffer:
  case PlanArg::Kind::State:
  case PlanArg::Kind::Weight:
    return a.index == b.index && a.offset == b.offset;
  case PlanArg::Kind::Input:
    return a.input == b.input;
  }
  return false;
}

PlanLaunch &PlanLaunch::arg(const std::string &name, const PlanArg &value) {
  for (auto &[n, v] : args)
    if (n == name) {
      v = value;
      return *this;
    }
  args.emplace_back(name, value);
  return *this;
}

const PlanArg *PlanLaunch::find(const std::string &name) const {
  for (const auto &[n, v] : args)
    if (n == name)
      return &v;
  return nullptr;
}

const char *stateKindName(StateKind kind) {
  switch (kind) {
  case StateKind::KdaState:
    return "kda_state";
  case StateKind::ConvState:
    return "conv_state";
  case StateKind::MlaCache:
    return "mla_cache";
  case StateKind::AttnResBlocks:
    return "attn_res_blocks";
  }
  return "?";
}

bool parseStateKind(const std::string &name, StateKind &out) {
  for (StateKind k : kStateKinds)
    if (name == stateKindName(k)) {
      out = k;
      return true;
    }
  return false;
}

bool stateKindIsStepLocal(StateKind kind) {
  return kind == StateKind::AttnResBlocks;
}

ElemType stateKindElem(StateKind kind) {
  return kind == StateKind::KdaState || kind == StateKind::ConvState
             ? ElemType::F32
             : ElemType::BF16;
}

ElemType planDTypeElem(const std::string &dtype) {
  for (ElemType t : {ElemType::BF16, ElemType::F32, ElemType::I32,
                     ElemType::I64, ElemType::U8})
    if (dtype == elemTypeName(t))
      return t;
  return ElemType::None;
}

uint64_t planWeightBytes(const PlanWeight &w) {
  uint64_t n = 1;
  for (int64_t d : w.shape)
    n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  if (w.format == "mxfp4")
    return n / 2 + n / 32;
  return n * (w.format == "f32" ? 4 : 2);
}

uint64_t planWeightsBytes(const PlanDoc &plan) {
  uint64_t total = 0;
  for (const PlanWeight &w : plan.weights)
    total += planWeightBytes(w);
  return total;
}

size_t planDTypeSize(const std::string &dtype) {
  return elemTypeSize(planDTypeElem(dtype));
}

size_t planStateElemSize(const std::string &kind) {
  StateKind k;
  return parseStateKind(kind, k) ? elemTypeSize(stateKindElem(k)) : 0;
}

int64_t PlanDoc::addBuffer(const std::string &name, const std::string &dtype,
                           int64_t elems) {
  PlanBuffer b;
  b.name = name;
  b.dtype = dtype;
  b.elems = elems;
  b.bytes = static_cast<uint64_t>(elems) * planDTypeSize(dtype);
  b.offset =
      (arenaBytes + kPlanBufferAlign - 1) / kPlanBufferAlign * kPlanBufferAlign;
  arenaBytes = b.offset + b.bytes;
  buffers.push_back(std::move(b));
  return static_cast<int64_t>(buffers.size()) - 1;
}

int64_t PlanDoc::addState(const std::string &name, const std::string &kind,
                          const std::vector<int64_t> &shape) {
  PlanState s;
  s.name = name;
  s.kind = kind;
  s.shape = shape;
  uint64_t n = planStateElemSize(kind);
  for (int64_t d : shape)
    n *= static_cast<uint64_t>(d);
  s.bytes = n;
  states.push_back(std::move(s));
  return static_cast<int64_t>(states.size()) - 1;
}

namespace {
bool sameSplit(const TensorSplit &a, const TensorSplit &b) {
  return a.ranks == b.ranks &&
         (a.ranks == 1 || (a.axis == b.axis && a.rank == b.rank));
}
} // namespace

std::vector<int64_t> PlanWeight::fullShape() const {
  std::vector<int64_t> s = shape;
  if (isSplit() && split.axis >= 0 &&
      split.axis < static_cast<int64_t>(s.size()))
    s[split.axis] *= split.ranks;
  return s;
}

int64_t PlanDoc::addWeight(const std::string &name, const std::string &format,
                           const std::vector<int64_t> &shape,
                           const TensorSplit &split) {
  for (size_t i = 0; i < weights.size(); ++i)
    if (weights[i].name == name && weights[i].format == format &&
        weights[i].shape == shape && sameSplit(weights[i].split, split))
      return static_cast<int64_t>(i);
  weights.push_back(PlanWeight{name, format, shape, split});
  return static_cast<int64_t>(weights.size()) - 1;
}

PlanLaunch &PlanDoc::addLaunch(const std::string &kernel,
                               const std::string &op) {
  PlanLaunch l;
  l.kernel = kernel;
  l.op = op.empty() ? "k3." + kernel : op;
  launches.push_back(std::move(l));
  return launches.back();
}

bool operator==(const PlanDoc &a, const PlanDoc &b) {
  auto buffersEq = [](const PlanBuffer &x, const PlanBuffer &y) {
    return x.name == y.name && x.offset == y.offset && x.bytes == y.bytes &&
           x.dtype == y.dtype && x.elems == y.elems;
  };
  auto statesEq = [](const PlanState &x, const PlanState &y) {
    return x.name == y.name && x.kind == y.kind && x.bytes == y.bytes &&
           x.shape == y.shape;
  };
  auto weightsEq = [](const PlanWeight &x, const PlanWeight &y) {
    return x.name == y.name && x.format == y.format && x.shape == y.shape &&
           sameSplit(x.split, y.split);
  };
  auto launchesEq = [](const PlanLaunch &x, const PlanLaunch &y) {
    return x.kernel == y.kernel && x.op == y.op && x.grid == y.grid &&
           x.block == y.block && x.cluster == y.cluster && x.smem == y.smem &&
           x.args == y.args;
  };
  return a.version == b.version && a.fusion == b.fusion &&
         a.maxSeq == b.maxSeq && a.maxBatch == b.maxBatch && a.rank == b.rank &&
         a.ranks == b.ranks && a.config == b.config &&
         a.arenaBytes == b.arenaBytes && a.logitsBuffer == b.logitsBuffer &&
         std::equal(a.probes.begin(), a.probes.end(), b.probes.begin(),
                    b.probes.end(),
                    [](const PlanProbe &x, const PlanProbe &y) {
                      return x.name == y.name && x.buffer == y.buffer &&
                             x.after == y.after;
                    }) &&
         a.kernelModules == b.kernelModules && a.ptxModules == b.ptxModules &&
         std::equal(a.buffers.begin(), a.buffers.end(), b.buffers.begin(),
                    b.buffers.end(), buffersEq) &&
         std::equal(a.states.begin(), a.states.end(), b.states.begin(),
                    b.states.end(), statesEq) &&
         std::equal(a.weights.begin(), a.weights.end(), b.weights.begin(),
                    b.weights.end(), weightsEq) &&
         std::equal(a.launches.begin(), a.launches.end(), b.launches.begin(),
                    b.launches.end(), launchesEq);
}

uint32_t crc32(const void *data, size_t size) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  const auto *p = static_cast<const uint8_t *>(data);
  for (size_t i = 0; i < size; ++i)
    c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

namespace {

/// a * b, or false on overflow past kMaxPlanBytes.
bool mulBytes(uint64_t a, uint64_t b, uint64_t &out) {
  if (a != 0 && b > kMaxPlanBytes / a)
    return false;
  out = a * b;
  return out <= kMaxPlanBytes;
}

std::string launchName(const PlanDoc &plan, size_t i) {
  const PlanLaunch &l = plan.launches[i];
  std::string s = "launch " + std::to_string(i) + " (" + l.kernel;
  if (!l.op.empty())
    s += ", op " + l.op;
  return s + ")";
}

ElemType stateElem(const std::string &kind) {
  StateKind k;
  return parseStateKind(kind, k) ? stateKindElem(k) : ElemType::BF16;
}

const char *argKindName(PlanArg::Kind k) {
  switch (k) {
  case PlanArg::Kind::Int:
    return "an integer";
  case PlanArg::Kind::Float:
    return "a float";
  case PlanArg::Kind::Buffer:
    return "a buffer";
  case PlanArg::Kind::State:
    return "a state";
  case PlanArg::Kind::Weight:
    return "a weight";
  case PlanArg::Kind::Input:
    return "an input";
  }
  return "?";
}

const char *targetNoun(PlanArg::Kind k) {
  return k == PlanArg::Kind::Buffer  ? "buffer"
         : k == PlanArg::Kind::State ? "state"
                                     : "weight";
}

Status validateArg(const PlanDoc &plan, const KernelInfo &kernel,
                   const std::string &name, const PlanArg &arg) {
  const KernelField *f = kernel.field(name);
  if (!f) {
    std::string known;
    for (const KernelField &k : kernel.fields)
      known += (known.empty() ? "" : ", ") + k.name;
    return makeError("'", name, "' is not a field of ", kernel.paramsName,
                     " (fields: ", known, ")");
  }
  using K = PlanArg::Kind;
  switch (f->kind) {
  case FieldKind::Int64:
  case FieldKind::Int32:
    if (arg.kind != K::Int && arg.kind != K::Input)
      return makeError("'", name, "' is an integer field of ",
                       kernel.paramsName, "; it cannot take ",
                       argKindName(arg.kind));
    if (arg.kind == K::Input && arg.input == PlanInput::Step)
      return makeError("'", name, "' is an integer field of ",
                       kernel.paramsName,
                       "; the step block binds a pointer field");
    if (f->kind == FieldKind::Int32 && arg.kind == K::Int &&
        (arg.intValue < INT32_MIN || arg.intValue > INT32_MAX))
      return makeError("'", name, "' is an int32 field; ", arg.intValue,
                       " is out of range");
    return Status::ok();
  case FieldKind::Float32:
    if (arg.kind != K::Int && arg.kind != K::Float)
      return makeError("'", name, "' is a float field of ", kernel.paramsName,
                       "; it cannot take ", argKindName(arg.kind));
    if (arg.kind == K::Float && !(std::fabs(arg.floatValue) <= FLT_MAX))
      return makeError("'", name, "': ", arg.floatValue,
                       " is not a finite float");
    return Status::ok();
  default:
    break;
  }
  if (arg.kind == K::Input) {
    // The step block: int64 words the backend owns (StepInputs.h).
    if (arg.input != PlanInput::Step)
      return makeError("'", name, "' is a pointer field of ",
                       kernel.paramsName, "; input '",
                       planInputName(arg.input), "' is a scalar");
    if ((f->kind != FieldKind::PtrIn && f->kind != FieldKind::PtrOut) ||
        f->elem != ElemType::I64)
      return makeError("'", name, "' of ", kernel.paramsName,
                       " is not an int64 pointer; the step block cannot bind "
                       "it");
    return Status::ok();
  }
  if (!arg.isPointer())
    return makeError("'", name, "' is a pointer field of ", kernel.paramsName,
                     "; it needs a buffer, state or weight, not ",
                     argKindName(arg.kind));

  // Pointer-like fields: the target must exist and be of the right kind.
  uint64_t targetBytes = 0;
  ElemType targetElem = ElemType::None;
  const PlanWeight *weight = nullptr;
  if (arg.kind == K::Buffer) {
    if (arg.index < 0 || arg.index >= (int64_t)plan.buffers.size())
      return makeError("'", name, "': buffer index ", arg.index,
                       " is out of range (the plan has ", plan.buffers.size(),
                       " buffers)");
    targetBytes = plan.buffers[arg.index].bytes;
    targetElem = planDTypeElem(plan.buffers[arg.index].dtype);
  } else if (arg.kind == K::State) {
    if (arg.index < 0 || arg.index >= (int64_t)plan.states.size())
      return makeError("'", name, "': state index ", arg.index,
                       " is out of range (the plan has ", plan.states.size(),
                       " states)");
    targetBytes = plan.states[arg.index].bytes;
    targetElem = stateElem(plan.states[arg.index].kind);
  } else {
    if (arg.index < 0 || arg.index >= (int64_t)plan.weights.size())
      return makeError("'", name, "': weight index ", arg.index,
                       " is out of range (the plan has ", plan.weights.size(),
                       " weights)");
    weight = &plan.weights[arg.index];
    targetBytes = weight->format == "mxfp4" ? 0 : planWeightBytes(*weight);
    targetElem = weight->format == "f32"    ? ElemType::F32
                 : weight->format == "bf16" ? ElemType::BF16
                                            : ElemType::None;
  }

  if (f->kind == FieldKind::Weight || f->kind == FieldKind::WeightTable) {
    if (!weight)
      return makeError("'", name, "' is a WeightRef field of ",
                       kernel.paramsName, "; it needs a weight, not ",
                       argKindName(arg.kind));
    if (arg.offset != 0)
      return makeError("'", name, "': an offset is not allowed on a ",
                       "WeightRef field");
    if (weight->format == "f32")
      return makeError("'", name, "': weight '", weight->name,
                       "' is f32; a WeightRef must be bf16 or mxfp4");
    if (f->kind == FieldKind::Weight && weight->stacked())
      return makeError("'", name, "': weight '", weight->name,
                       "' is stacked ({e}); this field takes one matrix");
    if (f->kind == FieldKind::WeightTable && !weight->stacked())
      return makeError("'", name, "': weight '", weight->name,
                       "' is not stacked ({e}); this field takes a table of "
                       "experts");
    return Status::ok();
  }

  if (f->kind == FieldKind::Prefetch) {
    if (!weight)
      return makeError("'", name, "' is an L2 prefetch of ",
                       kernel.paramsName, "; it needs a weight, not ",
                       argKindName(arg.kind));
    if (weight->stacked() ||
        (weight->format != "bf16" && weight->format != "f32"))
      return makeError("'", name, "': weight '", weight->name, "' is ",
                       weight->stacked() ? "stacked" : weight->format,
                       "; an L2 prefetch takes a bf16 or f32 weight");
    if (arg.offset % 16 != 0 || arg.offset >= targetBytes)
      return makeError("'", name, "': offset ", arg.offset,
                       " must be a multiple of 16 inside weight '",
                       weight->name, "' (", targetBytes, " bytes)");
    return Status::ok();
  }

  if (f->kind == FieldKind::Vector) {
    // A small weight bound as it is stored: a "vector" weight (bf16 or f32,
    // whichever the checkpoint has), or one of fixed format bf16 / f32.
    if (!weight)
      return makeError("'", name, "' is a VectorRef field of ",
                       kernel.paramsName, "; it needs a weight, not ",
                       argKindName(arg.kind));
    if (arg.offset != 0)
      return makeError("'", name, "': an offset is not allowed on a ",
                       "VectorRef field");
    if (weight->format == "mxfp4" || weight->stacked())
      return makeError("'", name, "': weight '", weight->name, "' is ",
                       weight->stacked() ? "stacked" : "mxfp4",
                       "; a VectorRef field takes a vector, bf16 or f32 "
                       "weight");
    return Status::ok();
  }

  // Raw pointers.
  if (weight && weight->format == "vector")
    return makeError("'", name, "': weight '", weight->name,
                     "' is a vector (bf16 or f32 as stored); only a "
                     "VectorRef field can take it");
  if (weight && f->kind == FieldKind::PtrOut)
    return makeError("'", name, "' is written by the kernel; weight '",
                     weight->name, "' is read-only");
  if (weight && (weight->format == "mxfp4" || weight->stacked()))
    return makeError("'", name, "': weight '", weight->name, "' is ",
                     weight->stacked() ? "stacked" : "mxfp4",
                     "; only a WeightRef field can take it");
  if (targetElem != f->elem)
    return makeError("'", name, "' points to ", elemTypeName(f->elem),
                     " but the ", targetNoun(arg.kind), " holds ",
                     elemTypeName(targetElem));
  if (arg.offset >= targetBytes)
    return makeError("'", name, "': offset ", arg.offset, " is outside the ",
                     targetNoun(arg.kind), " (", targetBytes, " bytes)");
  if (arg.offset % elemTypeSize(f->elem) != 0)
    return makeError("'", name, "': offset ", arg.offset,
                     " is not a multiple of the element size ",
                     elemTypeSize(f->elem));
  return Status::ok();
}

/// Every buffer a launch reads was written by an earlier launch of the step
/// (buffers hold nothing across steps), the logits buffer by some launch,
/// and each probe's buffer by a launch before its `after`. Call after the
/// per-launch checks (kernels and fields known).
Status validateLaunchOrder(const PlanDoc &plan) {
  std::vector<int64_t> firstWrite(plan.buffers.size(), -1);
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const PlanLaunch &l = plan.launches[i];
    const KernelInfo *k = findKernel(l.kernel);
    for (const auto &[name, arg] : l.args) {
      const KernelField *f = k->field(name);
      if (arg.kind != PlanArg::Kind::Buffer || f->kind != FieldKind::PtrIn)
        continue;
      if (!f->producedBy.empty()) {
        const PlanArg *src = l.find(f->producedBy);
        if (src && src->kind == PlanArg::Kind::Buffer &&
            src->index == arg.index && src->offset == arg.offset)
          continue; // the kernel writes it before it reads it
      }
      if (firstWrite[arg.index] < 0)
        return makeError(launchName(plan, i), ": '", name, "' reads buffer '",
                         plan.buffers[arg.index].name,
                         "' before any launch of the step writes it");
    }
    for (const auto &[name, arg] : l.args)
      if (arg.kind == PlanArg::Kind::Buffer &&
          k->field(name)->kind == FieldKind::PtrOut &&
          firstWrite[arg.index] < 0)
        firstWrite[arg.index] = static_cast<int64_t>(i);
  }
  if (!plan.launches.empty() && firstWrite[plan.logitsBuffer] < 0)
    return makeError("logits buffer '", plan.buffers[plan.logitsBuffer].name,
                     "' is never written by a launch");
  for (const PlanProbe &pr : plan.probes)
    if (firstWrite[pr.buffer] < 0 || firstWrite[pr.buffer] >= pr.after)
      return makeError("probe '", pr.name, "': buffer '",
                       plan.buffers[pr.buffer].name,
                       "' is not written by launches [0, ", pr.after, ")");
  return Status::ok();
}

} // namespace

Status validatePlan(const PlanDoc &plan) {
  if (plan.version != kPlanVersion)
    return makeError("plan version ", plan.version,
                     " is not supported (this runtime reads version ",
                     kPlanVersion, ")");
  if (plan.maxSeq < 1 || plan.maxSeq > kMaxPlanSeq)
    return makeError("max_seq ", plan.maxSeq, " is out of range [1, ",
                     kMaxPlanSeq, "]");
  if (plan.maxBatch < 1 || plan.maxBatch > kMaxPlanBatch)
    return makeError("max_batch ", plan.maxBatch, " is out of range [1, ",
                     kMaxPlanBatch, "]");
  if (plan.ranks < 1 || plan.ranks > kMaxRanks)
    return makeError("ranks ", plan.ranks, " is out of range [1, ", kMaxRanks,
                     "]");
  if (plan.rank < 0 || plan.rank >= plan.ranks)
    return makeError("rank ", plan.rank, " is out of range [0, ", plan.ranks,
                     ") (the plan's ranks)");
  K3_RETURN_IF_ERROR(plan.config.validate().withContext("plan config"));
  if (plan.arenaBytes > kMaxPlanBytes)
    return makeError("arena_bytes ", plan.arenaBytes, " is too large");

  for (size_t i = 0; i < plan.buffers.size(); ++i) {
    const PlanBuffer &b = plan.buffers[i];
    const std::string at =
        "buffer " + std::to_string(i) + " ('" + b.name + "')";
    const size_t es = planDTypeSize(b.dtype);
    if (es == 0)
      return makeError(at, ": unknown dtype '", b.dtype,
                       "' (expected bf16, f32, i32, i64 or u8)");
    if (b.bytes == 0)
      return makeError(at, ": has 0 bytes");
    if (b.offset % kPlanBufferAlign != 0)
      return makeError(at, ": offset ", b.offset, " is not ", kPlanBufferAlign,
                       "-byte aligned");
    if (b.offset > plan.arenaBytes || b.bytes > plan.arenaBytes - b.offset)
      return makeError(at, ": [", b.offset, ", ", b.offset + b.bytes,
                       ") is outside the arena of ", plan.arenaBytes, " bytes");
    uint64_t need = 0;
    if (b.elems < 0 || !mulBytes(b.elems, es, need) || need > b.bytes)
      return makeError(at, ": ", b.elems, " ", b.dtype, " elements do not fit ",
                       b.bytes, " bytes");
  }

  for (size_t i = 0; i < plan.states.size(); ++i) {
    const PlanState &s = plan.states[i];
    const std::string at = "state " + std::to_string(i) + " ('" + s.name + "')";
    const size_t es = planStateElemSize(s.kind);
    if (es == 0)
      return makeError(at, ": unknown kind '", s.kind, "' (expected ",
                       stateKindName(StateKind::KdaState), ", ",
                       stateKindName(StateKind::ConvState), ", ",
                       stateKindName(StateKind::MlaCache), " or ",
                       stateKindName(StateKind::AttnResBlocks), ")");
    uint64_t n = es;
    for (int64_t d : s.shape)
      if (d <= 0 || !mulBytes(n, d, n))
        return makeError(at, ": bad or too large shape");
    if (s.shape.empty() || n != s.bytes)
      return makeError(at, ": ", s.bytes, " bytes does not match its shape (",
                       n, " bytes)");
  }
  // Everything a backend allocates before binding (the arena and every
  // state, once per slot) together.
  uint64_t resident = plan.arenaBytes;
  for (const PlanState &s : plan.states)
    if (__builtin_add_overflow(resident, s.bytes, &resident))
      resident = UINT64_MAX;
  if (__builtin_mul_overflow(resident, static_cast<uint64_t>(plan.maxBatch),
                             &resident))
    resident = UINT64_MAX;
  if (resident > kMaxResidentBytes)
    return makeError("the arena and the states need ", resident,
                     " bytes together, more than the ", kMaxResidentBytes,
                     " (256 GiB) any GPU could hold",
                     plan.maxBatch > 1
                         ? " (" + std::to_string(plan.maxBatch) + " slots)"
                         : std::string());

  for (size_t i = 0; i < plan.weights.size(); ++i) {
    const PlanWeight &w = plan.weights[i];
    const std::string at =
        "weight " + std::to_string(i) + " ('" + w.name + "')";
    if (w.format != "bf16" && w.format != "f32" && w.format != "mxfp4" &&
        w.format != "vector")
      return makeError(at, ": unknown format '", w.format,
                       "' (expected bf16, f32, vector or mxfp4)");
    if (w.format == "vector" && w.stacked())
      return makeError(at, ": a vector weight cannot be stacked ({e})");
    if (w.name.empty())
      return makeError(at, ": empty name");
    uint64_t n = 1;
    for (int64_t d : w.shape)
      if (d <= 0 || !mulBytes(n, d, n))
        return makeError(at, ": bad or too large shape");
    const size_t rank = w.shape.size();
    if (rank == 0)
      return makeError(at, ": empty shape");
    if (w.stacked() && rank < 2)
      return makeError(at, ": a stacked ({e}) weight needs [experts, ...]");
    if (w.stacked() && w.shape[0] > kMaxPlanExperts)
      return makeError(at, ": ", w.shape[0], " experts exceed the limit of ",
                       kMaxPlanExperts);
    if (w.split.ranks != 1) {
      if (w.split.ranks != plan.ranks || w.split.rank != plan.rank)
        return makeError(at, ": split as rank ", w.split.rank, " of ",
                         w.split.ranks, ", but the plan is rank ", plan.rank,
                         " of ", plan.ranks);
      if (w.split.axis < 0 || w.split.axis >= static_cast<int64_t>(rank))
        return makeError(at, ": split axis ", w.split.axis,
                         " is outside the shape's ", rank, " dimensions");
      if (w.stacked() && w.split.axis == 0)
        return makeError(at, ": a stacked ({e}) weight is split inside each "
                             "expert (axis 1 or 2), not over the experts");
      uint64_t full = 1;
      for (int64_t d : w.fullShape())
        if (!mulBytes(full, d, full))
          return makeError(at, ": bad or too large shape");
    }
    if (w.format == "mxfp4") {
      if (rank != (w.stacked() ? 3u : 2u))
        return makeError(at, ": an mxfp4 weight is [out, in]",
                         w.stacked() ? " per expert" : "");
      if (w.shape.back() % 32 != 0)
        return makeError(at, ": mxfp4 needs the input width (", w.shape.back(),
                         ") to be a multiple of 32");
    }
  }

  if (plan.logitsBuffer < 0 ||
      plan.logitsBuffer >= static_cast<int64_t>(plan.buffers.size()))
    return makeError("logits buffer index ", plan.logitsBuffer,
                     " is out of range (the plan has ", plan.buffers.size(),
                     " buffers)");
  const PlanBuffer &lb = plan.buffers[plan.logitsBuffer];
  if (lb.dtype != "f32" || lb.elems < plan.config.vocabSize)
    return makeError("logits buffer '", lb.name, "' must be f32 with at least ",
                     plan.config.vocabSize, " elements (vocab), found ",
                     lb.dtype, " with ", lb.elems);

  for (size_t i = 0; i < plan.probes.size(); ++i) {
    const PlanProbe &pr = plan.probes[i];
    if (pr.name.empty())
      return makeError("probes[", i, "]: the name is empty");
    if (pr.buffer < 0 || pr.buffer >= static_cast<int64_t>(plan.buffers.size()))
      return makeError("probe '", pr.name, "': buffer index ", pr.buffer,
                       " is out of range (the plan has ", plan.buffers.size(),
                       " buffers)");
    if (pr.after < 1 || pr.after > static_cast<int64_t>(plan.launches.size()))
      return makeError("probe '", pr.name, "': after ", pr.after,
                       " is outside [1, ", plan.launches.size(), "] launches");
    if (i > 0 && pr.after < plan.probes[i - 1].after)
      return makeError("probe '", pr.name, "': probes must be in launch order");
  }

  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const PlanLaunch &l = plan.launches[i];
    const KernelInfo *k = findKernel(l.kernel);
    if (!k)
      return makeError(launchName(plan, i), ": unknown kernel '", l.kernel,
                       "'");
    if (k->collective && plan.ranks < 2)
      return makeError(launchName(plan, i), ": the collective '", l.kernel,
                       "' in a plan of one rank (ranks = ", plan.ranks, ")");
    if (const PlanArg *r = l.find("ranks"); k->collective && r &&
                                            r->kind == PlanArg::Kind::Int &&
                                            r->intValue != plan.ranks)
      return makeError(launchName(plan, i), ": ", l.kernel, " over ",
                       r->intValue, " ranks in a plan of ", plan.ranks);
    for (size_t a = 0; a < l.args.size(); ++a) {
      for (size_t b = 0; b < a; ++b)
        if (l.args[a].first == l.args[b].first)
          return makeError(launchName(plan, i), ": argument '", l.args[a].first,
                           "' is given twice");
      K3_RETURN_IF_ERROR(
          validateArg(plan, *k, l.args[a].first, l.args[a].second)
              .withContext(launchName(plan, i)));
    }
    // Every scalar the kernel reads must be given: a plan never falls back
    // on a params struct's default (a lowering that stops emitting, say,
    // the gate's lower bound must fail here, not decode with -5).
    for (const KernelField &f : k->fields) {
      if (f.need == KernelField::Need::Never || l.find(f.name))
        continue;
      const PlanArg *other = f.other.empty() ? nullptr : l.find(f.other);
      const bool needed =
          f.need == KernelField::Need::Always ||
          (f.need == KernelField::Need::IfGiven && other) ||
          (f.need == KernelField::Need::IfValue && other &&
           other->kind == PlanArg::Kind::Int && other->intValue == f.value);
      if (needed)
        return makeError(launchName(plan, i), ": scalar '", f.name,
                         "' is missing (", k->paramsName,
                         " reads it; plans must give every such value)");
    }
    // The step block replaces a step input only where that input is bound
    // too (the binder checks every extent over the input's whole range),
    // and only the plan's last launch may write it (argmax: the next
    // step's token and position; nothing of this step may read those).
    if (const PlanArg *st = l.find("step");
        st && st->kind == PlanArg::Kind::Input) {
      static const std::pair<const char *, PlanInput> kStepReads[] = {
          {"token", PlanInput::Token},
          {"pos", PlanInput::Pos},
          {"length", PlanInput::Length}};
      for (const auto &[field, input] : kStepReads)
        if (k->field(field)) {
          const PlanArg *in = l.find(field);
          if (!in || in->kind != PlanArg::Kind::Input || in->input != input)
            return makeError(launchName(plan, i), ": with the step block "
                             "bound, '", field, "' must be the input '",
                             planInputName(input), "' too");
        }
      const KernelField *f = k->field("step");
      if (f && f->kind == FieldKind::PtrOut && i + 1 != plan.launches.size())
        return makeError(launchName(plan, i), ": only the last launch may "
                         "write the step block");
    }
    for (int d = 0; d < 3; ++d)
      if (l.grid[d] < 0 || l.block[d] < 0)
        return makeError(launchName(plan, i), ": negative grid or block");
    if (l.smem < 0)
      return makeError(launchName(plan, i), ": negative smem");
    // CUDA's limits, so that no launch shape fails only on the GPU.
    const int64_t gridMax[3] = {kMaxGridX, kMaxGridYZ, kMaxGridYZ};
    const int64_t blockMax[3] = {kMaxBlockThreads, kMaxBlockThreads,
                                 kMaxBlockZ};
    for (int d = 0; d < 3; ++d)
      if (l.grid[d] < 1 || l.grid[d] > gridMax[d] || l.block[d] < 1 ||
          l.block[d] > blockMax[d])
        return makeError(launchName(plan, i), ": grid [", l.grid[0], ", ",
                         l.grid[1], ", ", l.grid[2], "] or block [",
                         l.block[0], ", ", l.block[1], ", ", l.block[2],
                         "] is outside CUDA's limits (grid <= [2^31-1, "
                         "65535, 65535], block <= [1024, 1024, 64])");
    if (l.block[0] * l.block[1] * l.block[2] > kMaxBlockThreads)
      return makeError(launchName(plan, i), ": block of ",
                       l.block[0] * l.block[1] * l.block[2],
                       " threads exceeds ", kMaxBlockThreads);
    for (int d = 0; d < 3; ++d)
      if (l.cluster[d] < 1 || l.grid[d] % l.cluster[d] != 0)
        return makeError(launchName(plan, i), ": cluster [", l.cluster[0], ", ",
                         l.cluster[1], ", ", l.cluster[2],
                         "] does not divide the grid [", l.grid[0], ", ",
                         l.grid[1], ", ", l.grid[2], "]");
    if (l.cluster[0] * l.cluster[1] * l.cluster[2] > kMaxClusterBlocks)
      return makeError(launchName(plan, i), ": cluster of ",
                       l.cluster[0] * l.cluster[1] * l.cluster[2],
                       " blocks exceeds the portable ", kMaxClusterBlocks);
    if (l.smem > kMaxSmem)
      return makeError(launchName(plan, i), ": smem ", l.smem,
                       " bytes exceeds the ", kMaxSmem,
                       " bytes a block may use");
  }
  return validateLaunchOrder(plan);
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

ojson argToJson(const PlanArg &a) {
  switch (a.kind) {
  case PlanArg::Kind::Int:
    return a.intValue;
  case PlanArg::Kind::Float:
    return a.floatValue;
  case PlanArg::Kind::Buffer:
  case PlanArg::Kind::State:
  case PlanArg::Kind::Weight: {
    ojson o = ojson::object();
    const char *key = a.kind == PlanArg::Kind::Buffer  ? "buffer"
                      : a.kind == PlanArg::Kind::State ? "state"
                                                       : "weight";
    o[key] = a.index;
    if (a.offset)
      o["offset"] = a.offset;
    return o;
  }
  case PlanArg::Kind::Input:
    return ojson{{"input", planInputName(a.input)}};
  }
  return nullptr;
}

} // namespace

size_t logitsTailStart(const PlanDoc &plan) {
  size_t start = plan.launches.size();
  while (start > 0) {
    const PlanLaunch &l = plan.launches[start - 1];
    const KernelInfo *k = findKernel(l.kernel);
    if (!k)
      break;
    bool writesState = false;
    for (const auto &[name, arg] : l.args) {
      const KernelField *f = k->field(name);
      if (arg.kind != PlanArg::Kind::State || !f ||
          f->kind != FieldKind::PtrOut)
        continue;
      StateKind kind;
      const bool known = arg.index >= 0 &&
                         arg.index < static_cast<int64_t>(plan.states.size()) &&
                         parseStateKind(plan.states[arg.index].kind, kind);
      if (!known || !stateKindIsStepLocal(kind))
        writesState = true;
    }
    if (writesState)
      break;
    --start;
  }
  return start;
}

std::string serializePlanBody(const PlanDoc &plan) {
  ojson j = ojson::object();
  j["version"] = plan.version;
  j["fusion"] = plan.fusion;
  j["max_seq"] = plan.maxSeq;
  j["max_batch"] = plan.maxBatch;
  if (plan.ranks > 1) {
    j["rank"] = plan.rank;
    j["ranks"] = plan.ranks;
  }
  j["config"] = ojson::parse(writeConfigJson(plan.config));
  j["arena_bytes"] = plan.arenaBytes;
  ojson buffers = ojson::array();
  for (const PlanBuffer &b : plan.buffers)
    buffers.push_back({{"name", b.name},
                       {"offset", b.offset},
                       {"bytes", b.bytes},
                       {"dtype", b.dtype},
                       {"elems", b.elems}});
  j["buffers"] = std::move(buffers);
  ojson states = ojson::array();
  for (const PlanState &s : plan.states)
    states.push_back({{"name", s.name},
                      {"kind", s.kind},
                      {"bytes", s.bytes},
                      {"shape", s.shape}});
  j["states"] = std::move(states);
  ojson weights = ojson::array();
  for (const PlanWeight &w : plan.weights) {
    ojson o = {{"name", w.name}, {"format", w.format}, {"shape", w.shape}};
    if (w.split.ranks != 1)
      o["split"] = {{"axis", w.split.axis},
                    {"rank", w.split.rank},
                    {"ranks", w.split.ranks}};
    weights.push_back(std::move(o));
  }
  j["weights"] = std::move(weights);
  j["logits"] = {{"buffer", plan.logitsBuffer}};
  if (!plan.probes.empty()) {
    ojson probes = ojson::array();
    for (const PlanProbe &pr : plan.probes)
      probes.push_back(
          {{"name", pr.name}, {"buffer", pr.buffer}, {"after", pr.after}});
    j["probes"] = std::move(probes);
  }
  ojson launches = ojson::array();
  for (const PlanLaunch &l : plan.launches) {
    ojson args = ojson::object();
    for (const auto &[name, value] : l.args)
      args[name] = argToJson(value);
    ojson launch = {{"kernel", l.kernel},
                    {"op", l.op},
                    {"grid", l.grid},
                    {"block", l.block}};
    // Written only when it asks for clusters: plans without them read as
    // they always have.
    if (l.clustered())
      launch["cluster"] = l.cluster;
    launch["smem"] = l.smem;
    launch["args"] = std::move(args);
    launches.push_back(std::move(launch));
  }
  j["launches"] = std::move(launches);
  ojson kernels = ojson::object();
  for (const auto &[name, module] : plan.kernelModules)
    kernels[name] = {{"module", module}};
  j["kernels"] = std::move(kernels);
  ojson modules = ojson::object();
  for (const auto &[name, ptx] : plan.ptxModules)
    modules[name] = ptx;
  j["ptx_modules"] = std::move(modules);
  // One launch per line keeps plans diffable without a pretty-printer.
  std::string out = "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    out += first ? "\n" : ",\n";
    first = false;
    out += ojson(it.key()).dump() + ": ";
    if (it.value().is_array() && !it.value().empty()) {
      out += "[";
      for (size_t i = 0; i < it.value().size(); ++i)
        out += (i ? ",\n  " : "\n  ") + it.value()[i].dump();
      out += "\n]";
    } else {
      out += it.value().dump();
    }
  }
  return out + "\n}\n";
}

std::string serializePlan(const PlanDoc &plan) {
  const std::string body = serializePlanBody(plan);
  char header[96];
  std::snprintf(header, sizeof(header), "K3CPLAN %" PRId64 " %08x %zu\n",
                plan.version, crc32(body.data(), body.size()), body.size());
  return header + body;
}

Status writePlanFile(const std::string &path, const PlanDoc &plan) {
  // A temporary next to `path`, renamed over it once complete.
  return writeFileAtomic(path, serializePlan(plan));
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {

/// Typed access to a JSON object's members with messages that name the
/// member's path ("launches[3].grid").
class Reader {
public:
  explicit Reader(Status &status) : status_(status) {}

  bool fail(const std::string &path, const std::string &what) {
    if (status_.isOk())
      status_ = makeError(path, ": ", what);
    return false;
  }

  const ojson *member(const ojson &obj, const std::string &path,
                      const char *key, bool required = true) {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (required)
        fail(path.empty() ? key : path + "." + key, "missing");
      return nullptr;
    }
    return &*it;
  }

  bool getInt(const ojson &v, const std::string &path, int64_t &out) {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return fail(path, "integer out of range");
      out = static_cast<int64_t>(v.get<uint64_t>());
      return true;
    }
    if (!v.is_number_integer())
      return fail(path, "expected an integer");
    out = v.get<int64_t>();
    return true;
  }
  bool getU64(const ojson &v, const std::string &path, uint64_t &out) {
    int64_t i = 0;
    if (!getInt(v, path, i))
      return false;
    if (i < 0)
      return fail(path, "must not be negative");
    out = static_cast<uint64_t>(i);
    return true;
  }
  bool getString(const ojson &v, const std::string &path, std::string &out) {
    if (!v.is_string())
      return fail(path, "expected a string");
    out = v.get<std::string>();
    return true;
  }
  bool getShape(const ojson &v, const std::string &path,
                std::vector<int64_t> &out) {
    if (!v.is_array())
      return fail(path, "expected an array of integers");
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      int64_t d = 0;
      if (!getInt(v[i], path + "[" + std::to_string(i) + "]", d))
        return false;
      out.push_back(d);
    }
    return true;
  }
  template <typename F>
  bool intMember(const ojson &obj, const std::string &path, const char *key,
                 F &&set) {
    const ojson *v = member(obj, path, key);
    int64_t i = 0;
    if (!v || !getInt(*v, path + "." + key, i))
      return false;
    set(i);
    return true;
  }

private:
  Status &status_;
};

bool parseArg(Reader &r, const ojson &v, const std::string &path,
              PlanArg &out) {
  if (v.is_number_integer())
    return r.getInt(v, path, out.intValue) &&
           (out.kind = PlanArg::Kind::Int, true);
  if (v.is_number_float()) {
    out.kind = PlanArg::Kind::Float;
    out.floatValue = v.get<double>();
    // 1e999 parses as infinity; no kernel scalar means that, and the writer
    // could not write it back (JSON has no infinity).
    if (!std::isfinite(out.floatValue))
      return r.fail(path, "the number is not finite");
    return true;
  }
  if (!v.is_object())
    return r.fail(path, "expected a number or an object ({\"buffer\": i}, "
                        "{\"state\": i}, {\"weight\": i} or {\"input\": ...})");
  if (auto it = v.find("input"); it != v.end()) {
    std::string s;
    if (!r.getString(*it, path + ".input", s))
      return false;
    out.kind = PlanArg::Kind::Input;
    if (s == "token")
      out.input = PlanInput::Token;
    else if (s == "pos")
      out.input = PlanInput::Pos;
    else if (s == "length")
      out.input = PlanInput::Length;
    else if (s == "step")
      out.input = PlanInput::Step;
    else
      return r.fail(path, "unknown input '" + s +
                              "' (expected token, pos, length or step)");
    if (v.size() != 1)
      return r.fail(path, "an input takes no other keys");
    return true;
  }
  int found = 0;
  for (auto [key, kind] :
       {std::pair<const char *, PlanArg::Kind>{"buffer", PlanArg::Kind::Buffer},
        {"state", PlanArg::Kind::State},
        {"weight", PlanArg::Kind::Weight}}) {
    auto it = v.find(key);
    if (it == v.end())
      continue;
    ++found;
    out.kind = kind;
    if (!r.getInt(*it, path + "." + key, out.index))
      return false;
  }
  if (found != 1)
    return r.fail(path, "expected exactly one of buffer, state, weight, input");
  out.offset = 0;
  if (auto it = v.find("offset"); it != v.end())
    if (!r.getU64(*it, path + ".offset", out.offset))
      return false;
  if (v.size() != (v.contains("offset") ? 2u : 1u))
    return r.fail(path, "unexpected keys (allowed: the target and offset)");
  return true;
}

bool parseBody(Reader &r, const ojson &j, PlanDoc &plan, Status &status) {
  if (!j.is_object())
    return r.fail("plan body", "expected a JSON object");
  if (!r.intMember(j, "", "version", [&](int64_t v) { plan.version = v; }))
    return false;
  if (plan.version != kPlanVersion)
    return r.fail("version", "plan version " + std::to_string(plan.version) +
                                 " is not supported (this runtime reads "
                                 "version " +
                                 std::to_string(kPlanVersion) + ")");
  if (const ojson *v = r.member(j, "", "fusion", false))
    if (!r.getString(*v, "fusion", plan.fusion))
      return false;
  if (!r.intMember(j, "", "max_seq", [&](int64_t v) { plan.maxSeq = v; }))
    return false;
  // Optional within version 1: plans written before it decode one sequence.
  if (j.contains("max_batch") &&
      !r.intMember(j, "", "max_batch", [&](int64_t v) { plan.maxBatch = v; }))
    return false;
  // Optional within version 1: only tensor-parallel plans carry them.
  if (j.contains("ranks") &&
      !r.intMember(j, "", "ranks", [&](int64_t v) { plan.ranks = v; }))
    return false;
  if (j.contains("rank") &&
      !r.intMember(j, "", "rank", [&](int64_t v) { plan.rank = v; }))
    return false;
  const ojson *config = r.member(j, "", "config");
  if (!config)
    return false;
  if (!config->is_object())
    return r.fail("config", "expected an object");
  Expected<ModelConfig> cfg = parseConfigText(config->dump(), "plan config");
  if (!cfg)
    return r.fail("config", cfg.message());
  plan.config = cfg.take();
  const ojson *arena = r.member(j, "", "arena_bytes");
  if (!arena || !r.getU64(*arena, "arena_bytes", plan.arenaBytes))
    return false;

  auto arrayMember = [&](const char *key) -> const ojson * {
    const ojson *v = r.member(j, "", key);
    if (v && !v->is_array()) {
      r.fail(key, "expected an array");
      return nullptr;
    }
    return v;
  };
  const ojson *buffers = arrayMember("buffers");
  if (!buffers)
    return false;
  for (size_t i = 0; i < buffers->size(); ++i) {
    const std::string p = "buffers[" + std::to_string(i) + "]";
    const ojson &b = (*buffers)[i];
    if (!b.is_object())
      return r.fail(p, "expected an object");
    PlanBuffer buf;
    const ojson *v;
    if (!(v = r.member(b, p, "name")) ||
        !r.getString(*v, p + ".name", buf.name))
      return false;
    if (!(v = r.member(b, p, "offset")) ||
        !r.getU64(*v, p + ".offset", buf.offset))
      return false;
    if (!(v = r.member(b, p, "bytes")) ||
        !r.getU64(*v, p + ".bytes", buf.bytes))
      return false;
    if (!(v = r.member(b, p, "dtype")) ||
        !r.getString(*v, p + ".dtype", buf.dtype))
      return false;
    if (!(v = r.member(b, p, "elems")) ||
        !r.getInt(*v, p + ".elems", buf.elems))
      return false;
    plan.buffers.push_back(std::move(buf));
  }

  const ojson *states = arrayMember("states");
  if (!states)
    return false;
  for (size_t i = 0; i < states->size(); ++i) {
    const std::string p = "states[" + std::to_string(i) + "]";
    const ojson &s = (*states)[i];
    if (!s.is_object())
      return r.fail(p, "expected an object");
    PlanState st;
    const ojson *v;
    if (!(v = r.member(s, p, "name")) || !r.getString(*v, p + ".name", st.name))
      return false;
    if (!(v = r.member(s, p, "kind")) || !r.getString(*v, p + ".kind", st.kind))
      return false;
    if (!(v = r.member(s, p, "bytes")) || !r.getU64(*v, p + ".bytes", st.bytes))
      return false;
    if (!(v = r.member(s, p, "shape")) ||
        !r.getShape(*v, p + ".shape", st.shape))
      return false;
    plan.states.push_back(std::move(st));
  }

  const ojson *weights = arrayMember("weights");
  if (!weights)
    return false;
  for (size_t i = 0; i < weights->size(); ++i) {
    const std::string p = "weights[" + std::to_string(i) + "]";
    const ojson &w = (*weights)[i];
    if (!w.is_object())
      return r.fail(p, "expected an object");
    PlanWeight wt;
    const ojson *v;
    if (!(v = r.member(w, p, "name")) || !r.getString(*v, p + ".name", wt.name))
      return false;
    if (!(v = r.member(w, p, "format")) ||
        !r.getString(*v, p + ".format", wt.format))
      return false;
    if (!(v = r.member(w, p, "shape")) ||
        !r.getShape(*v, p + ".shape", wt.shape))
      return false;
    if (const ojson *sp = r.member(w, p, "split", false)) {
      const std::string ps = p + ".split";
      if (!sp->is_object())
        return r.fail(ps, "expected {\"axis\": a, \"rank\": r, \"ranks\": n}");
      if (!r.intMember(
              *sp, ps, "axis",
              [&](int64_t x) { wt.split.axis = static_cast<int>(x); }) ||
          !r.intMember(*sp, ps, "rank",
                       [&](int64_t x) { wt.split.rank = x; }) ||
          !r.intMember(*sp, ps, "ranks",
                       [&](int64_t x) { wt.split.ranks = x; }))
        return false;
    }
    plan.weights.push_back(std::move(wt));
  }

  const ojson *logits = r.member(j, "", "logits");
  if (!logits)
    return false;
  if (!logits->is_object())
    return r.fail("logits", "expected {\"buffer\": i}");
  if (!r.intMember(*logits, "logits", "buffer",
                   [&](int64_t v) { plan.logitsBuffer = v; }))
    return false;

  if (const ojson *probes = r.member(j, "", "probes", false)) {
    if (!probes->is_array())
      return r.fail("probes", "expected an array");
    for (size_t i = 0; i < probes->size(); ++i) {
      const std::string p = "probes[" + std::to_string(i) + "]";
      const ojson &o = (*probes)[i];
      if (!o.is_object())
        return r.fail(p, "expected an object");
      PlanProbe pr;
      const ojson *v;
      if (!(v = r.member(o, p, "name")) ||
          !r.getString(*v, p + ".name", pr.name))
        return false;
      if (!r.intMember(o, p, "buffer", [&](int64_t x) { pr.buffer = x; }) ||
          !r.intMember(o, p, "after", [&](int64_t x) { pr.after = x; }))
        return false;
      plan.probes.push_back(std::move(pr));
    }
  }

  const ojson *launches = arrayMember("launches");
  if (!launches)
    return false;
  for (size_t i = 0; i < launches->size(); ++i) {
    const std::string p = "launches[" + std::to_string(i) + "]";
    const ojson &l = (*launches)[i];
    if (!l.is_object())
      return r.fail(p, "expected an object");
    PlanLaunch ln;
    const ojson *v;
    if (!(v = r.member(l, p, "kernel")) ||
        !r.getString(*v, p + ".kernel", ln.kernel))
      return false;
    if ((v = r.member(l, p, "op", false)) && !r.getString(*v, p + ".op", ln.op))
      return false;
    for (auto [key, dims] :
         {std::pair<const char *, std::array<int64_t, 3> *>{"grid", &ln.grid},
          {"block", &ln.block},
          {"cluster", &ln.cluster}}) {
      if (!(v = r.member(l, p, key, false)))
        continue;
      std::vector<int64_t> shape;
      if (!r.getShape(*v, p + "." + key, shape))
        return false;
      if (shape.size() != 3)
        return r.fail(p + "." + key, "expected 3 integers");
      std::copy(shape.begin(), shape.end(), dims->begin());
    }
    if ((v = r.member(l, p, "smem", false)) &&
        !r.getInt(*v, p + ".smem", ln.smem))
      return false;
    const ojson *args = r.member(l, p, "args");
    if (!args)
      return false;
    if (!args->is_object())
      return r.fail(p + ".args", "expected an object");
    for (auto it = args->begin(); it != args->end(); ++it) {
      PlanArg a;
      if (!parseArg(r, it.value(), p + ".args." + it.key(), a))
        return false;
      ln.args.emplace_back(it.key(), a);
    }
    plan.launches.push_back(std::move(ln));
  }

  if (const ojson *modules = r.member(j, "", "ptx_modules", false)) {
    if (!modules->is_object())
      return r.fail("ptx_modules", "expected an object");
    for (auto it = modules->begin(); it != modules->end(); ++it)
      if (!r.getString(it.value(), "ptx_modules." + it.key(),
                       plan.ptxModules[it.key()]))
        return false;
  }
  if (const ojson *kernels = r.member(j, "", "kernels", false)) {
    if (!kernels->is_object())
      return r.fail("kernels", "expected an object");
    for (auto it = kernels->begin(); it != kernels->end(); ++it) {
      const std::string where = "kernels." + it.key();
      const ojson &k = it.value();
      if (!k.is_object() || !k.contains("module"))
        return r.fail(where, "expected {\"module\": \"...\"}");
      std::string &module = plan.kernelModules[it.key()];
      if (!r.getString(k["module"], where + ".module", module))
        return false;
      if (!plan.ptxModules.count(module))
        return r.fail(where + ".module",
                      "names '" + module + "', which ptx_modules lacks");
    }
  }
  (void)status;
  return true;
}

/// Parses "<digits>" fully into out; false on junk or overflow.
bool parseDecimal(const std::string &s, uint64_t &out) {
  if (s.empty() || s.size() > 19)
    return false;
  out = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    out = out * 10 + static_cast<uint64_t>(c - '0');
  }
  return true;
}

} // namespace

Expected<PlanDoc> parsePlan(const std::string &bytes,
                            const std::string &origin) {
  auto err = [&](const std::string &m) -> Status {
    return Status::error(origin + ": " + m);
  };
  const size_t magicLen = sizeof(kMagic) - 1;
  if (bytes.size() < magicLen || bytes.compare(0, magicLen, kMagic) != 0)
    return err("not a k3c plan (the file does not start with 'K3CPLAN'); "
               "make one with k3c");
  const size_t nl = bytes.find('\n');
  if (nl == std::string::npos || nl > 80)
    return err("plan is truncated or corrupted: the header line has no end");
  std::istringstream header(bytes.substr(magicLen, nl - magicLen));
  std::string versionText, crcText, lengthText, extra;
  header >> versionText >> crcText >> lengthText;
  if (versionText.empty() || crcText.empty() || lengthText.empty() ||
      (header >> extra))
    return err("malformed plan header (expected 'K3CPLAN <version> <crc32> "
               "<length>')");
  uint64_t version = 0, length = 0;
  if (!parseDecimal(versionText, version) || !parseDecimal(lengthText, length))
    return err("malformed plan header (version and length are decimal)");
  if (version != static_cast<uint64_t>(kPlanVersion))
    return err("plan version " + versionText +
               " is not supported (this runtime reads version " +
               std::to_string(kPlanVersion) + "); recompile with this k3c");
  uint32_t crc = 0;
  if (crcText.size() != 8 ||
      crcText.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    return err("malformed plan header (the checksum is 8 hex digits)");
  crc = static_cast<uint32_t>(std::stoul(crcText, nullptr, 16));
  const uint64_t have = bytes.size() - (nl + 1);
  if (have < length)
    return err("plan is truncated: header says " + std::to_string(length) +
               " bytes, file has " + std::to_string(have));
  if (have > length)
    return err("plan has " + std::to_string(have - length) +
               " unexpected bytes after its body (header says " +
               std::to_string(length) + " bytes)");
  const uint32_t actual = crc32(bytes.data() + nl + 1, length);
  if (actual != crc) {
    char m[160];
    std::snprintf(m, sizeof(m),
                  "plan checksum mismatch: header says %08x, body has %08x "
                  "(the file is corrupted)",
                  crc, actual);
    return err(m);
  }

  // Depth and duplicate keys before the tree parser (which would keep the
  // last of two equal keys, and recurse on a deep document).
  K3_RETURN_IF_ERROR(
      checkJsonText(std::string_view(bytes).substr(nl + 1)).withContext(origin));
  PlanDoc plan;
  Status status;
  try {
    ojson j = ojson::parse(bytes.begin() + nl + 1, bytes.end());
    Reader r(status);
    if (!parseBody(r, j, plan, status) && status.isOk())
      status = Status::error("invalid plan body");
  } catch (const std::exception &e) {
    return err(std::string("plan body is not valid JSON: ") + e.what());
  }
  if (!status)
    return status.withContext(origin);
  K3_RETURN_IF_ERROR(validatePlan(plan).withContext(origin));
  return plan;
}

Expected<PlanDoc> readPlanFile(const std::string &path) {
  std::string bytes;
  K3_RETURN_IF_ERROR(
      readRegularFile(path, kMaxPlanFileBytes, bytes, "plan file"));
  return parsePlan(bytes, path);
}

const std::string *PlanDoc::ptxFor(const std::string &kernel) const {
  auto k = kernelModules.find(kernel);
  if (k == kernelModules.end())
    return nullptr;
  auto m = ptxModules.find(k->second);
  return m == ptxModules.end() ? nullptr : &m->second;
}

} // namespace k3
