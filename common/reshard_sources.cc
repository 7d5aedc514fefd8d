#include "common/reshard_sources.h"

#include <algorithm>
#include <string>

#include "common/hash_slots.h"
#include "common/key_range.h"

namespace ps {

namespace {

// The rows (a hashed table: the hash slots) of `table` that shard `shard`
// of `servers` owns.
RowRange Owned(const TableOptions& table, size_t servers, uint32_t shard) {
  return table.hashed() ? ShardSlots(table.HashSlots(), static_cast<uint32_t>(servers), shard)
                        : ShardRows(table.rows, static_cast<uint32_t>(servers), shard);
}

bool Overlap(const RowRange& a, const RowRange& b) {
  return std::max(a.begin, b.begin) < std::min(a.end, b.end);
}

}  // namespace

Status CanFollow(const JobOptions& from, const JobOptions& to) {
  if (from.security.mode == SecurityMode::kCurve) {
    return FailedPreconditionError("the next map's servers do not follow the old ones under "
                                   "security.mode curve");
  }
  if (from.replication.factor != to.replication.factor) {
    return FailedPreconditionError("the next job file has replication.factor " +
                                   std::to_string(to.replication.factor) + ", the job " +
                                   std::to_string(from.replication.factor));
  }
  if (from.replication.factor > 1 &&
      from.replication.authority == ReplicationAuthority::kEtcd) {
    // etcd's leases decide which replica of each shard serves; the next
    // map's replicas would need a say there before they serve.
    return FailedPreconditionError("the next map's servers do not follow the old ones under "
                                   "replication.authority etcd");
  }
  if (from.tables.size() != to.tables.size()) {
    return FailedPreconditionError("the next job file has " + std::to_string(to.tables.size()) +
                                   " tables, the job " + std::to_string(from.tables.size()));
  }
  for (size_t t = 0; t < from.tables.size(); ++t) {
    const TableOptions& a = from.tables[t];
    const TableOptions& b = to.tables[t];
    if (a.name != b.name || a.rows != b.rows || a.dim != b.dim || a.hashed() != b.hashed() ||
        a.HashSlots() != b.HashSlots()) {
      return FailedPreconditionError("table " + std::to_string(t) + " is '" + b.name + "' (" +
                                     std::to_string(b.rows) + " x " + std::to_string(b.dim) +
                                     ") in the next job file and '" + a.name + "' (" +
                                     std::to_string(a.rows) + " x " + std::to_string(a.dim) +
                                     ") in the job's");
    }
  }
  return Status::Ok();
}

std::vector<uint32_t> FollowedShards(const JobOptions& from, const JobOptions& to,
                                     uint32_t shard) {
  std::vector<uint32_t> shards;
  for (uint32_t i = 0; i < from.cluster.servers.size(); ++i) {
    for (const TableOptions& t : from.tables) {
      if (Overlap(Owned(t, from.cluster.servers.size(), i),
                  Owned(t, to.cluster.servers.size(), shard))) {
        shards.push_back(i);
        break;
      }
    }
  }
  return shards;
}

}  // namespace ps
