//===- Passes.h - k3 to k3 transformations ----------------------*- C++ -*-===//
#ifndef K3C_PASSES_PASSES_H
#define K3C_PASSES_PASSES_H

#include "dialect/K3Dialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <memory>
#include <string>

namespace mlir {
namespace k3 {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// Fine patterns of k3-decompose-layers.
void populateDecomposeLayersPatterns(RewritePatternSet &patterns);

/// How far fusion goes; strategies can be compared on the same model.
enum class FusionStrategy { None, Default, Max };

/// Parses "none" | "default" | "max".
bool parseFusionStrategy(llvm::StringRef text, FusionStrategy &out);
llvm::StringRef stringifyFusionStrategy(FusionStrategy s);

/// The k3 → fused k3 pipeline of a strategy: decompose, fuse, canonicalise.
void buildK3FusionPipeline(OpPassManager &pm, FusionStrategy strategy);

/// The fusion pipeline of `strategy` with the test mutant `kind` of
/// k3-inject-mutant inserted: before the pipeline for "attn-res-skip" and
/// "skip-layer" (coarse IR), after it for "router-expert0" (which marks the
/// decomposed or fused routers). Fails, building nothing, on an unknown kind.
LogicalResult buildK3MutantPipeline(OpPassManager &pm, FusionStrategy strategy,
                                    llvm::StringRef kind, int64_t layer);

/// Registers the passes and the pipelines "k3-fusion-none|default|max".
void registerK3Pipelines();

/// Fusion patterns, one set per k3-fuse-* pass (see Passes.td); each rewrite
/// keeps every rounding point of the chain it replaces.
void populateFuseNormsPatterns(RewritePatternSet &patterns);
void populateFuseKdaPatterns(RewritePatternSet &patterns,
                             bool lowRankGates = true);
void populateFuseMlaPatterns(RewritePatternSet &patterns);
void populateFuseMoePatterns(RewritePatternSet &patterns);
void populateFuseMoeFfnPatterns(RewritePatternSet &patterns);
void populateFuseResidualPatterns(RewritePatternSet &patterns);
void populateFuseAttnResPatterns(RewritePatternSet &patterns);
void populateFuseMlpPatterns(RewritePatternSet &patterns);

} // namespace k3
} // namespace mlir

#endif // K3C_PASSES_PASSES_H
