// transport_bench's workload vocabulary, shared by its two sides (ours and
// the raw ZeroMQ baseline, benchmarks/transport_raw.h): the operations, when
// a measurement stops, and what one repetition records.
#ifndef PS_BENCHMARKS_TRANSPORT_COMMON_H_
#define PS_BENCHMARKS_TRANSPORT_COMMON_H_

#include <chrono>
#include <cstdint>
#include <vector>

namespace ps::transport_bench {

using Clock = std::chrono::steady_clock;

inline double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}
inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

enum class OpKind { kPush, kPull, kPushPull };

inline const char* OpLabel(OpKind op) {
  switch (op) {
    case OpKind::kPush:
      return "push";
    case OpKind::kPull:
      return "pull";
    case OpKind::kPushPull:
      return "push+pull";
  }
  return "?";
}

// When a measurement stops issuing new operations: after `seconds` and at
// least `min_ops` issued.
struct Limits {
  double seconds = 0.3;
  uint64_t min_ops = 10;
};

// One repetition.
struct Sample {
  double seconds = 0;
  uint64_t ops = 0;
  std::vector<double> latencies_us;
};

}  // namespace ps::transport_bench

#endif  // PS_BENCHMARKS_TRANSPORT_COMMON_H_
