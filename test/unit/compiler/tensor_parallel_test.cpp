//===- tensor_parallel_test.cpp - Split plans decode as the whole ---------===//
//
// A tensor-parallel plan (k3-partition-ranks) run as N simulated ranks on
// the CPU backend (threads with the in-process all-reduce, RankGroup.h)
// must decode the tokens of the one-rank plan, with logits within the
// rounding the split adds (each rank's partial sum is a bf16 value, so the
// sum of two partials rounds once more than the whole projection). The
// graph mutant C7 (k3-inject-mutant tp-no-all-reduce: o_proj split without
// its all-reduce) must fail the same comparison, and ranks that do not
// belong together, or a rank that fails, end with errors that name them.
//
//===----------------------------------------------------------------------===//
#include "test/unit/compiler/CompileTestUtil.h"

#include "kernels/collective/CollectiveParams.h"
#include "runtime/exec/RankGroup.h"

#include <atomic>
#include <thread>

namespace {

const std::vector<int64_t> kPrompt = {1, 17, 300, 42, 5, 999, 123, 64};
constexpr int64_t kMaxNew = 24;
constexpr int64_t kMaxSeq = 64;
/// The bound of compiled_decode_test (a plan against the float64
/// reference); the split plans must stay inside it against the whole plan.
constexpr double kLogitsTol = 2e-2;
constexpr std::chrono::seconds kTimeout{120};

::k3::ModelConfig configOf(const std::string &dir) {
  ::k3::Expected<::k3::ModelConfig> c =
      ::k3::parseConfigFile(dir + "/config.json");
  EXPECT_TRUE(c.hasValue()) << c.message();
  return c.hasValue() ? *c : ::k3::ModelConfig();
}

/// The plans of every rank of `config` split over `ranks`.
std::vector<::k3::PlanDoc> rankPlans(const ::k3::ModelConfig &config,
                                     mlir::k3::FusionStrategy strategy,
                                     int64_t ranks,
                                     const std::string &mutant = "") {
  std::vector<::k3::PlanDoc> plans;
  for (int64_t r = 0; r < ranks; ++r) {
    std::string text =
        k3test::compilePlan(config, strategy, kMaxSeq, mutant, 1, ranks, r);
    EXPECT_FALSE(text.empty())
        << "rank " << r << " of " << ranks << " did not compile (mutant '"
        << mutant << "')";
    ::k3::Expected<::k3::PlanDoc> p = ::k3::parsePlan(text);
    EXPECT_TRUE(p.hasValue()) << p.message();
    if (p.hasValue())
      plans.push_back(p.take());
  }
  return plans;
}

/// Decodes kPrompt with the ranks of `plans`; every rank's tokens must be
/// the same (each argmax runs on the gathered logits). Rank 0's result.
void runSplit(std::vector<::k3::PlanDoc> plans, const std::string &dir,
              k3test::Decode &out) {
  const size_t n = plans.size();
  std::vector<::k3::GenerateResult> results(n);
  ::k3::Status st =
      ::k3::runRanks(std::move(plans), dir, kTimeout,
                     [&](int64_t rank, ::k3::Session &s) -> ::k3::Status {
                       ::k3::Expected<::k3::GenerateResult> g =
                           s.generate(kPrompt, kMaxNew, /*keepLogits=*/true);
                       if (!g)
                         return g.status();
                       results[static_cast<size_t>(rank)] = g.take();
                       return ::k3::Status::ok();
                     });
  ASSERT_TRUE(st.isOk()) << st.message();
  for (size_t r = 1; r < n; ++r) {
    EXPECT_EQ(results[r].tokens, results[0].tokens) << "rank " << r;
    EXPECT_EQ(results[r].logits, results[0].logits) << "rank " << r;
  }
  out.tokens = results[0].tokens;
  out.logits =
      ::k3::ref::logitRowsFromFlat(results[0].logits, results[0].vocab);
}

using Param = std::tuple<std::string, std::string, int>;

class TensorParallel : public ::testing::TestWithParam<Param> {};

/// Every strategy of each model family, split over 2 and 4 ranks, decodes
/// as the one-rank plan.
TEST_P(TensorParallel, DecodesAsTheWholePlan) {
  const auto &[preset, fusion, ranks] = GetParam();
  mlir::k3::FusionStrategy strategy;
  ASSERT_TRUE(mlir::k3::parseFusionStrategy(fusion, strategy));
  const std::string &dir = k3test::madeModelDir(preset, /*seed=*/1);
  const ::k3::ModelConfig config = configOf(dir);
  const std::string whole = k3test::compilePlan(config, strategy, kMaxSeq);
  ASSERT_FALSE(whole.empty());
  k3test::Decode want, got;
  ASSERT_NO_FATAL_FAILURE(k3test::runPlan(whole, dir, kPrompt, kMaxNew, want));
  std::vector<::k3::PlanDoc> plans = rankPlans(config, strategy, ranks);
  ASSERT_EQ(plans.size(), static_cast<size_t>(ranks));
  ASSERT_NO_FATAL_FAILURE(runSplit(std::move(plans), dir, got));
  ::k3::ref::DecodeCompareOptions opt;
  opt.maxRowRelErr = kLogitsTol;
  const ::k3::ref::DecodeCompareResult cmp = ::k3::ref::compareDecode(
      want.tokens, want.logits, got.tokens, got.logits, opt);
  EXPECT_TRUE(cmp.ok) << preset << " " << fusion << " over " << ranks
                      << " ranks: first token mismatch at step "
                      << cmp.firstTokenMismatch << ", max row error "
                      << cmp.maxRowRelErr << " (row " << cmp.worstRow << ")";
  std::cout << "[tp] " << preset << " " << fusion << " x" << ranks
            << ": max row error " << cmp.maxRowRelErr << ", mean "
            << cmp.meanRowRelErr << " over " << cmp.rowsCompared << " rows\n";
}

INSTANTIATE_TEST_SUITE_P(Presets, TensorParallel,
                         ::testing::Values(Param{"tiny-linear", "none", 2},
                                           Param{"tiny-linear", "default", 2},
                                           Param{"tiny-linear", "max", 2},
                                           Param{"tiny-linear", "default", 4},
                                           Param{"tiny", "none", 2},
                                           Param{"tiny", "default", 2},
                                           Param{"tiny", "max", 2}),
                         [](const ::testing::TestParamInfo<Param> &info) {
                           std::string n =
                               std::get<0>(info.param) + "_" +
                               std::get<1>(info.param) + "_x" +
                               std::to_string(std::get<2>(info.param));
                           for (char &c : n)
                             if (c == '-')
                               c = '_';
                           return n;
                         });

/// C7: the mixers' o_proj split without the all-reduce after it. The same
/// comparison must reject it on both families.
TEST(TensorParallelMutant, OProjWithoutAllReduceIsCaught) {
  for (const std::string preset : {"tiny-linear", "tiny"}) {
    const std::string &dir = k3test::madeModelDir(preset, /*seed=*/1);
    const ::k3::ModelConfig config = configOf(dir);
    const auto strategy = mlir::k3::FusionStrategy::Default;
    k3test::Decode want, got;
    ASSERT_NO_FATAL_FAILURE(
        k3test::runPlan(k3test::compilePlan(config, strategy, kMaxSeq), dir,
                        kPrompt, kMaxNew, want));
    std::vector<::k3::PlanDoc> plans =
        rankPlans(config, strategy, 2, "tp-no-all-reduce");
    ASSERT_EQ(plans.size(), 2u);
    ASSERT_NO_FATAL_FAILURE(runSplit(std::move(plans), dir, got));
    ::k3::ref::DecodeCompareOptions opt;
    opt.maxRowRelErr = kLogitsTol;
    const ::k3::ref::DecodeCompareResult cmp = ::k3::ref::compareDecode(
        want.tokens, want.logits, got.tokens, got.logits, opt);
    EXPECT_FALSE(cmp.ok) << preset << ": the mutant passed (max row error "
                         << cmp.maxRowRelErr << ")";
  }
}

/// What k3-partition-ranks refuses: a split that does not divide.
TEST(TensorParallelPlans, SplitsThatDoNotDivideAreRefused) {
  const ::k3::ModelConfig config =
      configOf(k3test::madeModelDir("tiny-linear", /*seed=*/1));
  EXPECT_TRUE(k3test::compilePlan(config, mlir::k3::FusionStrategy::Default,
                                  kMaxSeq, "", 1, /*ranks=*/3, 0)
                  .empty());
}

/// The weights a rank binds are its part: half the bytes of the split
/// tensors, the same bytes for those kept whole.
TEST(TensorParallelPlans, EachRankNamesItsPartOfTheWeights) {
  const ::k3::ModelConfig config =
      configOf(k3test::madeModelDir("tiny-linear", /*seed=*/1));
  std::vector<::k3::PlanDoc> plans =
      rankPlans(config, mlir::k3::FusionStrategy::Default, 2);
  ASSERT_EQ(plans.size(), 2u);
  int64_t split = 0, collectives = 0;
  for (const ::k3::PlanWeight &w : plans[1].weights) {
    if (!w.isSplit())
      continue;
    ++split;
    EXPECT_EQ(w.split.rank, 1);
    EXPECT_EQ(w.split.ranks, 2);
    EXPECT_EQ(w.fullShape()[w.split.axis], 2 * w.shape[w.split.axis]);
  }
  for (const ::k3::PlanLaunch &l : plans[1].launches)
    collectives += l.kernel == "all_reduce" || l.kernel == "all_gather";
  EXPECT_GT(split, 0);
  // Two all-reduces per layer (mixer, FFN) and the logits' all-gather.
  EXPECT_EQ(collectives, 2 * config.numLayers + 1);
  EXPECT_EQ(plans[0].rank, 0);
  EXPECT_EQ(plans[1].rank, 1);
  EXPECT_EQ(plans[1].ranks, 2);
}

/// Plans that are not the ranks of one plan are refused before anything
/// runs, naming them.
TEST(TensorParallelPlans, RanksThatDoNotBelongTogether) {
  const ::k3::ModelConfig config =
      configOf(k3test::madeModelDir("tiny-linear", /*seed=*/1));
  const auto def = mlir::k3::FusionStrategy::Default;
  std::vector<::k3::PlanDoc> two = rankPlans(config, def, 2);
  ASSERT_EQ(two.size(), 2u);
  auto refused = [](std::vector<::k3::PlanDoc> plans) {
    ::k3::Expected<std::vector<::k3::PlanDoc>> r =
        ::k3::orderRankPlans(std::move(plans), {"a.plan", "b.plan"});
    return r.hasValue() ? std::string() : r.message();
  };
  EXPECT_NE(refused({two[0], two[0]}).find("a.plan and b.plan are both rank 0"),
            std::string::npos)
      << refused({two[0], two[0]});
  EXPECT_NE(refused({two[1]}).find(
                "rank 1 of 2 (one plan per rank), but 1 plan was given"),
            std::string::npos)
      << refused({two[1]});
  std::vector<::k3::PlanDoc> none =
      rankPlans(config, mlir::k3::FusionStrategy::None, 2);
  ASSERT_EQ(none.size(), 2u);
  EXPECT_NE(refused({two[0], none[1]}).find("differ in fusion"),
            std::string::npos)
      << refused({two[0], none[1]});
  // In rank order whatever the order given.
  ::k3::Expected<std::vector<::k3::PlanDoc>> ordered =
      ::k3::orderRankPlans({two[1], two[0]}, {});
  ASSERT_TRUE(ordered.hasValue()) << ordered.message();
  EXPECT_EQ((*ordered)[0].rank, 0);
  // One rank alone cannot run.
  ::k3::Expected<std::unique_ptr<::k3::Session>> alone =
      ::k3::Session::open(two[0], k3test::madeModelDir("tiny-linear", 1));
  ASSERT_FALSE(alone.hasValue());
  EXPECT_NE(alone.message().find("run it together with its other ranks"),
            std::string::npos)
      << alone.message();
}

/// A rank that fails ends the others' waits with its error; a rank that
/// never comes is named after the timeout.
TEST(RankGroup, AFailedOrLateRankIsNamed) {
  const ::k3::KernelInfo *reduce = ::k3::findKernel("all_reduce");
  ASSERT_NE(reduce, nullptr);
  ASSERT_TRUE(reduce->collective);
  uint16_t x[4] = {0x3f80, 0x4000, 0x4040, 0x4080}; // 1, 2, 3, 4
  {
    ::k3::RankGroup g(3, std::chrono::milliseconds(20000));
    std::vector<uint16_t> out0(4), out1(4);
    ::k3::AllReduceParams p0{x, out0.data(), 4}, p1{x, out1.data(), 4};
    ::k3::Status s0, s1;
    std::thread t0([&] { s0 = g.rank(0).run(*reduce, &p0, 7); });
    std::thread t1([&] { s1 = g.rank(1).run(*reduce, &p1, 7); });
    g.fail(2, "weight 'w' is missing");
    t0.join();
    t1.join();
    for (const ::k3::Status *s : {&s0, &s1}) {
      ASSERT_FALSE(s->isOk());
      EXPECT_NE(s->message().find("rank 2 failed: weight 'w' is missing"),
                std::string::npos)
          << s->message();
    }
  }
  {
    ::k3::RankGroup g(2, std::chrono::milliseconds(50));
    std::vector<uint16_t> out(4);
    ::k3::AllReduceParams p{x, out.data(), 4};
    ::k3::Status s = g.rank(0).run(*reduce, &p, 5);
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("rank 1 did not reach launch 5 (all_reduce)"),
              std::string::npos)
        << s.message();
  }
  {
    // Two ranks: the sum in fp32, rounded once, the same on both.
    ::k3::RankGroup g(2, std::chrono::milliseconds(20000));
    uint16_t y[4] = {0x3f80, 0x3f80, 0xbf80, 0x4000}; // 1, 1, -1, 2
    std::vector<uint16_t> out0(4), out1(4);
    ::k3::AllReduceParams p0{x, out0.data(), 4}, p1{y, out1.data(), 4};
    ::k3::Status s0, s1;
    std::thread t0([&] { s0 = g.rank(0).run(*reduce, &p0, 0); });
    s1 = g.rank(1).run(*reduce, &p1, 0);
    t0.join();
    ASSERT_TRUE(s0.isOk()) << s0.message();
    ASSERT_TRUE(s1.isOk()) << s1.message();
    const std::vector<uint16_t> want = {0x4000, 0x4040, 0x4000, 0x40c0};
    EXPECT_EQ(out0, want);
    EXPECT_EQ(out1, want);
  }
  {
    // Ranks at different collectives: named.
    ::k3::RankGroup g(2, std::chrono::milliseconds(20000));
    std::vector<uint16_t> out0(4), out1(2);
    ::k3::AllReduceParams p0{x, out0.data(), 4}, p1{x, out1.data(), 2};
    ::k3::Status s0, s1;
    std::thread t0([&] { s0 = g.rank(0).run(*reduce, &p0, 3); });
    s1 = g.rank(1).run(*reduce, &p1, 4);
    t0.join();
    ASSERT_FALSE(s1.isOk());
    EXPECT_NE(s1.message().find("the ranks disagree"), std::string::npos)
        << s1.message();
    ASSERT_FALSE(s0.isOk());
  }
}

} // namespace
