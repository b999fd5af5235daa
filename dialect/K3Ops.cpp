//===- K3Ops.cpp - k3 op verifiers ----------------------------------------===//
//
// Every shape relation between an op's operands, derived from its config
// attribute where it has one. Messages name the operand and give the
// expected and the actual shape, so a wrong import or a wrong fusion is found
// at the op that is wrong.
//
//===----------------------------------------------------------------------===//
#include "dialect/K3Dialect.h"

#include "kernels/gemv/GemvParams.h"

#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <string>

using namespace mlir;
using namespace mlir::k3;

#define GET_OP_CLASSES
#include "dialect/K3Ops.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// The logical shape of a tensor, MXFP4 or vector weight; empty for other
/// types.
static SmallVector<int64_t> shapeOf(Type t) {
  if (auto tt = dyn_cast<RankedTensorType>(t))
    return SmallVector<int64_t>(tt.getShape());
  if (auto mx = dyn_cast<Mxfp4Type>(t))
    return SmallVector<int64_t>(mx.getShape());
  if (auto vw = dyn_cast<VectorWeightType>(t))
    return SmallVector<int64_t>(vw.getShape());
  return {};
}

static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? ", " : "") + std::to_string(d);
  return s + "]";
}

/// Fails with "expects <what> of shape [..] but got [..]" on a mismatch.
static LogicalResult expectShape(Operation *op, StringRef what, Type t,
                                 ArrayRef<int64_t> expected) {
  SmallVector<int64_t> got = shapeOf(t);
  if (ArrayRef<int64_t>(got) == expected)
    return success();
  return op->emitOpError() << "expects " << what << " of shape "
                           << shapeStr(expected) << " but got "
                           << shapeStr(got);
}

static LogicalResult expectShape(Operation *op, StringRef what, Value v,
                                 ArrayRef<int64_t> expected) {
  return expectShape(op, what, v.getType(), expected);
}

/// Length of a rank-1 tensor, or a diagnostic.
static FailureOr<int64_t> vectorLength(Operation *op, StringRef what, Value v) {
  SmallVector<int64_t> s = shapeOf(v.getType());
  if (s.size() != 1) {
    op->emitOpError() << "expects " << what
                      << " to be a vector (rank 1) but got rank " << s.size();
    return failure();
  }
  return s[0];
}

static LogicalResult expectPositive(Operation *op, StringRef what, double v) {
  if (v > 0.0 && std::isfinite(v))
    return success();
  return op->emitOpError() << "expects " << what
                           << " to be positive and finite, got " << v;
}

static LogicalResult expectNumelAtLeast(Operation *op, StringRef what, Value v,
                                        int64_t n) {
  int64_t numel = 1;
  for (int64_t d : shapeOf(v.getType()))
    numel *= d;
  if (numel >= n)
    return success();
  return op->emitOpError() << "expects " << what << " to hold at least " << n
                           << " values but it has " << numel;
}

/// SiTU needs β1; β2 is optional (plain up branch without it).
static LogicalResult verifyActivation(Operation *op, Activation act,
                                      std::optional<APFloat> beta,
                                      std::optional<APFloat> linearBeta) {
  if (act == Activation::situ) {
    if (!beta)
      return op->emitOpError() << "expects situ_beta for the situ activation";
    if (failed(expectPositive(op, "situ_beta", beta->convertToDouble())))
      return failure();
    if (linearBeta && failed(expectPositive(op, "situ_linear_beta",
                                            linearBeta->convertToDouble())))
      return failure();
  }
  return success();
}

/// Checks a gated MLP's three weights: w1, w3 [..., I, in] and w2 [..., out, I].
/// `experts` < 0 means unstacked weights.
static LogicalResult verifyGatedMlp(Operation *op, StringRef prefix, Value w1,
                                    Value w3, Value w2, int64_t experts,
                                    int64_t intermediate, int64_t in,
                                    int64_t out) {
  SmallVector<int64_t> s13, s2;
  if (experts >= 0) {
    s13 = {experts, intermediate, in};
    s2 = {experts, out, intermediate};
  } else {
    s13 = {intermediate, in};
    s2 = {out, intermediate};
  }
  if (failed(expectShape(op, (prefix + "w1").str(), w1, s13)) ||
      failed(expectShape(op, (prefix + "w3").str(), w3, s13)) ||
      failed(expectShape(op, (prefix + "w2").str(), w2, s2)))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Leaves
//===----------------------------------------------------------------------===//

LogicalResult WeightOp::verify() {
  if (getName().empty())
    return emitOpError() << "expects a non-empty checkpoint tensor name";
  SmallVector<int64_t> shape = shapeOf(getType());
  bool stacked = getName().contains("{e}");
  if (stacked && shape.size() != 3)
    return emitOpError() << "expects a rank-3 type for a name with '{e}' "
                            "(experts stacked on dim 0) but got rank "
                         << shape.size();
  if (isa<VectorWeightType>(getType()) && stacked)
    return emitOpError() << "expects a vector_weight to name one tensor: "
                            "stacked ('{e}') weights are matrices";
  if (isa<Mxfp4Type>(getType()) && getName().ends_with(".weight"))
    return emitOpError() << "expects an mxfp4 weight to be named by its "
                            "prefix (without '.weight'): the checkpoint holds "
                            "'<prefix>.weight_packed' and '<prefix>.weight_scale'";
  if (std::optional<SplitAttr> split = getSplit()) {
    if (split->getAxis() >= static_cast<int64_t>(shape.size()))
      return emitOpError() << "expects split axis " << split->getAxis()
                           << " inside the weight's rank " << shape.size();
    if (stacked && split->getAxis() == 0)
      return emitOpError() << "expects a stacked ('{e}') weight to be split "
                              "inside each expert (axis 1 or 2), not over "
                              "the experts";
  }
  return success();
}

LogicalResult StateOp::verify() {
  if (getSlot().empty())
    return emitOpError() << "expects a non-empty slot name";
  return success();
}

//===----------------------------------------------------------------------===//
// Coarse ops
//===----------------------------------------------------------------------===//

LogicalResult EmbedOp::verify() {
  SmallVector<int64_t> t = shapeOf(getTable().getType());
  if (t.size() != 2)
    return emitOpError() << "expects table of rank 2 [vocab, hidden] but got rank "
                         << t.size();
  return expectShape(*this, "result", getResult().getType(), {t[1]});
}

LogicalResult RmsNormOp::verify() {
  FailureOr<int64_t> n = vectorLength(*this, "x", getX());
  if (failed(n) || failed(expectShape(*this, "weight", getWeight(), {*n})) ||
      failed(expectShape(*this, "result", getResult().getType(), {*n})))
    return failure();
  return expectPositive(*this, "eps", getEps().convertToDouble());
}

LogicalResult KdaOp::verify() {
  KdaConfigAttr c = getConfig();
  FailureOr<int64_t> dOr = vectorLength(*this, "x", getX());
  if (failed(dOr))
    return failure();
  int64_t D = *dOr, H = c.getHeads(), d = c.getHeadDim(), C = c.getChannels(),
          W = c.getConv();
  Operation *op = *this;
  if (failed(expectShape(op, "q_proj", getQProj(), {C, D})) ||
      failed(expectShape(op, "k_proj", getKProj(), {C, D})) ||
      failed(expectShape(op, "v_proj", getVProj(), {C, D})) ||
      failed(expectShape(op, "q_conv", getQConv(), {C, 1, W})) ||
      failed(expectShape(op, "k_conv", getKConv(), {C, 1, W})) ||
      failed(expectShape(op, "v_conv", getVConv(), {C, 1, W})) ||
      failed(expectShape(op, "f_a_proj", getFAProj(), {d, D})) ||
      failed(expectShape(op, "f_b_proj", getFBProj(), {C, d})) ||
      failed(expectShape(op, "dt_bias", getDtBias(), {C})) ||
      failed(expectNumelAtLeast(op, "a_log", getALog(), H)) ||
      failed(expectShape(op, "b_proj", getBProj(), {H, D})) ||
      failed(expectShape(op, "o_norm", getONorm(), {d})) ||
      failed(expectShape(op, "o_proj", getOProj(), {D, C})) ||
      failed(expectShape(op, "result", getResult().getType(), {D})))
    return failure();
  if (c.getFullRankGate()) {
    if (!getGProj() || getGAProj())
      return emitOpError() << "expects a full-rank output gate (gate(g_proj)) "
                              "because config has full_rank_gate = true";
    if (failed(expectShape(op, "g_proj", getGProj(), {C, D})))
      return failure();
  } else {
    if (!getGAProj() || getGProj())
      return emitOpError() << "expects a low-rank output gate "
                              "(low_rank_gate(g_a_proj, g_b_proj)) because "
                              "config has full_rank_gate = false";
    if (failed(expectShape(op, "g_a_proj", getGAProj(), {d, D})) ||
        failed(expectShape(op, "g_b_proj", getGBProj(), {C, d})))
      return failure();
  }
  ConvStateType cs = getConvState().getType();
  if (cs.getChannels() != 3 * C || cs.getWindow() != W - 1)
    return emitOpError() << "expects conv_state with channels = 3*heads*head_dim = "
                         << 3 * C << " and window = conv-1 = " << W - 1
                         << " but got channels = " << cs.getChannels()
                         << ", window = " << cs.getWindow();
  KdaStateType st = getState().getType();
  if (st.getHeads() != H || st.getKeyDim() != d || st.getValueDim() != d)
    return emitOpError() << "expects state of " << H << " heads x " << d
                         << " x " << d << " but got " << st.getHeads()
                         << " x " << st.getKeyDim() << " x "
                         << st.getValueDim();
  return expectPositive(op, "eps", getEps().convertToDouble());
}

LogicalResult MlaOp::verify() {
  MlaConfigAttr c = getConfig();
  FailureOr<int64_t> dOr = vectorLength(*this, "x", getX());
  if (failed(dOr))
    return failure();
  int64_t D = *dOr, L = c.getKvLora(), R = c.getRope();
  Operation *op = *this;
  if (c.getQLora() > 0) {
    if (!getQAProj() || getQProj())
      return emitOpError() << "expects the q_lora path (q_lora(q_a_proj, "
                              "q_a_norm, q_b_proj)) because config has q_lora = "
                           << c.getQLora();
    if (failed(expectShape(op, "q_a_proj", getQAProj(), {c.getQLora(), D})) ||
        failed(expectShape(op, "q_a_norm", getQANorm(), {c.getQLora()})) ||
        failed(expectShape(op, "q_b_proj", getQBProj(),
                           {c.getQWidth(), c.getQLora()})))
      return failure();
  } else {
    if (!getQProj() || getQAProj())
      return emitOpError() << "expects a direct q(q_proj) because config has "
                              "q_lora = 0";
    if (failed(expectShape(op, "q_proj", getQProj(), {c.getQWidth(), D})))
      return failure();
  }
  if (failed(expectShape(op, "kv_a_proj", getKvAProj(), {L + R, D})) ||
      failed(expectShape(op, "kv_a_norm", getKvANorm(), {L})) ||
      failed(expectShape(op, "kv_b_proj", getKvBProj(), {c.getKvBWidth(), L})) ||
      failed(expectShape(op, "o_proj", getOProj(), {D, c.getOWidth()})) ||
      failed(expectShape(op, "result", getResult().getType(), {D})))
    return failure();
  if (c.getOutputGate() != static_cast<bool>(getGProj()))
    return emitOpError() << "expects " << (c.getOutputGate() ? "a" : "no")
                         << " gate(g_proj) operand because config has "
                            "output_gate = "
                         << (c.getOutputGate() ? "true" : "false");
  if (getGProj() &&
      failed(expectShape(op, "g_proj", getGProj(), {c.getOWidth(), D})))
    return failure();
  if (getCache().getType().getWidth() != L + R)
    return emitOpError() << "expects cache width kv_lora + rope = " << L + R
                         << " but got " << getCache().getType().getWidth();
  return success();
}

LogicalResult DenseMlpOp::verify() {
  FailureOr<int64_t> dOr = vectorLength(*this, "x", getX());
  if (failed(dOr) ||
      failed(verifyActivation(*this, getAct(), getSituBeta(),
                              getSituLinearBeta())))
    return failure();
  SmallVector<int64_t> w1 = shapeOf(getW1().getType());
  if (w1.size() != 2)
    return emitOpError() << "expects w1 of rank 2 [intermediate, hidden] but got rank "
                         << w1.size();
  if (failed(verifyGatedMlp(*this, "", getW1(), getW3(), getW2(), -1, w1[0],
                            *dOr, *dOr)))
    return failure();
  return expectShape(*this, "result", getResult().getType(), {*dOr});
}

/// Router and shared-expert checks common to both MoE forms.
template <typename MoeOpT>
static LogicalResult verifyMoeCommon(MoeOpT op, int64_t D, int64_t Dm) {
  MoeConfigAttr c = op.getConfig();
  int64_t E = c.getExperts(), I = c.getIntermediate(), S = c.getShared();
  Operation *o = op;
  if (failed(verifyActivation(o, op.getAct(), op.getSituBeta(),
                              op.getSituLinearBeta())) ||
      failed(expectShape(o, "gate", op.getGate(), {E, D})) ||
      failed(expectShape(o, "bias", op.getBias(), {E})) ||
      failed(verifyGatedMlp(o, "", op.getW1(), op.getW3(), op.getW2(), E, I,
                            Dm, Dm)) ||
      failed(expectShape(o, "result", op.getResult().getType(), {D})))
    return failure();
  if ((S > 0) != static_cast<bool>(op.getSharedW1()))
    return op.emitOpError() << "expects " << (S > 0 ? "" : "no ")
                            << "shared experts because config has shared = "
                            << S;
  if (S > 0 && failed(verifyGatedMlp(o, "shared_", op.getSharedW1(),
                                     op.getSharedW3(), op.getSharedW2(), -1,
                                     S * I, D, D)))
    return failure();
  return success();
}

LogicalResult MoeOp::verify() {
  FailureOr<int64_t> dOr = vectorLength(*this, "x", getX());
  if (failed(dOr))
    return failure();
  return verifyMoeCommon(*this, *dOr, *dOr);
}

LogicalResult LatentMoeOp::verify() {
  FailureOr<int64_t> dOr = vectorLength(*this, "x", getX());
  if (failed(dOr))
    return failure();
  SmallVector<int64_t> down = shapeOf(getDown().getType());
  if (down.size() != 2)
    return emitOpError() << "expects down of rank 2 [latent, hidden] but got rank "
                         << down.size();
  int64_t D = *dOr, Dm = down[0];
  if (failed(expectShape(*this, "down", getDown(), {Dm, D})) ||
      failed(expectShape(*this, "up", getUp(), {D, Dm})))
    return failure();
  if (getNorm() && failed(expectShape(*this, "norm", getNorm(), {Dm})))
    return failure();
  if (failed(expectPositive(*this, "eps", getEps().convertToDouble())))
    return failure();
  return verifyMoeCommon(*this, D, Dm);
}

LogicalResult AttnResOp::verify() {
  int64_t D = getBlocks().getType().getHidden();
  int64_t count = getCountAttr().getInt(); // I64Attr getters are unsigned
  if (count < 0 || count > getBlocks().getType().getMaxBlocks())
    return emitOpError() << "expects count in [0, "
                         << getBlocks().getType().getMaxBlocks()
                         << "] but got " << count;
  if (getOutNorm() && failed(expectShape(*this, "out_norm", getOutNorm(), {D})))
    return failure();
  if (failed(expectShape(*this, "p", getP(), {D})) ||
      failed(expectShape(*this, "norm", getNorm(), {D})) ||
      failed(expectShape(*this, "proj", getProj(), {1, D})) ||
      failed(expectShape(*this, "result", getResult().getType(), {D})))
    return failure();
  return expectPositive(*this, "eps", getEps().convertToDouble());
}

LogicalResult AttnResCommitOp::verify() {
  AttnResBlocksType b = getBlocks().getType();
  if (failed(expectShape(*this, "p", getP(), {b.getHidden()})))
    return failure();
  int64_t index = getIndexAttr().getInt(); // I64Attr getters are unsigned
  if (index < 0 || index >= b.getMaxBlocks())
    return emitOpError() << "expects index in [0, " << b.getMaxBlocks()
                         << ") but got " << index;
  return success();
}

LogicalResult ProbeOp::verify() {
  auto t = cast<RankedTensorType>(getValue().getType());
  if (t.getRank() != 1)
    return emitOpError() << "expects a 1-D value but got rank " << t.getRank();
  if (getName().empty())
    return emitOpError() << "expects a non-empty name";
  return success();
}

LogicalResult LmHeadOp::verify() {
  SmallVector<int64_t> w = shapeOf(getWeight().getType());
  if (w.size() != 2)
    return emitOpError() << "expects weight of rank 2 [vocab, hidden] but got rank "
                         << w.size();
  if (failed(expectShape(*this, "x", getX(), {w[1]})))
    return failure();
  return expectShape(*this, "logits", getLogits().getType(), {w[0]});
}

LogicalResult ArgmaxOp::verify() {
  return failure(failed(vectorLength(*this, "logits", getLogits())));
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

LogicalResult AllReduceOp::verify() {
  if (getRanks() < 2)
    return emitOpError() << "expects ranks >= 2 but got " << getRanks();
  FailureOr<int64_t> n = vectorLength(*this, "partial", getPartial());
  if (failed(n))
    return failure();
  return expectShape(*this, "result", getResult().getType(), {*n});
}

LogicalResult AllGatherOp::verify() {
  if (getRanks() < 2)
    return emitOpError() << "expects ranks >= 2 but got " << getRanks();
  FailureOr<int64_t> n = vectorLength(*this, "part", getPart());
  if (failed(n))
    return failure();
  return expectShape(*this, "result", getResult().getType(),
                     {*n * static_cast<int64_t>(getRanks())});
}

//===----------------------------------------------------------------------===//
// Fine ops
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::verify() {
  SmallVector<int64_t> w = shapeOf(getWeight().getType());
  if (w.size() != 2)
    return emitOpError() << "expects weight of rank 2 [out, in] but got rank "
                         << w.size();
  int64_t N = w[0], K = w[1];
  if (failed(expectShape(*this, "x", getX(), {K})) ||
      failed(expectShape(*this, "result", getResult().getType(), {N})))
    return failure();
  if (getNorm()) {
    if (failed(expectShape(*this, "norm", getNorm(), {K})))
      return failure();
    if (!getEps())
      return emitOpError() << "expects eps with a fused norm";
    if (failed(expectPositive(*this, "eps", getEps()->convertToDouble())))
      return failure();
  }
  if (getResidual()) {
    if (failed(expectShape(*this, "residual", getResidual(), {N})))
      return failure();
    if (!getResult().getType().getElementType().isBF16())
      return emitOpError() << "expects a bf16 result with a residual epilogue";
  }
  return success();
}

LogicalResult LinearGroupOp::verify() {
  // One linear_multi launch carries at most kLinearMultiMax projections.
  size_t count = getWeights().size();
  if (count < 1 || count > static_cast<size_t>(::k3::kLinearMultiMax))
    return emitOpError() << "expects 1 to " << ::k3::kLinearMultiMax
                         << " weights (one linear_multi launch) but got "
                         << count;
  if (getResults().size() != count)
    return emitOpError() << "expects one result per weight (" << count
                         << ") but got " << getResults().size();
  FailureOr<int64_t> kOr = vectorLength(*this, "x", getX());
  if (failed(kOr))
    return failure();
  int64_t K = *kOr;
  for (auto [i, w] : llvm::enumerate(getWeights())) {
    std::string idx = std::to_string(i);
    SmallVector<int64_t> s = shapeOf(w.getType());
    if (s.size() != 2)
      return emitOpError() << "expects weight " << idx
                           << " of rank 2 [out, in] but got rank " << s.size();
    if (s[1] != K)
      return emitOpError() << "expects weight " << idx << " of shape [" << s[0]
                           << ", " << K << "] (k = len(x)) but got "
                           << shapeStr(s);
    if (failed(expectShape(*this, "result " + idx, getResult(i).getType(),
                           {s[0]})))
      return failure();
  }
  if (getNorm()) {
    if (failed(expectShape(*this, "norm", getNorm(), {K})))
      return failure();
    if (!getEps())
      return emitOpError() << "expects eps with a fused norm";
    if (failed(expectPositive(*this, "eps", getEps()->convertToDouble())))
      return failure();
  } else if (getEps()) {
    return emitOpError() << "expects no eps without a fused norm";
  }
  return success();
}

LogicalResult ConvStepOp::verify() {
  FailureOr<int64_t> cOr = vectorLength(*this, "u", getU());
  if (failed(cOr))
    return failure();
  int64_t C = *cOr;
  SmallVector<int64_t> w = shapeOf(getWeight().getType());
  if (w.size() != 3 || w[0] != C || w[1] != 1)
    return emitOpError() << "expects weight of shape [" << C
                         << ", 1, W] but got " << shapeStr(w);
  ConvStateType cs = getConvState().getType();
  if (cs.getWindow() != w[2] - 1)
    return emitOpError() << "expects conv_state window = W-1 = " << w[2] - 1
                         << " but got " << cs.getWindow();
  int64_t offset = getOffsetAttr().getInt(); // I64Attr getters are unsigned
  if (offset < 0 || offset + C > cs.getChannels())
    return emitOpError() << "expects channels [" << offset << ", "
                         << offset + C << ") inside the conv_state's "
                         << cs.getChannels() << " channels";
  return expectShape(*this, "result", getResult().getType(), {C});
}

LogicalResult L2NormOp::verify() {
  FailureOr<int64_t> n = vectorLength(*this, "x", getX());
  if (failed(n))
    return failure();
  if (getHeadDim() <= 0 || *n % getHeadDim() != 0)
    return emitOpError() << "expects head_dim to divide " << *n << " but got "
                         << getHeadDim();
  if (failed(expectPositive(*this, "eps", getEps().convertToDouble())) ||
      failed(expectPositive(*this, "scale", getScale().convertToDouble())))
    return failure();
  return expectShape(*this, "result", getResult().getType(), {*n});
}

LogicalResult KdaGateOp::verify() {
  FailureOr<int64_t> cOr = vectorLength(*this, "f", getF());
  if (failed(cOr))
    return failure();
  int64_t C = *cOr, H = getHeads();
  if (H <= 0 || C % H != 0)
    return emitOpError() << "expects heads to divide " << C << " but got "
                         << H;
  if (failed(expectShape(*this, "dt_bias", getDtBias(), {C})) ||
      failed(expectNumelAtLeast(*this, "a_log", getALog(), H)) ||
      failed(expectShape(*this, "result", getResult().getType(), {C})))
    return failure();
  if (auto lb = getLowerBound()) {
    double v = lb->convertToDouble();
    if (!(v >= -5.0 && v < 0.0))
      return emitOpError() << "expects lower_bound in [-5, 0) but got " << v;
  }
  return success();
}

LogicalResult SigmoidOp::verify() {
  return expectShape(*this, "result", getResult().getType(),
                     shapeOf(getX().getType()));
}

LogicalResult KdaStepOp::verify() {
  KdaStateType st = getState().getType();
  int64_t C = st.getHeads() * st.getKeyDim();
  if (st.getKeyDim() != st.getValueDim())
    return emitOpError() << "expects a square per-head state (key_dim = "
                            "value_dim) but got "
                         << st.getKeyDim() << " x " << st.getValueDim();
  if (failed(expectShape(*this, "q", getQ(), {C})) ||
      failed(expectShape(*this, "k", getK(), {C})) ||
      failed(expectShape(*this, "v", getV(), {C})) ||
      failed(expectShape(*this, "g", getG(), {C})) ||
      failed(expectShape(*this, "beta", getBeta(), {st.getHeads()})) ||
      failed(expectShape(*this, "result", getResult().getType(), {C})))
    return failure();
  return success();
}

LogicalResult GatedRmsNormOp::verify() {
  FailureOr<int64_t> cOr = vectorLength(*this, "x", getX());
  if (failed(cOr))
    return failure();
  int64_t C = *cOr, d = getHeadDim();
  if (d <= 0 || C % d != 0)
    return emitOpError() << "expects head_dim to divide " << C << " but got "
                         << d;
  if (failed(expectShape(*this, "gate", getGate(), {C})) ||
      failed(expectShape(*this, "weight", getWeight(), {d})) ||
      failed(expectShape(*this, "result", getResult().getType(), {C})))
    return failure();
  return expectPositive(*this, "eps", getEps().convertToDouble());
}

LogicalResult MlaCacheAppendOp::verify() {
  int64_t width = getCache().getType().getWidth();
  if (failed(expectShape(*this, "kv", getKv(), {width})))
    return failure();
  FailureOr<int64_t> L = vectorLength(*this, "norm", getNorm());
  if (failed(L))
    return failure();
  if (*L >= width)
    return emitOpError() << "expects norm (kv_lora = " << *L
                         << ") narrower than the cache row (" << width << ")";
  return expectPositive(*this, "eps", getEps().convertToDouble());
}

LogicalResult MlaAttendOp::verify() {
  MlaConfigAttr c = getConfig();
  if (failed(expectShape(*this, "q", getQ(), {c.getQWidth()})) ||
      failed(expectShape(*this, "kv_b_proj", getKvBProj(),
                         {c.getKvBWidth(), c.getKvLora()})) ||
      failed(expectShape(*this, "result", getResult().getType(),
                         {c.getOWidth()})))
    return failure();
  if (getGate() && failed(expectShape(*this, "gate", getGate(), {c.getOWidth()})))
    return failure();
  if (getCache().getType().getWidth() != c.getCacheWidth())
    return emitOpError() << "expects cache width kv_lora + rope = "
                         << c.getCacheWidth() << " but got "
                         << getCache().getType().getWidth();
  return success();
}

LogicalResult RouterOp::verify() {
  SmallVector<int64_t> g = shapeOf(getGate().getType());
  if (g.size() != 2)
    return emitOpError() << "expects gate of rank 2 [experts, hidden] but got rank "
                         << g.size();
  int64_t E = g[0], K = getTopK();
  if (K <= 0 || K > E)
    return emitOpError() << "expects top_k in [1, " << E << "] but got " << K;
  if (failed(expectShape(*this, "x", getX(), {g[1]})) ||
      failed(expectShape(*this, "bias", getBias(), {E})) ||
      failed(expectShape(*this, "ids", getIds().getType(), {K})) ||
      failed(expectShape(*this, "weights", getWeights().getType(), {K})))
    return failure();
  return expectPositive(*this, "scaling", getScaling().convertToDouble());
}

LogicalResult ExpertMixOp::verify() {
  FailureOr<int64_t> dmOr = vectorLength(*this, "x", getX());
  if (failed(dmOr) || failed(verifyActivation(*this, getAct(), getSituBeta(),
                                              getSituLinearBeta())))
    return failure();
  SmallVector<int64_t> w1 = shapeOf(getW1().getType());
  if (w1.size() != 3)
    return emitOpError() << "expects stacked expert weights of rank 3 "
                            "[experts, intermediate, latent] but got rank "
                         << w1.size();
  FailureOr<int64_t> k = vectorLength(*this, "ids", getIds());
  if (failed(k) || failed(expectShape(*this, "weights", getWeights(), {*k})))
    return failure();
  if (*k > w1[0])
    return emitOpError() << "expects at most " << w1[0]
                         << " selected experts but got " << *k;
  if (failed(verifyGatedMlp(*this, "", getW1(), getW3(), getW2(), w1[0], w1[1],
                            *dmOr, *dmOr)))
    return failure();
  return expectShape(*this, "result", getResult().getType(), {*dmOr});
}

LogicalResult SituOp::verify() {
  if (failed(expectPositive(*this, "beta", getBeta().convertToDouble())))
    return failure();
  if (auto lb = getLinearBeta())
    return expectPositive(*this, "linear_beta", lb->convertToDouble());
  return success();
}

//===----------------------------------------------------------------------===//
// Fused ops
//===----------------------------------------------------------------------===//

/// A fused norm needs its eps: `what` names the norm operand.
static LogicalResult verifyFusedNormEps(Operation *op, StringRef what,
                                        std::optional<APFloat> eps) {
  if (!eps)
    return op->emitOpError() << "expects eps with " << what;
  return expectPositive(op, "eps", eps->convertToDouble());
}

LogicalResult KdaDecodeOp::verify() {
  KdaConfigAttr c = getConfig();
  int64_t H = c.getHeads(), d = c.getHeadDim(), C = c.getChannels(),
          W = c.getConv();
  Operation *op = *this;
  if (failed(expectShape(op, "uq", getUq(), {C})) ||
      failed(expectShape(op, "uk", getUk(), {C})) ||
      failed(expectShape(op, "uv", getUv(), {C})) ||
      failed(expectShape(op, "beta_logit", getBetaLogit(), {H})) ||
      failed(expectShape(op, "q_conv", getQConv(), {C, 1, W})) ||
      failed(expectShape(op, "k_conv", getKConv(), {C, 1, W})) ||
      failed(expectShape(op, "v_conv", getVConv(), {C, 1, W})) ||
      failed(expectShape(op, "dt_bias", getDtBias(), {C})) ||
      failed(expectNumelAtLeast(op, "a_log", getALog(), H)) ||
      failed(expectShape(op, "o_norm", getONorm(), {d})) ||
      failed(expectShape(op, "result", getResult().getType(), {C})))
    return failure();
  // f and gt: C values, or the rank-r input of a folded second projection
  // [C, r].
  auto gateInput = [&](StringRef name, Value in, StringRef upName,
                       Value up) -> LogicalResult {
    if (!up)
      return expectShape(op, name, in, {C});
    FailureOr<int64_t> r = vectorLength(op, name, in);
    if (failed(r))
      return failure();
    return expectShape(op, upName, up, {C, *r});
  };
  if (failed(gateInput("f", getF(), "f_b", getFB())) ||
      failed(gateInput("gate", getGate(), "g_b", getGB())))
    return failure();
  // The one conv state holds q, k and v at channel offsets 0, C and 2C.
  ConvStateType cs = getConvState().getType();
  if (cs.getChannels() != 3 * C || cs.getWindow() != W - 1)
    return emitOpError()
           << "expects conv_state with channels = 3*heads*head_dim = " << 3 * C
           << " and window = conv-1 = " << W - 1
           << " but got channels = " << cs.getChannels()
           << ", window = " << cs.getWindow();
  KdaStateType st = getState().getType();
  if (st.getHeads() != H || st.getKeyDim() != d || st.getValueDim() != d)
    return emitOpError() << "expects state of " << H << " heads x " << d
                         << " x " << d << " but got " << st.getHeads() << " x "
                         << st.getKeyDim() << " x " << st.getValueDim();
  return expectPositive(op, "eps", getEps().convertToDouble());
}

LogicalResult MlaDecodeOp::verify() {
  MlaConfigAttr c = getConfig();
  int64_t L = c.getKvLora(), R = c.getRope();
  Operation *op = *this;
  if (failed(expectShape(op, "kv", getKv(), {L + R})) ||
      failed(expectShape(op, "q", getQ(), {c.getQWidth()})) ||
      failed(expectShape(op, "kv_a_norm", getKvANorm(), {L})) ||
      failed(
          expectShape(op, "kv_b_proj", getKvBProj(), {c.getKvBWidth(), L})) ||
      failed(expectShape(op, "result", getResult().getType(), {c.getOWidth()})))
    return failure();
  // The config describes this op: a fusion that found no gate clears
  // output_gate, so the lowering can trust either.
  if (c.getOutputGate() != static_cast<bool>(getGate()))
    return emitOpError() << "expects " << (c.getOutputGate() ? "a" : "no")
                         << " gate operand because config has output_gate = "
                         << (c.getOutputGate() ? "true" : "false");
  if (getGate() && failed(expectShape(op, "gate", getGate(), {c.getOWidth()})))
    return failure();
  if (getCache().getType().getWidth() != L + R)
    return emitOpError() << "expects cache width kv_lora + rope = " << L + R
                         << " but got " << getCache().getType().getWidth();
  return expectPositive(op, "eps", getEps().convertToDouble());
}

/// The router and routed-expert operands both fused MoE forms share: gate
/// [E, D] and bias [E], top_k in [1, E], stacked expert weights [E, I, Dm]
/// (`expertIn` names Dm in the message), positive scaling.
template <typename OpT>
static LogicalResult verifyRoutedExperts(OpT op, int64_t D, int64_t Dm,
                                         StringRef expertIn) {
  SmallVector<int64_t> g = shapeOf(op.getGate().getType());
  if (g.size() != 2)
    return op.emitOpError()
           << "expects gate of rank 2 [experts, hidden] but got rank "
           << g.size();
  int64_t E = g[0], K = op.getTopK();
  if (K <= 0 || K > E)
    return op.emitOpError() << "expects top_k in [1, " << E << "] but got "
                            << K;
  SmallVector<int64_t> w1 = shapeOf(op.getW1().getType());
  if (w1.size() != 3)
    return op.emitOpError() << "expects stacked expert weights of rank 3 "
                               "[experts, intermediate, "
                            << expertIn << "] but got rank " << w1.size();
  Operation *o = op;
  if (failed(expectShape(o, "gate", op.getGate(), {E, D})) ||
      failed(expectShape(o, "bias", op.getBias(), {E})) ||
      failed(verifyGatedMlp(o, "", op.getW1(), op.getW3(), op.getW2(), E,
                            w1[1], Dm, Dm)) ||
      failed(expectPositive(o, "scaling", op.getScaling().convertToDouble())))
    return failure();
  return success();
}

LogicalResult RoutedExpertsOp::verify() {
  FailureOr<int64_t> dOr = vectorLength(*this, "x", getX());
  FailureOr<int64_t> dmOr =
      failed(dOr) ? dOr : vectorLength(*this, "z", getZ());
  if (failed(dmOr) || failed(verifyActivation(*this, getAct(), getSituBeta(),
                                              getSituLinearBeta())))
    return failure();
  int64_t D = *dOr, Dm = *dmOr;
  Operation *op = *this;
  if (failed(verifyRoutedExperts(*this, D, Dm, "latent")) ||
      failed(expectShape(op, "result", getResult().getType(), {Dm})))
    return failure();
  if (getNorm() && (failed(expectShape(op, "norm", getNorm(), {Dm})) ||
                    failed(verifyFusedNormEps(op, "a fused norm", getEps()))))
    return failure();
  return success();
}

LogicalResult MoeFfnOp::verify() {
  FailureOr<int64_t> dOr = vectorLength(*this, "h", getH());
  if (failed(dOr) || failed(verifyActivation(*this, getAct(), getSituBeta(),
                                             getSituLinearBeta())))
    return failure();
  int64_t D = *dOr;
  Operation *op = *this;
  if (failed(verifyRoutedExperts(*this, D, D, "hidden")) ||
      failed(expectShape(op, "norm", getNorm(), {D})) ||
      failed(expectPositive(op, "eps", getEps().convertToDouble())) ||
      failed(expectShape(op, "result", getResult().getType(), {D})))
    return failure();
  if (getSharedW1()) {
    SmallVector<int64_t> s1 = shapeOf(getSharedW1().getType());
    if (s1.size() != 2)
      return emitOpError() << "expects shared expert weights of rank 2 "
                              "[intermediate, hidden] but got rank "
                           << s1.size();
    if (failed(verifyGatedMlp(op, "shared_", getSharedW1(), getSharedW3(),
                              getSharedW2(), -1, s1[0], D, D)))
      return failure();
  }
  return success();
}

LogicalResult GatedMlpOp::verify() {
  FailureOr<int64_t> kOr = vectorLength(*this, "x", getX());
  if (failed(kOr) || failed(verifyActivation(*this, getAct(), getSituBeta(),
                                             getSituLinearBeta())))
    return failure();
  SmallVector<int64_t> w1 = shapeOf(getW1().getType());
  SmallVector<int64_t> w2 = shapeOf(getW2().getType());
  if (w1.size() != 2 || w2.size() != 2)
    return emitOpError() << "expects unstacked weights of rank 2 but got w1 "
                            "of rank "
                         << w1.size() << " and w2 of rank " << w2.size();
  int64_t K = *kOr, I = w1[0], N = w2[0];
  Operation *op = *this;
  if (failed(verifyGatedMlp(op, "", getW1(), getW3(), getW2(), -1, I, K, N)) ||
      failed(expectShape(op, "result", getResult().getType(), {N})))
    return failure();
  if (getNorm() && (failed(expectShape(op, "norm", getNorm(), {K})) ||
                    failed(verifyFusedNormEps(op, "a fused norm", getEps()))))
    return failure();
  if (getResidual() && failed(expectShape(op, "residual", getResidual(), {N})))
    return failure();
  return success();
}
