//===- FuseNorms.cpp - (placeholder until the fusion pass lands) -----------------===//
#include "passes/Passes.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSENORMS
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
struct K3FuseNormsPass : k3::impl::K3FuseNormsBase<K3FuseNormsPass> {
  void runOnOperation() override {}
};
} // namespace
