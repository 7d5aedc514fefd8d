// The partitioner on its own: which shard each part goes to, its rows, its
// value slice and output positions, and chunking by the server's limits and
// client.push_part_bytes.
#include "client/partition.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/key_range.h"

namespace ps {
namespace {

using Kind = PartSpec::Kind;

constexpr PartLimits kRoomy{.max_request_bytes = 64 << 20, .max_keys = 1 << 20,
                            .push_part_bytes = 1 << 20};

std::vector<uint64_t> Vec(std::span<const uint64_t> s) { return {s.begin(), s.end()}; }

TEST(PartitionTest, DenseRequestIsOneRangePerShard) {
  Partition p;
  p.Split({.op = Op::kPull, .table_rows = 1001, .dim = 3, .num_shards = 3, .dense = true},
          kRoomy);
  ASSERT_EQ(p.parts().size(), 3u);
  uint64_t next = 0;
  for (uint32_t s = 0; s < 3; ++s) {
    const PartSpec& part = p.parts()[s];
    const RowRange r = ShardRows(1001, 3, s);
    EXPECT_EQ(part.kind, Kind::kDenseRange);
    EXPECT_EQ(part.shard, s);
    EXPECT_EQ(part.first_row, r.begin);
    EXPECT_EQ(part.offset, r.begin);
    EXPECT_EQ(part.count, r.end - r.begin);
    EXPECT_TRUE(part.positions.empty());
    EXPECT_EQ(part.first_row, next);
    next = r.end;
  }
  EXPECT_EQ(next, 1001u);
}

TEST(PartitionTest, PushesAreCutIntoPartsOfPushPartBytes) {
  PartLimits limits = kRoomy;
  limits.push_part_bytes = 4096;  // 341 rows of 3 floats
  Partition p;
  p.Split({.op = Op::kPush, .table_rows = 1001, .dim = 3, .num_shards = 2, .dense = true}, limits);
  // 500 and 501 rows per shard: 341 + 159 and 341 + 160.
  ASSERT_EQ(p.parts().size(), 4u);
  EXPECT_EQ(p.parts()[0].count, 341u);
  EXPECT_EQ(p.parts()[1].count, 159u);
  EXPECT_EQ(p.parts()[1].first_row, 341u);
  EXPECT_EQ(p.parts()[2].shard, 1u);
  EXPECT_EQ(p.parts()[2].first_row, 500u);
  EXPECT_EQ(p.parts()[3].count, 160u);
  // Pulls are cut only by the server's limits.
  p.Split({.op = Op::kPull, .table_rows = 1001, .dim = 3, .num_shards = 2, .dense = true}, limits);
  EXPECT_EQ(p.parts().size(), 2u);
}

TEST(PartitionTest, RowsPerPartKeepsEveryServerLimit) {
  const PartLimits bytes{.max_request_bytes = 8192, .max_keys = 1000000, .push_part_bytes = 1 << 20};
  // (8192 - 4096 header room) / (4 * 3 + 8 key bytes) rows with keys.
  EXPECT_EQ(RowsPerPart(Op::kPull, 3, /*dense=*/false, bytes), 204u);
  EXPECT_EQ(RowsPerPart(Op::kPull, 3, /*dense=*/true, bytes), 341u);
  const PartLimits keys{.max_request_bytes = 64 << 20, .max_keys = 10, .push_part_bytes = 1 << 20};
  EXPECT_EQ(RowsPerPart(Op::kPush, 3, false, keys), 10u);
  // A row larger than every limit still goes, alone.
  const PartLimits tiny{.max_request_bytes = 100, .max_keys = 10, .push_part_bytes = 4096};
  EXPECT_EQ(RowsPerPart(Op::kPush, 100000, false, tiny), 1u);
}

TEST(PartitionTest, SortedRowsAreRunsOfTheCallersRows) {
  // 1000000 rows over 2 shards: [0, 500000) and [500000, 1000000).
  const std::vector<uint64_t> rows = {3, 12, 499999, 500000, 999999};
  Partition p;
  p.Split({.op = Op::kPush, .table_rows = 1000000, .dim = 4, .num_shards = 2, .rows = rows},
          kRoomy);
  ASSERT_EQ(p.parts().size(), 2u);
  EXPECT_EQ(p.parts()[0].kind, Kind::kRun);
  EXPECT_EQ(p.parts()[0].shard, 0u);
  EXPECT_EQ(p.parts()[0].offset, 0u);
  EXPECT_EQ(p.parts()[0].count, 3u);
  EXPECT_EQ(p.parts()[1].shard, 1u);
  EXPECT_EQ(p.parts()[1].offset, 3u);
  EXPECT_EQ(p.parts()[1].count, 2u);
  EXPECT_TRUE(p.parts()[1].positions.empty());
}

TEST(PartitionTest, RunsOfAPullKeepTheirOutputPositions) {
  const std::vector<uint64_t> rows = {3, 12, 500000};
  const std::vector<uint64_t> out_index = {4, 0, 7};
  Partition p;
  p.Split({.op = Op::kPull, .table_rows = 1000000, .dim = 4, .num_shards = 2, .rows = rows,
           .out_index = out_index},
          kRoomy);
  ASSERT_EQ(p.parts().size(), 2u);
  EXPECT_EQ(Vec(p.parts()[0].positions), (std::vector<uint64_t>{4, 0}));
  EXPECT_EQ(Vec(p.parts()[1].positions), (std::vector<uint64_t>{7}));
}

TEST(PartitionTest, InterleavedRowsAreGatheredPerShardInRequestOrder) {
  const std::vector<uint64_t> rows = {999999, 3, 500000, 3, 499999, 12};
  Partition p;
  p.Split({.op = Op::kPull, .table_rows = 1000000, .dim = 4, .num_shards = 2, .rows = rows},
          kRoomy);
  ASSERT_EQ(p.parts().size(), 2u);
  const PartSpec& zero = p.parts()[0];
  const PartSpec& one = p.parts()[1];
  EXPECT_EQ(zero.kind, Kind::kGathered);
  EXPECT_EQ(zero.shard, 0u);
  EXPECT_EQ(Vec(zero.gather), (std::vector<uint64_t>{1, 3, 4, 5}));
  EXPECT_EQ(Vec(zero.positions), (std::vector<uint64_t>{1, 3, 4, 5}));
  EXPECT_EQ(one.shard, 1u);
  EXPECT_EQ(Vec(one.gather), (std::vector<uint64_t>{0, 2}));
  // Through out_index.
  const std::vector<uint64_t> out_index = {10, 11, 12, 13, 14, 15};
  p.Split({.op = Op::kPull, .table_rows = 1000000, .dim = 4, .num_shards = 2, .rows = rows,
           .out_index = out_index},
          kRoomy);
  EXPECT_EQ(Vec(p.parts()[0].positions), (std::vector<uint64_t>{11, 13, 14, 15}));
  EXPECT_EQ(Vec(p.parts()[1].positions), (std::vector<uint64_t>{10, 12}));
  // A push has no output.
  p.Split({.op = Op::kPush, .table_rows = 1000000, .dim = 4, .num_shards = 2, .rows = rows},
          kRoomy);
  EXPECT_TRUE(p.parts()[0].positions.empty());
  EXPECT_EQ(Vec(p.parts()[1].gather), (std::vector<uint64_t>{0, 2}));
}

TEST(PartitionTest, GatheredRowsAreChunkedToo) {
  std::vector<uint64_t> rows;
  for (uint64_t i = 0; i < 7; ++i) {
    rows.push_back(600000 + i);  // shard 1
    rows.push_back(i);           // shard 0
  }
  PartLimits limits = kRoomy;
  limits.max_keys = 3;
  Partition p;
  p.Split({.op = Op::kPush, .table_rows = 1000000, .dim = 1, .num_shards = 2, .rows = rows},
          limits);
  std::vector<uint64_t> counts;
  std::vector<uint32_t> shards;
  uint64_t covered = 0;
  for (const PartSpec& part : p.parts()) {
    counts.push_back(part.count);
    shards.push_back(part.shard);
    for (uint64_t i : part.gather) {
      EXPECT_EQ(ShardOfRow(1000000, 2, rows[i]), part.shard);
      ++covered;
    }
  }
  EXPECT_EQ(counts, (std::vector<uint64_t>{3, 3, 1, 3, 3, 1}));
  EXPECT_EQ(shards, (std::vector<uint32_t>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(covered, rows.size());
}

TEST(PartitionTest, OneShardIsAlwaysOneRun) {
  const std::vector<uint64_t> rows = {9, 1, 5};
  Partition p;
  p.Split({.op = Op::kPull, .table_rows = 10, .dim = 2, .num_shards = 1, .rows = rows}, kRoomy);
  ASSERT_EQ(p.parts().size(), 1u);
  EXPECT_EQ(p.parts()[0].kind, Kind::kRun);
  EXPECT_EQ(p.parts()[0].count, 3u);
}

TEST(PartitionTest, EmptyRequestHasNoParts) {
  Partition p;
  p.Split({.op = Op::kPull, .table_rows = 10, .dim = 2, .num_shards = 2}, kRoomy);
  EXPECT_TRUE(p.parts().empty());
}

}  // namespace
}  // namespace ps
