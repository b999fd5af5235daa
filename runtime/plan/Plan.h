//===- Plan.h - The k3c plan: document, reader, writer ----------*- C++ -*-===//
//
// A plan (docs/PLAN.md) is the whole contract between the compiler and the
// runtime: the launches of one decode step, the arena buffers, the resident
// state, the weights by checkpoint name and the model config. PlanDoc is its
// in-memory form; serializePlan writes it (the compiler calls this) and
// parsePlan reads it back (the runtime calls this).
//
// Reading a plan is a security boundary like reading safetensors: plans come
// from files. parsePlan checks the header, the length and the CRC before it
// parses a byte of JSON, then validates every index, every buffer against the
// arena, every kernel name and every argument against that kernel's params
// struct (PlanKernels.h). Anything wrong is a Status naming the launch and the
// field; nothing throws and nothing crashes.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_PLAN_PLAN_H
#define K3C_RUNTIME_PLAN_PLAN_H

#include "runtime/Status.h"
#include "runtime/io/TensorSlice.h"
#include "runtime/model/Config.h"
#include "runtime/plan/PlanKernels.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace k3 {

/// The plan format version this runtime reads and writes.
constexpr int64_t kPlanVersion = 1;
/// Arena buffer offsets are multiples of this (PLAN.md "buffers").
constexpr uint64_t kPlanBufferAlign = 256;
/// The most sequences one plan may decode together (PLAN.md "max_batch").
constexpr int64_t kMaxPlanBatch = 1024;

/// A per-step value the runtime supplies at each decode step.
enum class PlanInput {
  Token,  ///< the step's token id
  Pos,    ///< its 0-based position
  Length, ///< pos + 1
  /// A pointer field: the backend's step block (kernels/common/StepInputs.h),
  /// the same step's inputs in memory, written by argmax for the next step.
  Step,
};

/// The JSON spelling of an input ("token", "pos", "length", "step").
const char *planInputName(PlanInput input);

/// One argument value of a launch (PLAN.md "Argument values").
struct PlanArg {
  enum class Kind {
    Int,    ///< JSON integer: an integer (or float) field
    Float,  ///< JSON float: a float field
    Buffer, ///< {"buffer": index, "offset": bytes}
    State,  ///< {"state": index, "offset": bytes}
    Weight, ///< {"weight": index, "offset": bytes}
    Input,  ///< {"input": "token" | "pos" | "length"}
  };
  Kind kind = Kind::Int;
  int64_t intValue = 0;               ///< Kind::Int
  double floatValue = 0.0;            ///< Kind::Float
  int64_t index = 0;                  ///< Buffer / State / Weight
  uint64_t offset = 0;                ///< Buffer / State / Weight, in bytes
  PlanInput input = PlanInput::Token; ///< Kind::Input

  static PlanArg integer(int64_t v);
  static PlanArg number(double v);
  static PlanArg buffer(int64_t index, uint64_t offset = 0);
  static PlanArg state(int64_t index, uint64_t offset = 0);
  static PlanArg weight(int64_t index, uint64_t offset = 0);
  static PlanArg fromInput(PlanInput in);

  bool isPointer() const {
    return kind == Kind::Buffer || kind == Kind::State || kind == Kind::Weight;
  }
};
bool operator==(const PlanArg &a, const PlanArg &b);
inline bool operator!=(const PlanArg &a, const PlanArg &b) { return !(a == b); }

/// A scratch buffer carved from the arena; live for one step only.
struct PlanBuffer {
  std::string name;
  uint64_t offset = 0; ///< bytes from the arena base, kPlanBufferAlign-aligned
  uint64_t bytes = 0;
  std::string dtype; ///< "bf16", "f32", "i32", "i64" or "u8"
  int64_t elems = 0; ///< bytes / element size
};

/// The kinds of resident state, one per k3 state type. The plan spells them
/// as stateKindName says; this is the one place those spellings live.
enum class StateKind {
  KdaState,      ///< "kda_state": fp32 [H, d, d]
  ConvState,     ///< "conv_state": fp32 [3C, W-1]
  MlaCache,      ///< "mla_cache": bf16 [max_seq, L+R]
  AttnResBlocks, ///< "attn_res_blocks": bf16 [max_blocks, D]
};
/// Every kind, in declaration order.
inline constexpr StateKind kStateKinds[] = {
    StateKind::KdaState, StateKind::ConvState, StateKind::MlaCache,
    StateKind::AttnResBlocks};
/// The plan's spelling of `kind` ("kda_state", ...).
const char *stateKindName(StateKind kind);
/// Parses the plan's spelling; false when unknown.
bool parseStateKind(const std::string &name, StateKind &out);
/// The element type of a state of `kind`: F32 or BF16.
ElemType stateKindElem(StateKind kind);
/// Whether a state of `kind` lives for one step only: AttnRes blocks are one
/// token's committed layer outputs (K3.md §4), written by each step before
/// it reads them. A backend that runs several rows of one sequence in a
/// step (a prompt chunk) gives each row its own copy; the others are the
/// sequence's, shared by its rows in position order.
bool stateKindIsStepLocal(StateKind kind);

/// Resident per-sequence state, zeroed at the start of each sequence. Its
/// shape and bytes are one slot's; a plan of max_batch B holds B slots.
struct PlanState {
  std::string name;
  /// stateKindName of its StateKind.
  std::string kind;
  uint64_t bytes = 0; ///< element size times the product of shape
  std::vector<int64_t> shape;
  bool is(StateKind k) const { return kind == stateKindName(k); }
};

/// A checkpoint tensor by Hugging Face name.
struct PlanWeight {
  /// The tensor name; for "mxfp4" the prefix of `.weight_packed` /
  /// `.weight_scale`; containing "{e}" for experts stacked on dim 0.
  std::string name;
  std::string format;         ///< "bf16", "f32", "vector" or "mxfp4"
  std::vector<int64_t> shape; ///< logical shape ([E, ...] when stacked)
  /// A tensor-parallel plan's part of the checkpoint tensor (ranks > 1):
  /// `shape` is the part's, the checkpoint's is `shape` with dimension
  /// `split.axis` times `split.ranks` (PLAN.md "Tensor-parallel plans").
  TensorSplit split;
  bool stacked() const { return name.find("{e}") != std::string::npos; }
  bool isSplit() const { return split.ranks > 1; }
  /// The checkpoint tensor's logical shape (`shape` unless split).
  std::vector<int64_t> fullShape() const;
};

/// One kernel launch. `args` keep their order (the writer emits them so).
struct PlanLaunch {
  std::string kernel; ///< entry point name (PlanKernels.h)
  std::string op;     ///< the k3 op it came from, for reports
  std::array<int64_t, 3> grid{{1, 1, 1}};
  std::array<int64_t, 3> block{{1, 1, 1}};
  /// Thread-block clusters (Hopper): the grid in clusters of this shape,
  /// each dimension dividing the grid's; [1, 1, 1] launches no clusters.
  /// The CPU backend ignores it (its kernels compute the same).
  std::array<int64_t, 3> cluster{{1, 1, 1}};
  int64_t smem = 0;
  std::vector<std::pair<std::string, PlanArg>> args;

  /// Whether the launch asks for clusters of more than one block.
  bool clustered() const { return cluster[0] * cluster[1] * cluster[2] > 1; }

  /// Appends (or replaces) argument `name`; returns *this for chaining.
  PlanLaunch &arg(const std::string &name, const PlanArg &value);
  /// The argument called `name`, or null.
  const PlanArg *find(const std::string &name) const;
};

/// A named value of the step that a checker may read (docs/PLAN.md
/// "probes"): once the first `after` launches of a step have run, buffer
/// `buffer` holds it. Probes cost nothing when a plan runs normally.
struct PlanProbe {
  std::string name; ///< e.g. "layers.3.mixer", "layers.3.out"
  int64_t buffer = -1;
  int64_t after = 0; ///< launches [0, after) compute it
};

/// A whole plan (docs/PLAN.md "Body").
struct PlanDoc {
  int64_t version = kPlanVersion;
  std::string fusion = "default";
  int64_t maxSeq = 0;
  /// The sequences decoded together (PLAN.md "max_batch"): the runtime holds
  /// this many slots, each a copy of the arena and of every state.
  int64_t maxBatch = 1;
  /// A tensor-parallel plan is one of `ranks` plans, this one rank `rank`'s
  /// (PLAN.md "Tensor-parallel plans"); 1 and 0 otherwise.
  int64_t rank = 0;
  int64_t ranks = 1;
  ModelConfig config;
  uint64_t arenaBytes = 0;
  std::vector<PlanBuffer> buffers;
  std::vector<PlanState> states;
  std::vector<PlanWeight> weights;
  int64_t logitsBuffer = -1; ///< index of the fp32 [vocab] logits buffer
  std::vector<PlanLaunch> launches;
  std::vector<PlanProbe> probes; ///< in launch order
  /// PTX carried by the plan (a k3c built with CUDA): the module (kernel
  /// family) that defines each launched kernel, and each module's text once.
  std::map<std::string, std::string> kernelModules; ///< kernel -> module
  std::map<std::string, std::string> ptxModules;    ///< module -> PTX text
  /// The PTX text that defines `kernel`, or null when the plan has none.
  const std::string *ptxFor(const std::string &kernel) const;

  /// Builder helpers for the compiler and tests: append and return the
  /// index. addBuffer places the buffer at the end of the arena (aligned)
  /// and grows arenaBytes; elems * dtype size bytes.
  int64_t addBuffer(const std::string &name, const std::string &dtype,
                    int64_t elems);
  int64_t addState(const std::string &name, const std::string &kind,
                   const std::vector<int64_t> &shape);
  int64_t addWeight(const std::string &name, const std::string &format,
                    const std::vector<int64_t> &shape,
                    const TensorSplit &split = TensorSplit());
  PlanLaunch &addLaunch(const std::string &kernel, const std::string &op = "");
};
/// Field-by-field equality (config via ModelConfig ==).
bool operator==(const PlanDoc &a, const PlanDoc &b);
inline bool operator!=(const PlanDoc &a, const PlanDoc &b) { return !(a == b); }

/// The element type a buffer dtype spells ("bf16", "f32", "i32", "i64",
/// "u8"); None when unknown.
ElemType planDTypeElem(const std::string &dtype);
/// Bytes of a whole weight in its plan format: 2 per value for "bf16" and
/// "vector" (a vector may be stored f32; the plan does not know), 4 for
/// "f32", MXFP4 n/2 packed + n/32 scale bytes. Negative dimensions count 0.
uint64_t planWeightBytes(const PlanWeight &w);
/// planWeightBytes summed over the plan's weights.
uint64_t planWeightsBytes(const PlanDoc &plan);
/// Bytes per element of a buffer dtype / state kind (elemTypeSize of its
/// element type); 0 when unknown.
size_t planDTypeSize(const std::string &dtype);
size_t planStateElemSize(const std::string &kind);

/// CRC-32 (IEEE, reflected 0xEDB88320, init and final xor 0xFFFFFFFF), as
/// zlib's crc32() computes it.
uint32_t crc32(const void *data, size_t size);

/// Checks everything parsePlan checks after the JSON: version, sizes,
/// indices, buffers inside the arena, the logits buffer, every launch's
/// kernel and args (names, kinds, offsets). The compiler should call it
/// before writing a plan.
Status validatePlan(const PlanDoc &plan);

/// The first launch of the plan's logits tail: the longest run of last
/// launches that write no sequence state (only the step's buffers, the
/// step-local AttnRes blocks and the step block), so a row whose logits no
/// one reads (a prompt row before the last) may stop before it and leave
/// every sequence state as the whole step would. launches.size() when the
/// last launch writes a sequence state; a kernel the table lacks counts as
/// writing one.
size_t logitsTailStart(const PlanDoc &plan);

/// The JSON body alone (no header).
std::string serializePlanBody(const PlanDoc &plan);
/// The plan file bytes: "K3CPLAN <version> <crc32> <length>\n" + body.
std::string serializePlan(const PlanDoc &plan);

/// Parses and validates plan file bytes; `origin` names the source in
/// messages ("model.plan: plan checksum mismatch ...").
Expected<PlanDoc> parsePlan(const std::string &bytes,
                            const std::string &origin = "plan");

/// Reads and parses a plan file.
Expected<PlanDoc> readPlanFile(const std::string &path);
/// Serialises `plan` to `path`.
Status writePlanFile(const std::string &path, const PlanDoc &plan);

} // namespace k3

#endif // K3C_RUNTIME_PLAN_PLAN_H
