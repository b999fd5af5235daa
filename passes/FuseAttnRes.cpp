//===- FuseAttnRes.cpp - (placeholder until the fusion pass lands) -----------------===//
#include "passes/Passes.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEATTNRES
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
struct K3FuseAttnResPass : k3::impl::K3FuseAttnResBase<K3FuseAttnResPass> {
  void runOnOperation() override {}
};
} // namespace
