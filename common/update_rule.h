// The update rules a table's optimizer applies to pushed values. Shared by
// the shard (which owns the values) and the worker's parameter cache (which
// mirrors the worker's own pushes), so both compute exactly the same floats.
#ifndef PS_COMMON_UPDATE_RULE_H_
#define PS_COMMON_UPDATE_RULE_H_

#include <cstddef>

#include "common/options.h"

namespace ps {

// w[0..n) gets the pushed g[0..n) under `optimizer`: sgd w -= lr * g, add
// w += g. REQUIRES: w and g do not overlap.
void ApplyUpdate(const OptimizerOptions& optimizer, float* w, const float* g, size_t n);

}  // namespace ps

#endif  // PS_COMMON_UPDATE_RULE_H_
