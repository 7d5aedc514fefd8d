// Pieces shared by the update rules under common/update_rules/: the
// parameters several rules take and small helpers of their loops and
// bounds. Only these files include it; the rest of the server sees the
// registry (common/update_rule.h).
#ifndef PS_COMMON_UPDATE_RULES_RULE_PARTS_H_
#define PS_COMMON_UPDATE_RULES_RULE_PARTS_H_

#include <cmath>
#include <limits>

#include "common/options.h"
#include "common/update_rule.h"

namespace ps::update_rules {

inline constexpr float kNoLimit = std::numeric_limits<float>::infinity();

inline constexpr OptimizerParameter kEpsilon = {
    "epsilon", &OptimizerOptions::epsilon, 0.0f, true, kNoLimit, false, "a finite epsilon > 0"};
inline constexpr OptimizerParameter kL1 = {
    "l1", &OptimizerOptions::l1, 0.0f, false, kNoLimit, false, "a finite L1 weight >= 0"};
inline constexpr OptimizerParameter kL2 = {
    "l2", &OptimizerOptions::l2, 0.0f, false, kNoLimit, false, "a finite L2 weight >= 0"};

// Bounds are computed in double, where none of them can overflow before
// the store's threshold; this much on top of each covers float rounding.
inline constexpr double kBoundRounding = 1.01;

// A proximal L1 step: w moved toward 0 by t, stopping at 0.
inline float ShrinkTowardZero(float w, float t) {
  return w > t ? w - t : (w < -t ? w + t : 0.0f);
}

// The number of state arrays of a rule that always has `n`.
template <uint32_t n>
uint32_t FixedSlots(const OptimizerOptions&) {
  return n;
}

}  // namespace ps::update_rules

#endif  // PS_COMMON_UPDATE_RULES_RULE_PARTS_H_
