// Where a job's checkpoints lie (DESIGN.md section 7), without what they
// hold: the folder of each shard's generations under checkpoint.dir, and
// the generations every shard holds. Reading them lists folder names only
// (server/durable_dir.h), never a generation's database: a library of its
// own (ps_checkpoint_layout) that the launcher links without the server or
// RocksDB. What a generation holds, and writing and reading one:
// server/checkpoint.h.
//
// Thread-safe: functions of their arguments and the file system.
#ifndef PS_SERVER_CHECKPOINT_LAYOUT_H_
#define PS_SERVER_CHECKPOINT_LAYOUT_H_

#include <cstdint>
#include <string>

#include "common/env.h"
#include "common/options.h"
#include "common/status.h"

namespace ps {

// The folder of shard `shard`'s generations under the job's checkpoint.dir
// `checkpoint_dir`: "<checkpoint_dir>/shard-<shard>". The one place that
// names it; the server, the launcher and tests build it here. Pure.
std::string ShardCheckpointDir(const std::string& checkpoint_dir, uint32_t shard);

// Creates the checkpoint folder `dir` and its parents when missing.
// InvalidArgument naming the path when it is empty, cannot be created, or
// is not a folder.
Status CreateCheckpointFolder(Filesystem& files, const std::string& dir);

// With checkpoint.dir and checkpoint.restore: the newest generation clock
// that every shard's folder holds (the launcher passes it to every server as
// --restore-clock, so the shards resume consistently); -1 when no shard has
// a generation (a new job), or without checkpoint.dir or restore. Creates
// the shards' folders that are missing. FailedPrecondition, listing each
// shard's generations, when some do but no clock is common to all;
// InvalidArgument or the file system's error naming a folder that cannot be
// created or listed.
StatusOr<int64_t> CommonRestoreClock(const JobOptions& job);

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_LAYOUT_H_
