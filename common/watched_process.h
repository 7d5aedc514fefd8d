// A child process whose output is watched line by line (tests, benchmarks
// and launchers that wait for what a server says: "serving", "restored").
//
// The merged stdout and stderr of the child are read on a thread this
// object owns; each line is kept with the time it arrived, so a caller can
// wait for a line and learn when it came. The child is killed and reaped,
// and the thread joined, when the object goes away, whatever happened.
//
// Thread-safe: the waits and reads may be called from any thread; Signal
// and WaitFor from one thread at a time.
#ifndef PS_COMMON_WATCHED_PROCESS_H_
#define PS_COMMON_WATCHED_PROCESS_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"

namespace ps {

class WatchedProcess {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the child (options.capture_output is forced on). Each line is
  // also written to stderr after `echo_prefix` unless that is empty.
  // Errors: those of Subprocess::Spawn.
  static StatusOr<std::unique_ptr<WatchedProcess>> Start(SubprocessOptions options,
                                                         std::string echo_prefix = "");

  // SIGKILL unless reaped already, then reaps and joins the reader.
  ~WatchedProcess();
  WatchedProcess(const WatchedProcess&) = delete;
  WatchedProcess& operator=(const WatchedProcess&) = delete;

  pid_t pid() const { return process_->pid(); }
  // When Start spawned it.
  Clock::time_point spawned() const { return spawned_; }
  Status Signal(int signo) { return process_->Signal(signo); }
  // Waits up to `timeout` for the child to exit and reaps it (Subprocess::WaitFor).
  StatusOr<int> WaitFor(std::chrono::milliseconds timeout) { return process_->WaitFor(timeout); }

  // Waits until a line containing `needle` has arrived; returns when it
  // arrived, and the line in *line. NotFound when the output ended first
  // (the child exited), DeadlineExceeded after `timeout`; both carry the
  // output's last lines.
  StatusOr<Clock::time_point> WaitForLine(const std::string& needle, Clock::duration timeout,
                                          std::string* line = nullptr) const;

  // Waits up to `timeout` for the output to end (the child and whatever
  // inherited its output are gone). True when it did.
  bool WaitForEnd(Clock::duration timeout) const;

  // The first line containing `needle` so far, if any.
  std::optional<std::string> FindLine(const std::string& needle) const;

  // Every line so far, each followed by '\n'.
  std::string Output() const;

 private:
  WatchedProcess(std::unique_ptr<Subprocess> process, std::string echo_prefix);
  void ReadLoop();
  std::string TailLocked() const;

  std::unique_ptr<Subprocess> process_;
  const std::string echo_prefix_;
  const Clock::time_point spawned_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<std::pair<Clock::time_point, std::string>> lines_;  // guarded by mu_
  bool ended_ = false;                                            // guarded by mu_
  std::thread reader_;  // last: starts once the members above exist
};

}  // namespace ps

#endif  // PS_COMMON_WATCHED_PROCESS_H_
