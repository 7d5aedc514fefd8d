// The update rules a table's optimizer applies to pushed values. Shared by
// the shard (which owns the values and the optimizer state) and the
// worker's parameter cache (which mirrors the worker's own pushes for the
// stateless rules), so both compute exactly the same floats.
#ifndef PS_COMMON_UPDATE_RULE_H_
#define PS_COMMON_UPDATE_RULE_H_

#include <cstddef>
#include <cstdint>

#include "common/options.h"

namespace ps {

// One step of `optimizer` on w[0..n) for the pushed gradient g[0..n), at
// learning rate `lr`. `slot0` and `slot1` are the rule's state arrays
// (optimizer.Slots() of them, each n floats, zero at the start; null when
// unused): sgd's momentum, adagrad's squared-gradient sums, adam's first
// and second moments. `step` (>= 1) is adam's step for bias correction.
// REQUIRES: w, g and the slots do not overlap.
void ApplyOptimizer(const OptimizerOptions& optimizer, float* w, float* slot0, float* slot1,
                    const float* g, size_t n, float lr, int64_t step);

// The stateless rules (plain sgd at optimizer.lr, add) without state.
// REQUIRES: optimizer.Slots() == 0.
void ApplyUpdate(const OptimizerOptions& optimizer, float* w, const float* g, size_t n);

// True when every one of v[0..n) is finite (no NaN, no Inf). One
// vectorized pass over the bit patterns.
bool AllFinite(const float* v, size_t n);

}  // namespace ps

#endif  // PS_COMMON_UPDATE_RULE_H_
