#include "server/shard_server.h"

#include <algorithm>
#include <utility>

#include "common/endpoint.h"
#include "common/logging.h"
#include "common/rendezvous.h"
#include "common/text.h"
#include "common/wire_floats.h"
#include "server/open_files.h"

namespace ps {

std::string TcpEndpoint(const std::string& host_port) { return "tcp://" + host_port; }

ShardServer::ShardServer(uint32_t shard, const JobOptions& job, Env* env)
    : shard_(shard),
      job_(job),
      env_(env != nullptr ? env : Env::Default()),
      clock_(&env_->clock()),
      bound_(job.consistency.Bound()),
      push_policy_(job),
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
      reshard_(std::make_unique<ReshardGate>(shard, job.cluster.servers, 0, job.cluster.workers)),
      rate_sampled_(clock_->Now()),
      started_(rate_sampled_) {}

ShardServer::~ShardServer() = default;

StatusOr<std::unique_ptr<ShardServer>> ShardServer::Create(const JobOptions& job, uint32_t shard,
                                                          const std::string& bind_endpoint,
                                                          int64_t restore_clock,
                                                          Env* env,
                                                          CheckpointStageHook checkpoint_stage_hook) {
  return CreateInternal(job, shard, bind_endpoint, restore_clock, env,
                        std::move(checkpoint_stage_hook), nullptr);
}

StatusOr<std::unique_ptr<ShardServer>> ShardServer::CreatePromoted(
    const JobOptions& job, uint32_t shard, BackupServer::State state,
    const std::string& bind_endpoint, Env* env) {
  return CreateInternal(job, shard, bind_endpoint, -1, env, nullptr, &state);
}

StatusOr<std::unique_ptr<ShardServer>> ShardServer::CreateInternal(
    const JobOptions& job, uint32_t shard, const std::string& bind_endpoint,
    int64_t restore_clock, Env* env, CheckpointStageHook checkpoint_stage_hook,
    BackupServer::State* promoted) {
  if (shard >= job.cluster.servers.size()) {
    return InvalidArgumentError("shard " + std::to_string(shard) + " does not exist; the job has " +
                                std::to_string(job.cluster.servers.size()) + " servers");
  }
  std::unique_ptr<ShardServer> server(new ShardServer(shard, job, env));
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
      if (t.hashed) continue;  // its pulls name ids: under max_request_bytes each
      values += (t.owned.end - t.owned.begin) * uint64_t{t.dim} * sizeof(float);
    }
    server->max_queued_reply_bytes_ = std::max<uint64_t>(1ull << 30, 2 * values);
  }
  server->rules_ = server->store_->Rules(job, shard);
  return server;
}

Status ShardServer::OpenState(int64_t restore_clock, BackupServer::State* promoted) {
  RestorePoint restore;
  if (!job_.checkpoint.dir.empty()) {
    PS_ASSIGN_OR_RETURN(checkpoints_,
                        CheckpointDir::Open(ShardCheckpointDir(job_.checkpoint.dir, shard_),
                                            &env_->filesystem()));
    if (job_.checkpoint.restore && promoted == nullptr) {
      PS_ASSIGN_OR_RETURN(restore,
                          ShardRestorePoint(env_->filesystem(), job_, shard_, restore_clock));
    }
  }
  const bool restoring = restore.clock >= 0;
  if (promoted != nullptr) {
    // The backup's copy is the shard's state, exactly: every worker's
    // clock is known, no update was lost.
    store_ = std::move(promoted->store);
    clocks_ = promoted->clocks;
    recent_pushes_ = std::move(promoted->recent_pushes);
    started_clock_ = clocks_.min_clock();
    first_pull_to_log_ = true;
    promoted_epoch_ = promoted->epoch;
    took_over_at_ = promoted->handover_clock;
    if (checkpoints_ != nullptr && promoted->handover_clock >= 0) {
      // The shard of the map before, at this index, writes its handover
      // generation into this folder after this server took over.
      checkpoints_->ShareWithReshard(promoted->handover_clock, /*handed_over=*/false);
    }
    for (uint32_t w = 0; w < workers_.size(); ++w) {
      workers_.worker(w).heard_clock = true;
      // Left out of the minimum on the old primary: it left (or was
      // dropped) and is not waited for.
      workers_.worker(w).left = !clocks_.counted(w);
    }
  } else {
    // A store about to be restored skips computing its initial values
    // (measured: 0.4-0.6 s of a 100M-float shard's 3.3 s recovery), and
    // writing anything: the restore's reading threads touch its pages
    // first, while other reads wait on the disk (a restore that fails ends
    // the server).
    if (restoring) {
      PS_ASSIGN_OR_RETURN(store_, ShardStore::CreateUnwritten(job_, shard_));
    } else {
      PS_ASSIGN_OR_RETURN(store_, ShardStore::Create(job_, shard_));
    }
    if (checkpoints_ != nullptr && job_.checkpoint.restore) {
      PS_RETURN_IF_ERROR(RestoreCheckpoint(restore));
    }
  }
  if (checkpoints_ != nullptr) StartCheckpointTrigger();
  return Status::Ok();
}

Status ShardServer::OpenSocket(BackupServer::State* promoted) {
  PS_ASSIGN_OR_RETURN(context_, Context::Create(static_cast<int>(job_.server.io_threads)));
  PS_ASSIGN_OR_RETURN(replication_,
                      ReplicationLog::Create(job_, shard_, context_.get(), env_,
                                             /*no_backups=*/promoted != nullptr &&
                                                 !promoted->backups_hold_it,
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
  PS_ASSIGN_OR_RETURN(access_, ShardAccess::Create(job_, shard_, context_.get(), *clock_, &so.curve));
  admission_ = std::make_unique<Admission>(shard_, job_, *clock_, clocks_, workers_, *access_,
                                           agreement_, started_clock_);
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
  so.handshake_ivl_ms = ConnectionLimit::kHandshakeTimeoutMs;
  PS_ASSIGN_OR_RETURN(const uint32_t max_connections,
                      ConnectionLimit::MaxConnections(job_, shard_));
  connections_ = std::make_unique<ConnectionLimit>(shard_, job_, max_connections,
                                                   access_->enabled(), *clock_);
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
  // ZeroMQ's I/O thread may not have released yet; a server of the next
  // shard map that followed the old ones, an address a server of the map
  // before holds until it handed over.
  const Clock::TimePoint bind_until =
      clock_->Now() + (promoted != nullptr && promoted->handover_clock >= 0
                           ? kHandoverBindWait
                           : std::chrono::seconds(2));
  while (promoted != nullptr && bound.code() == StatusCode::kUnavailable &&
         clock_->Now() < bind_until) {
    env_->SleepFor(std::chrono::milliseconds(20));
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
  if (replication_->active() && push_policy_.sums_replicated()) {
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
    if (checkpoint_trigger_ != nullptr) checkpoint_trigger_->Poll(clocks_.min_clock());
    const int wait_ms = Tick(100);
    // A backup's channel may hold acknowledgements its socket does not
    // show (a test's channel that held them back): no wait then.
    auto ready = PollReadable(sockets, replication_->AnyBuffered() ? 0 : wait_ms, &readable);
    if (!ready.ok()) return ready.status().WithContext("shard " + std::to_string(shard_));
    if (readable[1]) connections_->Drain(*accept_monitor_);
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
    if (reshard_->MayExit(clock_->Now(), [this](uint32_t w) {
          const WorkerState& state = workers_.worker(w);
          return !state.left && !state.dead;
        })) {
      PS_LOG_INFO("shard {}: every worker turned to map {}; exiting", shard_,
                  reshard_->next_epoch());
      break;
    }
  }
  EndReplication();
  if (handover_write_due_) {
    // The address is the next map's: its server binds it as soon as this
    // socket is gone (what was sent lingers out from the context). The
    // generation is written after (WriteDueHandover).
    accept_monitor_.reset();
    socket_.reset();
  }
  // A generation being written is finished, not torn; a CHECKPOINT still
  // waiting for it is answered.
  if (checkpoint_trigger_ != nullptr) checkpoint_trigger_->Stop(clocks_.min_clock());
  PublishMetrics(/*now=*/true);  // the final values, for a scrape after the end
  PS_LOG_INFO("shard {} stopped: {} pushes, {} pulls, {} errors", shard_, counters_.pushes,
              counters_.pulls, counters_.errors);
  return exit_status_;
}

void ShardServer::Handle(std::vector<Frame>& frames) {
  // Counted and timed by op only while metrics are served.
  if (metrics_endpoint_ == nullptr) {
    HandleRequest(frames);
    return;
  }
  const auto start = clock_->Now();
  const uint64_t errors = counters_.errors;
  const Op op = HandleRequest(frames);
  OpMetrics& m = op_metrics_[static_cast<size_t>(op) < op_metrics_.size()
                                 ? static_cast<size_t>(op) : 0];
  ++m.requests;
  m.errors += counters_.errors - errors;
  m.seconds.Observe(std::chrono::duration<double>(clock_->Now() - start).count());
}

void ShardServer::LogRequestRefusal(const Frame& first_frame, const char* kind,
                                    const std::string& why) {
  std::string peer = first_frame.Property("User-Id");
  if (peer.empty()) peer = first_frame.Property("Peer-Address");
  if (peer.empty()) peer = "an unknown peer";
  uint64_t held_back = 0;
  if (!request_log_.ShouldLog(std::string(kind) + " " + peer, &held_back)) {
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
    // A request routed by an older shard map may name rows this shard no
    // longer holds: it is moved, not refused.
    if (GateUndecodable(frames)) return Op::kUnknown;
    ++counters_.errors;
    LogRequestRefusal(body[0], "rejected", s.ToString());
    Reply(routing_id, MakeErrorHeader(EchoHeader(body), shard_, s));
    return Op::kUnknown;
  }
  const MessageHeader& req = request_.header;
  // Kept aside: a parked pull takes request_ (and req with it) away.
  const Op op = req.op;
  if (reshard_->Check(req) != ReshardGate::Action::kServe && GateRequest(frames)) return op;
  Admission::Verdict verdict = admission_->Check(body[0], req, Fenced(), failed_);
  switch (verdict.action) {
    case Admission::Verdict::Action::kRefuse:
      Refuse(routing_id, body[0], req, verdict);
      return op;
    case Admission::Verdict::Action::kAnswerPrimary: {
      // This replica serves, at epoch(), unless it is fenced.
      MessageHeader reply = ReplyHeader(req);
      reply.flags = Fenced() ? 0 : kFlagServing;
      // Epochs count from 0 again in each shard map.
      reply.map_epoch = reshard_->map_epoch();
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
  if (replication_->active() && Traits(op).changes_state) held_.BeginRequest();
  Dispatch(frames);
  held_.EndRequest(replication_->last_seq());
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
      reply.text = StatsReplyText(Stats(), req.flags);
      Reply(routing_id, reply);
      return;
    case Op::kCheckpoint:
      HandleCheckpoint(routing_id, req);
      return;
    case Op::kMembership:
      HandleMembership(routing_id, reply);
      return;
    case Op::kReshard:
      HandleReshard(routing_id, reply);
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
          ? replication_->Join(
                replica, epoch, store_.get(), clocks_,
                push_policy_.sums_replicated() ? held_.Replicated(recent_pushes_) : recent_pushes_,
                /*copy_sums=*/!push_policy_.sums_replicated(), /*incarnation=*/req.session)
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

void ShardServer::MinClockAdvanced() {
  // Pushes that waited for this clock join their sums once the request
  // being handled is done (Run): request_ is that request's until then.
  if (waiting_.pushes() > 0) replay_due_ = true;
  if (clocks_.backups()) {
    // consistency.backup_workers: each completed clock's mean over its
    // members (the first gradients to arrive), with the backups.
    for (const ClockTable::Completed& done : clocks_.completed()) {
      store_->ApplyAccumulated(done.clock + 1, 1.0f / static_cast<float>(done.members));
      held_.SumsApplied(done.clock + 1);
      replication_->ApplySums(done.clock + 1, done.members);
      PS_LOG_DEBUG("shard {}: clock {} applied as the mean of {} of {} workers' gradients",
                   shard_, done.clock, done.members, clocks_.num_workers());
    }
  } else if (job_.consistency.aggregate) {
    // The mean over the workers that finished the clock: those it waited
    // for, and any that left (or were dropped) after pushing into it.
    const int64_t below = clocks_.min_clock();
    const uint32_t workers = std::max<uint32_t>(1, clocks_.num_at_least(below));
    if (push_policy_.sums_replicated()) {
      // The sums go to the backups before they are applied here; the
      // pushes in them are answered once the backups have them.
      replication_->ApplySums(below, workers, store_.get(), held_.TakeSummedPushes(below));
      held_.ReleaseSumReplies(below, replication_->last_seq());
    }
    store_->ApplyAccumulated(below, 1.0f / static_cast<float>(workers));
    held_.SumsApplied(below);
    if (!push_policy_.sums_replicated()) replication_->ApplySums(below, workers);
  }
  if (job_.consistency.aggregate) {
    ReportNonFinite(job_.server.on_non_finite_result == NonFiniteResultPolicy::kFlag
                        ? "applied in an aggregated update (server.on_non_finite_result: flag)"
                        : "left out of an aggregated update: those rows keep their values "
                          "(server.on_non_finite_result: refuse)");
  }
  // Every update of the clocks below the minimum is in the store now.
  if (checkpoint_trigger_ != nullptr) checkpoint_trigger_->ClockAdvanced(clocks_.min_clock());
  if (reshard_->HandoverDue(clocks_.min_clock())) Handover();
  ReleaseWaitingPulls();
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

}  // namespace ps
