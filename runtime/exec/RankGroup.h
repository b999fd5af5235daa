//===- RankGroup.h - The ranks of a tensor-parallel plan --------*- C++ -*-===//
//
// A tensor-parallel plan is one plan per rank (docs/PLAN.md "Tensor-parallel
// plans"): each rank holds its part of the weights and runs the same
// launches on its part, and the plan's collectives (all_reduce after each
// row-parallel projection, all_gather of the logits) combine the parts.
// A backend runs a collective through its rank's Communicator.
//
// RankGroup is the in-process communicator: the ranks are threads of one
// process (the CPU backend's tensor-parallel runs; tests simulate N ranks
// with it). Every rank computes each reduction itself in rank order from
// all ranks' inputs, so all ranks hold the same bits. A rank that fails, or
// does not reach a collective within the timeout, or reaches a different
// one, ends every rank's wait with an error that names it: no hang.
//
//===----------------------------------------------------------------------===//
#ifndef K3C_RUNTIME_EXEC_RANKGROUP_H
#define K3C_RUNTIME_EXEC_RANKGROUP_H

#include "runtime/Status.h"
#include "runtime/exec/Backend.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanKernels.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace k3 {

class Session;

/// One rank's end of a group: what a backend calls for a collective launch.
class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t ranks() const = 0;
  /// Runs collective `kernel` (its filled params struct) as launch `launch`
  /// of the plan, together with the other ranks. Errors name the rank that
  /// failed, timed out or disagreed.
  virtual Status run(const KernelInfo &kernel, const void *params,
                     size_t launch) = 0;
};

/// Checks that `comm` can run `plan`'s collectives: none for a plan of one
/// rank; for a rank's plan, a communicator of the same rank and ranks.
/// Errors name both.
Status checkPlanCommunicator(const PlanDoc &plan, const Communicator *comm);

/// Ranks as threads of one process.
class RankGroup {
public:
  /// The default wait for the other ranks at a collective (a CPU rank of a
  /// large model may take seconds per layer); K3C_COLLECTIVE_TIMEOUT_S
  /// overrides it for rankGroupTimeout().
  static constexpr std::chrono::seconds kDefaultTimeout{600};

  RankGroup(int64_t ranks, std::chrono::milliseconds timeout);
  ~RankGroup();
  RankGroup(const RankGroup &) = delete;
  RankGroup &operator=(const RankGroup &) = delete;

  int64_t ranks() const { return ranks_; }
  /// Rank `r`'s communicator (0 <= r < ranks()).
  Communicator &rank(int64_t r);
  /// Rank `r` failed with `why`: every wait, now or later, ends with an
  /// error naming it.
  void fail(int64_t r, const std::string &why);
  /// The first failure ("rank 1 failed: ...", a late rank, ranks at
  /// different collectives); empty while none.
  std::string failure() const;

private:
  class Member;
  friend class Member;
  /// What a rank brings to a meeting (checked to be the same on every rank).
  struct Arrival {
    std::string kernel;
    size_t launch = 0;
    int64_t n = 0;
  };
  /// Waits until every rank has arrived (`a` is rank r's; `x`, when not
  /// null, its input to the collective). Errors: a failed or late rank, or
  /// ranks at different collectives.
  Status meet(int64_t r, const Arrival &a, const void *x);
  /// Every rank's input of the current collective. Valid from the end of
  /// the collective's first meeting until its second has ended: the second
  /// meeting does not touch the inputs, so a rank that is already there
  /// cannot pull an input from under a rank still reading them.
  std::vector<const void *> inputs() const;
  Status run(int64_t r, const KernelInfo &kernel, const void *params,
             size_t launch);

  const int64_t ranks_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Member>> members_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Arrival> arrivals_;
  std::vector<const void *> inputs_;
  std::vector<bool> arrived_;
  int64_t count_ = 0;
  uint64_t generation_ = 0;
  /// The first failure; every later meeting returns it.
  std::string failure_;
};

/// The collective timeout: K3C_COLLECTIVE_TIMEOUT_S (seconds, > 0) if set,
/// else RankGroup::kDefaultTimeout. Errors: a value that is not a positive
/// number.
Expected<std::chrono::milliseconds> rankGroupTimeout();

/// Checks that `plans` are the ranks of one tensor-parallel plan and
/// returns them in rank order: each says ranks = plans.size(), each rank
/// once, and they agree on the config, fusion, max_seq, max_batch and on
/// their collectives (kernel, size, order). Errors name the plans (by
/// `names`, in the order given) and what differs.
Expected<std::vector<PlanDoc>>
orderRankPlans(std::vector<PlanDoc> plans,
               const std::vector<std::string> &names);

/// Opens one session per rank plan (rank order, orderRankPlans) over
/// `weightsDir` on `kind`'s backend (CUDA: every rank on the one GPU, its
/// collectives host-staged, CudaBackend::bind) and runs `fn(rank, session)`
/// on each rank's own thread. A rank whose `fn` fails fails the group, so
/// the others stop at their next collective; returns the first failure.
Status runRanks(std::vector<PlanDoc> plans, const std::string &weightsDir,
                std::chrono::milliseconds timeout,
                const std::function<Status(int64_t rank, Session &)> &fn,
                BackendKind kind = BackendKind::Cpu);

} // namespace k3

#endif // K3C_RUNTIME_EXEC_RANKGROUP_H
