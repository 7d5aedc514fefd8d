// Admission: whether a decoded request may be served by this shard, checked
// before it touches anything (DESIGN.md section 10).
//
// In order: the sender's key (ShardAccess, under security.mode curve), the
// write lease (a fenced replica serves only PRIMARY probes and control
// requests), the rendezvous (a HELLO of another job), the job's failure
// (liveness.on_dead_worker fail), a worker that left (it may still read),
// and the clock rules (see server/shard_server.h, "Clocks"): a request may
// carry at most the clock the shard holds for its worker, or until this
// process heard that worker's clock up to the resume window above it, and
// after a HELLO only as far as the job's clock allows (RejoinWindow). Under
// consistency.aggregate a push is summed into its clock only within
// LeadCeiling() (CheckSumClock), and waits when it is above the job's clock
// + 1 (PushMustWait).
//
// A refused request changes nothing, not even the liveness of the worker it
// names. What an admitted request does to liveness is split: the sender's
// last-seen time is set here, and the caller brings back (Touch) a worker
// that left or was dropped when the verdict says so.
//
// Not thread-safe: the shard's thread only.
#ifndef PS_SERVER_ADMISSION_H_
#define PS_SERVER_ADMISSION_H_

#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/options.h"
#include "common/status.h"
#include "common/transport.h"
#include "common/wire.h"
#include "server/access.h"
#include "server/clock_table.h"
#include "server/worker_registry.h"

namespace ps {

class Admission {
 public:
  // Why a request was refused (the shard counts each).
  enum class Refusal {
    kNone,
    kAccess,     // its key may not speak for the worker it names
    kFenced,     // the write lease lapsed: FailedPrecondition with kFlagNotPrimary
    kAgreement,  // a HELLO of another job
    kFailed,     // the job failed (a dead worker under policy fail): Aborted
    kLeft,       // a worker that left, other than by HELLO or a read
    kClock,      // a clock the protocol does not allow (CheckClock)
  };
  struct Verdict {
    enum class Action {
      kServe,          // dispatch it
      kServeAndTouch,  // dispatch it after ShardServer::Touch (a worker may rejoin)
      kAnswerPrimary,  // a PRIMARY probe: answer whether this replica serves
      kRefuse,         // answer `status` and change nothing
    };
    Action action = Action::kServe;
    Refusal refusal = Refusal::kNone;
    Status status;
    // Whether the shard's refusal log should carry it (the fenced and
    // rendezvous refusals are logged here, the job's failure where it
    // happened).
    bool log = false;
  };

  // `clock`, `clocks`, `workers` and `access` must outlive this.
  // `started_clock`: the clock this shard process started at (restored,
  // promoted or 0). `clock` dates a sender's last-seen time, read only when
  // an admitted request sets it here.
  Admission(uint32_t shard, const JobOptions& job, const Clock& clock, const ClockTable& clocks,
            WorkerRegistry& workers, ShardAccess& access, std::string agreement,
            int64_t started_clock);

  // The verdict on `req`, decoded from the message whose first frame after
  // the routing id is `first_frame`; `fenced`: the write lease lapsed;
  // `failed`: the job's failure, OK while it runs.
  Verdict Check(const Frame& first_frame, const MessageHeader& req, bool fenced,
                const Status& failed);

  // OK when the clock of `req` (a worker's request) is one the protocol
  // allows; otherwise the error for its ERROR reply: FailedPrecondition
  // naming the worker, the clock sent and the clock this shard holds, or
  // InvalidArgument for a CLOCK of kMaxClock. Notes, for an accepted CLOCK
  // or resume, that the worker's clock is heard (the resume window is
  // spent), and for a HELLO that the worker starts again; changes no clock.
  Status CheckClock(const MessageHeader& req);
  // The job's clock that a worker's bounds count from: the least clock of
  // the workers whose clock this process heard (a CLOCK or resume), at
  // least the minimum; kMaxClock when it heard none. The others' clocks
  // are unknown here (a restored, promoted or restarted shard; CLOCKs in
  // flight).
  int64_t JobClockBase() const;
  // The highest clock an honest worker's pull (or aggregated push) can
  // carry here: JobClockBase() + the staleness bound + 1 +
  // client.max_in_flight; kMaxClock under asp or while unknown.
  int64_t LeadCeiling() const;
  // The highest clock a pull of `worker` may wait for here: LeadCeiling(),
  // or, once this shard heard the worker's own CLOCKs, that worker's clock
  // + 1 + client.max_in_flight when it is higher (a worker that pushes and
  // finishes clocks without pulling, which nothing under bsp or ssp stops,
  // runs ahead of the job, and its next pull is at its own clock).
  int64_t PullCeiling(uint32_t worker) const;
  // How far above `held` a worker's first clock after a HELLO may be.
  int64_t RejoinWindow(int64_t held) const;
  // consistency.aggregate: OK when a push of `req` may be summed or wait:
  // its clock is at most LeadCeiling(); else FailedPrecondition naming the
  // bound and what the shard holds (`sum_clocks` clocks of sums,
  // `sum_bytes` bytes).
  Status CheckSumClock(const MessageHeader& req, size_t sum_clocks, uint64_t sum_bytes) const;
  // consistency.aggregate: true when a push of `clock` is for a clock above
  // the minimum clock + 1, which no sum is held for yet: it waits.
  bool PushMustWait(int64_t clock) const;
  // EffectiveMaxResumeClocks(job).
  int64_t resume_window() const { return resume_window_; }

 private:
  // The rendezvous of a HELLO: OK, or the refusal (logged once per worker).
  Status CheckAgreement(const MessageHeader& req);
  // A worker's request (not the evaluator's, not a control client's).
  Verdict CheckWorker(const MessageHeader& req, const Status& failed);
  // The refusal of `req` while fenced (logged at most once a second); the
  // shard makes its error (ShardServer::FencedError: it knows its address
  // and epoch).
  Verdict Fenced(const MessageHeader& req);

  const uint32_t shard_;
  const JobOptions& job_;
  const Clock& clock_;
  const ClockTable& clocks_;
  WorkerRegistry& workers_;
  ShardAccess& access_;
  const std::string agreement_;  // the job as the rendezvous compares it
  const int64_t started_clock_;
  const int64_t bound_;          // staleness bound of the job's consistency mode
  const int64_t resume_window_;  // EffectiveMaxResumeClocks(job)
  LogRateLimit fenced_log_{clock_, std::chrono::seconds(1)};
};

}  // namespace ps

#endif  // PS_SERVER_ADMISSION_H_
