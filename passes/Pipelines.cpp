//===- Pipelines.cpp - Fusion strategies as pass pipelines ----------------===//
//
// A fusion strategy is a pass pipeline over the imported decode step. All of
// them start by decomposing the coarse ops, so `none` is the finest graph
// the kernels support; `default` fuses what every backend benefits from;
// `max` also fuses AttnRes into its norm and whole gated MLPs into one
// kernel. Each is registered as a named pipeline for k3-opt as well.
//
// Both `default` and `max` end with k3-fuse-projections: grouping the
// projections of one input into one linear_multi launch changes no bit (each
// entry is `linear` with the same input and norm), normalises the input once
// instead of per projection on either backend, and saves a launch per
// projection. That is what `default` is for; `none` keeps one launch per
// projection, the finest graph to compare and to profile kernel by kernel.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;
using namespace mlir::k3;

bool mlir::k3::parseFusionStrategy(llvm::StringRef text, FusionStrategy &out) {
  if (text == "none")
    out = FusionStrategy::None;
  else if (text == "default")
    out = FusionStrategy::Default;
  else if (text == "max")
    out = FusionStrategy::Max;
  else
    return false;
  return true;
}

llvm::StringRef mlir::k3::stringifyFusionStrategy(FusionStrategy s) {
  switch (s) {
  case FusionStrategy::None:
    return "none";
  case FusionStrategy::Default:
    return "default";
  case FusionStrategy::Max:
    return "max";
  }
  return "?";
}

void mlir::k3::buildK3FusionPipeline(OpPassManager &pm,
                                     FusionStrategy strategy) {
  OpPassManager &fn = pm.nest<func::FuncOp>();
  fn.addPass(createK3DecomposeLayers());
  fn.addPass(createCSEPass());
  if (strategy != FusionStrategy::None) {
    // Order matters: the KDA/MLA/MoE matchers look at the unfused chains, and
    // the norm fusion runs after them so it folds only the norms left over.
    // AttnRes must claim the norm after it before k3-fuse-norms folds that
    // norm into the projections. The gated MLP fusion comes last so that it
    // takes over the input norm and residual epilogue its projections got
    // from k3-fuse-norms and k3-fuse-residual.
    fn.addPass(createK3FuseKda());
    fn.addPass(createK3FuseMla());
    fn.addPass(createK3FuseMoe());
    if (strategy == FusionStrategy::Max)
      fn.addPass(createK3FuseAttnRes());
    fn.addPass(createK3FuseNorms());
    fn.addPass(createK3FuseResidual());
    // After the residual fusion (the shared expert's down projection then
    // carries the routed mix) and before the MLP and projection fusions
    // would claim the shared expert's projections.
    fn.addPass(createK3FuseMoeFfn());
    if (strategy == FusionStrategy::Max)
      fn.addPass(createK3FuseMlp());
    // Horizontal fusion last: the matchers above look for single
    // projections (kv_a in the MLA chain, w1/w3 of a gated MLP), so only
    // what they left is grouped into linear_multi launches.
    fn.addPass(createK3FuseProjections());
  }
  fn.addPass(createCanonicalizerPass());
  fn.addPass(createCSEPass());
}

void mlir::k3::registerK3Pipelines() {
  registerK3Passes();
  for (FusionStrategy s :
       {FusionStrategy::None, FusionStrategy::Default, FusionStrategy::Max}) {
    std::string name = ("k3-fusion-" + stringifyFusionStrategy(s)).str();
    PassPipelineRegistration<>(
        name, "decompose and fuse the k3 decode step (strategy '" +
                  stringifyFusionStrategy(s).str() + "')",
        [s](OpPassManager &pm) { buildK3FusionPipeline(pm, s); });
  }
}
