//===- FuseKda.cpp - (placeholder until the fusion pass lands) -----------------===//
#include "passes/Passes.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEKDA
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
struct K3FuseKdaPass : k3::impl::K3FuseKdaBase<K3FuseKdaPass> {
  void runOnOperation() override {}
};
} // namespace
