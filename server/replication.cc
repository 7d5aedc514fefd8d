#include "server/replication.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "common/endpoint.h"
#include "common/logging.h"
#include "server/checkpoint.h"
#include "server/checkpoint_format.h"
#include "server/restore.h"

namespace ps {

std::string ReplicaName(const JobOptions& job, uint32_t shard, uint32_t replica) {
  StatusOr<HostPort> where = ReplicaHostPort(job, shard, replica);
  const std::string at = where.ok() ? " (" + where->canonical + ")" : std::string();
  return "replica " + std::to_string(replica) + " of shard " + std::to_string(shard) + at;
}


std::vector<ShardStats::Checksum> Checksums(const ShardStore& store) {
  std::vector<ShardStats::Checksum> checksums;
  for (uint32_t t = 0; t < store.layouts().size(); ++t) {
    checksums.push_back({store.layouts()[t].name, store.Checksum(t)});
  }
  return checksums;
}

// ---------------------------------------------------------------------------
// ReplicationLog

StatusOr<std::unique_ptr<ReplicationLog>> ReplicationLog::Create(const JobOptions& job,
                                                                 uint32_t shard,
                                                                 Context* context, Env* env,
                                                                 bool no_backups, uint32_t self) {
  std::unique_ptr<ReplicationLog> log(new ReplicationLog(job, shard, self, context, env));
  for (uint32_t j = 0; j < job.replication.factor && !no_backups; ++j) {
    if (j == self) continue;
    PS_ASSIGN_OR_RETURN(Backup b, log->Connect(j));
    log->backups_.push_back(std::move(b));
  }
  for (Backup& b : log->backups_) log->sockets_.push_back(b.channel->poll_sockets().messages);
  return log;
}

StatusOr<ReplicationLog::Backup> ReplicationLog::Connect(uint32_t replica) {
  PS_ASSIGN_OR_RETURN(const HostPort where, ReplicaAddress(job_, shard_, replica));
  PS_ASSIGN_OR_RETURN(Backup b, ConnectTo(ConnectEndpoint(where)));
  b.replica = replica;
  b.name = ReplicaName(job_, shard_, replica);
  return b;
}

StatusOr<ReplicationLog::Backup> ReplicationLog::ConnectTo(const std::string& endpoint) {
  ChannelOptions options;
  options.shard = shard_;
  options.endpoint = endpoint;
  options.use = ChannelUse::kReplication;
  // No high-water mark: what is in flight is bounded by the replies it
  // holds back (each worker has at most client.max_in_flight requests
  // waiting for an acknowledgement), and an entry must never be dropped.
  // A joining backup's copy is the shard's size once, shared with the
  // store.
  options.hwm = 0;
  options.linger_ms = 1000;  // the last entries (kEnd) still go out at exit
  options.reconnect_ms = static_cast<int>(job_.liveness.reconnect_ms);
  options.events = false;
  Backup b;
  PS_ASSIGN_OR_RETURN(b.channel, env_->Connect(context_, options));
  return b;
}

Status ReplicationLog::SendTo(Backup& b, ReplicaEntry kind, MessageHeader header,
                              std::vector<Frame> frames) {
  header.op = Op::kReplicate;
  header.request_id = last_seq_;
  header.flags = static_cast<uint32_t>(kind);
  header.shard = shard_;
  header.epoch = epoch_;
  std::vector<Frame> message;
  message.reserve(1 + frames.size());
  message.push_back(EncodeHeader(header));
  for (Frame& f : frames) message.push_back(std::move(f));
  return b.channel->Send(message).WithContext("shard " + std::to_string(shard_) +
                                             ": the copy for " + b.name);
}

Status ReplicationLog::Join(uint32_t replica, int64_t epoch, ShardStore* store,
                            const ClockTable& clocks, const RecentPushes& recent,
                            bool copy_sums, uint64_t incarnation) {
  if (epoch < epoch_) {
    return FailedPreconditionError("shard " + std::to_string(shard_) + " is at epoch " +
                                   std::to_string(epoch_) + "; a membership change of epoch " +
                                   std::to_string(epoch) + " is out of date");
  }
  if (replica == self_ || replica >= job_.replication.factor) {
    return InvalidArgumentError("shard " + std::to_string(shard_) + " has no replica " +
                                std::to_string(replica) + " to copy to (replication.factor " +
                                std::to_string(job_.replication.factor) + "; this primary is "
                                "replica " + std::to_string(self_) + ")");
  }
  for (size_t i = 0; i < backups_.size(); ++i) {
    const Backup& b = backups_[i];
    if (b.replica != replica) continue;
    if (b.copying || b.acked > 0) {
      return FailedPreconditionError("shard " + std::to_string(shard_) + " replicates to backup " +
                                     std::to_string(replica) + " already; drop it first");
    }
    // Taken for a backup from the start, it acknowledged nothing: the
    // replica started after this primary took the shard and joins.
    PS_LOG_INFO("shard {}: {} joins instead of being a backup from the start", shard_, b.name);
    Forget(i);
    break;
  }
  PS_ASSIGN_OR_RETURN(Backup b, Connect(replica));
  epoch_ = epoch;
  PS_ASSIGN_OR_RETURN(const CopySent sent,
                      SendCopy(b, store, clocks, recent, copy_sums, incarnation));
  PS_LOG_INFO("shard {}: epoch {}: sending {} a copy of {} blocks and {} pending sums as of "
              "entry {}",
              shard_, epoch, b.name, sent.blocks, sent.sums, last_seq_);
  AddBackup(std::move(b));
  return Status::Ok();
}

Status ReplicationLog::Follow(const std::string& endpoint, const std::string& name,
                              ShardStore* store, const ClockTable& clocks,
                              const RecentPushes& recent, bool copy_sums) {
  for (const Backup& b : backups_) {
    if (b.follower && b.name == name) {
      return FailedPreconditionError("shard " + std::to_string(shard_) + " sends its rows to " +
                                     name + " already");
    }
  }
  PS_ASSIGN_OR_RETURN(Backup b, ConnectTo(endpoint));
  b.replica = kFollowerReplica;
  b.name = name;
  b.follower = true;
  PS_ASSIGN_OR_RETURN(const CopySent sent, SendCopy(b, store, clocks, recent, copy_sums, 0));
  PS_LOG_INFO("shard {}: sending {} a copy of {} blocks and {} pending sums as of entry {}, then "
              "every change until the handover",
              shard_, name, sent.blocks, sent.sums, last_seq_);
  AddBackup(std::move(b));
  return Status::Ok();
}

void ReplicationLog::DropFollowers() {
  for (size_t i = backups_.size(); i-- > 0;) {
    if (!backups_[i].follower) continue;
    PS_LOG_INFO("shard {}: {} is not sent the shard's changes any more", shard_,
                backups_[i].name);
    Forget(i);
  }
}

size_t ReplicationLog::followers(bool with_copy) const {
  return static_cast<size_t>(std::count_if(backups_.begin(), backups_.end(), [&](const Backup& b) {
    return b.follower && (!with_copy || !b.copying);
  }));
}

void ReplicationLog::AddBackup(Backup b) {
  backups_.push_back(std::move(b));
  sockets_.clear();
  for (Backup& x : backups_) sockets_.push_back(x.channel->poll_sockets().messages);
}

StatusOr<ReplicationLog::CopySent> ReplicationLog::SendCopy(Backup& b, ShardStore* store,
                                                            const ClockTable& clocks,
                                                            const RecentPushes& recent,
                                                            bool copy_sums, uint64_t incarnation) {
  b.copying = true;
  b.in_sync = false;
  // The state as of entry last_seq_: its beginning, every block (shared),
  // then the sums, clocks and recent pushes; the entries after it follow
  // on the same connection, so the backup applies them after the copy.
  MessageHeader begin;
  begin.session = incarnation;
  PS_RETURN_IF_ERROR(SendTo(b, ReplicaEntry::kCopyBegin, begin, {}));
  uint64_t blocks = 0;
  for (uint32_t t = 0; t < store->layouts().size(); ++t) {
    if (store->layouts()[t].hashed) {
      // A hashed table's rows, copied now in chunks of about 1 MiB (its
      // rows are not shared blocks).
      const uint64_t rows = store->stored_rows(t);
      const uint64_t chunk = store->HashedRowsPerCopy(t);
      for (uint64_t first = 0; first < rows; first += chunk) {
        std::vector<Frame> frames;
        MessageHeader h;
        h.table = t;
        h.first_row = first;
        h.count = std::min(chunk, rows - first);
        PS_RETURN_IF_ERROR(store->CopyIds(t, first, h.count, &frames));
        PS_RETURN_IF_ERROR(SendTo(b, ReplicaEntry::kCopyIds, h, std::move(frames)));
        ++blocks;
      }
      if (const std::span<const std::byte> sketch = store->SketchData(t); !sketch.empty()) {
        // The admission counts, so that the replica admits the ids its
        // primary admits.
        MessageHeader h;
        h.table = t;
        std::vector<Frame> frames;
        frames.push_back(Frame::CopyOf(sketch.data(), sketch.size()));
        PS_RETURN_IF_ERROR(SendTo(b, ReplicaEntry::kCopySketch, h, std::move(frames)));
        ++blocks;
      }
      continue;
    }
    for (uint64_t k = 0; k < store->block_count(t); ++k) {
      std::vector<Frame> frames;
      MessageHeader h;
      h.table = t;
      PS_RETURN_IF_ERROR(store->ShareBlock(t, k, &frames, &h.first_row, &h.count));
      PS_RETURN_IF_ERROR(SendTo(b, ReplicaEntry::kCopyRows, h, std::move(frames)));
      ++blocks;
    }
  }
  uint64_t sum_count = 0;
  if (copy_sums) {
    // Every clock's sums not applied yet, of range and hashed tables: the
    // backup applies them with the clock's end as this primary does.
    std::vector<Frame> sums;
    std::vector<int64_t> index;
    store->CopySums(kMaxClock, &sums, &index);
    constexpr size_t kFields = ShardStore::kSumIndexFields;
    for (size_t k = 0; k < index.size() / kFields; ++k) {
      MessageHeader h;
      h.clock = index[kFields * k];
      h.table = static_cast<uint32_t>(index[kFields * k + 1]);
      h.count = static_cast<uint64_t>(index[kFields * k + 2]);
      std::vector<Frame> frames;
      frames.push_back(std::move(sums[2 * k]));
      frames.push_back(std::move(sums[2 * k + 1]));
      PS_RETURN_IF_ERROR(SendTo(b, ReplicaEntry::kCopySum, h, std::move(frames)));
      ++sum_count;
    }
  }
  const std::vector<int64_t> clock_data = clocks.Encode();
  std::vector<Frame> clock_frames;
  clock_frames.push_back(Frame::CopyOf(clock_data.data(), clock_data.size() * sizeof(int64_t)));
  PS_RETURN_IF_ERROR(SendTo(b, ReplicaEntry::kCopyClocks, MessageHeader(), std::move(clock_frames)));
  const std::vector<uint64_t> recent_data = recent.Encode();
  std::vector<Frame> recent_frames;
  recent_frames.push_back(
      Frame::CopyOf(recent_data.data(), recent_data.size() * sizeof(uint64_t)));
  PS_RETURN_IF_ERROR(
      SendTo(b, ReplicaEntry::kCopyRecent, MessageHeader(), std::move(recent_frames)));
  MessageHeader end;
  end.count = blocks + sum_count;
  PS_RETURN_IF_ERROR(SendTo(b, ReplicaEntry::kCopyEnd, end, {}));
  b.acked = last_seq_;  // what it will hold once the copy is applied
  return CopySent{blocks, sum_count};
}

void ReplicationLog::Send(ReplicaEntry kind, MessageHeader header,
                          std::span<const Frame> request) {
  if (!active()) return;
  header.op = Op::kReplicate;
  header.request_id = ++last_seq_;
  header.flags = static_cast<uint32_t>(kind);
  header.shard = shard_;
  header.epoch = epoch_;
  for (Backup& b : backups_) {
    message_.clear();
    message_.push_back(EncodeHeader(header));
    for (const Frame& f : request) message_.push_back(f.Clone());
    Status sent = b.channel->Send(message_);
    if (!sent.ok()) {
      // With no high-water mark a send fails only when the context is
      // going away; the backup then misses this entry and says so.
      PS_LOG_ERROR("shard {}: replication entry {} to {} not sent: {}", shard_, last_seq_, b.name,
                   sent.ToString());
    }
  }
  message_.clear();
}

void ReplicationLog::Push(std::span<const Frame> request, int64_t clock, bool accumulate) {
  MessageHeader h;
  h.clock = clock;
  Send(accumulate ? ReplicaEntry::kAccumulate : ReplicaEntry::kPush, h, request);
}

void ReplicationLog::RefusedPush(std::span<const Frame> request, int64_t clock) {
  MessageHeader h;
  h.clock = clock;
  Send(ReplicaEntry::kRefusedPush, h, request);
}

void ReplicationLog::ApplySums(int64_t below, uint32_t workers, const ShardStore* sums,
                               std::span<const uint64_t> pushes) {
  MessageHeader h;
  h.clock = below;
  h.count = workers;
  if (sums == nullptr) {
    Send(ReplicaEntry::kApplySums, h, {});
    return;
  }
  if (!active()) return;  // no copy of the sums for nobody
  std::vector<Frame> frames(2);
  std::vector<int64_t> index;
  frames[0] = Frame::CopyOf(pushes.data(), pushes.size() * sizeof(uint64_t));
  sums->CopySums(below, &frames, &index);
  frames[1] = Frame::CopyOf(index.data(), index.size() * sizeof(int64_t));
  Send(ReplicaEntry::kAggregate, h, frames);
}

void ReplicationLog::Finish(uint32_t worker, int64_t finished) {
  MessageHeader h;
  h.worker = worker;
  h.clock = finished;
  Send(ReplicaEntry::kFinish, h, {});
}

void ReplicationLog::Late(uint32_t worker, int64_t clock, uint64_t session,
                          uint64_t request_id) {
  MessageHeader h;
  h.worker = worker;
  h.clock = clock;
  // Send() numbers the entry in request_id: the push's id goes in count.
  h.session = session;
  h.count = request_id;
  Send(ReplicaEntry::kLate, h, {});
}

void ReplicationLog::Exclude(uint32_t worker) {
  MessageHeader h;
  h.worker = worker;
  Send(ReplicaEntry::kExclude, h, {});
}

void ReplicationLog::Include(uint32_t worker) {
  MessageHeader h;
  h.worker = worker;
  Send(ReplicaEntry::kInclude, h, {});
}

void ReplicationLog::End(int64_t handed_over_to, int64_t clock) {
  if (ended_) return;  // the handover sent it already
  ended_ = true;
  MessageHeader header;
  header.map_epoch = handed_over_to;
  header.clock = clock;
  Send(ReplicaEntry::kEnd, header, {});
}

uint64_t ReplicationLog::committed() const {
  uint64_t c = last_seq_;
  for (const Backup& b : backups_) {
    if (!b.copying && !b.follower) c = std::min(c, b.acked);
  }
  acknowledged_ = std::max(acknowledged_, c);
  return c;
}

void ReplicationLog::MaybeInSync(Backup& b) {
  if (b.follower || b.in_sync || b.copying || b.acked < b.must_hold) return;
  b.in_sync = true;
  PS_LOG_INFO("shard {}: {} holds every acknowledged entry ({}) and is a full replica again",
              shard_, b.name, b.acked);
  Status told = SendTo(b, ReplicaEntry::kInSync, MessageHeader(), {});
  if (!told.ok()) PS_LOG_ERROR("shard {}: {}", shard_, told.ToString());
}

Status ReplicationLog::ReceiveAcks(size_t index) {
  Backup& b = backups_[index];
  for (int i = 0; i < 4096; ++i) {
    PS_ASSIGN_OR_RETURN(bool got, b.channel->TryRecv(&acks_));
    if (!got) return Status::Ok();
    if (acks_.empty()) continue;
    Reply reply;
    const Status checked = DecodeReply(
        acks_, shard_,
        [this](uint64_t id) -> std::optional<ReplyExpectation> {
          if (id > last_seq_) return std::nullopt;
          return ReplyExpectation{.request = Op::kReplicate, .shard = shard_};
        },
        &reply);
    if (reply.fault == ReplyFault::kUnreadable) {
      PS_LOG_WARN("shard {}: unreadable reply from {}: {}", shard_, b.name, checked.ToString());
      continue;
    }
    const MessageHeader* h = &reply.header;
    if (reply.fault == ReplyFault::kRejected && b.follower) {
      // A server of the next shard map that cannot follow: the handover
      // goes on without it, and that server starts from the handover
      // generation instead.
      PS_LOG_WARN("shard {}: {} refused entry {} ({}); it is sent nothing more", shard_, b.name,
                  h->request_id, StatusFromErrorHeader(*h).message());
      Forget(index);
      return Status::Ok();
    }
    if (reply.fault == ReplyFault::kRejected && b.copying) {
      // A backup that never held a whole copy: the shard goes on without
      // it (the authority may start it again).
      PS_LOG_ERROR("shard {}: {} refused its copy ({}); replicating without it", shard_, b.name,
                   StatusFromErrorHeader(*h).message());
      Forget(index);
      return Status::Ok();
    }
    if (reply.fault == ReplyFault::kRejected && b.acked == 0 &&
        StatusFromErrorHeader(*h).code() == StatusCode::kFailedPrecondition) {
      // Taken for a backup from the start, it waits for a copy instead:
      // it started after this primary took the shard, registered as one
      // that joins, and holds no entry, so it is in no one's way; the
      // authority adds it (Join), and the copy starts then.
      PS_LOG_WARN("shard {}: {} takes a copy rather than the log from its start ({}); "
                  "replicating without it until it joins",
                  shard_, b.name, StatusFromErrorHeader(*h).message());
      Forget(index);
      return Status::Ok();
    }
    if (reply.fault == ReplyFault::kRejected && (h->flags & kFlagHoldsNoCopy) != 0) {
      // Another process listens at the backup's address and holds nothing
      // (started again, it waits for a copy of its own): the process this
      // log replicated to is gone and can never take the shard over. The
      // shard goes on without it until the authority adds the new one.
      PS_LOG_WARN("shard {}: {} is a new process that holds no copy yet ({}); its previous "
                  "process is gone; replicating without it until it joins",
                  shard_, b.name, StatusFromErrorHeader(*h).message());
      Forget(index);
      return Status::Ok();
    }
    if (reply.fault == ReplyFault::kRejected) {
      return DataLossError("shard " + std::to_string(shard_) + ": " + b.name +
                           " refused replication entry " + std::to_string(h->request_id) + ": " +
                           StatusFromErrorHeader(*h).message() +
                           "; its copy is no longer this primary's");
    }
    if (reply.fault != ReplyFault::kNone) {
      PS_LOG_WARN("shard {}: unexpected {} {} from {}", shard_, OpName(h->op), h->request_id,
                  b.name);
      continue;
    }
    if (b.copying && h->flags == static_cast<uint32_t>(ReplicaEntry::kCopyEnd)) {
      // Entries past the copy were acknowledged to workers without it
      // (up to what committed() said while it copied): it must hold them
      // before it is in sync.
      b.must_hold = std::max(committed(), acknowledged_);
      b.copying = false;
      if (b.follower) {
        PS_LOG_INFO("shard {}: {} holds the copy as of entry {}", shard_, b.name, h->request_id);
      } else {
        PS_LOG_INFO("shard {}: {} holds the copy as of entry {}; it is in sync once it applied "
                    "entry {}",
                    shard_, b.name, h->request_id, b.must_hold);
      }
    }
    b.acked = std::max(b.acked, h->request_id);
    MaybeInSync(b);
  }
  return Status::Ok();
}

bool ReplicationLog::AnyBuffered() const {
  for (const Backup& b : backups_) {
    if (b.channel->HasBuffered()) return true;
  }
  return false;
}

void ReplicationLog::Forget(size_t index) {
  // What it never received must not reach a new replica at its address.
  backups_[index].channel->DropUnsentOnClose();
  backups_.erase(backups_.begin() + static_cast<std::ptrdiff_t>(index));
  sockets_.clear();
  for (Backup& b : backups_) sockets_.push_back(b.channel->poll_sockets().messages);
}

Status ReplicationLog::Drop(uint32_t replica, int64_t epoch) {
  if (epoch < epoch_) {
    return FailedPreconditionError("shard " + std::to_string(shard_) + " is at epoch " +
                                   std::to_string(epoch_) + "; a membership change of epoch " +
                                   std::to_string(epoch) + " is out of date");
  }
  auto it = std::find_if(backups_.begin(), backups_.end(),
                         [&](const Backup& b) { return b.replica == replica; });
  if (it == backups_.end()) {
    return NotFoundError("shard " + std::to_string(shard_) + " has no backup " +
                         std::to_string(replica) + " to drop");
  }
  epoch_ = epoch;
  Forget(static_cast<size_t>(it - backups_.begin()));
  return Status::Ok();
}

ShardStats::Replication ReplicationLog::Stats() const {
  ShardStats::Replication r{.factor = job_.replication.factor,
                            .epoch = epoch_,
                            .last_seq = last_seq_,
                            .committed = committed(),
                            .backups = {}};
  for (const Backup& b : backups_) {
    if (b.follower) continue;  // not a replica of this shard
    r.backups.push_back(
        {b.replica, b.copying ? "copying" : b.in_sync ? "acked" : "catching_up", b.acked});
  }
  return r;
}

}  // namespace ps
