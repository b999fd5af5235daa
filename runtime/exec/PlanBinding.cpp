//===- PlanBinding.cpp - Binding a plan's launches to memory --------------===//
//
// One generic binder serves every kernel: the kernel table says where each
// field of the params struct lives and what it may take, so binding a launch
// is "for each arg, write the value at the field's offset", followed by the
// kernel's extent check. Per-step work is a handful of integer stores.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/PlanBinding.h"

#include "kernels/common/StepInputs.h"

#include "kernels/common/BF16.h"
#include "runtime/io/Tensor.h"
#include "runtime/io/TensorSlice.h"

#include <cstring>
#include <map>

namespace k3 {

namespace {

/// The shape without its size-1 dimensions ([1, D] and [D] hold the same).
std::vector<int64_t> squeezed(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s;
  for (int64_t d : shape)
    if (d != 1)
      s.push_back(d);
  return s;
}

/// The element count of a shape, or -1 when a dimension is negative or the
/// product overflows (validatePlan bounds plan shapes; this never wraps
/// whatever it is given).
int64_t numelOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return -1;
  return n;
}

/// Replaces every "{e}" in `name` with the expert number.
std::string expertName(const std::string &name, int64_t e) {
  std::string out;
  for (size_t i = 0; i < name.size();) {
    if (name.compare(i, 3, "{e}") == 0) {
      out += std::to_string(e);
      i += 3;
    } else {
      out += name[i++];
    }
  }
  return out;
}

} // namespace

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

namespace {

/// Whether `t` is a vector holding at least the elements of the vector
/// `shape`: a checkpoint may pad an f32 vector (K3 stores A_log as 128
/// values); the plan reads the first ones.
bool holdsPadded(const TensorView &t, const std::vector<int64_t> &shape) {
  return squeezed(t.shape).size() <= 1 && squeezed(shape).size() <= 1 &&
         t.numel() >= numelOf(shape);
}

/// Where a plan weight's checkpoint tensors are found: the store, or for a
/// split weight this rank's part of each (gathered into `parts`).
class WeightLookup {
public:
  WeightLookup(const TensorStore &store, const PlanWeight &w,
               std::vector<std::unique_ptr<TensorSlice>> &parts)
      : store_(store), w_(w), parts_(parts) {}

  /// The tensor `name` whose logical part shape is `shape` (per expert for
  /// a stacked weight): null when missing, the part when split.
  /// `padded`: a 1-D tensor may be longer than the whole (K3's A_log).
  Expected<const TensorView *> find(const std::string &name,
                                    std::vector<int64_t> shape,
                                    bool padded = false) const {
    const TensorView *t = store_.find(name);
    if (!t || !w_.isSplit())
      return t;
    // The split axis in this tensor's own coordinates (an expert's tensor
    // lacks the stacked dimension).
    TensorSplit split = w_.split;
    if (w_.stacked())
      split.axis -= 1;
    shape[static_cast<size_t>(split.axis)] *= split.ranks;
    TensorView whole = *t;
    const bool sameShape = squeezed(t->shape) == squeezed(shape);
    if (sameShape) {
      whole.shape = shape;
    } else if (padded && holdsPadded(*t, shape)) {
      whole.shape = shape;
      whole.nbytes = static_cast<size_t>(numelOf(shape)) * dtypeSize(t->dtype);
    } else {
      return makeError("weight '", name, "': the plan splits ",
                       shapeString(shape), " over ", split.ranks,
                       " ranks, the checkpoint has ", dtypeName(t->dtype), " ",
                       shapeString(t->shape));
    }
    Expected<TensorSlice> part = sliceTensor(whole, split);
    if (!part)
      return makeError("weight '", name, "': ", part.message());
    parts_.push_back(std::make_unique<TensorSlice>(part.take()));
    return &parts_.back()->view;
  }

private:
  const TensorStore &store_;
  const PlanWeight &w_;
  std::vector<std::unique_ptr<TensorSlice>> &parts_;
};

/// Resolves one plan weight (one expert's when stacked) in the store.
Status resolveMatrixOrVector(const PlanWeight &w, const std::string &name,
                             const std::vector<int64_t> &shape,
                             const WeightLookup &store, WeightRef &ref,
                             const uint8_t *&data, uint64_t &bytes,
                             int32_t &dtype, std::vector<float> &widened) {
  auto missing = [&](const std::string &n) {
    return makeError("weight '", n,
                     "' is missing from the checkpoint (the "
                     "plan needs it; was the plan compiled for this model?)");
  };
  auto mismatch = [&](const TensorView *t, const std::string &want) {
    return makeError("weight '", t->name, "': the plan expects ", want,
                     ", the checkpoint has ", dtypeName(t->dtype), " ",
                     shapeString(t->shape));
  };
  ref = WeightRef();
  if (w.format == "mxfp4") {
    const int64_t rows = shape[0], cols = shape[1];
    const std::vector<int64_t> ps = {rows, cols / 2}, ss = {rows, cols / 32};
    Expected<const TensorView *> packedOr =
        store.find(name + ".weight_packed", ps);
    if (!packedOr)
      return packedOr.status();
    Expected<const TensorView *> scaleOr =
        store.find(name + ".weight_scale", ss);
    if (!scaleOr)
      return scaleOr.status();
    const TensorView *packed = *packedOr, *scale = *scaleOr;
    if (!packed)
      return missing(name + ".weight_packed");
    if (!scale)
      return missing(name + ".weight_scale");
    if (packed->dtype != DType::U8 || packed->shape != ps)
      return mismatch(packed, "U8 " + shapeString(ps));
    if (scale->dtype != DType::U8 || scale->shape != ss)
      return mismatch(scale, "U8 " + shapeString(ss));
    ref.format = kWeightMxfp4;
    ref.packed = packed->as<uint8_t>();
    ref.scale = scale->as<uint8_t>();
    return Status::ok();
  }

  Expected<const TensorView *> found =
      store.find(name, shape, /*padded=*/w.format == "f32");
  if (!found)
    return found.status();
  const TensorView *t = *found;
  if (!t)
    return missing(name);
  if (w.format == "bf16") {
    if (t->dtype != DType::BF16 || squeezed(t->shape) != squeezed(shape))
      return mismatch(t, "BF16 " + shapeString(shape));
    if (reinterpret_cast<uintptr_t>(t->data) % 2 != 0)
      return makeError("weight '", name,
                       "' is not 2-byte aligned in the "
                       "checkpoint");
    ref.format = kWeightBf16;
    ref.bf16 = t->as<uint16_t>();
    data = t->data;
    bytes = static_cast<uint64_t>(numelOf(shape)) * 2;
    dtype = kVectorBf16;
    return Status::ok();
  }

  if (w.format == "vector") {
    // A small weight the kernels read element by element (VectorRef), kept
    // in the dtype the checkpoint stores: the published K3 stores the conv
    // filters and o_norm F32, Kimi-Linear BF16 (K3.md §10). Never rounded.
    if ((t->dtype != DType::F32 && t->dtype != DType::BF16) ||
        squeezed(t->shape) != squeezed(shape))
      return mismatch(t, "F32 or BF16 " + shapeString(shape));
    const uint64_t size = t->dtype == DType::F32 ? 4 : 2;
    dtype = t->dtype == DType::F32 ? kVectorF32 : kVectorBf16;
    bytes = static_cast<uint64_t>(numelOf(shape)) * size;
    if (reinterpret_cast<uintptr_t>(t->data) % size == 0) {
      data = t->data;
      return Status::ok();
    }
    widened.resize((bytes + 3) / 4); // an aligned copy of the stored bytes
    std::memcpy(widened.data(), t->data, bytes);
    data = reinterpret_cast<const uint8_t *>(widened.data());
    return Status::ok();
  }

  // f32 vectors (dt_bias, A_log, router bias): a checkpoint may pad them
  // (K3 stores A_log as 128 values) or store them as bf16; the kernels read
  // the plan's element count as fp32.
  const int64_t want = numelOf(shape);
  const bool sameShape = squeezed(t->shape) == squeezed(shape);
  if ((t->dtype != DType::F32 && t->dtype != DType::BF16) ||
      (!sameShape && !holdsPadded(*t, shape)))
    return mismatch(t, "F32 (or BF16) " + shapeString(shape));
  bytes = static_cast<uint64_t>(want) * 4;
  dtype = kVectorF32;
  if (t->dtype == DType::F32 && reinterpret_cast<uintptr_t>(t->data) % 4 == 0) {
    data = t->data;
    return Status::ok();
  }
  widened.resize(want);
  if (t->dtype == DType::F32)
    std::memcpy(widened.data(), t->data, bytes);
  else
    for (int64_t i = 0; i < want; ++i)
      widened[i] = bf16ToFloat(t->as<uint16_t>()[i]);
  data = reinterpret_cast<const uint8_t *>(widened.data());
  return Status::ok();
}

} // namespace

Status resolveWeight(const PlanWeight &w, const TensorStore &checkpoint,
                     ResolvedWeight &out) {
  const WeightLookup store(checkpoint, w, out.parts);
  if (!w.stacked()) {
    K3_RETURN_IF_ERROR(resolveMatrixOrVector(w, w.name, w.shape, store, out.ref,
                                             out.data, out.bytes, out.dtype,
                                             out.widened));
    return Status::ok();
  }
  const std::vector<int64_t> each(w.shape.begin() + 1, w.shape.end());
  out.table.resize(w.shape[0]);
  for (int64_t e = 0; e < w.shape[0]; ++e) {
    const uint8_t *data = nullptr;
    uint64_t bytes = 0;
    int32_t dtype = 0;
    std::vector<float> unused;
    PlanWeight one = w;
    one.shape = each;
    K3_RETURN_IF_ERROR(resolveMatrixOrVector(one, expertName(w.name, e), each,
                                             store, out.table[e], data, bytes,
                                             dtype, unused));
    if (w.format == "f32")
      return makeError("weight '", w.name, "': stacked f32 is not supported");
  }
  return Status::ok();
}

PlanMemory::Weight hostWeight(const ResolvedWeight &w) {
  PlanMemory::Weight m;
  m.data = w.data;
  m.bytes = w.bytes;
  m.ref = w.ref;
  m.table = w.table.data();
  m.dtype = w.dtype;
  return m;
}

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

namespace {

/// What one field of a launch was bound to, for the extent check.
struct FieldBinding {
  const PlanArg *arg = nullptr;
  uint64_t availBytes = 0;  ///< from the pointer to the end of its target
  uint64_t elemBytes = 0;   ///< Vector fields: the bound dtype's size
  std::string target;       ///< "buffer 'h0'", for messages
  int64_t weightIndex = -1; ///< Weight / WeightTable fields
};

class Checker final : public ExtentChecker {
public:
  Checker(const KernelInfo &kernel,
          const std::map<std::string, FieldBinding> &bound, const PlanDoc &plan)
      : kernel_(kernel), bound_(bound), plan_(plan) {}

  Status need(const char *field, int64_t elems) override {
    auto it = bound_.find(field);
    if (it == bound_.end())
      return makeError("'", field, "' is required but not given");
    return cover(field, it->second, elems);
  }
  Status optional(const char *field, int64_t elems) override {
    auto it = bound_.find(field);
    return it == bound_.end() ? Status::ok() : cover(field, it->second, elems);
  }
  Status needMatrix(const char *field, int64_t rows, int64_t cols) override {
    auto it = bound_.find(field);
    if (it == bound_.end())
      return makeError("'", field, "' is required but not given");
    const PlanWeight &w = plan_.weights[it->second.weightIndex];
    return matrix(field, w, w.shape, rows, cols);
  }
  Status needTable(const char *field, int64_t count, int64_t rows,
                   int64_t cols) override {
    auto it = bound_.find(field);
    if (it == bound_.end())
      return makeError("'", field, "' is required but not given");
    const PlanWeight &w = plan_.weights[it->second.weightIndex];
    if (count < 0 || w.shape[0] < count)
      return makeError("'", field, "' has ", w.shape[0],
                       " experts but the launch uses ", count);
    return matrix(field, w,
                  std::vector<int64_t>(w.shape.begin() + 1, w.shape.end()),
                  rows, cols);
  }

private:
  Status cover(const char *field, const FieldBinding &b, int64_t elems) {
    const KernelField *f = kernel_.field(field);
    // A Vector field's elements are those of the dtype bound to it.
    const uint64_t es = b.elemBytes ? b.elemBytes : elemTypeSize(f->elem);
    const char *en = !b.elemBytes       ? elemTypeName(f->elem)
                     : b.elemBytes == 4 ? "f32"
                                        : "bf16";
    if (elems < 0 || static_cast<uint64_t>(elems) > b.availBytes / es)
      return makeError("'", field, "' needs ", elems, " ", en, " elements but ",
                       b.target, " holds ", b.availBytes / es,
                       " from its offset");
    return Status::ok();
  }
  Status matrix(const char *field, const PlanWeight &w,
                const std::vector<int64_t> &shape, int64_t rows, int64_t cols) {
    int64_t need = 0;
    const bool fits = rows >= 0 && cols >= 0 &&
                      !__builtin_mul_overflow(rows, cols, &need);
    const bool ok = fits && (w.format == "mxfp4"
                                 ? shape == std::vector<int64_t>{rows, cols}
                                 : numelOf(shape) >= need);
    if (!ok)
      return makeError("'", field, "' is used as [", rows, ", ", cols,
                       "] but weight '", w.name, "' is ", shapeString(w.shape));
    return Status::ok();
  }

  const KernelInfo &kernel_;
  const std::map<std::string, FieldBinding> &bound_;
  const PlanDoc &plan_;
};

template <typename T> void store(void *params, size_t offset, T value) {
  std::memcpy(static_cast<uint8_t *>(params) + offset, &value, sizeof(T));
}

} // namespace

Status checkStepInputs(int64_t token, int64_t pos, int64_t vocab,
                       int64_t maxSeq) {
  if (token < 0 || token >= vocab)
    return makeError("token id ", token, " is outside the vocabulary [0, ",
                     vocab, ")");
  if (pos < 0 || pos >= maxSeq)
    return makeError("position ", pos, " is outside the plan's context [0, ",
                     maxSeq, ")");
  return Status::ok();
}

std::vector<StatePatch> slotStatePatches(const PlanDoc &plan, size_t index,
                                         const BoundLaunch &bound,
                                         const std::vector<bool> &stepLocal) {
  std::vector<StatePatch> out;
  for (const auto &[name, arg] : plan.launches[index].args)
    if (arg.kind == PlanArg::Kind::State &&
        !stepLocal[static_cast<size_t>(arg.index)])
      out.push_back({bound.kernel->field(name)->offset,
                     static_cast<size_t>(arg.index), arg.offset});
  return out;
}

Status bindRowLaunches(const PlanDoc &plan, const PlanMemory &mem,
                       const std::vector<bool> &stepLocal,
                       std::vector<BoundLaunch> &launches,
                       std::vector<std::vector<StatePatch>> &patches) {
  launches.resize(plan.launches.size());
  patches.resize(plan.launches.size());
  for (size_t l = 0; l < plan.launches.size(); ++l) {
    K3_RETURN_IF_ERROR(bindLaunch(plan, l, mem, launches[l]));
    // The sequence's states move with the slot the row serves.
    patches[l] = slotStatePatches(plan, l, launches[l], stepLocal);
  }
  return Status::ok();
}

bool planChainsGreedy(const PlanDoc &plan) {
  for (const PlanLaunch &l : plan.launches)
    if (l.kernel == "argmax")
      for (const auto &[name, arg] : l.args)
        if (name == "step" && arg.kind == PlanArg::Kind::Input &&
            arg.input == PlanInput::Step)
          return true;
  return false;
}

void BoundLaunch::setInputs(int64_t token, int64_t pos) {
  void *p = params->data();
  for (const Input &in : inputs) {
    const int64_t v = in.input == PlanInput::Token ? token
                      : in.input == PlanInput::Pos ? pos
                                                   : pos + 1;
    if (in.is32)
      store<int32_t>(p, in.offset, static_cast<int32_t>(v));
    else
      store<int64_t>(p, in.offset, v);
  }
}

Status bindLaunch(const PlanDoc &plan, size_t index, const PlanMemory &mem,
                  BoundLaunch &launch) {
  const PlanLaunch &l = plan.launches[index];
  const std::string where = "launch " + std::to_string(index) + " (" +
                            l.kernel + (l.op.empty() ? "" : ", op " + l.op) +
                            ")";
  const KernelInfo *kernel = findKernel(l.kernel);
  const CpuEntry cpu = kernel ? findCpuKernel(kernel->name) : nullptr;
  // A collective has no CPU kernel: the backend's communicator runs it.
  if (!kernel || !kernel->make || (!cpu && !kernel->collective))
    return makeError(where, ": kernel '", l.kernel,
                     "' has no implementation in this build");
  launch.kernel = kernel;
  launch.cpu = cpu;
  launch.cpuRows = findCpuRowsKernel(kernel->name);
  launch.cpuChunkRows = findCpuChunkRowsKernel(kernel->name);
  launch.params = kernel->make();
  void *p = launch.params->data();
  std::map<std::string, FieldBinding> bound;

  for (const auto &[name, arg] : l.args) {
    const KernelField &f = *kernel->field(name); // validatePlan checked it
    FieldBinding &b = bound[name];
    b.arg = &arg;
    switch (arg.kind) {
    case PlanArg::Kind::Int:
      if (f.kind == FieldKind::Int64)
        store<int64_t>(p, f.offset, arg.intValue);
      else if (f.kind == FieldKind::Int32)
        store<int32_t>(p, f.offset, static_cast<int32_t>(arg.intValue));
      else
        store<float>(p, f.offset, static_cast<float>(arg.intValue));
      break;
    case PlanArg::Kind::Float:
      store<float>(p, f.offset, static_cast<float>(arg.floatValue));
      break;
    case PlanArg::Kind::Input: {
      if (arg.input == PlanInput::Step) { // a pointer field (validatePlan)
        if (!mem.step)
          return makeError(where, ": '", name,
                           "' takes the step block, which this backend "
                           "does not provide");
        store<void *>(p, f.offset, mem.step);
        b.availBytes = kStepWords * sizeof(int64_t);
        b.target = "the step block";
        break;
      }
      BoundLaunch::Input in;
      in.offset = f.offset;
      in.is32 = f.kind == FieldKind::Int32;
      in.input = arg.input;
      launch.inputs.push_back(in);
      break;
    }
    case PlanArg::Kind::Buffer: {
      const PlanBuffer &buf = plan.buffers[arg.index];
      store<void *>(p, f.offset, mem.arena + buf.offset + arg.offset);
      b.availBytes = buf.bytes - arg.offset;
      b.target = "buffer '" + buf.name + "'";
      break;
    }
    case PlanArg::Kind::State: {
      store<void *>(p, f.offset, mem.states[arg.index] + arg.offset);
      b.availBytes = mem.stateBytes[arg.index] - arg.offset;
      b.target = "state '" + plan.states[arg.index].name + "'";
      break;
    }
    case PlanArg::Kind::Weight: {
      const PlanMemory::Weight &w = mem.weights[arg.index];
      b.weightIndex = arg.index;
      b.target = "weight '" + plan.weights[arg.index].name + "'";
      if (f.kind == FieldKind::Weight) {
        store<WeightRef>(p, f.offset, w.ref);
      } else if (f.kind == FieldKind::WeightTable) {
        store<const WeightRef *>(p, f.offset, w.table);
      } else if (f.kind == FieldKind::Vector) {
        // The dtype of a bf16 / f32 weight is the plan's (any PlanMemory
        // builder gets it right); a "vector" weight's is the checkpoint's.
        const std::string &format = plan.weights[arg.index].format;
        VectorRef v;
        v.data = w.data;
        v.dtype = format == "f32"    ? kVectorF32
                  : format == "bf16" ? kVectorBf16
                                     : w.dtype;
        store<VectorRef>(p, f.offset, v);
        b.availBytes = w.bytes;
        b.elemBytes = v.dtype == kVectorF32 ? 4 : 2;
      } else {
        store<const void *>(p, f.offset, w.data + arg.offset);
        b.availBytes = w.bytes - arg.offset;
      }
      break;
    }
    }
  }

  // Check with every input at its smallest value (token 0, pos 0, length 1:
  // a size or divisor bound to an input must not be 0 at step 0) and at its
  // largest (token vocab - 1, pos max_seq - 1, length max_seq: every extent
  // must cover the last step). Checks are monotone in each size, so the
  // steps in between are covered too. A step overwrites the inputs before
  // each run.
  Checker checker(*kernel, bound, plan);
  if (kernel->check) {
    const bool hasInputs = !launch.inputs.empty();
    if (hasInputs) {
      launch.setInputs(0, 0);
      K3_RETURN_IF_ERROR(kernel->check(p, checker).withContext(
          where + " (with the step inputs at token 0, pos 0, length 1)"));
    }
    launch.setInputs(plan.config.vocabSize - 1, plan.maxSeq - 1);
    K3_RETURN_IF_ERROR(kernel->check(p, checker).withContext(
        hasInputs ? where + " (with the step inputs at token " +
                        std::to_string(plan.config.vocabSize - 1) + ", pos " +
                        std::to_string(plan.maxSeq - 1) + ", length " +
                        std::to_string(plan.maxSeq) + ")"
                  : where));
  }
  return Status::ok();
}

} // namespace k3
