// ShardStore::CheckpointSnapshot's deltas (store/shard_store_delta.cc,
// incremental checkpoints): the range blocks written since the previous
// snapshot (by pushes, aggregated sums and restores), widened to whole
// runs; the hashed rows made or updated since, and the ids removed since
// that have no row now.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "store/shard_store.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "tests/util/test_stores.h"

namespace ps {
namespace {

constexpr uint64_t kRowsPerBlock = 262144 / 4;  // of a table of dim 4

// Runs of 1000 rows, as a checkpoint might cut them.
uint64_t RowsPerRun(uint32_t /*dim*/) { return 1000; }

JobOptions Job(uint32_t full_every) {
  TableOptions ids = TestTable("ids", 0, 2, OptimizerKind::kSgd);
  ids.keys = KeyKind::kHashed;
  ids.slots = 16;
  ids.max_rows = 4;
  ids.evict.policy = EvictPolicy::kLru;
  JobOptions job = TestJob().Table("w", 4 * kRowsPerBlock, 4, OptimizerKind::kAdagrad).Table(ids).Build();
  job.checkpoint.dir = "/unused";
  job.checkpoint.full_every = full_every;
  EXPECT_OK(job.Validate());
  return job;
}

// A push of 0.5 to every element of `keys` of `table` (the request views
// the push's own arrays).
struct Push {
  Push(uint32_t table, std::vector<uint64_t> k, uint32_t dim)
      : keys(std::move(k)),
        values(keys.size() * dim, 0.5f),
        request(TestPushRequest(table, dim, keys, values)) {}
  // A dense push of rows [first, first + count).
  static Push Dense(uint32_t table, uint64_t first, uint64_t count, uint32_t dim) {
    Push p(table, {}, dim);
    p.values.assign(count * dim, 0.5f);
    p.request.header.flags |= kFlagDenseRange;
    p.request.header.first_row = first;
    p.request.header.count = count;
    p.request.values = p.values;
    return p;
  }
  operator const Request&() const { return request; }
  std::vector<uint64_t> keys;
  std::vector<float> values;
  Request request;
};

class ShardStoreDeltaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = Job(4);
    store_ = ShardStore::Create(job_, 0).value();
  }
  // The next snapshot: a delta on the previous one (or full).
  // With `copy`, what it shares with the store copied into its arrays.
  ShardSnapshot Next(int64_t clock, bool delta = true, bool copy = true) {
    const DeltaSince since{epoch_, &RowsPerRun};
    ShardSnapshot s = store_->CheckpointSnapshot(job_, 0, clock, delta ? &since : nullptr).value();
    epoch_ = s.epoch;
    if (copy) s.CopyShared();
    return s;
  }

  JobOptions job_;
  std::unique_ptr<ShardStore> store_;
  uint64_t epoch_ = 0;
};

TEST_F(ShardStoreDeltaTest, DensePushesMakeBlocksWidenedToRunsAndSparseOnesRows) {
  Next(1, /*delta=*/false);
  // Row 2 * kRowsPerBlock + 5 lies in block 2: rows [131072, 196608), as
  // runs of 1000 from row 0: [131000, 197000).
  const uint64_t row = 2 * kRowsPerBlock + 5;
  {
    const Push dense = Push::Dense(0, row, 1, 4);
    ASSERT_OK(store_->ApplyPush(dense, 1));
  }
  // Two rows of block 0 by a sparse push: those rows alone.
  ASSERT_OK(store_->ApplyPush(Push(0, {7, 3}, 4), 1));
  const ShardSnapshot delta = Next(2);
  const TableSnapshot& w = delta.tables[0];
  EXPECT_EQ(w.patched, (std::vector<uint64_t>{3, 7}));
  ASSERT_EQ(w.changed.size(), 1u);
  EXPECT_EQ(w.changed[0], (RowRange{131000, 197000}));
  // The runs' rows, then the patched ones.
  ASSERT_EQ(w.values.size(), (66000u + 2) * 4);
  const std::vector<float> all = store_->CopyValues(0);
  EXPECT_EQ(std::memcmp(w.values.data(), all.data() + 131000 * 4, 66000 * 4 * 4), 0);
  EXPECT_EQ(std::memcmp(w.values.data() + 66000 * 4, all.data() + 3 * 4, 4 * 4), 0);
  EXPECT_EQ(std::memcmp(w.values.data() + 66001 * 4, all.data() + 7 * 4, 4 * 4), 0);
  ASSERT_EQ(w.slots.size(), 1u);
  const std::vector<float> state = store_->CopySlot(0, 0);
  EXPECT_EQ(std::vector<float>(w.slots[0].begin(), w.slots[0].begin() + 66000 * 4),
            std::vector<float>(state.begin() + 131000 * 4, state.begin() + 197000 * 4));
  // A sparse push to most rows of a block writes the block's runs.
  std::vector<uint64_t> most;
  for (uint64_t r = 0; r < kRowsPerBlock; ++r) {
    if (r % 4 != 0) most.push_back(r);
  }
  ASSERT_OK(store_->ApplyPush(Push(0, most, 4), 2));
  const ShardSnapshot dense = Next(3);
  EXPECT_TRUE(dense.tables[0].patched.empty());
  ASSERT_EQ(dense.tables[0].changed.size(), 1u);
  EXPECT_EQ(dense.tables[0].changed[0], (RowRange{0, 66000}));
  // Nothing written since: an empty delta.
  const ShardSnapshot empty = Next(4);
  EXPECT_TRUE(empty.tables[0].changed.empty());
  EXPECT_TRUE(empty.tables[0].patched.empty());
}

// A delta's runs written whole and the blocks of its patched rows are
// shared with the store's blocks, as a full snapshot's rows (no copy while
// the loop waits); a push into a shared block copies it, and the delta
// keeps the rows of its moment.
TEST_F(ShardStoreDeltaTest, ADeltaSharesTheBlocksItWritesWhole) {
  Next(1, /*delta=*/false);
  {
    const Push dense = Push::Dense(0, 2 * kRowsPerBlock + 5, 1, 4);
    ASSERT_OK(store_->ApplyPush(dense, 1));
  }
  ASSERT_OK(store_->ApplyPush(Push(0, {7, 3}, 4), 1));
  const ShardSnapshot copied = Next(2, /*delta=*/true, /*copy=*/true);
  // The same delta again, after one more push of the same rows (so the
  // second delta holds the same ranges and rows), taken without a copy.
  {
    const Push dense = Push::Dense(0, 2 * kRowsPerBlock + 5, 1, 4);
    ASSERT_OK(store_->ApplyPush(dense, 2));
  }
  ASSERT_OK(store_->ApplyPush(Push(0, {7, 3}, 4), 2));
  ShardSnapshot shared = Next(3, /*delta=*/true, /*copy=*/false);
  const std::vector<float> at_snapshot = store_->CopyValues(0);
  TableSnapshot& w = shared.tables[0];
  // The patched rows are listed by the writer, from the marks of the
  // snapshot's moment.
  EXPECT_TRUE(w.patched.empty());
  ASSERT_EQ(w.patched_marks.size(), 1u);
  const uint64_t copies = store_->copy_on_write_count();
  // After the snapshot, not in it: copies block 0, which it holds.
  ASSERT_OK(store_->ApplyPush(Push(0, {11}, 4), 3));
  EXPECT_EQ(store_->copy_on_write_count(), copies + 1);
  w.ListSharedRows();
  EXPECT_EQ(w.changed, copied.tables[0].changed);
  EXPECT_EQ(w.patched, copied.tables[0].patched);
  // [131000, 197000) lies in blocks 1 to 3: three runs; the two patched
  // rows in block 0, shared too.
  ASSERT_EQ(w.shared.size(), 3u);
  EXPECT_EQ(w.SharedRowCount(), 66000u);
  EXPECT_TRUE(w.values.empty());
  ASSERT_EQ(w.patched_blocks.size(), 1u);
  EXPECT_EQ(w.patched_blocks[0].first, 66000u);
  EXPECT_EQ(w.patched_blocks[0].rows, 2u);
  EXPECT_EQ(w.patched_at, (std::vector<uint32_t>{3, 7}));
  {
    const Push dense = Push::Dense(0, 2 * kRowsPerBlock + 5, 1, 4);
    ASSERT_OK(store_->ApplyPush(dense, 3));
  }
  ASSERT_OK(store_->ApplyPush(Push(0, {3}, 4), 3));
  EXPECT_EQ(store_->copy_on_write_count(), copies + 2) << "blocks 0 and 2, once each";
  w.CopyShared();
  ASSERT_EQ(w.values.size(), (66000u + 2) * 4);
  EXPECT_EQ(std::memcmp(w.values.data(), at_snapshot.data() + 131000 * 4, 66000 * 4 * 4), 0);
  EXPECT_EQ(std::memcmp(w.values.data() + 66000 * 4, at_snapshot.data() + 3 * 4, 4 * 4), 0);
}

// The writer gives a patched row's block back once it wrote the block's
// last patched row, as it gives back the runs: a push there copies nothing
// after.
TEST_F(ShardStoreDeltaTest, AWrittenPatchedBlockGoesBackToTheStore) {
  Next(1, /*delta=*/false);
  ASSERT_OK(store_->ApplyPush(Push(0, {7, 3, kRowsPerBlock + 1}, 4), 1));
  ShardSnapshot delta = Next(2, /*delta=*/true, /*copy=*/false);
  TableSnapshot& w = delta.tables[0];
  w.ListSharedRows();
  ASSERT_TRUE(w.shared.empty());
  ASSERT_EQ(w.patched_blocks.size(), 2u);  // blocks 0 (rows 3, 7) and 1
  w.ReleaseShared(1);                      // row 3 written
  EXPECT_NE(w.patched_blocks[0].holder, nullptr);
  w.ReleaseShared(2);  // row 7 too: block 0 goes back
  EXPECT_EQ(w.patched_blocks[0].holder, nullptr);
  EXPECT_NE(w.patched_blocks[1].holder, nullptr);
  const uint64_t copies = store_->copy_on_write_count();
  ASSERT_OK(store_->ApplyPush(Push(0, {3}, 4), 2));
  EXPECT_EQ(store_->copy_on_write_count(), copies);
  ASSERT_OK(store_->ApplyPush(Push(0, {kRowsPerBlock + 1}, 4), 2));
  EXPECT_EQ(store_->copy_on_write_count(), copies + 1);
}

TEST_F(ShardStoreDeltaTest, AggregatedSumsAndRestoresMarkTheirBlocks) {
  Next(1, /*delta=*/false);
  store_->Accumulate(Push(0, {5}, 4), 1);
  EXPECT_TRUE(Next(2).tables[0].changed.empty()) << "a sum not applied yet changes nothing";
  store_->ApplyAccumulated(2, 1.0f);
  ShardSnapshot delta = Next(3);
  ASSERT_EQ(delta.tables[0].changed.size(), 1u);
  EXPECT_EQ(delta.tables[0].changed[0], (RowRange{0, 66000}));
  // A restore's rows (a checkpoint read, a replica's copy) in the last block.
  const std::vector<float> row(4, 2.0f), state(4, 1.0f);
  const std::byte* slots[] = {reinterpret_cast<const std::byte*>(state.data())};
  store_->RestoreRows(0, 4 * kRowsPerBlock - 1, 1, reinterpret_cast<const std::byte*>(row.data()),
                      slots);
  delta = Next(4);
  ASSERT_EQ(delta.tables[0].changed.size(), 1u);
  EXPECT_EQ(delta.tables[0].changed[0], (RowRange{196000, 4 * kRowsPerBlock}));
}

TEST_F(ShardStoreDeltaTest, HashedDeltaHoldsChangedRowsAndTheIdsRemovedSince) {
  ASSERT_OK(store_->ApplyPush(Push(1, {1, 2, 3, 4}, 2), 0));
  EXPECT_EQ(Next(1, /*delta=*/false).tables[1].ids.size(), 4u);
  // 5 and 6 evict the least recently pushed 1 and 2; 3 is updated.
  ASSERT_OK(store_->ApplyPush(Push(1, {3}, 2), 1));
  ASSERT_OK(store_->ApplyPush(Push(1, {5, 6}, 2), 1));
  const TableSnapshot ids = Next(2).tables[1];
  std::vector<uint64_t> changed = ids.ids, removed = ids.removed;
  std::sort(changed.begin(), changed.end());
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(changed, (std::vector<uint64_t>{3, 5, 6}));
  EXPECT_EQ(removed, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(ids.stored_rows, 4u);
  EXPECT_EQ(ids.uses.size(), 3u);
  // 1 comes back (evicting 4): a row, not a removal; 4 is removed.
  ASSERT_OK(store_->ApplyPush(Push(1, {1}, 2), 2));
  const TableSnapshot again = Next(3).tables[1];
  EXPECT_EQ(again.ids, std::vector<uint64_t>{1});
  EXPECT_EQ(again.removed, std::vector<uint64_t>{4});
}

TEST_F(ShardStoreDeltaTest, TooManyRemovedIdsToKeepMakeTheNextSnapshotFull) {
  Next(1, /*delta=*/false);
  // Each push of a new id evicts one of the 4 rows: more removals than
  // the table keeps count of (4 / 4 + 1024).
  for (uint64_t id = 100; id < 1200; ++id) ASSERT_OK(store_->ApplyPush(Push(1, {id}, 2), 1));
  ShardSnapshot full = Next(2, /*delta=*/true, /*copy=*/false);
  EXPECT_FALSE(full.changes_only);
  full.ListSharedRows();
  EXPECT_EQ(full.tables[1].ids.size(), 4u);
  // A full snapshot's range table is shared with the store's blocks.
  EXPECT_TRUE(full.tables[0].values.empty());
  EXPECT_EQ(full.tables[0].RowCount() * full.tables[0].dim, 4 * kRowsPerBlock * 4);
  // Counted again from there.
  ASSERT_OK(store_->ApplyPush(Push(1, {5000}, 2), 2));
  const ShardSnapshot delta = Next(3);
  EXPECT_TRUE(delta.changes_only);
  EXPECT_EQ(delta.tables[1].ids, std::vector<uint64_t>{5000});
  EXPECT_EQ(delta.tables[1].removed.size(), 1u);
}

TEST(ShardStoreDeltaWithoutTrackingTest, HashedTableWithoutTrackingPutsEveryRowInADelta) {
  const JobOptions job = Job(1);
  std::unique_ptr<ShardStore> store = ShardStore::Create(job, 0).value();
  ASSERT_OK(store->ApplyPush(Push(1, {1, 2, 3}, 2), 0));
  const DeltaSince since{store->CheckpointSnapshot(job, 0, 1, nullptr).value().epoch, &RowsPerRun};
  ShardSnapshot delta = store->CheckpointSnapshot(job, 0, 2, &since).value();
  delta.ListSharedRows();
  EXPECT_EQ(delta.tables[1].ids.size(), 3u);
  EXPECT_TRUE(delta.tables[1].removed.empty());
}

// A delta shares the hashed rows as a full snapshot does; once listed
// (on the writer's thread), the write's start gives back every chunk
// without a row changed since, so pushes there save nothing, and the rest
// as they are written.
TEST(ShardStoreDeltaSharingTest, ListingADeltaGivesBackTheChunksWithoutChanges) {
  TableOptions wide = TestTable("wide", 0, 512, OptimizerKind::kSgd);  // 64 rows a chunk
  wide.keys = KeyKind::kHashed;
  wide.max_rows = 1000;
  JobOptions job = TestJob().Table(wide).Build();
  job.checkpoint.dir = "/unused";
  job.checkpoint.full_every = 4;
  ASSERT_OK(job.Validate());
  std::unique_ptr<ShardStore> store = ShardStore::Create(job, 0).value();
  std::vector<uint64_t> ids(640);  // 10 chunks
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i + 1;
  ASSERT_OK(store->ApplyPush(Push(0, ids, 512), 0));
  const DeltaSince since{store->CheckpointSnapshot(job, 0, 1, nullptr).value().epoch,
                         &RowsPerRun};
  // Two rows changed: made in this order, they lie in chunks 0 and 9.
  ASSERT_OK(store->ApplyPush(Push(0, {1, 640}, 512), 1));
  ShardSnapshot delta = store->CheckpointSnapshot(job, 0, 2, &since).value();
  TableSnapshot& t = delta.tables[0];
  ASSERT_TRUE(t.shares_hashed_rows());
  t.ListSharedRows();
  ASSERT_EQ(t.ids.size(), 2u);
  EXPECT_EQ(t.stored_rows, 640u);
  t.ReleaseShared(0);  // the write starts
  uint64_t saves = store->snapshot_saves();
  std::vector<uint64_t> middle;
  for (uint64_t id = 65; id <= 576; ++id) middle.push_back(id);  // chunks 1 to 8
  ASSERT_OK(store->ApplyPush(Push(0, middle, 512), 2));
  EXPECT_EQ(store->snapshot_saves(), saves) << "a chunk without changes was kept";
  ASSERT_OK(store->ApplyPush(Push(0, {2}, 512), 2));
  EXPECT_EQ(store->snapshot_saves(), saves + 1);
  // Both changed rows written: the last chunk goes back too.
  t.ReleaseShared(2);
  saves = store->snapshot_saves();
  ASSERT_OK(store->ApplyPush(Push(0, {639}, 512), 2));
  EXPECT_EQ(store->snapshot_saves(), saves);
}

}  // namespace
}  // namespace ps
