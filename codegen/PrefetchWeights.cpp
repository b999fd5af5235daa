//===- PrefetchWeights.cpp - Later launches' weights into L2 ---------------===//
//
// A decode step at batch 1 streams every weight once, so its time is the
// HBM's as long as the HBM never idles. It idles during the launches whose
// work is a chain of dependent rounds on little data (the KDA recurrence,
// MLA's attend, the MoE's routing). Those launches can ask L2 for what a
// later launch will stream: the o_proj GEMV after them then reads from L2
// what would have been its first microseconds of HBM traffic. This pass
// chooses which bytes: the first large weight of the next launch that reads
// one, capped so that the lines are still in L2 when that launch runs.
//
//===----------------------------------------------------------------------===//
#include "codegen/Codegen.h"
#include "runtime/plan/Plan.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#define DEBUG_TYPE "k3-prefetch-weights"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3PREFETCHWEIGHTS
#include "codegen/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using namespace mlir::k3;

namespace {

using ::k3::kL2PrefetchBytesField;
using ::k3::kL2PrefetchField;

/// Bytes of a bf16 / f32 weight (what an L2 prefetch may name), else 0.
int64_t weightBytes(k3l::WeightOp w) {
  if (w.getFormat() != "bf16" && w.getFormat() != "f32")
    return 0;
  ::k3::PlanWeight pw;
  pw.format = w.getFormat().str();
  pw.shape.assign(w.getShape().begin(), w.getShape().end());
  return static_cast<int64_t>(::k3::planWeightBytes(pw));
}

/// The first weight of `later` of at least `minBytes` that `prefetcher` can
/// bind: in its block (the weight op then moves before it; it has no
/// operands and its uses all follow it), and not a stacked expert table
/// (read only in part, the routed experts).
k3l::WeightOp largeWeight(k3l::LaunchOp later, k3l::LaunchOp prefetcher,
                          int64_t minBytes) {
  for (auto [v, name] : llvm::zip(later.getArgs(), later.getArgNames())) {
    if (cast<StringAttr>(name).getValue() == kL2PrefetchField)
      continue;
    if (auto w = v.getDefiningOp<k3l::WeightOp>())
      if (weightBytes(w) >= minBytes && !w.getName().contains("{e}") &&
          w->getBlock() == prefetcher->getBlock())
        return w;
  }
  return {};
}

/// Whether `launch` binds an L2 prefetch already.
bool hasPrefetch(k3l::LaunchOp launch) {
  return launch.getScalars().get(kL2PrefetchBytesField) ||
         llvm::any_of(launch.getArgNames(), [](Attribute a) {
           return cast<StringAttr>(a).getValue() == kL2PrefetchField;
         });
}

/// `launch` with `weight` bound to l2Prefetch for `bytes` bytes.
void bindPrefetch(k3l::LaunchOp launch, k3l::WeightOp weight, int64_t bytes) {
  OpBuilder b(launch);
  if (!weight->isBeforeInBlock(launch))
    weight->moveBefore(launch);
  SmallVector<Value> args(launch.getArgs());
  args.push_back(weight.getResult());
  SmallVector<Attribute> names(launch.getArgNames().getValue());
  names.push_back(b.getStringAttr(kL2PrefetchField));
  SmallVector<int64_t> offsets(launch.getArgOffsets());
  offsets.push_back(0);
  NamedAttrList scalars(launch.getScalars());
  scalars.set(kL2PrefetchBytesField, b.getI64IntegerAttr(bytes));
  launch.getArgsMutable().assign(args);
  launch.setArgNamesAttr(b.getArrayAttr(names));
  launch.setArgOffsets(offsets);
  launch.setScalarsAttr(scalars.getDictionary(b.getContext()));
}

struct K3PrefetchWeightsPass
    : mlir::k3::impl::K3PrefetchWeightsBase<K3PrefetchWeightsPass> {
  using K3PrefetchWeightsBase::K3PrefetchWeightsBase;

  void runOnOperation() override {
    if (maxBytes < 16 || minBytes < 1) {
      getOperation().emitError()
          << "k3-prefetch-weights: max-bytes must be at least 16 and "
             "min-bytes at least 1, got "
          << static_cast<int64_t>(maxBytes) << " and "
          << static_cast<int64_t>(minBytes);
      return signalPassFailure();
    }
    llvm::StringSet<> prefetchers;
    for (const std::string &k : kernels) {
      const ::k3::KernelInfo *info = ::k3::findKernel(k);
      if (!info || !info->field(kL2PrefetchField)) {
        getOperation().emitError()
            << "k3-prefetch-weights: kernel '" << k
            << "' has no l2Prefetch field (kda_decode, mla_attend, "
               "mla_attend_clustered and moe_ffn have one)";
        return signalPassFailure();
      }
      prefetchers.insert(k);
    }
    if (prefetchers.empty())
      for (const char *k : {"kda_decode", "mla_attend", "mla_attend_clustered"})
        prefetchers.insert(k);

    getOperation().walk([&](Block *block) {
      SmallVector<k3l::LaunchOp> launches(block->getOps<k3l::LaunchOp>());
      for (auto [i, launch] : llvm::enumerate(launches)) {
        if (!prefetchers.contains(launch.getKernel()) || hasPrefetch(launch))
          continue;
        for (k3l::LaunchOp later : llvm::drop_begin(launches, i + 1)) {
          k3l::WeightOp w = largeWeight(later, launch, minBytes);
          if (!w)
            continue;
          bindPrefetch(launch, w, std::min<int64_t>(weightBytes(w), maxBytes) /
                                      16 * 16);
          break;
        }
      }
    });
  }
};

} // namespace
