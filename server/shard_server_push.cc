// The push side of ShardServer (server/shard_server.h): carries out the
// route PushPolicy (server/push_policy.h) gives a PUSH that passed
// admission.
//
//  - A push applied at once (ssp, asp, bsp without aggregation) is
//    acknowledged before the apply when its result is proven finite.
//  - A push refused or parked is forgotten by RecentPushes: a copy sent
//    again is then new.
//  - replicated shards: the backups get every applied push, or with
//    replication.after_aggregation each clock's sum once, and the
//    acknowledgement waits for them.
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "server/push_policy.h"
#include "server/shard_server.h"

namespace ps {

namespace {

// What PushPolicy asks about the push `req`, answered from the shard's
// parts (all must outlive this). Not thread-safe: the shard's thread only.
class ShardPushFacts final : public PushPolicy::Facts {
 public:
  ShardPushFacts(const MessageHeader& req, const Admission& admission, const ShardStore& store,
                 const HeldReplies& held, ClockTable& clocks)
      : req_(req), admission_(admission), store_(store), held_(held), clocks_(clocks) {}

  int64_t RepeatSummedInto() const override {
    return held_.SummedInto(req_.worker, req_.session, req_.request_id);
  }
  Status SumClockAllowed() const override {
    return admission_.CheckSumClock(req_, store_.sum_clocks(), store_.sum_bytes());
  }
  bool MustWait() const override { return admission_.PushMustWait(req_.clock); }
  bool InQuorum() override { return clocks_.Admit(req_.worker, req_.clock); }

 private:
  const MessageHeader& req_;
  const Admission& admission_;
  const ShardStore& store_;
  const HeldReplies& held_;
  ClockTable& clocks_;
};

}  // namespace

void ShardServer::HandlePush(std::vector<Frame>& frames, MessageHeader& reply) {
  using Route = PushPolicy::Route;
  Frame& routing_id = frames[0];
  const MessageHeader& req = request_.header;
  ++counters_.pushes;
  PushPolicy::Push push;
  push.repeat = !recent_pushes_.Insert(req.worker, req.session, req.request_id);
  push.clock = req.clock;
  push.min_clock = clocks_.min_clock();
  ShardPushFacts facts(req, *admission_, *store_, held_, clocks_);
  PushPolicy::Decision decision = push_policy_.Decide(push, facts);
  switch (decision.route) {
    case Route::kAcknowledgeRepeat:
    case Route::kHoldRepeatForSum:
      AcknowledgeRepeat(routing_id, reply, decision.clock);
      return;
    case Route::kRefuseSum:
      RefuseSum(frames, decision.status);
      return;
    case Route::kPark:
      // Counted as new when it comes back (a copy sent again meanwhile is
      // recognised then).
      recent_pushes_.Forget(req.worker, req.session, req.request_id);
      ParkPush(frames);
      return;
    default:
      break;
  }
  // Served metrics only: the hottest rows cost nothing when none are.
  if (metrics_endpoint_ != nullptr && !request_.keys.empty()) {
    hot_rows_.Add(req.table, request_.keys);
  }
  const std::span<const Frame> body(frames.data() + 1, frames.size() - 1);
  switch (decision.route) {
    case Route::kAccumulateAndHold:
      // The backups get the sum once, when it is applied
      // (MinClockAdvanced), and the acknowledgement waits for it.
      store_->Accumulate(request_, decision.clock);
      held_.HoldForSum(decision.clock, req.worker, req.session, req.request_id,
                       MakeHeld(routing_id, reply));
      return;
    case Route::kDropLate:
      DropLatePush(routing_id, reply);
      return;
    case Route::kAcknowledgeAndSum:
      // Applied with the others' when the last worker finishes that clock;
      // the sum cannot fail, so the acknowledgement goes first, and the
      // backups add it while this shard does.
      Reply(routing_id, reply);
      replication_->Push(body, decision.clock, /*accumulate=*/true);
      store_->Accumulate(request_, decision.clock);
      held_.NoteSummed(decision.clock, req.worker, req.session, req.request_id);
      return;
    case Route::kApplyNow:
      ApplyPushNow(routing_id, body, reply);
      return;
    default:  // answered above
      return;
  }
}

void ShardServer::AcknowledgeRepeat(Frame& routing_id, const MessageHeader& reply,
                                    int64_t summed_into) {
  const MessageHeader& req = request_.header;
  ++counters_.repeated_pushes;
  PS_LOG_DEBUG(
      "shard {}: PUSH request {} from worker {} came again; acknowledged, not applied "
      "twice",
      shard_, req.request_id, req.worker);
  if (summed_into >= 0) {
    // Its first copy waits in a sum the backups do not have yet.
    held_.HoldForSum(summed_into, MakeHeld(routing_id, reply));
    return;
  }
  Reply(routing_id, reply);
}

void ShardServer::RefuseSum(std::vector<Frame>& frames, const Status& refused) {
  const MessageHeader& req = request_.header;
  recent_pushes_.Forget(req.worker, req.session, req.request_id);
  ++counters_.errors;
  ++counters_.refused_sum_clocks;
  LogRequestRefusal(frames[1], "refused", refused.message());
  Reply(frames[0], MakeErrorHeader(req, shard_, refused));
}

void ShardServer::DropLatePush(Frame& routing_id, MessageHeader& reply) {
  // consistency.backup_workers: the clock's update is (or will be) the
  // mean of other workers' gradients. Acknowledged, and dropped.
  const MessageHeader& req = request_.header;
  reply.flags |= kFlagLate;
  Reply(routing_id, reply);
  replication_->Late(req.worker, req.clock, req.session, req.request_id);
  ++counters_.late_pushes;
  const uint64_t late = ++workers_.worker(req.worker).late_pushes;
  uint64_t skipped = 0;
  if (late_log_.ShouldLog(&skipped)) {
    PS_LOG_INFO(
        "shard {}: worker {}'s push of clock {} came after {} of the {} workers' "
        "gradients of that clock (consistency.backup_workers {}; the job is at clock "
        "{}): dropped, its {} late push{} here{}",
        shard_, req.worker, req.clock, clocks_.quorum(), clocks_.num_workers(),
        job_.consistency.backup_workers, clocks_.min_clock(), late, late == 1 ? "" : "es",
        HeldBack(skipped));
  }
}

void ShardServer::ApplyPushNow(Frame& routing_id, std::span<const Frame> body,
                               const MessageHeader& reply) {
  const MessageHeader& req = request_.header;
  if (store_->PushProvenFinite(request_, clocks_.min_clock())) {
    // Acknowledge first, then apply: the push was fully checked, the apply
    // cannot fail (kFlag, or bounds that rule out a result that is not
    // finite), and this thread applies it before reading any later
    // request, so no reader can see the state without it. The worker's
    // next message travels while the apply runs, and the backups get the
    // push before it (it cannot fail), so theirs runs at the same time.
    Reply(routing_id, reply);
    replication_->Push(body, clocks_.min_clock(), /*accumulate=*/false);
    Status applied = store_->ApplyPush(request_, clocks_.min_clock());
    if (!applied.ok()) PS_LOG_ERROR("shard {}: {}", shard_, applied.ToString());  // a bug
    if (job_.server.on_non_finite_result == NonFiniteResultPolicy::kFlag) {
      ReportNonFinite("applied (server.on_non_finite_result: flag)");
    }
    return;
  }
  // Refused when a result is not finite: the reply waits for the apply.
  if (Status applied = store_->ApplyPush(request_, clocks_.min_clock()); !applied.ok()) {
    recent_pushes_.Forget(req.worker, req.session, req.request_id);
    ++counters_.errors;
    ++counters_.refused_results;
    Status refused = applied.WithContext(
        "shard " + std::to_string(shard_) + ": PUSH request " + std::to_string(req.request_id) +
        " from worker " + std::to_string(req.worker) + " at clock " + std::to_string(req.clock));
    ReportNonFinite("refused (server.on_non_finite_result: refuse): " + refused.message());
    // A hashed table keeps marks of a refused push (rows evicted for it,
    // its uses and admission counts): the backups take it too.
    if (store_->layouts()[req.table].hashed) replication_->RefusedPush(body, clocks_.min_clock());
    Reply(routing_id, MakeErrorHeader(req, shard_, refused));
    return;
  }
  replication_->Push(body, clocks_.min_clock(), /*accumulate=*/false);
  Reply(routing_id, reply);
}

void ShardServer::ParkPush(std::vector<Frame>& frames) {
  const MessageHeader& req = request_.header;
  const uint32_t waiting = waiting_.connection_count(frames[0].view());
  uint64_t bytes = 0;
  for (size_t i = 1; i < frames.size(); ++i) bytes += frames[i].size();
  if (waiting >= job_.server.max_waiting_pulls_per_worker ||
      waiting_.push_bytes() + bytes > max_queued_reply_bytes_) {
    ++counters_.errors;
    ++counters_.pulls_refused_waiting;
    Status refused = ResourceExhaustedError(
        "shard " + std::to_string(shard_) + ": PUSH request " + std::to_string(req.request_id) +
        " from " + SenderName(req.worker) + " at clock " + std::to_string(req.clock) +
        " refused: it would wait for the job's clock " + std::to_string(clocks_.min_clock()) +
        " to reach it, and " +
        (waiting >= job_.server.max_waiting_pulls_per_worker
             ? "its connection has " + std::to_string(waiting) +
                   " requests waiting already (server.max_waiting_pulls_per_worker)"
             : std::to_string(waiting_.push_bytes()) + " bytes of pushes wait already "
                                                       "(server.max_queued_reply_bytes)") +
        "; wait for their replies before sending more");
    LogRequestRefusal(frames[1], "refused", refused.message());
    Reply(frames[0], MakeErrorHeader(req, shard_, refused));
    return;
  }
  ++counters_.parked_pushes;
  waiting_.AddPush({std::move(frames), std::move(request_), clock_->Now()});
  request_ = Request();
}

void ShardServer::ReplayParkedPushes() {
  replay_due_ = false;
  const bool all = workers_.AllGone() || !failed_.ok();
  for (WaitingRequests::Waiting& parked : waiting_.TakePushes([&](const auto& w) {
         return all || !admission_->PushMustWait(w.request.header.clock);
       })) {
    if (!failed_.ok()) {
      ++counters_.errors;
      Reply(parked.frames[0], MakeErrorHeader(parked.request.header, shard_, failed_));
      continue;
    }
    request_ = std::move(parked.request);
    DispatchHeldForBackups(parked.frames, Op::kPush);
  }
}

void ShardServer::ReportNonFinite(const std::string& what) {
  for (uint32_t t = 0; t < non_finite_logged_.size(); ++t) {
    if (non_finite_logged_[t] || store_->non_finite_rows(t) + store_->refused_rows(t) == 0) {
      continue;
    }
    non_finite_logged_[t] = true;
    PS_LOG_WARN(
        "shard {}: table '{}': an update whose result is not finite (a value or "
        "optimizer state overflowed to Inf or became NaN) was {}; STATS counts such rows "
        "(non_finite_rows applied, refused_rows refused), and this is logged once per table",
        shard_, job_.tables[t].name, what);
  }
}

}  // namespace ps
