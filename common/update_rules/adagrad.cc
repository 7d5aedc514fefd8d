// adagrad: s += g^2; w -= lr * g / (sqrt(s) + epsilon), with optional L2
// (g + l2 * w) and L1 (a proximal step at the coordinate's rate).
#include "common/update_rules/rule_parts.h"

namespace ps {

namespace {

using update_rules::ShrinkTowardZero;

[[gnu::target_clones("avx2", "default")]] void AdagradRun(float* __restrict w,
                                                          float* __restrict s,
                                                          const float* __restrict g, size_t n,
                                                          float lr, float epsilon) {
  for (size_t i = 0; i < n; ++i) {
    s[i] += g[i] * g[i];
    w[i] -= lr * g[i] / (std::sqrt(s[i]) + epsilon);
  }
}

[[gnu::target_clones("avx2", "default")]] void AdagradRegularizedRun(
    float* __restrict w, float* __restrict s, const float* __restrict g, size_t n, float lr,
    float epsilon, float l1, float l2) {
  for (size_t i = 0; i < n; ++i) {
    const float grad = g[i] + l2 * w[i];
    s[i] += grad * grad;
    const float rate = lr / (std::sqrt(s[i]) + epsilon);
    w[i] = ShrinkTowardZero(w[i] - rate * grad, rate * l1);
  }
}

void Apply(const OptimizerOptions& o, float* w, const OptimizerSlots& slots, const float* g,
           size_t n, float lr, int64_t) {
  if (o.l1 > 0.0f || o.l2 > 0.0f) {
    AdagradRegularizedRun(w, slots[0], g, n, lr, o.epsilon, o.l1, o.l2);
    return;
  }
  AdagradRun(w, slots[0], g, n, lr, o.epsilon);
}

void Bounds(const OptimizerOptions& o, const StateBounds& before, double max_grad, float lr,
            int64_t, StateBounds& after) {
  constexpr double kRound = update_rules::kBoundRounding;
  const double w = before[0];
  const double g = max_grad + double{o.l2} * w;  // the gradient the rule sees
  const double rate = std::max(0.0, double{lr});
  // s' >= g^2, so |g| / (sqrt(s') + epsilon) <= 1: a step moves a value by
  // at most lr.
  after[1] = (before[1] + g * g) * kRound;
  after[0] = (w + 2.0 * rate) * kRound;
}

constexpr OptimizerParameter kParameters[] = {
    update_rules::kEpsilon,
    update_rules::kL2,
    update_rules::kL1,
};

}  // namespace

extern constinit const UpdateRule kAdagradRule = {
    .kind = OptimizerKind::kAdagrad,
    .name = "adagrad",
    .scheduled = true,
    .parameters = kParameters,
    .slot_names = {"sum_of_squares"},
    .slots = update_rules::FixedSlots<1>,
    .apply = Apply,
    .bounds = Bounds,
};

}  // namespace ps
