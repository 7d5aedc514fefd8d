// Range partition of a table's rows across shards (DESIGN.md section 3).
// A pure function of (rows, shards): every node routes on its own.
#ifndef PS_COMMON_KEY_RANGE_H_
#define PS_COMMON_KEY_RANGE_H_

#include <cstdint>

namespace ps {

// 128-bit unsigned, for products of row counts that must never wrap.
__extension__ typedef unsigned __int128 Uint128;

// Half-open row range [begin, end).
struct RowRange {
  uint64_t begin = 0;
  uint64_t end = 0;

  uint64_t size() const { return end - begin; }
  bool empty() const { return end == begin; }
  bool Contains(uint64_t row) const { return row >= begin && row < end; }
  friend bool operator==(const RowRange&, const RowRange&) = default;
};

// Rows owned by `shard` when `rows` rows are split over `num_shards` shards:
// [floor(rows*shard/num_shards), floor(rows*(shard+1)/num_shards)). Balanced:
// sizes differ by at most one; a shard may own no rows when rows < num_shards.
// REQUIRES: num_shards >= 1, shard < num_shards.
RowRange ShardRows(uint64_t rows, uint32_t num_shards, uint32_t shard);

// The shard that owns `row`. REQUIRES: row < rows, num_shards >= 1.
uint32_t ShardOfRow(uint64_t rows, uint32_t num_shards, uint64_t row);

}  // namespace ps

#endif  // PS_COMMON_KEY_RANGE_H_
