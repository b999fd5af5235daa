//===- RankGroup.cpp - The ranks of a tensor-parallel plan ----------------===//
#include "runtime/exec/RankGroup.h"

#include "kernels/collective/CollectiveParams.h"
#include "kernels/common/BF16.h"
#include "runtime/exec/Session.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace k3 {

class RankGroup::Member final : public Communicator {
public:
  Member(RankGroup &group, int64_t rank) : group_(group), rank_(rank) {}
  int64_t rank() const override { return rank_; }
  int64_t ranks() const override { return group_.ranks(); }
  Status run(const KernelInfo &kernel, const void *params,
             size_t launch) override {
    return group_.run(rank_, kernel, params, launch);
  }

private:
  RankGroup &group_;
  const int64_t rank_;
};

RankGroup::RankGroup(int64_t ranks, std::chrono::milliseconds timeout)
    : ranks_(std::max<int64_t>(ranks, 1)), timeout_(timeout),
      arrivals_(static_cast<size_t>(ranks_)),
      inputs_(static_cast<size_t>(ranks_), nullptr),
      arrived_(static_cast<size_t>(ranks_), false) {
  for (int64_t r = 0; r < ranks_; ++r)
    members_.push_back(std::make_unique<Member>(*this, r));
}

RankGroup::~RankGroup() = default;

Communicator &RankGroup::rank(int64_t r) {
  return *members_[static_cast<size_t>(std::clamp<int64_t>(r, 0, ranks_ - 1))];
}

void RankGroup::fail(int64_t r, const std::string &why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.empty())
    failure_ = "rank " + std::to_string(r) + " failed: " + why;
  cv_.notify_all();
}

std::string RankGroup::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

Status RankGroup::meet(int64_t r, const Arrival &a, const void *x) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!failure_.empty())
    return makeError(failure_);
  arrivals_[static_cast<size_t>(r)] = a;
  if (x)
    inputs_[static_cast<size_t>(r)] = x;
  arrived_[static_cast<size_t>(r)] = true;
  const uint64_t generation = generation_;
  if (++count_ == ranks_) {
    // The last to arrive checks that every rank is at the same collective.
    const Arrival &first = arrivals_[0];
    for (int64_t q = 1; q < ranks_ && failure_.empty(); ++q) {
      const Arrival &o = arrivals_[static_cast<size_t>(q)];
      if (o.kernel != first.kernel || o.launch != first.launch ||
          o.n != first.n)
        failure_ = "the ranks disagree: rank 0 is at launch " +
                   std::to_string(first.launch) + " (" + first.kernel + " of " +
                   std::to_string(first.n) + "), rank " + std::to_string(q) +
                   " at launch " + std::to_string(o.launch) + " (" + o.kernel +
                   " of " + std::to_string(o.n) +
                   "): are these plans the ranks of one plan?";
    }
    count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), false);
    ++generation_;
    cv_.notify_all();
    return failure_.empty() ? Status::ok() : makeError(failure_);
  }
  const bool met = cv_.wait_for(lock, timeout_, [&] {
    return generation_ != generation || !failure_.empty();
  });
  if (!failure_.empty())
    return makeError(failure_);
  if (!met) {
    std::string late;
    for (int64_t q = 0; q < ranks_; ++q)
      if (!arrived_[static_cast<size_t>(q)])
        late += (late.empty() ? "" : ", ") + std::to_string(q);
    failure_ = "rank " + late + " did not reach launch " +
               std::to_string(a.launch) + " (" + a.kernel + ") within " +
               std::to_string(timeout_.count() / 1000.0) +
               " s (K3C_COLLECTIVE_TIMEOUT_S); rank " + std::to_string(r) +
               " waited there";
    cv_.notify_all();
    return makeError(failure_);
  }
  return Status::ok();
}

std::vector<const void *> RankGroup::inputs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inputs_;
}

Status RankGroup::run(int64_t r, const KernelInfo &kernel, const void *params,
                      size_t launch) {
  // Two meetings per collective: after the first every rank's input is
  // ready, and each rank computes its result into its own copy; after the
  // second nobody reads the inputs any more, so each rank may write its
  // output (which may be where the next launch of any rank writes).
  // inputs_ keeps the first meeting's inputs until the next collective's
  // first meeting, which no rank reaches before every rank has left this
  // one's second.
  std::vector<uint8_t> result;
  int64_t n = 0;
  void *out = nullptr;
  if (kernel.name == "all_reduce") {
    const auto &p = *static_cast<const AllReduceParams *>(params);
    n = p.n;
    out = p.out;
    K3_RETURN_IF_ERROR(meet(r, {kernel.name, launch, p.n}, p.x));
    const std::vector<const void *> xs = inputs();
    result.resize(static_cast<size_t>(n) * sizeof(uint16_t));
    auto *sum = reinterpret_cast<uint16_t *>(result.data());
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0.0f; // fp32, rank order: every rank gets the same bits
      for (const void *x : xs)
        acc += bf16ToFloat(static_cast<const uint16_t *>(x)[i]);
      sum[i] = floatToBf16(acc);
    }
  } else if (kernel.name == "all_gather") {
    const auto &p = *static_cast<const AllGatherParams *>(params);
    if (p.ranks != ranks_)
      return makeError("all_gather at launch ", launch, " over ", p.ranks,
                       " ranks in a group of ", ranks_);
    n = p.n * p.ranks;
    out = p.out;
    K3_RETURN_IF_ERROR(meet(r, {kernel.name, launch, p.n}, p.x));
    const std::vector<const void *> xs = inputs();
    result.resize(static_cast<size_t>(n) * sizeof(float));
    for (size_t q = 0; q < xs.size(); ++q)
      std::memcpy(result.data() + q * p.n * sizeof(float), xs[q],
                  static_cast<size_t>(p.n) * sizeof(float));
  } else {
    return makeError("launch ", launch, ": '", kernel.name,
                     "' is not a collective this rank group runs");
  }
  K3_RETURN_IF_ERROR(meet(r, {kernel.name + " (written)", launch, n}, nullptr));
  std::memcpy(out, result.data(), result.size());
  return Status::ok();
}

Status checkPlanCommunicator(const PlanDoc &plan, const Communicator *comm) {
  if (plan.ranks <= 1)
    return Status::ok();
  if (!comm)
    return makeError("the plan is rank ", plan.rank, " of ", plan.ranks,
                     " of a tensor-parallel plan: run it together with its "
                     "other ranks (k3-run RANK0.plan RANK1.plan ...: one plan "
                     "per rank)");
  if (comm->ranks() != plan.ranks || comm->rank() != plan.rank)
    return makeError("the plan is rank ", plan.rank, " of ", plan.ranks,
                     ", but its communicator is rank ", comm->rank(), " of ",
                     comm->ranks());
  return Status::ok();
}

Expected<std::chrono::milliseconds> rankGroupTimeout() {
  const char *env = std::getenv("K3C_COLLECTIVE_TIMEOUT_S");
  if (!env || !*env)
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        RankGroup::kDefaultTimeout);
  char *end = nullptr;
  const double s = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(s > 0.0) || s > 1e6)
    return makeError("K3C_COLLECTIVE_TIMEOUT_S='", env,
                     "': expected a positive number of seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0 + 0.5));
}

namespace {

/// The plan's collectives in order: (launch index, kernel, n).
std::vector<std::tuple<size_t, std::string, int64_t>>
collectivesOf(const PlanDoc &plan) {
  std::vector<std::tuple<size_t, std::string, int64_t>> out;
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const PlanLaunch &l = plan.launches[i];
    const KernelInfo *k = findKernel(l.kernel);
    if (!k || !k->collective)
      continue;
    const PlanArg *n = l.find("n");
    out.emplace_back(i, l.kernel, n ? n->intValue : -1);
  }
  return out;
}

} // namespace

Expected<std::vector<PlanDoc>>
orderRankPlans(std::vector<PlanDoc> plans,
               const std::vector<std::string> &names) {
  auto nameOf = [&](size_t i) {
    return i < names.size() ? names[i] : "plan " + std::to_string(i);
  };
  const int64_t n = static_cast<int64_t>(plans.size());
  if (n == 0)
    return makeError("no plans given");
  std::vector<PlanDoc> ordered(plans.size());
  std::vector<size_t> from(plans.size(), SIZE_MAX);
  for (size_t i = 0; i < plans.size(); ++i) {
    const PlanDoc &p = plans[i];
    if (p.ranks != n)
      return makeError(nameOf(i), ": the plan is rank ", p.rank, " of ",
                       p.ranks, " (one plan per rank), but ", n,
                       n == 1 ? " plan was" : " plans were", " given");
    const size_t r = static_cast<size_t>(p.rank);
    if (from[r] != SIZE_MAX)
      return makeError(nameOf(from[r]), " and ", nameOf(i), " are both rank ",
                       p.rank);
    from[r] = i;
  }
  const PlanDoc &zero = plans[from[0]];
  const auto collectives = collectivesOf(zero);
  for (size_t i = 0; i < plans.size(); ++i) {
    const PlanDoc &p = plans[i];
    auto differs = [&](const char *what) {
      return makeError(nameOf(i), " (rank ", p.rank, ") and ", nameOf(from[0]),
                       " (rank 0) differ in ", what,
                       ": they are not the ranks of one plan");
    };
    if (!(p.config == zero.config))
      return differs("the model config");
    if (p.fusion != zero.fusion)
      return differs("fusion");
    if (p.maxSeq != zero.maxSeq)
      return differs("max_seq");
    if (p.maxBatch != zero.maxBatch)
      return differs("max_batch");
    if (collectivesOf(p) != collectives)
      return differs("their collectives (kernel, size or launch)");
  }
  for (size_t r = 0; r < plans.size(); ++r)
    ordered[r] = std::move(plans[from[r]]);
  return ordered;
}

Status runRanks(std::vector<PlanDoc> plans, const std::string &weightsDir,
                std::chrono::milliseconds timeout,
                const std::function<Status(int64_t rank, Session &)> &fn,
                BackendKind kind) {
  const int64_t n = static_cast<int64_t>(plans.size());
  RankGroup group(n, timeout);
  std::vector<Status> results(plans.size(), Status::ok());
  // Each rank opens (binds its part of the weights) and decodes on its own
  // thread: binding a large rank is most of the work.
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Status st = [&]() -> Status {
        Expected<std::unique_ptr<Session>> s = Session::open(
            std::move(plans[static_cast<size_t>(r)]), weightsDir,
            kind, /*cudaGraph=*/false, &group.rank(r));
        if (!s)
          return s.status();
        return fn(r, **s);
      }();
      if (!st)
        group.fail(r, st.message());
      results[static_cast<size_t>(r)] = std::move(st);
    });
  for (std::thread &t : threads)
    t.join();
  // The group's first failure names the cause; the other ranks only saw
  // it.
  const std::string failure = group.failure();
  if (!failure.empty())
    return makeError(failure);
  return Status::ok();
}

} // namespace k3
