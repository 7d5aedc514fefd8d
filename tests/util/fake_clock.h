// Test helper: a Clock that moves only when the test says so.
#ifndef PS_TESTS_UTIL_FAKE_CLOCK_H_
#define PS_TESTS_UTIL_FAKE_CLOCK_H_

#include <atomic>
#include <chrono>

#include "common/clock.h"

namespace ps {

// Starts at an arbitrary fixed point; Advance() moves it forward. Thread-safe:
// a test thread advances it while server and client threads read it.
class FakeClock final : public Clock {
 public:
  TimePoint Now() const override { return TimePoint(Duration(now_.load())); }
  void Advance(Duration d) { now_.fetch_add(d.count()); }

 private:
  std::atomic<Duration::rep> now_{std::chrono::duration_cast<Duration>(std::chrono::hours(1)).count()};
};

}  // namespace ps

#endif  // PS_TESTS_UTIL_FAKE_CLOCK_H_
