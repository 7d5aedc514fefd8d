// add: w += pushed (accumulators, counters, exact sums). No learning rate,
// no state, no parameters.
#include "common/update_rules/rule_parts.h"

namespace ps {

namespace {

[[gnu::target_clones("avx2", "default")]] void AddRun(float* __restrict w,
                                                      const float* __restrict g, size_t n) {
  for (size_t i = 0; i < n; ++i) w[i] += g[i];
}

void Apply(const OptimizerOptions&, float* w, const OptimizerSlots&, const float* g, size_t n,
           float, int64_t) {
  AddRun(w, g, n);
}

void Bounds(const OptimizerOptions&, const StateBounds& before, double max_grad, float, int64_t,
            StateBounds& after) {
  after[0] = (before[0] + max_grad) * update_rules::kBoundRounding;
}

}  // namespace

extern constinit const UpdateRule kAddRule = {
    .kind = OptimizerKind::kAdd,
    .name = "add",
    .scheduled = false,
    .parameters = {},
    .slot_names = {},
    .slots = update_rules::FixedSlots<0>,
    .apply = Apply,
    .bounds = Bounds,
};

}  // namespace ps
