// The layout comparison that decides whether a saved shard state fits a
// shard, and reading a table's rows copied or shared alike (store/snapshot.h).
#include "store/snapshot.h"
#include "tests/util/status_matchers.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace ps {
namespace {

TableSnapshot Table(const std::string& name, uint64_t rows, uint32_t dim, RowRange owned,
                    size_t slots, uint32_t seed) {
  TableSnapshot t;
  t.name = name;
  t.rows = rows;
  t.dim = dim;
  t.owned = owned;
  t.optimizer = "adam lr=0.01 beta1=0.9\nslots=" + std::to_string(slots);
  t.values.assign(owned.size() * dim, static_cast<float>(seed));
  for (size_t k = 0; k < slots; ++k) t.slots.emplace_back(owned.size() * dim, 0.5f * seed);
  return t;
}

// The layout of shard 1 of 4 with six tables; `seed` changes the values.
ShardSnapshot Snapshot(int64_t clock, uint32_t seed = 1) {
  ShardSnapshot s;
  s.shard = 1;
  s.num_shards = 4;
  s.clock = clock;
  s.fingerprint = "model-fingerprint-0123456789abcdef";
  s.tables.push_back(Table("emb", 1000, 16, {250, 500}, 2, seed));
  s.tables.push_back(Table("w", 10, 1, {3, 7}, 0, seed));
  s.tables.push_back(Table("bias", 7, 4, {0, 7}, 1, seed));
  s.tables.push_back(Table("long", 40000, 1, {1000, 35000}, 2, seed));
  s.tables.push_back(Table("wide", 5, 16385, {1, 4}, 1, seed));
  s.tables.push_back(Table("none_here", 2, 3, {2, 2}, 2, seed));
  return s;
}

TEST(CheckRestorableTest, NamesEachDifferenceAndBothValues) {
  const ShardSnapshot saved = Snapshot(5);
  const std::string where = "/ckpt/shard-1/gen-5";
  EXPECT_OK(CheckRestorable(saved, saved, where));

  struct Case {
    std::string what;
    void (*change)(ShardSnapshot*);
    std::vector<std::string> texts;
  };
  const std::vector<Case> cases = {
      {"fingerprint",
       [](ShardSnapshot* s) { s->fingerprint = "other"; },
       {"the model's fingerprint is \"model-fingerprint-0123456789abcdef\" in the checkpoint "
        "but \"other\" in the job"}},
      // A job with another model has another fingerprint too: the concrete
      // difference comes first.
      {"fingerprint and dim",
       [](ShardSnapshot* s) {
         s->fingerprint = "other";
         s->tables[0].dim = 8;
       },
       {"table 'emb' has dim 16 in the checkpoint but 8 in the job (the model's fingerprint is "
        "\"model-fingerprint-0123456789abcdef\" in the checkpoint but \"other\" in the job)"}},
      {"shard count",
       [](ShardSnapshot* s) { s->num_shards = 2; },
       {"shard count is 4 in the checkpoint but 2 in the job"}},
      {"shard",
       [](ShardSnapshot* s) { s->shard = 3; },
       {"shard is 1 in the checkpoint but 3 in the job"}},
      {"table count",
       [](ShardSnapshot* s) { s->tables.pop_back(); },
       {"table count is 6 in the checkpoint but 5 in the job"}},
      {"table name",
       [](ShardSnapshot* s) { s->tables[1].name = "weights"; },
       {"table 1 is 'w' in the checkpoint but 'weights' in the job"}},
      {"rows",
       [](ShardSnapshot* s) { s->tables[0].rows = 2000; },
       {"table 'emb' has 1000 rows in the checkpoint but 2000 in the job"}},
      {"dim",
       [](ShardSnapshot* s) { s->tables[0].dim = 8; },
       {"table 'emb' has dim 16 in the checkpoint but 8 in the job"}},
      {"owned",
       [](ShardSnapshot* s) {
         s->tables[2].owned = {0, 3};
       },
       {"table 'bias' has owned rows [0, 7) in the checkpoint but [0, 3) in the job"}},
      {"optimizer",
       [](ShardSnapshot* s) { s->tables[1].optimizer = "sgd lr=0.1"; },
       {"table 'w' has optimizer", "\"adam lr=0.01 beta1=0.9\nslots=0\"", "\"sgd lr=0.1\""}},
  };
  for (const Case& c : cases) {
    ShardSnapshot expected = saved;
    c.change(&expected);
    const Status s = CheckRestorable(saved, expected, where);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << c.what << ": " << s.ToString();
    EXPECT_EQ(s.message().rfind(where + ": ", 0), 0u) << s.ToString();
    EXPECT_NE(s.message().find("start the job with the config it was written with, or a new "
                               "checkpoint.dir"),
              std::string::npos)
        << s.ToString();
    for (const std::string& text : c.texts) {
      EXPECT_NE(s.message().find(text), std::string::npos) << c.what << ": " << s.ToString();
    }
  }
  // The clock and the values are not part of the layout.
  ShardSnapshot later = Snapshot(9, 3);
  EXPECT_OK(CheckRestorable(saved, later, where));
}

TEST(CheckRestorableTest, EqualLayoutsWithDifferentValuesAndClocksAreRestorable) {
  ShardSnapshot saved = Snapshot(5);
  ShardSnapshot expected = Snapshot(7, 2);
  expected.tables[0].values.clear();  // a layout without values
  EXPECT_OK(CheckRestorable(saved, expected, "/x"));
  // An empty shard fits an empty shard.
  ShardSnapshot empty;
  EXPECT_OK(CheckRestorable(empty, empty, "/x"));
}

// A table of 16 rows of dim 2 with one optimizer state array, as flat
// arrays and as three shared runs of 5, 7 and 4 rows holding the same
// numbers (each run's arrays kept alive by its holder).
struct TwoForms {
  TableSnapshot flat;
  TableSnapshot shared;
};
TwoForms SameTableTwice() {
  TwoForms t;
  t.flat = Table("emb", 16, 2, {0, 16}, 1, 0);
  for (size_t i = 0; i < t.flat.values.size(); ++i) {
    t.flat.values[i] = static_cast<float>(i);
    t.flat.slots[0][i] = -static_cast<float>(i);
  }
  t.shared = Table("emb", 16, 2, {0, 16}, 1, 0);
  t.shared.values.clear();
  t.shared.slots[0].clear();
  uint64_t first = 0;
  for (const uint64_t rows : {5, 7, 4}) {
    auto arrays = std::make_shared<std::vector<float>>();
    arrays->assign(t.flat.values.begin() + first * 2, t.flat.values.begin() + (first + rows) * 2);
    arrays->insert(arrays->end(), t.flat.slots[0].begin() + first * 2,
                   t.flat.slots[0].begin() + (first + rows) * 2);
    SharedRows run;
    run.first = first;
    run.rows = rows;
    run.values = arrays->data();
    run.slots[0] = arrays->data() + rows * 2;
    run.holder = arrays;
    t.shared.shared.push_back(run);
    first += rows;
  }
  return t;
}

// Rows [first, first + count) of `t` as (values, slot 0), and the pieces.
struct Read {
  std::vector<float> values, slot;
  size_t pieces = 0;
};
Read ReadRows(const TableSnapshot& t, uint64_t first, uint64_t count) {
  Read r;
  t.ForEachPiece(first, count, [&](const RowPiece& p) {
    r.values.insert(r.values.end(), p.values, p.values + p.rows * t.dim);
    r.slot.insert(r.slot.end(), p.slots[0], p.slots[0] + p.rows * t.dim);
    ++r.pieces;
  });
  return r;
}

TEST(TableSnapshotTest, ForEachPieceReadsSharedRunsAndFlatArraysAlike) {
  const TwoForms t = SameTableTwice();
  for (const auto& [first, count] : std::vector<std::pair<uint64_t, uint64_t>>{
           {0, 16}, {3, 10}, {5, 7}, {12, 4}, {15, 1}, {4, 0}}) {
    const Read flat = ReadRows(t.flat, first, count);
    const Read shared = ReadRows(t.shared, first, count);
    EXPECT_EQ(shared.values, flat.values) << "rows from " << first << ", " << count;
    EXPECT_EQ(shared.slot, flat.slot) << "rows from " << first << ", " << count;
    EXPECT_EQ(flat.values.size(), count * 2);
    EXPECT_EQ(flat.pieces, count == 0 ? 0u : 1u);
  }
  EXPECT_EQ(ReadRows(t.shared, 3, 10).pieces, 3u);  // [3, 5), [5, 12), [12, 13)
  EXPECT_EQ(ReadRows(t.shared, 5, 7).pieces, 1u);
}

TEST(TableSnapshotTest, ReleaseSharedDropsTheRunsThatEndByTheRowOnly) {
  TwoForms t = SameTableTwice();
  std::weak_ptr<const void> second = t.shared.shared[1].holder;
  t.shared.ReleaseShared(11);  // inside the second run: the first only
  EXPECT_EQ(t.shared.shared[0].holder, nullptr);
  EXPECT_EQ(t.shared.shared[0].values, nullptr);
  EXPECT_FALSE(second.expired());
  EXPECT_EQ(ReadRows(t.shared, 5, 11).values, ReadRows(t.flat, 5, 11).values);
  t.shared.ReleaseShared(12);
  EXPECT_TRUE(second.expired()) << "the run's arrays are still held";
  EXPECT_NE(t.shared.shared[2].holder, nullptr);
  t.shared.ReleaseShared(16);
  EXPECT_EQ(t.shared.shared[2].holder, nullptr);
  t.shared.ReleaseShared(16);  // again: nothing left to release
}

}  // namespace
}  // namespace ps
