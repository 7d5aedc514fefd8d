// HotRows: the most pushed rows in bounded memory (Space-Saving).
#include "server/hot_rows.h"

#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace ps {
namespace {

TEST(HotRowsTest, CountsExactlyWhileEveryRowHasACounter) {
  HotRows hot(/*capacity=*/8, /*stride=*/1);
  const std::vector<uint64_t> a = {5, 7, 5};
  const std::vector<uint64_t> b = {7, 9};
  hot.Add(0, a);
  hot.Add(0, b);
  hot.Add(1, b);  // another table: other rows
  const std::vector<HotRows::Entry> top = hot.Top(3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].table, 0u);
  EXPECT_EQ(top[0].row, 5u);  // 2 pushes; ties go to the lower table, then row
  EXPECT_EQ(top[0].count, 2u);
  EXPECT_EQ(top[1].row, 7u);
  EXPECT_EQ(top[1].count, 2u);
  EXPECT_EQ(top[2].table, 0u);
  EXPECT_EQ(top[2].row, 9u);
  EXPECT_EQ(top[2].error, 0u);
  EXPECT_EQ(hot.size(), 5u);
}

TEST(HotRowsTest, FindsTheHotRowsOfALongSkewedStreamInBoundedMemory) {
  // 3 rows take half of a million row pushes; the rest spread over 100,000 rows.
  HotRows hot(/*capacity=*/64, /*stride=*/16);
  std::mt19937_64 gen(7);
  std::uniform_int_distribution<uint64_t> cold(1000, 101000);
  std::vector<uint64_t> push(100);
  for (int p = 0; p < 10000; ++p) {
    for (size_t i = 0; i < push.size(); ++i) {
      push[i] = i % 2 == 0 ? static_cast<uint64_t>(1 + (i / 2) % 3) : cold(gen);
    }
    hot.Add(2, push);
  }
  EXPECT_LE(hot.size(), 64u);
  const std::vector<HotRows::Entry> top = hot.Top(3);
  ASSERT_EQ(top.size(), 3u);
  std::vector<uint64_t> rows;
  for (const HotRows::Entry& e : top) {
    rows.push_back(e.row);
    EXPECT_EQ(e.table, 2u);
    // Each is pushed about 1e6 / 6 times; the estimate is near.
    EXPECT_GT(e.count, 140000u);
    EXPECT_LT(e.count, 200000u);
  }
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(HotRowsTest, TopAsksForMoreThanItHasGivesWhatItHas) {
  HotRows hot(4, 1);
  EXPECT_TRUE(hot.Top(10).empty());
  const std::vector<uint64_t> one = {42};
  hot.Add(0, one);
  EXPECT_EQ(hot.Top(10).size(), 1u);
}

}  // namespace
}  // namespace ps
