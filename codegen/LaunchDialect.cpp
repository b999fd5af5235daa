//===- LaunchDialect.cpp - k3l ops and verifiers --------------------------===//
//
// The launch verifier is where "bindings fit" is checked: names agree with
// offsets, every pointer offset lies inside its allocation, the launch shape
// is one CUDA accepts, and every argument names a field of the kernel's
// params struct (the runtime's kernel table, runtime/plan/PlanKernels.h).
//
//===----------------------------------------------------------------------===//
#include "codegen/LaunchDialect.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanKernels.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::k3l;

#include "codegen/LaunchDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "codegen/LaunchTypes.cpp.inc"

#define GET_OP_CLASSES
#include "codegen/LaunchOps.cpp.inc"

void K3LDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "codegen/LaunchTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "codegen/LaunchOps.cpp.inc"
      >();
}

LogicalResult AllocOp::verify() {
  // I64Attr accessors are unsigned: read the attributes signed.
  int64_t bytes = getBytesAttr().getInt(), elems = getElemsAttr().getInt();
  if (bytes <= 0)
    return emitOpError() << "expects a positive size but got " << bytes;
  if (elems <= 0)
    return emitOpError() << "expects a positive element count but got "
                         << elems;
  if (getOffsetAttr() && getOffsetAttr().getInt() < 0)
    return emitOpError() << "expects a non-negative offset but got "
                         << getOffsetAttr().getInt();
  return success();
}

LogicalResult WeightOp::verify() {
  StringRef f = getFormat();
  if (f != "bf16" && f != "f32" && f != "mxfp4" && f != "vector")
    return emitOpError()
           << "expects format bf16, f32, vector or mxfp4 but got '" << f << "'";
  if (getShape().empty())
    return emitOpError() << "expects a non-empty shape";
  if (std::optional<ArrayRef<int64_t>> s = getSplit()) {
    if (s->size() != 3)
      return emitOpError() << "expects split = [axis, rank, ranks] but got "
                           << s->size() << " values";
    const int64_t axis = (*s)[0], rank = (*s)[1], ranks = (*s)[2];
    if (axis < 0 || axis >= static_cast<int64_t>(getShape().size()) ||
        ranks < 1 || rank < 0 || rank >= ranks)
      return emitOpError() << "expects a split axis inside the shape and "
                              "0 <= rank < ranks but got axis "
                           << axis << ", rank " << rank << ", ranks " << ranks;
  }
  return success();
}

LogicalResult StateOp::verify() {
  StringRef k = getKind();
  ::k3::StateKind kind;
  if (!::k3::parseStateKind(k.str(), kind))
    return emitOpError() << "expects a known state kind but got '" << k << "'";
  if (getBytesAttr().getInt() <= 0)
    return emitOpError() << "expects a positive size but got "
                         << getBytesAttr().getInt();
  return success();
}

/// Bytes available behind a pointer value, or -1 when unknown (weights).
static int64_t boundBytes(Value v) {
  if (auto a = v.getDefiningOp<AllocOp>())
    return a.getBytesAttr().getInt();
  if (auto s = v.getDefiningOp<StateOp>())
    return s.getBytesAttr().getInt();
  return -1;
}

static bool isPointer(const ::k3::KernelField &f) {
  using ::k3::FieldKind;
  return f.kind == FieldKind::PtrIn || f.kind == FieldKind::PtrOut ||
         f.kind == FieldKind::Weight || f.kind == FieldKind::WeightTable ||
         f.kind == FieldKind::Vector || f.kind == FieldKind::Prefetch;
}

LogicalResult LaunchOp::verify() {
  const ::k3::KernelInfo *sig = ::k3::findKernel(getKernel().str());
  if (!sig)
    return emitOpError() << "expects a kernel of the k3c library but got '"
                         << getKernel() << "'";
  if (getArgNames().size() != getArgs().size() ||
      getArgOffsets().size() != getArgs().size())
    return emitOpError() << "expects one name and one offset per pointer "
                            "argument but got "
                         << getArgs().size() << " arguments, "
                         << getArgNames().size() << " names, "
                         << getArgOffsets().size() << " offsets";
  for (auto [i, v] : llvm::enumerate(getArgs())) {
    StringRef name = cast<StringAttr>(getArgNames()[i]).getValue();
    const ::k3::KernelField *f = sig->field(name.str());
    if (!f || !isPointer(*f))
      return emitOpError() << "expects '" << name << "' to be a pointer field of "
                           << getKernel() << "'s params";
    if (f->kind == ::k3::FieldKind::Prefetch) {
      // What the plan validator asks of an L2Prefetch (runtime/plan/Plan.cpp).
      auto w = v.getDefiningOp<WeightOp>();
      if (!w || (w.getFormat() != "bf16" && w.getFormat() != "f32") ||
          w.getName().contains("{e}"))
        return emitOpError() << "expects '" << name
                             << "' (an L2 prefetch) to be a bf16 or f32 "
                                "k3l.weight of one matrix";
      if (getArgOffsets()[i] % 16 != 0)
        return emitOpError() << "expects the offset of '" << name
                             << "' to be a multiple of 16 but got "
                             << getArgOffsets()[i];
    }
    int64_t off = getArgOffsets()[i];
    int64_t avail = boundBytes(v);
    if (off < 0 || (avail >= 0 && off >= avail))
      return emitOpError() << "binds '" << name << "' at byte " << off
                           << " outside its " << avail << "-byte allocation";
  }
  for (NamedAttribute a : getScalars()) {
    const ::k3::KernelField *f = sig->field(a.getName().str());
    if (!f || isPointer(*f))
      return emitOpError() << "expects '" << a.getName().getValue()
                           << "' to be a scalar field of " << getKernel()
                           << "'s params";
    if (!isa<IntegerAttr, FloatAttr>(a.getValue()))
      return emitOpError() << "expects scalar '" << a.getName().getValue()
                           << "' to be an integer or a float";
    if (a.getName().getValue() == ::k3::kL2PrefetchBytesField) {
      auto n = dyn_cast<IntegerAttr>(a.getValue());
      if (!n || n.getInt() < 0 || n.getInt() % 16 != 0)
        return emitOpError() << "expects l2PrefetchBytes to be a "
                                "non-negative multiple of 16";
    }
  }
  for (NamedAttribute a : getInputs()) {
    auto s = dyn_cast<StringAttr>(a.getValue());
    const ::k3::KernelField *f = sig->field(a.getName().str());
    if (!s || (s.getValue() != "token" && s.getValue() != "pos" &&
               s.getValue() != "length" && s.getValue() != "step"))
      return emitOpError() << "expects input '" << a.getName().getValue()
                           << "' to be token, pos, length or step";
    // The step block is memory (an int64 pointer field); the others are
    // scalars.
    const bool step = s.getValue() == "step";
    if (!f || isPointer(*f) != step ||
        (step && f->elem != ::k3::ElemType::I64))
      return emitOpError() << "expects input '" << a.getName().getValue()
                           << "' to bind " << (step ? "an int64 pointer"
                                                    : "a scalar")
                           << " field of " << getKernel() << "'s params";
  }
  if (getGrid().size() != 3 || getBlock().size() != 3)
    return emitOpError() << "expects 3-D grid and block";
  int64_t threads = 1;
  for (int64_t d : getBlock())
    threads *= d;
  for (int64_t d : llvm::concat<const int64_t>(getGrid(), getBlock()))
    if (d <= 0)
      return emitOpError() << "expects positive grid and block dimensions";
  if (threads > 1024)
    return emitOpError() << "expects at most 1024 threads per block but got "
                         << threads;
  if (std::optional<ArrayRef<int64_t>> cluster = getCluster()) {
    if (cluster->size() != 3)
      return emitOpError() << "expects a 3-D cluster";
    int64_t blocks = 1;
    for (int d = 0; d < 3; ++d) {
      if ((*cluster)[d] <= 0 || getGrid()[d] % (*cluster)[d] != 0)
        return emitOpError()
               << "expects cluster dimension " << d << " to divide the grid's ("
               << getGrid()[d] << ") but got " << (*cluster)[d];
      blocks *= (*cluster)[d];
    }
    if (blocks > 8)
      return emitOpError() << "expects at most 8 blocks per cluster but got "
                           << blocks;
  }
  // Hopper: 227 KiB of shared memory per block at most.
  int64_t smem = getSmemAttr().getInt();
  if (smem < 0 || smem > 232448)
    return emitOpError() << "expects shared memory in [0, 232448] bytes but got "
                         << smem;
  return success();
}
