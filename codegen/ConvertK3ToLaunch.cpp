//===- ConvertK3ToLaunch.cpp - fused k3 IR to k3l launches ----------------===//
//
// Walks the decode step in order. Weights and state become k3l.weight /
// k3l.state pointers, every tensor result a k3l.alloc, and every op the
// launches of the kernels that compute it, with arguments named after the
// kernel's params fields (docs/PLAN.md). A fused op may lower to more than
// one launch (k3.mla_decode: projection, append, attend).
//
// The walk is a straight-line lowering rather than a dialect conversion:
// the decode step has no control flow, and every op needs the same context
// (pointer of each operand, a fresh allocation per result), so one visitor
// with one method per op is the simplest correct form.
//
//===----------------------------------------------------------------------===//
#include "codegen/Codegen.h"

#include "kernels/attnres/AttnResParams.h"
#include "kernels/gemv/GemvParams.h"
#include "kernels/mla/MlaParams.h"
#include "kernels/moe/MoeParams.h"
#include "runtime/plan/Plan.h"

#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Allocator.h"
#include "llvm/Support/StringSaver.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#define DEBUG_TYPE "convert-k3-to-launch"

namespace mlir::k3 {
#define GEN_PASS_DEF_CONVERTK3TOLAUNCH
#include "codegen/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

/// A pointer argument: field name, value, byte offset.
struct PtrArg {
  StringRef name;
  Value ptr;
  int64_t offset = 0;
};
/// A scalar argument: integer or float.
struct ScalarArg {
  StringRef name;
  double value;
  bool isFloat;
};
ScalarArg I(StringRef n, int64_t v) {
  return {n, static_cast<double>(v), false};
}
ScalarArg F(StringRef n, double v) { return {n, v, true}; }

/// The router scalars `sc`, plus `forceExpert` when `op` carries the test
/// mutant attribute `k3.mutant.force_expert` (see k3-inject-mutant).
SmallVector<ScalarArg> forceExpertArg(Operation *op,
                                      SmallVector<ScalarArg> sc) {
  if (auto f = op->getAttrOfType<IntegerAttr>("k3.mutant.force_expert"))
    sc.push_back(I("forceExpert", f.getInt()));
  return sc;
}

/// The logical shape of a tensor, MXFP4 or vector weight.
ArrayRef<int64_t> shapeOf(Type t) {
  if (auto tt = dyn_cast<RankedTensorType>(t))
    return tt.getShape();
  if (auto vw = dyn_cast<VectorWeightType>(t))
    return vw.getShape();
  return cast<Mxfp4Type>(t).getShape();
}
int64_t numel(Type t) {
  int64_t n = 1;
  if (isa<RankedTensorType, VectorWeightType>(t))
    for (int64_t d : shapeOf(t))
      n *= d;
  return n;
}
int64_t dimOf(Value v, unsigned i) { return shapeOf(v.getType())[i]; }
int64_t len(Value v) { return numel(v.getType()); }
int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// SMs of the target (H100 / H200 SXM). Grids below are a speed choice only:
/// every kernel is correct for any grid (kernels/common/CudaCommon.cuh).
constexpr int64_t kTargetSms = 132;

/// `linear` / `linear_multi` over n rows: a warp per row (8 per 256-thread
/// block), but at least two blocks per SM so short matrices split rows over
/// warps instead of leaving SMs idle, and, with a fused pre-norm (which
/// every block recomputes and restages), at most four blocks per SM.
int64_t gemvGrid(int64_t n, bool norm) {
  int64_t g = std::max(ceilDiv(n, 8), 2 * kTargetSms);
  return norm ? std::min(g, 4 * kTargetSms) : g;
}

/// `mla_attend` over `heads` heads of a cache of up to `maxSeq` rows. With
/// L <= 512 and R <= 64, multiples of 8 (K3 and Kimi-Linear), one block per
/// SM: the CUDA kernel's all-heads form (from 4096 rows; Mla.cu) is a work
/// queue whose items are cut from the context alone, and its per-head form
/// (shorter contexts) splits each head's rows over grid / heads blocks at
/// most, which measured as fast at 1024 rows as the per-head grid below and
/// faster at 4096. Other shapes run a block per (head, split of the rows):
/// room for S <= 16 splits (the kernel merges them), S such that a split
/// has at least max(256, 8 · heads) rows at the planned context; short
/// contexts run unsplit.
int64_t mlaAttendGrid(int64_t heads, int64_t latent, int64_t rope,
                      int64_t maxSeq) {
  if (heads <= ::k3::kMlaAllHeadsMaxHeads && latent >= 8 &&
      latent <= ::k3::kMlaAllHeadsMaxLatent && latent % 8 == 0 &&
      rope <= ::k3::kMlaAllHeadsMaxRope && rope % 8 == 0)
    return kTargetSms;
  if (heads > 128) // the kernel's split limit
    return heads;
  const int64_t minRows = std::max<int64_t>(256, 8 * heads);
  return heads * std::clamp<int64_t>(maxSeq / minRows, 1, 16);
}

/// Blocks of the cluster that attends one head in mla_attend_clustered
/// (Mla.cu: L = 512, P = V = 128, R a multiple of 8 up to 256, 256
/// threads, two blocks per SM), when the clusters fit the SMs at once; 1:
/// mla_attend on the grid of mlaAttendGrid. The clustered form attends at
/// most kMlaClusteredMaxRows rows: a longer cache also gets an mla_attend
/// launch for the contexts above them (lowerMlaAttend). Measured on the
/// H200: docs/PERF.md 2026-12-03.
int64_t mlaAttendCluster(int64_t heads, int64_t nope, int64_t rope,
                         int64_t vDim, int64_t latent) {
  constexpr int64_t kBlocks = ::k3::kMlaClusterBlocks;
  const bool shape = latent == 512 && nope == 128 && vDim == 128 &&
                     rope >= 8 && rope <= 256 && rope % 8 == 0;
  return shape && heads * kBlocks <= 2 * kTargetSms ? kBlocks : 1;
}

/// The router: a warp per expert row, 8 per 256-thread block.
int64_t routerGrid(Value gate) { return ceilDiv(dimOf(gate, 0), 8); }

/// gated_mlp and moe_experts draw their work items from a queue (the CUDA
/// kernels), so about four resident blocks per SM keep every SM streaming.
constexpr int64_t kWorkQueueGrid = 4 * kTargetSms;

/// moe_ffn draws from the same queue, but three blocks per SM beat four in
/// the whole step (H200, the 32-expert Kimi-Linear stand-in: 2666 against
/// 2701 µs in two sweeps, docs/PERF.md 2026-12-03): the free slot lets the
/// next launch's blocks start their pre-wait work while the queue drains,
/// and fewer blocks spin on the routing flag. Five per SM measured about the
/// same (2655); two per SM, or blocks of 512 or 1024 threads, slower.
constexpr int64_t kMoeFfnGrid = 3 * kTargetSms;

/// The KDA state kernels (kda_step, kda_decode): one block
/// per (head, 32 value columns), so a K3 layer's 96 heads stream their state
/// from 384 blocks at once. The unfused and fused forms get the same grid,
/// which the CUDA kernels need to agree bit for bit.
int64_t kdaStateGrid(int64_t heads, int64_t headDim) {
  return heads * ceilDiv(headDim, 32);
}

/// Blocks of the cluster that finishes one head of kda_decode (its 4
/// slices of 32 value columns), when the head and conv fit the clustered
/// path of the kernel: headDim 128, at most 4 conv taps, 256 threads. 1: the
/// kernel's global-memory path.
int64_t kdaDecodeCluster(int64_t headDim, int64_t convWidth) {
  return headDim == 128 && convWidth <= 4 ? 4 : 1;
}

/// SiTU/SwiGLU arguments shared by gated_act, gated_mlp, moe_experts.
void activationArgs(std::optional<Activation> act, std::optional<APFloat> b1,
                    std::optional<APFloat> b2,
                    SmallVectorImpl<ScalarArg> &out) {
  bool situ = act && *act == Activation::situ;
  out.push_back(I("activation", situ ? 0 : 1));
  if (situ) {
    // No fallback value: an op without its beta leaves the field out, and
    // the plan validator refuses the launch (every scalar is required).
    if (b1)
      out.push_back(F("beta1", b1->convertToDouble()));
    out.push_back(I("hasBeta2", b2 ? 1 : 0));
    if (b2)
      out.push_back(F("beta2", b2->convertToDouble()));
  }
}

class Lowering {
public:
  Lowering(func::FuncOp fn, bool kdaClusters, bool mlaClusters,
           bool attnResClusters, bool moeMxfp4Mma)
      : fn_(fn), b_(fn.getContext()), kdaClusters_(kdaClusters),
        mlaClusters_(mlaClusters), attnResClusters_(attnResClusters),
        moeMxfp4Mma_(moeMxfp4Mma) {}

  LogicalResult run();

private:
  Value ptr(Value v) {
    auto it = ptrs_.find(v);
    assert(it != ptrs_.end() && "operand lowered before its use");
    return it->second;
  }
  /// A fresh scratch buffer for `result` (bf16, f32 or i32 elements).
  Value alloc(Value result, StringRef name) {
    auto t = cast<RankedTensorType>(result.getType());
    Type e = t.getElementType();
    int64_t size = e.isBF16() ? 2 : 4;
    StringRef dtype = e.isBF16() ? "bf16" : (e.isF32() ? "f32" : "i32");
    Value p = k3l::AllocOp::create(
        b_, loc_, k3l::PtrType::get(b_.getContext()),
        b_.getI64IntegerAttr(numel(t) * size), b_.getStringAttr(dtype),
        b_.getI64IntegerAttr(numel(t)), b_.getStringAttr(name), IntegerAttr());
    ptrs_[result] = p;
    return p;
  }
  void launch(StringRef kernel, Operation *op, ArrayRef<PtrArg> args,
              ArrayRef<ScalarArg> scalars,
              ArrayRef<std::pair<StringRef, StringRef>> inputs, int64_t gridX,
              int64_t blockX = 256, int64_t clusterX = 1) {
    SmallVector<Value> vals;
    SmallVector<Attribute> names;
    SmallVector<int64_t> offsets;
    for (const PtrArg &a : args) {
      if (!a.ptr)
        continue; // optional field left null
      vals.push_back(a.ptr);
      names.push_back(b_.getStringAttr(a.name));
      offsets.push_back(a.offset);
    }
    SmallVector<NamedAttribute> sc, in;
    for (const ScalarArg &s : scalars)
      sc.push_back(b_.getNamedAttr(
          s.name, s.isFloat ? Attribute(b_.getF64FloatAttr(s.value))
                            : Attribute(b_.getI64IntegerAttr(
                                  static_cast<int64_t>(s.value)))));
    for (auto [field, input] : inputs)
      in.push_back(b_.getNamedAttr(field, b_.getStringAttr(input)));
    k3l::LaunchOp::create(
        b_, loc_, b_.getStringAttr(kernel), vals, b_.getArrayAttr(names),
        b_.getDenseI64ArrayAttr(offsets), b_.getDictionaryAttr(sc),
        b_.getDictionaryAttr(in),
        b_.getDenseI64ArrayAttr({std::max<int64_t>(gridX, 1), 1, 1}),
        b_.getDenseI64ArrayAttr({blockX, 1, 1}), b_.getI64IntegerAttr(0),
        b_.getStringAttr(op->getName().getStringRef()),
        clusterX > 1 ? b_.getDenseI64ArrayAttr({clusterX, 1, 1})
                     : DenseI64ArrayAttr());
  }
  /// A scratch buffer that no k3 value names (intermediates of fused ops).
  Value scratch(int64_t elems, StringRef dtype, StringRef name) {
    int64_t size = dtype == "bf16" ? 2 : 4;
    return k3l::AllocOp::create(
        b_, loc_, k3l::PtrType::get(b_.getContext()),
        b_.getI64IntegerAttr(elems * size), b_.getStringAttr(dtype),
        b_.getI64IntegerAttr(elems), b_.getStringAttr(name), IntegerAttr());
  }
  /// Pointer of an optional operand (null when absent).
  Value opt(Value v) { return v ? ptr(v) : Value(); }

  // Leaves.
  void lowerWeight(WeightOp op);
  void lowerState(StateOp op);
  // Ops.
  LogicalResult lower(Operation *op);
  void lowerLinear(LinearOp op, StringRef name = "linear");
  /// k3.linear_group: one `linear_multi` launch over all its projections.
  void lowerLinearGroup(LinearGroupOp op);
  /// The `mla_attend` launch of `op` (k3.mla_attend or k3.mla_decode):
  /// absorbed attention over the cache with the optional output gate.
  void lowerMlaAttend(Operation *op, MlaConfigAttr c, Value q, Value kvB,
                      Value cache, Value gate, Value out);
  /// An input RMSNorm folded into a launch: its weight (null: none) and eps.
  struct FoldedNorm {
    Value weight;
    double eps = 0.0;
  };
  /// What a `moe_experts` launch adds to the routed mix (MoeExpertsParams):
  /// the shared expert's weights (all null: none) and the residual.
  struct ExpertExtras {
    Value sharedW1, sharedW3, sharedW2, residual;
  };
  /// A launch's arguments before they are bound to a kernel.
  struct LaunchArgs {
    SmallVector<PtrArg> ptrs;
    SmallVector<ScalarArg> scalars;
  };
  /// The `router` arguments of `op` (k3.router, k3.routed_experts or
  /// k3.moe_ffn): top-k ids and mixing weights into `ids` / `weights`.
  LaunchArgs routerArgs(Operation *op, Value x, FoldedNorm norm, Value gate,
                        Value bias, int64_t topK, bool renorm, double scaling,
                        Value ids, Value weights);
  /// The `moe_experts` arguments of `op`: the weighted mix of the chosen
  /// experts' gated MLPs on `x` (+ `extras`) into `out`.
  LaunchArgs expertsArgs(Operation *op, Value x, FoldedNorm norm, Value ids,
                         Value weights, int64_t topK, Value w1, Value w3,
                         Value w2, const ExpertExtras &extras, Value out,
                         std::optional<Activation> act,
                         std::optional<APFloat> b1, std::optional<APFloat> b2);
  /// `args` with every name under `prefix` (a nested params struct).
  void appendPrefixed(StringRef prefix, const LaunchArgs &args,
                      LaunchArgs &out);

  func::FuncOp fn_;
  OpBuilder b_;
  /// The kernel of a routed-expert mix (no norm, no shared expert) on
  /// these tables: moe_experts_mxfp4 where moe-mxfp4-mma is on, the tables
  /// are MXFP4 and their sizes fit it; moe_experts otherwise.
  StringRef expertsKernel(Value w1, Value w3, Value w2) const;

  /// The pass options kda-clusters, mla-clusters, attn-res-clusters and
  /// moe-mxfp4-mma.
  bool kdaClusters_, mlaClusters_, attnResClusters_, moeMxfp4Mma_;
  Location loc_ = UnknownLoc::get(fn_.getContext());
  DenseMap<Value, Value> ptrs_;
  /// Storage of the prefixed field names (the launch op copies them).
  llvm::BumpPtrAllocator nameAlloc_;
  llvm::StringSaver names_{nameAlloc_};
};

void Lowering::lowerWeight(WeightOp op) {
  Type t = op.getType();
  StringRef format = "bf16";
  SmallVector<int64_t> shape;
  if (auto mx = dyn_cast<Mxfp4Type>(t)) {
    format = "mxfp4";
    shape.assign(mx.getShape().begin(), mx.getShape().end());
  } else if (auto vw = dyn_cast<VectorWeightType>(t)) {
    format = "vector"; // bf16 or f32, as the checkpoint stores it
    shape.assign(vw.getShape().begin(), vw.getShape().end());
  } else {
    auto tt = cast<RankedTensorType>(t);
    if (tt.getElementType().isF32())
      format = "f32";
    shape.assign(tt.getShape().begin(), tt.getShape().end());
  }
  DenseI64ArrayAttr split;
  if (std::optional<SplitAttr> s = op.getSplit())
    split =
        b_.getDenseI64ArrayAttr({s->getAxis(), s->getRank(), s->getRanks()});
  ptrs_[op.getResult()] = k3l::WeightOp::create(
      b_, loc_, k3l::PtrType::get(b_.getContext()), op.getNameAttr(),
      b_.getStringAttr(format), b_.getDenseI64ArrayAttr(shape), split);
}

void Lowering::lowerState(StateOp op) {
  Type t = op.getType();
  StringRef kind;
  SmallVector<int64_t> shape;
  int64_t bytes = 0;
  if (auto s = dyn_cast<KdaStateType>(t)) {
    kind = ::k3::stateKindName(::k3::StateKind::KdaState);
    shape = {s.getHeads(), s.getKeyDim(), s.getValueDim()};
    bytes = s.getSizeInBytes();
  } else if (auto s = dyn_cast<ConvStateType>(t)) {
    kind = ::k3::stateKindName(::k3::StateKind::ConvState);
    shape = {s.getChannels(), s.getWindow()};
    // A conv of width 1 keeps no history; keep the slot non-empty anyway.
    bytes = std::max<int64_t>(s.getSizeInBytes(), 4);
  } else if (auto s = dyn_cast<MlaCacheType>(t)) {
    kind = ::k3::stateKindName(::k3::StateKind::MlaCache);
    shape = {s.getMaxSeq(), s.getWidth()};
    bytes = s.getSizeInBytes();
  } else {
    auto a = cast<AttnResBlocksType>(t);
    kind = ::k3::stateKindName(::k3::StateKind::AttnResBlocks);
    shape = {a.getMaxBlocks(), a.getHidden()};
    bytes = a.getSizeInBytes();
  }
  ptrs_[op.getResult()] = k3l::StateOp::create(
      b_, loc_, k3l::PtrType::get(b_.getContext()), op.getSlotAttr(),
      b_.getStringAttr(kind), b_.getI64IntegerAttr(bytes),
      b_.getDenseI64ArrayAttr(shape));
}

void Lowering::lowerLinear(LinearOp op, StringRef name) {
  Value x = ptr(op.getX()), w = ptr(op.getWeight());
  bool f32 = op.getResult().getType().getElementType().isF32();
  Value out = alloc(op.getResult(), name);
  int64_t n = dimOf(op.getWeight(), 0), k = dimOf(op.getWeight(), 1);
  SmallVector<ScalarArg> sc = {I("n", n), I("k", k)};
  if (op.getNorm())
    sc.push_back(F("normEps", op.getEps()->convertToDouble()));
  launch("linear", op,
         {{"x", x},
          {"w", w},
          {"normWeight", opt(op.getNorm())},
          {"residual", opt(op.getResidual())},
          {f32 ? "outF32" : "out", out}},
         sc, {}, gemvGrid(n, static_cast<bool>(op.getNorm())));
}

void Lowering::lowerLinearGroup(LinearGroupOp op) {
  // Field names are LinearMultiParams' entries as the plan names them
  // (w<i>, n<i>, out<i>; runtime/plan/PlanKernels.cpp).
  static constexpr StringLiteral kW[] = {"w0", "w1", "w2", "w3",
                                         "w4", "w5", "w6", "w7"};
  static constexpr StringLiteral kN[] = {"n0", "n1", "n2", "n3",
                                         "n4", "n5", "n6", "n7"};
  static constexpr StringLiteral kOut[] = {"out0", "out1", "out2", "out3",
                                           "out4", "out5", "out6", "out7"};
  static_assert(std::size(kW) == ::k3::kLinearMultiMax,
                "one field name per linear_multi entry");
  int64_t count = op.getWeights().size(), k = len(op.getX()), rows = 0;
  // Allocations in result order (buffer order is plan output).
  SmallVector<Value> outs;
  for (Value r : op.getResults())
    outs.push_back(alloc(r, "linear_group"));
  SmallVector<PtrArg> args = {{"x", ptr(op.getX())},
                              {"normWeight", opt(op.getNorm())}};
  SmallVector<ScalarArg> sc = {I("k", k), I("count", count)};
  if (op.getNorm())
    sc.push_back(F("normEps", op.getEps()->convertToDouble()));
  for (auto [i, w] : llvm::enumerate(op.getWeights())) {
    int64_t n = dimOf(w, 0);
    rows += n;
    args.push_back({kW[i], ptr(w)});
    args.push_back({kOut[i], outs[i]});
    sc.push_back(I(kN[i], n));
  }
  // One index space over every entry's rows (k3_linear_multi).
  launch("linear_multi", op, args, sc, {},
         gemvGrid(rows, static_cast<bool>(op.getNorm())));
}

void Lowering::lowerMlaAttend(Operation *op, MlaConfigAttr c, Value q,
                              Value kvB, Value cache, Value gate, Value out) {
  const int64_t maxSeq = isa<MlaCacheType>(cache.getType())
                             ? cast<MlaCacheType>(cache.getType()).getMaxSeq()
                             : 0;
  const int64_t cluster =
      mlaClusters_ ? mlaAttendCluster(c.getHeads(), c.getNope(), c.getRope(),
                                      c.getVDim(), c.getKvLora())
                   : 1;
  // A cache longer than the clustered form attends: the clustered launch
  // hands the contexts above its rows over to an mla_attend launch after it
  // (each returns at once on the other's contexts).
  const int64_t handover = cluster > 1 && maxSeq > ::k3::kMlaClusteredMaxRows
                               ? ::k3::kMlaClusteredMaxRows
                               : 0;
  auto attend = [&](const char *kernel, int64_t grid, int64_t clusterX) {
    SmallVector<ScalarArg> sc = {
        I("numHeads", c.getHeads()),
        I("nopeDim", c.getNope()),
        I("ropeDim", c.getRope()),
        I("vDim", c.getVDim()),
        I("kvLoraRank", c.getKvLora()),
        F("scale",
          1.0 / std::sqrt(static_cast<double>(c.getNope() + c.getRope())))};
    if (handover > 0)
      sc.push_back(I("handover", handover));
    launch(kernel, op,
           {{"q", ptr(q)},
            {"kvB", ptr(kvB)},
            {"cache", ptr(cache)},
            {"gate", opt(gate)},
            {"out", out}},
           sc, {{"length", "length"}, {"step", "step"}}, grid,
           /*blockX=*/256, clusterX);
  };
  if (cluster > 1)
    attend("mla_attend_clustered", c.getHeads() * cluster, cluster);
  if (cluster == 1 || handover > 0)
    attend("mla_attend",
           mlaAttendGrid(c.getHeads(), c.getKvLora(), c.getRope(), maxSeq), 1);
}

Lowering::LaunchArgs Lowering::routerArgs(Operation *op, Value x,
                                           FoldedNorm norm, Value gate,
                                           Value bias, int64_t topK,
                                           bool renorm, double scaling,
                                           Value ids, Value weights) {
  LaunchArgs a;
  a.scalars = {I("numExperts", dimOf(gate, 0)), I("dim", dimOf(gate, 1)),
               I("topK", topK), I("renormalize", renorm ? 1 : 0),
               F("scaling", scaling)};
  if (norm.weight)
    a.scalars.push_back(F("normEps", norm.eps));
  a.scalars = forceExpertArg(op, a.scalars);
  a.ptrs = {{"h", ptr(x)},
            {"normWeight", opt(norm.weight)},
            {"gate", ptr(gate)},
            {"bias", ptr(bias)},
            {"outIds", ids},
            {"outWeights", weights}};
  return a;
}

Lowering::LaunchArgs
Lowering::expertsArgs(Operation *op, Value x, FoldedNorm norm, Value ids,
                      Value weights, int64_t topK, Value w1, Value w3,
                      Value w2, const ExpertExtras &extras, Value out,
                      std::optional<Activation> act, std::optional<APFloat> b1,
                      std::optional<APFloat> b2) {
  LaunchArgs a;
  a.scalars = {I("topK", topK), I("numExperts", dimOf(w1, 0)),
               I("dim", dimOf(w1, 2)), I("interDim", dimOf(w1, 1))};
  activationArgs(act, b1, b2, a.scalars);
  if (norm.weight)
    a.scalars.push_back(F("normEps", norm.eps));
  if (extras.sharedW1)
    a.scalars.push_back(I("sharedInterDim", dimOf(extras.sharedW1, 0)));
  a.ptrs = {{"x", ptr(x)},
            {"ids", ids},
            {"weights", weights},
            {"w1", ptr(w1)},
            {"w3", ptr(w3)},
            {"w2", ptr(w2)},
            {"normWeight", opt(norm.weight)},
            {"sharedW1", opt(extras.sharedW1)},
            {"sharedW3", opt(extras.sharedW3)},
            {"sharedW2", opt(extras.sharedW2)},
            {"residual", opt(extras.residual)},
            {"out", out}};
  return a;
}

StringRef Lowering::expertsKernel(Value w1, Value w3, Value w2) const {
  const bool mxfp4 = isa<Mxfp4Type>(w1.getType()) &&
                     isa<Mxfp4Type>(w3.getType()) &&
                     isa<Mxfp4Type>(w2.getType());
  if (moeMxfp4Mma_ && mxfp4 &&
      ::k3::moeExpertsMxfp4Fits(dimOf(w1, 2), dimOf(w1, 1), false, false))
    return "moe_experts_mxfp4";
  return "moe_experts";
}

void Lowering::appendPrefixed(StringRef prefix, const LaunchArgs &args,
                              LaunchArgs &out) {
  for (PtrArg p : args.ptrs) {
    p.name = names_.save(prefix + p.name);
    out.ptrs.push_back(p);
  }
  for (ScalarArg s : args.scalars) {
    s.name = names_.save(prefix + s.name);
    out.scalars.push_back(s);
  }
}

LogicalResult Lowering::lower(Operation *op) {
  loc_ = op->getLoc();
  // Tensors and state must come from ops lowered earlier (weights, state
  // slots, other launches); only the step's token and pos are arguments.
  for (Value v : op->getOperands())
    if (!isa<IntegerType, IndexType>(v.getType()) && !ptrs_.count(v))
      return op->emitOpError()
             << "uses a value with no lowering (a tensor or state that is "
                "not a k3.weight, k3.state or an op result): only the token "
                "and the position may be arguments of the decode step";
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case<WeightOp>([&](WeightOp o) {
        lowerWeight(o);
        return success();
      })
      .Case<StateOp>([&](StateOp o) {
        lowerState(o);
        return success();
      })
      .Case<EmbedOp>([&](EmbedOp o) {
        Value out = alloc(o.getResult(), "embed");
        launch("embed", o, {{"table", ptr(o.getTable())}, {"out", out}},
               {I("vocab", dimOf(o.getTable(), 0)),
                I("dim", dimOf(o.getTable(), 1))},
               {{"token", "token"}, {"step", "step"}}, 1);
        return success();
      })
      .Case<RmsNormOp>([&](RmsNormOp o) {
        Value out = alloc(o.getResult(), "rms_norm");
        launch("rms_norm", o,
               {{"x", ptr(o.getX())}, {"w", ptr(o.getWeight())}, {"out", out}},
               {I("n", len(o.getX())), F("eps", o.getEps().convertToDouble())},
               {}, 1);
        return success();
      })
      .Case<LinearOp>([&](LinearOp o) {
        lowerLinear(o);
        return success();
      })
      .Case<LinearGroupOp>([&](LinearGroupOp o) {
        lowerLinearGroup(o);
        return success();
      })
      .Case<AllReduceOp>([&](AllReduceOp o) {
        Value out = alloc(o.getResult(), "all_reduce");
        launch("all_reduce", o, {{"x", ptr(o.getPartial())}, {"out", out}},
               {I("n", len(o.getPartial()))}, {}, 1);
        return success();
      })
      .Case<AllGatherOp>([&](AllGatherOp o) {
        Value out = alloc(o.getResult(), "all_gather");
        launch("all_gather", o, {{"x", ptr(o.getPart())}, {"out", out}},
               {I("n", len(o.getPart())), I("ranks", o.getRanks())}, {}, 1);
        return success();
      })
      .Case<AddOp>([&](AddOp o) {
        Value out = alloc(o.getResult(), "add");
        launch("add", o,
               {{"a", ptr(o.getLhs())}, {"b", ptr(o.getRhs())}, {"out", out}},
               {I("n", len(o.getLhs()))}, {}, ceilDiv(len(o.getLhs()), 256));
        return success();
      })
      .Case<MulSigmoidOp>([&](MulSigmoidOp o) {
        Value out = alloc(o.getResult(), "mul_sigmoid");
        launch("mul_sigmoid", o,
               {{"x", ptr(o.getX())}, {"gate", ptr(o.getGate())}, {"out", out}},
               {I("n", len(o.getX()))}, {}, ceilDiv(len(o.getX()), 256));
        return success();
      })
      .Case<SituOp, SwigluOp>([&](Operation *o) {
        Value g = o->getOperand(0), u = o->getOperand(1);
        Value out = alloc(o->getResult(0), "act");
        SmallVector<ScalarArg> sc = {I("n", len(g))};
        if (auto s = dyn_cast<SituOp>(o))
          activationArgs(Activation::situ, s.getBeta(), s.getLinearBeta(), sc);
        else
          activationArgs(Activation::silu, std::nullopt, std::nullopt, sc);
        launch("gated_act", o, {{"g", ptr(g)}, {"u", ptr(u)}, {"out", out}}, sc,
               {}, ceilDiv(len(g), 256));
        return success();
      })
      .Case<ConvStepOp>([&](ConvStepOp o) {
        int64_t C = len(o.getU());
        int64_t W = dimOf(o.getWeight(), 2);
        Value out = alloc(o.getResult(), "conv");
        launch("kda_conv", o,
               {{"u", ptr(o.getU())},
                {"weight", ptr(o.getWeight())},
                {"state", ptr(o.getConvState()),
                 static_cast<int64_t>(o.getOffset()) * (W - 1) * 4},
                {"out", out}},
               {I("channels", C), I("width", W)}, {}, ceilDiv(C, 256));
        return success();
      })
      .Case<L2NormOp>([&](L2NormOp o) {
        Value out = alloc(o.getResult(), "l2norm");
        launch("kda_l2norm", o, {{"x", ptr(o.getX())}, {"out", out}},
               {I("n", len(o.getX())), I("headDim", o.getHeadDim()),
                F("eps", o.getEps().convertToDouble()),
                F("scale", o.getScale().convertToDouble())},
               {}, len(o.getX()) / o.getHeadDim());
        return success();
      })
      .Case<KdaGateOp>([&](KdaGateOp o) {
        Value out = alloc(o.getResult(), "gate");
        int64_t C = len(o.getF()), H = o.getHeads();
        SmallVector<ScalarArg> sc = {
            I("numHeads", H), I("headDim", C / H),
            I("hasLowerBound", o.getLowerBound() ? 1 : 0)};
        if (o.getLowerBound())
          sc.push_back(F("lowerBound", o.getLowerBound()->convertToDouble()));
        launch("kda_gate", o,
               {{"f", ptr(o.getF())},
                {"dtBias", ptr(o.getDtBias())},
                {"aLog", ptr(o.getALog())},
                {"out", out}},
               sc, {}, H);
        return success();
      })
      .Case<SigmoidOp>([&](SigmoidOp o) {
        Value out = alloc(o.getResult(), "sigmoid");
        launch("sigmoid", o, {{"x", ptr(o.getX())}, {"out", out}},
               {I("n", len(o.getX()))}, {}, 1);
        return success();
      })
      .Case<KdaStepOp>([&](KdaStepOp o) {
        KdaStateType st = o.getState().getType();
        Value out = alloc(o.getResult(), "kda_step");
        launch("kda_step", o,
               {{"q", ptr(o.getQ())},
                {"k", ptr(o.getK())},
                {"v", ptr(o.getV())},
                {"g", ptr(o.getG())},
                {"beta", ptr(o.getBeta())},
                {"state", ptr(o.getState())},
                {"out", out}},
               {I("numHeads", st.getHeads()), I("headDim", st.getKeyDim())}, {},
               kdaStateGrid(st.getHeads(), st.getKeyDim()));
        return success();
      })
      .Case<GatedRmsNormOp>([&](GatedRmsNormOp o) {
        Value out = alloc(o.getResult(), "gated_norm");
        int64_t C = len(o.getX()), d = o.getHeadDim();
        launch("kda_gated_norm", o,
               {{"o", ptr(o.getX())},
                {"gate", ptr(o.getGate())},
                {"weight", ptr(o.getWeight())},
                {"out", out}},
               {I("numHeads", C / d), I("headDim", d),
                F("eps", o.getEps().convertToDouble())},
               {}, C / d);
        return success();
      })
      .Case<MlaCacheAppendOp>([&](MlaCacheAppendOp o) {
        int64_t L = len(o.getNorm()), width = len(o.getKv());
        launch("mla_cache_append", o,
               {{"kv", ptr(o.getKv())},
                {"normWeight", ptr(o.getNorm())},
                {"cache", ptr(o.getCache())}},
               {F("eps", o.getEps().convertToDouble()), I("kvLoraRank", L),
                I("ropeDim", width - L)},
               {{"pos", "pos"}, {"step", "step"}}, 1);
        return success();
      })
      .Case<MlaAttendOp>([&](MlaAttendOp o) {
        lowerMlaAttend(o, o.getConfig(), o.getQ(), o.getKvBProj(), o.getCache(),
                       o.getGate(), alloc(o.getResult(), "mla_attend"));
        return success();
      })
      .Case<RouterOp>([&](RouterOp o) {
        // Allocations in a fixed order (not as call arguments, whose
        // evaluation order is unspecified): buffer order is plan output.
        Value ids = alloc(o.getIds(), "router_ids");
        Value wts = alloc(o.getWeights(), "router_weights");
        LaunchArgs a = routerArgs(o, o.getX(), {}, o.getGate(), o.getBias(),
                                  o.getTopK(), o.getRenormalize(),
                                  o.getScaling().convertToDouble(), ids, wts);
        launch("router", o, a.ptrs, a.scalars, {},
               routerGrid(o.getGate()));
        return success();
      })
      .Case<ExpertMixOp>([&](ExpertMixOp o) {
        Value out = alloc(o.getResult(), "expert_mix");
        Value ids = ptr(o.getIds());
        Value wts = ptr(o.getWeights());
        LaunchArgs a = expertsArgs(o, o.getX(), {}, ids, wts, len(o.getIds()),
                                   o.getW1(), o.getW3(), o.getW2(), {}, out,
                                   o.getAct(), o.getSituBeta(),
                                   o.getSituLinearBeta());
        launch(expertsKernel(o.getW1(), o.getW3(), o.getW2()), o, a.ptrs,
               a.scalars, {}, kWorkQueueGrid);
        return success();
      })
      .Case<AttnResOp>([&](AttnResOp o) {
        Value out = alloc(o.getResult(), "attn_res");
        int64_t D = len(o.getP());
        SmallVector<ScalarArg> sc = {I("numBlocks", o.getCount()), I("dim", D),
                                     F("eps", o.getEps().convertToDouble())};
        if (o.getOutNorm())
          sc.push_back(F("normEps", o.getEps().convertToDouble()));
        // The clustered form where its limits take the op (the partial
        // sum p is always a source); one block of attn_res otherwise.
        const int64_t cluster =
            attnResClusters_ ? ::k3::attnResClusterBlocks(D, o.getCount() + 1)
                             : 0;
        const bool clustered = cluster > 0;
        launch(clustered ? "attn_res_clustered" : "attn_res", o,
               {{"blocks", ptr(o.getBlocks())},
                {"extra", ptr(o.getP())},
                {"wNorm", ptr(o.getNorm())},
                {"wProj", ptr(o.getProj())},
                {"normWeight", opt(o.getOutNorm())},
                {"out", out}},
               sc, {}, clustered ? cluster : 1,
               clustered ? ::k3::kAttnResClusterThreads : 256,
               clustered ? cluster : 1);
        return success();
      })
      .Case<AttnResCommitOp>([&](AttnResCommitOp o) {
        launch("attn_res_commit", o,
               {{"blocks", ptr(o.getBlocks())}, {"src", ptr(o.getP())}},
               {I("index", o.getIndex()), I("dim", len(o.getP()))}, {}, 1);
        return success();
      })
      .Case<KdaDecodeOp>([&](KdaDecodeOp o) {
        KdaConfigAttr c = o.getConfig();
        int64_t H = c.getHeads(), d = c.getHeadDim(), C = c.getChannels(),
                W = c.getConv();
        int64_t slice = C * (W - 1) * 4; // bytes of one of q/k/v's conv state
        Value cs = ptr(o.getConvState());
        Value out = alloc(o.getResult(), "kda");
        SmallVector<ScalarArg> sc = {
            I("numHeads", H), I("headDim", d), I("convWidth", W),
            I("hasLowerBound", c.getLowerBound() ? 1 : 0),
            F("normEps", o.getEps().convertToDouble())};
        if (c.getLowerBound())
          sc.push_back(F("lowerBound", c.getLowerBound().getValueAsDouble()));
        // The low-rank form: f / gt computed from R(f_a h) / R(g_a h) inside
        // (the gate into a scratch the kernel's blocks share).
        const bool lowF = static_cast<bool>(o.getFB()),
                   lowG = static_cast<bool>(o.getGB());
        if (lowF)
          sc.push_back(I("fRank", len(o.getF())));
        if (lowG)
          sc.push_back(I("gRank", len(o.getGate())));
        Value gateOut = lowG ? scratch(C, "bf16", "kda_gate") : Value();
        launch("kda_decode", o,
               {{"uq", ptr(o.getUq())},
                {"uk", ptr(o.getUk())},
                {"uv", ptr(o.getUv())},
                {"convQ", ptr(o.getQConv())},
                {"convK", ptr(o.getKConv())},
                {"convV", ptr(o.getVConv())},
                {"convStateQ", cs, 0},
                {"convStateK", cs, slice},
                {"convStateV", cs, 2 * slice},
                {"f", lowF ? Value() : ptr(o.getF())},
                {"fA", lowF ? ptr(o.getF()) : Value()},
                {"fB", opt(o.getFB())},
                {"betaLogit", ptr(o.getBetaLogit())},
                {"dtBias", ptr(o.getDtBias())},
                {"aLog", ptr(o.getALog())},
                {"state", ptr(o.getState())},
                {"gate", lowG ? Value() : ptr(o.getGate())},
                {"gA", lowG ? ptr(o.getGate()) : Value()},
                {"gB", opt(o.getGB())},
                {"gateOut", gateOut},
                {"normWeight", ptr(o.getONorm())},
                {"out", out}},
               sc, {}, kdaStateGrid(H, d), 256,
               kdaClusters_ ? kdaDecodeCluster(d, W) : 1);
        return success();
      })
      .Case<MlaDecodeOp>([&](MlaDecodeOp o) {
        // Two launches until one kernel does both: the cache append, the
        // attend with its output gate.
        MlaConfigAttr c = o.getConfig();
        int64_t L = c.getKvLora(), R = c.getRope();
        launch("mla_cache_append", o,
               {{"kv", ptr(o.getKv())},
                {"normWeight", ptr(o.getKvANorm())},
                {"cache", ptr(o.getCache())}},
               {F("eps", o.getEps().convertToDouble()), I("kvLoraRank", L),
                I("ropeDim", R)},
               {{"pos", "pos"}, {"step", "step"}}, 1);
        lowerMlaAttend(o, c, o.getQ(), o.getKvBProj(), o.getCache(),
                       o.getGate(), alloc(o.getResult(), "mla"));
        return success();
      })
      .Case<RoutedExpertsOp>([&](RoutedExpertsOp o) {
        int64_t K = o.getTopK(), Dm = len(o.getZ());
        Value ids = scratch(K, "i32", "router_ids");
        Value wts = scratch(K, "f32", "router_weights");
        Value mix = o.getNorm() ? scratch(Dm, "bf16", "expert_mix")
                                : alloc(o.getResult(), "routed_experts");
        LaunchArgs r = routerArgs(o, o.getX(), {}, o.getGate(), o.getBias(),
                                  K, o.getRenormalize(),
                                  o.getScaling().convertToDouble(), ids, wts);
        launch("router", o, r.ptrs, r.scalars, {},
               routerGrid(o.getGate()));
        LaunchArgs e = expertsArgs(o, o.getZ(), {}, ids, wts, K, o.getW1(),
                                   o.getW3(), o.getW2(), {}, mix, o.getAct(),
                                   o.getSituBeta(), o.getSituLinearBeta());
        launch(expertsKernel(o.getW1(), o.getW3(), o.getW2()), o, e.ptrs,
               e.scalars, {}, kWorkQueueGrid);
        if (o.getNorm()) {
          Value out = alloc(o.getResult(), "routed_experts");
          launch("rms_norm", o,
                 {{"x", mix}, {"w", ptr(o.getNorm())}, {"out", out}},
                 {I("n", Dm), F("eps", o.getEps()->convertToDouble())}, {}, 1);
        }
        return success();
      })
      .Case<MoeFfnOp>([&](MoeFfnOp o) {
        // One `moe_ffn` launch (MoeFfnParams: a router and a moe_experts
        // struct): both normalise h themselves, the router's ids / weights
        // are the experts' input, the shared expert and both adds are the
        // expert half's.
        int64_t K = o.getTopK();
        Value ids = scratch(K, "i32", "router_ids");
        Value wts = scratch(K, "f32", "router_weights");
        Value out = alloc(o.getResult(), "moe_ffn");
        FoldedNorm norm{o.getNorm(), o.getEps().convertToDouble()};
        LaunchArgs a;
        appendPrefixed("router.",
                       routerArgs(o, o.getH(), norm, o.getGate(), o.getBias(),
                                  K, o.getRenormalize(),
                                  o.getScaling().convertToDouble(), ids, wts),
                       a);
        appendPrefixed(
            "experts.",
            expertsArgs(o, o.getH(), norm, ids, wts, K, o.getW1(), o.getW3(),
                        o.getW2(),
                        {o.getSharedW1(), o.getSharedW3(), o.getSharedW2(),
                         o.getH()},
                        out, o.getAct(), o.getSituBeta(),
                        o.getSituLinearBeta()),
            a);
        launch("moe_ffn", o, a.ptrs, a.scalars, {}, kMoeFfnGrid);
        return success();
      })
      .Case<GatedMlpOp>([&](GatedMlpOp o) {
        Value out = alloc(o.getResult(), "gated_mlp");
        int64_t I_ = dimOf(o.getW1(), 0), in = dimOf(o.getW1(), 1),
                outDim = dimOf(o.getW2(), 0);
        SmallVector<ScalarArg> sc = {I("inDim", in), I("interDim", I_),
                                     I("outDim", outDim)};
        if (o.getNorm())
          sc.push_back(F("normEps", o.getEps()->convertToDouble()));
        activationArgs(o.getAct(), o.getSituBeta(), o.getSituLinearBeta(), sc);
        launch("gated_mlp", o,
               {{"x", ptr(o.getX())},
                {"normWeight", opt(o.getNorm())},
                {"w1", ptr(o.getW1())},
                {"w3", ptr(o.getW3())},
                {"w2", ptr(o.getW2())},
                {"residual", opt(o.getResidual())},
                {"out", out}},
               sc, {}, kWorkQueueGrid);
        return success();
      })
      .Case<ProbeOp>([&](ProbeOp o) {
        k3l::ProbeOp::create(b_, loc_, ptr(o.getValue()), o.getNameAttr());
        return success();
      })
      .Case<func::ReturnOp>([&](func::ReturnOp o) -> LogicalResult {
        if (o.getNumOperands() != 1)
          return o.emitOpError() << "expects the decode step to return logits";
        auto t = dyn_cast<RankedTensorType>(o.getOperand(0).getType());
        if (!t || t.getRank() != 1 || !t.getElementType().isF32())
          return o.emitOpError()
                 << "expects the decode step to return fp32 logits [vocab]";
        Value logits = ptr(o.getOperand(0));
        k3l::LogitsOp::create(b_, loc_, logits);
        // Greedy choice on the device: the id becomes the next step's token
        // in the step block (kernels/common/StepInputs.h), so greedy steps
        // follow each other without the host; a host that samples ignores
        // it. 64 blocks scan the logits (163840 of them: 640 KiB, one SM
        // alone took 27 µs), the last one to finish merges.
        launch("argmax", o, {{"logits", logits}}, {I("n", t.getDimSize(0))},
               {{"step", "step"}}, 64);
        return success();
      })
      .Default([&](Operation *o) -> LogicalResult {
        return o->emitOpError()
               << "has no lowering to kernel launches: run the k3 fusion "
                  "pipeline (decompose at least) first";
      });
}

LogicalResult Lowering::run() {
  Block &body = fn_.getBody().front();
  SmallVector<Operation *> old;
  for (Operation &op : body)
    old.push_back(&op);
  b_.setInsertionPoint(body.getTerminator());
  for (Operation *op : old)
    if (failed(lower(op)))
      return failure();
  // The new ops sit before the old terminator, which `old` holds: end the
  // block with a new return, then drop the old ops (the terminator first).
  b_.setInsertionPointToEnd(&body);
  func::ReturnOp::create(b_, fn_.getLoc());
  for (Operation *op : llvm::reverse(old)) {
    op->dropAllUses();
    op->erase();
  }
  fn_.setFunctionType(FunctionType::get(fn_.getContext(),
                                        fn_.getFunctionType().getInputs(), {}));
  return success();
}

struct ConvertK3ToLaunchPass
    : mlir::k3::impl::ConvertK3ToLaunchBase<ConvertK3ToLaunchPass> {
  using ConvertK3ToLaunchBase::ConvertK3ToLaunchBase;
  void runOnOperation() override {
    for (auto fn : getOperation().getOps<func::FuncOp>())
      if (failed(Lowering(fn, kdaClusters, mlaClusters, attnResClusters,
                          moeMxfp4Mma)
                     .run()))
        return signalPassFailure();
  }
};

} // namespace

void mlir::k3::registerCodegen(DialectRegistry &registry) {
  registry.insert<k3l::K3LDialect>();
  registerK3CodegenPasses();
}
