//===- Profile.h - Where a decode step's time goes --------------*- C++ -*-===//
//
// What `k3-run --profile` and bench/decode_bench measure: profileStep()
// times a bound plan launch by launch and step by step on its backend and
// groups the times by kernel and by layer part against the bytes of
// runtime/plan/PlanBytes.h.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_PROFILE_H
#define K3C_RUNTIME_EXEC_PROFILE_H

#include "runtime/exec/Backend.h"
#include "runtime/plan/PlanBytes.h"
#include "runtime/plan/Plan.h"
#include "runtime/io/Safetensors.h"
#include "runtime/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace k3 {

//===----------------------------------------------------------------------===//
// Binding a plan for measurement
//===----------------------------------------------------------------------===//

/// A checkpoint and a backend bound to it (declared after the store, the
/// backend goes first: it reads the store's mapped weights).
struct BoundPlan {
  TensorStore store;
  std::unique_ptr<Backend> backend;
};

/// What Session::open does, without the Session: reads `weightsDir`'s
/// config (refused when it differs from the plan's), opens the checkpoint and
/// binds `plan` on `kind` (`cudaGraph`: the CUDA backend builds its graph).
/// `plan` need not outlive the result.
Expected<std::unique_ptr<BoundPlan>> bindPlan(const PlanDoc &plan,
                                              const std::string &weightsDir,
                                              BackendKind kind,
                                              bool cudaGraph = true);

//===----------------------------------------------------------------------===//
// Timing
//===----------------------------------------------------------------------===//

struct ProfileOptions {
  int64_t warmup = 3; ///< untimed steps first (each kind of timing)
  int64_t steps = 20; ///< timed steps (each kind of timing)
  /// Every step runs at position `pos` with `token`: the attention reads
  /// pos + 1 cache rows, which is also the context the bytes count.
  int64_t pos = 0;
  int64_t token = 0;
  /// The copy of the bandwidth measurement (0: the backend's default).
  uint64_t copyBytes = 0;
};

/// One row of a profile table: a kernel kind or a layer part.
struct ProfileRow {
  std::string name;
  int64_t launches = 0; ///< per step
  int64_t layers = 0;   ///< distinct layers (parts only)
  double us = 0;        ///< per step: the sum of its launches' medians
  uint64_t bytes = 0;   ///< per step
  double gbps() const { return us > 0 ? bytes / (us * 1e3) : 0.0; }
};

struct StepProfile {
  std::string backend, fusion, copyMethod;
  int64_t pos = 0, steps = 0, warmup = 0;
  double copyGBps = 0;
  /// Per launch: the median of its time over the steps, and its bytes.
  std::vector<double> launchUs;
  std::vector<LaunchBytes> bytes;
  std::vector<LaunchPart> parts;
  /// By kernel and by part, most time first; `total` sums every launch.
  std::vector<ProfileRow> kernels, byPart;
  ProfileRow total;
  /// Whole steps, medians over the steps: launch by launch (each launch
  /// timed alone, summed per step), plain (step() without a graph) and, when
  /// the backend has one, one graph replay (0 otherwise).
  double launchByLaunchUs = 0, plainUs = 0, replayUs = 0;
  /// The whole step per token: the replay when there is one, else plain.
  double stepUs() const { return replayUs > 0 ? replayUs : plainUs; }
  /// The bandwidth floor of a step: its bytes at the copy bandwidth.
  double floorUs() const {
    return copyGBps > 0 ? total.bytes / (copyGBps * 1e3) : 0.0;
  }
  double fractionOfFloor() const {
    return stepUs() > 0 ? floorUs() / stepUs() : 0.0;
  }
};

/// Groups per-launch times and bytes into the kernel and part rows (the
/// arithmetic of profileStep, apart for tests): `launchUs` and `bytes` have
/// one entry per plan launch.
StepProfile summarizeProfile(const PlanDoc &plan,
                             const std::vector<double> &launchUs,
                             const std::vector<LaunchBytes> &bytes);

/// Measures the copy bandwidth, then runs `warmup` + `steps` steps of each
/// kind (launch by launch, plain, replay) at options.pos on `backend`, which
/// must be bound to `plan`. The state advances (the caller fills it first
/// for a realistic context). Errors: options out of range, a backend that
/// cannot time, a failed step.
Expected<StepProfile> profileStep(Backend &backend, const PlanDoc &plan,
                                  const ProfileOptions &options);

/// A step of `rows` (several sequences, Backend::timeStepSlots) run
/// `steps` times: each plan launch's median time, its bytes those of a step
/// of that many rows at `contextRows` cached rows (launchBytes), and
/// `copyGBps` for the tables' shares. The state advances as in stepSlots().
/// Errors: steps < 1, a backend that cannot time steps of rows, a failed
/// step.
Expected<StepProfile> profileStepRows(Backend &backend, const PlanDoc &plan,
                                      const std::vector<SlotStep> &rows,
                                      int64_t steps, int64_t contextRows,
                                      double copyGBps);

/// Where a prompt's prefill went: the prompt fed to slot 0 in chunks of
/// `chunk` rows (Backend::timeStepSlots), each plan launch's time summed
/// over the chunks (kernels / byPart / total of `launches` hold those sums;
/// no bytes: a chunk's bytes depend on its rows).
struct PrefillProfile {
  std::string backend;
  int64_t tokens = 0, chunk = 0, chunks = 0;
  double wallUs = 0; ///< the host's time for the whole prompt
  /// The host's time inside the chunks' steps (timeStepSlots calls): the
  /// rest of wallUs is spent between them; each step's time beyond its
  /// launches' (their device time, launches.total) is the host's own work
  /// before its first launch and after its last.
  double stepsUs = 0;
  /// The first chunk's step and the slowest of the others (µs): a first
  /// step that binds the rows shows here.
  double firstStepUs = 0, slowestStepUs = 0;
  StepProfile launches;
  double tokensPerSecond() const {
    return wallUs > 0 ? 1e6 * static_cast<double>(tokens) / wallUs : 0.0;
  }
};

/// Resets `backend`'s state, then feeds `prompt` to slot 0 in chunks of
/// `chunk` rows, each a timed step of rows; the state holds the prompt
/// afterwards. Errors: an empty prompt, a chunk outside [1, kMaxStepRows],
/// a backend that cannot time steps of rows, a failed step.
Expected<PrefillProfile> profilePrefill(Backend &backend, const PlanDoc &plan,
                                        const std::vector<int64_t> &prompt,
                                        int64_t chunk);

/// The table k3-run --profile prints for a prefill ('\n'-terminated lines).
std::string formatPrefillProfile(const PrefillProfile &profile);

/// The tables k3-run --profile prints (several lines, '\n'-terminated).
std::string formatProfile(const StepProfile &profile);
/// formatProfile's kernel and layer-part tables alone (µs, bytes, GB/s and
/// the share of the profile's copyGBps per row).
std::string formatProfileTables(const StepProfile &profile);

/// The median (mean of the middle two for an even count; 0 when empty).
double median(std::vector<double> values);

/// "512 B", "12.3 KB", "4.56 MB", "8.92 GB" (powers of 1000).
std::string formatBytes(double bytes);

} // namespace k3

#endif // K3C_RUNTIME_EXEC_PROFILE_H
