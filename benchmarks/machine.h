// What the benchmarks print about the machine they ran on.
#ifndef PS_BENCHMARKS_MACHINE_H_
#define PS_BENCHMARKS_MACHINE_H_

#include <string>

namespace ps {

// The "model name" line of /proc/cpuinfo, or "unknown".
std::string CpuModel();

}  // namespace ps

#endif  // PS_BENCHMARKS_MACHINE_H_
