#include "server/read_tasks.h"

#include <algorithm>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace ps {

uint32_t DefaultReadThreads() {
  return std::clamp(std::thread::hardware_concurrency(), kMinReadThreads, kMaxReadThreads);
}

Status StoppedError() { return Status(StatusCode::kCancelled, "stopped: another read failed"); }

Status RunReadTasks(size_t tasks, uint32_t threads, const std::string& what,
                    const std::function<Status(size_t task, const std::atomic<bool>& stop)>& fn) {
  std::vector<Status> results(tasks);
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  const auto work = [&] {
    for (size_t task = next.fetch_add(1); task < tasks && !stop.load(std::memory_order_relaxed);
         task = next.fetch_add(1)) {
      Status s;
      try {
        s = fn(task, stop);
      } catch (const std::bad_alloc&) {
        s = ResourceExhaustedError(what + ": out of memory");
      }
      if (!s.ok()) stop.store(true, std::memory_order_relaxed);
      results[task] = std::move(s);
    }
  };
  const size_t helpers = std::min<size_t>(std::max<uint32_t>(threads, 1), tasks) - (tasks > 0);
  std::vector<std::thread> started;
  started.reserve(helpers);
  for (size_t i = 0; i < helpers; ++i) {
    try {
      started.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // the threads running (and this one) take its tasks
    }
  }
  work();
  for (std::thread& t : started) t.join();
  const Status* stopped = nullptr;
  for (const Status& s : results) {
    if (s.ok()) continue;
    if (s.code() != StatusCode::kCancelled) return s;
    if (stopped == nullptr) stopped = &s;
  }
  // A task that stopped when no other failed cannot happen; were it to,
  // its status is no success.
  return stopped != nullptr ? *stopped : Status::Ok();
}

}  // namespace ps
