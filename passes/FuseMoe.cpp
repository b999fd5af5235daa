//===- FuseMoe.cpp - Router, routed experts and latent norm into one op ---===//
//
// After k3-decompose-layers the routed part of a MoE layer is
//
//   ids, w = router(x, gate, bias)
//   r = expert_mix(z, ids, w, w1, w3, w2)        (z = x, or R(down x))
//   r = rms_norm(r, routed_expert_norm)           (latent_moe_use_norm)
//
// `k3.routed_experts` is this chain with the same rounding (router in fp32,
// expert outputs and the mix in bf16, the norm as rms_norm); the ids and
// weights never leave the kernel.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#define DEBUG_TYPE "k3-fuse-moe"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEMOE
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

struct FuseRoutedExperts : OpRewritePattern<ExpertMixOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ExpertMixOp mix,
                                PatternRewriter &rw) const override {
    auto router = mix.getIds().getDefiningOp<RouterOp>();
    if (!router || mix.getWeights() != router.getWeights())
      return rw.notifyMatchFailure(
          mix, "ids and weights are not the results of one k3.router");
    if (!router.getIds().hasOneUse() || !router.getWeights().hasOneUse())
      return rw.notifyMatchFailure(
          mix, "the router's ids or weights have other users");

    // The latent norm folds in when it normalises the mix and nothing else
    // reads the un-normalised mix.
    Operation *root = mix;
    Value normWeight;
    FloatAttr eps;
    if (mix.getResult().hasOneUse()) {
      auto norm = dyn_cast<RmsNormOp>(*mix.getResult().getUsers().begin());
      if (norm && norm.getX() == mix.getResult() &&
          norm.getWeight() != mix.getResult()) {
        root = norm;
        normWeight = norm.getWeight();
        eps = norm.getEpsAttr();
      }
    }

    rw.setInsertionPoint(root);
    auto fused = RoutedExpertsOp::create(
        rw, mix.getLoc(), root->getResult(0).getType(), router.getX(),
        mix.getX(), router.getGate(), router.getBias(), mix.getW1(),
        mix.getW3(), mix.getW2(), normWeight, router.getTopKAttr(),
        router.getRenormalizeAttr(), router.getScalingAttr(), mix.getActAttr(),
        mix.getSituBetaAttr(), mix.getSituLinearBetaAttr(), eps);
    rw.replaceOp(root, fused.getResult());
    if (root != mix)
      rw.eraseOp(mix);
    rw.eraseOp(router);
    return success();
  }
};

struct K3FuseMoePass : k3::impl::K3FuseMoeBase<K3FuseMoePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseMoePatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void mlir::k3::populateFuseMoePatterns(RewritePatternSet &patterns) {
  patterns.add<FuseRoutedExperts>(patterns.getContext());
}
