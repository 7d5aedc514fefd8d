#include "server/push_policy.h"

#include <algorithm>
#include <utility>

namespace ps {

using Route = PushPolicy::Route;

namespace {

PushPolicy::Decision Routed(Route route, int64_t clock = -1) {
  PushPolicy::Decision decision;
  decision.route = route;
  decision.clock = clock;
  return decision;
}

}  // namespace

PushPolicy::PushPolicy(const JobOptions& job)
    : aggregate_(job.consistency.aggregate),
      sums_replicated_(job.replication.factor > 1 && job.consistency.aggregate &&
                       job.replication.after_aggregation),
      // As ClockTable::backups() of a table made for the job.
      backups_(job.consistency.Quorum(job.cluster.workers) < job.cluster.workers) {}

PushPolicy::Decision PushPolicy::Decide(const Push& push, Facts& facts) const {
  if (push.repeat) {
    // Sent again after a dropped connection; the first copy was applied,
    // or waits in a sum the backups do not have yet.
    const int64_t summed_into = facts.RepeatSummedInto();
    return summed_into >= 0 ? Routed(Route::kHoldRepeatForSum, summed_into)
                            : Routed(Route::kAcknowledgeRepeat);
  }
  if (aggregate_) {
    if (Status allowed = facts.SumClockAllowed(); !allowed.ok()) {
      Decision refused = Routed(Route::kRefuseSum);
      refused.status = std::move(allowed);
      return refused;
    }
    // The sums cover the job's clock and the next only.
    if (facts.MustWait()) return Routed(Route::kPark);
  }
  // A push of a clock already applied is not held for the next clock's
  // sums: it could wait for a CLOCK its worker sends only once it is
  // acknowledged. It goes to the backups on its own, as below.
  if (sums_replicated_ && push.clock >= push.min_clock) {
    return Routed(Route::kAccumulateAndHold, push.clock);
  }
  if (backups_ && !facts.InQuorum()) return Routed(Route::kDropLate);
  // Never into a clock already applied.
  if (aggregate_) return Routed(Route::kAcknowledgeAndSum, std::max(push.clock, push.min_clock));
  return Routed(Route::kApplyNow);
}

}  // namespace ps
