//===- FuseMlp.cpp - (placeholder until the fusion pass lands) -----------------===//
#include "passes/Passes.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEMLP
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
struct K3FuseMlpPass : k3::impl::K3FuseMlpBase<K3FuseMlpPass> {
  void runOnOperation() override {}
};
} // namespace
