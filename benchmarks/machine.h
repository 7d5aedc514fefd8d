// Shared by the benchmarks: what they print about the machine they ran on,
// and the statistics they report.
#ifndef PS_BENCHMARKS_MACHINE_H_
#define PS_BENCHMARKS_MACHINE_H_

#include <chrono>
#include <string>
#include <vector>

namespace ps {

// The "model name" line of /proc/cpuinfo, or "unknown".
std::string CpuModel();

// The median of `v` (the mean of the middle two for an even count); 0 when empty.
double Median(std::vector<double> v);

// Seconds fn() takes (steady clock).
template <typename Fn>
double Time(Fn fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace ps

#endif  // PS_BENCHMARKS_MACHINE_H_
