// sgd: v = momentum * v + g; w -= lr * v (plain sgd, without state, when
// momentum is 0), with optional L2 (g + l2 * w) and L1 (a proximal step).
#include "common/update_rules/rule_parts.h"

namespace ps {

namespace {

using update_rules::ShrinkTowardZero;

// Plain loops so the compiler vectorizes them, built for AVX2 and baseline
// x86-64 (the loader picks); the arrays never alias. The regularized rule
// has a loop of its own so that these stay as lean as y += a * x.
[[gnu::target_clones("avx2", "default")]] void SgdRun(float* __restrict w,
                                                      const float* __restrict g, size_t n,
                                                      float lr) {
  for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
}

[[gnu::target_clones("avx2", "default")]] void MomentumRun(float* __restrict w,
                                                           float* __restrict v,
                                                           const float* __restrict g, size_t n,
                                                           float lr, float momentum) {
  for (size_t i = 0; i < n; ++i) {
    v[i] = momentum * v[i] + g[i];
    w[i] -= lr * v[i];
  }
}

[[gnu::target_clones("avx2", "default")]] void SgdRegularizedRun(
    float* __restrict w, float* __restrict v, const float* __restrict g, size_t n, float lr,
    float momentum, float l1, float l2) {
  for (size_t i = 0; i < n; ++i) {
    float step = g[i] + l2 * w[i];
    if (v != nullptr) {
      v[i] = momentum * v[i] + step;
      step = v[i];
    }
    w[i] = ShrinkTowardZero(w[i] - lr * step, lr * l1);
  }
}

uint32_t Slots(const OptimizerOptions& o) { return o.momentum > 0.0f ? 1 : 0; }

void Apply(const OptimizerOptions& o, float* w, const OptimizerSlots& slots, const float* g,
           size_t n, float lr, int64_t) {
  if (o.l1 > 0.0f || o.l2 > 0.0f) {
    SgdRegularizedRun(w, o.momentum > 0.0f ? slots[0] : nullptr, g, n, lr, o.momentum, o.l1, o.l2);
  } else if (o.momentum > 0.0f) {
    MomentumRun(w, slots[0], g, n, lr, o.momentum);
  } else {
    SgdRun(w, g, n, lr);
  }
}

void Bounds(const OptimizerOptions& o, const StateBounds& before, double max_grad, float lr,
            int64_t, StateBounds& after) {
  constexpr double kRound = update_rules::kBoundRounding;
  const double w = before[0];
  const double g = max_grad + double{o.l2} * w;  // the gradient the rule sees
  const double rate = std::max(0.0, double{lr});
  if (o.momentum > 0.0f) {
    after[1] = (double{o.momentum} * before[1] + g) * kRound;
    after[0] = (w + rate * after[1]) * kRound;
  } else {
    after[0] = (w + rate * g) * kRound;
  }
  // The L1 step only moves a value toward 0.
}

constexpr OptimizerParameter kParameters[] = {
    {"momentum", &OptimizerOptions::momentum, 0.0f, false, 1.0f, true, "a momentum in [0, 1)"},
    update_rules::kL2,
    update_rules::kL1,
};

}  // namespace

extern constinit const UpdateRule kSgdRule = {
    .kind = OptimizerKind::kSgd,
    .name = "sgd",
    .scheduled = true,
    .parameters = kParameters,
    .slot_names = {"momentum"},
    .slots = Slots,
    .apply = Apply,
    .bounds = Bounds,
};

}  // namespace ps
