#include "worker/straggler.h"

#include <thread>

namespace ps {

StragglerInjector::StragglerInjector(const StragglerOptions& options, uint32_t rank)
    : options_(options),
      slow_(options.slow_worker == static_cast<int64_t>(rank)),
      active_(slow_ || options.pause_probability > 0),
      gen_(options.seed + rank) {}

std::chrono::nanoseconds StragglerInjector::DelayAfter(std::chrono::nanoseconds compute,
                                                       double share) {
  const double step_ns =
      options_.step_ms > 0 ? options_.step_ms * 1e6 : static_cast<double>(compute.count());
  double steps = slow_ ? (options_.slow_factor - 1.0) * (options_.step_ms > 0 ? share : 1.0)
                       : 0.0;
  if (options_.pause_probability > 0 &&
      std::uniform_real_distribution<double>(0.0, 1.0)(gen_) < options_.pause_probability) {
    steps += static_cast<double>(std::uniform_int_distribution<uint32_t>(
        options_.pause_min_steps, options_.pause_max_steps)(gen_));
  }
  return std::chrono::nanoseconds(static_cast<int64_t>(steps * step_ns));
}

std::chrono::nanoseconds StragglerInjector::HoldBack(std::chrono::nanoseconds compute,
                                                     double share) {
  const auto delay = DelayAfter(compute, share);
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  return delay;
}

}  // namespace ps
