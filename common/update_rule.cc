#include "common/update_rule.h"

#include <cmath>
#include <cstring>
#include <iterator>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace ps {

namespace {

#if defined(__SSE__)
constexpr uint64_t kFlushBits = 0x8040;  // MXCSR FTZ (bit 15) | DAZ (bit 6)
uint64_t ReadFloatMode() { return _mm_getcsr(); }
void WriteFloatMode(uint64_t mode) { _mm_setcsr(static_cast<unsigned>(mode)); }
#elif defined(__aarch64__)
constexpr uint64_t kFlushBits = uint64_t{1} << 24;  // FPCR FZ
uint64_t ReadFloatMode() {
  uint64_t fpcr;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
}
void WriteFloatMode(uint64_t mode) { asm volatile("msr fpcr, %0" : : "r"(mode)); }
#else
constexpr uint64_t kFlushBits = 0;  // no such mode known here: subnormals stay
uint64_t ReadFloatMode() { return 0; }
void WriteFloatMode(uint64_t) {}
#endif

}  // namespace

FlushSubnormals::FlushSubnormals() : saved_(ReadFloatMode()), changed_(false) {
  if ((saved_ & kFlushBits) != kFlushBits) {
    WriteFloatMode(saved_ | kFlushBits);
    changed_ = true;
  }
}

FlushSubnormals::~FlushSubnormals() {
  if (changed_) WriteFloatMode(saved_);
}

// The registry: one row per rule, each defined in its own file under
// common/update_rules/, in the order messages list them.
extern const UpdateRule kSgdRule;
extern const UpdateRule kAddRule;
extern const UpdateRule kAdagradRule;
extern const UpdateRule kAdamRule;
extern const UpdateRule kFtrlRule;

namespace {
constexpr const UpdateRule* kUpdateRules[] = {
    &kSgdRule, &kAddRule, &kAdagradRule, &kAdamRule, &kFtrlRule,
};
}  // namespace

std::span<const UpdateRule* const> UpdateRules() { return kUpdateRules; }

std::vector<std::string_view> OptimizerNames() {
  std::vector<std::string_view> names;
  for (const UpdateRule* rule : kUpdateRules) names.push_back(rule->name);
  return names;
}

const UpdateRule* FindRule(OptimizerKind kind) {
  // The rows are in the enum's order; the loop finds a rule all the same.
  const auto index = static_cast<size_t>(kind);
  if (index < std::size(kUpdateRules) && kUpdateRules[index]->kind == kind) {
    return kUpdateRules[index];
  }
  for (const UpdateRule* rule : kUpdateRules) {
    if (rule->kind == kind) return rule;
  }
  return nullptr;
}

const UpdateRule* FindRule(std::string_view name) {
  for (const UpdateRule* rule : kUpdateRules) {
    if (rule->name == name) return rule;
  }
  return nullptr;
}

std::string_view OptimizerName(OptimizerKind kind) {
  const UpdateRule* rule = FindRule(kind);
  return rule != nullptr ? rule->name : "unknown";
}

uint32_t OptimizerOptions::Slots() const {
  const UpdateRule* rule = FindRule(kind);
  return rule != nullptr ? rule->slots(*this) : 0;
}

void ApplyOptimizer(const OptimizerOptions& optimizer, float* w, const OptimizerSlots& slots,
                    const float* g, size_t n, float lr, int64_t step) {
  const UpdateRule* rule = FindRule(optimizer.kind);
  if (rule == nullptr) return;
  ApplyRule(*rule, optimizer, w, slots, g, n, lr, step);
}

void ApplyRule(const UpdateRule& rule, const OptimizerOptions& optimizer, float* w,
               const OptimizerSlots& slots, const float* g, size_t n, float lr, int64_t step) {
  FlushSubnormals flush;
  rule.apply(optimizer, w, slots, g, n, lr, step);
}

// An integer max over the bit patterns without sign (non-negative floats
// order as their bits do), so that the loop vectorizes. Kept out of line:
// inlined into a caller, g++ 12 leaves such loops scalar (5x slower). Built
// for AVX2 and baseline x86-64; the loader picks what the CPU has.
[[gnu::noinline, gnu::target_clones("avx2", "default")]] uint32_t MaxAbsBits(const float* v,
                                                                            size_t n) {
  uint32_t max = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof(bits));
    bits &= 0x7fffffffu;
    max = bits > max ? bits : max;
  }
  return max;
}

bool AllFinite(const float* v, size_t n) { return MaxAbsBits(v, n) < kNonFiniteBits; }

void StepBounds(const OptimizerOptions& optimizer, const StateBounds& before, double max_grad,
                float lr, int64_t step, StateBounds& after) {
  const UpdateRule* rule = FindRule(optimizer.kind);
  if (rule == nullptr) {
    for (double& bound : after) bound = HUGE_VAL;
    return;
  }
  for (double& bound : after) bound = 0;
  rule->bounds(optimizer, before, max_grad, lr, step, after);
}

void ApplyUpdate(const OptimizerOptions& optimizer, float* w, const float* g, size_t n) {
  ApplyOptimizer(optimizer, w, {}, g, n, optimizer.lr, 1);
}

}  // namespace ps
