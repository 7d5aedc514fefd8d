// A shard's report with every part filled (common/shard_stats.h), for
// the tests of its views and of what ps_ctl status makes of it.
#ifndef PS_TESTS_UTIL_EXAMPLE_STATS_H_
#define PS_TESTS_UTIL_EXAMPLE_STATS_H_

#include "common/shard_stats.h"

namespace ps {

// A worker at `clock` that trains to `target`, heard from `silent_ms` ago.
inline ShardStats::Worker ExampleWorker(int64_t clock, int64_t target, int64_t silent_ms) {
  ShardStats::Worker w;
  w.clock = clock;
  w.target = target;
  w.silent_ms = silent_ms;
  return w;
}

// Shard 1 of two, a primary of a replicated job under ssp 3 with backup
// workers, an evaluator and checkpoints (every optional part present);
// worker 1 is dead, worker 2 left.
inline ShardStats ExampleShardStats() {
  ShardStats s;
  s.shard = 1;
  s.endpoint = "tcp://127.0.0.1:40002";
  s.uptime_s = 12.5;
  s.pushes = 600;
  s.pulls = 20;
  s.errors = 1;
  s.clocks = 90;
  s.bytes_in = 4000000;
  s.bytes_out = 2000000;
  s.copy_on_write = 3;
  s.pushes_per_s = 100.5;
  s.pulls_per_s = 20;
  s.consistency = "staleness 3";
  s.min_clock = 48;
  s.slowest_worker = 1;
  s.waiting_pulls = 2;
  s.pulls_waited = 7;
  s.max_blocked_lead = 3;
  s.workers = {ExampleWorker(60, 100, 12), ExampleWorker(48, 100, 2300),
               ExampleWorker(61, 0, 40)};
  s.workers[0].cache_hits = 1;
  s.workers[0].cache_misses = 3;
  s.workers[1].late_pushes = 4;
  s.workers[1].dead = true;
  s.workers[2].left = true;
  s.backup_workers = ShardStats::BackupWorkers{1, 2, 4};
  s.started_clock = 10;
  s.lost_clocks = 2;
  s.repeated_pushes = 5;
  s.resumes = 1;
  s.refused_clocks = 6;
  s.refused_results = 7;
  s.refused_sum_clocks = 8;
  s.max_resume_clocks = 85;
  s.refusals_not_logged = 9;
  s.sum_clocks = 2;
  s.sum_bytes = 1600;
  s.parked_pushes = 1;
  s.parked_push_bytes = 64;
  s.queued_reply_bytes = 100;
  s.max_connection_bytes = 50;
  s.connections_queued = 2;
  s.max_queued_reply_bytes = 268435456;
  s.pulls_refused_queued_bytes = 11;
  s.pulls_refused_waiting = 12;
  s.replies_dropped = 13;
  s.connections_open = 3;
  s.connections_refused = 14;
  s.max_connections = 896;
  s.checkpoint.enabled = true;
  s.checkpoint.dir = "/tmp/my checkpoints";
  s.checkpoint.last_clock = 40;
  s.checkpoint.writing = true;
  s.checkpoint.started = 3;
  s.checkpoint.requests_waiting = 1;
  s.evaluator = ShardStats::Evaluator{"reading", 150};
  s.failed = "checkpoint write: disk full";
  s.replication = ShardStats::Replication{2, 5, 700, 699, {{1, "acked", 699}}};
  s.checksums = {{"w", 0xbeef}};
  s.primary = ShardStats::Primary{5, true, 0};
  s.rss_bytes = 52428800;
  s.values_bytes = 16000000;
  s.security = "curve";
  s.refused_handshakes = 15;
  s.failed_handshakes = 16;
  s.refused_requests = 17;
  s.tables = {{"w", 1000, 4, 500, 1000, 0, 2}};
  return s;
}

}  // namespace ps

#endif  // PS_TESTS_UTIL_EXAMPLE_STATS_H_
