#include "worker/param_store.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/logging.h"
#include "common/wire.h"
#include "store/shard_store.h"

namespace ps {

// ---------------------------------------------------------------------------
// RemoteParamStore

RemoteParamStore::RemoteParamStore(const JobOptions& job, Client* client)
    : client_(client),
      backups_(job.consistency.backup_workers > 0),
      description_(std::to_string(job.cluster.servers.size()) +
                   (job.cluster.servers.size() == 1 ? " shard, " : " shards, ") +
                   ConsistencyName(job.consistency)) {}

int64_t RemoteParamStore::CatchUp(int64_t step) {
  const int64_t clock = client_->CatchUp();
  if (clock > step && !caught_up_) {
    // The first time only: the progress lines count the rest.
    caught_up_ = true;
    PS_LOG_INFO("step {}: the job is at clock {} already; this worker continues there "
                "(consistency.backup_workers: its gradients of the clocks between would "
                "arrive late and be dropped)",
                step, clock);
  }
  return std::max(step, clock);
}

Status RemoteParamStore::DoPullDense(uint32_t table, float* out) {
  PS_ASSIGN_OR_RETURN(Ticket pull, client_->PullDense(table, out));
  return client_->Wait(pull);
}

Status RemoteParamStore::DoPull(uint32_t table, std::span<const uint64_t> rows, float* out) {
  PS_ASSIGN_OR_RETURN(Ticket pull, client_->Pull(table, rows, out));
  return client_->Wait(pull);
}

Status RemoteParamStore::DoPullMany(std::span<const RowsToPull> pulls) {
  std::vector<Ticket> tickets;
  Status first;
  for (const RowsToPull& p : pulls) {
    StatusOr<Ticket> t = client_->Pull(p.table, p.rows, p.out);
    if (!t.ok()) {
      first = t.status();
      break;
    }
    tickets.push_back(*t);
  }
  // Every issued pull is waited for: `out` must not be written after return.
  for (Ticket t : tickets) {
    Status s = client_->Wait(t);
    if (first.ok() && !s.ok()) first = std::move(s);
  }
  return first;
}

Status RemoteParamStore::DoPushDense(uint32_t table, SharedFloats gradient) {
  PS_ASSIGN_OR_RETURN(Ticket push, client_->PushDense(table, std::move(gradient)));
  pushes_.push_back(push);
  return Status::Ok();
}

Status RemoteParamStore::DoPush(uint32_t table, std::span<const uint64_t> rows,
                              SharedFloats gradient) {
  PS_ASSIGN_OR_RETURN(Ticket push, client_->Push(table, rows, std::move(gradient)));
  pushes_.push_back(push);
  return Status::Ok();
}

Status RemoteParamStore::WaitFor(std::vector<Ticket>* tickets) {
  Status first;
  for (Ticket t : *tickets) {
    Status s = client_->Wait(t);
    if (first.ok() && !s.ok()) first = std::move(s);
  }
  tickets->clear();
  return first;
}

Status RemoteParamStore::DoEndStepAsync() {
  // The clock report follows the pushes on each shard's connection, so it
  // is sent at once.
  StatusOr<Ticket> clock = client_->Clock();
  Status before = WaitFor(&in_flight_);
  in_flight_ = std::move(pushes_);
  pushes_.clear();
  if (clock.ok()) in_flight_.push_back(*clock);
  if (!before.ok()) return before;
  return clock.status();
}

Status RemoteParamStore::DoEndStep() {
  Status sent = DoEndStepAsync();
  Status done = DoFlush();
  return sent.ok() ? done : sent;
}

Status RemoteParamStore::DoFlush() { return WaitFor(&in_flight_); }

double RemoteParamStore::staleness_wait_seconds() const {
  return static_cast<double>(client_->counters().staleness_wait_us) * 1e-6;
}

void RemoteParamStore::WriteMetrics(MetricsWriter& out) const {
  const ClientCounters c = client_->counters();
  out.Counter("ps_worker_requests_total", "Requests sent to the shards (one per shard and part)",
              static_cast<double>(c.requests));
  out.Counter("ps_worker_request_errors_total", "ERROR replies from the shards",
              static_cast<double>(c.errors));
  out.Counter("ps_worker_request_timeouts_total", "Requests that passed their deadline",
              static_cast<double>(c.timeouts));
  out.Counter("ps_worker_sent_bytes_total", "Bytes sent to the shards",
              static_cast<double>(c.bytes_sent));
  out.Counter("ps_worker_received_bytes_total", "Bytes received from the shards",
              static_cast<double>(c.bytes_received));
  out.Counter("ps_worker_cache_hits_total", "Rows read from the parameter cache",
              static_cast<double>(c.cache_hits));
  out.Counter("ps_worker_cache_misses_total", "Rows pulled from the shards with the cache on",
              static_cast<double>(c.cache_misses));
  out.Counter("ps_worker_reconnects_total", "Connections to a shard made again after a drop",
              static_cast<double>(c.reconnects));
  out.Counter("ps_worker_resent_total", "Requests sent again after a reconnect",
              static_cast<double>(c.resent));
  out.Counter("ps_worker_summed_rows_total",
              "Hashed pushes: rows of ids repeated in a push, summed into one",
              static_cast<double>(c.summed_rows));
  out.Counter("ps_worker_residuals_dropped_total",
              "Hashed 16-bit pushes: ids whose rounding residual was let go at its bound",
              static_cast<double>(c.residuals_dropped));
  if (backups_) {
    out.Counter("ps_worker_late_pushes_total",
                "Push requests dropped for coming after their clock's quorum "
                "(consistency.backup_workers)",
                static_cast<double>(c.late_pushes));
    out.Counter("ps_worker_clocks_skipped_total",
                "Clocks skipped to continue at the job's clock (consistency.backup_workers)",
                static_cast<double>(c.clocks_skipped));
  }
}

// ---------------------------------------------------------------------------
// LocalParamStore

LocalParamStore::LocalParamStore(std::unique_ptr<ShardStore> store) : store_(std::move(store)) {}

LocalParamStore::~LocalParamStore() = default;

StatusOr<std::unique_ptr<LocalParamStore>> LocalParamStore::Create(const JobOptions& job) {
  // One shard that owns every row: the servers' code, without the servers.
  JobOptions one = job;
  // A hashed table's bound is per shard: the one shard holds what all of
  // them would, so that the same job trains the same rows here.
  const uint64_t shards = job.cluster.servers.size();
  for (TableOptions& table : one.tables) {
    table.max_rows = std::min<uint64_t>(table.max_rows * shards, kMaxHashedRows);
    table.max_mb = std::min<uint64_t>(table.max_mb * shards, kMaxHashedMb);
  }
  one.cluster.servers.resize(1);
  one.cluster.workers = 1;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ShardStore> store, ShardStore::Create(one, 0));
  return std::unique_ptr<LocalParamStore>(new LocalParamStore(std::move(store)));
}

Status LocalParamStore::Check(const char* op, uint32_t table, std::span<const uint64_t> rows,
                              bool dense, size_t values) const {
  const std::span<const TableLayout> tables = store_->layouts();
  if (table >= tables.size()) {
    return InvalidArgumentError(std::string(op) + ": no table " + std::to_string(table) +
                                " (the job has " + std::to_string(tables.size()) + ")");
  }
  const TableLayout& t = tables[table];
  if (t.hashed && dense) {
    return InvalidArgumentError(std::string(op) + " " + t.name +
                                ": a hashed table has no dense form; name its ids");
  }
  const uint64_t count = dense ? t.rows : rows.size();
  // A hashed table takes any id.
  for (uint64_t row : t.hashed ? std::span<const uint64_t>() : rows) {
    if (row >= t.rows) {
      return InvalidArgumentError(std::string(op) + " " + t.name + ": row " + std::to_string(row) +
                                  " is out of range (the table has " + std::to_string(t.rows) +
                                  " rows)");
    }
  }
  if (values != SIZE_MAX && values != count * t.dim) {
    return InvalidArgumentError(std::string(op) + " " + t.name + ": " + std::to_string(values) +
                                " values for " + std::to_string(count) + " rows of dim " +
                                std::to_string(t.dim));
  }
  return Status::Ok();
}

namespace {

// A request as a shard would decode it, for the in-process store.
Request LocalRequest(Op op, uint32_t table, const TableLayout& t, std::span<const uint64_t> rows,
                     bool dense, std::span<const float> values) {
  Request request;
  request.header.op = op;
  request.header.table = table;
  request.header.dim = t.dim;
  request.header.count = dense ? t.rows : rows.size();
  if (dense) {
    request.header.flags = kFlagDenseRange;
    request.header.first_row = 0;
  } else {
    request.keys = rows;
  }
  request.values = values;
  return request;
}

}  // namespace

Status LocalParamStore::Read(uint32_t table, std::span<const uint64_t> rows, bool dense,
                             float* out) {
  PS_RETURN_IF_ERROR(Check("PULL", table, rows, dense, SIZE_MAX));
  const Request request = LocalRequest(Op::kPull, table, store_->layouts()[table], rows, dense, {});
  std::vector<Frame> frames;
  PS_RETURN_IF_ERROR(store_->ReadRows(request, &frames));
  auto* dst = reinterpret_cast<std::byte*>(out);
  for (const Frame& f : frames) {
    std::memcpy(dst, f.data(), f.size());
    dst += f.size();
  }
  return Status::Ok();
}

Status LocalParamStore::DoPullDense(uint32_t table, float* out) {
  return Read(table, {}, true, out);
}

Status LocalParamStore::DoPull(uint32_t table, std::span<const uint64_t> rows, float* out) {
  return Read(table, rows, false, out);
}

Status LocalParamStore::DoPushDense(uint32_t table, SharedFloats gradient) {
  PS_RETURN_IF_ERROR(Check("PUSH", table, {}, true, gradient.size()));
  return store_->ApplyPush(LocalRequest(Op::kPush, table, store_->layouts()[table], {}, true,
                                        {gradient.data(), gradient.size()}),
                           clock_);
}

Status LocalParamStore::DoPush(uint32_t table, std::span<const uint64_t> rows,
                             SharedFloats gradient) {
  PS_RETURN_IF_ERROR(Check("PUSH", table, rows, false, gradient.size()));
  return store_->ApplyPush(LocalRequest(Op::kPush, table, store_->layouts()[table], rows, false,
                                        {gradient.data(), gradient.size()}),
                           clock_);
}

Status LocalParamStore::DoEndStep() {
  ++clock_;
  return Status::Ok();
}

}  // namespace ps
