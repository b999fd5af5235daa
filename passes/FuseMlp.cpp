//===- FuseMlp.cpp - A whole gated MLP into one k3.gated_mlp --------------===//
//
// `linear(x, w1)`, `linear(x, w3)` → `situ`/`swiglu` → `linear(a, w2)` is
// the gated MLP of NUMERICS.md (g, u, a and y rounded to bf16), and so is
// the GatedMlpParams kernel, including its optional input RMSNorm (the
// folded norm of both input projections) and residual epilogue (that of the
// w2 projection). Runs after k3-fuse-norms and k3-fuse-residual so it picks
// both up.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#define DEBUG_TYPE "k3-fuse-mlp"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEMLP
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The input projection producing `v` if only the activation reads it and
/// it has no residual epilogue.
LinearOp inputProjection(Value v) {
  auto lin = v.getDefiningOp<LinearOp>();
  if (!lin || !v.hasOneUse() || lin.getResidual())
    return nullptr;
  return lin;
}

struct FuseGatedMlp : OpRewritePattern<LinearOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(LinearOp down,
                                PatternRewriter &rw) const override {
    Value a = down.getX();
    Operation *act = a.getDefiningOp();
    if (!act || !isa<SituOp, SwigluOp>(act))
      return rw.notifyMatchFailure(down, "x is not a k3.situ/k3.swiglu result");
    if (!a.hasOneUse())
      return rw.notifyMatchFailure(down, "the activation has other users");
    if (down.getNorm())
      return rw.notifyMatchFailure(
          down, "the w2 projection normalises its input (not a gated MLP)");
    if (!down.getResult().getType().getElementType().isBF16())
      return rw.notifyMatchFailure(down, "the w2 projection is not rounded");

    // act(gate, up) is not symmetric: w1 is the gate branch, w3 the up one.
    Value gv = act->getOperand(0), uv = act->getOperand(1);
    LinearOp g = inputProjection(gv), u = inputProjection(uv);
    if (!g || !u)
      return rw.notifyMatchFailure(
          down, "gate or up is not a single-use k3.linear without residual");
    if (g.getX() != u.getX())
      return rw.notifyMatchFailure(down, "w1 and w3 project different inputs");
    if (g.getNorm() != u.getNorm() ||
        (g.getNorm() && g.getEpsAttr() != u.getEpsAttr()))
      return rw.notifyMatchFailure(
          down, "w1 and w3 normalise their input differently");

    Activation kind = Activation::silu;
    FloatAttr beta, linearBeta;
    if (auto situ = dyn_cast<SituOp>(act)) {
      kind = Activation::situ;
      beta = situ.getBetaAttr();
      linearBeta = situ.getLinearBetaAttr();
    }
    rw.setInsertionPoint(down);
    auto fused = GatedMlpOp::create(
        rw, down.getLoc(), down.getResult().getType(), g.getX(), g.getWeight(),
        u.getWeight(), down.getWeight(), g.getNorm(), down.getResidual(),
        ActivationAttr::get(rw.getContext(), kind), beta, linearBeta,
        g.getNorm() ? g.getEpsAttr() : FloatAttr());
    rw.replaceOp(down, fused.getResult());
    rw.eraseOp(act);
    rw.eraseOp(g);
    rw.eraseOp(u);
    return success();
  }
};

struct K3FuseMlpPass : k3::impl::K3FuseMlpBase<K3FuseMlpPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseMlpPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void mlir::k3::populateFuseMlpPatterns(RewritePatternSet &patterns) {
  patterns.add<FuseGatedMlp>(patterns.getContext());
}
