//===- InjectMutant.cpp - Deliberately wrong decode steps for tests -------===//
//
// A mutant is a graph that is wrong on purpose: it still compiles and runs,
// but computes another model. Tests use them to show that the end-to-end
// comparison with the float64 reference notices a wrong graph (a check that
// accepts every mutant proves nothing). See Passes.td for the kinds.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <optional>
#include <string>

#define DEBUG_TYPE "k3-inject-mutant"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3INJECTMUTANT
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The discardable attribute that convert-k3-to-launch turns into the
/// router's `forceExpert` scalar.
constexpr llvm::StringLiteral kForceExpertAttr = "k3.mutant.force_expert";

/// The layer index in a location such as
/// "language_model.model.layers.3.self_attn.kda", looking through fused and
/// call-site locations; std::nullopt when it names no layer.
std::optional<int64_t> layerOf(Location loc) {
  std::optional<int64_t> found;
  loc->walk([&](Location l) {
    auto name = dyn_cast<NameLoc>(l);
    if (!name)
      return WalkResult::advance();
    StringRef s = name.getName().getValue();
    size_t at = s.find("layers.");
    if (at == StringRef::npos)
      return WalkResult::advance();
    StringRef digits =
        s.substr(at + 7).take_while([](char c) { return llvm::isDigit(c); });
    int64_t n;
    if (digits.empty() || digits.getAsInteger(10, n))
      return WalkResult::advance();
    found = n;
    return WalkResult::interrupt();
  });
  return found;
}

/// Whether `op` is a whole sublayer of the coarse IR: a mixer or an FFN.
bool isSublayer(Operation *op) {
  return isa<KdaOp, MlaOp, DenseMlpOp, MoeOp, LatentMoeOp>(op);
}

class InjectMutantPass
    : public mlir::k3::impl::K3InjectMutantBase<InjectMutantPass> {
public:
  using K3InjectMutantBase::K3InjectMutantBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    LogicalResult r = failure();
    if (kind == "attn-res-skip")
      r = attnResSkip(fn);
    else if (kind == "skip-layer")
      r = skipLayer(fn);
    else if (kind == "router-expert0")
      r = routerExpert0(fn);
    else if (kind == "tp-no-all-reduce")
      r = tpNoAllReduce(fn);
    else
      r = fn.emitError("k3-inject-mutant: unknown kind '")
          << kind
          << "' (expected attn-res-skip | router-expert0 | skip-layer | "
             "tp-no-all-reduce)";
    if (failed(r))
      signalPassFailure();
  }

private:
  /// Every AttnRes mix becomes its partial source `p`.
  LogicalResult attnResSkip(func::FuncOp fn) {
    SmallVector<AttnResOp> ops;
    fn.walk([&](AttnResOp op) { ops.push_back(op); });
    if (ops.empty())
      return fn.emitError("k3-inject-mutant: attn-res-skip needs k3.attn_res "
                          "ops, the function has none");
    for (AttnResOp op : ops) {
      if (op.getOutNorm())
        return op.emitError("k3-inject-mutant: attn-res-skip runs on the "
                            "coarse IR, before k3-fuse-attn-res");
      op.getResult().replaceAllUsesWith(op.getP());
      op.erase();
    }
    return success();
  }

  /// The residual adds of layer `layer` become their residual operand.
  LogicalResult skipLayer(func::FuncOp fn) {
    int64_t numLayers = 0;
    SmallVector<Operation *> sublayers;
    fn.walk([&](Operation *op) {
      if (!isSublayer(op))
        return;
      std::optional<int64_t> l = layerOf(op->getLoc());
      if (!l)
        return;
      numLayers = std::max(numLayers, *l + 1);
      if (*l == layer)
        sublayers.push_back(op);
    });
    if (layer < 0 || layer >= numLayers)
      return fn.emitError("k3-inject-mutant: skip-layer layer ")
             << static_cast<int64_t>(layer)
             << " is out of range (the function has " << numLayers
             << " layers with a mixer or FFN named by a 'layers.N.' location)";

    // (add, the sublayer output it adds); the residual operand is read only
    // when the add is replaced, as it may itself be an earlier replaced add.
    SmallVector<std::pair<AddOp, Value>> adds;
    for (Operation *sub : sublayers) {
      Value out = sub->getResult(0);
      size_t before = adds.size();
      for (Operation *user : out.getUsers())
        if (auto add = dyn_cast<AddOp>(user))
          adds.push_back({add, out});
      if (adds.size() == before)
        return fn.emitError("k3-inject-mutant: skip-layer: the ")
               << sub->getName() << " of layer " << static_cast<int64_t>(layer)
               << " feeds no residual add (an AttnRes commit layer, where "
                  "p = a, has no residual around its mixer); pick another "
                  "layer";
    }
    if (adds.empty())
      return fn.emitError("k3-inject-mutant: skip-layer: layer ")
             << static_cast<int64_t>(layer) << " has no residual adds";
    for (auto [add, out] : adds) {
      Value residual = add.getLhs() == out ? add.getRhs() : add.getLhs();
      add.getResult().replaceAllUsesWith(residual);
      add.erase();
    }
    return success();
  }

  /// C7: each split mixer's partial output (its rank's part of o_proj's
  /// inputs) is used as the whole: its all-reduce is dropped.
  LogicalResult tpNoAllReduce(func::FuncOp fn) {
    SmallVector<AllReduceOp> ops;
    fn.walk([&](AllReduceOp op) {
      if (isa_and_nonnull<KdaOp, MlaOp>(op.getPartial().getDefiningOp()))
        ops.push_back(op);
    });
    if (ops.empty())
      return fn.emitError("k3-inject-mutant: tp-no-all-reduce found no "
                          "k3.all_reduce after a k3.kda or k3.mla; run it "
                          "after k3-partition-ranks with ranks > 1, on the "
                          "coarse IR");
    for (AllReduceOp op : ops) {
      op.getResult().replaceAllUsesWith(op.getPartial());
      op.erase();
    }
    return success();
  }

  /// Every router picks expert 0 in every slot.
  LogicalResult routerExpert0(func::FuncOp fn) {
    Builder b(fn.getContext());
    int64_t marked = 0;
    fn.walk([&](Operation *op) {
      if (!isa<RouterOp, RoutedExpertsOp, MoeFfnOp>(op))
        return;
      op->setAttr(kForceExpertAttr, b.getI64IntegerAttr(0));
      ++marked;
    });
    if (marked == 0)
      return fn.emitError("k3-inject-mutant: router-expert0 found no "
                          "k3.router, k3.routed_experts or k3.moe_ffn; run it after "
                          "k3-decompose-layers on a model with MoE layers");
    return success();
  }
};

} // namespace

LogicalResult mlir::k3::buildK3MutantPipeline(OpPassManager &pm,
                                              FusionStrategy strategy,
                                              llvm::StringRef kind,
                                              int64_t layer) {
  K3InjectMutantOptions options;
  options.kind = kind.str();
  options.layer = layer;
  if (kind == "attn-res-skip" || kind == "skip-layer" ||
      kind == "tp-no-all-reduce") {
    pm.nest<func::FuncOp>().addPass(createK3InjectMutant(options));
    buildK3FusionPipeline(pm, strategy);
    return success();
  }
  if (kind != "router-expert0")
    return failure();
  // The routers exist only after decomposition; mark them (k3.router, or
  // the k3.routed_experts a fusion made of them) once the strategy's
  // pipeline has run, so every strategy is mutated the same way.
  buildK3FusionPipeline(pm, strategy);
  pm.nest<func::FuncOp>().addPass(createK3InjectMutant(options));
  return success();
}
