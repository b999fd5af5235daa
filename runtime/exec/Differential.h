//===- Differential.h - A backend checked launch by launch ------*- C++ -*-===//
//
// The differential run behind `k3-run --check-against cpu` and the GPU decode
// tests: a candidate backend decodes a prompt launch by launch
// (Backend::runLaunch), and after every launch each buffer or state the
// launch writes is compared with what the CPU implementation of that kernel
// writes when it is given the same inputs: the candidate's own arena and
// states as they were just before the launch, copied to the host. Each
// launch is therefore judged alone, against its own kernel's tolerance (the
// table in Differential.cpp), rather than against a second decode that has
// drifted apart over the launches before it; the first launch out of
// tolerance is named with its kernel, op, index, step, field and errors.
//
// What the run also catches: a launch that changes arena bytes outside the
// outputs its kernel declares (an out-of-bounds write into another buffer),
// and outputs left unwritten (they keep the bytes from before the launch,
// which the CPU overwrites). What it does not: writes into resident states a
// launch does not declare as outputs, and drift that every kernel keeps
// within its tolerance (the end-to-end decode tests bound that).
//
// With a CPU candidate the run must be bit-identical (DifferentialOptions::
// exact): the same CPU kernels on the same inputs, the thread pool included.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_DIFFERENTIAL_H
#define K3C_RUNTIME_EXEC_DIFFERENTIAL_H

#include "runtime/exec/Backend.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanKernels.h"
#include "runtime/io/Safetensors.h"
#include "runtime/Status.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace k3 {

//===----------------------------------------------------------------------===//
// Tolerances and the comparison of one output
//===----------------------------------------------------------------------===//

/// How far a candidate's output may be from the CPU's on the same inputs.
struct Tolerance {
  /// Bit-identical (integer ids, copies, a CPU candidate).
  bool exact = false;
  /// Else: max_i |got − want| <= rel · max_i |want| over the elements the
  /// launch writes.
  double rel = 0.0;
  /// Why this bound (printed with a mismatch).
  std::string reason;
};

/// The tolerance of output `field` of kernel `kernel` (element type `elem`),
/// from the table in Differential.cpp; kernels the table does not name get
/// the bound of their element type (bf16 1e-2, f32 1e-4, integers exact).
Tolerance kernelTolerance(const std::string &kernel, const std::string &field,
                          ElemType elem);

/// The comparison of one output range.
struct OutputDiff {
  bool ok = true;
  int64_t elems = 0;
  /// max |got − want| (+inf when a value is finite on one side only) and the
  /// element where it occurs, with both values.
  double maxAbs = 0.0;
  int64_t worst = -1;
  double want = 0.0, got = 0.0;
  /// max |want| and maxAbs / maxRef (maxAbs itself when maxRef is 0).
  double maxRef = 0.0;
  double rel = 0.0;
  /// Elements whose bits differ.
  int64_t differing = 0;
  /// How much of the tolerance is used: rel / tolerance.rel (0 when equal,
  /// +inf for a difference under an exact tolerance).
  double ratio = 0.0;
};

/// Compares `elems` elements of type `elem` (little-endian bytes). NaNs on
/// both sides, or infinities of one sign, count as equal under a relative
/// tolerance.
OutputDiff compareOutput(const uint8_t *want, const uint8_t *got, int64_t elems,
                         ElemType elem, const Tolerance &tol);

//===----------------------------------------------------------------------===//
// The run
//===----------------------------------------------------------------------===//

struct DifferentialOptions {
  /// Every output bit-identical (a CPU candidate).
  bool exact = false;
  /// Called with each generated token, as Session::generate's callback.
  std::function<void(int64_t index, int64_t token)> onToken;
  /// Keep the candidate's logits rows (row s chose generated token s).
  bool keepLogits = false;
};

/// The first output out of tolerance.
struct LaunchMismatch {
  int64_t step = 0, pos = 0, token = 0;
  size_t launch = 0;
  std::string kernel, op;
  /// The params field ("out", "state"), or "(outside its outputs)" for an
  /// arena byte the launch changed outside every output it declares.
  std::string field;
  /// "buffer 'x'" or "state 'layer1.kda'"; the byte offset of the range
  /// compared within it.
  std::string target;
  uint64_t offset = 0;
  ElemType elem = ElemType::None;
  OutputDiff diff;
  Tolerance tolerance;
  /// One line naming all of the above.
  std::string describe(const std::string &candidate) const;
};

struct DifferentialReport {
  int64_t steps = 0;
  size_t launchesPerStep = 0;
  /// Output ranges compared (launches × outputs × steps, up to a mismatch).
  int64_t outputsCompared = 0;
  /// Generated tokens (the candidate's argmax, ties to the lowest id): up to
  /// the mismatch, all maxNew otherwise.
  std::vector<int64_t> tokens;
  /// keepLogits: tokens.size() × vocab fp32, the candidate's.
  std::vector<float> logits;
  /// Whether every output was bit-identical.
  bool bitIdentical = true;
  /// Closest approach to a tolerance: the largest OutputDiff::ratio, and
  /// where ("launch 12 (linear 'out', step 3)").
  double worstRatio = 0.0;
  std::string worstWhere;
  /// The largest ratio of each "kernel.field" (for tuning the table).
  std::map<std::string, double> worstByField;
  std::optional<LaunchMismatch> mismatch;

  bool ok() const { return !mismatch.has_value(); }
  /// One line: the mismatch, or the counts and the closest approach.
  std::string summary(const std::string &candidate) const;
};

/// Runs `prompt` and `maxNew` greedy tokens (Session::generate's steps:
/// prompt.size() + maxNew − 1) on `candidate` launch by launch, checking
/// each launch against the CPU kernels on the same inputs (file comment).
/// `plan` must be the one `candidate` was bound to and `store` its
/// checkpoint. Errors (not mismatches): a bad request (as generate's), a
/// candidate that fails a launch or a read. Stops at the first mismatch.
Expected<DifferentialReport>
runDifferential(const PlanDoc &plan, const TensorStore &store,
                Backend &candidate, const std::vector<int64_t> &prompt,
                int64_t maxNew, const DifferentialOptions &options = {});

/// What k3-run does: reads `weightsDir` (config checked against the plan as
/// Session::open does), binds `plan` on `kind` (the CUDA backend without a
/// graph, as runLaunch needs) and runs runDifferential, exact when `kind` is
/// the CPU. `candidateName` receives the backend's name.
Expected<DifferentialReport>
checkAgainstCpu(const PlanDoc &plan, const std::string &weightsDir,
                BackendKind kind, const std::vector<int64_t> &prompt,
                int64_t maxNew, DifferentialOptions options,
                std::string *candidateName = nullptr);

} // namespace k3

#endif // K3C_RUNTIME_EXEC_DIFFERENTIAL_H
