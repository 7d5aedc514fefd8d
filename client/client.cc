#include "client/client.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "common/key_range.h"
#include "common/logging.h"

namespace ps {
namespace {

// A request is sent again at most this often (each time its server's
// connection came back); a connection that drops every time it is sent
// (e.g. a frame over the server's transport limit) fails it instead.
constexpr uint32_t kMaxResends = 8;

uint64_t NewSession() {
  std::random_device device;
  uint64_t session = 0;
  while (session == 0) session = (uint64_t{device()} << 32) ^ device();
  return session;
}

double MillisSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
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
      session_(NewSession()) {
  // Keep every request comfortably under the server's byte and key limits.
  max_rows_per_part_cap_ = job.server.max_keys_per_request;
  expectation_ = [this](uint64_t request_id) -> std::optional<ReplyExpectation> {
    auto it = parts_.find(request_id);
    if (it == parts_.end()) return std::nullopt;
    const Part& p = it->second;
    return ReplyExpectation{.request = p.op, .shard = p.shard, .count = p.count, .dim = p.dim,
                            .clock = p.clock, .bound = bound_};
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

Ticket Client::NewTicket(Callback done) {
  Ticket t = next_ticket_++;
  TicketState& st = tickets_[t];
  st.remaining = 1;  // held until every part is issued, so it cannot finish early
  st.done = std::move(done);
  return t;
}

std::string Client::Describe(const Part& p, uint64_t request_id) const {
  std::string s = OpName(p.op) + " request " + std::to_string(request_id);
  if (p.op == Op::kPush || p.op == Op::kPull) {
    s += " (table '" + job_.tables[p.table].name + "', " + std::to_string(p.count) + " rows)";
  }
  return s + " to server " + std::to_string(p.shard) + " at " + shards_[p.shard].endpoint;
}

Status Client::WaitUntilSlot(uint32_t shard) {
  while (shards_[shard].in_flight >= job_.client.max_in_flight) {
    PS_RETURN_IF_ERROR(Poll(100));
  }
  return Status::Ok();
}

uint64_t Client::SendPart(Ticket ticket, uint32_t shard, Op op, uint32_t table, uint64_t count,
                          uint64_t first_row, Frame keys, Frame values, float* out,
                          std::vector<uint64_t> positions, uint32_t dim, PulledValues* view,
                          uint64_t view_offset, uint32_t flags) {
  Status slot = WaitUntilSlot(shard);
  if (!slot.ok()) {
    FailTicket(ticket, slot);
    return 0;
  }
  return SendPartNow(ticket, shard, op, table, count, first_row, std::move(keys),
                     std::move(values), out, std::move(positions), dim, view, view_offset, flags);
}

uint64_t Client::SendPartNow(Ticket ticket, uint32_t shard, Op op, uint32_t table, uint64_t count,
                             uint64_t first_row, Frame keys, Frame values, float* out,
                             std::vector<uint64_t> positions, uint32_t dim, PulledValues* view,
                             uint64_t view_offset, uint32_t flags) {
  const uint64_t rid = next_request_id_++;
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
  h.table = table;
  h.count = count;
  h.dim = dim;
  h.first_row = first_row;
  h.flags = flags;
  const bool has_keys = keys.size() > 0;
  if ((op == Op::kPush || op == Op::kPull) && !has_keys) h.flags |= kFlagDenseRange;
  Frame frames[3] = {EncodeHeader(h), std::move(keys), std::move(values)};
  Frame* begin = frames;
  size_t n = 1;
  if (has_keys) ++n;
  if (op == Op::kPush) {
    if (!has_keys) std::swap(frames[1], frames[2]);
    ++n;
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; ++i) bytes += begin[i].size();
  Part part;
  part.ticket = ticket;
  part.shard = shard;
  part.op = op;
  part.table = table;
  part.count = count;
  part.dim = dim;
  part.clock = clock_;
  part.out = out;
  part.positions = std::move(positions);
  part.view = view;
  part.view_offset = view_offset;
  part.first_row = first_row;
  if (op == Op::kPull && cache_ != nullptr && view == nullptr) {
    part.cache_insert = true;
    if (has_keys) {
      // frames[1] is the keys frame; it is read before Send takes it.
      part.cache_rows.resize(count);
      std::memcpy(part.cache_rows.data(), frames[1].data(), count * sizeof(uint64_t));
    }
  }
  // Kept (the bytes shared, not copied) in case it must be sent again.
  for (size_t i = 0; i < n; ++i) part.message[i] = begin[i].Clone();
  part.message_frames = static_cast<uint8_t>(n);
  Status sent = shards_[shard].socket->Send(std::span<Frame>(begin, n));
  if (!sent.ok()) {
    FailTicket(ticket, sent.WithContext(Describe(part, rid) + " could not be sent"));
    return 0;
  }
  ++counters_.requests;
  counters_.bytes_sent += bytes;
  ArmDeadline(rid, part);
  ++shards_[shard].in_flight;
  ++tickets_[ticket].remaining;
  parts_.emplace(rid, std::move(part));
  return rid;
}

void Client::ArmDeadline(uint64_t request_id, Part& part) {
  part.deadline = SteadyClock::now() + timeout_;
  deadlines_.emplace(part.deadline, request_id);
}

void Client::FailTicket(Ticket ticket, const Status& status) {
  auto it = tickets_.find(ticket);
  if (it != tickets_.end() && it->second.status.ok()) it->second.status = status;
}

void Client::Release(Ticket ticket, const Status& status) {
  FailTicket(ticket, status);
  auto t = tickets_.find(ticket);
  if (t == tickets_.end()) return;
  if (--t->second.remaining == 0) counters_.staleness_wait_us += t->second.waited_us;
  if (t->second.remaining == 0 && t->second.done) {
    // Erase first: the callback may issue new requests.
    Callback done = std::move(t->second.done);
    Status result = t->second.status;
    tickets_.erase(t);
    done(result);
  }
}

void Client::FinishPart(uint64_t request_id, const Status& status) {
  auto it = parts_.find(request_id);
  if (it == parts_.end()) return;
  const Ticket ticket = it->second.ticket;
  if (!status.ok() && it->second.op == Op::kPush && cache_ != nullptr) {
    // The push may or may not have been applied: the cached rows it
    // changed can no longer be trusted.
    cache_->Invalidate(it->second.table);
  }
  --shards_[it->second.shard].in_flight;
  parts_.erase(it);
  Release(ticket, status);
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
  const Ticket ticket = NewTicket(std::move(done));
  Release(ticket, Status::Ok());
  return ticket;
}

StatusOr<Ticket> Client::Issue(Op op, uint32_t table, std::span<const uint64_t> rows, bool dense,
                               const SharedFloats* values, float* out, PulledValues* view,
                               Callback done, std::span<const uint64_t> out_index) {
  PS_RETURN_IF_ERROR(CheckRows(op, table, rows));
  const TableOptions& t = job_.tables[table];
  const uint32_t dim = t.dim;
  const uint64_t n = dense ? t.rows : rows.size();
  if (values != nullptr && values->size() != n * dim) {
    return InvalidArgumentError(OpName(op) + " to table '" + t.name + "': got " +
                                std::to_string(values->size()) + " values for " +
                                std::to_string(n) + " rows of dim " + std::to_string(dim) +
                                ", expected " + std::to_string(n * dim));
  }
  if (view != nullptr) {
    view->pieces_.clear();
    view->size_ = n * dim;
  }
  if (op == Op::kPull && out == nullptr && view == nullptr && n > 0) {
    return InvalidArgumentError("PULL from table '" + t.name + "': output buffer is null");
  }
  const uint32_t num_shards = this->num_shards();
  std::vector<uint32_t> owner;
  bool grouped = true;  // each shard's rows form one contiguous run
  if (!dense) {
    owner.resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      owner[i] = num_shards == 1 ? 0 : ShardOfRow(t.rows, num_shards, rows[i]);
      if (i > 0 && owner[i] < owner[i - 1]) grouped = false;
    }
  }
  // Rows per request so that no request passes the server's limits.
  const uint64_t row_bytes = uint64_t{dim} * 4 + (dense ? 0 : 8);
  const uint64_t budget = job_.server.max_request_bytes > 4096 ? job_.server.max_request_bytes - 4096
                                                               : job_.server.max_request_bytes;
  uint64_t chunk = std::min(max_rows_per_part_cap_, budget / row_bytes);
  if (op == Op::kPush) {
    // Parts of about push_part_bytes: the shard applies one while the next
    // one arrives (measured: 16 MiB pushes 0.58x -> 1.04x of raw ZeroMQ).
    chunk = std::min<uint64_t>(chunk, job_.client.push_part_bytes / (uint64_t{dim} * 4));
  }
  chunk = std::max<uint64_t>(chunk, 1);

  const Ticket ticket = NewTicket(std::move(done));
  auto value_slice = [&](uint64_t first, uint64_t count) -> StatusOr<Frame> {
    if (values == nullptr) return Frame();
    return Frame::Share(values->data() + first * dim, count * dim * sizeof(float), values->owner());
  };
  if (dense) {
    for (uint32_t s = 0; s < num_shards; ++s) {
      RowRange r = ShardRows(t.rows, num_shards, s);
      for (uint64_t b = r.begin; b < r.end; b += chunk) {
        const uint64_t c = std::min(chunk, r.end - b);
        StatusOr<Frame> slice = value_slice(b, c);
        if (!slice.ok()) {
          FailTicket(ticket, slice.status());
          continue;
        }
        SendPart(ticket, s, op, table, c, b, Frame(), std::move(slice).value(),
                 out != nullptr ? out + b * dim : nullptr, {}, dim, view, b * dim);
      }
    }
  } else if (grouped) {
    size_t i = 0;
    while (i < rows.size()) {
      size_t j = i;
      while (j < rows.size() && owner[j] == owner[i]) ++j;
      for (size_t b = i; b < j; b += chunk) {
        const size_t c = std::min<size_t>(chunk, j - b);
        std::vector<uint64_t> positions;
        if (!out_index.empty()) positions.assign(out_index.begin() + b, out_index.begin() + b + c);
        float* dst = out == nullptr ? nullptr : positions.empty() ? out + b * dim : out;
        StatusOr<Frame> slice = value_slice(b, c);
        if (!slice.ok()) {
          FailTicket(ticket, slice.status());
          continue;
        }
        SendPart(ticket, owner[i], op, table, c, 0,
                 Frame::CopyOf(rows.data() + b, c * sizeof(uint64_t)), std::move(slice).value(),
                 dst, std::move(positions), dim);
      }
      i = j;
    }
  } else {
    // Rows of several shards interleave: gather each shard's rows (and, for
    // a push, their values) into its own frames.
    std::vector<std::vector<uint64_t>> by_shard(num_shards);
    for (size_t i = 0; i < rows.size(); ++i) by_shard[owner[i]].push_back(i);
    for (uint32_t s = 0; s < num_shards; ++s) {
      const std::vector<uint64_t>& idx = by_shard[s];
      for (size_t b = 0; b < idx.size(); b += chunk) {
        const size_t c = std::min<size_t>(chunk, idx.size() - b);
        auto kf = Frame::Allocate(c * sizeof(uint64_t));
        if (!kf.ok()) {
          FailTicket(ticket, kf.status());
          continue;
        }
        auto* k = reinterpret_cast<uint64_t*>(kf->mutable_data());
        for (size_t x = 0; x < c; ++x) k[x] = rows[idx[b + x]];
        Frame vals;
        if (values != nullptr) {
          auto vf = Frame::Allocate(c * dim * sizeof(float));
          if (!vf.ok()) {
            FailTicket(ticket, vf.status());
            continue;
          }
          auto* v = reinterpret_cast<float*>(vf->mutable_data());
          for (size_t x = 0; x < c; ++x) {
            std::memcpy(v + x * dim, values->data() + idx[b + x] * dim, dim * sizeof(float));
          }
          vals = std::move(*vf);
        }
        std::vector<uint64_t> positions;
        if (op == Op::kPull) {
          for (size_t x = b; x < b + c; ++x) {
            positions.push_back(out_index.empty() ? idx[x] : out_index[idx[x]]);
          }
        }
        SendPart(ticket, s, op, table, c, 0, std::move(*kf), std::move(vals), out,
                 std::move(positions), dim);
      }
    }
  }
  Release(ticket, Status::Ok());  // the issuing hold
  return ticket;
}

StatusOr<Ticket> Client::Push(uint32_t table, std::span<const uint64_t> rows, SharedFloats values,
                              Callback done) {
  auto ticket = Issue(Op::kPush, table, rows, false, &values, nullptr, nullptr, std::move(done));
  if (ticket.ok() && cache_ != nullptr) {
    cache_->ApplyPush(table, 0, rows.data(), rows.size(), values.data());
  }
  return ticket;
}

StatusOr<Ticket> Client::PushDense(uint32_t table, SharedFloats values, Callback done) {
  auto ticket = Issue(Op::kPush, table, {}, true, &values, nullptr, nullptr, std::move(done));
  if (ticket.ok() && cache_ != nullptr) {
    cache_->ApplyPush(table, 0, nullptr, job_.tables[table].rows, values.data());
  }
  return ticket;
}

StatusOr<Ticket> Client::Pull(uint32_t table, std::span<const uint64_t> rows, float* out,
                              Callback done) {
  if (cache_ == nullptr || out == nullptr) {
    return Issue(Op::kPull, table, rows, false, nullptr, out, nullptr, std::move(done));
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
    return Issue(Op::kPull, table, rows, false, nullptr, out, nullptr, std::move(done));
  }
  return Issue(Op::kPull, table, missing, false, nullptr, out, nullptr, std::move(done), index);
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
  return Issue(Op::kPull, table, {}, true, nullptr, out, nullptr, std::move(done));
}

StatusOr<Ticket> Client::PullDense(uint32_t table, PulledValues* out, Callback done) {
  if (out == nullptr) return InvalidArgumentError("PULL: PulledValues output is null");
  return Issue(Op::kPull, table, {}, true, nullptr, nullptr, out, std::move(done));
}

void Client::HandleReply(uint32_t shard, std::vector<Frame>& frames) {
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
  Part& p = parts_.find(h.request_id)->second;
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
    if (h.waited_us > 0) {
      // The shards of one pull wait side by side: the pull waited the longest of them.
      if (auto t = tickets_.find(p.ticket); t != tickets_.end()) {
        t->second.waited_us = std::max(t->second.waited_us, h.waited_us);
      }
    }
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

void Client::ExpireDeadlines() {
  const auto now = SteadyClock::now();
  while (!deadlines_.empty() && deadlines_.top().first <= now) {
    const auto [deadline, rid] = deadlines_.top();
    deadlines_.pop();
    auto it = parts_.find(rid);
    // Answered, or given a new deadline since.
    if (it == parts_.end() || it->second.deadline != deadline) continue;
    Part& p = it->second;
    const Shard& shard = shards_[p.shard];
    if (shard.down) {
      // The server went away: its requests wait for it to come back.
      const auto give_up = shard.down_since + down_timeout_;
      if (give_up > now) {
        p.deadline = give_up;
        deadlines_.emplace(give_up, rid);
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
                        Describe(it->second, rid) + " got no reply within " +
                        std::to_string(timeout_.count()) +
                        " ms (client.request_timeout_ms); the server may be down, overloaded "
                        "or unreachable"));
  }
}

Status Client::Poll(int timeout_ms) {
  ExpireDeadlines();
  if (!deadlines_.empty()) {
    auto until = std::chrono::duration_cast<std::chrono::milliseconds>(
                     deadlines_.top().first - SteadyClock::now()).count() + 1;
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
      shard.down_since = SteadyClock::now();
      ++counters_.disconnects;
      PS_LOG_WARN("connection to server {} at {} dropped with {} requests in flight; waiting up "
                  "to {} ms (liveness.server_down_timeout_ms) for it to come back",
                  s, shard.endpoint, shard.in_flight, down_timeout_.count());
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
  std::vector<uint64_t> rids;
  for (const auto& [rid, part] : parts_) {
    if (part.shard == s) rids.push_back(rid);
  }
  std::sort(rids.begin(), rids.end());  // oldest first, as they were sent
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
    auto it = parts_.find(rid);
    if (it == parts_.end()) continue;  // a callback of an earlier one finished it
    Part& p = it->second;
    if (++p.resends > kMaxResends) {
      FinishPart(rid, UnavailableError(Describe(p, rid) + " was sent " +
                                       std::to_string(kMaxResends + 1) +
                                       " times and each time the connection to the server "
                                       "dropped before it answered; giving up"));
      continue;
    }
    copy.clear();
    uint64_t bytes = 0;
    for (size_t i = 0; i < p.message_frames; ++i) {
      copy.push_back(p.message[i].Clone());
      bytes += p.message[i].size();
    }
    Status sent = shard.socket->Send(copy);
    if (!sent.ok()) {
      FinishPart(rid, sent.WithContext(Describe(p, rid) + " could not be sent again"));
      continue;
    }
    ++counters_.resent;
    ++counters_.requests;
    counters_.bytes_sent += bytes;
    ArmDeadline(rid, p);
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
    const Ticket ticket = NewTicket([](const Status&) {});
    SendPartNow(ticket, s, Op::kHeartbeat, 0, 0, 0, Frame(), Frame(), nullptr, {}, 0, nullptr, 0,
                kFlagResume);
    Release(ticket, Status::Ok());
  }
}

Status Client::Wait(Ticket ticket) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) {
    return InvalidArgumentError("ticket " + std::to_string(ticket) +
                                " is unknown or was already waited for");
  }
  if (it->second.done) {
    return InvalidArgumentError("ticket " + std::to_string(ticket) +
                                " has a callback; use WaitAll() or Poll() to complete it");
  }
  while (it->second.remaining > 0) {
    PS_RETURN_IF_ERROR(Poll(1000));
    it = tickets_.find(ticket);
  }
  Status result = it->second.status;
  tickets_.erase(it);
  return result;
}

Status Client::WaitAll() {
  while (!parts_.empty()) PS_RETURN_IF_ERROR(Poll(1000));
  Status first;
  for (auto it = tickets_.begin(); it != tickets_.end();) {
    if (first.ok() && !it->second.status.ok()) first = it->second.status;
    it = tickets_.erase(it);
  }
  return first;
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
  const Ticket ticket = NewTicket(std::move(done));
  for (uint32_t s = 0; s < num_shards(); ++s) {
    SendPart(ticket, s, Op::kClock, 0, 0, 0, Frame(), Frame(), nullptr, {}, 0);
  }
  ++clock_;
  if (heartbeat_ != nullptr) {
    heartbeat_->set_clock(clock_);
    heartbeat_->set_cache_stats(counters_.cache_hits, counters_.cache_misses);
  }
  Release(ticket, Status::Ok());  // the issuing hold
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
  const Ticket ticket = NewTicket(nullptr);
  const uint64_t rid =
      SendPart(ticket, shard, op, 0, 0, 0, Frame(), Frame(), nullptr, {}, 0, nullptr, 0, flags);
  if (auto part = parts_.find(rid); part != parts_.end()) part->second.control = true;
  Release(ticket, Status::Ok());  // the issuing hold
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
