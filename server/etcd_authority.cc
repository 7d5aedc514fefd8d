#include "server/etcd_authority.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

#include "common/endpoint.h"
#include "common/logging.h"
#include "common/wire.h"
#include "server/control_request.h"

namespace ps {
namespace {

constexpr char kReady[] = "ready";
constexpr char kJoining[] = "joining";
// How long the server may take to answer the authority's MEMBERSHIP (a
// join copies nothing before it answers; the copy goes on after).
constexpr int kTellTimeoutMs = 5000;

// The replica a primary key names (its value).
uint32_t ReplicaOf(const EtcdKeyValue& primary) {
  return static_cast<uint32_t>(std::strtoul(primary.value.c_str(), nullptr, 10));
}

}  // namespace

std::string EtcdAuthority::PrimaryKey(const std::string& prefix, uint32_t shard) {
  return prefix + "/shard/" + std::to_string(shard) + "/primary";
}

std::string EtcdAuthority::ReplicaKey(const std::string& prefix, uint32_t shard,
                                      uint32_t replica) {
  return prefix + "/shard/" + std::to_string(shard) + "/replica/" + std::to_string(replica);
}

std::string EtcdAuthority::Prefix(const JobOptions& job, int64_t map_epoch) {
  const std::string& p = job.replication.etcd.prefix;
  const std::string base = p.empty()              ? "/ps/" + job.Fingerprint()
                           : p.back() == '/' ? p.substr(0, p.size() - 1)
                                             : p;
  return map_epoch >= 1 ? base + "/map/" + std::to_string(map_epoch) : base;
}

EtcdAuthority::EtcdAuthority(const JobOptions& job, uint32_t shard, uint32_t replica,
                             int64_t map_epoch)
    : job_(job),
      shard_(shard),
      replica_(replica),
      prefix_(Prefix(job, map_epoch)),
      name_("replica " + std::to_string(replica) + " of shard " + std::to_string(shard)),
      period_(std::max<int64_t>(50, job.replication.etcd.lease_ttl_s * 1000 / 4)),
      valid_for_(job.replication.etcd.lease_ttl_s * 1000 * 3 / 4),
      in_log_(job.replication.factor, -1) {}

EtcdAuthority::~EtcdAuthority() { Stop(); }

StatusOr<std::unique_ptr<EtcdAuthority>> EtcdAuthority::Create(const JobOptions& job,
                                                               uint32_t shard, uint32_t replica,
                                                               bool join, int64_t map_epoch) {
  std::unique_ptr<EtcdAuthority> a(new EtcdAuthority(job, shard, replica, map_epoch));
  const EtcdOptions& options = job.replication.etcd;
  PS_ASSIGN_OR_RETURN(a->etcd_,
                      EtcdClient::Create(options.endpoints,
                                         std::chrono::milliseconds(options.request_timeout_ms)));
  const auto granted = WriteLease::Clock::now();
  // A starting server waits for a slow etcd (one whose disk is loaded)
  // up to start_timeout_ms; a running one within its lease (Run).
  a->etcd_->RetryUntil(std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(options.start_timeout_ms));
  PS_ASSIGN_OR_RETURN(a->lease_id_, a->etcd_->GrantLease(options.lease_ttl_s));
  const std::string key = PrimaryKey(a->prefix_, shard);
  PS_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> primary, a->etcd_->Get(key));
  if (primary.has_value()) {
    a->role_ = Role::kJoin;
    a->followed_ = primary->create_revision;
    a->primary_ = ReplicaOf(*primary);
  } else if (replica == 0 && !join) {
    PS_ASSIGN_OR_RETURN(EtcdTxnResult taken, a->TakeKey(key));
    if (taken.succeeded) {
      a->role_ = Role::kPrimary;
      a->epoch_ = taken.revision;
      a->held_ = taken.revision;
      a->followed_ = taken.revision;
      a->primary_ = replica;
      a->Extend(granted);
      for (uint32_t j = 0; j < job.replication.factor; ++j) a->in_log_[j] = j == replica ? -1 : 0;
    } else {
      a->role_ = Role::kJoin;
      a->followed_ = taken.current.has_value() ? taken.current->create_revision : 0;
      if (taken.current.has_value()) a->primary_ = ReplicaOf(*taken.current);
    }
  } else {
    a->role_ = join ? Role::kJoin : Role::kBackup;
  }
  PS_LOG_INFO("{}: etcd lease {:x} ({} s) at {}; {} (epoch {})", a->name_, a->lease_id_,
              options.lease_ttl_s, options.endpoints.front(),
              a->role_ == Role::kPrimary  ? "holds the shard's primary key"
              : a->role_ == Role::kBackup ? "a backup from the start"
                                          : "joins the shard's primary as a backup",
              a->followed_);
  // MEMBERSHIP goes to this replica's own address, where its server
  // listens whatever its role.
  PS_ASSIGN_OR_RETURN(const HostPort own, ReplicaHostPort(job, shard, replica));
  PS_ASSIGN_OR_RETURN(a->context_, Context::Create(1));
  SocketOptions so;
  so.linger_ms = 0;
  PS_ASSIGN_OR_RETURN(a->socket_, Socket::Create(a->context_.get(), SocketType::kDealer, so));
  PS_RETURN_IF_ERROR(a->socket_->Connect(ConnectEndpoint(own)));
  return a;
}

StatusOr<EtcdTxnResult> EtcdAuthority::TakeKey(const std::string& key) {
  PS_ASSIGN_OR_RETURN(EtcdTxnResult taken,
                      etcd_->PutIfAbsent(key, std::to_string(replica_), lease_id_));
  if (!taken.succeeded && taken.current.has_value() && taken.current->lease == lease_id_) {
    // A try that timed out was applied after all: the key is this replica's.
    taken.succeeded = true;
    taken.revision = taken.current->create_revision;
    taken.current.reset();
  }
  return taken;
}

void EtcdAuthority::Start(std::function<void(const std::string&)> stop_server) {
  stop_server_ = std::move(stop_server);
  thread_ = std::thread([this] { Run(); });
}

void EtcdAuthority::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EtcdAuthority::Extend(WriteLease::Clock::time_point renewed) {
  write_lease_.Extend(renewed + valid_for_, epoch_);
}

void EtcdAuthority::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    const auto started = WriteLease::Clock::now();
    std::string fatal;
    Status s = Step(started, &fatal);
    if (s.code() == StatusCode::kCancelled) return;  // Stop() while it waited on its own server
    if (!fatal.empty()) {
      write_lease_.Revoke();
      PS_LOG_ERROR("{}: {}", name_, fatal);
      if (stop_server_) stop_server_(fatal);
      return;
    }
    const std::string problem = s.ok() ? "" : s.ToString();
    if (problem != last_problem_) {
      if (!s.ok()) {
        PS_LOG_WARN("{}: etcd: {}{}", name_, problem,
                    role_ == Role::kPrimary ? "; writes are refused once the lease may have lapsed"
                                            : "");
      } else {
        PS_LOG_INFO("{}: etcd answers again", name_);
      }
      last_problem_ = problem;
    }
    lock.lock();
    wake_.wait_until(lock, started + period_, [this] { return stop_; });
  }
}

Status EtcdAuthority::Step(WriteLease::Clock::time_point started, std::string* fatal) {
  // A call that gets no answer is tried again while the lease may still
  // hold: a slow etcd is not a dead one.
  etcd_->RetryUntil(started + valid_for_);
  round_started_ = started;
  fatal_.clear();
  StatusOr<int64_t> ttl = etcd_->KeepAlive(lease_id_);
  if (ttl.status().code() == StatusCode::kNotFound) {
    *fatal = role_ == Role::kPrimary
                 ? "its etcd lease lapsed, so it no longer holds shard " + std::to_string(shard_) +
                       " (epoch " + std::to_string(epoch_) +
                       "): fenced, it acknowledges nothing more and stops; start it again and it "
                       "rejoins as a backup"
                 : "its etcd lease lapsed, so its primary drops it; it stops; start it again and "
                   "it rejoins as a backup";
    return Status::Ok();
  }
  PS_RETURN_IF_ERROR(ttl.status());
  if (role_ == Role::kPrimary) Extend(started);
  if (!registered_) {
    PS_RETURN_IF_ERROR(etcd_->Put(ReplicaKey(prefix_, shard_, replica_),
                                  role_ == Role::kJoin ? kJoining : kReady, lease_id_)
                           .status());
    registered_ = true;
  }
  return role_ == Role::kPrimary ? PrimaryStep(fatal) : BackupStep(fatal);
}

Status EtcdAuthority::NewEpoch(const std::string& what, int64_t* epoch, std::string* fatal) {
  PS_ASSIGN_OR_RETURN(EtcdTxnResult written,
                      etcd_->PutIfHeld(PrimaryKey(prefix_, shard_), held_,
                                       prefix_ + "/shard/" + std::to_string(shard_) + "/membership",
                                       what, 0));
  if (!written.succeeded) {
    *fatal = "it no longer holds shard " + std::to_string(shard_) + "'s primary key (taken at " +
             "revision " + std::to_string(held_) + "; epoch " + std::to_string(epoch_) +
             "): fenced, it acknowledges nothing more and stops";
    return Status::Ok();
  }
  *epoch = written.revision;
  return Status::Ok();
}

Status EtcdAuthority::PrimaryStep(std::string* fatal) {
  PS_ASSIGN_OR_RETURN(std::vector<EtcdKeyValue> registered,
                      etcd_->GetPrefix(prefix_ + "/shard/" + std::to_string(shard_) + "/replica/"));
  std::map<uint32_t, const EtcdKeyValue*> present;
  for (const EtcdKeyValue& kv : registered) {
    const std::string slot = kv.key.substr(kv.key.rfind('/') + 1);
    char* end = nullptr;
    const unsigned long j = std::strtoul(slot.c_str(), &end, 10);
    if (end == slot.c_str() || *end != '\0' || j >= job_.replication.factor) continue;
    present[static_cast<uint32_t>(j)] = &kv;
  }
  for (uint32_t j = 0; j < job_.replication.factor; ++j) {
    if (j == replica_) continue;
    auto it = present.find(j);
    const int64_t in_log = in_log_[j];
    if (it == present.end()) {
      if (in_log <= 0) continue;  // never seen, or not in the log
      // Its lease lapsed: the primary stops waiting for it.
      StatusOr<MembershipChange> gone = ReplicaGone(shard_, j);
      if (!fatal_.empty()) break;
      PS_RETURN_IF_ERROR(gone.status());
      PS_LOG_WARN("{}: etcd: replica {}'s lease lapsed; the shard goes on without it (epoch {})",
                  name_, j, gone->epoch);
      continue;
    }
    // A registration is one process's: its lease. A replica started again
    // before its previous process's lease lapsed puts the same key under a
    // new lease (the key's create_revision stays), and it waits for a copy
    // of its own.
    const EtcdKeyValue& kv = *it->second;
    if (in_log == kv.lease) continue;
    if (in_log == 0 && kv.value == kReady) {
      in_log_[j] = kv.lease;  // a backup from the start
      continue;
    }
    if (kv.value != kJoining) continue;  // another primary's backup: it stops and rejoins
    StatusOr<MembershipChange> joined = ReplicaJoins(shard_, j);
    if (!fatal_.empty()) break;
    PS_RETURN_IF_ERROR(joined.status());
    PS_LOG_WARN("{}: etcd: replica {} joins; the primary sends it a copy (epoch {})", name_, j,
                joined->epoch);
  }
  *fatal = fatal_;
  return Status::Ok();
}

Status EtcdAuthority::Drop(uint32_t replica, WriteLease::Clock::time_point started,
                           std::string* fatal) {
  int64_t epoch = 0;
  PS_RETURN_IF_ERROR(NewEpoch("drop " + std::to_string(replica), &epoch, fatal));
  if (!fatal->empty()) return Status::Ok();
  Status dropped = Tell(kMembershipDropBackup, replica, epoch);
  // NotFound: the log did not hold it (it never connected).
  if (!dropped.ok() && dropped.code() != StatusCode::kNotFound) return dropped;
  epoch_ = epoch;
  Extend(started);
  in_log_[replica] = -1;
  return Status::Ok();
}

Status EtcdAuthority::BackupStep(std::string* fatal) {
  const std::string key = PrimaryKey(prefix_, shard_);
  PS_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> primary, etcd_->Get(key));
  if (primary.has_value()) {
    if (followed_ == 0) {
      followed_ = primary->create_revision;
      primary_ = ReplicaOf(*primary);
    }
    if (primary->create_revision != followed_) {
      // The shard got another primary than the one this copy follows:
      // its entries will not come here.
      *fatal = "shard " + std::to_string(shard_) + " has another primary now (replica " +
               primary->value + ", epoch " + std::to_string(primary->create_revision) +
               ") than the one this backup followed; it stops; start it again and it rejoins";
    }
    return Status::Ok();
  }
  if (followed_ == 0) return Status::Ok();  // the job is starting: no primary yet
  bool in_sync = true;
  {
    std::lock_guard<std::mutex> lock(in_sync_mu_);
    if (in_sync_) in_sync = in_sync_();
  }
  if (!in_sync) {
    const auto now = std::chrono::steady_clock::now();
    if (!lapsed_at_) lapsed_at_ = now;
    if (now - *lapsed_at_ < std::chrono::seconds(job_.replication.etcd.lease_ttl_s)) {
      return Status::Ok();  // a replica in sync may take the shard
    }
    *fatal = NotInSyncReason("it is still taking its primary's copy, and no replica in sync "
                             "took the shard within a lease's time");
    return Status::Ok();
  }
  // The primary's lease lapsed: take the shard over, if nobody else did.
  StatusOr<MembershipChange> promoted = ReplicaGone(shard_, primary_);
  *fatal = fatal_;
  // Aborted: another replica took the shard, or this one's server refused
  // (said where it happened); the next round follows whoever holds it.
  if (promoted.status().code() == StatusCode::kAborted) return Status::Ok();
  return promoted.status();
}

std::string EtcdAuthority::NotInSyncReason(const std::string& why) const {
  return "shard " + std::to_string(shard_) +
         "'s primary is gone and this replica does not hold every push it acknowledged (" + why +
         "); it stops rather than serve without them. A replica in sync takes over if there is "
         "one; otherwise the shard has none: restart the job from its newest checkpoint "
         "(checkpoint.dir; ps_launch --restore-clock), the pushes after it are lost";
}

void EtcdAuthority::SetInSync(std::function<bool()> in_sync) {
  std::lock_guard<std::mutex> lock(in_sync_mu_);
  in_sync_ = std::move(in_sync);
}

StatusOr<MembershipChange> EtcdAuthority::TakeOver() {
  const std::string key = PrimaryKey(prefix_, shard_);
  PS_ASSIGN_OR_RETURN(EtcdTxnResult taken, TakeKey(key));
  if (!taken.succeeded) {
    if (taken.current.has_value()) {
      followed_ = taken.current->create_revision;
      primary_ = ReplicaOf(*taken.current);
    }
    return AbortedError(name_ + ": another replica took shard " + std::to_string(shard_) +
                        "'s primary key first");
  }
  const int64_t epoch = taken.revision;
  Status promoted = Tell(kMembershipPromote, 0, epoch);
  if (!promoted.ok()) {
    PS_LOG_WARN("{}: took shard {}'s primary key at epoch {} but cannot serve: {}; giving it back",
                name_, shard_, epoch, promoted.ToString());
    PS_RETURN_IF_ERROR(etcd_->DeleteIfHeld(key, epoch).status());
    if (promoted.code() == StatusCode::kFailedPrecondition) {
      // Still taking its copy, or not in sync: pushes the dead primary
      // acknowledged are not here, and will never come.
      fatal_ = NotInSyncReason(promoted.message());
    }
    return AbortedError(name_ + ": its server cannot serve shard " + std::to_string(shard_) +
                        ": " + promoted.ToString() + "; the key was given back");
  }
  role_ = Role::kPrimary;
  epoch_ = epoch;
  held_ = epoch;
  followed_ = epoch;
  primary_ = replica_;
  std::fill(in_log_.begin(), in_log_.end(), -1);  // a promoted primary starts with no backups
  Extend(round_started_);
  PS_LOG_WARN("{}: etcd: the primary's lease lapsed; this replica holds shard {} now (epoch {})",
              name_, shard_, epoch);
  return MembershipChange::Of(kMembershipPromote, shard_, replica_, epoch);
}

Status EtcdAuthority::CheckShard(uint32_t shard, uint32_t replica) const {
  if (shard != shard_ || replica >= job_.replication.factor) {
    return InvalidArgumentError(name_ + ": decides for its own shard " + std::to_string(shard_) +
                                " of " + std::to_string(job_.replication.factor) +
                                " replicas only, not for replica " + std::to_string(replica) +
                                " of shard " + std::to_string(shard));
  }
  return Status::Ok();
}

StatusOr<ShardMembership> EtcdAuthority::Membership(uint32_t shard) const {
  PS_RETURN_IF_ERROR(CheckShard(shard, replica_));
  ShardMembership membership;
  membership.epoch = role_ == Role::kPrimary ? epoch_ : followed_;
  membership.primary = primary_;
  return membership;
}

StatusOr<MembershipChange> EtcdAuthority::ReplicaGone(uint32_t shard, uint32_t replica) {
  PS_RETURN_IF_ERROR(CheckShard(shard, replica));
  if (role_ != Role::kPrimary) {
    if (replica != primary_) {
      return FailedPreconditionError(name_ + " is a backup: replica " + std::to_string(replica) +
                                     " is another backup, which its primary drops");
    }
    return TakeOver();
  }
  if (replica == replica_) {
    return FailedPreconditionError(name_ + " is the primary: its own loss is etcd's to see (its "
                                   "lease lapses), not its own to decide");
  }
  PS_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> registered,
                      etcd_->Get(ReplicaKey(prefix_, shard_, replica)));
  if (registered.has_value()) {
    return FailedPreconditionError(name_ + ": replica " + std::to_string(replica) +
                                   " is still registered at etcd (its lease holds); the primary "
                                   "drops only a replica whose lease lapsed");
  }
  PS_RETURN_IF_ERROR(Drop(replica, round_started_, &fatal_));
  if (!fatal_.empty()) return FailedPreconditionError(fatal_);
  return MembershipChange::Of(kMembershipDropBackup, shard_, replica, epoch_);
}

StatusOr<MembershipChange> EtcdAuthority::ReplicaJoins(uint32_t shard, uint32_t replica) {
  PS_RETURN_IF_ERROR(CheckShard(shard, replica));
  if (role_ != Role::kPrimary || replica == replica_) {
    return FailedPreconditionError(name_ + ": replica " + std::to_string(replica) +
                                   " joins shard " + std::to_string(shard_) +
                                   "'s primary, which adds it; this replica is not that primary");
  }
  PS_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> kv,
                      etcd_->Get(ReplicaKey(prefix_, shard_, replica)));
  if (!kv.has_value() || kv->value != kJoining) {
    return FailedPreconditionError(name_ + ": replica " + std::to_string(replica) +
                                   " is not registered at etcd as joining; start it with --join");
  }
  if (in_log_[replica] >= 0) {
    // A new life of a replica still in the log: out first.
    PS_RETURN_IF_ERROR(Drop(replica, round_started_, &fatal_));
    if (!fatal_.empty()) return FailedPreconditionError(fatal_);
  }
  int64_t epoch = 0;
  PS_RETURN_IF_ERROR(NewEpoch("join " + std::to_string(replica), &epoch, &fatal_));
  if (!fatal_.empty()) return FailedPreconditionError(fatal_);
  PS_RETURN_IF_ERROR(Tell(kMembershipAddBackup, replica, epoch, kv->lease));
  epoch_ = epoch;
  Extend(round_started_);
  in_log_[replica] = kv->lease;
  return MembershipChange::Of(kMembershipAddBackup, shard_, replica, epoch);
}

Status EtcdAuthority::Tell(uint32_t flags, uint32_t backup, int64_t epoch, int64_t incarnation) {
  MessageHeader h;
  h.op = Op::kMembership;
  h.request_id = next_request_++;
  h.worker = kControlWorker;
  h.flags = flags;
  h.replica = backup;
  h.epoch = epoch;
  h.shard = shard_;
  h.session = static_cast<uint64_t>(incarnation);
  // The server stopped (a handover, a signal) and stops this thread: it
  // answers nothing more, so waiting out the timeout would only delay the
  // process's exit.
  return AskServer(*socket_, h, std::chrono::milliseconds(kTellTimeoutMs),
                   std::chrono::milliseconds(100),
                   [this] {
                     std::lock_guard<std::mutex> lock(mu_);
                     return stop_;
                   })
      .WithContext(name_ + ": its own server");
}

}  // namespace ps
