// Replicated shards (DESIGN.md section 13): the primary's replication log
// and the backups that apply it.
//
// With replication.factor k >= 2, the rows of shard i have k copies,
// replicas 0..k-1, each a ps_server --shard i --replica j that always
// listens at ReplicaAddress(job, i, j) (replica 0 at cluster.servers[i]):
// one of them is the primary (a ShardServer; replica 0 at the start) and
// the others are backups (a BackupServer each).
// Primary-backup, not a chain: the primary already puts every request of
// its rows in one order (it alone serves the range), it sends each change
// to every backup at once (one round trip for any k, where a chain takes
// k - 1 hops), and reads stay at the primary, which holds the clocks and
// the staleness bound.
//
// The log is the primary's changes of state, in the order it made them,
// each an entry with a sequence number (1, 2, ...):
//   kPush        a worker's PUSH, its frames forwarded as received (no
//                copy), applied at the minimum clock the primary used;
//   kAccumulate  the same, added into the sum of a clock (bsp aggregate);
//   kApplySums   the sums of every clock below `clock` applied, as the mean
//                over `count` workers;
//   kAggregate   the same with the sums themselves, as the primary added
//                them (replication.after_aggregation: the clock's pushes
//                are not sent one by one), and the ids of their pushes;
//   kLate        a worker's push dropped for coming after its clock's
//                quorum (consistency.backup_workers): its ids only;
//   kFinish, kExclude, kInclude
//                a worker's clock, a worker left out of the minimum (it
//                left or is dead) or counted again;
//   kEnd         the primary stops (its workers are gone, or it handed its
//                rows over to another shard map: `map_epoch` that map,
//                `clock` the handover clock): the backup exits.
// A backup applies them in order with the same code and arithmetic as the
// primary, so the replicas hold the same values, optimizer state, clocks
// and recent pushes bit for bit (ShardStore::Checksum shows it), and
// answers each with REPLICATE_OK and its number (a push once it is
// checked, before its apply: the next entry is read only after it). The primary sends a
// worker the reply to a request that changed state (PUSH, CLOCK, a
// resume, a goodbye) only when every backup has acknowledged every entry
// up to it (ReplicationLog::committed), so an acknowledged push is on
// every replica that is in sync. Pulls do not wait.
//
// A backup serves no worker (a worker's request gets FailedPrecondition
// naming the primary). One authority decides the replicas of a shard, with
// MEMBERSHIP requests at a new epoch each (ps_launch, on one host): when
// the primary dies it promotes a live backup, which stops taking entries,
// hands its copy to a ShardServer (ShardServer::CreatePromoted) and binds
// its own address again; each worker's client, whose connection to the
// old primary dropped, asks the shard's replicas in ring order whether
// they serve (PRIMARY: a backup answers no, a primary yes with its epoch,
// which every reply of a primary carries), and sends what was not
// acknowledged to the one that serves at the newest epoch (pushes the
// backup already has are recognised by its recent pushes and not applied
// twice); a worker request that reaches a backup is refused with
// kFlagNotPrimary, which sends the client looking too. When a
// backup dies the primary is told to stop waiting for it (Drop). A
// promoted primary starts with no backups of its own (they rejoin, below).
// An old primary still alive gets ERROR for its next entry from the
// promoted replica (it no longer takes REPLICATE) and stops: it can
// acknowledge nothing more. Every entry carries its primary's epoch, and a
// backup refuses an entry of an older epoch than one it has followed (its
// sender was fenced out by a membership change), saying so.
//
// A replica that died comes back at its own address as a backup
// (ps_server --replica j --join, j = 0 too): the authority tells the
// primary (kMembershipAddBackup), which
// sends it a copy of its state as of its last entry while it goes on
// serving (the store's blocks shared with the transport, copy-on-write
// against later pushes), then every later entry. The new backup counts
// toward committed() once it applied the whole copy; until then pushes do
// not wait for it. The primary acknowledged entries past the copy while
// it took it, which reach it only after the copy: it is in sync (holds
// every acknowledged push, kInSync) once it acknowledged all of them, and
// only a backup in sync can be promoted (Kafka's in-sync replicas). A
// shard whose primary dies while its only backup catches up has no
// replica to take over: its authority stops it, saying so, and the job
// goes back to a checkpoint instead of losing acknowledged pushes
// silently.
//
// Under consistency.aggregate with replication.after_aggregation (not
// the default) the backups get no worker's push: the primary sums a clock's
// pushes, and when it applies the sums it sends them once, with the ids of
// their pushes (kAggregate), so a backup applies the same update and knows
// those pushes as applied. A push into a sum is acknowledged once that
// entry is on every backup; until then it is only on the primary, and a
// worker whose primary dies sends it again to the promoted backup, which
// applies it once. A joining backup's copy then holds no sums and none of
// their pushes' ids: they come with the kAggregate entry. The clocks go to
// the backups as they come, so a primary that dies between a clock's last
// CLOCK and its kAggregate leaves a backup past that clock without its
// sums: the pushes sent again land in the next clock's sum (the promoted
// primary replicates a push of a clock already applied on its own, as
// without aggregation, so that no push waits for a Clock() its worker
// sends only once the push is acknowledged). None is lost or doubled; the
// dead primary's last clock may be applied one clock late. A hashed
// table's sum goes as its ids and rows, in the order its pushes first
// named them, which its apply follows (and with it eviction); its
// admission counts (admit) count the pushes, which the backups do not get:
// theirs stay those they started with or copied.
//
// The authority is ps_launch on one host (tools/launcher.cc), or etcd
// with replication.authority etcd (server/etcd_authority.h), which takes
// the same decisions from each ps_server and hands them to its server with
// the same MEMBERSHIP requests; there a primary also acknowledges writes
// only under its etcd lease (server/write_lease.h). Not built yet:
// CurveZMQ between servers.
#ifndef PS_SERVER_REPLICATION_H_
#define PS_SERVER_REPLICATION_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/channel.h"
#include "common/env.h"
#include "common/options.h"
#include "common/shard_stats.h"
#include "common/status.h"
#include "common/transport.h"
#include "common/wire.h"
#include "server/clock_table.h"
#include "server/recent_pushes.h"
#include "store/shard_store.h"

namespace ps {

// The kind of a log entry: the `flags` of its REPLICATE header.
enum class ReplicaEntry : uint32_t {
  kPush = 1,
  kAccumulate = 2,
  kApplySums = 3,
  kFinish = 4,
  kExclude = 5,
  kInclude = 6,
  kEnd = 7,
  // A copy of the primary's state for a backup that joins (Join), all
  // carrying the sequence number of the last entry the copy holds:
  kCopyRows = 8,    // one block of rows: table, first_row, count; frames:
                    // the values, then each optimizer state array
  kCopySum = 9,     // a sum of synchronous aggregation: table, clock,
                    // count; frames as ShardStore::CopySums gives them (a
                    // range table's values and one byte per block, touched;
                    // a hashed table's count ids and count rows)
  kCopyClocks = 10, // frame: ClockTable::Encode (int64 each)
  kCopyRecent = 11, // frame: RecentPushes::Encode (uint64 each)
  kCopyEnd = 12,    // the copy is whole: count = its kCopyRows, kCopyIds,
                    // kCopySketch and kCopySum entries
  // Replication after aggregation: kApplySums with the sums. Frames: the
  // ids of the pushes in them (worker, session, request id: uint64 each),
  // the sums' clocks, tables and counts (int64 triples), then each sum's
  // two frames (ShardStore::CopySums).
  kAggregate = 13,
  // A push found late (consistency.backup_workers): worker, clock, and
  // the push's session in session and its request id in count; no frames.
  // Dropped, its id recorded.
  kLate = 14,
  // To one backup that joined, once it acknowledged every entry the
  // primary may have acknowledged to a worker while it took its copy:
  // it holds every acknowledged push (in sync) and may be promoted. Not
  // numbered: its request_id is the last entry sent before it, which the
  // backup has applied when it reads this. Not acknowledged.
  kInSync = 15,
  // A copy's rows of a hashed table (after kCopyRows, before kCopyEnd):
  // table, first_row (the chunk's first row among the table's rows in the
  // copy: chunks come in order from 0), count; frames: the ids (u64
  // each), then the rows (count x (1 + slots) x dim floats, each row its
  // values, then each optimizer state array). Counted with the kCopyRows
  // entries in kCopyEnd's count.
  kCopyIds = 16,
  // A copy's admission sketch of a hashed table (admit): table; frame: its
  // counters (PushSketch::Data). Counted like kCopyIds.
  kCopySketch = 17,
  // A worker's PUSH to a hashed table that the primary refused for a
  // result that is not finite (server.on_non_finite_result: refuse), as
  // kPush: its admission counts, its rows' uses and the rows evicted to
  // make room for it stay (HashedRows::Apply), so the backup applies it
  // too and must refuse it alike. Not recorded as a push applied: the
  // worker may send it again.
  kRefusedPush = 18,
  // The first entry of a copy (Join), before its rows: a joining backup
  // takes the copy entries of this entry's epoch only. Entries of a copy
  // whose beginning it never got were sent to an earlier process at its
  // address (ZeroMQ delivers what that connection had queued to whoever
  // listens there next): it refuses them, holding nothing, and waits for
  // a copy of its own. session: the incarnation of the replica's process
  // the copy is for (0: any; BackupServer::SetIncarnation). Answered only
  // when refused; not counted in kCopyEnd's count.
  kCopyBegin = 19,
};

// True for the kinds of a joining backup's copy.
inline bool IsCopyEntry(uint32_t kind) {
  return (kind >= static_cast<uint32_t>(ReplicaEntry::kCopyRows) &&
          kind <= static_cast<uint32_t>(ReplicaEntry::kCopyEnd)) ||
         kind == static_cast<uint32_t>(ReplicaEntry::kCopyIds) ||
         kind == static_cast<uint32_t>(ReplicaEntry::kCopySketch) ||
         kind == static_cast<uint32_t>(ReplicaEntry::kCopyBegin);
}

// "backup 1 of shard 0 (127.0.0.1:8001)": a replica in messages.
std::string ReplicaName(const JobOptions& job, uint32_t shard, uint32_t replica);

// Each table's ShardStore::Checksum: the primary's and the backups' STATS
// show them, so equal checksums mean equal copies.
std::vector<ShardStats::Checksum> Checksums(const ShardStore& store);

// The primary's side: one DEALER per backup, the entries sent, and what
// every backup has acknowledged. Inactive (no backups, everything at once
// committed) under replication.factor 1.
class ReplicationLog {
 public:
  // Connects to every other replica of `shard` than `self`, the one this
  // primary is (they may start later: ZeroMQ keeps the entries until they
  // connect), or to none when `no_backups` (a promoted backup: the others
  // do not hold its log). Its channels come from `env`
  // (ChannelUse::kReplication). `context` and `env` must outlive this.
  static StatusOr<std::unique_ptr<ReplicationLog>> Create(const JobOptions& job, uint32_t shard,
                                                          Context* context, Env* env,
                                                          bool no_backups = false,
                                                          uint32_t self = 0);

  bool active() const { return !backups_.empty(); }

  // Appends an entry and sends it to every backup. `request` is a worker's
  // PUSH as it arrived (the frames after the routing id; shared, not
  // copied); `clock` is the minimum clock it was applied at (kPush) or the
  // clock whose sum it joined (kAccumulate).
  void Push(std::span<const Frame> request, int64_t clock, bool accumulate);
  // A push the store refused at `clock` that still changed it (kRefusedPush).
  void RefusedPush(std::span<const Frame> request, int64_t clock);
  // With `sums` (replication.after_aggregation), the entry carries the
  // sums of every clock below `below` in `sums` (copied before they are
  // applied) and `pushes`, the ids of the pushes in them (worker, session,
  // request id each).
  void ApplySums(int64_t below, uint32_t workers, const ShardStore* sums = nullptr,
                 std::span<const uint64_t> pushes = {});
  void Finish(uint32_t worker, int64_t finished);
  void Late(uint32_t worker, int64_t clock, uint64_t session, uint64_t request_id);
  void Exclude(uint32_t worker);
  void Include(uint32_t worker);
  // `handed_over_to` >= 1: the shard handed its rows over to that map at
  // `clock` (ps_ctl reshard), and its backups exit as it does. Once: a
  // second call sends nothing.
  void End(int64_t handed_over_to = 0, int64_t clock = 0);

  // Sequence number of the last entry (0: none yet).
  uint64_t last_seq() const { return last_seq_; }
  // The highest sequence number every backup has acknowledged (last_seq()
  // when inactive).
  uint64_t committed() const;
  // The highest committed() ever returned: every worker's reply the
  // primary released is at or below it.
  uint64_t acknowledged() const { return acknowledged_; }

  // The backups' sockets, polled beside the shard's own.
  const std::vector<Socket*>& sockets() const { return sockets_; }
  // Backup `b`'s channel holds acknowledgements of its own, to be read
  // whether or not its socket is readable.
  bool HasBuffered(size_t b) const { return backups_[b].channel->HasBuffered(); }
  bool AnyBuffered() const;
  // Reads the acknowledgements that arrived on backup `b`'s socket.
  // DataLoss naming the backup when it refused an entry (it missed one:
  // its copy is no longer the primary's). A joining backup that refuses
  // its copy is dropped instead (logged; sockets() changes).
  Status ReceiveAcks(size_t b);

  // The authority's word that backup `replica` is gone (epoch `epoch`):
  // the log stops waiting for it. NotFound when it is not one of this
  // log's backups; FailedPrecondition for an epoch below the current one.
  Status Drop(uint32_t replica, int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // The authority's word that backup `replica` (re)joins at epoch
  // `epoch`: connects to it and sends it a copy of the shard's state as of
  // the last entry (the store's blocks shared, not copied; the sums not
  // applied yet, a hashed table's by id, unless `copy_sums` is false; the
  // clocks and `recent`, the pushes the backups
  // hold), then every later entry as to the others. Pushes do
  // not wait for it until it has applied the whole copy (joined, in
  // Describe); then they do. FailedPrecondition for an epoch below the
  // current one or when `replica` is a backup of this log.
  // `incarnation` (0: any) names the replica's process the copy is for
  // (kCopyBegin's session): another process there refuses it.
  Status Join(uint32_t replica, int64_t epoch, ShardStore* store, const ClockTable& clocks,
              const RecentPushes& recent, bool copy_sums = true, uint64_t incarnation = 0);

  // A server of the next shard map (ps_ctl reshard, server/reshard_follower.h)
  // listening at `endpoint` ("tcp://host:port"; `name` says which, in
  // messages) follows this shard: it is sent the copy a joining backup
  // gets (as Join's `copy_sums`), then every later entry up to kEnd at the
  // handover (End). A follower holds no reply back (committed() leaves it
  // out), is no replica of this shard (not in Stats(), never promoted),
  // and one that refuses an entry is sent nothing more (logged): the
  // server of the next map then starts from the handover generation.
  // FailedPrecondition when `name` follows already.
  Status Follow(const std::string& endpoint, const std::string& name, ShardStore* store,
                const ClockTable& clocks, const RecentPushes& recent, bool copy_sums);
  // The handover was aborted: the followers are sent nothing more.
  void DropFollowers();
  // The followers; `with_copy`: those that applied their whole copy.
  size_t followers(bool with_copy = false) const;

  // The log's part of STATS: each backup "acked", "copying" (it takes its
  // copy) or "catching_up" (it took it and is not in sync yet).
  ShardStats::Replication Stats() const;
  // Stats() as its STATS line: "replication factor 2 epoch E last_seq N
  // committed N backup_1_acked N ...".
  std::string Describe() const { return ReplicationText(Stats()); }

 private:
  struct Backup {
    std::unique_ptr<Channel> channel;
    uint32_t replica = 0;
    std::string name;  // ReplicaName
    uint64_t acked = 0;
    // Joining: it applies a copy first (Join) and holds no push back
    // until it acknowledged the copy's end.
    bool copying = false;
    // It holds every entry the primary acknowledged (a backup from the
    // start; one that joined once acked >= must_hold).
    bool in_sync = true;
    // Joined: the highest entry the primary may have acknowledged to a
    // worker before this backup counted toward committed().
    uint64_t must_hold = 0;
    bool follower = false;  // a server of the next shard map (Follow)
  };
  // A follower's `replica`: none of the shard's.
  static constexpr uint32_t kFollowerReplica = ~0u;
  struct CopySent {
    uint64_t blocks = 0;  // kCopyRows, kCopyIds and kCopySketch entries
    uint64_t sums = 0;    // kCopySum entries
  };
  // Sends `b` a copy of the shard's state as of the last entry (Join).
  StatusOr<CopySent> SendCopy(Backup& b, ShardStore* store, const ClockTable& clocks,
                              const RecentPushes& recent, bool copy_sums, uint64_t incarnation);
  // Sends `b` every entry from now on, beside the others.
  void AddBackup(Backup b);
  // Marks `b` in sync once it holds every acknowledged entry, and tells it.
  void MaybeInSync(Backup& b);
  // Replicates without backups_[index] from now on; what it was not sent
  // is dropped.
  void Forget(size_t index);
  // Connects a channel to a backup; to `endpoint`.
  StatusOr<Backup> Connect(uint32_t replica);
  StatusOr<Backup> ConnectTo(const std::string& endpoint);
  // Sends one entry to backup `b` alone (a copy entry: seq last_seq_).
  Status SendTo(Backup& b, ReplicaEntry kind, MessageHeader header, std::vector<Frame> frames);
  ReplicationLog(const JobOptions& job, uint32_t shard, uint32_t self, Context* context, Env* env)
      : job_(job), shard_(shard), self_(self), context_(context), env_(env) {}
  void Send(ReplicaEntry kind, MessageHeader header, std::span<const Frame> request);

  const JobOptions& job_;  // the shard's; outlives this
  const uint32_t shard_;
  const uint32_t self_;  // the replica this primary is
  Context* const context_;
  Env* const env_;
  std::vector<Backup> backups_;
  std::vector<Socket*> sockets_;
  uint64_t last_seq_ = 0;
  bool ended_ = false;  // End() sent kEnd
  mutable uint64_t acknowledged_ = 0;  // see acknowledged()
  int64_t epoch_ = 0;
  std::vector<Frame> message_;  // reused
  std::vector<Frame> acks_;     // reused
};

// How long a server of the next shard map that followed the old shards
// (server/reshard_follower.h) waits for the address it serves at, held by
// a server of the map before until that one handed over and let it go:
// longer than such a server lingers (kHandoverLinger, 10 s; a primary
// promoted at a backup's address may linger at an address the next map's
// backups take).
inline constexpr std::chrono::seconds kHandoverBindWait{15};

// A backup of one shard's rows: applies the primary's log (see the top of
// this file) to a store of its own.
class BackupServer {
 public:
  // Builds the store as the primary does (the same initial values, or the
  // same checkpoint generation: `restore_clock`, or the newest of the
  // shard's folder when -1) and binds ReplicaAddress(job, shard, replica),
  // or `bind_endpoint` when not empty (tests: "tcp://127.0.0.1:*").
  // With `join` it starts empty instead and takes its state from the copy
  // a running primary sends (ReplicationLog::Join, after the authority's
  // kMembershipAddBackup): until the copy is whole it refuses any other
  // entry and a promotion. A restore reads through `env`'s file system
  // (null: Env::Default()); `env` must outlive the backup.
  // REQUIRES: job.Validate().ok(), 1 <= replica < job.replication.factor.
  static StatusOr<std::unique_ptr<BackupServer>> Create(const JobOptions& job, uint32_t shard,
                                                        uint32_t replica,
                                                        const std::string& bind_endpoint = "",
                                                        int64_t restore_clock = -1,
                                                        bool join = false, Env* env = nullptr);

  // A follower (server/reshard_follower.h): a copy of shard `shard` of
  // `job` (the map it runs on now) for a server of the next shard map,
  // which listens at `bind_endpoint` (e.g. "tcp://127.0.0.1:*") and takes
  // its state from the copy the shard sends once it is asked to
  // (kReshardFollow; ReplicationLog::Follow), then every entry up to the
  // handover. `name` says which, in messages.
  static constexpr uint32_t kFollower = ~0u;  // a follower's replica()
  static StatusOr<std::unique_ptr<BackupServer>> CreateFollower(const JobOptions& job,
                                                                uint32_t shard,
                                                                const std::string& bind_endpoint,
                                                                std::string name,
                                                                Env* env = nullptr);

  // Applies entries until the primary's kEnd (OK), Stop() (OK), a SHUTDOWN
  // from the control client (OK), or a transport error.
  Status Run();
  // Async-signal-safe.
  void Stop() { stop_.store(true, std::memory_order_relaxed); }
  bool stop_requested() const { return stop_.load(std::memory_order_relaxed); }

  const std::string& endpoint() const { return endpoint_; }
  // The authority promoted this backup (MEMBERSHIP): Run() returned, and
  // the shard's primary is to be built from TakeState() at epoch
  // promoted_epoch().
  bool promoted() const { return promoted_epoch_ >= 0; }
  // Run() returned because the primary handed the shard over to another
  // shard map (ps_ctl reshard): ps_server exits with code 3 as the
  // primary does.
  bool handed_over() const { return handed_over_to_ > 0; }
  // That map, and the clock of the handover (REQUIRES: handed_over()).
  int64_t handed_over_to() const { return handed_over_to_; }
  int64_t handed_over_clock() const { return handed_over_clock_; }
  // The shard map the replica serves in (ps_server --map-epoch), which its
  // STATS report.
  void SetMapEpoch(int64_t epoch) { map_epoch_ = epoch; }
  // This process's incarnation (under etcd its lease; 0: none): a copy
  // whose beginning names another one is for another process of this
  // replica and is refused. Before Run.
  void SetIncarnation(uint64_t incarnation) { incarnation_ = incarnation; }
  // Why it stopped for its primary sent it a new copy while it held one
  // (the primary dropped it from its log, so its copy misses entries):
  // started again, it takes a copy of its own. Empty otherwise.
  const std::string& must_rejoin() const { return must_rejoin_; }
  int64_t promoted_epoch() const { return promoted_epoch_; }
  // What a promoted backup hands its primary. REQUIRES: Run() returned.
  struct State {
    std::unique_ptr<ShardStore> store;
    ClockTable clocks{1};
    RecentPushes recent_pushes{1, 1};
    uint64_t applied = 0;
    int64_t epoch = 0;
    uint32_t slot = 0;  // the replica it was: its address is the primary's now
    // Built from the old shards a reshard moved in memory (ReshardFollower):
    // the handover clock, whose generation the old shard of the same index
    // may still be writing into this shard's folder; -1 otherwise.
    int64_t handover_clock = -1;
    // The shard's other replicas start from this same state (a replicated
    // job's reshard: each of them followed the old shards too, or restores
    // the handover generation): the primary built from it replicates to
    // them in sync from its first entry, not to none as a promoted
    // backup's does.
    bool backups_hold_it = false;
  };
  State TakeState();
  // A backup of the next shard map that followed the old shards' rows
  // (server/reshard_follower.h): replica state.slot (>= 1) of shard
  // `shard` of `job` starts from `state`, the same state its primary
  // starts from, in sync with it from its first entry as at a job's start.
  // It binds its replica's address (or `bind_endpoint`), waiting up to
  // kHandoverBindWait for a replica of the map before to give it up.
  static StatusOr<std::unique_ptr<BackupServer>> CreateFromState(
      const JobOptions& job, uint32_t shard, State state,
      const std::string& bind_endpoint = "", Env* env = nullptr);
  // REQUIRES: Run() is not running.
  const ShardStore& store() const { return *store_; }
  const ClockTable& clocks() const { return clocks_; }
  const RecentPushes& recent_pushes() const { return recent_pushes_; }
  uint64_t applied() const { return applied_; }
  uint64_t refused() const { return refused_; }
  // Created with `join` and the primary's copy is not whole yet.
  bool copying() const { return copying_; }
  // It holds every push its primary acknowledged: a backup from the
  // start, or one that joined once its primary said so (kInSync). Only
  // such a backup accepts a promotion.
  bool in_sync() const { return in_sync_; }
  // in_sync(), for another thread (the etcd authority's).
  bool in_sync_now() const { return in_sync_now_.load(std::memory_order_acquire); }

 private:
  BackupServer(const JobOptions& job, uint32_t shard, uint32_t replica, std::string name);
  // Create's, CreateFollower's and CreateFromState's (`from`) state and
  // socket.
  Status Open(const std::string& bind_endpoint, int64_t restore_clock, bool join, Env* env,
              State* from = nullptr);
  // One message: an entry of the primary's log, or a request.
  void Handle(std::vector<Frame>& frames);
  // An entry of the primary's log (`frames`: routing id, `entry`, data).
  void HandleEntry(const MessageHeader& entry, std::vector<Frame>& frames);
  // Answers the entries that are not applied: one of a fenced primary,
  // the in-sync notice, one that comes during the copy. True when `entry`
  // was one of them.
  bool AnsweredWithoutApply(const MessageHeader& entry, Frame& routing_id);
  // A kCopy* entry: applied, and its end acknowledged.
  void TakeCopyEntry(const MessageHeader& entry, std::vector<Frame>& frames);
  // A request of a client or the authority, decoded into request_ (`s`:
  // OK, or why it did not decode): STATS, PRIMARY, SHUTDOWN and MEMBERSHIP
  // are answered; anything else is refused as not primary.
  void HandleRequest(Status s, std::vector<Frame>& frames);
  // Applies entry `entry` (its header) with the frames after it; calls
  // `ack` once the entry is checked and before a push's apply (else the
  // caller acknowledges after).
  Status Apply(const MessageHeader& entry, std::span<Frame> rest,
               const std::function<void()>& ack);
  // Apply of a kPush or kAccumulate entry (the worker's push request in
  // `rest`), and of a kAggregate entry (the ids of the pushes in the sums,
  // the sums' index, then each sum's two frames), each checked whole before
  // `ack`.
  Status ApplyPushEntry(const MessageHeader& entry, std::span<Frame> rest,
                        const std::function<void()>& ack);
  Status ApplyAggregate(const MessageHeader& entry, std::span<Frame> rest,
                        const std::function<void()>& ack);
  // Applies one entry of the primary's copy (kCopy*); at kCopyEnd the copy
  // is whole and the entries after entry.request_id follow.
  Status ApplyCopy(const MessageHeader& entry, std::span<Frame> rest);
  // A copy of epoch `epoch` begins (kCopyBegin): its progress from the start.
  void StartCopy(int64_t epoch);
  // A kCopyBegin: taken, or refused (another incarnation's copy; a new copy
  // for a backup that holds one, which then stops: must_rejoin). False
  // when the entry is left to ApplyCopy (a copy begun again after rows).
  bool TakeCopyBegin(const MessageHeader& entry, Frame& routing_id);
  // Answers `entry` with ERROR `why`, flagged kFlagHoldsNoCopy when this
  // replica holds nothing of the shard yet.
  void Refuse(const MessageHeader& entry, Frame& routing_id, const Status& why,
              bool holds_nothing);
  void ResetCopyProgress();
  // ApplyCopy of a kCopyRows entry: rows of one table, values and state.
  Status ApplyCopyRows(const MessageHeader& entry, std::span<Frame> rest);
  // ApplyCopy of a kCopyIds entry: rows of a hashed table by id.
  Status ApplyCopyIds(const MessageHeader& entry, std::span<Frame> rest);
  void Reply(Frame& routing_id, const MessageHeader& header);
  // The backup's STATS (ShardStats::backup set).
  ShardStats Stats() const;

  const JobOptions job_;
  const uint32_t shard_;
  const uint32_t replica_;
  const std::string name_;  // ReplicaName
  std::unique_ptr<ShardStore> store_;
  ClockTable clocks_;
  RecentPushes recent_pushes_;
  std::unique_ptr<Context> context_;
  std::unique_ptr<Socket> socket_;
  std::string endpoint_;
  RequestRules rules_;
  Request request_;
  std::vector<Frame> reply_;
  std::atomic<bool> stop_{false};
  bool ended_ = false;     // the primary's kEnd arrived
  int64_t handed_over_to_ = 0;  // that kEnd's map (a reshard), else 0
  int64_t handed_over_clock_ = 0;  // and its clock
  uint64_t applied_ = 0;   // sequence number of the last entry applied
  uint64_t refused_ = 0;   // entries refused (out of order or malformed)
  Status diverged_;        // an acknowledged entry failed to apply: refuse the rest
  int64_t started_clock_ = 0;
  int64_t map_epoch_ = 0;  // the shard map it serves in (ps_server --map-epoch)
  int64_t promoted_epoch_ = -1;
  int64_t epoch_ = 0;  // the newest epoch its primary's entries carried
  // A joining backup: the copy's progress (rows taken per table, in
  // order; entries of rows, sketches and sums taken, the sums among them
  // and those of hashed tables; whether clocks and recent pushes came).
  bool copying_ = false;
  std::optional<int64_t> copy_epoch_;  // the epoch of the copy it takes (its kCopyBegin)
  uint64_t incarnation_ = 0;
  std::string must_rejoin_;
  bool in_sync_ = true;
  std::atomic<bool> in_sync_now_{true};  // in_sync_, for in_sync_now()
  std::vector<uint64_t> copy_next_row_;
  uint64_t copy_blocks_ = 0;
  uint64_t copy_sums_ = 0, copy_hashed_sums_ = 0;
  bool copy_clocks_ = false, copy_recent_ = false;
};

}  // namespace ps

#endif  // PS_SERVER_REPLICATION_H_
