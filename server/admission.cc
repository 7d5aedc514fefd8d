#include "server/admission.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "common/rendezvous.h"

namespace ps {

using Action = Admission::Verdict::Action;
using Refusal = Admission::Refusal;

namespace {

Admission::Verdict Admit(Action action) {
  Admission::Verdict verdict;
  verdict.action = action;
  return verdict;
}

Admission::Verdict Refused(Refusal refusal, Status status, bool log) {
  Admission::Verdict verdict;
  verdict.action = Action::kRefuse;
  verdict.refusal = refusal;
  verdict.status = std::move(status);
  verdict.log = log;
  return verdict;
}

}  // namespace

Admission::Admission(uint32_t shard, const JobOptions& job, const Clock& clock,
                     const ClockTable& clocks, WorkerRegistry& workers, ShardAccess& access,
                     std::string agreement, int64_t started_clock)
    : shard_(shard),
      job_(job),
      clock_(clock),
      clocks_(clocks),
      workers_(workers),
      access_(access),
      agreement_(std::move(agreement)),
      started_clock_(started_clock),
      bound_(job.consistency.Bound()),
      resume_window_(EffectiveMaxResumeClocks(job)) {}

Admission::Verdict Admission::Check(const Frame& first_frame, const MessageHeader& req, bool fenced,
                                    const Status& failed) {
  // Under curve the sender is who its key says, whatever the header claims.
  if (Status allowed = access_.Check(first_frame, req); !allowed.ok()) {
    return Refused(Refusal::kAccess, std::move(allowed), /*log=*/true);
  }
  // A client looking for the shard's primary (its connection to another
  // replica dropped): answered whether fenced or not.
  if (Traits(req.op).op_class == OpClass::kProbe) return Admit(Action::kAnswerPrimary);
  if (fenced && req.worker != kControlWorker) return Fenced(req);
  if (req.op == Op::kHello) {
    if (Status agreed = CheckAgreement(req); !agreed.ok()) {
      return Refused(Refusal::kAgreement, std::move(agreed), /*log=*/false);
    }
  }
  if (req.worker == kControlWorker) return Admit(Action::kServe);
  if (req.worker != kEvaluatorWorker) return CheckWorker(req, failed);
  // The evaluator holds no clock: only its liveness changes here.
  workers_.Seen(req.worker, clock_.Now());
  WorkerState& evaluator = workers_.evaluator();
  if (evaluator.dead) {
    PS_LOG_INFO("shard {}: the evaluator is back", shard_);
    evaluator.dead = false;
  }
  if (!failed.ok()) return Refused(Refusal::kFailed, failed, /*log=*/false);
  return Admit(Action::kServe);
}

Admission::Verdict Admission::Fenced(const MessageHeader& req) {
  // Its etcd lease may have lapsed: another replica may hold the shard.
  // The worker is alive (nothing else of its state changes here).
  workers_.Seen(req.worker, clock_.Now());
  uint64_t held_back = 0;
  if (fenced_log_.ShouldLog(&held_back)) {
    PS_LOG_WARN("shard {}: fenced (its etcd lease may have lapsed): refusing {} of worker {}{}",
                shard_, OpName(req.op), req.worker, HeldBack(held_back));
  }
  return Refused(Refusal::kFenced, Status::Ok(), /*log=*/false);
}

Status Admission::CheckAgreement(const MessageHeader& req) {
  // A worker of another job (or another version of this one) is refused
  // before it counts as one of this job's workers.
  Status agreed = CompareAgreement(
      agreement_, req.text,
      "shard " + std::to_string(shard_) + " (" + job_.cluster.servers[shard_] + ")",
      "worker " + std::to_string(req.worker));
  if (!agreed.ok() && req.worker != kEvaluatorWorker && !workers_.worker(req.worker).refused) {
    workers_.worker(req.worker).refused = true;
    PS_LOG_ERROR("shard {}: refused worker {}: {}", shard_, req.worker, agreed.message());
  }
  return agreed;
}

Admission::Verdict Admission::CheckWorker(const MessageHeader& req, const Status& failed) {
  // Checked before the worker counts as heard from: a refused request
  // changes nothing, not even the worker's liveness, and a worker that
  // left comes back only by HELLO. A beat of the heartbeat thread may
  // overtake the worker's goodbye on its way here: it is answered and
  // never brings the worker back.
  const WorkerState& sender = workers_.worker(req.worker);
  const bool beat = req.op == Op::kHeartbeat && (req.flags & kFlagBeat) != 0;
  // A worker that left may still read the model; nothing else of it
  // changes the shard, and it counts again only after a HELLO.
  const bool reads_after_leaving = sender.left && (beat || req.op == Op::kPull);
  if (!failed.ok()) {
    return Refused(Refusal::kFailed, failed,
                   /*log=*/failed.code() != StatusCode::kAborted);
  }
  if (sender.left && !reads_after_leaving && req.op != Op::kHello) {
    return Refused(
        Refusal::kLeft,
        FailedPreconditionError(
            "shard " + std::to_string(shard_) + ": worker " + std::to_string(req.worker) +
            " left the job (its goodbye came, or it was dropped); its " + OpName(req.op) +
            " request " + std::to_string(req.request_id) +
            " is refused and nothing changed: a worker rejoins only by HELLO (restart it); "
            "it may still pull"),
        /*log=*/true);
  }
  if (Status clock = CheckClock(req); !clock.ok()) {
    const bool log = clock.code() != StatusCode::kAborted;
    return Refused(Refusal::kClock, std::move(clock), log);
  }
  if (reads_after_leaving) {
    workers_.Seen(req.worker, clock_.Now());
    return Admit(Action::kServe);
  }
  return Admit(Action::kServeAndTouch);
}

Status Admission::CheckClock(const MessageHeader& req) {
  WorkerState& w = workers_.worker(req.worker);
  const bool resume = req.op == Op::kHeartbeat && (req.flags & kFlagResume) != 0;
  if (req.op == Op::kHello) {
    if (req.target_clock > 0) w.target_clock = req.target_clock;
    // A worker process (re)starting: it resumes at the largest clock any
    // shard answers, which may be above this shard's by CLOCKs it sent
    // before it stopped that never arrived here (RejoinWindow).
    w.rejoining = true;
    return Status::Ok();
  }
  if (req.op != Op::kPush && req.op != Op::kPull && req.op != Op::kClock && !resume) {
    return Status::Ok();  // a beat or a goodbye: its clock changes nothing
  }
  // Every request may carry at most the clock held (a CLOCK of it is the
  // next one; a resume at it changes nothing), or up to the window above
  // it until this shard process first heard the worker's clock: once per
  // worker, not per connection (a client that reconnects sends again, in
  // order, every request not acknowledged, so its clocks follow the held
  // one), and after a HELLO only as far as the job's clock allows.
  // With backup workers a worker left behind continues at the job's
  // clock (Client::CatchUp).
  const int64_t held = clocks_.backups() ? std::max(clocks_.clock(req.worker), clocks_.min_clock())
                                         : clocks_.clock(req.worker);
  const std::string what = OpName(req.op) + (resume ? " (resume)" : "") + " request " +
                           std::to_string(req.request_id) + " from worker " +
                           std::to_string(req.worker) + " at clock " + std::to_string(req.clock);
  const int64_t allowed = !w.clock_synced ? resume_window_ : w.rejoining ? RejoinWindow(held) : 0;
  if (req.clock - held > allowed) {
    std::string rule;
    if (w.clock_synced && w.rejoining) {
      rule = "a worker that starts again (HELLO) resumes at most " + std::to_string(allowed) +
             " clocks above the clock this shard holds for it, as far as the job's clock " +
             std::to_string(JobClockBase()) + ", its staleness and client.max_in_flight allow";
    } else if (w.clock_synced) {
      rule = req.op == Op::kClock
                 ? "a worker finishes one clock per CLOCK: the next is clock " +
                       std::to_string(held) + " and lower ones are repeats"
                 : "a worker's requests carry its clock, and its CLOCKs have brought it to " +
                       std::to_string(held) + " here";
    } else {
      rule = "this shard has not heard the worker's clock since it started at clock " +
             std::to_string(started_clock_) + ", and the first clock it accepts then is at most " +
             std::to_string(held) + " + " + std::to_string(resume_window_) +
             " (server.max_resume_clocks" +
             (job_.server.max_resume_clocks == 0 ? ", derived from the job" : "") + ")";
    }
    return FailedPreconditionError(
        "shard " + std::to_string(shard_) + ": " + what + " refused: this shard holds clock " +
        std::to_string(held) + " for worker " + std::to_string(req.worker) + ", and " + rule +
        "; nothing changed. Is this request really from this job's worker " +
        std::to_string(req.worker) +
        "? If that worker is this far ahead (e.g. checkpoints failed for a while), restart the "
        "job from its checkpoints (ps_launch --resume) or raise server.max_resume_clocks");
  }
  if (req.op == Op::kClock && req.clock >= kMaxClock) {
    return InvalidArgumentError(what +
                                ": the clock after it would be above 2^62, the largest "
                                "clock a request may carry");
  }
  if (req.op == Op::kClock || resume) {
    w.clock_synced = true;
    w.rejoining = false;
  }
  return Status::Ok();
}

int64_t Admission::JobClockBase() const {
  // A worker's clock is known here once this process accepted a CLOCK or
  // resume of it; before, it may be anywhere at or above what the shard
  // holds (a shard restored from a checkpoint, promoted, or started again
  // without one; CLOCKs still in flight).
  int64_t synced = kMaxClock;
  for (uint32_t w = 0; w < workers_.size(); ++w) {
    if (workers_.worker(w).clock_synced && clocks_.counted(w)) {
      synced = std::min(synced, clocks_.clock(w));
    }
  }
  return synced == kMaxClock ? kMaxClock : std::max(synced, clocks_.min_clock());
}

int64_t Admission::LeadCeiling() const {
  const int64_t base = JobClockBase();
  if (base == kMaxClock || bound_ == kUnboundedStaleness) return kMaxClock;
  // A worker's pull at clock c waits here only after its pulls below c
  // were answered by every shard it read, so c <= the job's clock +
  // bound + 1; this shard may not have heard yet the CLOCKs of the others
  // that let them be answered elsewhere: at most their requests in flight.
  return base + bound_ + 1 + job_.client.max_in_flight;
}

int64_t Admission::PullCeiling(uint32_t worker) const {
  const int64_t ceiling = LeadCeiling();
  const WorkerState& w = workers_.worker(worker);
  // Its clock here came one CLOCK at a time (CheckClock) since it was
  // heard: it is where the worker is.
  if (ceiling >= kMaxClock || !w.clock_synced || w.rejoining) return ceiling;
  return std::max(ceiling, clocks_.clock(worker) + 1 + int64_t{job_.client.max_in_flight});
}

int64_t Admission::RejoinWindow(int64_t held) const {
  // Under bsp and ssp a worker's clock is at most LeadCeiling() (its pull
  // there waits), and one CLOCK more may have been on its way here when it
  // stopped; under asp (a ceiling of kMaxClock) the whole window.
  const int64_t ceiling = LeadCeiling();
  if (ceiling >= kMaxClock) return resume_window_;
  return std::min(resume_window_, std::max<int64_t>(1, ceiling + 1 - held));
}

Status Admission::CheckSumClock(const MessageHeader& req, size_t sum_clocks,
                                uint64_t sum_bytes) const {
  const int64_t ceiling = LeadCeiling();
  if (req.clock <= ceiling) return Status::Ok();
  return FailedPreconditionError(
      "shard " + std::to_string(shard_) + ": PUSH request " + std::to_string(req.request_id) +
      " from worker " + std::to_string(req.worker) + " at clock " + std::to_string(req.clock) +
      " refused: under bsp with aggregate a push is summed into its clock, and no worker pushes "
      "for a clock above " +
      std::to_string(ceiling) + " (the job's clock " + std::to_string(JobClockBase()) +
      " + 1 + client.max_in_flight " + std::to_string(job_.client.max_in_flight) +
      "); nothing changed (the shard holds sums for " + std::to_string(sum_clocks) + " clocks, " +
      std::to_string(sum_bytes) + " bytes). Is this request really from this job's worker " +
      std::to_string(req.worker) + "?");
}

bool Admission::PushMustWait(int64_t clock) const {
  // The minimum itself, not JobClockBase: waiting costs an honest push
  // only time (a restored shard's resumed workers wait for the others
  // anyway), and no identity can make a sum for a clock beyond the next.
  return clock > clocks_.min_clock() + 1;
}

}  // namespace ps
