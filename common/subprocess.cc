#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/logging.h"

extern char** environ;

namespace ps {
namespace {

using Clock = std::chrono::steady_clock;

Status ErrnoError(int err, const std::string& what) {
  std::string message = what + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return NotFoundError(message);
    case EACCES:
    case EPERM:
      return Status(StatusCode::kPermissionDenied, message);
    case EAGAIN:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
      return ResourceExhaustedError(message);
    case ENOEXEC:
    case E2BIG:
    case EINVAL:
      return InvalidArgumentError(message);
    default:
      return InternalError(message);
  }
}

// Closes a descriptor on scope exit unless released.
class FdCloser {
 public:
  explicit FdCloser(int fd = -1) : fd_(fd) {}
  ~FdCloser() { Reset(); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// Keeps our pipes off 0, 1 and 2 (possible when the parent runs with a
// closed standard descriptor), so the child's dup2() onto 0..2 cannot
// clobber one pipe end with another.
Status MoveAboveStdio(FdCloser* fd) {
  if (fd->get() > 2) return Status::Ok();
  int moved = ::fcntl(fd->get(), F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return ErrnoError(errno, "fcntl(F_DUPFD_CLOEXEC)");
  fd->Reset(moved);
  return Status::Ok();
}

// What the child reports through the error pipe when a step before (or the)
// execve fails.
enum class ChildStep : int { kSetpgid, kPdeathsig, kDup, kExec };

struct ChildError {
  ChildStep step;
  int err;
};

const char* ChildStepName(ChildStep step) {
  switch (step) {
    case ChildStep::kSetpgid:
      return "setpgid in the child";
    case ChildStep::kPdeathsig:
      return "prctl(PR_SET_PDEATHSIG) in the child";
    case ChildStep::kDup:
      return "redirecting stdin/stdout/stderr in the child";
    case ChildStep::kExec:
      return "execve";
  }
  return "?";
}

// Between fork() and execve() only async-signal-safe calls are allowed (the
// parent may have other threads holding malloc or stdio locks): everything
// below was prepared by the parent.
struct ChildPlan {
  const char* path;
  char* const* argv;
  char* const* envp;
  pid_t parent;
  int stdin_fd;   // /dev/null
  int output_fd;  // write end of the output pipe, or -1
  int error_fd;   // write end of the error pipe (close-on-exec)
  bool own_group;
};

// dup2() that also works when the descriptor is already in place (dup2 then
// does nothing, and would leave close-on-exec set).
bool MoveTo(int fd, int target) {
  if (fd == target) {
    return ::fcntl(fd, F_SETFD, 0) == 0;
  }
  return ::dup2(fd, target) == target;
}

[[noreturn]] void ChildFail(const ChildPlan& plan, ChildStep step) {
  ChildError error{step, errno};
  ssize_t ignored = ::write(plan.error_fd, &error, sizeof(error));
  (void)ignored;
  ::_exit(127);
}

[[noreturn]] void RunChild(const ChildPlan& plan) {
  // Handlers would run the parent's code in the child; ignored signals would
  // stay ignored after exec. Start the program from a clean slate. Errors
  // (SIGKILL, SIGSTOP, glibc-reserved signals) are expected and harmless.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);

  if (plan.own_group && ::setpgid(0, 0) != 0) {
    ChildFail(plan, ChildStep::kSetpgid);
  }
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    ChildFail(plan, ChildStep::kPdeathsig);
  }
  // The parent may have died before prctl() took effect; then no signal
  // would ever come.
  if (::getppid() != plan.parent) ::_exit(127);

  if (!MoveTo(plan.stdin_fd, STDIN_FILENO)) ChildFail(plan, ChildStep::kDup);
  if (plan.output_fd >= 0) {
    if (!MoveTo(plan.output_fd, STDOUT_FILENO) ||
        !MoveTo(plan.output_fd, STDERR_FILENO)) {
      ChildFail(plan, ChildStep::kDup);
    }
  }

  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  ::execve(plan.path, plan.argv, plan.envp);
  ChildFail(plan, ChildStep::kExec);
}

// The parent's environment with `extra` added or replaced.
std::vector<std::string> MergeEnvironment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::string_view name = entry.substr(0, entry.find('='));
    bool replaced =
        std::any_of(extra.begin(), extra.end(),
                    [&](const auto& kv) { return kv.first == name; });
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : extra) env.push_back(name + "=" + value);
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  // Close-on-exec by default. Race-free: the child is ours and not yet
  // reaped, so `pid` cannot name another process.
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(
    const SubprocessOptions& options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return InvalidArgumentError(
        "Subprocess::Spawn: argv is empty; argv[0] must be the program path");
  }
  const std::string& program = options.argv[0];
  for (const auto& [name, value] : options.env) {
    if (name.empty() || name.find('=') != std::string::npos) {
      return InvalidArgumentError("Subprocess::Spawn('" + program +
                                  "'): bad environment variable name '" + name +
                                  "'");
    }
  }

  std::vector<std::string> argv_strings = options.argv;
  std::vector<char*> argv = CStrings(argv_strings);
  std::vector<std::string> env_strings = MergeEnvironment(options.env);
  std::vector<char*> envp = CStrings(env_strings);

  const std::string where = "starting '" + program + "'";
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return ErrnoError(errno, where + ": pipe2");
  }
  FdCloser error_read(fds[0]);
  FdCloser error_write(fds[1]);
  PS_RETURN_IF_ERROR(MoveAboveStdio(&error_read));
  PS_RETURN_IF_ERROR(MoveAboveStdio(&error_write));

  FdCloser output_read;
  FdCloser output_write;
  if (options.capture_output) {
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      return ErrnoError(errno, where + ": pipe2");
    }
    output_read.Reset(fds[0]);
    output_write.Reset(fds[1]);
    PS_RETURN_IF_ERROR(MoveAboveStdio(&output_read));
    PS_RETURN_IF_ERROR(MoveAboveStdio(&output_write));
    // Only our end: the child's end stays blocking, as programs expect.
    int flags = ::fcntl(output_read.get(), F_GETFL);
    if (flags < 0 ||
        ::fcntl(output_read.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
      return ErrnoError(errno, where + ": fcntl(O_NONBLOCK)");
    }
  }

  FdCloser dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (dev_null.get() < 0) return ErrnoError(errno, where + ": open /dev/null");
  PS_RETURN_IF_ERROR(MoveAboveStdio(&dev_null));

  const ChildPlan plan{.path = program.c_str(),
                       .argv = argv.data(),
                       .envp = envp.data(),
                       .parent = ::getpid(),
                       .stdin_fd = dev_null.get(),
                       .output_fd = output_write.get(),
                       .error_fd = error_write.get(),
                       .own_group = options.new_process_group};

  // Block every signal across fork(): a handler of the parent must not run
  // in the child before RunChild resets the dispositions.
  sigset_t all;
  sigset_t saved;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &saved);
  pid_t pid = ::fork();
  if (pid == 0) RunChild(plan);
  int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (pid < 0) return ErrnoError(fork_errno, where + ": fork");

  error_write.Reset();
  output_write.Reset();
  dev_null.Reset();
  int exit_fd = PidfdOpen(pid);

  // The error pipe closes (EOF) when execve succeeds, or carries why not.
  ChildError error{};
  ssize_t n;
  do {
    n = ::read(error_read.get(), &error, sizeof(error));
  } while (n < 0 && errno == EINTR);
  if (n != 0) {
    int read_errno = errno;
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (exit_fd >= 0) ::close(exit_fd);
    if (n < 0)
      return ErrnoError(read_errno, where + ": reading the error pipe");
    if (n != static_cast<ssize_t>(sizeof(error))) {
      return InternalError(where + ": short report from the child");
    }
    return ErrnoError(error.err, "cannot start '" + program +
                                     "': " + ChildStepName(error.step));
  }
  return std::unique_ptr<Subprocess>(new Subprocess(
      pid, program, options.new_process_group, output_read.Release(), exit_fd));
}

Subprocess::Subprocess(pid_t pid, std::string program, bool own_group,
                       int output_fd, int exit_fd)
    : pid_(pid),
      program_(std::move(program)),
      own_group_(own_group),
      output_fd_(output_fd),
      exit_fd_(exit_fd) {}

Subprocess::~Subprocess() {
  if (!wait_status_) {
    Signal(SIGKILL).IgnoreError();
    Reap(/*block=*/true);
  }
  if (output_fd_ >= 0) ::close(output_fd_);
  if (exit_fd_ >= 0) ::close(exit_fd_);
}

Status Subprocess::Signal(int signo) {
  if (wait_status_) return Status::Ok();
  // Until we reap it, the child's pid (and so its group id) cannot be
  // reused, so this never hits a stranger.
  pid_t target = own_group_ ? -pid_ : pid_;
  if (::kill(target, signo) != 0 && errno != ESRCH) {
    return ErrnoError(errno, "kill(" + std::to_string(target) + ", " +
                                 std::to_string(signo) + ") for '" + program_ +
                                 "'")
        .WithContext("Subprocess::Signal");
  }
  return Status::Ok();
}

bool Subprocess::Reap(bool block) {
  if (wait_status_) return true;
  // Look without reaping first: while the child is a zombie its pid still
  // holds the group id, so killing the group cannot hit a stranger.
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  int flags = WEXITED | WNOWAIT | (block ? 0 : WNOHANG);
  int rc;
  do {
    rc = ::waitid(P_PID, static_cast<id_t>(pid_), &info, flags);
  } while (rc < 0 && errno == EINTR);
  if (rc == 0 && info.si_pid == 0) return false;  // WNOHANG, still running
  if (rc == 0) {
    if (own_group_) ::kill(-pid_, SIGKILL);  // leftovers of the group
    int status = 0;
    pid_t reaped;
    do {
      reaped = ::waitpid(pid_, &status, 0);
    } while (reaped < 0 && errno == EINTR);
    if (reaped == pid_) {
      wait_status_ = status;
      return true;
    }
  }
  // ECHILD: someone else reaped it (waitpid(-1) elsewhere, or SIGCHLD set
  // to SIG_IGN). The real status is lost.
  PS_LOG_WARN("process {} ('{}') was reaped elsewhere: {}; reporting exit 255",
              pid_, program_, std::strerror(errno));
  wait_status_ = 255 << 8;
  return true;
}

std::optional<int> Subprocess::TryWait() {
  Reap(/*block=*/false);
  return wait_status_;
}

StatusOr<int> Subprocess::WaitFor(std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  auto backoff = std::chrono::milliseconds(1);
  while (!Reap(/*block=*/false)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left <= std::chrono::milliseconds(0)) {
      return DeadlineExceededError("process " + std::to_string(pid_) + " ('" +
                                   program_ + "') still running after " +
                                   std::to_string(timeout.count()) + " ms");
    }
    if (exit_fd_ >= 0) {
      // Round up so that we do not wake just before the deadline and spin.
      pollfd pfd{exit_fd_, POLLIN, 0};
      int ms = static_cast<int>(
          std::min<std::chrono::milliseconds::rep>(left.count() + 1, 1 << 30));
      ::poll(&pfd, 1, ms);  // EINTR: just look again
    } else {
      std::this_thread::sleep_for(std::min(backoff, left));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(20));
    }
  }
  return *wait_status_;
}

int Subprocess::Terminate(std::chrono::milliseconds grace) {
  if (wait_status_) return *wait_status_;
  Signal(SIGTERM).IgnoreError();
  StatusOr<int> status = WaitFor(grace);
  if (status.ok()) return *status;
  Signal(SIGKILL).IgnoreError();
  Reap(/*block=*/true);
  return *wait_status_;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) {
    return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    const char* name = ::sigdescr_np(sig);
    std::string text = "killed by signal " + std::to_string(sig);
    if (name != nullptr) text += std::string(" (") + name + ")";
    if (WCOREDUMP(wait_status)) text += ", core dumped";
    return text;
  }
  return "ended with wait status " + std::to_string(wait_status);
}

bool ExitedSuccessfully(int wait_status) {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

LineReader::LineReader(size_t max_line_bytes)
    : max_line_bytes_(std::max<size_t>(max_line_bytes, 1)) {}

void LineReader::Feed(std::string_view bytes, std::vector<std::string>* lines) {
  // Invariant: partial_.size() <= max_line_bytes_.
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    size_t end = newline == std::string_view::npos ? bytes.size() : newline;
    size_t room = max_line_bytes_ - partial_.size();
    if (end > room) {  // over-long line: hand out a full piece
      partial_.append(bytes.data(), room);
      lines->push_back(std::move(partial_));
      partial_.clear();
      bytes.remove_prefix(room);
      continue;
    }
    partial_.append(bytes.data(), end);
    if (newline == std::string_view::npos) return;
    lines->push_back(std::move(partial_));
    partial_.clear();
    bytes.remove_prefix(end + 1);
  }
}

std::optional<std::string> LineReader::Flush() {
  if (partial_.empty()) return std::nullopt;
  std::string tail = std::move(partial_);
  partial_.clear();
  return tail;
}

StatusOr<bool> LineReader::ReadFrom(int fd, std::vector<std::string>* lines,
                                    size_t max_bytes) {
  char buffer[16 * 1024];
  size_t total = 0;
  while (total < max_bytes) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      Feed(std::string_view(buffer, static_cast<size_t>(n)), lines);
      total += static_cast<size_t>(n);
    } else if (n == 0) {
      if (std::optional<std::string> tail = Flush()) {
        lines->push_back(std::move(*tail));
      }
      return true;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return false;
    } else {
      return ErrnoError(errno, "read from fd " + std::to_string(fd))
          .WithContext("LineReader");
    }
  }
  return false;
}

}  // namespace ps
