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
#include <set>
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

// Who wrote a generation. Each shard of a job of n shards writes its part of
// generation <clock> as shard-<i>/gen-<clock> (i < n), and puts the empty
// file "shards-<n>" beside the database in it before the generation
// becomes visible: so the folder names alone say which shards wrote a
// generation, and a generation of another shard count left in a folder
// (shard-3 after a job of 4 shards resumed on 2) is never taken for part of
// one of the current count. A generation folder without the file was
// written before it existed (checkpoint format 4 or older) and counts as
// written by the job's current shards, as it was then.
//
// The name of that file: "shards-<num_shards>".
std::string GenerationShardsFileName(uint32_t num_shards);
// The shard count the file in the generation folder `generation` names; 0
// when it has none. DataLoss naming the folder when it holds two of them;
// the file system's error when it cannot be listed.
StatusOr<uint32_t> GenerationShards(Filesystem& files, const std::string& generation);

// A delta generation (checkpoint.full_every, server/checkpoint_format.h)
// holds beside its database the empty file "base-<clock>", the clock of
// the generation it builds on (its meta record says the same, with that
// generation's id), so pruning keeps what a kept delta needs without
// opening a database. The name of that file:
std::string GenerationBaseFileName(int64_t base_clock);
// The base clock the file in the generation folder `generation` names; -1
// when it has none (a full generation). DataLoss naming the folder when it
// holds two; the file system's error when it cannot be listed.
StatusOr<int64_t> GenerationBase(Filesystem& files, const std::string& generation);
// The generations of the shard folder `dir` that the newest `keep` build
// on (through their base files, transitively), besides those `keep`: what
// pruning must leave. The file system's errors.
StatusOr<std::set<int64_t>> GenerationsNeeded(Filesystem& files, const std::string& dir,
                                              uint32_t keep);

// The generation a job resumes from: its clock and the shards that wrote it
// (shard-0 .. shard-<writers - 1>), which may be more or fewer than the
// job's servers (a restore then re-splits the rows: server/restore.h).
struct RestorePoint {
  int64_t clock = -1;    // -1: none (a new job)
  uint32_t writers = 0;  // 0 with clock -1
  // Newer generations passed over because a shard that wrote them lacks
  // its part ("clock 40 (of 2): shard-1 lacks it"), for a log line;
  // empty when none.
  std::string passed_over;
};

// With checkpoint.dir and checkpoint.restore: the newest complete
// generation, one that every shard that wrote it holds (shard-0's
// generation of a clock names the writers: its shards-<n> file), or
// generation `restore_clock` when it is >= 0. The launcher passes its clock
// to every server as --restore-clock, so the shards resume consistently;
// a server started by hand finds the same one. {-1, 0} when no shard
// folder holds a generation (a new job), or without checkpoint.dir or
// restore. Creates the job's shards' folders that are missing; reads
// every shard-<i> folder under checkpoint.dir, also those of shards the
// job no longer has.
// FailedPrecondition when generations exist but none is complete, listing
// each shard folder's generations and their writers ("shard 0: 10 (of 2),
// 20 (of 3); shard 1: ..."), and why the newest is incomplete; NotFound
// (listing the same) when `restore_clock` is not a complete generation;
// InvalidArgument or the file system's error naming a folder that cannot
// be created or listed.
StatusOr<RestorePoint> FindRestorePoint(Filesystem& files, const JobOptions& job,
                                        int64_t restore_clock = -1);
// FindRestorePoint on the OS's file system, newest.
StatusOr<RestorePoint> CommonRestorePoint(const JobOptions& job);

// The generation shard `shard` of `job` restores when it starts: its own
// generation `restore_clock` (or its newest) when the job's current shard
// count wrote it, as a shard restarted while its job runs always did;
// otherwise, and when FindRestorePoint finds a newer complete one, that
// one. So a shard whose own newest generation is not complete yet (the
// others still write theirs) restores it, and a shard of a job resumed on
// another shard count finds the generation the others restore. The
// errors of FindRestorePoint (of a missing `restore_clock`: NotFound
// naming what there is).
StatusOr<RestorePoint> ShardRestorePoint(Filesystem& files, const JobOptions& job, uint32_t shard,
                                         int64_t restore_clock);

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_LAYOUT_H_
