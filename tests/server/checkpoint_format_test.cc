// The record format of a checkpoint generation, without a database.
#include "server/checkpoint_format.h"
#include "common/hash_slots.h"
#include "tests/util/older_checkpoint.h"
#include "tests/util/status_matchers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ps {
namespace {

TableSnapshot Table(const std::string& name, uint64_t rows, uint32_t dim, RowRange owned,
                    size_t slots) {
  TableSnapshot t;
  t.name = name;
  t.rows = rows;
  t.dim = dim;
  t.owned = owned;
  t.optimizer = "adam lr=0.01\nslots=" + std::to_string(slots);
  t.values.assign(owned.size() * dim, 1.5f);
  for (size_t k = 0; k < slots; ++k) t.slots.emplace_back(owned.size() * dim, 2.5f + k);
  return t;
}

ShardSnapshot Snapshot() {
  ShardSnapshot s;
  s.shard = 1;
  s.num_shards = 4;
  s.clock = 12;
  s.fingerprint = "fingerprint";
  s.tables.push_back(Table("emb", 1000, 16, {250, 500}, 2));
  s.tables.push_back(Table("w", 10, 1, {3, 7}, 0));
  s.tables.push_back(Table("long", 40000, 1, {1000, 35000}, 1));
  s.tables.push_back(Table("none_here", 2, 3, {2, 2}, 2));
  s.tables.push_back(Table("", 3, 1, {0, 3}, 0));
  s.tables.back().optimizer.clear();
  return s;
}

const std::string kWhere = "/ckpt/shard-1/gen-12";

void ExpectDataLoss(const StatusOr<ShardSnapshot>& got, const std::string& text) {
  ASSERT_FALSE(got.ok()) << text;
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << got.status().ToString();
  EXPECT_EQ(got.status().message().rfind(kWhere + ": the meta record is corrupt: ", 0), 0u)
      << got.status().ToString();
  EXPECT_NE(got.status().message().find(text), std::string::npos) << got.status().ToString();
}

TEST(CheckpointFormatTest, MetaRoundTripKeepsTheLayoutAndSlotCounts) {
  const ShardSnapshot s = Snapshot();
  auto got = DecodeMeta(EncodeMeta(s), kWhere);
  ASSERT_OK(got);
  EXPECT_EQ(got->shard, s.shard);
  EXPECT_EQ(got->num_shards, s.num_shards);
  EXPECT_EQ(got->clock, s.clock);
  EXPECT_EQ(got->fingerprint, s.fingerprint);
  ASSERT_EQ(got->tables.size(), s.tables.size());
  for (size_t i = 0; i < s.tables.size(); ++i) {
    const TableSnapshot& a = got->tables[i];
    const TableSnapshot& b = s.tables[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.rows, b.rows);
    EXPECT_EQ(a.dim, b.dim);
    EXPECT_EQ(a.owned, b.owned);
    EXPECT_EQ(a.optimizer, b.optimizer);
    EXPECT_TRUE(a.values.empty());
    ASSERT_EQ(a.slots.size(), b.slots.size()) << b.name;
    for (const auto& slot : a.slots) EXPECT_TRUE(slot.empty());
  }
  EXPECT_OK(CheckRestorable(*got, s, kWhere));
}

TEST(CheckpointFormatTest, MetaStartsWithMagicAndVersionLittleEndian) {
  ShardSnapshot s;
  s.shard = 0;
  s.num_shards = 1;
  s.clock = 0x0102030405060708;
  const std::string meta = EncodeMeta(s);
  // magic, version, shard, num_shards, clock, fingerprint "", generation
  // id, base clock, base id, table count 0.
  ASSERT_EQ(meta.size(), 4u + 4 + 4 + 4 + 8 + 4 + 8 + 8 + 8 + 4);
  EXPECT_EQ(meta.substr(0, 4), "PSCK");
  EXPECT_EQ(meta.substr(4, 4), std::string("\x06\0\0\0", 4));
  EXPECT_EQ(meta.substr(12, 4), std::string("\x01\0\0\0", 4));
  EXPECT_EQ(meta.substr(16, 8), "\x08\x07\x06\x05\x04\x03\x02\x01");
}

TEST(CheckpointFormatTest, EveryTruncatedMetaIsRefused) {
  const std::string meta = EncodeMeta(Snapshot());
  for (size_t n = 0; n < meta.size(); ++n) {
    SCOPED_TRACE("first " + std::to_string(n) + " bytes");
    const std::string cut = meta.substr(0, n);
    ExpectDataLoss(DecodeMeta(cut, kWhere),
                   n < 4 ? "does not start with \"PSCK\""
                   : n < 8 ? "ends before the format version"
                           : "");
  }
}

TEST(CheckpointFormatTest, BadMagicOrTrailingBytesAreRefused) {
  std::string meta = EncodeMeta(Snapshot());
  std::string bad = meta;
  bad[3] = 'X';
  ExpectDataLoss(DecodeMeta(bad, kWhere), "it does not start with \"PSCK\"");
  ExpectDataLoss(DecodeMeta("", kWhere), "it does not start with \"PSCK\"");
  ExpectDataLoss(DecodeMeta(meta + "xyz", kWhere), "3 bytes follow the last table");
}

TEST(CheckpointFormatTest, OtherFormatVersionsAreFailedPrecondition) {
  std::string meta = EncodeMeta(Snapshot());
  for (int version : {0, 1, 7, 255}) {
    meta[4] = static_cast<char>(version);
    auto got = DecodeMeta(meta, kWhere);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition) << got.status().ToString();
    EXPECT_NE(got.status().message().find(
                  kWhere + ": checkpoint format version " + std::to_string(version) +
                  ", but this build reads only versions 2 to 6 (the record format changed); "
                  "start the job with a new checkpoint.dir"),
              std::string::npos)
        << got.status().ToString();
  }
}

TEST(CheckpointFormatTest, AbsurdCountsAndRangesAreRefused) {
  ShardSnapshot one;
  one.shard = 0;
  one.num_shards = 1;
  one.fingerprint = "fp";
  one.tables.push_back(Table("t", 10, 2, {0, 10}, 1));
  const std::string meta = EncodeMeta(one);
  // Offsets: 24 = fingerprint length, 54 = table count (after the
  // fingerprint "fp" and the chain fields), 58 = the table.
  const size_t fingerprint_at = 24, count_at = 54, table_at = 58;
  const auto put32 = [](std::string* m, size_t at, uint32_t v) { std::memcpy(m->data() + at, &v, 4); };
  const auto put64 = [](std::string* m, size_t at, uint64_t v) { std::memcpy(m->data() + at, &v, 8); };

  std::string m = meta;
  put32(&m, count_at, 0xffffffffu);
  ExpectDataLoss(DecodeMeta(m, kWhere), "it lists 4294967295 tables in ");
  m = meta;
  put32(&m, count_at, 2);
  ExpectDataLoss(DecodeMeta(m, kWhere), "it lists 2 tables in 85 bytes");
  // Enough bytes for two tables' least size, but the second is cut short.
  m += std::string(47, '\0');
  ExpectDataLoss(DecodeMeta(m, kWhere), "it ends inside table 1");
  m = meta;
  put32(&m, fingerprint_at, 0xfffffff0u);
  ExpectDataLoss(DecodeMeta(m, kWhere), "it ends inside the shard fields");
  // The table: name (4 + 1), rows (8), dim (4), owned.begin (8), owned.end
  // (8), optimizer (4 + n), slots (4), keys (4), settings (4 + 0), delta
  // records (8) and removed (8).
  const size_t rows_at = table_at + 5, begin_at = rows_at + 12, end_at = begin_at + 8;
  const size_t slots_at = meta.size() - 28, keys_at = meta.size() - 24;
  m = meta;
  put32(&m, table_at, 0xffffffffu);
  ExpectDataLoss(DecodeMeta(m, kWhere), "it ends inside table 0");
  m = meta;
  put64(&m, end_at, 11);
  ExpectDataLoss(DecodeMeta(m, kWhere), "table 't' owns rows [0, 11) of 10");
  m = meta;
  put64(&m, begin_at, 5);
  put64(&m, end_at, 4);
  ExpectDataLoss(DecodeMeta(m, kWhere), "table 't' owns rows [5, 4) of 10");
  m = meta;
  put32(&m, slots_at, 3);
  ExpectDataLoss(DecodeMeta(m, kWhere), "table 't' has 3 optimizer slots");
  m = meta;
  put32(&m, keys_at, 2);
  ExpectDataLoss(DecodeMeta(m, kWhere), "table 't' has keys 2 (0 range, 1 hashed)");
  m = meta;
  // Hashed, but its hash slot fields are the bytes of the fields after
  // them (settings, delta counts): 0 hash slots for rows 10.
  put32(&m, keys_at, 1);
  ExpectDataLoss(DecodeMeta(m, kWhere), "hashed table 't' of 10 rows owns slots [0, 10) of 0");
  ASSERT_OK(DecodeMeta(meta, kWhere));

  // A table too large for memory is refused when its row data is counted.
  m = meta;
  put64(&m, rows_at, ~uint64_t{0});
  put64(&m, end_at, ~uint64_t{0});
  auto huge = DecodeMeta(m, kWhere);
  ASSERT_OK(huge);
  auto bytes = RowDataBytes(*huge, kWhere);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bytes.status().message().find("table 't' is too large"), std::string::npos);
  auto fine = DecodeMeta(meta, kWhere);
  ASSERT_OK(fine);
  EXPECT_EQ(RowDataBytes(*fine, kWhere).value(), Uint128{10 * 2 * 4 * 2});
}

TEST(CheckpointFormatTest, RowKeysRoundTripAndSortByTableThenRow) {
  const std::vector<std::pair<uint32_t, uint64_t>> ordered = {
      {0, 0}, {0, 1}, {0, 255}, {0, 256}, {0, uint64_t{1} << 32}, {0, ~uint64_t{0}},
      {1, 0}, {1, 7}, {256, 0}, {0xffffffffu, 3}};
  std::vector<std::string> keys;
  for (const auto& [table, row] : ordered) {
    keys.push_back(RowKey(table, row));
    ASSERT_EQ(keys.back().size(), kRowKeySize);
    EXPECT_EQ(keys.back()[0], 'r');
    uint32_t t = 0;
    uint64_t r = 0;
    ASSERT_TRUE(DecodeRowKey(keys.back(), &t, &r));
    EXPECT_EQ(t, table);
    EXPECT_EQ(r, row);
  }
  // Bytewise order (the database's) is the order of (table, row).
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  EXPECT_EQ(RowKey(2, 0x0102), std::string("r\0\0\0\x02\0\0\0\0\0\0\x01\x02", 13));
  uint32_t t = 0;
  uint64_t r = 0;
  EXPECT_FALSE(DecodeRowKey(kMetaKey, &t, &r));
  EXPECT_FALSE(DecodeRowKey(keys[0].substr(0, 12), &t, &r));
  EXPECT_FALSE(DecodeRowKey("s" + keys[0].substr(1), &t, &r));
}

TEST(CheckpointFormatTest, RunsHold64KiBOfValues) {
  EXPECT_EQ(RowsPerRun(0), 16384u);
  EXPECT_EQ(RowsPerRun(1), 16384u);
  EXPECT_EQ(RowsPerRun(3), 5461u);
  EXPECT_EQ(RowsPerRun(16), 1024u);
  EXPECT_EQ(RowsPerRun(16384), 1u);
  EXPECT_EQ(RowsPerRun(16385), 1u);
  EXPECT_EQ(RunCount(0, 16), 0u);
  EXPECT_EQ(RunCount(1024, 16), 1u);
  EXPECT_EQ(RunCount(1025, 16), 2u);
  EXPECT_EQ(RunCount(34000, 1), 3u);
  EXPECT_EQ(RunCount(3, 16385), 3u);
  // emb 1, w 1, long 3, none_here 0, "" 1.
  EXPECT_EQ(RunCount(Snapshot()), 6u);
}

TEST(CheckpointFormatTest, InvalidSnapshotsAreRefusedForWriting) {
  EXPECT_OK(ValidateForWrite(Snapshot(), kWhere));
  struct Case {
    const char* text;
    void (*change)(ShardSnapshot*);
  };
  const Case cases[] = {
      {"clock -1 is negative", [](ShardSnapshot* s) { s->clock = -1; }},
      {"shard 4 of 4", [](ShardSnapshot* s) { s->shard = 4; }},
      {"shard 0 of 0",
       [](ShardSnapshot* s) {
         s->shard = 0;
         s->num_shards = 0;
       }},
      {"table 'w' owns rows [5, 11) of 10", [](ShardSnapshot* s) { s->tables[1].owned = {5, 11}; }},
      {"table 'emb' has 3999 values for 250 rows of dim 16",
       [](ShardSnapshot* s) { s->tables[0].values.pop_back(); }},
      {"table 'w' has 3 optimizer slots (at most 2)",
       [](ShardSnapshot* s) { s->tables[1].slots.assign(3, std::vector<float>(4)); }},
      {"table 'emb' slot 1 has 1 floats, not 4000",
       [](ShardSnapshot* s) { s->tables[0].slots[1] = {1.0f}; }},
  };
  for (const Case& c : cases) {
    ShardSnapshot s = Snapshot();
    c.change(&s);
    const Status st = ValidateForWrite(s, kWhere);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.text << ": " << st.ToString();
    EXPECT_EQ(st.message().rfind(kWhere + ": ", 0), 0u) << st.ToString();
    EXPECT_NE(st.message().find(c.text), std::string::npos) << st.ToString();
  }
}

// Table "emb" of Snapshot() with its rows shared in two runs (150 and
// 100 rows) instead of copied.
ShardSnapshot SharedSnapshot() {
  ShardSnapshot s = Snapshot();
  TableSnapshot& t = s.tables[0];
  auto arrays = std::make_shared<std::vector<float>>(t.values);
  t.values.clear();
  for (std::vector<float>& slot : t.slots) slot.clear();
  for (const auto& [first, rows] : {std::pair<uint64_t, uint64_t>{0, 150}, {150, 100}}) {
    SharedRows run;
    run.first = first;
    run.rows = rows;
    run.values = arrays->data() + first * t.dim;
    for (size_t k = 0; k < t.slots.size(); ++k) run.slots[k] = run.values;
    run.holder = arrays;
    t.shared.push_back(run);
  }
  return s;
}

TEST(CheckpointFormatTest, SharedRunsMustCoverTheRowsOnceAndBeHeld) {
  EXPECT_OK(ValidateForWrite(SharedSnapshot(), kWhere));
  struct Case {
    const char* text;
    void (*change)(ShardSnapshot*);
  };
  const Case cases[] = {
      {"table 'emb' has shared runs of 150 rows for its 250 rows",
       [](ShardSnapshot* s) { s->tables[0].shared.pop_back(); }},
      {"table 'emb' has a shared run of rows [150, 250) where rows from 0 come next",
       [](ShardSnapshot* s) { s->tables[0].shared.erase(s->tables[0].shared.begin()); }},
      {"table 'emb' has a shared run of rows [0, 150) that was released or lacks an array",
       [](ShardSnapshot* s) { s->tables[0].ReleaseShared(150); }},
      {"table 'emb' has both shared runs of rows and copied arrays",
       [](ShardSnapshot* s) { s->tables[0].slots[1].assign(4000, 1.0f); }},
  };
  for (const Case& c : cases) {
    ShardSnapshot s = SharedSnapshot();
    c.change(&s);
    const Status st = ValidateForWrite(s, kWhere);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.text << ": " << st.ToString();
    EXPECT_NE(st.message().find(c.text), std::string::npos) << st.ToString();
  }
}

// The records of `s` as a writer makes them: (key, value) in key order.
std::vector<std::pair<std::string, std::string>> Records(const ShardSnapshot& s) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t ti = 0; ti < s.tables.size(); ++ti) {
    const TableSnapshot& t = s.tables[ti];
    const uint64_t per_run = RowsPerRun(t.dim);
    const uint64_t owned = t.hashed ? 0 : t.owned.size();
    for (uint64_t first = 0; first < owned; first += per_run) {
      const uint64_t n = std::min(per_run, owned - first);
      std::string value;
      const auto append = [&](const std::vector<float>& a) {
        value.append(reinterpret_cast<const char*>(a.data() + first * t.dim), n * t.dim * 4);
      };
      append(t.values);
      for (const auto& slot : t.slots) append(slot);
      out.emplace_back(RowKey(static_cast<uint32_t>(ti), t.owned.begin + first), value);
    }
    if (t.sketch_width != 0) {
      out.emplace_back(SketchKey(static_cast<uint32_t>(ti)),
                       std::string(reinterpret_cast<const char*>(t.sketch.data()), t.sketch.size()));
    }
    for (size_t r = 0; r < t.ids.size(); ++r) {  // a hashed table: a record per id
      std::string value;
      const auto append = [&](const std::vector<float>& a) {
        value.append(reinterpret_cast<const char*>(a.data() + r * t.dim), t.dim * 4);
      };
      append(t.values);
      for (const auto& slot : t.slots) append(slot);
      if (t.row_uses) {  // an evicting table: the row's use after its floats
        char use[kRowUseBytes];
        EncodeRowUse(t.uses[r], reinterpret_cast<std::byte*>(use));
        value.append(use, kRowUseBytes);
      }
      out.emplace_back(
          IdKey(static_cast<uint32_t>(ti), IdSlot(t.ids[r], NameHash(t.name), t.hash_slots),
                t.ids[r]),
          value);
    }
  }
  std::sort(out.begin(), out.end());  // the database's key order
  return out;
}

// Runs every record through a RunChecker: the first error, or OK.
Status Check(const ShardSnapshot& layout,
             const std::vector<std::pair<std::string, std::string>>& records,
             std::vector<RunRecord>* runs = nullptr) {
  RunChecker checker(layout, kWhere);
  for (const auto& [key, value] : records) {
    RunRecord run;
    PS_RETURN_IF_ERROR(checker.Next(key, value, &run));
    if (runs != nullptr) runs->push_back(run);
  }
  return checker.Finish();
}

TEST(RunCheckerTest, AcceptsEveryRunInOrderAndPointsAtItsPieces) {
  ShardSnapshot s = Snapshot();
  for (size_t k = 0; k < s.tables[0].values.size(); ++k) s.tables[0].values[k] = float(k);
  const auto records = Records(s);
  const ShardSnapshot layout = DecodeMeta(EncodeMeta(s), kWhere).value();
  std::vector<RunRecord> runs;
  ASSERT_OK(Check(layout, records, &runs));
  ASSERT_EQ(runs.size(), 6u);
  EXPECT_EQ(runs[0].table, 0u);
  EXPECT_EQ(runs[0].first, 250u);
  EXPECT_EQ(runs[0].count, 250u);
  EXPECT_EQ(runs[0].piece_bytes, 250u * 16 * 4);
  ASSERT_EQ(runs[0].num_slots, 2u);
  EXPECT_EQ(std::memcmp(runs[0].values, s.tables[0].values.data(), runs[0].piece_bytes), 0);
  EXPECT_EQ(std::memcmp(runs[0].slots[1], s.tables[0].slots[1].data(), runs[0].piece_bytes), 0);
  EXPECT_EQ(runs[3].first, 17384u);  // long's second run
  EXPECT_EQ(runs[4].count, 1232u);   // long's last run: the rest
  EXPECT_EQ(runs[5].table, 4u);      // none_here has no record
}

TEST(RunCheckerTest, MissingExtraOverlappingOrWrongSizedRunsAreDataLoss) {
  const ShardSnapshot s = Snapshot();
  const ShardSnapshot layout = DecodeMeta(EncodeMeta(s), kWhere).value();
  const auto records = Records(s);
  const auto expect = [&](const std::vector<std::pair<std::string, std::string>>& changed,
                          const std::string& text) {
    const Status st = Check(layout, changed);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << text << ": " << st.ToString();
    EXPECT_EQ(st.message().rfind(kWhere + ": ", 0), 0u) << st.ToString();
    EXPECT_NE(st.message().find(text), std::string::npos) << st.ToString();
  };
  const auto without = [&](size_t i) {
    auto r = records;
    r.erase(r.begin() + static_cast<std::ptrdiff_t>(i));
    return r;
  };
  const auto with = [&](const std::string& key, const std::string& value) {
    auto r = records;
    r.emplace_back(key, value);
    std::sort(r.begin(), r.end());
    return r;
  };
  expect(without(0), "the record of table 'emb' rows [250, 500) is missing");
  expect(without(3), "the record of table 'long' rows [17384, 33768) is missing");
  expect(without(4), "the record of table 'long' rows [33768, 35000) is missing");
  expect(without(5), "the record of table '' rows [0, 3) is missing");  // found by Finish
  expect(with(RowKey(1, 8), "v"), "table 'w' has a record of rows from 8, outside its rows [3, 7)");
  expect(with(RowKey(3, 0), "v"),
         "table 'none_here' has a record of rows from 0, outside its rows [2, 2)");
  expect(with(RowKey(0, 300), "v"),
         "table 'emb' has a record of rows from 300, inside the record of rows [250, 500) before "
         "it");
  expect(with(RowKey(9, 0), "v"), "a record of table index 9, but the meta record lists 5 tables");
  expect(with("zzz", "v"), "unexpected record with key 7a7a7a");
  auto repeated = records;
  repeated.insert(repeated.begin() + 1, records[0]);
  expect(repeated,
         "table 'emb' has a record of rows from 250, inside the record of rows [250, 500) before "
         "it");
  auto short_run = records;
  short_run[1].second.pop_back();
  expect(short_run, "the record of table 'w' rows [3, 7) has 15 bytes, not 16");
  auto long_run = records;
  long_run[4].second += "abcd";
  expect(long_run, "the record of table 'long' rows [33768, 35000) has 9860 bytes, not 9856");
  expect({}, "the record of table 'emb' rows [250, 500) is missing");
}

// Runs the records through one RunChecker per key range of SplitRuns(layout,
// ranges, 1), as the threads of a read do (meta record left out): the error
// of the first range that fails, or OK.
Status CheckInRanges(const ShardSnapshot& layout,
                     const std::vector<std::pair<std::string, std::string>>& records,
                     size_t ranges) {
  const std::vector<RunStart> starts = SplitRuns(layout, ranges, 1);
  for (size_t r = 0; r <= starts.size(); ++r) {
    RunChecker checker(layout, kWhere);
    if (r > 0) checker.StartAt(starts[r - 1].table, starts[r - 1].row);
    for (const auto& [key, value] : records) {
      if (r > 0 && key < RowKey(starts[r - 1].table, starts[r - 1].row)) continue;
      if (r < starts.size() && key >= RowKey(starts[r].table, starts[r].row)) continue;
      RunRecord run;
      PS_RETURN_IF_ERROR(checker.Next(key, value, &run));
    }
    PS_RETURN_IF_ERROR(r < starts.size() ? checker.FinishAt(starts[r].table, starts[r].row)
                                         : checker.Finish());
  }
  return Status::Ok();
}

TEST(CheckpointFormatTest, SplitRunsCutsWholeRunsOfAboutEqualBytes) {
  const ShardSnapshot s = Snapshot();
  // Bytes of the run records: emb 250 rows x 16 x 3 arrays, w 4 x 1 x 1,
  // long 34000 x 1 x 2 in runs of 16384 rows, '' 3 x 1 x 1.
  EXPECT_TRUE(SplitRuns(s, 1, 1).empty());
  EXPECT_TRUE(SplitRuns(s, 8, uint64_t{1} << 30).empty());  // less than the least range
  // Two ranges of about 160 KB: emb (48 KB), w and long's first run
  // (128 KB), then the rest.
  std::vector<RunStart> two = SplitRuns(s, 2, 1);
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].table, 2u);
  EXPECT_EQ(two[0].row, 17384u);
  // Ranges of at least 3.2 KB: each next one starts at the first run start
  // that far on (w's range takes long's first run too), every start a run's.
  std::vector<RunStart> many = SplitRuns(s, 100, 1);
  std::vector<std::pair<uint32_t, uint64_t>> got;
  for (const RunStart& r : many) got.emplace_back(r.table, r.row);
  const std::vector<std::pair<uint32_t, uint64_t>> want = {
      {1, 3}, {2, 17384}, {2, 33768}, {4, 0}};
  EXPECT_EQ(got, want);
  // Hashed tables and tables of dim 0 hold no runs to cut.
  ShardSnapshot none;
  none.tables.push_back(Table("zero", 10, 0, {0, 10}, 0));
  EXPECT_TRUE(SplitRuns(none, 4, 1).empty());
}

TEST(CheckpointFormatTest, SplitRowsAtRunsCutsAtRunStarts) {
  // Runs of dim 1 start every 16384 rows from row 1000.
  EXPECT_TRUE(SplitRowsAtRuns(1000, 1000, 35000, 1, 1, 0).empty());
  EXPECT_EQ(SplitRowsAtRuns(1000, 1000, 35000, 1, 2, 0), (std::vector<uint64_t>{33768}));
  EXPECT_EQ(SplitRowsAtRuns(1000, 5000, 70000, 1, 8, 0),
            (std::vector<uint64_t>{17384, 33768, 50152, 66536}));
  EXPECT_EQ(SplitRowsAtRuns(1000, 5000, 70000, 1, 8, 30000), (std::vector<uint64_t>{50152}));
  EXPECT_TRUE(SplitRowsAtRuns(1000, 5000, 17000, 1, 8, 0).empty());  // inside one run
  // One row per run: a cut every row, or every few.
  EXPECT_EQ(SplitRowsAtRuns(0, 2, 6, 20000, 8, 0), (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_EQ(SplitRowsAtRuns(0, 2, 6, 20000, 2, 0), (std::vector<uint64_t>{4}));
}

// The hash slot of `id` in a table "emb_h" of 64 slots.
uint32_t SlotOf(uint64_t id, const std::string& table = "emb_h") {
  return IdSlot(id, NameHash(table), 64);
}

// A hashed table "emb_h" of dim 2 with adam's 2 slots on shard 1 of 4 (slots
// [16, 32) of 64), holding `n` rows of ids of those slots, in key order (by
// slot, then id).
TableSnapshot HashedTable(size_t n) {
  TableSnapshot t;
  t.name = "emb_h";
  t.dim = 2;
  t.hashed = true;
  t.hash_slots = 64;
  t.owned = {16, 32};
  t.optimizer = "adam lr=0.01";
  const uint64_t seed = NameHash(t.name);
  for (uint64_t id = 7; t.ids.size() < n; id = id * 6364136223846793005ull + 1442695040888963407ull) {
    if (t.owned.Contains(IdSlot(id, seed, 64))) t.ids.push_back(id);
  }
  std::sort(t.ids.begin(), t.ids.end(), [](uint64_t a, uint64_t b) {
    return SlotOf(a) != SlotOf(b) ? SlotOf(a) < SlotOf(b) : a < b;
  });
  t.stored_rows = n;
  for (size_t i = 0; i < n * 2; ++i) t.values.push_back(static_cast<float>(i));
  t.slots.assign(2, std::vector<float>(n * 2, 0.25f));
  return t;
}

ShardSnapshot WithHashed() {
  ShardSnapshot s = Snapshot();
  s.tables.insert(s.tables.begin() + 1, HashedTable(3));
  s.tables[1].sketch_width = 1024;  // an admission sketch
  s.tables[1].sketch.assign(SketchBytes(1024), std::byte{7});
  TableSnapshot empty = HashedTable(0);
  empty.name = "empty_h";
  s.tables.push_back(empty);
  return s;
}

TEST(RunCheckerTest, RangesCheckedApartFindWhatOneCheckerFinds) {
  // Every change of MissingExtraOverlappingOrWrongSizedRunsAreDataLoss, and
  // the hashed tables' and sketches' cases, checked by the range checkers
  // of 2, 3 and 100 ranges: the same error as one checker of the whole.
  for (const ShardSnapshot& s : {Snapshot(), WithHashed()}) {
    const ShardSnapshot layout = DecodeMeta(EncodeMeta(s), kWhere).value();
    const auto records = Records(s);
    std::vector<std::vector<std::pair<std::string, std::string>>> changed = {records, {}};
    for (size_t i = 0; i < records.size(); ++i) {
      auto r = records;
      r.erase(r.begin() + static_cast<std::ptrdiff_t>(i));
      changed.push_back(r);
      r = records;
      r.insert(r.begin() + static_cast<std::ptrdiff_t>(i), records[i]);
      changed.push_back(r);
      r = records;
      r[i].second.pop_back();
      changed.push_back(r);
    }
    for (const std::string& key :
         {RowKey(1, 8), RowKey(3, 0), RowKey(0, 300), RowKey(2, 17385), RowKey(2, 34999),
          RowKey(9, 0), std::string("zzz"), std::string("r")}) {
      auto r = records;
      r.emplace_back(key, "v");
      std::sort(r.begin(), r.end());
      changed.push_back(r);
    }
    for (const auto& c : changed) {
      const Status one = Check(layout, c);
      for (size_t ranges : {2, 3, 100}) {
        const Status apart = CheckInRanges(layout, c, ranges);
        EXPECT_EQ(one, apart) << ranges << " ranges: " << one.ToString() << " against "
                              << apart.ToString();
      }
    }
  }
}

TEST(CheckpointFormatTest, HashedTablesRoundTripTheirSlotsAndRowCount) {
  const ShardSnapshot s = WithHashed();
  ASSERT_OK(ValidateForWrite(s, kWhere));
  auto got = DecodeMeta(EncodeMeta(s), kWhere);
  ASSERT_OK(got);
  const TableSnapshot& t = got->tables[1];
  EXPECT_TRUE(t.hashed);
  EXPECT_EQ(t.hash_slots, 64u);
  EXPECT_EQ(t.stored_rows, 3u);
  EXPECT_EQ(t.owned, (RowRange{16, 32}));
  EXPECT_EQ(t.slots.size(), 2u);
  EXPECT_FALSE(got->tables[0].hashed);
  EXPECT_EQ(RunCount(s), RunCount(Snapshot()) + 3);
  const StatusOr<Uint128> bytes = RowDataBytes(*got, kWhere);
  ASSERT_OK(bytes);
  EXPECT_EQ(*bytes - *RowDataBytes(Snapshot(), kWhere), Uint128{3 * 2 * 4 * 3 + 8192});
  EXPECT_EQ(got->tables[1].sketch_width, 1024u);
  // A hashed table whose slots do not lie inside its slot count is corrupt.
  ShardSnapshot bad = s;
  bad.tables[1].owned = {16, 65};
  ExpectDataLoss(DecodeMeta(EncodeMeta(bad), kWhere),
                 "hashed table 'emb_h' of 0 rows owns slots [16, 65) of 64");
}

TEST(CheckpointFormatTest, AVersion2MetaIsReadAsRangeTables) {
  // Version 2's layout: no keys field after each table's slot count.
  const ShardSnapshot s = Snapshot();
  std::string meta = EncodeMeta(s);
  meta[4] = 2;
  // Nor the generation id, base clock and base id of version 6 before the
  // table count.
  const size_t chain_at = 4 + 4 + 4 + 4 + 8 + 4 + s.fingerprint.size();
  std::string v2 = meta.substr(0, chain_at) + meta.substr(chain_at + 24, 4);
  for (const TableSnapshot& t : s.tables) {
    const auto u32 = [&v2](uint32_t v) { v2.append(reinterpret_cast<const char*>(&v), 4); };
    const auto u64 = [&v2](uint64_t v) { v2.append(reinterpret_cast<const char*>(&v), 8); };
    u32(static_cast<uint32_t>(t.name.size()));
    v2 += t.name;
    u64(t.rows);
    u32(t.dim);
    u64(t.owned.begin);
    u64(t.owned.end);
    u32(static_cast<uint32_t>(t.optimizer.size()));
    v2 += t.optimizer;
    u32(static_cast<uint32_t>(t.slots.size()));
  }
  auto got = DecodeMeta(v2, kWhere);
  ASSERT_OK(got);
  EXPECT_OK(CheckRestorable(*got, s, kWhere));
}

TEST(CheckpointFormatTest, AVersion3MetaIsReadAsHashedTablesWithoutUses) {
  const ShardSnapshot s = WithHashed();
  uint32_t version = 0;
  auto got = DecodeMeta(OlderMeta(s, 3), kWhere, &version);
  ASSERT_OK(got);
  EXPECT_EQ(version, 3u);
  EXPECT_FALSE(got->tables[1].row_uses);
  EXPECT_EQ(got->tables[1].stored_rows, 3u);
  EXPECT_EQ(got->tables[1].sketch_width, 1024u);
  EXPECT_EQ(EncodeMeta(*got), EncodeMeta(s));  // the same layout, written as version 6
}

TEST(CheckpointFormatTest, AVersion4MetaHasNoSettingsAndItsRowsSortById) {
  ShardSnapshot s = WithHashed();
  s.tables[1].ids = {};
  // Version 4 keys sort by id alone: a table's ids ascending.
  for (uint64_t id = 1; s.tables[1].ids.size() < 3; ++id) {
    if (s.tables[1].owned.Contains(SlotOf(id))) s.tables[1].ids.push_back(id);
  }
  uint32_t version = 0;
  const ShardSnapshot layout = DecodeMeta(OlderMeta(s, 4), kWhere, &version).value();
  EXPECT_EQ(version, 4u);
  EXPECT_TRUE(layout.tables[1].settings.empty());
  // Its 'h' records as version 4 wrote them: 13-byte keys without a slot.
  auto records = Records(s);
  for (auto& [key, value] : records) {
    uint32_t table = 0, slot = 0;
    uint64_t id = 0;
    if (DecodeIdKey(key, &table, &slot, &id)) key = IdKeyV4(table, id);
  }
  std::sort(records.begin(), records.end());
  std::vector<RunRecord> runs;
  ASSERT_OK([&] {
    RunChecker checker(layout, kWhere, 4);
    for (const auto& [key, value] : records) {
      RunRecord run;
      PS_RETURN_IF_ERROR(checker.Next(key, value, &run));
      runs.push_back(run);
    }
    return checker.Finish();
  }());
  EXPECT_EQ(runs[1].first, s.tables[1].ids[0]);
  EXPECT_EQ(runs[3].first, s.tables[1].ids[2]);
  // Records of one format are refused in the other.
  RunChecker as_v5(layout, kWhere, 5);
  RunRecord run;
  ASSERT_OK(as_v5.Next(records[0].first, records[0].second, &run));  // the sketch
  const Status mixed = as_v5.Next(records[1].first, records[1].second, &run);
  EXPECT_EQ(mixed.code(), StatusCode::kDataLoss);
  EXPECT_NE(mixed.message().find("unexpected record with key 68"), std::string::npos)
      << mixed.ToString();
}

TEST(CheckpointFormatTest, SettingsRoundTripAndARangeTableHasNone) {
  ShardSnapshot s = WithHashed();
  s.tables[1].settings = "init=normal,0.01,3 admit=2,1";
  const ShardSnapshot got = DecodeMeta(EncodeMeta(s), kWhere).value();
  EXPECT_EQ(got.tables[1].settings, "init=normal,0.01,3 admit=2,1");
  EXPECT_EQ(got.tables[0].settings, "");
  s.tables[0].settings = "init=zeros,0,1";
  ExpectDataLoss(DecodeMeta(EncodeMeta(s), kWhere),
                 "range table 'emb' has settings \"init=zeros,0,1\"");
  // A restore compares them (when the generation has them).
  ShardSnapshot job = WithHashed();
  job.tables[1].max_rows = 100;
  job.tables.back().max_rows = 100;
  job.tables[1].settings = "init=normal,0.01,4 admit=2,1";
  ShardSnapshot saved = WithHashed();
  saved.tables[1].settings = "init=normal,0.01,3 admit=2,1";
  const Status differ = CheckRestorable(saved, job, kWhere);
  EXPECT_NE(differ.message().find("table 'emb_h' has settings \"init=normal,0.01,3 admit=2,1\" "
                                  "in the checkpoint but \"init=normal,0.01,4 admit=2,1\" in the "
                                  "job"),
            std::string::npos)
      << differ.ToString();
  saved.tables[1].settings.clear();  // format 4: not recorded, not compared
  EXPECT_OK(CheckRestorable(saved, job, kWhere));
}

// An evicting table's rows carry their use (16 bytes after the floats),
// checked for size like the floats.
TEST(CheckpointFormatTest, AnEvictingTablesRowsCarryTheirUses) {
  ShardSnapshot s = WithHashed();
  TableSnapshot& t = s.tables[1];
  t.row_uses = true;
  t.uses = {{5, 1, 2}, {9, 2, 1}, {7, 2, 40000}};
  ASSERT_OK(ValidateForWrite(s, kWhere));
  const ShardSnapshot layout = DecodeMeta(EncodeMeta(s), kWhere).value();
  EXPECT_TRUE(layout.tables[1].row_uses);
  EXPECT_FALSE(layout.tables[0].row_uses);
  EXPECT_EQ(*RowDataBytes(layout, kWhere) - *RowDataBytes(WithHashed(), kWhere), Uint128{3 * 16});
  const auto records = Records(s);
  std::vector<RunRecord> runs;
  ASSERT_OK(Check(layout, records, &runs));
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_NE(runs[1 + i].use, nullptr);
    const RowUse use = DecodeRowUse(runs[1 + i].use);
    EXPECT_EQ(use.seq, t.uses[i].seq);
    EXPECT_EQ(use.clock, t.uses[i].clock);
    EXPECT_EQ(use.uses, t.uses[i].uses);
  }
  EXPECT_EQ(runs[0].use, nullptr);  // the sketch
  auto short_use = records;
  short_use[1].second.pop_back();
  const Status st = Check(layout, short_use);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("has 39 bytes, not 40"), std::string::npos) << st.ToString();
  // A snapshot whose uses do not match its rows is refused for writing,
  // and a meta record with another value of the field is corrupt.
  ShardSnapshot missing = s;
  missing.tables[1].uses.pop_back();
  EXPECT_EQ(ValidateForWrite(missing, kWhere).code(), StatusCode::kInvalidArgument);
  std::string meta = EncodeMeta(s);
  // emb_h's sketch width (1024), then its row uses field (1).
  const size_t w = meta.find(std::string("\x00\x04\x00\x00\x01\x00\x00\x00", 8));
  ASSERT_NE(w, std::string::npos);
  meta[w + 4] = 2;
  ExpectDataLoss(DecodeMeta(meta, kWhere), "hashed table 'emb_h' has row uses 2");
  // Restoring into a table that evicts differently names it.
  ShardSnapshot job = s;
  job.tables[1].row_uses = false;
  const Status differ = CheckRestorable(s, job, kWhere);
  EXPECT_NE(differ.message().find("eviction"), std::string::npos) << differ.ToString();
}

TEST(CheckpointFormatTest, HashedSnapshotsThatCannotBeReadBackAreRefusedForWriting) {
  const auto refused = [](ShardSnapshot s, const std::string& text) {
    const Status st = ValidateForWrite(s, kWhere);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(st.message().find(text), std::string::npos) << st.ToString();
  };
  ShardSnapshot s = WithHashed();
  std::swap(s.tables[1].ids[0], s.tables[1].ids[1]);
  refused(s, "does not come after");
  s = WithHashed();
  s.tables[1].stored_rows = 4;
  refused(s, "has 3 ids for 4 rows");
  s = WithHashed();
  s.tables[1].ids[2] = s.tables[1].ids[2] + 1;
  while (ShardSlots(64, 4, 1).Contains(IdSlot(s.tables[1].ids[2], NameHash("emb_h"), 64))) {
    ++s.tables[1].ids[2];
  }
  refused(s, "is not in the shard's hash slots");
}

TEST(RunCheckerTest, AHashedTablesRowsComeBySlotAndIdAndEachIsChecked) {
  const ShardSnapshot s = WithHashed();
  const ShardSnapshot layout = DecodeMeta(EncodeMeta(s), kWhere).value();
  const auto records = Records(s);
  std::vector<RunRecord> runs;
  ASSERT_OK(Check(layout, records, &runs));
  ASSERT_EQ(runs.size(), 1u + 3 + 6);
  EXPECT_TRUE(runs[0].sketch);  // 'a' keys sort first, then 'h'
  EXPECT_EQ(runs[0].table, 1u);
  EXPECT_EQ(runs[0].piece_bytes, SketchBytes(1024));
  for (size_t i = 0; i < 3; ++i) {
    const RunRecord& run = runs[1 + i];
    EXPECT_FALSE(run.sketch);
    EXPECT_EQ(run.table, 1u);
    EXPECT_EQ(run.first, s.tables[1].ids[i]);
    EXPECT_EQ(run.count, 1u);
    EXPECT_EQ(run.piece_bytes, 8u);
    ASSERT_EQ(run.num_slots, 2u);
    EXPECT_EQ(std::memcmp(run.values, s.tables[1].values.data() + 2 * i, 8), 0);
  }
  const auto expect = [&](const std::vector<std::pair<std::string, std::string>>& changed,
                          const std::string& text) {
    const Status st = Check(layout, changed);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << text << ": " << st.ToString();
    EXPECT_NE(st.message().find(text), std::string::npos) << st.ToString();
  };
  auto missing = records;
  missing.erase(missing.begin() + 2);
  expect(missing, "table 'emb_h' has 2 row records, but its meta record says 3");
  auto no_sketch = records;
  no_sketch.erase(no_sketch.begin());
  expect(no_sketch, "the sketch record of table 'emb_h' is missing");
  auto short_sketch = records;
  short_sketch[0].second.pop_back();
  expect(short_sketch, "the sketch record of table 'emb_h' has 8191 bytes, not 8192");
  auto stray_sketch = records;
  stray_sketch.emplace_back(SketchKey(0), "xx");
  std::sort(stray_sketch.begin(), stray_sketch.end());
  expect(stray_sketch, "a sketch record of table 'emb', which has no admission sketch");
  const std::string row(24, 'x');
  auto extra = records;
  extra.emplace_back(IdKey(1, SlotOf(s.tables[1].ids[2] + 1), s.tables[1].ids[2] + 1), row);
  std::sort(extra.begin(), extra.end());
  // The extra id sorts after the last one: a fourth record, or one outside
  // the shard's slots, both refused.
  const Status st = Check(layout, extra);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  auto outside = records;
  uint64_t foreign = 1;
  while (ShardSlots(64, 4, 1).Contains(IdSlot(foreign, NameHash("emb_h"), 64))) ++foreign;
  outside[1] = {IdKey(1, SlotOf(foreign), foreign), row};
  std::sort(outside.begin(), outside.end());
  expect(outside, "table 'emb_h' has a record of id " + std::to_string(foreign) +
                      " in hash slot " + std::to_string(IdSlot(foreign, NameHash("emb_h"), 64)) +
                      ", outside its slots [16, 32)");
  // A record under another slot than its id's.
  auto wrong_slot = records;
  const uint64_t moved = SlotOf(s.tables[1].ids[0]) != 16 ? s.tables[1].ids[0] : s.tables[1].ids[1];
  for (auto& [key, value] : wrong_slot) {
    if (key == IdKey(1, SlotOf(moved), moved)) key = IdKey(1, 16, moved);
  }
  std::sort(wrong_slot.begin(), wrong_slot.end());
  expect(wrong_slot, "table 'emb_h' has a record of id " + std::to_string(moved) +
                         " under hash slot 16, but the id's slot is " +
                         std::to_string(SlotOf(moved)));
  auto short_row = records;
  short_row[1].second.pop_back();
  expect(short_row, "the record of table 'emb_h' id " + std::to_string(s.tables[1].ids[0]) +
                        " has 23 bytes, not 24");
  auto of_range = records;
  of_range.emplace_back(IdKey(0, 0, 5), row);
  std::sort(of_range.begin(), of_range.end());
  expect(of_range, "a record of id 5 of table 'emb', which is not hashed");
  auto as_rows = records;
  as_rows.emplace_back(RowKey(1, 0), row);
  std::sort(as_rows.begin(), as_rows.end());
  expect(as_rows, "a record of rows from 0 of table 'emb_h', which is hashed");
  auto in_empty = records;
  in_empty.emplace_back(IdKey(6, SlotOf(s.tables[1].ids[0], "empty_h"), s.tables[1].ids[0]), row);
  std::sort(in_empty.begin(), in_empty.end());
  expect(in_empty, "table 'empty_h' has 1 row records or more, but its meta record says 0");
}

}  // namespace
}  // namespace ps
