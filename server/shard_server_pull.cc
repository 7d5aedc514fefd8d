// The pull side of ShardServer (server/shard_server.h): a pull is answered
// at once when the job's clock allows it (the staleness bound; the
// evaluator's reads wait for the clock they name), or waits in
// WaitingRequests until the minimum clock advances, its deadline passes
// (DeadlineExceeded naming the slowest worker), or the job fails; a pull
// over its connection's quota, above LeadCeiling, or whose reply would
// pass server.max_queued_reply_bytes is refused.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "server/shard_server.h"

namespace ps {

void ShardServer::ServePull(Frame& routing_id, const Request& pull, Clock::Duration waited) {
  const MessageHeader& req = pull.header;
  if (waited > Clock::Duration::zero() && req.worker != kEvaluatorWorker) {
    staleness_wait_seconds_.Observe(std::chrono::duration<double>(waited).count());
  }
  // All connections together: as much as one per worker and the admin.
  const uint64_t total_bound = (uint64_t{job_.cluster.workers} + 1) * max_queued_reply_bytes_;
  if (queued_replies_.OverBound(routing_id.view(), max_queued_reply_bytes_, total_bound)) {
    // The client does not read its replies (or reads far slower than it
    // asks): serving more would keep more of the store's blocks alive.
    ++counters_.errors;
    ++counters_.pulls_refused_queued_bytes;
    Status refused = ResourceExhaustedError(
        "shard " + std::to_string(shard_) + ": PULL request " + std::to_string(req.request_id) +
        " from " + SenderName(req.worker) + " refused: " +
        std::to_string(queued_replies_.Queued(routing_id.view())) +
        " bytes of this connection's earlier pull replies are not read yet "
        "(server.max_queued_reply_bytes " + std::to_string(max_queued_reply_bytes_) +
        " per connection, " + std::to_string(total_bound) + " for all connections, of which " +
        std::to_string(queued_replies_.total()) +
        " are held); read the replies before pulling more, or raise "
        "server.max_queued_reply_bytes");
    uint64_t skipped = 0;
    if (refused_log_.ShouldLog(&skipped)) {
      PS_LOG_WARN("{}{}", refused.message(), HeldBack(skipped));
    }
    Reply(routing_id, MakeErrorHeader(req, shard_, refused));
    return;
  }
  ++counters_.pulls;
  MessageHeader reply = ReplyHeader(req);
  reply.waited_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(waited).count());
  reply.dtype = req.dtype;  // DecodeRequest allowed it for the table
  reply_.clear();
  reply_.push_back(std::move(routing_id));
  reply_.push_back(EncodeHeader(reply));
  uint64_t held = 0;
  Status read = store_->ReadRows(pull, &reply_, &held);
  if (read.ok() && reply_.size() > 2) {
    read = queued_replies_.Charge(reply_[0].view(), held,
                                  std::span<Frame>(reply_.data() + 2, reply_.size() - 2));
  }
  if (!read.ok()) {
    ++counters_.errors;
    Frame id = std::move(reply_[0]);
    Reply(id, MakeErrorHeader(req, shard_, read));
    return;
  }
  SendReply(reply);
  if (first_pull_to_log_) {
    // The time of this line ends a fail-over (benchmarks/kill_restart_bench.py),
    // or a reshard in memory.
    first_pull_to_log_ = false;
    if (took_over_at_ >= 0) {
      PS_LOG_INFO("shard {}: first pull served with the rows it followed until the handover at "
                  "clock {} (worker {}, clock {})",
                  shard_, took_over_at_, req.worker, req.clock);
    } else {
      PS_LOG_INFO("shard {}: first pull served as the primary of epoch {} (worker {}, clock {})",
                  shard_, promoted_epoch_, req.worker, req.clock);
    }
  }
}

void ShardServer::ParkPull(std::vector<Frame>& frames) {
  const MessageHeader& req = request_.header;
  const uint32_t parked = waiting_.connection_count(frames[0].view());
  const uint32_t limit = job_.server.max_waiting_pulls_per_worker;
  const bool evaluator = req.worker == kEvaluatorWorker;
  const int64_t ceiling = evaluator ? kMaxClock : admission_->PullCeiling(req.worker);
  Status refused;
  if (!evaluator && req.clock > ceiling) {
    // No worker gets there (PullCeiling).
    ++counters_.refused_clocks;
    refused = FailedPreconditionError(
        "shard " + std::to_string(shard_) + ": PULL request " + std::to_string(req.request_id) +
        " from " + SenderName(req.worker) + " at clock " + std::to_string(req.clock) +
        " refused: the job is at clock " + std::to_string(admission_->JobClockBase()) +
        ", this shard holds clock " + std::to_string(clocks_.clock(req.worker)) +
        " for the worker, and none of its pulls waits for a clock above " +
        std::to_string(ceiling) +
        " (the higher of the job's clock + the staleness bound + 1 and the worker's own clock, "
        "+ client.max_in_flight); nothing changed. Is this request really from this job's "
        "worker?");
  } else if (parked >= limit) {
    ++counters_.pulls_refused_waiting;
    refused = ResourceExhaustedError(
        "shard " + std::to_string(shard_) + ": PULL request " + std::to_string(req.request_id) +
        " from " + SenderName(req.worker) + " at clock " + std::to_string(req.clock) +
        " refused: its connection has " + std::to_string(parked) +
        " pulls waiting for slower workers already (server.max_waiting_pulls_per_worker " +
        std::to_string(limit) + "); wait for their replies before pulling more");
  }
  if (!refused.ok()) {
    ++counters_.errors;
    LogRequestRefusal(frames[1], "refused", refused.message());
    Reply(frames[0], MakeErrorHeader(req, shard_, refused));
    return;
  }
  if (!evaluator) {
    ++counters_.pulls_waited;
    counters_.max_blocked_lead =
        std::max(counters_.max_blocked_lead, req.clock - clocks_.min_clock());
  }
  const Clock::TimePoint now = clock_->Now();
  // The request's wait, never more than the server's (0 asks for that).
  const uint32_t most = job_.server.max_pull_wait_ms;
  const uint32_t wait_ms = req.max_wait_ms == 0 ? most : std::min(req.max_wait_ms, most);
  const Clock::TimePoint deadline = now + std::chrono::milliseconds(wait_ms);
  // Moving the vector keeps its frames where they are, so the decoded
  // request's spans stay valid; request_ gets fresh scratch buffers.
  waiting_.AddPull({std::move(frames), std::move(request_), now, deadline}, evaluator);
  request_ = Request();
}

void ShardServer::ReleaseWaitingPulls() {
  // The pulls of the lowest clocks, as far as the minimum allows, answered
  // in arrival order; the evaluator's once the minimum reaches their clock
  // (or at once, for the final model, when every worker is gone).
  const bool final_model = workers_.AllGone();
  const Clock::TimePoint now = clock_->Now();
  for (WaitingRequests::Waiting& w : waiting_.TakeReadyPulls(
           [&](int64_t clock) { return clocks_.PullReady(clock, bound_); },
           [&](int64_t clock) { return final_model || clock <= clocks_.min_clock(); })) {
    ServePull(w.frames[0], w.request, now - w.since);
  }
}

void ShardServer::ExpireWaitingPulls(Clock::TimePoint now) {
  using std::chrono::milliseconds;
  for (WaitingRequests::Waiting& w : waiting_.TakeExpiredPulls(now)) {
    const MessageHeader* h = &w.request.header;
    const uint32_t slowest = clocks_.slowest_worker();
    const auto waited = std::chrono::duration_cast<milliseconds>(now - w.since).count();
    if (h->worker == kEvaluatorWorker) {
      // Nothing is wrong: the workers have not reached the clock of the
      // next evaluation yet, and the evaluator asks again.
      Reply(w.frames[0],
            MakeErrorHeader(*h, shard_,
                            DeadlineExceededError(
                                "the evaluator's PULL at clock " + std::to_string(h->clock) +
                                " waited " + std::to_string(waited) + " ms on shard " +
                                std::to_string(shard_) + "; the slowest worker, " +
                                std::to_string(slowest) + ", is at clock " +
                                std::to_string(clocks_.clock(slowest)))));
      continue;
    }
    Status late = DeadlineExceededError(
        "PULL request " + std::to_string(h->request_id) + " from worker " +
        std::to_string(h->worker) + " at clock " + std::to_string(h->clock) + " waited " +
        std::to_string(waited) + " ms on shard " + std::to_string(shard_) +
        " for the slowest worker: worker " + std::to_string(slowest) + " is at clock " +
        std::to_string(clocks_.clock(slowest)) + ", and this pull needs every worker at clock >= " +
        std::to_string(h->clock - bound_) + " (staleness " + std::to_string(bound_) +
        "); is worker " + std::to_string(slowest) + " alive and still training?");
    ++counters_.errors;
    uint64_t skipped = 0;
    if (expired_log_.ShouldLog(&skipped)) {
      PS_LOG_WARN("shard {}: {}{}", shard_, late.message(),
                  HeldBack(skipped));
    }
    Reply(w.frames[0], MakeErrorHeader(*h, shard_, late));
  }
}

void ShardServer::FailWaitingPulls(const Status& status) {
  for (WaitingRequests::Waiting& w : waiting_.TakeAllPulls()) {
    ++counters_.errors;
    Reply(w.frames[0], MakeErrorHeader(w.request.header, shard_, status));
  }
  // failed_ is set: the waiting pushes are refused with it (no request is
  // dispatched, so this may run inside another's handling).
  if (waiting_.pushes() > 0 && !failed_.ok()) ReplayParkedPushes();
}

}  // namespace ps
