// PushPolicy: what each consistency mode does with a PUSH that passed
// admission (server/admission.h); ShardServer carries the route out
// (server/shard_server_push.cc). In order:
//
//  1. A push sent again (same worker, session and request id; RecentPushes)
//     is acknowledged and not applied twice; when its first copy waits in a
//     sum the backups do not have yet (replication.after_aggregation), its
//     reply waits for that sum too.
//  2. consistency.aggregate: a push whose clock passes the sum bound is
//     refused (Admission::CheckSumClock); one for a clock above the job's
//     clock + 1 waits until the job's clock reaches it
//     (Admission::PushMustWait).
//  3. Sums replicated (replication.after_aggregation under aggregate): a
//     push of a clock not yet applied is summed into its clock and its
//     reply waits for that clock's sum to reach the backups. A push of a
//     clock already applied (sent again to a promoted backup whose primary
//     died before replicating that clock's sums) goes on as below: held for
//     the next clock's sums, it could wait for a CLOCK its worker sends only
//     once it is acknowledged.
//  4. consistency.backup_workers: a push after its clock's quorum is
//     acknowledged and dropped (ClockTable::Admit).
//  5. consistency.aggregate: acknowledged, then summed into its clock (the
//     job's clock for one already applied).
//  6. Otherwise (ssp, asp, bsp without aggregation): applied at once.
//
// The policy reads the job's settings and what it is told about the push;
// it touches no store, socket or reply.
#ifndef PS_SERVER_PUSH_POLICY_H_
#define PS_SERVER_PUSH_POLICY_H_

#include <cstdint>

#include "common/options.h"
#include "common/status.h"

namespace ps {

// Thread-safe: constant after construction; Decide reads only its
// arguments (the Facts it is given belong to the caller).
class PushPolicy {
 public:
  enum class Route {
    kAcknowledgeRepeat,  // a repeat: acknowledge, apply nothing
    kHoldRepeatForSum,   // a repeat whose first copy waits in sum `clock`
    kRefuseSum,          // aggregate: refuse with `status`, change nothing
    kPark,               // aggregate: wait until the job's clock reaches it
    kAccumulateAndHold,  // sums replicated: sum into `clock`, hold the reply
    kDropLate,           // backup workers: after its clock's quorum, dropped
    kAcknowledgeAndSum,  // aggregate: acknowledge, sum into `clock`
    kApplyNow,           // apply at once
  };
  struct Decision {
    Route route = Route::kApplyNow;
    // kHoldRepeatForSum: the clock whose sum holds the first copy;
    // kAccumulateAndHold, kAcknowledgeAndSum: the clock summed into; else -1.
    int64_t clock = -1;
    // kRefuseSum: the refusal (Admission::CheckSumClock); else OK.
    Status status;
  };

  // The push being routed.
  struct Push {
    bool repeat = false;    // RecentPushes knew it (the caller recorded it)
    int64_t clock = 0;      // the clock it carries
    int64_t min_clock = 0;  // the job's clock (ClockTable::min_clock)
  };

  // What Decide asks about the push: each at most once, in the order of
  // the rules above, and only when the route depends on the answer.
  class Facts {
   public:
    virtual ~Facts() = default;
    // For a repeat: the clock whose sum, not yet at the backups, holds its
    // first copy (HeldReplies::SummedInto), or -1.
    virtual int64_t RepeatSummedInto() const = 0;
    // consistency.aggregate: OK when the push may be summed or wait, else
    // the refusal (Admission::CheckSumClock).
    virtual Status SumClockAllowed() const = 0;
    // consistency.aggregate: whether the push's clock is above the job's
    // clock + 1 (Admission::PushMustWait).
    virtual bool MustWait() const = 0;
    // consistency.backup_workers: whether the pushing worker is one of its
    // clock's quorum (ClockTable::Admit). Answering makes it a member while
    // there is room, so Decide asks only when the route depends on it.
    virtual bool InQuorum() = 0;
  };

  // The settings of `job` (copied: `job` need not outlive this).
  explicit PushPolicy(const JobOptions& job);

  // The route of `push`; see the rules at the top of this file.
  Decision Decide(const Push& push, Facts& facts) const;

  // consistency.aggregate.
  bool aggregate() const { return aggregate_; }
  // Each clock's sum goes to the backups once, when it is applied
  // (replication.after_aggregation under aggregate, with backups).
  bool sums_replicated() const { return sums_replicated_; }
  // consistency.backup_workers leaves a clock's quorum below the workers.
  bool backups() const { return backups_; }

 private:
  const bool aggregate_;
  const bool sums_replicated_;
  const bool backups_;
};

}  // namespace ps

#endif  // PS_SERVER_PUSH_POLICY_H_
