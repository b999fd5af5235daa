//===- FuseMla.cpp - (placeholder until the fusion pass lands) -----------------===//
#include "passes/Passes.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEMLA
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
struct K3FuseMlaPass : k3::impl::K3FuseMlaBase<K3FuseMlaPass> {
  void runOnOperation() override {}
};
} // namespace
