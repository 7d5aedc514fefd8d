#include "server/restore.h"

#include <span>
#include <string>
#include <utility>

namespace ps {

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
              std::span<const std::byte* const> slots) override {
      store_->RestoreRows(table, first, count, values, slots);
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
