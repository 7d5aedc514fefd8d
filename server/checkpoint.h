// Checkpoints of one shard (DESIGN.md section 7).
//
// Layout on disk, under `dir` (ShardCheckpointDir: checkpoint.dir/shard-<i>/):
//   gen-<clock>/        a complete generation: a RocksDB database holding
//                       one meta record and one record per run of about
//                       64 KiB of consecutive rows (their values and
//                       optimizer state; format in server/checkpoint_format.h),
//                       for the state after every update of the clocks
//                       < <clock>; beside it the empty file shards-<n>,
//                       the number of shards that wrote the generation
//                       (server/checkpoint_layout.h), and, when the
//                       shard recorded them, the file recent-pushes (the
//                       ids of the pushes it applied lately: a restored
//                       shard acknowledges one sent again, not applying it
//                       twice; kRecentPushesFile below).
//   gen-<clock>.tmp/    a generation being written (or torn by a crash):
//                       never read, removed by the next Write.
// A generation is full (every row) or, with checkpoint.full_every above 1,
// a delta: the rows changed since the generation it builds on, whose clock
// the empty file base-<clock> beside its database names (and its meta
// record, with that generation's id). Reading a delta reads its chain down
// to a full generation (server/checkpoint_db.h).
// A generation becomes visible atomically: it is written and synced as
// gen-<clock>.tmp, then renamed to gen-<clock> (and the folder synced), so a
// crash at any point leaves the previous generations intact and never a
// half-written gen-<clock> (server/durable_dir.h). After a successful write
// only the newest `keep` generations remain, and those they build on.
//
// The parts: checkpoint_format.h (the records as bytes, and their checks),
// durable_dir.h (fsync, publish by rename, torn and old generations),
// checkpoint_db.h (the records in RocksDB, the only user of RocksDB),
// checkpoint_layout.h (the folders: ShardCheckpointDir, the generations
// every shard holds), and CheckpointDir here, which puts them together.
//
// Not thread-safe: one thread at a time per CheckpointDir (a server's
// writer thread); path() and GenerationPath() are safe from any thread.
#ifndef PS_SERVER_CHECKPOINT_H_
#define PS_SERVER_CHECKPOINT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "server/checkpoint_io.h"
#include "server/checkpoint_layout.h"
#include "store/snapshot.h"

namespace ps {

struct CheckpointWriteOptions {
  // fsync the generation's files and folders before it becomes visible.
  bool sync = true;
  // Generations kept after a write, >= 1.
  uint32_t keep = 3;
  // Called at each CheckpointStage when set (default: not set; a real job
  // never sets it).
  CheckpointStageHook at_stage = nullptr;
};

class CheckpointDir {
 public:
  // Opens (creating it and its parents when missing) the folder of one
  // shard's generations. InvalidArgument naming the path when it cannot be
  // created or is not a folder. Every file call of Write, Generations and
  // Read's look at the folder goes through `files` (null: the OS's, an
  // OsFilesystem of its own); it must outlive the CheckpointDir.
  static StatusOr<std::unique_ptr<CheckpointDir>> Open(const std::string& dir,
                                                        Filesystem* files = nullptr);

  const std::string& path() const { return path_; }
  // The folder of generation gen-<clock> under path() (whether or not it
  // exists): what Write creates, Read reads and log lines name.
  std::string GenerationPath(int64_t clock) const;

  // Writes `snapshot` as generation gen-<snapshot.clock> (replacing a torn
  // .tmp of any clock; an existing complete generation of the same clock is
  // replaced atomically), then removes all but the newest `keep`
  // generations and the generations they build on (a delta's base, its
  // base's, ... down to a full one). A delta (snapshot.base_clock >= 0)
  // gets its base file. InvalidArgument for keep 0 or a snapshot that
  // ValidateForWrite (server/checkpoint_format.h) refuses, and
  // FailedPrecondition for a delta whose base generation is not in the
  // folder, before anything is touched. On another error (disk full: ResourceExhausted;
  // permissions: PermissionDenied; Internal) the error names the path and
  // the previous generations are intact; the new one is not visible, but
  // for a failure to sync the folder after its publishing rename (it is
  // then complete, its name perhaps not yet durable). A failure to prune is
  // logged, not returned (the new generation is complete; the next Write
  // prunes again).
  Status Write(const ShardSnapshot& snapshot, const CheckpointWriteOptions& options);
  // The same, for a snapshot this call consumes: each run of rows it shares
  // with a store (TableSnapshot::shared, ShardStore::SharedSnapshot) is
  // released as soon as its records are made, so a block the store copied
  // meanwhile is freed then, and the rest go back to the store, rather
  // than at the end of the write. The snapshot's layout stays; its shared
  // runs are released, whatever the result.
  Status Write(ShardSnapshot&& snapshot, const CheckpointWriteOptions& options);

  // Clocks of the complete generations, ascending.
  StatusOr<std::vector<int64_t>> Generations() const;

  // Reads generation gen-<clock> completely (every row of every table;
  // the range tables' runs on several threads, GenerationReadOptions; of
  // a delta, the state at its clock, merged from its chain: a missing or
  // corrupt link, or a base written again since, is DataLoss naming the
  // link and what to do).
  // NotFound when there is no such complete generation; DataLoss naming the
  // path and what is wrong when its files are corrupt, or a record is
  // missing, extra, overlaps another or has the wrong size (naming the
  // table and rows), or its meta record names another clock;
  // FailedPrecondition for another format version; ResourceExhausted when
  // it does not fit in memory.
  StatusOr<ShardSnapshot> Read(int64_t clock, const GenerationReadOptions& options = {}) const;
  // Reads generation gen-<clock> into `sink` without holding it in memory:
  // the meta record to sink->Begin, then every record to sink->Rows, the
  // range tables' runs on `options.threads` threads at once when the sink
  // allows it (ReadGenerationDatabase, server/checkpoint_db.h). The same
  // checks and errors as Read, and the error of sink->Begin; a DataLoss
  // may come after some rows were handed over (the caller then discards
  // what it got). Every reading thread has returned when the call does.
  Status ReadInto(int64_t clock, RowSink* sink, const GenerationReadOptions& options = {}) const;

  // Another process writes into this folder during a reshard in memory
  // (server/reshard_follower.h): the shard that handed over at clock
  // `handover` writes gen-<handover> while the next map's server of the
  // same index serves and writes later ones. Write then leaves that other
  // writer's unfinished generation alone instead of removing it as torn:
  // gen-<handover>.tmp for the next map's server (`handed_over` false),
  // those of later clocks for the one that handed over (true). Safe from
  // any thread.
  void ShareWithReshard(int64_t handover, bool handed_over) {
    shared_handover_.store(handover, std::memory_order_relaxed);
    shared_as_old_.store(handed_over, std::memory_order_relaxed);
  }

 private:
  CheckpointDir(std::string path, Filesystem* files)
      : path_(std::move(path)), files_(files != nullptr ? files : &os_files_) {}
  // Write; `release` (when set: the snapshot, owned by the caller) has
  // its shared runs released as their records are made.
  Status WriteGeneration(const ShardSnapshot& snapshot, const CheckpointWriteOptions& options,
                         ShardSnapshot* release);
  // The shards-<n> file in the generation being written, `tmp`; an empty
  // file at `path`.
  Status WriteShardsFile(const std::string& tmp, uint32_t num_shards);
  Status WriteEmptyFile(const std::string& path);
  // The recent-pushes file of the generation being written, `tmp`.
  Status WriteRecentPushes(const std::string& tmp, const std::vector<uint64_t>& numbers);
  const std::string path_;
  OsFilesystem os_files_;  // used when Open was given no Filesystem
  Filesystem* const files_;
  std::atomic<int64_t> shared_handover_{-1};  // ShareWithReshard; -1: not shared
  std::atomic<bool> shared_as_old_{false};
};

// The file beside a generation's database holding its shard's recent
// pushes at the snapshot (ShardSnapshot::recent_pushes), when it had any:
// "PSRP", format 1 (u32), the count of numbers (u64), the numbers (u64
// each), and an FNV-1a hash (u64) of every byte before it; little-endian.
inline constexpr std::string_view kRecentPushesFile = "recent-pushes";

// The numbers in `generation`'s recent-pushes file (a generation folder);
// empty when it has none (written without them, or by an older build).
// DataLoss naming the file when it is malformed (short, another magic or
// format, a count it cannot hold, a wrong hash).
StatusOr<std::vector<uint64_t>> ReadRecentPushes(const std::string& generation);

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_H_
