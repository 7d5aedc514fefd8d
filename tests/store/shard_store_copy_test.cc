// The copies of a shard's state (store/shard_store_copy.cc). The sums
// under consistency.aggregate: what a joining replica or a replicated
// clock takes (CopySums, SumFromFrames, RestoreSum) holds the same sums bit
// for bit, of range and hashed tables, applies to the same rows, and shows
// in the checksum; every malformed form of a hashed sum is refused, naming
// what is wrong, with the store unchanged. The snapshot a checkpoint
// writes (SharedSnapshot): the state of its moment, kept while pushes copy
// the blocks it shares, and each block given back when released.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/hash_slots.h"
#include "common/key_range.h"
#include "common/wire.h"
#include "store/shard_store.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

constexpr uint32_t kRange = 0, kHashed = 1, kSmall = 2;
constexpr size_t kFields = ShardStore::kSumIndexFields;

// Two shards; a range table (adam), a hashed table (adagrad, evicting at
// its bound) and a hashed table of 40 rows a shard (add), under bsp with
// aggregation.
JobOptions SumsJob() {
  TableOptions hashed = TestTable("h", 0, 3, OptimizerKind::kAdagrad);
  hashed.keys = KeyKind::kHashed;
  hashed.max_rows = 1000;
  hashed.evict.policy = EvictPolicy::kLru;
  TableOptions small = TestTable("small", 0, 2, OptimizerKind::kAdd);
  small.keys = KeyKind::kHashed;
  small.max_rows = 40;
  JobOptions job = TestJob()
                       .Servers(2, 7000)
                       .Workers(2)
                       .Bsp()
                       .Table(TestTable("w", 40, 3, OptimizerKind::kAdam))
                       .Table(hashed)
                       .Table(small)
                       .Build();
  job.consistency.aggregate = true;
  return job;
}

// `count` ids of shard `shard`'s hash slots of `table`, or of the other
// shard's when `owned` is false.
std::vector<uint64_t> IdsOf(const ShardStore& store, uint32_t table, size_t count,
                            bool owned = true) {
  const TableLayout& t = store.layouts()[table];
  std::vector<uint64_t> ids;
  for (uint64_t i = 1; ids.size() < count; ++i) {
    const uint64_t id = i * 0x9e3779b97f4a7c15ull;
    if (t.owned.Contains(IdSlot(id, t.hash_seed, t.slots)) == owned) ids.push_back(id);
  }
  return ids;
}

// Values no sum of a few pushes holds exactly in fewer bits: a copy that
// rounds or reorders them shows.
std::vector<float> Values(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (0.1f + 0.013f * static_cast<float>(i % 17));
  return v;
}

void Accumulate(ShardStore& store, uint32_t table, const std::vector<uint64_t>& keys,
                const std::vector<float>& values, int64_t clock) {
  Request r;
  r.header.op = Op::kPush;
  r.header.table = table;
  r.header.count = keys.size();
  r.header.dim = store.layouts()[table].dim;
  r.keys = keys;
  r.values = values;
  store.Accumulate(r, clock);
}

// The pushes of two workers into the sums of clocks 4 and 5: the hashed
// tables' ids in an order that differs between clocks, some named twice,
// and more ids than the small table holds (the rest dropped).
void PushClocks(ShardStore& store) {
  const std::vector<uint64_t> ids = IdsOf(store, kHashed, 60);
  const std::vector<uint64_t> many = IdsOf(store, kSmall, 55);
  const uint64_t rows = store.layouts()[kRange].owned.begin;
  for (int64_t clock : {4, 5}) {
    for (uint32_t worker = 0; worker < 2; ++worker) {
      const float scale = static_cast<float>(worker + 1) * static_cast<float>(clock);
      std::vector<uint64_t> part(ids.begin() + 10 * worker, ids.end());
      if (clock == 5) part.insert(part.end(), ids.rbegin(), ids.rbegin() + 20);
      Accumulate(store, kHashed, part, Values(part.size() * 3, scale), clock);
      Accumulate(store, kSmall, many, Values(many.size() * 2, scale), clock);
      const std::vector<uint64_t> keys = {rows + 1, rows + 7, rows + 1};
      Accumulate(store, kRange, keys, Values(keys.size() * 3, scale), clock);
    }
  }
}

// Every sum of `from` taken by `to` through the frames CopySums gives.
void CopyAllSums(const ShardStore& from, ShardStore& to) {
  std::vector<Frame> frames;
  std::vector<int64_t> index;
  from.CopySums(kMaxClock, &frames, &index);
  ASSERT_EQ(index.size() % kFields, 0u);
  ASSERT_EQ(frames.size(), 2 * index.size() / kFields);
  for (size_t k = 0; kFields * k < index.size(); ++k) {
    auto sum = to.SumFromFrames(index[kFields * k], index[kFields * k + 1], index[kFields * k + 2],
                                frames[2 * k], frames[2 * k + 1]);
    ASSERT_OK(sum);
    ASSERT_OK(to.RestoreSum(std::move(*sum)));
  }
}

// The bytes of every frame CopySums gives, and its index.
std::vector<std::string> SumBytes(const ShardStore& store) {
  std::vector<Frame> frames;
  std::vector<int64_t> index;
  store.CopySums(kMaxClock, &frames, &index);
  std::vector<std::string> bytes;
  for (const Frame& f : frames) bytes.emplace_back(f.view());
  for (int64_t i : index) bytes.push_back(std::to_string(i));
  return bytes;
}

std::vector<uint64_t> Checksums(const ShardStore& store) {
  std::vector<uint64_t> sums;
  for (uint32_t t = 0; t < store.layouts().size(); ++t) sums.push_back(store.Checksum(t));
  return sums;
}

TEST(ShardStoreSumsTest, HashedAndRangeSumsCopyBitForBitAndApplyToTheSameRows) {
  const JobOptions job = SumsJob();
  ASSERT_OK(job.Validate());
  auto primary = ShardStore::Create(job, 0).value();
  auto replica = ShardStore::Create(job, 0).value();
  const std::vector<uint64_t> before = Checksums(*replica);
  PushClocks(*primary);
  EXPECT_GT(primary->dropped_rows(kSmall), 0u);  // the small table's sums are full

  CopyAllSums(*primary, *replica);
  // The same sums, bit for bit and in the same order, and the checksums
  // say so: without them the replica's differ from the primary's.
  EXPECT_EQ(SumBytes(*replica), SumBytes(*primary));
  EXPECT_EQ(replica->sum_clocks(), 2u);
  EXPECT_EQ(Checksums(*replica), Checksums(*primary));
  for (uint32_t t = 0; t < 3; ++t) {
    EXPECT_NE(primary->Checksum(t), before[t]) << "table " << t << ": its sums are not hashed";
  }

  // More pushes into clock 5 on both (into the restored sums), then each
  // clock's mean applied: the same rows, values and optimizer state. The
  // restored sums hold the primary's bound: the same ids dropped.
  const uint64_t dropped = primary->dropped_rows(kSmall);
  for (ShardStore* store : {primary.get(), replica.get()}) {
    const std::vector<uint64_t> ids = IdsOf(*store, kHashed, 70);
    Accumulate(*store, kHashed, ids, Values(ids.size() * 3, 0.7f), 5);
    const std::vector<uint64_t> many = IdsOf(*store, kSmall, 60);
    Accumulate(*store, kSmall, many, Values(many.size() * 2, 0.3f), 5);
    store->ApplyAccumulated(6, 0.5f);
  }
  EXPECT_EQ(replica->dropped_rows(kSmall), primary->dropped_rows(kSmall) - dropped);
  EXPECT_EQ(replica->dropped_rows(kSmall), 20u);
  EXPECT_EQ(replica->sum_clocks(), 0u);
  EXPECT_EQ(primary->stored_rows(kHashed), 70u);
  EXPECT_EQ(primary->stored_rows(kSmall), 40u);
  EXPECT_EQ(Checksums(*replica), Checksums(*primary));
  const ShardSnapshot a = primary->Snapshot(job, 0, 6).value();
  const ShardSnapshot b = replica->Snapshot(job, 0, 6).value();
  for (uint32_t t = 0; t < 3; ++t) {
    EXPECT_EQ(b.tables[t].ids, a.tables[t].ids) << "table " << t;
    EXPECT_EQ(b.tables[t].values, a.tables[t].values) << "table " << t;
    EXPECT_EQ(b.tables[t].slots, a.tables[t].slots) << "table " << t;
  }
}

TEST(ShardStoreSumsTest, AStoreWithoutAHashedSumShowsAnotherChecksum) {
  const JobOptions job = SumsJob();
  auto primary = ShardStore::Create(job, 0).value();
  auto replica = ShardStore::Create(job, 0).value();
  PushClocks(*primary);
  // Every sum but the hashed table's of clock 5.
  std::vector<Frame> frames;
  std::vector<int64_t> index;
  primary->CopySums(kMaxClock, &frames, &index);
  size_t taken = 0;
  for (size_t k = 0; kFields * k < index.size(); ++k) {
    if (index[kFields * k] == 5 && index[kFields * k + 1] == kHashed) continue;
    auto sum = replica->SumFromFrames(index[kFields * k], index[kFields * k + 1],
                                      index[kFields * k + 2], frames[2 * k], frames[2 * k + 1]);
    ASSERT_OK(sum);
    ASSERT_OK(replica->RestoreSum(std::move(*sum)));
    ++taken;
  }
  EXPECT_EQ(taken, 5u);
  EXPECT_NE(replica->Checksum(kHashed), primary->Checksum(kHashed));
  EXPECT_EQ(replica->Checksum(kRange), primary->Checksum(kRange));
  EXPECT_EQ(replica->Checksum(kSmall), primary->Checksum(kSmall));
  // Applied, the rows differ too.
  primary->ApplyAccumulated(6, 0.5f);
  replica->ApplyAccumulated(6, 0.5f);
  EXPECT_NE(replica->Checksum(kHashed), primary->Checksum(kHashed));
}

// A hashed sum's frames, made by hand.
Frame IdsFrame(const std::vector<uint64_t>& ids) {
  return Frame::CopyOf(ids.data(), ids.size() * sizeof(uint64_t));
}
Frame FloatsFrame(const std::vector<float>& values) {
  return Frame::CopyOf(values.data(), values.size() * sizeof(float));
}

TEST(ShardStoreSumsTest, MalformedHashedSumsAreRefusedNamingWhatIsWrong) {
  const JobOptions job = SumsJob();
  auto store = ShardStore::Create(job, 0).value();
  PushClocks(*store);
  const std::vector<uint64_t> before = Checksums(*store);
  const std::vector<uint64_t> ids = IdsOf(*store, kHashed, 3);
  const uint64_t foreign = IdsOf(*store, kHashed, 1, /*owned=*/false)[0];
  const std::vector<float> rows = Values(9, 1.0f);
  struct Case {
    const char* what;
    int64_t clock;
    int64_t table;
    int64_t count;
    Frame first;
    Frame second;
    std::string names;
  };
  std::vector<Case> cases;
  cases.push_back({"a table the shard does not have", 4, 7, 3, IdsFrame(ids), FloatsFrame(rows),
                   "a sum of table index 7; the shard has 3 tables"});
  cases.push_back(
      {"a negative table index", 4, -1, 3, IdsFrame(ids), FloatsFrame(rows), "table index -1"});
  cases.push_back({"a negative clock", -2, kHashed, 3, IdsFrame(ids), FloatsFrame(rows),
                   "a sum of clock -2 of table 'h': no such clock"});
  cases.push_back({"a clock past the last", kMaxClock, kHashed, 3, IdsFrame(ids), FloatsFrame(rows),
                   "no such clock"});
  cases.push_back(
      {"a negative count", 4, kHashed, -1, IdsFrame(ids), FloatsFrame(rows), "of -1 ids"});
  cases.push_back({"more ids than the table holds", 4, kSmall, 41, IdsFrame({}), FloatsFrame({}),
                   "a sum of clock 4 of table 'small' of 41 ids; the table holds at most 40"});
  cases.push_back({"a count above its ids", 4, kHashed, 4, IdsFrame(ids), FloatsFrame(rows),
                   "of 4 ids with an ids frame of 24 bytes, not 32"});
  cases.push_back({"a count below its ids", 4, kHashed, 2, IdsFrame(ids), FloatsFrame(rows),
                   "of 2 ids with an ids frame of 24 bytes, not 16"});
  cases.push_back({"ids not whole", 4, kHashed, 3, Frame::CopyOf("0123456789", 10),
                   FloatsFrame(rows), "ids frame of 10 bytes"});
  cases.push_back({"rows of another dim", 4, kHashed, 3, IdsFrame(ids),
                   FloatsFrame(Values(6, 1.0f)),
                   "of 3 ids with a rows frame of 24 bytes, not 36 (3 floats a row)"});
  cases.push_back({"an id named twice", 4, kHashed, 3, IdsFrame({ids[0], ids[1], ids[0]}),
                   FloatsFrame(rows), "names id " + std::to_string(ids[0]) + " twice"});
  cases.push_back({"an id of the other shard", 4, kHashed, 3, IdsFrame({ids[0], foreign, ids[2]}),
                   FloatsFrame(rows), "names id " + std::to_string(foreign) + " of hash slot"});
  // A range table's sum in a hashed table's form, and the reverse.
  cases.push_back({"ids for a range table", 4, kRange, 3, IdsFrame(ids), FloatsFrame(rows),
                   "a sum of clock 4 of table 'w' counted as 3 blocks with touched bytes for 36"});
  cases.push_back({"a range table's values for a hashed table", 4, kHashed, 1,
                   FloatsFrame(Values(60, 1.0f)), Frame::CopyOf("\1", 1),
                   "of 1 ids with an ids frame of 240 bytes, not 8"});
  for (Case& c : cases) {
    const StatusOr<ShardStore::PendingSum> sum =
        store->SumFromFrames(c.clock, c.table, c.count, c.first, c.second);
    ASSERT_FALSE(sum.ok()) << c.what;
    EXPECT_EQ(sum.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(sum.status().message().find(c.names), std::string::npos)
        << c.what << ": " << sum.status().message();
  }
  // A sum whose rows do not fit the table, given whole.
  ShardStore::PendingSum wide;
  wide.clock = 4;
  wide.table = kHashed;
  wide.hashed = std::make_unique<HashedRows>(5, 0, InitOptions(), 1000);
  Status refused = store->RestoreSum(std::move(wide));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("rows of 5 values"), std::string::npos) << refused.ToString();
  ShardStore::PendingSum by_id;
  by_id.clock = 4;
  by_id.table = kRange;
  by_id.hashed = std::make_unique<HashedRows>(3, 0, InitOptions(), 1000);
  refused = store->RestoreSum(std::move(by_id));
  EXPECT_NE(refused.message().find("not a hashed table"), std::string::npos) << refused.ToString();
  ShardStore::PendingSum dense;
  dense.clock = 4;
  dense.table = kHashed;
  dense.values = Values(3, 1.0f);
  refused = store->RestoreSum(std::move(dense));
  EXPECT_NE(refused.message().find("without its rows by id"), std::string::npos)
      << refused.ToString();
  EXPECT_EQ(Checksums(*store), before);  // nothing taken

  // The well-formed sum is taken, in place of clock 4's.
  auto good = store->SumFromFrames(4, kHashed, 3, IdsFrame(ids), FloatsFrame(rows));
  ASSERT_OK(good);
  ASSERT_OK(store->RestoreSum(std::move(*good)));
  EXPECT_NE(store->Checksum(kHashed), before[kHashed]);
  std::vector<Frame> frames;
  std::vector<int64_t> index;
  store->CopySums(5, &frames, &index);
  ASSERT_EQ(index.size(), 9u);  // clock 4: three tables
  EXPECT_EQ(index[kFields * kHashed + 2], 3);
  EXPECT_EQ(frames[2 * kHashed].view(), IdsFrame(ids).view());
  EXPECT_EQ(frames[2 * kHashed + 1].view(), FloatsFrame(rows).view());
}

// A range table of 1000 rows x 1024 floats with adam (256 rows, 1 MiB of
// values, per block: 4 blocks, the last of 232 rows) and a hashed table
// (adagrad), on one shard.
constexpr uint32_t kWide = 1024;
constexpr uint64_t kBlockRows = 256;
constexpr uint64_t kBlocks = 4;
JobOptions BlocksJob() {
  TableOptions range = TestTable("w", 1000, kWide, OptimizerKind::kAdam);
  range.init.kind = InitKind::kUniform;
  range.init.value = 0.5f;
  TableOptions hashed = TestTable("h", 0, 3, OptimizerKind::kAdagrad);
  hashed.keys = KeyKind::kHashed;
  hashed.max_rows = 1000;
  return TestJob().Servers(1, 7000).Table(range).Table(hashed).Build();
}

// A push of `count` rows of the range table from `first`, each value `g`.
void PushRows(ShardStore& store, uint64_t first, uint64_t count, float g, int64_t clock) {
  const std::vector<float> values(count * kWide, g);
  Request r;
  r.header.op = Op::kPush;
  r.header.table = kRange;
  r.header.first_row = first;
  r.header.count = count;
  r.header.dim = kWide;
  r.header.flags = kFlagDenseRange;
  r.values = values;
  ASSERT_OK(store.ApplyPush(r, clock));
}

// A push of 50 rows of the hashed table (ids 1 to 50).
void PushHashed(ShardStore& store, int64_t clock) {
  std::vector<uint64_t> ids(50);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i + 1;
  const std::vector<float> values(ids.size() * 3, 0.25f);
  Request r;
  r.header.op = Op::kPush;
  r.header.table = 1;
  r.header.count = ids.size();
  r.header.dim = 3;
  r.keys = ids;
  r.values = values;
  ASSERT_OK(store.ApplyPush(r, clock));
}

// A table's values, then each optimizer state array, as one array each,
// read through ForEachPiece (copied or shared alike).
std::vector<std::vector<float>> ArraysOf(const TableSnapshot& t) {
  std::vector<std::vector<float>> out(1 + t.slots.size());
  t.ForEachPiece(0, t.RowCount(), [&](const RowPiece& piece) {
    const size_t n = piece.rows * t.dim;
    out[0].insert(out[0].end(), piece.values, piece.values + n);
    for (size_t k = 0; k < t.slots.size(); ++k) {
      out[1 + k].insert(out[1 + k].end(), piece.slots[k], piece.slots[k] + n);
    }
  });
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ShardStoreSharedSnapshotTest, KeepsTheStateOfItsMomentWhilePushesCopyEachBlockOnce) {
  const JobOptions job = BlocksJob();
  auto store = ShardStore::Create(job, 0).value();
  auto twin = ShardStore::Create(job, 0).value();  // the same pushes, no snapshot
  for (ShardStore* s : {store.get(), twin.get()}) {
    PushRows(*s, 0, 1000, 0.5f, 0);  // adam state that is not zero
    PushHashed(*s, 0);
  }
  const ShardSnapshot copied = store->Snapshot(job, 0, 1).value();
  ShardSnapshot shared = store->SharedSnapshot(job, 0, 1).value();

  const TableSnapshot& range = shared.tables[kRange];
  ASSERT_EQ(range.shared.size(), kBlocks);
  EXPECT_TRUE(range.values.empty());
  ASSERT_EQ(range.slots.size(), 2u);
  EXPECT_TRUE(range.slots[0].empty() && range.slots[1].empty());
  EXPECT_EQ(range.shared.back().first, (kBlocks - 1) * kBlockRows);
  EXPECT_EQ(range.shared.back().rows, 1000 - (kBlocks - 1) * kBlockRows);
  // The hashed table's rows stay in the store's chunk, listed later.
  TableSnapshot& hashed = shared.tables[1];
  EXPECT_TRUE(hashed.shares_hashed_rows());
  EXPECT_TRUE(hashed.ids.empty() && hashed.values.empty());
  EXPECT_EQ(hashed.stored_rows, 50u);

  const uint64_t copies = store->copy_on_write_count();
  for (ShardStore* s : {store.get(), twin.get()}) PushRows(*s, 0, 1000, -1.5f, 1);
  EXPECT_EQ(store->copy_on_write_count(), copies + kBlocks);
  for (ShardStore* s : {store.get(), twin.get()}) PushRows(*s, 100, 600, 2.0f, 2);
  EXPECT_EQ(store->copy_on_write_count(), copies + kBlocks) << "a block copied twice";
  // Its 50 rows, each saved once before it changed.
  const uint64_t saves = store->snapshot_saves();
  for (ShardStore* s : {store.get(), twin.get()}) PushHashed(*s, 2);
  for (ShardStore* s : {store.get(), twin.get()}) PushHashed(*s, 3);
  EXPECT_EQ(store->snapshot_saves(), saves + 50);

  // Listed after the pushes: the hashed rows of the snapshot's moment,
  // in key order, as Snapshot copied them.
  hashed.ListSharedRows();
  EXPECT_EQ(hashed.ids, copied.tables[1].ids);
  const std::vector<std::vector<float>> rows = ArraysOf(hashed);
  EXPECT_TRUE(SameBits(rows[0], copied.tables[1].values));
  EXPECT_TRUE(SameBits(rows[1], copied.tables[1].slots[0]));
  EXPECT_EQ(store->Checksum(1), twin->Checksum(1));

  // The snapshot holds the values and the optimizer state of its moment,
  // bit for bit; the pushes landed in the store as in the twin.
  const std::vector<std::vector<float>> arrays = ArraysOf(range);
  EXPECT_TRUE(SameBits(arrays[0], copied.tables[kRange].values));
  EXPECT_TRUE(SameBits(arrays[1], copied.tables[kRange].slots[0]));
  EXPECT_TRUE(SameBits(arrays[2], copied.tables[kRange].slots[1]));
  EXPECT_FALSE(SameBits(store->CopyValues(kRange), copied.tables[kRange].values));
  EXPECT_EQ(store->Checksum(kRange), twin->Checksum(kRange));
}

TEST(ShardStoreSharedSnapshotTest, ReleasingARunGivesItsBlockBackToTheStore) {
  const JobOptions job = BlocksJob();
  auto store = ShardStore::Create(job, 0).value();
  {
    ShardSnapshot shared = store->SharedSnapshot(job, 0, 1).value();
    TableSnapshot& range = shared.tables[kRange];
    range.ReleaseShared(kBlockRows);  // block 0 written
    EXPECT_EQ(range.shared[0].holder, nullptr);
    EXPECT_NE(range.shared[1].holder, nullptr);
    const uint64_t copies = store->copy_on_write_count();
    PushRows(*store, 0, kBlockRows, 1.0f, 1);
    EXPECT_EQ(store->copy_on_write_count(), copies) << "a released block was copied";
    PushRows(*store, kBlockRows, 10, 1.0f, 1);
    EXPECT_EQ(store->copy_on_write_count(), copies + 1);
  }
  // The snapshot is gone: no block is held.
  const uint64_t copies = store->copy_on_write_count();
  PushRows(*store, 0, 1000, 1.0f, 2);
  EXPECT_EQ(store->copy_on_write_count(), copies);
}

TEST(ShardStoreSharedSnapshotTest, RestoresAStoreAsACopiedSnapshotDoes) {
  const JobOptions job = BlocksJob();
  auto store = ShardStore::Create(job, 0).value();
  PushRows(*store, 0, 1000, 0.5f, 0);
  PushHashed(*store, 0);
  const ShardSnapshot copied = store->Snapshot(job, 0, 1).value();
  const ShardSnapshot shared = store->SharedSnapshot(job, 0, 1).value();
  auto from_copy = ShardStore::Create(job, 0, /*initialize=*/false).value();
  from_copy->Restore(copied);
  auto from_shared = ShardStore::Create(job, 0, /*initialize=*/false).value();
  from_shared->Restore(shared);
  // Also into the store it shares its blocks with, after pushes moved on.
  PushRows(*store, 0, 1000, 3.0f, 1);
  store->Restore(shared);
  for (uint32_t t = 0; t < 2; ++t) {
    EXPECT_EQ(from_shared->Checksum(t), from_copy->Checksum(t)) << "table " << t;
    EXPECT_EQ(store->Checksum(t), from_copy->Checksum(t)) << "table " << t;
  }
}

}  // namespace
}  // namespace ps
