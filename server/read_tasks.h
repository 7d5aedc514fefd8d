// Reading a checkpoint generation on several threads at once: its records
// split into key ranges (tasks), each read by one thread, straight into the
// caller's memory. Used by the reads of a whole generation
// (server/checkpoint_db.h) and by a restore onto another shard count
// (server/restore.h).
#ifndef PS_SERVER_READ_TASKS_H_
#define PS_SERVER_READ_TASKS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"

namespace ps {

// The threads a restore reads a generation with by default:
// std::thread::hardware_concurrency() within [kMinReadThreads,
// kMaxReadThreads]. A cold read waits on the disk more than it computes, and
// a disk serves several reads in flight much faster than one (measured on a
// 2-core VM: a 1.2 GB generation read cold by 4 readers in 0.6-0.7 s, by one
// in 0.9-3.0 s), so even a host of 1 or 2 cores reads with 4; past 16 a
// disk gains nothing more and each thread holds its readahead buffer.
inline constexpr uint32_t kMinReadThreads = 4;
inline constexpr uint32_t kMaxReadThreads = 16;
uint32_t DefaultReadThreads();

// Calls fn(task, stop) for every task in [0, tasks), each once, on up to
// `threads` threads (the calling thread is one of them; 0 counts as 1):
// a thread takes the next task not yet started when it finishes one. A
// task that fails sets `stop`: no task starts after that, and tasks
// running check `stop` between records and return a Cancelled status
// (StoppedError) early. Every thread is joined before the call returns.
// Returns OK when every task did, else the error of the lowest-numbered
// task that failed other than by stopping (so of the first corrupt record
// in key order when the tasks are key ranges in order and only one is
// corrupt). std::bad_alloc thrown by a task becomes ResourceExhausted
// naming `what`. When a thread cannot be started, the threads that did
// (and the calling one) do its tasks.
// Thread safety: fn is called from several threads at once, each call
// with another task.
Status RunReadTasks(size_t tasks, uint32_t threads, const std::string& what,
                    const std::function<Status(size_t task, const std::atomic<bool>& stop)>& fn);

// What a task returns when it saw `stop` (RunReadTasks ignores it).
Status StoppedError();

}  // namespace ps

#endif  // PS_SERVER_READ_TASKS_H_
