#include "server/restore.h"

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/wire.h"

namespace ps {

StatusOr<int64_t> PickGeneration(const CheckpointDir& dir, int64_t restore_clock,
                                 uint32_t shard) {
  PS_ASSIGN_OR_RETURN(std::vector<int64_t> generations, dir.Generations());
  if (generations.empty()) {
    if (restore_clock >= 0) {
      return NotFoundError("shard " + std::to_string(shard) + ": no checkpoint in " + dir.path() +
                           " to restore clock " + std::to_string(restore_clock) + " from");
    }
    return int64_t{-1};
  }
  int64_t clock = generations.back();
  if (restore_clock >= 0) {
    if (std::find(generations.begin(), generations.end(), restore_clock) == generations.end()) {
      std::string have;
      for (int64_t g : generations) have += (have.empty() ? "" : ", ") + std::to_string(g);
      return NotFoundError("shard " + std::to_string(shard) + ": " + dir.path() +
                           " has no generation of clock " + std::to_string(restore_clock) +
                           "; it has " + have);
    }
    clock = restore_clock;
  }
  if (clock >= kMaxClock) {
    // Workers would resume there and could not send a single request.
    return FailedPreconditionError(
        "shard " + std::to_string(shard) + ": " + dir.GenerationPath(clock) + " is of clock " +
        std::to_string(clock) + ", and workers resuming there could not finish a clock (requests "
        "carry clocks up to 2^62); restore an older generation with --restore-clock, or start "
        "with a new checkpoint.dir");
  }
  return clock;
}

StatusOr<size_t> RestoreStore(const CheckpointDir& dir, int64_t clock, const JobOptions& job,
                              uint32_t shard, ShardStore* store) {
  // Checks the meta record against the store's layout before any row, then
  // hands each record's rows to the store.
  class StoreSink : public RowSink {
   public:
    StoreSink(ShardStore* store, ShardSnapshot expected, std::string where)
        : store_(store), expected_(std::move(expected)), where_(std::move(where)) {}
    Status Begin(const ShardSnapshot& layout) override {
      tables = layout.tables.size();
      return CheckRestorable(layout, expected_, where_);
    }
    void Rows(uint32_t table, uint64_t first, uint64_t count, const std::byte* values,
              std::span<const std::byte* const> slots, const std::byte* use) override {
      store_->RestoreRows(table, first, count, values, slots, use);
    }
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
  PS_RETURN_IF_ERROR(dir.ReadInto(clock, &sink));
  return sink.tables;
}

}  // namespace ps
