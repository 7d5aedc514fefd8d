// Artificial stragglers (the job's `stragglers` options): after each step a
// worker may be held back, by a constant factor for the configured slow
// worker and by random pauses of whole steps for every worker. Used to test
// and benchmark the consistency modes. Not thread-safe.
#ifndef PS_WORKER_STRAGGLER_H_
#define PS_WORKER_STRAGGLER_H_

#include <chrono>
#include <cstdint>
#include <random>

#include "common/options.h"

namespace ps {

class StragglerInjector {
 public:
  StragglerInjector(const StragglerOptions& options, uint32_t rank);

  // The extra time to wait after a step that took `step`: (factor - 1) x
  // step for the slow worker, plus k x step (k uniform in the configured
  // range) with the pause probability. Deterministic for a seed and rank.
  std::chrono::nanoseconds DelayAfter(std::chrono::nanoseconds step);
  // Sleeps DelayAfter(step); returns how long.
  std::chrono::nanoseconds HoldBack(std::chrono::nanoseconds step);

  bool active() const { return active_; }

 private:
  const StragglerOptions options_;
  const bool slow_;
  const bool active_;
  std::mt19937_64 gen_;
};

}  // namespace ps

#endif  // PS_WORKER_STRAGGLER_H_
