// What a checkpoint generation's files and their callers hand each other
// (server/checkpoint.h writes and reads generations; server/checkpoint_db.h
// is the database inside one): the stages a write passes, with the hook
// called at each, and the sink a read puts rows into.
#ifndef PS_SERVER_CHECKPOINT_IO_H_
#define PS_SERVER_CHECKPOINT_IO_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "store/snapshot.h"

namespace ps {

// The points a Write passes, in order, where CheckpointWriteOptions::at_stage
// is called:
//   kCreated    the database exists in gen-<clock>.tmp, nothing written;
//   kRecords    about half of the run records written and committed;
//   kFlushed    the database flushed and closed, before the fsync;
//   kSynced     after the fsync (skipped with sync: false), before the rename;
//   kPublished  renamed to gen-<clock> and the folder synced, before pruning;
//   kPruning    an older generation renamed to .tmp, before its removal
//               (reached only when more than `keep` generations exist; once
//               per generation removed).
enum class CheckpointStage { kCreated, kRecords, kFlushed, kSynced, kPublished, kPruning };
inline constexpr CheckpointStage kCheckpointStages[] = {
    CheckpointStage::kCreated, CheckpointStage::kRecords,   CheckpointStage::kFlushed,
    CheckpointStage::kSynced,  CheckpointStage::kPublished, CheckpointStage::kPruning};
// "created", "records", "flushed", "synced", "published", "pruning".
inline std::string_view CheckpointStageName(CheckpointStage stage) {
  switch (stage) {
    case CheckpointStage::kCreated:
      return "created";
    case CheckpointStage::kRecords:
      return "records";
    case CheckpointStage::kFlushed:
      return "flushed";
    case CheckpointStage::kSynced:
      return "synced";
    case CheckpointStage::kPublished:
      return "published";
    case CheckpointStage::kPruning:
      return "pruning";
  }
  return "unknown";
}

// Called on the writing thread at each stage of a Write of generation
// `clock`; `tmp` is the folder being written (gen-<clock>.tmp). What it
// does happens inside the Write (a test hook may stall it there for good:
// server/checkpoint_stall.h).
using CheckpointStageHook =
    std::function<void(CheckpointStage stage, int64_t clock, const std::string& tmp)>;

// Where CheckpointDir::ReadInto puts a generation, record by record, so a
// restore can copy the rows straight into their final place.
class RowSink {
 public:
  virtual ~RowSink() = default;
  // The generation's meta record (every table's layout, and as many empty
  // slot arrays as it has slots; no values), before any row. An error stops
  // the read and is returned by ReadInto.
  virtual Status Begin(const ShardSnapshot& layout) = 0;
  // Rows [first, first + count) of table `table` (global row ids inside its
  // owned range; each row arrives exactly once): `values` and each of
  // `slots` hold count x dim floats, row-major, possibly unaligned. A
  // hashed table's rows arrive one at a time (count 1), `first` the id, in
  // ascending order of id, with `use` its use (kRowUseBytes) when the
  // table evicts (null otherwise).
  virtual void Rows(uint32_t table, uint64_t first, uint64_t count, const std::byte* values,
                    std::span<const std::byte* const> slots, const std::byte* use) = 0;
  // A hashed table's admission sketch (its counters, PushSketch::Data),
  // before the table's rows; once for each table whose meta record gives
  // it a sketch width.
  virtual void Sketch(uint32_t table, std::span<const std::byte> counters) = 0;
  // True when Rows of range tables may be called from several threads at
  // once (each call with rows no other call has, and while one thread at a
  // time makes the other calls): the read then reads the range tables'
  // records on several threads (GenerationReadOptions). Begin comes first
  // and returns before any Rows, on the thread that called the read.
  virtual bool ConcurrentRangeRows() const { return false; }
};

// How a generation is read (CheckpointDir::ReadInto).
struct GenerationReadOptions {
  // Threads reading the range tables' records at once, each a key range of
  // them, when the sink allows it (RowSink::ConcurrentRangeRows); 0:
  // DefaultReadThreads() (server/read_tasks.h), 1: the calling thread
  // alone. The sketches and the hashed tables' rows are read by one thread,
  // the one reading the first key range.
  uint32_t threads = 0;
  // The least bytes of records a key range holds: a generation of fewer
  // than threads x this bytes of range rows is read by fewer threads (a
  // thread's start and its first seek cost more than reading a few MB).
  uint64_t min_range_bytes = uint64_t{16} << 20;
};

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_IO_H_
