#include "client/client.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <utility>

#include "common/endpoint.h"
#include "common/logging.h"
#include "common/rendezvous.h"
#include "common/security.h"
#include "common/wire_floats.h"

namespace ps {
namespace {

uint64_t NewSession() {
  std::random_device device;
  uint64_t session = 0;
  while (session == 0) session = (uint64_t{device()} << 32) ^ device();
  return session;
}

}  // namespace

SharedFloats SharedFloats::Take(std::vector<float>&& values) {
  auto owner = std::make_shared<const std::vector<float>>(std::move(values));
  return SharedFloats(owner, owner->data(), owner->size());
}

SharedFloats SharedFloats::Of(std::shared_ptr<const std::vector<float>> values) {
  const float* data = values->data();
  size_t size = values->size();
  return SharedFloats(std::move(values), data, size);
}

void PulledValues::CopyTo(float* out) const {
  for (const Piece& p : pieces_) std::memcpy(out + p.offset, p.frame.data(), p.frame.size());
}

Client::Client(const JobOptions& job, uint32_t worker, Env* env)
    : job_(job), worker_(worker), control_(worker == kControlWorker),
      reader_(worker == kEvaluatorWorker), timeout_(job.client.request_timeout_ms),
      down_timeout_(job.liveness.server_down_timeout_ms),
      // The evaluator's reads wait for every worker at their clock, or
      // read the final model once the workers left: no bound to check.
      bound_(reader_ ? kUnboundedStaleness : job.consistency.Bound()),
      limits_{.max_request_bytes = job.server.max_request_bytes,
              .max_keys = job.server.max_keys_per_request,
              .push_part_bytes = job.client.push_part_bytes},
      session_(NewSession()), agreement_(EncodeAgreement(job)), env_(env != nullptr ? env : Env::Default()), time_(&env_->clock()),
      tracker_(time_, timeout_, static_cast<uint32_t>(job.cluster.servers.size())),
      pushes_wait_for_clock_(job.replication.factor > 1 && job.consistency.aggregate &&
                             job.replication.after_aggregation) {
  residuals_.resize(job.tables.size());
  hashed_residuals_.resize(job.tables.size());
  expectation_ = [this](uint64_t request_id) -> std::optional<ReplyExpectation> {
    const Part* p = tracker_.Find(request_id);
    if (p == nullptr) return std::nullopt;
    return ReplyExpectation{.request = p->op, .shard = p->shard, .count = p->count,
                            .dim = p->dim, .clock = p->clock, .bound = bound_,
                            .dtype = p->dtype};
  };
}

Client::~Client() = default;

StatusOr<std::unique_ptr<Client>> Client::Create(const JobOptions& job, uint32_t worker,
                                                 std::vector<std::string> endpoints,
                                                 Env* env) {
  if (worker == kEvaluatorWorker && !job.cluster.evaluator) {
    return InvalidArgumentError("this job has no evaluator: set cluster.evaluator: true in the "
                                "job file of every process");
  }
  if (worker >= job.cluster.workers && worker != kControlWorker && worker != kEvaluatorWorker) {
    return InvalidArgumentError("worker rank " + std::to_string(worker) + " is not in this job (" +
                                std::to_string(job.cluster.workers) + " workers: ranks 0.." +
                                std::to_string(job.cluster.workers - 1) + ")");
  }
  if (!endpoints.empty() && endpoints.size() != job.cluster.servers.size()) {
    return InvalidArgumentError("got " + std::to_string(endpoints.size()) +
                                " endpoints for a job with " +
                                std::to_string(job.cluster.servers.size()) + " servers");
  }
  std::unique_ptr<Client> client(new Client(job, worker, env));
  // Only ssp can reuse a pulled row at a later clock: under bsp a read at
  // clock c + 1 needs a pull answered at clock c + 1, and asp has no bound
  // to make a copy fresh enough. (Measured: keeping the cache under bsp
  // cost 40% of its clock rate for nothing.)
  if (job.client.cache && job.consistency.mode == ConsistencyMode::kSsp &&
      worker != kEvaluatorWorker) {
    client->cache_ = std::make_unique<ParamCache>(job);
  }
  PS_ASSIGN_OR_RETURN(client->context_, Context::Create(static_cast<int>(job.client.io_threads)));
  // security.mode curve: this worker's own keys (the admin's for a control
  // client); nothing otherwise.
  PS_ASSIGN_OR_RETURN(client->curve_, ClientCurve(job, worker));
  for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
    Shard shard;
    if (endpoints.empty()) {
      // The name (ZeroMQ resolves it again on each reconnect), once it
      // was seen to resolve now.
      PS_ASSIGN_OR_RETURN(const HostPort address, ServerAddress(job, s));
      shard.endpoint = ConnectEndpoint(address);
      // Where the shard's primary may move: every replica's address.
      for (uint32_t r = 0; r < job.replication.factor && job.replication.factor > 1; ++r) {
        PS_ASSIGN_OR_RETURN(const HostPort replica, ReplicaHostPort(job, s, r));
        shard.replicas.push_back(ConnectEndpoint(replica));
      }
    } else {
      shard.endpoint = endpoints[s];
    }
    PS_ASSIGN_OR_RETURN(shard.channel, client->Connect(s, shard.endpoint));
    client->shards_.push_back(std::move(shard));
  }
  client->map_size_ = static_cast<uint32_t>(client->shards_.size());
  for (Shard& shard : client->shards_) {
    client->poll_sockets_.push_back(shard.channel->poll_sockets().messages);
  }
  for (Shard& shard : client->shards_) {
    client->poll_sockets_.push_back(shard.channel->poll_sockets().events);
  }
  if (!client->control_ && job.liveness.heartbeat_ms > 0) {
    std::vector<std::string> eps;
    for (const Shard& shard : client->shards_) eps.push_back(shard.endpoint);
    PS_ASSIGN_OR_RETURN(client->heartbeat_,
                        HeartbeatSender::Start(eps, worker,
                                               std::chrono::milliseconds(job.liveness.heartbeat_ms),
                                               client->curve_, client->env_,
                                               static_cast<int>(job.liveness.reconnect_ms)));
  }
  return client;
}

StatusOr<std::unique_ptr<Channel>> Client::Connect(uint32_t s, const std::string& endpoint) {
  // The heartbeats' channels come from the same Env, so a connection cut
  // for the client is cut for them too.
  return env_->Connect(context_.get(), {.shard = s,
                                        .endpoint = endpoint,
                                        .curve = curve_,
                                        .use = ChannelUse::kRequests,
                                        .hwm = ZmqChannel::ChannelHwm(job_.client.max_in_flight),
                                        .reconnect_ms = static_cast<int>(job_.liveness.reconnect_ms)});
}

Status Client::WorkerOnly(std::string_view call) const {
  if (!control_ && !reader_) return Status::Ok();
  return FailedPreconditionError(std::string(call) + " is for workers; " +
                                 (control_ ? "a control client" : "the evaluator") +
                                 " has no clock and is not counted among the job's workers");
}

void Client::SetTargetClock(int64_t clock) { target_clock_ = std::clamp<int64_t>(clock, 0, kMaxClock); }

Status Client::SetReadClock(int64_t clock) {
  if (!reader_) {
    return FailedPreconditionError("SetReadClock() is for the evaluator; a worker's pulls carry "
                                   "its own clock");
  }
  if (clock < 0 || clock > kMaxClock) {
    return InvalidArgumentError("read clock " + std::to_string(clock) + " is outside [0, 2^62]");
  }
  clock_ = clock;
  return Status::Ok();
}

Status Client::CheckTable(uint32_t table) const {
  if (table >= job_.tables.size()) {
    return InvalidArgumentError("table id " + std::to_string(table) + " does not exist; the job has " +
                                std::to_string(job_.tables.size()) + " tables");
  }
  return Status::Ok();
}

std::string Client::Describe(const Part& p, uint64_t request_id) const {
  std::string s = OpName(p.op) + " request " + std::to_string(request_id);
  if (p.op == Op::kPush || p.op == Op::kPull) {
    s += " (table '" + job_.tables[p.table].name + "', " + std::to_string(p.count) + " rows)";
  }
  return s + " to server " + std::to_string(p.shard) + " at " + shards_[p.shard].endpoint;
}

Status Client::WaitUntilSlot(uint32_t shard) {
  while (tracker_.in_flight(shard) >= job_.client.max_in_flight) {
    PS_RETURN_IF_ERROR(Poll(100));
  }
  return Status::Ok();
}

uint64_t Client::SendPart(Part&& part, Frame&& keys, Frame&& values) {
  Status slot = WaitUntilSlot(part.shard);
  if (!slot.ok()) {
    tracker_.Fail(part.ticket, slot);
    return 0;
  }
  return SendPartNow(std::move(part), std::move(keys), std::move(values));
}

uint64_t Client::SendPartNow(Part&& part, Frame&& keys, Frame&& values) {
  const Op op = part.op;
  MessageHeader h;
  h.op = op;
  h.session = session_;
  h.worker = worker_;
  h.clock = clock_;
  h.map_epoch = map_epoch_;
  if (op == Op::kPull) {
    // The shard gives up on a waiting pull a little before this client
    // would, so the error that arrives names the worker everyone waits for.
    h.max_wait_ms = static_cast<uint32_t>(timeout_.count() - std::min<int64_t>(timeout_.count() / 10, 200));
  }
  h.table = part.table;
  h.count = part.count;
  h.dim = part.dim;
  h.first_row = part.first_row;
  h.flags = part.flags;
  h.dtype = part.dtype;
  h.replica = part.replica;
  h.epoch = part.epoch;
  if (op == Op::kHello) {
    h.text = agreement_;
    h.target_clock = target_clock_;
  }
  return SendWithHeader(std::move(part), h, std::move(keys), std::move(values),
                        /*cacheable=*/true);
}

uint64_t Client::SendWithHeader(Part&& part, MessageHeader& h, Frame&& keys, Frame&& values,
                                bool cacheable) {
  const uint64_t rid = next_request_id_++;
  const Op op = part.op;
  h.request_id = rid;
  const bool has_keys = keys.size() > 0;
  if ((op == Op::kPush || op == Op::kPull) && !has_keys) h.flags |= kFlagDenseRange;
  // Header, then the keys (when there are any), then a push's values.
  Frame frames[3] = {EncodeHeader(h)};
  size_t n = 1;
  if (has_keys) frames[n++] = std::move(keys);
  if (op == Op::kPush) frames[n++] = std::move(values);
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; ++i) bytes += frames[i].size();
  part.clock = h.clock;
  if (cacheable && op == Op::kPull && cache_ != nullptr && part.view == nullptr) {
    part.cache_insert = true;
    if (has_keys) {
      // frames[1] is the keys frame; it is read before Send takes it.
      part.cache_rows.resize(part.count);
      std::memcpy(part.cache_rows.data(), frames[1].data(), part.count * sizeof(uint64_t));
    }
  }
  // Kept (the bytes shared, not copied) in case it must be sent again.
  for (size_t i = 0; i < n; ++i) part.message[i] = frames[i].Clone();
  part.message_frames = static_cast<uint8_t>(n);
  if (shards_[part.shard].probing) {
    // Its server is being looked for: it goes there with the others, in
    // order, once found (Shard::probing).
    part.held = true;
    ++counters_.held;
    tracker_.Add(rid, std::move(part));
    return rid;
  }
  Status sent = shards_[part.shard].channel->Send(std::span<Frame>(frames, n));
  if (!sent.ok()) {
    tracker_.Fail(part.ticket, sent.WithContext(Describe(part, rid) + " could not be sent"));
    return 0;
  }
  ++counters_.requests;
  counters_.bytes_sent += bytes;
  tracker_.Add(rid, std::move(part));
  return rid;
}

void Client::FinishPart(uint64_t request_id, const Status& status) {
  const Part* p = tracker_.Find(request_id);
  if (p == nullptr) return;
  if (!status.ok() && p->op == Op::kPush && cache_ != nullptr) {
    // The push may or may not have been applied: the cached rows it
    // changed can no longer be trusted.
    cache_->Invalidate(p->table);
  }
  tracker_.Finish(request_id, status);
}

Status Client::CheckRows(Op op, uint32_t table, std::span<const uint64_t> rows) const {
  PS_RETURN_IF_ERROR(CheckTable(table));
  const TableOptions& t = job_.tables[table];
  if (t.hashed()) return Status::Ok();  // any uint64 is an id
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= t.rows) {
      return InvalidArgumentError(OpName(op) + " to table '" + t.name + "': row " +
                                  std::to_string(rows[i]) + " (index " + std::to_string(i) +
                                  ") is out of range [0, " + std::to_string(t.rows) + ")");
    }
  }
  return Status::Ok();
}

Ticket Client::CompletedTicket(Callback done, Callback finish) {
  const Ticket ticket = tracker_.NewTicket(std::move(done), std::move(finish));
  tracker_.Release(ticket, Status::Ok());
  return ticket;
}

StatusOr<Ticket> Client::Issue(const Call& call, Callback done, Callback finish) {
  if (reader_ && call.op == Op::kPush) {
    return FailedPreconditionError("the evaluator only pulls; a push comes from a worker");
  }
  PS_RETURN_IF_ERROR(CheckRows(call.op, call.table, call.rows));
  const TableOptions& t = job_.tables[call.table];
  if (call.dense && t.hashed()) {
    return InvalidArgumentError(OpName(call.op) + " of all of table '" + t.name +
                                "': it is hashed (keys: hashed), so it has no dense form; "
                                "name the ids to push or pull");
  }
  const uint64_t n = call.dense ? t.rows : call.rows.size();
  if (call.values != nullptr && call.values->size() != n * t.dim) {
    return InvalidArgumentError(OpName(call.op) + " to table '" + t.name + "': got " +
                                std::to_string(call.values->size()) + " values for " +
                                std::to_string(n) + " rows of dim " + std::to_string(t.dim) +
                                ", expected " + std::to_string(n * t.dim));
  }
  if (call.view != nullptr) {
    call.view->pieces_.clear();
    call.view->size_ = n * t.dim;
  }
  if (call.op == Op::kPull && call.out == nullptr && call.view == nullptr && n > 0) {
    return InvalidArgumentError("PULL from table '" + t.name + "': output buffer is null");
  }
  // Taken for this call: waiting for a slot runs callbacks, which may issue
  // calls of their own (those split into a Partition of their own).
  Partition partition = std::move(partition_);
  partition.Split({.op = call.op, .table_rows = t.rows, .dim = t.dim, .num_shards = num_shards(),
                   .dense = call.dense, .rows = call.rows, .out_index = call.out_index,
                   .hashed = t.hashed(), .slots = t.HashSlots(), .hash_seed = t.HashSeed()},
                  limits_);
  const Ticket ticket = tracker_.NewTicket(std::move(done), std::move(finish));
  for (const PartSpec& spec : partition.parts()) SendSpec(ticket, call, spec);
  partition_ = std::move(partition);
  tracker_.Release(ticket, Status::Ok());  // the issuing hold
  return ticket;
}

void Client::SendSpec(Ticket ticket, const Call& call, const PartSpec& spec) {
  const TableOptions& table = job_.tables[call.table];
  const uint32_t dim = table.dim;
  const SharedFloats* values = call.values;
  Part part{.ticket = ticket, .shard = spec.shard, .op = call.op, .table = call.table,
            .count = spec.count, .dim = dim, .first_row = spec.first_row,
            .positions = {spec.positions.begin(), spec.positions.end()}};
  if (call.op == Op::kPull) part.dtype = table.wire.pull;
  Frame keys;
  Frame vals;
  if (values != nullptr && table.wire.push != WireType::kF32) {
    // Pushed in 16 bits with error feedback: the part's values are encoded
    // into a frame of their own.
    part.dtype = table.wire.push;
    StatusOr<Frame> encoded = EncodePush(call, spec);
    if (!encoded.ok()) {
      return tracker_.Fail(ticket, encoded.status().WithContext(
                                       "PUSH to table '" + table.name + "' not sent"));
    }
    vals = std::move(*encoded);
    if (spec.kind != PartSpec::Kind::kDenseRange) {
      auto kf = Frame::Allocate(spec.count * sizeof(uint64_t));
      if (!kf.ok()) return tracker_.Fail(ticket, kf.status());
      auto* k = reinterpret_cast<uint64_t*>(kf->mutable_data());
      for (size_t x = 0; x < spec.count; ++x) k[x] = call.rows[RowIndex(spec, x)];
      keys = std::move(*kf);
    }
    SendPart(std::move(part), std::move(keys), std::move(vals));
    return;
  }
  if (spec.kind == PartSpec::Kind::kGathered) {
    // Rows of several shards interleave: this shard's rows (and, for a
    // push, their values) are gathered into frames of their own.
    auto kf = Frame::Allocate(spec.count * sizeof(uint64_t));
    if (!kf.ok()) return tracker_.Fail(ticket, kf.status());
    auto* k = reinterpret_cast<uint64_t*>(kf->mutable_data());
    for (size_t x = 0; x < spec.count; ++x) k[x] = call.rows[spec.gather[x]];
    keys = std::move(*kf);
    if (values != nullptr) {
      auto vf = Frame::Allocate(spec.count * dim * sizeof(float));
      if (!vf.ok()) return tracker_.Fail(ticket, vf.status());
      auto* v = reinterpret_cast<float*>(vf->mutable_data());
      for (size_t x = 0; x < spec.count; ++x) {
        CopyRow(values->data() + spec.gather[x] * dim, dim, v + x * dim);
      }
      vals = std::move(*vf);
    }
    part.out = call.out;
  } else {
    // A run of the caller's rows: its values are sent from the caller's
    // buffer (zero-copy).
    if (values != nullptr) {
      auto slice = Frame::Share(values->data() + spec.offset * dim,
                                spec.count * dim * sizeof(float), values->owner());
      if (!slice.ok()) return tracker_.Fail(ticket, slice.status());
      vals = std::move(*slice);
    }
    if (spec.kind == PartSpec::Kind::kRun) {
      keys = Frame::CopyOf(call.rows.data() + spec.offset, spec.count * sizeof(uint64_t));
    } else {
      part.view = call.view;
      part.view_offset = spec.offset * dim;
    }
    if (call.out != nullptr) part.out = part.positions.empty() ? call.out + spec.offset * dim : call.out;
  }
  SendPart(std::move(part), std::move(keys), std::move(vals));
}

uint64_t Client::RowIndex(const PartSpec& spec, uint64_t x) {
  return spec.kind == PartSpec::Kind::kGathered ? spec.gather[x] : spec.offset + x;
}

StatusOr<Ticket> Client::Pull(uint32_t table, std::span<const uint64_t> rows, float* out,
                              Callback done) {
  if (out != nullptr && table < job_.tables.size() && job_.tables[table].hashed()) {
    // A hashed table's ids once each (client/id_dedup.h), pulled into a
    // buffer of their own and copied to each place when the pull completes.
    auto places = std::make_shared<std::vector<uint32_t>>();
    std::vector<uint64_t> unique;
    if (dedup_.Distinct(rows, &unique, places.get())) {
      counters_.distinct_pull_rows += rows.size() - unique.size();
      const uint32_t dim = job_.tables[table].dim;
      auto pulled = std::make_shared<std::vector<float>>(unique.size() * dim);
      float* into = pulled->data();
      Callback copy = [pulled, places, out, dim](const Status& status) {
        if (!status.ok()) return;
        for (size_t i = 0; i < places->size(); ++i) {
          std::memcpy(out + i * dim, pulled->data() + size_t{(*places)[i]} * dim, dim * sizeof(float));
        }
      };
      return PullRows(table, unique, into, std::move(done), std::move(copy));
    }
  }
  return PullRows(table, rows, out, std::move(done), nullptr);
}

StatusOr<Ticket> Client::PullRows(uint32_t table, std::span<const uint64_t> rows, float* out,
                                  Callback done, Callback finish) {
  if (cache_ == nullptr || out == nullptr) {
    return Issue({.op = Op::kPull, .table = table, .rows = rows, .out = out}, std::move(done),
                 std::move(finish));
  }
  PS_RETURN_IF_ERROR(CheckRows(Op::kPull, table, rows));
  const uint32_t dim = job_.tables[table].dim;
  const int64_t needed = clock_ - bound_;
  std::vector<uint64_t> missing, index;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!cache_->Read(table, rows[i], needed, out + i * dim)) {
      missing.push_back(rows[i]);
      index.push_back(i);
    }
  }
  const uint64_t hits = rows.size() - missing.size();
  counters_.cache_hits += hits;
  counters_.cache_misses += missing.size();
  counters_.cache_bytes_saved += hits * dim * sizeof(float);
  if (missing.empty()) return CompletedTicket(std::move(done), std::move(finish));
  if (missing.size() == rows.size()) {
    return Issue({.op = Op::kPull, .table = table, .rows = rows, .out = out}, std::move(done),
                 std::move(finish));
  }
  return Issue({.op = Op::kPull, .table = table, .rows = missing, .out = out, .out_index = index},
               std::move(done), std::move(finish));
}

StatusOr<Ticket> Client::PullDense(uint32_t table, float* out, Callback done) {
  if (cache_ != nullptr && out != nullptr) {
    PS_RETURN_IF_ERROR(CheckTable(table));
    const TableOptions& t = job_.tables[table];
    if (cache_->AllFresh(table, clock_ - bound_)) {
      cache_->ReadAll(table, out);
      counters_.cache_hits += t.rows;
      counters_.cache_bytes_saved += t.rows * t.dim * sizeof(float);
      return CompletedTicket(std::move(done));
    }
    counters_.cache_misses += t.rows;
  }
  return Issue({.op = Op::kPull, .table = table, .dense = true, .out = out}, std::move(done));
}

StatusOr<Ticket> Client::PullDense(uint32_t table, PulledValues* out, Callback done) {
  if (out == nullptr) return InvalidArgumentError("PULL: PulledValues output is null");
  return Issue({.op = Op::kPull, .table = table, .dense = true, .view = out}, std::move(done));
}

Status Client::CheckPushWait(Ticket ticket) const {
  if (!pushes_wait_for_clock_ || control_ || !tracker_.HasPartAt(ticket, Op::kPush, clock_)) {
    return Status::Ok();
  }
  return FailedPreconditionError(
      "worker " + std::to_string(worker_) + " waits for a push of clock " +
      std::to_string(clock_) + " before its Clock(): under consistency.aggregate with "
      "replication.after_aggregation a push is acknowledged once its clock's update is on every "
      "replica, which takes every worker's Clock(); call Clock() before waiting for the push, "
      "or set replication.after_aggregation: false");
}

Status Client::CheckWait(Ticket ticket) const {
  PS_RETURN_IF_ERROR(tracker_.CheckWaitable(ticket));
  return CheckPushWait(ticket);
}

Status Client::Wait(Ticket ticket) {
  PS_RETURN_IF_ERROR(CheckWait(ticket));
  while (!tracker_.Done(ticket)) PS_RETURN_IF_ERROR(Poll(1000));
  return tracker_.Take(ticket);
}

Status Client::WaitAll() {
  PS_RETURN_IF_ERROR(CheckPushWait(0));
  while (tracker_.size() > 0) PS_RETURN_IF_ERROR(Poll(1000));
  return tracker_.TakeAll();
}

ClientCounters Client::counters() const {
  ClientCounters c = counters_;
  c.staleness_wait_us = tracker_.staleness_wait_us();
  for (const std::unique_ptr<HashedResiduals>& kept : hashed_residuals_) {
    if (kept != nullptr) c.residuals_dropped += kept->dropped();
  }
  return c;
}

Status Client::PushSync(uint32_t table, std::span<const uint64_t> rows, SharedFloats values) {
  PS_ASSIGN_OR_RETURN(Ticket t, Push(table, rows, std::move(values)));
  return Wait(t);
}

Status Client::PullSync(uint32_t table, std::span<const uint64_t> rows, float* out) {
  PS_ASSIGN_OR_RETURN(Ticket t, Pull(table, rows, out));
  return Wait(t);
}

StatusOr<Ticket> Client::Clock(Callback done) {
  PS_RETURN_IF_ERROR(WorkerOnly("Clock()"));
  const Ticket ticket = tracker_.NewTicket(std::move(done));
  for (uint32_t s = 0; s < num_shards(); ++s) {
    SendPart({.ticket = ticket, .shard = s, .op = Op::kClock}, Frame(), Frame());
  }
  ++clock_;
  if (heartbeat_ != nullptr) {
    heartbeat_->set_clock(clock_);
    heartbeat_->set_cache_stats(counters_.cache_hits, counters_.cache_misses);
  }
  tracker_.Release(ticket, Status::Ok());  // the issuing hold
  return ticket;
}

int64_t Client::CatchUp() {
  if (job_.consistency.backup_workers == 0 || control_ || reader_ || shards_.empty()) {
    return clock_;
  }
  int64_t job_clock = shards_[0].min_clock;
  for (uint32_t s = 1; s < num_shards(); ++s) job_clock = std::min(job_clock, shards_[s].min_clock);
  if (job_clock > clock_) {
    counters_.clocks_skipped += static_cast<uint64_t>(job_clock - clock_);
    clock_ = job_clock;
    if (heartbeat_ != nullptr) heartbeat_->set_clock(clock_);
  }
  return clock_;
}

}  // namespace ps
