//===- FuseProjections.cpp - Projections of one input into one launch -----===//
//
// Horizontal fusion. At batch 1 most of a decode step's launches are small
// bf16 GEMVs, and the projections of one layer input (KDA's q, k, v, f_a, b,
// g; MLA's q_a and gate; a dense MLP's gate and up) each re-read and, with a
// folded pre-norm, re-normalise the same vector. `linear_multi`
// (LinearMultiParams) computes several of them in one launch over all their
// rows, normalising once; entry i equals `linear` with the same x, norm
// weight and eps, bit for bit. This pass makes that decision visible as a
// `k3.linear_group`.
//
// A plain walk rather than a rewrite pattern: a group is a property of a
// whole block (every projection of a key), not of one op's neighbourhood,
// and splitting into groups of at most kLinearMultiMax must see the set in
// block order.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "kernels/gemv/GemvParams.h"

#include "mlir/IR/Dominance.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Debug.h"

#include <tuple>

#define DEBUG_TYPE "k3-fuse-projections"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEPROJECTIONS
#include "passes/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

/// What projections must share to be one linear_multi: the input, the folded
/// norm's weight and its eps (null when there is no norm).
using GroupKey = std::tuple<Value, Value, Attribute>;

/// A projection linear_multi can compute: bf16 result (linear_multi has no
/// fp32 output) and no residual epilogue (it has none).
bool groupable(LinearOp lin) {
  if (lin.getResidual()) {
    LLVM_DEBUG(llvm::dbgs()
               << DEBUG_TYPE ": not grouped, residual: " << lin << "\n");
    return false;
  }
  if (!lin.getResult().getType().getElementType().isBF16()) {
    LLVM_DEBUG(llvm::dbgs()
               << DEBUG_TYPE ": not grouped, fp32 result: " << lin << "\n");
    return false;
  }
  return true;
}

GroupKey keyOf(LinearOp lin) {
  Value norm = lin.getNorm();
  return {lin.getX(), norm, norm ? Attribute(lin.getEpsAttr()) : Attribute()};
}

/// The earliest op of `block` that uses a result of `members` (through a
/// nested op, its ancestor in the block); null when none has a user.
Operation *firstUser(Block &block, ArrayRef<LinearOp> members) {
  Operation *first = nullptr;
  for (LinearOp lin : members)
    for (Operation *user : lin.getResult().getUsers()) {
      Operation *at = block.findAncestorOpInBlock(*user);
      if (at && (!first || at->isBeforeInBlock(first)))
        first = at;
    }
  return first;
}

/// Replaces `members` (2..kLinearMultiMax projections of one key, in block
/// order) by one k3.linear_group before the first user of any of them.
/// Members whose operands do not dominate that point stay projections.
void groupProjections(Block &block, SmallVector<LinearOp> members,
                      DominanceInfo &dom) {
  Operation *at = nullptr;
  while (members.size() >= 2) {
    at = firstUser(block, members);
    if (!at) {
      LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": not grouped, no users: "
                              << members.front() << "\n");
      return; // dead projections: the canonicalizer removes them
    }
    // A later insertion point is dominated by more values, so dropping a
    // member only ever helps the others.
    size_t before = members.size();
    llvm::erase_if(members, [&](LinearOp lin) {
      bool ok = llvm::all_of(lin->getOperands(), [&](Value v) {
        return dom.properlyDominates(v, at);
      });
      if (!ok)
        LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": left out (an operand does "
                                              "not dominate the group): "
                                << lin << "\n");
      return !ok;
    });
    if (members.size() == before)
      break;
  }
  if (members.size() < 2)
    return;

  LinearOp first = members.front();
  SmallVector<Value> weights;
  SmallVector<Type> types;
  SmallVector<Location> locs;
  for (LinearOp lin : members) {
    weights.push_back(lin.getWeight());
    types.push_back(lin.getResult().getType());
    locs.push_back(lin.getLoc());
  }
  OpBuilder b(at);
  auto group = LinearGroupOp::create(
      b, FusedLoc::get(b.getContext(), locs), types, first.getX(), weights,
      first.getNorm(), first.getNorm() ? first.getEpsAttr() : FloatAttr());
  LLVM_DEBUG(llvm::dbgs() << DEBUG_TYPE ": " << members.size()
                          << " projections -> " << group << "\n");
  for (auto [i, lin] : llvm::enumerate(members)) {
    lin.getResult().replaceAllUsesWith(group.getResult(i));
    lin->erase();
  }
}

struct K3FuseProjectionsPass
    : mlir::k3::impl::K3FuseProjectionsBase<K3FuseProjectionsPass> {
  void runOnOperation() override {
    DominanceInfo &dom = getAnalysis<DominanceInfo>();
    SmallVector<Block *> blocks;
    getOperation()->walk([&](Block *b) { blocks.push_back(b); });
    for (Block *block : blocks) {
      // Keys in order of their first projection, members in block order.
      llvm::MapVector<GroupKey, SmallVector<LinearOp>> sets;
      for (Operation &op : *block)
        if (auto lin = dyn_cast<LinearOp>(op); lin && groupable(lin))
          sets[keyOf(lin)].push_back(lin);
      for (auto &[key, all] : sets)
        for (size_t i = 0; i < all.size(); i += ::k3::kLinearMultiMax) {
          size_t n = std::min<size_t>(::k3::kLinearMultiMax, all.size() - i);
          groupProjections(
              *block,
              SmallVector<LinearOp>(all.begin() + i, all.begin() + i + n), dom);
        }
    }
    // Only linears were replaced, by a pure op at a point their operands
    // dominate: the block structure is unchanged.
    markAnalysesPreserved<DominanceInfo>();
  }
};

} // namespace
