#include "common/watched_process.h"

#include <poll.h>
#include <signal.h>

#include <cstdio>

namespace ps {

StatusOr<std::unique_ptr<WatchedProcess>> WatchedProcess::Start(SubprocessOptions options,
                                                                 std::string echo_prefix) {
  options.capture_output = true;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> process, Subprocess::Spawn(options));
  return std::unique_ptr<WatchedProcess>(
      new WatchedProcess(std::move(process), std::move(echo_prefix)));
}

WatchedProcess::WatchedProcess(std::unique_ptr<Subprocess> process, std::string echo_prefix)
    : process_(std::move(process)),
      echo_prefix_(std::move(echo_prefix)),
      spawned_(Clock::now()),
      reader_([this] { ReadLoop(); }) {}

WatchedProcess::~WatchedProcess() {
  if (!process_->wait_status()) process_->Signal(SIGKILL).IgnoreError();
  // The reader stops at the end of the output, or at its next poll once
  // told to (a grandchild may hold the pipe open).
  stop_.store(true);
  if (reader_.joinable()) reader_.join();
  process_.reset();  // reaps it
}

void WatchedProcess::ReadLoop() {
  LineReader reader;
  std::vector<std::string> got;
  const int fd = process_->output_fd();
  while (true) {
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, 100);
    bool end = false;
    if (ready > 0) {
      StatusOr<bool> r = reader.ReadFrom(fd, &got);
      end = !r.ok() || *r;
    }
    const Clock::time_point now = Clock::now();
    if (!got.empty() || end) {
      std::lock_guard<std::mutex> lock(mu_);
      for (std::string& l : got) {
        if (!echo_prefix_.empty()) std::fprintf(stderr, "%s%s\n", echo_prefix_.c_str(), l.c_str());
        lines_.emplace_back(now, std::move(l));
      }
      got.clear();
      ended_ = ended_ || end;
      cv_.notify_all();
    }
    if (end || (ready == 0 && stop_.load())) return;
  }
}

StatusOr<WatchedProcess::Clock::time_point> WatchedProcess::WaitForLine(
    const std::string& needle, Clock::duration timeout, std::string* line) const {
  std::unique_lock<std::mutex> lock(mu_);
  const Clock::time_point deadline = Clock::now() + timeout;
  size_t seen = 0;
  while (true) {
    for (; seen < lines_.size(); ++seen) {
      if (lines_[seen].second.find(needle) != std::string::npos) {
        if (line != nullptr) *line = lines_[seen].second;
        return lines_[seen].first;
      }
    }
    const std::string who = process_->program() + " (pid " + std::to_string(process_->pid()) + ")";
    if (ended_) {
      return NotFoundError(who + " ended its output without a line containing '" + needle +
                           "'; its last lines:\n" + TailLocked());
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && Clock::now() >= deadline) {
      return DeadlineExceededError(
          who + " wrote no line containing '" + needle + "' within " +
          std::to_string(std::chrono::duration<double>(timeout).count()) +
          " s; its last lines:\n" + TailLocked());
    }
  }
}

bool WatchedProcess::WaitForEnd(Clock::duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return ended_; });
}

std::optional<std::string> WatchedProcess::FindLine(const std::string& needle) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [at, l] : lines_) {
    if (l.find(needle) != std::string::npos) return l;
  }
  return std::nullopt;
}

std::string WatchedProcess::Output() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [at, l] : lines_) out += l + "\n";
  return out;
}

std::string WatchedProcess::TailLocked() const {
  std::string out;
  const size_t from = lines_.size() > 12 ? lines_.size() - 12 : 0;
  for (size_t i = from; i < lines_.size(); ++i) out += "  " + lines_[i].second + "\n";
  return out;
}

}  // namespace ps
