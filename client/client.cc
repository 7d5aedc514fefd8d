#include "client/client.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "common/key_range.h"
#include "common/logging.h"

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

Client::Client(const JobOptions& job, uint32_t worker)
    : job_(job), worker_(worker), timeout_(job.client.request_timeout_ms),
      down_timeout_(job.liveness.server_down_timeout_ms), bound_(job.consistency.Bound()),
      limits_{.max_request_bytes = job.server.max_request_bytes,
              .max_keys = job.server.max_keys_per_request,
              .push_part_bytes = job.client.push_part_bytes},
      session_(NewSession()), time_(&steady_clock_),
      tracker_(time_, timeout_, static_cast<uint32_t>(job.cluster.servers.size())) {
  expectation_ = [this](uint64_t request_id) -> std::optional<ReplyExpectation> {
    const Part* p = tracker_.Find(request_id);
    if (p == nullptr) return std::nullopt;
    return ReplyExpectation{.request = p->op, .shard = p->shard, .count = p->count,
                            .dim = p->dim, .clock = p->clock, .bound = bound_};
  };
}

Client::~Client() = default;

StatusOr<std::unique_ptr<Client>> Client::Create(const JobOptions& job, uint32_t worker,
                                                 std::vector<std::string> endpoints) {
  if (worker >= job.cluster.workers && worker != kControlWorker) {
    return InvalidArgumentError("worker rank " + std::to_string(worker) + " is not in this job (" +
                                std::to_string(job.cluster.workers) + " workers: ranks 0.." +
                                std::to_string(job.cluster.workers - 1) + ")");
  }
  if (!endpoints.empty() && endpoints.size() != job.cluster.servers.size()) {
    return InvalidArgumentError("got " + std::to_string(endpoints.size()) +
                                " endpoints for a job with " +
                                std::to_string(job.cluster.servers.size()) + " servers");
  }
  std::unique_ptr<Client> client(new Client(job, worker));
  // Only ssp can reuse a pulled row at a later clock: under bsp a read at
  // clock c + 1 needs a pull answered at clock c + 1, and asp has no bound
  // to make a copy fresh enough. (Measured: keeping the cache under bsp
  // cost 40% of its clock rate for nothing.)
  if (job.client.cache && job.consistency.mode == ConsistencyMode::kSsp) {
    client->cache_ = std::make_unique<ParamCache>(job);
  }
  PS_ASSIGN_OR_RETURN(client->context_, Context::Create(static_cast<int>(job.client.io_threads)));
  for (size_t s = 0; s < job.cluster.servers.size(); ++s) {
    Shard shard;
    shard.endpoint = endpoints.empty() ? "tcp://" + job.cluster.servers[s] : endpoints[s];
    PS_ASSIGN_OR_RETURN(shard.socket,
                        Socket::Create(client->context_.get(), SocketType::kDealer, SocketOptions{}));
    // Watched from before the first connection, so a reconnect is never
    // mistaken for it.
    PS_ASSIGN_OR_RETURN(shard.monitor,
                        ConnectionMonitor::Create(client->context_.get(), shard.socket.get()));
    PS_RETURN_IF_ERROR(shard.socket->Connect(shard.endpoint));
    client->shards_.push_back(std::move(shard));
  }
  // Replies of every shard, then the connection events of every shard.
  for (Shard& shard : client->shards_) client->poll_sockets_.push_back(shard.socket.get());
  for (Shard& shard : client->shards_) client->poll_sockets_.push_back(shard.monitor->socket());
  if (worker != kControlWorker && job.liveness.heartbeat_ms > 0) {
    std::vector<std::string> eps;
    for (const Shard& shard : client->shards_) eps.push_back(shard.endpoint);
    PS_ASSIGN_OR_RETURN(client->heartbeat_,
                        HeartbeatSender::Start(eps, worker,
                                               std::chrono::milliseconds(job.liveness.heartbeat_ms)));
  }
  return client;
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

uint64_t Client::SendPart(Part part, Frame keys, Frame values) {
  Status slot = WaitUntilSlot(part.shard);
  if (!slot.ok()) {
    tracker_.Fail(part.ticket, slot);
    return 0;
  }
  return SendPartNow(std::move(part), std::move(keys), std::move(values));
}

uint64_t Client::SendPartNow(Part part, Frame keys, Frame values) {
  const uint64_t rid = next_request_id_++;
  const Op op = part.op;
  MessageHeader h;
  h.op = op;
  h.request_id = rid;
  h.session = session_;
  h.worker = worker_;
  h.clock = clock_;
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
  const bool has_keys = keys.size() > 0;
  if ((op == Op::kPush || op == Op::kPull) && !has_keys) h.flags |= kFlagDenseRange;
  Frame frames[3] = {EncodeHeader(h), std::move(keys), std::move(values)};
  size_t n = 1;
  if (has_keys) ++n;
  if (op == Op::kPush) {
    if (!has_keys) std::swap(frames[1], frames[2]);
    ++n;
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; ++i) bytes += frames[i].size();
  part.clock = clock_;
  if (op == Op::kPull && cache_ != nullptr && part.view == nullptr) {
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
  Status sent = shards_[part.shard].socket->Send(std::span<Frame>(frames, n));
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
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= t.rows) {
      return InvalidArgumentError(OpName(op) + " to table '" + t.name + "': row " +
                                  std::to_string(rows[i]) + " (index " + std::to_string(i) +
                                  ") is out of range [0, " + std::to_string(t.rows) + ")");
    }
  }
  return Status::Ok();
}

Ticket Client::CompletedTicket(Callback done) {
  const Ticket ticket = tracker_.NewTicket(std::move(done));
  tracker_.Release(ticket, Status::Ok());
  return ticket;
}

StatusOr<Ticket> Client::Issue(const Call& call, Callback done) {
  PS_RETURN_IF_ERROR(CheckRows(call.op, call.table, call.rows));
  const TableOptions& t = job_.tables[call.table];
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
                   .dense = call.dense, .rows = call.rows, .out_index = call.out_index},
                  limits_);
  const Ticket ticket = tracker_.NewTicket(std::move(done));
  for (const PartSpec& spec : partition.parts()) SendSpec(ticket, call, spec);
  partition_ = std::move(partition);
  tracker_.Release(ticket, Status::Ok());  // the issuing hold
  return ticket;
}

void Client::SendSpec(Ticket ticket, const Call& call, const PartSpec& spec) {
  const uint32_t dim = job_.tables[call.table].dim;
  const SharedFloats* values = call.values;
  Part part{.ticket = ticket, .shard = spec.shard, .op = call.op, .table = call.table,
            .count = spec.count, .dim = dim, .first_row = spec.first_row,
            .positions = {spec.positions.begin(), spec.positions.end()}};
  Frame keys;
  Frame vals;
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
        std::memcpy(v + x * dim, values->data() + spec.gather[x] * dim, dim * sizeof(float));
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

StatusOr<Ticket> Client::Push(uint32_t table, std::span<const uint64_t> rows, SharedFloats values,
                              Callback done) {
  auto ticket = Issue({.op = Op::kPush, .table = table, .rows = rows, .values = &values},
                      std::move(done));
  if (ticket.ok() && cache_ != nullptr) {
    cache_->ApplyPush(table, 0, rows.data(), rows.size(), values.data());
  }
  return ticket;
}

StatusOr<Ticket> Client::PushDense(uint32_t table, SharedFloats values, Callback done) {
  auto ticket = Issue({.op = Op::kPush, .table = table, .dense = true, .values = &values},
                      std::move(done));
  if (ticket.ok() && cache_ != nullptr) {
    cache_->ApplyPush(table, 0, nullptr, job_.tables[table].rows, values.data());
  }
  return ticket;
}

StatusOr<Ticket> Client::Pull(uint32_t table, std::span<const uint64_t> rows, float* out,
                              Callback done) {
  if (cache_ == nullptr || out == nullptr) {
    return Issue({.op = Op::kPull, .table = table, .rows = rows, .out = out}, std::move(done));
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
  if (missing.empty()) return CompletedTicket(std::move(done));
  if (missing.size() == rows.size()) {
    return Issue({.op = Op::kPull, .table = table, .rows = rows, .out = out}, std::move(done));
  }
  return Issue({.op = Op::kPull, .table = table, .rows = missing, .out = out, .out_index = index},
               std::move(done));
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

void Client::HandleReply(uint32_t shard, std::span<Frame> frames) {
  for (const Frame& f : frames) counters_.bytes_received += f.size();
  Reply reply;
  const Status checked = DecodeReply(frames, shard, expectation_, &reply);
  if (reply.fault == ReplyFault::kUnreadable) {
    PS_LOG_WARN("server {} at {} sent an unreadable reply: {}", shard, shards_[shard].endpoint,
                checked.ToString());
    return;  // the request it answered will expire with a clear error
  }
  if (reply.fault == ReplyFault::kUnmatched) {
    ++counters_.late_replies;
    return;
  }
  const MessageHeader& h = reply.header;
  Part& p = *tracker_.Find(h.request_id);  // matched by DecodeReply
  ++counters_.replies;
  shards_[shard].min_clock = std::max(shards_[shard].min_clock, h.min_clock);
  if (!checked.ok()) {
    if (reply.fault == ReplyFault::kRejected) ++counters_.errors;
    if (reply.fault == ReplyFault::kStale) ++counters_.bound_violations;
    const std::string what = Describe(p, h.request_id);
    FinishPart(h.request_id, checked.WithContext(reply.fault == ReplyFault::kRejected
                                                     ? what + " was rejected"
                                                     : what));
    return;
  }
  if (p.op == Op::kPull) {
    // The shards of one pull wait side by side: the pull waited the longest of them.
    if (h.waited_us > 0) tracker_.NoteWait(p.ticket, h.waited_us);
    DeliverPull(p, reply);
  } else if (p.control) {
    control_replies_[h.request_id] = h;
  }
  FinishPart(h.request_id, Status::Ok());
}

void Client::DeliverPull(Part& p, Reply& reply) {
  // Values come as one or more frames of whole rows, in row order (DecodeReply).
  const uint64_t row_bytes = uint64_t{p.dim} * sizeof(float);
  const int64_t min_clock = reply.header.min_clock;
  uint64_t row = 0;  // first row of the current frame within this part
  for (Frame& frame : reply.values) {
    const uint64_t rows = frame.size() / row_bytes;
    if (p.view != nullptr) {
      Frame f = std::move(frame);
      if (reinterpret_cast<uintptr_t>(f.data()) % alignof(float) != 0) {
        f = Frame::CopyOf(f.data(), f.size());  // spans of float need alignment
      }
      p.view->pieces_.push_back({p.view_offset + row * p.dim, std::move(f)});
    } else if (p.positions.empty()) {
      std::memcpy(p.out + row * p.dim, frame.data(), frame.size());
      if (p.cache_insert) {
        cache_->Insert(p.table, p.first_row + row,
                       p.cache_rows.empty() ? nullptr : p.cache_rows.data() + row, rows,
                       p.out + row * p.dim, min_clock);
      }
    } else {
      const auto* src = reinterpret_cast<const std::byte*>(frame.data());
      for (uint64_t x = 0; x < rows; ++x) {
        std::memcpy(p.out + p.positions[row + x] * p.dim, src + x * row_bytes, row_bytes);
      }
      if (p.cache_insert) {
        cache_->Insert(p.table, 0, p.cache_rows.data() + row, rows,
                       reinterpret_cast<const float*>(src), min_clock);
      }
    }
    row += rows;
  }
}

double Client::MillisSince(ps::Clock::TimePoint t) const {
  return std::chrono::duration<double, std::milli>(time_->Now() - t).count();
}

void Client::ExpireDeadlines() {
  const auto now = time_->Now();
  while (const uint64_t rid = tracker_.PopExpired(now)) {
    Part& p = *tracker_.Find(rid);
    const Shard& shard = shards_[p.shard];
    if (shard.down) {
      // The server went away: its requests wait for it to come back.
      const auto give_up = shard.down_since + down_timeout_;
      if (give_up > now) {
        tracker_.Extend(rid, p, give_up);
        continue;
      }
      ++counters_.timeouts;
      FinishPart(rid, UnavailableError(
                          Describe(p, rid) + " failed: the connection to the server dropped " +
                          std::to_string(static_cast<int64_t>(MillisSince(shard.down_since))) +
                          " ms ago and it did not come back within " +
                          std::to_string(down_timeout_.count()) +
                          " ms (liveness.server_down_timeout_ms); is it running? ps_launch "
                          "restarts a crashed server when the job has checkpoint.dir"));
      continue;
    }
    ++counters_.timeouts;
    FinishPart(rid, DeadlineExceededError(
                        Describe(p, rid) + " got no reply within " +
                        std::to_string(timeout_.count()) +
                        " ms (client.request_timeout_ms); the server may be down, overloaded "
                        "or unreachable"));
  }
}

Status Client::Poll(int timeout_ms) {
  ExpireDeadlines();
  if (auto next = tracker_.NextDeadline()) {
    auto until =
        std::chrono::duration_cast<std::chrono::milliseconds>(*next - time_->Now()).count() + 1;
    timeout_ms = static_cast<int>(std::clamp<int64_t>(until, 0, timeout_ms));
  }
  auto ready = PollReadable(poll_sockets_, timeout_ms, &readable_);
  if (!ready.ok()) return ready.status();
  if (*ready > 0) {
    for (uint32_t s = 0; s < shards_.size(); ++s) {
      if (!readable_[s]) continue;
      while (true) {
        auto got = shards_[s].socket->TryRecv(&frames_);
        if (!got.ok()) return got.status();
        if (!*got) break;
        HandleReply(s, frames_);
      }
    }
    // After the replies: those that arrived before a connection dropped
    // are answers, not requests to send again.
    for (uint32_t s = 0; s < shards_.size(); ++s) {
      if (readable_[shards_.size() + s]) PS_RETURN_IF_ERROR(HandleConnectionEvents(s));
    }
  }
  ExpireDeadlines();
  return Status::Ok();
}

Status Client::HandleConnectionEvents(uint32_t s) {
  Shard& shard = shards_[s];
  while (true) {
    PS_ASSIGN_OR_RETURN(std::optional<ConnectionEvent> event, shard.monitor->TryNext());
    if (!event) return Status::Ok();
    if (*event == ConnectionEvent::kDisconnected) {
      if (shard.down) continue;
      shard.down = true;
      shard.down_since = time_->Now();
      ++counters_.disconnects;
      PS_LOG_WARN("connection to server {} at {} dropped with {} requests in flight; waiting up "
                  "to {} ms (liveness.server_down_timeout_ms) for it to come back",
                  s, shard.endpoint, tracker_.in_flight(s), down_timeout_.count());
      continue;
    }
    const bool again = shard.connected_once;
    shard.connected_once = true;
    if (again) Reconnected(s);
    shard.down = false;
  }
}

void Client::Reconnected(uint32_t s) {
  Shard& shard = shards_[s];
  ++counters_.reconnects;
  const std::vector<uint64_t> rids = tracker_.InFlightTo(s);  // oldest first
  const std::string clock =
      worker_ == kControlWorker ? "" : " and this worker's clock " + std::to_string(clock_);
  if (shard.down) {
    PS_LOG_INFO("server {} at {} is back after {:.0f} ms; sending its {} unanswered requests "
                "again{}",
                s, shard.endpoint, MillisSince(shard.down_since), rids.size(), clock);
  } else {
    PS_LOG_INFO("reconnected to server {} at {}; sending its {} unanswered requests again{}", s,
                shard.endpoint, rids.size(), clock);
  }
  std::vector<Frame> copy;
  for (uint64_t rid : rids) {
    Part* p = tracker_.Find(rid);
    if (p == nullptr) continue;  // a callback of an earlier one finished it
    if (!tracker_.Resent(rid, *p)) {
      FinishPart(rid, UnavailableError(Describe(*p, rid) + " was sent " +
                                       std::to_string(RequestTracker::kMaxResends + 1) +
                                       " times and each time the connection to the server "
                                       "dropped before it answered; giving up"));
      continue;
    }
    copy.clear();
    uint64_t bytes = 0;
    for (size_t i = 0; i < p->message_frames; ++i) {
      copy.push_back(p->message[i].Clone());
      bytes += p->message[i].size();
    }
    Status sent = shard.socket->Send(copy);
    if (!sent.ok()) {
      FinishPart(rid, sent.WithContext(Describe(*p, rid) + " could not be sent again"));
      continue;
    }
    ++counters_.resent;
    ++counters_.requests;
    counters_.bytes_sent += bytes;
  }
  // A restarted server went back to its checkpoint: cached rows may be
  // newer than what it serves now.
  if (cache_ != nullptr) {
    for (uint32_t t = 0; t < job_.tables.size(); ++t) cache_->Invalidate(t);
  }
  if (worker_ != kControlWorker) {
    // A server restarted from a checkpoint would otherwise wait for this
    // worker's clocks that already passed. Sent after the requests above,
    // on the same connection, so it arrives after them. No slot wait: this
    // runs inside Poll.
    const Ticket ticket = tracker_.NewTicket([](const Status&) {});
    SendPartNow({.ticket = ticket, .shard = s, .op = Op::kHeartbeat, .flags = kFlagResume},
                Frame(), Frame());
    tracker_.Release(ticket, Status::Ok());
  }
}

Status Client::Wait(Ticket ticket) {
  PS_RETURN_IF_ERROR(tracker_.CheckWaitable(ticket));
  while (!tracker_.Done(ticket)) PS_RETURN_IF_ERROR(Poll(1000));
  return tracker_.Take(ticket);
}

Status Client::WaitAll() {
  while (tracker_.size() > 0) PS_RETURN_IF_ERROR(Poll(1000));
  return tracker_.TakeAll();
}

ClientCounters Client::counters() const {
  ClientCounters c = counters_;
  c.staleness_wait_us = tracker_.staleness_wait_us();
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
  if (worker_ == kControlWorker) {
    return FailedPreconditionError("a control client has no clock; only workers call Clock()");
  }
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

Status Client::Join() {
  if (worker_ == kControlWorker) return FailedPreconditionError("a control client cannot join");
  int64_t resume = 0;
  for (uint32_t s = 0; s < num_shards(); ++s) {
    PS_ASSIGN_OR_RETURN(MessageHeader h, Control(s, Op::kHeartbeat));
    resume = std::max(resume, h.clock);
  }
  if (resume != clock_) {
    PS_LOG_INFO("worker {} joins at clock {}", worker_, resume);
    clock_ = resume;
    if (heartbeat_ != nullptr) heartbeat_->set_clock(clock_);
  }
  return Status::Ok();
}

Status Client::Leave() {
  if (worker_ == kControlWorker) return FailedPreconditionError("a control client cannot leave");
  // No heartbeat may follow the goodbye: it would bring the worker back.
  if (heartbeat_ != nullptr) heartbeat_->Stop();
  Status first;
  for (uint32_t s = 0; s < num_shards(); ++s) {
    auto h = Control(s, Op::kHeartbeat, kFlagLeaving);
    if (!h.ok() && first.ok()) first = h.status();
  }
  return first;
}

StatusOr<MessageHeader> Client::Control(uint32_t shard, Op op, uint32_t flags) {
  if (shard >= shards_.size()) {
    return InvalidArgumentError("server " + std::to_string(shard) + " does not exist; the job has " +
                                std::to_string(shards_.size()) + " servers");
  }
  const Ticket ticket = tracker_.NewTicket(nullptr);
  const uint64_t rid = SendPart(
      {.ticket = ticket, .shard = shard, .op = op, .flags = flags, .control = true}, Frame(),
      Frame());
  tracker_.Release(ticket, Status::Ok());  // the issuing hold
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

StatusOr<std::vector<std::string>> Client::CheckpointServers() {
  std::vector<std::string> generations;
  for (uint32_t s = 0; s < shards_.size(); ++s) {
    PS_ASSIGN_OR_RETURN(MessageHeader h, Control(s, Op::kCheckpoint));
    generations.push_back(h.text);
  }
  return generations;
}

Status Client::ShutdownServers() {
  Status first;
  for (uint32_t s = 0; s < shards_.size(); ++s) {
    auto h = Control(s, Op::kShutdown);
    if (!h.ok() && first.ok()) first = h.status();
  }
  return first;
}

}  // namespace ps
