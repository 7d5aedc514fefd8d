// The reply side of ShardServer (server/shard_server.h): every answer goes
// through Reply, which sends it at once or, for a request that changed
// state on a primary with backups, holds it (HeldReplies) until every
// backup has the log up to it; FlushDeferred sends what the backups
// acknowledged, or refuses it while the write lease may have lapsed
// (fenced); the replies carry the shard's minimum clock and epoch.
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "server/shard_server.h"

namespace ps {

void ShardServer::Reply(Frame& routing_id, const MessageHeader& header) {
  reply_.clear();
  reply_.push_back(std::move(routing_id));
  reply_.push_back(EncodeHeader(header));
  if (held_.in_request()) {
    held_.Hold({0, std::move(reply_), header}, 0);
    reply_.clear();
    return;
  }
  SendReply(header);
}

HeldReplies::Held ShardServer::MakeHeld(Frame& routing_id, const MessageHeader& header) {
  HeldReplies::Held held;
  held.frames.push_back(std::move(routing_id));
  held.frames.push_back(EncodeHeader(header));
  held.header = header;
  return held;
}

void ShardServer::FlushDeferred() {
  // Fenced (replication.authority etcd): nothing is acknowledged while the
  // lease may have lapsed. What waits for the backups is refused instead,
  // so that its clients look for the primary and send it there (a push
  // that reached the backup is recognised there and not applied twice).
  if (Fenced()) {
    if (!fenced_) {
      fenced_ = true;
      PS_LOG_WARN("shard {}: fenced: its etcd lease may have lapsed (epoch {}); it accepts and "
                  "acknowledges no write until it renews it, and refuses the {} replies that "
                  "wait for its backups",
                  shard_, epoch(), held_.size());
    }
    for (HeldReplies::Held& d : held_.TakeAllAssigned()) {
      ++counters_.fenced_refusals;
      MessageHeader error = FencedError(d.header);
      reply_.clear();
      reply_.push_back(std::move(d.frames[0]));  // the routing id
      reply_.push_back(EncodeHeader(error));
      SendReply(error);
    }
    return;
  }
  if (fenced_ && write_lease_ != nullptr) {
    fenced_ = false;
    PS_LOG_WARN("shard {}: renewed its etcd lease (epoch {}): it accepts writes again", shard_,
                epoch());
  }
  for (HeldReplies::Held& held : held_.TakeCommitted(replication_->committed())) {
    reply_ = std::move(held.frames);
    SendReply(held.header);
  }
}

bool ShardServer::ReceiveReplicaAcks(const std::vector<bool>& readable, size_t first) {
  for (size_t b = 0; b < replication_->sockets().size(); ++b) {
    if (!readable[first + b] && !replication_->HasBuffered(b)) continue;
    if (Status acks = replication_->ReceiveAcks(b); !acks.ok()) {
      // A copy that differs from the primary's can no longer take over:
      // the job stops rather than run with a replica it cannot trust.
      PS_LOG_ERROR("{}", acks.ToString());
      exit_status_ = acks;
      Stop();
      return false;
    }
  }
  return true;
}

void ShardServer::EndReplication() {
  if (!replication_->active()) return;
  if (reshard_->handed_over()) {
    replication_->End(reshard_->next_epoch(), reshard_->boundary());
  } else {
    replication_->End();
  }
  // The last replies (goodbyes) wait for the backups, a bounded time; in
  // real time, not on clock_: the wait is for sockets.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::vector<bool> readable;
  while (!held_.empty() && std::chrono::steady_clock::now() < until) {
    auto ready = PollReadable(replication_->sockets(), 100, &readable);
    if (!ready.ok() || !ReceiveReplicaAcks(readable, 0)) break;
    FlushDeferred();
  }
  if (!held_.empty()) {
    PS_LOG_WARN("shard {}: {} replies not sent: the backups did not acknowledge their entries "
                "in time ({})",
                shard_, held_.size(), replication_->Describe());
  }
}

void ShardServer::SendReply(const MessageHeader& header) {
  for (size_t i = 1; i < reply_.size(); ++i) counters_.bytes_out += reply_[i].size();
  Status s = socket_->Send(reply_);
  reply_.clear();  // drop any references to store blocks a failed send kept
  if (!s.ok()) {
    // The connection's queue is full or it went away; the client times out
    // (and a good worker, within client.max_in_flight, never fills it).
    ++counters_.replies_dropped;
    uint64_t skipped = 0;
    if (dropped_log_.ShouldLog(&skipped)) {
      PS_LOG_WARN("shard {}: reply to {} request {} from {} dropped: {}: its connection "
                  "has server.socket_hwm ({}) replies it has not read, or it is gone{}",
                  shard_, OpName(header.op), header.request_id, SenderName(header.worker),
                  s.message(),
                  job_.server.socket_hwm,
                  HeldBack(skipped));
    }
  }
}

MessageHeader ShardServer::FencedError(const MessageHeader& req) const {
  MessageHeader error = MakeErrorHeader(
      req, shard_,
      FailedPreconditionError(
          "shard " + std::to_string(shard_) + " at " + endpoint_ +
          " is fenced: it could not renew its etcd lease (epoch " + std::to_string(epoch()) +
          ") and acknowledges no " + OpName(req.op) +
          "; the shard's primary is the replica that holds it now (a client asks each)"));
  error.flags = kFlagNotPrimary;
  error.epoch = epoch();
  return error;
}

MessageHeader ShardServer::ReplyHeader(const MessageHeader& req) const {
  MessageHeader reply;
  reply.op = ReplyOp(req.op);
  reply.request_id = req.request_id;
  reply.worker = req.worker;
  reply.clock = req.clock;
  reply.table = req.table;
  reply.count = req.count;
  reply.dim = req.dim;
  reply.flags = req.flags;
  reply.first_row = req.first_row;
  reply.shard = shard_;
  reply.min_clock = clocks_.min_clock();
  reply.epoch = epoch();
  return reply;
}

}  // namespace ps
