#include "common/key_range.h"

#include <gtest/gtest.h>

#include <limits>

namespace ps {
namespace {

TEST(KeyRangeTest, RangesTileTheRowsAndAreBalanced) {
  for (uint64_t rows : {1ull, 2ull, 7ull, 100ull, 1001ull, 1000000ull}) {
    for (uint32_t shards : {1u, 2u, 3u, 7u, 16u}) {
      uint64_t next = 0, smallest = ~0ull, largest = 0;
      for (uint32_t s = 0; s < shards; ++s) {
        RowRange r = ShardRows(rows, shards, s);
        EXPECT_EQ(r.begin, next);
        next = r.end;
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
      }
      EXPECT_EQ(next, rows);
      EXPECT_LE(largest - smallest, 1u) << rows << " rows, " << shards << " shards";
    }
  }
}

TEST(KeyRangeTest, ShardOfRowAgreesWithTheRanges) {
  for (uint64_t rows : {1ull, 5ull, 97ull, 1000ull}) {
    for (uint32_t shards : {1u, 2u, 3u, 8u, 13u}) {
      for (uint64_t row = 0; row < rows; ++row) {
        uint32_t s = ShardOfRow(rows, shards, row);
        ASSERT_LT(s, shards);
        EXPECT_TRUE(ShardRows(rows, shards, s).Contains(row))
            << "row " << row << " of " << rows << " on " << shards << " shards";
      }
    }
  }
}

TEST(KeyRangeTest, HugeRowCountsDoNotOverflow) {
  const uint64_t rows = std::numeric_limits<uint64_t>::max();
  const uint32_t shards = 7;
  EXPECT_EQ(ShardRows(rows, shards, shards - 1).end, rows);
  const uint64_t row = rows - 1;
  EXPECT_TRUE(ShardRows(rows, shards, ShardOfRow(rows, shards, row)).Contains(row));
  EXPECT_EQ(ShardOfRow(rows, shards, 0), 0u);
}

}  // namespace
}  // namespace ps
