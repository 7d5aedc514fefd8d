#include "server/checkpoint_trigger.h"

#include <chrono>
#include <random>
#include <string>
#include <utility>

#include "common/logging.h"
#include "server/checkpoint_format.h"

namespace ps {
namespace {

// A generation's id: random, never 0 (a generation of format 5 or older).
uint64_t NewGenerationId() {
  std::random_device device;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{device()} << 32) ^ device();
  return id;
}

// Bytes a snapshot's records take, about: values, optimizer state, ids,
// and a record's key and framing for each single row (a delta's row
// records, a hashed table's rows).
uint64_t SnapshotBytes(const ShardSnapshot& s) {
  constexpr uint64_t kRecordBytes = 32;
  uint64_t bytes = 0;
  for (const TableSnapshot& t : s.tables) {
    // A range table shared with the store's blocks holds no arrays: its
    // rows count.
    // A hashed table shared with the store's chunks: its listed rows; a
    // range table's shared runs: their rows, besides its arrays' values.
    const uint64_t floats = t.shares_hashed_rows()
                                ? uint64_t{t.ids.size()} * t.dim
                                : (t.SharedRowCount() + (t.patched_blocks.empty()
                                                              ? 0
                                                              : t.patched.size())) *
                                          t.dim +
                                      t.values.size();
    bytes += floats * sizeof(float) * (1 + t.slots.size()) +
             (t.ids.size() + t.removed.size() + t.patched.size()) * kRecordBytes + t.sketch.size();
  }
  return bytes;
}

}  // namespace

CheckpointTrigger::CheckpointTrigger(CheckpointTriggerOptions options, CheckpointDir& dir,
                                     SnapshotFn snapshot, const Clock& clock, AnswerFn answer,
                                     int64_t last_clock)
    : options_(std::move(options)),
      dir_(dir),
      snapshot_(std::move(snapshot)),
      clock_(clock),
      answer_(std::move(answer)),
      last_clock_(last_clock) {}

CheckpointTrigger::~CheckpointTrigger() { JoinWriter(); }

void CheckpointTrigger::ClockAdvanced(int64_t clock) {
  const int64_t every = options_.every_clocks;
  if (clock / every <= last_clock_ / every) return;
  // Every boundary gets its generation, of exactly the state at its clock:
  // a write still running (of the previous boundary, or one requested) is
  // waited for, serving pauses, and the wait is reported. At most one
  // write is waited for, however many CHECKPOINT requests came.
  if (writing()) {
    const auto wait_start = clock_.Now();
    JoinWriter();
    PS_LOG_WARN("shard {}: serving paused {:.0f} ms for the previous checkpoint to finish before "
                "the one of clock {} (raise checkpoint.every_clocks, or set checkpoint.sync: "
                "false)",
                options_.shard,
                std::chrono::duration<double, std::milli>(clock_.Now() - wait_start).count(),
                clock);
  }
  Status started = Start(clock);
  if (!started.ok()) {
    PS_LOG_ERROR("shard {}: checkpoint of clock {} not taken: {}", options_.shard, clock,
                 started.ToString());
  }
  // Requests that waited for the previous write get this newer generation.
  AnswerWaiting(started, clock);
}

void CheckpointTrigger::Request(Frame& routing_id, const MessageHeader& request, int64_t clock) {
  Finish(clock, /*may_start=*/true);  // a write just done answers its waiting requests first
  Answer answer;
  answer.routing_id = std::move(routing_id);
  answer.request = request;
  if (writing()) {
    // Answered when the write in progress is done (Finish): many requests
    // cost one generation, not one snapshot of the shard each. Each waiting
    // request holds a few bytes; max_waiting of them at most.
    if (waiting_.size() >= options_.max_waiting) {
      answer.status = UnavailableError(
          "shard " + std::to_string(options_.shard) + ": " + std::to_string(waiting_.size()) +
          " CHECKPOINT requests wait already for the generation of clock " +
          std::to_string(write_clock_) +
          " being written (server.socket_hwm); try again when it is done");
      answer_(answer);
      return;
    }
    waiting_.push_back(std::move(answer));
    return;
  }
  PS_LOG_INFO("shard {}: checkpoint of clock {} requested", options_.shard, clock);
  answer.status = Start(clock);
  answer.clock = clock;
  answer.path = dir_.GenerationPath(clock);
  answer_(answer);
}

void CheckpointTrigger::Poll(int64_t clock) { Finish(clock, /*may_start=*/true); }

void CheckpointTrigger::AnswerWaiting(const Status& status, int64_t clock) {
  std::vector<Answer> waiting = std::move(waiting_);
  waiting_.clear();
  for (Answer& answer : waiting) {
    answer.status = status;
    answer.clock = clock;
    answer.path = dir_.GenerationPath(clock);
    answer_(answer);
  }
}

void CheckpointTrigger::Finish(int64_t clock, bool may_start) {
  if (!writer_.joinable() || writing()) return;
  JoinWriter();
  if (waiting_.empty()) return;
  // The generation just written holds the state of its clock: it answers
  // the requests made at that clock. Once the clocks moved on, they get one
  // new generation of the current clock instead.
  if (!may_start || clock == write_clock_) {
    AnswerWaiting(result_, write_clock_);
    return;
  }
  PS_LOG_INFO("shard {}: checkpoint of clock {} requested ({} requests)", options_.shard, clock,
              waiting_.size());
  AnswerWaiting(Start(clock), clock);
}

Status CheckpointTrigger::Start(int64_t clock) {
  JoinWriter();  // finished (ClockAdvanced waited): reap its thread
  last_clock_ = clock;
  const bool delta = options_.full_every > 1 && has_base_ && base_.clock < clock &&
                     deltas_since_full_ + 1 < options_.full_every &&
                     delta_bytes_ + last_delta_bytes_ <= full_bytes_;
  const DeltaSince since{delta ? base_.epoch : 0, &RowsPerRun};
  const auto copy_start = clock_.Now();
  StatusOr<ShardSnapshot> taken = snapshot_(clock, delta ? &since : nullptr);
  if (!taken.ok()) {
    has_base_ = false;  // the store's change epoch moved on without a generation
    return taken.status();
  }
  ShardSnapshot snapshot = std::move(taken).value();
  snapshot.generation_id = NewGenerationId();
  if (delta && snapshot.changes_only) {
    snapshot.base_clock = base_.clock;
    snapshot.base_id = base_.id;
    ++deltas_started_;
  }
  const double pause_ms =
      std::chrono::duration<double, std::milli>(clock_.Now() - copy_start).count();
  last_pause_ms_ = pause_ms;
  ++started_;
  write_clock_ = clock;
  writing_.store(true, std::memory_order_release);
  writer_ = std::thread([this, pause_ms, snapshot = std::move(snapshot)]() mutable {
    Write(std::move(snapshot), pause_ms);
  });
  return Status::Ok();
}

void CheckpointTrigger::Write(ShardSnapshot snapshot, double pause_ms) {
  const auto start = clock_.Now();
  const int64_t clock = snapshot.clock;
  // The hashed tables' rows shared with the store, listed here, off the
  // shard's loop (a sort of their keys).
  try {
    snapshot.ListSharedRows();
  } catch (const std::bad_alloc&) {
    // CheckpointDir::Write tries again and says so.
  }
  // What the write consumes and the chain's bookkeeping needs after it.
  const uint64_t bytes = SnapshotBytes(snapshot);
  const Base written_base{snapshot.clock, snapshot.generation_id, snapshot.epoch};
  const bool delta = snapshot.delta();
  const int64_t base_clock = snapshot.base_clock;
  // Consumed: the blocks it shares with the store go back as they are
  // written (CheckpointDir::Write), and the rest of it with this thread.
  Status written = dir_.Write(std::move(snapshot), options_.write);
  const double secs = std::chrono::duration<double>(clock_.Now() - start).count();
  // The next delta builds on this generation, or, when it failed, the next
  // generation is full.
  has_base_ = written.ok();
  if (written.ok()) {
    base_ = written_base;
    if (delta) {
      ++deltas_since_full_;
      delta_bytes_ += bytes;
      last_delta_bytes_ = bytes;
    } else {
      deltas_since_full_ = 0;
      full_bytes_ = bytes;
      delta_bytes_ = 0;
      last_delta_bytes_ = 0;
    }
    const std::string kind =
        delta ? fmt::format("a delta on clock {}, {:.1f} MB of rows", base_clock, bytes / 1e6)
              : fmt::format("full, {:.1f} MB of rows", bytes / 1e6);
    PS_LOG_INFO("shard {}: checkpoint of clock {} written to {} in {:.2f} s ({}; "
                "serving paused {:.1f} ms for the snapshot)",
                options_.shard, clock, dir_.GenerationPath(clock), secs, kind, pause_ms);
  } else {
    PS_LOG_ERROR("shard {}: checkpoint of clock {} failed: {}; the previous generations "
                 "are intact",
                 options_.shard, clock, written.ToString());
  }
  result_ = std::move(written);
  writing_.store(false, std::memory_order_release);
}

Status CheckpointTrigger::WriteNow(int64_t clock) {
  JoinWriter();
  if (started_ > 0 && write_clock_ == clock && result_.ok()) {
    AnswerWaiting(result_, write_clock_);
    return Status::Ok();
  }
  Status started = Start(clock);
  if (started.ok()) JoinWriter();
  const Status written = started.ok() ? result_ : started;
  AnswerWaiting(written, clock);
  return written;
}

void CheckpointTrigger::Stop(int64_t clock) {
  JoinWriter();
  if (waiting_.empty() || clock == write_clock_) {
    AnswerWaiting(result_, write_clock_);
    return;
  }
  AnswerWaiting(UnavailableError("shard " + std::to_string(options_.shard) +
                                 " stopped before it wrote a checkpoint of clock " +
                                 std::to_string(clock) + "; the newest generation is " +
                                 dir_.GenerationPath(write_clock_) +
                                 "; ask again once the shard serves"),
                clock);
}

void CheckpointTrigger::JoinWriter() {
  if (writer_.joinable()) writer_.join();
}

}  // namespace ps
