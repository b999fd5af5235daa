//===- K3Dialect.h - The k3 dialect -----------------------------*- C++ -*-===//
//
// Everything of the k3 dialect in one header: dialect, types, attributes,
// enums and ops, generated from the .td files beside this one.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_DIALECT_K3DIALECT_H
#define K3C_DIALECT_K3DIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialect/K3Dialect.h.inc"
#include "dialect/K3Enums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialect/K3Types.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialect/K3Attrs.h.inc"

#define GET_OP_CLASSES
#include "dialect/K3Ops.h.inc"

namespace mlir::k3 {

// The names the importer writes and codegen reads: a k3 module's contract.
/// Module attribute holding the config (writeConfigJson text).
inline constexpr llvm::StringLiteral kConfigAttrName = "k3.config";
/// Module attribute holding the planned maximum context.
inline constexpr llvm::StringLiteral kMaxSeqAttrName = "k3.max_seq";
/// Optional module attribute: the sequences the plan decodes together (absent:
/// one). @decode_step stays one sequence's step; the runtime holds this many
/// slots, each with its own arena and state (docs/PLAN.md "max_batch").
inline constexpr llvm::StringLiteral kMaxBatchAttrName = "k3.max_batch";
/// Optional module attributes of a tensor-parallel module (k3-partition-ranks):
/// the number of ranks and which of them this module computes (absent: one
/// rank, rank 0). docs/PLAN.md "Tensor-parallel plans".
inline constexpr llvm::StringLiteral kRanksAttrName = "k3.ranks";
inline constexpr llvm::StringLiteral kRankAttrName = "k3.rank";
/// Name of the decode-step function.
inline constexpr llvm::StringLiteral kDecodeStepName = "decode_step";

} // namespace mlir::k3

#endif // K3C_DIALECT_K3DIALECT_H
