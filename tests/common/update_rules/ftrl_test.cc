// FTRL-Proximal against a plain double-precision transcription of McMahan
// et al. 2013, Algorithm 1, over dense and sparse pushes and in a hashed
// table's rows.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/options.h"
#include "common/update_rule.h"
#include "store/hashed_rows.h"

namespace ps {
namespace {

// Algorithm 1, per coordinate: w is computed from z and n when it is
// needed (the prediction's weights), z and n change with each gradient.
class ReferenceFtrl {
 public:
  ReferenceFtrl(size_t size, double alpha, double beta, double l1, double l2)
      : alpha_(alpha), beta_(beta), l1_(l1), l2_(l2), z_(size, 0.0), n_(size, 0.0) {}

  double W(size_t i) const {
    if (std::fabs(z_[i]) <= l1_) return 0.0;
    const double sign = z_[i] < 0 ? -1.0 : 1.0;
    return -(z_[i] - sign * l1_) / ((beta_ + std::sqrt(n_[i])) / alpha_ + l2_);
  }

  void Update(size_t i, double g) {
    const double sigma = (std::sqrt(n_[i] + g * g) - std::sqrt(n_[i])) / alpha_;
    z_[i] = z_[i] + g - sigma * W(i);
    n_[i] = n_[i] + g * g;
  }

  double z(size_t i) const { return z_[i]; }
  double n(size_t i) const { return n_[i]; }

 private:
  double alpha_, beta_, l1_, l2_;
  std::vector<double> z_, n_;
};

OptimizerOptions Ftrl(float alpha, float beta, float l1, float l2) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kFtrl;
  o.alpha = alpha;
  o.beta = beta;
  o.l1 = l1;
  o.l2 = l2;
  return o;
}

// The rule's w, z and n against the reference's, to 1e-6 (relative where
// a value is larger than 1).
void ExpectMatches(const ReferenceFtrl& ref, const std::vector<float>& w,
                   const std::vector<float>& z, const std::vector<float>& n,
                   const std::string& where) {
  auto near = [](double expected, float got) {
    return std::fabs(expected - double{got}) <= 1e-6 * std::max(1.0, std::fabs(expected));
  };
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_TRUE(near(ref.W(i), w[i])) << where << " w[" << i << "] " << w[i] << " vs " << ref.W(i);
    EXPECT_TRUE(near(ref.z(i), z[i])) << where << " z[" << i << "] " << z[i] << " vs " << ref.z(i);
    EXPECT_TRUE(near(ref.n(i), n[i])) << where << " n[" << i << "] " << n[i] << " vs " << ref.n(i);
  }
}

struct Case {
  float alpha, beta, l1, l2;
};

TEST(FtrlTest, MatchesReferenceOverDenseAndSparsePushes) {
  for (const Case& c : {Case{0.1f, 1.0f, 0.0f, 0.0f}, Case{0.05f, 1.0f, 0.5f, 1.0f},
                        Case{0.5f, 0.0f, 0.01f, 0.0f}, Case{1.0f, 0.5f, 2.0f, 0.1f}}) {
    const OptimizerOptions o = Ftrl(c.alpha, c.beta, c.l1, c.l2);
    constexpr size_t kSize = 64;
    ReferenceFtrl ref(kSize, c.alpha, c.beta, c.l1, c.l2);
    std::vector<float> w(kSize, 0.0f), z(kSize, 0.0f), n(kSize, 0.0f), g(kSize);
    std::mt19937 rng(11);
    std::normal_distribution<float> grad(0.0f, 1.0f);
    std::bernoulli_distribution touched(0.3);
    for (int step = 1; step <= 20; ++step) {
      for (float& x : g) x = grad(rng);
      if (step % 2 == 1) {
        // A dense push: one run over every coordinate.
        ApplyOptimizer(o, w.data(), {z.data(), n.data()}, g.data(), kSize, 0.0f, step);
        for (size_t i = 0; i < kSize; ++i) ref.Update(i, g[i]);
      } else {
        // A sparse push: runs of one coordinate each, some coordinates only.
        for (size_t i = 0; i < kSize; ++i) {
          if (!touched(rng)) continue;
          ApplyOptimizer(o, w.data() + i, {z.data() + i, n.data() + i}, g.data() + i, 1, 0.0f,
                         step);
          ref.Update(i, g[i]);
        }
      }
      ExpectMatches(ref, w, z, n,
                    "alpha " + std::to_string(c.alpha) + " beta " + std::to_string(c.beta) +
                        " l1 " + std::to_string(c.l1) + " l2 " + std::to_string(c.l2) +
                        " step " + std::to_string(step));
    }
  }
}

// The same rule in a hashed table's rows (store/hashed_rows.h: a row's w,
// then z, then n), each id's row made by its first push.
TEST(FtrlTest, MatchesReferenceInAHashedTable) {
  constexpr uint32_t kDim = 4;
  constexpr size_t kIds = 40;
  const Case c{0.05f, 1.0f, 0.5f, 1.0f};
  const OptimizerOptions o = Ftrl(c.alpha, c.beta, c.l1, c.l2);
  HashedRows rows(kDim, o.Slots(), InitOptions(), 1000);
  ReferenceFtrl ref(kIds * kDim, c.alpha, c.beta, c.l1, c.l2);
  std::vector<uint64_t> ids(kIds);
  std::mt19937_64 rng(5);
  for (uint64_t& id : ids) id = rng();
  std::normal_distribution<float> grad(0.0f, 1.0f);
  std::bernoulli_distribution touched(0.4);
  for (int step = 1; step <= 20; ++step) {
    std::vector<uint64_t> pushed;
    std::vector<size_t> which;
    std::vector<float> g;
    for (size_t k = 0; k < kIds; ++k) {
      if (!touched(rng)) continue;
      pushed.push_back(ids[k]);
      which.push_back(k);
      for (uint32_t d = 0; d < kDim; ++d) g.push_back(grad(rng));
    }
    rows.Apply(pushed, g.data(), *FindRule(OptimizerKind::kFtrl), o, 0.0f, step, true);
    for (size_t x = 0; x < which.size(); ++x) {
      for (uint32_t d = 0; d < kDim; ++d) ref.Update(which[x] * kDim + d, g[x * kDim + d]);
    }
  }
  std::vector<float> w(kIds * kDim, 0.0f), z(kIds * kDim, 0.0f), n(kIds * kDim, 0.0f);
  for (size_t k = 0; k < kIds; ++k) {
    const float* row = rows.Find(ids[k]);
    if (row == nullptr) continue;  // never pushed: 0 everywhere, as the reference holds
    for (uint32_t d = 0; d < kDim; ++d) {
      w[k * kDim + d] = row[d];
      z[k * kDim + d] = row[kDim + d];
      n[k * kDim + d] = row[2 * kDim + d];
    }
  }
  EXPECT_GT(rows.size(), kIds / 2);
  ExpectMatches(ref, w, z, n, "hashed");
}

TEST(FtrlTest, L1HoldsWeightsAtExactlyZero) {
  const OptimizerOptions o = Ftrl(0.1f, 1.0f, 1.5f, 0.0f);
  constexpr size_t kSize = 256;
  ReferenceFtrl ref(kSize, 0.1, 1.0, 1.5, 0.0);
  std::vector<float> w(kSize, 0.0f), z(kSize, 0.0f), n(kSize, 0.0f), g(kSize);
  std::mt19937 rng(5);
  std::normal_distribution<float> grad(0.0f, 0.6f);
  for (int step = 1; step <= 10; ++step) {
    for (size_t i = 0; i < kSize; ++i) g[i] = grad(rng) + (i % 4 == 0 ? 0.8f : 0.0f);
    ApplyOptimizer(o, w.data(), {z.data(), n.data()}, g.data(), kSize, 0.0f, step);
    for (size_t i = 0; i < kSize; ++i) ref.Update(i, g[i]);
  }
  ExpectMatches(ref, w, z, n, "l1 1.5");
  size_t zeros = 0;
  for (size_t i = 0; i < kSize; ++i) {
    if (std::fabs(ref.z(i)) <= 1.5 - 1e-4) {
      EXPECT_EQ(w[i], 0.0f) << i;  // exactly, not merely small
      EXPECT_FALSE(std::signbit(w[i])) << i;  // +0, whatever the sign of z
    }
    zeros += w[i] == 0.0f ? 1 : 0;
  }
  // Both kinds of coordinate are there: the check above is not empty and
  // the rule does not zero everything.
  EXPECT_GT(zeros, kSize / 4);
  EXPECT_LT(zeros, kSize);
}

TEST(FtrlTest, ANonZeroInitialValueEntersOnlyTheFirstStep) {
  // sigma * w with the initial w, then w is z and n's alone.
  const OptimizerOptions o = Ftrl(0.1f, 1.0f, 0.0f, 0.0f);
  float w = 0.5f, z = 0.0f, n = 0.0f;
  const float g = 2.0f;
  ApplyOptimizer(o, &w, {&z, &n}, &g, 1, 0.0f, 1);
  // sigma = (sqrt(4) - 0) / 0.1 = 20; z = 2 - 20 * 0.5 = -8; n = 4;
  // w = 8 / ((1 + 2) / 0.1) = 8 / 30.
  EXPECT_FLOAT_EQ(z, -8.0f);
  EXPECT_FLOAT_EQ(n, 4.0f);
  EXPECT_FLOAT_EQ(w, 8.0f / 30.0f);
}

TEST(FtrlTest, HasTwoStateArraysAndNoSchedule) {
  const OptimizerOptions o = Ftrl(0.1f, 1.0f, 0.0f, 0.0f);
  EXPECT_EQ(o.Slots(), 2u);
  EXPECT_FALSE(o.Stateless());
  const UpdateRule* rule = FindRule("ftrl");
  ASSERT_NE(rule, nullptr);
  EXPECT_EQ(rule->kind, OptimizerKind::kFtrl);
  EXPECT_FALSE(rule->scheduled);
  EXPECT_EQ(rule->slot_names[0], "z");
  EXPECT_EQ(rule->slot_names[1], "n");
  EXPECT_EQ(FindRule(OptimizerKind::kFtrl), rule);
}

}  // namespace
}  // namespace ps
