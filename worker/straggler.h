// Artificial stragglers (the job's `stragglers` options): after each step a
// worker may be held back, by a constant factor for the configured slow
// worker and by random pauses of whole steps for every worker. A step is
// `step_ms` when set, else the step's own compute time. Used to test and
// benchmark the consistency modes. Not thread-safe.
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

  // The extra time to wait after a step whose compute took `compute`, with
  // step = step_ms if set, else `compute`: (factor - 1) x step for the slow
  // worker, plus k x step (k uniform in the configured range) with the
  // pause probability. Deterministic for a seed and rank. `share`: the
  // step's samples over train.batch_size (stragglers.balance): a slow
  // worker is slow per sample, so its delay of a step_ms step scales with
  // it (a compute-time step already does); pauses do not.
  std::chrono::nanoseconds DelayAfter(std::chrono::nanoseconds compute, double share = 1.0);
  // Sleeps DelayAfter(compute, share); returns how long.
  std::chrono::nanoseconds HoldBack(std::chrono::nanoseconds compute, double share = 1.0);

  bool active() const { return active_; }

 private:
  const StragglerOptions options_;
  const bool slow_;
  const bool active_;
  std::mt19937_64 gen_;
};

}  // namespace ps

#endif  // PS_WORKER_STRAGGLER_H_
