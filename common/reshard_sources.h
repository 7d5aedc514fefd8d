// Which shards of the map a job runs on hold rows of a shard of the next
// map (ps_ctl reshard): the ones that shard's server follows in memory
// until the handover (server/reshard_follower.h), and whether it may.
//
// Thread-safe: pure functions.
#ifndef PS_COMMON_RESHARD_SOURCES_H_
#define PS_COMMON_RESHARD_SOURCES_H_

#include <cstdint>
#include <vector>

#include "common/options.h"
#include "common/status.h"

namespace ps {

// OK when a server of `to` may follow the servers of `from`
// (security.mode none, the same replication.factor and, above 1, the
// launcher as the authority, the same tables); FailedPrecondition saying
// why not. Every replica of a shard of `to` follows the same old shards.
Status CanFollow(const JobOptions& from, const JobOptions& to);
// The shards of `from` whose rows (a hashed table's: hash slots) overlap
// those of shard `shard` of `to`: the ones its server follows.
std::vector<uint32_t> FollowedShards(const JobOptions& from, const JobOptions& to,
                                     uint32_t shard);

}  // namespace ps

#endif  // PS_COMMON_RESHARD_SOURCES_H_
