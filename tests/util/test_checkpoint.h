// Test helper: a job's checkpoint written by the real writer
// (CheckpointDir::Write into checkpoint.dir/shard-<i>), with the table kinds
// an export must handle:
//   0 "emb"         range, 1000 x 8, adam (first_moment, second_moment)
//   1 "w.bias"      range, 10 x 1, add (no state)
//   2 "long"        range, 40000 x 1, sgd (momentum): several run records
//   3 "user ids/v2" hashed, 64 hash slots, dim 4, ftrl (z, n), a name with
//                   characters a file name cannot keep
// The shards split each range table's rows and the hash slots evenly (shard
// s: [n * s / S, n * (s + 1) / S)). The values are either random bit
// patterns (NaNs and infinities included) or, with `formula`, exact
// floats a reader can check without the snapshot:
//   range table t, row r, column c, array k (0 values, 1.. the slots):
//     t * 100000 + r * dim + c + k * 0.25
//   hashed: (id % 65536) * 8 + c + k * 0.25
// (tests/python/checkpoint_test.py computes them again).
#ifndef PS_TESTS_UTIL_TEST_CHECKPOINT_H_
#define PS_TESTS_UTIL_TEST_CHECKPOINT_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/hash_slots.h"
#include "common/status.h"
#include "server/checkpoint.h"
#include "server/checkpoint_layout.h"
#include "store/snapshot.h"

namespace ps {

inline constexpr uint32_t kTestHashSlots = 64;
inline constexpr const char* kTestHashedName = "user ids/v2";

// The ids of the hashed test table (about 300, some of every shard), in
// ascending order.
inline std::vector<uint64_t> TestCheckpointIds() {
  std::vector<uint64_t> ids;
  uint64_t x = 12345;
  for (int i = 0; i < 300; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    ids.push_back(x);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// Shard `shard` of `num_shards` at `clock`, as the header says.
inline ShardSnapshot TestCheckpointShard(uint32_t shard, uint32_t num_shards, int64_t clock,
                                         bool formula, uint32_t seed = 1) {
  std::mt19937 rng(seed * 7919 + shard);
  const auto fill = [&](TableSnapshot& t, uint32_t index, const std::vector<uint64_t>& rows) {
    for (size_t k = 0; k <= t.slots.size(); ++k) {
      std::vector<float>& out = k == 0 ? t.values : t.slots[k - 1];
      out.resize(rows.size() * t.dim);
      for (size_t i = 0; i < rows.size(); ++i) {
        for (uint32_t c = 0; c < t.dim; ++c) {
          float& v = out[i * t.dim + c];
          if (formula) {
            v = t.hashed ? static_cast<float>((rows[i] % 65536) * 8 + c) + 0.25f * k
                         : static_cast<float>(index * 100000.0 + rows[i] * t.dim + c) + 0.25f * k;
          } else {
            const uint32_t bits = rng();
            std::memcpy(&v, &bits, sizeof v);
          }
        }
      }
    }
  };
  ShardSnapshot s;
  s.shard = shard;
  s.num_shards = num_shards;
  s.clock = clock;
  s.fingerprint = "test-model-fingerprint";
  struct Range {
    const char* name;
    uint64_t rows;
    uint32_t dim;
    const char* optimizer;
    size_t slots;
  };
  const Range ranges[] = {{"emb", 1000, 8, "adam lr=0.01 beta1=0.9", 2},
                          {"w.bias", 10, 1, "add lr=1", 0},
                          {"long", 40000, 1, "sgd lr=0.1 momentum=0.9", 1}};
  for (uint32_t i = 0; i < 3; ++i) {
    TableSnapshot t;
    t.name = ranges[i].name;
    t.rows = ranges[i].rows;
    t.dim = ranges[i].dim;
    t.optimizer = ranges[i].optimizer;
    t.owned = {t.rows * shard / num_shards, t.rows * (shard + 1) / num_shards};
    t.slots.resize(ranges[i].slots);
    std::vector<uint64_t> rows;
    for (uint64_t r = t.owned.begin; r < t.owned.end; ++r) rows.push_back(r);
    fill(t, i, rows);
    s.tables.push_back(std::move(t));
  }
  TableSnapshot h;
  h.name = kTestHashedName;
  h.hashed = true;
  h.dim = 4;
  h.hash_slots = kTestHashSlots;
  h.owned = {kTestHashSlots * shard / num_shards, kTestHashSlots * (shard + 1) / num_shards};
  h.optimizer = "ftrl lr=0.1";
  h.slots.resize(2);
  const uint64_t seed_of_table = NameHash(h.name);
  for (uint64_t id : TestCheckpointIds()) {
    if (h.owned.Contains(IdSlot(id, seed_of_table, kTestHashSlots))) h.ids.push_back(id);
  }
  SortBySlotThenId(h.ids, seed_of_table, kTestHashSlots);  // a generation's order
  h.stored_rows = h.ids.size();
  fill(h, 3, h.ids);
  s.tables.push_back(std::move(h));
  return s;
}

// Writes generation `clock` of every shard into `checkpoint_dir`/shard-<i>.
inline Status WriteTestCheckpoint(const std::string& checkpoint_dir, uint32_t num_shards,
                                  int64_t clock, bool formula, uint32_t seed = 1) {
  for (uint32_t s = 0; s < num_shards; ++s) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointDir> dir,
                        CheckpointDir::Open(ShardCheckpointDir(checkpoint_dir, s)));
    CheckpointWriteOptions o;
    o.sync = false;
    o.keep = 10;
    PS_RETURN_IF_ERROR(dir->Write(TestCheckpointShard(s, num_shards, clock, formula, seed), o));
  }
  return Status::Ok();
}

}  // namespace ps

#endif  // PS_TESTS_UTIL_TEST_CHECKPOINT_H_
