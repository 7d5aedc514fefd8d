#include "common/update_rule.h"

namespace ps {

namespace {

// Plain loops so the compiler vectorizes them, built for AVX2 and baseline
// x86-64 (the loader picks); `w` and `g` never alias.
[[gnu::target_clones("avx2", "default")]] void SgdRun(float* __restrict w,
                                                      const float* __restrict g, size_t n,
                                                      float lr) {
  for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
}

[[gnu::target_clones("avx2", "default")]] void AddRun(float* __restrict w,
                                                      const float* __restrict g, size_t n) {
  for (size_t i = 0; i < n; ++i) w[i] += g[i];
}

}  // namespace

void ApplyUpdate(const OptimizerOptions& optimizer, float* w, const float* g, size_t n) {
  switch (optimizer.kind) {
    case OptimizerKind::kAdd:
      AddRun(w, g, n);
      return;
    case OptimizerKind::kSgd:
      SgdRun(w, g, n, optimizer.lr);
      return;
  }
}

}  // namespace ps
