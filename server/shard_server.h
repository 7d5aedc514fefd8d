// One parameter-server shard: a ROUTER socket bound at the shard's address,
// a ShardStore, and a loop that decodes, checks and answers requests.
//
// Every request passes DecodeRequest before it touches the store; a bad one
// gets an ERROR reply naming what was wrong and the store is unchanged.
// Requests are handled one at a time in arrival order on the Run() thread,
// so a push acknowledged to a worker is applied before any later request of
// any worker is read.
//
// Consistency (DESIGN.md section 5): the shard keeps every worker's clock
// (CLOCK requests) and answers a PULL from a worker at clock c only when the
// minimum clock is at least c - bound; until then the pull waits in a queue
// that is released as CLOCKs advance the minimum. Every reply carries the
// minimum clock.
//
// Bounded resources (server options in common/options.h): the socket queues
// at most server.socket_hwm messages per connection (a reply over it is
// dropped, counted and logged); a connection or worker id with
// server.max_queued_reply_bytes of replies not yet taken by the kernel gets
// ResourceExhausted for its next pull (QueuedReplies); a worker's
// connection may have server.max_waiting_pulls_per_worker pulls waiting
// (per connection: another holder of the worker's identity cannot use up
// its quota), none more than the staleness bound + 1 above the job's
// clock (no worker's pull waits longer), each at most
// server.max_pull_wait_ms; at most one checkpoint is written at a time, and
// CHECKPOINT requests meeting a write wait for it without holding up other
// requests (a checkpoint.every_clocks boundary still waits for it, so that
// it holds exactly its clock's state). A connection the shard cannot accept (out of file descriptors)
// is logged with the limit to raise.
//
// Rendezvous (common/rendezvous.h): a HELLO carries the worker's view of
// the job; a worker whose job differs gets FailedPrecondition naming the
// field and both values, and does not count as one of this job's workers.
//
// Liveness: any request or HEARTBEAT from a worker shows it alive. A worker
// silent for liveness.timeout_ms is dead (one that never spoke: counted
// from rendezvous.timeout_ms after the shard started): under policy fail every later
// request of any worker gets Aborted naming it; under drop it stops holding
// the minimum back until it speaks again (a restarted worker rejoins at the
// minimum clock). A HEARTBEAT with kFlagLeaving says goodbye.
//
// Clocks: a worker's clock moves only as the protocol moves it. A CLOCK of
// the clock the shard holds for the worker is the next one, a lower one is
// a repeat (acknowledged, no effect), and a higher one is refused; a
// resume may not move the clock either, and a PUSH or PULL may not carry a
// clock above it. Until the shard hears a worker's clock (after the shard
// started, the worker's HELLO, or when its requests come on a new
// connection: ZeroMQ may lose the middle of what a broken connection
// carried and deliver its queued tail first), the first clock may be up
// to EffectiveMaxResumeClocks(job) above the one held. A refused request
// gets an ERROR naming the worker and both clocks, and changes nothing.
//
// Results: a push whose result is not finite is refused, or applied and
// its table flagged (ServerOptions::on_non_finite_result).
//
// Recovery (DESIGN.md section 7): a shard restarted from a checkpoint
// learns where the workers are from their HEARTBEATs with kFlagResume (and
// CLOCKs), logs how many clocks of updates it lost, and acknowledges a push
// it already applied (same worker, session and request id: a client sending
// it again after its connection dropped) without applying it twice.
//
// Thread safety: Run() must be called from one thread; Stop() and
// stop_requested() are safe from any thread and from a signal handler.
#ifndef PS_SERVER_SHARD_SERVER_H_
#define PS_SERVER_SHARD_SERVER_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/env.h"
#include "common/metrics.h"
#include "common/metrics_endpoint.h"
#include "common/options.h"
#include "common/shard_stats.h"
#include "common/status.h"
#include "common/transport.h"
#include "common/wire.h"
#include "server/access.h"
#include "server/admission.h"
#include "server/checkpoint.h"
#include "server/checkpoint_trigger.h"
#include "server/clock_table.h"
#include "server/connection_limit.h"
#include "server/held_replies.h"
#include "server/hot_rows.h"
#include "server/push_policy.h"
#include "server/queued_replies.h"
#include "server/recent_pushes.h"
#include "server/replication.h"
#include "server/reshard_gate.h"
#include "server/waiting_requests.h"
#include "server/worker_registry.h"
#include "server/write_lease.h"
#include "store/shard_store.h"

namespace ps {

struct ShardServerCounters {
  uint64_t pushes = 0;
  uint64_t pulls = 0;
  uint64_t clocks = 0;        // CLOCK requests
  uint64_t pulls_waited = 0;  // pulls that had to wait for slower workers
  // Largest (pull clock - minimum clock) of a pull that had to wait: under
  // ssp s a worker blocks exactly when it is s + 1 clocks ahead.
  int64_t max_blocked_lead = 0;
  uint64_t errors = 0;     // requests answered with ERROR
  uint64_t bytes_in = 0;   // request bytes, all frames
  uint64_t bytes_out = 0;  // reply bytes, all frames
  uint64_t repeated_pushes = 0;  // pushes acknowledged but not applied again
  // consistency.backup_workers: pushes acknowledged and dropped, their
  // clock's update made of other workers' gradients.
  uint64_t late_pushes = 0;
  uint64_t resumes = 0;          // HEARTBEATs with kFlagResume
  uint64_t refused_clocks = 0;   // requests refused for a clock the protocol does not allow
  uint64_t refused_results = 0;  // pushes refused for a result that is not finite
  // Worker requests refused while fenced (replication.authority etcd: the
  // lease may have lapsed).
  uint64_t fenced_refusals = 0;
  // Replies ZeroMQ refused: the connection's queue was full
  // (server.socket_hwm) or the peer had gone.
  uint64_t replies_dropped = 0;
  // Pulls refused: over server.max_queued_reply_bytes, or over
  // server.max_waiting_pulls_per_worker.
  uint64_t pulls_refused_queued_bytes = 0;
  uint64_t pulls_refused_waiting = 0;
  // Rejected (undecodable) and refused requests not logged on a line of
  // their own: a peer's refusals of one kind are logged once per
  // kRefusalLogIntervalMs (server/access.h).
  uint64_t refusals_not_logged = 0;
  // consistency.aggregate: pushes refused for a clock the shard may not
  // hold a sum for (CheckSumClock).
  uint64_t refused_sum_clocks = 0;
  // consistency.aggregate: pushes that waited for the job's clock (ParkPush).
  uint64_t parked_pushes = 0;
};

class ShardServer {
 public:
  // Builds the store and binds tcp://<job.cluster.servers[shard]>, or
  // `bind_endpoint` when not empty (tests bind "tcp://127.0.0.1:*").
  // Unavailable when the address is in use; ResourceExhausted when the
  // tables do not fit in memory.
  // With job.checkpoint.dir set, opens the shard's checkpoint folder and
  // (checkpoint.restore) restores generation `restore_clock`, or the newest
  // when it is -1 (ShardRestorePoint, server/checkpoint_layout.h: its own,
  // or the parts of its rows of a generation another shard count wrote:
  // RestoreGeneration, server/restore.h); FailedPrecondition when a
  // generation was written for another model, NotFound for a
  // `restore_clock` that does not exist (listing those that do), DataLoss
  // for a corrupt one.
  // `env` (null: Env::Default()) measures liveness, pull deadlines, waits
  // and rates on its clock, makes the connections to the backups
  // (ChannelUse::kReplication), and holds the file system checkpoints are
  // written through (tests pass tests/util/test_env.h); it must outlive
  // the server. `checkpoint_stage_hook` (when set) is passed to
  // every checkpoint write as CheckpointWriteOptions::at_stage (ps_server's
  // crash-point test hook).
  // REQUIRES: job.Validate().ok(), shard < job.cluster.servers.size().
  static StatusOr<std::unique_ptr<ShardServer>> Create(
      const JobOptions& job, uint32_t shard, const std::string& bind_endpoint = "",
      int64_t restore_clock = -1, Env* env = nullptr,
      CheckpointStageHook checkpoint_stage_hook = nullptr);
  // The primary a promoted backup becomes (server/replication.h): the
  // backup's copy (values, optimizer state, clocks, recent pushes) as its
  // state, no restore, no backups of its own; binds the shard's address
  // (cluster.servers[shard], or `bind_endpoint`), trying for up to 2 s (of
  // env's clock) while the dead primary's port is still taken. Workers
  // reconnect there and send again what was not acknowledged.
  static StatusOr<std::unique_ptr<ShardServer>> CreatePromoted(
      const JobOptions& job, uint32_t shard, BackupServer::State state,
      const std::string& bind_endpoint = "", Env* env = nullptr);
  ~ShardServer();

  // Serves requests until a SHUTDOWN request, Stop(), or (with
  // server.exit_when_workers_leave) every worker has left or is dead.
  // Returns OK on a clean stop; Aborted naming the dead worker when the
  // workers are gone and one of them failed the job (policy fail); or the
  // transport error that ended the loop.
  Status Run();
  // Makes Run() return within ~100 ms. Async-signal-safe.
  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  // The shard map this shard serves in (server/reshard_gate.h): 0, the job
  // file's, unless the shard was started by a reshard (ps_server
  // --map-epoch). Call before Run().
  void SetMapEpoch(int64_t epoch);
  // True when Run() returned because the shard handed its rows over to
  // another server count (ps_server exits 3 then).
  bool handed_over() const { return reshard_->handed_over(); }
  // After Run() returned: writes the handover generation when the handover
  // left it for then (servers of the next map followed this shard's rows
  // in memory, and one of them binds this address: Run() closed the
  // socket first; ps_server closes its metrics port before it calls this).
  // OK when none was due; the write's error otherwise (logged).
  Status WriteDueHandover();
  // Makes Run() read the job's key files again soon (security.mode curve:
  // a rotated worker key). Async-signal-safe (ps_server calls it on SIGHUP).
  void ReloadKeys() { reload_keys_.store(true, std::memory_order_relaxed); }
  bool stop_requested() const { return stop_.load(std::memory_order_relaxed); }

  // The bound endpoint with its real port, e.g. "tcp://127.0.0.1:41234".
  const std::string& endpoint() const { return endpoint_; }
  uint32_t shard() const { return shard_; }
  // The membership epoch this primary serves at (replication.factor >= 2;
  // 0 otherwise): the epoch it was promoted at, or of the authority's last
  // change of its backups. Every reply carries it.
  int64_t epoch() const {
    return std::max({promoted_epoch_, replication_->epoch(),
                     write_lease_ != nullptr ? write_lease_->epoch() : int64_t{0}});
  }
  // replication.authority etcd: acknowledges writes, and answers PRIMARY as
  // serving, only while `lease` is valid (server/write_lease.h); fenced
  // otherwise. `lease` must outlive this. Call before Run().
  void SetWriteLease(const WriteLease* lease) { write_lease_ = lease; }
  // Its write lease (if any) may have lapsed: it accepts and acknowledges no write.
  bool Fenced() const { return write_lease_ != nullptr && !write_lease_->Valid(); }
  // REQUIRES: Run() is not running (tests read the final state).
  const ShardStore& store() const { return *store_; }
  const ShardServerCounters& counters() const { return counters_; }
  // REQUIRES: as store().
  const ClockTable& clocks() const { return clocks_; }
  const RecentPushes& recent_pushes() const { return recent_pushes_; }
  // REQUIRES: as store().
  size_t waiting_pulls() const { return waiting_.pulls(); }
  // Bytes of pull replies handed to ZeroMQ and not yet released, over every
  // connection (server.max_queued_reply_bytes). Safe from any thread.
  uint64_t queued_reply_bytes() const { return queued_replies_.total(); }
  // The server.max_queued_reply_bytes in force (0 in the job: derived from
  // the shard's size).
  uint64_t max_queued_reply_bytes() const { return max_queued_reply_bytes_; }
  bool worker_dead(uint32_t worker) const { return workers_.worker(worker).dead; }
  bool evaluator_dead() const { return workers_.evaluator().dead; }
  // Rounds of the loop's housekeeping (pull deadlines, liveness, rates), each
  // at the clock's time when it ran. Safe from any thread: after moving a
  // FakeClock, a test waits for two more rounds to know one saw the new time.
  uint64_t housekeeping_rounds() const { return rounds_.load(std::memory_order_acquire); }
  // Clocks of updates this shard lost: the most, over workers, between the
  // clock it started at (restored or 0) and the first clock it heard from
  // the worker (REQUIRES: as store()).
  int64_t lost_clocks() const { return lost_clocks_; }

  // Publishes the shard's metrics (server/shard_server_metrics.cc) to
  // `endpoint` every job.metrics.interval_ms while Run() runs, and once
  // more when it returns. `endpoint` must outlive Run(). Call before Run().
  void SetMetricsEndpoint(MetricsEndpoint* endpoint) { metrics_endpoint_ = endpoint; }
  // The metrics as Prometheus text (REQUIRES: on Run()'s thread, or Run()
  // not running).
  std::string MetricsText() const;
  // The shard's counters and state, as STATS reports them (REQUIRES: as
  // MetricsText()).
  ShardStats Stats() const;

  // Before Run(): `worker` already left the job (it finished while this
  // shard was down); it is not waited for and never reported dead.
  // REQUIRES: worker < the job's workers.
  void WorkerLeft(uint32_t worker);

 private:
  ShardServer(uint32_t shard, const JobOptions& job, Env* env);
  // Create and CreatePromoted (`promoted` null: a shard of its own).
  static StatusOr<std::unique_ptr<ShardServer>> CreateInternal(
      const JobOptions& job, uint32_t shard, const std::string& bind_endpoint,
      int64_t restore_clock, Env* env, CheckpointStageHook checkpoint_stage_hook,
      BackupServer::State* promoted);
  // The steps of CreateInternal: the shard's state (a promoted backup's
  // copy, or a new store restored from checkpoint.dir when asked); the
  // context, replication log, access control, admission and router socket;
  // and the bind (the job's address, a promoted backup's replica address,
  // or `bind_endpoint`).
  Status OpenState(int64_t restore_clock, BackupServer::State* promoted);
  Status OpenSocket(BackupServer::State* promoted);
  Status BindSocket(const std::string& bind_endpoint, BackupServer::State* promoted);
  // Handles one request and, while metrics are served, counts and times it
  // by its op (HandleRequest returns the op it decoded, kUnknown when it
  // decoded none).
  void Handle(std::vector<Frame>& frames);
  Op HandleRequest(std::vector<Frame>& frames);
  // Answers a request Admission refused (`first_frame`: its first frame
  // after `routing_id`), counting and logging it as the verdict says.
  void Refuse(Frame& routing_id, const Frame& first_frame, const MessageHeader& req,
              const Admission::Verdict& verdict);
  // Publishes MetricsText() when the interval has passed (`now`: always).
  void PublishMetrics(bool now);
  // The op's part of Handle, for a request that passed every check.
  void Dispatch(std::vector<Frame>& frames);
  // The op handlers Dispatch calls, each answering request_ (decoded from
  // `frames`, routing id first, or from `routing_id`'s message) with
  // `reply` (its ReplyHeader) or an error.
  // A PUSH, by the job's consistency mode (server/shard_server_push.cc).
  void HandlePush(std::vector<Frame>& frames, MessageHeader& reply);
  // A HEARTBEAT: a beat, a resume (kFlagResume) or a goodbye (kFlagLeaving).
  void HandleHeartbeat(Frame& routing_id, MessageHeader& reply);
  // A MEMBERSHIP change from the authority: a backup dropped or joining.
  void HandleMembership(Frame& routing_id, const MessageHeader& reply);
  // Resharding (server/reshard_gate.h, shard_server_reshard.cc): the gate's
  // verdict on a worker's request (true: handled there), one that did not
  // decode, a RESHARD request, the handover at the boundary.
  bool GateRequest(std::vector<Frame>& frames);
  bool GateUndecodable(std::vector<Frame>& frames);
  bool Gate(ReshardGate::Action action, const MessageHeader& request, std::vector<Frame>* frames);
  void HandleReshard(Frame& routing_id, MessageHeader& reply);
  // kReshardFollow: a server of the next map takes a copy and every change
  // after it (ReplicationLog::Follow).
  Status Follow(const MessageHeader& request);
  void Handover();
  // Writes the handover generation (the boundary clock's); on an error
  // logs it, sets exit_status_ and stops Run().
  Status WriteHandoverGeneration();
  int64_t MaxWorkerClock() const;
  // The routes of HandlePush (PushPolicy): a push sent again (acknowledged,
  // not applied twice; with `summed_into` >= 0 the reply waits for that
  // clock's sum, which holds the first copy); under aggregation, one
  // refused past LeadCeiling (`refused`); a push after its clock's quorum
  // (backup workers: acknowledged with kFlagLate and dropped); and the
  // apply of any other, acknowledged before it when its result is proven
  // finite.
  void AcknowledgeRepeat(Frame& routing_id, const MessageHeader& reply, int64_t summed_into);
  void RefuseSum(std::vector<Frame>& frames, const Status& refused);
  void DropLatePush(Frame& routing_id, MessageHeader& reply);
  void ApplyPushNow(Frame& routing_id, std::span<const Frame> body, const MessageHeader& reply);
  // Answers `pull` (decoded from `routing_id`'s message); `waited` is how
  // long it waited for slower workers (told to the client).
  void ServePull(Frame& routing_id, const Request& pull,
                 Clock::Duration waited = Clock::Duration::zero());
  // The minimum clock advanced: applies the finished clocks' sums
  // (aggregation), then answers every waiting pull it allows.
  void MinClockAdvanced();
  // Restores generation `point` at start (see Create); logs that there is
  // none for clock -1.
  Status RestoreCheckpoint(const RestorePoint& point);
  // A CHECKPOINT request: handed to the checkpoint trigger (an error
  // without checkpoint.dir).
  void HandleCheckpoint(Frame& routing_id, const MessageHeader& request);
  // The checkpoint trigger over checkpoints_, counting from the clock the
  // shard started at (restored, promoted or 0).
  void StartCheckpointTrigger();
  // Sends a CHECKPOINT request its answer (CheckpointTrigger's AnswerFn).
  void SendCheckpointAnswer(CheckpointTrigger::Answer& answer);
  // Answers every waiting pull the current minimum clock allows.
  void ReleaseWaitingPulls();
  // Answers DeadlineExceeded, naming the slowest worker, to every waiting
  // pull past its deadline (its max_wait_ms, at most server.max_pull_wait_ms),
  // and marks silent workers dead. Returns milliseconds until the next
  // deadline (at most `cap`).
  int Tick(int cap);
  // Parks a pull (the message in `frames`, decoded in request_) until the
  // minimum clock allows it, or refuses it over the worker's limit.
  void ParkPull(std::vector<Frame>& frames);
  // Whether pull `req` may be answered now: a worker's within the
  // staleness bound, the evaluator's once every worker finished the
  // clocks below the one it names.
  // (Once every worker has left, at once: the model is final.)
  bool PullReady(const MessageHeader& req) const {
    return req.worker == kEvaluatorWorker ? clocks_.min_clock() >= req.clock || workers_.AllGone()
                                          : clocks_.PullReady(req.clock, bound_);
  }
  // Takes waiting pull `seq` out of every index.
  // True when a line of this kind may be logged now (at most one a
  // second); *skipped: how many were not logged since the last one.
  void ExpireWaitingPulls(Clock::TimePoint now);
  void CheckLiveness(Clock::TimePoint now);
  // With server.exit_when_workers_leave, stops Run() once every worker has
  // left or is dead; under policy fail a dead worker failed the job and
  // Run() returns that error.
  void StopWhenWorkersGone();
  // `worker` spoke: it is alive (and rejoins if it was dropped or had left).
  void Touch(uint32_t worker);
  // The first CLOCK or resume this process hears from `worker`: it carries
  // clock `clock`; the worker's updates of clocks [started_clock_, clock)
  // never reached this process (a restart from a checkpoint lost them).
  void HeardClock(uint32_t worker, int64_t clock);
  // Logs, once per table, rows whose result was not finite since the last
  // call (ShardStore::non_finite_rows), saying what `what` did with them.
  void ReportNonFinite(const std::string& what);
  // Answers every waiting pull with `status`.
  void FailWaitingPulls(const Status& status);
  MessageHeader ReplyHeader(const MessageHeader& request) const;
  // The refusal of `request` (a request, or the reply it was to get) while
  // fenced: FailedPrecondition with kFlagNotPrimary.
  MessageHeader FencedError(const MessageHeader& request) const;
  // Sends [routing id][header] to the requester; inside a request that
  // changed state, with backups (held_.in_request()), only once every backup has
  // the log up to it (FlushDeferred).
  void Reply(Frame& routing_id, const MessageHeader& header);
  // Keeps the push in `frames` (decoded in request_) until the job's clock
  // reaches it, unanswered; ResourceExhausted to it past its connection's
  // server.max_waiting_pulls_per_worker or past max_queued_reply_bytes of
  // waiting pushes in all.
  void ParkPush(std::vector<Frame>& frames);
  // Dispatches, in arrival order, the parked pushes the job's clock has
  // reached (all of them once every worker is gone; once the job failed,
  // answers each with the failure). Not while a request is handled, but
  // after it (request_ is its), except to answer the failure.
  void ReplayParkedPushes();
  // Dispatch with the replies of a request that changed state held for the
  // backups (HandleRequest, ReplayParkedPushes).
  void DispatchHeldForBackups(std::vector<Frame>& frames, Op op);
  // Logs a request that was `kind` ("rejected": undecodable; "refused")
  // with `why`, at most once per kRefusalLogIntervalMs per peer (its key's
  // identity under curve, else its address) and kind; counts the rest.
  void LogRequestRefusal(const Frame& first_frame, const char* kind, const std::string& why);
  // Sends the deferred replies every backup has caught up with.
  void FlushDeferred();
  // Reads the backups' acknowledgements; false (Run() stops, exit_status_
  // says why) when a backup refused an entry.
  bool ReceiveReplicaAcks(const std::vector<bool>& readable, size_t first);
  // At the end of Run(): the backups' kEnd, and the last deferred replies
  // (waiting a bounded time for the backups).
  void EndReplication();
  // Sends reply_ (routing id, header, any value frames) as one message.
  void SendReply(const MessageHeader& header);
  // Stats()'s `limits` part.
  void StatsLimits(ShardStats& stats) const;

  const uint32_t shard_;
  const JobOptions job_;
  Env* const env_;
  const Clock* const clock_;  // env_'s
  const int64_t bound_;       // staleness bound of the job's consistency mode
  // What each consistency mode does with an admitted push.
  const PushPolicy push_policy_;
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<Context> context_;   // declared before socket_: destroyed after it
  std::unique_ptr<ShardAccess> access_;  // after context_: its ZAP handler goes first
  std::unique_ptr<Socket> socket_;
  // replication.factor >= 2: the log sent to the backups (inactive at 1).
  std::unique_ptr<ReplicationLog> replication_;
  // Replies held until the backups have the log up to the entry that made
  // them, and under replication after aggregation (replication.
  // after_aggregation under consistency.aggregate with backups) the replies
  // of pushes summed into a clock, until its sum is replicated.
  HeldReplies held_;
  // A held reply: `header` to `routing_id`.
  static HeldReplies::Held MakeHeld(Frame& routing_id, const MessageHeader& header);
  // Declared after socket_: destroyed before the socket it watches.
  std::unique_ptr<ConnectionMonitor> accept_monitor_;
  std::string endpoint_;
  RequestRules rules_;
  Request request_;            // reused across requests to keep its scratch buffers
  std::vector<Frame> reply_;   // reused across replies
  std::atomic<bool> stop_{false};
  std::atomic<bool> reload_keys_{false};
  std::atomic<uint64_t> rounds_{0};
  ShardServerCounters counters_;
  ClockTable clocks_;
  // Every worker's liveness and what its requests told (the evaluator's
  // too: heard, dead and left as a worker's, but it holds no clock; the
  // shard exits only after it, too, is gone).
  WorkerRegistry workers_;
  // Whether a request may be served (access, fencing, rendezvous, clocks);
  // made once access_ is (Create).
  std::unique_ptr<Admission> admission_;
  bool waiting_for_evaluator_logged_ = false;
  // Pulls waiting for slower workers, the evaluator's reads, and under
  // consistency.aggregate pushes for a clock above the job's clock + 1
  // (ParkPull, ParkPush, ReplayParkedPushes).
  WaitingRequests waiting_;
  bool replay_due_ = false;  // the job's clock moved: ReplayParkedPushes
  // Connections accepted and not closed, and those past
  // server.max_connections closed at once (made once access_ is: Create).
  std::unique_ptr<ConnectionLimit> connections_;
  // Replies not yet taken by the kernel (server.max_queued_reply_bytes).
  QueuedReplies queued_replies_;
  uint64_t max_queued_reply_bytes_ = 0;  // the limit in force
  // Once a second at most per kind: refused pulls, dropped replies,
  // expired pulls, late pushes.
  LogRateLimit refused_log_{*clock_, std::chrono::seconds(1)},
      dropped_log_{*clock_, std::chrono::seconds(1)},
      expired_log_{*clock_, std::chrono::seconds(1)}, late_log_{*clock_, std::chrono::seconds(1)};
  // Refused requests: once per kRefusalLogIntervalMs per peer and kind
  // (LogRequestRefusal).
  LogRateLimit request_log_{*clock_, std::chrono::milliseconds(kRefusalLogIntervalMs)};
  // Metrics (shard_server_metrics.cc): per request op its count, the
  // errors answered to it and the time spent handling it; how long each
  // pull that waited for slower workers waited.
  struct OpMetrics {
    uint64_t requests = 0;
    uint64_t errors = 0;
    Histogram seconds{Histogram::LatencyBounds()};
  };
  std::array<OpMetrics, OpMetricsSlots()> op_metrics_;
  Histogram staleness_wait_seconds_{Histogram::LatencyBounds()};
  HotRows hot_rows_;  // sparse pushes' rows, counted while metrics are served
  MetricsEndpoint* metrics_endpoint_ = nullptr;
  Clock::TimePoint metrics_published_{};
  Status failed_;  // set under policy fail once a worker died
  Status exit_status_;  // what Run() returns after StopWhenWorkersGone
  // Recovery: pushes applied lately, the clock this process started at, and
  // the updates lost.
  RecentPushes recent_pushes_;
  int64_t started_clock_ = 0;
  int64_t lost_clocks_ = 0;
  // A promoted backup (or a server that took its rows over from followers)
  // logs the first pull it serves (the end of a fail-over or a reshard, as
  // workers see it); false once logged or when neither.
  bool first_pull_to_log_ = false;
  int64_t promoted_epoch_ = 0;
  // Built from the old shards a reshard moved in memory: the handover
  // clock (BackupServer::State::handover_clock); -1 otherwise.
  int64_t took_over_at_ = -1;
  const WriteLease* write_lease_ = nullptr;  // null: ps_launch is the authority
  bool fenced_ = false;  // the write lease was seen lapsed (logged once per lapse)
  // Per table: whether rows whose result was not finite were logged.
  std::vector<bool> non_finite_logged_;
  // The job as the rendezvous compares it (EncodeAgreement).
  const std::string agreement_;
  std::unique_ptr<ReshardGate> reshard_;
  // Writes the gate holds until the handover (kHold): each request's
  // frames, its routing id first.
  std::vector<std::vector<Frame>> held_writes_;
  bool handover_write_due_ = false;  // see WriteDueHandover
  // Checkpoints (null without checkpoint.dir).
  std::unique_ptr<CheckpointDir> checkpoints_;
  CheckpointStageHook checkpoint_stage_hook_;  // set once by Create
  // When generations are written (null without checkpoint.dir); after
  // checkpoints_, so that its write finishes before the folder goes.
  std::unique_ptr<CheckpointTrigger> checkpoint_trigger_;
  // Request rates over the last full second (Tick samples the counters).
  Clock::TimePoint rate_sampled_;
  uint64_t rate_pushes_ = 0, rate_pulls_ = 0;  // counters at rate_sampled_
  double pushes_per_s_ = 0, pulls_per_s_ = 0;
  const Clock::TimePoint started_;
};

// "tcp://host:port" for a cluster.servers entry ("host:port" or "[v6]:port").
std::string TcpEndpoint(const std::string& host_port);

}  // namespace ps

#endif  // PS_SERVER_SHARD_SERVER_H_
