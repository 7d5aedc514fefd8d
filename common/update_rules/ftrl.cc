// ftrl: FTRL-Proximal, per coordinate (McMahan et al., "Ad Click
// Prediction: a View from the Trenches", KDD 2013, Algorithm 1), the
// optimizer of sparse logistic regression for click-through rates.
//
// State arrays z and n; the table's value is the weight w. For a pushed
// gradient g of a coordinate (taken at the w the worker pulled):
//   sigma = (sqrt(n + g^2) - sqrt(n)) / alpha
//   z += g - sigma * w
//   n += g^2
//   w = 0                                              if |z| <= l1
//     = -(z - sign(z) * l1) / ((beta + sqrt(n)) / alpha + l2)   otherwise
// So after a coordinate's first push its value is w of z and n alone (the
// initial value enters once, through sigma * w), and l1 holds it at
// exactly 0 while |z| <= l1. Computed in double per coordinate, state kept
// in float. No learning-rate schedule: alpha and beta set the rates.
#include <algorithm>

#include "common/update_rules/rule_parts.h"

namespace ps {

namespace {

// The L1 test is a select (copysign of a max), not a branch, so that the
// loop vectorizes like the others.
[[gnu::target_clones("avx2", "default")]] void FtrlRun(float* __restrict w, float* __restrict z,
                                                       float* __restrict n,
                                                       const float* __restrict g, size_t count,
                                                       double alpha, double beta, double l1,
                                                       double l2) {
  for (size_t i = 0; i < count; ++i) {
    const double grad = g[i];
    const double n_before = n[i];
    const double n_after = n_before + grad * grad;
    const double root = std::sqrt(n_after);
    const double sigma = (root - std::sqrt(n_before)) / alpha;
    const double zi = double{z[i]} + grad - sigma * double{w[i]};
    const double shrunk = std::copysign(std::max(std::fabs(zi) - l1, 0.0), zi);
    z[i] = static_cast<float>(zi);
    n[i] = static_cast<float>(n_after);
    // 0 - x, not -x: a weight held at 0 is +0, whatever the sign of z.
    w[i] = static_cast<float>(0.0 - shrunk / ((beta + root) / alpha + l2));
  }
}

void Apply(const OptimizerOptions& o, float* w, const OptimizerSlots& slots, const float* g,
           size_t n, float, int64_t) {
  FtrlRun(w, slots[0], slots[1], g, n, o.alpha, o.beta, o.l1, o.l2);
}

void Bounds(const OptimizerOptions& o, const StateBounds& before, double max_grad, float,
            int64_t, StateBounds& after) {
  constexpr double kRound = update_rules::kBoundRounding;
  // sqrt(n + g^2) - sqrt(n) <= |g|, so |sigma * w| <= |g| |w| / alpha.
  after[1] = (before[1] + max_grad + max_grad * before[0] / double{o.alpha}) * kRound;
  after[2] = (before[2] + max_grad * max_grad) * kRound;
  // |w'| <= |z'| / (beta / alpha + l2); nothing to promise when that is 0.
  const double floor = double{o.beta} / double{o.alpha} + double{o.l2};
  after[0] = floor > 0 ? after[1] / floor * kRound : HUGE_VAL;
}

constexpr OptimizerParameter kParameters[] = {
    {"alpha", &OptimizerOptions::alpha, 0.0f, true, update_rules::kNoLimit, false,
     "a finite alpha > 0"},
    {"beta", &OptimizerOptions::beta, 0.0f, false, update_rules::kNoLimit, false,
     "a finite beta >= 0"},
    update_rules::kL1,
    update_rules::kL2,
};

}  // namespace

extern constinit const UpdateRule kFtrlRule = {
    .kind = OptimizerKind::kFtrl,
    .name = "ftrl",
    .scheduled = false,
    .parameters = kParameters,
    .slot_names = {"z", "n"},
    .slots = update_rules::FixedSlots<2>,
    .apply = Apply,
    .bounds = Bounds,
};

}  // namespace ps
