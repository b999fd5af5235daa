//===- FuseNorms.cpp - Fold RMSNorm into the projections it feeds ---------===//
//
// A `k3.rms_norm` read only as the input of projections is recomputed by
// each projection kernel from the un-normalised vector (LinearParams'
// normWeight), which rounds exactly as `rms_norm` does: R(R(x·rsqrt)·w). So
// folding it changes no value and saves a launch and a round trip of the
// normalised vector through memory.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#define DEBUG_TYPE "k3-fuse-norms"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSENORMS
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

/// rms_norm → every user a `k3.linear` taking it as `x` and without a norm:
/// each linear gets `norm(weight)` and the eps; the norm goes away.
struct FoldNormIntoLinears : OpRewritePattern<RmsNormOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(RmsNormOp norm,
                                PatternRewriter &rw) const override {
    Value n = norm.getResult();
    if (n.use_empty())
      return rw.notifyMatchFailure(norm, "the norm has no users");
    SmallVector<LinearOp> linears;
    for (OpOperand &use : n.getUses()) {
      auto lin = dyn_cast<LinearOp>(use.getOwner());
      if (!lin)
        return rw.notifyMatchFailure(norm, "a user is not a k3.linear");
      // Only the input can be normalised on the fly, not the residual.
      if (use.getOperandNumber() != lin.getXMutable().getOperandNumber())
        return rw.notifyMatchFailure(norm,
                                     "a k3.linear uses the norm but not as x");
      if (lin.getNorm())
        return rw.notifyMatchFailure(norm, "a k3.linear already has a norm");
      linears.push_back(lin);
    }
    for (LinearOp lin : linears) {
      rw.setInsertionPoint(lin);
      auto fused =
          LinearOp::create(rw, lin.getLoc(), lin.getResult().getType(),
                           norm.getX(), lin.getWeight(), norm.getWeight(),
                           lin.getResidual(), norm.getEpsAttr());
      rw.replaceOp(lin, fused.getResult());
    }
    rw.eraseOp(norm);
    return success();
  }
};

struct K3FuseNormsPass : k3::impl::K3FuseNormsBase<K3FuseNormsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseNormsPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void mlir::k3::populateFuseNormsPatterns(RewritePatternSet &patterns) {
  patterns.add<FoldNormIntoLinears>(patterns.getContext());
}
