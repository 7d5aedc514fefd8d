#include "server/checkpoint.h"
#include "common/hash_slots.h"
#include "server/checkpoint_format.h"
#include "store/shard_store.h"
#include "tests/util/damaged_files.h"
#include "tests/util/faulty_filesystem.h"
#include "tests/util/file_permissions.h"
#include "tests/util/older_checkpoint.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

namespace ps {
namespace {

namespace fs = std::filesystem;

// Random bit patterns (NaNs and infinities included): a round trip must
// keep every bit.
std::vector<float> RandomFloats(size_t n, std::mt19937* rng) {
  std::vector<float> out(n);
  for (float& f : out) {
    const uint32_t bits = (*rng)();
    std::memcpy(&f, &bits, sizeof f);
  }
  return out;
}

TableSnapshot Table(const std::string& name, uint64_t rows, uint32_t dim, RowRange owned,
                    size_t slots, std::mt19937* rng) {
  TableSnapshot t;
  t.name = name;
  t.rows = rows;
  t.dim = dim;
  t.owned = owned;
  t.optimizer = "adam lr=0.01 beta1=0.9\nslots=" + std::to_string(slots);
  t.values = RandomFloats(owned.size() * dim, rng);
  for (size_t k = 0; k < slots; ++k) t.slots.push_back(RandomFloats(owned.size() * dim, rng));
  return t;
}

ShardSnapshot Snapshot(int64_t clock, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  ShardSnapshot s;
  s.shard = 1;
  s.num_shards = 4;
  s.clock = clock;
  s.fingerprint = "model-fingerprint-0123456789abcdef";
  s.tables.push_back(Table("emb", 1000, 16, {250, 500}, 2, &rng));
  s.tables.push_back(Table("w", 10, 1, {3, 7}, 0, &rng));
  s.tables.push_back(Table("bias", 7, 4, {0, 7}, 1, &rng));
  // Records hold runs of 16384 floats of values (64 KiB): dim 1 splits
  // these 34000 rows into runs [1000, 17384), [17384, 33768) and a shorter
  // last one [33768, 35000); a row of more than 16384 floats is a run of
  // its own.
  s.tables.push_back(Table("long", 40000, 1, {1000, 35000}, 2, &rng));
  s.tables.push_back(Table("wide", 5, 16385, {1, 4}, 1, &rng));
  s.tables.push_back(Table("none_here", 2, 3, {2, 2}, 2, &rng));  // owns no rows
  return s;
}

// The key of the run record of `table` starting at `row`.
std::string RunKey(uint32_t table, uint64_t row) {
  std::string k(13, '\0');
  k[0] = 'r';
  for (int i = 0; i < 4; ++i) k[1 + i] = static_cast<char>(table >> (8 * (3 - i)));
  for (int i = 0; i < 8; ++i) k[5 + i] = static_cast<char>(row >> (8 * (7 - i)));
  return k;
}

// About 4.8 MB of rows: several write batches and data blocks.
ShardSnapshot BigSnapshot(int64_t clock) {
  std::mt19937 rng(7);
  ShardSnapshot s;
  s.shard = 0;
  s.num_shards = 1;
  s.clock = clock;
  s.tables.push_back(Table("big", 100000, 4, {0, 100000}, 2, &rng));
  // The smallest table record: empty name and optimizer text.
  s.tables.push_back(Table("", 3, 1, {0, 3}, 0, &rng));
  s.tables.back().optimizer.clear();
  return s;
}

void ExpectSameTable(const TableSnapshot& a, const TableSnapshot& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.owned, b.owned);
  EXPECT_EQ(a.optimizer, b.optimizer);
  ASSERT_EQ(a.values.size(), b.values.size()) << a.name;
  EXPECT_EQ(std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)), 0)
      << a.name;
  ASSERT_EQ(a.slots.size(), b.slots.size()) << a.name;
  for (size_t k = 0; k < a.slots.size(); ++k) {
    ASSERT_EQ(a.slots[k].size(), b.slots[k].size()) << a.name << " slot " << k;
    EXPECT_EQ(std::memcmp(a.slots[k].data(), b.slots[k].data(), a.slots[k].size() * sizeof(float)),
              0)
        << a.name << " slot " << k;
  }
}

void ExpectSame(const ShardSnapshot& a, const ShardSnapshot& b) {
  EXPECT_EQ(a.shard, b.shard);
  EXPECT_EQ(a.num_shards, b.num_shards);
  EXPECT_EQ(a.clock, b.clock);
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  ASSERT_EQ(a.tables.size(), b.tables.size());
  for (size_t i = 0; i < a.tables.size(); ++i) ExpectSameTable(a.tables[i], b.tables[i]);
}

std::set<std::string> Names(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

std::vector<fs::path> SstFiles(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".sst") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ps_checkpoint_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    auto opened = CheckpointDir::Open(ShardCheckpointDir(dir_.string(), 1));
    ASSERT_OK(opened);
    ckpt_ = std::move(*opened);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

  fs::path Gen(int64_t clock) const { return ckpt_->GenerationPath(clock); }

  std::vector<int64_t> Generations() const {
    auto g = ckpt_->Generations();
    EXPECT_OK(g);
    return g.ok() ? *g : std::vector<int64_t>{};
  }

  // Opens generation `clock` with RocksDB directly, to damage its records.
  std::unique_ptr<rocksdb::DB> OpenRaw(int64_t clock) const {
    rocksdb::Options o;
    o.compression = rocksdb::kNoCompression;
    o.disable_auto_compactions = true;
    rocksdb::DB* db = nullptr;
    const rocksdb::Status s = rocksdb::DB::Open(o, Gen(clock).string(), &db);
    EXPECT_OK(s);
    return std::unique_ptr<rocksdb::DB>(db);
  }
  static void CloseRaw(std::unique_ptr<rocksdb::DB> db) {
    ASSERT_OK(db->Flush(rocksdb::FlushOptions()));
    ASSERT_OK(db->Close());
  }

  // Expects Read(clock) to fail with `code`, naming the generation and
  // containing `text`.
  void ExpectReadFails(int64_t clock, StatusCode code, const std::string& text) const {
    auto r = ckpt_->Read(clock, read_);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(Gen(clock).string()), std::string::npos)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().ToString();
  }

  // Every change of a run record the reader must refuse, each named as
  // one pass in key order names it, whatever threads read (read_).
  void ExpectDamagedRunsAreDataLoss();

  fs::path dir_;
  std::unique_ptr<CheckpointDir> ckpt_;
  // How ExpectReadFails reads: by default the calling thread alone.
  GenerationReadOptions read_{.threads = 1};
};

// Reading on many threads: every run record its own key range where it
// holds enough bytes (min_range_bytes 1).
constexpr GenerationReadOptions kManyRanges{.threads = 64, .min_range_bytes = 1};

TEST_F(CheckpointTest, RoundTripIsBitIdentical) {
  const ShardSnapshot s = Snapshot(12);
  ASSERT_OK(ckpt_->Write(s, {}));
  EXPECT_EQ(Generations(), std::vector<int64_t>{12});
  const std::set<std::string> files = Names(Gen(12));
  // Beside the database, the file naming the shards that wrote it.
  EXPECT_EQ(files.count("shards-4"), 1u);
  auto r = ckpt_->Read(12);
  ASSERT_OK(r);
  ExpectSame(*r, s);
  // A read changes nothing in the generation (no log file, no lock).
  EXPECT_EQ(Names(Gen(12)), files);
  EXPECT_EQ(Names(ckpt_->path()), std::set<std::string>{"gen-12"});
}

// The shard's recent pushes go beside the database and come back as
// written; a generation without them reads as none; every damage to the
// file is DataLoss naming it.
TEST_F(CheckpointTest, RecentPushesRoundTripAndDamageIsNamed) {
  ShardSnapshot s = Snapshot(3);
  ASSERT_OK(ckpt_->Write(s, {}));
  auto none = ReadRecentPushes(Gen(3).string());
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(Names(Gen(3)).count(std::string(kRecentPushesFile)), 0u);

  s = Snapshot(4);
  s.recent_pushes = {2, 7, 1, 7, 2, 0};  // 2 workers: two ids, then none
  ASSERT_OK(ckpt_->Write(s, {}));
  auto read = ReadRecentPushes(Gen(4).string());
  ASSERT_OK(read);
  EXPECT_EQ(*read, s.recent_pushes);
  // The rows read as ever.
  auto rows = ckpt_->Read(4);
  ASSERT_OK(rows);
  ExpectSame(*rows, s);

  const fs::path file = Gen(4) / std::string(kRecentPushesFile);
  std::string good(fs::file_size(file), '\0');
  ASSERT_TRUE(std::ifstream(file, std::ios::binary).read(good.data(), good.size()));
  ASSERT_EQ(good.size(), 4u + 4 + 8 + 6 * 8 + 8);
  const auto expect_damaged = [&](const std::string& bytes, const std::string& why) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    auto damaged = ReadRecentPushes(Gen(4).string());
    ASSERT_FALSE(damaged.ok()) << why;
    EXPECT_EQ(damaged.status().code(), StatusCode::kDataLoss) << why;
    EXPECT_NE(damaged.status().message().find(file.string() + " is corrupt: " + why),
              std::string::npos)
        << damaged.status().ToString();
    EXPECT_NE(damaged.status().message().find("move it aside"), std::string::npos);
  };
  expect_damaged(good.substr(0, 10), "10 bytes, fewer than its header and hash");
  expect_damaged("XXXX" + good.substr(4), "it does not start with \"PSRP\"");
  std::string other = good;
  other[4] = 2;
  expect_damaged(other, "format 2, not 1");
  expect_damaged(good.substr(0, good.size() - 8 - 3) + good.substr(good.size() - 8),
                 "it says 6 numbers in 69 bytes");
  std::string flipped = good;
  flipped[30] ^= 1;
  expect_damaged(flipped, "its hash does not match its bytes");
}

// FTRL's z and n (two state arrays) go to disk and come back into a fresh
// shard store, which then continues exactly as the one that wrote them.
TEST_F(CheckpointTest, FtrlStateRoundTripsThroughAShardStore) {
  TableOptions table = TestTable("ctr", 50, 2);
  table.optimizer.kind = OptimizerKind::kFtrl;
  table.optimizer.alpha = 0.2f;
  table.optimizer.l1 = 0.05f;
  table.optimizer.l2 = 0.1f;
  const JobOptions job = TestJob().Servers(1, 7000).Table(table).Build();
  auto store = ShardStore::Create(job, 0).value();
  std::mt19937 rng(3);
  std::normal_distribution<float> grad(0.0f, 1.0f);
  std::vector<float> dense(100);
  for (float& g : dense) g = grad(rng);
  Request push;
  push.header.op = Op::kPush;
  push.header.count = 50;
  push.header.dim = 2;
  push.header.flags = kFlagDenseRange;
  push.values = dense;
  ASSERT_OK(store->ApplyPush(push, 0));
  Request sparse;
  sparse.header.op = Op::kPush;
  sparse.header.count = 3;
  sparse.header.dim = 2;
  const std::vector<uint64_t> rows = {4, 17, 40};
  const std::vector<float> g = {0.5f, -2.0f, 1.0f, 0.25f, -0.75f, 3.0f};
  sparse.keys = rows;
  sparse.values = g;
  ASSERT_OK(store->ApplyPush(sparse, 1));

  auto snapshot = store->Snapshot(job, 0, 2);
  ASSERT_OK(snapshot);
  ASSERT_EQ(snapshot->tables[0].slots.size(), 2u);
  EXPECT_NE(snapshot->tables[0].optimizer.find("ftrl"), std::string::npos);
  EXPECT_NE(snapshot->tables[0].optimizer.find("alpha=0.2"), std::string::npos);
  ASSERT_OK(ckpt_->Write(*snapshot, {}));
  auto read = ckpt_->Read(2);
  ASSERT_OK(read);
  auto restored = ShardStore::Create(job, 0).value();
  ASSERT_OK(CheckRestorable(*read, restored->Layout(job, 0, 2), "gen-2"));
  restored->Restore(*read);
  for (uint32_t k = 0; k < 2; ++k) EXPECT_EQ(restored->CopySlot(0, k), store->CopySlot(0, k));
  EXPECT_EQ(restored->CopyValues(0), store->CopyValues(0));
  // A store under another FTRL setting is refused: the optimizer differs.
  JobOptions other = job;
  other.tables[0].optimizer.beta = 2.0f;
  auto elsewhere = ShardStore::Create(other, 0).value();
  EXPECT_FALSE(CheckRestorable(*read, elsewhere->Layout(other, 0, 2), "gen-2").ok());
  // Both go on alike.
  ASSERT_OK(store->ApplyPush(sparse, 2));
  ASSERT_OK(restored->ApplyPush(sparse, 2));
  EXPECT_EQ(restored->Checksum(0), store->Checksum(0));
}

// Every record of a generation's database but its meta record, in key
// order.
std::vector<std::pair<std::string, std::string>> DataRecords(rocksdb::DB* db) {
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key().ToStringView() == kMetaKey) continue;
    out.emplace_back(it->key().ToString(), it->value().ToString());
  }
  EXPECT_OK(it->status());
  return out;
}

// A snapshot shared with the store's blocks (ShardStore::SharedSnapshot)
// is written as the same records, byte for byte, as a copy of the same
// state: a range table whose run records span two blocks (dim 3: 87381
// rows a block, 5461 a run), one without optimizer state, and a hashed
// table, which the shared snapshot copies.
TEST_F(CheckpointTest, ASnapshotSharingTheStoresBlocksIsWrittenAsTheSameRecordsAsACopy) {
  TableOptions hashed = TestTable("h", 0, 4, OptimizerKind::kAdagrad);
  hashed.keys = KeyKind::kHashed;
  hashed.max_rows = 100;
  TableOptions emb = TestTable("emb", 2 * 87381 + 100, 3, OptimizerKind::kAdam);
  emb.init.kind = InitKind::kNormal;
  emb.init.value = 1.0f;
  const JobOptions job =
      TestJob().Servers(2, 7000).Table(emb).Table("bias", 30001, 1).Table(hashed).Build();
  auto store = ShardStore::Create(job, 1).value();
  const TableLayout& e = store->layouts()[0];
  std::vector<float> grads(e.owned.size() * 3);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * static_cast<float>(i % 977);
  Request push;
  push.header.op = Op::kPush;
  push.header.first_row = e.owned.begin;
  push.header.count = e.owned.size();
  push.header.dim = 3;
  push.header.flags = kFlagDenseRange;
  push.values = grads;
  ASSERT_OK(store->ApplyPush(push, 0));
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; ids.size() < 20; ++id) {
    const TableLayout& h = store->layouts()[2];
    if (h.owned.Contains(IdSlot(id, h.hash_seed, h.slots))) ids.push_back(id);
  }
  Request sparse;
  sparse.header.op = Op::kPush;
  sparse.header.table = 2;
  sparse.header.count = ids.size();
  sparse.header.dim = 4;
  sparse.keys = ids;
  sparse.values = std::span<const float>(grads.data(), ids.size() * 4);
  ASSERT_OK(store->ApplyPush(sparse, 0));

  const ShardSnapshot copied = store->Snapshot(job, 1, 1).value();
  ShardSnapshot shared = store->SharedSnapshot(job, 1, 2).value();
  ASSERT_GT(shared.tables[0].shared.size(), 1u);
  ASSERT_OK(ckpt_->Write(copied, {}));
  ASSERT_OK(ckpt_->Write(std::move(shared), {}));

  auto read = ckpt_->Read(2);
  ASSERT_OK(read);
  ASSERT_EQ(read->tables.size(), copied.tables.size());
  for (size_t i = 0; i < copied.tables.size(); ++i) {
    ExpectSameTable(read->tables[i], copied.tables[i]);
  }
  std::unique_ptr<rocksdb::DB> one = OpenRaw(1);
  std::unique_ptr<rocksdb::DB> two = OpenRaw(2);
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  const auto records = DataRecords(one.get());
  EXPECT_GT(records.size(), 32u);
  EXPECT_TRUE(records == DataRecords(two.get())) << "the records differ";
}

// A hashed table's generation of format 4 (its 'h' keys without the hash
// slot, rows by id; no settings): still read whole, its rows by id.
TEST_F(CheckpointTest, AHashedGenerationOfFormat4IsStillRead) {
  std::mt19937 rng(5);
  ShardSnapshot s = Snapshot(3);
  TableSnapshot h;
  h.name = "emb_h";
  h.dim = 3;
  h.hashed = true;
  h.hash_slots = 64;
  h.owned = ShardSlots(64, 4, 1);
  h.optimizer = "adagrad lr=0.1";
  h.row_uses = true;
  const uint64_t seed = NameHash(h.name);
  for (uint64_t id = 1; h.ids.size() < 40; ++id) {
    if (h.owned.Contains(IdSlot(id, seed, 64))) h.ids.push_back(id);
  }
  // In the key order of this format: by slot, then id.
  std::sort(h.ids.begin(), h.ids.end(), [&](uint64_t a, uint64_t b) {
    const uint32_t sa = IdSlot(a, seed, 64), sb = IdSlot(b, seed, 64);
    return sa != sb ? sa < sb : a < b;
  });
  h.stored_rows = h.ids.size();
  h.values = RandomFloats(h.ids.size() * 3, &rng);
  h.slots.push_back(RandomFloats(h.ids.size() * 3, &rng));
  for (size_t i = 0; i < h.ids.size(); ++i) h.uses.push_back({i + 1, 2, 1});
  s.tables.push_back(h);
  ASSERT_OK(ckpt_->Write(s, {}));
  // Rewrite it as format 4 wrote it.
  auto db = OpenRaw(3);
  const uint32_t ti = static_cast<uint32_t>(s.tables.size() - 1);
  for (const uint64_t id : h.ids) {
    const std::string key = IdKey(ti, IdSlot(id, seed, 64), id);
    std::string value;
    ASSERT_OK(db->Get(rocksdb::ReadOptions(), key, &value));
    ASSERT_OK(db->Delete(rocksdb::WriteOptions(), key));
    ASSERT_OK(db->Put(rocksdb::WriteOptions(), IdKeyV4(ti, id), value));
  }
  ASSERT_OK(db->Put(rocksdb::WriteOptions(), "meta", OlderMeta(s, 4)));
  CloseRaw(std::move(db));
  auto r = ckpt_->Read(3);
  ASSERT_OK(r);
  // The rows come by id now.
  std::vector<size_t> by_id(h.ids.size());
  for (size_t i = 0; i < by_id.size(); ++i) by_id[i] = i;
  std::sort(by_id.begin(), by_id.end(), [&](size_t a, size_t b) { return h.ids[a] < h.ids[b]; });
  const TableSnapshot& got = r->tables.back();
  ASSERT_EQ(got.ids.size(), h.ids.size());
  for (size_t i = 0; i < by_id.size(); ++i) {
    const size_t j = by_id[i];
    EXPECT_EQ(got.ids[i], h.ids[j]);
    EXPECT_EQ(std::memcmp(got.values.data() + 3 * i, h.values.data() + 3 * j, 12), 0);
    EXPECT_EQ(std::memcmp(got.slots[0].data() + 3 * i, h.slots[0].data() + 3 * j, 12), 0);
    EXPECT_EQ(got.uses[i].seq, h.uses[j].seq);
  }
  for (size_t t = 0; t + 1 < s.tables.size(); ++t) ExpectSameTable(r->tables[t], s.tables[t]);
}

// ReadInto hands over the layout first (slot counts, no values), then every
// owned row exactly once; an error from Begin stops the read before any row.
TEST_F(CheckpointTest, ReadIntoGivesTheLayoutThenEveryRowOnce) {
  const ShardSnapshot s = Snapshot(5);
  ASSERT_OK(ckpt_->Write(s, {}));
  class Recorder : public RowSink {
   public:
    Status Begin(const ShardSnapshot& layout) override {
      ++begins;
      for (const TableSnapshot& t : layout.tables) {
        EXPECT_TRUE(t.values.empty());
        for (const auto& slot : t.slots) EXPECT_TRUE(slot.empty());
      }
      got = layout;
      for (TableSnapshot& t : got.tables) {
        t.values.assign(t.owned.size() * t.dim, 0.0f);
        for (auto& slot : t.slots) slot.assign(t.owned.size() * t.dim, 0.0f);
        seen.emplace_back(t.owned.size(), 0);
      }
      return refuse;
    }
    void Rows(uint32_t table, uint64_t first, uint64_t count, const std::byte* values,
              std::span<const std::byte* const> slots, const std::byte*) override {
      TableSnapshot& t = got.tables[table];
      ASSERT_EQ(slots.size(), t.slots.size());
      const size_t at = (first - t.owned.begin) * t.dim, bytes = count * t.dim * sizeof(float);
      std::memcpy(t.values.data() + at, values, bytes);
      for (size_t k = 0; k < slots.size(); ++k) std::memcpy(t.slots[k].data() + at, slots[k], bytes);
      for (uint64_t r = 0; r < count; ++r) ++seen[table][first - t.owned.begin + r];
    }
    void Sketch(uint32_t, std::span<const std::byte>) override {
      ADD_FAILURE() << "a sketch from a generation of range tables";
    }
    Status refuse;
    int begins = 0;
    ShardSnapshot got;
    std::vector<std::vector<int>> seen;
  };
  Recorder recorder;
  ASSERT_OK(ckpt_->ReadInto(5, &recorder));
  EXPECT_EQ(recorder.begins, 1);
  ExpectSame(recorder.got, s);
  for (const auto& rows : recorder.seen) {
    for (int n : rows) ASSERT_EQ(n, 1);
  }
  Recorder refusing;
  refusing.refuse = FailedPreconditionError("not this model");
  const Status refused = ckpt_->ReadInto(5, &refusing);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  for (const auto& rows : refusing.seen) {
    for (int n : rows) ASSERT_EQ(n, 0);
  }
}

TEST_F(CheckpointTest, RoundTripOfSeveralBatchesWithoutSync) {
  const ShardSnapshot s = BigSnapshot(0);
  ASSERT_OK(ckpt_->Write(s, {.sync = false, .keep = 1}));
  auto r = ckpt_->Read(0);
  ASSERT_OK(r);
  ExpectSame(*r, s);
}

TEST_F(CheckpointTest, KeepsTheNewestGenerations) {
  for (int64_t clock : {10, 20, 30}) {
    ASSERT_OK(ckpt_->Write(Snapshot(clock, static_cast<uint32_t>(clock)), {.keep = 2}));
  }
  EXPECT_EQ(Generations(), (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(Names(ckpt_->path()), (std::set<std::string>{"gen-20", "gen-30"}));
  EXPECT_EQ(ckpt_->Read(10).status().code(), StatusCode::kNotFound);
  auto r = ckpt_->Read(20);
  ASSERT_OK(r);
  ExpectSame(*r, Snapshot(20, 20));
  // An older clock written later is pruned at once as the oldest.
  ASSERT_OK(ckpt_->Write(Snapshot(5), {.keep = 2}));
  EXPECT_EQ(Generations(), (std::vector<int64_t>{20, 30}));
}

TEST_F(CheckpointTest, ListsOnlyCompleteGenerationFolders) {
  ASSERT_OK(ckpt_->Write(Snapshot(3), {}));
  const fs::path dir = ckpt_->path();
  fs::create_directories(dir / "gen-9.tmp");
  std::ofstream(dir / "gen-9.tmp" / "CURRENT") << "junk";
  for (const char* name : {"gen-abc", "gen-007", "gen--1", "gen-", "gen-4x", "other"}) {
    fs::create_directories(dir / name);
  }
  std::ofstream(dir / "gen-8") << "a file, not a folder";
  std::ofstream(dir / "notes.txt") << "kept";
  EXPECT_EQ(Generations(), std::vector<int64_t>{3});
  EXPECT_EQ(ckpt_->Read(9).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ckpt_->Read(8).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ckpt_->Read(-1).status().code(), StatusCode::kNotFound);

  ASSERT_OK(ckpt_->Write(Snapshot(4), {}));
  EXPECT_FALSE(fs::exists(dir / "gen-9.tmp"));
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  EXPECT_TRUE(fs::exists(dir / "gen-abc"));
  EXPECT_EQ(Generations(), (std::vector<int64_t>{3, 4}));
}

TEST_F(CheckpointTest, RewritingTheSameClockReplacesIt) {
  ASSERT_OK(ckpt_->Write(Snapshot(7, 1), {}));
  ASSERT_OK(ckpt_->Write(Snapshot(7, 2), {}));
  EXPECT_EQ(Generations(), std::vector<int64_t>{7});
  EXPECT_EQ(Names(ckpt_->path()), std::set<std::string>{"gen-7"});
  auto r = ckpt_->Read(7);
  ASSERT_OK(r);
  ExpectSame(*r, Snapshot(7, 2));
}

TEST_F(CheckpointTest, TornWriteIsNeverListedAndIsRemoved) {
  ASSERT_OK(ckpt_->Write(Snapshot(10), {}));
  // A crash while writing generation 20: a copy of a database, cut short.
  const fs::path torn = fs::path(ckpt_->path()) / "gen-20.tmp";
  fs::copy(Gen(10), torn);
  const std::vector<fs::path> ssts = SstFiles(torn);
  ASSERT_FALSE(ssts.empty());
  fs::resize_file(ssts[0], fs::file_size(ssts[0]) / 2);

  EXPECT_EQ(Generations(), std::vector<int64_t>{10});
  EXPECT_EQ(ckpt_->Read(20).status().code(), StatusCode::kNotFound);
  auto r = ckpt_->Read(10);
  ASSERT_OK(r);
  ExpectSame(*r, Snapshot(10));

  ASSERT_OK(ckpt_->Write(Snapshot(30), {}));
  EXPECT_FALSE(fs::exists(torn));
  EXPECT_EQ(Generations(), (std::vector<int64_t>{10, 30}));
}

TEST_F(CheckpointTest, FlippedBytesInAnSstFileAreDataLoss) {
  // In the block that holds the meta record.
  ASSERT_OK(ckpt_->Write(Snapshot(1), {}));
  std::vector<fs::path> ssts = SstFiles(Gen(1));
  ASSERT_FALSE(ssts.empty());
  FlipBytes(ssts[0], 0.3);
  ExpectReadFails(1, StatusCode::kDataLoss, "checksum mismatch");

  // In a block of rows in the middle of a large file.
  ASSERT_OK(ckpt_->Write(BigSnapshot(2), {}));
  const fs::path largest = LargestSstFile(Gen(2));
  ASSERT_FALSE(largest.empty());
  FlipBytes(largest, 0.5);
  ExpectReadFails(2, StatusCode::kDataLoss, "cannot read the records");
}

TEST_F(CheckpointTest, TruncatedSstFileIsDataLoss) {
  ASSERT_OK(ckpt_->Write(Snapshot(1), {}));
  const std::vector<fs::path> ssts = SstFiles(Gen(1));
  ASSERT_FALSE(ssts.empty());
  fs::resize_file(ssts[0], fs::file_size(ssts[0]) - 100);
  ExpectReadFails(1, StatusCode::kDataLoss, "");
  fs::resize_file(ssts[0], 0);
  ExpectReadFails(1, StatusCode::kDataLoss, "");
}

TEST_F(CheckpointTest, MissingDatabaseFilesAreDataLoss) {
  ASSERT_OK(ckpt_->Write(Snapshot(1), {}));
  ASSERT_OK(ckpt_->Write(Snapshot(2), {}));
  fs::remove(Gen(1) / "CURRENT");
  ExpectReadFails(1, StatusCode::kDataLoss, "");
  for (const fs::path& sst : SstFiles(Gen(2))) fs::remove(sst);
  ExpectReadFails(2, StatusCode::kDataLoss, "");
}

TEST_F(CheckpointTest, MissingOrBadMetaRecordIsDataLoss) {
  ASSERT_OK(ckpt_->Write(Snapshot(1), {}));
  auto db = OpenRaw(1);
  ASSERT_OK(db->Delete(rocksdb::WriteOptions(), "meta"));
  CloseRaw(std::move(db));
  ExpectReadFails(1, StatusCode::kDataLoss, "the meta record is missing");

  for (const std::string& junk : {std::string("PSCK"), std::string("junk"), std::string()}) {
    db = OpenRaw(1);
    ASSERT_OK(db->Put(rocksdb::WriteOptions(), "meta", junk));
    CloseRaw(std::move(db));
    ExpectReadFails(1, StatusCode::kDataLoss, "the meta record is corrupt");
  }
}

TEST_F(CheckpointTest, MetaRecordOfAnotherFormatVersionIsRefused) {
  ASSERT_OK(ckpt_->Write(Snapshot(1), {}));
  auto db = OpenRaw(1);
  std::string meta;
  ASSERT_OK(db->Get(rocksdb::ReadOptions(), "meta", &meta));
  CloseRaw(std::move(db));
  // The format version follows the 4-byte magic: 1 (one record per row,
  // never released) and a later one are refused.
  for (int version : {1, 7}) {
    meta[4] = static_cast<char>(version);
    db = OpenRaw(1);
    ASSERT_OK(db->Put(rocksdb::WriteOptions(), "meta", meta));
    CloseRaw(std::move(db));
    ExpectReadFails(1, StatusCode::kFailedPrecondition,
                    "format version " + std::to_string(version) +
                        ", but this build reads only versions 2 to 6 (the record format "
                        "changed)");
  }
}

TEST_F(CheckpointTest, RecordsAreRunsOf64KiBOfValues) {
  const ShardSnapshot s = Snapshot(1);
  ASSERT_OK(ckpt_->Write(s, {}));
  // Every record but the meta one, in key order: its key and value size.
  std::vector<std::pair<std::string, size_t>> records;
  auto db = OpenRaw(1);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key() != rocksdb::Slice("meta")) records.emplace_back(it->key().ToString(), it->value().size());
  }
  ASSERT_OK(it->status());
  it.reset();
  std::string emb;
  ASSERT_OK(db->Get(rocksdb::ReadOptions(), RunKey(0, 250), &emb));
  CloseRaw(std::move(db));
  // Bytes of a run of `rows` rows of `dim` with `slots` optimizer slots.
  const auto bytes = [](size_t rows, size_t dim, size_t slots) {
    return rows * dim * sizeof(float) * (1 + slots);
  };
  const std::vector<std::pair<std::string, size_t>> want = {
      {RunKey(0, 250), bytes(250, 16, 2)},    // emb: 250 rows of 16 < 16384 floats
      {RunKey(1, 3), bytes(4, 1, 0)},         // w
      {RunKey(2, 0), bytes(7, 4, 1)},         // bias
      {RunKey(3, 1000), bytes(16384, 1, 2)},  // long: 16384 rows of dim 1 = 64 KiB of values
      {RunKey(3, 17384), bytes(16384, 1, 2)},
      {RunKey(3, 33768), bytes(1232, 1, 2)},  // the rest
      {RunKey(4, 1), bytes(1, 16385, 1)},     // wide: one row per run
      {RunKey(4, 2), bytes(1, 16385, 1)},
      {RunKey(4, 3), bytes(1, 16385, 1)},
  };  // none_here owns no rows: no record
  EXPECT_EQ(records, want);
  // A run's value: its rows' values, then each slot's, little-endian float32.
  ASSERT_EQ(emb.size(), bytes(250, 16, 2));
  const size_t part = 250 * 16 * sizeof(float);
  EXPECT_EQ(std::memcmp(emb.data(), s.tables[0].values.data(), part), 0);
  EXPECT_EQ(std::memcmp(emb.data() + part, s.tables[0].slots[0].data(), part), 0);
  EXPECT_EQ(std::memcmp(emb.data() + 2 * part, s.tables[0].slots[1].data(), part), 0);
}

TEST_F(CheckpointTest, MissingExtraOverlappingOrWrongSizedRunsAreDataLoss) {
  ExpectDamagedRunsAreDataLoss();
}

TEST_F(CheckpointTest, DamagedRunsMetByAnyOfTheReadingThreadsAreNamedAsByOne) {
  // The ranges start at w, long's second and third runs and each of
  // wide's: a damaged record at either side of each start.
  const ShardSnapshot layout = DecodeMeta(EncodeMeta(Snapshot(1)), "").value();
  std::vector<std::pair<uint32_t, uint64_t>> starts;
  for (const RunStart& r : SplitRuns(layout, kManyRanges.threads, 1)) {
    starts.emplace_back(r.table, r.row);
  }
  EXPECT_EQ(starts, (std::vector<std::pair<uint32_t, uint64_t>>{
                        {1, 3}, {3, 17384}, {3, 33768}, {4, 1}, {4, 2}, {4, 3}}));
  read_ = kManyRanges;
  ExpectDamagedRunsAreDataLoss();
}

void CheckpointTest::ExpectDamagedRunsAreDataLoss() {
  const ShardSnapshot s = Snapshot(1);
  ASSERT_OK(ckpt_->Write(s, {}));
  std::unique_ptr<rocksdb::DB> db;
  // Deletes the record at `key` (keeping its value in *saved), or puts it back.
  const auto remove = [&](const std::string& key, std::string* saved) {
    db = OpenRaw(1);
    ASSERT_OK(db->Get(rocksdb::ReadOptions(), key, saved));
    ASSERT_OK(db->Delete(rocksdb::WriteOptions(), key));
    CloseRaw(std::move(db));
  };
  const auto put = [&](const std::string& key, const std::string& value) {
    db = OpenRaw(1);
    ASSERT_OK(db->Put(rocksdb::WriteOptions(), key, value));
    CloseRaw(std::move(db));
  };

  // A missing run: the only one of "emb" (table 0), the middle one of
  // "long", the first one of "wide".
  struct Missing {
    std::string key, text;
  };
  for (const Missing& m :
       {Missing{RunKey(0, 250), "the record of table 'emb' rows [250, 500) is missing"},
        Missing{RunKey(3, 17384), "the record of table 'long' rows [17384, 33768) is missing"},
        Missing{RunKey(3, 1000), "the record of table 'long' rows [1000, 17384) is missing"},
        Missing{RunKey(4, 1), "the record of table 'wide' rows [1, 2) is missing"},
        // The last run of the last table with rows.
        Missing{RunKey(4, 3), "the record of table 'wide' rows [3, 4) is missing"}}) {
    std::string saved;
    remove(m.key, &saved);
    ExpectReadFails(1, StatusCode::kDataLoss, m.text);
    put(m.key, saved);
  }
  ASSERT_OK(ckpt_->Read(1, read_));

  // A record outside the owned rows, overlapping a run, of a table the meta
  // record does not list, with a key of another shape.
  struct Extra {
    std::string key, text;
  };
  for (const Extra& extra :
       {Extra{RunKey(1, 8), "table 'w' has a record of rows from 8, outside its rows [3, 7)"},
        Extra{RunKey(1, 2), "table 'w' has a record of rows from 2, outside its rows [3, 7)"},
        Extra{RunKey(5, 0), "table 'none_here' has a record of rows from 0, outside its rows "
                            "[2, 2)"},
        Extra{RunKey(0, 300), "table 'emb' has a record of rows from 300, inside the record of "
                              "rows [250, 500) before it"},
        Extra{RunKey(3, 17385), "table 'long' has a record of rows from 17385, inside the record "
                                "of rows [17384, 33768) before it"},
        Extra{RunKey(3, 34999), "table 'long' has a record of rows from 34999, inside the record "
                                "of rows [33768, 35000) before it"},
        Extra{RunKey(9, 0), "table index 9"}, Extra{"zzz", "unexpected record"}}) {
    put(extra.key, "v");
    ExpectReadFails(1, StatusCode::kDataLoss, extra.text);
    db = OpenRaw(1);
    ASSERT_OK(db->Delete(rocksdb::WriteOptions(), extra.key));
    CloseRaw(std::move(db));
  }
  // After the loop every record is back.
  ASSERT_OK(ckpt_->Read(1, read_));

  // A run one float short or long: a whole run, the shorter last run of a
  // table, a one-row run.
  struct Size {
    std::string key;
    int delta;
    std::string text;
  };
  for (const Size& c :
       {Size{RunKey(2, 0), -4, "the record of table 'bias' rows [0, 7) has 220 bytes, not 224"},
        Size{RunKey(3, 1000), 4,
             "the record of table 'long' rows [1000, 17384) has 196612 bytes, not 196608"},
        Size{RunKey(3, 33768), -4,
             "the record of table 'long' rows [33768, 35000) has 14780 bytes, not 14784"},
        Size{RunKey(3, 33768), 4,
             "the record of table 'long' rows [33768, 35000) has 14788 bytes, not 14784"},
        Size{RunKey(4, 2), -4, "the record of table 'wide' rows [2, 3) has 131076 bytes, not "
                               "131080"}}) {
    std::string saved;
    remove(c.key, &saved);
    std::string changed = saved;
    changed.resize(saved.size() + c.delta, 'x');
    put(c.key, changed);
    ExpectReadFails(1, StatusCode::kDataLoss, c.text);
    put(c.key, saved);
  }
  auto r = ckpt_->Read(1, read_);
  ASSERT_OK(r);
  ExpectSame(*r, s);
}

TEST_F(CheckpointTest, ReadOnSeveralThreadsGivesWhatOneThreadGives) {
  ASSERT_OK(ckpt_->Write(Snapshot(1), {}));
  ASSERT_OK(ckpt_->Write(BigSnapshot(2), {}));
  for (const GenerationReadOptions& options :
       {GenerationReadOptions{.threads = 1}, GenerationReadOptions{.threads = 2, .min_range_bytes = 1},
        GenerationReadOptions{.threads = 3, .min_range_bytes = 1}, kManyRanges,
        GenerationReadOptions{}}) {
    SCOPED_TRACE("threads " + std::to_string(options.threads) + ", ranges of " +
                 std::to_string(options.min_range_bytes) + " bytes or more");
    auto small = ckpt_->Read(1, options);
    ASSERT_OK(small);
    ExpectSame(*small, Snapshot(1));
    auto big = ckpt_->Read(2, options);
    ASSERT_OK(big);
    ExpectSame(*big, BigSnapshot(2));
  }
}

TEST_F(CheckpointTest, ACorruptBlockMetByOneOfTheReadingThreadsIsDataLoss) {
  // 4.8 MB of rows in 8 ranges; the blocks of the middle of the largest
  // file, then of its end, damaged: one thread meets them, the others stop.
  ASSERT_OK(ckpt_->Write(BigSnapshot(2), {}));
  read_ = {.threads = 8, .min_range_bytes = 1};
  ASSERT_OK(ckpt_->Read(2, read_));
  const fs::path largest = LargestSstFile(Gen(2));
  ASSERT_FALSE(largest.empty());
  FlipBytes(largest, 0.5);
  ExpectReadFails(2, StatusCode::kDataLoss, "cannot read the records");
  FlipBytes(largest, 0.5);  // inverted back
  ASSERT_OK(ckpt_->Read(2, read_));
  FlipBytes(largest, 0.1);
  ExpectReadFails(2, StatusCode::kDataLoss, "cannot read the records");
}

TEST_F(CheckpointTest, InvalidSnapshotsAreRefusedAndChangeNothing) {
  ShardSnapshot s = Snapshot(1);
  s.tables[0].values.pop_back();
  Status w = ckpt_->Write(s, {});
  EXPECT_EQ(w.code(), StatusCode::kInvalidArgument) << w.ToString();
  s = Snapshot(1);
  s.tables[1].slots.push_back({1.0f});
  EXPECT_EQ(ckpt_->Write(s, {}).code(), StatusCode::kInvalidArgument);
  s = Snapshot(1);
  s.tables[1].owned = {5, 11};
  EXPECT_EQ(ckpt_->Write(s, {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ckpt_->Write(Snapshot(-1), {}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ckpt_->Write(Snapshot(1), {.keep = 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Names(ckpt_->path()).empty());
}

// The names are part of the on-disk layout that launchers and people rely on.
TEST(CheckpointDirTest, NamesShardAndGenerationFolders) {
  EXPECT_EQ(ShardCheckpointDir("/ckpt", 0), "/ckpt/shard-0");
  EXPECT_EQ(ShardCheckpointDir("run/ckpt", 12), "run/ckpt/shard-12");
  const fs::path dir = fs::temp_directory_path() /
                       ("ps_checkpoint_names_" + std::to_string(::getpid()));
  auto opened = CheckpointDir::Open(ShardCheckpointDir(dir.string(), 3));
  ASSERT_OK(opened);
  EXPECT_EQ((*opened)->path(), dir.string() + "/shard-3");
  EXPECT_EQ((*opened)->GenerationPath(40), dir.string() + "/shard-3/gen-40");
  fs::remove_all(dir);
}

TEST(CheckpointDirTest, OpenRefusesARegularFile) {
  const fs::path file =
      fs::temp_directory_path() / ("ps_checkpoint_file_" + std::to_string(::getpid()));
  std::ofstream(file) << "not a folder";
  auto opened = CheckpointDir::Open(file.string());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(opened.status().message().find(file.string()), std::string::npos)
      << opened.status().ToString();
  // A folder below a file cannot be created either.
  auto below = CheckpointDir::Open((file / "shard-0").string());
  ASSERT_FALSE(below.ok());
  EXPECT_EQ(below.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(below.status().message().find(file.string()), std::string::npos);
  fs::remove(file);
}

TEST_F(CheckpointTest, OpenCreatesParentsAndReopens) {
  const fs::path deep = dir_ / "a" / "b" / "shard-0";
  auto opened = CheckpointDir::Open(deep.string());
  ASSERT_OK(opened);
  EXPECT_TRUE(fs::is_directory(deep));
  ASSERT_OK((*opened)->Write(Snapshot(2), {}));
  auto again = CheckpointDir::Open(deep.string());
  ASSERT_OK(again);
  auto g = (*again)->Generations();
  ASSERT_OK(g);
  EXPECT_EQ(*g, std::vector<int64_t>{2});
}

TEST_F(CheckpointTest, FolderRemovedAfterOpenIsAnError) {
  fs::remove_all(ckpt_->path());
  auto g = ckpt_->Generations();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find(ckpt_->path()), std::string::npos);
  const Status w = ckpt_->Write(Snapshot(1), {});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find(ckpt_->path()), std::string::npos) << w.ToString();
  EXPECT_EQ(ckpt_->Read(1).status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointTest, UnwritableFoldersAreErrorsNamingThem) {
  // Root too: permissions bind this thread while `permissions` lives.
  const ScopedFilePermissions permissions;
  ASSERT_EQ(permissions.error(), "");
  const fs::path locked = dir_ / "locked";
  fs::create_directories(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  auto opened = CheckpointDir::Open((locked / "shard-0").string());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(opened.status().message().find((locked / "shard-0").string()), std::string::npos);

  // A folder that can be read but not written: Write fails naming it, and
  // the generation already there still reads.
  ASSERT_OK(ckpt_->Write(Snapshot(1), {}));
  fs::permissions(ckpt_->path(), fs::perms::owner_read | fs::perms::owner_exec);
  const Status w = ckpt_->Write(Snapshot(2), {});
  EXPECT_FALSE(w.ok());
  EXPECT_NE(w.message().find(ckpt_->path()), std::string::npos) << w.ToString();
  EXPECT_EQ(Generations(), std::vector<int64_t>{1});
  EXPECT_OK(ckpt_->Read(1));
  fs::permissions(ckpt_->path(), fs::perms::owner_all);
}

// Every write call of a generation (RocksDB's files, the syncs, the
// publishing rename, the pruning) fails in turn: once with ENOSPC, EIO or a
// short write, and for good (a disk that stays full). A Write that reports
// success left a generation that reads back exactly; one that fails says
// what failed and where, and the previous generation reads back exactly
// (the new one, where its publishing rename was done before the failure,
// too); once the fault clears, the next Write succeeds.
TEST_F(CheckpointTest, AFaultAtAnyWriteCallLosesNothingAcknowledged) {
  OsFilesystem os;
  FaultyFilesystem faulty(&os);
  const ShardSnapshot previous = Snapshot(10, 1);
  const ShardSnapshot next = Snapshot(20, 2);
  CheckpointWriteOptions options;
  options.keep = 1;  // a Write that succeeds removes the previous generation
  // On tmpfs, where there is one, fsyncs cost nothing: the loops below make
  // hundreds of Writes.
  const fs::path root = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") / dir_.filename() : dir_;
  struct RemoveRoot {
    fs::path path;
    ~RemoveRoot() { fs::remove_all(path); }
  } remove_root{root};

  // The write calls of one generation: the loops below make one Write each.
  uint64_t calls = 0;
  uint64_t appends = 0;
  {
    auto counting = CheckpointDir::Open((root / "count").string(), &faulty);
    ASSERT_OK(counting);
    ASSERT_OK((*counting)->Write(previous, options));
    const uint64_t calls_before = faulty.write_calls();
    const uint64_t appends_before = faulty.appends();
    ASSERT_OK((*counting)->Write(next, options));
    calls = faulty.write_calls() - calls_before;
    appends = faulty.appends() - appends_before;
  }
  ASSERT_GT(appends, 5u);
  RecordProperty("write_calls", std::to_string(calls));
  ASSERT_LT(calls, 300u) << "a generation makes more write calls than this test should loop over";

  using Fault = FaultyFilesystem::Fault;
  struct Case {
    Fault fault;
    bool sticky;
    uint64_t calls;  // the write calls it applies to
    StatusCode code;
  };
  const Case cases[] = {
      {Fault::kNoSpace, false, calls, StatusCode::kResourceExhausted},
      {Fault::kIoError, false, calls, StatusCode::kInternal},
      {Fault::kShortWrite, false, appends, StatusCode::kResourceExhausted},
      {Fault::kNoSpace, true, calls, StatusCode::kResourceExhausted},
  };
  uint64_t failed_writes = 0;
  for (const Case& c : cases) {
    for (uint64_t n = 1; n <= c.calls; ++n) {
      SCOPED_TRACE("fault " + std::to_string(static_cast<int>(c.fault)) +
                   (c.sticky ? " (sticky)" : "") + " at write call " + std::to_string(n));
      const fs::path dir = root / "faulty";
      fs::remove_all(dir);
      auto opened = CheckpointDir::Open(dir.string(), &faulty);
      ASSERT_OK(opened);
      CheckpointDir& ckpt = **opened;
      ASSERT_OK(ckpt.Write(previous, options));

      faulty.FailNth(n, c.fault, c.sticky);
      const Status written = ckpt.Write(next, options);
      EXPECT_TRUE(faulty.fired());
      faulty.Clear();

      if (written.ok()) {
        // The fault hit a step whose failure is only logged (removing an
        // older generation, RocksDB's own cleanup).
        auto read = ckpt.Read(20);
        ASSERT_OK(read);
        ExpectSame(*read, next);
        continue;
      }
      ++failed_writes;
      EXPECT_EQ(written.code(), c.code) << written.ToString();
      EXPECT_NE(written.message().find(dir.string()), std::string::npos) << written.ToString();
      EXPECT_NE(written.message().find("injected"), std::string::npos) << written.ToString();
      const std::vector<int64_t> generations = ckpt.Generations().value();
      ASSERT_FALSE(generations.empty());
      EXPECT_EQ(generations.front(), 10);
      auto kept = ckpt.Read(10);
      ASSERT_OK(kept);
      ExpectSame(*kept, previous);
      if (generations.back() == 20) {
        auto published = ckpt.Read(20);
        ASSERT_OK(published);
        ExpectSame(*published, next);
      }

      ASSERT_OK(ckpt.Write(next, options));
      auto read = ckpt.Read(20);
      ASSERT_OK(read);
      ExpectSame(*read, next);
      EXPECT_EQ(ckpt.Generations().value(), std::vector<int64_t>{20});
    }
  }
  // Most write calls are the generation's own: their failure fails the Write.
  EXPECT_GT(failed_writes, calls);
}

}  // namespace
}  // namespace ps
