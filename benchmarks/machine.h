// Shared by the benchmarks: what they print about the machine they ran on,
// the statistics they report, and what they need of it (free ports, the
// page cache, scratch folders, child process state).
#ifndef PS_BENCHMARKS_MACHINE_H_
#define PS_BENCHMARKS_MACHINE_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ps {

// The "model name" line of /proc/cpuinfo, or "unknown".
std::string CpuModel();

// Arbitrary 32-bit patterns (NaNs and infinities among them as floats), a
// pure function of an element's index `i` and its array `k`: what the
// checkpoint benchmarks fill tables with and check restores against.
uint32_t PatternBits(uint64_t i, uint64_t k);

// The median of `v` (the mean of the middle two for an even count); 0 when empty.
double Median(std::vector<double> v);

// The nearest-rank percentile q (0..1) of `v`, which it sorts; 0 when empty.
double Percentile(std::vector<double>& v, double q);

// Seconds fn() takes (steady clock).
template <typename Fn>
double Time(Fn fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The folder of this executable ("." when it cannot be read).
std::string OwnDir();

// The path of the executable `name` in `bin_dir` (empty: OwnDir(), where
// the benchmarks and the servers are built). NotFound, saying to build the
// target or pass --bin-dir, when there is none.
StatusOr<std::string> ExecutableIn(const std::string& bin_dir, const std::string& name);

// A loopback TCP port that was free a moment ago.
StatusOr<int> FreePort();
// Whether loopback TCP port `port` can be bound now.
bool PortIsFree(int port);

// `shards` loopback "127.0.0.1:<port>" entries into *servers, and a
// replication.port_offset for `factor` copies whose ports were free a
// moment ago.
StatusOr<uint32_t> FreeReplicaPorts(uint32_t shards, uint32_t factor,
                                    std::vector<std::string>* servers);

// sync, then drops the page cache. PermissionDenied (it needs root) that
// says to run with `off_flag` instead (e.g. "--no-cold").
Status DropCaches(std::string_view off_flag);

// The state letter of /proc/<pid>/stat ('T' once stopped), or '?'.
char ProcessState(pid_t pid);

// The resident memory of process `pid` (VmRSS of /proc/<pid>/status), in
// bytes; 0 when it cannot be read (the process is gone).
uint64_t ResidentBytes(pid_t pid);

// The 1, 5 and 15 minute load averages of /proc/loadavg ("2.41 2.10
// 1.95"), or "unknown".
std::string LoadAverage();

// Reads every regular file under `dir` with read() calls of buffer->size()
// bytes into `buffer`. Returns the bytes read.
StatusOr<uint64_t> ReadTree(const std::filesystem::path& dir, std::vector<char>* buffer);

// Removes a folder (and what is in it) when it goes out of scope.
class ScratchDir {
 public:
  explicit ScratchDir(std::filesystem::path path) : path_(std::move(path)) {}
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  const std::filesystem::path path_;
};

// Processes that keep cores busy, as a worker host's data loading and
// compute do, while a benchmark measures (transport_bench --busy-cores): each
// spins on its own, unpinned, like `yes > /dev/null`. They are killed and
// reaped when this goes out of scope, and die with the benchmark if it does
// (PR_SET_PDEATHSIG).
class BusyCores {
 public:
  // Starts `n` spinning processes. Call before starting threads.
  static StatusOr<BusyCores> Start(uint32_t n);
  BusyCores() = default;
  BusyCores(BusyCores&& other) noexcept : pids_(std::move(other.pids_)) { other.pids_.clear(); }
  BusyCores& operator=(BusyCores&&) = delete;
  BusyCores(const BusyCores&) = delete;
  ~BusyCores();
  size_t count() const { return pids_.size(); }

 private:
  std::vector<pid_t> pids_;
};

}  // namespace ps

#endif  // PS_BENCHMARKS_MACHINE_H_
