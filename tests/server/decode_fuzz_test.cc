// Randomized malformed requests against the real decoder and store: start
// from valid requests, mutate their frames (bytes, sizes, counts, header
// fields), and check that every one is either refused with a message, or, if
// it is still well-formed, keeps the decoder's promises (rows inside the
// shard, sizes that match) and is applied or read without leaving the store.
// Seeded, so a failure reproduces.
#include <gtest/gtest.h>

#include <random>

#include "common/hash_slots.h"
#include "common/options.h"
#include "common/wire.h"
#include "store/shard_store.h"
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

JobOptions FuzzJob() {
  TableOptions b = TestTable("b", 1000, 1);
  b.optimizer.lr = 0.5f;
  TableOptions c = TestTable("c", 0, 2, OptimizerKind::kAdagrad);
  c.keys = KeyKind::kHashed;
  c.max_rows = 40;  // fewer than the pool of ids below: pushes meet the bound
  c.slots = 16;
  return TestJob()
      .Servers(2)
      .Workers(3)
      .Table("a", 64, 3, OptimizerKind::kAdd)
      .Table(b)
      .Table(c)
      .Build();
}

// Ids of the hashed table "c" that shard 0 holds.
const std::vector<uint64_t>& ShardZeroIds() {
  static const std::vector<uint64_t> ids = [] {
    const uint64_t seed = NameHash("c");
    std::vector<uint64_t> out;
    std::mt19937_64 gen(7);
    while (out.size() < 64) {
      const uint64_t id = gen();
      if (SlotShard(IdSlot(id, seed, 16), 16, 2) == 0) out.push_back(id);
    }
    return out;
  }();
  return ids;
}

std::vector<Frame> ValidRequest(std::mt19937_64& gen) {
  MessageHeader h;
  h.op = gen() % 2 ? Op::kPush : Op::kPull;
  h.request_id = gen();
  h.worker = static_cast<uint32_t>(gen() % 3);
  h.table = static_cast<uint32_t>(gen() % 3);
  const uint32_t dim = h.table == 0 ? 3 : h.table == 1 ? 1 : 2;
  const uint64_t owned = h.table == 0 ? 32 : 500;  // shard 0 owns the first half
  h.dim = dim;
  h.count = 1 + gen() % 8;
  std::vector<Frame> frames;
  if (h.table == 2) {  // hashed: ids of shard 0's slots
    std::vector<uint64_t> keys(h.count);
    for (auto& k : keys) k = ShardZeroIds()[gen() % ShardZeroIds().size()];
    frames.push_back(EncodeHeader(h));
    frames.push_back(Frame::CopyOf(keys.data(), keys.size() * 8));
  } else if (gen() % 2) {
    h.flags = kFlagDenseRange;
    h.first_row = gen() % (owned - h.count + 1);
    frames.push_back(EncodeHeader(h));
  } else {
    std::vector<uint64_t> keys(h.count);
    for (auto& k : keys) k = gen() % owned;
    frames.push_back(EncodeHeader(h));
    frames.push_back(Frame::CopyOf(keys.data(), keys.size() * 8));
  }
  if (h.op == Op::kPush) {
    std::vector<float> v(h.count * dim);
    for (auto& x : v) x = static_cast<float>(static_cast<int>(gen() % 9) - 4);
    frames.push_back(Frame::CopyOf(v.data(), v.size() * 4));
  }
  return frames;
}

// One random mutation of a frame list.
void Mutate(std::mt19937_64& gen, std::vector<Frame>& frames) {
  const int kind = static_cast<int>(gen() % 7);
  if (frames.empty()) return;
  size_t i = gen() % frames.size();
  std::string bytes(frames[i].view());
  switch (kind) {
    case 0:  // flip a byte
      if (!bytes.empty()) bytes[gen() % bytes.size()] ^= static_cast<char>(1 + gen() % 255);
      break;
    case 1:  // truncate
      bytes.resize(bytes.empty() ? 0 : gen() % bytes.size());
      break;
    case 2:  // grow
      bytes.append(1 + gen() % 16, static_cast<char>(gen()));
      break;
    case 3:  // drop a frame
      frames.erase(frames.begin() + static_cast<long>(i));
      return;
    case 4:  // duplicate a frame
      frames.insert(frames.begin() + static_cast<long>(i), Frame::CopyOf(bytes));
      return;
    case 5: {  // rewrite a header field to an extreme value
      auto h = DecodeHeader({frames[0].data(), frames[0].size()});
      if (!h.ok()) return;
      const uint64_t extreme[] = {0, 1, 2, 63, 64, 499, 500, 1000, ~0ull, ~0ull >> 1, 1ull << 32};
      const uint64_t x = extreme[gen() % std::size(extreme)];
      switch (gen() % 6) {
        case 0: h->count = x; break;
        case 1: h->first_row = x; break;
        case 2: h->table = static_cast<uint32_t>(x); break;
        case 3: h->dim = static_cast<uint32_t>(x); break;
        case 4: h->worker = static_cast<uint32_t>(x); break;
        default: h->flags = static_cast<uint32_t>(x); break;
      }
      frames[0] = EncodeHeader(*h);
      return;
    }
    default:  // random garbage frame
      bytes.assign(gen() % 64, '\0');
      for (auto& c : bytes) c = static_cast<char>(gen());
      break;
  }
  frames[i] = Frame::CopyOf(bytes);
}

TEST(DecodeFuzzTest, MutatedRequestsAreRefusedCleanlyOrAppliedAsValid) {
  const JobOptions job = FuzzJob();
  auto store = ShardStore::Create(job, 0);
  ASSERT_OK(store);
  RequestRules rules{0, (*store)->layouts(), 3, 4096, 64, true};
  std::mt19937_64 gen(20261129);
  int refused = 0, accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<Frame> frames = ValidRequest(gen);
    const int mutations = 1 + static_cast<int>(gen() % 3);
    for (int m = 0; m < mutations; ++m) Mutate(gen, frames);
    Request request;
    Status s = DecodeRequest(frames, rules, &request);
    if (!s.ok()) {
      ++refused;
      ASSERT_FALSE(s.message().empty());
      continue;
    }
    ++accepted;
    // Accepted: the request is well-formed for this shard, so applying or
    // reading it must stay inside the store.
    const auto& h = request.header;
    ASSERT_LT(h.table, 3u);
    const TableLayout& t = (*store)->layouts()[h.table];
    ASSERT_EQ(h.dim, t.dim);
    if (t.hashed) {
      ASSERT_FALSE(h.dense());
      ASSERT_EQ(request.keys.size(), h.count);
      for (uint64_t k : request.keys) {
        ASSERT_TRUE(t.owned.Contains(IdSlot(k, t.hash_seed, t.slots))) << k;
      }
    } else if (h.dense()) {
      ASSERT_GE(h.first_row, t.owned.begin);
      ASSERT_LE(h.count, t.owned.end - h.first_row);
    } else {
      ASSERT_EQ(request.keys.size(), h.count);
      for (uint64_t k : request.keys) ASSERT_TRUE(t.owned.Contains(k)) << k;
    }
    if (h.op == Op::kPush) {
      ASSERT_EQ(request.values.size(), h.count * h.dim);
      // Random values may overflow a row: refused, which is fine here.
      (*store)->ApplyPush(request, 0).IgnoreError();
    } else if (h.op == Op::kPull) {
      std::vector<Frame> out;
      ASSERT_OK((*store)->ReadRows(request, &out));
      uint64_t bytes = 0;
      for (const Frame& f : out) bytes += f.size();
      ASSERT_EQ(bytes, h.count * h.dim * 4);
    }
  }
  EXPECT_GT(refused, 10000);
  EXPECT_GT(accepted, 100);
  EXPECT_LE((*store)->stored_rows(2), 40u);  // the hashed table kept its bound
}

}  // namespace
}  // namespace ps
