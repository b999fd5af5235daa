//===- K3Dialect.cpp - k3 dialect, types and attributes -------------------===//
//
// Registration, the custom syntax of !k3.mxfp4 and !k3.vector_weight, and
// the verifiers of the types and layer-configuration attributes. Op
// verifiers are in K3Ops.cpp.
//
//===----------------------------------------------------------------------===//
#include "dialect/K3Dialect.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::k3;

#include "dialect/K3Dialect.cpp.inc"
#include "dialect/K3Enums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialect/K3Types.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialect/K3Attrs.cpp.inc"

void K3Dialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialect/K3Types.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialect/K3Attrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialect/K3Ops.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

/// Checks that every named dimension is positive.
static LogicalResult
verifyPositive(function_ref<InFlightDiagnostic()> emitError, StringRef what,
               ArrayRef<std::pair<StringRef, int64_t>> dims) {
  for (auto [name, value] : dims)
    if (value <= 0)
      return emitError() << what << " " << name << " must be positive, got "
                         << value;
  return success();
}

LogicalResult
KdaStateType::verify(function_ref<InFlightDiagnostic()> emitError,
                     int64_t heads, int64_t keyDim, int64_t valueDim) {
  return verifyPositive(emitError, "kda_state",
                        {{"heads", heads}, {"key_dim", keyDim},
                         {"value_dim", valueDim}});
}

LogicalResult
ConvStateType::verify(function_ref<InFlightDiagnostic()> emitError,
                      int64_t channels, int64_t window) {
  if (channels <= 0)
    return emitError() << "conv_state channels must be positive, got "
                       << channels;
  // A conv of width 1 keeps no history: window 0 is legal.
  if (window < 0)
    return emitError() << "conv_state window must be >= 0, got " << window;
  return success();
}

LogicalResult
MlaCacheType::verify(function_ref<InFlightDiagnostic()> emitError,
                     int64_t maxSeq, int64_t width) {
  return verifyPositive(emitError, "mla_cache",
                        {{"max_seq", maxSeq}, {"width", width}});
}

LogicalResult
AttnResBlocksType::verify(function_ref<InFlightDiagnostic()> emitError,
                          int64_t maxBlocks, int64_t hidden) {
  return verifyPositive(emitError, "attn_res_blocks",
                        {{"max_blocks", maxBlocks}, {"hidden", hidden}});
}

LogicalResult Mxfp4Type::verify(function_ref<InFlightDiagnostic()> emitError,
                                ArrayRef<int64_t> shape) {
  if (shape.size() < 2 || shape.size() > 3)
    return emitError() << "mxfp4 weight must be [out, in] or [experts, out, "
                          "in], got rank "
                       << shape.size();
  for (int64_t d : shape)
    if (d <= 0)
      return emitError() << "mxfp4 dimensions must be positive, got " << d;
  if (shape.back() % 32 != 0)
    return emitError() << "mxfp4 input dimension must be a multiple of 32 "
                          "(one E8M0 scale per 32 inputs), got "
                       << shape.back();
  return success();
}

int64_t Mxfp4Type::getSizeInBytes() const {
  int64_t n = 1;
  for (int64_t d : getShape())
    n *= d;
  return n / 2 + n / 32;
}

Type Mxfp4Type::parse(AsmParser &parser) {
  SmallVector<int64_t> shape;
  if (parser.parseLess() ||
      parser.parseDimensionList(shape, /*allowDynamic=*/false,
                                /*withTrailingX=*/false) ||
      parser.parseGreater())
    return {};
  return Mxfp4Type::getChecked(
      [&] { return parser.emitError(parser.getNameLoc()); },
      parser.getContext(), shape);
}

void Mxfp4Type::print(AsmPrinter &printer) const {
  printer << "<";
  llvm::interleave(getShape(), printer, "x");
  printer << ">";
}

LogicalResult
VectorWeightType::verify(function_ref<InFlightDiagnostic()> emitError,
                         ArrayRef<int64_t> shape) {
  if (shape.empty())
    return emitError() << "vector_weight needs a non-empty shape";
  for (int64_t d : shape)
    if (d <= 0)
      return emitError() << "vector_weight dimensions must be positive, got "
                         << d;
  return success();
}

Type VectorWeightType::parse(AsmParser &parser) {
  SmallVector<int64_t> shape;
  if (parser.parseLess() ||
      parser.parseDimensionList(shape, /*allowDynamic=*/false,
                                /*withTrailingX=*/false) ||
      parser.parseGreater())
    return {};
  return VectorWeightType::getChecked(
      [&] { return parser.emitError(parser.getNameLoc()); },
      parser.getContext(), shape);
}

void VectorWeightType::print(AsmPrinter &printer) const {
  printer << "<";
  llvm::interleave(getShape(), printer, "x");
  printer << ">";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

LogicalResult
KdaConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      int64_t heads, int64_t headDim, int64_t conv,
                      bool fullRankGate, FloatAttr lowerBound) {
  if (failed(verifyPositive(emitError, "kda",
                            {{"heads", heads}, {"head_dim", headDim}})))
    return failure();
  if (conv < 1)
    return emitError() << "kda conv width must be >= 1, got " << conv;
  if (lowerBound) {
    double lb = lowerBound.getValueAsDouble();
    if (!(lb >= -5.0 && lb < 0.0))
      return emitError() << "kda lower_bound must be in [-5, 0), got " << lb;
  }
  return success();
}

LogicalResult
MlaConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      int64_t heads, int64_t qLora, int64_t kvLora,
                      int64_t nope, int64_t rope, int64_t vDim,
                      bool outputGate) {
  if (qLora < 0)
    return emitError() << "mla q_lora must be >= 0 (0 = direct q_proj), got "
                       << qLora;
  return verifyPositive(emitError, "mla",
                        {{"heads", heads}, {"kv_lora", kvLora},
                         {"nope", nope}, {"rope", rope}, {"v_dim", vDim}});
}

LogicalResult SplitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                int64_t axis, int64_t rank, int64_t ranks) {
  if (ranks < 1)
    return emitError() << "split ranks must be >= 1, got " << ranks;
  if (rank < 0 || rank >= ranks)
    return emitError() << "split rank must be in [0, " << ranks << "), got "
                       << rank;
  if (axis < 0)
    return emitError() << "split axis must be >= 0, got " << axis;
  return success();
}

LogicalResult
MoeConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      int64_t experts, int64_t topK, int64_t intermediate,
                      int64_t shared, bool renormalize, FloatAttr scaling) {
  if (failed(verifyPositive(emitError, "moe",
                            {{"experts", experts}, {"top_k", topK},
                             {"intermediate", intermediate}})))
    return failure();
  if (topK > experts)
    return emitError() << "moe top_k (" << topK
                       << ") must not exceed experts (" << experts << ")";
  if (shared < 0)
    return emitError() << "moe shared must be >= 0, got " << shared;
  if (!scaling || !(scaling.getValueAsDouble() > 0.0))
    return emitError() << "moe scaling must be positive";
  return success();
}
