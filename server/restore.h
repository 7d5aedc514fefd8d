// Restoring a shard's store from a checkpoint generation: its own (the
// job's shard count wrote it), or the parts of every old shard's that hold
// its rows (another shard count wrote it: a job resumed on more or fewer
// servers).
#ifndef PS_SERVER_RESTORE_H_
#define PS_SERVER_RESTORE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/env.h"
#include "common/options.h"
#include "common/status.h"
#include "server/checkpoint.h"
#include "server/checkpoint_layout.h"
#include "server/recent_pushes.h"
#include "store/shard_store.h"

namespace ps {

// Restores generation `clock` of `dir` straight into the blocks of `store`,
// record by record (no second copy of the shard in memory), the range
// tables' records on `read.threads` threads at once (CheckpointDir::ReadInto,
// ShardStore::RestoreRangeRows): what a restarting server does. The store
// may come from ShardStore::CreateUnwritten: every row is written, or the
// call fails. FailedPrecondition (CheckRestorable) when the
// generation was written for another model than store->Layout(job, shard,
// ..), or by another shard count (a generation without a shards-<n> file,
// taken for one of the job's count: the message says to resume it on its
// own count once); the errors of CheckpointDir::ReadInto. On an error the
// store holds a mix of old, restored and (from CreateUnwritten) unwritten
// rows: the caller throws it away. Returns the number of tables
// restored.
// REQUIRES: store was created for (job, shard).
StatusOr<size_t> RestoreStore(const CheckpointDir& dir, int64_t clock, const JobOptions& job,
                              uint32_t shard, ShardStore* store,
                              const GenerationReadOptions& read = {});

// What RestoreGeneration did, for its log line.
struct RestoreResult {
  size_t tables = 0;
  // The generation folders read: one path, or "<dir>/shard-{0..3}/gen-<c>".
  std::string from;
  // Bytes of the records read (keys and values); 0 for a generation of the
  // job's shard count, read whole.
  uint64_t bytes_read = 0;
};

// Restores generation `point` (ShardRestorePoint) into `store`, shard
// `shard` of `job`, whose every row it overwrites: the range tables' rows
// and optimizer state, the hashed tables' rows of the shard's hash slots
// (with their uses), the admission sketches; the shard's clocks then start
// at point.clock (the caller's part).
//
// Written by the job's shard count (point.writers == servers): the shard's
// own generation, read whole (RestoreStore).
//
// Written by another count: the shard opens every old shard's generation
// (shard-<i>/gen-<clock>, i < point.writers), checks each meta record
// (CheckReshardable: the same tables, dims, optimizers, settings and hash
// slots; the old shard's owned rows those of its index), then reads from
// each old shard only the records of what it owns now: for a range table
// the runs that overlap its rows (one seek to the first, the runs in key
// order; rows outside its range in a run at either end are read and left
// out), for a hashed table the 'h' records of the hash slots it owns (one
// seek: keys sort by slot), and of each old shard whose slots overlap its
// own, the admission sketch. The range tables' runs are read in pieces of
// whole runs on `read.threads` threads at once, each holding one record at
// a time besides the store; the hashed tables' rows and the sketches by
// the calling thread, before them. The sketches are merged counter by counter by their maximum: an
// id's count on its old shard is at most the merged one, so an id admitted
// before is admitted after, and the merged count exceeds the id's true
// count by at most the largest error of the sketches merged (a sum would
// add their errors). A shard whose slots lie within one old shard's takes
// its sketch as it was. The rows of an evicting table keep their uses: the
// old shards counted their pushes each on its own, so the eviction order
// among rows of different old shards follows those counts (within one
// clock, not the true order of their pushes).
//
// Errors: FailedPrecondition naming the generation and what differs (a
// table, a dim, an optimizer, the hash slots, a setting), or a hashed
// table whose rows on this shard would pass its bound (max_rows or max_mb)
// naming the table, the bound and what to do; DataLoss naming the
// generation for a corrupt or missing record (a run of rows missing, a
// record of the wrong size or an id in another slot) or a meta record of
// another clock; FailedPrecondition for a generation of another shard
// count of format 4 or older (which has no hash slots in its keys). On an
// error the store holds a mix of rows (and of unwritten ones, from
// CreateUnwritten): the caller throws it away. FailedPrecondition for a
// clock workers could not resume at (>= kMaxClock). Every reading thread
// has returned when the call does.
// REQUIRES: store was created for (job, shard) (Create, or CreateUnwritten);
// point.clock >= 0.
StatusOr<RestoreResult> RestoreGeneration(const JobOptions& job, uint32_t shard,
                                          const RestorePoint& point, ShardStore* store,
                                          Filesystem* files, const GenerationReadOptions& read = {});

// Records in `recent` the pushes the shards that wrote generation `point`
// had applied lately (their recent-pushes files, server/checkpoint.h):
// shard `shard`'s own when the job's shard count wrote it, else every old
// shard's (a push's ids name it alone: whichever new shard it reaches, its
// update is in the rows restored). A generation without the file adds
// none. DataLoss naming a malformed file, or one whose windows do not fit
// the job's workers and window size.
// REQUIRES: point.clock >= 0.
Status LoadRecentPushes(const JobOptions& job, uint32_t shard, const RestorePoint& point,
                        RecentPushes* recent);

}  // namespace ps

#endif  // PS_SERVER_RESTORE_H_
