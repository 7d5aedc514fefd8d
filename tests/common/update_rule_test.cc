// Each optimizer against updates computed by hand, and the learning-rate
// schedules.
#include "common/update_rule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string_view>
#include <vector>

namespace ps {
namespace {

TEST(UpdateRuleTest, MaxAbsBitsOrdersMagnitudesAndSeesInfAndNan) {
  auto magnitude = [](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  };
  std::vector<float> v = {0.5f, -3.0f, 2.0f, -0.0f, 1e-30f};
  EXPECT_EQ(magnitude(MaxAbsBits(v.data(), v.size())), 3.0f);
  EXPECT_EQ(MaxAbsBits(v.data(), 0), 0u);
  v.push_back(-std::numeric_limits<float>::max());
  EXPECT_LT(MaxAbsBits(v.data(), v.size()), kNonFiniteBits);
  v.push_back(-std::numeric_limits<float>::infinity());
  EXPECT_GE(MaxAbsBits(v.data(), v.size()), kNonFiniteBits);
  v.back() = std::nanf("");
  EXPECT_GE(MaxAbsBits(v.data(), v.size()), kNonFiniteBits);
}

// Each registry row is found by its kind and its name, stays within the
// slot limit, names its state arrays and has defaults its ranges allow.
TEST(UpdateRuleTest, RegistryRowsAreConsistent) {
  ASSERT_FALSE(UpdateRules().empty());
  const OptimizerOptions defaults;
  for (const UpdateRule* rule : UpdateRules()) {
    EXPECT_EQ(FindRule(rule->kind), rule) << rule->name;
    EXPECT_EQ(FindRule(rule->name), rule) << rule->name;
    EXPECT_EQ(OptimizerName(rule->kind), rule->name);
    OptimizerOptions o;
    o.kind = rule->kind;
    o.momentum = 0.5f;  // the one parameter that changes a rule's slots
    for (const OptimizerOptions& options : {o, OptimizerOptions{.kind = rule->kind}}) {
      const uint32_t slots = options.Slots();
      EXPECT_LE(slots, kMaxOptimizerSlots) << rule->name;
      for (uint32_t k = 0; k < slots; ++k) EXPECT_FALSE(rule->slot_names[k].empty()) << rule->name;
    }
    for (const OptimizerParameter& p : rule->parameters) {
      const float value = defaults.*p.field;
      EXPECT_TRUE(value > p.min || (!p.min_excluded && value == p.min)) << rule->name << p.key;
      EXPECT_TRUE(value < p.max || (!p.max_excluded && value == p.max)) << rule->name << p.key;
    }
  }
  EXPECT_EQ(FindRule("rmsprop"), nullptr);
  EXPECT_EQ(FindRule(static_cast<OptimizerKind>(99)), nullptr);
  EXPECT_EQ(OptimizerOptions{.kind = static_cast<OptimizerKind>(99)}.Slots(), 0u);
}

// StepBounds is what lets a store apply a push in place under
// on_non_finite_result: refuse: every result of every rule must lie within
// the bounds it gives, at magnitudes from tiny to huge.
TEST(UpdateRuleTest, StepBoundsHoldForEveryRule) {
  std::mt19937 rng(7);
  std::vector<OptimizerOptions> rules;
  // Every rule of the registry, plain and with each parameter it takes that
  // changes its loop.
  for (const UpdateRule* rule : UpdateRules()) {
    auto takes = [rule](std::string_view key) {
      return std::any_of(rule->parameters.begin(), rule->parameters.end(),
                         [key](const OptimizerParameter& p) { return p.key == key; });
    };
    for (int variant = 0; variant < 3; ++variant) {
      OptimizerOptions o;
      o.kind = rule->kind;
      if (variant == 1 && takes("momentum")) o.momentum = 0.9f;
      if (variant == 2) {
        if (takes("l2")) o.l2 = 0.5f;
        if (takes("l1")) o.l1 = 0.01f;
      }
      rules.push_back(o);
    }
  }
  constexpr size_t n = 256;
  for (const OptimizerOptions& o : rules) {
    for (double scale : {1e-3, 1.0, 1e3, 1e8, 1e15}) {
      std::uniform_real_distribution<float> value(-1.0f, 1.0f);
      std::vector<float> w(n), s0(n), s1(n), g(n);
      for (size_t i = 0; i < n; ++i) {
        w[i] = static_cast<float>(value(rng) * scale);
        s0[i] = static_cast<float>(std::fabs(value(rng)) * scale);  // adagrad, adam v: >= 0
        s1[i] = static_cast<float>(std::fabs(value(rng)) * scale * scale);
        g[i] = static_cast<float>(value(rng) * scale);
      }
      if (o.kind == OptimizerKind::kSgd) {
        for (float& x : s0) x = static_cast<float>(value(rng) * scale);  // a velocity has a sign
      }
      if (o.kind == OptimizerKind::kAdam) {
        for (float& x : s0) x = static_cast<float>(value(rng) * scale);  // m has a sign
      }
      for (int64_t step : {1, 2, 100}) {
        std::vector<float> w2 = w, a = s0, b = s1;
        double before[3] = {0, 0, 0}, after[3];
        auto max_abs = [](const std::vector<float>& x) {
          double m = 0;
          for (float f : x) m = std::max(m, std::fabs(double{f}));
          return m;
        };
        before[0] = max_abs(w2);
        before[1] = max_abs(a);
        before[2] = max_abs(b);
        StepBounds(o, before, max_abs(g), 0.1f, step, after);
        ApplyOptimizer(o, w2.data(), {a.data(), b.data()}, g.data(), n, 0.1f, step);
        const std::string what = OptimizerDescription(o) + " scale " + std::to_string(scale) +
                                 " step " + std::to_string(step);
        EXPECT_LE(max_abs(w2), after[0]) << what;
        if (o.Slots() >= 1) {
          EXPECT_LE(max_abs(a), after[1]) << what;
        }
        if (o.Slots() >= 2) {
          EXPECT_LE(max_abs(b), after[2]) << what;
        }
      }
    }
  }
}

TEST(UpdateRuleTest, SgdWithMomentumKeepsAVelocity) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.momentum = 0.9f;
  float w[2] = {1.0f, -1.0f}, v[2] = {0, 0};
  const float g1[2] = {0.5f, 1.0f}, g2[2] = {0.5f, -2.0f};
  ApplyOptimizer(o, w, {v, nullptr}, g1, 2, 0.1f, 1);
  EXPECT_FLOAT_EQ(v[0], 0.5f);
  EXPECT_FLOAT_EQ(w[0], 1.0f - 0.05f);
  ApplyOptimizer(o, w, {v, nullptr}, g2, 2, 0.1f, 2);
  EXPECT_FLOAT_EQ(v[0], 0.9f * 0.5f + 0.5f);     // 0.95
  EXPECT_FLOAT_EQ(w[0], 0.95f - 0.1f * 0.95f);   // 0.855
  EXPECT_FLOAT_EQ(v[1], 0.9f * 1.0f - 2.0f);     // -1.1
  EXPECT_FLOAT_EQ(w[1], -1.0f - 0.1f - 0.1f * -1.1f);
}

TEST(UpdateRuleTest, AdagradDividesBySquaredGradientSums) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdagrad;
  o.epsilon = 1e-8f;
  float w[1] = {0.0f}, s[1] = {0.0f};
  const float g1[1] = {3.0f}, g2[1] = {4.0f};
  ApplyOptimizer(o, w, {s, nullptr}, g1, 1, 0.5f, 1);
  EXPECT_FLOAT_EQ(s[0], 9.0f);
  EXPECT_NEAR(w[0], -0.5f * 3.0f / 3.0f, 1e-6f);
  ApplyOptimizer(o, w, {s, nullptr}, g2, 1, 0.5f, 2);
  EXPECT_FLOAT_EQ(s[0], 25.0f);
  EXPECT_NEAR(w[0], -0.5f - 0.5f * 4.0f / 5.0f, 1e-6f);
}

TEST(UpdateRuleTest, AdamMatchesTheBiasCorrectedFormula) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.beta1 = 0.9f;
  o.beta2 = 0.999f;
  o.epsilon = 1e-8f;
  float w[1] = {1.0f}, m[1] = {0}, v[1] = {0};
  double wr = 1.0, mr = 0, vr = 0;
  const float grads[3] = {0.5f, -0.2f, 0.3f};
  for (int t = 1; t <= 3; ++t) {
    const double g = grads[t - 1];
    ApplyOptimizer(o, w, {m, v}, &grads[t - 1], 1, 0.01f, t);
    mr = 0.9 * mr + 0.1 * g;
    vr = 0.999 * vr + 0.001 * g * g;
    const double mhat = mr / (1 - std::pow(0.9, t)), vhat = vr / (1 - std::pow(0.999, t));
    wr -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
    EXPECT_NEAR(w[0], wr, 1e-6) << "step " << t;
    EXPECT_NEAR(m[0], mr, 1e-7);
    EXPECT_NEAR(v[0], vr, 1e-4 * vr);  // float (1 - beta2) is 0.0009999871
  }
}

TEST(UpdateRuleTest, LearningRateSchedules) {
  OptimizerOptions o;
  o.lr = 1.0f;
  EXPECT_FLOAT_EQ(o.LearningRate(1000), 1.0f);
  o.warmup_clocks = 4;
  EXPECT_FLOAT_EQ(o.LearningRate(0), 0.25f);
  EXPECT_FLOAT_EQ(o.LearningRate(3), 1.0f);
  o.decay = LrDecay::kStep;
  o.decay_every = 10;
  o.decay_gamma = 0.5f;
  EXPECT_FLOAT_EQ(o.LearningRate(4 + 9), 1.0f);
  EXPECT_FLOAT_EQ(o.LearningRate(4 + 10), 0.5f);
  EXPECT_FLOAT_EQ(o.LearningRate(4 + 25), 0.25f);
  o.warmup_clocks = 0;
  o.decay = LrDecay::kCosine;
  o.decay_clocks = 100;
  EXPECT_FLOAT_EQ(o.LearningRate(0), 1.0f);
  EXPECT_NEAR(o.LearningRate(50), 0.5f, 1e-6f);
  EXPECT_FLOAT_EQ(o.LearningRate(100), 0.0f);
  EXPECT_FLOAT_EQ(o.LearningRate(500), 0.0f);
}

TEST(UpdateRuleTest, OnlyPlainRulesAreStateless) {
  OptimizerOptions o;
  EXPECT_TRUE(o.Stateless());
  o.momentum = 0.5f;
  EXPECT_FALSE(o.Stateless());
  EXPECT_EQ(o.Slots(), 1u);
  o.momentum = 0;
  o.warmup_clocks = 3;
  EXPECT_FALSE(o.Stateless());
  o.kind = OptimizerKind::kAdam;
  EXPECT_EQ(o.Slots(), 2u);
  OptimizerOptions regularized;
  regularized.l2 = 0.1f;
  EXPECT_FALSE(regularized.Stateless());  // the step depends on the value it meets
}

TEST(UpdateRuleTest, SgdL2AddsTheWeightToTheGradient) {
  OptimizerOptions o;
  o.l2 = 0.5f;
  float w[2] = {2.0f, -4.0f};
  const float g[2] = {1.0f, 0.0f};
  ApplyOptimizer(o, w, {nullptr, nullptr}, g, 2, 0.1f, 1);
  EXPECT_FLOAT_EQ(w[0], 2.0f - 0.1f * (1.0f + 0.5f * 2.0f));   // 1.8
  EXPECT_FLOAT_EQ(w[1], -4.0f - 0.1f * (0.0f + 0.5f * -4.0f)); // -3.8
}

TEST(UpdateRuleTest, SgdL1ShrinksTowardZeroAndStopsThere) {
  OptimizerOptions o;
  o.l1 = 1.0f;
  float w[3] = {0.5f, 0.05f, -0.5f};
  const float g[3] = {0.0f, 0.0f, 1.0f};
  ApplyOptimizer(o, w, {nullptr, nullptr}, g, 3, 0.1f, 1);
  EXPECT_FLOAT_EQ(w[0], 0.4f);                 // 0.5 - 0.1 * 1
  EXPECT_EQ(w[1], 0.0f);                       // |0.05| < 0.1: exactly zero
  EXPECT_FLOAT_EQ(w[2], -0.6f + 0.1f);         // -0.5 - 0.1 * 1 = -0.6, then shrink by 0.1
  // With momentum the shrink follows the velocity step.
  o.momentum = 0.5f;
  float wm[1] = {1.0f}, v[1] = {0.2f};
  const float gm[1] = {0.4f};
  ApplyOptimizer(o, wm, {v, nullptr}, gm, 1, 0.1f, 1);
  EXPECT_FLOAT_EQ(v[0], 0.5f * 0.2f + 0.4f);   // 0.5
  EXPECT_FLOAT_EQ(wm[0], 1.0f - 0.05f - 0.1f); // step, then shrink by lr * l1
}

TEST(UpdateRuleTest, AdagradL1UsesThePerCoordinateStep) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdagrad;
  o.l1 = 0.5f;
  o.l2 = 0.25f;
  float w[1] = {2.0f}, s[1] = {0.0f};
  const float g[1] = {2.5f};
  ApplyOptimizer(o, w, {s, nullptr}, g, 1, 1.0f, 1);
  // grad = 2.5 + 0.25 * 2 = 3; s = 9; rate = 1/3; w = 2 - 1 = 1; shrink by 0.5/3.
  EXPECT_FLOAT_EQ(s[0], 9.0f);
  EXPECT_NEAR(w[0], 1.0f - 0.5f / 3.0f, 1e-6f);
}

TEST(UpdateRuleTest, AdamL2RegularizesTheGradientItAverages) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.l2 = 0.5f;
  float w[1] = {2.0f}, m[1] = {0}, v[1] = {0};
  const float g[1] = {0.0f};
  ApplyOptimizer(o, w, {m, v}, g, 1, 0.01f, 1);
  // grad = 0 + 0.5 * 2 = 1: the first bias-corrected Adam step is lr * sign(grad).
  EXPECT_NEAR(m[0], 0.1f, 1e-7f);
  EXPECT_NEAR(w[0], 2.0f - 0.01f, 1e-6f);
}

// A float product computed at run time, so that the compiler cannot fold
// it: the thread's float mode decides whether a subnormal comes out.
float Product(float a, float b) {
  volatile float x = a, y = b;
  return x * y;
}

#if defined(__SSE__) || defined(__aarch64__)
// A momentum slot whose coordinate gets no more gradient decays toward 0.
// The rules flush what would be subnormal to zero (an x86 operation on a
// subnormal costs a microcode assist; the MLP's shards spent a third of
// the job's CPU so) and the slot ends at exactly 0.
TEST(UpdateRuleTest, DecayingSlotsFlushToZeroInsteadOfGoingSubnormal) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.momentum = 0.5f;
  float w[1] = {1.0f}, v[1] = {0.0f};
  const float g1[1] = {1e-30f}, zero[1] = {0.0f};
  ApplyOptimizer(o, w, {v, nullptr}, g1, 1, 0.1f, 1);
  EXPECT_EQ(v[0], 1e-30f);
  int steps = 0;
  for (; steps < 200 && v[0] != 0.0f; ++steps) {
    ApplyOptimizer(o, w, {v, nullptr}, zero, 1, 0.1f, 2 + steps);
    ASSERT_TRUE(v[0] == 0.0f || std::fabs(v[0]) >= std::numeric_limits<float>::min())
        << "step " << steps << " left a subnormal slot " << v[0];
  }
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_LT(steps, 40);  // 1e-30 * 0.5^k leaves the normal range at k = 26
  EXPECT_EQ(w[0], 1.0f);  // 1 - 0.1 * (tiny) rounds to 1

  // A subnormal input counts as zero: a subnormal weight plus 0 is 0.
  const float sub = std::numeric_limits<float>::denorm_min() * 1000;
  ASSERT_GT(sub, 0.0f);
  ASSERT_LT(sub, std::numeric_limits<float>::min());
  OptimizerOptions add;
  add.kind = OptimizerKind::kAdd;
  float ws[1] = {sub};
  ApplyUpdate(add, ws, zero, 1);
  EXPECT_EQ(ws[0], 0.0f);
}

// The mode is the rules' alone: this thread's arithmetic keeps its
// subnormals before and after an update, and a scope set by the caller
// stays set through the rules' own.
TEST(UpdateRuleTest, FlushingIsScopedToTheUpdate) {
  const float before = Product(1e-30f, 1e-10f);
  ASSERT_GT(before, 0.0f) << "this thread already flushes subnormals";
  OptimizerOptions add;
  add.kind = OptimizerKind::kAdd;
  float w[1] = {1.0f};
  const float g[1] = {1.0f};
  ApplyUpdate(add, w, g, 1);
  EXPECT_EQ(Product(1e-30f, 1e-10f), before);
  {
    FlushSubnormals outer;
    EXPECT_EQ(Product(1e-30f, 1e-10f), 0.0f);
    ApplyUpdate(add, w, g, 1);
    EXPECT_EQ(Product(1e-30f, 1e-10f), 0.0f) << "the rule's scope ended the caller's";
  }
  EXPECT_EQ(Product(1e-30f, 1e-10f), before);
  EXPECT_EQ(w[0], 3.0f);
}
#endif

}  // namespace
}  // namespace ps
