// etcd as the authority over a shard's replicas (replication.authority
// etcd; DESIGN.md section 13): which replica is the primary, at which
// epoch, decided by etcd alone, never by two servers on their own. The
// same decisions ps_launch takes on one host (tools/local_authority.h),
// behind the same interface (common/authority.h), taken here by each
// ps_server's own thread against etcd over its own shard, and handed to its
// server with the same MEMBERSHIP requests ps_launch sends. As an
// Authority: Membership is what this replica knows (a primary: its epoch,
// itself; a backup: the epoch at which the primary it follows took the
// shard, and that primary); ReplicaGone and ReplicaJoins act only on what
// etcd shows (below), which is how the authority's own rounds call them.
//
// Keys, under replication.etcd.prefix (P), followed by /map/<E> for a
// server of shard map E >= 1 (a job moved onto other servers, ps_ctl
// reshard: each map's shards are chosen afresh, whatever keys the old
// map's servers still hold until their leases lapse):
//   P/shard/<i>/primary     the primary's replica number, attached to its
//                           lease; its create_revision is the epoch
//   P/shard/<i>/replica/<j> "ready" (a backup from the start) or "joining"
//                           (one that takes a copy), attached to replica
//                           j's lease
//   P/shard/<i>/membership  the primary's last change of its backups
//                           (written only while it holds the primary key:
//                           its revision is that change's epoch)
//
// Each replica holds a lease of replication.etcd.lease_ttl_s and renews it
// every quarter of it. A primary acknowledges writes only while its
// WriteLease is valid: until three quarters of the TTL after it sent its
// last renewal that etcd answered, which is before etcd can let the lease
// lapse. So a primary cut off from etcd is fenced (it refuses writes,
// saying so) before any backup can take its key. When etcd says the lease
// is gone, the server stops for good (started again, it rejoins).
//
//  - A backup that followed a primary whose key is gone (its lease lapsed)
//    takes the key in a transaction that holds only if nobody has it, and
//    asks its server to become the primary at the key's revision
//    (kMembershipPromote). A server that does not hold every push the
//    primary acknowledged (still taking a copy, or catching up after it:
//    not in sync, server/replication.h) refuses; the key is given back and
//    the server stops, saying so: a replica in sync takes over if there is
//    one, else the shard is down and the job goes back to a checkpoint.
//    The in-sync set needs no record at etcd: the primary acknowledges
//    without a backup only once that backup's lease is gone (it drops it
//    when its registration lapses) or its process is (a new process at its
//    address holds no copy: kFlagHoldsNoCopy), and a replica whose lease
//    is gone, or whose process is, can take no key.
//  - Every call that etcd does not answer is tried again, each try waiting
//    longer, until the lease may have lapsed (or, starting,
//    replication.etcd.start_timeout_ms): a slow etcd is not a dead one.
//  - A primary adds a replica registered "joining" (kMembershipAddBackup)
//    and drops a backup whose registration is gone (kMembershipDropBackup);
//    it knows a registration by its lease, so a replica started again
//    before its previous process's lease lapsed (its key put again, under
//    the new process's lease) is dropped and added anew. Each change is made
//    at the revision of a write that holds only while it still holds the
//    primary key.
//  - A replica that starts finds out what it is: the shard has a primary
//    (another replica holds the key): it joins as a backup that takes a
//    copy, with or without --join; none, and it is replica 0 (without
//    --join): it takes the key and is the primary; none, and it is another:
//    the job is starting, and it is a backup with the initial state. A
//    replica that starts after its primary took the key (a slower host at
//    the job's start) joins, while the primary took it for a backup from
//    the start: it refuses the entries that come before its copy, the
//    primary replicates without it (it holds nothing, so no acknowledged
//    push depends on it), and adds it when this authority says it joins.
//
// With replication.factor >= 3 a backup whose shard got another primary
// (not itself) stops, so that, started again, it joins the new one.
//
// Thread-safety: Create and role() on the starting thread; then the
// authority's own thread (Start .. Stop) does everything else, the Authority
// calls included (before Start, or after Stop, any one thread may make
// them). lease() is thread-safe (WriteLease).
#ifndef PS_SERVER_ETCD_AUTHORITY_H_
#define PS_SERVER_ETCD_AUTHORITY_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/authority.h"
#include "common/options.h"
#include "common/status.h"
#include "common/transport.h"
#include "server/etcd_client.h"
#include "server/write_lease.h"

namespace ps {

class EtcdAuthority : public Authority {
 public:
  enum class Role {
    kPrimary,  // holds the shard's primary key
    kBackup,   // a backup from the start (the job is starting)
    kJoin,     // a backup that takes a copy from the running primary
  };

  // Grants this replica's lease and decides its role (see the top of this
  // file). Errors: Unavailable when etcd cannot be reached (naming the
  // endpoints); what etcd refuses.
  // REQUIRES: job.Validate().ok(), authority etcd, replica < factor.
  // `map_epoch`: the shard map the server serves in (ps_server
  // --map-epoch).
  static StatusOr<std::unique_ptr<EtcdAuthority>> Create(const JobOptions& job, uint32_t shard,
                                                         uint32_t replica, bool join,
                                                         int64_t map_epoch = 0);
  ~EtcdAuthority() override;  // Stop()
  EtcdAuthority(const EtcdAuthority&) = delete;
  EtcdAuthority& operator=(const EtcdAuthority&) = delete;

  Role role() const { return role_; }
  // This process's etcd lease: the incarnation a copy for it names.
  int64_t lease_id() const { return lease_id_; }
  // The lease the server acknowledges writes under (ShardServer::SetWriteLease).
  const WriteLease* lease() const { return &write_lease_; }

  // Starts the thread. `stop_server` is called (from that thread) when the
  // server must stop: its lease is gone, or its shard got another primary
  // (factor >= 3); `reason` says which and what to do.
  void Start(std::function<void(const std::string& reason)> stop_server);
  // Stops and joins the thread. The lease is left to lapse: a backup must
  // not take over a shard whose job is ending.
  void Stop();
  // A backup: whether its server holds every push its primary acknowledged
  // (BackupServer::in_sync_now; called from the authority's thread; null:
  // taken as yes). One that does not never takes a lapsed primary key: it
  // leaves the shard to a replica in sync (one that took the key for a
  // moment would stop that replica, which saw another primary), and stops
  // once none took it within a lease's time. Thread-safe.
  void SetInSync(std::function<bool()> in_sync);

  // Authority, over this replica's own shard (InvalidArgument for another).
  StatusOr<ShardMembership> Membership(uint32_t shard) const override;
  // This replica the primary: drops backup `replica` once etcd shows its
  // registration gone (FailedPrecondition while it is registered, or for
  // itself). This replica a backup and `replica` the primary it follows:
  // takes the shard's primary key if nobody holds it and makes its server
  // the primary (kMembershipPromote naming itself); Aborted when another
  // replica took the key first or its server refused (the key is given
  // back; a server not in sync also stops this replica). FailedPrecondition
  // for anything else, and when etcd says this replica must stop (its
  // lease or key is gone); etcd's errors as they come.
  StatusOr<MembershipChange> ReplicaGone(uint32_t shard, uint32_t replica) override;
  // This replica the primary: adds backup `replica`, registered at etcd as
  // joining, at a new epoch (dropping its older life from the log first).
  // FailedPrecondition when this replica is not the primary, or `replica` is
  // not registered as joining.
  StatusOr<MembershipChange> ReplicaJoins(uint32_t shard, uint32_t replica) override;

  // Key names (tests).
  static std::string PrimaryKey(const std::string& prefix, uint32_t shard);
  static std::string ReplicaKey(const std::string& prefix, uint32_t shard, uint32_t replica);
  // replication.etcd.prefix, or "/ps/<fingerprint>" when it is empty;
  // then "/map/<map_epoch>" when map_epoch >= 1.
  static std::string Prefix(const JobOptions& job, int64_t map_epoch = 0);

 private:
  EtcdAuthority(const JobOptions& job, uint32_t shard, uint32_t replica, int64_t map_epoch);
  void Run();
  // Why a backup not in sync stops when its primary is gone (`why`: how it
  // is not).
  std::string NotInSyncReason(const std::string& why) const;
  // One round: renews the lease, registers, then the role's step. A
  // non-OK status that is not fatal is logged and the next round tries
  // again; *fatal says the server must stop.
  Status Step(WriteLease::Clock::time_point started, std::string* fatal);
  Status PrimaryStep(std::string* fatal);
  Status BackupStep(std::string* fatal);
  // A backup whose primary's key is gone takes it (ReplicaGone).
  StatusOr<MembershipChange> TakeOver();
  Status CheckShard(uint32_t shard, uint32_t replica) const;
  // The epoch of a change of this primary's backups: the revision of a
  // write that holds only while it still holds the primary key.
  Status NewEpoch(const std::string& what, int64_t* epoch, std::string* fatal);
  // Takes backup `replica` out of this primary's log at a new epoch.
  Status Drop(uint32_t replica, WriteLease::Clock::time_point started, std::string* fatal);
  // PutIfAbsent of the shard's primary key for this replica; a try that
  // timed out and was applied counts as taken.
  StatusOr<EtcdTxnResult> TakeKey(const std::string& key);
  // MEMBERSHIP to this replica's own server.
  // `incarnation`: for kMembershipAddBackup, the lease of the process the
  // primary joins (its copy is for that process alone; 0: any).
  Status Tell(uint32_t flags, uint32_t backup, int64_t epoch, int64_t incarnation = 0);
  void Extend(WriteLease::Clock::time_point renewed);

  const JobOptions job_;
  const uint32_t shard_;
  const uint32_t replica_;
  const std::string prefix_;
  const std::string name_;  // "replica 1 of shard 0"
  const std::chrono::milliseconds period_;
  const std::chrono::milliseconds valid_for_;
  std::unique_ptr<EtcdClient> etcd_;
  int64_t lease_id_ = 0;
  Role role_ = Role::kBackup;
  WriteLease write_lease_;
  int64_t epoch_ = 0;         // primary: the epoch it serves at
  int64_t held_ = 0;          // primary: create_revision of the primary key it holds
  int64_t followed_ = 0;      // backup: create_revision of the primary key it saw
  uint32_t primary_ = 0;      // the replica that primary key names (a primary: itself)
  // The current round: when it started (leases are extended from it), and
  // why the server must stop, when etcd says so (empty: it goes on).
  WriteLease::Clock::time_point round_started_;
  std::string fatal_;
  bool registered_ = false;
  // Primary: per replica, the registration (the lease of the process that
  // put it) its log replicates to: -1 none, 0 one from the start not seen
  // yet.
  std::vector<int64_t> in_log_;
  std::string last_problem_;  // logged once until it changes
  // Requests to the own server.
  std::unique_ptr<Context> context_;
  std::unique_ptr<Socket> socket_;
  uint64_t next_request_ = 1;

  std::function<void(const std::string&)> stop_server_;
  std::mutex in_sync_mu_;
  std::function<bool()> in_sync_;  // guarded by in_sync_mu_
  // A backup not in sync: when it first saw its primary's key gone.
  std::optional<std::chrono::steady_clock::time_point> lapsed_at_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_SERVER_ETCD_AUTHORITY_H_
