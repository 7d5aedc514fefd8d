#include "tools/local_authority.h"

#include <string>
#include <utility>

#include "client/control_client.h"
#include "common/endpoint.h"
#include "common/wire.h"

namespace ps {
namespace {

// How long a server may take to answer MEMBERSHIP (a join copies nothing
// before it answers; the copy goes on after).
constexpr int kMembershipTimeoutMs = 5000;

std::string ShardName(uint32_t shard) { return "shard " + std::to_string(shard); }

}  // namespace

LocalAuthority::LocalAuthority(const JobOptions& job, IsLive is_live, Deliver deliver)
    : job_(job),
      is_live_(std::move(is_live)),
      deliver_(std::move(deliver)),
      shards_(job.cluster.servers.size()) {}

Status LocalAuthority::CheckReplica(uint32_t shard, uint32_t replica) const {
  if (shard >= shards_.size() || replica >= job_.replication.factor) {
    return InvalidArgumentError("replica " + std::to_string(replica) + " of " + ShardName(shard) +
                                ": the job has " + std::to_string(shards_.size()) +
                                " shards of " + std::to_string(job_.replication.factor) +
                                " replicas (cluster.servers, replication.factor)");
  }
  return Status::Ok();
}

StatusOr<ShardMembership> LocalAuthority::Membership(uint32_t shard) const {
  PS_RETURN_IF_ERROR(CheckReplica(shard, 0));
  return shards_[shard];
}

StatusOr<MembershipChange> LocalAuthority::ReplicaGone(uint32_t shard, uint32_t replica) {
  PS_RETURN_IF_ERROR(CheckReplica(shard, replica));
  if (replica == shards_[shard].primary) return Promote(shard);
  return DropBackup(shard, replica);
}

StatusOr<MembershipChange> LocalAuthority::DropBackup(uint32_t shard, uint32_t replica) {
  ShardMembership& membership = shards_[shard];
  if (!is_live_(shard, membership.primary)) {
    return FailedPreconditionError(ShardName(shard) + " has no primary left");
  }
  MembershipChange change =
      MembershipChange::Of(kMembershipDropBackup, shard, replica, ++membership.epoch);
  Status dropped = Tell(membership.primary, change);
  if (!dropped.ok()) {
    return Status(dropped.code(),
                  "its shard's primary did not take the news: " + dropped.ToString());
  }
  return change;
}

StatusOr<MembershipChange> LocalAuthority::Promote(uint32_t shard) {
  ShardMembership& membership = shards_[shard];
  const uint32_t factor = job_.replication.factor;
  MembershipChange change = MembershipChange::Of(kMembershipPromote, shard, 0, 0);
  // The next live replica on the ring after the dead primary.
  for (uint32_t k = 1; k < factor; ++k) {
    const uint32_t j = (membership.primary + k) % factor;
    if (!is_live_(shard, j)) continue;
    change.replica = j;
    change.epoch = ++membership.epoch;
    Status promoted = Tell(j, change);
    if (!promoted.ok()) {
      // Still taking a copy (it holds no whole state), or gone.
      change.passed_over.push_back({j, std::move(promoted)});
      continue;
    }
    membership.primary = j;
    return change;
  }
  std::string refused;
  for (const MembershipChange::PassedOver& p : change.passed_over) {
    refused += (refused.empty() ? " (" : "; ") + std::string("replica ") +
               std::to_string(p.replica) + " cannot be promoted: " + p.why.ToString();
  }
  return FailedPreconditionError("no replica of " + ShardName(shard) + " is left to take over" +
                                 refused + (refused.empty() ? "" : ")"));
}

StatusOr<MembershipChange> LocalAuthority::ReplicaJoins(uint32_t shard, uint32_t replica) {
  PS_RETURN_IF_ERROR(CheckReplica(shard, replica));
  ShardMembership& membership = shards_[shard];
  MembershipChange change =
      MembershipChange::Of(kMembershipAddBackup, shard, replica, ++membership.epoch);
  Status added = Tell(membership.primary, change);
  if (!added.ok()) {
    return Status(added.code(), ShardName(shard) + "'s primary did not take backup " +
                                    std::to_string(replica) + ": " + added.ToString());
  }
  return change;
}

Status LocalAuthority::Tell(uint32_t to, const MembershipChange& change) const {
  return deliver_ ? deliver_(to, change) : SendMembership(to, change);
}

Status LocalAuthority::SendMembership(uint32_t to, const MembershipChange& change) const {
  JobOptions job = job_;
  job.client.request_timeout_ms = kMembershipTimeoutMs;
  std::vector<std::string> endpoints;
  for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
    PS_ASSIGN_OR_RETURN(const HostPort where,
                        ReplicaAddress(job, s, s == change.shard ? to : shards_[s].primary));
    endpoints.push_back(ConnectEndpoint(where));
  }
  PS_ASSIGN_OR_RETURN(auto control, ControlClient::Create(job, endpoints));
  // A promotion names no backup.
  const uint32_t backup = change.flags == kMembershipPromote ? 0 : change.replica;
  return control->Membership(change.shard, change.flags, backup, change.epoch);
}

}  // namespace ps
