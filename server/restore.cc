#include "server/restore.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/hash_slots.h"
#include "common/wire.h"
#include "server/checkpoint_db.h"
#include "server/checkpoint_format.h"
#include "server/durable_dir.h"
#include "server/read_tasks.h"

namespace ps {

StatusOr<size_t> RestoreStore(const CheckpointDir& dir, int64_t clock, const JobOptions& job,
                              uint32_t shard, ShardStore* store,
                              const GenerationReadOptions& read) {
  // Checks the meta record against the store's layout before any row, then
  // hands each record's rows to the store: a range table's from the
  // reading threads at once.
  class StoreSink : public RowSink {
   public:
    StoreSink(ShardStore* store, ShardSnapshot expected, std::string where)
        : store_(store), expected_(std::move(expected)), where_(std::move(where)) {}
    Status Begin(const ShardSnapshot& layout) override {
      tables = layout.tables.size();
      if (layout.num_shards != expected_.num_shards) {
        // Only a generation without its shards-<n> file is taken for one
        // of the job's shard count without being one.
        return FailedPreconditionError(
            where_ + ": written by shard " + std::to_string(layout.shard) + " of " +
            std::to_string(layout.num_shards) + ", but the generation has no file naming its " +
            "shard count (it was written by a build older than restores onto another shard " +
            "count), so it counts as written by the job's " +
            std::to_string(expected_.num_shards) + " shards; resume it once on " +
            std::to_string(layout.num_shards) +
            " servers: the generations written from then on resume on any number");
      }
      PS_RETURN_IF_ERROR(CheckRestorable(layout, expected_, where_));
      store_->BeginConcurrentRestore();
      return Status::Ok();
    }
    void Rows(uint32_t table, uint64_t first, uint64_t count, const std::byte* values,
              std::span<const std::byte* const> slots, const std::byte* use) override {
      if (expected_.tables[table].hashed) {
        store_->RestoreRows(table, first, count, values, slots, use);
      } else {
        store_->RestoreRangeRows(table, first, count, values, slots);
      }
    }
    bool ConcurrentRangeRows() const override { return true; }
    void Sketch(uint32_t table, std::span<const std::byte> counters) override {
      store_->RestoreSketch(table, counters);  // the size was checked against the same width
    }
    size_t tables = 0;

   private:
    ShardStore* store_;
    const ShardSnapshot expected_;
    const std::string where_;
  };
  StoreSink sink(store, store->Layout(job, shard, clock), dir.GenerationPath(clock));
  PS_RETURN_IF_ERROR(dir.ReadInto(clock, &sink, read));
  return sink.tables;
}

namespace {

// A restore of generation `clock`, written by `writers` shards, into shard
// `shard` of the job's servers (another count): each old shard's records
// of the rows the shard owns.
class ReshardedRestore {
 public:
  ReshardedRestore(const JobOptions& job, uint32_t shard, int64_t clock, uint32_t writers,
                   ShardStore* store, const GenerationReadOptions& read)
      : job_(job),
        shard_(shard),
        clock_(clock),
        writers_(writers),
        store_(store),
        expected_(store->Layout(job, shard, clock)),
        threads_(read.threads != 0 ? read.threads : DefaultReadThreads()),
        min_range_bytes_(read.min_range_bytes) {}

  StatusOr<RestoreResult> Run() {
    // Every old shard's meta record first: a generation of another model is
    // refused before any row is touched.
    for (uint32_t i = 0; i < writers_; ++i) {
      const std::string path =
          ShardCheckpointDir(job_.checkpoint.dir, i) + "/" + GenerationName(clock_);
      PS_ASSIGN_OR_RETURN(std::unique_ptr<GenerationReader> reader, GenerationReader::Open(path));
      PS_RETURN_IF_ERROR(CheckOldShard(*reader, i));
      old_.push_back(std::move(reader));
    }
    store_->BeginConcurrentRestore();
    for (uint32_t t = 0; t < expected_.tables.size(); ++t) {
      if (expected_.tables[t].hashed) PS_RETURN_IF_ERROR(RestoreHashed(t));
    }
    PS_RETURN_IF_ERROR(RestoreRanges());
    RestoreResult result;
    result.tables = expected_.tables.size();
    // "<dir>/shard-{0..n}/gen-<clock>": the folder of shard 0 without its "0".
    std::string folders = ShardCheckpointDir(job_.checkpoint.dir, 0);
    folders.pop_back();
    result.from = folders + "{0.." + std::to_string(writers_ - 1) + "}/" + GenerationName(clock_);
    result.bytes_read = bytes_read_ + range_bytes_read_.load();
    return result;
  }

 private:
  Status CheckOldShard(const GenerationReader& reader, uint32_t index) const {
    const ShardSnapshot& saved = reader.layout();
    if (saved.clock != clock_) {
      return DataLossError(reader.path() + ": the meta record says clock " +
                           std::to_string(saved.clock));
    }
    if (saved.num_shards != writers_ || saved.shard != index) {
      return DataLossError(reader.path() + ": the meta record says shard " +
                           std::to_string(saved.shard) + " of " +
                           std::to_string(saved.num_shards) + ", but its folder and its shards " +
                           "file say shard " + std::to_string(index) + " of " +
                           std::to_string(writers_) + "; remove the generation");
    }
    if (reader.version() < 5) {
      return FailedPreconditionError(
          reader.path() + ": checkpoint format " + std::to_string(reader.version()) +
          " cannot be restored onto another shard count (its hashed rows are not keyed by hash "
          "slot); resume it on " + std::to_string(writers_) + " servers once");
    }
    return CheckReshardable(saved, expected_, reader.path());
  }

  // The rows a new and an old shard both own.
  static RowRange Overlap(const RowRange& a, const RowRange& b) {
    const uint64_t begin = std::max(a.begin, b.begin), end = std::min(a.end, b.end);
    return begin < end ? RowRange{begin, end} : RowRange{begin, begin};
  }

  // What one thread reads of an old shard: rows `rows` of range table
  // `table`.
  struct RangeTask {
    const GenerationReader* reader;
    uint32_t table;
    RowRange rows;
  };

  // Every range table's rows of every old shard that holds some, in pieces
  // of whole runs read on several threads at once (tasks table by table,
  // old shard by old shard, in row order: the first failure in that order
  // is the one named).
  Status RestoreRanges() {
    std::vector<RangeTask> tasks;
    for (uint32_t t = 0; t < expected_.tables.size(); ++t) {
      if (expected_.tables[t].hashed) continue;
      const RowRange mine = expected_.tables[t].owned;
      for (const auto& reader : old_) {
        const TableSnapshot& old = reader->layout().tables[t];
        const RowRange part = Overlap(mine, old.owned);
        if (part.empty()) continue;
        const uint64_t row_bytes = uint64_t{old.dim} * sizeof(float) * (1 + old.slots.size());
        const uint64_t min_rows = row_bytes == 0 ? part.size() : min_range_bytes_ / row_bytes;
        uint64_t begin = part.begin;
        for (const uint64_t cut :
             SplitRowsAtRuns(old.owned.begin, part.begin, part.end, old.dim, threads_, min_rows)) {
          tasks.push_back({reader.get(), t, {begin, cut}});
          begin = cut;
        }
        tasks.push_back({reader.get(), t, {begin, part.end}});
      }
    }
    return RunReadTasks(tasks.size(), threads_, "restoring " + GenerationName(clock_),
                        [&](size_t i, const std::atomic<bool>& stop) {
                          return ReadRuns(*tasks[i].reader, tasks[i].table, tasks[i].rows, stop);
                        });
  }

  // The runs of old shard `reader` that hold rows `part` of table `t`: the
  // first starts at or before part.begin (runs start every RowsPerRun rows
  // from the old shard's first row). Safe to call from several threads at
  // once for disjoint parts.
  Status ReadRuns(const GenerationReader& reader, uint32_t t, RowRange part,
                  const std::atomic<bool>& stop) {
    const TableSnapshot& old = reader.layout().tables[t];
    const uint64_t per_run = RowsPerRun(old.dim);
    uint64_t next = old.owned.begin + (part.begin - old.owned.begin) / per_run * per_run;
    const size_t num_slots = old.slots.size();
    const size_t row_bytes = size_t{old.dim} * sizeof(float);
    uint64_t bytes_read = 0;
    const auto missing = [&]() {
      const uint64_t end = next + std::min(per_run, old.owned.end - next);
      return DataLossError(reader.path() + ": the record of table '" + old.name + "' rows " +
                           RowsText(next, end) + " is missing");
    };
    const std::byte* slots[kMaxOptimizerSlots];
    PS_RETURN_IF_ERROR(reader.Scan(
        RowKey(t, next), RowKey(t, part.end),
        [&](std::string_view key, std::string_view value) -> Status {
          if (stop.load(std::memory_order_relaxed)) return StoppedError();
          uint32_t table = 0;
          uint64_t first = 0;
          if (!DecodeRowKey(key, &table, &first) || table != t) {
            return DataLossError(reader.path() + ": unexpected record among table '" + old.name +
                                 "' rows " + RowsText(part.begin, part.end));
          }
          if (first > next) return missing();
          if (first < next) {
            return DataLossError(reader.path() + ": table '" + old.name +
                                 "' has a record of rows from " + std::to_string(first) +
                                 ", inside the run before it (runs start every " +
                                 std::to_string(per_run) + " rows from row " +
                                 std::to_string(old.owned.begin) + ")");
          }
          const uint64_t count = std::min(per_run, old.owned.end - first);
          const size_t piece = static_cast<size_t>(count) * row_bytes;
          if (value.size() != piece * (1 + num_slots)) {
            return DataLossError(reader.path() + ": the record of table '" + old.name +
                                 "' rows " + RowsText(first, first + count) + " has " +
                                 std::to_string(value.size()) + " bytes, not " +
                                 std::to_string(piece * (1 + num_slots)));
          }
          bytes_read += key.size() + value.size();
          // The run's rows this shard owns.
          const uint64_t from = std::max(first, part.begin);
          const uint64_t to = std::min(first + count, part.end);
          const size_t skip = static_cast<size_t>(from - first) * row_bytes;
          const auto* data = reinterpret_cast<const std::byte*>(value.data());
          for (size_t k = 0; k < num_slots; ++k) slots[k] = data + (1 + k) * piece + skip;
          store_->RestoreRangeRows(t, from, to - from, data + skip,
                                   std::span<const std::byte* const>(slots, num_slots));
          next = first + count;
          return Status::Ok();
        }));
    range_bytes_read_ += bytes_read;
    if (next < part.end) return missing();
    return Status::Ok();
  }

  Status RestoreHashed(uint32_t t) {
    const TableSnapshot& table = expected_.tables[t];
    const RowRange mine = table.owned;  // hash slots
    std::vector<uint16_t> sketch;
    if (table.sketch_width != 0) sketch.assign(size_t{PushSketch::kDepth} * table.sketch_width, 0);
    for (const auto& reader : old_) {
      const RowRange part = Overlap(mine, reader->layout().tables[t].owned);
      if (part.empty()) continue;
      if (!sketch.empty()) PS_RETURN_IF_ERROR(MergeSketch(*reader, t, &sketch));
      PS_RETURN_IF_ERROR(ReadSlots(*reader, t, part));
    }
    if (!sketch.empty()) {
      store_->RestoreSketch(
          t, std::span<const std::byte>(reinterpret_cast<const std::byte*>(sketch.data()),
                                        sketch.size() * sizeof(uint16_t)));
    }
    return Status::Ok();
  }

  // Counter by counter, the larger of *merged and the old shard's.
  Status MergeSketch(const GenerationReader& reader, uint32_t t, std::vector<uint16_t>* merged) {
    const TableSnapshot& old = reader.layout().tables[t];
    StatusOr<std::string> counters = reader.Get(SketchKey(t));
    if (counters.status().code() == StatusCode::kNotFound) {
      return DataLossError(reader.path() + ": the sketch record of table '" + old.name +
                           "' is missing");
    }
    PS_RETURN_IF_ERROR(counters.status());
    if (counters->size() != merged->size() * sizeof(uint16_t)) {
      return DataLossError(reader.path() + ": the sketch record of table '" + old.name + "' has " +
                           std::to_string(counters->size()) + " bytes, not " +
                           std::to_string(merged->size() * sizeof(uint16_t)));
    }
    bytes_read_ += counters->size();
    for (size_t i = 0; i < merged->size(); ++i) {
      uint16_t c;  // little-endian, as on every host that writes them
      std::memcpy(&c, counters->data() + i * sizeof(uint16_t), sizeof c);
      (*merged)[i] = std::max((*merged)[i], c);
    }
    return Status::Ok();
  }

  // The 'h' records of hash slots `part` of table `t` of an old shard.
  Status ReadSlots(const GenerationReader& reader, uint32_t t, RowRange part) {
    const TableSnapshot& old = reader.layout().tables[t];
    const uint64_t seed = NameHash(old.name);
    const size_t num_slots = old.slots.size();
    const size_t row_bytes = size_t{old.dim} * sizeof(float);
    const size_t expected = row_bytes * (1 + num_slots) + (old.row_uses ? kRowUseBytes : 0);
    const uint64_t bound = store_->max_rows(t);
    bool any = false;
    uint32_t last_slot = 0;
    uint64_t last_id = 0;
    const std::byte* slots[kMaxOptimizerSlots];
    return reader.Scan(
        SlotKey(t, static_cast<uint32_t>(part.begin)), SlotKey(t, static_cast<uint32_t>(part.end)),
        [&](std::string_view key, std::string_view value) -> Status {
          uint32_t table = 0, slot = 0;
          uint64_t id = 0;
          if (!DecodeIdKey(key, &table, &slot, &id) || table != t || !part.Contains(slot)) {
            return DataLossError(reader.path() + ": unexpected record among table '" + old.name +
                                 "' hash slots " + RowsText(part.begin, part.end));
          }
          if (slot != IdSlot(id, seed, old.hash_slots)) {
            return DataLossError(reader.path() + ": table '" + old.name + "' has a record of id " +
                                 std::to_string(id) + " under hash slot " + std::to_string(slot) +
                                 ", but the id's slot is " +
                                 std::to_string(IdSlot(id, seed, old.hash_slots)));
          }
          if (any && slot == last_slot && id <= last_id) {
            return DataLossError(reader.path() + ": table '" + old.name + "' has a record of id " +
                                 std::to_string(id) + " out of order");
          }
          if (value.size() != expected) {
            return DataLossError(reader.path() + ": the record of table '" + old.name + "' id " +
                                 std::to_string(id) + " has " + std::to_string(value.size()) +
                                 " bytes, not " + std::to_string(expected));
          }
          // Ids of different slots never meet: every row read is a new one.
          if (store_->stored_rows(t) >= bound) {
            return FailedPreconditionError(
                reader.path() + ": table '" + old.name + "' would hold more than its bound of " +
                std::to_string(bound) + " rows on shard " + std::to_string(shard_) + " of " +
                std::to_string(job_.cluster.servers.size()) + " (the " +
                std::to_string(writers_) + " shards that wrote the checkpoint held more rows " +
                "each than the job's max_rows or max_mb allows for the slots this shard owns " +
                "now); raise the table's max_rows (or max_mb), or resume on more servers");
          }
          any = true;
          last_slot = slot;
          last_id = id;
          bytes_read_ += key.size() + value.size();
          const auto* data = reinterpret_cast<const std::byte*>(value.data());
          for (size_t k = 0; k < num_slots; ++k) slots[k] = data + (1 + k) * row_bytes;
          store_->RestoreRows(t, id, 1, data, std::span<const std::byte* const>(slots, num_slots),
                              old.row_uses ? data + row_bytes * (1 + num_slots) : nullptr);
          return Status::Ok();
        });
  }

  const JobOptions& job_;
  const uint32_t shard_;
  const int64_t clock_;
  const uint32_t writers_;
  ShardStore* const store_;
  const ShardSnapshot expected_;
  // Threads reading the range tables' runs, and the least bytes of a piece.
  const uint32_t threads_;
  const uint64_t min_range_bytes_;
  std::vector<std::unique_ptr<GenerationReader>> old_;
  uint64_t bytes_read_ = 0;  // sketches and hashed rows (one thread)
  std::atomic<uint64_t> range_bytes_read_{0};
};

}  // namespace

StatusOr<RestoreResult> RestoreGeneration(const JobOptions& job, uint32_t shard,
                                          const RestorePoint& point, ShardStore* store,
                                          Filesystem* files, const GenerationReadOptions& read) {
  const auto servers = static_cast<uint32_t>(job.cluster.servers.size());
  const std::string own = ShardCheckpointDir(job.checkpoint.dir, shard);
  if (point.clock >= kMaxClock) {
    // Workers would resume there and could not send a single request.
    return FailedPreconditionError(
        "shard " + std::to_string(shard) + ": " + own + "/" + GenerationName(point.clock) +
        " is of clock " + std::to_string(point.clock) +
        ", and workers resuming there could not finish a clock (requests carry clocks up to "
        "2^62); restore an older generation with --restore-clock, or start with a new "
        "checkpoint.dir");
  }
  RestoreResult result;
  if (point.writers == servers) {
    PS_ASSIGN_OR_RETURN(const std::unique_ptr<CheckpointDir> dir, CheckpointDir::Open(own, files));
    PS_ASSIGN_OR_RETURN(result.tables, RestoreStore(*dir, point.clock, job, shard, store, read));
    result.from = dir->GenerationPath(point.clock);
    return result;
  }
  return ReshardedRestore(job, shard, point.clock, point.writers, store, read).Run();
}

Status LoadRecentPushes(const JobOptions& job, uint32_t shard, const RestorePoint& point,
                        RecentPushes* recent) {
  const auto servers = static_cast<uint32_t>(job.cluster.servers.size());
  std::vector<uint32_t> writers;
  if (point.writers == servers) {
    writers.push_back(shard);
  } else {
    for (uint32_t s = 0; s < point.writers; ++s) writers.push_back(s);
  }
  for (uint32_t s : writers) {
    const std::string generation =
        ShardCheckpointDir(job.checkpoint.dir, s) + "/" + GenerationName(point.clock);
    PS_ASSIGN_OR_RETURN(const std::vector<uint64_t> numbers, ReadRecentPushes(generation));
    if (!numbers.empty() && !recent->Decode(numbers)) {
      return DataLossError(generation + "/" + std::string(kRecentPushesFile) +
                           " does not hold a window of recent pushes for each of the job's " +
                           std::to_string(job.cluster.workers) +
                           " workers; move it aside to restore without it");
    }
  }
  return Status::Ok();
}

}  // namespace ps
