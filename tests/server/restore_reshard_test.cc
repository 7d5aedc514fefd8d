// A checkpoint written by S shards restored onto S' shards (server/restore.h,
// RestoreGeneration), for S, S' in {1, 2, 3, 4}: range tables' rows re-split,
// hashed tables' rows following their ids' hash slots, optimizer state, row
// uses and admission sketches; S -> S' -> S gives back the generations of S
// bit for bit; what must agree is checked, and a damaged part is named.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/hash_slots.h"
#include "common/reshard_sources.h"
#include "server/checkpoint.h"
#include "server/checkpoint_format.h"
#include "server/checkpoint_layout.h"
#include "server/reshard_follower.h"
#include "server/restore.h"
#include "server/shard_server.h"
#include "store/shard_store.h"
#include "tests/util/damaged_files.h"
#include "tests/util/status_matchers.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_job.h"
#include "tests/util/test_stores.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kClock = 7;
constexpr uint32_t kHashSlots = 64;

// The model every shard count holds: range tables under adam (2 state
// arrays), sgd with momentum (1) and adagrad of dim 1 (several 64 KiB runs
// per shard, so a new shard's rows start and end inside runs); a hashed
// table with admission (2 pushes) and lru eviction (rows keep their uses)
// under ftrl (2 arrays), and a plain hashed one under adam.
JobOptions Job(uint32_t servers) {
  TableOptions dense = TestTable("dense", 1000, 3, OptimizerKind::kAdam);
  dense.init = {InitKind::kNormal, 0.1f, 3};
  TableOptions mom = TestTable("mom", 77, 5, OptimizerKind::kSgd);
  mom.optimizer.momentum = 0.9f;
  mom.init = {InitKind::kUniform, 0.5f, 4};
  TableOptions ada = TestTable("ada", 100000, 1, OptimizerKind::kAdagrad);
  TableOptions emb = TestTable("emb", 0, 4, OptimizerKind::kFtrl);
  emb.keys = KeyKind::kHashed;
  emb.slots = kHashSlots;
  emb.max_rows = 100000;
  emb.init = {InitKind::kNormal, 0.01f, 5};
  emb.admit.min_pushes = 2;
  emb.admit.sketch_width = 1024;
  emb.evict.policy = EvictPolicy::kLru;
  TableOptions emb2 = TestTable("emb2", 0, 2, OptimizerKind::kAdam);
  emb2.keys = KeyKind::kHashed;
  emb2.slots = kHashSlots;
  emb2.max_rows = 100000;
  JobOptions job = TestJob()
                       .Servers(servers)
                       .Workers(1)
                       .Table(dense)
                       .Table(mom)
                       .Table(ada)
                       .Table(emb)
                       .Table(emb2)
                       .Build();
  EXPECT_OK(job.Validate());
  return job;
}


// A gradient in [-1, 1) that depends only on (seed, round, table, key,
// column): the same pushes whatever the shard count.
float Grad(uint64_t seed, int round, uint32_t table, uint64_t key, uint32_t col) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(round) * 0xbf58476d1ce4e5b9ull +
               table * 0x94d049bb133111ebull + key * 0x2545f4914f6cdd1dull + col;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(static_cast<double>(x >> 11) / 4503599627370496.0 - 1.0);
}

// Pushes to every table of `stores` (a job of stores.size() shards), each
// row or id to the shard that owns it: `rounds` rounds at clocks 0, 1, ...
void Train(const JobOptions& job, TestStores& stores, int rounds, uint32_t seed) {
  const auto shards = static_cast<uint32_t>(stores.size());
  std::mt19937_64 rng(seed);
  for (int round = 0; round < rounds; ++round) {
    for (uint32_t t = 0; t < job.tables.size(); ++t) {
      const TableOptions& table = job.tables[t];
      std::vector<std::vector<uint64_t>> keys(shards);
      if (table.hashed()) {
        // 600 ids a round from a pool of 2000: some pushed once (not
        // admitted under `admit`), most more often.
        for (int i = 0; i < 600; ++i) {
          const uint64_t id = (rng() % 2000) * 0x9e3779b97f4a7c15ull + 11;
          const uint32_t slot = IdSlot(id, table.HashSeed(), kHashSlots);
          std::vector<uint64_t>& mine = keys[SlotShard(slot, kHashSlots, shards)];
          if (std::find(mine.begin(), mine.end(), id) == mine.end()) mine.push_back(id);
        }
      } else {
        for (uint64_t row = rng() % 3; row < table.rows; row += 1 + rng() % 4) {
          keys[ShardOfRow(table.rows, shards, row)].push_back(row);
        }
      }
      for (uint32_t s = 0; s < shards; ++s) {
        if (keys[s].empty()) continue;
        std::vector<float> values(keys[s].size() * table.dim);
        for (size_t i = 0; i < keys[s].size(); ++i) {
          for (uint32_t c = 0; c < table.dim; ++c) {
            values[i * table.dim + c] = Grad(seed, round, t, keys[s][i], c);
          }
        }
        ASSERT_OK(stores[s]->ApplyPush(TestPushRequest(t, table.dim, keys[s], values), round));
      }
    }
  }
}

// Every shard's generation kClock under `dir`.
void Write(const JobOptions& job, const TestStores& stores, const std::string& dir) {
  for (uint32_t s = 0; s < stores.size(); ++s) {
    auto snapshot = stores[s]->Snapshot(job, s, kClock);
    ASSERT_OK(snapshot);
    auto folder = CheckpointDir::Open(ShardCheckpointDir(dir, s));
    ASSERT_OK(folder);
    CheckpointWriteOptions options;
    options.sync = false;
    ASSERT_OK((*folder)->Write(*snapshot, options));
  }
}

// A restore on one thread, and on many: every piece of runs of at least 1
// byte, so each old shard's rows are read in several pieces at once.
constexpr GenerationReadOptions kOneThread{.threads = 1};
constexpr GenerationReadOptions kManyThreads{.threads = 8, .min_range_bytes = 1};

// The stores of `job` (`dir` its checkpoint.dir), each restored from the
// generation kClock there that `writers` shards wrote, into a store whose
// rows start unwritten (as a server's).
TestStores Restore(JobOptions job, const std::string& dir, uint32_t writers,
               const GenerationReadOptions& read = {}) {
  job.checkpoint.dir = dir;
  TestStores stores;
  for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
    stores.push_back(ShardStore::CreateUnwritten(job, s).value());
  }
  OsFilesystem files;
  for (uint32_t s = 0; s < stores.size(); ++s) {
    const RestorePoint point = ShardRestorePoint(files, job, s, -1).value();
    EXPECT_EQ(point.clock, kClock);
    EXPECT_EQ(point.writers, writers);
    auto restored = RestoreGeneration(job, s, point, stores[s].get(), &files, read);
    EXPECT_OK(restored);
    if (restored.ok()) {
      EXPECT_EQ(restored->tables, job.tables.size());
    }
  }
  return stores;
}

// A whole table across the shards: a range table's rows in order (values,
// then each state array), a hashed table's rows by id (values, state, use).
struct Whole {
  std::vector<float> values;
  std::vector<std::vector<float>> slots;
  std::map<uint64_t, std::vector<float>> rows;
  std::map<uint64_t, RowUse> uses;
};

Whole Gather(const JobOptions& job, const TestStores& stores, uint32_t t) {
  Whole whole;
  for (uint32_t s = 0; s < stores.size(); ++s) {
    const ShardSnapshot snapshot = stores[s]->Snapshot(job, s, kClock).value();
    const TableSnapshot& ts = snapshot.tables[t];
    if (!ts.hashed) {
      whole.values.insert(whole.values.end(), ts.values.begin(), ts.values.end());
      whole.slots.resize(ts.slots.size());
      for (size_t k = 0; k < ts.slots.size(); ++k) {
        whole.slots[k].insert(whole.slots[k].end(), ts.slots[k].begin(), ts.slots[k].end());
      }
      continue;
    }
    for (size_t i = 0; i < ts.ids.size(); ++i) {
      const uint64_t id = ts.ids[i];
      // Every row lies on the shard that owns its slot.
      EXPECT_TRUE(ts.owned.Contains(IdSlot(id, NameHash(ts.name), ts.hash_slots)))
          << ts.name << " id " << id << " on shard " << s;
      std::vector<float>& row = whole.rows[id];
      row.assign(ts.values.begin() + i * ts.dim, ts.values.begin() + (i + 1) * ts.dim);
      for (const auto& slot : ts.slots) {
        row.insert(row.end(), slot.begin() + i * ts.dim, slot.begin() + (i + 1) * ts.dim);
      }
      if (ts.row_uses) whole.uses[id] = ts.uses[i];
    }
  }
  return whole;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every table of `a` (a job of a.size() shards) equals `b`'s, bit for bit.
void ExpectSameModel(const JobOptions& job_a, const TestStores& a, const JobOptions& job_b,
                     const TestStores& b) {
  for (uint32_t t = 0; t < job_a.tables.size(); ++t) {
    const Whole x = Gather(job_a, a, t), y = Gather(job_b, b, t);
    const std::string& name = job_a.tables[t].name;
    EXPECT_TRUE(BitEqual(x.values, y.values)) << name;
    ASSERT_EQ(x.slots.size(), y.slots.size()) << name;
    for (size_t k = 0; k < x.slots.size(); ++k) EXPECT_TRUE(BitEqual(x.slots[k], y.slots[k])) << name;
    ASSERT_EQ(x.rows.size(), y.rows.size()) << name;
    for (const auto& [id, row] : x.rows) {
      const auto other = y.rows.find(id);
      ASSERT_NE(other, y.rows.end()) << name << " id " << id;
      EXPECT_TRUE(BitEqual(row, other->second)) << name << " id " << id;
    }
    ASSERT_EQ(x.uses.size(), y.uses.size()) << name;
    for (const auto& [id, use] : x.uses) {
      const RowUse& u = y.uses.at(id);
      EXPECT_TRUE(use.seq == u.seq && use.clock == u.clock && use.uses == u.uses)
          << name << " id " << id;
    }
  }
}

// The sketch of shard `shard` of `shards` merged from `old` (each old
// shard's counters, its slots among old.size() shards): the larger counter
// of every old shard whose slots overlap the shard's.
std::vector<uint16_t> MergedSketch(const std::vector<std::vector<uint16_t>>& old, uint32_t shards,
                                   uint32_t shard) {
  const RowRange mine = ShardSlots(kHashSlots, shards, shard);
  std::vector<uint16_t> merged(old[0].size(), 0);
  for (uint32_t i = 0; i < old.size(); ++i) {
    const RowRange theirs = ShardSlots(kHashSlots, static_cast<uint32_t>(old.size()), i);
    if (std::max(mine.begin, theirs.begin) >= std::min(mine.end, theirs.end)) continue;
    for (size_t c = 0; c < merged.size(); ++c) merged[c] = std::max(merged[c], old[i][c]);
  }
  return merged;
}

std::vector<std::vector<uint16_t>> Sketches(const TestStores& stores, uint32_t t) {
  std::vector<std::vector<uint16_t>> out;
  for (const auto& store : stores) {
    const std::span<const std::byte> data = store->SketchData(t);
    std::vector<uint16_t> counters(data.size() / 2);
    std::memcpy(counters.data(), data.data(), data.size());
    out.push_back(std::move(counters));
  }
  return out;
}

// True when every slot range of `to` shards lies inside one of `from`'s:
// the sketches then come through unchanged.
bool Refines(uint32_t to, uint32_t from) {
  for (uint32_t j = 0; j < to; ++j) {
    const RowRange r = ShardSlots(kHashSlots, to, j);
    if (r.empty()) continue;
    if (SlotShard(static_cast<uint32_t>(r.begin), kHashSlots, from) !=
        SlotShard(static_cast<uint32_t>(r.end - 1), kHashSlots, from)) {
      return false;
    }
  }
  return true;
}

class RestoreReshardTest : public ::testing::TestWithParam<std::pair<uint32_t, uint32_t>> {
 protected:
  void SetUp() override { root_ = UniqueTempDir("restore_reshard"); }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
};

TEST_P(RestoreReshardTest, EveryRowStateUseAndSketchFollowsItsKeyAndComesBackBitForBit) {
  const auto [from, to] = GetParam();
  const JobOptions job_s = Job(from), job_t = Job(to);
  TestStores original = CreateTestStores(job_s);
  Train(job_s, original, 6, 42);
  ASSERT_GT(original[0]->stored_rows(3), 0u);
  const std::string first = root_ + "/a", second = root_ + "/b", third = root_ + "/c";
  Write(job_s, original, first);

  // S -> S': the same model, row for row and bit for bit, read on one
  // thread or on many.
  TestStores moved = Restore(job_t, first, from, kManyThreads);
  ExpectSameModel(job_s, original, job_t, moved);
  const TestStores moved_alone = Restore(job_t, first, from, kOneThread);
  ExpectSameModel(job_t, moved_alone, job_t, moved);
  const auto old_sketches = Sketches(original, 3);
  const auto new_sketches = Sketches(moved, 3);
  EXPECT_EQ(Sketches(moved_alone, 3), new_sketches);
  for (uint32_t j = 0; j < to; ++j) {
    EXPECT_EQ(new_sketches[j], MergedSketch(old_sketches, to, j)) << "shard " << j << " of " << to;
  }
  // An id's count never drops: one pushed before is admitted as before.
  for (uint32_t s = 0; s < from; ++s) {
    for (uint64_t n = 0; n < 2000; ++n) {
      const uint64_t id = n * 0x9e3779b97f4a7c15ull + 11;
      const uint32_t slot = IdSlot(id, NameHash("emb"), kHashSlots);
      if (SlotShard(slot, kHashSlots, from) != s) continue;
      PushSketch before(1024), after(1024);
      ASSERT_TRUE(before.Restore(original[s]->SketchData(3)));
      ASSERT_TRUE(after.Restore(moved[SlotShard(slot, kHashSlots, to)]->SketchData(3)));
      ASSERT_GE(after.Count(id), before.Count(id)) << "id " << id;
    }
  }

  // In memory (server/reshard_follower.h): each new shard built from the
  // stores of the old shards whose rows overlap its own, as they stand at
  // the handover, equals the one restored from the generation, bit for bit
  // (rows, state, uses, sketches).
  TestStores assembled;
  for (uint32_t j = 0; j < to; ++j) {
    std::vector<ShardStore*> old;
    for (uint32_t i : FollowedShards(job_s, job_t, j)) old.push_back(original[i].get());
    auto store = AssembleStore(job_t, j, old);
    ASSERT_OK(store);
    assembled.push_back(std::move(*store));
  }
  ExpectSameModel(job_t, assembled, job_t, moved);
  EXPECT_EQ(Sketches(assembled, 3), new_sketches);

  // S' -> S: the generations equal the first ones, record for record.
  Write(job_t, moved, second);
  TestStores back = Restore(job_s, second, to);
  Write(job_s, back, third);
  for (uint32_t s = 0; s < from; ++s) {
    const ShardSnapshot a =
        CheckpointDir::Open(ShardCheckpointDir(first, s)).value()->Read(kClock).value();
    const ShardSnapshot c =
        CheckpointDir::Open(ShardCheckpointDir(third, s)).value()->Read(kClock).value();
    ASSERT_EQ(a.tables.size(), c.tables.size());
    EXPECT_EQ(a.fingerprint, c.fingerprint);
    for (size_t t = 0; t < a.tables.size(); ++t) {
      const TableSnapshot& x = a.tables[t];
      const TableSnapshot& y = c.tables[t];
      EXPECT_EQ(x.owned, y.owned);
      EXPECT_EQ(x.ids, y.ids) << x.name;
      EXPECT_TRUE(BitEqual(x.values, y.values)) << x.name << " shard " << s;
      for (size_t k = 0; k < x.slots.size(); ++k) EXPECT_TRUE(BitEqual(x.slots[k], y.slots[k]));
      ASSERT_EQ(x.uses.size(), y.uses.size());
      for (size_t i = 0; i < x.uses.size(); ++i) {
        EXPECT_TRUE(x.uses[i].seq == y.uses[i].seq && x.uses[i].clock == y.uses[i].clock &&
                    x.uses[i].uses == y.uses[i].uses);
      }
      // A sketch comes back as it was where each of the S' shards took
      // its slots from one old shard; else it holds the larger counts.
      if (x.sketch_width == 0) continue;
      if (Refines(to, from)) {
        EXPECT_EQ(x.sketch, y.sketch) << "shard " << s;
      } else {
        ASSERT_EQ(x.sketch.size(), y.sketch.size());
        for (size_t b = 0; b + 1 < x.sketch.size(); b += 2) {
          uint16_t u, v;
          std::memcpy(&u, x.sketch.data() + b, 2);
          std::memcpy(&v, y.sketch.data() + b, 2);
          ASSERT_LE(u, v);
        }
      }
    }
  }

  // The restored shards train on as the original ones do (the eviction
  // order aside, which follows per-shard push counts: see restore.h).
  Train(job_s, original, 3, 7);
  Train(job_t, moved, 3, 7);
  for (const uint32_t t : {0u, 1u, 2u, 4u}) {
    const Whole x = Gather(job_s, original, t), y = Gather(job_t, moved, t);
    EXPECT_TRUE(BitEqual(x.values, y.values)) << job_s.tables[t].name;
    for (size_t k = 0; k < x.slots.size(); ++k) EXPECT_TRUE(BitEqual(x.slots[k], y.slots[k]));
    EXPECT_EQ(x.rows, y.rows) << job_s.tables[t].name;
  }
}

std::vector<std::pair<uint32_t, uint32_t>> EveryPair() {
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  for (uint32_t from = 1; from <= 4; ++from) {
    for (uint32_t to = 1; to <= 4; ++to) pairs.emplace_back(from, to);
  }
  return pairs;
}

INSTANTIATE_TEST_SUITE_P(
    FromOneToFourShards, RestoreReshardTest, ::testing::ValuesIn(EveryPair()),
    [](const ::testing::TestParamInfo<std::pair<uint32_t, uint32_t>>& pair) {
      return "From" + std::to_string(pair.param.first) + "To" + std::to_string(pair.param.second);
    });

// A checkpoint of 3 shards and the refusals of a restore onto 2.
class ReshardRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = UniqueTempDir("reshard_refusal");
    written_ = Job(3);
    written_.checkpoint.dir = root_;
    TestStores stores = CreateTestStores(written_);
    Train(written_, stores, 3, 9);
    Write(written_, stores, root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // The error of restoring shard `shard` of `job` (a job of 2 by default).
  Status Refused(JobOptions job, uint32_t shard = 1, const GenerationReadOptions& read = {}) {
    job.checkpoint.dir = root_;
    auto store = ShardStore::Create(job, shard, false).value();
    OsFilesystem files;
    StatusOr<RestorePoint> point = ShardRestorePoint(files, job, shard, -1);
    if (!point.ok()) return point.status();
    return RestoreGeneration(job, shard, *point, store.get(), &files, read).status();
  }
  void ExpectRefused(const JobOptions& job, StatusCode code, const std::string& text,
                     uint32_t shard = 1, const GenerationReadOptions& read = {}) {
    const Status st = Refused(job, shard, read);
    EXPECT_EQ(st.code(), code) << st.ToString();
    EXPECT_NE(st.message().find(text), std::string::npos) << st.ToString();
  }
  std::string Gen(uint32_t shard) const {
    return ShardCheckpointDir(root_, shard) + "/gen-" + std::to_string(kClock);
  }

  std::string root_;
  JobOptions written_;
};

// The recent pushes a restored shard keeps: its own generation's on the
// same shard count, every old shard's on another; a malformed file is named.
TEST(RestoreRecentPushesTest, EveryOldShardsRecentPushesComeAlongAndAMalformedFileIsNamed) {
  const std::string root = UniqueTempDir("restore_recent");
  JobOptions written = Job(3);
  written.checkpoint.dir = root;
  TestStores stores = CreateTestStores(written);
  for (uint32_t s = 0; s < 3; ++s) {
    auto snapshot = stores[s]->Snapshot(written, s, kClock);
    ASSERT_OK(snapshot);
    RecentPushes recent(written.cluster.workers, 8);
    ASSERT_TRUE(recent.Insert(0, 100 + s, 1));  // worker 0's push to shard s
    snapshot->recent_pushes = recent.Encode();
    auto folder = CheckpointDir::Open(ShardCheckpointDir(root, s));
    ASSERT_OK(folder);
    ASSERT_OK((*folder)->Write(*snapshot, {.sync = false}));
  }
  const auto load = [&](uint32_t servers, uint32_t shard, RecentPushes* recent) {
    JobOptions job = Job(servers);
    job.checkpoint.dir = root;
    return LoadRecentPushes(job, shard, RestorePoint{.clock = kClock, .writers = 3, .passed_over = ""}, recent);
  };
  RecentPushes own(written.cluster.workers, 8);
  ASSERT_OK(load(3, 1, &own));
  EXPECT_TRUE(own.Contains(0, 101, 1));
  EXPECT_FALSE(own.Contains(0, 100, 1));
  RecentPushes moved(written.cluster.workers, 8);
  ASSERT_OK(load(2, 0, &moved));
  for (uint64_t s = 0; s < 3; ++s) EXPECT_TRUE(moved.Contains(0, 100 + s, 1)) << s;

  const std::string file =
      ShardCheckpointDir(root, 2) + "/gen-" + std::to_string(kClock) + "/recent-pushes";
  std::ofstream(file, std::ios::trunc) << "not the file";
  RecentPushes broken(written.cluster.workers, 8);
  Status refused = load(2, 1, &broken);
  EXPECT_EQ(refused.code(), StatusCode::kDataLoss) << refused.ToString();
  EXPECT_NE(refused.message().find(file + " is corrupt"), std::string::npos) << refused.ToString();
  fs::remove_all(root);
}

TEST_F(ReshardRefusalTest, WhatMustAgreeIsCheckedAndTheDifferenceNamed) {
  ASSERT_OK(Refused(Job(2)));
  JobOptions dim = Job(2);
  dim.tables[1].dim = 6;
  ExpectRefused(dim, StatusCode::kFailedPrecondition,
                Gen(0) + ": table 'mom' has dim 5 in the checkpoint but 6 in the job; resume "
                         "with the job file the checkpoint was written with (only "
                         "cluster.servers and the tables' max_rows or max_mb may differ)");
  JobOptions renamed = Job(2);
  renamed.tables[2].name = "other";
  ExpectRefused(renamed, StatusCode::kFailedPrecondition,
                "table 2 is 'ada' in the checkpoint but 'other' in the job");
  JobOptions more = Job(2);
  more.tables.push_back(TestTable("extra", 10));
  ExpectRefused(more, StatusCode::kFailedPrecondition,
                "the table count is 5 in the checkpoint but 6 in the job");
  JobOptions slots = Job(2);
  slots.tables[3].slots = 128;
  ExpectRefused(slots, StatusCode::kFailedPrecondition,
                "table 'emb' has 64 hash slots in the checkpoint but 128 in the job");
  JobOptions optimizer = Job(2);
  optimizer.tables[0].optimizer.lr = 0.5f;
  ExpectRefused(optimizer, StatusCode::kFailedPrecondition, "table 'dense' has optimizer \"adam");
  JobOptions init = Job(2);
  init.tables[4].init.seed = 99;
  ExpectRefused(init, StatusCode::kFailedPrecondition,
                "table 'emb2' has settings \"init=zeros,0,1\" in the checkpoint but "
                "\"init=zeros,0,99\" in the job");
  JobOptions admit = Job(2);
  admit.tables[3].admit.min_pushes = 3;
  ExpectRefused(admit, StatusCode::kFailedPrecondition,
                "admit=2,1 evict=lru,0\" in the checkpoint but \"init=normal,0.01,5 admit=3,1");
  // A per-shard bound may differ, but the rows must fit it.
  JobOptions bound = Job(2);
  bound.tables[4].max_rows = 200000;
  EXPECT_OK(Refused(bound));
  bound.tables[4].max_rows = 10;
  ExpectRefused(bound, StatusCode::kFailedPrecondition,
                "table 'emb2' would hold more than its bound of 10 rows on shard 1 of 2");
  ExpectRefused(bound, StatusCode::kFailedPrecondition,
                "raise the table's max_rows (or max_mb), or resume on more servers");
}

TEST_F(ReshardRefusalTest, AMissingPartOfTheOldShardsIsNamed) {
  // A generation one old shard lacks: not complete, nothing else to take.
  fs::rename(Gen(2), Gen(2) + ".aside");
  ExpectRefused(Job(2), StatusCode::kFailedPrecondition,
                "(newest clock 7 (of 3): shard-2 lacks it)");
  JobOptions asked = Job(2);
  asked.checkpoint.dir = root_;
  auto store = ShardStore::Create(asked, 0, false).value();
  OsFilesystem files;
  const Status not_found = ShardRestorePoint(files, asked, 0, kClock).status();
  EXPECT_EQ(not_found.code(), StatusCode::kNotFound) << not_found.ToString();
  EXPECT_NE(not_found.message().find("no complete generation of clock 7 (clock 7 (of 3): "
                                     "shard-2 lacks it)"),
            std::string::npos)
      << not_found.ToString();
  // A missing folder of the old set.
  fs::rename(Gen(2) + ".aside", Gen(2));
  fs::rename(ShardCheckpointDir(root_, 2), root_ + "/elsewhere");
  ExpectRefused(Job(2), StatusCode::kFailedPrecondition, "shard-2 is missing");
  fs::rename(root_ + "/elsewhere", ShardCheckpointDir(root_, 2));
  ASSERT_OK(Refused(Job(2)));
}

TEST_F(ReshardRefusalTest, ADamagedRecordOfAnOldShardIsNamed) {
  // Table 'ada' (100000 rows of dim 1, runs of 16384 rows): old shard 1
  // of 3 holds rows [33333, 66666) in runs from 33333, 49717 and 66101.
  // Shard 1 of 2 owns [50000, 100000): it reads the runs from 49717 on;
  // remove the last one.
  const auto open = [&](uint32_t shard) {
    rocksdb::Options o;
    o.compression = rocksdb::kNoCompression;
    o.disable_auto_compactions = true;
    rocksdb::DB* db = nullptr;
    EXPECT_TRUE(rocksdb::DB::Open(o, Gen(shard), &db).ok());
    return std::unique_ptr<rocksdb::DB>(db);
  };
  const auto close = [](std::unique_ptr<rocksdb::DB> db) {
    EXPECT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());
    EXPECT_TRUE(db->Close().ok());
  };
  ASSERT_EQ(ShardRows(100000, 3, 1).begin, 33333u);
  {
    auto db = open(1);
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), RowKey(2, 66101)).ok());
    close(std::move(db));
  }
  for (const GenerationReadOptions& read : {kOneThread, kManyThreads}) {
    ExpectRefused(Job(2), StatusCode::kDataLoss,
                  Gen(1) + ": the record of table 'ada' rows [66101, 66666) is missing", 1, read);
    // Shard 0 of 2 ([0, 50000)) reads only the first two runs: unaffected.
    EXPECT_OK(Refused(Job(2), 0, read));
    // Shard 1 of the 3 that wrote it reads its own generation whole.
    ExpectRefused(Job(3), StatusCode::kDataLoss,
                  Gen(1) + ": the record of table 'ada' rows [66101, 66666) is missing", 1, read);
  }

  // A hashed row under a slot its id does not hash to.
  {
    auto db = open(0);
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    it->Seek(SlotKey(4, 0));
    ASSERT_TRUE(it->Valid());
    uint32_t table = 0, slot = 0;
    uint64_t id = 0;
    ASSERT_TRUE(DecodeIdKey(it->key().ToStringView(), &table, &slot, &id));
    ASSERT_EQ(table, 4u);
    const std::string value = it->value().ToString();
    const std::string key = it->key().ToString();
    it.reset();
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), key).ok());
    const uint32_t other = slot == 0 ? 1 : 0;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), IdKey(4, other, id), value).ok());
    close(std::move(db));
    ExpectRefused(Job(2), StatusCode::kDataLoss,
                  Gen(0) + ": table 'emb2' has a record of id " + std::to_string(id) +
                      " under hash slot " + std::to_string(other) + ", but the id's slot is " +
                      std::to_string(slot),
                  0);
  }
}

TEST_F(ReshardRefusalTest, ACorruptBlockMetByAReadingThreadFailsTheRestoreAndTheServer) {
  // A damaged block near the end of the largest file of old shard 1 (the
  // run of 'ada' from row 49717, a block of its own): met by one of the
  // threads reading its runs, whether the shard restores its own
  // generation (a job of 3) or its rows of it (a job of 2).
  const fs::path largest = LargestSstFile(Gen(1));
  ASSERT_FALSE(largest.empty());
  FlipBytes(largest, 0.9);
  for (const GenerationReadOptions& read : {kOneThread, kManyThreads}) {
    ExpectRefused(Job(3), StatusCode::kDataLoss, Gen(1) + ": cannot read the records", 1, read);
    ExpectRefused(Job(2), StatusCode::kDataLoss, Gen(1) + ": cannot read the records", 1, read);
    // Shard 0 of 2 ([0, 50000)) reads the run from 49717 too.
    ExpectRefused(Job(2), StatusCode::kDataLoss, Gen(1) + ": cannot read the records", 0, read);
  }
  // A server restoring it does not start: no state of it is ever served.
  JobOptions job = Job(3);
  job.checkpoint.dir = root_;
  auto server = ShardServer::Create(job, 1, "tcp://127.0.0.1:*");
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kDataLoss) << server.status().ToString();
  EXPECT_NE(server.status().message().find(Gen(1)), std::string::npos)
      << server.status().ToString();
}

}  // namespace
}  // namespace ps
