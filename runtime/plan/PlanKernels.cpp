//===- PlanKernels.cpp - The plan's kernel table --------------------------===//
//
// Field descriptors are derived from the params structs themselves
// (decltype + offsetof), so a field whose type changes in a params header
// changes its kind here without anyone editing this file, and a descriptor
// can never disagree with the struct it describes.
//
// attn_res's fused output norm (normWeight/normEps) is picked up from the
// header by detection, so the table follows AttnResParams as it changes.
//
// The per-kernel check functions state how many elements each pointer field
// is read or written at, in terms of the struct's own size fields; the
// backend compares those against what it bound (a buffer's bytes, a
// weight's shape), so a plan cannot make a kernel run off the end of the
// arena or a weight.
//
//===----------------------------------------------------------------------===//
#include "runtime/plan/PlanKernels.h"
#include "runtime/io/Tensor.h"

#include "kernels/attnres/AttnResParams.h"
#include "kernels/collective/CollectiveParams.h"
#include "kernels/common/StepInputs.h"
#include "kernels/elementwise/ElementwiseParams.h"
#include "kernels/embed/EmbedParams.h"
#include "kernels/gemv/GemvParams.h"
#include "kernels/head/HeadParams.h"
#include "kernels/kda/KdaParams.h"
#include "kernels/mla/MlaParams.h"
#include "kernels/moe/MoeParams.h"
#include "kernels/norm/NormParams.h"

#include <cctype>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

namespace k3 {

//===----------------------------------------------------------------------===//
// Field descriptors
//===----------------------------------------------------------------------===//

namespace {

template <typename T> struct FieldTraits;
template <> struct FieldTraits<int64_t> {
  static constexpr FieldKind kind = FieldKind::Int64;
  static constexpr ElemType elem = ElemType::None;
};
template <> struct FieldTraits<int32_t> {
  static constexpr FieldKind kind = FieldKind::Int32;
  static constexpr ElemType elem = ElemType::None;
};
template <> struct FieldTraits<float> {
  static constexpr FieldKind kind = FieldKind::Float32;
  static constexpr ElemType elem = ElemType::None;
};
template <> struct FieldTraits<WeightRef> {
  static constexpr FieldKind kind = FieldKind::Weight;
  static constexpr ElemType elem = ElemType::None;
};
template <> struct FieldTraits<const WeightRef *> {
  static constexpr FieldKind kind = FieldKind::WeightTable;
  static constexpr ElemType elem = ElemType::None;
};
template <> struct FieldTraits<VectorRef> {
  static constexpr FieldKind kind = FieldKind::Vector;
  static constexpr ElemType elem = ElemType::None;
};
template <typename E> constexpr ElemType elemOf() {
  if constexpr (std::is_same_v<E, uint16_t>)
    return ElemType::BF16;
  else if constexpr (std::is_same_v<E, float>)
    return ElemType::F32;
  else if constexpr (std::is_same_v<E, int32_t>)
    return ElemType::I32;
  else if constexpr (std::is_same_v<E, int64_t>)
    return ElemType::I64;
  else if constexpr (std::is_same_v<E, uint8_t>)
    return ElemType::U8;
  else
    static_assert(sizeof(E) == 0, "params field of an unsupported type");
}
template <typename E> struct FieldTraits<const E *> {
  static constexpr FieldKind kind = FieldKind::PtrIn;
  static constexpr ElemType elem = elemOf<E>();
};
template <typename E> struct FieldTraits<E *> {
  static constexpr FieldKind kind = FieldKind::PtrOut;
  static constexpr ElemType elem = elemOf<E>();
};

/// The two fields of an L2Prefetch member at `base`: "l2Prefetch" (the
/// weight) and "l2PrefetchBytes" (needed with it).
void addPrefetchFields(std::vector<KernelField> &fields, size_t base) {
  KernelField w;
  w.name = kL2PrefetchField;
  w.kind = FieldKind::Prefetch;
  w.elem = ElemType::U8;
  w.offset = base + offsetof(L2Prefetch, data);
  KernelField n;
  n.name = kL2PrefetchBytesField;
  n.kind = FieldKind::Int64;
  n.offset = base + offsetof(L2Prefetch, bytes);
  n.need = KernelField::Need::IfGiven;
  n.other = w.name;
  fields.push_back(std::move(w));
  fields.push_back(std::move(n));
}

template <typename T> KernelField makeField(const char *name, size_t offset) {
  using Traits = FieldTraits<std::remove_cv_t<T>>;
  // Member by member: the conditions (need, other, ...) keep their defaults
  // without an aggregate's missing-initializer warnings.
  KernelField f;
  f.name = name;
  f.kind = Traits::kind;
  f.elem = Traits::elem;
  f.offset = offset;
  return f;
}

} // namespace

/// A descriptor for field `f` of struct `S`, its kind taken from its type.
#define K3_FIELD(S, f) makeField<decltype(S::f)>(#f, offsetof(S, f))

namespace {

template <typename P> class Holder final : public KernelParams {
public:
  void *data() override { return &params_; }
  const void *data() const override { return &params_; }
  size_t size() const override { return sizeof(P); }

private:
  P params_;
};

template <typename P> std::unique_ptr<KernelParams> makeHolder() {
  return std::make_unique<Holder<P>>();
}

/// Each kernel's check receives its params struct.
template <typename P, Status (*Check)(const P &, ExtentChecker &)>
Status checkAs(const void *params, ExtentChecker &ext) {
  return Check(*static_cast<const P *>(params), ext);
}

/// No size field, and no element count derived from size fields, may exceed
/// this: a buffer, state or weight is at most 2^40 bytes (docs/PLAN.md), so
/// a larger count can never be covered, and keeping every factor and product
/// below it keeps the arithmetic far from int64_t overflow.
constexpr int64_t kMaxElems = int64_t(1) << 40;

/// A size field: in [1, kMaxElems].
template <typename T>
Status positive(const char *kernel, const char *field, T value) {
  if (value <= 0)
    return makeError(kernel, ": ", field, " must be positive, got ", value);
  if (static_cast<int64_t>(value) > kMaxElems)
    return makeError(kernel, ": ", field, " = ", value,
                     " is larger than any buffer a plan may hold (2^40)");
  return Status::ok();
}

/// A count that may be zero (ropeDim, numBlocks): in [0, kMaxElems].
template <typename T>
Status nonNegative(const char *kernel, const char *field, T value) {
  if (value < 0)
    return makeError(kernel, ": ", field, " must be >= 0, got ", value);
  if (static_cast<int64_t>(value) > kMaxElems)
    return makeError(kernel, ": ", field, " = ", value,
                     " is larger than any buffer a plan may hold (2^40)");
  return Status::ok();
}

/// out = a * b for element counts (each in [0, kMaxElems]), or an error
/// naming `what` when the product passes kMaxElems (so never overflows:
/// numHeads = 2^58 cannot wrap to a small count).
Status mul(const char *kernel, const char *what, int64_t a, int64_t b,
           int64_t &out) {
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out) ||
      out > kMaxElems)
    return makeError(kernel, ": ", what, " = ", a, " * ", b,
                     " is larger than any buffer a plan may hold (2^40)");
  return Status::ok();
}

/// out = a + b for element counts, with the same bound.
Status add(const char *kernel, const char *what, int64_t a, int64_t b,
           int64_t &out) {
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &out) ||
      out > kMaxElems)
    return makeError(kernel, ": ", what, " = ", a, " + ", b,
                     " is larger than any buffer a plan may hold (2^40)");
  return Status::ok();
}

//--- checks: which elements each pointer field covers ---------------------//
//
// Every count is computed with mul/add above, never with a bare `*`: the
// fields come from a file, and a product that wrapped would pass the extent
// check with a tiny count while the kernel loops over the real one.

Status checkEmbed(const EmbedParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("embed", "vocab", p.vocab));
  K3_RETURN_IF_ERROR(positive("embed", "dim", p.dim));
  int64_t table = 0;
  K3_RETURN_IF_ERROR(mul("embed", "vocab * dim", p.vocab, p.dim, table));
  K3_RETURN_IF_ERROR(x.need("table", table));
  K3_RETURN_IF_ERROR(x.optional("step", kStepWords));
  return x.need("out", p.dim);
}

Status checkRmsNorm(const RmsNormParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("rms_norm", "n", p.n));
  K3_RETURN_IF_ERROR(x.need("x", p.n));
  K3_RETURN_IF_ERROR(x.need("w", p.n));
  return x.need("out", p.n);
}

Status checkLinear(const LinearParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("linear", "n", p.n));
  K3_RETURN_IF_ERROR(positive("linear", "k", p.k));
  K3_RETURN_IF_ERROR(x.need("x", p.k));
  K3_RETURN_IF_ERROR(x.needMatrix("w", p.n, p.k));
  K3_RETURN_IF_ERROR(x.optional("normWeight", p.k));
  if ((p.out == nullptr) == (p.outF32 == nullptr))
    return makeError("linear: exactly one of out and outF32 must be given");
  if (p.outF32 && p.residual)
    return makeError("linear: residual needs the bf16 out, not outF32");
  K3_RETURN_IF_ERROR(x.optional("residual", p.n));
  K3_RETURN_IF_ERROR(x.optional("out", p.n));
  return x.optional("outF32", p.n);
}

Status checkLinearMulti(const LinearMultiParams &p, ExtentChecker &x) {
  if (p.count < 1 || p.count > kLinearMultiMax)
    return makeError("linear_multi: count must be in [1, ", kLinearMultiMax,
                     "], got ", p.count);
  K3_RETURN_IF_ERROR(positive("linear_multi", "k", p.k));
  K3_RETURN_IF_ERROR(x.need("x", p.k));
  K3_RETURN_IF_ERROR(x.optional("normWeight", p.k));
  for (int i = 0; i < p.count; ++i) {
    const std::string s = std::to_string(i);
    K3_RETURN_IF_ERROR(
        positive("linear_multi", ("n" + s).c_str(), p.entries[i].n));
    K3_RETURN_IF_ERROR(x.needMatrix(("w" + s).c_str(), p.entries[i].n, p.k));
    K3_RETURN_IF_ERROR(x.need(("out" + s).c_str(), p.entries[i].n));
  }
  return Status::ok();
}

template <typename P>
Status checkBinary(const char *kernel, const P &p, ExtentChecker &x,
                   const char *a, const char *b) {
  K3_RETURN_IF_ERROR(positive(kernel, "n", p.n));
  K3_RETURN_IF_ERROR(x.need(a, p.n));
  K3_RETURN_IF_ERROR(x.need(b, p.n));
  return x.need("out", p.n);
}
Status checkAdd(const AddParams &p, ExtentChecker &x) {
  return checkBinary("add", p, x, "a", "b");
}
Status checkMulSigmoid(const MulSigmoidParams &p, ExtentChecker &x) {
  return checkBinary("mul_sigmoid", p, x, "x", "gate");
}
Status checkGatedAct(const GatedActParams &p, ExtentChecker &x) {
  return checkBinary("gated_act", p, x, "g", "u");
}

Status checkKdaConv(const KdaConvParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("kda_conv", "channels", p.channels));
  K3_RETURN_IF_ERROR(positive("kda_conv", "width", p.width));
  int64_t weight = 0, state = 0;
  K3_RETURN_IF_ERROR(
      mul("kda_conv", "channels * width", p.channels, p.width, weight));
  K3_RETURN_IF_ERROR(
      mul("kda_conv", "channels * (width - 1)", p.channels, p.width - 1, state));
  K3_RETURN_IF_ERROR(x.need("u", p.channels));
  K3_RETURN_IF_ERROR(x.need("weight", weight));
  if (p.width > 1)
    K3_RETURN_IF_ERROR(x.need("state", state));
  return x.need("out", p.channels);
}

/// C = numHeads * headDim and the state's C * headDim, checked.
Status kdaSizes(const char *kernel, int64_t numHeads, int64_t headDim,
                int64_t &C, int64_t &state) {
  K3_RETURN_IF_ERROR(positive(kernel, "numHeads", numHeads));
  K3_RETURN_IF_ERROR(positive(kernel, "headDim", headDim));
  K3_RETURN_IF_ERROR(mul(kernel, "numHeads * headDim", numHeads, headDim, C));
  return mul(kernel, "numHeads * headDim * headDim", C, headDim, state);
}

Status checkKdaGatedNorm(const KdaGatedNormParams &p, ExtentChecker &x) {
  int64_t C = 0, S = 0;
  K3_RETURN_IF_ERROR(kdaSizes("kda_gated_norm", p.numHeads, p.headDim, C, S));
  for (const char *f : {"o", "gate", "out"})
    K3_RETURN_IF_ERROR(x.need(f, C));
  return x.need("weight", p.headDim);
}

/// An L2Prefetch field: whole 16-byte pieces inside its weight.
Status checkPrefetch(const char *kernel, const L2Prefetch &p,
                     ExtentChecker &x) {
  if (p.bytes < 0 || p.bytes % 16 != 0)
    return makeError(kernel, ": l2PrefetchBytes must be a non-negative ",
                     "multiple of 16, got ", p.bytes);
  return x.optional(kL2PrefetchField, p.bytes);
}

Status checkKdaDecode(const KdaDecodeParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(checkPrefetch("kda_decode", p.l2Prefetch, x));
  int64_t C = 0, S = 0, conv = 0, convState = 0;
  K3_RETURN_IF_ERROR(kdaSizes("kda_decode", p.numHeads, p.headDim, C, S));
  K3_RETURN_IF_ERROR(positive("kda_decode", "convWidth", p.convWidth));
  const int64_t W = p.convWidth;
  K3_RETURN_IF_ERROR(mul("kda_decode", "numHeads * headDim * convWidth", C, W,
                         conv));
  K3_RETURN_IF_ERROR(mul("kda_decode", "numHeads * headDim * (convWidth - 1)",
                         C, W - 1, convState));
  for (const char *f : {"uq", "uk", "uv", "dtBias", "out"})
    K3_RETURN_IF_ERROR(x.need(f, C));
  // f and gt, or the low-rank inputs and second projections they come from.
  auto gateInput = [&](const char *full, const char *a, const char *b,
                       const char *rankName, const char *product,
                       const void *up, int64_t rank) -> Status {
    if (!up)
      return x.need(full, C);
    K3_RETURN_IF_ERROR(positive("kda_decode", rankName, rank));
    if (rank > kKdaMaxFoldedRank)
      return makeError("kda_decode: ", rankName, " must be at most ",
                       kKdaMaxFoldedRank, ", got ", rank);
    int64_t w = 0;
    K3_RETURN_IF_ERROR(mul("kda_decode", product, C, rank, w));
    K3_RETURN_IF_ERROR(x.need(a, rank));
    return x.need(b, w);
  };
  K3_RETURN_IF_ERROR(gateInput("f", "fA", "fB", "fRank",
                               "numHeads * headDim * fRank", p.fB, p.fRank));
  K3_RETURN_IF_ERROR(gateInput("gate", "gA", "gB", "gRank",
                               "numHeads * headDim * gRank", p.gB, p.gRank));
  if (p.gB)
    K3_RETURN_IF_ERROR(x.need("gateOut", C));
  for (const char *f : {"convQ", "convK", "convV"})
    K3_RETURN_IF_ERROR(x.need(f, conv));
  if (W > 1)
    for (const char *f : {"convStateQ", "convStateK", "convStateV"})
      K3_RETURN_IF_ERROR(x.need(f, convState));
  K3_RETURN_IF_ERROR(x.need("betaLogit", p.numHeads));
  K3_RETURN_IF_ERROR(x.need("aLog", p.numHeads));
  K3_RETURN_IF_ERROR(x.need("state", S));
  return x.need("normWeight", p.headDim);
}

Status checkMlaCacheAppend(const MlaCacheAppendParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("mla_cache_append", "kvLoraRank", p.kvLoraRank));
  K3_RETURN_IF_ERROR(nonNegative("mla_cache_append", "ropeDim", p.ropeDim));
  int64_t w = 0, rows = 0, cache = 0;
  K3_RETURN_IF_ERROR(
      add("mla_cache_append", "kvLoraRank + ropeDim", p.kvLoraRank, p.ropeDim, w));
  K3_RETURN_IF_ERROR(x.need("kv", w));
  K3_RETURN_IF_ERROR(x.need("normWeight", p.kvLoraRank));
  K3_RETURN_IF_ERROR(x.optional("step", kStepWords));
  // When pos is an input the binder checks it at its smallest and largest
  // value (0 and max_seq - 1), so the cache must hold every position
  // allowed.
  K3_RETURN_IF_ERROR(nonNegative("mla_cache_append", "pos", p.pos));
  K3_RETURN_IF_ERROR(add("mla_cache_append", "pos + 1", p.pos, 1, rows));
  K3_RETURN_IF_ERROR(mul("mla_cache_append", "(pos + 1) * (kvLoraRank + "
                                             "ropeDim)",
                         rows, w, cache));
  return x.need("cache", cache);
}

/// mla_attend and mla_attend_clustered (`k`): the same params.
Status checkMlaAttendAs(const char *k, const MlaAttendParams &p,
                        ExtentChecker &x) {
  K3_RETURN_IF_ERROR(checkPrefetch(k, p.l2Prefetch, x));
  K3_RETURN_IF_ERROR(nonNegative(k, "handover", p.handover));
  for (auto [name, v] :
       {std::pair<const char *, int64_t>{"numHeads", p.numHeads},
        {"nopeDim", p.nopeDim},
        {"vDim", p.vDim},
        {"kvLoraRank", p.kvLoraRank}})
    K3_RETURN_IF_ERROR(positive(k, name, v));
  K3_RETURN_IF_ERROR(nonNegative(k, "ropeDim", p.ropeDim));
  const int64_t N = p.numHeads, L = p.kvLoraRank;
  int64_t qw = 0, q = 0, kvw = 0, kvRows = 0, kvB = 0, cw = 0, cache = 0,
          out = 0;
  K3_RETURN_IF_ERROR(add(k, "nopeDim + ropeDim", p.nopeDim, p.ropeDim, qw));
  K3_RETURN_IF_ERROR(mul(k, "numHeads * (nopeDim + ropeDim)", N, qw, q));
  K3_RETURN_IF_ERROR(add(k, "nopeDim + vDim", p.nopeDim, p.vDim, kvw));
  K3_RETURN_IF_ERROR(mul(k, "numHeads * (nopeDim + vDim)", N, kvw, kvRows));
  K3_RETURN_IF_ERROR(
      mul(k, "numHeads * (nopeDim + vDim) * kvLoraRank", kvRows, L, kvB));
  K3_RETURN_IF_ERROR(x.need("q", q));
  K3_RETURN_IF_ERROR(x.need("kvB", kvB));
  K3_RETURN_IF_ERROR(positive(k, "length", p.length));
  K3_RETURN_IF_ERROR(x.optional("step", kStepWords));
  K3_RETURN_IF_ERROR(add(k, "kvLoraRank + ropeDim", L, p.ropeDim, cw));
  K3_RETURN_IF_ERROR(
      mul(k, "length * (kvLoraRank + ropeDim)", p.length, cw, cache));
  K3_RETURN_IF_ERROR(x.need("cache", cache));
  K3_RETURN_IF_ERROR(mul(k, "numHeads * vDim", N, p.vDim, out));
  K3_RETURN_IF_ERROR(x.optional("gate", out));
  return x.need("out", out);
}

Status checkMlaAttend(const MlaAttendParams &p, ExtentChecker &x) {
  return checkMlaAttendAs("mla_attend", p, x);
}

/// The clustered form also attends at most kMlaClusteredMaxRows rows (its
/// CUDA kernel writes NaN beyond): the plan's length bound says so, or a
/// handover length within it (an mla_attend launch attends the longer
/// contexts).
Status checkMlaAttendClustered(const MlaAttendParams &p, ExtentChecker &x) {
  const char *k = "mla_attend_clustered";
  if (p.handover > kMlaClusteredMaxRows)
    return makeError(k, ": handover must be at most ", kMlaClusteredMaxRows,
                     " (the clustered form's rows), got ", p.handover);
  if (p.handover <= 0 && p.length > kMlaClusteredMaxRows)
    return makeError(k, ": length must be at most ", kMlaClusteredMaxRows,
                     " (the clustered form's rows) without a handover to "
                     "mla_attend, got ",
                     p.length);
  return checkMlaAttendAs(k, p, x);
}

Status checkRouter(const RouterParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("router", "numExperts", p.numExperts));
  K3_RETURN_IF_ERROR(positive("router", "dim", p.dim));
  if (p.topK < 1 || p.topK > p.numExperts)
    return makeError("router: topK must be in [1, numExperts = ", p.numExperts,
                     "], got ", p.topK);
  if (p.forceExpert >= p.numExperts)
    return makeError("router: forceExpert must be < numExperts = ",
                     p.numExperts, ", got ", p.forceExpert);
  int64_t gate = 0;
  K3_RETURN_IF_ERROR(
      mul("router", "numExperts * dim", p.numExperts, p.dim, gate));
  K3_RETURN_IF_ERROR(x.need("h", p.dim));
  K3_RETURN_IF_ERROR(x.optional("normWeight", p.dim));
  K3_RETURN_IF_ERROR(x.need("gate", gate));
  K3_RETURN_IF_ERROR(x.optional("bias", p.numExperts));
  K3_RETURN_IF_ERROR(x.need("outIds", p.topK));
  return x.need("outWeights", p.topK);
}

Status checkGatedMlp(const GatedMlpParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("gated_mlp", "inDim", p.inDim));
  K3_RETURN_IF_ERROR(positive("gated_mlp", "interDim", p.interDim));
  K3_RETURN_IF_ERROR(positive("gated_mlp", "outDim", p.outDim));
  K3_RETURN_IF_ERROR(x.need("x", p.inDim));
  K3_RETURN_IF_ERROR(x.optional("normWeight", p.inDim));
  K3_RETURN_IF_ERROR(x.needMatrix("w1", p.interDim, p.inDim));
  K3_RETURN_IF_ERROR(x.needMatrix("w3", p.interDim, p.inDim));
  K3_RETURN_IF_ERROR(x.needMatrix("w2", p.outDim, p.interDim));
  K3_RETURN_IF_ERROR(x.optional("residual", p.outDim));
  return x.need("out", p.outDim);
}

Status checkMoeExperts(const MoeExpertsParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("moe_experts", "numExperts", p.numExperts));
  K3_RETURN_IF_ERROR(positive("moe_experts", "dim", p.dim));
  K3_RETURN_IF_ERROR(positive("moe_experts", "interDim", p.interDim));
  if (p.topK < 1 || p.topK > p.numExperts)
    return makeError("moe_experts: topK must be in [1, numExperts = ",
                     p.numExperts, "], got ", p.topK);
  K3_RETURN_IF_ERROR(x.need("x", p.dim));
  K3_RETURN_IF_ERROR(x.need("ids", p.topK));
  K3_RETURN_IF_ERROR(x.need("weights", p.topK));
  K3_RETURN_IF_ERROR(x.needTable("w1", p.numExperts, p.interDim, p.dim));
  K3_RETURN_IF_ERROR(x.needTable("w3", p.numExperts, p.interDim, p.dim));
  K3_RETURN_IF_ERROR(x.needTable("w2", p.numExperts, p.dim, p.interDim));
  K3_RETURN_IF_ERROR(x.optional("normWeight", p.dim));
  K3_RETURN_IF_ERROR(
      nonNegative("moe_experts", "sharedInterDim", p.sharedInterDim));
  if (p.sharedInterDim > 0) {
    K3_RETURN_IF_ERROR(x.needMatrix("sharedW1", p.sharedInterDim, p.dim));
    K3_RETURN_IF_ERROR(x.needMatrix("sharedW3", p.sharedInterDim, p.dim));
    K3_RETURN_IF_ERROR(x.needMatrix("sharedW2", p.dim, p.sharedInterDim));
  }
  K3_RETURN_IF_ERROR(x.optional("residual", p.dim));
  return x.need("out", p.dim);
}

/// The tensor-core form of moe_experts takes sizes moeExpertsMxfp4Fits
/// accepts (its CUDA kernel writes NaN otherwise); the experts' MXFP4 format
/// is the plan's (codegen picks this form only for MXFP4 tables).
Status checkMoeExpertsMxfp4(const MoeExpertsParams &p, ExtentChecker &x) {
  const char *k = "moe_experts_mxfp4";
  if (p.normWeight || p.sharedInterDim > 0)
    return makeError(k, ": takes no normWeight and no shared expert");
  if (!moeExpertsMxfp4Fits(p.dim, p.interDim, false, false))
    return makeError(k, ": dim (", p.dim, ") and interDim (", p.interDim,
                     ") must be multiples of ", kMoeMxfp4StageCols,
                     " and at most ", kMoeMxfp4MaxCols);
  return checkMoeExperts(p, x);
}

/// An ExtentChecker for a params struct nested in another: field names get
/// the member's prefix ("router." + "gate").
class PrefixedChecker final : public ExtentChecker {
public:
  PrefixedChecker(ExtentChecker &inner, std::string prefix)
      : inner_(inner), prefix_(std::move(prefix)) {}
  Status need(const char *field, int64_t elems) override {
    return inner_.need(name(field), elems);
  }
  Status optional(const char *field, int64_t elems) override {
    return inner_.optional(name(field), elems);
  }
  Status needMatrix(const char *field, int64_t rows, int64_t cols) override {
    return inner_.needMatrix(name(field), rows, cols);
  }
  Status needTable(const char *field, int64_t count, int64_t rows,
                   int64_t cols) override {
    return inner_.needTable(name(field), count, rows, cols);
  }

private:
  const char *name(const char *field) {
    full_ = prefix_ + field;
    return full_.c_str();
  }
  ExtentChecker &inner_;
  std::string prefix_, full_;
};

Status checkMoeFfn(const MoeFfnParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(checkPrefetch("moe_ffn", p.l2Prefetch, x));
  PrefixedChecker router(x, "router."), experts(x, "experts.");
  K3_RETURN_IF_ERROR(checkRouter(p.router, router));
  K3_RETURN_IF_ERROR(checkMoeExperts(p.experts, experts));
  if (p.router.topK != p.experts.topK)
    return makeError("moe_ffn: router.topK (", p.router.topK,
                     ") must equal experts.topK (", p.experts.topK, ")");
  if (p.router.dim != p.experts.dim)
    return makeError("moe_ffn: router.dim (", p.router.dim,
                     ") must equal experts.dim (", p.experts.dim, ")");
  return Status::ok();
}

/// AttnRes may gain a fused RMSNorm of its result (PLAN.md: normWeight,
/// normEps); these detect it so the table follows the header.
template <typename P, typename = void>
struct HasNormWeight : std::false_type {};
template <typename P>
struct HasNormWeight<P, std::void_t<decltype(std::declval<P>().normWeight)>>
    : std::true_type {};

Status checkAttnRes(const AttnResParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("attn_res", "dim", p.dim));
  K3_RETURN_IF_ERROR(nonNegative("attn_res", "numBlocks", p.numBlocks));
  if (p.numBlocks + (p.extra ? 1 : 0) < 1)
    return makeError("attn_res: needs at least one source (numBlocks > 0 or "
                     "extra)");
  int64_t blocks = 0;
  K3_RETURN_IF_ERROR(
      mul("attn_res", "numBlocks * dim", p.numBlocks, p.dim, blocks));
  if (p.numBlocks > 0)
    K3_RETURN_IF_ERROR(x.need("blocks", blocks));
  K3_RETURN_IF_ERROR(x.optional("extra", p.dim));
  K3_RETURN_IF_ERROR(x.need("wNorm", p.dim));
  K3_RETURN_IF_ERROR(x.need("wProj", p.dim));
  if constexpr (HasNormWeight<AttnResParams>::value)
    K3_RETURN_IF_ERROR(x.optional("normWeight", p.dim));
  return x.need("out", p.dim);
}

/// The clustered form takes at most kAttnResClusterMaxSources sources and
/// whole 8-element chunks of a D that one cluster's threads hold (its CUDA
/// kernel writes NaN otherwise).
Status checkAttnResClustered(const AttnResParams &p, ExtentChecker &x) {
  const char *k = "attn_res_clustered";
  const int64_t n = p.numBlocks + (p.extra ? 1 : 0);
  if (n > kAttnResClusterMaxSources)
    return makeError(k, ": takes at most ", kAttnResClusterMaxSources,
                     " sources (numBlocks + extra), got ", n);
  if (p.dim > 0 && attnResClusterBlocks(p.dim, 1) == 0)
    return makeError(k, ": dim must be a multiple of 8 and at most ",
                     8 * kAttnResClusterThreads * kAttnResClusterMaxBlocks,
                     ", got ", p.dim);
  return checkAttnRes(p, x);
}

Status checkAttnResCommit(const AttnResCommitParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("attn_res_commit", "dim", p.dim));
  K3_RETURN_IF_ERROR(nonNegative("attn_res_commit", "index", p.index));
  int64_t rows = 0, blocks = 0;
  K3_RETURN_IF_ERROR(add("attn_res_commit", "index + 1", p.index, 1, rows));
  K3_RETURN_IF_ERROR(
      mul("attn_res_commit", "(index + 1) * dim", rows, p.dim, blocks));
  K3_RETURN_IF_ERROR(x.need("src", p.dim));
  return x.need("blocks", blocks);
}

Status checkKdaL2Norm(const KdaL2NormParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("kda_l2norm", "n", p.n));
  K3_RETURN_IF_ERROR(positive("kda_l2norm", "headDim", p.headDim));
  if (p.n % p.headDim != 0)
    return makeError("kda_l2norm: n (", p.n,
                     ") must be a multiple of headDim (", p.headDim, ")");
  K3_RETURN_IF_ERROR(x.need("x", p.n));
  return x.need("out", p.n);
}

Status checkKdaGate(const KdaGateParams &p, ExtentChecker &x) {
  int64_t C = 0, S = 0;
  K3_RETURN_IF_ERROR(kdaSizes("kda_gate", p.numHeads, p.headDim, C, S));
  for (const char *f : {"f", "dtBias", "out"})
    K3_RETURN_IF_ERROR(x.need(f, C));
  return x.need("aLog", p.numHeads);
}

Status checkSigmoid(const SigmoidParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("sigmoid", "n", p.n));
  K3_RETURN_IF_ERROR(x.need("x", p.n));
  return x.need("out", p.n);
}

Status checkKdaStep(const KdaStepParams &p, ExtentChecker &x) {
  int64_t C = 0, S = 0;
  K3_RETURN_IF_ERROR(kdaSizes("kda_step", p.numHeads, p.headDim, C, S));
  for (const char *f : {"q", "k", "v", "g", "out"})
    K3_RETURN_IF_ERROR(x.need(f, C));
  K3_RETURN_IF_ERROR(x.need("beta", p.numHeads));
  return x.need("state", S);
}

Status checkAllReduce(const AllReduceParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("all_reduce", "n", p.n));
  K3_RETURN_IF_ERROR(x.need("x", p.n));
  return x.need("out", p.n);
}
Status checkAllGather(const AllGatherParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("all_gather", "n", p.n));
  K3_RETURN_IF_ERROR(positive("all_gather", "ranks", p.ranks));
  if (p.ranks > kMaxRanks)
    return makeError("all_gather: ranks = ", p.ranks, " is above the limit ",
                     kMaxRanks);
  K3_RETURN_IF_ERROR(x.need("x", p.n));
  return x.need("out", p.n * p.ranks);
}

Status checkArgmax(const ArgmaxParams &p, ExtentChecker &x) {
  K3_RETURN_IF_ERROR(positive("argmax", "n", p.n));
  K3_RETURN_IF_ERROR(x.need("logits", p.n));
  K3_RETURN_IF_ERROR(x.optional("step", kStepWords));
  return x.optional("outId", 1);
}

//--- the table ------------------------------------------------------------//

template <typename P> void addAttnResFusedNorm(std::vector<KernelField> &f) {
  if constexpr (HasNormWeight<P>::value) {
    f.push_back(K3_FIELD(P, normWeight));
    f.push_back(K3_FIELD(P, normEps));
  }
}

std::vector<KernelField> linearMultiFields() {
  using P = LinearMultiParams;
  std::vector<KernelField> f = {K3_FIELD(P, x), K3_FIELD(P, k),
                                K3_FIELD(P, normWeight), K3_FIELD(P, normEps),
                                K3_FIELD(P, count)};
  for (int i = 0; i < kLinearMultiMax; ++i) {
    const size_t base = offsetof(P, entries) + i * sizeof(LinearMultiEntry);
    const std::string s = std::to_string(i);
    f.push_back(makeField<decltype(LinearMultiEntry::w)>(
        "", base + offsetof(LinearMultiEntry, w)));
    f.back().name = "w" + s;
    f.push_back(makeField<decltype(LinearMultiEntry::out)>(
        "", base + offsetof(LinearMultiEntry, out)));
    f.back().name = "out" + s;
    f.push_back(makeField<decltype(LinearMultiEntry::n)>(
        "", base + offsetof(LinearMultiEntry, n)));
    f.back().name = "n" + s;
  }
  return f;
}

/// Scalars that a kernel reads only in some configurations; every other
/// scalar field of every kernel is required in each launch. One table, so a
/// kernel's conditions are stated once and both backends read them.
struct ScalarCondition {
  const char *kernel, *field;
  KernelField::Need need;
  const char *other = "";
  int64_t value = 0;
};
const ScalarCondition kScalarConditions[] = {
    {"linear", "normEps", KernelField::Need::IfGiven, "normWeight"},
    {"linear_multi", "normEps", KernelField::Need::IfGiven, "normWeight"},
    {"gated_mlp", "normEps", KernelField::Need::IfGiven, "normWeight"},
    {"attn_res", "normEps", KernelField::Need::IfGiven, "normWeight"},
    {"attn_res_clustered", "normEps", KernelField::Need::IfGiven, "normWeight"},
    {"router", "normEps", KernelField::Need::IfGiven, "normWeight"},
    {"moe_experts", "normEps", KernelField::Need::IfGiven, "normWeight"},
    {"moe_experts", "sharedInterDim", KernelField::Need::IfGiven, "sharedW1"},
    // SiTU's betas (activation 0); beta2 only with a linear softcap.
    {"gated_act", "beta1", KernelField::Need::IfValue, "activation", 0},
    {"gated_act", "hasBeta2", KernelField::Need::IfValue, "activation", 0},
    {"gated_act", "beta2", KernelField::Need::IfValue, "hasBeta2", 1},
    {"gated_mlp", "beta1", KernelField::Need::IfValue, "activation", 0},
    {"gated_mlp", "hasBeta2", KernelField::Need::IfValue, "activation", 0},
    {"gated_mlp", "beta2", KernelField::Need::IfValue, "hasBeta2", 1},
    {"moe_experts", "beta1", KernelField::Need::IfValue, "activation", 0},
    {"moe_experts", "hasBeta2", KernelField::Need::IfValue, "activation", 0},
    {"moe_experts", "beta2", KernelField::Need::IfValue, "hasBeta2", 1},
    {"moe_experts_mxfp4", "normEps", KernelField::Need::IfGiven, "normWeight"},
    {"moe_experts_mxfp4", "sharedInterDim", KernelField::Need::IfGiven,
     "sharedW1"},
    {"moe_experts_mxfp4", "beta1", KernelField::Need::IfValue, "activation", 0},
    {"moe_experts_mxfp4", "hasBeta2", KernelField::Need::IfValue, "activation",
     0},
    {"moe_experts_mxfp4", "beta2", KernelField::Need::IfValue, "hasBeta2", 1},
    // The KDA gate's lower bound, only in its lb * sigmoid form.
    {"kda_gate", "lowerBound", KernelField::Need::IfValue, "hasLowerBound", 1},
    {"kda_decode", "lowerBound", KernelField::Need::IfValue, "hasLowerBound",
     1},
    // The folded low-rank gate projections' ranks, with their weights.
    {"kda_decode", "fRank", KernelField::Need::IfGiven, "fB"},
    {"kda_decode", "gRank", KernelField::Need::IfGiven, "gB"},
    // A test lever (k3-inject-mutant), never part of a real plan.
    {"router", "forceExpert", KernelField::Need::Never},
    // The split of a long cache between the two attend launches, given only
    // by a plan that has both (absent: none, as in plans written before it:
    // an optional field within version 1).
    {"mla_attend", "handover", KernelField::Need::Never},
    {"mla_attend_clustered", "handover", KernelField::Need::Never},
};

/// Marks every scalar field required, then applies kScalarConditions (and
/// linear_multi's per-entry n_i, needed with w_i).
void applyScalarNeeds(std::vector<KernelInfo> &table) {
  for (KernelInfo &k : table)
    for (KernelField &f : k.fields)
      if ((f.kind == FieldKind::Int64 || f.kind == FieldKind::Int32 ||
           f.kind == FieldKind::Float32) &&
          f.need != KernelField::Need::IfGiven) {
        f.need = KernelField::Need::Always;
        if (k.name == "linear_multi" && f.name.size() > 1 && f.name[0] == 'n' &&
            std::isdigit(static_cast<unsigned char>(f.name[1]))) {
          f.need = KernelField::Need::IfGiven;
          f.other = "w" + f.name.substr(1);
        }
      }
  for (const ScalarCondition &c : kScalarConditions)
    for (KernelInfo &k : table)
      if (k.name == c.kernel)
        for (KernelField &f : k.fields)
          if (f.name == c.field) {
            f.need = c.need;
            f.other = c.other;
            f.value = c.value;
          }
}

std::vector<KernelInfo> buildTable() {
  std::vector<KernelInfo> t;
  auto add = [&](const char *name, const char *params,
                 std::vector<KernelField> fields,
                 std::unique_ptr<KernelParams> (*make)(),
                 Status (*check)(const void *, ExtentChecker &)) {
    KernelInfo k;
    k.name = name;
    k.paramsName = params;
    k.fields = std::move(fields);
    k.make = make;
    k.check = check;
    t.push_back(std::move(k));
  };
#define K3_HOLDER(P) &makeHolder<P>
#define K3_CHECK(P, Fn) &checkAs<P, Fn>
  {
    using P = EmbedParams;
    add("embed", "EmbedParams",
        {K3_FIELD(P, table), K3_FIELD(P, vocab), K3_FIELD(P, dim),
         K3_FIELD(P, token), K3_FIELD(P, out), K3_FIELD(P, step)},
        K3_HOLDER(P), K3_CHECK(P, checkEmbed));
  }
  {
    using P = RmsNormParams;
    add("rms_norm", "RmsNormParams",
        {K3_FIELD(P, x), K3_FIELD(P, w), K3_FIELD(P, out), K3_FIELD(P, n),
         K3_FIELD(P, eps)},
        K3_HOLDER(P), K3_CHECK(P, checkRmsNorm));
  }
  {
    using P = LinearParams;
    add("linear", "LinearParams",
        {K3_FIELD(P, x), K3_FIELD(P, w), K3_FIELD(P, n), K3_FIELD(P, k),
         K3_FIELD(P, normWeight), K3_FIELD(P, normEps), K3_FIELD(P, residual),
         K3_FIELD(P, out), K3_FIELD(P, outF32)},
        K3_HOLDER(P), K3_CHECK(P, checkLinear));
  }
  add("linear_multi", "LinearMultiParams", linearMultiFields(),
      K3_HOLDER(LinearMultiParams),
      K3_CHECK(LinearMultiParams, checkLinearMulti));
  {
    using P = AddParams;
    add("add", "AddParams",
        {K3_FIELD(P, a), K3_FIELD(P, b), K3_FIELD(P, out), K3_FIELD(P, n)},
        K3_HOLDER(P), K3_CHECK(P, checkAdd));
  }
  {
    using P = MulSigmoidParams;
    add("mul_sigmoid", "MulSigmoidParams",
        {K3_FIELD(P, x), K3_FIELD(P, gate), K3_FIELD(P, out), K3_FIELD(P, n)},
        K3_HOLDER(P), K3_CHECK(P, checkMulSigmoid));
  }
  {
    using P = GatedActParams;
    add("gated_act", "GatedActParams",
        {K3_FIELD(P, g), K3_FIELD(P, u), K3_FIELD(P, out), K3_FIELD(P, n),
         K3_FIELD(P, activation), K3_FIELD(P, beta1), K3_FIELD(P, hasBeta2),
         K3_FIELD(P, beta2)},
        K3_HOLDER(P), K3_CHECK(P, checkGatedAct));
  }
  {
    using P = KdaConvParams;
    add("kda_conv", "KdaConvParams",
        {K3_FIELD(P, u), K3_FIELD(P, weight), K3_FIELD(P, state),
         K3_FIELD(P, out), K3_FIELD(P, channels), K3_FIELD(P, width)},
        K3_HOLDER(P), K3_CHECK(P, checkKdaConv));
  }
  {
    using P = KdaL2NormParams;
    add("kda_l2norm", "KdaL2NormParams",
        {K3_FIELD(P, x), K3_FIELD(P, out), K3_FIELD(P, n), K3_FIELD(P, headDim),
         K3_FIELD(P, eps), K3_FIELD(P, scale)},
        K3_HOLDER(P), K3_CHECK(P, checkKdaL2Norm));
  }
  {
    using P = KdaGateParams;
    add("kda_gate", "KdaGateParams",
        {K3_FIELD(P, f), K3_FIELD(P, dtBias), K3_FIELD(P, aLog),
         K3_FIELD(P, out), K3_FIELD(P, numHeads), K3_FIELD(P, headDim),
         K3_FIELD(P, hasLowerBound), K3_FIELD(P, lowerBound)},
        K3_HOLDER(P), K3_CHECK(P, checkKdaGate));
  }
  {
    using P = SigmoidParams;
    add("sigmoid", "SigmoidParams",
        {K3_FIELD(P, x), K3_FIELD(P, out), K3_FIELD(P, n)},
        K3_HOLDER(P), K3_CHECK(P, checkSigmoid));
  }
  {
    using P = KdaStepParams;
    add("kda_step", "KdaStepParams",
        {K3_FIELD(P, q), K3_FIELD(P, k), K3_FIELD(P, v), K3_FIELD(P, g),
         K3_FIELD(P, beta), K3_FIELD(P, state), K3_FIELD(P, out),
         K3_FIELD(P, numHeads), K3_FIELD(P, headDim)},
        K3_HOLDER(P), K3_CHECK(P, checkKdaStep));
  }
  {
    using P = KdaGatedNormParams;
    add("kda_gated_norm", "KdaGatedNormParams",
        {K3_FIELD(P, o), K3_FIELD(P, gate), K3_FIELD(P, weight),
         K3_FIELD(P, out), K3_FIELD(P, numHeads), K3_FIELD(P, headDim),
         K3_FIELD(P, eps)},
        K3_HOLDER(P), K3_CHECK(P, checkKdaGatedNorm));
  }
  {
    using P = KdaDecodeParams;
    add("kda_decode", "KdaDecodeParams", {K3_FIELD(P, uq),
                                          K3_FIELD(P, uk),
                                          K3_FIELD(P, uv),
                                          K3_FIELD(P, convQ),
                                          K3_FIELD(P, convK),
                                          K3_FIELD(P, convV),
                                          K3_FIELD(P, convStateQ),
                                          K3_FIELD(P, convStateK),
                                          K3_FIELD(P, convStateV),
                                          K3_FIELD(P, f),
                                          K3_FIELD(P, betaLogit),
                                          K3_FIELD(P, dtBias),
                                          K3_FIELD(P, aLog),
                                          K3_FIELD(P, state),
                                          K3_FIELD(P, gate),
                                          K3_FIELD(P, normWeight),
                                          K3_FIELD(P, out),
                                          K3_FIELD(P, numHeads),
                                          K3_FIELD(P, headDim),
                                          K3_FIELD(P, convWidth),
                                          K3_FIELD(P, hasLowerBound),
                                          K3_FIELD(P, lowerBound),
                                          K3_FIELD(P, normEps),
                                          K3_FIELD(P, fA),
                                          K3_FIELD(P, fB),
                                          K3_FIELD(P, fRank),
                                          K3_FIELD(P, gA),
                                          K3_FIELD(P, gB),
                                          K3_FIELD(P, gateOut),
                                          K3_FIELD(P, gRank)},
        K3_HOLDER(P), K3_CHECK(P, checkKdaDecode));
    addPrefetchFields(t.back().fields, offsetof(P, l2Prefetch));
  }
  {
    using P = MlaCacheAppendParams;
    add("mla_cache_append", "MlaCacheAppendParams",
        {K3_FIELD(P, kv), K3_FIELD(P, normWeight), K3_FIELD(P, eps),
         K3_FIELD(P, cache), K3_FIELD(P, pos), K3_FIELD(P, step),
         K3_FIELD(P, kvLoraRank),
         K3_FIELD(P, ropeDim)},
        K3_HOLDER(P), K3_CHECK(P, checkMlaCacheAppend));
  }
  {
    using P = MlaAttendParams;
    add("mla_attend", "MlaAttendParams",
        {K3_FIELD(P, q), K3_FIELD(P, kvB), K3_FIELD(P, cache),
         K3_FIELD(P, length), K3_FIELD(P, step), K3_FIELD(P, gate),
         K3_FIELD(P, out), K3_FIELD(P, numHeads), K3_FIELD(P, nopeDim),
         K3_FIELD(P, ropeDim), K3_FIELD(P, vDim), K3_FIELD(P, kvLoraRank),
         K3_FIELD(P, scale), K3_FIELD(P, handover)},
        K3_HOLDER(P), K3_CHECK(P, checkMlaAttend));
    addPrefetchFields(t.back().fields, offsetof(P, l2Prefetch));
    add("mla_attend_clustered", "MlaAttendParams", t.back().fields,
        K3_HOLDER(P), K3_CHECK(P, checkMlaAttendClustered));
  }
  {
    using P = RouterParams;
    add("router", "RouterParams",
        {K3_FIELD(P, h), K3_FIELD(P, normWeight), K3_FIELD(P, normEps),
         K3_FIELD(P, gate), K3_FIELD(P, bias), K3_FIELD(P, numExperts), K3_FIELD(P, dim), K3_FIELD(P, topK),
         K3_FIELD(P, renormalize), K3_FIELD(P, scaling), K3_FIELD(P, outIds),
         K3_FIELD(P, outWeights), K3_FIELD(P, forceExpert)},
        K3_HOLDER(P), K3_CHECK(P, checkRouter));
  }
  {
    using P = GatedMlpParams;
    add("gated_mlp", "GatedMlpParams",
        {K3_FIELD(P, x), K3_FIELD(P, normWeight), K3_FIELD(P, normEps),
         K3_FIELD(P, w1), K3_FIELD(P, w3), K3_FIELD(P, w2), K3_FIELD(P, inDim),
         K3_FIELD(P, interDim), K3_FIELD(P, outDim), K3_FIELD(P, activation),
         K3_FIELD(P, beta1), K3_FIELD(P, hasBeta2), K3_FIELD(P, beta2),
         K3_FIELD(P, residual), K3_FIELD(P, out)},
        K3_HOLDER(P), K3_CHECK(P, checkGatedMlp));
  }
  {
    using P = MoeExpertsParams;
    std::vector<KernelField> f = {K3_FIELD(P, x),
                                  K3_FIELD(P, ids),
                                  K3_FIELD(P, weights),
                                  K3_FIELD(P, topK),
                                  K3_FIELD(P, numExperts),
                                  K3_FIELD(P, w1),
                                  K3_FIELD(P, w3),
                                  K3_FIELD(P, w2),
                                  K3_FIELD(P, dim),
                                  K3_FIELD(P, interDim),
                                  K3_FIELD(P, activation),
                                  K3_FIELD(P, beta1),
                                  K3_FIELD(P, hasBeta2),
                                  K3_FIELD(P, beta2),
                                  K3_FIELD(P, normWeight),
                                  K3_FIELD(P, normEps),
                                  K3_FIELD(P, sharedInterDim),
                                  K3_FIELD(P, sharedW1),
                                  K3_FIELD(P, sharedW3),
                                  K3_FIELD(P, sharedW2),
                                  K3_FIELD(P, residual),
                                  K3_FIELD(P, out)};
    add("moe_experts", "MoeExpertsParams", f, K3_HOLDER(P),
        K3_CHECK(P, checkMoeExperts));
    add("moe_experts_mxfp4", "MoeExpertsParams", std::move(f), K3_HOLDER(P),
        K3_CHECK(P, checkMoeExpertsMxfp4));
  }
  {
    using P = AttnResParams;
    std::vector<KernelField> f = {K3_FIELD(P, blocks), K3_FIELD(P, numBlocks),
                                  K3_FIELD(P, extra),  K3_FIELD(P, wNorm),
                                  K3_FIELD(P, wProj),  K3_FIELD(P, eps),
                                  K3_FIELD(P, dim),    K3_FIELD(P, out)};
    addAttnResFusedNorm<P>(f);
    add("attn_res", "AttnResParams", f, K3_HOLDER(P),
        K3_CHECK(P, checkAttnRes));
    add("attn_res_clustered", "AttnResParams", std::move(f), K3_HOLDER(P),
        K3_CHECK(P, checkAttnResClustered));
  }
  {
    using P = AttnResCommitParams;
    add("attn_res_commit", "AttnResCommitParams",
        {K3_FIELD(P, src), K3_FIELD(P, blocks), K3_FIELD(P, index),
         K3_FIELD(P, dim)},
        K3_HOLDER(P), K3_CHECK(P, checkAttnResCommit));
  }
  {
    using P = ArgmaxParams;
    add("argmax", "ArgmaxParams",
        {K3_FIELD(P, logits), K3_FIELD(P, n), K3_FIELD(P, outId),
         K3_FIELD(P, step)},
        K3_HOLDER(P), K3_CHECK(P, checkArgmax));
  }
  {
    using P = AllReduceParams;
    add("all_reduce", "AllReduceParams",
        {K3_FIELD(P, x), K3_FIELD(P, out), K3_FIELD(P, n)}, K3_HOLDER(P),
        K3_CHECK(P, checkAllReduce));
    t.back().collective = true;
  }
  {
    using P = AllGatherParams;
    add("all_gather", "AllGatherParams",
        {K3_FIELD(P, x), K3_FIELD(P, out), K3_FIELD(P, n), K3_FIELD(P, ranks)},
        K3_HOLDER(P), K3_CHECK(P, checkAllGather));
    t.back().collective = true;
  }
  applyScalarNeeds(t);
  // moe_ffn is router + moe_experts in one params struct: their fields (and
  // which scalars each needs) under the members' prefixes, so the two
  // tables cannot drift apart.
  {
    using P = MoeFfnParams;
    std::vector<KernelField> f;
    auto nest = [&](const char *kernel, const char *prefix, size_t base) {
      for (const KernelInfo &k : t)
        if (k.name == kernel)
          for (KernelField field : k.fields) {
            field.name = prefix + field.name;
            field.offset += base;
            if (!field.other.empty())
              field.other = prefix + field.other;
            f.push_back(std::move(field));
          }
    };
    nest("router", "router.", offsetof(P, router));
    nest("moe_experts", "experts.", offsetof(P, experts));
    for (KernelField &field : f) {
      if (field.name == "experts.ids")
        field.producedBy = "router.outIds";
      if (field.name == "experts.weights")
        field.producedBy = "router.outWeights";
    }
    addPrefetchFields(f, offsetof(P, l2Prefetch));
    add("moe_ffn", "MoeFfnParams", std::move(f), K3_HOLDER(P),
        K3_CHECK(P, checkMoeFfn));
  }
#undef K3_HOLDER
#undef K3_CHECK
  return t;
}

} // namespace

//===----------------------------------------------------------------------===//
// Public interface
//===----------------------------------------------------------------------===//

const char *elemTypeName(ElemType t) {
  switch (t) {
  case ElemType::None:
    return "none";
  case ElemType::BF16:
    return "bf16";
  case ElemType::F32:
    return "f32";
  case ElemType::I32:
    return "i32";
  case ElemType::I64:
    return "i64";
  case ElemType::U8:
    return "u8";
  }
  return "?";
}

size_t elemTypeSize(ElemType t) {
  // The sizes themselves live in one table, the tensor dtypes' (dtypeSize).
  switch (t) {
  case ElemType::None:
    return 0;
  case ElemType::BF16:
    return dtypeSize(DType::BF16);
  case ElemType::F32:
    return dtypeSize(DType::F32);
  case ElemType::I32:
    return dtypeSize(DType::I32);
  case ElemType::I64:
    return dtypeSize(DType::I64);
  case ElemType::U8:
    return dtypeSize(DType::U8);
  }
  return 0;
}

const KernelField *KernelInfo::field(const std::string &fieldName) const {
  for (const KernelField &f : fields)
    if (f.name == fieldName)
      return &f;
  return nullptr;
}

const std::vector<KernelInfo> &kernelTable() {
  static const std::vector<KernelInfo> table = buildTable();
  return table;
}

const KernelInfo *findKernel(const std::string &name) {
  for (const KernelInfo &k : kernelTable())
    if (k.name == name)
      return &k;
  return nullptr;
}

} // namespace k3
