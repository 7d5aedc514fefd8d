// A generation of a job's checkpoint as whole tables: every shard's folder
// under checkpoint.dir read through CheckpointDir (server/checkpoint.h) and
// put together into one array per table and per optimizer state array,
// without a running job. What `ps_ctl export` writes as .npy files
// (server/checkpoint_export.h) and what the Python module's
// read_checkpoint returns (docs/checkpoints.md).
//
// A range table comes out whole: rows x dim floats in row order, each
// shard's owned rows at their place. A hashed table comes out as the rows
// every shard held: their ids ascending (uint64) and rows x dim floats in
// the order of the ids. The admission sketch and the rows' use records
// (hashed tables that evict) are not part of the arrays.
//
// Thread safety: a CheckpointArrays is immutable after Open; ReadInto may
// run on one thread at a time per target.
#ifndef PS_SERVER_CHECKPOINT_ARRAYS_H_
#define PS_SERVER_CHECKPOINT_ARRAYS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/status.h"
#include "server/checkpoint.h"

namespace ps {

// One table of a generation, as every shard's meta record agrees on it.
struct ArrayTable {
  std::string name;
  bool hashed = false;
  // Range: the rows of the table. Hashed: the rows all shards held.
  uint64_t rows = 0;
  uint32_t dim = 0;
  // The optimizer's text as the checkpoint keeps it (OptimizerDescription
  // in common/table_options.h); its first word is the rule's name.
  std::string optimizer;
  // The optimizer's state arrays in the order the checkpoint keeps them
  // (UpdateRule::slot_names; "slot<k>" for a rule this build does not
  // know).
  std::vector<std::string> slot_names;
  // Hashed: the table's hash slots.
  uint32_t hash_slots = 0;
  // The rows each shard holds (range: owned rows), by shard.
  std::vector<uint64_t> shard_rows;
};

// A generation chosen by CheckpointArrays::Open.
struct ArrayGeneration {
  std::string dir;  // the checkpoint.dir given
  int64_t clock = 0;
  uint32_t num_shards = 0;
  std::string fingerprint;  // the job's model fingerprint (all shards agree)
  // Each shard's generation folder (<dir>/shard-<i>/gen-<clock>), by shard.
  std::vector<std::string> paths;
  std::vector<ArrayTable> tables;  // in the job's table order
};

// Where a table's arrays go, as bytes: values and each slot rows x dim
// little-endian float32, row-major; ids (hashed only) rows little-endian
// uint64. Each span must have exactly that size (empty for an array of no
// elements) and stay valid until ReadInto returns.
struct TableArrays {
  std::span<std::byte> values;
  std::vector<std::span<std::byte>> slots;  // one per slot name
  std::span<std::byte> ids;                 // hashed only
};

// Gives CheckpointArrays::ReadInto the arrays of each table.
class ArrayTarget {
 public:
  virtual ~ArrayTarget() = default;
  // The arrays of table `index` (generation.tables[index]), asked for every
  // table, in order, before any row is read. An error stops the read and is
  // returned by ReadInto.
  virtual StatusOr<TableArrays> Arrays(size_t index, const ArrayTable& table) = 0;
};

// A line for people on what the read is doing ("reading shard-1 ...").
using ArrayProgress = std::function<void(const std::string& line)>;

class CheckpointArrays {
 public:
  // Finds generation `clock` (nullopt: the newest clock that every shard's
  // folder holds complete) of the checkpoint folder `dir` (a job's
  // checkpoint.dir: shard-0, shard-1, ... below it), reads every shard's
  // meta record and checks that they make one model. Creates nothing.
  // Errors, each naming the path and what to do:
  //   NotFound: `dir` does not exist, holds no shard-<i> folder, a shard's
  //     folder is missing (a gap in the numbers, or fewer folders than the
  //     generation's shard count), `clock` is not complete in every
  //     shard's folder, or no clock is (listing what each shard holds);
  //   InvalidArgument: `dir` is not a folder;
  //   DataLoss: a generation is corrupt (CheckpointDir's error, naming its
  //     path), or the shards' meta records disagree (shard numbers, shard
  //     count, fingerprint, tables, owned rows that do not cover a table);
  //   FailedPrecondition: a format version this build does not read.
  // `files` (null: the OS's) must outlive the CheckpointArrays.
  static StatusOr<std::unique_ptr<CheckpointArrays>> Open(const std::string& dir,
                                                          std::optional<int64_t> clock,
                                                          Filesystem* files = nullptr);

  const ArrayGeneration& generation() const { return generation_; }

  // Asks `target` for every table's arrays, then reads each shard's
  // generation once, in shard order, copying its rows into them; then puts
  // each hashed table's rows in the order of their ids, in place. Holds
  // besides the arrays 16 bytes per row of the hashed tables (ids and
  // their order) and nothing per row of a range table. The errors of Open's
  // reads (a generation removed or corrupted since: NotFound, DataLoss),
  // DataLoss when two shards hold the same id of a hashed table or a
  // generation's meta record changed since Open, and the target's errors.
  // On an error the arrays hold part of the generation. `progress` (may be
  // null) gets a line per shard and per hashed table ordered.
  Status ReadInto(ArrayTarget* target, const ArrayProgress& progress) const;

 private:
  CheckpointArrays(ArrayGeneration generation, std::vector<std::unique_ptr<CheckpointDir>> shards,
                   std::vector<ShardSnapshot> layouts)
      : generation_(std::move(generation)),
        shards_(std::move(shards)),
        layouts_(std::move(layouts)) {}

  const ArrayGeneration generation_;
  const std::vector<std::unique_ptr<CheckpointDir>> shards_;
  const std::vector<ShardSnapshot> layouts_;  // each shard's meta record
};

// The state array names of optimizer text `optimizer` with `slots` arrays:
// its rule's slot_names, or "slot<k>" for a rule this build does not know.
std::vector<std::string> OptimizerSlotNames(const std::string& optimizer, size_t slots);

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_ARRAYS_H_
