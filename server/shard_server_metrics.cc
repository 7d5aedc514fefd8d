// A shard's metrics in Prometheus's text format (config/README.md,
// "Metrics", lists them). Written on the serving thread from the same
// ShardStats that STATS reports, so a scrape and `ps_ctl status` agree;
// only the per-op request counts, the histograms and the hot rows are
// the metrics' own.
#include <algorithm>
#include <chrono>
#include <string>

#include "server/shard_server.h"

namespace ps {
namespace {

// Requests by op: how many, how many were answered with ERROR, and the
// time spent handling each (a pull's wait for slower workers is not in
// it: see ps_server_staleness_wait_seconds). The ops and their labels are
// the ops table's (common/ops.h).
template <typename OpMetrics>
void WriteRequests(const OpMetrics& ops, MetricsWriter& out) {
  out.Family("ps_server_requests_total", "counter",
             "Requests received, by op (invalid: could not be decoded)");
  for (const OpTraits& op : kOps) {
    if (op.metrics_label == nullptr) continue;
    out.Sample("ps_server_requests_total", {{"op", op.metrics_label}},
               static_cast<double>(ops[static_cast<size_t>(op.op)].requests));
  }
  out.Family("ps_server_request_errors_total", "counter",
             "Requests answered with ERROR, by op");
  for (const OpTraits& op : kOps) {
    if (op.metrics_label == nullptr) continue;
    out.Sample("ps_server_request_errors_total", {{"op", op.metrics_label}},
               static_cast<double>(ops[static_cast<size_t>(op.op)].errors));
  }
  out.Family("ps_server_request_duration_seconds", "histogram",
             "Time the shard spent handling a request, by op (waits for slower workers "
             "excluded)");
  for (const OpTraits& op : kOps) {
    if (op.metrics_label == nullptr) continue;
    ops[static_cast<size_t>(op.op)].seconds.Write(out, "ps_server_request_duration_seconds",
                                                  {{"op", op.metrics_label}});
  }
}

void WriteTraffic(const ShardStats& s, MetricsWriter& out) {
  out.Counter("ps_server_errors_total", "Requests and waiting pulls answered with ERROR",
              static_cast<double>(s.errors));
  out.Counter("ps_server_pushes_total", "Pushes accepted (STATS pushes)",
              static_cast<double>(s.pushes));
  out.Counter("ps_server_pulls_total", "Pulls served (STATS pulls)",
              static_cast<double>(s.pulls));
  out.Counter("ps_server_clocks_total", "CLOCK requests accepted", static_cast<double>(s.clocks));
  out.Counter("ps_server_received_bytes_total", "Bytes of requests, every frame",
              static_cast<double>(s.bytes_in));
  out.Counter("ps_server_sent_bytes_total", "Bytes of replies, every frame",
              static_cast<double>(s.bytes_out));
}

// Consistency: the staleness bound at work.
void WriteConsistency(const ShardStats& s, const Histogram& wait_seconds, MetricsWriter& out) {
  out.Gauge("ps_server_min_clock", "The slowest worker's clock", static_cast<double>(s.min_clock));
  out.Gauge("ps_server_waiting_pulls", "Pulls waiting for slower workers now",
            static_cast<double>(s.waiting_pulls));
  out.Counter("ps_server_pulls_waited_total", "Pulls that had to wait for slower workers",
              static_cast<double>(s.pulls_waited));
  out.Family("ps_server_staleness_wait_seconds", "histogram",
             "How long each pull that waited for slower workers waited");
  wait_seconds.Write(out, "ps_server_staleness_wait_seconds");
}

// Workers: clock, lag behind the fastest, silence, state, cache.
void WriteWorkers(const ShardStats& s, MetricsWriter& out) {
  int64_t fastest = 0;
  for (const ShardStats::Worker& w : s.workers) fastest = std::max(fastest, w.clock);
  // One family with a sample per worker.
  const auto per_worker = [&](const char* name, const char* type, const char* help,
                              const auto& value) {
    out.Family(name, type, help);
    for (uint32_t w = 0; w < s.workers.size(); ++w) {
      out.Sample(name, {{"worker", std::to_string(w)}}, static_cast<double>(value(s.workers[w])));
    }
  };
  using Worker = ShardStats::Worker;
  per_worker("ps_server_worker_clock", "gauge", "Each worker's clock as this shard has it",
             [](const Worker& w) { return w.clock; });
  per_worker("ps_server_worker_lag_clocks", "gauge",
             "Clocks each worker is behind the fastest worker",
             [&](const Worker& w) { return fastest - w.clock; });
  per_worker("ps_server_worker_silent_seconds", "gauge",
             "Seconds since each worker's last request or heartbeat",
             [](const Worker& w) { return static_cast<double>(w.silent_ms) / 1000; });
  out.Gauge("ps_server_dead_workers", "Workers silent past liveness.timeout_ms",
            static_cast<double>(s.DeadWorkers().size()));
  out.Gauge("ps_server_departed_workers", "Workers that finished and left the job",
            static_cast<double>(s.LeftWorkers().size()));
  per_worker("ps_server_worker_cache_hits_total", "counter",
             "Parameter-cache hits each worker's heartbeats reported",
             [](const Worker& w) { return w.cache_hits; });
  per_worker("ps_server_worker_cache_misses_total", "counter",
             "Parameter-cache misses each worker's heartbeats reported",
             [](const Worker& w) { return w.cache_misses; });
  if (s.backup_workers) {
    per_worker("ps_server_worker_late_pushes_total", "counter",
               "Each worker's pushes dropped for coming after their clock's quorum "
               "(consistency.backup_workers)",
               [](const Worker& w) { return w.late_pushes; });
  }
}

// Memory, checkpoints and recovery.
void WriteRecovery(const ShardStats& s, MetricsWriter& out) {
  out.Counter("ps_server_copy_on_write_total",
              "Store blocks copied because a reply, a replica's copy or a checkpoint being written "
              "still held them when a push came",
              static_cast<double>(s.copy_on_write));
  out.Gauge("ps_server_queued_reply_bytes", "Bytes of replies not yet taken by the kernel",
            static_cast<double>(s.queued_reply_bytes));
  out.Counter("ps_server_checkpoints_started_total", "Checkpoint generations started",
              static_cast<double>(s.checkpoint.started));
  out.Gauge("ps_server_last_checkpoint_clock", "Clock of the newest generation written or restored",
            static_cast<double>(s.checkpoint.last_clock));
  out.Gauge("ps_server_checkpoint_writing", "1 while a checkpoint is being written",
            s.checkpoint.writing ? 1 : 0);
  out.Gauge("ps_server_restored_clock", "The clock the shard started at (0, or a restored generation)",
            static_cast<double>(s.started_clock));
  out.Gauge("ps_server_lost_clocks", "Clocks of updates lost by a restart from a checkpoint",
            static_cast<double>(s.lost_clocks));
  out.Counter("ps_server_repeated_pushes_total",
              "Pushes sent again after a reconnect, acknowledged and not applied twice",
              static_cast<double>(s.repeated_pushes));
  out.Counter("ps_server_resumes_total", "Workers that resumed on this shard after a restart",
              static_cast<double>(s.resumes));
}

// Refusals that protect the shard.
void WriteRefusals(const ShardStats& s, MetricsWriter& out) {
  out.Counter("ps_server_refused_clocks_total", "Requests refused for a clock the protocol forbids",
              static_cast<double>(s.refused_clocks));
  out.Counter("ps_server_refused_results_total", "Pushes refused for a result that is not finite",
              static_cast<double>(s.refused_results));
  out.Counter("ps_server_refused_sum_clocks_total",
              "Pushes refused under bsp aggregate for a clock the shard holds no sum for",
              static_cast<double>(s.refused_sum_clocks));
  out.Gauge("ps_server_sum_bytes", "Bytes of the sums of clocks not applied yet (bsp aggregate)",
            static_cast<double>(s.sum_bytes));
  out.Counter("ps_server_refusals_not_logged_total",
              "Rejected or refused requests not logged on a line of their own (one line per peer "
              "and kind per interval)",
              static_cast<double>(s.refusals_not_logged));
  out.Family("ps_server_pulls_refused_total", "counter",
             "Pulls refused over a limit (queued_bytes: server.max_queued_reply_bytes; waiting: "
             "server.max_waiting_pulls_per_worker)");
  out.Sample("ps_server_pulls_refused_total", {{"reason", "queued_bytes"}},
             static_cast<double>(s.pulls_refused_queued_bytes));
  out.Sample("ps_server_pulls_refused_total", {{"reason", "waiting"}},
             static_cast<double>(s.pulls_refused_waiting));
  out.Gauge("ps_server_connections_open", "Connections the shard holds open",
            static_cast<double>(s.connections_open));
  out.Counter("ps_server_connections_refused_total",
              "Connections closed at once for coming past server.max_connections",
              static_cast<double>(s.connections_refused));
  out.Counter("ps_server_replies_dropped_total", "Replies ZeroMQ refused (queue full or peer gone)",
              static_cast<double>(s.replies_dropped));
}

// Hashed tables: rows held against the bound, and pushes dropped at it.
void WriteHashedTables(const ShardStats& s, MetricsWriter& out) {
  const auto hashed = [&s] {
    std::vector<const ShardStats::Table*> tables;
    for (const ShardStats::Table& t : s.tables) {
      if (t.keys == "hashed") tables.push_back(&t);
    }
    return tables;
  }();
  if (hashed.empty()) return;
  const struct {
    const char* name;
    const char* type;
    const char* help;
    uint64_t ShardStats::Table::*field;
  } families[] = {
      {"ps_server_table_rows", "gauge", "Rows a hashed table holds on this shard",
       &ShardStats::Table::stored_rows},
      {"ps_server_table_max_rows", "gauge",
       "The most rows a hashed table may hold on this shard (max_rows or max_mb)",
       &ShardStats::Table::max_rows},
      {"ps_server_table_bytes", "gauge", "Bytes of a hashed table's rows and index on this shard",
       &ShardStats::Table::stored_bytes},
      {"ps_server_table_dropped_rows_total", "counter",
       "Pushed rows of ids without a row dropped because the hashed table was full",
       &ShardStats::Table::dropped_rows},
      {"ps_server_table_unadmitted_rows_total", "counter",
       "Pushed rows of ids the admission filter has not admitted yet (counted and dropped)",
       &ShardStats::Table::unadmitted_rows},
      {"ps_server_table_sketch_bytes", "gauge",
       "Bytes of a hashed table's admission sketch on this shard (0 without admit)",
       &ShardStats::Table::sketch_bytes},
      {"ps_server_table_evicted_rows_total", "counter",
       "Rows a hashed table evicted at its bound to make room for new ids (evict.policy)",
       &ShardStats::Table::evicted_rows},
      {"ps_server_table_expired_rows_total", "counter",
       "Rows a hashed table evicted for idleness (evict.idle_clocks)",
       &ShardStats::Table::expired_rows},
  };
  for (const auto& f : families) {
    out.Family(f.name, f.type, f.help);
    for (const ShardStats::Table* t : hashed) {
      out.Sample(f.name, {{"table", t->name}}, static_cast<double>(t->*f.field));
    }
  }
}

void WritePrimary(const ShardStats& s, MetricsWriter& out) {
  if (!s.primary) return;
  out.Gauge("ps_server_epoch", "The membership epoch this primary serves at",
            static_cast<double>(s.primary->epoch));
  out.Gauge("ps_server_accepting_writes", "1 while this primary accepts writes (not fenced)",
            s.primary->accepting ? 1 : 0);
  out.Counter("ps_server_fenced_refusals_total", "Worker requests refused while fenced",
              static_cast<double>(s.primary->fenced_refusals));
}

}  // namespace

std::string ShardServer::MetricsText() const {
  const ShardStats s = Stats();
  MetricsWriter out({{"shard", std::to_string(s.shard)}});
  out.Family("ps_server_info", "gauge",
             "1, with the shard's endpoint and consistency mode as labels");
  out.Sample("ps_server_info", {{"endpoint", s.endpoint}, {"consistency", s.consistency}}, 1);
  out.Gauge("ps_server_uptime_seconds", "Seconds since the shard started serving", s.uptime_s);
  WriteRequests(op_metrics_, out);
  WriteTraffic(s, out);
  WriteConsistency(s, staleness_wait_seconds_, out);
  WriteWorkers(s, out);
  WriteRecovery(s, out);
  WriteRefusals(s, out);
  WriteHashedTables(s, out);
  // The rows sparse pushes hit most (server/hot_rows.h: every 16th row of
  // each push counted, so the counts are estimates).
  out.Family("ps_server_hot_row_pushes", "gauge",
             "Estimated pushes of the 10 rows sparse pushes hit most (Space-Saving, 64 "
             "counters, every 16th row of a push counted)");
  for (const HotRows::Entry& e : hot_rows_.Top(10)) {
    out.Sample("ps_server_hot_row_pushes",
               {{"table", e.table < job_.tables.size() ? job_.tables[e.table].name
                                                      : std::to_string(e.table)},
                {"row", std::to_string(e.row)}},
               static_cast<double>(e.count));
  }
  WritePrimary(s, out);
  return out.Take();
}

void ShardServer::PublishMetrics(bool now) {
  if (metrics_endpoint_ == nullptr) return;
  const Clock::TimePoint t = clock_->Now();
  if (!now && t - metrics_published_ < std::chrono::milliseconds(job_.metrics.interval_ms)) {
    return;
  }
  metrics_published_ = t;
  metrics_endpoint_->Publish(MetricsText());
}

}  // namespace ps
