// The authority over a shard's replicas (replication.factor >= 2; DESIGN.md
// section 13): which replica is the shard's primary, at which epoch, and
// what the shard does when a replica is gone or comes back. Servers never
// decide this on their own; an authority decides and tells them with
// MEMBERSHIP requests (common/wire.h: kMembership*).
//
// Two authorities implement this interface, and differ in everything but
// the decisions themselves:
//   - LocalAuthority (tools/local_authority.h, replication.authority launcher):
//     one object inside ps_launch over every shard of a job on one host. It
//     learns that a replica is gone from its process's exit, picks the next
//     live backup on the ring, counts epochs itself and tells the servers
//     over the control client.
//   - EtcdAuthority (server/etcd_authority.h, replication.authority etcd):
//     one object inside each ps_server, over that replica's shard only. It
//     learns that a replica is gone from etcd (its lease lapsed), decides by
//     transactions on the shard's keys (the first backup to take the
//     primary key wins), takes epochs from etcd's revisions, and tells its
//     own server.
// What both share, and all that this interface holds: a view of a shard's
// membership (its epoch and its primary), and the two decisions every change
// comes from: a replica is gone (the shard's primary: a live backup that
// holds every acknowledged push takes over; a backup: the primary stops
// waiting for it), and a replica joins again as a backup that takes a copy.
// Each decision is one new epoch and one MEMBERSHIP request
// (MembershipChange). How a loss is noticed (process exits, leases), which
// processes run, and where epochs come from stay with each implementation.
//
// Thread-compatible: one thread at a time calls an Authority (each
// implementation says which).
#ifndef PS_COMMON_AUTHORITY_H_
#define PS_COMMON_AUTHORITY_H_

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace ps {

// A shard's replicas as an authority last decided them.
struct ShardMembership {
  // The epoch of the shard's last change (0 before any: every replica
  // holds epoch 0 as the job starts). Servers refuse a MEMBERSHIP request
  // at an epoch older than the one they hold.
  int64_t epoch = 0;
  // The replica that serves the shard (its ReplicaAddress slot,
  // common/endpoint.h); replica 0 as the job starts.
  uint32_t primary = 0;
};

// One decision, as one MEMBERSHIP request carries it to a server.
struct MembershipChange {
  // A backup that could not be promoted, and what its server answered
  // (FailedPrecondition: it does not hold every acknowledged push yet).
  struct PassedOver {
    uint32_t replica = 0;
    Status why;
  };
  // kMembershipPromote: `replica` is the shard's primary now (its server
  // was told). kMembershipDropBackup: the primary goes on without backup
  // `replica`. kMembershipAddBackup: the primary sends backup `replica` a
  // copy and replicates to it after.
  uint32_t flags = 0;
  uint32_t shard = 0;
  uint32_t replica = 0;
  // The shard's epoch from this change on.
  int64_t epoch = 0;
  // kMembershipPromote: the live backups tried before `replica`, in order.
  std::vector<PassedOver> passed_over;

  static MembershipChange Of(uint32_t flags, uint32_t shard, uint32_t replica, int64_t epoch) {
    MembershipChange change;
    change.flags = flags;
    change.shard = shard;
    change.replica = replica;
    change.epoch = epoch;
    return change;
  }
};

class Authority {
 public:
  virtual ~Authority() = default;

  // The membership of `shard` as this authority knows it. InvalidArgument
  // for a shard it does not decide for.
  virtual StatusOr<ShardMembership> Membership(uint32_t shard) const = 0;

  // Replica `replica` of `shard` is gone. Its shard's primary: a live backup
  // that holds every push the primary acknowledged becomes the primary
  // (kMembershipPromote naming it). A backup: the primary drops it from its
  // log (kMembershipDropBackup). Either at a new epoch, and the server
  // concerned has taken the change when this returns OK.
  // Errors: InvalidArgument for a shard or replica out of range;
  // FailedPrecondition when the shard cannot go on without it (no replica
  // can take over, no primary is left), or when it is not this authority's
  // to decide (the message says whose it is); Aborted when another
  // authority decided first (re-read Membership); otherwise what the
  // server that was told answered, or the authority's own store.
  virtual StatusOr<MembershipChange> ReplicaGone(uint32_t shard, uint32_t replica) = 0;

  // Replica `replica` of `shard` was started again as a backup that takes a
  // copy (ps_server --join): its primary is told to send it one, at a new
  // epoch (kMembershipAddBackup). Errors: InvalidArgument as above;
  // FailedPrecondition when it is not this authority's to decide;
  // otherwise what the primary answered.
  virtual StatusOr<MembershipChange> ReplicaJoins(uint32_t shard, uint32_t replica) = 0;
};

}  // namespace ps

#endif  // PS_COMMON_AUTHORITY_H_
