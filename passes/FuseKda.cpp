//===- FuseKda.cpp - The KDA token step into one k3.kda_decode ------------===//
//
// After k3-decompose-layers a KDA mixer is, between its projections:
//
//   q̃ = conv_step(uq, qc, cs, 0)   k̃ = conv_step(uk, kc, cs, C)
//   ṽ = conv_step(uv, vc, cs, 2C)
//   q = l2norm(q̃, scale 1/sqrt(d))  k = l2norm(k̃, scale 1)
//   g = kda_gate(f, dt, A_log)      β = sigmoid(b)
//   o = kda_step(q, k, ṽ, g, β, S)  y = gated_rms_norm(o, gt, w)
//
// KdaDecodeParams computes exactly this with the same rounding points
// (q̃, k̃, ṽ and o in bf16, everything else fp32) and fixed l2norm constants,
// so the chain is only replaced when every link, every constant and every
// single-use intermediate is as above. With low-rank-gates, the plain
// linears making f and gt (Kimi's f_b, g_b) are folded into the op too.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "kernels/kda/KdaParams.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

#define DEBUG_TYPE "k3-fuse-kda"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEKDA
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The l2norm eps the KDA kernels hard-code (K3.md §2.3, kKdaL2NormEps).
constexpr double kL2NormEps = 1e-6;

/// Equal up to printing round-off; the kernels use these constants in fp32.
bool sameConstant(double a, double b) {
  return std::fabs(a - b) <= 1e-12 * std::fabs(b);
}

/// The op defining `v` if it is an OpT used only once (by the chain), in
/// `block`; null otherwise.
template <typename OpT> OpT singleUseDef(Value v, Block *block) {
  auto op = v.getDefiningOp<OpT>();
  if (!op || !v.hasOneUse() || op->getBlock() != block)
    return nullptr;
  return op;
}

/// Whether an op that is not in `chain` uses `state` strictly between
/// `first` and `last` (all in one block): moving the chain's state updates
/// to `last` would then reorder them with that op.
bool stateTouchedBetween(Value state, ArrayRef<Operation *> chain,
                         Operation *first, Operation *last) {
  Block *block = last->getBlock();
  for (Operation *user : state.getUsers()) {
    if (llvm::is_contained(chain, user))
      continue;
    Operation *anc = block->findAncestorOpInBlock(*user);
    if (!anc)
      continue;
    if (first->isBeforeInBlock(anc) && anc->isBeforeInBlock(last))
      return true;
  }
  return false;
}

struct FuseKdaChain : OpRewritePattern<GatedRmsNormOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GatedRmsNormOp norm,
                                PatternRewriter &rw) const override {
    Block *block = norm->getBlock();
    auto step = singleUseDef<KdaStepOp>(norm.getX(), block);
    if (!step)
      return rw.notifyMatchFailure(
          norm, "x is not a single-use k3.kda_step result in this block");
    KdaStateType st = step.getState().getType();
    int64_t H = st.getHeads(), d = st.getKeyDim(), C = H * d;
    if (static_cast<int64_t>(norm.getHeadDim()) != d)
      return rw.notifyMatchFailure(
          norm, "the gated norm's head_dim differs from the state's");

    auto q = singleUseDef<L2NormOp>(step.getQ(), block);
    auto k = singleUseDef<L2NormOp>(step.getK(), block);
    if (!q || !k)
      return rw.notifyMatchFailure(
          norm, "q or k of kda_step is not a single-use k3.l2norm");
    for (L2NormOp l2 : {q, k}) {
      if (static_cast<int64_t>(l2.getHeadDim()) != d)
        return rw.notifyMatchFailure(norm, "an l2norm head_dim differs from "
                                           "the state's head dim");
      if (!sameConstant(l2.getEps().convertToDouble(), kL2NormEps))
        return rw.notifyMatchFailure(norm, "an l2norm eps is not 1e-6");
    }
    if (!sameConstant(q.getScale().convertToDouble(), ::k3::kdaQueryScale(d)))
      return rw.notifyMatchFailure(norm, "the q l2norm scale is not 1/sqrt(d)");
    if (!sameConstant(k.getScale().convertToDouble(), 1.0))
      return rw.notifyMatchFailure(norm, "the k l2norm scale is not 1");

    auto qc = singleUseDef<ConvStepOp>(q.getX(), block);
    auto kc = singleUseDef<ConvStepOp>(k.getX(), block);
    auto vc = singleUseDef<ConvStepOp>(step.getV(), block);
    if (!qc || !kc || !vc)
      return rw.notifyMatchFailure(
          norm, "q, k or v does not come from a single-use k3.conv_step");
    Value cs = qc.getConvState();
    if (kc.getConvState() != cs || vc.getConvState() != cs)
      return rw.notifyMatchFailure(
          norm, "the three conv steps use different conv states");
    // I64Attr getters are unsigned; compare as the signed offsets they are.
    auto offset = [](ConvStepOp op) {
      return static_cast<int64_t>(op.getOffset());
    };
    if (offset(qc) != 0 || offset(kc) != C || offset(vc) != 2 * C)
      return rw.notifyMatchFailure(
          norm, "the conv offsets are not 0, C and 2C for q, k and v");
    auto csType = cast<ConvStateType>(cs.getType());
    if (csType.getChannels() != 3 * C)
      return rw.notifyMatchFailure(
          norm, "the conv state holds more than the q, k and v channels");

    auto gate = singleUseDef<KdaGateOp>(step.getG(), block);
    if (!gate)
      return rw.notifyMatchFailure(norm,
                                   "g is not a single-use k3.kda_gate result");
    if (static_cast<int64_t>(gate.getHeads()) != H)
      return rw.notifyMatchFailure(norm, "the kda_gate heads differ from the "
                                         "state's");
    auto beta = singleUseDef<SigmoidOp>(step.getBeta(), block);
    if (!beta)
      return rw.notifyMatchFailure(
          norm, "beta is not a single-use k3.sigmoid result");

    // The fused op updates both states at the norm; nothing else may touch
    // them between the first conv step and there.
    SmallVector<Operation *> chain = {qc, kc, vc, q, k, gate, beta, step};
    Operation *first = norm;
    for (Operation *op : chain)
      if (op->isBeforeInBlock(first))
        first = op;
    if (stateTouchedBetween(cs, chain, first, norm) ||
        stateTouchedBetween(step.getState(), chain, first, norm))
      return rw.notifyMatchFailure(
          norm, "another op uses the conv or KDA state inside the chain");

    // Informational only: the gate arrives computed. A low-rank gate is
    // g_b(g_a h), i.e. a projection of a projection.
    bool fullRank = true;
    if (auto gb = norm.getGate().getDefiningOp<LinearOp>())
      fullRank = !gb.getX().getDefiningOp<LinearOp>();
    int64_t W = cast<RankedTensorType>(qc.getWeight().getType()).getShape()[2];
    auto config = KdaConfigAttr::get(rw.getContext(), H, d, W, fullRank,
                                     gate.getLowerBoundAttr());

    rw.setInsertionPoint(norm);
    auto fused = KdaDecodeOp::create(
        rw, norm.getLoc(), norm.getResult().getType(), qc.getU(), kc.getU(),
        vc.getU(), gate.getF(), beta.getX(), norm.getGate(), cs,
        step.getState(), qc.getWeight(), kc.getWeight(), vc.getWeight(),
        gate.getDtBias(), gate.getALog(), norm.getWeight(), /*f_b=*/Value(),
        /*g_b=*/Value(), config, norm.getEpsAttr());
    rw.replaceOp(norm, fused.getResult());
    // Users before producers; conv_step and kda_step have effects, so the
    // driver would not remove them as dead.
    for (Operation *op : llvm::reverse(chain))
      rw.eraseOp(op);
    return success();
  }
};

/// kda_decode's f (or gt) made by a plain bf16 `k3.linear` used only there
/// becomes the op's low-rank form: the linear's input as the operand and its
/// weight as f_b (g_b). KdaDecodeParams computes that row sum as linear does
/// (bit for bit on the CPU), so nothing changes but the launch count.
struct FoldLowRankGates : OpRewritePattern<KdaDecodeOp> {
  using OpRewritePattern::OpRewritePattern;

  /// The single-use linear defining `v` that can be folded, or null: the
  /// second half of a low-rank pair (its input is itself a projection, of
  /// at most kKdaMaxFoldedRank values). A full-rank gate (K3's g_proj) is no
  /// such linear: summed inside the KDA kernel it would be far slower.
  static LinearOp foldable(Value v, Operation *user) {
    auto lin = v.getDefiningOp<LinearOp>();
    if (!lin || !v.hasOneUse() || lin->getBlock() != user->getBlock() ||
        lin.getNorm() || lin.getResidual())
      return nullptr;
    auto w = dyn_cast<RankedTensorType>(lin.getWeight().getType());
    if (!w || !w.getElementType().isBF16() || w.getRank() != 2 ||
        w.getShape()[1] > ::k3::kKdaMaxFoldedRank)
      return nullptr;
    Operation *in = lin.getX().getDefiningOp();
    if (!in || !isa<LinearOp, LinearGroupOp>(in))
      return nullptr;
    return lin;
  }

  LogicalResult matchAndRewrite(KdaDecodeOp op,
                                PatternRewriter &rw) const override {
    LinearOp fb = op.getFB() ? nullptr : foldable(op.getF(), op);
    LinearOp gb = op.getGB() ? nullptr : foldable(op.getGate(), op);
    if (!fb && !gb)
      return rw.notifyMatchFailure(op, "no foldable f_b / g_b linear");
    rw.modifyOpInPlace(op, [&] {
      if (fb) {
        op.getFMutable().assign(fb.getX());
        op.getFBMutable().assign(fb.getWeight());
      }
      if (gb) {
        op.getGateMutable().assign(gb.getX());
        op.getGBMutable().assign(gb.getWeight());
      }
    });
    for (LinearOp lin : {fb, gb})
      if (lin)
        rw.eraseOp(lin);
    return success();
  }
};

struct K3FuseKdaPass : mlir::k3::impl::K3FuseKdaBase<K3FuseKdaPass> {
  using K3FuseKdaBase::K3FuseKdaBase;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateFuseKdaPatterns(patterns, lowRankGates);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void mlir::k3::populateFuseKdaPatterns(RewritePatternSet &patterns,
                                       bool lowRankGates) {
  patterns.add<FuseKdaChain>(patterns.getContext());
  if (lowRankGates)
    patterns.add<FoldLowRankGates>(patterns.getContext());
}
