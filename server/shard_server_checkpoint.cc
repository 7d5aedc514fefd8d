// The checkpoint side of ShardServer (server/shard_server.h): restoring
// the store at start, and writing a generation at each checkpoint.every_clocks
// boundary on a thread of its own while the shard serves.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "server/restore.h"
#include "server/shard_server.h"

namespace ps {

Status ShardServer::RestoreCheckpoint(int64_t restore_clock) {
  PS_ASSIGN_OR_RETURN(const int64_t clock, PickGeneration(*checkpoints_, restore_clock, shard_));
  if (clock < 0) {
    PS_LOG_INFO("shard {}: no checkpoint in {} yet; starting from the tables' initial values",
                shard_, checkpoints_->path());
    return Status::Ok();
  }
  const std::string where = checkpoints_->GenerationPath(clock);
  const auto start = clock_->Now();
  // Straight into the store's blocks (measured: reading into a snapshot
  // first, then copying, cost a fifth of a 1.2 GB shard's recovery).
  PS_ASSIGN_OR_RETURN(const size_t tables, RestoreStore(*checkpoints_, clock, job_, shard_, store_.get()));
  // ReadInto checked that the generation is of this clock.
  clocks_.StartAt(clock);
  started_clock_ = clock;
  last_checkpoint_clock_ = clock;
  PS_LOG_INFO("shard {}: restored {} ({} tables) in {:.2f} s: workers resume at clock {}", shard_,
              where, tables,
              std::chrono::duration<double>(clock_->Now() - start).count(),
              clock);
  return Status::Ok();
}

void ShardServer::MaybeCheckpoint() {
  if (checkpoints_ == nullptr) return;
  const int64_t clock = clocks_.min_clock();
  const int64_t every = job_.checkpoint.every_clocks;
  if (clock / every <= last_checkpoint_clock_ / every) return;
  // Every boundary gets its generation, of exactly the state at its clock:
  // a write still running (of the previous boundary, or one requested) is
  // waited for, serving pauses, and the wait is reported. At most one
  // write is waited for, however many CHECKPOINT requests came.
  if (checkpoint_writing_.load(std::memory_order_acquire)) {
    const auto wait_start = clock_->Now();
    JoinCheckpointWriter();
    PS_LOG_WARN("shard {}: serving paused {:.0f} ms for the previous checkpoint to finish before "
                "the one of clock {} (raise checkpoint.every_clocks, or set checkpoint.sync: "
                "false)",
                shard_,
                std::chrono::duration<double, std::milli>(clock_->Now() -
                                                          wait_start)
                    .count(),
                clock);
  }
  Status started = StartCheckpoint(clock);
  if (!started.ok()) {
    PS_LOG_ERROR("shard {}: checkpoint of clock {} not taken: {}", shard_, clock,
                 started.ToString());
  }
  // Requests that waited for the previous write get this newer generation.
  AnswerCheckpointWaiters(started, clock);
}

void ShardServer::AnswerCheckpointWaiters(const Status& status, int64_t clock) {
  std::vector<CheckpointWaiter> waiters = std::move(checkpoint_waiters_);
  checkpoint_waiters_.clear();
  for (CheckpointWaiter& w : waiters) {
    if (status.ok()) {
      MessageHeader reply = ReplyHeader(w.request);
      reply.clock = clock;
      reply.text = checkpoints_->GenerationPath(clock);
      Reply(w.routing_id, reply);
    } else {
      ++counters_.errors;
      Reply(w.routing_id, MakeErrorHeader(w.request, shard_, status));
    }
  }
}

void ShardServer::HandleCheckpoint(Frame& routing_id, const MessageHeader& req) {
  if (checkpoints_ == nullptr) {
    ++counters_.errors;
    Reply(routing_id,
          MakeErrorHeader(req, shard_,
                          FailedPreconditionError("shard " + std::to_string(shard_) +
                                                  ": this job has no checkpoint.dir; add a "
                                                  "checkpoint section to its config")));
    return;
  }
  FinishCheckpointWrite(/*may_start=*/true);  // a write just done answers its waiters first
  MessageHeader reply = ReplyHeader(req);
  if (checkpoint_writing_.load(std::memory_order_acquire)) {
    // Answered when the write in progress is done (FinishCheckpointWrite):
    // many requests cost one generation, not one copy of the shard each.
    // Each waiting request holds a few bytes; socket_hwm of them at most.
    if (checkpoint_waiters_.size() >= job_.server.socket_hwm) {
      ++counters_.errors;
      Reply(routing_id,
            MakeErrorHeader(req, shard_,
                            UnavailableError(
                                "shard " + std::to_string(shard_) + ": " +
                                std::to_string(checkpoint_waiters_.size()) +
                                " CHECKPOINT requests wait already for the generation of clock " +
                                std::to_string(checkpoint_write_clock_) +
                                " being written (server.socket_hwm); try again when it is done")));
      return;
    }
    checkpoint_waiters_.push_back({std::move(routing_id), req});
    return;
  }
  const int64_t clock = clocks_.min_clock();
  PS_LOG_INFO("shard {}: checkpoint of clock {} requested", shard_, clock);
  Status started = StartCheckpoint(clock);
  if (!started.ok()) {
    ++counters_.errors;
    Reply(routing_id, MakeErrorHeader(req, shard_, started));
    return;
  }
  reply.clock = clock;
  reply.text = checkpoints_->GenerationPath(clock);
  Reply(routing_id, reply);
}

void ShardServer::FinishCheckpointWrite(bool may_start) {
  if (!checkpoint_writer_.joinable() || checkpoint_writing_.load(std::memory_order_acquire)) {
    return;
  }
  JoinCheckpointWriter();
  if (checkpoint_waiters_.empty()) return;
  // The generation just written holds the state of its clock: it answers
  // the requests made at that clock. Once the clocks moved on, they get one
  // new generation of the current clock instead.
  const int64_t clock = clocks_.min_clock();
  if (!may_start || clock == checkpoint_write_clock_) {
    AnswerCheckpointWaiters(checkpoint_result_, checkpoint_write_clock_);
    return;
  }
  PS_LOG_INFO("shard {}: checkpoint of clock {} requested ({} requests)", shard_, clock,
              checkpoint_waiters_.size());
  AnswerCheckpointWaiters(StartCheckpoint(clock), clock);
}

Status ShardServer::StartCheckpoint(int64_t clock) {
  JoinCheckpointWriter();  // finished (MaybeCheckpoint waited): reap its thread
  last_checkpoint_clock_ = clock;
  const auto copy_start = clock_->Now();
  PS_ASSIGN_OR_RETURN(ShardSnapshot snapshot, store_->Snapshot(job_, shard_, clock));
  const double copy_ms =
      std::chrono::duration<double, std::milli>(clock_->Now() - copy_start)
          .count();
  ++counters_.checkpoints_started;
  checkpoint_write_clock_ = clock;
  checkpoint_writing_.store(true, std::memory_order_release);
  CheckpointWriteOptions options;
  options.sync = job_.checkpoint.sync;
  options.keep = job_.checkpoint.keep;
  options.at_stage = checkpoint_stage_hook_;
  checkpoint_writer_ = std::thread(
      [this, options, copy_ms, snapshot = std::move(snapshot)]() mutable {
        const auto start = clock_->Now();
        Status written = checkpoints_->Write(snapshot, options);
        const double secs =
            std::chrono::duration<double>(clock_->Now() - start).count();
        if (written.ok()) {
          PS_LOG_INFO("shard {}: checkpoint of clock {} written to {} in {:.2f} s "
                      "(serving paused {:.1f} ms for the copy)",
                      shard_, snapshot.clock, checkpoints_->GenerationPath(snapshot.clock), secs,
                      copy_ms);
        } else {
          PS_LOG_ERROR("shard {}: checkpoint of clock {} failed: {}; the previous generations "
                       "are intact",
                       shard_, snapshot.clock, written.ToString());
        }
        checkpoint_result_ = std::move(written);
        checkpoint_writing_.store(false, std::memory_order_release);
      });
  return Status::Ok();
}

void ShardServer::JoinCheckpointWriter() {
  if (checkpoint_writer_.joinable()) checkpoint_writer_.join();
}

}  // namespace ps
