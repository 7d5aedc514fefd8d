#include "common/key_range.h"

namespace ps {

namespace {
// 128-bit products: rows * shard never overflows for any 64-bit row count.
uint64_t RangeBegin(uint64_t rows, uint32_t num_shards, uint64_t shard) {
  return static_cast<uint64_t>(static_cast<Uint128>(rows) * shard / num_shards);
}
}  // namespace

RowRange ShardRows(uint64_t rows, uint32_t num_shards, uint32_t shard) {
  return {RangeBegin(rows, num_shards, shard), RangeBegin(rows, num_shards, shard + 1ull)};
}

uint32_t ShardOfRow(uint64_t rows, uint32_t num_shards, uint64_t row) {
  // The largest i with floor(rows*i/S) <= row, i.e. rows*i < (row+1)*S.
  Uint128 x = (static_cast<Uint128>(row) + 1) * num_shards - 1;
  return static_cast<uint32_t>(x / rows);
}

}  // namespace ps
