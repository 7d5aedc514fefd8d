// The worker-side client of the parameter servers: Push and Pull of table
// rows (by row id, or a whole dense table), split by key range and sent to
// the owning shards in parallel, many requests in flight at once.
//
// Operations are asynchronous. Each returns a Ticket at once; its requests
// complete while the owner calls Wait(), WaitAll() or Poll(), which also run
// the optional completion callbacks. Every request has a deadline
// (client.request_timeout_ms): a server that does not answer in time turns
// into DeadlineExceeded naming the server, never a hang.
//
// Recovery (DESIGN.md section 7): the client watches its connection to each
// server. When one drops (the server died), its requests wait up to
// liveness.server_down_timeout_ms for the server to come back (a launcher
// restarts it from its newest checkpoint); when the connection is made
// again, every request still unanswered is sent again, oldest first, and
// the worker tells the server its clock (a HEARTBEAT with kFlagResume). A
// request may therefore reach a server twice: requests carry this client's
// random session id, and a server applies a push with the same (worker,
// session, request id) at most once.
//
// Consistency (DESIGN.md section 5): the client keeps this worker's clock.
// Pulls carry it, and a shard answers them only within the job's staleness
// bound; Clock() reports the clock finished to every shard (after the pushes
// sent before it, which ZeroMQ delivers first) and advances it. Every pull
// reply is checked against the bound; a violation fails the pull with
// Internal (it would be a bug in the shard).
//
// Parts: a request is laid out over the shards by Partition
// (client/partition.h), its parts and tickets are kept by RequestTracker
// (client/request_tracker.h), each reply is checked by DecodeReply
// (common/wire.h) before any value is read, and messages travel through one
// Channel per shard (common/channel.h). The clock and the channels come from
// its Env (common/env.h), so tests run the client on a fake clock and
// through faulty channels.
//
// Thread safety: not thread-safe. One Client belongs to one thread (it
// drives its sockets from the caller's thread, so a reply is handled with no
// thread hop). Use one Client per thread.
#ifndef PS_CLIENT_CLIENT_H_
#define PS_CLIENT_CLIENT_H_

#include <chrono>
#include <optional>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/channel.h"
#include "client/hashed_residuals.h"
#include "client/heartbeat.h"
#include "client/id_dedup.h"
#include "client/param_cache.h"
#include "client/partition.h"
#include "client/request_tracker.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/options.h"
#include "common/shard_stats.h"
#include "common/status.h"
#include "common/transport.h"
#include "common/wire.h"

namespace ps {

// Float data shared with the transport without a copy: the client holds a
// reference until ZeroMQ has sent the bytes, so the caller may drop its own
// reference at any time. The contents must not change until the push's
// ticket completes.
class SharedFloats {
 public:
  SharedFloats() = default;
  // Shares `data[0..size)`, kept alive by `owner`.
  SharedFloats(std::shared_ptr<const void> owner, const float* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}
  // Takes the vector without copying its contents.
  static SharedFloats Take(std::vector<float>&& values);
  // Shares a vector the caller keeps using (e.g. refills after each Wait).
  static SharedFloats Of(std::shared_ptr<const std::vector<float>> values);

  const float* data() const { return data_; }
  size_t size() const { return size_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  // [offset, offset + count) of this buffer, sharing its owner.
  SharedFloats Slice(size_t offset, size_t count) const {
    return SharedFloats(owner_, data_ + offset, count);
  }

 private:
  std::shared_ptr<const void> owner_;
  const float* data_ = nullptr;
  size_t size_ = 0;
};

// The values of a pull, left in the buffers they arrived in: no copy. The
// pieces cover the requested rows exactly once, each a run of whole rows,
// in arrival order. Keep it alive while using the spans. Not thread-safe.
class PulledValues {
 public:
  // Number of floats the pull asked for (rows x dim).
  size_t size() const { return size_; }
  size_t num_pieces() const { return pieces_.size(); }
  // Position of piece i's first float in the pulled rows (row-major).
  uint64_t piece_offset(size_t i) const { return pieces_[i].offset; }
  std::span<const float> piece(size_t i) const {
    const Frame& f = pieces_[i].frame;
    return {reinterpret_cast<const float*>(f.data()), f.size() / sizeof(float)};
  }
  // Assembles the rows into out[0 .. size()).
  void CopyTo(float* out) const;

 private:
  friend class Client;
  struct Piece {
    uint64_t offset;
    Frame frame;
  };
  std::vector<Piece> pieces_;
  size_t size_ = 0;
};

struct ClientCounters {
  uint64_t requests = 0;       // per-shard requests sent
  uint64_t replies = 0;        // replies matched to a request
  uint64_t errors = 0;         // ERROR replies
  uint64_t timeouts = 0;       // requests that passed their deadline
  uint64_t late_replies = 0;   // replies to no request in flight (it timed out, or a copy): dropped
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t bound_violations = 0;  // pull replies older than the staleness bound (a bug)
  uint64_t cache_hits = 0;        // rows read from the parameter cache
  uint64_t cache_misses = 0;      // rows pulled from the shards (cache on)
  uint64_t cache_bytes_saved = 0; // value bytes the cache kept off the network
  uint64_t summed_rows = 0;       // hashed pushes: rows of repeated ids summed into one
  uint64_t distinct_pull_rows = 0;  // hashed pulls: rows of repeated ids pulled once
  // Hashed tables' 16-bit pushes: ids whose residual the worker let go at
  // its bound (client/hashed_residuals.h), each losing less than one
  // rounding step of its values.
  uint64_t residuals_dropped = 0;
  // Time pulls spent held back at the shards by the staleness bound
  // (waiting for slower workers), summed over pulls, microseconds.
  uint64_t staleness_wait_us = 0;
  uint64_t disconnects = 0;   // connections to a server that dropped
  uint64_t reconnects = 0;    // ... and were made again
  uint64_t resent = 0;        // requests sent again after a reconnect
  // Requests made while their shard's server was looked for (a dropped
  // connection, a new shard map): they waited, unsent, until it answered.
  uint64_t held = 0;
  uint64_t refusals = 0;      // handshakes a server refused (security.mode curve)
  // replication.factor >= 2: PRIMARY questions sent to a shard's replicas
  // while looking for its primary, and the moves to another replica.
  uint64_t probes = 0;
  uint64_t fail_overs = 0;
  // consistency.backup_workers: push requests (one per shard and part)
  // that came after their clock's quorum and were dropped, and the clocks
  // CatchUp() skipped.
  uint64_t late_pushes = 0;
  uint64_t clocks_skipped = 0;
  // Resharding: requests a shard answered moved (sent again under the
  // newer map), and the maps turned to.
  uint64_t moved = 0;
  uint64_t map_changes = 0;
};

// How long after a failed handshake, with none succeeding since, a client
// takes the server for one that speaks another security mode or key: a
// server that dies during a handshake (a crash, a fail-over) may fail it
// too, and the one that takes its place answers the next attempt. Under
// security.mode none only a protocol error counts (a CURVE server's
// mechanism): a handshake cut with none is a server going away, whose
// successor may take seconds to listen (a reshard's new server).
inline constexpr std::chrono::milliseconds kHandshakeRefusedAfter{500};

// A client whose connection to a shard's server dropped (or that a backup
// turned away, or whose job moved to a new shard map) asks the shard's
// replicas one at a time (without replicas, its one address), in ring
// order from the next one (after a new map, from replica 0), whether they
// serve (PRIMARY), and moves to the one that does at the newest epoch. A
// replica that connects and does not answer within kProbeTimeout is passed
// over, one whose address takes no connection within kProbeConnectTimeout
// (nothing listens there yet: a server still starting, restoring its
// rows); after a "not serving" answer, or a connection that drops, the
// next one is asked kProbeRetry later (a backup the authority is about to
// promote answers so first).
inline constexpr std::chrono::milliseconds kProbeTimeout{100};
inline constexpr std::chrono::milliseconds kProbeConnectTimeout{1000};
inline constexpr std::chrono::milliseconds kProbeRetry{10};

class Client {
 public:
  // Connects a channel (a DEALER) to every server of `job` (or to
  // `endpoints`, one "tcp://host:port" per shard, when not empty).
  // `worker` is this worker's rank, kControlWorker for a ControlClient
  // (client/control_client.h), which may only ask STATS, CHECKPOINT and
  // SHUTDOWN, or kEvaluatorWorker for the job's evaluator (cluster.evaluator),
  // which may pull, and Leave() when done. Connecting does not wait for the servers: a server that is
  // not up yet is reached when it starts, within the request deadline.
  // InvalidArgument for a rank outside the job or a wrong endpoint count.
  // `env` (null: Env::Default()) measures deadlines and how long a server
  // has been away on its clock, and makes the channels to each shard: the
  // client's (ChannelUse::kRequests) and its heartbeats' (kHeartbeats); it
  // must outlive the client.
  // REQUIRES: job.Validate().ok().
  static StatusOr<std::unique_ptr<Client>> Create(const JobOptions& job, uint32_t worker,
                                                  std::vector<std::string> endpoints = {},
                                                  Env* env = nullptr);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Pushes values (rows.size() x dim, row-major) for `rows` of `table`; each
  // server applies them with the table's update rule. Rows grouped by shard
  // (e.g. sorted) are sent without copying the values; otherwise they are
  // gathered per shard (one copy). A hashed table's id named more than
  // once is sent once with its rows summed (one update of the sum;
  // counters().summed_rows). InvalidArgument for an unknown table, a
  // row out of range or a size mismatch (nothing is sent).
  StatusOr<Ticket> Push(uint32_t table, std::span<const uint64_t> rows, SharedFloats values,
                        Callback done = nullptr);
  // Pushes the whole table (rows x dim values), each shard its slice, zero-copy.
  StatusOr<Ticket> PushDense(uint32_t table, SharedFloats values, Callback done = nullptr);
  // Pulls `rows` of `table` into out[0 .. rows.size()*dim), row-major in the
  // order of `rows`. `out` must stay valid until the ticket completes. A
  // hashed table's id named more than once is pulled once and its row
  // copied to each place (counters().distinct_pull_rows).
  StatusOr<Ticket> Pull(uint32_t table, std::span<const uint64_t> rows, float* out,
                        Callback done = nullptr);
  // Pulls the whole table into out[0 .. rows*dim).
  StatusOr<Ticket> PullDense(uint32_t table, float* out, Callback done = nullptr);
  // Pulls the whole table into *out without copying the received values
  // (e.g. to upload them to a GPU piece by piece). *out is cleared first and
  // must stay valid until the ticket completes.
  StatusOr<Ticket> PullDense(uint32_t table, PulledValues* out, Callback done = nullptr);

  // Reports this worker's current clock c as finished to every shard and
  // advances the clock to c + 1 (at once: later pulls carry c + 1). Pushes
  // issued before reach each shard before this report. The ticket completes
  // when every shard acknowledged. FailedPrecondition for a control client
  // (as Join and Leave).
  StatusOr<Ticket> Clock(Callback done = nullptr);
  // This worker's clock: the number of Clock() calls so far (or where
  // Join() resumed).
  int64_t clock() const { return clock_; }
  // consistency.backup_workers: a worker the job left behind continues at
  // the job's clock. When every shard's newest reply carries a clock past
  // this worker's, its clock becomes the smallest of them (a gradient of a
  // clock skipped would arrive late and be dropped); call it after a
  // step's pulls, whose values are of that clock or newer. Returns the
  // clock. Without backup workers it never changes the clock.
  int64_t CatchUp();
  // The evaluator's: later pulls are answered once every worker finished
  // the clocks below `clock` (the model of those clocks, and perhaps some
  // of the next). FailedPrecondition for a worker or control client.
  Status SetReadClock(int64_t clock);
  // The clock this worker trains to (train.iterations), told to the shards
  // with Join() so that `ps_ctl status` can show progress against it.
  void SetTargetClock(int64_t clock);

  // The start-up rendezvous (common/rendezvous.h): sends every shard this
  // worker's view of the job and waits up to rendezvous.timeout_ms for all
  // of them, then takes up the clock the shards hold for it: 0 in a new
  // job, the current minimum clock for a worker restarted after it was
  // dropped as dead (liveness.on_dead_worker: drop). Call once before
  // training. DeadlineExceeded naming every server (index and
  // cluster.servers entry) that did not answer in time; FailedPrecondition
  // from a server whose job differs, naming the field and both values.
  Status Join();
  // Tells every shard this worker is done: it is no longer waited for and
  // never reported dead. Stops the heartbeats. Call after the last push;
  // any later request makes the shards count the worker again.
  Status Leave();
  // The newest minimum clock a reply of `shard` carried.
  int64_t min_clock(uint32_t shard) const { return shards_[shard].min_clock; }

  // Waits until `ticket` completes; returns its status (the first error of
  // its per-shard requests). A ticket is consumed by Wait or by its
  // callback; waiting for an unknown or consumed ticket is InvalidArgument.
  Status Wait(Ticket ticket);
  // The error Wait(ticket) returns at once, without waiting: InvalidArgument
  // for an unknown or consumed ticket, FailedPrecondition for a push that
  // is acknowledged only after this worker's Clock(); OK otherwise. For a
  // caller that waits in slices (Poll and Done), letting other threads use
  // the client between them.
  Status CheckWait(Ticket ticket) const;
  // True when `ticket` completed (its status is Wait's to take), or is
  // unknown or consumed. Handles nothing: call Poll() to make progress.
  bool Done(Ticket ticket) const { return tracker_.Done(ticket); }
  // Waits for every outstanding ticket; returns the first error among those
  // without a callback (all of them are consumed).
  Status WaitAll();
  // Handles replies that arrive within `timeout_ms` (0: only those already
  // here) and expires requests past their deadline (without waiting when
  // one expired at once).
  Status Poll(int timeout_ms = 0);
  // Per-shard requests sent and not yet answered or expired.
  size_t in_flight() const { return tracker_.size(); }

  // Blocking conveniences.
  Status PushSync(uint32_t table, std::span<const uint64_t> rows, SharedFloats values);
  Status PullSync(uint32_t table, std::span<const uint64_t> rows, float* out);

  // The text report of a shard (STATS). InvalidArgument for a shard the
  // job does not have. (ControlClient asks the same as the control worker.)
  StatusOr<std::string> Stats(uint32_t shard);
  // The same report as numbers (STATS with kFlagStatsJson). Also
  // InvalidArgument when the reply does not read as one (a shard of
  // another version).
  StatusOr<ShardStats> StructuredStats(uint32_t shard);
  // Asks every shard to shut down; returns after all acknowledged.
  Status ShutdownServers();
  // Asks every shard to write a checkpoint of its current state now (the
  // write runs in the background; STATS shows when it is done). Returns
  // the generation each shard started ("<dir>/shard-<i>/gen-<clock>").
  // FailedPrecondition when the job has no checkpoint.dir.
  StatusOr<std::vector<std::string>> CheckpointServers();
  // MEMBERSHIP to the replica this client's channel `shard` reaches
  // (kMembershipPromote or kMembershipDropBackup with `backup`), at epoch
  // `epoch`. (ControlClient::Membership, for the authority.)
  Status Membership(uint32_t shard, uint32_t flags, uint32_t backup, int64_t epoch);
  // RESHARD to `shard` (a control client; server/reshard_gate.h): `flags`
  // kReshardPrepare, kReshardCommit or kReshardAbort of the handover at
  // `clock` to map `epoch` of `servers` (comma-separated host:port). The
  // reply's clock is the highest worker clock the shard has seen.
  StatusOr<MessageHeader> Reshard(uint32_t shard, uint32_t flags, int64_t clock, int64_t epoch,
                                  const std::string& servers);

  // The servers of the shard map this client routes by.
  uint32_t num_shards() const { return map_size_; }
  // That map's epoch (server/reshard_gate.h): 0, the job file's servers,
  // until a shard answers a request kFlagMoved, naming the servers a
  // reshard moved the job onto. The client then routes by that map, and
  // sends each moved request again under it (split anew over its servers:
  // none of a moved request was applied).
  int64_t map_epoch() const { return map_epoch_; }
  const std::string& endpoint(uint32_t shard) const { return shards_[shard].endpoint; }
  // A snapshot of the counters.
  ClientCounters counters() const;

 private:
  struct Shard {
    std::string endpoint;
    std::unique_ptr<Channel> channel;
    int64_t min_clock = 0;
    bool connected_once = false;  // a connection was made at least once
    bool down = false;            // the connection dropped and is not back yet
    bool closing = false;         // it acknowledged SHUTDOWN or this worker's goodbye
    bool refused = false;         // it refused this client's key (logged once)
    // A handshake failed at this time and none succeeded since (see
    // kHandshakeRefusedAfter); nullopt otherwise.
    std::optional<ps::Clock::TimePoint> handshake_failed_at;
    // Under security.mode none: connections closed during the handshake
    // since the last one that succeeded (a server that exits, or one that
    // speaks CurveZMQ and closed before its greeting said so); named when
    // a request to it times out.
    uint32_t handshake_cuts = 0;
    ps::Clock::TimePoint down_since;
    // replication.factor >= 2: every replica's endpoint (ReplicaAddress,
    // replica 0 first); empty otherwise, or when the caller named the
    // endpoints. `channel` reaches replicas[replica].
    std::vector<std::string> replicas;
    uint32_t replica = 0;
    int64_t epoch = 0;  // the newest epoch a serving replica answered at
    // Looking for the primary (kProbeTimeout): PRIMARY request probe_id is
    // out (0: none); the next replica is asked at probe_next_at. Meanwhile
    // requests wait in the tracker (Part::held), unsent, and go to the
    // server that answers after those sent before them, in the order they
    // were made: one sent sooner could reach it before those it follows
    // (lost with the old connection, sent again only then), or reach a
    // process of an older shard map still at the address.
    bool probing = false;
    uint64_t probe_id = 0;
    // The replica asked answered as a server of an older shard map: it is
    // asked again, not the next one.
    bool probe_same = false;
    ps::Clock::TimePoint probe_next_at;
    // The channel was made anew for a replica (Probe) and has not connected
    // yet: its first connection is no reconnect (the probe's answer decides).
    bool awaiting_first_connect = false;
    // It is looked for because the job moved to a new shard map (SwitchMap).
    bool new_map = false;
  };
  // One Push or Pull as the caller asked for it.
  struct Call {
    Op op = Op::kUnknown;
    uint32_t table = 0;
    std::span<const uint64_t> rows = {};  // sparse: the row ids
    bool dense = false;              // the whole table
    const SharedFloats* values = nullptr;  // PUSH
    float* out = nullptr;                  // PULL into a buffer
    PulledValues* view = nullptr;          // PULL into a PulledValues
    // PULL (may be empty): row i of `rows` lands at out + out_index[i] * dim
    // instead of out + i * dim.
    std::span<const uint64_t> out_index = {};
  };
  Client(const JobOptions& job, uint32_t worker, Env* env);
  // A request channel to shard `s` at `endpoint`.
  StatusOr<std::unique_ptr<Channel>> Connect(uint32_t s, const std::string& endpoint);
  // FailedPrecondition when this is a control client: `call` is for
  // workers only.
  Status WorkerOnly(std::string_view call) const;
  Status CheckTable(uint32_t table) const;
  Status CheckRows(Op op, uint32_t table, std::span<const uint64_t> rows) const;
  // Splits a call into parts (Partition) and sends them.
  // `finish`: NewTicket's.
  StatusOr<Ticket> Issue(const Call& call, Callback done, Callback finish = nullptr);
  // Pull() of rows named once each (or of a range table), `finish` run when
  // it completes.
  StatusOr<Ticket> PullRows(uint32_t table, std::span<const uint64_t> rows, float* out,
                            Callback done, Callback finish);
  // Builds and sends the frames of one part of `call`.
  void SendSpec(Ticket ticket, const Call& call, const PartSpec& spec);
  // The index in the call's rows (and values) of the part's row x.
  static uint64_t RowIndex(const PartSpec& spec, uint64_t x);
  // The values frame of one part of a push to a table whose wire.push is
  // 16-bit: each value plus its row's residual, rounded, and the residual
  // kept (error feedback, common/wire_floats.h; a hashed table's by id,
  // client/hashed_residuals.h); the cached rows get the rounded values.
  // OutOfRange for a value beyond binary16's range.
  StatusOr<Frame> EncodePush(const Call& call, const PartSpec& spec);
  // Copies one row of `dim` floats. One float a row is the common sparse
  // case (a weight per feature), where a memcpy of a size known only at
  // run time would be a library call per value.
  static void CopyRow(const float* from, uint32_t dim, float* to) {
    if (dim == 1) {
      *to = *from;
    } else {
      std::memcpy(to, from, dim * sizeof(float));
    }
  }
  // A ticket with nothing to send: completes at once.
  Ticket CompletedTicket(Callback done, Callback finish = nullptr);
  // Sends one part with its keys and values frames (either may be empty),
  // after waiting for a free slot to its shard; on failure records the
  // error on the ticket. Returns its request id, 0 if not sent. Takes the
  // part and frames by reference to what the caller gives up: each move of
  // a part or a frame is a libzmq call on the path of every request.
  uint64_t SendPart(Part&& part, Frame&& keys, Frame&& values);
  // SendPart without waiting for a slot.
  uint64_t SendPartNow(Part&& part, Frame&& keys, Frame&& values);
  // Sends `part` with header `h` (its request id filled in here), tracks it
  // and returns its request id (0 when it could not be sent: the ticket
  // holds the error). `cacheable`: a pull's reply may fill the cache.
  uint64_t SendWithHeader(Part&& part, MessageHeader& h, Frame&& keys, Frame&& values,
                          bool cacheable);
  // Resharding (client_reshard.cc): routes by map `epoch` of `servers`
  // (comma-separated host:port) from now on, unless it is no newer than
  // map_epoch(); an error when the list is not one.
  Status SwitchMap(int64_t epoch, const std::string& servers);
  // Sends the moved part `request_id` again under the current map.
  void ResendMoved(uint64_t request_id);
  // Every message waiting on the channel of `shard`.
  Status ReceiveReplies(uint32_t shard);
  // The connection events of the channel of `shard`.
  Status HandleConnectionEvents(uint32_t shard);
  // The handshake with `shard` failed (`event`): every request in flight
  // to it fails with PermissionDenied saying which key to check.
  void RefusedBy(uint32_t shard, ConnectionEvent event);
  // Why a request to `shard` may have gone unanswered when its connections
  // were closed during their handshakes (handshake_cuts > 0).
  static std::string HandshakeCuts(const Shard& shard);
  // The connection to `shard` is back: sends its unanswered requests again
  // (those held for the first time), oldest first, and this worker's clock.
  void Reconnected(uint32_t shard);
  // The address Probe asks at: the shard's replica `replica`, or its one
  // server when it has no replicas.
  const std::string& ProbeEndpoint(const Shard& shard, uint32_t replica) const {
    return shard.replicas.empty() ? shard.endpoint : shard.replicas[replica];
  }
  // How many addresses Probe goes round: 1 without replicas.
  static uint32_t ProbeRing(const Shard& shard) {
    return shard.replicas.empty() ? 1u : static_cast<uint32_t>(shard.replicas.size());
  }
  // Starts looking for the server of `shard` (see kProbeTimeout), from the
  // replica after the one it reached.
  void FindPrimary(uint32_t shard);
  // Starts looking for it from replica `replica` (LookFor(s, 0): a new
  // shard map's first).
  void LookFor(uint32_t shard, uint32_t replica);
  // Makes the channel of `shard` reach replica `replica` and asks it
  // PRIMARY.
  Status Probe(uint32_t shard, uint32_t replica);
  // An answer on the channel of a shard being probed.
  void HandleProbeReply(uint32_t shard, std::span<Frame> frames);
  // Asks the next replica when the probe's time is up; lowers *timeout_ms
  // to when that is.
  void AdvanceProbes(int* timeout_ms);
  // Forgets a part and completes it with `status` on its ticket.
  void FinishPart(uint64_t request_id, const Status& status);
  // Checks a reply (DecodeReply) and completes the part it answers.
  void HandleReply(uint32_t shard, std::span<Frame> frames);
  // Copies, scatters or keeps a checked PULL_OK reply's values (a 16-bit
  // reply converted to float32 first). ResourceExhausted when the
  // conversion's memory cannot be had.
  Status DeliverPull(Part& part, Reply& reply);
  // Ends the parts past their deadline; returns how many ended.
  size_t ExpireDeadlines();
  double MillisSince(ps::Clock::TimePoint t) const;
  Status WaitUntilSlot(uint32_t shard);
  // Sends a control request (STATS, SHUTDOWN) to `shard` and waits for its reply header.
  // (MEMBERSHIP: `replica` the backup, `epoch` the new epoch.)
  StatusOr<MessageHeader> Control(uint32_t shard, Op op, uint32_t flags = 0, uint32_t replica = 0,
                                  int64_t epoch = 0);
  // Control in two halves, to have requests to several shards in flight:
  // sends one (returns its ticket and request id, 0 when it could not be
  // sent: the ticket then holds the error) ...
  std::pair<Ticket, uint64_t> SendControl(uint32_t shard, Op op, uint32_t flags = 0,
                                          uint32_t replica = 0, int64_t epoch = 0);
  // ... and waits for its reply header.
  StatusOr<MessageHeader> AwaitControl(Ticket ticket, uint64_t rid);
  std::string Describe(const Part& part, uint64_t request_id) const;

  const JobOptions job_;
  const uint32_t worker_;
  // This is the control worker (kControlWorker): no clock, no heartbeats,
  // no clock sent after a reconnect, only control requests. The only
  // differences from a worker, each decided on this flag.
  const bool control_;
  // This is the evaluator (kEvaluatorWorker): it pulls at the clock it sets
  // (SetReadClock), beats and says goodbye; no push, clock, rendezvous or
  // cache, no clock sent after a reconnect.
  const bool reader_;
  int64_t target_clock_ = 0;  // SetTargetClock
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds down_timeout_;  // liveness.server_down_timeout_ms
  const int64_t bound_;  // staleness bound of the job's consistency mode (none: the evaluator)
  const PartLimits limits_;
  const uint64_t session_;  // random, non-zero: names this client's requests
  const std::string agreement_;  // the job as the rendezvous compares it (HELLO)
  Env* const env_;
  const ps::Clock* const time_;  // env_'s clock: deadlines and waits are measured on it
  int64_t clock_ = 0;            // this worker's clock
  // The shard map: its epoch and its servers, shards_[0 .. map_size_).
  // Entries past map_size_ are servers a reshard left out, kept while
  // requests sent there may still be answered (moved).
  int64_t map_epoch_ = 0;
  uint32_t map_size_ = 0;

  std::unique_ptr<ParamCache> cache_;  // null: cache off, or asp
  // Error feedback of 16-bit pushes: per range table, rows x dim
  // residuals, allocated at its first such push (empty otherwise) ...
  std::vector<std::vector<float>> residuals_;
  // ... and per hashed table, the residuals of the ids it pushed lately,
  // made at its first such push (null otherwise).
  std::vector<std::unique_ptr<HashedResiduals>> hashed_residuals_;
  // EncodePush's scratch, kept between pushes: a sparse push's gathered
  // values and residuals (then the values sent, for the cache), where each
  // row's residual is kept (null: nowhere), and row ids.
  std::vector<float> push_values_, push_residuals_;
  std::vector<float*> push_kept_;
  // Push: a hashed table's ids once each (client/id_dedup.h).
  IdDedup dedup_;
  std::vector<uint64_t> unique_ids_;
  std::vector<uint64_t> push_rows_;
  std::unique_ptr<HeartbeatSender> heartbeat_;  // null: heartbeats off, or a control client
  std::unique_ptr<Context> context_;
  CurveOptions curve_;      // this client's keys under security.mode curve
  std::vector<Shard> shards_;
  std::vector<Socket*> poll_sockets_;  // every channel's messages, then every one's events
  std::vector<bool> readable_;
  std::vector<Frame> frames_;

  uint64_t next_request_id_ = 1;
  RequestTracker tracker_;
  // Pushes are acknowledged only when their clock ends (replication after
  // aggregation): waiting for one before Clock() is refused (CheckPushWait).
  const bool pushes_wait_for_clock_;
  Status CheckPushWait(Ticket ticket) const;
  // Kept between calls so that splitting a request allocates nothing; a
  // call issued from a callback while another is being sent gets its own.
  Partition partition_;
  ReplyLookup expectation_;  // what the part a reply answers asked for
  std::unordered_map<uint64_t, MessageHeader> control_replies_;
  ClientCounters counters_;
};

}  // namespace ps

#endif  // PS_CLIENT_CLIENT_H_
