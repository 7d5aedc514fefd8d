// Child processes for launchers and tests (Linux only): fork + execve, no
// shell, no PATH search.
//
// Every child
//  - runs in its own process group (pgid == pid) unless asked otherwise, so
//    Signal() reaches anything the child forks (a `/bin/sh -c` script and its
//    `sleep`), and a Ctrl-C on the terminal reaches only the parent, which can
//    then stop its children in order;
//  - gets SIGKILL when the thread that spawned it exits (PR_SET_PDEATHSIG), so
//    a crashed launcher or test never leaks processes. Note: the kernel ties
//    this to the spawning *thread*, not the process; spawn from a thread that
//    outlives the child;
//  - starts with stdin on /dev/null, all signal dispositions at their default
//    and an empty signal mask, whatever the parent had;
//  - inherits no descriptor of the parent beyond 0, 1 and 2: every descriptor
//    this file creates is close-on-exec.
//
// When a child in its own group is reaped, whatever is still in that group (a
// grandchild left behind) gets SIGKILL: a Subprocess never outlives its object
// and never leaves a zombie or a group member behind. Grandchildren that
// change their own process group escape this.
#ifndef PS_COMMON_SUBPROCESS_H_
#define PS_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ps {

struct SubprocessOptions {
  // The program and its arguments. argv[0] is the path of the executable,
  // absolute or relative to the current directory (PATH is not searched).
  // Required, non-empty.
  std::vector<std::string> argv;
  // Variables added to (or replacing those of) the parent's environment,
  // as (name, value). Names must be non-empty and contain no '='.
  std::vector<std::pair<std::string, std::string>> env;
  // true: the child's stdout and stderr go, merged, into one pipe whose read
  // end is output_fd() (non-blocking, close-on-exec). The reader must drain
  // it, or the child blocks once the pipe is full (64 KiB).
  // false: the child shares the parent's stdout and stderr. Default false.
  bool capture_output = false;
  // Put the child in a new process group of its own (see the file comment).
  // false: it stays in the parent's group and Signal() reaches the child
  // only. Default true.
  bool new_process_group = true;
};

// One running (or exited, not yet destroyed) child process.
// Thread-compatible: one thread at a time.
class Subprocess {
 public:
  // Starts the child and returns once it has exec'd the program.
  // Errors: InvalidArgument (empty argv, bad env name); NotFound (argv[0]
  // does not exist); PermissionDenied (not executable); ResourceExhausted
  // (fork: too many processes, no memory; out of descriptors); Internal
  // (anything else). The message names the program and the failing step.
  static StatusOr<std::unique_ptr<Subprocess>> Spawn(
      const SubprocessOptions& options);

  // If the child is still running: SIGKILL (to its group) and reap.
  // Never blocks longer than the kernel takes to kill a process.
  ~Subprocess();

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // argv[0], for messages.
  const std::string& program() const { return program_; }
  // Read end of the merged stdout+stderr pipe (non-blocking); -1 unless
  // capture_output. Owned by this object: do not close it. EOF once the
  // child and everything that inherited its output are gone.
  int output_fd() const { return output_fd_; }
  // A pidfd that poll() reports readable once the child has exited (reap it
  // then with TryWait()); -1 where the kernel lacks pidfd_open (< 5.3).
  // Owned by this object.
  int exit_fd() const { return exit_fd_; }

  // Sends `signo` to the child's process group (or to the child alone when
  // it has no group of its own). OK and no effect if the child has already
  // been reaped. Internal if kill() fails (EPERM, EINVAL for a bad signo).
  Status Signal(int signo);

  // Reaps the child if it has exited, without blocking. Returns its wait
  // status (decode with WIFEXITED etc. or DescribeWaitStatus), and the same
  // status on every later call; nullopt while the child is running.
  std::optional<int> TryWait();

  // Waits up to `timeout` for the child to exit and reaps it.
  // Errors: DeadlineExceeded if it is still running after `timeout`.
  StatusOr<int> WaitFor(std::chrono::milliseconds timeout);

  // Stops the child: SIGTERM, up to `grace` for it to exit, then SIGKILL.
  // Returns the wait status once it is reaped (at once if it already was).
  int Terminate(std::chrono::milliseconds grace);

  // The wait status once the child has been reaped; nullopt before.
  std::optional<int> wait_status() const { return wait_status_; }

 private:
  Subprocess(pid_t pid, std::string program, bool own_group, int output_fd,
             int exit_fd);

  // Reaps the child: blocking or not; returns false if `block` is false and
  // the child is still running.
  bool Reap(bool block);

  const pid_t pid_;
  const std::string program_;
  const bool own_group_;
  const int output_fd_;
  const int exit_fd_;
  std::optional<int> wait_status_;
};

// "exited with code 3", "killed by signal 9 (Killed)",
// "killed by signal 11 (Segmentation fault), core dumped".
std::string DescribeWaitStatus(int wait_status);

// True if `wait_status` is a normal exit with code 0.
bool ExitedSuccessfully(int wait_status);

// Splits a byte stream into lines for streaming child output.
// Thread-compatible.
class LineReader {
 public:
  // A line longer than `max_line_bytes` is handed out in pieces of that size,
  // so a child that never writes '\n' cannot grow memory without bound.
  // REQUIRES: max_line_bytes >= 1.
  explicit LineReader(size_t max_line_bytes = 64 * 1024);

  // Appends `bytes`; each complete line (without its '\n') is appended to
  // *lines. The unterminated tail is kept for the next call.
  void Feed(std::string_view bytes, std::vector<std::string>* lines);

  // Returns the kept unterminated tail and forgets it; nullopt if there is
  // none. Call at EOF.
  std::optional<std::string> Flush();

  // Reads from `fd` (non-blocking) until it would block, hits EOF or has
  // read `max_bytes`, feeding what it read. Returns true at EOF, after
  // appending the flushed tail to *lines; false otherwise (read again when
  // poll() says so). Errors: Internal with the errno text of read().
  StatusOr<bool> ReadFrom(int fd, std::vector<std::string>* lines,
                          size_t max_bytes = 64 * 1024);

 private:
  const size_t max_line_bytes_;
  std::string partial_;
};

}  // namespace ps

#endif  // PS_COMMON_SUBPROCESS_H_
