#include "common/update_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

namespace {

// Plain loops so the compiler vectorizes them, built for AVX2 and baseline
// x86-64 (the loader picks); the arrays never alias.
[[gnu::target_clones("avx2", "default")]] void SgdRun(float* __restrict w,
                                                      const float* __restrict g, size_t n,
                                                      float lr) {
  for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
}

[[gnu::target_clones("avx2", "default")]] void AddRun(float* __restrict w,
                                                      const float* __restrict g, size_t n) {
  for (size_t i = 0; i < n; ++i) w[i] += g[i];
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

[[gnu::target_clones("avx2", "default")]] void AdagradRun(float* __restrict w,
                                                          float* __restrict s,
                                                          const float* __restrict g, size_t n,
                                                          float lr, float epsilon) {
  for (size_t i = 0; i < n; ++i) {
    s[i] += g[i] * g[i];
    w[i] -= lr * g[i] / (std::sqrt(s[i]) + epsilon);
  }
}

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

// The regularized rules (optimizer.l1 / l2 > 0): the gradient becomes
// g + l2 * w, and after the step an L1 proximal step moves w toward 0 by l1
// times the coordinate's step size, stopping at 0. Kept apart from the
// plain loops above so those stay as lean as y += a * x.
inline float ShrinkTowardZero(float w, float t) {
  return w > t ? w - t : (w < -t ? w + t : 0.0f);
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

}  // namespace

void ApplyOptimizer(const OptimizerOptions& optimizer, float* w, float* slot0, float* slot1,
                    const float* g, size_t n, float lr, int64_t step) {
  FlushSubnormals flush;
  switch (optimizer.kind) {
    case OptimizerKind::kAdd:
      AddRun(w, g, n);
      return;
    case OptimizerKind::kSgd:
      if (optimizer.l1 > 0.0f || optimizer.l2 > 0.0f) {
        SgdRegularizedRun(w, optimizer.momentum > 0.0f ? slot0 : nullptr, g, n, lr,
                          optimizer.momentum, optimizer.l1, optimizer.l2);
      } else if (optimizer.momentum > 0.0f) {
        MomentumRun(w, slot0, g, n, lr, optimizer.momentum);
      } else {
        SgdRun(w, g, n, lr);
      }
      return;
    case OptimizerKind::kAdagrad:
      if (optimizer.l1 > 0.0f || optimizer.l2 > 0.0f) {
        AdagradRegularizedRun(w, slot0, g, n, lr, optimizer.epsilon, optimizer.l1, optimizer.l2);
        return;
      }
      AdagradRun(w, slot0, g, n, lr, optimizer.epsilon);
      return;
    case OptimizerKind::kAdam: {
      // Bias correction folded into the step size (Kingma & Ba, section 2):
      // lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t), epsilon scaled alike.
      const double t = static_cast<double>(step < 1 ? 1 : step);
      const double c1 = 1.0 - std::pow(static_cast<double>(optimizer.beta1), t);
      const double c2 = std::sqrt(1.0 - std::pow(static_cast<double>(optimizer.beta2), t));
      const auto step_size = static_cast<float>(lr * c2 / c1);
      const auto epsilon_hat = static_cast<float>(optimizer.epsilon * c2);
      if (optimizer.l2 > 0.0f) {
        AdamL2Run(w, slot0, slot1, g, n, step_size, optimizer.beta1, optimizer.beta2,
                  epsilon_hat, optimizer.l2);
        return;
      }
      AdamRun(w, slot0, slot1, g, n, step_size, optimizer.beta1, optimizer.beta2, epsilon_hat);
      return;
    }
  }
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

void StepBounds(const OptimizerOptions& o, const double before[3], double max_grad, float lr,
                int64_t step, double after[3]) {
  // In double, where none of this can overflow before the caller's
  // threshold; 1% on top of each bound covers float rounding.
  constexpr double kRound = 1.01;
  const double w = before[0];
  const double g = max_grad + double{o.l2} * w;  // the gradient the rule sees
  const double rate = std::max(0.0, double{lr});
  after[1] = after[2] = 0;
  switch (o.kind) {
    case OptimizerKind::kAdd:
      after[0] = (w + max_grad) * kRound;
      return;
    case OptimizerKind::kSgd:
      if (o.momentum > 0.0f) {
        after[1] = (double{o.momentum} * before[1] + g) * kRound;
        after[0] = (w + rate * after[1]) * kRound;
      } else {
        after[0] = (w + rate * g) * kRound;
      }
      return;  // the L1 step only moves a value toward 0
    case OptimizerKind::kAdagrad:
      // s' >= g^2, so |g| / (sqrt(s') + epsilon) <= 1: a step moves a value
      // by at most lr.
      after[1] = (before[1] + g * g) * kRound;
      after[0] = (w + 2.0 * rate) * kRound;
      return;
    case OptimizerKind::kAdam: {
      // m' and v' are convex combinations of what they were and g (g^2).
      after[1] = std::max(before[1], g) * kRound;
      after[2] = std::max(before[2], g * g) * kRound;
      const double t = static_cast<double>(step < 1 ? 1 : step);
      const double c1 = 1.0 - std::pow(static_cast<double>(o.beta1), t);
      const double c2 = std::sqrt(1.0 - std::pow(static_cast<double>(o.beta2), t));
      // |m'| / (sqrt(v') + epsilon_hat) <= |m'| / epsilon_hat: loose, finite.
      const double step_size = rate * c2 / c1;
      const double epsilon_hat = double{o.epsilon} * c2;
      after[0] = (w + step_size * after[1] / epsilon_hat) * kRound;
      return;
    }
  }
  after[0] = after[1] = after[2] = HUGE_VAL;
}

void ApplyUpdate(const OptimizerOptions& optimizer, float* w, const float* g, size_t n) {
  ApplyOptimizer(optimizer, w, nullptr, nullptr, g, n, optimizer.lr, 1);
}

}  // namespace ps
