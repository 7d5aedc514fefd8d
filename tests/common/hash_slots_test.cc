// Where an id of a hash-keyed table lives (common/hash_slots.h): the hash
// is the documented XXH3-64, and ids spread over the shards evenly, even
// when a few ids take most requests (Zipf).
#include "common/hash_slots.h"
#include "common/table_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <random>
#include <unordered_set>
#include <vector>

#include <gtest/gtest.h>

namespace ps {
namespace {

// The values `xxhsum -H3` prints for the 8 little-endian bytes of the ids
// 0 and 1 (seed 0): a user's tool computes the same.
TEST(HashSlotsTest, TheHashIsXxh3OfTheIdsLittleEndianBytes) {
  EXPECT_EQ(IdHash(0, 0), 0xc77b3abb6f87acd9ull);
  EXPECT_EQ(IdHash(1, 0), 0x2fbc593564db792eull);
  EXPECT_NE(IdHash(1, 1), IdHash(1, 0));  // the table's seed changes it
  EXPECT_EQ(IdSlot(1, 0, 4096), 0x2fbc593564db792eull % 4096);
}

// A table's seed: what `printf emb | xxhsum -H3` prints.
TEST(HashSlotsTest, ATablesSeedIsXxh3OfItsName) {
  EXPECT_EQ(NameHash("emb"), 0x68f33834bcc78b6eull);
  TableOptions t;
  t.name = "emb";
  EXPECT_EQ(t.HashSeed(), 0x68f33834bcc78b6eull);
}

TEST(HashSlotsTest, SlotsSplitIntoRangesAndEverySlotHasOneShard) {
  constexpr uint32_t kSlots = 4096, kShards = 3;
  uint32_t covered = 0;
  for (uint32_t s = 0; s < kShards; ++s) {
    const RowRange range = ShardSlots(kSlots, kShards, s);
    EXPECT_EQ(range.begin, covered);
    covered = static_cast<uint32_t>(range.end);
    for (uint64_t slot = range.begin; slot < range.end; ++slot) {
      ASSERT_EQ(SlotShard(static_cast<uint32_t>(slot), kSlots, kShards), s);
    }
  }
  EXPECT_EQ(covered, kSlots);
}

// Zipf(1.1) over a million ids, the way feature ids of click logs fall:
// rows (distinct ids) and requests (every draw) per shard, over 4 shards.
// The hottest id alone is about 10% of the requests, so requests can be no
// more even than that; rows must be within a few percent.
TEST(HashSlotsTest, SkewedIdsSpreadOverTheShards) {
  constexpr uint32_t kSlots = 4096, kShards = 4;
  constexpr uint64_t kIds = 1000000, kDraws = 400000;
  std::vector<double> cdf(kIds);
  double sum = 0;
  for (uint64_t k = 0; k < kIds; ++k) cdf[k] = (sum += 1.0 / std::pow(k + 1.0, 1.1));
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> unit(0.0, sum);
  std::vector<uint64_t> requests(kShards, 0), rows(kShards, 0);
  std::unordered_set<uint64_t> seen;
  for (uint64_t d = 0; d < kDraws; ++d) {
    const uint64_t rank = std::lower_bound(cdf.begin(), cdf.end(), unit(rng)) - cdf.begin();
    const uint64_t id = rank * 0x9e3779b97f4a7c15ull;  // ids are arbitrary 64-bit values
    const uint32_t shard = SlotShard(IdSlot(id, 5, kSlots), kSlots, kShards);
    ++requests[shard];
    if (seen.insert(id).second) ++rows[shard];
  }
  const double mean_rows = static_cast<double>(seen.size()) / kShards;
  for (uint32_t s = 0; s < kShards; ++s) {
    std::printf("shard %u: %.3f of the mean rows, %.3f of the mean requests\n", s,
                rows[s] / mean_rows, requests[s] / (static_cast<double>(kDraws) / kShards));
    EXPECT_NEAR(rows[s] / mean_rows, 1.0, 0.05) << "shard " << s << " rows";
    EXPECT_NEAR(requests[s] / (static_cast<double>(kDraws) / kShards), 1.0, 0.4)
        << "shard " << s << " requests";
  }
}

}  // namespace
}  // namespace ps
