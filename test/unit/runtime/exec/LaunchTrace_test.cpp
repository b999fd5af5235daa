//===- LaunchTrace_test.cpp - A traced step matched to its plan -----------===//
//
// runtime/exec/cuda/LaunchTrace.h's host side, without a GPU: marks of one
// step (as readLaunchTrace returns them) matched to a plan's launches, the
// spans and early starts they give, the errors for a trace that is not the
// plan's, and the per-kernel table.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/cuda/LaunchTrace.h"

#include <gtest/gtest.h>

namespace k3 {
namespace {

PlanDoc threeLaunches() {
  PlanDoc plan;
  for (const char *k : {"linear", "kda_decode", "linear"}) {
    PlanLaunch l;
    l.kernel = k;
    l.op = k;
    plan.launches.push_back(l);
  }
  return plan;
}

/// Module keys: linear's module 1, kda_decode's 2.
const std::vector<uint64_t> kKeys = {1, 2, 1};

TEST(LaunchTrace, SpansAreTheTimeToTheNextWait) {
  const PlanDoc plan = threeLaunches();
  // ns: reached, passed.
  const std::vector<LaunchMark> marks = {
      {1, 10, 1000, 1000}, {2, 11, 2000, 19000}, {1, 12, 20000, 32500}};
  Expected<std::vector<TimelineRow>> rows = matchTimeline(plan, kKeys, marks);
  ASSERT_TRUE(rows.hasValue()) << rows.message();
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_DOUBLE_EQ((*rows)[0].readyUs, 0.0);
  EXPECT_DOUBLE_EQ((*rows)[0].spanUs, 18.0);
  EXPECT_DOUBLE_EQ((*rows)[0].earlyUs, 0.0);
  EXPECT_DOUBLE_EQ((*rows)[1].readyUs, 18.0);
  EXPECT_DOUBLE_EQ((*rows)[1].spanUs, 13.5);
  EXPECT_DOUBLE_EQ((*rows)[1].earlyUs, 17.0);
  EXPECT_DOUBLE_EQ((*rows)[2].spanUs, 0.0); // no later launch marks its end

  const std::string text = formatTimeline(plan, *rows);
  EXPECT_NE(text.find("kda_decode"), std::string::npos) << text;
  // linear: 2 launches adding 18 µs (the last adds none); the step 31.5.
  EXPECT_NE(text.find("linear                        2      18.00       9.00"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("31.50"), std::string::npos) << text;
}

TEST(LaunchTrace, ATraceOfAnotherStepIsAnError) {
  const PlanDoc plan = threeLaunches();
  const std::vector<LaunchMark> two = {{1, 10, 0, 0}, {2, 11, 5, 9}};
  Expected<std::vector<TimelineRow>> rows = matchTimeline(plan, kKeys, two);
  ASSERT_FALSE(rows.hasValue());
  EXPECT_NE(rows.message().find("2 launches recorded, the plan has 3"),
            std::string::npos)
      << rows.message();

  // kda_decode's module passing first: the order is not the plan's.
  const std::vector<LaunchMark> swapped = {
      {2, 11, 0, 0}, {1, 10, 5, 9}, {1, 12, 9, 20}};
  rows = matchTimeline(plan, kKeys, swapped);
  ASSERT_FALSE(rows.hasValue());
  EXPECT_NE(rows.message().find("launch 0 (linear)"), std::string::npos)
      << rows.message();
}

} // namespace
} // namespace k3
