// ps_launch's authority over the replicas of every shard of a job on one
// host (replication.factor >= 2, replication.authority launcher; the interface
// and what it shares with etcd's: common/authority.h).
//
// The launcher's process supervision (tools/launcher.h) tells it what
// happened; it decides, counts each shard's epochs, and tells the servers:
//  - the primary is gone: the next live backup on the ring after it
//    (replica p + 1, p + 2, ... modulo the factor) is asked to take over; a
//    backup that refuses (still taking a copy) is passed over for the next;
//  - a backup is gone: the primary is told to drop it from its log;
//  - a replica joins again (started with --join): its primary is told to
//    send it a copy.
// Each try is a new epoch of the shard, refused or not. A replica is live
// while its process runs (the `is_live` callback); the supervisor starts,
// stops and restarts the processes, never this class.
//
// Thread-compatible: the supervisor's thread calls it.
#ifndef PS_TOOLS_LOCAL_AUTHORITY_H_
#define PS_TOOLS_LOCAL_AUTHORITY_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "common/authority.h"
#include "common/options.h"
#include "common/status.h"

namespace ps {

class LocalAuthority : public Authority {
 public:
  // Whether replica `replica` of `shard` runs now.
  using IsLive = std::function<bool(uint32_t shard, uint32_t replica)>;
  // Carries `change` to replica `to` of change.shard and returns its
  // server's answer.
  using Deliver = std::function<Status(uint32_t to, const MembershipChange& change)>;

  // `job` must outlive this object and be validated; every shard starts at
  // epoch 0 with replica 0 as its primary. `deliver` empty (the default): a
  // MEMBERSHIP request over the control client to that replica's address
  // (ReplicaAddress), with a 5 s request timeout.
  LocalAuthority(const JobOptions& job, IsLive is_live, Deliver deliver = nullptr);

  StatusOr<ShardMembership> Membership(uint32_t shard) const override;
  // Errors as in Authority; the messages say why the shard cannot go on
  // ("shard 0 has no primary left", "no replica of shard 0 is left to take
  // over", naming each backup that refused) or what the server answered.
  StatusOr<MembershipChange> ReplicaGone(uint32_t shard, uint32_t replica) override;
  StatusOr<MembershipChange> ReplicaJoins(uint32_t shard, uint32_t replica) override;

 private:
  Status CheckReplica(uint32_t shard, uint32_t replica) const;
  StatusOr<MembershipChange> Promote(uint32_t shard);
  StatusOr<MembershipChange> DropBackup(uint32_t shard, uint32_t replica);
  Status Tell(uint32_t to, const MembershipChange& change) const;
  // The default Deliver: MEMBERSHIP over a control client whose other
  // shards are reached at their primaries.
  Status SendMembership(uint32_t to, const MembershipChange& change) const;

  const JobOptions& job_;
  const IsLive is_live_;
  const Deliver deliver_;
  // Per shard.
  std::vector<ShardMembership> shards_;
};

}  // namespace ps

#endif  // PS_TOOLS_LOCAL_AUTHORITY_H_
