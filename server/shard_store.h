// The in-memory state of one shard: for every table, the rows this shard
// owns, stored contiguously (owned_rows x dim floats), and the update rule
// that applies pushed values to them.
//
// Not thread-safe: one ShardServer thread owns it.
#ifndef PS_SERVER_SHARD_STORE_H_
#define PS_SERVER_SHARD_STORE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/options.h"
#include "common/status.h"
#include "common/wire.h"

namespace ps {

class ShardStore {
 public:
  // Allocates and initializes the rows of `shard` for every table of `job`.
  // A row's initial values depend only on (table init seed, row), never on
  // the number of shards. ResourceExhausted if the memory cannot be had.
  // REQUIRES: job.Validate().ok(), shard < job.cluster.servers.size().
  static StatusOr<std::unique_ptr<ShardStore>> Create(const JobOptions& job, uint32_t shard);

  // Per-table layout (rows, dim, owned range) for DecodeRequest.
  std::span<const TableLayout> layouts() const { return layouts_; }

  // Applies a PUSH with the table's update rule, reading the values in place.
  // REQUIRES: `request` passed DecodeRequest against layouts(). Never fails.
  void ApplyPush(const Request& request);

  // Copies the rows a PULL names into `out` (count*dim floats, row-major in
  // request order). REQUIRES: as ApplyPush; `out` has room for count*dim.
  void ReadRows(const Request& request, float* out) const;

  // The values of table `table` on this shard (owned rows x dim), for tests
  // and checkpoints. REQUIRES: table < layouts().size().
  std::span<const float> values(uint32_t table) const { return tables_[table].values; }

 private:
  struct Table {
    TableLayout layout;
    OptimizerOptions optimizer;
    std::vector<float> values;
  };
  ShardStore() = default;

  std::vector<Table> tables_;
  std::vector<TableLayout> layouts_;
};

// The initial value of element `col` of `row` under `init` (deterministic).
float InitialValue(const InitOptions& init, uint64_t row, uint32_t col);

}  // namespace ps

#endif  // PS_SERVER_SHARD_STORE_H_
