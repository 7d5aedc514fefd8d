// SIGINT and SIGTERM routed into a pipe, so that a poll loop (the
// launcher's, tools/launcher.cc) wakes on them and handles them on its own
// thread, in order, instead of in a signal handler.
//
// Process-wide: the handlers are the process's, so at most one
// SignalCatcher exists at a time; Install refuses a second. The previous
// handlers are restored when it is destroyed.
//
// Thread-compatible: one thread polls read_fd() and calls Drain(); the
// handler itself only writes one byte to the pipe (async-signal-safe).
#ifndef PS_TOOLS_SIGNAL_CATCHER_H_
#define PS_TOOLS_SIGNAL_CATCHER_H_

#include <signal.h>

#include <memory>
#include <vector>

#include "common/status.h"

namespace ps {

class SignalCatcher {
 public:
  // Installs the handlers. FailedPrecondition while another SignalCatcher
  // exists (the message says to let only one Launcher::Run() handle
  // signals); Internal when the pipe cannot be created.
  static StatusOr<std::unique_ptr<SignalCatcher>> Install();
  // Restores the previous handlers and closes the pipe.
  ~SignalCatcher();
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;

  // Readable when a signal arrived since the last Drain().
  int read_fd() const { return read_fd_; }

  // The signals received since the last call, in order; never blocks.
  std::vector<int> Drain();

 private:
  explicit SignalCatcher(const int fds[2]);

  const int read_fd_;
  const int write_fd_;
  struct sigaction saved_int_;
  struct sigaction saved_term_;
};

}  // namespace ps

#endif  // PS_TOOLS_SIGNAL_CATCHER_H_
