// The admission filter's count (store/push_sketch.h): never below the
// pushes counted, above them by little on a skewed stream, in the memory
// it says, the same on every replica.
#include "store/push_sketch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <unordered_map>
#include <vector>

namespace ps {
namespace {

TEST(PushSketchTest, CountsAreNeverBelowThePushesAndRarelyMuchAbove) {
  constexpr uint32_t kWidth = 1 << 14;
  PushSketch sketch(kWidth);
  EXPECT_EQ(sketch.bytes(), 8u * kWidth);
  // A Zipf-like stream of 200,000 pushes over 100,000 ids: most ids once.
  std::mt19937_64 rng(3);
  std::unordered_map<uint64_t, uint32_t> truth;
  std::vector<uint64_t> ids(100000);
  for (uint64_t& id : ids) id = rng();
  for (int i = 0; i < 200000; ++i) {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const auto k = static_cast<size_t>(std::pow(ids.size(), u)) - 1;  // log-uniform rank
    const uint32_t after = sketch.Add(ids[k]);
    ++truth[ids[k]];
    ASSERT_GE(after, truth[ids[k]]);
  }
  EXPECT_EQ(sketch.total(), 200000u);
  // Count-Min's bound: over by at most e * total / width (33) for all but
  // about e^-4 of the ids; conservative update does better.
  const double bound = std::exp(1.0) * 200000 / kWidth;
  size_t over_bound = 0, exact = 0;
  for (const auto& [id, n] : truth) {
    const uint32_t c = sketch.Count(id);
    ASSERT_GE(c, n);
    if (c - n > bound) ++over_bound;
    if (c == n) ++exact;
  }
  EXPECT_LT(over_bound, truth.size() / 50);
  EXPECT_GT(exact, truth.size() / 2);
  // An id never pushed counts within the bound too (an admission filter
  // lets it in that much early, never late).
  size_t within = 0;
  for (int i = 0; i < 1000; ++i) within += sketch.Count(rng()) <= bound;
  EXPECT_GT(within, 950u);
}

TEST(PushSketchTest, CountersStopAt65535) {
  PushSketch sketch(1024);
  for (int i = 0; i < 70000; ++i) sketch.Add(42);
  EXPECT_EQ(sketch.Count(42), 65535u);
  EXPECT_EQ(sketch.Add(42), 65535u);
}

TEST(PushSketchTest, TheSamePushesGiveTheSameCountersAndTheyCopy) {
  PushSketch a(4096), b(4096);
  for (uint64_t i = 0; i < 5000; ++i) {
    a.Add(i * 31 % 977);
    b.Add(i * 31 % 977);
  }
  ASSERT_EQ(a.Data().size(), b.Data().size());
  EXPECT_TRUE(std::equal(a.Data().begin(), a.Data().end(), b.Data().begin()));
  PushSketch copy(4096);
  ASSERT_TRUE(copy.Restore(a.Data()));
  for (uint64_t id = 0; id < 977; ++id) EXPECT_EQ(copy.Count(id), a.Count(id));
  PushSketch other_width(2048);
  EXPECT_FALSE(other_width.Restore(a.Data()));
}

}  // namespace
}  // namespace ps
