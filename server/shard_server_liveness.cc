// The liveness side of ShardServer (server/shard_server.h): what a worker's
// silence, goodbye or return does to the job. A worker silent for
// liveness.timeout_ms is dead: under on_dead_worker drop it stops holding
// the minimum clock back, under fail the job fails; a dropped or departed
// worker rejoins by speaking again (Touch); with
// server.exit_when_workers_leave the shard stops once every worker (and
// the evaluator) is gone. The state itself is the WorkerRegistry's.
#include <algorithm>
#include <chrono>
#include <string>

#include "common/logging.h"
#include "server/shard_server.h"

namespace ps {

void ShardServer::CheckLiveness(Clock::TimePoint now) {
  const LivenessOptions& liveness = job_.liveness;
  if (liveness.heartbeat_ms == 0) return;
  // A shard that handed its rows over (server/reshard_gate.h) hears from
  // the workers no more: their liveness is the next map's servers' to judge.
  if (reshard_->handed_over()) return;
  const auto timeout = std::chrono::milliseconds(liveness.timeout_ms);
  if (job_.cluster.evaluator && workers_.evaluator().SilentPast(now, timeout)) {
    // Training never waits for the evaluator: its death costs only the
    // evaluations it did not make.
    workers_.evaluator().dead = true;
    PS_LOG_WARN("shard {}: the evaluator is dead: {}; training goes on without it", shard_,
                workers_.evaluator().heard
                    ? "nothing heard from it for " +
                          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             now - workers_.evaluator().last_seen)
                                             .count()) +
                          " ms (liveness.timeout_ms " + std::to_string(liveness.timeout_ms) + ")"
                    : std::string("it never connected since the shard started (is ps_worker "
                                  "--evaluator running?)"));
    StopWhenWorkersGone();
  }
  for (uint32_t w = 0; w < workers_.size(); ++w) {
    WorkerState& worker = workers_.worker(w);
    if (!worker.SilentPast(now, timeout)) continue;
    worker.dead = true;
    const auto silent =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - worker.last_seen).count();
    const auto up =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - started_).count();
    const std::string who =
        "worker " + std::to_string(w) + " is dead: " +
        (worker.heard ? "nothing heard from it for " + std::to_string(silent) +
                            " ms (liveness.timeout_ms " + std::to_string(liveness.timeout_ms) + ")"
                      : "it never connected in the " + std::to_string(up) + " ms since shard " +
                            std::to_string(shard_) + " started (rendezvous.timeout_ms " +
                            std::to_string(job_.rendezvous.timeout_ms) +
                            " + liveness.timeout_ms " + std::to_string(liveness.timeout_ms) +
                            "): is it running, and can it reach " + job_.cluster.servers[shard_] +
                            "?") +
        ", at clock " + std::to_string(clocks_.clock(w));
    if (liveness.on_dead_worker == DeadWorkerPolicy::kDrop) {
      PS_LOG_WARN("shard {}: {}; the job goes on without it (liveness.on_dead_worker: drop)",
                  shard_, who);
      const bool advanced = clocks_.Exclude(w);
      replication_->Exclude(w);
      if (advanced) MinClockAdvanced();
      StopWhenWorkersGone();
      continue;
    }
    PS_LOG_ERROR("shard {}: {}; the job fails (liveness.on_dead_worker: fail)", shard_, who);
    if (failed_.ok()) {
      failed_ = AbortedError("shard " + std::to_string(shard_) + ": " + who +
                             "; the job stops (liveness.on_dead_worker: fail). Find out why it "
                             "died, then restart the job, or set on_dead_worker: drop to go on "
                             "without it");
      FailWaitingPulls(failed_);
    }
    StopWhenWorkersGone();
  }
}

void ShardServer::Touch(uint32_t worker) {
  WorkerState& w = workers_.worker(worker);
  w.last_seen = clock_->Now();
  w.heard = true;
  if (!w.dead && !w.left) return;
  if (w.dead && !failed_.ok()) return;  // the job has failed for good
  const bool was_dead = w.dead;
  w.dead = false;
  w.left = false;
  clocks_.Include(worker);
  replication_->Include(worker);
  PS_LOG_INFO("shard {}: worker {} {} at clock {}", shard_, worker,
              was_dead ? "is back and rejoins" : "rejoins", clocks_.clock(worker));
}

void ShardServer::WorkerLeft(uint32_t worker) {
  workers_.worker(worker).left = true;
  clocks_.Exclude(worker);
  replication_->Exclude(worker);
  PS_LOG_INFO("shard {}: worker {} already left the job; it is not waited for", shard_, worker);
  StopWhenWorkersGone();
}

void ShardServer::StopWhenWorkersGone() {
  if (!job_.server.exit_when_workers_leave || !workers_.AllGone()) return;
  const std::string dropped = workers_.Ranks([](const WorkerState& w) { return w.dead; }, ", ");
  if (job_.cluster.evaluator && !workers_.evaluator().left && !workers_.evaluator().dead) {
    // Its last evaluation reads the final model: the clocks it waits for
    // will not come (PullReady).
    ReleaseWaitingPulls();
    if (!waiting_for_evaluator_logged_) {
      waiting_for_evaluator_logged_ = true;
      PS_LOG_INFO("shard {}: every worker has left the job; serving the evaluator until it "
                  "leaves (or is silent for liveness.timeout_ms)", shard_);
    }
    return;
  }
  PS_LOG_INFO(
      "shard {}: every worker has left the job{}{}; the shard exits "
      "(server.exit_when_workers_leave: false keeps it serving)",
      shard_, dropped.empty() ? "" : " (dead: " + dropped + ")",
      !job_.cluster.evaluator     ? ""
      : workers_.evaluator().dead ? ", and the evaluator is dead"
                                  : ", and so has the evaluator");
  // Under policy fail a dead worker failed the job: the exit says so.
  exit_status_ = failed_;
  Stop();
}

void ShardServer::HeardClock(uint32_t worker, int64_t clock) {
  if (workers_.worker(worker).heard_clock) return;
  workers_.worker(worker).heard_clock = true;
  if (clock <= started_clock_) return;
  const int64_t lost = clock - started_clock_;
  lost_clocks_ = std::max(lost_clocks_, lost);
  PS_LOG_WARN("shard {}: worker {} is at clock {} and this shard started at clock {}{}: the "
              "worker's updates of clocks {}..{} ({} clock{}) to this shard are lost{}",
              shard_, worker, clock, started_clock_,
              started_clock_ == 0 ? " with its initial values" : "", started_clock_, clock - 1,
              lost, lost == 1 ? "" : "s",
              started_clock_ == 0
                  ? " if this shard ran before (it was started again without a checkpoint); "
                    "a shard of a new job expects no worker ahead of clock 0: is this resume "
                    "really from this job's worker?"
                  : "");
}

}  // namespace ps
