#include "server/shard_server.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "common/endpoint.h"
#include "common/logging.h"
#include "common/rendezvous.h"
#include "common/text.h"
#include "common/wire_floats.h"
#include "server/open_files.h"

namespace ps {

std::string TcpEndpoint(const std::string& host_port) { return "tcp://" + host_port; }

ShardServer::ShardServer(uint32_t shard, const JobOptions& job, const Clock* clock)
    : shard_(shard),
      job_(job),
      clock_(clock != nullptr ? clock : &steady_clock_),
      bound_(job.consistency.Bound()),
      clocks_(job.cluster.workers, job.consistency.Quorum(job.cluster.workers)),
      // A worker that never spoke counts as silent only from the end of the
      // start-up grace period: processes may start in any order.
      workers_(job.cluster.workers,
               clock_->Now() + std::chrono::milliseconds(job.rendezvous.timeout_ms)),
      // Requests are sent again oldest first and at most max_in_flight are
      // in flight per shard: four times that covers every repeat.
      recent_pushes_(job.cluster.workers, 4 * size_t{job.client.max_in_flight} + 64),
      non_finite_logged_(job.tables.size(), false),
      agreement_(EncodeAgreement(job)),
      rate_sampled_(clock_->Now()),
      started_(rate_sampled_) {
  sums_replicated_ = job.replication.factor > 1 && job.consistency.aggregate &&
                     job.replication.after_aggregation;
}

ShardServer::~ShardServer() { JoinCheckpointWriter(); }

StatusOr<std::unique_ptr<ShardServer>> ShardServer::Create(const JobOptions& job, uint32_t shard,
                                                          const std::string& bind_endpoint,
                                                          int64_t restore_clock,
                                                          const Clock* clock,
                                                          CheckpointStageHook checkpoint_stage_hook) {
  return CreateInternal(job, shard, bind_endpoint, restore_clock, clock,
                        std::move(checkpoint_stage_hook), nullptr);
}

StatusOr<std::unique_ptr<ShardServer>> ShardServer::CreatePromoted(
    const JobOptions& job, uint32_t shard, BackupServer::State state,
    const std::string& bind_endpoint, const Clock* clock) {
  return CreateInternal(job, shard, bind_endpoint, -1, clock, nullptr, &state);
}

StatusOr<std::unique_ptr<ShardServer>> ShardServer::CreateInternal(
    const JobOptions& job, uint32_t shard, const std::string& bind_endpoint,
    int64_t restore_clock, const Clock* clock, CheckpointStageHook checkpoint_stage_hook,
    BackupServer::State* promoted) {
  if (shard >= job.cluster.servers.size()) {
    return InvalidArgumentError("shard " + std::to_string(shard) + " does not exist; the job has " +
                                std::to_string(job.cluster.servers.size()) + " servers");
  }
  std::unique_ptr<ShardServer> server(new ShardServer(shard, job, clock));
  server->checkpoint_stage_hook_ = std::move(checkpoint_stage_hook);
  if (job.checkpoint.dir.empty() && restore_clock >= 0) {
    return InvalidArgumentError("a restore clock was given but the job has no checkpoint.dir");
  }
  PS_RETURN_IF_ERROR(server->OpenState(restore_clock, promoted));
  PS_RETURN_IF_ERROR(server->OpenSocket(promoted));
  PS_RETURN_IF_ERROR(server->BindSocket(bind_endpoint, promoted));
  PS_ASSIGN_OR_RETURN(server->endpoint_, server->socket_->LastEndpoint());
  server->max_queued_reply_bytes_ = job.server.max_queued_reply_bytes;
  if (server->max_queued_reply_bytes_ == 0) {
    // A good worker's queued replies are the pulls it waits for: every
    // table of the shard per step, twice when steps overlap, or a few
    // large pulls in flight (common/options.h).
    uint64_t values = 0;
    for (const TableLayout& t : server->store_->layouts()) {
      values += (t.owned.end - t.owned.begin) * uint64_t{t.dim} * sizeof(float);
    }
    server->max_queued_reply_bytes_ = std::max<uint64_t>(1ull << 30, 2 * values);
  }
  server->rules_ = server->store_->Rules(job, shard);
  return server;
}

Status ShardServer::OpenState(int64_t restore_clock, BackupServer::State* promoted) {
  bool restoring = false;
  if (!job_.checkpoint.dir.empty()) {
    PS_ASSIGN_OR_RETURN(checkpoints_,
                        CheckpointDir::Open(ShardCheckpointDir(job_.checkpoint.dir, shard_)));
    if (job_.checkpoint.restore && promoted == nullptr) {
      PS_ASSIGN_OR_RETURN(std::vector<int64_t> generations, checkpoints_->Generations());
      restoring = !generations.empty();
    }
  }
  if (promoted != nullptr) {
    // The backup's copy is the shard's state, exactly: every worker's
    // clock is known, no update was lost.
    store_ = std::move(promoted->store);
    clocks_ = promoted->clocks;
    recent_pushes_ = std::move(promoted->recent_pushes);
    started_clock_ = clocks_.min_clock();
    last_checkpoint_clock_ = started_clock_;
    first_pull_to_log_ = true;
    promoted_epoch_ = promoted->epoch;
    for (uint32_t w = 0; w < workers_.size(); ++w) {
      workers_.worker(w).heard_clock = true;
      // Left out of the minimum on the old primary: it left (or was
      // dropped) and is not waited for.
      workers_.worker(w).left = !clocks_.counted(w);
    }
  } else {
    // A store about to be restored skips computing its initial values
    // (measured: 0.4-0.6 s of a 100M-float shard's 3.3 s recovery).
    PS_ASSIGN_OR_RETURN(store_, ShardStore::Create(job_, shard_, /*initialize=*/!restoring));
    if (checkpoints_ != nullptr && job_.checkpoint.restore) {
      PS_RETURN_IF_ERROR(RestoreCheckpoint(restore_clock));
    }
  }
  return Status::Ok();
}

Status ShardServer::OpenSocket(BackupServer::State* promoted) {
  PS_ASSIGN_OR_RETURN(context_, Context::Create(static_cast<int>(job_.server.io_threads)));
  PS_ASSIGN_OR_RETURN(replication_,
                      ReplicationLog::Create(job_, shard_, context_.get(),
                                             /*no_backups=*/promoted != nullptr,
                                             /*self=*/promoted != nullptr ? promoted->slot : 0));
  SocketOptions so;
  // Twice the request limit: requests a bit over it get a clear ERROR reply,
  // absurd ones are cut off by ZeroMQ before they are buffered. ZeroMQ
  // measures a CURVE frame encrypted, a few dozen bytes longer: the same
  // requests get the same answer under either mode.
  so.max_frame_bytes = static_cast<int64_t>(job_.server.max_request_bytes * 2) +
                       (job_.security.mode == SecurityMode::kCurve ? kCurveFrameOverhead : 0);
  // The last replies (a goodbye's, SHUTDOWN_OK) still reach their workers
  // when the shard exits right after sending them; bounded, so a stuck peer
  // cannot hold the exit.
  so.linger_ms = 1000;
  // Under security.mode curve the ZAP handler runs before the socket binds,
  // so no handshake is ever let in unchecked.
  PS_ASSIGN_OR_RETURN(access_, ShardAccess::Create(job_, shard_, context_.get(), &so.curve));
  admission_ = std::make_unique<Admission>(shard_, job_, clocks_, workers_, *access_, agreement_,
                                           started_clock_);
  // A good worker has at most client.max_in_flight requests, each with one
  // reply, per connection (Validate: socket_hwm is more); a reply to a
  // connection past it fails to send, so it is counted and logged instead
  // of vanishing.
  so.send_hwm = static_cast<int>(job_.server.socket_hwm);
  so.recv_hwm = static_cast<int>(job_.server.socket_hwm);
  so.router_mandatory = true;
  // A connection that never finishes its handshake (a socket that sends
  // nothing) holds a descriptor and a place under max_connections: not
  // for long.
  so.handshake_ivl_ms = kHandshakeTimeoutMs;
  PS_ASSIGN_OR_RETURN(max_connections_, MaxConnections(job_, shard_));
  PS_ASSIGN_OR_RETURN(socket_, Socket::Create(context_.get(), SocketType::kRouter, so));
  PS_ASSIGN_OR_RETURN(accept_monitor_,
                      ConnectionMonitor::CreateForAccepts(context_.get(), socket_.get()));
  return Status::Ok();
}

Status ShardServer::BindSocket(const std::string& bind_endpoint, BackupServer::State* promoted) {
  // The job's own address unless the caller names another (--bind, tests).
  std::string endpoint = bind_endpoint;
  const std::string entry = "cluster.servers[" + std::to_string(shard_) + "]";
  const std::string& address = job_.cluster.servers[shard_];
  if (endpoint.empty() && promoted != nullptr) {
    // A promoted backup serves where it kept its copy: its replica's
    // address, which it just gave up as a backup. The workers find it there.
    PS_ASSIGN_OR_RETURN(const HostPort host_port, ReplicaAddress(job_, shard_, promoted->slot));
    PS_ASSIGN_OR_RETURN(endpoint, BindEndpoint(host_port, job_.cluster.bind == BindMode::kAll));
  } else if (endpoint.empty()) {
    PS_ASSIGN_OR_RETURN(const HostPort host_port, ServerAddress(job_, shard_));
    PS_ASSIGN_OR_RETURN(endpoint, BindEndpoint(host_port, job_.cluster.bind == BindMode::kAll));
  }
  Status bound = socket_->Bind(endpoint);
  // A promoted backup binds the port its backup socket just closed, which
  // ZeroMQ's I/O thread may not have released yet.
  const auto bind_until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (promoted != nullptr && bound.code() == StatusCode::kUnavailable &&
         std::chrono::steady_clock::now() < bind_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    bound = socket_->Bind(endpoint);
  }
  if (!bound.ok()) {
    if (bound.code() == StatusCode::kUnavailable && bind_endpoint.empty()) {
      // EADDRINUSE: the port is taken on this host (Unavailable: it may
      // be free again later).
      return UnavailableError(
          InvalidOption(job_.source, entry,
                        Quote(address) + ": shard " + std::to_string(shard_) +
                            " cannot listen there (" + bound.message() + ")",
                        "a port no other program on this host uses: is another ps_server (or "
                        "program) using it? Stop it or change this entry")
              .message());
    }
    return bound.WithContext("shard " + std::to_string(shard_) +
                             ": is another ps_server (or program) using this port? Stop it or "
                             "change " +
                             (bind_endpoint.empty() ? entry : "the bind endpoint"));
  }
  return Status::Ok();
}

Status ShardServer::Run() {
  PS_LOG_INFO("shard {} serving {} tables on {} ({} workers, {}; job fingerprint {})", shard_,
              store_->layouts().size(), endpoint_, job_.cluster.workers,
              bound_ == kUnboundedStaleness ? std::string("asp")
                                            : "staleness " + std::to_string(bound_),
              AgreementFingerprint(agreement_));
  if (!access_->enabled() && job_.cluster.allow_remote) {
    PS_LOG_WARN("shard {}: security.mode none on {}: any program that reaches this port can "
                "read, change and stop the job; on a shared network use security.mode curve "
                "(README, \"Security\")",
                shard_, endpoint_);
  }
  if (replication_->active() && sums_replicated_) {
    PS_LOG_INFO("shard {}: replication.factor {} after aggregation: each clock's sums go to its "
                "{} backups once, and a push is acknowledged once its clock's sums are on them",
                shard_, job_.replication.factor, job_.replication.factor - 1);
  } else if (replication_->active()) {
    PS_LOG_INFO("shard {}: replication.factor {}: every push is acknowledged once its {} "
                "backups have it",
                shard_, job_.replication.factor, job_.replication.factor - 1);
  }
  std::vector<Frame> frames;
  std::vector<bool> readable;
  std::vector<Socket*> sockets;
  while (!stop_requested()) {
    // The backups' sockets as the log has them now (the authority may
    // drop one).
    sockets = {socket_.get(), accept_monitor_->socket()};
    sockets.insert(sockets.end(), replication_->sockets().begin(), replication_->sockets().end());
    if (reload_keys_.exchange(false, std::memory_order_relaxed)) {
      if (Status reloaded = access_->ReloadAllowlist(); !reloaded.ok()) {
        PS_LOG_ERROR("shard {}: the key files were not read again, the old keys stay: {}", shard_,
                     reloaded.ToString());
      }
    }
    FinishCheckpointWrite(/*may_start=*/true);
    auto ready = PollReadable(sockets, Tick(100), &readable);
    if (!ready.ok()) return ready.status().WithContext("shard " + std::to_string(shard_));
    if (readable[1]) DrainAcceptEvents();
    if (!ReceiveReplicaAcks(readable, 2)) break;
    if (replay_due_) ReplayParkedPushes();  // the clock moved in Tick
    // Drain what is queued, but look at the stop flag now and then.
    for (int i = 0; i < 256 && !stop_requested(); ++i) {
      auto got = socket_->TryRecv(&frames);
      if (!got.ok()) return got.status().WithContext("shard " + std::to_string(shard_));
      if (!*got) break;
      Handle(frames);
      if (replay_due_) ReplayParkedPushes();
    }
    FlushDeferred();
  }
  EndReplication();
  JoinCheckpointWriter();  // a generation being written is finished, not torn
  FinishCheckpointWrite(/*may_start=*/false);  // its waiting requests get their answer
  PublishMetrics(/*now=*/true);  // the final values, for a scrape after the end
  PS_LOG_INFO("shard {} stopped: {} pushes, {} pulls, {} errors", shard_, counters_.pushes,
              counters_.pulls, counters_.errors);
  return exit_status_;
}

void ShardServer::Reply(Frame& routing_id, const MessageHeader& header) {
  reply_.clear();
  reply_.push_back(std::move(routing_id));
  reply_.push_back(EncodeHeader(header));
  if (deferring_) {
    Defer({0, std::move(reply_), header});
    reply_.clear();
    return;
  }
  SendReply(header);
}

void ShardServer::Defer(DeferredReply reply) {
  if (deferring_) {
    deferred_.push_back(std::move(reply));
    ++deferred_unassigned_;
    return;
  }
  reply.seq = replication_->last_seq();
  deferred_.push_back(std::move(reply));
}

void ShardServer::HoldForSums(int64_t clock, Frame& routing_id, const MessageHeader& header) {
  DeferredReply held;
  held.frames.push_back(std::move(routing_id));
  held.frames.push_back(EncodeHeader(header));
  held.header = header;
  held_for_sums_[clock].push_back(std::move(held));
}

int64_t ShardServer::SummedInto(uint32_t worker, uint64_t session, uint64_t request_id) const {
  for (const auto& [clock, ids] : summed_pushes_) {
    for (size_t k = 0; k < ids.size(); k += 3) {
      if (ids[k] == worker && ids[k + 1] == session && ids[k + 2] == request_id) return clock;
    }
  }
  return -1;
}

RecentPushes ShardServer::ReplicatedPushes() const {
  RecentPushes replicated = recent_pushes_;
  for (const auto& [clock, ids] : summed_pushes_) {
    for (size_t k = 0; k < ids.size(); k += 3) {
      replicated.Forget(static_cast<uint32_t>(ids[k]), ids[k + 1], ids[k + 2]);
    }
  }
  return replicated;
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
                  shard_, epoch(), deferred_.size());
    }
    while (!deferred_.empty() && deferred_.size() > deferred_unassigned_) {
      DeferredReply d = std::move(deferred_.front());
      deferred_.pop_front();
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
  const uint64_t committed = replication_->committed();
  while (!deferred_.empty() && deferred_.size() > deferred_unassigned_ &&
         deferred_.front().seq <= committed) {
    reply_ = std::move(deferred_.front().frames);
    const MessageHeader header = std::move(deferred_.front().header);
    deferred_.pop_front();
    SendReply(header);
  }
}

bool ShardServer::ReceiveReplicaAcks(const std::vector<bool>& readable, size_t first) {
  for (size_t b = 0; b < replication_->sockets().size(); ++b) {
    if (!readable[first + b]) continue;
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
  replication_->End();
  // The last replies (goodbyes) wait for the backups, a bounded time.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::vector<bool> readable;
  while (!deferred_.empty() && std::chrono::steady_clock::now() < until) {
    auto ready = PollReadable(replication_->sockets(), 100, &readable);
    if (!ready.ok() || !ReceiveReplicaAcks(readable, 0)) break;
    FlushDeferred();
  }
  if (!deferred_.empty()) {
    PS_LOG_WARN("shard {}: {} replies not sent: the backups did not acknowledge their entries "
                "in time ({})",
                shard_, deferred_.size(), replication_->Describe());
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

void ShardServer::DrainAcceptEvents() {
  // Connections come and go at the rate of TCP handshakes: a bounded
  // number of their events per round.
  for (int i = 0; i < 1024; ++i) {
    auto event = accept_monitor_->TryNext();
    if (!event.ok() || !event->has_value()) return;
    if (**event == ConnectionEvent::kHandshakeFailed) {
      ++counters_.failed_handshakes;
      uint64_t skipped = 0;
      if (!handshake_log_.ShouldLog(&skipped)) continue;
      PS_LOG_WARN("shard {}: refused a connection whose handshake failed: a client without "
                  "CurveZMQ against this {} server, or one with another server key; it gets "
                  "nothing (ZeroMQ names no address for this){}",
                  shard_, access_->enabled() ? "CurveZMQ" : "plain",
                  HeldBack(skipped));
      continue;
    }
    const int fd = accept_monitor_->last_value();
    if (**event == ConnectionEvent::kClosed) {
      // One this shard closed was never counted open.
      if (closing_.erase(fd) == 0 && open_connections_ > 0) --open_connections_;
      continue;
    }
    if (**event != ConnectionEvent::kAccepted) continue;
    if (open_connections_ < max_connections_) {
      ++open_connections_;
      continue;
    }
    // Past the limit: closed at once, so the descriptors never run out.
    ConnectionMonitor::CloseAccepted(fd);
    closing_.insert(fd);
    ++counters_.refused_connections;
    uint64_t skipped = 0;
    if (!connection_log_.ShouldLog(&skipped)) continue;
    PS_LOG_ERROR("shard {}: refused a connection: {} are open, the most it keeps "
                 "(server.max_connections {}{}); it is closed, and so is each one more until some "
                 "close (a connection that does not finish its handshake closes after {} s){}",
                 shard_, open_connections_, max_connections_,
                 job_.server.max_connections == 0
                     ? ", from the open-file limit " + std::to_string(CurrentOpenFileLimit().soft)
                     : std::string(),
                 kHandshakeTimeoutMs / 1000, HeldBack(skipped));
  }
}

StatusOr<uint32_t> ShardServer::MaxConnections(const JobOptions& job, uint32_t shard) {
  const OpenFileLimit limit = CurrentOpenFileLimit();
  const uint64_t usable =
      std::min<uint64_t>(limit.soft, uint64_t{1} << 20) - std::min<uint64_t>(limit.soft, kReservedFiles);
  const std::string where = "shard " + std::to_string(shard) + ": the open-file limit (RLIMIT_NOFILE) is " +
                            std::to_string(limit.soft) + " (hard " + std::to_string(limit.hard) +
                            "), and a shard keeps " + std::to_string(kReservedFiles) +
                            " descriptors for its checkpoints and its own sockets";
  if (job.server.max_connections > usable) {
    return InvalidArgumentError(where + ": server.max_connections " +
                                std::to_string(job.server.max_connections) +
                                " would run out of them; raise `ulimit -n` (the hard limit) or "
                                "lower server.max_connections");
  }
  if (job.server.max_connections > 0) return job.server.max_connections;
  if (usable < 16) {
    return ResourceExhaustedError(where + ", which leaves " + std::to_string(usable) +
                                  " connections (at least 16 needed): raise `ulimit -n`");
  }
  return static_cast<uint32_t>(std::min<uint64_t>(usable, UINT32_MAX));
}

void ShardServer::Handle(std::vector<Frame>& frames) {
  // Counted and timed by op only while metrics are served.
  if (metrics_endpoint_ == nullptr) {
    HandleRequest(frames);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const uint64_t errors = counters_.errors;
  const Op op = HandleRequest(frames);
  OpMetrics& m = op_metrics_[static_cast<size_t>(op) < op_metrics_.size()
                                 ? static_cast<size_t>(op) : 0];
  ++m.requests;
  m.errors += counters_.errors - errors;
  m.seconds.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void ShardServer::LogRequestRefusal(const Frame& first_frame, const char* kind,
                                    const std::string& why) {
  std::string peer = first_frame.Property("User-Id");
  if (peer.empty()) peer = first_frame.Property("Peer-Address");
  if (peer.empty()) peer = "an unknown peer";
  uint64_t held_back = 0;
  if (!request_log_.ShouldLog(std::string(kind) + " " + peer, std::chrono::steady_clock::now(),
                              &held_back)) {
    ++counters_.refusals_not_logged;
    return;
  }
  PS_LOG_WARN("shard {}: {} request from {}: {}{}", shard_, kind, peer, why, HeldBack(held_back));
}

Op ShardServer::HandleRequest(std::vector<Frame>& frames) {
  for (const Frame& f : frames) counters_.bytes_in += f.size();
  if (frames.size() < 2) return Op::kUnknown;  // a ROUTER always delivers [routing id, ...]
  Frame& routing_id = frames[0];
  std::span<Frame> body(frames.data() + 1, frames.size() - 1);
  Status s = DecodeRequest(body, rules_, &request_);
  if (!s.ok()) {
    ++counters_.errors;
    LogRequestRefusal(body[0], "rejected", s.ToString());
    Reply(routing_id, MakeErrorHeader(EchoHeader(body), shard_, s));
    return Op::kUnknown;
  }
  const MessageHeader& req = request_.header;
  // Kept aside: a parked pull takes request_ (and req with it) away.
  const Op op = req.op;
  Admission::Verdict verdict = admission_->Check(body[0], req, clock_->Now(), Fenced(), failed_);
  switch (verdict.action) {
    case Admission::Verdict::Action::kRefuse:
      Refuse(routing_id, body[0], req, verdict);
      return op;
    case Admission::Verdict::Action::kAnswerPrimary: {
      // This replica serves, at epoch(), unless it is fenced.
      MessageHeader reply = ReplyHeader(req);
      reply.flags = Fenced() ? 0 : kFlagServing;
      Reply(routing_id, reply);
      return op;
    }
    case Admission::Verdict::Action::kServeAndTouch:
      Touch(req.worker);
      break;
    case Admission::Verdict::Action::kServe:
      break;
  }
  DispatchHeldForBackups(frames, op);
  return op;
}

void ShardServer::Refuse(Frame& routing_id, const Frame& first_frame, const MessageHeader& req,
                         const Admission::Verdict& verdict) {
  ++counters_.errors;
  if (verdict.refusal == Admission::Refusal::kClock) ++counters_.refused_clocks;
  if (verdict.refusal == Admission::Refusal::kFenced) {
    ++counters_.fenced_refusals;
    Reply(routing_id, FencedError(req));
    return;
  }
  if (verdict.log) LogRequestRefusal(first_frame, "refused", verdict.status.message());
  Reply(routing_id, MakeErrorHeader(req, shard_, verdict.status));
}

void ShardServer::DispatchHeldForBackups(std::vector<Frame>& frames, Op op) {
  // With backups, what changed state is answered once they have it.
  deferring_ = replication_->active() && Traits(op).changes_state;
  Dispatch(frames);
  deferring_ = false;
  for (auto it = deferred_.rbegin(); deferred_unassigned_ > 0; ++it, --deferred_unassigned_) {
    it->seq = replication_->last_seq();
  }
}

void ShardServer::Dispatch(std::vector<Frame>& frames) {
  Frame& routing_id = frames[0];
  const MessageHeader& req = request_.header;
  MessageHeader reply = ReplyHeader(req);
  switch (req.op) {
    case Op::kPush:
      HandlePush(frames, reply);
      return;
    case Op::kPull:
      if (!PullReady(req)) {
        // Too far ahead of the slowest worker: wait for its CLOCKs.
        ParkPull(frames);
        return;
      }
      ServePull(routing_id, request_);
      return;
    case Op::kClock: {
      ++counters_.clocks;
      HeardClock(req.worker, req.clock);
      const bool advanced = clocks_.Finish(req.worker, req.clock);
      replication_->Finish(req.worker, req.clock);
      reply.min_clock = clocks_.min_clock();
      Reply(routing_id, reply);
      if (advanced) MinClockAdvanced();
      return;
    }
    case Op::kHeartbeat:
      HandleHeartbeat(routing_id, reply);
      return;
    case Op::kHello:
      // The rendezvous: the worker resumes at the clock this shard holds
      // for it (0 in a new job, the minimum for a dropped worker).
      reply.clock = clocks_.clock(req.worker);
      reply.min_clock = clocks_.min_clock();
      Reply(routing_id, reply);
      return;
    case Op::kStats:
      reply.text = StatsReport();
      Reply(routing_id, reply);
      return;
    case Op::kCheckpoint:
      HandleCheckpoint(routing_id, req);
      return;
    case Op::kMembership:
      HandleMembership(routing_id, reply);
      return;
    case Op::kShutdown:
      PS_LOG_INFO("shard {}: SHUTDOWN requested by {}", shard_,
                  req.worker == kControlWorker ? std::string("a control client")
                                               : "worker " + std::to_string(req.worker));
      Stop();  // before the ack: whoever sees SHUTDOWN_OK sees the shard stopping
      Reply(routing_id, reply);
      return;
    default:
      return;  // DecodeRequest admits no other op
  }
}

void ShardServer::HandleHeartbeat(Frame& routing_id, MessageHeader& reply) {
  const MessageHeader& req = request_.header;
  if (req.worker == kEvaluatorWorker) {
    // A beat, or its goodbye after its last evaluation.
    if ((req.flags & kFlagLeaving) != 0 && !workers_.evaluator().left) {
      workers_.evaluator().left = true;
      PS_LOG_INFO("shard {}: the evaluator left the job", shard_);
      StopWhenWorkersGone();
    }
    reply.min_clock = clocks_.min_clock();
    Reply(routing_id, reply);
    return;
  }
  bool advanced = false;
  if (req.flags & kFlagResume) {
    // The worker's connection came back: it is at clock req.clock.
    ++counters_.resumes;
    HeardClock(req.worker, req.clock);
    if (req.clock > 0) {
      advanced = clocks_.Finish(req.worker, req.clock - 1);
      replication_->Finish(req.worker, req.clock - 1);
    }
  }
  WorkerState& worker = workers_.worker(req.worker);
  if (req.flags & kFlagLeaving) {
    worker.left = true;
    advanced = clocks_.Exclude(req.worker);
    replication_->Exclude(req.worker);
    PS_LOG_INFO("shard {}: worker {} left the job at clock {}", shard_, req.worker,
                clocks_.clock(req.worker));
    StopWhenWorkersGone();
  }
  worker.cache_hits = req.cache_hits;
  worker.cache_misses = req.cache_misses;
  reply.clock = clocks_.clock(req.worker);  // where a rejoining worker resumes
  reply.min_clock = clocks_.min_clock();
  Reply(routing_id, reply);
  if (advanced) MinClockAdvanced();
}

void ShardServer::HandleMembership(Frame& routing_id, const MessageHeader& reply) {
  // The authority (ps_launch) says a backup is gone (stop waiting for it;
  // what it held back is answered as the others acknowledge) or joins
  // (send it a copy, then the log).
  const MessageHeader& req = request_.header;
  const uint32_t replica = req.replica;
  const int64_t epoch = req.epoch;
  Status changed =
      req.flags == kMembershipDropBackup ? replication_->Drop(replica, epoch)
      : req.flags == kMembershipAddBackup
          ? replication_->Join(replica, epoch, store_.get(), clocks_,
                               sums_replicated_ ? ReplicatedPushes() : recent_pushes_,
                               /*copy_sums=*/!sums_replicated_)
          : FailedPreconditionError("shard " + std::to_string(shard_) +
                                    " is the primary already; only a backup is promoted");
  if (!changed.ok()) {
    ++counters_.errors;
    Reply(routing_id, MakeErrorHeader(req, shard_, changed));
    return;
  }
  PS_LOG_WARN("shard {}: epoch {}: backup {} {}; {} backups ({})", shard_, replication_->epoch(),
              replica, req.flags == kMembershipAddBackup ? "joins" : "is gone",
              replication_->sockets().size(), replication_->Describe());
  Reply(routing_id, reply);
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

void ShardServer::ServePull(Frame& routing_id, const Request& pull, Clock::Duration waited) {
  const MessageHeader& req = pull.header;
  if (waited > Clock::Duration::zero() && req.worker != kEvaluatorWorker) {
    staleness_wait_seconds_.Observe(std::chrono::duration<double>(waited).count());
  }
  // All connections together: as much as one per worker and the admin.
  const uint64_t total_bound = (uint64_t{job_.cluster.workers} + 1) * max_queued_reply_bytes_;
  if (queued_replies_.OverBound(routing_id.view(), max_queued_reply_bytes_, total_bound)) {
    // The client does not read its replies (or reads far slower than it
    // asks): serving more would keep more of the store's blocks alive.
    ++counters_.errors;
    ++counters_.pulls_refused_queued_bytes;
    Status refused = ResourceExhaustedError(
        "shard " + std::to_string(shard_) + ": PULL request " + std::to_string(req.request_id) +
        " from " + SenderName(req.worker) + " refused: " +
        std::to_string(queued_replies_.Queued(routing_id.view())) +
        " bytes of this connection's earlier pull replies are not read yet "
        "(server.max_queued_reply_bytes " + std::to_string(max_queued_reply_bytes_) +
        " per connection, " + std::to_string(total_bound) + " for all connections, of which " +
        std::to_string(queued_replies_.total()) +
        " are held); read the replies before pulling more, or raise "
        "server.max_queued_reply_bytes");
    uint64_t skipped = 0;
    if (refused_log_.ShouldLog(&skipped)) {
      PS_LOG_WARN("{}{}", refused.message(), HeldBack(skipped));
    }
    Reply(routing_id, MakeErrorHeader(req, shard_, refused));
    return;
  }
  ++counters_.pulls;
  MessageHeader reply = ReplyHeader(req);
  reply.waited_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(waited).count());
  reply.dtype = req.dtype;  // DecodeRequest allowed it for the table
  reply_.clear();
  reply_.push_back(std::move(routing_id));
  reply_.push_back(EncodeHeader(reply));
  uint64_t held = 0;
  Status read = store_->ReadRows(pull, &reply_, &held);
  if (read.ok() && reply_.size() > 2) {
    read = queued_replies_.Charge(reply_[0].view(), held,
                                  std::span<Frame>(reply_.data() + 2, reply_.size() - 2));
  }
  if (!read.ok()) {
    ++counters_.errors;
    Frame id = std::move(reply_[0]);
    Reply(id, MakeErrorHeader(req, shard_, read));
    return;
  }
  SendReply(reply);
  if (first_pull_to_log_) {
    // The time of this line ends a fail-over (benchmarks/kill_restart_bench.py).
    first_pull_to_log_ = false;
    PS_LOG_INFO("shard {}: first pull served as the primary of epoch {} (worker {}, clock {})",
                shard_, promoted_epoch_, req.worker, req.clock);
  }
}

void ShardServer::ParkPull(std::vector<Frame>& frames) {
  const MessageHeader& req = request_.header;
  const uint32_t parked = waiting_.connection_count(frames[0].view());
  const uint32_t limit = job_.server.max_waiting_pulls_per_worker;
  const int64_t ceiling = admission_->LeadCeiling();
  Status refused;
  if (req.worker != kEvaluatorWorker && req.clock > ceiling) {
    // No worker gets there (LeadCeiling).
    ++counters_.refused_clocks;
    refused = FailedPreconditionError(
        "shard " + std::to_string(shard_) + ": PULL request " + std::to_string(req.request_id) +
        " from " + SenderName(req.worker) + " at clock " + std::to_string(req.clock) +
        " refused: the job is at clock " + std::to_string(admission_->JobClockBase()) +
        " and no worker's pull waits for a clock above " + std::to_string(ceiling) +
        " (the staleness bound + 1 + client.max_in_flight above it); nothing changed. Is this "
        "request really from this job's worker?");
  } else if (parked >= limit) {
    ++counters_.pulls_refused_waiting;
    refused = ResourceExhaustedError(
        "shard " + std::to_string(shard_) + ": PULL request " + std::to_string(req.request_id) +
        " from " + SenderName(req.worker) + " at clock " + std::to_string(req.clock) +
        " refused: its connection has " + std::to_string(parked) +
        " pulls waiting for slower workers already (server.max_waiting_pulls_per_worker " +
        std::to_string(limit) + "); wait for their replies before pulling more");
  }
  if (!refused.ok()) {
    ++counters_.errors;
    LogRequestRefusal(frames[1], "refused", refused.message());
    Reply(frames[0], MakeErrorHeader(req, shard_, refused));
    return;
  }
  const bool evaluator = req.worker == kEvaluatorWorker;
  if (!evaluator) {
    ++counters_.pulls_waited;
    counters_.max_blocked_lead =
        std::max(counters_.max_blocked_lead, req.clock - clocks_.min_clock());
  }
  const Clock::TimePoint now = clock_->Now();
  // The request's wait, never more than the server's (0 asks for that).
  const uint32_t most = job_.server.max_pull_wait_ms;
  const uint32_t wait_ms = req.max_wait_ms == 0 ? most : std::min(req.max_wait_ms, most);
  const Clock::TimePoint deadline = now + std::chrono::milliseconds(wait_ms);
  // Moving the vector keeps its frames where they are, so the decoded
  // request's spans stay valid; request_ gets fresh scratch buffers.
  waiting_.AddPull({std::move(frames), std::move(request_), now, deadline}, evaluator);
  request_ = Request();
}

void ShardServer::MinClockAdvanced() {
  // Pushes that waited for this clock join their sums once the request
  // being handled is done (Run): request_ is that request's until then.
  if (waiting_.pushes() > 0) replay_due_ = true;
  if (clocks_.backups()) {
    // consistency.backup_workers: each completed clock's mean over its
    // members (the first gradients to arrive), with the backups.
    for (const ClockTable::Completed& done : clocks_.completed()) {
      store_->ApplyAccumulated(done.clock + 1, 1.0f / static_cast<float>(done.members));
      replication_->ApplySums(done.clock + 1, done.members);
      PS_LOG_DEBUG("shard {}: clock {} applied as the mean of {} of {} workers' gradients",
                   shard_, done.clock, done.members, clocks_.num_workers());
    }
  } else if (job_.consistency.aggregate) {
    // The mean over the workers that finished the clock: those it waited
    // for, and any that left (or were dropped) after pushing into it.
    const int64_t below = clocks_.min_clock();
    const uint32_t workers = std::max<uint32_t>(1, clocks_.num_at_least(below));
    if (sums_replicated_) {
      // The sums go to the backups before they are applied here; the
      // pushes in them are answered once the backups have them.
      std::vector<uint64_t> ids;
      while (!summed_pushes_.empty() && summed_pushes_.begin()->first < below) {
        ids.insert(ids.end(), summed_pushes_.begin()->second.begin(),
                   summed_pushes_.begin()->second.end());
        summed_pushes_.erase(summed_pushes_.begin());
      }
      replication_->ApplySums(below, workers, store_.get(), ids);
      while (!held_for_sums_.empty() && held_for_sums_.begin()->first < below) {
        for (DeferredReply& held : held_for_sums_.begin()->second) Defer(std::move(held));
        held_for_sums_.erase(held_for_sums_.begin());
      }
    }
    store_->ApplyAccumulated(below, 1.0f / static_cast<float>(workers));
    if (!sums_replicated_) replication_->ApplySums(below, workers);
  }
  if (job_.consistency.aggregate) {
    ReportNonFinite(job_.server.on_non_finite_result == NonFiniteResultPolicy::kFlag
                        ? "applied in an aggregated update (server.on_non_finite_result: flag)"
                        : "left out of an aggregated update: those rows keep their values "
                          "(server.on_non_finite_result: refuse)");
  }
  // Every update of the clocks below the minimum is in the store now.
  MaybeCheckpoint();
  ReleaseWaitingPulls();
}

void ShardServer::ReleaseWaitingPulls() {
  // The pulls of the lowest clocks, as far as the minimum allows, answered
  // in arrival order; the evaluator's once the minimum reaches their clock
  // (or at once, for the final model, when every worker is gone).
  const bool final_model = workers_.AllGone();
  const Clock::TimePoint now = clock_->Now();
  for (WaitingRequests::Waiting& w : waiting_.TakeReadyPulls(
           [&](int64_t clock) { return clocks_.PullReady(clock, bound_); },
           [&](int64_t clock) { return final_model || clock <= clocks_.min_clock(); })) {
    ServePull(w.frames[0], w.request, now - w.since);
  }
}

int ShardServer::Tick(int cap) {
  using std::chrono::milliseconds;
  const Clock::TimePoint now = clock_->Now();
  ExpireWaitingPulls(now);
  CheckLiveness(now);
  if (const double secs = std::chrono::duration<double>(now - rate_sampled_).count(); secs >= 1.0) {
    pushes_per_s_ = static_cast<double>(counters_.pushes - rate_pushes_) / secs;
    pulls_per_s_ = static_cast<double>(counters_.pulls - rate_pulls_) / secs;
    rate_pushes_ = counters_.pushes;
    rate_pulls_ = counters_.pulls;
    rate_sampled_ = now;
  }
  queued_replies_.Sweep();
  PublishMetrics(/*now=*/false);
  auto next = now + milliseconds(cap);
  if (const auto deadline = waiting_.next_deadline()) next = std::min(next, *deadline);
  const auto ms = std::chrono::duration_cast<milliseconds>(next - now).count() + 1;
  rounds_.fetch_add(1, std::memory_order_release);
  return static_cast<int>(std::clamp<int64_t>(ms, 0, cap));
}

void ShardServer::ExpireWaitingPulls(Clock::TimePoint now) {
  using std::chrono::milliseconds;
  for (WaitingRequests::Waiting& w : waiting_.TakeExpiredPulls(now)) {
    const MessageHeader* h = &w.request.header;
    const uint32_t slowest = clocks_.slowest_worker();
    const auto waited = std::chrono::duration_cast<milliseconds>(now - w.since).count();
    if (h->worker == kEvaluatorWorker) {
      // Nothing is wrong: the workers have not reached the clock of the
      // next evaluation yet, and the evaluator asks again.
      Reply(w.frames[0],
            MakeErrorHeader(*h, shard_,
                            DeadlineExceededError(
                                "the evaluator's PULL at clock " + std::to_string(h->clock) +
                                " waited " + std::to_string(waited) + " ms on shard " +
                                std::to_string(shard_) + "; the slowest worker, " +
                                std::to_string(slowest) + ", is at clock " +
                                std::to_string(clocks_.clock(slowest)))));
      continue;
    }
    Status late = DeadlineExceededError(
        "PULL request " + std::to_string(h->request_id) + " from worker " +
        std::to_string(h->worker) + " at clock " + std::to_string(h->clock) + " waited " +
        std::to_string(waited) + " ms on shard " + std::to_string(shard_) +
        " for the slowest worker: worker " + std::to_string(slowest) + " is at clock " +
        std::to_string(clocks_.clock(slowest)) + ", and this pull needs every worker at clock >= " +
        std::to_string(h->clock - bound_) + " (staleness " + std::to_string(bound_) +
        "); is worker " + std::to_string(slowest) + " alive and still training?");
    ++counters_.errors;
    uint64_t skipped = 0;
    if (expired_log_.ShouldLog(&skipped)) {
      PS_LOG_WARN("shard {}: {}{}", shard_, late.message(),
                  HeldBack(skipped));
    }
    Reply(w.frames[0], MakeErrorHeader(*h, shard_, late));
  }
}

void ShardServer::CheckLiveness(Clock::TimePoint now) {
  const LivenessOptions& liveness = job_.liveness;
  if (liveness.heartbeat_ms == 0) return;
  const auto timeout = std::chrono::milliseconds(liveness.timeout_ms);
  if (job_.cluster.evaluator && workers_.evaluator().SilentPast(now, timeout)) {
    // Training never waits for the evaluator: its death costs only the
    // evaluations it did not make.
    workers_.evaluator().dead = true;
    PS_LOG_WARN("shard {}: the evaluator is dead: {}; training goes on without it", shard_,
                workers_.evaluator().heard
                    ? "nothing heard from it for " +
                          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             now - workers_.evaluator().last_seen)
                                             .count()) +
                          " ms (liveness.timeout_ms " + std::to_string(liveness.timeout_ms) + ")"
                    : std::string("it never connected since the shard started (is ps_worker "
                                  "--evaluator running?)"));
    StopWhenWorkersGone();
  }
  for (uint32_t w = 0; w < workers_.size(); ++w) {
    WorkerState& worker = workers_.worker(w);
    if (!worker.SilentPast(now, timeout)) continue;
    worker.dead = true;
    const auto silent =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - worker.last_seen).count();
    const auto up =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - started_).count();
    const std::string who =
        "worker " + std::to_string(w) + " is dead: " +
        (worker.heard ? "nothing heard from it for " + std::to_string(silent) +
                            " ms (liveness.timeout_ms " + std::to_string(liveness.timeout_ms) + ")"
                      : "it never connected in the " + std::to_string(up) + " ms since shard " +
                            std::to_string(shard_) + " started (rendezvous.timeout_ms " +
                            std::to_string(job_.rendezvous.timeout_ms) +
                            " + liveness.timeout_ms " + std::to_string(liveness.timeout_ms) +
                            "): is it running, and can it reach " + job_.cluster.servers[shard_] +
                            "?") +
        ", at clock " + std::to_string(clocks_.clock(w));
    if (liveness.on_dead_worker == DeadWorkerPolicy::kDrop) {
      PS_LOG_WARN("shard {}: {}; the job goes on without it (liveness.on_dead_worker: drop)",
                  shard_, who);
      const bool advanced = clocks_.Exclude(w);
      replication_->Exclude(w);
      if (advanced) MinClockAdvanced();
      StopWhenWorkersGone();
      continue;
    }
    PS_LOG_ERROR("shard {}: {}; the job fails (liveness.on_dead_worker: fail)", shard_, who);
    if (failed_.ok()) {
      failed_ = AbortedError("shard " + std::to_string(shard_) + ": " + who +
                             "; the job stops (liveness.on_dead_worker: fail). Find out why it "
                             "died, then restart the job, or set on_dead_worker: drop to go on "
                             "without it");
      FailWaitingPulls(failed_);
    }
    StopWhenWorkersGone();
  }
}

void ShardServer::Touch(uint32_t worker) {
  WorkerState& w = workers_.worker(worker);
  w.last_seen = clock_->Now();
  w.heard = true;
  if (!w.dead && !w.left) return;
  if (w.dead && !failed_.ok()) return;  // the job has failed for good
  const bool was_dead = w.dead;
  w.dead = false;
  w.left = false;
  clocks_.Include(worker);
  replication_->Include(worker);
  PS_LOG_INFO("shard {}: worker {} {} at clock {}", shard_, worker,
              was_dead ? "is back and rejoins" : "rejoins", clocks_.clock(worker));
}

void ShardServer::WorkerLeft(uint32_t worker) {
  workers_.worker(worker).left = true;
  clocks_.Exclude(worker);
  replication_->Exclude(worker);
  PS_LOG_INFO("shard {}: worker {} already left the job; it is not waited for", shard_, worker);
  StopWhenWorkersGone();
}

void ShardServer::StopWhenWorkersGone() {
  if (!job_.server.exit_when_workers_leave || !workers_.AllGone()) return;
  const std::string dropped = workers_.Ranks([](const WorkerState& w) { return w.dead; }, ", ");
  if (job_.cluster.evaluator && !workers_.evaluator().left && !workers_.evaluator().dead) {
    // Its last evaluation reads the final model: the clocks it waits for
    // will not come (PullReady).
    ReleaseWaitingPulls();
    if (!waiting_for_evaluator_logged_) {
      waiting_for_evaluator_logged_ = true;
      PS_LOG_INFO("shard {}: every worker has left the job; serving the evaluator until it "
                  "leaves (or is silent for liveness.timeout_ms)", shard_);
    }
    return;
  }
  PS_LOG_INFO(
      "shard {}: every worker has left the job{}{}; the shard exits "
      "(server.exit_when_workers_leave: false keeps it serving)",
      shard_, dropped.empty() ? "" : " (dead: " + dropped + ")",
      !job_.cluster.evaluator     ? ""
      : workers_.evaluator().dead ? ", and the evaluator is dead"
                                  : ", and so has the evaluator");
  // Under policy fail a dead worker failed the job: the exit says so.
  exit_status_ = failed_;
  Stop();
}

void ShardServer::HeardClock(uint32_t worker, int64_t clock) {
  if (workers_.worker(worker).heard_clock) return;
  workers_.worker(worker).heard_clock = true;
  if (clock <= started_clock_) return;
  const int64_t lost = clock - started_clock_;
  lost_clocks_ = std::max(lost_clocks_, lost);
  PS_LOG_WARN("shard {}: worker {} is at clock {} and this shard started at clock {}{}: the "
              "worker's updates of clocks {}..{} ({} clock{}) to this shard are lost{}",
              shard_, worker, clock, started_clock_,
              started_clock_ == 0 ? " with its initial values" : "", started_clock_, clock - 1,
              lost, lost == 1 ? "" : "s",
              started_clock_ == 0
                  ? " if this shard ran before (it was started again without a checkpoint); "
                    "a shard of a new job expects no worker ahead of clock 0: is this resume "
                    "really from this job's worker?"
                  : "");
}

void ShardServer::FailWaitingPulls(const Status& status) {
  for (WaitingRequests::Waiting& w : waiting_.TakeAllPulls()) {
    ++counters_.errors;
    Reply(w.frames[0], MakeErrorHeader(w.request.header, shard_, status));
  }
  // failed_ is set: the waiting pushes are refused with it (no request is
  // dispatched, so this may run inside another's handling).
  if (waiting_.pushes() > 0 && !failed_.ok()) ReplayParkedPushes();
}

std::string ShardServer::StatsReport() const {
  std::ostringstream os;
  const Clock::TimePoint now = clock_->Now();
  const double up = std::chrono::duration<double>(now - started_).count();
  os << "shard " << shard_ << " endpoint " << endpoint_ << " uptime_s " << up << "\n";
  os << "pushes " << counters_.pushes << " pulls " << counters_.pulls << " errors "
     << counters_.errors << " bytes_in " << counters_.bytes_in << " bytes_out "
     << counters_.bytes_out << " copy_on_write " << store_->copy_on_write_count() << "\n";
  os << "consistency "
     << (bound_ == kUnboundedStaleness ? std::string("asp") : "staleness " + std::to_string(bound_))
     << " min_clock " << clocks_.min_clock() << " slowest_worker " << clocks_.slowest_worker()
     << " waiting_pulls " << waiting_.pulls() << " pulls_waited " << counters_.pulls_waited
     << " max_blocked_lead " << counters_.max_blocked_lead << "\n";
  os << "worker_clocks";
  for (uint32_t w = 0; w < clocks_.num_workers(); ++w) os << " " << clocks_.clock(w);
  os << "\n";
  os << "worker_targets";
  for (const WorkerState& w : workers_.workers()) os << " " << w.target_clock;
  os << "\n";
  os << "worker_silent_ms";
  for (const WorkerState& w : workers_.workers()) {
    os << " " << std::chrono::duration_cast<std::chrono::milliseconds>(now - w.last_seen).count();
  }
  os << "\n";
  if (clocks_.backups()) {
    os << "backup_workers " << job_.consistency.backup_workers << " quorum " << clocks_.quorum()
       << " late_pushes " << counters_.late_pushes << "\n";
    os << "worker_late_pushes";
    for (const WorkerState& w : workers_.workers()) os << " " << w.late_pushes;
    os << "\n";
  }
  os << "pushes_per_s " << pushes_per_s_ << " pulls_per_s " << pulls_per_s_ << "\n";
  os << "recovery started_clock " << started_clock_ << " lost_clocks " << lost_clocks_
     << " repeated_pushes " << counters_.repeated_pushes << " resumes " << counters_.resumes
     << "\n";
  os << "refused refused_clocks " << counters_.refused_clocks << " refused_results "
     << counters_.refused_results << " max_resume_clocks " << admission_->resume_window()
     << " refusals_not_logged " << counters_.refusals_not_logged << " refused_sum_clocks "
     << counters_.refused_sum_clocks << "\n";
  os << "sums clocks " << store_->sum_clocks() << " bytes " << store_->sum_bytes()
     << " parked_pushes " << waiting_.pushes() << " parked_push_bytes " << waiting_.push_bytes()
     << "\n";
  os << "limits queued_reply_bytes " << queued_replies_.total() << " max_connection_bytes "
     << queued_replies_.max_per_connection() << " connections_queued "
     << queued_replies_.connections() << " max_queued_reply_bytes " << max_queued_reply_bytes_
     << " pulls_refused_queued_bytes " << counters_.pulls_refused_queued_bytes
     << " pulls_refused_waiting " << counters_.pulls_refused_waiting << " replies_dropped "
     << counters_.replies_dropped << " connections_open " << open_connections_
     << " connections_refused " << counters_.refused_connections << " max_connections "
     << max_connections_ << "\n";
  if (checkpoints_ != nullptr) {
    // Read as it is by ps_ctl checkpoint and recovery_bench ("last_clock N writing 0").
    os << "checkpoint dir " << checkpoints_->path() << " last_clock " << last_checkpoint_clock_
       << " writing " << (checkpoint_writing_.load(std::memory_order_acquire) ? 1 : 0) << "\n";
    os << "checkpoints started " << counters_.checkpoints_started << " requests_waiting "
       << checkpoint_waiters_.size() << "\n";
  }
  os << "cache_hit_rate";
  for (uint32_t w = 0; w < workers_.size(); ++w) {
    const uint64_t hits = workers_.worker(w).cache_hits, misses = workers_.worker(w).cache_misses;
    os << " " << w << ":";
    if (hits + misses == 0) {
      os << "-";
    } else {
      os << static_cast<double>(hits) / static_cast<double>(hits + misses);
    }
  }
  os << "\n";
  for (const auto& [name, dead] : {std::pair{"dead_workers", true}, {"left_workers", false}}) {
    const std::string ranks =
        workers_.Ranks([dead](const WorkerState& w) { return dead ? w.dead : w.left; });
    os << name << (ranks.empty() ? "" : " ") << ranks << "\n";
  }
  if (job_.cluster.evaluator) {
    os << "evaluator " << workers_.EvaluatorState() << " silent_ms "
       << std::chrono::duration_cast<std::chrono::milliseconds>(now -
                                                                workers_.evaluator().last_seen)
              .count()
       << "\n";
  }
  if (!failed_.ok()) os << "failed " << failed_.message() << "\n";
  if (replication_->active()) {
    // The backups show the same lines: equal checksums, equal copies.
    os << replication_->Describe() << "\n" << ChecksumLines(*store_);
  }
  if (job_.replication.factor > 1) {
    // Whether it accepts writes now (a split-brain test reads every
    // replica's line side by side).
    os << "primary epoch " << epoch() << " accepting "
       << (Fenced() ? 0 : 1) << " fenced_refusals "
       << counters_.fenced_refusals << "\n";
  }
  {
    // For ps_ctl status: the process's resident memory (VmRSS of
    // /proc/self/status, 0 where there is none) and what the store holds
    // for its owned rows, values and optimizer state arrays at 4 bytes a
    // float. Not counted there: per-clock sums under aggregation, blocks
    // still shared with replies (`limits queued_reply_bytes`), replication.
    unsigned long long rss_kib = 0;
    if (std::FILE* f = std::fopen("/proc/self/status", "re")) {
      char line[128];
      while (std::fgets(line, sizeof(line), f) != nullptr &&
             std::sscanf(line, "VmRSS: %llu kB", &rss_kib) != 1) {
      }
      std::fclose(f);
    }
    uint64_t values_bytes = 0;
    for (const TableLayout& t : store_->layouts()) {
      const auto id = static_cast<size_t>(&t - store_->layouts().data());
      values_bytes += t.owned.size() * t.dim * 4 * (1 + job_.tables[id].optimizer.Slots());
    }
    os << "memory rss_bytes " << rss_kib * 1024 << " values_bytes " << values_bytes << "\n";
  }
  os << "security " << (access_->enabled() ? "curve" : "none") << " refused_handshakes "
     << access_->refused_handshakes() << " failed_handshakes " << counters_.failed_handshakes << " refused_requests " << access_->refused_requests()
     << "\n";
  for (const TableLayout& t : store_->layouts()) {
    const auto id = static_cast<uint32_t>(&t - store_->layouts().data());
    os << "table " << t.name << " rows " << t.rows << " dim " << t.dim << " owned ["
       << t.owned.begin << ", " << t.owned.end << ") non_finite_rows "
       << store_->non_finite_rows(id) << " refused_rows " << store_->refused_rows(id) << "\n";
  }
  return os.str();
}

}  // namespace ps
