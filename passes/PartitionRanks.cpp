//===- PartitionRanks.cpp - One rank's part of a tensor-parallel step -----===//
//
// Megatron-style tensor parallelism on the coarse ops: a column-parallel
// projection keeps its rank's output rows, the row-parallel projection that
// consumes them keeps the matching input columns and yields a partial sum,
// and one all-reduce per sublayer joins the partials. Heads (KDA, MLA) and
// the MLP intermediate dimension are what is split, so every op between
// the two projections works on whole heads / channels of its rank and
// needs no communication. See Passes.td for what each op keeps whole.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>

#define DEBUG_TYPE "k3-partition-ranks"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3PARTITIONRANKS
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The MXFP4 block: an input split keeps whole blocks of this many values.
constexpr int64_t kMxfp4Block = 32;

SmallVector<int64_t> shapeOf(Type t) {
  if (auto tt = dyn_cast<RankedTensorType>(t))
    return SmallVector<int64_t>(tt.getShape());
  if (auto vw = dyn_cast<VectorWeightType>(t))
    return SmallVector<int64_t>(vw.getShape());
  return SmallVector<int64_t>(cast<Mxfp4Type>(t).getShape());
}

/// `t` with shape `shape` (same kind and element type).
Type withShape(Type t, ArrayRef<int64_t> shape) {
  if (auto tt = dyn_cast<RankedTensorType>(t))
    return RankedTensorType::get(shape, tt.getElementType());
  if (isa<VectorWeightType>(t))
    return VectorWeightType::get(t.getContext(), shape);
  return Mxfp4Type::get(t.getContext(), shape);
}

class Partitioner {
public:
  Partitioner(MLIRContext *ctx, int64_t ranks, int64_t rank)
      : b_(ctx), ranks_(ranks), rank_(rank) {}

  LogicalResult partition(func::FuncOp fn) {
    SmallVector<Operation *> ops;
    fn.walk([&](Operation *op) {
      if (isa<KdaOp, MlaOp, DenseMlpOp, MoeOp, LmHeadOp>(op))
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      LogicalResult r =
          TypeSwitch<Operation *, LogicalResult>(op)
              .Case<KdaOp>([&](KdaOp o) { return kda(o); })
              .Case<MlaOp>([&](MlaOp o) { return mla(o); })
              .Case<DenseMlpOp>([&](DenseMlpOp o) { return denseMlp(o); })
              .Case<MoeOp>([&](MoeOp o) { return moe(o); })
              .Case<LmHeadOp>([&](LmHeadOp o) { return lmHead(o); });
      if (failed(r))
        return failure();
    }
    // Weights and state slots whose users all took their rank's part.
    SmallVector<Operation *> dead;
    fn.walk([&](Operation *op) {
      if (isa<WeightOp, StateOp>(op) && op->use_empty())
        dead.push_back(op);
    });
    for (Operation *op : dead)
      op->erase();
    return success();
  }

private:
  /// `extent` (named `what` in messages) divided by the ranks, or an error
  /// on `op`.
  FailureOr<int64_t> perRank(Operation *op, StringRef what, int64_t extent) {
    if (extent % ranks_ != 0) {
      op->emitOpError() << "cannot be split over " << ranks_ << " ranks: its "
                        << what << " (" << extent << ") is not divisible by "
                        << ranks_;
      return failure();
    }
    return extent / ranks_;
  }

  /// Makes `op` use this rank's part of weight `w` along `axis` (a fresh
  /// k3.weight; other users of `w` keep the whole).
  LogicalResult split(Operation *op, Value w, int64_t axis, StringRef what) {
    auto weight = w.getDefiningOp<WeightOp>();
    if (!weight)
      return op->emitOpError()
             << "cannot be split: its " << what << " is not a k3.weight";
    SmallVector<int64_t> shape = shapeOf(w.getType());
    if (axis < 0)
      axis += static_cast<int64_t>(shape.size());
    FailureOr<int64_t> part = perRank(op, what, shape[axis]);
    if (failed(part))
      return failure();
    if (isa<Mxfp4Type>(w.getType()) &&
        axis == static_cast<int64_t>(shape.size()) - 1 &&
        *part % kMxfp4Block != 0)
      return op->emitOpError()
             << "cannot be split over " << ranks_ << " ranks: its MXFP4 "
             << what << " has " << shape[axis] << " inputs, " << *part
             << " per rank, not whole blocks of " << kMxfp4Block;
    shape[axis] = *part;
    b_.setInsertionPoint(weight);
    Value parted =
        WeightOp::create(b_, weight.getLoc(), withShape(w.getType(), shape),
                         weight.getNameAttr(),
                         SplitAttr::get(b_.getContext(), axis, rank_, ranks_));
    op->replaceUsesOfWith(w, parted);
    return success();
  }

  /// Makes `op` use a state slot of the same name with type `type` (the
  /// rank's heads).
  void resizeState(Operation *op, Value s, Type type) {
    auto st = s.getDefiningOp<StateOp>();
    b_.setInsertionPoint(st);
    Value parted = StateOp::create(b_, st.getLoc(), type, st.getSlotAttr());
    op->replaceUsesOfWith(s, parted);
  }

  /// The sum of every rank's output of `op` replaces it for all its users.
  void allReduce(Operation *op) {
    Value partial = op->getResult(0);
    b_.setInsertionPointAfter(op);
    auto sum = AllReduceOp::create(b_, op->getLoc(), partial.getType(), partial,
                                   b_.getI64IntegerAttr(ranks_));
    partial.replaceAllUsesExcept(sum.getResult(), sum);
  }

  LogicalResult kda(KdaOp op) {
    KdaConfigAttr c = op.getConfig();
    FailureOr<int64_t> heads = perRank(op, "heads", c.getHeads());
    if (failed(heads))
      return failure();
    // A_log is [H] or [1, 1, H, 1] (the published layout), possibly padded
    // (K3: 128 values for 96 heads): the rank's heads are the whole's H
    // split, along its one non-unit dimension.
    SmallVector<int64_t> aLog = shapeOf(op.getALog().getType());
    int64_t aLogAxis =
        std::max_element(aLog.begin(), aLog.end()) - aLog.begin();
    if (failed(split(op, op.getQProj(), 0, "q_proj rows")) ||
        failed(split(op, op.getKProj(), 0, "k_proj rows")) ||
        failed(split(op, op.getVProj(), 0, "v_proj rows")) ||
        failed(split(op, op.getQConv(), 0, "q_conv channels")) ||
        failed(split(op, op.getKConv(), 0, "k_conv channels")) ||
        failed(split(op, op.getVConv(), 0, "v_conv channels")) ||
        failed(split(op, op.getFBProj(), 0, "f_b_proj rows")) ||
        failed(split(op, op.getDtBias(), 0, "dt_bias")) ||
        failed(split(op, op.getBProj(), 0, "b_proj rows")) ||
        failed(split(op, op.getOProj(), 1, "o_proj inputs")))
      return failure();
    if (aLog[aLogAxis] != c.getHeads()) {
      // Padded: the rank's part of the first H values.
      SmallVector<int64_t> whole = aLog;
      whole[aLogAxis] = c.getHeads();
      auto w = op.getALog().getDefiningOp<WeightOp>();
      b_.setInsertionPoint(w);
      Value narrowed =
          WeightOp::create(b_, w.getLoc(), withShape(w.getType(), whole),
                           w.getNameAttr(), SplitAttr());
      op->replaceUsesOfWith(op.getALog(), narrowed);
    }
    if (failed(split(op, op.getALog(), aLogAxis, "A_log heads")))
      return failure();
    if (op.getGProj() && failed(split(op, op.getGProj(), 0, "g_proj rows")))
      return failure();
    if (op.getGBProj() && failed(split(op, op.getGBProj(), 0, "g_b_proj rows")))
      return failure();
    MLIRContext *ctx = op.getContext();
    int64_t d = c.getHeadDim(), W = c.getConv();
    resizeState(op, op.getConvState(),
                ConvStateType::get(ctx, 3 * *heads * d, W - 1));
    resizeState(op, op.getState(), KdaStateType::get(ctx, *heads, d, d));
    op.setConfigAttr(KdaConfigAttr::get(ctx, *heads, d, W, c.getFullRankGate(),
                                        c.getLowerBound()));
    allReduce(op);
    return success();
  }

  LogicalResult mla(MlaOp op) {
    MlaConfigAttr c = op.getConfig();
    FailureOr<int64_t> heads = perRank(op, "heads", c.getHeads());
    if (failed(heads))
      return failure();
    if (op.getQProj() && failed(split(op, op.getQProj(), 0, "q_proj rows")))
      return failure();
    if (op.getQBProj() && failed(split(op, op.getQBProj(), 0, "q_b_proj rows")))
      return failure();
    if (op.getGProj() && failed(split(op, op.getGProj(), 0, "g_proj rows")))
      return failure();
    if (failed(split(op, op.getKvBProj(), 0, "kv_b_proj rows")) ||
        failed(split(op, op.getOProj(), 1, "o_proj inputs")))
      return failure();
    op.setConfigAttr(MlaConfigAttr::get(op.getContext(), *heads, c.getQLora(),
                                        c.getKvLora(), c.getNope(), c.getRope(),
                                        c.getVDim(), c.getOutputGate()));
    allReduce(op);
    return success();
  }

  /// w1 / w3 column-parallel, w2 row-parallel; `axis0` is the first axis of
  /// one matrix (1 for stacked experts).
  LogicalResult gatedMlp(Operation *op, Value w1, Value w3, Value w2,
                         int64_t axis0, StringRef what) {
    std::string rows = (what + " w1/w3 rows").str();
    std::string inputs = (what + " w2 inputs").str();
    if (failed(split(op, w1, axis0, rows)) ||
        failed(split(op, w3, axis0, rows)) ||
        failed(split(op, w2, axis0 + 1, inputs)))
      return failure();
    return success();
  }

  LogicalResult denseMlp(DenseMlpOp op) {
    if (failed(gatedMlp(op, op.getW1(), op.getW3(), op.getW2(), 0, "mlp")))
      return failure();
    allReduce(op);
    return success();
  }

  LogicalResult moe(MoeOp op) {
    MoeConfigAttr c = op.getConfig();
    FailureOr<int64_t> inter =
        perRank(op, "expert intermediate size", c.getIntermediate());
    if (failed(inter) ||
        failed(gatedMlp(op, op.getW1(), op.getW3(), op.getW2(), 1, "expert")))
      return failure();
    if (op.getSharedW1() &&
        failed(gatedMlp(op, op.getSharedW1(), op.getSharedW3(),
                        op.getSharedW2(), 0, "shared expert")))
      return failure();
    op.setConfigAttr(MoeConfigAttr::get(op.getContext(), c.getExperts(),
                                        c.getTopK(), *inter, c.getShared(),
                                        c.getRenormalize(), c.getScaling()));
    allReduce(op);
    return success();
  }

  LogicalResult lmHead(LmHeadOp op) {
    if (failed(split(op, op.getWeight(), 0, "vocabulary rows")))
      return failure();
    auto whole = cast<RankedTensorType>(op.getLogits().getType());
    op.getLogits().setType(RankedTensorType::get({whole.getShape()[0] / ranks_},
                                                 whole.getElementType()));
    b_.setInsertionPointAfter(op);
    auto gathered = AllGatherOp::create(b_, op.getLoc(), whole, op.getLogits(),
                                        b_.getI64IntegerAttr(ranks_));
    op.getLogits().replaceAllUsesExcept(gathered.getResult(), gathered);
    return success();
  }

  OpBuilder b_;
  const int64_t ranks_;
  const int64_t rank_;
};

struct K3PartitionRanksPass
    : mlir::k3::impl::K3PartitionRanksBase<K3PartitionRanksPass> {
  using K3PartitionRanksBase::K3PartitionRanksBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (ranks < 1 || rank < 0 || rank >= ranks) {
      module.emitError() << "k3-partition-ranks: rank " << rank << " of ranks "
                         << ranks
                         << " (expected ranks >= 1 and 0 <= rank < ranks)";
      return signalPassFailure();
    }
    if (ranks == 1)
      return;
    auto fn = module.lookupSymbol<func::FuncOp>(kDecodeStepName);
    if (!fn) {
      module.emitError() << "k3-partition-ranks: expects a function @"
                         << kDecodeStepName;
      return signalPassFailure();
    }
    Partitioner p(&getContext(), ranks, rank);
    if (failed(p.partition(fn)))
      return signalPassFailure();
    Builder b(&getContext());
    module->setAttr(kRanksAttrName, b.getI64IntegerAttr(ranks));
    module->setAttr(kRankAttrName, b.getI64IntegerAttr(rank));
  }
};

} // namespace
