// A hashed table's push residuals on their own (client/hashed_residuals.h):
// kept by id, bounded under a stream of fresh ids, kept for ids pushed in
// every generation, and what a request with more new ids than a generation
// holds gets.
#include "client/hashed_residuals.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace ps {
namespace {

TEST(HashedResidualsTest, AnIdsResidualStartsAtZeroAndIsKeptByTheId) {
  HashedResiduals kept(3, 100);
  EXPECT_EQ(kept.bytes(), 0u) << "nothing before the first id";
  kept.StartRequest();
  const uint64_t ids[] = {0, 7, UINT64_MAX, uint64_t{1} << 40};
  for (uint64_t id : ids) {
    float* r = kept.Find(id);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r[0], 0.0f);
    EXPECT_EQ(r[2], 0.0f);
    for (int c = 0; c < 3; ++c)
      r[c] = static_cast<float>(id % 1000) + 0.25f * static_cast<float>(c);
  }
  kept.StartRequest();
  for (uint64_t id : ids) {
    const float* r = kept.Find(id);
    ASSERT_NE(r, nullptr);
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(r[c], static_cast<float>(id % 1000) + 0.25f * static_cast<float>(c)) << id;
    }
  }
  EXPECT_EQ(kept.size(), 4u);
  EXPECT_EQ(kept.dropped(), 0u);
}

TEST(HashedResidualsTest, FreshIdsNeverGrowItPastItsBound) {
  constexpr uint64_t kBound = 1000;
  constexpr uint32_t kDim = 4;
  HashedResiduals kept(kDim, kBound);
  std::mt19937_64 random(3);
  const size_t limit = HashedResiduals::BytesFor(kDim, kBound);
  size_t top = 0;
  uint64_t found = 0;
  // 100 times the bound, in requests of 64 ids.
  for (int request = 0; request < 100 * static_cast<int>(kBound) / 64; ++request) {
    kept.StartRequest();
    for (int i = 0; i < 64; ++i) {
      found += kept.Find(random()) != nullptr;
      ASSERT_LE(kept.size(), kBound);
    }
    top = std::max(top, kept.bytes());
    ASSERT_LE(kept.bytes(), limit);
  }
  EXPECT_EQ(top, limit) << "both generations full, their indexes at full size";
  // Every id was kept when pushed; all but those held now were let go.
  EXPECT_EQ(found, 100 * kBound / 64 * 64);
  EXPECT_EQ(kept.dropped() + kept.size(), found);
  // Memory per id: the floats and at most 4 index entries of 16 bytes.
  EXPECT_LE(limit, kBound * (kDim * sizeof(float) + 64));
}

TEST(HashedResidualsTest, AnIdPushedInEveryGenerationKeepsItsResidual) {
  HashedResiduals kept(2, 100);  // generations of 50 ids
  std::mt19937_64 random(5);
  const std::vector<uint64_t> hot = {11, 22, 33, 44, 55};
  for (int request = 0; request < 1000; ++request) {
    kept.StartRequest();
    // The hot ids, then 40 fresh ones: a generation lasts about 1.1 requests.
    for (uint64_t id : hot) {
      float* r = kept.Find(id);
      ASSERT_NE(r, nullptr);
      r[0] += 1.0f;
      r[1] = static_cast<float>(id);
    }
    for (int i = 0; i < 40; ++i) ASSERT_NE(kept.Find(random() | (uint64_t{1} << 63)), nullptr);
  }
  EXPECT_GT(kept.dropped(), 30000u) << "the fresh ids were let go";
  kept.StartRequest();
  for (uint64_t id : hot) {
    const float* r = kept.Find(id);
    EXPECT_EQ(r[0], 1000.0f) << "id " << id << " lost its residual";
    EXPECT_EQ(r[1], static_cast<float>(id));
  }
}

TEST(HashedResidualsTest, ARequestWithMoreNewIdsThanAGenerationKeepsWhatFits) {
  HashedResiduals kept(1, 10);  // generations of 5 ids
  kept.StartRequest();
  std::vector<float*> handed;
  for (uint64_t id = 1; id <= 20; ++id) handed.push_back(kept.Find(id));
  // 5 fill the generation, 5 more the next one; the rest find no room.
  std::set<float*> distinct;
  for (size_t i = 0; i < 20; ++i) {
    if (i < 10) {
      ASSERT_NE(handed[i], nullptr) << i;
      distinct.insert(handed[i]);
      *handed[i] = static_cast<float>(i + 1);
    } else {
      EXPECT_EQ(handed[i], nullptr) << i;
    }
  }
  EXPECT_EQ(distinct.size(), 10u) << "each id its own residual, all in place";
  EXPECT_EQ(kept.dropped(), 10u);
  EXPECT_EQ(kept.size(), 10u);
  // The next request finds those of the current generation (6..10) ...
  kept.StartRequest();
  for (uint64_t id = 6; id <= 10; ++id) EXPECT_EQ(*kept.Find(id), static_cast<float>(id)) << id;
  // ... and carries id 1 over from the previous one as it starts another,
  // which drops the rest of the previous one (2..5).
  EXPECT_EQ(*kept.Find(1), 1.0f);
  EXPECT_EQ(*kept.Find(2), 0.0f);
  EXPECT_EQ(kept.dropped(), 14u);
  EXPECT_EQ(kept.size(), 7u);  // 1, 2 and 6..10
}

TEST(HashedResidualsTest, TheBoundIsOneShardsRowsOrWhatMaxMbHolds) {
  TableOptions rows;
  rows.keys = KeyKind::kHashed;
  rows.dim = 16;
  rows.max_rows = 12345;
  EXPECT_EQ(HashedResiduals::BoundFor(rows), 12345u);
  for (uint32_t dim : {1u, 8u, 64u}) {
    TableOptions mb = rows;
    mb.max_rows = 0;
    mb.max_mb = 3;
    mb.dim = dim;
    const uint64_t bound = HashedResiduals::BoundFor(mb);
    EXPECT_LE(HashedResiduals::BytesFor(dim, bound), size_t{3} << 20) << dim;
    EXPECT_GT(HashedResiduals::BytesFor(dim, bound + 1), size_t{3} << 20) << dim;
    HashedResiduals kept(dim, bound);
    EXPECT_EQ(kept.max_rows(), bound & ~uint64_t{1}) << dim;
  }
}

}  // namespace
}  // namespace ps
