//===- Codegen.h - Lowering to launches and plan emission -------*- C++ -*-===//
#ifndef K3C_CODEGEN_CODEGEN_H
#define K3C_CODEGEN_CODEGEN_H

#include "codegen/LaunchDialect.h"
#include "dialect/K3Dialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/Pass.h"

#include <string>

namespace mlir::k3 {

#define GEN_PASS_DECL
#include "codegen/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "codegen/Passes.h.inc"

/// Registers the k3l dialect and the codegen passes.
void registerCodegen(DialectRegistry &registry);

/// One row of the kernel report: a launch and the bytes it moves per token.
struct LaunchReport {
  std::string kernel, op;
  int64_t bytesRead = 0, bytesWritten = 0;
};

/// Serialises a planned k3l module (after convert-k3-to-launch and
/// k3-plan-buffers) to the plan format of docs/PLAN.md. `fusion` is recorded.
/// Fills `report` with one row per launch when given.
LogicalResult emitPlan(ModuleOp module, llvm::StringRef fusion,
                       std::string &planText,
                       std::vector<LaunchReport> *report = nullptr);

} // namespace mlir::k3

#endif // K3C_CODEGEN_CODEGEN_H
