// The resharding side of ShardServer (server/shard_server.h): the gate's
// verdicts on workers' requests, RESHARD requests, and the handover at the
// boundary clock (server/reshard_gate.h).
#include <algorithm>
#include <string>
#include <utility>

#include "common/logging.h"
#include "common/process_priority.h"
#include "server/shard_server.h"

namespace ps {

void ShardServer::SetMapEpoch(int64_t epoch) {
  reshard_ = std::make_unique<ReshardGate>(shard_, job_.cluster.servers, epoch,
                                           job_.cluster.workers);
}

int64_t ShardServer::MaxWorkerClock() const {
  int64_t most = 0;
  for (uint32_t w = 0; w < clocks_.num_workers(); ++w) most = std::max(most, clocks_.clock(w));
  return most;
}

bool ShardServer::GateRequest(std::vector<Frame>& frames) {
  const MessageHeader& req = request_.header;
  // Only a worker's rows and clocks follow the map; the evaluator's pulls
  // too. Control requests (STATS, CHECKPOINT, RESHARD) and heartbeats are
  // the shard's own.
  if (req.op != Op::kPush && req.op != Op::kPull && req.op != Op::kClock) return false;
  return Gate(reshard_->Check(req), req, &frames);
}

bool ShardServer::GateUndecodable(std::vector<Frame>& frames) {
  // Routed by another map, its rows need not be this shard's.
  const MessageHeader echo = EchoHeader(std::span<const Frame>(frames.data() + 1, frames.size() - 1));
  if (echo.op != Op::kPush && echo.op != Op::kPull) return false;
  const ReshardGate::Action action = reshard_->Check(echo);
  return action != ReshardGate::Action::kHold && Gate(action, echo, &frames);
}

bool ShardServer::Gate(ReshardGate::Action action, const MessageHeader& req,
                       std::vector<Frame>* frames) {
  Frame& routing_id = (*frames)[0];
  switch (action) {
    case ReshardGate::Action::kServe:
      return false;
    case ReshardGate::Action::kHold: {
      // Applied nowhere until the handover answers it (moved) or an abort
      // serves it. A good worker has at most client.max_in_flight requests
      // outstanding per shard: more than that from all of them is refused.
      const size_t most = size_t{job_.cluster.workers} * (job_.client.max_in_flight + 1);
      if (held_writes_.size() >= most) {
        ++counters_.errors;
        Reply(routing_id,
              MakeErrorHeader(req, shard_,
                              ResourceExhaustedError(
                                  "shard " + std::to_string(shard_) + " holds " +
                                  std::to_string(held_writes_.size()) +
                                  " writes until its handover at clock " +
                                  std::to_string(reshard_->boundary()) +
                                  " already (cluster.workers x (client.max_in_flight + 1)); "
                                  "this one is refused, not applied")));
        return true;
      }
      held_writes_.push_back(std::move(*frames));
      frames->clear();
      return true;
    }
    case ReshardGate::Action::kMoved:
      if (req.op == Op::kPush && recent_pushes_.Contains(req.worker, req.session, req.request_id)) {
        // Applied here before the handover, its acknowledgement lost on a
        // broken connection: the handover generation holds it, so it is
        // acknowledged, not moved and applied again.
        ++counters_.repeated_pushes;
        PS_LOG_DEBUG("shard {}: PUSH request {} from worker {} came again after the handover; "
                     "acknowledged, it was applied before",
                     shard_, req.request_id, req.worker);
        Reply(routing_id, ReplyHeader(req));
        return true;
      }
      Reply(routing_id, reshard_->Moved(req));
      return true;
    case ReshardGate::Action::kDrop:
      // The worker turned to the next map and reached this address before
      // the server of that map took it: it sends the request again once
      // this process is gone.
      reshard_->Dropped(req);
      return true;
    case ReshardGate::Action::kRefuse:
      ++counters_.errors;
      Reply(routing_id, MakeErrorHeader(req, shard_, reshard_->Unknown(req)));
      return true;
  }
  return false;
}

void ShardServer::HandleReshard(Frame& routing_id, MessageHeader& reply) {
  const MessageHeader& req = request_.header;
  Status done;
  if (req.flags == kReshardPrepare) {
    std::string why_not;
    if (checkpoint_trigger_ == nullptr) {
      why_not = "the job has no checkpoint.dir; the rows move to the new servers through a "
                "checkpoint generation: add a checkpoint section";
    }
    done = reshard_->Prepare(req, MaxWorkerClock(), why_not);
    if (done.ok()) {
      PS_LOG_INFO("shard {}: prepared to hand over at clock {} to map {} ({} servers: {}); "
                  "writes of clock {} and later wait",
                  shard_, req.clock, req.map_epoch, reshard_->next_servers().size(), req.text,
                  req.clock);
    }
  } else if (req.flags == kReshardCommit) {
    done = reshard_->Commit(req);
    if (done.ok()) {
      PS_LOG_INFO("shard {}: the handover to map {} at clock {} is committed", shard_,
                  req.map_epoch, reshard_->boundary());
      // The boundary may have passed while it was prepared.
      if (reshard_->HandoverDue(clocks_.min_clock())) Handover();
    }
  } else if (req.flags == kReshardFollow) {
    done = Follow(req);
  } else if (req.flags == kReshardAbort) {
    const bool was_prepared = reshard_->prepared();
    done = reshard_->Abort(req);
    if (done.ok() && was_prepared) {
      PS_LOG_WARN("shard {}: the handover to map {} was aborted; serving the {} writes it held",
                  shard_, req.map_epoch, held_writes_.size());
      // Served in the order they came, as if never held. Run's request
      // scratch (request_) is reused: this request's header is not read
      // again below.
      reply.clock = MaxWorkerClock();
      Reply(routing_id, reply);
      std::vector<std::vector<Frame>> held = std::move(held_writes_);
      held_writes_.clear();
      for (std::vector<Frame>& frames : held) Handle(frames);
      return;
    }
  } else {
    done = InvalidArgumentError("RESHARD flags " + std::to_string(req.flags) +
                                "; expected exactly one of 1 (prepare), 2 (commit), 4 (abort), "
                                "8 (follow)");
  }
  if (!done.ok()) {
    ++counters_.errors;
    PS_LOG_WARN("shard {}: RESHARD refused: {}", shard_, done.ToString());
    MessageHeader error = MakeErrorHeader(req, shard_, done);
    error.clock = MaxWorkerClock();
    Reply(routing_id, error);
    return;
  }
  reply.clock = MaxWorkerClock();
  Reply(routing_id, reply);
}

Status ShardServer::Follow(const MessageHeader& req) {
  // Before the prepare too: ps_ctl reshard gives the next map's servers
  // the time to take their copies before it picks the handover clock.
  if (reshard_->handed_over() || req.map_epoch != reshard_->map_epoch() + 1 ||
      (reshard_->prepared() && req.map_epoch != reshard_->next_epoch())) {
    return FailedPreconditionError(
        "shard " + std::to_string(shard_) + " serves map " +
        std::to_string(reshard_->map_epoch()) +
        (reshard_->handed_over() ? " and handed over already" : "") +
        "; only a server of the next map (" + std::to_string(reshard_->map_epoch() + 1) +
        ") follows it, until its handover");
  }
  if (req.text.empty()) {
    // ps_ctl reshard gave up: nothing more goes to the next map's servers.
    replication_->DropFollowers();
    return Status::Ok();
  }
  if (req.text.rfind("tcp://", 0) != 0) {
    return InvalidArgumentError("a follower's endpoint \"" + req.text +
                                "\" is not tcp://host:port");
  }
  return replication_->Follow(
      req.text, "the server of map " + std::to_string(req.map_epoch) + " at " + req.text,
      store_.get(), clocks_,
      push_policy_.sums_replicated() ? held_.Replicated(recent_pushes_) : recent_pushes_,
      /*copy_sums=*/!push_policy_.sums_replicated());
}

Status ShardServer::WriteHandoverGeneration() {
  const int64_t clock = reshard_->boundary();
  if (reshard_->handed_over()) {
    // Written after a handover to servers of the next map that followed
    // this shard: they start serving on this host meanwhile and come first.
    LowerThisProcessPriority(kHandoverWriteNice);
  }
  // Every update of the clocks below the boundary, none of it or later
  // (held): the state the servers of the next map restore.
  Status written = checkpoint_trigger_->WriteNow(clock);
  if (!written.ok()) {
    PS_LOG_ERROR("shard {}: the handover generation of clock {} could not be written: {}; the "
                 "shard stops. Resume the job from its newest checkpoint (ps_launch --resume)",
                 shard_, clock, written.ToString());
    exit_status_ = written.WithContext("shard " + std::to_string(shard_) + ": handover");
    Stop();
  }
  return written;
}

void ShardServer::Handover() {
  const int64_t clock = reshard_->boundary();
  const auto start = clock_->Now();
  // With followers, the servers of the next map hold the rows already:
  // they are handed over first, and the generation written after (for a
  // server of the next map that did not follow, and for durability); by
  // the loop's end when the next map takes this address, whose server
  // binds it once this one gave it up.
  const size_t followers = replication_->followers();
  if (followers == 0 && !WriteHandoverGeneration().ok()) return;
  // The next map's server of this index writes its generations into this
  // folder while this one writes the handover's.
  if (followers > 0) checkpoints_->ShareWithReshard(clock, /*handed_over=*/true);
  reshard_->HandedOver(clock_->Now());
  if (followers > 0) replication_->End(reshard_->next_epoch(), clock);
  const double ms = std::chrono::duration<double, std::milli>(clock_->Now() - start).count();
  PS_LOG_INFO("shard {}: handed over at clock {} in {:.0f} ms{}; the job goes on at map {} on {} "
              "servers ({} writes and {} waiting pulls sent there)",
              shard_, clock, ms,
              followers > 0 ? " to " + std::to_string(followers) +
                                  " servers of the next map that followed its rows"
                            : ": generation " + checkpoints_->GenerationPath(clock) +
                                  " holds its rows",
              reshard_->next_epoch(), reshard_->next_servers().size(), held_writes_.size(),
              waiting_.pulls());
  std::vector<std::vector<Frame>> held = std::move(held_writes_);
  held_writes_.clear();
  for (std::vector<Frame>& frames : held) {
    std::span<const Frame> body(frames.data() + 1, frames.size() - 1);
    Reply(frames[0], reshard_->Moved(EchoHeader(body)));
  }
  for (WaitingRequests::Waiting& w : waiting_.TakeAllPulls()) {
    Reply(w.frames[0], reshard_->Moved(w.request.header));
  }
  // Nothing changes the shard's state from now on: its backups end now,
  // not when it exits (a shard the next map leaves out lingers up to
  // kHandoverLinger, and a backup of it may hold an address the next map
  // takes). Their acknowledgements of earlier entries come first.
  replication_->End(reshard_->next_epoch(), clock);
  if (followers == 0) return;
  if (reshard_->keeps_address()) {
    handover_write_due_ = true;  // WriteDueHandover, once Run() closed the socket
  } else {
    WriteHandoverGeneration().IgnoreError();  // logged
  }
}

Status ShardServer::WriteDueHandover() {
  if (!handover_write_due_) return Status::Ok();
  handover_write_due_ = false;
  const auto start = clock_->Now();
  PS_RETURN_IF_ERROR(WriteHandoverGeneration());
  PS_LOG_INFO("shard {}: generation {} written in {:.0f} ms after the handover", shard_,
              checkpoints_->GenerationPath(reshard_->boundary()),
              std::chrono::duration<double, std::milli>(clock_->Now() - start).count());
  return Status::Ok();
}

}  // namespace ps
