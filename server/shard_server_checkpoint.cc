// The checkpoint side of ShardServer (server/shard_server.h): restoring
// the store at start, and the shard's end of its CheckpointTrigger (the
// store's copy, CHECKPOINT requests and their replies).
#include <chrono>
#include <string>
#include <utility>

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
  PS_LOG_INFO("shard {}: restored {} ({} tables) in {:.2f} s: workers resume at clock {}", shard_,
              where, tables,
              std::chrono::duration<double>(clock_->Now() - start).count(),
              clock);
  return Status::Ok();
}

void ShardServer::StartCheckpointTrigger() {
  CheckpointTriggerOptions options;
  options.shard = shard_;
  options.every_clocks = job_.checkpoint.every_clocks;
  options.write.sync = job_.checkpoint.sync;
  options.write.keep = job_.checkpoint.keep;
  options.write.at_stage = checkpoint_stage_hook_;
  options.max_waiting = job_.server.socket_hwm;
  checkpoint_trigger_ = std::make_unique<CheckpointTrigger>(
      std::move(options), *checkpoints_,
      [this](int64_t clock) { return store_->Snapshot(job_, shard_, clock); }, *clock_,
      [this](CheckpointTrigger::Answer& answer) { SendCheckpointAnswer(answer); }, started_clock_);
}

void ShardServer::HandleCheckpoint(Frame& routing_id, const MessageHeader& req) {
  if (checkpoint_trigger_ == nullptr) {
    ++counters_.errors;
    Reply(routing_id,
          MakeErrorHeader(req, shard_,
                          FailedPreconditionError("shard " + std::to_string(shard_) +
                                                  ": this job has no checkpoint.dir; add a "
                                                  "checkpoint section to its config")));
    return;
  }
  checkpoint_trigger_->Request(routing_id, req, clocks_.min_clock());
}

void ShardServer::SendCheckpointAnswer(CheckpointTrigger::Answer& answer) {
  if (!answer.status.ok()) {
    ++counters_.errors;
    Reply(answer.routing_id, MakeErrorHeader(answer.request, shard_, answer.status));
    return;
  }
  MessageHeader reply = ReplyHeader(answer.request);
  reply.clock = answer.clock;
  reply.text = std::move(answer.path);
  Reply(answer.routing_id, reply);
}

}  // namespace ps
