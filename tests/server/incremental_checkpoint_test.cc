// Incremental checkpoint generations (checkpoint.full_every): a full
// generation and the deltas after it restore bit for bit the state at each
// delta's clock, on the shard count that wrote them and on another; every
// broken link of a chain (a base gone or written again, a corrupt or
// missing record in a delta or in its full generation) is named and never
// restored; pruning keeps what a kept delta builds on; the trigger writes a
// full generation every full_every, and sooner when deltas outgrow it.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/hash_slots.h"
#include "server/checkpoint.h"
#include "server/checkpoint_format.h"
#include "server/checkpoint_layout.h"
#include "server/checkpoint_trigger.h"
#include "server/durable_dir.h"
#include "server/restore.h"
#include "store/shard_store.h"
#include "tests/util/fake_clock.h"
#include "tests/util/faulty_filesystem.h"
#include "tests/util/status_matchers.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_job.h"
#include "tests/util/test_stores.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kHashSlots = 64;

// Range tables of several blocks each ("dense": blocks of 16384 rows, 4
// runs each; "odd": dim 11, whose runs do not end where blocks do) and
// hashed ones: "emb" evicts (lru at a bound of 300 rows per shard, and
// rows idle for 2 clocks) behind an admission filter, under ftrl; "plain"
// under adam.
JobOptions Job(uint32_t servers, const std::string& dir, uint32_t full_every) {
  TableOptions dense = TestTable("dense", 40000, 16, OptimizerKind::kAdam);
  dense.init = {InitKind::kNormal, 0.1f, 3};
  TableOptions odd = TestTable("odd", 30011, 11, OptimizerKind::kSgd);
  odd.optimizer.momentum = 0.9f;
  TableOptions emb = TestTable("emb", 0, 4, OptimizerKind::kFtrl);
  emb.keys = KeyKind::kHashed;
  emb.slots = kHashSlots;
  emb.max_rows = 300;
  emb.init = {InitKind::kNormal, 0.01f, 5};
  emb.admit.min_pushes = 2;
  emb.admit.sketch_width = 1024;
  emb.evict.policy = EvictPolicy::kLru;
  emb.evict.idle_clocks = 2;
  TableOptions plain = TestTable("plain", 0, 2, OptimizerKind::kAdam);
  plain.keys = KeyKind::kHashed;
  plain.slots = kHashSlots;
  plain.max_rows = 100000;
  JobOptions job =
      TestJob().Servers(servers).Workers(1).Table(dense).Table(odd).Table(emb).Table(plain).Build();
  job.checkpoint.dir = dir;
  job.checkpoint.full_every = full_every;
  EXPECT_OK(job.Validate());
  return job;
}

float Grad(uint64_t seed, uint64_t key, uint32_t col) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + key * 0x2545f4914f6cdd1dull + col;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(static_cast<double>(x >> 11) / 4503599627370496.0 - 1.0);
}

// One round of pushes at clock `clock` to every shard of `stores`: the
// range tables' rows in [first, first + span) (every `step`th), and `ids`
// hashed ids drawn from a pool of 1000 (some pushed once: not admitted).
void Push(const JobOptions& job, TestStores& stores, int64_t clock, uint64_t first, uint64_t span,
          int ids, uint64_t step = 3) {
  const auto shards = static_cast<uint32_t>(stores.size());
  std::mt19937_64 rng(static_cast<uint64_t>(clock) * 7 + 1);
  for (uint32_t t = 0; t < job.tables.size(); ++t) {
    const TableOptions& table = job.tables[t];
    std::vector<std::vector<uint64_t>> keys(shards);
    if (table.hashed()) {
      for (int i = 0; i < ids; ++i) {
        const uint64_t id = (rng() % 1000) * 0x9e3779b97f4a7c15ull + 11;
        const uint32_t slot = IdSlot(id, table.HashSeed(), kHashSlots);
        std::vector<uint64_t>& mine = keys[SlotShard(slot, kHashSlots, shards)];
        if (std::find(mine.begin(), mine.end(), id) == mine.end()) mine.push_back(id);
      }
    } else {
      for (uint64_t row = first; row < std::min(table.rows, first + span); row += step) {
        keys[ShardOfRow(table.rows, shards, row)].push_back(row);
      }
    }
    for (uint32_t s = 0; s < shards; ++s) {
      if (keys[s].empty()) continue;
      std::vector<float> values(keys[s].size() * table.dim);
      for (size_t i = 0; i < keys[s].size(); ++i) {
        for (uint32_t c = 0; c < table.dim; ++c) {
          values[i * table.dim + c] = Grad(static_cast<uint64_t>(clock), keys[s][i], c);
        }
      }
      ASSERT_OK(stores[s]->ApplyPush(TestPushRequest(t, table.dim, keys[s], values), clock));
    }
  }
}

// One shard's generations as CheckpointTrigger writes them: each a delta on
// the one before, or full.
class ShardChain {
 public:
  ShardChain(const JobOptions& job, uint32_t shard, ShardStore* store, uint32_t keep = 100)
      : job_(job), shard_(shard), store_(store), keep_(keep) {
    dir_ = CheckpointDir::Open(ShardCheckpointDir(job.checkpoint.dir, shard)).value();
  }
  // Writes generation `clock`; returns the snapshot written.
  ShardSnapshot Write(int64_t clock, bool delta) {
    const DeltaSince since{epoch_, &RowsPerRun};
    StatusOr<ShardSnapshot> s =
        store_->CheckpointSnapshot(job_, shard_, clock, delta ? &since : nullptr);
    EXPECT_OK(s);
    s->generation_id = 1000 * clock + 17;
    EXPECT_EQ(s->changes_only, delta);
    if (delta) {
      s->base_clock = base_clock_;
      s->base_id = base_id_;
    }
    CheckpointWriteOptions options;
    options.sync = false;
    options.keep = keep_;
    EXPECT_OK(dir_->Write(*s, options));
    base_clock_ = clock;
    base_id_ = s->generation_id;
    epoch_ = s->epoch;
    // Its hashed rows as they were at the snapshot, whatever came after.
    s->CopyShared();
    return std::move(*s);
  }
  CheckpointDir& dir() { return *dir_; }

 private:
  const JobOptions& job_;
  const uint32_t shard_;
  ShardStore* const store_;
  const uint32_t keep_;
  std::unique_ptr<CheckpointDir> dir_;
  int64_t base_clock_ = -1;
  uint64_t base_id_ = 0;
  uint64_t epoch_ = 0;
};

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every table of `got` equals `want`'s, bit for bit: values, state, a
// hashed table's ids (in key order), uses and sketch.
void ExpectSameShard(const ShardSnapshot& got, const ShardSnapshot& want, const std::string& what) {
  ASSERT_EQ(got.tables.size(), want.tables.size()) << what;
  for (size_t t = 0; t < got.tables.size(); ++t) {
    const TableSnapshot& a = got.tables[t];
    const TableSnapshot& b = want.tables[t];
    EXPECT_TRUE(BitEqual(a.values, b.values)) << what << " table " << a.name;
    ASSERT_EQ(a.slots.size(), b.slots.size()) << what;
    for (size_t k = 0; k < a.slots.size(); ++k) {
      EXPECT_TRUE(BitEqual(a.slots[k], b.slots[k])) << what << " table " << a.name << " slot " << k;
    }
    EXPECT_EQ(a.ids, b.ids) << what << " table " << a.name;
    ASSERT_EQ(a.uses.size(), b.uses.size()) << what << " table " << a.name;
    for (size_t i = 0; i < a.uses.size(); ++i) {
      EXPECT_TRUE(a.uses[i].seq == b.uses[i].seq && a.uses[i].clock == b.uses[i].clock &&
                  a.uses[i].uses == b.uses[i].uses)
          << what << " table " << a.name << " id " << a.ids[i];
    }
    EXPECT_EQ(a.sketch, b.sketch) << what << " table " << a.name;
  }
}

class IncrementalCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = UniqueTempDir("incremental_checkpoint_test"); }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Shard 0 of one: generation 3 full, then deltas 4, 5 and 6, each after
  // a round touching some hashed ids (rows evicted at the bound and for
  // idleness in between) and range rows: a few rows of one block before 4
  // and 6 (row records), every row before 5 (run records). `states` gets
  // the store's state at each generation.
  void WriteChain(const JobOptions& job, std::map<int64_t, ShardSnapshot>* states,
                  std::vector<ShardSnapshot>* written = nullptr) {
    TestStores stores = CreateTestStores(job);
    for (int64_t clock = 0; clock < 3; ++clock) Push(job, stores, clock, 0, 40000, 400);
    ShardChain chain(job, 0, stores[0].get());
    for (int64_t clock = 3; clock <= 6; ++clock) {
      if (clock == 5) Push(job, stores, clock - 1, 0, 40000, 120, /*step=*/1);
      if (clock == 4 || clock == 6) Push(job, stores, clock - 1, 17000 + 3000 * clock, 500, 120);
      ShardSnapshot s = chain.Write(clock, /*delta=*/clock > 3);
      (*states)[clock] = stores[0]->Snapshot(job, 0, clock).value();
      if (written != nullptr) written->push_back(std::move(s));
    }
  }

  StatusOr<ShardSnapshot> RestoreAt(const JobOptions& job, int64_t clock) {
    std::unique_ptr<ShardStore> store = ShardStore::Create(job, 0, false).value();
    OsFilesystem files;
    PS_RETURN_IF_ERROR(RestoreGeneration(job, 0, RestorePoint{clock, 1, ""}, store.get(), &files)
                           .status());
    return store->Snapshot(job, 0, clock);
  }

  std::string Gen(int64_t clock, uint32_t shard = 0) const {
    return ShardCheckpointDir(dir_, shard) + "/" + GenerationName(clock);
  }

  std::unique_ptr<rocksdb::DB> OpenWritable(const std::string& path) {
    rocksdb::Options o;
    o.compression = rocksdb::kNoCompression;
    o.disable_auto_compactions = true;
    rocksdb::DB* db = nullptr;
    EXPECT_TRUE(rocksdb::DB::Open(o, path, &db).ok()) << path;
    return std::unique_ptr<rocksdb::DB>(db);
  }
  static void Close(std::unique_ptr<rocksdb::DB> db) {
    EXPECT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
    EXPECT_TRUE(db->Close().ok());
  }

  std::string dir_;
};

TEST_F(IncrementalCheckpointTest, FullGenerationAndDeltasRestoreEachStateBitForBit) {
  const JobOptions job = Job(1, dir_, 4);
  std::map<int64_t, ShardSnapshot> states;
  std::vector<ShardSnapshot> written;
  WriteChain(job, &states, &written);
  // The deltas hold what changed: a few blocks, some rows, removed ids.
  const TableSnapshot& full_dense = written[0].tables[0];
  bool removed = false;
  for (size_t g = 1; g < written.size(); ++g) {
    const ShardSnapshot& delta = written[g];
    ASSERT_TRUE(delta.delta());
    EXPECT_EQ(delta.base_clock, written[g - 1].clock);
    if (delta.clock == 5) {
      EXPECT_EQ(delta.tables[0].changed, (std::vector<RowRange>{{0, 40000}}));
      EXPECT_TRUE(delta.tables[0].patched.empty());
    } else {
      EXPECT_LT(delta.tables[0].values.size(), full_dense.RowCount() * full_dense.dim / 100);
      EXPECT_TRUE(delta.tables[0].changed.empty());
      EXPECT_EQ(delta.tables[0].patched.size(), 167u);
    }
    EXPECT_LT(delta.tables[3].ids.size(), delta.tables[3].stored_rows);
    removed = removed || !delta.tables[2].removed.empty();
    OsFilesystem files;
    EXPECT_EQ(GenerationBase(files, Gen(delta.clock)).value(), delta.base_clock);
  }
  EXPECT_TRUE(removed) << "no row of the evicting table went between generations";
  for (const auto& [clock, state] : states) {
    StatusOr<ShardSnapshot> restored = RestoreAt(job, clock);
    ASSERT_OK(restored);
    ExpectSameShard(*restored, state, "restored generation " + std::to_string(clock));
    // What an export and ps.read_checkpoint read: the same state.
    StatusOr<ShardSnapshot> read =
        CheckpointDir::Open(ShardCheckpointDir(dir_, 0)).value()->Read(clock);
    ASSERT_OK(read);
    ExpectSameShard(*read, state, "read generation " + std::to_string(clock));
    EXPECT_FALSE(read->delta());
  }
}

TEST_F(IncrementalCheckpointTest, MissingBaseIsNamedAndNotRestored) {
  const JobOptions job = Job(1, dir_, 4);
  std::map<int64_t, ShardSnapshot> states;
  WriteChain(job, &states);
  fs::remove_all(Gen(5));
  const StatusOr<ShardSnapshot> restored = RestoreAt(job, 6);
  ASSERT_EQ(restored.status().code(), StatusCode::kDataLoss) << restored.status().ToString();
  const std::string& message = restored.status().message();
  EXPECT_NE(message.find(Gen(6) + " is a delta on generation 5"), std::string::npos) << message;
  EXPECT_NE(message.find(Gen(5) + " is missing"), std::string::npos) << message;
  EXPECT_NE(message.find("--restore-clock"), std::string::npos) << message;
  // The chain below the gap still restores.
  StatusOr<ShardSnapshot> older = RestoreAt(job, 4);
  ASSERT_OK(older);
  ExpectSameShard(*older, states[4], "generation 4");
}

TEST_F(IncrementalCheckpointTest, BaseWrittenAgainSinceIsNamed) {
  const JobOptions job = Job(1, dir_, 4);
  std::map<int64_t, ShardSnapshot> states;
  WriteChain(job, &states);
  // Another generation 5 (a full one of other values) replaces the base of 6.
  TestStores other = CreateTestStores(job);
  Push(job, other, 0, 0, 40000, 50);
  ShardSnapshot s = other[0]->CheckpointSnapshot(job, 0, 5, nullptr).value();
  s.generation_id = 99;
  CheckpointWriteOptions options;
  options.sync = false;
  options.keep = 100;
  ASSERT_OK(CheckpointDir::Open(ShardCheckpointDir(dir_, 0)).value()->Write(s, options));
  const StatusOr<ShardSnapshot> restored = RestoreAt(job, 6);
  ASSERT_EQ(restored.status().code(), StatusCode::kDataLoss) << restored.status().ToString();
  EXPECT_NE(restored.status().message().find("is another generation of that clock"),
            std::string::npos)
      << restored.status().message();
}

TEST_F(IncrementalCheckpointTest, CorruptRecordOfADeltaIsNamed) {
  const JobOptions job = Job(1, dir_, 4);
  std::map<int64_t, ShardSnapshot> states;
  std::vector<ShardSnapshot> written;
  WriteChain(job, &states, &written);
  // A run record of generation 5 cut short.
  const ShardSnapshot& delta = written[2];
  ASSERT_TRUE(delta.delta());
  const uint64_t row = delta.tables[0].changed[0].begin;
  std::unique_ptr<rocksdb::DB> db = OpenWritable(Gen(5));
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), RowKey(0, row), "short").ok());
  Close(std::move(db));
  const StatusOr<ShardSnapshot> restored = RestoreAt(job, 6);
  ASSERT_EQ(restored.status().code(), StatusCode::kDataLoss) << restored.status().ToString();
  const std::string& message = restored.status().message();
  EXPECT_NE(message.find(Gen(5) + ": the record of table 'dense' rows [" + std::to_string(row)),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("has 5 bytes"), std::string::npos) << message;
}

TEST_F(IncrementalCheckpointTest, CorruptRowRecordOfADeltaIsNamed) {
  const JobOptions job = Job(1, dir_, 4);
  std::map<int64_t, ShardSnapshot> states;
  std::vector<ShardSnapshot> written;
  WriteChain(job, &states, &written);
  // A row record of generation 6, over a run of generation 5, cut short.
  const uint64_t row = written[3].tables[0].patched[0];
  std::unique_ptr<rocksdb::DB> db = OpenWritable(Gen(6));
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), PatchKey(0, row), "short").ok());
  Close(std::move(db));
  const StatusOr<ShardSnapshot> restored = RestoreAt(job, 6);
  ASSERT_EQ(restored.status().code(), StatusCode::kDataLoss) << restored.status().ToString();
  EXPECT_NE(restored.status().message().find(Gen(6) + ": the row record of table 'dense' row " +
                                              std::to_string(row) + " has 5 bytes"),
            std::string::npos)
      << restored.status().message();
}

TEST_F(IncrementalCheckpointTest, RecordMissingFromADeltaIsNamed) {
  const JobOptions job = Job(1, dir_, 4);
  std::map<int64_t, ShardSnapshot> states;
  std::vector<ShardSnapshot> written;
  WriteChain(job, &states, &written);
  // A changed row of the hashed table "plain" (index 3) gone from delta 4.
  const TableSnapshot& plain = written[1].tables[3];
  ASSERT_FALSE(plain.ids.empty());
  const uint64_t id = plain.ids[0];
  std::unique_ptr<rocksdb::DB> db = OpenWritable(Gen(4));
  ASSERT_TRUE(
      db->Delete(rocksdb::WriteOptions(), IdKey(3, IdSlot(id, NameHash("plain"), kHashSlots), id))
          .ok());
  Close(std::move(db));
  const StatusOr<ShardSnapshot> restored = RestoreAt(job, 6);
  ASSERT_EQ(restored.status().code(), StatusCode::kDataLoss) << restored.status().ToString();
  const std::string& message = restored.status().message();
  EXPECT_NE(message.find(Gen(4) + ": table 'plain' has " + std::to_string(plain.ids.size() - 1) +
                         " row records"),
            std::string::npos)
      << message;
}

TEST_F(IncrementalCheckpointTest, RecordMissingFromTheFullGenerationOfAChainIsNamed) {
  const JobOptions job = Job(1, dir_, 4);
  std::map<int64_t, ShardSnapshot> states;
  WriteChain(job, &states);
  // The run of "odd" rows from 0 gone from the full generation 3.
  std::unique_ptr<rocksdb::DB> db = OpenWritable(Gen(3));
  ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), RowKey(1, 0)).ok());
  Close(std::move(db));
  const StatusOr<ShardSnapshot> restored = RestoreAt(job, 6);
  ASSERT_EQ(restored.status().code(), StatusCode::kDataLoss) << restored.status().ToString();
  EXPECT_NE(restored.status().message().find(Gen(3) + ": the record of table 'odd' rows [0, "),
            std::string::npos)
      << restored.status().message();
}

TEST_F(IncrementalCheckpointTest, PruningKeepsTheGenerationsKeptOnesBuildOn) {
  const JobOptions job = Job(1, dir_, 3);
  TestStores stores = CreateTestStores(job);
  ShardChain chain(job, 0, stores[0].get(), /*keep=*/2);
  OsFilesystem files;
  const auto held = [&] { return ListGenerations(files, ShardCheckpointDir(dir_, 0)).value(); };
  // 1 full, 2 and 3 deltas, 4 full, 5 a delta on 4.
  const bool delta[] = {false, false, true, true, false, true};
  for (int64_t clock = 1; clock <= 5; ++clock) {
    Push(job, stores, clock, 100 * static_cast<uint64_t>(clock), 10, 20);
    chain.Write(clock, delta[clock]);
    if (clock == 3) {
      EXPECT_EQ(held(), (std::vector<int64_t>{1, 2, 3}));
    }
    if (clock == 4) {
      EXPECT_EQ(held(), (std::vector<int64_t>{1, 2, 3, 4}));
      EXPECT_OK(chain.dir().Read(3).status());
    }
  }
  EXPECT_EQ(held(), (std::vector<int64_t>{4, 5}));
  EXPECT_OK(chain.dir().Read(5).status());
}

// The state of the whole model across `stores`: a range table's rows in
// order, a hashed table's rows by id (values, state, use).
struct Whole {
  std::vector<float> values;
  std::vector<std::vector<float>> slots;
  std::map<uint64_t, std::vector<float>> rows;
};

std::vector<Whole> Gather(const JobOptions& job, const TestStores& stores) {
  std::vector<Whole> tables(job.tables.size());
  for (uint32_t s = 0; s < stores.size(); ++s) {
    const ShardSnapshot snapshot = stores[s]->Snapshot(job, s, 0).value();
    for (size_t t = 0; t < tables.size(); ++t) {
      const TableSnapshot& ts = snapshot.tables[t];
      Whole& whole = tables[t];
      if (!ts.hashed) {
        whole.values.insert(whole.values.end(), ts.values.begin(), ts.values.end());
        whole.slots.resize(ts.slots.size());
        for (size_t k = 0; k < ts.slots.size(); ++k) {
          whole.slots[k].insert(whole.slots[k].end(), ts.slots[k].begin(), ts.slots[k].end());
        }
        continue;
      }
      for (size_t i = 0; i < ts.ids.size(); ++i) {
        std::vector<float>& row = whole.rows[ts.ids[i]];
        row.assign(ts.values.begin() + i * ts.dim, ts.values.begin() + (i + 1) * ts.dim);
        for (const auto& slot : ts.slots) {
          row.insert(row.end(), slot.begin() + i * ts.dim, slot.begin() + (i + 1) * ts.dim);
        }
        if (ts.row_uses) {
          row.push_back(static_cast<float>(ts.uses[i].uses));
          row.push_back(static_cast<float>(ts.uses[i].clock));
        }
      }
    }
  }
  return tables;
}

TEST_F(IncrementalCheckpointTest, ChainRestoresOntoAnotherShardCount) {
  const JobOptions two = Job(2, dir_, 4);
  TestStores stores = CreateTestStores(two);
  for (int64_t clock = 0; clock < 3; ++clock) Push(two, stores, clock, 0, 40000, 400);
  std::vector<ShardChain> chains;
  for (uint32_t s = 0; s < 2; ++s) chains.emplace_back(two, s, stores[s].get());
  for (int64_t clock = 3; clock <= 5; ++clock) {
    if (clock > 3) Push(two, stores, clock - 1, 9000 * static_cast<uint64_t>(clock), 700, 150);
    for (ShardChain& chain : chains) chain.Write(clock, clock > 3);
  }
  const std::vector<Whole> want = Gather(two, stores);
  for (const uint32_t servers : {1u, 3u}) {
    const JobOptions job = Job(servers, dir_, 4);
    TestStores restored = CreateTestStores(job, /*initialize=*/false);
    OsFilesystem files;
    for (uint32_t s = 0; s < servers; ++s) {
      const RestorePoint point = ShardRestorePoint(files, job, s, -1).value();
      ASSERT_EQ(point.clock, 5);
      ASSERT_EQ(point.writers, 2u);
      ASSERT_OK(RestoreGeneration(job, s, point, restored[s].get(), &files).status());
    }
    const std::vector<Whole> got = Gather(job, restored);
    for (size_t t = 0; t < want.size(); ++t) {
      const std::string what = std::to_string(servers) + " servers, table " + job.tables[t].name;
      EXPECT_TRUE(BitEqual(got[t].values, want[t].values)) << what;
      ASSERT_EQ(got[t].slots.size(), want[t].slots.size()) << what;
      for (size_t k = 0; k < got[t].slots.size(); ++k) {
        EXPECT_TRUE(BitEqual(got[t].slots[k], want[t].slots[k])) << what;
      }
      ASSERT_EQ(got[t].rows.size(), want[t].rows.size()) << what;
      for (const auto& [id, row] : want[t].rows) {
        ASSERT_TRUE(got[t].rows.count(id) != 0) << what << " id " << id;
        EXPECT_TRUE(BitEqual(got[t].rows.at(id), row)) << what << " id " << id;
      }
    }
  }
}

// A range table of 10 blocks (1 MiB of values each) and a hashed one.
JobOptions TriggerJob(const std::string& dir, uint32_t full_every) {
  TableOptions plain = TestTable("plain", 0, 2, OptimizerKind::kAdam);
  plain.keys = KeyKind::kHashed;
  plain.slots = kHashSlots;
  plain.max_rows = 1000;
  JobOptions job = TestJob().Table("big", 10 * 262144, 1).Table(plain).Build();
  job.checkpoint.dir = dir;
  job.checkpoint.full_every = full_every;
  EXPECT_OK(job.Validate());
  return job;
}

// Generations written by a CheckpointTrigger at every clock 1..n, after
// pushes to rows [0, rows_per_clock) of each range table: whether each is a
// delta (its base file).
std::vector<bool> TriggerDeltas(const JobOptions& job, uint32_t full_every, int n,
                                uint64_t rows_per_clock) {
  std::unique_ptr<ShardStore> store = ShardStore::Create(job, 0).value();
  std::unique_ptr<CheckpointDir> dir =
      CheckpointDir::Open(ShardCheckpointDir(job.checkpoint.dir, 0)).value();
  FakeClock clock;
  CheckpointTriggerOptions options;
  options.every_clocks = 1;
  options.full_every = full_every;
  options.write.sync = false;
  options.write.keep = 100;
  TestStores one;
  one.push_back(std::move(store));
  {
    CheckpointTrigger trigger(
        options, *dir,
        [&](int64_t c, const DeltaSince* since) {
          return one[0]->CheckpointSnapshot(job, 0, c, since);
        },
        clock, [](CheckpointTrigger::Answer&) {}, /*last_clock=*/0);
    for (int64_t c = 1; c <= n; ++c) {
      Push(job, one, c - 1, 0, rows_per_clock, 10);
      trigger.ClockAdvanced(c);
    }
    trigger.Stop(n);
  }
  std::vector<bool> deltas;
  OsFilesystem files;
  for (int64_t c = 1; c <= n; ++c) {
    deltas.push_back(GenerationBase(files, dir->GenerationPath(c)).value() >= 0);
    EXPECT_OK(dir->Read(c).status()) << "generation " << c;
  }
  return deltas;
}

TEST_F(IncrementalCheckpointTest, TriggerWritesAFullGenerationEveryFullEvery) {
  // Rows [0, 300) change: one block of ten.
  EXPECT_EQ(TriggerDeltas(TriggerJob(dir_, 3), 3, 7, 300),
            (std::vector<bool>{false, true, true, false, true, true, false}));
}

TEST_F(IncrementalCheckpointTest, TriggerWritesAFullGenerationWhenDeltasOutgrowTheFullOne) {
  // Every row changes at every clock: a delta is as large as a full
  // generation, so every other one is full.
  EXPECT_EQ(TriggerDeltas(TriggerJob(dir_, 10), 10, 5, 10 * 262144),
            (std::vector<bool>{false, true, false, true, false}));
}

TEST_F(IncrementalCheckpointTest, AFailedWriteMakesTheNextGenerationFull) {
  const JobOptions job = TriggerJob(dir_, 10);
  TestStores one;
  one.push_back(ShardStore::Create(job, 0).value());
  OsFilesystem os;
  FaultyFilesystem files(&os);
  std::unique_ptr<CheckpointDir> dir =
      CheckpointDir::Open(ShardCheckpointDir(dir_, 0), &files).value();
  FakeClock clock;
  CheckpointTriggerOptions options;
  options.every_clocks = 1;
  options.full_every = 10;
  options.write.sync = false;
  options.write.keep = 100;
  {
    CheckpointTrigger trigger(
        options, *dir,
        [&](int64_t c, const DeltaSince* since) {
          return one[0]->CheckpointSnapshot(job, 0, c, since);
        },
        clock, [](CheckpointTrigger::Answer&) {}, /*last_clock=*/0);
    for (int64_t c = 1; c <= 5; ++c) {
      Push(job, one, c - 1, 0, 300, 10);
      if (c == 3) files.FailNth(1, FaultyFilesystem::Fault::kNoSpace);
      trigger.ClockAdvanced(c);
      trigger.Stop(c);  // the write is over
      if (c == 3) {
        EXPECT_TRUE(files.fired());
        files.Clear();
      }
    }
  }
  // 3 failed: 4 is full, 5 a delta on it, and 5 restores the store.
  EXPECT_EQ(GenerationBase(os, dir->GenerationPath(2)).value(), 1);
  EXPECT_FALSE(fs::exists(dir->GenerationPath(3)));
  EXPECT_EQ(GenerationBase(os, dir->GenerationPath(4)).value(), -1);
  EXPECT_EQ(GenerationBase(os, dir->GenerationPath(5)).value(), 4);
  StatusOr<ShardSnapshot> read = dir->Read(5);
  ASSERT_OK(read);
  ExpectSameShard(*read, one[0]->Snapshot(job, 0, 5).value(), "generation 5");
}

TEST_F(IncrementalCheckpointTest, FullEveryOneWritesOnlyFullGenerations) {
  EXPECT_EQ(TriggerDeltas(TriggerJob(dir_, 1), 1, 3, 300),
            (std::vector<bool>{false, false, false}));
}

}  // namespace
}  // namespace ps
