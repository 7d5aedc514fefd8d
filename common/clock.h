// The time that deadlines, liveness and waits are measured in. Servers and
// clients take a Clock so that tests can run them on a FakeClock
// (tests/util/fake_clock.h) and move time by hand instead of sleeping.
//
// Thread safety: Now() is safe from any thread on every implementation.
#ifndef PS_COMMON_CLOCK_H_
#define PS_COMMON_CLOCK_H_

#include <chrono>

namespace ps {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

// The process's monotonic clock (std::chrono::steady_clock).
class SteadyClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
};

}  // namespace ps

#endif  // PS_COMMON_CLOCK_H_
