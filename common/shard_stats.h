// What a shard reports about itself (STATS), as one struct with three
// views: JSON (the STATS reply a request with kFlagStatsJson asks for, and
// `ps_ctl status --json`), the text lines of `ps_ctl stats` (the STATS
// reply otherwise), and the Prometheus samples the shard publishes
// (ShardServer::MetricsText writes the counters from this struct). A
// counter is added as a field here, its line in ShardStatsText, and its
// sample in MetricsText; the JSON view lists the fields once, in
// shard_stats_json.cc.
//
// A primary fills every part but `backup`; a backup replica (server/
// replication.h) fills `shard`, `endpoint`, `backup`, `min_clock`,
// `workers[].clock` and `checksums` only.
//
// Thread safety: plain values; the functions are of their arguments only.
#ifndef PS_COMMON_SHARD_STATS_H_
#define PS_COMMON_SHARD_STATS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ps {

struct ShardStats {
  // One worker rank as this shard has it.
  struct Worker {
    int64_t clock = 0;          // clocks it has finished
    int64_t target = 0;         // the clock its HELLO said it trains to; 0: not said
    int64_t silent_ms = 0;      // since its last request or heartbeat (negative while starting)
    uint64_t late_pushes = 0;   // pushes dropped after their clock's quorum (backup_workers)
    uint64_t cache_hits = 0;    // parameter-cache counts its last heartbeat reported
    uint64_t cache_misses = 0;
    bool dead = false;          // silent for liveness.timeout_ms
    bool left = false;          // said goodbye
  };
  // consistency.backup_workers > 0.
  struct BackupWorkers {
    uint32_t backup_workers = 0;
    uint32_t quorum = 0;
    uint64_t late_pushes = 0;
  };
  struct Checkpoint {
    bool enabled = false;         // the job has checkpoint.dir (the text shows the lines)
    std::string dir;              // this shard's directory under it
    int64_t last_clock = 0;       // of the newest generation written or restored
    bool writing = false;         // a generation is being written now
    uint64_t started = 0;         // generations started
    uint64_t requests_waiting = 0;  // CHECKPOINT requests waiting for the write
  };
  // cluster.evaluator.
  struct Evaluator {
    std::string state;  // "starting", "reading", "dead" or "left"
    int64_t silent_ms = 0;
  };
  // The primary's replication log (replication.factor > 1, backups attached).
  struct Replication {
    struct Backup {
      uint32_t replica = 0;
      std::string state;  // "copying", "acked" or "catching_up"
      uint64_t acked = 0;  // the last sequence number it acknowledged
    };
    uint32_t factor = 0;
    int64_t epoch = 0;
    uint64_t last_seq = 0;
    uint64_t committed = 0;
    std::vector<Backup> backups;
  };
  // replication.factor > 1: whether this primary accepts writes.
  struct Primary {
    int64_t epoch = 0;
    bool accepting = false;
    uint64_t fenced_refusals = 0;
  };
  // Set by a backup replica instead of the primary's parts.
  struct BackupReplica {
    uint32_t replica = 0;
    uint64_t applied = 0;  // the last replication sequence number applied
    uint64_t refused = 0;
    int64_t started_clock = 0;
  };
  struct Checksum {
    std::string table;
    uint64_t value = 0;
  };
  struct Table {
    std::string name;
    uint64_t rows = 0;
    uint32_t dim = 0;
    // The rows this shard owns (range tables), or its hash slots (hashed).
    uint64_t owned_begin = 0, owned_end = 0;
    uint64_t non_finite_rows = 0;
    uint64_t refused_rows = 0;
    // Hashed tables (keys "hashed"; "range" otherwise): the rows held, the
    // most the shard may hold, their bytes, and pushed rows dropped because
    // the table was full.
    std::string keys = "range";
    uint64_t stored_rows = 0, max_rows = 0, stored_bytes = 0, dropped_rows = 0;
    // With an admission filter: pushed rows of ids it has not admitted
    // yet (dropped), and its sketch's bytes.
    uint64_t unadmitted_rows = 0, sketch_bytes = 0;
    // With eviction: rows evicted at the bound to make room for new ids,
    // and rows evicted for idleness.
    uint64_t evicted_rows = 0, expired_rows = 0;
  };

  uint32_t shard = 0;
  std::string endpoint;  // the address the shard bound
  double uptime_s = 0;

  // Requests since the shard started.
  uint64_t pushes = 0, pulls = 0, errors = 0, clocks = 0;
  uint64_t bytes_in = 0, bytes_out = 0;  // every frame
  // Store blocks copied because a reply, a replica's copy or a checkpoint
  // being written held them when a push came.
  uint64_t copy_on_write = 0;
  double pushes_per_s = 0, pulls_per_s = 0;  // the shard's own recent rates

  // Consistency.
  std::string consistency;  // "asp" or "staleness N"
  int64_t min_clock = 0;
  uint32_t slowest_worker = 0;
  uint64_t waiting_pulls = 0, pulls_waited = 0;
  int64_t max_blocked_lead = 0;
  std::vector<Worker> workers;  // by worker rank
  std::optional<BackupWorkers> backup_workers;

  // Recovery.
  int64_t started_clock = 0;  // 0, or the restored generation's clock
  // Resharding (server/reshard_gate.h): the shard map the shard serves in,
  // and the clock it prepared to hand over at (-1: none).
  int64_t map_epoch = 0;
  int64_t handover_clock = -1;
  // Servers of the next map that follow the shard's rows in memory
  // (server/reshard_follower.h), and those of them that hold their copy.
  uint32_t reshard_followers = 0;
  uint32_t reshard_followers_ready = 0;
  int64_t lost_clocks = 0;
  uint64_t repeated_pushes = 0, resumes = 0;

  // Refusals.
  uint64_t refused_clocks = 0, refused_results = 0, refused_sum_clocks = 0;
  int64_t max_resume_clocks = 0;
  uint64_t refusals_not_logged = 0;

  // Sums (bsp aggregate) and pushes parked behind them.
  uint64_t sum_clocks = 0, sum_bytes = 0, parked_pushes = 0, parked_push_bytes = 0;

  // Limits.
  uint64_t queued_reply_bytes = 0, max_connection_bytes = 0, connections_queued = 0;
  uint64_t max_queued_reply_bytes = 0;
  uint64_t pulls_refused_queued_bytes = 0, pulls_refused_waiting = 0, replies_dropped = 0;
  uint64_t connections_open = 0, connections_refused = 0, max_connections = 0;

  Checkpoint checkpoint;
  std::optional<Evaluator> evaluator;
  std::string failed;  // why the shard fails requests; empty while healthy
  std::optional<Replication> replication;
  std::vector<Checksum> checksums;  // with `replication`, and on a backup
  std::optional<Primary> primary;
  std::optional<BackupReplica> backup;

  // Memory: the process's resident set (0 where /proc has none) and what
  // the store holds for its owned rows, values and optimizer state.
  uint64_t rss_bytes = 0, values_bytes = 0;

  // Security.
  std::string security;  // "curve" or "none"
  uint64_t refused_handshakes = 0, failed_handshakes = 0, refused_requests = 0;

  std::vector<Table> tables;

  // The ranks of dead and of departed workers.
  std::vector<uint32_t> DeadWorkers() const;
  std::vector<uint32_t> LeftWorkers() const;
};

// The text report: lines of "key value key value ...", one topic a line
// ("shard 0 endpoint tcp://... uptime_s 1.5", "worker_clocks 3 4", ...), as
// `ps_ctl stats` prints it. A backup replica's report starts with its
// "backup R of shard S" line instead.
std::string ShardStatsText(const ShardStats& stats);

// The `replication ...` line of the text view (also in the primary's logs).
std::string ReplicationText(const ShardStats::Replication& replication);

// The JSON view: one object, one line, field names as in the struct.
std::string ShardStatsJson(const ShardStats& stats);

// The text of a STATS reply to a request with `request_flags`:
// ShardStatsJson with kFlagStatsJson (common/wire.h), else ShardStatsText.
std::string StatsReplyText(const ShardStats& stats, uint32_t request_flags);

// Reads ShardStatsJson's output. Fields it does not know are skipped and
// missing ones keep their defaults, so a newer or older shard's report
// still reads. InvalidArgument saying where when `json` is not a JSON
// object or a field has the wrong type.
StatusOr<ShardStats> ParseShardStatsJson(std::string_view json);

}  // namespace ps

#endif  // PS_COMMON_SHARD_STATS_H_
