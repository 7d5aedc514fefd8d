#include "tools/signal_catcher.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace ps {
namespace {

// Write end of the pipe of the SignalCatcher that exists, or -1. A global
// because a signal handler can reach nothing else; Install makes sure only
// one SignalCatcher uses it at a time.
std::atomic<int> g_signal_pipe{-1};

extern "C" void OnLauncherSignal(int signo) {
  int saved_errno = errno;
  int fd = g_signal_pipe.load();
  if (fd >= 0) {
    unsigned char byte = static_cast<unsigned char>(signo);
    ssize_t ignored = ::write(fd, &byte, 1);  // full pipe: already woken
    (void)ignored;
  }
  errno = saved_errno;
}

}  // namespace

StatusOr<std::unique_ptr<SignalCatcher>> SignalCatcher::Install() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return InternalError(std::string("launcher: pipe2: ") + std::strerror(errno));
  }
  int expected = -1;
  if (!g_signal_pipe.compare_exchange_strong(expected, fds[1])) {
    ::close(fds[0]);
    ::close(fds[1]);
    return FailedPreconditionError(
        "launcher: another Launcher::Run() is already handling SIGINT and "
        "SIGTERM; set LauncherOptions::handle_signals = false on one");
  }
  auto catcher = std::unique_ptr<SignalCatcher>(new SignalCatcher(fds));
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnLauncherSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, &catcher->saved_int_);
  ::sigaction(SIGTERM, &action, &catcher->saved_term_);
  return catcher;
}

SignalCatcher::SignalCatcher(const int fds[2]) : read_fd_(fds[0]), write_fd_(fds[1]) {
  std::memset(&saved_int_, 0, sizeof(saved_int_));
  std::memset(&saved_term_, 0, sizeof(saved_term_));
}

SignalCatcher::~SignalCatcher() {
  ::sigaction(SIGINT, &saved_int_, nullptr);
  ::sigaction(SIGTERM, &saved_term_, nullptr);
  g_signal_pipe.store(-1);
  ::close(read_fd_);
  ::close(write_fd_);
}

std::vector<int> SignalCatcher::Drain() {
  std::vector<int> signals;
  unsigned char buffer[64];
  ssize_t n;
  while ((n = ::read(read_fd_, buffer, sizeof(buffer))) > 0 || (n < 0 && errno == EINTR)) {
    for (ssize_t i = 0; i < n; ++i) signals.push_back(buffer[i]);
  }
  return signals;
}

}  // namespace ps
