// Admission and WorkerRegistry on their own: the verdicts on requests of
// each kind of sender, and the clock rules, over a ClockTable the test moves
// (ShardServer is not involved; shard_server_test, liveness_test and
// resource_bounds_test check the same rules through a running shard).
#include "server/admission.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/rendezvous.h"
#include "server/worker_registry.h"
#include "tests/util/fake_clock.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

using Action = Admission::Verdict::Action;
using Refusal = Admission::Refusal;
using std::chrono::milliseconds;

class AdmissionTest : public ::testing::Test {
 protected:
  void Start(JobOptions job, int64_t started_clock = 0) {
    job_ = std::move(job);
    clocks_ = ClockTable(job_.cluster.workers);
    if (started_clock > 0) clocks_.StartAt(started_clock);
    workers_ = std::make_unique<WorkerRegistry>(job_.cluster.workers, now_);
    auto context = Context::Create(1);
    ASSERT_TRUE(context.ok());
    context_ = std::move(*context);
    CurveOptions curve;
    auto access = ShardAccess::Create(job_, 0, context_.get(), clock_, &curve);
    ASSERT_TRUE(access.ok()) << access.status().ToString();
    access_ = std::move(*access);
    admission_ = std::make_unique<Admission>(0, job_, clock_, clocks_, *workers_, *access_,
                                             EncodeAgreement(job_), started_clock);
  }

  static MessageHeader Request(Op op, uint32_t worker, int64_t clock, uint32_t flags = 0) {
    MessageHeader h;
    h.op = op;
    h.worker = worker;
    h.clock = clock;
    h.flags = flags;
    h.request_id = 7;
    return h;
  }

  Admission::Verdict Check(const MessageHeader& req, bool fenced = false,
                           const Status& failed = Status::Ok()) {
    return admission_->Check(first_frame_, req, fenced, failed);
  }

  JobOptions job_;
  ClockTable clocks_{1};
  FakeClock clock_;
  const Clock::TimePoint now_ = clock_.Now();
  std::unique_ptr<WorkerRegistry> workers_;
  std::unique_ptr<Context> context_;
  std::unique_ptr<ShardAccess> access_;
  std::unique_ptr<Admission> admission_;
  Frame first_frame_ = Frame::CopyOf("header");
};

TEST_F(AdmissionTest, AWorkerAtItsClockIsServedAndTouched) {
  Start(TestJob().Workers(2).Ssp(1).Table("w", 4).Build());
  const Admission::Verdict v = Check(Request(Op::kPush, 1, 0));
  EXPECT_EQ(v.action, Action::kServeAndTouch);
  EXPECT_EQ(v.refusal, Refusal::kNone);
}

TEST_F(AdmissionTest, AClockAboveTheHeldOneIsRefusedOnceTheWorkersClockIsHeard) {
  Start(TestJob().Workers(2).Ssp(1).Table("w", 4).Build());
  // The first CLOCK spends the resume window.
  ASSERT_EQ(Check(Request(Op::kClock, 0, 0)).action, Action::kServeAndTouch);
  clocks_.Finish(0, 0);
  const Admission::Verdict v = Check(Request(Op::kClock, 0, 3));
  EXPECT_EQ(v.action, Action::kRefuse);
  EXPECT_EQ(v.refusal, Refusal::kClock);
  EXPECT_TRUE(v.log);
  EXPECT_EQ(v.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status.message().find("worker 0 at clock 3"), std::string::npos)
      << v.status.message();
  EXPECT_NE(v.status.message().find("this shard holds clock 1"), std::string::npos)
      << v.status.message();
  // A refused request changes nothing, not even liveness.
  EXPECT_FALSE(workers_->worker(0).heard);
}

TEST_F(AdmissionTest, TheFirstClockAfterAStartMayUseTheResumeWindowOnce) {
  JobOptions job = TestJob().Workers(1).Asp().Table("w", 4).Build();
  job.server.max_resume_clocks = 5;
  Start(job, /*started_clock=*/10);
  EXPECT_EQ(admission_->resume_window(), 5);
  EXPECT_EQ(Check(Request(Op::kPull, 0, 16)).refusal, Refusal::kClock);
  EXPECT_EQ(Check(Request(Op::kPull, 0, 15)).action, Action::kServeAndTouch);
  const uint32_t resume = kFlagResume;
  ASSERT_EQ(Check(Request(Op::kHeartbeat, 0, 15, resume)).action, Action::kServeAndTouch);
  EXPECT_TRUE(workers_->worker(0).clock_synced);
  // Spent: the shard still holds 10 (the test does not move the table), so
  // a pull at 11 is now above it.
  const Admission::Verdict v = Check(Request(Op::kPull, 0, 11));
  EXPECT_EQ(v.refusal, Refusal::kClock);
  EXPECT_NE(v.status.message().find("its CLOCKs have brought it to 10"), std::string::npos)
      << v.status.message();
}

TEST_F(AdmissionTest, AWorkerThatLeftMayReadButNotWriteUntilItsHello) {
  Start(TestJob().Workers(2).Ssp(1).Table("w", 4).Build());
  workers_->worker(1).left = true;
  const Admission::Verdict push = Check(Request(Op::kPush, 1, 0));
  EXPECT_EQ(push.refusal, Refusal::kLeft);
  EXPECT_NE(push.status.message().find("rejoins only by HELLO"), std::string::npos);
  EXPECT_FALSE(workers_->worker(1).heard);
  // A read is served and shows it alive, without bringing it back.
  EXPECT_EQ(Check(Request(Op::kPull, 1, 0)).action, Action::kServe);
  EXPECT_TRUE(workers_->worker(1).heard);
  EXPECT_EQ(workers_->worker(1).last_seen, now_);
  // HELLO: through, and the shard brings it back (Touch).
  MessageHeader hello = Request(Op::kHello, 1, 0);
  hello.text = EncodeAgreement(job_);
  EXPECT_EQ(Check(hello).action, Action::kServeAndTouch);
  EXPECT_TRUE(workers_->worker(1).rejoining);
}

TEST_F(AdmissionTest, AHelloOfAnotherJobIsRefusedAndLoggedOnce) {
  Start(TestJob().Workers(2).Ssp(1).Table("w", 4).Build());
  MessageHeader hello = Request(Op::kHello, 0, 0);
  hello.text = EncodeAgreement(TestJob().Workers(2).Ssp(1).Table("w", 8).Build());
  const Admission::Verdict v = Check(hello);
  EXPECT_EQ(v.refusal, Refusal::kAgreement);
  EXPECT_EQ(v.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(v.log);  // logged by Admission, once per worker
  EXPECT_TRUE(workers_->worker(0).refused);
}

TEST_F(AdmissionTest, FencedRefusesWorkersButAnswersProbesAndControl) {
  Start(TestJob().Workers(1).Ssp(1).Table("w", 4).Build());
  const Admission::Verdict v = Check(Request(Op::kPush, 0, 0), /*fenced=*/true);
  EXPECT_EQ(v.refusal, Refusal::kFenced);
  // The worker is alive: its liveness is kept while fenced.
  EXPECT_TRUE(workers_->worker(0).heard);
  EXPECT_EQ(Check(Request(Op::kPrimary, 0, 0), true).action, Action::kAnswerPrimary);
  EXPECT_EQ(Check(Request(Op::kStats, kControlWorker, 0), true).action, Action::kServe);
}

TEST_F(AdmissionTest, AFailedJobRefusesWorkersAndTheEvaluatorWithItsError) {
  JobOptions job = TestJob().Workers(1).Ssp(1).Table("w", 4).Build();
  job.cluster.evaluator = true;
  Start(job);
  const Status failed = AbortedError("worker 0 is dead");
  const Admission::Verdict w = Check(Request(Op::kPull, 0, 0), false, failed);
  EXPECT_EQ(w.refusal, Refusal::kFailed);
  EXPECT_FALSE(w.log);  // logged where the job failed
  EXPECT_EQ(w.status.message(), "worker 0 is dead");
  workers_->evaluator().dead = true;
  const Admission::Verdict e = Check(Request(Op::kPull, kEvaluatorWorker, 0), false, failed);
  EXPECT_EQ(e.refusal, Refusal::kFailed);
  // Its request showed it alive all the same.
  EXPECT_FALSE(workers_->evaluator().dead);
  EXPECT_TRUE(workers_->evaluator().heard);
}

TEST_F(AdmissionTest, LeadCeilingCountsFromTheWorkersWhoseClockWasHeard) {
  JobOptions job = TestJob().Workers(2).Ssp(2).Table("w", 4).Build();
  job.client.max_in_flight = 4;
  Start(job);
  EXPECT_EQ(admission_->JobClockBase(), kMaxClock);
  EXPECT_EQ(admission_->LeadCeiling(), kMaxClock);
  ASSERT_EQ(Check(Request(Op::kClock, 0, 0)).action, Action::kServeAndTouch);
  clocks_.Finish(0, 0);
  // Worker 0 heard at clock 1; the minimum (worker 1) is 0.
  EXPECT_EQ(admission_->JobClockBase(), 1);
  EXPECT_EQ(admission_->LeadCeiling(), 1 + 2 + 1 + 4);
  MessageHeader push = Request(Op::kPush, 0, 9);
  const Status refused = admission_->CheckSumClock(push, 2, 64);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("holds sums for 2 clocks, 64 bytes"), std::string::npos);
  push.clock = 8;
  EXPECT_TRUE(admission_->CheckSumClock(push, 2, 64).ok());
  EXPECT_FALSE(admission_->PushMustWait(1));
  EXPECT_TRUE(admission_->PushMustWait(2));
}

// A worker that pushes and finishes clocks without pulling runs ahead of
// the job (nothing under bsp stops it); its pull at its own clock waits
// here instead of being taken for a forged one. One above its own clock +
// 1 + client.max_in_flight, and above the job's ceiling, is refused.
TEST_F(AdmissionTest, APullCeilingFollowsAWorkerThatRanAheadByItsOwnClocks) {
  JobOptions job = TestJob().Workers(2).Bsp().Table("w", 4).Build();
  job.client.max_in_flight = 4;
  Start(job);
  for (int64_t c = 0; c < 300; ++c) {
    ASSERT_EQ(Check(Request(Op::kClock, 0, c)).action, Action::kServeAndTouch) << c;
    clocks_.Finish(0, c);
  }
  ASSERT_EQ(Check(Request(Op::kClock, 1, 0)).action, Action::kServeAndTouch);
  clocks_.Finish(1, 0);
  EXPECT_EQ(admission_->JobClockBase(), 1);
  EXPECT_EQ(admission_->LeadCeiling(), 1 + 0 + 1 + 4);
  EXPECT_EQ(admission_->PullCeiling(0), 300 + 1 + 4);
  EXPECT_EQ(admission_->PullCeiling(1), admission_->LeadCeiling());
  EXPECT_EQ(Check(Request(Op::kPull, 0, 300)).action, Action::kServeAndTouch);
}

TEST_F(AdmissionTest, UnderAspTheCeilingIsUnboundedAndARejoinGetsTheWholeWindow) {
  Start(TestJob().Workers(1).Asp().Table("w", 4).Build());
  ASSERT_EQ(Check(Request(Op::kClock, 0, 0)).action, Action::kServeAndTouch);
  EXPECT_EQ(admission_->LeadCeiling(), kMaxClock);
  EXPECT_EQ(admission_->RejoinWindow(0), admission_->resume_window());
}

TEST(WorkerRegistryTest, SilenceCountsFromTheGracePeriodAndEndsWithDeathOrLeaving) {
  const Clock::TimePoint start(std::chrono::seconds(10));
  WorkerRegistry registry(3, start + milliseconds(500));
  const auto timeout = milliseconds(1000);
  EXPECT_FALSE(registry.worker(0).SilentPast(start + milliseconds(1400), timeout));
  EXPECT_TRUE(registry.worker(0).SilentPast(start + milliseconds(1500), timeout));
  registry.Seen(0, start + milliseconds(1400));
  EXPECT_TRUE(registry.worker(0).heard);
  EXPECT_FALSE(registry.worker(0).SilentPast(start + milliseconds(2000), timeout));
  registry.worker(1).dead = true;
  EXPECT_FALSE(registry.worker(1).SilentPast(start + milliseconds(9000), timeout));
  EXPECT_FALSE(registry.AllGone());
  registry.worker(0).left = true;
  registry.worker(2).dead = true;
  EXPECT_TRUE(registry.AllGone());
  EXPECT_EQ(registry.Ranks([](const WorkerState& w) { return w.dead; }), "1 2");
  EXPECT_EQ(registry.Ranks([](const WorkerState& w) { return w.dead; }, ", "), "1, 2");
  EXPECT_EQ(registry.Ranks([](const WorkerState& w) { return w.heard; }), "0");
}

TEST(WorkerRegistryTest, TheEvaluatorIsKeptApartAndNamedByItsState) {
  WorkerRegistry registry(1, Clock::TimePoint());
  EXPECT_STREQ(registry.EvaluatorState(), "starting");
  registry.Seen(kEvaluatorWorker, Clock::TimePoint(std::chrono::seconds(1)));
  EXPECT_STREQ(registry.EvaluatorState(), "reading");
  EXPECT_FALSE(registry.worker(0).heard);
  registry.evaluator().dead = true;
  EXPECT_STREQ(registry.EvaluatorState(), "dead");
  registry.evaluator().left = true;
  EXPECT_STREQ(registry.EvaluatorState(), "left");
  // The evaluator does not count among the workers.
  registry.worker(0).left = true;
  EXPECT_TRUE(registry.AllGone());
}

// The shard's refusal logs run on its clock: a line per key per interval,
// with the count of what it held back since.
TEST(LogRateLimitTest, LogsOncePerKeyPerIntervalOfTheShardsClock) {
  FakeClock clock;
  LogRateLimit log(clock, std::chrono::seconds(1));
  uint64_t held_back = 7;
  EXPECT_TRUE(log.ShouldLog("10.0.0.1", &held_back));
  EXPECT_EQ(held_back, 0u);
  EXPECT_FALSE(log.ShouldLog("10.0.0.1", &held_back));
  EXPECT_FALSE(log.ShouldLog("10.0.0.1", &held_back));
  EXPECT_TRUE(log.ShouldLog("10.0.0.2", &held_back));  // another key
  clock.Advance(std::chrono::milliseconds(999));
  EXPECT_FALSE(log.ShouldLog("10.0.0.1", &held_back));
  clock.Advance(std::chrono::milliseconds(1));
  EXPECT_TRUE(log.ShouldLog("10.0.0.1", &held_back));
  EXPECT_EQ(held_back, 3u);
}

}  // namespace
}  // namespace ps
