//===- FuseMoe.cpp - (placeholder until the fusion pass lands) -----------------===//
#include "passes/Passes.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEMOE
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
struct K3FuseMoePass : k3::impl::K3FuseMoeBase<K3FuseMoePass> {
  void runOnOperation() override {}
};
} // namespace
