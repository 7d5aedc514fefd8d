// Hash-keyed tables (keys: hashed) through the client and real shards in
// this process (tests/util/in_process_cluster.h): reads of ids without a
// row, rows made by pushes on the shard of their slot, the memory bound,
// refused results, 16-bit pulls and pushes (error feedback by id), and
// clocks under bsp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "client/client.h"
#include "common/hash_slots.h"
#include "common/wire_floats.h"
#include "store/shard_store.h"
#include "tests/util/in_process_cluster.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

TableOptions Hashed(std::string name, uint32_t dim, uint64_t max_rows,
                    OptimizerKind optimizer = OptimizerKind::kAdd) {
  TableOptions t = TestTable(std::move(name), 0, dim, optimizer);
  t.keys = KeyKind::kHashed;
  t.max_rows = max_rows;
  t.slots = 64;
  t.init.kind = InitKind::kUniform;
  t.init.value = 0.5f;
  t.init.seed = 17;
  return t;
}

JobOptions Job(uint32_t shards, TableOptions table) {
  return TestJob()
      .Servers(shards)
      .Workers(1)
      .Table("dense", 16, 4, OptimizerKind::kAdd)
      .Table(std::move(table))
      .RequestTimeoutMs(10000)
      .Build();
}

std::vector<float> Initial(const InitOptions& init, std::span<const uint64_t> ids, uint32_t dim) {
  std::vector<float> out;
  for (uint64_t id : ids) {
    for (uint32_t c = 0; c < dim; ++c) out.push_back(InitialValue(init, id, c));
  }
  return out;
}

std::vector<uint64_t> RandomIds(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::set<uint64_t> ids;
  while (ids.size() < n) ids.insert(rng());
  return {ids.begin(), ids.end()};
}

class HashedTableTest : public ::testing::Test {
 protected:
  void Start(JobOptions job) {
    job_ = std::move(job);
    ASSERT_OK(job_.Validate());
    cluster_ = std::make_unique<InProcessCluster>(job_);
    auto c = Client::Create(job_, 0, cluster_->endpoints());
    ASSERT_OK(c);
    client_ = std::move(*c);
  }
  // The hashed table's stats on every shard.
  std::vector<ShardStats::Table> TableStats() {
    std::vector<ShardStats::Table> out;
    for (uint32_t s = 0; s < job_.cluster.servers.size(); ++s) {
      StatusOr<ShardStats> stats = client_->StructuredStats(s);
      EXPECT_OK(stats);
      if (stats.ok()) out.push_back(stats->tables.at(1));
    }
    return out;
  }
  JobOptions job_;
  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<Client> client_;
};

TEST_F(HashedTableTest, IdsWithoutRowsReadAsTheirInitialValueAndStoreNothing) {
  Start(Job(3, Hashed("emb", 4, 1000)));
  const std::vector<uint64_t> ids = {0, 1, 42, 1ull << 40, std::numeric_limits<uint64_t>::max(),
                                     42};
  std::vector<float> out(ids.size() * 4, -9.0f);
  ASSERT_OK(client_->PullSync(1, ids, out.data()));
  EXPECT_EQ(out, Initial(job_.tables[1].init, ids, 4));
  // The initial value is the one a range table of the same init gives its
  // row of the same number: a one-process run agrees.
  EXPECT_EQ(out[2 * 4], InitialValue(job_.tables[1].init, 42, 0));
  for (const ShardStats::Table& t : TableStats()) {
    EXPECT_EQ(t.keys, "hashed");
    EXPECT_EQ(t.stored_rows, 0u);
    EXPECT_EQ(t.stored_bytes, 0u);
    EXPECT_EQ(t.max_rows, 1000u);
  }
}

TEST_F(HashedTableTest, PushesMakeRowsOnTheShardOfTheirSlot) {
  Start(Job(3, Hashed("emb", 2, 1000)));
  const TableOptions& t = job_.tables[1];
  const std::vector<uint64_t> ids = RandomIds(300, 5);
  std::vector<float> grads(ids.size() * 2);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 7) + 1.0f;
  // Twice, the second time with one id named twice in the push.
  ASSERT_OK(client_->PushSync(1, ids, SharedFloats::Take(std::vector<float>(grads))));
  std::vector<uint64_t> again = ids;
  again.push_back(ids[0]);
  std::vector<float> grads2 = grads;
  grads2.push_back(10.0f);
  grads2.push_back(20.0f);
  ASSERT_OK(client_->PushSync(1, again, SharedFloats::Take(std::move(grads2))));

  std::vector<float> out(ids.size() * 2);
  ASSERT_OK(client_->PullSync(1, ids, out.data()));
  const std::vector<float> init = Initial(t.init, ids, 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const float extra = i == 0 ? 10.0f : i == 1 ? 20.0f : 0.0f;
    EXPECT_FLOAT_EQ(out[i], init[i] + 2 * grads[i] + extra) << "value " << i;
  }
  // Each shard holds the ids of its slots, and only those.
  std::vector<uint64_t> expected(3, 0);
  for (uint64_t id : ids) ++expected[SlotShard(IdSlot(id, t.HashSeed(), 64), 64, 3)];
  const std::vector<ShardStats::Table> stats = TableStats();
  ASSERT_EQ(stats.size(), 3u);
  for (uint32_t s = 0; s < 3; ++s) {
    EXPECT_EQ(stats[s].stored_rows, expected[s]) << "shard " << s;
    EXPECT_GT(stats[s].stored_rows, 0u) << "shard " << s;
    const RowRange slots = ShardSlots(64, 3, s);
    EXPECT_EQ(stats[s].owned_begin, slots.begin);
    EXPECT_EQ(stats[s].owned_end, slots.end);
    EXPECT_GT(stats[s].stored_bytes, stats[s].stored_rows * 2 * sizeof(float));
  }
}

TEST_F(HashedTableTest, AShardAtItsBoundDropsThePushesOfNewIdsAndCountsThem) {
  Start(Job(1, Hashed("emb", 1, 4)));
  const std::vector<uint64_t> ids = {11, 12, 13, 14, 15, 16, 11};
  ASSERT_OK(client_->PushSync(1, ids, SharedFloats::Take({1, 1, 1, 1, 1, 1, 1})));
  std::vector<float> out(ids.size());
  ASSERT_OK(client_->PullSync(1, ids, out.data()));
  const InitOptions& init = job_.tables[1].init;
  EXPECT_FLOAT_EQ(out[0], InitialValue(init, 11, 0) + 2);  // a row that exists still learns
  EXPECT_FLOAT_EQ(out[3], InitialValue(init, 14, 0) + 1);
  EXPECT_EQ(out[4], InitialValue(init, 15, 0));  // dropped: reads its initial value
  EXPECT_EQ(out[5], InitialValue(init, 16, 0));
  const std::vector<ShardStats::Table> stats = TableStats();
  EXPECT_EQ(stats[0].stored_rows, 4u);
  EXPECT_EQ(stats[0].dropped_rows, 2u);
  StatusOr<std::string> text = client_->Stats(0);
  ASSERT_OK(text);
  EXPECT_NE(text->find("table emb keys hashed dim 1 slots [0, 64) stored_rows 4 max_rows 4"),
            std::string::npos)
      << *text;
  cluster_->Stop();  // MetricsText reads the shard's state off its thread
  const std::string metrics = cluster_->server(0).MetricsText();
  for (const char* line : {"ps_server_table_rows{shard=\"0\",table=\"emb\"} 4",
                           "ps_server_table_max_rows{shard=\"0\",table=\"emb\"} 4",
                           "ps_server_table_dropped_rows_total{shard=\"0\",table=\"emb\"} 2"}) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line << "\n" << metrics;
  }
}

TEST_F(HashedTableTest, MaxMbBoundsTheRowsByTheirMeasuredSize) {
  TableOptions t = Hashed("emb", 16, 0, OptimizerKind::kAdagrad);
  t.max_mb = 1;
  Start(Job(2, t));
  // 16 values and 16 of adagrad's state, an id, the index (its size for
  // those rows), within 1 MiB.
  for (const ShardStats::Table& s : TableStats()) {
    EXPECT_EQ(s.max_rows, HashedRows::RowsWithin(1 << 20, 16, 1));
    EXPECT_GT(s.max_rows, (1u << 19) / HashedRows::RowBytes(16, 1));
  }
}

TEST_F(HashedTableTest, AResultThatIsNotFiniteRefusesTheWholePush) {
  Start(Job(2, Hashed("emb", 1, 100)));
  const std::vector<uint64_t> ids = RandomIds(20, 9);
  ASSERT_OK(client_->PushSync(1, ids, SharedFloats::Take(std::vector<float>(20, 1.0f))));
  // ids[3] near the largest float, then a push that takes it past it.
  const uint64_t huge = ids[3];
  ASSERT_OK(client_->PushSync(1, {&huge, 1},
                              SharedFloats::Take({std::numeric_limits<float>::max()})));
  std::vector<float> before(20);
  ASSERT_OK(client_->PullSync(1, ids, before.data()));
  // The overflowing row between ordinary ones, one of them new.
  std::vector<uint64_t> push = {ids[7], ids[3], 777};
  std::vector<float> grads = {1.0f, std::numeric_limits<float>::max(), 1.0f};
  Status refused = client_->PushSync(1, push, SharedFloats::Take(std::move(grads)));
  EXPECT_EQ(refused.code(), StatusCode::kOutOfRange) << refused.ToString();
  EXPECT_NE(refused.message().find("no row of the push was applied"), std::string::npos)
      << refused.ToString();
  std::vector<float> after(20);
  ASSERT_OK(client_->PullSync(1, ids, after.data()));
  EXPECT_EQ(after, before);
}

TEST_F(HashedTableTest, PullsInSixteenBitsAreTheRoundedValues) {
  TableOptions t = Hashed("emb", 3, 100);
  t.wire.pull = WireType::kBf16;
  Start(Job(2, t));
  const std::vector<uint64_t> ids = RandomIds(40, 3);
  std::vector<float> out(ids.size() * 3);
  ASSERT_OK(client_->PullSync(1, ids, out.data()));
  std::vector<float> init = Initial(t.init, ids, 3);
  std::vector<uint16_t> encoded(init.size());
  EncodeFloats(WireType::kBf16, init.data(), init.size(), encoded.data());
  std::vector<float> rounded(init.size());
  DecodeFloats(WireType::kBf16, encoded.data(), encoded.size(), rounded.data());
  EXPECT_EQ(out, rounded);
}

TableOptions SixteenBitPushes(std::string name, uint32_t dim, uint64_t max_rows, WireType push) {
  TableOptions t = Hashed(std::move(name), dim, max_rows);
  t.init.kind = InitKind::kZeros;
  t.wire.push = push;
  return t;
}

float Bf16(float v) { return Bf16ToFloat(FloatToBf16(v)); }
float F16(float v) { return F16ToFloat(FloatToF16(v)); }

// The same small gradient pushed many times in 16 bits, to ids of every
// shard: the shard's sum stays within one rounding step of the true sum
// (error feedback, kept by id), where each push rounded alone would lose
// the same share every time.
TEST_F(HashedTableTest, SixteenBitPushesSumToTheTrueSumWithinOneRoundingStep) {
  JobOptions job = Job(2, SixteenBitPushes("bf16", 3, 1000, WireType::kBf16));
  job.tables.push_back(SixteenBitPushes("fp16", 3, 1000, WireType::kF16));
  Start(job);
  const std::vector<uint64_t> ids = RandomIds(50, 21);
  // Value 0 of each row: 1 plus 0.9 of half a bf16 unit at 1, which bf16
  // alone always rounds down and fp16 alone always up (by 0.4 of its unit);
  // the others small and random.
  const float g0 = 1.0f + 0.9f * 0x1p-8f;
  std::mt19937 random(2);
  std::uniform_real_distribution<float> small(-0.01f, 0.01f);
  std::vector<double> truth(ids.size() * 3, 0.0);
  constexpr int kPushes = 300;
  for (int p = 0; p < kPushes; ++p) {
    std::vector<float> g(ids.size() * 3);
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = i % 3 == 0 ? g0 : small(random);
      truth[i] += g[i];
    }
    ASSERT_OK(client_->PushSync(1, ids, SharedFloats::Take(std::vector<float>(g))));
    ASSERT_OK(client_->PushSync(2, ids, SharedFloats::Take(std::move(g))));
  }
  for (const auto& [table, unit] :
       {std::pair<uint32_t, double>{1, 0x1p-7}, std::pair<uint32_t, double>{2, 0x1p-10}}) {
    SCOPED_TRACE(job_.tables[table].name);
    std::vector<float> w(ids.size() * 3);
    ASSERT_OK(client_->PullSync(table, ids, w.data()));
    for (size_t i = 0; i < w.size(); ++i) {
      // One unit of the values pushed (values in [1, 2)), plus float32's
      // own rounding of the shard's additions (half a unit at 300 each).
      ASSERT_LE(std::fabs(w[i] - truth[i]), unit + kPushes * 0x1p-16)
          << "id " << ids[i / 3] << " value " << i % 3 << ": shard " << w[i] << ", true "
          << truth[i];
    }
  }
  // Without feedback value 0 would be this far off.
  EXPECT_GT(truth[0] - kPushes * Bf16(g0), 1.0);
  EXPECT_GT(kPushes * F16(g0) - truth[0], 0.1);
  EXPECT_EQ(client_->counters().residuals_dropped, 0u);
}

// A worker keeps the residuals of at most one shard's rows of a hashed
// table (client/hashed_residuals.h): under a stream of fresh ids it lets
// the old ones go, counted, while ids pushed in every push keep theirs.
TEST_F(HashedTableTest, SixteenBitPushResidualsStayWithinTheBoundUnderFreshIds) {
  // Residuals for 64 ids: two generations of 32, as many as a push names.
  Start(Job(1, SixteenBitPushes("emb", 1, 64, WireType::kBf16)));
  const std::vector<uint64_t> hot = {1, 2, 3, 4};
  const float g0 = 1.0f + 0.9f * 0x1p-8f;
  std::mt19937_64 random(8);
  constexpr int kPushes = 200;
  constexpr size_t kFresh = 28;
  for (int p = 0; p < kPushes; ++p) {
    std::vector<uint64_t> ids = hot;
    for (size_t i = 0; i < kFresh; ++i) ids.push_back(random() | (uint64_t{1} << 63));
    std::vector<float> g(ids.size(), 0.3f);
    std::fill_n(g.begin(), hot.size(), g0);
    ASSERT_OK(client_->PushSync(1, ids, SharedFloats::Take(std::move(g))));
  }
  const uint64_t seen = hot.size() + kPushes * kFresh;
  EXPECT_GE(client_->counters().residuals_dropped, seen - 64);
  EXPECT_LT(client_->counters().residuals_dropped, seen);
  std::vector<float> w(hot.size());
  ASSERT_OK(client_->PullSync(1, hot, w.data()));
  for (size_t i = 0; i < hot.size(); ++i) {
    EXPECT_LE(std::fabs(w[i] - kPushes * static_cast<double>(g0)), 0x1p-7 + kPushes * 0x1p-17)
        << "id " << hot[i] << " lost its residual: " << w[i];
  }
}

// A 16-bit push to a hashed table is checked on the shard as a float32 one
// is: NaN or Inf refuses it, and a subnormal result is flushed to zero. An
// fp16 value beyond 65504 fails on the worker, naming it.
TEST_F(HashedTableTest, SixteenBitPushesAreCheckedAsFloat32Ones) {
  JobOptions job = Job(1, SixteenBitPushes("bf16", 2, 100, WireType::kBf16));
  job.tables.push_back(SixteenBitPushes("fp16", 2, 100, WireType::kF16));
  Start(job);
  const std::vector<uint64_t> ids = RandomIds(4, 13);
  std::vector<float> g(ids.size() * 2, 1.0f);
  g[5] = std::numeric_limits<float>::quiet_NaN();
  Status refused = client_->PushSync(1, ids, SharedFloats::Take(std::vector<float>(g)));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.message().find("NaN or Inf"), std::string::npos) << refused.ToString();
  std::vector<float> w(ids.size() * 2, -1.0f);
  ASSERT_OK(client_->PullSync(1, ids, w.data()));
  EXPECT_EQ(w, std::vector<float>(w.size(), 0.0f)) << "nothing of the push applied";

  // 1e-39 is subnormal in float32 and in bf16 (float32's exponent range).
  ASSERT_NE(FloatToBf16(1e-39f) & 0x7fffu, 0u);
  ASSERT_OK(client_->PushSync(1, ids, SharedFloats::Take(std::vector<float>(8, 1e-39f))));
  ASSERT_OK(client_->PullSync(1, ids, w.data()));
  EXPECT_EQ(w, std::vector<float>(w.size(), 0.0f)) << "subnormal results flushed";

  Status overflow = client_->PushSync(2, ids, SharedFloats::Take(std::vector<float>(8, 1e6f)));
  EXPECT_EQ(overflow.code(), StatusCode::kOutOfRange) << overflow.ToString();
  EXPECT_NE(overflow.message().find("65504"), std::string::npos) << overflow.ToString();
}

// Under ssp the cache serves reads between pulls: a bf16 push updates the
// cached rows with what the shard applies (the rounded values), so a read
// after it sees the push, equal to what the shard answers another worker.
TEST_F(HashedTableTest, TheCacheKeepsReadMyWritesWithBf16Pushes) {
  TableOptions t = SixteenBitPushes("emb", 2, 1000, WireType::kBf16);
  t.evict.policy = EvictPolicy::kLru;  // every push reaches its row: the cache applies it
  JobOptions job = Job(2, t);
  job.cluster.workers = 2;
  job.consistency.mode = ConsistencyMode::kSsp;
  job.consistency.staleness = 2;
  Start(job);
  const std::vector<uint64_t> ids = RandomIds(30, 17);
  std::vector<float> out(ids.size() * 2);
  ASSERT_OK(client_->PullSync(1, ids, out.data()));  // fills the cache
  std::vector<float> g(out.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f + 1e-3f * static_cast<float>(i);
  ASSERT_OK(client_->PushSync(1, ids, SharedFloats::Take(std::vector<float>(g))));
  const uint64_t hits = client_->counters().cache_hits;
  ASSERT_OK(client_->PullSync(1, ids, out.data()));
  EXPECT_EQ(client_->counters().cache_hits, hits + ids.size()) << "the read came from the cache";
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(out[i], Bf16(g[i])) << i;
  auto other = Client::Create(job_, 1, cluster_->endpoints());
  ASSERT_OK(other);
  std::vector<float> fresh(out.size());
  ASSERT_OK((*other)->PullSync(1, ids, fresh.data()));
  EXPECT_EQ((*other)->counters().cache_hits, 0u);
  EXPECT_EQ(fresh, out);
}

TEST_F(HashedTableTest, DenseCallsOfAHashedTableAreRefused) {
  Start(Job(1, Hashed("emb", 1, 10)));
  std::vector<float> out(10);
  StatusOr<Ticket> pull = client_->PullDense(1, out.data());
  ASSERT_FALSE(pull.ok());
  EXPECT_EQ(pull.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(pull.status().message().find("hashed"), std::string::npos) << pull.status().ToString();
}

TEST_F(HashedTableTest, TwoWorkersUnderBspSeeEveryPushOfEachClock) {
  JobOptions job = Job(2, Hashed("emb", 1, 1000));
  job.cluster.workers = 2;
  job.consistency.mode = ConsistencyMode::kBsp;
  Start(job);
  auto second = Client::Create(job_, 1, cluster_->endpoints());
  ASSERT_OK(second);
  std::unique_ptr<Client> other = std::move(*second);
  const std::vector<uint64_t> ids = RandomIds(50, 11);
  constexpr int kClocks = 5;
  // Worker w pushes w + 1 to every id each clock, then reads at the next
  // clock: under bsp both workers' pushes of every clock before are in (a
  // faster worker's push of the new clock may be too).
  auto run = [&](Client* c, float value) -> Status {
    PS_RETURN_IF_ERROR(c->Join());
    std::vector<float> read(ids.size());
    for (int k = 0; k < kClocks; ++k) {
      PS_RETURN_IF_ERROR(
          c->PushSync(1, ids, SharedFloats::Take(std::vector<float>(ids.size(), value))));
      PS_ASSIGN_OR_RETURN(Ticket t, c->Clock());
      PS_RETURN_IF_ERROR(c->Wait(t));
      PS_RETURN_IF_ERROR(c->PullSync(1, ids, read.data()));
      for (size_t i = 0; i < ids.size(); ++i) {
        const float least = InitialValue(job_.tables[1].init, ids[i], 0) + 3.0f * (k + 1);
        if (read[i] < least - 1e-4f || read[i] > least + 2.0f + 1e-4f) {  // sums in any order
          return InternalError("clock " + std::to_string(k) + " id " + std::to_string(ids[i]) +
                               ": read " + std::to_string(read[i]) + ", expected " +
                               std::to_string(least) + " (+ at most the other's next push)");
        }
      }
    }
    return Status::Ok();
  };
  Status s1;
  std::thread t([&] { s1 = run(other.get(), 2.0f); });
  Status s0 = run(client_.get(), 1.0f);
  t.join();
  ASSERT_OK(s0);
  ASSERT_OK(s1);
  std::vector<float> last(ids.size());
  ASSERT_OK(client_->PullSync(1, ids, last.data()));
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_FLOAT_EQ(last[i], InitialValue(job_.tables[1].init, ids[i], 0) + 3.0f * kClocks);
  }
  EXPECT_OK(client_->Leave());
  EXPECT_OK(other->Leave());
}

TEST_F(HashedTableTest, BspAggregationAppliesTheMeanOfEachClockOncePerId) {
  // adagrad, whose state makes one update of the mean differ from two
  // updates of the parts.
  TableOptions table = Hashed("emb", 2, 1000, OptimizerKind::kAdagrad);
  table.optimizer.lr = 0.5f;
  JobOptions job = Job(2, table);
  job.cluster.workers = 2;
  job.consistency.mode = ConsistencyMode::kBsp;
  job.consistency.aggregate = true;
  Start(job);
  auto second = Client::Create(job_, 1, cluster_->endpoints());
  ASSERT_OK(second);
  std::unique_ptr<Client> other = std::move(*second);
  const std::vector<uint64_t> shared = RandomIds(30, 21);
  const uint64_t only_first = 5;  // pushed by worker 0 alone
  constexpr int kClocks = 3;
  auto run = [&](Client* c, float value, bool with_own) -> Status {
    PS_RETURN_IF_ERROR(c->Join());
    for (int k = 0; k < kClocks; ++k) {
      std::vector<uint64_t> ids = shared;
      if (with_own) ids.push_back(only_first);
      PS_RETURN_IF_ERROR(
          c->PushSync(1, ids, SharedFloats::Take(std::vector<float>(ids.size() * 2, value))));
      PS_ASSIGN_OR_RETURN(Ticket t, c->Clock());
      PS_RETURN_IF_ERROR(c->Wait(t));
    }
    return Status::Ok();
  };
  Status s1;
  std::thread t([&] { s1 = run(other.get(), 3.0f, false); });
  Status s0 = run(client_.get(), 1.0f, true);
  t.join();
  ASSERT_OK(s0);
  ASSERT_OK(s1);
  // The reference: adagrad applied once a clock to the mean of the two
  // workers' pushes (2 for the shared ids, 1/2 for the id only worker 0
  // pushed).
  auto expected = [&](uint64_t id, float mean) {
    float w = InitialValue(job_.tables[1].init, id, 0), s = 0;
    for (int k = 0; k < kClocks; ++k) {
      s += mean * mean;
      w -= 0.5f * mean / (std::sqrt(s) + 1e-8f);
    }
    return w;
  };
  std::vector<uint64_t> ids = shared;
  ids.push_back(only_first);
  std::vector<float> out(ids.size() * 2);
  ASSERT_OK(client_->PullSync(1, ids, out.data()));
  for (size_t i = 0; i < ids.size(); ++i) {
    const float mean = ids[i] == only_first ? 0.5f : 2.0f;
    EXPECT_NEAR(out[i * 2], expected(ids[i], mean), 1e-5f) << "id " << ids[i];
  }
  EXPECT_OK(client_->Leave());
  EXPECT_OK(other->Leave());
}

TEST_F(HashedTableTest, AnIdNamedTwiceInAPushIsUpdatedOnceWithTheSumOfItsRows) {
  // adagrad: one update of g1 + g2 differs from an update of g1, then g2.
  TableOptions t = Hashed("emb", 2, 1000, OptimizerKind::kAdagrad);
  t.optimizer.lr = 0.5f;
  Start(Job(2, t));
  const std::vector<uint64_t> ids = {11, 22, 11, 33, 11};
  std::vector<float> grads = {1, 2, 10, 20, 3, 4, 30, 40, 5, 6};
  ASSERT_OK(client_->PushSync(1, ids, SharedFloats::Take(std::move(grads))));
  EXPECT_EQ(client_->counters().summed_rows, 2u);
  const std::vector<uint64_t> read = {11, 22, 33};
  std::vector<float> out(6);
  ASSERT_OK(client_->PullSync(1, read, out.data()));
  const InitOptions& init = job_.tables[1].init;
  // One adagrad step of g: w - lr * g / (|g| + eps) = w - lr * sign(g).
  const auto stepped = [&](uint64_t id, uint32_t c, float g) {
    return InitialValue(init, id, c) - 0.5f * g / (std::sqrt(g * g) + 1e-8f);
  };
  EXPECT_FLOAT_EQ(out[0], stepped(11, 0, 1 + 3 + 5));
  EXPECT_FLOAT_EQ(out[1], stepped(11, 1, 2 + 4 + 6));
  EXPECT_FLOAT_EQ(out[2], stepped(22, 0, 10));
  EXPECT_FLOAT_EQ(out[5], stepped(33, 1, 40));
  // A push of distinct ids is sent as it is.
  ASSERT_OK(client_->PushSync(1, read, SharedFloats::Take(std::vector<float>(6, 1.0f))));
  EXPECT_EQ(client_->counters().summed_rows, 2u);
}

TEST_F(HashedTableTest, AnIdNamedTwiceInAPullIsPulledOnceAndCopiedToEachPlace) {
  Start(Job(2, Hashed("emb", 3, 1000)));
  const std::vector<uint64_t> pushed = {11, 22, 33};
  ASSERT_OK(client_->PushSync(1, pushed, SharedFloats::Take({1, 2, 3, 4, 5, 6, 7, 8, 9})));
  const std::vector<uint64_t> read = {22, 11, 22, 44, 11, 22};
  std::vector<float> out(read.size() * 3, -1.0f);
  ASSERT_OK(client_->PullSync(1, read, out.data()));
  EXPECT_EQ(client_->counters().distinct_pull_rows, 3u);
  for (size_t i = 0; i < read.size(); ++i) {
    std::vector<float> one(3);
    ASSERT_OK(client_->PullSync(1, {&read[i], 1}, one.data()));
    EXPECT_EQ(std::vector<float>(out.begin() + 3 * i, out.begin() + 3 * i + 3), one) << i;
  }
  // With a callback: every place is filled when it runs.
  std::vector<float> again(read.size() * 3, -1.0f);
  bool ran = false;
  ASSERT_OK(client_->Pull(1, read, again.data(), [&](const Status& status) {
    EXPECT_OK(status);
    EXPECT_EQ(again, out);
    ran = true;
  }));
  ASSERT_OK(client_->WaitAll());
  EXPECT_TRUE(ran);
}

TEST_F(HashedTableTest, AnIdGetsARowOnlyAtItsMinPushesThPushAndItsPushesBeforeAreDropped) {
  TableOptions t = Hashed("emb", 1, 1000);
  t.admit.min_pushes = 3;
  t.admit.sketch_width = 1024;
  Start(Job(2, t));
  const InitOptions& init = job_.tables[1].init;
  const std::vector<uint64_t> ids = RandomIds(20, 8);
  std::vector<float> out(ids.size());
  for (int push = 1; push <= 4; ++push) {
    ASSERT_OK(client_->PushSync(1, ids, SharedFloats::Take(std::vector<float>(ids.size(), 10.0f * push))));
    ASSERT_OK(client_->PullSync(1, ids, out.data()));
    for (size_t i = 0; i < ids.size(); ++i) {
      // Pushes 1 and 2 counted and dropped; 3 makes the row; 4 learns.
      const float expected = InitialValue(init, ids[i], 0) + (push < 3 ? 0.0f : push == 3 ? 30.0f : 70.0f);
      ASSERT_FLOAT_EQ(out[i], expected) << "push " << push << " id " << ids[i];
    }
  }
  uint64_t rows = 0, unadmitted = 0;
  for (const ShardStats::Table& s : TableStats()) {
    rows += s.stored_rows;
    unadmitted += s.unadmitted_rows;
    EXPECT_EQ(s.sketch_bytes, 8u * 1024);
  }
  EXPECT_EQ(rows, ids.size());
  EXPECT_EQ(unadmitted, 2 * ids.size());
}

TEST_F(HashedTableTest, AnAdmissionProbabilityAdmitsAboutThatShareOfNewIds) {
  TableOptions t = Hashed("emb", 1, 100000);
  t.admit.probability = 0.25f;
  t.admit.sketch_width = 1 << 16;
  Start(Job(2, t));
  const std::vector<uint64_t> ids = RandomIds(4000, 12);
  ASSERT_OK(client_->PushSync(1, ids, SharedFloats::Take(std::vector<float>(ids.size(), 1.0f))));
  uint64_t rows = 0, unadmitted = 0;
  for (const ShardStats::Table& s : TableStats()) {
    rows += s.stored_rows;
    unadmitted += s.unadmitted_rows;
  }
  EXPECT_EQ(rows + unadmitted, ids.size());
  EXPECT_GT(rows, 800u);  // 1000 expected
  EXPECT_LT(rows, 1200u);
}

TEST(HashedCheckpointTest, AGenerationRestoresEveryRowAndItsStateByTheirIds) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "hashed_table_test_checkpoint";
  std::filesystem::remove_all(dir);
  // Rows at an id's second push: the admission counts are checkpointed too.
  TableOptions table = Hashed("emb", 3, 1000, OptimizerKind::kAdagrad);
  table.admit.min_pushes = 2;
  table.admit.sketch_width = 4096;
  JobOptions job = Job(2, table);
  job.consistency.mode = ConsistencyMode::kBsp;
  job.checkpoint.dir = dir.string();
  job.checkpoint.every_clocks = 2;
  job.checkpoint.sync = false;
  job.server.exit_when_workers_leave = false;
  ASSERT_OK(job.Validate());
  const std::vector<uint64_t> ids = RandomIds(200, 31);
  std::vector<float> before(ids.size() * 3);
  std::vector<uint64_t> checksums, rows;
  {
    InProcessCluster cluster(job);
    auto client = Client::Create(job, 0, cluster.endpoints()).value();
    ASSERT_OK(client->Join());
    for (int c = 0; c < 4; ++c) {
      // Clock c pushes to the first 50 * (c + 1) ids: rows made over time.
      const std::vector<uint64_t> part(ids.begin(), ids.begin() + 50 * (c + 1));
      std::vector<float> grads(part.size() * 3);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * static_cast<float>(i % 13 + c);
      ASSERT_OK(client->PushSync(1, part, SharedFloats::Take(std::move(grads))));
      ASSERT_OK(client->Wait(*client->Clock()));
    }
    ASSERT_OK(client->PullSync(1, ids, before.data()));
    ASSERT_OK(client->Leave());
    cluster.Stop();  // the writes finish
    for (uint32_t s = 0; s < 2; ++s) {
      checksums.push_back(cluster.server(s).store().Checksum(1));
      rows.push_back(cluster.server(s).store().stored_rows(1));
    }
  }
  EXPECT_EQ(rows[0] + rows[1], 150u);  // the last 50 ids were pushed once: not admitted
  InProcessCluster restored(job);
  auto client = Client::Create(job, 0, restored.endpoints()).value();
  ASSERT_OK(client->Join());
  EXPECT_EQ(client->clock(), 4);
  std::vector<float> after(ids.size() * 3);
  ASSERT_OK(client->PullSync(1, ids, after.data()));
  EXPECT_EQ(after, before);
  for (uint32_t s = 0; s < 2; ++s) {
    const ShardStats stats = client->StructuredStats(s).value();
    EXPECT_EQ(stats.tables[1].stored_rows, rows[s]) << "shard " << s;
  }
  // The restored counts: one more push admits the ids pushed once before.
  const std::vector<uint64_t> once(ids.begin() + 150, ids.end());
  ASSERT_OK(client->PushSync(1, once, SharedFloats::Take(std::vector<float>(once.size() * 3, 1.0f))));
  ASSERT_OK(client->Leave());
  restored.Stop();
  for (uint32_t s = 0; s < 2; ++s) {
    EXPECT_EQ(restored.server(s).store().unadmitted_rows(1), 0u) << "shard " << s;
  }
  EXPECT_EQ(restored.server(0).store().stored_rows(1) + restored.server(1).store().stored_rows(1),
            ids.size());
}

}  // namespace
}  // namespace ps
