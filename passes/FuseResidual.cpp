//===- FuseResidual.cpp - Residual adds into projection epilogues ---------===//
//
// `k3.add(a, k3.linear(...))` is R(a + R(W x)); the projection kernel's
// residual epilogue computes exactly that (LinearParams: R(R(Wx) + r)). The
// add is commutative in bf16 (R(a+b) == R(b+a)), so either operand may be
// the projection.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#define DEBUG_TYPE "k3-fuse-residual"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSERESIDUAL
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The projection producing `v` if its epilogue can take the add: bf16
/// result (an f32 result is unrounded, an add after it would round twice),
/// no residual yet, and the add its only user (else the plain result is
/// still needed).
LinearOp epilogueCandidate(Value v) {
  auto lin = v.getDefiningOp<LinearOp>();
  if (!lin || lin.getResidual() || !v.hasOneUse() ||
      !lin.getResult().getType().getElementType().isBF16())
    return nullptr;
  return lin;
}

struct AddIntoLinearEpilogue : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &rw) const override {
    LinearOp lhs = epilogueCandidate(add.getLhs());
    LinearOp rhs = epilogueCandidate(add.getRhs());
    if (!lhs && !rhs)
      return rw.notifyMatchFailure(
          add, "neither operand is a single-use bf16 k3.linear without a "
               "residual");
    // Prefer the projection defined later: the earlier one's result is then
    // typically the running residual stream.
    bool useLhs = lhs && (!rhs || (lhs->getBlock() == rhs->getBlock() &&
                                   rhs->isBeforeInBlock(lhs)));
    LinearOp lin = useLhs ? lhs : rhs;
    Value residual = useLhs ? add.getRhs() : add.getLhs();
    // Built at the add: the linear's operands dominate the add through the
    // linear, and the residual dominates it by being its operand.
    rw.setInsertionPoint(add);
    auto fused = LinearOp::create(rw, lin.getLoc(), add.getResult().getType(),
                                  lin.getX(), lin.getWeight(), lin.getNorm(),
                                  residual, lin.getEpsAttr());
    rw.replaceOp(add, fused.getResult());
    rw.eraseOp(lin);
    return success();
  }
};

struct K3FuseResidualPass : k3::impl::K3FuseResidualBase<K3FuseResidualPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseResidualPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void mlir::k3::populateFuseResidualPatterns(RewritePatternSet &patterns) {
  patterns.add<AddIntoLinearEpilogue>(patterns.getContext());
}
