//===- PlanKernels.h - The plan's kernel table ------------------*- C++ -*-===//
//
// Every entry point a plan may launch (docs/PLAN.md "Kernels"), described by
// its params struct: the field names a launch's args may use, what kind of
// value each takes, where it lives in the struct, and what a launch's
// bindings must cover. Plan validation checks args against this table; the
// binder fills params structs through it (one generic binder instead of one
// hand-written binder per kernel); the CPU backend hands each struct to its
// implementation (runtime/exec/CpuKernels.h), the CUDA backend passes it by
// value to the PTX entry point of the same name. No implementation is linked
// here: the compiler reads this table too.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_PLAN_PLANKERNELS_H
#define K3C_RUNTIME_PLAN_PLANKERNELS_H

#include "runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace k3 {

/// What a params field holds, hence which arg values may bind it.
enum class FieldKind {
  Int64,       ///< int64_t: a JSON integer or an input
  Int32,       ///< int32_t: a JSON integer (or an input) within int32 range
  Float32,     ///< float: a JSON number
  PtrIn,       ///< const T *: a buffer, state or weight
  PtrOut,      ///< T *: a buffer or state (never a read-only weight)
  Weight,      ///< WeightRef: a non-stacked weight
  WeightTable, ///< const WeightRef *: a stacked ({e}) weight
  Vector,      ///< VectorRef: a small weight, bf16 or f32 as stored
  /// L2Prefetch::data: a bf16 or f32 weight (any offset, a multiple of 16)
  /// that the kernel only asks L2 to fetch for a later launch; never read
  /// through, so it moves no bytes of its own launch (PlanBytes.h).
  Prefetch,
};

/// Element type a pointer field points at.
enum class ElemType { None, BF16, F32, I32, I64, U8 };

/// The plan dtype spelling of an element type ("bf16", ...).
const char *elemTypeName(ElemType t);
/// Bytes per element (0 for None).
size_t elemTypeSize(ElemType t);

/// The field names of an L2Prefetch member (kernels/common/WeightRef.h):
/// the weight and its byte count. The compiler's pass, the k3l verifier and
/// the kernel table all spell them through these.
inline constexpr const char *kL2PrefetchField = "l2Prefetch";
inline constexpr const char *kL2PrefetchBytesField = "l2PrefetchBytes";

/// One field of a params struct.
struct KernelField {
  std::string name;
  FieldKind kind = FieldKind::Int64;
  ElemType elem = ElemType::None; ///< pointer fields only
  size_t offset = 0;              ///< byte offset in the params struct
  /// Scalars: whether a launch must give the field (a plan never relies on
  /// a params struct's default). Pointer fields are optional here; each
  /// kernel's check says which it needs.
  enum class Need {
    Always,  ///< every launch
    Never,   ///< optional (test levers such as the router's forceExpert)
    IfGiven, ///< when field `other` is given
    IfValue, ///< when field `other` is given as the integer `value`
  } need = Need::Never;
  std::string other;
  int64_t value = 0;
  /// Input pointers only: the output field of the same kernel that writes
  /// what this one reads when both are bound to the same place (moe_ffn's
  /// experts.ids after router.outIds); such a read needs no earlier launch.
  std::string producedBy;
};

/// One params struct instance, default-initialised. Which implementation
/// consumes it is the backend's business (runtime/exec/CpuKernels.h for the
/// CPU, the PTX entry point of the same name for CUDA).
class KernelParams {
public:
  virtual ~KernelParams() = default;
  /// The params struct's bytes (fields are written through KernelField).
  virtual void *data() = 0;
  virtual const void *data() const = 0;
  virtual size_t size() const = 0;
};

/// What a kernel's check asks of the bound arguments. Element counts are in
/// the field's element type; weights are matrices [rows, cols] in their own
/// format. Every call fails with a message naming the field when the binding
/// does not cover what the kernel will touch.
class ExtentChecker {
public:
  virtual ~ExtentChecker() = default;
  /// Pointer field `field` is bound and covers `elems` elements (a Vector
  /// field: elements of the dtype bound to it).
  virtual Status need(const char *field, int64_t elems) = 0;
  /// Like need(), but an unbound (null) field is fine.
  virtual Status optional(const char *field, int64_t elems) = 0;
  /// WeightRef field `field` is bound to a weight of (at least) [rows, cols];
  /// an MXFP4 weight must be exactly [rows, cols].
  virtual Status needMatrix(const char *field, int64_t rows, int64_t cols) = 0;
  /// WeightRef table `field` has >= count experts, each [rows, cols].
  virtual Status needTable(const char *field, int64_t count, int64_t rows,
                           int64_t cols) = 0;
};

/// One entry point of the kernel table.
struct KernelInfo {
  std::string name;       ///< "linear"
  std::string paramsName; ///< "LinearParams"
  std::vector<KernelField> fields;
  /// A default-initialised params struct.
  std::unique_ptr<KernelParams> (*make)() = nullptr;
  /// Checks the filled params at bind time: sizes in range, and through
  /// `ext` that every pointer the kernel touches is bound and large enough.
  /// Fields bound to inputs hold their largest value (token: vocab - 1, pos:
  /// max_seq - 1, length: max_seq) when this runs.
  Status (*check)(const void *params, ExtentChecker &ext) = nullptr;
  /// A collective of a tensor-parallel plan (all_reduce, all_gather): no
  /// kernel computes it, the backend's communicator does
  /// (kernels/collective/CollectiveParams.h).
  bool collective = false;

  /// The field called `name`, or null.
  const KernelField *field(const std::string &name) const;
};

/// The kernel called `name`, or null when the table has none.
const KernelInfo *findKernel(const std::string &name);
/// Every kernel of the table, in PLAN.md order.
const std::vector<KernelInfo> &kernelTable();

} // namespace k3

#endif // K3C_RUNTIME_PLAN_PLANKERNELS_H
