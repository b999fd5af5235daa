//===- FuseAttnRes.cpp - AttnRes into the RMSNorm after it ----------------===//
//
// The sublayer input is RMSNorm(AttnRes(...)). With `then_norm(%w)` the
// AttnRes kernel rounds its mix to bf16 and normalises it as `k3.rms_norm`
// does, so the two ops become one launch with the same values. The kernel
// has one eps for both the AttnRes keys and the output norm (both are
// rms_norm_eps in K3), so norms with another eps are left alone.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#define DEBUG_TYPE "k3-fuse-attn-res"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEATTNRES
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

/// Whether `v` is available at `op`: a block argument of a block enclosing
/// `op`, or defined before `op` (or before its ancestor) in the same block.
/// Conservative across blocks of one region.
bool isAvailableAt(Value v, Operation *op) {
  Block *defBlock;
  if (auto arg = dyn_cast<BlockArgument>(v))
    defBlock = arg.getOwner();
  else
    defBlock = v.getDefiningOp()->getBlock();
  Operation *anc = defBlock->findAncestorOpInBlock(*op);
  if (!anc)
    return false;
  if (isa<BlockArgument>(v))
    return true;
  return v.getDefiningOp()->isBeforeInBlock(anc);
}

struct NormIntoAttnRes : OpRewritePattern<RmsNormOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RmsNormOp norm,
                                PatternRewriter &rw) const override {
    auto ar = norm.getX().getDefiningOp<AttnResOp>();
    if (!ar)
      return rw.notifyMatchFailure(norm, "x is not a k3.attn_res result");
    if (!ar.getResult().hasOneUse())
      return rw.notifyMatchFailure(
          norm, "the un-normalised AttnRes result has other users");
    if (ar.getOutNorm())
      return rw.notifyMatchFailure(norm, "the k3.attn_res already has a norm");
    if (ar.getEps().convertToDouble() != norm.getEps().convertToDouble())
      return rw.notifyMatchFailure(
          norm, "the norm's eps differs from the AttnRes eps");

    // Place the fused op where AttnRes read the blocks when the norm weight
    // is available there (it is a k3.weight at the top in practice);
    // otherwise at the norm, but only if nothing in between may commit a
    // block the read would then see.
    Operation *at = ar;
    if (!isAvailableAt(norm.getWeight(), ar)) {
      if (ar->getBlock() != norm->getBlock())
        return rw.notifyMatchFailure(
            norm, "AttnRes and the norm are in different blocks");
      for (Operation *op = ar->getNextNode(); op != norm;
           op = op->getNextNode())
        if (!isMemoryEffectFree(op))
          return rw.notifyMatchFailure(
              norm, "an op between AttnRes and the norm may write the "
                    "blocks, and the norm weight is defined after AttnRes");
      at = norm;
    }
    rw.setInsertionPoint(at);
    auto fused =
        AttnResOp::create(rw, ar.getLoc(), norm.getResult().getType(),
                          ar.getBlocks(), ar.getP(), ar.getNorm(), ar.getProj(),
                          norm.getWeight(), ar.getCountAttr(), ar.getEpsAttr());
    rw.replaceOp(norm, fused.getResult());
    rw.eraseOp(ar);
    return success();
  }
};

struct K3FuseAttnResPass : k3::impl::K3FuseAttnResBase<K3FuseAttnResPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseAttnResPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void mlir::k3::populateFuseAttnResPatterns(RewritePatternSet &patterns) {
  patterns.add<NormIntoAttnRes>(patterns.getContext());
}
