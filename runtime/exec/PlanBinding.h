//===- PlanBinding.h - Binding a plan's launches to memory ------*- C++ -*-===//
//
// What every backend does the same way: resolve the plan's weights in a
// checkpoint (format and shape checked, stacked experts become per-expert
// tables, bf16 vectors widened to f32, "vector" weights kept in the dtype
// the checkpoint stores), and fill each launch's params struct
// from its args through the kernel table, checking that every pointer the
// kernel will touch is bound and large enough. Only the addresses differ: the
// CPU backend binds host memory, the CUDA backend the device copies.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_PLANBINDING_H
#define K3C_RUNTIME_EXEC_PLANBINDING_H

#include "kernels/common/WeightRef.h"
#include "runtime/exec/CpuKernels.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanKernels.h"
#include "runtime/io/Safetensors.h"
#include "runtime/Status.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace k3 {

/// A plan weight found in the checkpoint (host memory, mmapped).
struct ResolvedWeight {
  const uint8_t *data = nullptr; ///< bf16 / f32 bytes (null for mxfp4)
  uint64_t bytes = 0;
  /// The element type of `data` (kVectorBf16 / kVectorF32): fixed by the
  /// plan for bf16 and f32 weights, the checkpoint's for a "vector" weight.
  int32_t dtype = kVectorBf16;
  WeightRef ref;                ///< bf16 or mxfp4, non-stacked
  std::vector<WeightRef> table; ///< per expert, when stacked
  /// An aligned host copy when the checkpoint's bytes cannot be used in
  /// place: an f32 weight stored bf16 (widened) or a misaligned tensor.
  std::vector<float> widened;
  /// A split weight's parts (PlanWeight::split): views into the checkpoint
  /// where the part is contiguous there, else gathered copies. `data`,
  /// `ref` and `table` point into them.
  std::vector<std::unique_ptr<TensorSlice>> parts;
};

/// Finds `w` in `store` and checks its format and shape. Errors name the
/// checkpoint tensor and what the plan expected.
Status resolveWeight(const PlanWeight &w, const TensorStore &store,
                     ResolvedWeight &out);

/// Where a backend keeps the plan's memory. Pointers are host or device
/// addresses; the binder only stores them in params structs.
struct PlanMemory {
  uint8_t *arena = nullptr;
  std::vector<uint8_t *> states; ///< per plan state
  std::vector<uint64_t> stateBytes;
  /// Per plan weight: the flat data (bf16 / f32), the WeightRef, and the
  /// table of per-expert WeightRefs (stacked weights).
  struct Weight {
    const uint8_t *data = nullptr;
    uint64_t bytes = 0;
    WeightRef ref;
    const WeightRef *table = nullptr;
    /// The element type of `data` (ResolvedWeight::dtype): what a VectorRef
    /// field bound to a "vector" weight is told.
    int32_t dtype = kVectorBf16;
  };
  std::vector<Weight> weights;
  /// The step block ({"input": "step"}): kStepWords int64 in the backend's
  /// memory (kernels/common/StepInputs.h).
  int64_t *step = nullptr;
};

/// The PlanMemory entry of a weight resolved in host memory (CPU backend,
/// the differential check's reference side).
PlanMemory::Weight hostWeight(const ResolvedWeight &w);

/// A launch with its params filled; step inputs are patched per step.
struct BoundLaunch {
  const KernelInfo *kernel = nullptr;
  std::unique_ptr<KernelParams> params;
  /// The kernel's CPU implementation (null if it has none), its multi-row
  /// form (null if it has none: findCpuRowsKernel), and its prefill form
  /// (findCpuChunkRowsKernel: PrefillForm::Chunk).
  CpuEntry cpu = nullptr;
  CpuRowsEntry cpuRows = nullptr;
  CpuRowsEntry cpuChunkRows = nullptr;
  struct Input {
    size_t offset = 0;
    bool is32 = false;
    PlanInput input = PlanInput::Token;
  };
  std::vector<Input> inputs;

  /// Writes the step's token, position and length into the params.
  void setInputs(int64_t token, int64_t pos);
  /// Runs the launch on the CPU (bindLaunch refused a kernel without one).
  void runCpu() const { cpu(params->data()); }
};

/// A state pointer of a bound launch that follows the slot its row serves
/// (a batched plan's rows, Backend::stepSlots): where it is in the params,
/// which plan state, and the offset into it.
struct StatePatch {
  size_t field = 0;
  size_t state = 0;
  uint64_t offset = 0;
};

/// The fields of launch `index` (bound as `bound`) that point into a
/// sequence's states, i.e. every state argument but those of the
/// step-local states (`stepLocal`, per plan state: one step's, each row
/// has its own copy).
std::vector<StatePatch> slotStatePatches(const PlanDoc &plan, size_t index,
                                         const BoundLaunch &bound,
                                         const std::vector<bool> &stepLocal);

/// Binds every launch of `plan` against `mem` into `launches` (a row of a
/// batched step), with `patches[l]` the slotStatePatches of launch l.
Status bindRowLaunches(const PlanDoc &plan, const PlanMemory &mem,
                       const std::vector<bool> &stepLocal,
                       std::vector<BoundLaunch> &launches,
                       std::vector<std::vector<StatePatch>> &patches);

/// Points each of `patches`' fields of `bound` at stateBase(state) + offset
/// (a host or device address).
template <typename Base>
void applyStatePatches(BoundLaunch &bound,
                       const std::vector<StatePatch> &patches,
                       const Base &stateBase) {
  uint8_t *params = static_cast<uint8_t *>(bound.params->data());
  for (const StatePatch &p : patches) {
    const uint64_t address =
        static_cast<uint64_t>(stateBase(p.state)) + p.offset;
    std::memcpy(params + p.field, &address, sizeof(address));
  }
}

/// Whether `plan` chooses greedy tokens on the device: an `argmax` launch
/// whose `step` field takes the step block (so Backend::chainGreedy can run
/// steps without the host).
bool planChainsGreedy(const PlanDoc &plan);

/// The checks every backend's step makes before anything runs: `token` in
/// [0, vocab), `pos` in [0, maxSeq).
Status checkStepInputs(int64_t token, int64_t pos, int64_t vocab,
                       int64_t maxSeq);

/// Fills launch `index` of `plan` against `mem`. Errors name the launch and
/// the field. `plan` must be validated (validatePlan).
Status bindLaunch(const PlanDoc &plan, size_t index, const PlanMemory &mem,
                  BoundLaunch &out);

} // namespace k3

#endif // K3C_RUNTIME_EXEC_PLANBINDING_H
