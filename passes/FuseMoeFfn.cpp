//===- FuseMoeFfn.cpp - A MoE layer's whole FFN into one k3.moe_ffn -------===//
//
// After k3-fuse-moe and k3-fuse-residual the FFN half of a Kimi-Linear MoE
// layer is seven ops: the post-attention norm, the routed experts, the
// shared expert's two input projections, its activation, its down
// projection (whose residual epilogue adds the routed mix) and the layer's
// residual add. `k3.moe_ffn` is the same chain, rounding for rounding
// (MoeExpertsParams): the norm moves into the router and the expert kernel,
// which both read the un-normalised h; the shared expert becomes extra work
// items of the expert kernel; the two adds become its epilogue. Latent MoE
// (K3) does not match: its routed mix goes through the latent norm and
// up-projection before the shared expert is added.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#define DEBUG_TYPE "k3-fuse-moe-ffn"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEMOEFFN
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

/// A plain projection of `x` (no norm, no residual) whose only user is the
/// activation.
LinearOp sharedInput(Value v, Value x) {
  auto lin = v.getDefiningOp<LinearOp>();
  if (!lin || !v.hasOneUse() || lin.getNorm() || lin.getResidual() ||
      lin.getX() != x)
    return nullptr;
  return lin;
}

struct FuseMoeFfn : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &rw) const override {
    // Either operand of the residual add may be the block's input h.
    for (int side = 0; side < 2; ++side) {
      Value h = add->getOperand(side), t = add->getOperand(1 - side);
      if (succeeded(tryFuse(add, h, t, rw)))
        return success();
    }
    return rw.notifyMatchFailure(add, "not the residual add of a MoE FFN");
  }

private:
  LogicalResult tryFuse(AddOp add, Value h, Value t,
                        PatternRewriter &rw) const {
    if (!t.hasOneUse())
      return failure();
    // With shared experts t is their down projection, whose residual
    // epilogue adds the routed mix; without, t is the routed mix itself.
    LinearOp down = t.getDefiningOp<LinearOp>();
    Operation *act = nullptr;
    LinearOp g, u;
    Value routed = t;
    if (down) {
      if (!down.getResidual() || down.getNorm() ||
          !down.getResult().getType().getElementType().isBF16())
        return failure();
      routed = down.getResidual();
      act = down.getX().getDefiningOp();
      if (!act || !isa<SituOp, SwigluOp>(act) || !down.getX().hasOneUse())
        return failure();
    }
    auto experts = routed.getDefiningOp<RoutedExpertsOp>();
    if (!experts || !routed.hasOneUse() || experts.getNorm() ||
        experts.getX() != experts.getZ())
      return failure();
    Value n = experts.getX();
    auto norm = n.getDefiningOp<RmsNormOp>();
    if (!norm || norm.getX() != h)
      return failure();
    if (down) {
      g = sharedInput(act->getOperand(0), n);
      u = sharedInput(act->getOperand(1), n);
      if (!g || !u)
        return failure();
    }
    // The norm's result must not be needed by anything the fusion removes
    // it from: only the experts (x and z) and the shared projections.
    for (Operation *user : n.getUsers())
      if (user != experts && user != g && user != u)
        return failure();

    Activation kind = experts.getAct();
    FloatAttr beta = experts.getSituBetaAttr(),
              linearBeta = experts.getSituLinearBetaAttr();
    if (act) {
      // One activation for all experts: the kernel has one field.
      Activation sharedKind = Activation::silu;
      FloatAttr sb, slb;
      if (auto situ = dyn_cast<SituOp>(act)) {
        sharedKind = Activation::situ;
        sb = situ.getBetaAttr();
        slb = situ.getLinearBetaAttr();
      }
      if (sharedKind != kind || sb != beta || slb != linearBeta)
        return failure();
    }

    rw.setInsertionPoint(add);
    auto fused = MoeFfnOp::create(
        rw, add.getLoc(), add.getResult().getType(), h, norm.getWeight(),
        experts.getGate(), experts.getBias(), experts.getW1(),
        experts.getW3(), experts.getW2(), g ? g.getWeight() : Value(),
        u ? u.getWeight() : Value(), down ? down.getWeight() : Value(),
        experts.getTopKAttr(), experts.getRenormalizeAttr(),
        experts.getScalingAttr(), norm.getEpsAttr(), experts.getActAttr(),
        beta, linearBeta);
    rw.replaceOp(add, fused.getResult());
    if (down) {
      rw.eraseOp(down);
      rw.eraseOp(act);
      rw.eraseOp(g);
      rw.eraseOp(u);
    }
    rw.eraseOp(experts);
    rw.eraseOp(norm);
    return success();
  }
};

struct K3FuseMoeFfnPass : k3::impl::K3FuseMoeFfnBase<K3FuseMoeFfnPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseMoeFfnPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void mlir::k3::populateFuseMoeFfnPatterns(RewritePatternSet &patterns) {
  patterns.add<FuseMoeFfn>(patterns.getContext());
}
