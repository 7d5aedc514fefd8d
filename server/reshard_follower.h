// A server of the next shard map that takes its rows in memory from the
// shards of the map the job runs on now, while they serve (ps_ctl reshard,
// server/reshard_gate.h; ps_server --follow).
//
// Once ps_ctl reshard planned the move (before it picks the handover
// clock: tools/ctl_reshard.h), the next map's server of shard j (started
// at once by ps_launch) makes the store it will serve and faults its
// memory in (PrefaultedStore), listens at a port of its own host for each
// old shard whose rows overlap its own, and asks that shard to follow it
// (RESHARD kReshardFollow; ps_ctl waits until every follower holds its
// copy before it picks the handover clock): the old shard sends it the copy a
// joining backup gets (its blocks shared copy-on-write, its clocks and
// recent pushes: ReplicationLog::Follow), then every change it applies,
// as to a backup, up to kEnd at the handover clock. Each copy is applied
// by a BackupServer of its own (BackupServer::CreateFollower), with the
// same code as a backup's. Once every one of them handed over at the same
// clock and map, the server copies their rows into its store
// (AssembleStore: each range table's rows j owns in the next map, values
// and optimizer state; each hashed table's ids of j's hash slots) and
// serves it (ShardServer::CreatePromoted), binding its address as
// soon as the old server there gave it up. The old shards write the
// handover generation after they handed over; a server of the next map
// that did not follow (it failed, or started too late) restores it, as
// before.
//
// No acknowledged push is lost or applied twice: a follower holds every
// entry its shard applied up to the handover, in order (a gap is refused
// and the server does not take over), none of the writes the shards held
// back, and the recent pushes of every shard it followed, so a push sent
// again after a lost acknowledgement is recognised.
//
// In a replicated job (replication.factor k >= 2) every replica of a
// shard of the next map follows the old shards' primaries the same way
// (ps_server --follow --replica j): each builds the same state at the
// handover, so replica 0 serves as the shard's primary with replicas
// 1..k-1 as backups in sync from their first entry, as at a job's start
// (BackupServer::CreateFromState), and no acknowledged push sits on fewer
// replicas than the job asks for. An old shard's primary may be any of
// its replicas (one promoted earlier): the follower asks them in turn. A
// replica that did not follow restores the handover generation, the same
// state. Not under replication.authority etcd (its leases decide who
// serves), nor under security.mode curve (the follow request would
// need a key of its own): Create refuses (CanFollow), and such a reshard
// moves through the generation. A hashed table's rows are followed by
// hash slot: each old shard whose slots overlap the new shard's, its ids
// of those slots kept.
// The cost: while it follows, the server holds a copy of every old shard
// whose rows overlap its own and its own store, beside the old shards
// themselves, and applies every push to those rows a second time.
//
// Thread safety: Run() from one thread; Stop() from any thread and from a
// signal handler.
#ifndef PS_SERVER_RESHARD_FOLLOWER_H_
#define PS_SERVER_RESHARD_FOLLOWER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/options.h"
#include "common/reshard_sources.h"
#include "common/status.h"
#include "server/replication.h"

namespace ps {

// The store of shard `shard` of `to` built from `old`, the stores of the
// old shards whose rows overlap its own as they stand at the handover (what
// ReshardFollower::Run serves): each range table's rows it owns (values and
// optimizer state, read from the old stores' blocks shared), each hashed
// table's ids of its hash slots (rows, state, uses) and the admission
// sketches of the old shards whose slots overlap its own merged by their
// maximum, as RestoreGeneration builds it from a generation. `old` is left
// as it was. Built in `into` when given (a PrefaultedStore of the shard),
// else in a new store. FailedPrecondition when an old store holds sums not
// applied, misses rows of the shard, or the shard has no room for them.
StatusOr<std::unique_ptr<ShardStore>> AssembleStore(const JobOptions& to, uint32_t shard,
                                                    std::span<ShardStore* const> old,
                                                    std::unique_ptr<ShardStore> into = nullptr);
// A store for shard `shard` of `to` whose range tables' memory is written
// already (zeros): AssembleStore into it copies rows only, no page faults
// (made while the follower follows, off the handover's pause).
StatusOr<std::unique_ptr<ShardStore>> PrefaultedStore(const JobOptions& to, uint32_t shard);

class ReshardFollower {
 public:
  // Replica `replica` of shard `shard` of `to` (the next map's job, at map
  // `map_epoch`), following the shards of `from` (the job as it runs now)
  // whose rows overlap its own; binds one port per such shard on the host
  // of the replica's address (ReplicaAddress). FailedPrecondition when the
  // jobs cannot be followed (CanFollow); InvalidArgument for a shard or
  // replica `to` does not have; Unavailable when a port cannot be bound.
  // REQUIRES: from.Validate().ok(), to.Validate().ok().
  static StatusOr<std::unique_ptr<ReshardFollower>> Create(const JobOptions& from,
                                                           const JobOptions& to, uint32_t shard,
                                                           uint32_t replica, int64_t map_epoch,
                                                           Env* env = nullptr);
  ~ReshardFollower();

  // The old shards it follows.
  const std::vector<uint32_t>& sources() const { return sources_; }

  // Asks each old shard to send its copy and changes, applies them until
  // every one handed over to map `map_epoch`, then builds the shard's
  // state (its store laid out for `to`; the clocks and recent pushes of
  // the old shards). Errors: an old shard that refused to be followed or
  // did not answer (its error), one that stopped without handing over or
  // handed over at another clock or map, or a copy that failed to apply
  // (FailedPrecondition naming it); Cancelled after Stop(). On an error
  // the server of the next map starts from the handover generation. In a
  // replicated job the state says its backups hold it too
  // (State::backups_hold_it).
  StatusOr<BackupServer::State> Run();
  void Stop() { stop_.store(true, std::memory_order_relaxed); }

 private:
  ReshardFollower(const JobOptions& from, const JobOptions& to, uint32_t shard, uint32_t replica,
                  int64_t map_epoch)
      : from_(from), to_(to), shard_(shard), replica_(replica), map_epoch_(map_epoch) {}
  // "replica 1 of shard 2 of map 1", in messages.
  std::string Name() const;
  // Sends every source its kReshardFollow.
  Status AskToFollow();
  // Runs the copies until each returned; the first error, if any.
  Status Follow();

  const JobOptions from_;
  const JobOptions to_;
  const uint32_t shard_;
  const uint32_t replica_;
  const int64_t map_epoch_;
  Env* env_ = nullptr;
  std::vector<uint32_t> sources_;
  std::vector<std::unique_ptr<BackupServer>> copies_;  // one per source
  std::atomic<bool> stop_{false};
  // Frees the copies once the shard's store is built (joined by the
  // destructor).
  std::thread retired_;
};

}  // namespace ps

#endif  // PS_SERVER_RESHARD_FOLLOWER_H_
