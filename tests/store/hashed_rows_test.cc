// The rows of a hash-keyed table (store/hashed_rows.h): a missing id reads
// as its initial value and stores nothing, a push makes its row, the index
// agrees with a reference map under any mix of makes and erases, the bound
// holds, and updates are the dense tables' own, non-finite results
// included.
#include "store/hashed_rows.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

#include "common/update_rule.h"
#include "store/shard_store.h"

namespace ps {
namespace {

InitOptions Uniform(uint64_t seed) {
  InitOptions init;
  init.kind = InitKind::kUniform;
  init.value = 0.5f;
  init.seed = seed;
  return init;
}

OptimizerOptions Optimizer(OptimizerKind kind, float lr = 0.1f) {
  OptimizerOptions o;
  o.kind = kind;
  o.lr = lr;
  return o;
}

std::vector<float> Initial(const InitOptions& init, uint64_t id, uint32_t dim) {
  std::vector<float> v(dim);
  for (uint32_t c = 0; c < dim; ++c) v[c] = InitialValue(init, id, c);
  return v;
}

std::vector<float> Read(const HashedRows& rows, uint64_t id) {
  std::vector<float> v(rows.dim());
  rows.Gather({&id, 1}, v.data());
  return v;
}

TEST(HashedRowsTest, AMissingIdReadsAsItsInitialValueAndStoresNothing) {
  const InitOptions init = Uniform(7);
  HashedRows rows(4, 0, init, 100);
  const std::vector<uint64_t> ids = {0, 1, 42, std::numeric_limits<uint64_t>::max(),
                                     0x9e3779b97f4a7c15ull};
  std::vector<float> out(ids.size() * 4);
  rows.Gather(ids, out.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(std::vector<float>(out.begin() + i * 4, out.begin() + (i + 1) * 4),
              Initial(init, ids[i], 4))
        << "id " << ids[i];
  }
  EXPECT_EQ(rows.size(), 0u);
  EXPECT_EQ(rows.Find(42), nullptr);
  EXPECT_EQ(rows.bytes(), 0u);  // nothing until a push makes a row
  // Another table's seed gives other values for the same id.
  EXPECT_NE(Read(rows, 42), Initial(Uniform(8), 42, 4));
}

TEST(HashedRowsTest, APushMakesTheRowFromItsInitialValue) {
  const InitOptions init = Uniform(3);
  HashedRows rows(3, 0, init, 100);
  const uint64_t id = 123456789;
  const std::vector<float> grad = {1.0f, -2.0f, 0.5f};
  const OptimizerOptions sgd = Optimizer(OptimizerKind::kSgd, 0.1f);
  const HashedRows::PushCounts counts =
      rows.Apply({&id, 1}, grad.data(), *FindRule(OptimizerKind::kSgd), sgd, 0.1f, 1, true);
  EXPECT_EQ(counts.made, 1u);
  EXPECT_EQ(rows.size(), 1u);
  std::vector<float> expected = Initial(init, id, 3);
  ApplyOptimizer(sgd, expected.data(), {}, grad.data(), 3, 0.1f, 1);
  EXPECT_EQ(Read(rows, id), expected);
  // Erased, it reads as its initial value again.
  EXPECT_TRUE(rows.Erase(id));
  EXPECT_FALSE(rows.Erase(id));
  EXPECT_EQ(Read(rows, id), Initial(init, id, 3));
  EXPECT_EQ(rows.size(), 0u);
}

// Adam's two state arrays live in the row beside its values: each row
// ends bit for bit as a dense table's row given the same pushes.
TEST(HashedRowsTest, OptimizerStateLivesInTheRowAndMatchesTheDenseUpdate) {
  constexpr uint32_t kDim = 5;
  const InitOptions init = Uniform(11);
  OptimizerOptions adam = Optimizer(OptimizerKind::kAdam, 0.01f);
  const UpdateRule& rule = *FindRule(OptimizerKind::kAdam);
  ASSERT_EQ(adam.Slots(), 2u);
  HashedRows rows(kDim, 2, init, 1000);
  EXPECT_EQ(rows.stride(), 3u * kDim);
  const std::vector<uint64_t> ids = {5, 77, 5, 900000000000ull};  // 5 twice: updated twice
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  std::unordered_map<uint64_t, std::vector<float>> values, m, v;
  for (int step = 1; step <= 3; ++step) {
    std::vector<float> grads(ids.size() * kDim);
    for (float& g : grads) g = normal(rng);
    rows.Apply(ids, grads.data(), rule, adam, 0.01f, step, true);
    for (size_t i = 0; i < ids.size(); ++i) {
      auto [it, fresh] = values.try_emplace(ids[i], Initial(init, ids[i], kDim));
      m.try_emplace(ids[i], std::vector<float>(kDim, 0.0f));
      v.try_emplace(ids[i], std::vector<float>(kDim, 0.0f));
      ApplyOptimizer(adam, it->second.data(), {m[ids[i]].data(), v[ids[i]].data()},
                     grads.data() + i * kDim, kDim, 0.01f, step);
    }
  }
  EXPECT_EQ(rows.size(), 3u);
  for (const auto& [id, expected] : values) {
    const float* row = rows.Find(id);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(std::vector<float>(row, row + kDim), expected) << "id " << id;
    EXPECT_EQ(std::vector<float>(row + kDim, row + 2 * kDim), m[id]) << "id " << id;
    EXPECT_EQ(std::vector<float>(row + 2 * kDim, row + 3 * kDim), v[id]) << "id " << id;
  }
}

// Any mix of makes and erases, ids drawn from a small space (so both hit
// often) and from all 64 bits: the rows agree with a reference map.
TEST(HashedRowsTest, MakesAndErasesAgreeWithAReferenceMap) {
  constexpr uint32_t kDim = 2;
  HashedRows rows(kDim, 0, InitOptions(), 100000);
  std::unordered_map<uint64_t, float> reference;  // id -> its first value
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t id = (rng() & 1) ? rng() % 5000 : rng();
    if (rng() % 3 == 0) {
      EXPECT_EQ(rows.Erase(id), reference.erase(id) == 1) << "erase " << id;
      continue;
    }
    bool made = false;
    float* row = rows.FindOrMake(id, &made);
    ASSERT_NE(row, nullptr);
    EXPECT_EQ(made, reference.count(id) == 0) << "id " << id;
    if (made) {
      row[0] = static_cast<float>(i);
      reference[id] = static_cast<float>(i);
    }
    EXPECT_EQ(row[0], reference[id]) << "id " << id;
  }
  ASSERT_EQ(rows.size(), reference.size());
  for (uint64_t r = 0; r < rows.size(); ++r) {
    const uint64_t id = rows.id(r);
    ASSERT_EQ(reference.count(id), 1u) << "id " << id;
    EXPECT_EQ(rows.row(r)[0], reference[id]);
    EXPECT_EQ(rows.Find(id), rows.row(r));
  }
  // Emptied, the rows' chunks are given back (the index keeps its size).
  const size_t held = rows.bytes();
  const size_t row_floats = rows.size() * rows.stride() * sizeof(float);
  for (const auto& [id, value] : reference) ASSERT_TRUE(rows.Erase(id));
  EXPECT_EQ(rows.size(), 0u);
  EXPECT_LE(rows.bytes(), held - row_floats);
}

// At its fullest (a bound the index reaches without doubling: 7/8 of its
// entries) and under churn (every erase followed by a new id), probes
// past full groups stay right as erases take their overflow back: every
// row is found, every erased id reads as missing, and a pull of many ids
// at once (Gather's read-ahead) reads what each id's row holds.
TEST(HashedRowsTest, AFullIndexUnderChurnFindsEveryRowAndNoErasedOne) {
  constexpr uint64_t kRows = 10752;  // 7/8 of 1,024 groups of 12 entries
  const InitOptions init = Uniform(11);
  HashedRows rows(1, 0, init, kRows);
  std::unordered_map<uint64_t, float> reference;  // id -> its value
  std::vector<uint64_t> present;
  std::mt19937_64 rng(13);
  const auto make = [&](float value) {
    const uint64_t id = rng();
    bool made = false;
    float* row = rows.FindOrMake(id, &made);
    ASSERT_NE(row, nullptr);
    ASSERT_TRUE(made);
    *row = value;
    reference[id] = value;
    present.push_back(id);
  };
  for (uint64_t i = 0; i < kRows; ++i) make(static_cast<float>(i));
  ASSERT_TRUE(rows.full());
  const size_t full_bytes = rows.bytes();
  std::vector<uint64_t> erased;
  for (int op = 0; op < 60000; ++op) {
    const size_t at = rng() % present.size();
    const uint64_t gone = present[at];
    present[at] = present.back();
    present.pop_back();
    ASSERT_TRUE(rows.Erase(gone)) << "id " << gone;
    reference.erase(gone);
    erased.push_back(gone);
    make(static_cast<float>(op));
    if (op % 6000 != 0) continue;
    // Everything at once: the rows, the erased ids, and each twice.
    std::vector<uint64_t> ids(present);
    ids.insert(ids.end(), erased.end() - std::min<size_t>(erased.size(), 3000), erased.end());
    ids.insert(ids.end(), present.begin(), present.begin() + 1000);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<float> out(ids.size());
    rows.Gather(ids, out.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto it = reference.find(ids[i]);
      const float want = it != reference.end() ? it->second : InitialValue(init, ids[i], 0);
      ASSERT_EQ(out[i], want) << "id " << ids[i] << " at op " << op;
      ASSERT_EQ(rows.Find(ids[i]) != nullptr, it != reference.end()) << "id " << ids[i];
    }
  }
  EXPECT_EQ(rows.size(), kRows);
  EXPECT_EQ(rows.bytes(), full_bytes) << "churn at the bound should not grow the index";
  for (uint64_t r = 0; r < rows.size(); ++r) ASSERT_EQ(rows.row(r)[0], reference.at(rows.id(r)));
}

// The index doubles in steps: while its old entries move, every row is
// still found (in the old index or the new), by Find and by a pull of any
// number of ids (Gather works through them in chunks: fewer
// than a chunk, a chunk, a chunk and one, several), and erases reach either.
TEST(HashedRowsTest, TheIndexDoublesInStepsAndEveryRowStaysFound) {
  const InitOptions init = Uniform(5);
  HashedRows rows(1, 0, init, 100000);
  std::unordered_map<uint64_t, float> kept;  // id -> its row's value
  std::mt19937_64 rng(3);
  std::vector<uint64_t> ids;
  for (uint64_t n = 0; n < 6000; ++n) {
    const uint64_t id = rng();
    ids.push_back(id);
    bool made = false;
    float* row = rows.FindOrMake(id, &made);
    ASSERT_NE(row, nullptr);
    ASSERT_TRUE(made);
    *row = static_cast<float>(n + 1);
    kept[id] = *row;
    if (n % 3 == 0) {  // erase an earlier id, wherever its entry lies now
      const uint64_t gone = ids[rng() % ids.size()];
      ASSERT_EQ(rows.Erase(gone), kept.erase(gone) == 1) << "id " << gone;
    }
    if (n % 97 != 0) continue;
    for (const uint64_t k : ids) ASSERT_EQ(rows.Find(k) != nullptr, kept.contains(k)) << "id " << k;
    for (const size_t length : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17},
                                size_t{33}, size_t{50}, ids.size()}) {
      std::vector<uint64_t> pull(length);
      for (uint64_t& k : pull) k = ids[rng() % ids.size()];
      std::vector<float> out(length);
      rows.Gather(pull, out.data());
      for (size_t i = 0; i < length; ++i) {
        const auto it = kept.find(pull[i]);
        ASSERT_EQ(out[i], it != kept.end() ? it->second : InitialValue(init, pull[i], 0))
            << "id " << pull[i] << " of a pull of " << length << " after " << n + 1 << " rows";
      }
    }
  }
  EXPECT_EQ(rows.size(), kept.size());
}

// A table that stops growing right after its index doubled (its ids all
// have rows, or it is at its bound) still ends the doubling: pushes of ids
// it holds move the old index's entries too, and its memory falls back to
// one index within a few pushes.
TEST(HashedRowsTest, PushesOfKnownIdsEndADoubling) {
  HashedRows rows(1, 0, InitOptions(), 1000000);
  std::vector<uint64_t> ids;
  std::mt19937_64 rng(7);
  size_t before = 0;
  // Rows until the index doubles: bytes() jumps by more than a row.
  for (;;) {
    ids.push_back(rng());
    ASSERT_NE(rows.FindOrMake(ids.back(), nullptr), nullptr);
    if (before != 0 && rows.bytes() > before + 4096) break;
    before = rows.bytes();
    ASSERT_LT(ids.size(), 100000u);
  }
  const size_t doubling = rows.bytes();
  const OptimizerOptions add = Optimizer(OptimizerKind::kAdd);
  std::vector<float> grads(64, 1.0f);
  for (int push = 0; push < 64 && rows.bytes() == doubling; ++push) {
    std::vector<uint64_t> known(64);
    for (uint64_t& id : known) id = ids[rng() % ids.size()];
    const HashedRows::PushCounts counts =
        rows.Apply(known, grads.data(), *FindRule(OptimizerKind::kAdd), add, 0.0f, 1, true);
    ASSERT_EQ(counts.made, 0u);
  }
  EXPECT_LT(rows.bytes(), doubling) << "the old index is still there after 64 pushes";
  for (uint64_t id : ids) ASSERT_NE(rows.Find(id), nullptr) << "id " << id;
}

// A table whose bound allows 64 MiB of rows or more keeps them in chunks
// of at least a 2 MiB page: rows made across several chunks and erased
// back (the last row moving into each erased one's place, empty chunks
// freed) keep their values.
TEST(HashedRowsTest, ALargeTableKeepsItsRowsAcrossChunksOfHugePages) {
  const InitOptions init = Uniform(9);
  HashedRows rows(16, 1, init, 1000000);  // 136 bytes a row: 130 MiB at the bound
  std::unordered_map<uint64_t, float> kept;
  std::mt19937_64 rng(21);
  std::vector<uint64_t> ids;
  for (int n = 0; n < 40000; ++n) {
    ids.push_back(rng());
    float* row = rows.FindOrMake(ids.back());
    ASSERT_NE(row, nullptr);
    for (uint32_t c = 0; c < 32; ++c) row[c] = static_cast<float>(n) + 0.5f * c;
    kept[ids.back()] = static_cast<float>(n);
  }
  const size_t full = rows.bytes();
  // At least 2 MiB of rows a chunk: 40,000 rows fill few chunks.
  EXPECT_GE(full, 40000u * 136);
  EXPECT_LE(full, 40000u * 136 + 3 * (4u << 20) + 2 * 64 * 8192);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (int n = 0; n < 30000; ++n) {
    ASSERT_TRUE(rows.Erase(ids.back()));
    kept.erase(ids.back());
    ids.pop_back();
  }
  EXPECT_LT(rows.bytes(), full) << "emptied chunks are freed";
  std::vector<float> out(ids.size() * 16);
  rows.Gather(ids, out.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    const float first = kept.at(ids[i]);
    for (uint32_t c = 0; c < 16; ++c) ASSERT_EQ(out[i * 16 + c], first + 0.5f * c) << ids[i];
    const float* row = rows.Find(ids[i]);
    ASSERT_NE(row, nullptr);
    for (uint32_t c = 16; c < 32; ++c) ASSERT_EQ(row[c], first + 0.5f * c) << ids[i];
  }
}

TEST(HashedRowsTest, RowsWithinABoundKeepItsBytesWithinIt) {
  const OptimizerOptions add = Optimizer(OptimizerKind::kAdd);
  const UpdateRule& rule = *FindRule(OptimizerKind::kAdd);
  struct Case {
    uint64_t bytes;
    uint32_t dim, slots;
  };
  for (const Case& c : {Case{1 << 20, 16, 0}, Case{1 << 20, 16, 2}, Case{3 << 20, 1, 0},
                        Case{5 << 20, 64, 1}, Case{(1 << 20) + 12345, 8, 2},
                        Case{uint64_t{80} << 20, 16, 1}}) {  // chunks of 2 MiB pages
   // With eviction each row also keeps its use.
   for (const bool use : {false, true}) {
    SCOPED_TRACE(std::to_string(c.bytes) + " bytes, dim " + std::to_string(c.dim) + ", slots " +
                 std::to_string(c.slots) + (use ? ", evicting" : ""));
    const uint64_t max_rows = HashedRows::RowsWithin(c.bytes, c.dim, c.slots, use);
    EvictOptions evict;
    if (use) evict.idle_clocks = 1000;
    HashedRows rows(c.dim, c.slots, InitOptions(), max_rows, evict);
    // Filled 64 rows at a time: within the bound after each push, also
    // while the index doubles (the old one and the new side by side).
    const std::vector<float> grads(64 * c.dim, 1.0f);
    uint64_t made = 0, dropped = 0, peak = 0;
    for (uint64_t first = 0; first < max_rows + 10; first += 64) {
      std::vector<uint64_t> ids;
      for (uint64_t i = first; i < std::min(first + 64, max_rows + 10); ++i) {
        ids.push_back(i * 0x9e3779b97f4a7c15ull);
      }
      const HashedRows::PushCounts counts = rows.Apply(ids, grads.data(), rule, add, 0.0f, 1, false);
      made += counts.made;
      dropped += counts.dropped;
      peak = std::max<uint64_t>(peak, rows.bytes());
    }
    EXPECT_EQ(made, max_rows);
    EXPECT_EQ(dropped, 10u);
    // Full, within the bound throughout, and using at least a third of it
    // (the index doubles: a bound between two of its sizes, or one that
    // could not hold a doubling to the next, leaves some unused).
    EXPECT_LE(peak, c.bytes);
    EXPECT_GE(rows.bytes(), c.bytes / 3);
   }
  }
}

TEST(HashedRowsTest, AFullTableMakesNoRowAndDropsItsPushes) {
  HashedRows rows(1, 0, InitOptions(), 3);
  const std::vector<uint64_t> ids = {10, 11, 12, 13, 10};
  const std::vector<float> grads = {1, 1, 1, 1, 1};
  const OptimizerOptions add = Optimizer(OptimizerKind::kAdd);
  const HashedRows::PushCounts counts =
      rows.Apply(ids, grads.data(), *FindRule(OptimizerKind::kAdd), add, 0.0f, 1, true);
  EXPECT_EQ(counts.made, 3u);
  EXPECT_EQ(counts.dropped, 1u);  // 13: no room
  EXPECT_TRUE(rows.full());
  EXPECT_EQ(rows.Find(13), nullptr);
  EXPECT_EQ(rows.Find(10)[0], 2.0f);  // its row still takes pushes
}

TEST(HashedRowsTest, ANonFiniteResultRefusesTheWholePushOrIsTakenAsThePolicySays) {
  const uint64_t known = 1, fresh = 2, other = 3;
  const float big = std::numeric_limits<float>::max();
  const OptimizerOptions add = Optimizer(OptimizerKind::kAdd);
  const UpdateRule& rule = *FindRule(OptimizerKind::kAdd);
  HashedRows rows(1, 0, InitOptions(), 10);
  const float one = 1.0f;
  rows.Apply({&known, 1}, &one, rule, add, 0.0f, 1, true);
  // Refused: no row of the push changes. `known` is named twice (its first
  // update is finite) and `other` is made before `fresh` overflows: both
  // are put back, and the rows made by the push go again.
  const std::vector<uint64_t> ids = {known, other, known, fresh};
  const std::vector<float> overflow = {big, 5.0f, 2.0f, std::numeric_limits<float>::infinity()};
  HashedRows::PushCounts counts = rows.Apply(ids, overflow.data(), rule, add, 0.0f, 1, true);
  EXPECT_EQ(counts.refused, 1u);
  EXPECT_EQ(counts.refused_id, fresh);
  EXPECT_EQ(counts.made, 0u);
  EXPECT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows.Find(known)[0], 1.0f);
  EXPECT_EQ(rows.Find(other), nullptr);
  EXPECT_EQ(rows.Find(fresh), nullptr);
  // Taken (flag): the results stay.
  counts = rows.Apply(ids, overflow.data(), rule, add, 0.0f, 1, false);
  EXPECT_EQ(counts.non_finite, 1u);
  EXPECT_EQ(counts.refused, 0u);
  EXPECT_EQ(counts.made, 2u);
  EXPECT_EQ(rows.Find(other)[0], 5.0f);
  EXPECT_TRUE(std::isinf(rows.Find(fresh)[0]));
}

TEST(HashedRowsTest, SubnormalResultsAreFlushedAsInDenseTables) {
  const uint64_t id = 9;
  HashedRows rows(1, 0, InitOptions(), 10);
  const OptimizerOptions add = Optimizer(OptimizerKind::kAdd);
  const float tiny = std::numeric_limits<float>::min() / 4;  // subnormal
  rows.Apply({&id, 1}, &tiny, *FindRule(OptimizerKind::kAdd), add, 0.0f, 1, true);
  EXPECT_EQ(rows.Find(id)[0], 0.0f);
}

// A row as a shared image (HashedRows::Share) or the table gives it: its
// id, floats, use and stamp.
struct RowState {
  uint64_t id;
  std::vector<float> floats;
  uint64_t seq;
  uint32_t uses;
  uint32_t stamp;
  bool operator==(const RowState&) const = default;
};

std::vector<RowState> StateOf(const HashedRows& rows) {
  std::vector<RowState> out;
  for (uint64_t r = 0; r < rows.size(); ++r) {
    const float* row = rows.row(r);
    const RowUse use = rows.tracks_use() ? rows.use(r) : RowUse();
    out.push_back({rows.id(r), std::vector<float>(row, row + rows.stride()), use.seq, use.uses,
                   rows.tracks_changes() ? rows.stamp(r) : 0});
  }
  return out;
}

std::vector<RowState> StateOf(const SharedHashedRows& image, size_t stride) {
  std::vector<RowState> out;
  std::vector<float> floats(image.row_floats);
  for (uint64_t r = 0; r < image.rows; ++r) {
    RowUse use;
    const SharedHashedRows::Row row = image.Read(r, floats.data(), &use);
    out.push_back({row.id, std::vector<float>(floats.begin(), floats.begin() + stride), use.seq,
                   use.uses, row.stamp});
  }
  return out;
}

// A table's rows shared as an image keep the state of their moment, ids,
// values, optimizer state, uses and stamps, while pushes update rows, make
// new ones, evict and erase (each moving the last row into the hole): the
// table saves each row it changes once, and only while the image is held;
// and the table itself ends as a twin that was never shared.
TEST(HashedRowsTest, ASharedImageKeepsItsMomentWhileRowsChangeMoveAndGo) {
  constexpr uint32_t kDim = 256;  // 64 rows a chunk
  const InitOptions init = Uniform(3);
  const OptimizerOptions adagrad = Optimizer(OptimizerKind::kAdagrad);
  const UpdateRule& rule = *FindRule(OptimizerKind::kAdagrad);
  EvictOptions evict;
  evict.policy = EvictPolicy::kLru;
  HashedRows rows(kDim, 1, init, 320, evict), twin(kDim, 1, init, 320, evict);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  const auto push = [&](const std::vector<uint64_t>& ids, int64_t clock) {
    std::vector<float> grads(ids.size() * kDim);
    for (float& g : grads) g = normal(rng);
    for (HashedRows* t : {&rows, &twin}) {
      t->Apply(ids, grads.data(), rule, adagrad, 0.1f, clock, false, clock);
    }
  };
  for (HashedRows* t : {&rows, &twin}) {
    t->TrackChanges();
    t->SetStamp(1);
  }
  std::vector<uint64_t> first(300);
  for (size_t i = 0; i < first.size(); ++i) first[i] = 1000 + 7 * i;
  push(first, 1);
  ASSERT_EQ(rows.size(), 300u);

  const std::vector<RowState> before = StateOf(rows);
  uint64_t saves = rows.saves();
  {
    const SharedHashedRows image = rows.Share();
    ASSERT_EQ(image.rows, 300u);
    ASSERT_EQ(image.chunks.size(), 5u);
    for (HashedRows* t : {&rows, &twin}) t->SetStamp(2);
    // Rows 0, 1 and 2 change, and each list neighbour whose links change.
    push({1000, 1007, 1014}, 2);
    EXPECT_GE(rows.saves(), saves + 3);
    EXPECT_LE(rows.saves(), saves + 9);
    const uint64_t after_first = rows.saves();
    push({1000, 1007}, 3);  // the same rows: saved once
    EXPECT_LE(rows.saves(), after_first + 2) << "a row saved twice";
    // Erases move the last rows into the holes; new ids past the bound
    // evict the least recently pushed rows.
    for (HashedRows* t : {&rows, &twin}) {
      ASSERT_TRUE(t->Erase(1000 + 7 * 10));
      ASSERT_TRUE(t->Erase(1000 + 7 * 150));
    }
    std::vector<uint64_t> fresh(60);
    for (size_t i = 0; i < fresh.size(); ++i) fresh[i] = 900000 + i;
    push(fresh, 4);
    EXPECT_EQ(rows.size(), 320u);
    EXPECT_LE(rows.saves(), saves + 300) << "a row saved twice";
    EXPECT_EQ(StateOf(image, rows.stride()), before) << "the image moved with the table";
  }
  // Released: writes save nothing.
  saves = rows.saves();
  push(first, 5);
  EXPECT_EQ(rows.saves(), saves);
  EXPECT_EQ(StateOf(rows), StateOf(twin));
}

// Rows that go, down to an empty last chunk that the table drops, and
// rows made again in a new chunk: the image still reads the dropped
// chunk's rows as they were, from the memory it holds.
TEST(HashedRowsTest, ASharedImageReadsTheRowsOfAChunkTheTableDropped) {
  constexpr uint32_t kDim = 256;  // 64 rows a chunk
  const UpdateRule& rule = *FindRule(OptimizerKind::kSgd);
  const OptimizerOptions sgd = Optimizer(OptimizerKind::kSgd);
  HashedRows rows(kDim, 0, Uniform(9), 1000);
  std::vector<uint64_t> ids(128);  // two chunks
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 50 + i;
  const std::vector<float> grads(ids.size() * kDim, 0.5f);
  rows.Apply(ids, grads.data(), rule, sgd, 0.1f, 1, false);
  const std::vector<RowState> before = StateOf(rows);
  const SharedHashedRows image = rows.Share();
  for (size_t i = 64; i < 128; ++i) ASSERT_TRUE(rows.Erase(ids[i]));  // the last chunk goes
  std::vector<uint64_t> again(64);
  for (size_t i = 0; i < again.size(); ++i) again[i] = 7000 + i;
  rows.Apply(again, grads.data(), rule, sgd, 0.1f, 2, false);
  EXPECT_EQ(rows.size(), 128u);
  EXPECT_EQ(StateOf(image, rows.stride()), before);
}

// The image read on another thread while this one pushes, erases and
// makes rows (as a checkpoint's writer reads a snapshot while the shard
// serves): every read, however it overlaps a write, gives the rows of the
// image's moment.
TEST(HashedRowsTest, ASharedImageReadOnAnotherThreadDuringWritesIsItsMoment) {
  constexpr uint32_t kDim = 32;
  const OptimizerOptions adagrad = Optimizer(OptimizerKind::kAdagrad);
  const UpdateRule& rule = *FindRule(OptimizerKind::kAdagrad);
  EvictOptions evict;
  evict.policy = EvictPolicy::kLfu;
  HashedRows rows(kDim, 1, Uniform(4), 20000, evict);
  rows.TrackChanges();
  std::mt19937_64 rng(11);
  const auto push = [&](size_t n, uint64_t space, int64_t clock) {
    std::vector<uint64_t> ids(n);
    for (uint64_t& id : ids) id = rng() % space;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    const std::vector<float> grads(ids.size() * kDim, 0.01f * static_cast<float>(clock));
    rows.Apply(ids, grads.data(), rule, adagrad, 0.1f, clock, false, clock);
  };
  push(20000, 30000, 1);
  for (int round = 0; round < 3; ++round) {
    const std::vector<RowState> before = StateOf(rows);
    const SharedHashedRows image = rows.Share();
    std::vector<std::vector<RowState>> reads;
    std::atomic<bool> writing{true};
    std::thread reader([&] {
      // Again and again while the writes go on (at most 100 reads).
      do {
        reads.push_back(StateOf(image, rows.stride()));
      } while (writing.load() && reads.size() < 100);
    });
    // Bounded: 200 pushes, with erases, whatever the reader's pace.
    for (int p = 0; p < 200; ++p) {
      rows.SetStamp(static_cast<uint32_t>(round * 1000 + p + 2));
      push(500, 40000, round * 1000 + p + 2);
      for (int e = 0; e < 20; ++e) rows.Erase(rng() % 40000);
    }
    writing = false;
    reader.join();
    EXPECT_GT(rows.saves(), 0u);
    for (const std::vector<RowState>& read : reads) {
      EXPECT_TRUE(read == before) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace ps
