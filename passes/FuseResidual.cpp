//===- FuseResidual.cpp - (placeholder until the fusion pass lands) -----------------===//
#include "passes/Passes.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSERESIDUAL
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
struct K3FuseResidualPass : k3::impl::K3FuseResidualBase<K3FuseResidualPass> {
  void runOnOperation() override {}
};
} // namespace
