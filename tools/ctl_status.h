// ps_ctl status for people: every shard's STATS report (common/
// shard_stats.h, asked for as JSON), the job's state built from one or two
// rounds of those reports (worker progress, the slowest worker, each
// shard's load, memory and checkpoint), and that state as a page of text
// for a terminal or as one JSON object for scripts.
//
// Thread-safe: functions of their arguments only.
#ifndef PS_TOOLS_CTL_STATUS_H_
#define PS_TOOLS_CTL_STATUS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/control_client.h"
#include "common/options.h"
#include "common/shard_stats.h"
#include "common/status.h"

namespace ps {

// What one round learned of one shard.
struct ShardSample {
  uint32_t shard = 0;
  std::string address;              // "host:port" as the job names it
  std::optional<ShardStats> stats;  // absent when the shard did not answer
  std::string problem;              // why it did not: "not running (connection refused)", ...
  std::chrono::steady_clock::time_point taken{};  // when the report arrived
};

// The request deadline (client.request_timeout_ms) of the ControlClient
// that SampleShards asks through: short, so that a shard that is not
// running is known in about a second; a shard that is only slow is asked
// again until SampleShards' own deadline.
inline constexpr uint32_t kStatusRequestTimeoutMs = 800;

// One round: asks each shard of `job` (only `only_shard` when set) for its
// report through `client`. When a shard does not answer within the
// client's deadline, a plain TCP connect to its address (tools/tcp_probe.h,
// at most `probe_deadline`) says why: refused gives "not running
// (connection refused)", no answer "unreachable (...)"; when something
// listens the shard is asked again until `deadline` has passed since the
// first request, and the last error is reported. Healthy shards are never
// probed: a connection that ends before its ZeroMQ handshake is counted and
// logged by the server as a failed handshake. The address is
// cluster.servers[shard], or `replica`'s (ReplicaHostPort) when set; with
// replication.factor k > 1 and no `replica`, every replica's, and the shard
// counts as not running only when none listens. REQUIRES: `client` was
// created for `job` (and `replica`) with request_timeout_ms
// kStatusRequestTimeoutMs or less; only_shard < its num_shards().
std::vector<ShardSample> SampleShards(ControlClient& client, const JobOptions& job,
                                      std::optional<uint32_t> only_shard,
                                      std::optional<uint32_t> replica,
                                      std::chrono::milliseconds deadline,
                                      std::chrono::milliseconds probe_deadline);

// kStarting: no shard has heard from the worker yet and the start-up
// grace (rendezvous.timeout_ms) has not passed (the server then reports a
// negative silence).
enum class WorkerState { kStarting, kTraining, kDead, kLeft };
const char* WorkerStateName(WorkerState state);

struct WorkerRow {
  uint32_t worker = 0;
  int64_t clock = 0;   // the lowest any answering shard holds: clocks it has finished
  int64_t behind = 0;  // clocks behind the fastest worker
  int64_t target = 0;  // the clock it trains to (train.iterations, from its HELLO); 0: unknown
  // Since a shard last heard from it (the least over shards); absent
  // while starting.
  std::optional<double> silent_s;
  WorkerState state = WorkerState::kTraining;  // left or dead as any shard says
  // consistency.backup_workers: its pushes dropped as late, summed over
  // the shards; absent without backup workers.
  std::optional<int64_t> late_pushes;
};

struct ShardRow {
  uint32_t shard = 0;
  std::string address;
  bool answered = false;
  std::string problem;  // when not answered
  std::string endpoint;
  double uptime_s = 0;
  double pushes_per_s = 0, pulls_per_s = 0;
  double requests_per_s = 0;  // pushes_per_s + pulls_per_s
  // From the change of bytes_in / bytes_out since the previous round;
  // absent with one round, or when the server restarted in between.
  std::optional<double> in_bytes_per_s, out_bytes_per_s;
  uint64_t waiting_pulls = 0;
  uint64_t errors = 0;
  std::optional<uint64_t> rss_bytes, values_bytes;
  std::optional<ShardStats::Checkpoint> checkpoint;  // absent without checkpoint.dir
  std::string failed;
  std::optional<ShardStats> stats;  // the shard's report as it answered
};

struct JobView {
  std::string config;  // the job file
  uint32_t workers = 0;
  uint32_t shards = 0;
  std::string consistency;  // "bsp", "bsp aggregated", "ssp 3", "asp"
  uint32_t replication_factor = 1;
  std::vector<WorkerRow> workers_rows;  // empty when no shard answered
  // The slowest worker that is starting or training, the fastest worker
  // and the gap; absent when no worker trains (or no shard answered).
  std::optional<uint32_t> slowest, fastest;
  int64_t slowest_behind = 0;
  std::vector<ShardRow> shard_rows;
  // cluster.evaluator: its state as the answering shards see it (the most
  // recent hearing; "left" or "dead" as any says); empty: no evaluator.
  std::string evaluator_state;
  std::optional<double> evaluator_silent_s;
  bool all_answered = false;
  // Seconds between the two rounds the byte rates come from; absent with one round.
  std::optional<double> interval_s;
};

// The job's state from this round (`now`, one sample per asked shard) and,
// for byte rates, the previous one (`before`: empty with one round; its
// samples are matched to `now`'s by shard).
JobView BuildJobView(const JobOptions& job, std::span<const ShardSample> now,
                     std::span<const ShardSample> before);

// A page of text: the job, a table of workers, the slowest worker, a table
// of shards, and a line per shard that did not answer. Units: s, req/s,
// MB/s, MiB.
std::string FormatJobView(const JobView& view);

// The same facts as one JSON object (one line, no trailing newline):
// numbers in base units (bytes, seconds, per second), null for what is
// not known; each answering shard's row carries its whole report
// (ShardStatsJson) as "stats".
std::string JobViewJson(const JobView& view);

}  // namespace ps

#endif  // PS_TOOLS_CTL_STATUS_H_
