// The job side of Client (client/client.h): the rendezvous (Join), the
// goodbye (Leave), and the control requests (STATS, CHECKPOINT, MEMBERSHIP,
// SHUTDOWN) a control client sends as kControlWorker.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "common/logging.h"
#include "common/rendezvous.h"

namespace ps {

Status Client::Join() {
  PS_RETURN_IF_ERROR(WorkerOnly("Join()"));
  // The rendezvous: a HELLO to every server at once, each waiting up to
  // rendezvous.timeout_ms for its server (a server not up yet gets it
  // when it starts listening).
  for (Shard& shard : shards_) shard.closing = false;
  const auto deadline = time_->Now() + std::chrono::milliseconds(job_.rendezvous.timeout_ms);
  std::vector<std::pair<Ticket, uint64_t>> hellos;
  for (uint32_t s = 0; s < num_shards(); ++s) {
    hellos.push_back(SendControl(s, Op::kHello));
    if (Part* p = tracker_.Find(hellos.back().second); p != nullptr) {
      tracker_.Extend(hellos.back().second, *p, deadline);
    }
  }
  int64_t resume = 0;
  std::string silent;
  Status refused;
  for (uint32_t s = 0; s < num_shards(); ++s) {
    StatusOr<MessageHeader> h = AwaitControl(hellos[s].first, hellos[s].second);
    if (h.ok()) {
      resume = std::max(resume, h->clock);
    } else if (h.status().code() == StatusCode::kDeadlineExceeded ||
               h.status().code() == StatusCode::kUnavailable) {
      silent += (silent.empty() ? "" : ", ") + std::string("server ") + std::to_string(s) + " (" +
                job_.cluster.servers[s] + ")";
    } else if (refused.ok()) {
      refused = h.status();
    }
  }
  PS_RETURN_IF_ERROR(refused);
  if (!silent.empty()) {
    return DeadlineExceededError(
        "worker " + std::to_string(worker_) + ": no answer within rendezvous.timeout_ms (" +
        std::to_string(job_.rendezvous.timeout_ms) + " ms) from " + silent +
        ": are they running, and does this host reach them (the name, the port, a firewall)? "
        "Start them, or raise rendezvous.timeout_ms when they start later" +
        (job_.security.mode == SecurityMode::kCurve
             ? std::string(". Under security.mode curve a server with another key than " +
                           job_.security.keys_dir + "/server.public never answers: check it")
             : std::string()));
  }
  PS_LOG_INFO("all {} servers answered; job fingerprint {}", num_shards(),
              AgreementFingerprint(agreement_));
  if (resume != clock_) {
    PS_LOG_INFO("joins at clock {}", resume);
    clock_ = resume;
    if (heartbeat_ != nullptr) heartbeat_->set_clock(clock_);
  }
  return Status::Ok();
}

Status Client::Leave() {
  if (control_) return WorkerOnly("Leave()");
  // No heartbeat may follow the goodbye: it would bring the worker back.
  if (heartbeat_ != nullptr) heartbeat_->Stop();
  Status first;
  for (uint32_t s = 0; s < num_shards(); ++s) {
    // It may exit as soon as it answers (server.exit_when_workers_leave),
    // and its connection may close before Control() returns.
    shards_[s].closing = true;
    auto h = Control(s, Op::kHeartbeat, kFlagLeaving);
    if (!h.ok() && first.ok()) first = h.status();
    if (!h.ok()) shards_[s].closing = false;
  }
  return first;
}

StatusOr<MessageHeader> Client::Control(uint32_t shard, Op op, uint32_t flags, uint32_t replica,
                                        int64_t epoch) {
  if (shard >= shards_.size()) {
    return InvalidArgumentError("server " + std::to_string(shard) + " does not exist; the job has " +
                                std::to_string(shards_.size()) + " servers");
  }
  const auto [ticket, rid] = SendControl(shard, op, flags, replica, epoch);
  return AwaitControl(ticket, rid);
}

std::pair<Ticket, uint64_t> Client::SendControl(uint32_t shard, Op op, uint32_t flags,
                                                uint32_t replica, int64_t epoch) {
  const Ticket ticket = tracker_.NewTicket(nullptr);
  const uint64_t rid = SendPart({.ticket = ticket,
                                 .shard = shard,
                                 .op = op,
                                 .flags = flags,
                                 .replica = replica,
                                 .epoch = epoch,
                                 .control = true},
                                Frame(), Frame());
  tracker_.Release(ticket, Status::Ok());  // the issuing hold
  return {ticket, rid};
}

StatusOr<MessageHeader> Client::AwaitControl(Ticket ticket, uint64_t rid) {
  Status s = Wait(ticket);
  auto reply = control_replies_.find(rid);
  if (!s.ok()) {
    if (reply != control_replies_.end()) control_replies_.erase(reply);
    return s;
  }
  if (reply == control_replies_.end()) return InternalError("control reply went missing");
  MessageHeader h = std::move(reply->second);
  control_replies_.erase(reply);
  return h;
}

StatusOr<std::string> Client::Stats(uint32_t shard) {
  PS_ASSIGN_OR_RETURN(MessageHeader h, Control(shard, Op::kStats));
  return h.text;
}

StatusOr<ShardStats> Client::StructuredStats(uint32_t shard) {
  PS_ASSIGN_OR_RETURN(MessageHeader h, Control(shard, Op::kStats, kFlagStatsJson));
  auto stats = ParseShardStatsJson(h.text);
  if (!stats.ok()) return stats.status().WithContext("shard " + std::to_string(shard));
  return stats;
}

StatusOr<std::vector<std::string>> Client::CheckpointServers() {
  std::vector<std::string> generations;
  for (uint32_t s = 0; s < shards_.size(); ++s) {
    PS_ASSIGN_OR_RETURN(MessageHeader h, Control(s, Op::kCheckpoint));
    generations.push_back(h.text);
  }
  return generations;
}

Status Client::Membership(uint32_t shard, uint32_t flags, uint32_t backup, int64_t epoch) {
  return Control(shard, Op::kMembership, flags, backup, epoch).status();
}

StatusOr<MessageHeader> Client::Reshard(uint32_t shard, uint32_t flags, int64_t clock,
                                        int64_t epoch, const std::string& servers) {
  if (shard >= shards_.size()) {
    return InvalidArgumentError("server " + std::to_string(shard) + " does not exist; the job has " +
                                std::to_string(shards_.size()) + " servers");
  }
  MessageHeader h;
  h.op = Op::kReshard;
  h.session = session_;
  h.worker = worker_;
  h.clock = clock;
  h.flags = flags;
  h.map_epoch = epoch;
  h.text = servers;
  const Ticket ticket = tracker_.NewTicket(nullptr);
  const uint64_t rid =
      SendWithHeader({.ticket = ticket, .shard = shard, .op = Op::kReshard, .flags = flags,
                      .control = true},
                     h, Frame(), Frame(), /*cacheable=*/false);
  tracker_.Release(ticket, Status::Ok());  // the issuing hold
  return AwaitControl(ticket, rid);
}

Status Client::ShutdownServers() {
  Status first;
  for (uint32_t s = 0; s < shards_.size(); ++s) {
    shards_[s].closing = true;  // it exits as soon as it answers
    auto h = Control(s, Op::kShutdown);
    if (!h.ok() && first.ok()) first = h.status();
    if (!h.ok()) shards_[s].closing = false;
  }
  return first;
}

}  // namespace ps
