// The checkpoint side of ShardServer (server/shard_server.h): restoring
// the store at start, and the shard's end of its CheckpointTrigger (the
// store's snapshot, CHECKPOINT requests and their replies).
#include <chrono>
#include <string>
#include <utility>

#include "common/logging.h"
#include "server/restore.h"
#include "server/shard_server.h"

namespace ps {

Status ShardServer::RestoreCheckpoint(const RestorePoint& point) {
  if (point.clock < 0) {
    PS_LOG_INFO("shard {}: no checkpoint in {} yet; starting from the tables' initial values",
                shard_, checkpoints_->path());
    return Status::Ok();
  }
  if (!point.passed_over.empty()) {
    PS_LOG_WARN("shard {}: newer generations are incomplete, passed over: {}", shard_,
                point.passed_over);
  }
  const auto start = clock_->Now();
  // Straight into the store's blocks (measured: reading into a snapshot
  // first, then copying, cost a fifth of a 1.2 GB shard's recovery).
  PS_ASSIGN_OR_RETURN(const RestoreResult restored,
                      RestoreGeneration(job_, shard_, point, store_.get(), &env_->filesystem()));
  // A push its shards applied before the generation and that comes again
  // (its acknowledgement lost with the shard) is acknowledged, not applied
  // twice.
  PS_RETURN_IF_ERROR(LoadRecentPushes(job_, shard_, point, &recent_pushes_));
  // The generation's meta records were checked to be of this clock.
  clocks_.StartAt(point.clock);
  started_clock_ = point.clock;
  const double seconds = std::chrono::duration<double>(clock_->Now() - start).count();
  if (restored.bytes_read == 0) {
    PS_LOG_INFO("shard {}: restored {} ({} tables) in {:.2f} s: workers resume at clock {}",
                shard_, restored.from, restored.tables, seconds, point.clock);
  } else {
    PS_LOG_INFO("shard {}: restored {} ({} tables) in {:.2f} s, its rows of the {} shards that "
                "wrote it ({:.1f} MB read): workers resume at clock {}",
                shard_, restored.from, restored.tables, seconds, point.writers,
                restored.bytes_read / 1e6, point.clock);
  }
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
  options.full_every = job_.checkpoint.full_every;
  checkpoint_trigger_ = std::make_unique<CheckpointTrigger>(
      std::move(options), *checkpoints_,
      [this](int64_t clock, const DeltaSince* since) -> StatusOr<ShardSnapshot> {
        PS_ASSIGN_OR_RETURN(ShardSnapshot snapshot,
                            store_->CheckpointSnapshot(job_, shard_, clock, since));
        // The pushes recorded, less those waiting in sums not applied yet
        // (consistency.aggregate): the ones the rows hold.
        snapshot.recent_pushes = held_.InRows(recent_pushes_).Encode();
        return snapshot;
      },
      *clock_,
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
