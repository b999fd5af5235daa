//===- DecomposeLayers.cpp - Coarse k3 ops into fine ops ------------------===//
//
// One pattern per coarse op. The fine ops round exactly where
// docs/NUMERICS.md says, so the decomposed graph computes the same values as
// the coarse op's definition in K3.md.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "kernels/kda/KdaParams.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

#define DEBUG_TYPE "k3-decompose-layers"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3DECOMPOSELAYERS
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The eps of the q_a / kv_a layernorms (K3.md §1).
constexpr double kMlaNormEps = 1e-6;
/// l2norm eps, inside the root (K3.md §2.3).
constexpr double kL2NormEps = 1e-6;

RankedTensorType vec(OpBuilder &b, int64_t n, Type elt) {
  return RankedTensorType::get({n}, elt);
}
RankedTensorType bf16Vec(OpBuilder &b, int64_t n) {
  return vec(b, n, b.getBF16Type());
}
RankedTensorType f32Vec(OpBuilder &b, int64_t n) {
  return vec(b, n, b.getF32Type());
}

/// Rows of a matrix weight (bf16 tensor or MXFP4).
int64_t rowsOf(Value w) {
  if (auto t = dyn_cast<RankedTensorType>(w.getType()))
    return t.getShape()[t.getRank() - 2];
  return cast<Mxfp4Type>(w.getType()).getOut();
}

/// y = W x, rounded to bf16.
Value linear(OpBuilder &b, Location loc, Value x, Value w) {
  return LinearOp::create(b, loc, bf16Vec(b, rowsOf(w)), x, w, Value(), Value(),
                          FloatAttr());
}

/// w2 · act(w1 x, w3 x) with unstacked weights.
Value gatedMlp(OpBuilder &b, Location loc, Value x, Value w1, Value w3,
               Value w2, Activation act, FloatAttr beta, FloatAttr linearBeta) {
  Value g = linear(b, loc, x, w1);
  Value u = linear(b, loc, x, w3);
  Value a;
  if (act == Activation::situ)
    a = SituOp::create(b, loc, g.getType(), g, u, beta, linearBeta);
  else
    a = SwigluOp::create(b, loc, g.getType(), g, u);
  return linear(b, loc, a, w2);
}

struct DecomposeKda : OpRewritePattern<KdaOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(KdaOp op, PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    KdaConfigAttr c = op.getConfig();
    int64_t C = c.getChannels(), H = c.getHeads(), d = c.getHeadDim();
    Value h = op.getX();
    Value uq = linear(rw, loc, h, op.getQProj());
    Value uk = linear(rw, loc, h, op.getKProj());
    Value uv = linear(rw, loc, h, op.getVProj());
    Value cs = op.getConvState();
    auto conv = [&](Value u, Value w, int64_t offset) -> Value {
      return ConvStepOp::create(rw, loc, bf16Vec(rw, C), u, w, cs,
                                rw.getI64IntegerAttr(offset));
    };
    Value qc = conv(uq, op.getQConv(), 0);
    Value kc = conv(uk, op.getKConv(), C);
    Value vc = conv(uv, op.getVConv(), 2 * C);
    auto l2 = [&](Value x, double scale) -> Value {
      return L2NormOp::create(
          rw, loc, f32Vec(rw, C), x, rw.getI64IntegerAttr(d),
          rw.getF64FloatAttr(kL2NormEps), rw.getF64FloatAttr(scale));
    };
    // The kernels compute the scale in fp32 (1.0f / sqrtf(d)); carry exactly
    // that value so every strategy scales q by the same float.
    Value q = l2(qc, static_cast<double>(::k3::kdaQueryScale(d)));
    Value k = l2(kc, 1.0);
    Value f =
        linear(rw, loc, linear(rw, loc, h, op.getFAProj()), op.getFBProj());
    FloatAttr lb;
    if (c.getLowerBound())
      lb = rw.getF64FloatAttr(c.getLowerBound().getValueAsDouble());
    Value g = KdaGateOp::create(rw, loc, f32Vec(rw, C), f, op.getDtBias(),
                                op.getALog(), rw.getI64IntegerAttr(H), lb);
    Value beta = SigmoidOp::create(rw, loc, f32Vec(rw, H),
                                   linear(rw, loc, h, op.getBProj()));
    Value o = KdaStepOp::create(rw, loc, bf16Vec(rw, C), q, k, vc, g, beta,
                                op.getState());
    Value gt = op.getGProj()
                   ? linear(rw, loc, h, op.getGProj())
                   : linear(rw, loc, linear(rw, loc, h, op.getGAProj()),
                            op.getGBProj());
    Value y =
        GatedRmsNormOp::create(rw, loc, bf16Vec(rw, C), o, gt, op.getONorm(),
                               rw.getI64IntegerAttr(d), op.getEpsAttr());
    rw.replaceOp(op, linear(rw, loc, y, op.getOProj()));
    return success();
  }
};

struct DecomposeMla : OpRewritePattern<MlaOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MlaOp op, PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    MlaConfigAttr c = op.getConfig();
    Value h = op.getX();
    Value q;
    if (op.getQAProj()) {
      Value qa = linear(rw, loc, h, op.getQAProj());
      Value qn = RmsNormOp::create(rw, loc, qa.getType(), qa, op.getQANorm(),
                                   rw.getF64FloatAttr(kMlaNormEps));
      q = linear(rw, loc, qn, op.getQBProj());
    } else {
      q = linear(rw, loc, h, op.getQProj());
    }
    Value kv = linear(rw, loc, h, op.getKvAProj());
    MlaCacheAppendOp::create(rw, loc, kv, op.getKvANorm(), op.getCache(),
                             op.getPos(), rw.getF64FloatAttr(kMlaNormEps));
    Value o = MlaAttendOp::create(rw, loc, bf16Vec(rw, c.getOWidth()), q,
                                  op.getKvBProj(), op.getCache(), op.getPos(),
                                  Value(), c);
    if (op.getGProj()) {
      Value gt = linear(rw, loc, h, op.getGProj());
      o = MulSigmoidOp::create(rw, loc, o.getType(), o, gt);
    }
    rw.replaceOp(op, linear(rw, loc, o, op.getOProj()));
    return success();
  }
};

struct DecomposeDenseMlp : OpRewritePattern<DenseMlpOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(DenseMlpOp op,
                                PatternRewriter &rw) const override {
    rw.replaceOp(op,
                 gatedMlp(rw, op.getLoc(), op.getX(), op.getW1(), op.getW3(),
                          op.getW2(), op.getAct(), op.getSituBetaAttr(),
                          op.getSituLinearBetaAttr()));
    return success();
  }
};

/// Router + routed experts on `expertInput`; returns r = R(Σ w_k y_k).
template <typename MoeOpT>
Value routedMix(PatternRewriter &rw, MoeOpT op, Value expertInput) {
  Location loc = op.getLoc();
  MoeConfigAttr c = op.getConfig();
  int64_t K = c.getTopK();
  auto router = RouterOp::create(
      rw, loc, RankedTensorType::get({K}, rw.getI32Type()), f32Vec(rw, K),
      op.getX(), op.getGate(), op.getBias(), rw.getI64IntegerAttr(K),
      rw.getBoolAttr(c.getRenormalize()),
      rw.getF64FloatAttr(c.getScaling().getValueAsDouble()));
  return ExpertMixOp::create(rw, loc, expertInput.getType(), expertInput,
                             router.getIds(), router.getWeights(), op.getW1(),
                             op.getW3(), op.getW2(), op.getActAttr(),
                             op.getSituBetaAttr(), op.getSituLinearBetaAttr());
}

/// routed + shared(x), or routed alone.
template <typename MoeOpT>
Value addShared(PatternRewriter &rw, MoeOpT op, Value routed) {
  if (!op.getSharedW1())
    return routed;
  Value shared = gatedMlp(rw, op.getLoc(), op.getX(), op.getSharedW1(),
                          op.getSharedW3(), op.getSharedW2(), op.getAct(),
                          op.getSituBetaAttr(), op.getSituLinearBetaAttr());
  return AddOp::create(rw, op.getLoc(), routed.getType(), routed, shared);
}

struct DecomposeMoe : OpRewritePattern<MoeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MoeOp op, PatternRewriter &rw) const override {
    rw.replaceOp(op, addShared(rw, op, routedMix(rw, op, op.getX())));
    return success();
  }
};

struct DecomposeLatentMoe : OpRewritePattern<LatentMoeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LatentMoeOp op,
                                PatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Value z = linear(rw, loc, op.getX(), op.getDown());
    Value r = routedMix(rw, op, z);
    if (op.getNorm())
      r = RmsNormOp::create(rw, loc, r.getType(), r, op.getNorm(),
                            op.getEpsAttr());
    rw.replaceOp(op, addShared(rw, op, linear(rw, loc, r, op.getUp())));
    return success();
  }
};

/// The vocabulary projection is a projection with an unrounded f32 result.
struct DecomposeLmHead : OpRewritePattern<LmHeadOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LmHeadOp op,
                                PatternRewriter &rw) const override {
    rw.replaceOpWithNewOp<LinearOp>(op, op.getLogits().getType(), op.getX(),
                                    op.getWeight(), Value(), Value(),
                                    FloatAttr());
    return success();
  }
};

struct K3DecomposeLayersPass
    : mlir::k3::impl::K3DecomposeLayersBase<K3DecomposeLayersPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateDecomposeLayersPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
  }
};

} // namespace

void mlir::k3::populateDecomposeLayersPatterns(RewritePatternSet &patterns) {
  patterns.add<DecomposeKda, DecomposeMla, DecomposeDenseMlp, DecomposeMoe,
               DecomposeLatentMoe, DecomposeLmHead>(patterns.getContext());
}
