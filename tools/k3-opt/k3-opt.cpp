//===- k3-opt.cpp - mlir-opt for the k3 dialects --------------------------===//
//
// MlirOptMain with the k3 dialects and every k3c pass registered: the tool
// the lit tests drive, and the one for exploring pass pipelines by hand.
//
//===----------------------------------------------------------------------===//
#include "dialect/K3Dialect.h"
#ifdef K3C_HAVE_PASSES
#include "passes/Passes.h"
#endif
#ifdef K3C_HAVE_CODEGEN
#include "codegen/Codegen.h"
#endif

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::k3::K3Dialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
#ifdef K3C_HAVE_PASSES
  mlir::k3::registerK3Pipelines();
#endif
#ifdef K3C_HAVE_CODEGEN
  mlir::k3::registerCodegen(registry);
#endif
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "k3c optimizer driver: the k3 dialects and passes\n",
      registry));
}
