// Each optimizer against updates computed by hand, and the learning-rate
// schedules.
#include "common/update_rule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ps {
namespace {

TEST(UpdateRuleTest, SgdWithMomentumKeepsAVelocity) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.momentum = 0.9f;
  float w[2] = {1.0f, -1.0f}, v[2] = {0, 0};
  const float g1[2] = {0.5f, 1.0f}, g2[2] = {0.5f, -2.0f};
  ApplyOptimizer(o, w, v, nullptr, g1, 2, 0.1f, 1);
  EXPECT_FLOAT_EQ(v[0], 0.5f);
  EXPECT_FLOAT_EQ(w[0], 1.0f - 0.05f);
  ApplyOptimizer(o, w, v, nullptr, g2, 2, 0.1f, 2);
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
  ApplyOptimizer(o, w, s, nullptr, g1, 1, 0.5f, 1);
  EXPECT_FLOAT_EQ(s[0], 9.0f);
  EXPECT_NEAR(w[0], -0.5f * 3.0f / 3.0f, 1e-6f);
  ApplyOptimizer(o, w, s, nullptr, g2, 1, 0.5f, 2);
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
    ApplyOptimizer(o, w, m, v, &grads[t - 1], 1, 0.01f, t);
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
}

}  // namespace
}  // namespace ps
