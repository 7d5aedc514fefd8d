#include "worker/straggler.h"

#include <gtest/gtest.h>

namespace ps {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

TEST(StragglerInjectorTest, TheSlowWorkerTakesFactorTimesItsStep) {
  StragglerOptions o;
  o.slow_worker = 2;
  o.slow_factor = 3.0;
  StragglerInjector slow(o, 2), normal(o, 1);
  EXPECT_EQ(slow.DelayAfter(milliseconds(10)), milliseconds(20));
  EXPECT_EQ(normal.DelayAfter(milliseconds(10)), nanoseconds(0));
  EXPECT_TRUE(slow.active());
  EXPECT_FALSE(normal.active());
}

TEST(StragglerInjectorTest, AGivenStepReplacesTheComputeTime) {
  StragglerOptions o;
  o.slow_worker = 1;
  o.slow_factor = 3.0;
  o.step_ms = 4.0;
  StragglerInjector slow(o, 1), normal(o, 0);
  EXPECT_EQ(slow.DelayAfter(milliseconds(1)), milliseconds(8));
  EXPECT_EQ(slow.DelayAfter(milliseconds(50)), milliseconds(8));
  EXPECT_EQ(normal.DelayAfter(milliseconds(1)), nanoseconds(0));
  o.slow_worker = -1;
  o.pause_probability = 1.0;
  o.pause_min_steps = o.pause_max_steps = 2;
  StragglerInjector pauses(o, 0);
  EXPECT_EQ(pauses.DelayAfter(milliseconds(1)), milliseconds(8));
}

TEST(StragglerInjectorTest, TheSlowWorkersDelayOfAGivenStepScalesWithItsShareOfSamples) {
  // stragglers.balance: a worker slow per sample is held back in
  // proportion to the samples of its step; a pause stays whole steps.
  StragglerOptions o;
  o.slow_worker = 1;
  o.slow_factor = 3.0;
  o.step_ms = 4.0;
  StragglerInjector slow(o, 1);
  EXPECT_EQ(slow.DelayAfter(milliseconds(1), 0.25), milliseconds(2));
  EXPECT_EQ(slow.DelayAfter(milliseconds(1), 1.5), milliseconds(12));
  o.step_ms = 0;  // a compute-time step already scales with the samples
  StragglerInjector own(o, 1);
  EXPECT_EQ(own.DelayAfter(milliseconds(10), 0.25), milliseconds(20));
  o.step_ms = 4.0;
  o.slow_worker = -1;
  o.pause_probability = 1.0;
  o.pause_min_steps = o.pause_max_steps = 2;
  StragglerInjector pauses(o, 0);
  EXPECT_EQ(pauses.DelayAfter(milliseconds(1), 0.25), milliseconds(8));
}

TEST(StragglerInjectorTest, PausesAreWholeStepsWithTheGivenProbability) {
  StragglerOptions o;
  o.pause_probability = 0.25;
  o.pause_min_steps = 1;
  o.pause_max_steps = 3;
  StragglerInjector inj(o, 0);
  int pauses = 0;
  for (int i = 0; i < 4000; ++i) {
    const auto d = inj.DelayAfter(milliseconds(2));
    if (d.count() == 0) continue;
    ++pauses;
    EXPECT_TRUE(d == milliseconds(2) || d == milliseconds(4) || d == milliseconds(6)) << d.count();
  }
  EXPECT_GT(pauses, 850);   // 1000 expected
  EXPECT_LT(pauses, 1150);
}

TEST(StragglerInjectorTest, SameSeedAndRankGiveTheSamePauses) {
  StragglerOptions o;
  o.pause_probability = 0.5;
  StragglerInjector a(o, 3), b(o, 3), c(o, 4);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const auto x = a.DelayAfter(milliseconds(1));
    EXPECT_EQ(x, b.DelayAfter(milliseconds(1)));
    differs |= x != c.DelayAfter(milliseconds(1));
  }
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace ps
