//===- PlanBuffers.cpp - Place scratch buffers in one arena ---------------===//
//
// Buffers are per step and the step is straight-line, so a buffer is live
// from the launch that first touches it to the launch that last does. Two
// buffers whose ranges overlap must not share bytes (a kernel may read one
// while writing the other); others may. First fit, largest first, over the
// buffers already placed: optimal enough for a few hundred buffers, and
// deterministic.
//
//===----------------------------------------------------------------------===//
#include "codegen/Codegen.h"

#define DEBUG_TYPE "k3-plan-buffers"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3PLANBUFFERS
#include "codegen/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

struct Interval {
  k3l::AllocOp alloc;
  int64_t first = -1, last = -1, bytes = 0, offset = 0;
};

int64_t alignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

struct K3PlanBuffersPass : k3::impl::K3PlanBuffersBase<K3PlanBuffersPass> {
  using K3PlanBuffersBase::K3PlanBuffersBase;

  void runOnOperation() override {
    if (alignment <= 0 || (alignment & (alignment - 1))) {
      getOperation().emitError() << "k3-plan-buffers: alignment must be a "
                                    "power of two, got "
                                 << static_cast<int64_t>(alignment);
      return signalPassFailure();
    }
    SmallVector<Interval> live;
    DenseMap<Value, size_t> index;
    int64_t step = 0;
    getOperation().walk([&](Operation *op) {
      if (auto a = dyn_cast<k3l::AllocOp>(op)) {
        index[a.getResult()] = live.size();
        live.push_back({a, -1, -1, alignUp(a.getBytes(), alignment), 0});
        return;
      }
      if (!isa<k3l::LaunchOp, k3l::LogitsOp, k3l::ProbeOp>(op))
        return;
      for (Value v : op->getOperands()) {
        auto it = index.find(v);
        if (it == index.end())
          continue;
        Interval &iv = live[it->second];
        if (iv.first < 0)
          iv.first = step;
        iv.last = step;
      }
      ++step;
    });
    // The logits buffer must outlive the step: keep it live to the end.
    for (Interval &iv : live)
      if (llvm::any_of(iv.alloc->getUsers(),
                       [](Operation *u) { return isa<k3l::LogitsOp>(u); }))
        iv.last = step;

    SmallVector<size_t> order(live.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    llvm::stable_sort(order, [&](size_t a, size_t b) {
      return live[a].bytes > live[b].bytes;
    });
    SmallVector<size_t> placed;
    int64_t arena = 0;
    for (size_t i : order) {
      Interval &iv = live[i];
      int64_t offset = 0;
      if (!reuse) {
        offset = arena;
      } else {
        // Conflicting placements sorted by offset; take the first gap.
        SmallVector<std::pair<int64_t, int64_t>> busy;
        for (size_t j : placed) {
          const Interval &o = live[j];
          bool overlap = iv.first <= o.last && o.first <= iv.last;
          if (overlap || iv.first < 0 || o.first < 0)
            busy.push_back({o.offset, o.offset + o.bytes});
        }
        llvm::sort(busy);
        for (auto [lo, hi] : busy) {
          if (offset + iv.bytes <= lo)
            break;
          offset = std::max(offset, hi);
        }
      }
      iv.offset = offset;
      arena = std::max(arena, offset + iv.bytes);
      placed.push_back(i);
      iv.alloc.setOffsetAttr(
          IntegerAttr::get(IntegerType::get(&getContext(), 64), offset));
    }
    getOperation()->setAttr("k3l.arena_bytes",
                            IntegerAttr::get(IntegerType::get(&getContext(), 64),
                                             std::max<int64_t>(arena, alignment)));
  }
};

} // namespace
