// BackupServer (server/replication.h): a backup replica's loop, which
// applies the primary's log as the primary did, takes a joining copy, and
// answers STATS, PRIMARY, SHUTDOWN and the authority's promotion.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "common/endpoint.h"
#include "common/logging.h"
#include "server/checkpoint.h"
#include "server/checkpoint_format.h"
#include "server/replication.h"
#include "server/restore.h"

namespace ps {

BackupServer::BackupServer(const JobOptions& job, uint32_t shard, uint32_t replica,
                           std::string name)
    : job_(job), shard_(shard), replica_(replica), name_(std::move(name)),
      clocks_(job.cluster.workers, job.consistency.Quorum(job.cluster.workers)),
      // As the primary's (ShardServer): the same pushes are recorded.
      recent_pushes_(job.cluster.workers, 4 * size_t{job.client.max_in_flight} + 64) {}

StatusOr<std::unique_ptr<BackupServer>> BackupServer::Create(const JobOptions& job,
                                                             uint32_t shard, uint32_t replica,
                                                             const std::string& bind_endpoint,
                                                             int64_t restore_clock, bool join,
                                                             Env* env) {
  if (shard >= job.cluster.servers.size() || replica >= job.replication.factor ||
      job.replication.factor < 2 || (replica == 0 && !join)) {
    return InvalidArgumentError(
        "replica " + std::to_string(replica) + " of shard " + std::to_string(shard) +
        " cannot run as a backup; the job has " + std::to_string(job.cluster.servers.size()) +
        " shards with replication.factor " + std::to_string(job.replication.factor) +
        " (replicas 0.." + std::to_string(job.replication.factor - 1) +
        ", 0 the primary at the start, which comes back as a backup only with --join)");
  }
  std::unique_ptr<BackupServer> b(
      new BackupServer(job, shard, replica, ReplicaName(job, shard, replica)));
  PS_RETURN_IF_ERROR(b->Open(bind_endpoint, restore_clock, join, env));
  return b;
}

StatusOr<std::unique_ptr<BackupServer>> BackupServer::CreateFollower(
    const JobOptions& job, uint32_t shard, const std::string& bind_endpoint, std::string name,
    Env* env) {
  if (shard >= job.cluster.servers.size() || bind_endpoint.empty()) {
    return InvalidArgumentError("a follower of shard " + std::to_string(shard) + " (the job has " +
                                std::to_string(job.cluster.servers.size()) +
                                " shards) needs an endpoint to listen on");
  }
  std::unique_ptr<BackupServer> b(new BackupServer(job, shard, kFollower, std::move(name)));
  PS_RETURN_IF_ERROR(b->Open(bind_endpoint, /*restore_clock=*/-1, /*join=*/true, env));
  return b;
}

StatusOr<std::unique_ptr<BackupServer>> BackupServer::CreateFromState(
    const JobOptions& job, uint32_t shard, State state, const std::string& bind_endpoint,
    Env* env) {
  const uint32_t replica = state.slot;
  if (shard >= job.cluster.servers.size() || replica == 0 ||
      replica >= job.replication.factor || state.store == nullptr) {
    return InvalidArgumentError("replica " + std::to_string(replica) + " of shard " +
                                std::to_string(shard) + " cannot start as a backup from a state "
                                "of its own; the job has " +
                                std::to_string(job.cluster.servers.size()) +
                                " shards with replication.factor " +
                                std::to_string(job.replication.factor));
  }
  std::unique_ptr<BackupServer> b(
      new BackupServer(job, shard, replica, ReplicaName(job, shard, replica)));
  PS_RETURN_IF_ERROR(b->Open(bind_endpoint, /*restore_clock=*/-1, /*join=*/false, env, &state));
  return b;
}

Status BackupServer::Open(const std::string& bind_endpoint, int64_t restore_clock, bool join,
                          Env* env, State* from) {
  Filesystem& files = (env != nullptr ? env : Env::Default())->filesystem();
  // The same starting state as the primary: the same generation, or the
  // same initial values, or the state both built (`from`).
  RestorePoint generation;
  if (join && restore_clock >= 0) {
    return InvalidArgumentError("a joining backup takes its state from the primary, not from a "
                                "checkpoint (--join with --restore-clock)");
  }
  if (from != nullptr) {
    store_ = std::move(from->store);
    clocks_ = from->clocks;
    recent_pushes_ = std::move(from->recent_pushes);
    started_clock_ = clocks_.min_clock();
  } else if (join) {
    copying_ = true;
    in_sync_ = false;
    in_sync_now_.store(false, std::memory_order_release);
    copy_next_row_.resize(job_.tables.size(), 0);
  } else if (!job_.checkpoint.dir.empty() && job_.checkpoint.restore) {
    PS_ASSIGN_OR_RETURN(generation, ShardRestorePoint(files, job_, shard_, restore_clock));
  } else if (restore_clock >= 0) {
    return InvalidArgumentError("a restore clock was given but the job has no checkpoint.dir");
  }
  if (from != nullptr) {
    // Its store came with the state.
  } else if (generation.clock >= 0) {
    // Every row is restored below, or the backup does not start.
    PS_ASSIGN_OR_RETURN(store_, ShardStore::CreateUnwritten(job_, shard_));
  } else {
    PS_ASSIGN_OR_RETURN(store_, ShardStore::Create(job_, shard_, /*initialize=*/!join));
  }
  ResetCopyProgress();
  if (generation.clock >= 0) {
    PS_ASSIGN_OR_RETURN(const RestoreResult restored,
                        RestoreGeneration(job_, shard_, generation, store_.get(), &files));
    // As its primary does (ShardServer::RestoreCheckpoint).
    PS_RETURN_IF_ERROR(LoadRecentPushes(job_, shard_, generation, &recent_pushes_));
    clocks_.StartAt(generation.clock);
    started_clock_ = generation.clock;
    PS_LOG_INFO("{}: restored {}", name_, restored.from);
  }
  PS_ASSIGN_OR_RETURN(context_, Context::Create(1));
  SocketOptions so;
  // An entry carries a worker's push, which the primary admitted under
  // server.max_request_bytes.
  so.max_frame_bytes = static_cast<int64_t>(job_.server.max_request_bytes * 2);
  so.linger_ms = 1000;
  PS_ASSIGN_OR_RETURN(socket_, Socket::Create(context_.get(), SocketType::kRouter, so));
  std::string endpoint = bind_endpoint;
  if (endpoint.empty()) {
    PS_ASSIGN_OR_RETURN(const HostPort where, ReplicaAddress(job_, shard_, replica_));
    PS_ASSIGN_OR_RETURN(endpoint, BindEndpoint(where, job_.cluster.bind == BindMode::kAll));
  }
  Status bound = socket_->Bind(endpoint);
  // A backup of the next shard map (`from`) binds an address a replica of
  // the map before may hold until it saw the handover and exited.
  const auto bind_until = std::chrono::steady_clock::now() + kHandoverBindWait;
  while (from != nullptr && bound.code() == StatusCode::kUnavailable && !stop_requested() &&
         std::chrono::steady_clock::now() < bind_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    bound = socket_->Bind(endpoint);
  }
  if (!bound.ok()) {
    return bound.WithContext(name_ + ": cannot listen on " + endpoint +
                             ": is another ps_server (or program) using this port? Stop it, or "
                             "change replication.port_offset");
  }
  PS_ASSIGN_OR_RETURN(endpoint_, socket_->LastEndpoint());
  rules_ = store_->Rules(job_, shard_);
  rules_.replication = true;  // its primary's entries
  return Status::Ok();
}

Status BackupServer::Run() {
  PS_LOG_INFO("{} serving its primary on {}", name_, endpoint_);
  std::vector<Frame> frames;
  std::vector<bool> readable;
  Socket* sockets[] = {socket_.get()};
  while (!stop_requested() && !ended_ && !promoted()) {
    auto ready = PollReadable(sockets, 100, &readable);
    if (!ready.ok()) return ready.status().WithContext(name_);
    for (int i = 0; i < 256 && !stop_requested() && !ended_ && !promoted(); ++i) {
      auto got = socket_->TryRecv(&frames);
      if (!got.ok()) return got.status().WithContext(name_);
      if (!*got) break;
      Handle(frames);
    }
  }
  PS_LOG_INFO("{} stopped after {} entries{}", name_, applied_,
              ended_ ? " (its primary stopped)" : "");
  return Status::Ok();
}

void BackupServer::Reply(Frame& routing_id, const MessageHeader& header) {
  reply_.clear();
  reply_.push_back(std::move(routing_id));
  reply_.push_back(EncodeHeader(header));
  Status s = socket_->Send(reply_);
  reply_.clear();
  if (!s.ok()) PS_LOG_WARN("{}: reply not sent: {}", name_, s.ToString());
}

void BackupServer::Handle(std::vector<Frame>& frames) {
  if (frames.size() < 2) return;
  std::span<Frame> body(frames.data() + 1, frames.size() - 1);
  Status s = DecodeRequest(body, rules_, &request_);
  if (s.ok() && request_.header.op == Op::kReplicate) {
    // Kept aside: applying a push entry decodes the push into request_.
    const MessageHeader entry = std::move(request_.header);
    HandleEntry(entry, frames);
    return;
  }
  HandleRequest(std::move(s), frames);
}

bool BackupServer::AnsweredWithoutApply(const MessageHeader& entry, Frame& routing_id) {
  if (entry.epoch < epoch_) {
    // From a primary of an older membership than one this replica
    // followed: the authority has replaced it since.
    ++refused_;
    const Status fenced = FailedPreconditionError(
        name_ + " refused entry " + std::to_string(entry.request_id) + " of epoch " +
        std::to_string(entry.epoch) + ": its primary was fenced out by epoch " +
        std::to_string(epoch_) + " and may acknowledge nothing more");
    PS_LOG_WARN("{}", fenced.message());
    Reply(routing_id, MakeErrorHeader(entry, shard_, fenced));
    return true;
  }
  if (entry.flags == static_cast<uint32_t>(ReplicaEntry::kInSync)) {
    if (copying_ || applied_ < entry.request_id) {
      ++refused_;
      PS_LOG_ERROR("{}: its primary says it is in sync as of entry {}, but it {}", name_,
                   entry.request_id,
                   copying_ ? "is still taking the copy"
                            : "applied only " + std::to_string(applied_) + ": entries were lost");
      return true;
    }
    if (!in_sync_) {
      in_sync_ = true;
      in_sync_now_.store(true, std::memory_order_release);
      PS_LOG_INFO("{} holds every entry its primary acknowledged (applied {}): a full replica "
                  "again",
                  name_, applied_);
    }
    return true;
  }
  if (copying_ && entry.flags == static_cast<uint32_t>(ReplicaEntry::kEnd)) {
    // Its primary ends (the job's end, or a handover to another shard map)
    // before the copy did: this replica ends with it, as one in sync does.
    Status applied = Apply(entry, {}, nullptr);
    if (applied.ok()) {
      MessageHeader reply;
      reply.op = Op::kReplicateOk;
      reply.shard = shard_;
      reply.request_id = entry.request_id;
      Reply(routing_id, reply);
    }
    return true;
  }
  if (copying_ && !IsCopyEntry(entry.flags)) {
    // Not from the primary that sends the copy (an entry of an older
    // epoch, or a primary that does not know this backup joins): refused,
    // and the copy goes on.
    ++refused_;
    // FailedPrecondition, not DataLoss: it holds nothing of the log yet,
    // and a primary that took it for a backup from the start replicates
    // without it until it joins (ReplicationLog::ReceiveAcks).
    const Status early = FailedPreconditionError(
        name_ + " is still taking the primary's copy and got entry " +
        std::to_string(entry.request_id) + " of epoch " + std::to_string(entry.epoch) +
        " before its end");
    PS_LOG_WARN("{}", early.message());
    Refuse(entry, routing_id, early, /*holds_nothing=*/true);
    return true;
  }
  return false;
}

void BackupServer::Refuse(const MessageHeader& entry, Frame& routing_id, const Status& why,
                          bool holds_nothing) {
  MessageHeader refusal = MakeErrorHeader(entry, shard_, why);
  if (holds_nothing) refusal.flags |= kFlagHoldsNoCopy;
  Reply(routing_id, refusal);
}

bool BackupServer::TakeCopyBegin(const MessageHeader& entry, Frame& routing_id) {
  if (copying_ && entry.session != 0 && incarnation_ != 0 && entry.session != incarnation_) {
    // For the process of this replica before this one, which the primary's
    // authority took for the one here: this one waits for its own.
    const Status other = FailedPreconditionError(
        name_ + " got a copy of epoch " + std::to_string(entry.epoch) + " for incarnation " +
        std::to_string(entry.session) + ", another process of this replica (this one is " +
        std::to_string(incarnation_) + "); it waits for a copy of its own");
    PS_LOG_WARN("{}", other.message());
    ++refused_;
    Refuse(entry, routing_id, other, /*holds_nothing=*/true);
    return true;
  }
  if (!copying_) {
    // It holds a copy, and its primary sends another: the primary dropped
    // it from its log (its authority took it for a new process), so what
    // came since went elsewhere and this copy misses it. It is never
    // promoted from here on; started again, it takes a copy of its own.
    in_sync_ = false;
    in_sync_now_.store(false, std::memory_order_release);
    must_rejoin_ = name_ + " holds a copy, and its primary sends a new one (epoch " +
                   std::to_string(entry.epoch) +
                   "): it was dropped from the primary's log, so its copy misses what came "
                   "since; it stops; start it again and it rejoins";
    diverged_ = FailedPreconditionError(must_rejoin_);
    PS_LOG_ERROR("{}", must_rejoin_);
    ++refused_;
    Refuse(entry, routing_id, diverged_, /*holds_nothing=*/false);
    Stop();
    return true;
  }
  if (copy_blocks_ > 0) return false;  // ApplyCopy refuses it: part of a copy is applied
  // A copy begins (again: one that began before and brought no rows, its
  // clocks at most, is overwritten by this one).
  StartCopy(entry.epoch);
  return true;
}

void BackupServer::TakeCopyEntry(const MessageHeader& entry, std::vector<Frame>& frames) {
  Frame& routing_id = frames[0];
  MessageHeader reply;
  reply.shard = shard_;
  reply.request_id = entry.request_id;
  const bool begins = entry.flags == static_cast<uint32_t>(ReplicaEntry::kCopyBegin);
  if (begins && diverged_.ok() && TakeCopyBegin(entry, routing_id)) return;
  if (diverged_.ok() && copying_ && !begins && copy_epoch_ != entry.epoch) {
    // The rest of a copy sent to an earlier process at this address:
    // refused, holding nothing of it; this one waits for its own copy.
    ++refused_;
    const Status stray = FailedPreconditionError(
        name_ + " got entry " + std::to_string(entry.request_id) + " of a copy of epoch " +
        std::to_string(entry.epoch) + " without its beginning (it went to an earlier process " +
        "at this address); it waits for a copy of its own");
    PS_LOG_WARN("{}", stray.message());
    Refuse(entry, routing_id, stray, /*holds_nothing=*/true);
    return;
  }
  // The primary's copy for a joining backup; only its end is
  // acknowledged.
  Status copied =
      !diverged_.ok() ? diverged_
      : !copying_ ? FailedPreconditionError(name_ + " holds a copy already; a copy entry "
                                                  "comes only to a backup that joins")
          : ApplyCopy(entry, std::span<Frame>(frames.data() + 2, frames.size() - 2));
  if (!copied.ok()) {
    ++refused_;
    PS_LOG_ERROR("{}: refused a copy entry: {}", name_, copied.ToString());
    diverged_ = copied;
    Reply(routing_id, MakeErrorHeader(entry, shard_, copied));
    return;
  }
  if (!copying_) {
    reply.op = Op::kReplicateOk;
    reply.flags = static_cast<uint32_t>(ReplicaEntry::kCopyEnd);
    Reply(routing_id, reply);
  }
}

void BackupServer::HandleEntry(const MessageHeader& entry, std::vector<Frame>& frames) {
  Frame& routing_id = frames[0];
  if (AnsweredWithoutApply(entry, routing_id)) return;
  if (IsCopyEntry(entry.flags)) {
    TakeCopyEntry(entry, frames);
    return;
  }
  MessageHeader reply;
  reply.shard = shard_;
  reply.request_id = entry.request_id;
  epoch_ = std::max(epoch_, entry.epoch);
  if (entry.request_id <= applied_) {
    // Sent again: applied once already.
    reply.op = Op::kReplicateOk;
    Reply(routing_id, reply);
    return;
  }
  bool acked = false;
  // A push is acknowledged once checked, before its apply, as the
  // primary does with its workers: this thread applies it before it
  // reads the next entry, and the apply is the primary's arithmetic.
  auto ack = [&] {
    acked = true;
    reply.op = Op::kReplicateOk;
    Reply(routing_id, reply);
  };
  Status applied =
      !diverged_.ok() ? diverged_
      : entry.request_id == applied_ + 1
          ? Apply(entry, std::span<Frame>(frames.data() + 2, frames.size() - 2), ack)
          : DataLossError(name_ + " expected replication entry " +
                          std::to_string(applied_ + 1) + " and got " +
                          std::to_string(entry.request_id) + ": entries were lost");
  if (!applied.ok()) {
    ++refused_;
    PS_LOG_ERROR("{}: refused replication entry {}: {}", name_, entry.request_id,
                 applied.ToString());
    if (acked) {
      // Acknowledged, and yet not applied as the primary did: this copy
      // is not the primary's any more.
      diverged_ = DataLossError(name_ + " failed to apply entry " +
                                std::to_string(entry.request_id) + " (" + applied.message() +
                                "); its copy differs from the primary's");
      return;
    }
    Reply(routing_id, MakeErrorHeader(entry, shard_, applied));
    return;
  }
  applied_ = entry.request_id;
  if (!acked) ack();
}

void BackupServer::HandleRequest(Status s, std::vector<Frame>& frames) {
  Frame& routing_id = frames[0];
  std::span<Frame> body(frames.data() + 1, frames.size() - 1);
  if (s.ok()) {
    const MessageHeader& req = request_.header;
    MessageHeader reply;
    reply.op = ReplyOp(req.op);
    reply.request_id = req.request_id;
    reply.worker = req.worker;
    reply.shard = shard_;
    reply.min_clock = clocks_.min_clock();
    if (req.op == Op::kStats) {
      reply.text = StatsReplyText(Stats(), req.flags);
      Reply(routing_id, reply);
      return;
    }
    if (req.op == Op::kPrimary) {
      // A client looking for the shard's primary: not here.
      reply.epoch = epoch_;
      Reply(routing_id, reply);
      return;
    }
    if (req.op == Op::kShutdown) {
      PS_LOG_INFO("{}: SHUTDOWN requested", name_);
      Stop();
      Reply(routing_id, reply);
      return;
    }
    if (req.op == Op::kMembership && req.flags == kMembershipPromote && !in_sync_) {
      s = FailedPreconditionError(
          copying_
              ? name_ + " is still taking its primary's copy (" + std::to_string(copy_blocks_) +
                    " blocks so far) and holds no whole state: it cannot be promoted"
              : name_ + " took its primary's copy but has not yet applied every entry the "
                        "primary acknowledged meanwhile (it applied " + std::to_string(applied_) +
                    "): promoted, it would lose acknowledged pushes; it cannot be promoted");
      Reply(routing_id, MakeErrorHeader(req, shard_, s));
      return;
    }
    if (req.op == Op::kMembership && req.flags == kMembershipPromote) {
      // The authority's word: the primary is gone and this copy takes
      // over (ps_server builds the primary from it when Run() returns).
      // Entries the primary sent after it are not taken any more.
      promoted_epoch_ = req.epoch;
      epoch_ = std::max(epoch_, promoted_epoch_);
      // The workers' clocks it serves from (the first 16), for the record.
      std::string clocks;
      for (uint32_t w = 0; w < std::min<uint32_t>(clocks_.num_workers(), 16); ++w) {
        clocks += (w > 0 ? " " : "") + std::to_string(clocks_.clock(w)) +
                  (clocks_.counted(w) ? "" : "*");
      }
      PS_LOG_WARN("{}: promoted to primary at epoch {} after {} entries (clock {}; the workers' "
                  "clocks {}{})",
                  name_, promoted_epoch_, applied_, clocks_.min_clock(), clocks,
                  clocks_.num_workers() > 16 ? " ..." : "");
      Reply(routing_id, reply);
      return;
    }
    s = FailedPreconditionError(
        name_ + " is a backup: it keeps a copy and serves no " + OpName(req.op) +
        "; the shard's primary is another of its replicas (a client asks each with PRIMARY)");
    MessageHeader error = MakeErrorHeader(req, shard_, s);
    error.flags = kFlagNotPrimary;
    error.epoch = epoch_;
    Reply(routing_id, error);
    return;
  }
  const MessageHeader echo = EchoHeader(body);
  if (echo.op == Op::kPush || echo.op == Op::kPull || echo.op == Op::kClock) {
    // A worker's request this replica could not read, e.g. routed by
    // another shard map (a reshard: it holds an address the next map's
    // primary takes once it exits): a backup serves none, whatever its
    // rows, and the client looks for the primary.
    MessageHeader error = MakeErrorHeader(
        echo, shard_,
        FailedPreconditionError(name_ + " is a backup and serves no " + OpName(echo.op) + " (" +
                                s.message() + ")"));
    error.flags = kFlagNotPrimary;
    error.epoch = epoch_;
    Reply(routing_id, error);
    return;
  }
  Reply(routing_id, MakeErrorHeader(echo, shard_, s));
}

BackupServer::State BackupServer::TakeState() {
  State state;
  state.store = std::move(store_);
  state.clocks = clocks_;
  state.recent_pushes = std::move(recent_pushes_);
  state.applied = applied_;
  state.epoch = promoted_epoch_;
  state.slot = replica_;
  return state;
}

ShardStats BackupServer::Stats() const {
  ShardStats s;
  s.shard = shard_;
  s.endpoint = endpoint_;
  s.backup = ShardStats::BackupReplica{replica_, applied_, refused_, started_clock_};
  s.map_epoch = map_epoch_;
  s.min_clock = clocks_.min_clock();
  s.workers.resize(clocks_.num_workers());
  for (uint32_t w = 0; w < clocks_.num_workers(); ++w) s.workers[w].clock = clocks_.clock(w);
  s.checksums = Checksums(*store_);
  return s;
}

}  // namespace ps
