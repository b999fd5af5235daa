//===- FuseMla.cpp - MLA latent projection, append, attend and gate -------===//
//
// After k3-decompose-layers an MLA mixer is, between its projections:
//
//   kv = linear(h, kv_a)                         (stays: see below)
//   mla_cache_append(kv, kv_a_norm, cache, pos)
//   o  = mla_attend(q, kv_b, cache, pos)
//   o' = mul_sigmoid(o, gt)                      (gated layers)
//
// `k3.mla_decode` does the append, attend and gate with the same rounding
// (the cache row and o in bf16; the gated output R(R(o)·sigmoid(gt)), as
// mla_attend's own gate). The kv_a projection is left a `k3.linear`: it reads
// the same normed input as the query projection, so k3-fuse-norms folds the
// layer's input norm into both and k3-fuse-projections makes them one
// launch. The append must precede the attend (the new row is attended); the
// fused op keeps that order internally, and the rewrite checks that no other
// op touches the cache between the append and the point where the fused op
// is placed.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#define DEBUG_TYPE "k3-fuse-mla"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEMLA
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

struct FuseMlaChain : OpRewritePattern<MlaAttendOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MlaAttendOp attend,
                                PatternRewriter &rw) const override {
    Block *block = attend->getBlock();
    Value cache = attend.getCache();

    // The append this attend reads: the last one before it, in this block,
    // at the same position.
    MlaCacheAppendOp append;
    for (Operation *user : cache.getUsers()) {
      auto a = dyn_cast<MlaCacheAppendOp>(user);
      if (!a || a->getBlock() != block || !a->isBeforeInBlock(attend) ||
          a.getPos() != attend.getPos())
        continue;
      if (!append || append->isBeforeInBlock(a))
        append = a;
    }
    if (!append)
      return rw.notifyMatchFailure(
          attend, "no k3.mla_cache_append at the same pos before the attend");

    MlaConfigAttr c = attend.getConfig();
    if (cast<RankedTensorType>(append.getNorm().getType()).getShape()[0] !=
        c.getKvLora())
      return rw.notifyMatchFailure(
          attend, "the append's kv_a_norm width differs from config kv_lora");

    // The output gate: already on the attend, or the mul_sigmoid that is the
    // attend's only user (with the attend result as the gated value).
    Value gate = attend.getGate();
    Operation *root = attend;
    if (!gate && attend.getResult().hasOneUse()) {
      auto ms = dyn_cast<MulSigmoidOp>(*attend.getResult().getUsers().begin());
      if (ms && ms.getX() == attend.getResult() &&
          ms.getGate() != attend.getResult() && ms->getBlock() == block) {
        gate = ms.getGate();
        root = ms;
      }
    }

    // The append and the attend both move down to `root`.
    for (Operation *user : cache.getUsers()) {
      if (user == append || user == attend)
        continue;
      Operation *anc = block->findAncestorOpInBlock(*user);
      if (anc && append->isBeforeInBlock(anc) && anc->isBeforeInBlock(root))
        return rw.notifyMatchFailure(
            attend, "another op uses the cache between the append and the "
                    "attend or gate");
    }

    // The config describes the fused op: output_gate = it has the gate.
    auto config = MlaConfigAttr::get(
        rw.getContext(), c.getHeads(), c.getQLora(), c.getKvLora(), c.getNope(),
        c.getRope(), c.getVDim(), static_cast<bool>(gate));
    rw.setInsertionPoint(root);
    auto fused = MlaDecodeOp::create(
        rw, attend.getLoc(), root->getResult(0).getType(), append.getKv(),
        attend.getQ(), append.getNorm(), attend.getKvBProj(), cache,
        attend.getPos(), gate, config, append.getEpsAttr());
    rw.replaceOp(root, fused.getResult());
    if (root != attend)
      rw.eraseOp(attend);
    rw.eraseOp(append);
    return success();
  }
};

struct K3FuseMlaPass : k3::impl::K3FuseMlaBase<K3FuseMlaPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseMlaPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void mlir::k3::populateFuseMlaPatterns(RewritePatternSet &patterns) {
  patterns.add<FuseMlaChain>(patterns.getContext());
}
