// Eviction in a hash-keyed table (store/hashed_rows.h, `evict`): lru and
// lfu at the bound and idle_clocks, checked against a plain reference
// model of the same rules under random pushes; a push never evicts a row
// it names; an evicted id reads as its initial value again; and the rows
// evicted follow from the pushes alone, not from where rows lie in memory
// (a table restored in another order evicts the same rows).
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/update_rule.h"
#include "store/hashed_rows.h"
#include "store/shard_store.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

const OptimizerOptions kAdd{OptimizerKind::kAdd, 0.0f};

EvictOptions Evict(EvictPolicy policy, uint32_t idle_clocks = 0) {
  EvictOptions evict;
  evict.policy = policy;
  evict.idle_clocks = idle_clocks;
  return evict;
}

// Adds 1 to the row of each id at `clock`.
HashedRows::PushCounts Push(HashedRows& rows, std::vector<uint64_t> ids, int64_t clock = 0) {
  const std::vector<float> ones(ids.size() * rows.dim(), 1.0f);
  return rows.Apply(ids, ones.data(), *FindRule(OptimizerKind::kAdd), kAdd, 0.0f, 1, true, clock);
}

std::vector<uint64_t> Ids(const HashedRows& rows) {
  std::vector<uint64_t> ids;
  for (uint64_t r = 0; r < rows.size(); ++r) ids.push_back(rows.id(r));
  std::sort(ids.begin(), ids.end());
  return ids;
}

TEST(HashedEvictionTest, LruEvictsTheRowPushedLeastRecently) {
  HashedRows rows(1, 0, InitOptions(), 4, Evict(EvictPolicy::kLru));
  for (uint64_t id : {1, 2, 3, 4}) Push(rows, {id});
  Push(rows, {1});
  HashedRows::PushCounts counts = Push(rows, {5});
  EXPECT_EQ(counts.evicted, 1u);
  EXPECT_EQ(counts.dropped, 0u);
  EXPECT_EQ(Ids(rows), (std::vector<uint64_t>{1, 3, 4, 5}));
  // The evicted id starts again from its initial value.
  counts = Push(rows, {2});
  EXPECT_EQ(counts.evicted, 1u);  // 3 now
  EXPECT_EQ(rows.Find(2)[0], 1.0f);
  EXPECT_EQ(rows.Find(1)[0], 2.0f);
  EXPECT_EQ(Ids(rows), (std::vector<uint64_t>{1, 2, 4, 5}));
}

TEST(HashedEvictionTest, LfuEvictsTheLeastPushedClassAndInItTheLeastRecent) {
  HashedRows rows(1, 0, InitOptions(), 4, Evict(EvictPolicy::kLfu));
  // Pushes: 1 x4 (class 4-7), 2 x2 (class 2-3), 3 and 4 once (class 1).
  for (uint64_t id : {1, 2, 3, 4, 1, 2, 1, 1}) Push(rows, {id});
  Push(rows, {5});  // evicts 3: class 1, pushed before 4
  EXPECT_EQ(Ids(rows), (std::vector<uint64_t>{1, 2, 4, 5}));
  Push(rows, {6});  // 4
  Push(rows, {7});  // 5
  EXPECT_EQ(Ids(rows), (std::vector<uint64_t>{1, 2, 6, 7}));
  Push(rows, {6});  // 6 joins class 2-3 after 2
  Push(rows, {8});  // 7, the last of class 1
  Push(rows, {9});  // 8
  EXPECT_EQ(Ids(rows), (std::vector<uint64_t>{1, 2, 6, 9}));
  EXPECT_EQ(rows.use(0).uses + rows.use(1).uses + rows.use(2).uses + rows.use(3).uses, 4u + 2u + 2u + 1u);
}

TEST(HashedEvictionTest, APushNeverEvictsARowItNames) {
  HashedRows rows(1, 0, InitOptions(), 3, Evict(EvictPolicy::kLru));
  for (uint64_t id : {1, 2, 3}) Push(rows, {id});
  // 1 and 2 are the least recent, but the push names them: 3 goes.
  HashedRows::PushCounts counts = Push(rows, {1, 4, 2});
  EXPECT_EQ(counts.evicted, 1u);
  EXPECT_EQ(Ids(rows), (std::vector<uint64_t>{1, 2, 4}));
  EXPECT_EQ(rows.Find(1)[0], 2.0f);
  // More new ids than the table holds: the push's own rows stay, the rest
  // is dropped.
  counts = Push(rows, {10, 11, 12, 13});
  EXPECT_EQ(counts.evicted, 3u);
  EXPECT_EQ(counts.made, 3u);
  EXPECT_EQ(counts.dropped, 1u);
  EXPECT_EQ(Ids(rows), (std::vector<uint64_t>{10, 11, 12}));
}

TEST(HashedEvictionTest, WithoutAPolicyTheBoundDropsAndIdleRowsStillGo) {
  HashedRows rows(1, 0, InitOptions(), 2, Evict(EvictPolicy::kNone, 3));
  Push(rows, {1}, 0);
  Push(rows, {2}, 1);
  HashedRows::PushCounts counts = Push(rows, {3}, 2);
  EXPECT_EQ(counts.dropped, 1u);  // full, and nothing is idle yet
  EXPECT_EQ(counts.expired, 0u);
  // At clock 3, a row last pushed at clock 0 has been idle for 3 clocks.
  counts = Push(rows, {2}, 3);
  EXPECT_EQ(counts.expired, 1u);
  EXPECT_EQ(Ids(rows), (std::vector<uint64_t>{2}));
  counts = Push(rows, {3}, 5);
  EXPECT_EQ(counts.expired, 0u);  // 2 was pushed at clock 3
  counts = Push(rows, {3}, 6);
  EXPECT_EQ(counts.expired, 1u);
  EXPECT_EQ(Ids(rows), (std::vector<uint64_t>{3}));
}

TEST(HashedEvictionTest, ARefusedPushKeepsItsRowsAndTheRowsEvictedForIt) {
  HashedRows rows(1, 0, InitOptions(), 3, Evict(EvictPolicy::kLru));
  for (uint64_t id : {1, 2, 3}) Push(rows, {id});
  const std::vector<uint64_t> ids = {3, 4, 5};
  const std::vector<float> grads = {1.0f, 1.0f, std::numeric_limits<float>::infinity()};
  const HashedRows::PushCounts counts =
      rows.Apply(ids, grads.data(), *FindRule(OptimizerKind::kAdd), kAdd, 0.0f, 1, true, 0);
  EXPECT_EQ(counts.refused, 1u);
  EXPECT_EQ(counts.refused_id, 5u);
  EXPECT_EQ(counts.evicted, 2u);  // 1 and 2, for 4 and 5
  EXPECT_EQ(Ids(rows), (std::vector<uint64_t>{3}));
  EXPECT_EQ(rows.Find(3)[0], 1.0f);
  // The table still works: its lists lost only the refused rows.
  Push(rows, {6});
  Push(rows, {7});
  Push(rows, {8});  // evicts 3, pushed before 6 and 7
  EXPECT_EQ(Ids(rows), (std::vector<uint64_t>{6, 7, 8}));
}

// The rules of store/hashed_rows.h, written plainly: a map of rows by id,
// victims found by scanning it.
class Reference {
 public:
  Reference(EvictOptions evict, uint64_t max_rows) : evict_(evict), max_rows_(max_rows) {}

  void Push(const std::vector<uint64_t>& ids, uint32_t clock) {
    const uint64_t push = next_seq_;
    if (evict_.policy != EvictPolicy::kNone && rows_.size() + ids.size() > max_rows_) {
      for (uint64_t id : ids) {
        if (rows_.count(id) != 0) Touch(id, push, clock);
      }
    }
    for (uint64_t id : ids) {
      if (rows_.count(id) == 0 && rows_.size() >= max_rows_ && evict_.policy != EvictPolicy::kNone) {
        const auto victim = Victim(push);
        if (victim != rows_.end()) rows_.erase(victim);
      }
      if (rows_.count(id) != 0) {
        Touch(id, push, clock);
        rows_[id].value += 1;
      } else if (rows_.size() < max_rows_) {
        rows_[id] = Row{{next_seq_++, clock, 1}, 1.0f};
      }
    }
    if (evict_.idle_clocks > 0 && clock >= evict_.idle_clocks) {
      std::erase_if(rows_, [&](const auto& kv) {
        return kv.second.use.clock < clock - evict_.idle_clocks + 1;
      });
    }
  }

  struct Row {
    RowUse use;
    float value = 0;
  };
  const std::map<uint64_t, Row>& rows() const { return rows_; }

 private:
  void Touch(uint64_t id, uint64_t push, uint32_t clock) {
    RowUse& use = rows_[id].use;
    if (use.seq >= push) return;
    use = {next_seq_++, clock, use.uses + 1};
  }
  uint32_t Class(uint32_t uses) const {
    return evict_.policy == EvictPolicy::kLfu ? std::min<uint32_t>(std::bit_width(uses), 16) : 0;
  }
  std::map<uint64_t, Row>::iterator Victim(uint64_t push) {
    auto best = rows_.end();
    for (auto it = rows_.begin(); it != rows_.end(); ++it) {
      const RowUse& u = it->second.use;
      if (u.seq >= push) continue;
      if (best == rows_.end() ||
          std::pair(Class(u.uses), u.seq) <
              std::pair(Class(best->second.use.uses), best->second.use.seq)) {
        best = it;
      }
    }
    return best;
  }

  const EvictOptions evict_;
  const uint64_t max_rows_;
  std::map<uint64_t, Row> rows_;
  uint64_t next_seq_ = 1;
};

// Random pushes of 1 to 8 ids (skewed: low ids often, some named twice),
// the clock advancing every 10 pushes.
std::vector<std::vector<uint64_t>> RandomPushes(size_t count, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint64_t>> pushes(count);
  for (auto& ids : pushes) {
    const size_t n = 1 + rng() % 8;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t r = rng() % 1000;
      ids.push_back(r < 600 ? r % 40 : r % 300);
    }
  }
  return pushes;
}

void ExpectSame(const HashedRows& rows, const Reference& ref, size_t push) {
  ASSERT_EQ(rows.size(), ref.rows().size()) << "after push " << push;
  for (const auto& [id, want] : ref.rows()) {
    const float* row = rows.Find(id);
    ASSERT_NE(row, nullptr) << "id " << id << " after push " << push;
    ASSERT_EQ(row[0], want.value) << "id " << id << " after push " << push;
  }
  for (uint64_t r = 0; r < rows.size(); ++r) {
    const RowUse got = rows.use(r), want = ref.rows().at(rows.id(r)).use;
    ASSERT_EQ(got.seq, want.seq) << "id " << rows.id(r) << " after push " << push;
    ASSERT_EQ(got.clock, want.clock) << "id " << rows.id(r);
    ASSERT_EQ(got.uses, want.uses) << "id " << rows.id(r);
  }
}

TEST(HashedEvictionTest, EvictsAsAPlainReferenceModelDoesUnderRandomPushes) {
  for (const EvictOptions evict :
       {Evict(EvictPolicy::kLru), Evict(EvictPolicy::kLfu), Evict(EvictPolicy::kLru, 7),
        Evict(EvictPolicy::kLfu, 5), Evict(EvictPolicy::kNone, 3)}) {
    SCOPED_TRACE(std::string(NameOf(kEvictPolicyNames, evict.policy)) + " idle_clocks " +
                 std::to_string(evict.idle_clocks));
    HashedRows rows(1, 0, InitOptions(), 64, evict);
    Reference ref(evict, 64);
    const auto pushes = RandomPushes(4000, 11);
    for (size_t p = 0; p < pushes.size(); ++p) {
      const auto clock = static_cast<uint32_t>(p / 10);
      Push(rows, pushes[p], clock);
      ref.Push(pushes[p], clock);
      ExpectSame(rows, ref, p);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(HashedEvictionTest, ATableRestoredInAnotherOrderEvictsTheSameRows) {
  const EvictOptions evict = Evict(EvictPolicy::kLfu, 9);
  HashedRows a(1, 0, InitOptions(), 64, evict);
  const auto pushes = RandomPushes(3000, 5);
  for (size_t p = 0; p < 1500; ++p) Push(a, pushes[p], static_cast<int64_t>(p / 10));
  // b: a's rows and uses, restored in a shuffled order.
  HashedRows b(1, 0, InitOptions(), 64, evict);
  std::vector<uint64_t> order(a.size());
  for (uint64_t r = 0; r < a.size(); ++r) order[r] = r;
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  for (uint64_t r : order) {
    const RowUse use = a.use(r);
    float* row = b.Restore(a.id(r), &use);
    ASSERT_NE(row, nullptr);
    row[0] = a.row(r)[0];
  }
  uint64_t evicted = 0;
  for (size_t p = 1500; p < pushes.size(); ++p) {
    const auto clock = static_cast<int64_t>(p / 10);
    const HashedRows::PushCounts ca = Push(a, pushes[p], clock), cb = Push(b, pushes[p], clock);
    ASSERT_EQ(ca.evicted, cb.evicted) << "push " << p;
    ASSERT_EQ(ca.expired, cb.expired) << "push " << p;
    evicted += ca.evicted + ca.expired;
  }
  EXPECT_GT(evicted, 100u);  // the stream did evict
  ASSERT_EQ(Ids(a), Ids(b));
  for (uint64_t id : Ids(a)) {
    EXPECT_EQ(a.Find(id)[0], b.Find(id)[0]) << "id " << id;
  }
}

// A store's evicting table copied for a joining replica (CopyIds) and
// through a checkpoint's snapshot: each copy takes the rows' uses, so the
// same pushes after it evict the same rows as the original's.
TEST(HashedEvictionTest, CopiesForAReplicaOrACheckpointEvictAsTheOriginal) {
  TableOptions e = TestTable("e", 0, 2, OptimizerKind::kAdd);
  e.keys = KeyKind::kHashed;
  e.max_rows = 200;
  e.evict.policy = EvictPolicy::kLfu;
  e.evict.idle_clocks = 5;
  const JobOptions job = TestJob().Table(e).Build();
  ASSERT_OK(job.Validate());
  auto original = ShardStore::Create(job, 0).value();
  const auto pushes = RandomPushes(400, 17);
  const auto push = [&](ShardStore& store, size_t p) {
    std::vector<uint64_t> ids = pushes[p];
    for (uint64_t& id : ids) id = id * 7 + p % 3;  // beyond the bound over a few clocks
    const std::vector<float> values(ids.size() * 2, 1.0f);
    Request r;
    r.header.op = Op::kPush;
    r.header.count = ids.size();
    r.header.dim = 2;
    r.keys = ids;
    r.values = values;
    ASSERT_OK(store.ApplyPush(r, static_cast<int64_t>(p / 20)));
  };
  for (size_t p = 0; p < 200; ++p) push(*original, p);
  ASSERT_GT(original->evicted_rows(0) + original->expired_rows(0), 0u);

  auto replica = ShardStore::Create(job, 0).value();
  const uint64_t rows = original->stored_rows(0), chunk = 7;
  for (uint64_t first = 0; first < rows; first += chunk) {
    std::vector<Frame> frames;
    const uint64_t n = std::min(chunk, rows - first);
    ASSERT_OK(original->CopyIds(0, first, n, &frames));
    ASSERT_EQ(frames.size(), 3u);  // ids, rows, uses
    std::vector<uint64_t> ids(n);
    std::memcpy(ids.data(), frames[0].data(), n * sizeof(uint64_t));
    ASSERT_OK(replica->RestoreIds(0, ids, reinterpret_cast<const std::byte*>(frames[1].data()),
                                  reinterpret_cast<const std::byte*>(frames[2].data())));
  }
  auto restored = ShardStore::Create(job, 0, false).value();
  const StatusOr<ShardSnapshot> snapshot = original->Snapshot(job, 0, 10);
  ASSERT_OK(snapshot);
  ASSERT_TRUE(snapshot->tables[0].row_uses);
  ASSERT_EQ(snapshot->tables[0].uses.size(), rows);
  restored->Restore(*snapshot);
  ASSERT_EQ(replica->Checksum(0), original->Checksum(0));
  ASSERT_EQ(restored->Checksum(0), original->Checksum(0));

  const uint64_t evicted_before = original->evicted_rows(0) + original->expired_rows(0);
  for (size_t p = 200; p < pushes.size(); ++p) {
    for (ShardStore* store : {original.get(), replica.get(), restored.get()}) push(*store, p);
    ASSERT_EQ(replica->Checksum(0), original->Checksum(0)) << "push " << p;
    ASSERT_EQ(restored->Checksum(0), original->Checksum(0)) << "push " << p;
  }
  EXPECT_GT(original->evicted_rows(0) + original->expired_rows(0), evicted_before + 50);
}

}  // namespace
}  // namespace ps
