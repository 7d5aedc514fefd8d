#include "common/options.h"

#include "common/endpoint.h"
#include "common/metrics.h"
#include "common/rendezvous.h"
#include "common/text.h"
#include "common/update_rule.h"
#include "common/yaml_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>

#include <fmt/format.h>

namespace ps {


namespace {

// Most I/O threads a ZeroMQ context may be given; more never helps one node.
constexpr uint32_t kMaxIoThreads = 64;
constexpr uint32_t kMaxCpuThreads = 1024;
// Smallest max_request_bytes: below this not even a header fits.
constexpr uint64_t kMinRequestBytes = 1024;
// The largest clock a request may carry (common/wire.h's kMaxClock).
constexpr uint64_t kMaxResumeClocks = uint64_t{1} << 62;
constexpr uint64_t kMinQueuedReplyBytes = 1ull << 20;

constexpr std::string_view kEndpointForm =
    "\"host:port\" with a non-empty host and port 1..65535, e.g. "
    "\"127.0.0.1:7000\" or \"[::1]:7000\"";

Status ValidateCluster(const std::string& source,
                       const ClusterOptions& cluster) {
  if (cluster.servers.empty()) {
    return InvalidOption(source, "cluster.servers", "no servers",
                   "a list of at least one " + std::string(kEndpointForm));
  }
  // canonical endpoint -> index of the first server that uses it
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < cluster.servers.size(); ++i) {
    const std::string path = "cluster.servers[" + std::to_string(i) + "]";
    HostPort endpoint;
    std::string problem;
    if (!ParseHostPort(cluster.servers[i], &endpoint, &problem)) {
      return InvalidOption(source, path, problem, kEndpointForm);
    }
    auto [it, inserted] = seen.emplace(endpoint.canonical, i);
    if (!inserted) {
      return InvalidOption(source, path,
                     Quote(cluster.servers[i]) + " is the same endpoint as " +
                         "cluster.servers[" + std::to_string(it->second) +
                         "] (" + Quote(cluster.servers[it->second]) + ")",
                     "a distinct host:port for every shard");
    }
    if (!endpoint.loopback && !cluster.allow_remote) {
      return InvalidOption(
          source, path,
          Quote(cluster.servers[i]) +
              " is not a loopback address, and plain TCP off this machine "
              "is not enabled",
          "a loopback host (127.0.0.0/8, ::1, localhost), or "
          "cluster.allow_remote: true to serve other machines");
    }
  }
  if (cluster.bind == BindMode::kAll && !cluster.allow_remote) {
    return InvalidOption(source, "cluster.bind",
                         "all (every interface, so other machines can reach the servers) "
                         "without cluster.allow_remote",
                         "bind: address, or cluster.allow_remote: true to serve other machines");
  }
  if (cluster.workers < 1) {
    return InvalidOption(source, "cluster.workers",
                   "got " + std::to_string(cluster.workers),
                   "a worker count >= 1");
  }
  return Status::Ok();
}

Status ValidateIoThreads(const std::string& source, std::string_view path,
                         uint32_t io_threads) {
  if (io_threads < 1 || io_threads > kMaxIoThreads) {
    return InvalidOption(source, path, "got " + std::to_string(io_threads),
                   "1.." + std::to_string(kMaxIoThreads));
  }
  return Status::Ok();
}

Status ValidateWorker(const std::string& source, const WorkerOptions& worker) {
  if (worker.cpu_threads > kMaxCpuThreads) {
    return InvalidOption(source, "worker.cpu_threads", "got " + std::to_string(worker.cpu_threads),
                   "0 (auto).." + std::to_string(kMaxCpuThreads));
  }
  return Status::Ok();
}

Status ValidateServer(const std::string& source, const ServerOptions& server) {
  if (server.max_request_bytes < kMinRequestBytes) {
    return InvalidOption(source, "server.max_request_bytes",
                   "got " + std::to_string(server.max_request_bytes),
                   "a byte count >= " + std::to_string(kMinRequestBytes));
  }
  if (server.max_keys_per_request < 1) {
    return InvalidOption(source, "server.max_keys_per_request",
                   "got " + std::to_string(server.max_keys_per_request),
                   ">= 1");
  }
  if (server.max_resume_clocks > kMaxResumeClocks) {
    return InvalidOption(source, "server.max_resume_clocks",
                         "got " + std::to_string(server.max_resume_clocks),
                         "0 (derived from the job) or a clock count up to 2^62");
  }
  if (server.max_queued_reply_bytes != 0 && server.max_queued_reply_bytes < kMinQueuedReplyBytes) {
    return InvalidOption(source, "server.max_queued_reply_bytes",
                   "got " + std::to_string(server.max_queued_reply_bytes),
                   "0 (twice the shard's values) or a byte count >= " +
                       std::to_string(kMinQueuedReplyBytes));
  }
  return ValidateIoThreads(source, "server.io_threads", server.io_threads);
}

// What a good worker needs of the server's per-connection limits: its
// requests in flight fit in the socket's queues and may all wait for slower
// workers, and its pulls' own deadline comes before the server's.
Status ValidateServerForClients(const std::string& source, const JobOptions& job) {
  const ServerOptions& server = job.server;
  const ClientOptions& client = job.client;
  if (server.socket_hwm <= client.max_in_flight) {
    return InvalidOption(source, "server.socket_hwm",
                   "got " + std::to_string(server.socket_hwm) + " with client.max_in_flight " +
                       std::to_string(client.max_in_flight),
                   "more messages than client.max_in_flight, so a worker's replies always fit");
  }
  if (server.max_waiting_pulls_per_worker < client.max_in_flight) {
    return InvalidOption(source, "server.max_waiting_pulls_per_worker",
                   "got " + std::to_string(server.max_waiting_pulls_per_worker) +
                       " with client.max_in_flight " + std::to_string(client.max_in_flight),
                   "at least client.max_in_flight, so every pull a worker has in flight may wait");
  }
  if (server.max_pull_wait_ms < client.request_timeout_ms) {
    return InvalidOption(source, "server.max_pull_wait_ms",
                   "got " + std::to_string(server.max_pull_wait_ms) +
                       " with client.request_timeout_ms " +
                       std::to_string(client.request_timeout_ms),
                   "at least client.request_timeout_ms, so a worker's pulls wait as long as it "
                   "asks");
  }
  return Status::Ok();
}

Status ValidateConsistency(const std::string& source, const ConsistencyOptions& c) {
  if (c.mode == ConsistencyMode::kSsp && c.staleness < 1) {
    return InvalidOption(source, "consistency.staleness", "got " + std::to_string(c.staleness),
                   "a staleness >= 1 for mode ssp (bsp is staleness 0)");
  }
  if (c.aggregate && c.mode != ConsistencyMode::kBsp) {
    return InvalidOption(source, "consistency.aggregate", "true with mode " + ConsistencyName(c),
                   "aggregate only with mode bsp (a clock's pushes are summed once all are in)");
  }
  if (c.mode != ConsistencyMode::kSsp && c.staleness != 0) {
    return InvalidOption(source, "consistency.staleness", "got " + std::to_string(c.staleness),
                   "no staleness for mode " + ConsistencyName(c) + " (only ssp takes one)");
  }
  return Status::Ok();
}

Status ValidateBackupWorkers(const std::string& source, const JobOptions& job) {
  const ConsistencyOptions& c = job.consistency;
  const uint32_t b = c.backup_workers;
  if (b == 0) return Status::Ok();
  const std::string got = "got " + std::to_string(b);
  if (c.mode != ConsistencyMode::kBsp || !c.aggregate) {
    return InvalidOption(source, "consistency.backup_workers",
                         got + " with mode " + ConsistencyName(c) +
                             (c.aggregate ? " aggregate" : " without aggregate"),
                         "backup workers only under mode bsp with aggregate: true (a clock's "
                         "update is the mean of the first gradients to arrive), or 0");
  }
  if (b >= job.cluster.workers) {
    return InvalidOption(source, "consistency.backup_workers",
                         got + " with cluster.workers " + std::to_string(job.cluster.workers),
                         "fewer than the workers: each clock's update needs workers - "
                         "backup_workers gradients (at least 1)");
  }
  if (job.stragglers.balance) {
    return InvalidOption(source, "consistency.backup_workers",
                         got + " with stragglers.balance: true",
                         "one of the two: balance gives a slow worker less work, backup workers "
                         "drop its late gradients; set backup_workers: 0 or balance: false");
  }
  if (job.replication.factor > 1 && job.replication.after_aggregation) {
    return InvalidOption(source, "consistency.backup_workers",
                         got + " with replication.after_aggregation: true",
                         "replication.after_aggregation: false with backup workers (each push "
                         "is replicated as it is summed)");
  }
  return Status::Ok();
}

Status ValidateLiveness(const std::string& source, const LivenessOptions& l) {
  if (l.heartbeat_ms != 0 && l.timeout_ms < 2ull * l.heartbeat_ms) {
    return InvalidOption(source, "liveness.timeout_ms", "got " + std::to_string(l.timeout_ms),
                   "at least twice liveness.heartbeat_ms (" + std::to_string(l.heartbeat_ms) +
                       "), so one late heartbeat does not kill a worker");
  }
  if (l.server_down_timeout_ms < 1) {
    return InvalidOption(source, "liveness.server_down_timeout_ms", "got 0",
                   "at least 1 ms (how long workers wait for a server that went away)");
  }
  // ZeroMQ takes the interval as an int.
  const uint32_t most = std::min<uint32_t>(l.server_down_timeout_ms, INT32_MAX);
  if (l.reconnect_ms < 1 || l.reconnect_ms > most) {
    return InvalidOption(source, "liveness.reconnect_ms", "got " + std::to_string(l.reconnect_ms),
                         "1 to " +
                             (most == l.server_down_timeout_ms
                                  ? "liveness.server_down_timeout_ms (" + std::to_string(most) + ")"
                                  : std::to_string(most)) +
                             " ms: how often a dropped connection to a server is tried again");
  }
  return Status::Ok();
}

Status ValidateStragglers(const std::string& source, const StragglerOptions& st,
                          uint32_t workers) {
  if (st.slow_worker >= static_cast<int64_t>(workers) || st.slow_worker < -1) {
    return InvalidOption(source, "stragglers.slow_worker", "got " + std::to_string(st.slow_worker),
                   "a worker rank in 0.." + std::to_string(workers - 1));
  }
  if (!(st.slow_factor >= 1.0) || !std::isfinite(st.slow_factor)) {
    return InvalidOption(source, "stragglers.slow_factor", "got " + DoubleText(st.slow_factor),
                   "a finite factor >= 1");
  }
  if (!(st.pause_probability >= 0.0 && st.pause_probability <= 1.0)) {
    return InvalidOption(source, "stragglers.pause_probability",
                   "got " + DoubleText(st.pause_probability),
                   "a probability in [0, 1]");
  }
  if (!(st.step_ms >= 0.0) || !std::isfinite(st.step_ms)) {
    return InvalidOption(source, "stragglers.step_ms", "got " + DoubleText(st.step_ms),
                   "milliseconds >= 0 (0: each step's own compute time)");
  }
  if (st.balance_window < 1 || st.balance_window > 1000000) {
    return InvalidOption(source, "stragglers.balance_window",
                         "got " + std::to_string(st.balance_window),
                         "clocks per measurement, 1..1000000");
  }
  if (st.pause_min_steps < 1 || st.pause_max_steps < st.pause_min_steps) {
    return InvalidOption(source, "stragglers.pause_steps",
                   "got [" + std::to_string(st.pause_min_steps) + ", " +
                       std::to_string(st.pause_max_steps) + "]",
                   "[min, max] with 1 <= min <= max");
  }
  return Status::Ok();
}

Status ValidateClient(const std::string& source, const ClientOptions& client) {
  if (client.request_timeout_ms < 1) {
    return InvalidOption(source, "client.request_timeout_ms",
                   "got " + std::to_string(client.request_timeout_ms),
                   "a timeout in milliseconds >= 1");
  }
  if (client.max_in_flight < 1) {
    return InvalidOption(source, "client.max_in_flight",
                   "got " + std::to_string(client.max_in_flight), ">= 1");
  }
  if (client.push_part_bytes < 4096) {
    return InvalidOption(source, "client.push_part_bytes",
                   "got " + std::to_string(client.push_part_bytes), "a byte count >= 4096");
  }
  return ValidateIoThreads(source, "client.io_threads", client.io_threads);
}

}  // namespace

int64_t EffectiveMaxResumeClocks(const JobOptions& job) {
  if (job.server.max_resume_clocks > 0) {
    return static_cast<int64_t>(job.server.max_resume_clocks);
  }
  const int64_t bound = job.consistency.Bound();
  const int64_t lead = bound == kUnboundedStaleness ? kAspResumeLead : bound + 1;
  const int64_t checkpoint_lag =
      job.checkpoint.dir.empty() ? 0 : 2 * int64_t{job.checkpoint.every_clocks};
  return checkpoint_lag + lead + int64_t{job.client.max_in_flight};
}

std::string JobOptions::Fingerprint() const {
  // A canonical text of the model's layout, hashed as the rendezvous hashes
  // its agreement.
  std::string text = "shards=" + std::to_string(cluster.servers.size()) + "\n";
  for (const TableOptions& t : tables) {
    text += t.Shape() + " " + OptimizerDescription(t.optimizer) + "\n";
  }
  return AgreementFingerprint(text);
}

std::string ConsistencyName(const ConsistencyOptions& c) {
  std::string name(NameOf(kConsistencyModeNames, c.mode));
  if (c.mode == ConsistencyMode::kSsp) name += " " + std::to_string(c.staleness);
  return name;
}

namespace {

Status ValidateCheckpoint(const std::string& source, const CheckpointOptions& c) {
  if (c.dir.empty()) return Status::Ok();
  if (c.full_every < 1 || c.full_every > kMaxFullEvery) {
    return InvalidOption(source, "checkpoint.full_every", "got " + std::to_string(c.full_every),
                         "generations per full one, 1 (every one full) to " +
                             std::to_string(kMaxFullEvery) +
                             " (a restore reads the full one and every delta after it)");
  }
  if (c.every_clocks < 1) {
    return InvalidOption(source, "checkpoint.every_clocks", "got 0", "clocks between checkpoints, >= 1");
  }
  if (c.keep < 1) {
    return InvalidOption(source, "checkpoint.keep", "got 0", "generations to keep, >= 1");
  }
  return Status::Ok();
}

Status ValidateSecurity(const std::string& source, const SecurityOptions& s) {
  if (s.mode == SecurityMode::kCurve && s.keys_dir.empty()) {
    return InvalidOption(source, "security.keys_dir", "missing under mode curve",
                         "the folder of the job's keys: make it with `ps_ctl keygen --config "
                         "<job.yaml> --dir <folder>` and name it here");
  }
  if (s.mode == SecurityMode::kNone && !s.keys_dir.empty()) {
    return InvalidOption(source, "security.keys_dir",
                         "set, but security.mode is none, so no key would be used",
                         "mode: curve to use the keys, or no keys_dir");
  }
  return Status::Ok();
}

Status ValidateReplication(const std::string& source, const JobOptions& job) {
  const ReplicationOptions& r = job.replication;
  const auto servers = static_cast<uint32_t>(job.cluster.servers.size());
  if (r.factor < 1 || r.factor > servers) {
    return InvalidOption(source, "replication.factor",
                         "got " + std::to_string(r.factor) + " with " + std::to_string(servers) +
                             " servers",
                         "1 (no backups) up to the number of servers (each copy of a range on "
                         "another server)");
  }
  if (r.port_offset < 1) {
    return InvalidOption(source, "replication.port_offset", "got 0",
                         "the port distance between a host's primary and its backups, >= 1");
  }
  const EtcdOptions& etcd = r.etcd;
  if (r.authority == ReplicationAuthority::kEtcd) {
    if (etcd.endpoints.empty()) {
      return InvalidOption(source, "replication.etcd.endpoints", "missing or empty",
                           "the etcd cluster's client URLs as \"host:port\" strings (authority "
                           "etcd)");
    }
    for (size_t i = 0; i < etcd.endpoints.size(); ++i) {
      HostPort parsed;
      std::string problem;
      if (!ParseHostPort(etcd.endpoints[i], &parsed, &problem)) {
        return InvalidOption(source, "replication.etcd.endpoints[" + std::to_string(i) + "]",
                             Quote(etcd.endpoints[i]) + ": " + problem,
                             "\"host:port\" of an etcd client URL");
      }
    }
    if (!etcd.prefix.empty() && etcd.prefix.front() != '/') {
      return InvalidOption(source, "replication.etcd.prefix", Quote(etcd.prefix),
                           "a key prefix that starts with '/', e.g. /ps/myjob");
    }
    if (etcd.lease_ttl_s < 1 || etcd.lease_ttl_s > 3600) {
      return InvalidOption(source, "replication.etcd.lease_ttl_s",
                           "got " + std::to_string(etcd.lease_ttl_s),
                           "seconds a lease lives without renewal, 1..3600");
    }
    if (etcd.request_timeout_ms < 10 || etcd.request_timeout_ms >= etcd.lease_ttl_s * 1000u) {
      return InvalidOption(source, "replication.etcd.request_timeout_ms",
                           "got " + std::to_string(etcd.request_timeout_ms) + " with lease_ttl_s " +
                               std::to_string(etcd.lease_ttl_s),
                           "milliseconds >= 10 and below lease_ttl_s (a renewal must fit in a "
                           "lease's life)");
    }
    if (etcd.start_timeout_ms < etcd.request_timeout_ms) {
      return InvalidOption(source, "replication.etcd.start_timeout_ms",
                           "got " + std::to_string(etcd.start_timeout_ms) +
                               " with request_timeout_ms " +
                               std::to_string(etcd.request_timeout_ms),
                           "milliseconds a starting server tries etcd, at least one request's "
                           "wait (request_timeout_ms)");
    }
  } else if (!etcd.endpoints.empty() || !etcd.prefix.empty()) {
    return InvalidOption(source, "replication.etcd",
                         "set, but replication.authority is launcher, so etcd would not be used",
                         "authority: etcd to use it, or no etcd section");
  }
  if (r.factor == 1 && r.authority == ReplicationAuthority::kEtcd) {
    return InvalidOption(source, "replication.authority",
                         "etcd with replication.factor 1: there is no replica to choose between",
                         "replication.factor >= 2 with authority etcd, or authority launcher");
  }
  if (r.factor == 1) return Status::Ok();
  if (job.security.mode == SecurityMode::kCurve) {
    return InvalidOption(source, "replication.factor",
                         "got " + std::to_string(r.factor) + " under security.mode curve",
                         "replication.factor 1 under curve: replicated shards speak plain TCP "
                         "between servers so far");
  }
  // Every replica's endpoint: distinct from each other and the servers'.
  std::unordered_map<std::string, std::string> seen;
  for (uint32_t i = 0; i < servers; ++i) {
    HostPort server;
    std::string problem;
    if (!ParseHostPort(job.cluster.servers[i], &server, &problem)) continue;  // checked before
    seen.emplace(server.canonical, "cluster.servers[" + std::to_string(i) + "]");
  }
  for (uint32_t i = 0; i < servers; ++i) {
    for (uint32_t j = 1; j < r.factor; ++j) {
      StatusOr<HostPort> replica = ReplicaHostPort(job, i, j);
      const std::string what = "backup " + std::to_string(j) + " of shard " + std::to_string(i);
      if (!replica.ok()) {
        return InvalidOption(source, "replication.port_offset", what + ": " +
                                 replica.status().message(),
                             "a port_offset that keeps every backup's port at most 65535");
      }
      auto [it, inserted] = seen.emplace(replica->canonical, what);
      if (!inserted) {
        return InvalidOption(source, "replication.port_offset",
                             what + " would listen on " + replica->canonical + ", the endpoint of " +
                                 it->second,
                             "a port_offset (or server ports) that gives every backup a port of "
                             "its own");
      }
    }
  }
  return Status::Ok();
}

// metrics: each process's port within 1..65535, none on a server's port.
Status ValidateMetrics(const std::string& source, const JobOptions& job) {
  const MetricsOptions& m = job.metrics;
  if (m.bind.empty()) {
    return InvalidOption(source, "metrics.bind", "an empty address",
                         "an address of this host such as 127.0.0.1 or 0.0.0.0");
  }
  if (m.interval_ms < 50 || m.interval_ms > 60000) {
    return InvalidOption(source, "metrics.interval_ms", "got " + std::to_string(m.interval_ms),
                         "50..60000 (how often a process renews what it serves)");
  }
  if (m.linger_ms > 600000) {
    return InvalidOption(source, "metrics.linger_ms", "got " + std::to_string(m.linger_ms),
                         "0..600000 (how long the final values stay served)");
  }
  if (m.port == 0) return Status::Ok();
  const uint64_t last = uint64_t{m.port} + MaxMetricsPortOffset(job);
  if (last > 65535) {
    return InvalidOption(source, "metrics.port",
                         "got " + std::to_string(m.port) + ": the job's " +
                             std::to_string(MaxMetricsPortOffset(job) + 1) +
                             " processes would serve up to port " + std::to_string(last),
                         "a first port that leaves one port per process at most 65535, or 0 "
                         "to serve no metrics");
  }
  for (size_t i = 0; i < job.cluster.servers.size(); ++i) {
    for (uint32_t j = 0; j < std::max<uint32_t>(job.replication.factor, 1); ++j) {
      StatusOr<HostPort> server = ReplicaHostPort(job, static_cast<uint32_t>(i), j);
      if (!server.ok()) continue;  // checked before
      if (server->port >= m.port && server->port <= last) {
        return InvalidOption(
            source, "metrics.port",
            "ports " + std::to_string(m.port) + ".." + std::to_string(last) + " hold " +
                server->canonical + ", where " +
                (j == 0 ? "shard " + std::to_string(i) + " serves"
                        : "backup " + std::to_string(j) + " of shard " + std::to_string(i) +
                              " listens"),
            "a metrics.port range clear of the servers' ports");
      }
    }
  }
  return Status::Ok();
}

// Timeouts of different sections that must fit together.
Status ValidateTimeouts(const std::string& source, const JobOptions& job) {
  if (job.rendezvous.timeout_ms < 1) {
    return InvalidOption(source, "rendezvous.timeout_ms", "got 0",
                         "at least 1 ms (how long processes wait for each other at start-up)");
  }
  // A pull waiting for a worker that died gives up a little before
  // client.request_timeout_ms; the shard notices the death
  // liveness.timeout_ms after the worker's last sign of life, and only then
  // (under drop) lets the others go on. A pull deadline that ends first
  // turns every dead worker into a failed job.
  const uint64_t needed = uint64_t{job.liveness.timeout_ms} + 1000;
  if (job.liveness.heartbeat_ms != 0 && job.consistency.Bound() != kUnboundedStaleness &&
      job.client.request_timeout_ms < needed) {
    return InvalidOption(
        source, "client.request_timeout_ms",
        "got " + std::to_string(job.client.request_timeout_ms) + " with liveness.timeout_ms " +
            std::to_string(job.liveness.timeout_ms) +
            ": a pull waiting for a dead worker would fail before the shard notices the death",
        "at least liveness.timeout_ms + 1000 (" + std::to_string(needed) +
            "): raise client.request_timeout_ms or lower liveness.timeout_ms");
  }
  return Status::Ok();
}

}  // namespace

namespace {

// Hashed tables against the rest of the job: enough slots for the shards.
Status ValidateHashedTables(const std::string& source, const JobOptions& job) {
  for (size_t i = 0; i < job.tables.size(); ++i) {
    const TableOptions& t = job.tables[i];
    if (!t.hashed()) continue;
    const std::string path = "tables[" + std::to_string(i) + "]";
    const size_t shards = job.cluster.servers.size();
    if (t.HashSlots() < shards) {
      return InvalidOption(source, path + ".slots",
                           "got " + std::to_string(t.HashSlots()) + " for " +
                               std::to_string(shards) + " servers",
                           "at least one slot per server");
    }
  }
  return Status::Ok();
}

}  // namespace

Status JobOptions::Validate() const {
  PS_RETURN_IF_ERROR(ValidateCluster(source, cluster));
  // The job-wide optimizer before the tables that start from it.
  PS_RETURN_IF_ERROR(ValidateOptimizer(source, "optimizer", optimizer));
  PS_RETURN_IF_ERROR(ValidateTables(source, tables));
  PS_RETURN_IF_ERROR(ValidateConsistency(source, consistency));
  PS_RETURN_IF_ERROR(ValidateLiveness(source, liveness));
  PS_RETURN_IF_ERROR(ValidateStragglers(source, stragglers, cluster.workers));
  if (stragglers.balance && consistency.mode == ConsistencyMode::kAsp) {
    PS_RETURN_IF_ERROR(InvalidOption(
        source, "stragglers.balance",
        "true under consistency.mode asp, where no worker waits for another",
        "consistency.mode bsp or ssp with balance, or balance: false"));
  }
  PS_RETURN_IF_ERROR(ValidateBackupWorkers(source, *this));
  PS_RETURN_IF_ERROR(ValidateServer(source, server));
  PS_RETURN_IF_ERROR(ValidateWorker(source, worker));
  PS_RETURN_IF_ERROR(ValidateClient(source, client));
  PS_RETURN_IF_ERROR(ValidateServerForClients(source, *this));
  PS_RETURN_IF_ERROR(ValidateTimeouts(source, *this));
  PS_RETURN_IF_ERROR(ValidateSecurity(source, security));
  PS_RETURN_IF_ERROR(ValidateReplication(source, *this));
  PS_RETURN_IF_ERROR(ValidateMetrics(source, *this));
  PS_RETURN_IF_ERROR(ValidateCheckpoint(source, checkpoint));
  return ValidateHashedTables(source, *this);
}

StatusOr<uint32_t> JobOptions::TableId(const std::string& name) const {
  for (size_t i = 0; i < tables.size(); ++i) {
    if (tables[i].name == name) return static_cast<uint32_t>(i);
  }
  std::string names;
  for (const TableOptions& table : tables) {
    if (!names.empty()) names.append(", ");
    names.append(table.name);
  }
  return NotFoundError("no table named " + Quote(name) + "; the job has " +
                       (names.empty() ? "no tables" : "tables " + names));
}

}  // namespace ps
