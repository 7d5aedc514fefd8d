// Restoring a shard's store from one of its checkpoint generations.
#ifndef PS_SERVER_RESTORE_H_
#define PS_SERVER_RESTORE_H_

#include <cstddef>
#include <cstdint>

#include "common/options.h"
#include "common/status.h"
#include "server/checkpoint.h"
#include "store/shard_store.h"

namespace ps {

// Restores generation `clock` of `dir` straight into the blocks of `store`,
// record by record (no second copy of the shard in memory): what a
// restarting server does. FailedPrecondition (CheckRestorable) when the
// generation was written for another model than store->Layout(job, shard,
// ..); the errors of CheckpointDir::ReadInto. On an error the store holds a
// mix of old and restored rows. Returns the number of tables restored.
// REQUIRES: store was created for (job, shard).
// The generation of `dir` a shard starting up restores: `restore_clock`
// (NotFound listing those there are when `dir` lacks it), or the newest;
// -1 when `dir` holds none (and no restore_clock was asked for: NotFound
// then). FailedPrecondition for a generation of a clock no worker could
// resume at (>= kMaxClock).
StatusOr<int64_t> PickGeneration(const CheckpointDir& dir, int64_t restore_clock,
                                 uint32_t shard);

StatusOr<size_t> RestoreStore(const CheckpointDir& dir, int64_t clock, const JobOptions& job,
                              uint32_t shard, ShardStore* store);

}  // namespace ps

#endif  // PS_SERVER_RESTORE_H_
