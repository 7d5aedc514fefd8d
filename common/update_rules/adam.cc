// adam: Kingma & Ba, with bias correction at step t (the shard's minimum
// clock + 1) and optional L2 (g + l2 * w).
#include "common/update_rules/rule_parts.h"

namespace ps {

namespace {

[[gnu::target_clones("avx2", "default")]] void AdamRun(float* __restrict w, float* __restrict m,
                                                       float* __restrict v,
                                                       const float* __restrict g, size_t n,
                                                       float step_size, float beta1, float beta2,
                                                       float epsilon_hat) {
  for (size_t i = 0; i < n; ++i) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) + epsilon_hat);
  }
}

[[gnu::target_clones("avx2", "default")]] void AdamL2Run(float* __restrict w, float* __restrict m,
                                                         float* __restrict v,
                                                         const float* __restrict g, size_t n,
                                                         float step_size, float beta1, float beta2,
                                                         float epsilon_hat, float l2) {
  for (size_t i = 0; i < n; ++i) {
    const float grad = g[i] + l2 * w[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * grad;
    v[i] = beta2 * v[i] + (1.0f - beta2) * grad * grad;
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) + epsilon_hat);
  }
}

// Bias correction folded into the step size (Kingma & Ba, section 2):
// lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t), epsilon scaled alike.
struct Corrected {
  double step_size;
  double epsilon_hat;
};
Corrected Correct(const OptimizerOptions& o, double lr, int64_t step) {
  const double t = static_cast<double>(step < 1 ? 1 : step);
  const double c1 = 1.0 - std::pow(static_cast<double>(o.beta1), t);
  const double c2 = std::sqrt(1.0 - std::pow(static_cast<double>(o.beta2), t));
  return {lr * c2 / c1, double{o.epsilon} * c2};
}

void Apply(const OptimizerOptions& o, float* w, const OptimizerSlots& slots, const float* g,
           size_t n, float lr, int64_t step) {
  const Corrected c = Correct(o, lr, step);
  const auto step_size = static_cast<float>(c.step_size);
  const auto epsilon_hat = static_cast<float>(c.epsilon_hat);
  if (o.l2 > 0.0f) {
    AdamL2Run(w, slots[0], slots[1], g, n, step_size, o.beta1, o.beta2, epsilon_hat, o.l2);
    return;
  }
  AdamRun(w, slots[0], slots[1], g, n, step_size, o.beta1, o.beta2, epsilon_hat);
}

void Bounds(const OptimizerOptions& o, const StateBounds& before, double max_grad, float lr,
            int64_t step, StateBounds& after) {
  constexpr double kRound = update_rules::kBoundRounding;
  const double w = before[0];
  const double g = max_grad + double{o.l2} * w;  // the gradient the rule sees
  // m' and v' are convex combinations of what they were and g (g^2).
  after[1] = std::max(before[1], g) * kRound;
  after[2] = std::max(before[2], g * g) * kRound;
  // |m'| / (sqrt(v') + epsilon_hat) <= |m'| / epsilon_hat: loose, finite.
  const Corrected c = Correct(o, std::max(0.0, double{lr}), step);
  after[0] = (w + c.step_size * after[1] / c.epsilon_hat) * kRound;
}

constexpr OptimizerParameter kParameters[] = {
    update_rules::kEpsilon,
    update_rules::kL2,
    {"beta1", &OptimizerOptions::beta1, 0.0f, false, 1.0f, true, "a decay rate in [0, 1)"},
    {"beta2", &OptimizerOptions::beta2, 0.0f, false, 1.0f, true, "a decay rate in [0, 1)"},
};

}  // namespace

extern constinit const UpdateRule kAdamRule = {
    .kind = OptimizerKind::kAdam,
    .name = "adam",
    .scheduled = true,
    .parameters = kParameters,
    .slot_names = {"first_moment", "second_moment"},
    .slots = update_rules::FixedSlots<2>,
    .apply = Apply,
    .bounds = Bounds,
};

}  // namespace ps
