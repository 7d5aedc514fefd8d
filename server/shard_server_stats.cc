// A shard's STATS: its counters and state as one ShardStats
// (common/shard_stats.h), which the STATS reply, `ps_ctl status` and the
// Prometheus metrics all read.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/shard_stats.h"
#include "server/replication.h"
#include "server/shard_server.h"

namespace ps {
namespace {

int64_t Milliseconds(Clock::Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

std::vector<ShardStats::Worker> WorkerRows(const ClockTable& clocks,
                                           const WorkerRegistry& workers,
                                           Clock::TimePoint now) {
  std::vector<ShardStats::Worker> rows;
  for (uint32_t w = 0; w < workers.size(); ++w) {
    const WorkerState& state = workers.worker(w);
    rows.push_back({.clock = clocks.clock(w),
                    .target = state.target_clock,
                    .silent_ms = Milliseconds(now - state.last_seen),
                    .late_pushes = state.late_pushes,
                    .cache_hits = state.cache_hits,
                    .cache_misses = state.cache_misses,
                    .dead = state.dead,
                    .left = state.left});
  }
  return rows;
}

// The process's resident memory: VmRSS of /proc/self/status, 0 where
// there is none.
uint64_t ResidentBytes() {
  unsigned long long rss_kib = 0;
  if (std::FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[128];
    while (std::fgets(line, sizeof(line), f) != nullptr &&
           std::sscanf(line, "VmRSS: %llu kB", &rss_kib) != 1) {
    }
    std::fclose(f);
  }
  return rss_kib * 1024;
}

// What the store holds for its owned rows, values and optimizer state
// arrays at 4 bytes a float (a hashed table: its rows and index, and its
// admission sketch). Not counted: per-clock sums under
// aggregation, blocks still shared with replies (queued_reply_bytes),
// replication.
uint64_t ValuesBytes(const ShardStore& store, const JobOptions& job) {
  uint64_t bytes = 0;
  for (size_t id = 0; id < store.layouts().size(); ++id) {
    const TableLayout& t = store.layouts()[id];
    if (t.hashed) {
      bytes += store.stored_bytes(static_cast<uint32_t>(id)) +
               store.sketch_bytes(static_cast<uint32_t>(id));
      continue;
    }
    bytes += t.owned.size() * t.dim * 4 * (1 + job.tables[id].optimizer.Slots());
  }
  return bytes;
}

std::vector<ShardStats::Table> TableRows(const ShardStore& store) {
  std::vector<ShardStats::Table> rows;
  for (uint32_t id = 0; id < store.layouts().size(); ++id) {
    const TableLayout& t = store.layouts()[id];
    rows.push_back({.name = t.name,
                    .rows = t.rows,
                    .dim = t.dim,
                    .owned_begin = t.owned.begin,
                    .owned_end = t.owned.end,
                    .non_finite_rows = store.non_finite_rows(id),
                    .refused_rows = store.refused_rows(id),
                    .keys = t.hashed ? "hashed" : "range",
                    .stored_rows = store.stored_rows(id),
                    .max_rows = store.max_rows(id),
                    .stored_bytes = store.stored_bytes(id),
                    .dropped_rows = store.dropped_rows(id),
                    .unadmitted_rows = store.unadmitted_rows(id),
                    .sketch_bytes = store.sketch_bytes(id),
                    .evicted_rows = store.evicted_rows(id),
                    .expired_rows = store.expired_rows(id)});
  }
  return rows;
}

}  // namespace

ShardStats ShardServer::Stats() const {
  ShardStats s;
  const Clock::TimePoint now = clock_->Now();
  s.shard = shard_;
  s.endpoint = endpoint_;
  s.uptime_s = std::chrono::duration<double>(now - started_).count();
  s.pushes = counters_.pushes;
  s.pulls = counters_.pulls;
  s.errors = counters_.errors;
  s.clocks = counters_.clocks;
  s.bytes_in = counters_.bytes_in;
  s.bytes_out = counters_.bytes_out;
  s.copy_on_write = store_->copy_on_write_count();
  s.pushes_per_s = pushes_per_s_;
  s.pulls_per_s = pulls_per_s_;
  s.consistency =
      bound_ == kUnboundedStaleness ? std::string("asp") : "staleness " + std::to_string(bound_);
  s.min_clock = clocks_.min_clock();
  s.slowest_worker = clocks_.slowest_worker();
  s.waiting_pulls = waiting_.pulls();
  s.pulls_waited = counters_.pulls_waited;
  s.max_blocked_lead = counters_.max_blocked_lead;
  s.workers = WorkerRows(clocks_, workers_, now);
  if (clocks_.backups()) {
    s.backup_workers = ShardStats::BackupWorkers{job_.consistency.backup_workers,
                                                 clocks_.quorum(), counters_.late_pushes};
  }
  s.started_clock = started_clock_;
  s.map_epoch = reshard_->map_epoch();
  s.handover_clock = reshard_->prepared() ? reshard_->boundary() : -1;
  s.reshard_followers = static_cast<uint32_t>(replication_->followers());
  s.reshard_followers_ready = static_cast<uint32_t>(replication_->followers(/*with_copy=*/true));
  s.lost_clocks = lost_clocks_;
  s.repeated_pushes = counters_.repeated_pushes;
  s.resumes = counters_.resumes;
  s.refused_clocks = counters_.refused_clocks;
  s.refused_results = counters_.refused_results;
  s.refused_sum_clocks = counters_.refused_sum_clocks;
  s.max_resume_clocks = admission_->resume_window();
  s.refusals_not_logged = counters_.refusals_not_logged;
  s.sum_clocks = store_->sum_clocks();
  s.sum_bytes = store_->sum_bytes();
  s.parked_pushes = waiting_.pushes();
  s.parked_push_bytes = waiting_.push_bytes();
  StatsLimits(s);
  s.checkpoint = {.enabled = checkpoints_ != nullptr,
                  .dir = checkpoints_ != nullptr ? checkpoints_->path() : std::string(),
                  .last_clock = checkpoint_trigger_ != nullptr ? checkpoint_trigger_->last_clock()
                                                               : started_clock_,
                  .writing = checkpoint_trigger_ != nullptr && checkpoint_trigger_->writing(),
                  .started = checkpoint_trigger_ != nullptr ? checkpoint_trigger_->started() : 0,
                  .requests_waiting =
                      checkpoint_trigger_ != nullptr ? checkpoint_trigger_->requests_waiting() : 0};
  if (job_.cluster.evaluator) {
    s.evaluator = ShardStats::Evaluator{workers_.EvaluatorState(),
                                        Milliseconds(now - workers_.evaluator().last_seen)};
  }
  if (!failed_.ok()) s.failed = failed_.message();
  // A factor-1 shard's log sends only to the next map's servers that
  // follow it: no replica to compare the checksums with.
  if (replication_->active() && job_.replication.factor > 1) {
    s.replication = replication_->Stats();
    s.checksums = Checksums(*store_);
  }
  if (job_.replication.factor > 1) {
    s.primary = ShardStats::Primary{epoch(), !Fenced(), counters_.fenced_refusals};
  }
  s.rss_bytes = ResidentBytes();
  s.values_bytes = ValuesBytes(*store_, job_);
  s.security = access_->enabled() ? "curve" : "none";
  s.refused_handshakes = access_->refused_handshakes();
  s.failed_handshakes = connections_->failed_handshakes();
  s.refused_requests = access_->refused_requests();
  s.tables = TableRows(*store_);
  return s;
}

void ShardServer::StatsLimits(ShardStats& s) const {
  s.queued_reply_bytes = queued_replies_.total();
  s.max_connection_bytes = queued_replies_.max_per_connection();
  s.connections_queued = queued_replies_.connections();
  s.max_queued_reply_bytes = max_queued_reply_bytes_;
  s.pulls_refused_queued_bytes = counters_.pulls_refused_queued_bytes;
  s.pulls_refused_waiting = counters_.pulls_refused_waiting;
  s.replies_dropped = counters_.replies_dropped;
  s.connections_open = connections_->open();
  s.connections_refused = connections_->refused();
  s.max_connections = connections_->max();
}

}  // namespace ps
