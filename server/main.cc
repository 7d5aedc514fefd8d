// ps_server: one parameter-server shard.
//   ps_server --config job.yaml --shard 0
//   ps_server --config job.yaml --shard 0 --replica 1   (a backup of shard 0's
//                                                       rows, replication.factor >= 2)
//   ps_server --config job.yaml --shard 0 --replica 0 --join   (a replica that
//                                    died comes back as a backup of the primary)
//   ps_server --config job.yaml --check     (what it would serve, then exit)
// The shard index may also come from mpirun/Slurm, a Kubernetes Indexed
// Job, or a StatefulSet pod's name with --shard-from-hostname (see
// common/rank.h).
// Exits 0 after SHUTDOWN, SIGTERM or SIGINT; 2 on a bad config or flag; 1
// when serving fails. SIGHUP reads the key files again (security.mode
// curve: a rotated worker key). --check exits 0 after one line on stdout naming the
// shard and its address; it resolves no name and opens no socket, so it
// runs where the cluster's names do not resolve (a build machine, an
// image build, the manifests' offline test).
//
// Test hook: with the environment variable PS_CHECKPOINT_TEST_STALL set to
// "<stage>:<clock>", every checkpoint write of a generation of clock >=
// <clock> stalls for good at <stage> (server/checkpoint_stall.h), so
// tests/server/checkpoint_crash_test.cc can kill the server there. Never
// set it for a real job.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "common/endpoint.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/metrics_endpoint.h"
#include "common/rank.h"
#include "server/checkpoint_stall.h"
#include "server/open_files.h"
#include "server/etcd_authority.h"
#include "server/replication.h"
#include "server/shard_server.h"

namespace {
// The one process-wide pointer: a signal handler can reach nothing else.
// Read by signal handlers and the etcd authority's thread (lock-free).
std::atomic<ps::ShardServer*> g_server{nullptr};
std::atomic<ps::BackupServer*> g_backup{nullptr};  // a backup (--replica j >= 1, --join)
std::atomic<bool> g_signalled{false};  // ends metrics.linger_ms early
void OnSignal(int) {
  g_signalled.store(true);
  if (ps::ShardServer* server = g_server.load(); server != nullptr) server->Stop();
  if (ps::BackupServer* backup = g_backup.load(); backup != nullptr) backup->Stop();
}
// SIGHUP: read the job's key files again (a rotated worker key).
void OnHangup(int) {
  if (ps::ShardServer* server = g_server.load(); server != nullptr) server->ReloadKeys();
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ps_server: one shard of the parameter server"};
  std::string config_path;
  ps::RankFlags shard_flags;
  std::string log_level = "info";
  std::string bind;
  app.add_option("--config", config_path, "job YAML file")->required();
  ps::AddRankFlags(app, "shard", "from mpirun/srun or JOB_COMPLETION_INDEX", "ps-server-3",
                   &shard_flags);
  bool check = false;
  app.add_flag("--check", check,
               "check the flags and the job file, resolve the shard, print what would run and "
               "exit 0 (resolves no host name, opens no socket)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
  app.add_option("--bind", bind,
                 "endpoint to bind instead of the config's address, e.g. tcp://0.0.0.0:7000");
  int64_t restore_clock = -1;
  app.add_option("--restore-clock", restore_clock,
                 "with checkpoint.dir: restore the generation of this clock instead of the newest")
      ->check(CLI::NonNegativeNumber);
  uint32_t replica = 0;
  app.add_option("--replica", replica,
                 "with replication.factor k: run replica j (0..k-1) of the shard's rows at its "
                 "address (0: cluster.servers[shard]; j >= 1: the next servers' hosts at the port "
                 "replication.port_offset sets); 0 (default) starts as the primary, j >= 1 as a "
                 "backup (the authority may promote it), and any with --join as a backup");
  bool join = false;
  app.add_flag("--join", join,
               "with --replica: start empty and take the state from the shard's running primary "
               "(ps_launch restarts a dead replica so; the primary is told by the authority)");
  std::vector<uint32_t> left_workers;
  app.add_option("--left-workers", left_workers,
                 "ranks of workers that already finished the job (a shard restarted while the "
                 "job runs does not wait for them); ps_launch passes them")
      ->delimiter(',');
  int64_t metrics_port = -1;
  app.add_option("--metrics-port", metrics_port,
                 "serve Prometheus metrics on this port instead of the one metrics.port gives "
                 "this replica (0: serve none)")
      ->check(CLI::Range(int64_t{0}, int64_t{65535}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a refused flag exits 2, as a bad config does (CLI11's
    // own codes would tell a launcher nothing).
    return app.exit(e) == 0 ? 0 : 2;
  }

  ps::Status logging = ps::InitLogging("server", log_level);
  if (!logging.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", logging.ToString().c_str());
    return 2;
  }
  auto job = ps::LoadJobFile(config_path);
  if (!job.ok()) {
    PS_LOG_ERROR("{}", job.status().ToString());
    return 2;
  }
  const auto num_servers = static_cast<uint32_t>(job->cluster.servers.size());
  auto resolved = ps::ResolveRankFromFlags(shard_flags, 0, num_servers, "shard");
  if (!resolved.ok()) {
    PS_LOG_ERROR("{}", resolved.status().ToString());
    return 2;
  }
  const uint32_t shard = resolved->rank;
  for (uint32_t w : left_workers) {
    if (w >= job->cluster.workers) {
      PS_LOG_ERROR("--left-workers: worker {} is not in this job ({} workers: ranks 0..{})", w,
                   job->cluster.workers, job->cluster.workers - 1);
      return 2;
    }
  }
  if (replica >= job->replication.factor) {
    PS_LOG_ERROR("--replica {}: the job has replication.factor {}, so shard {} has {}", replica,
                 job->replication.factor, shard,
                 job->replication.factor == 1 ? std::string("no backups")
                                              : "backups 1.." +
                                                    std::to_string(job->replication.factor - 1));
    return 2;
  }
  if (join && job->replication.factor < 2) {
    PS_LOG_ERROR("--join: the job has replication.factor 1, so a shard has no primary to copy "
                 "from; it restores from its checkpoints instead");
    return 2;
  }
  if (check) {
    // Parsed, not resolved: Validate() has parsed every entry already.
    ps::HostPort address;
    std::string problem;
    (void)ps::ParseHostPort(job->cluster.servers[shard], &address, &problem);
    const std::string binds =
        !bind.empty() ? bind + " (--bind)"
        : job->cluster.bind == ps::BindMode::kAll
            ? "tcp://*:" + std::to_string(address.port) + " (cluster.bind: all)"
            : "the address " + address.host + " resolves to, port " +
                  std::to_string(address.port);
    std::printf("ps_server: shard %u of %u (from %s), listens on %s, binds %s\n", shard,
                num_servers, resolved->source.c_str(), address.canonical.c_str(), binds.c_str());
    return 0;
  }
  ps::InitLogging("server " + std::to_string(shard) +
                      (replica > 0 || join ? " backup " + std::to_string(replica) : std::string()),
                  log_level)
      .IgnoreError();
  // Each connection a shard accepts takes a file descriptor: take all the
  // process may have before the workers come.
  ps::OpenFileLimit raised;
  const ps::OpenFileLimit before = ps::RaiseOpenFileLimit(&raised);
  if (raised.soft != before.soft) {
    PS_LOG_INFO("shard {}: open-file limit (RLIMIT_NOFILE) raised from {} to its hard limit {}",
                shard, before.soft, raised.soft);
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  // replication.authority etcd: etcd says what this replica is, and the
  // authority's thread renews its lease and hands its server etcd's
  // decisions (server/etcd_authority.h).
  std::unique_ptr<ps::EtcdAuthority> authority;
  bool as_backup = replica > 0 || join;
  std::mutex stopped_mu;
  std::string stopped_by_authority;  // guarded by stopped_mu
  auto authority_stopped = [&]() {
    std::lock_guard<std::mutex> lock(stopped_mu);
    return stopped_by_authority;
  };
  if (job->replication.authority == ps::ReplicationAuthority::kEtcd) {
    auto created = ps::EtcdAuthority::Create(*job, shard, replica, join);
    if (!created.ok()) {
      PS_LOG_ERROR("replica {} of shard {}: {}", replica, shard, created.status().ToString());
      return 1;
    }
    authority = std::move(*created);
    as_backup = authority->role() != ps::EtcdAuthority::Role::kPrimary;
    join = authority->role() == ps::EtcdAuthority::Role::kJoin;
  }
  auto start_authority = [&]() {
    if (authority == nullptr) return;
    authority->Start([&](const std::string& reason) {
      {
        std::lock_guard<std::mutex> lock(stopped_mu);
        stopped_by_authority = reason;
      }
      OnSignal(0);
    });
  };
  const std::string role = "shard " + std::to_string(shard) +
                           (replica > 0 ? " replica " + std::to_string(replica) : std::string());
  auto metrics = ps::StartProcessMetrics(
      job->metrics.bind, ps::ServerMetricsPort(*job, shard, replica), metrics_port, role);
  if (!metrics.ok()) {
    PS_LOG_ERROR("{}", metrics.status().ToString());
    return 1;
  }
  auto publish_role = [&](const char* what) {
    // Until it serves the shard (a backup): who it is; a promoted backup's
    // ShardServer publishes the shard's own metrics.
    if (*metrics == nullptr) return;
    ps::MetricsWriter out({{"shard", std::to_string(shard)}, {"replica", std::to_string(replica)}});
    out.Family("ps_server_role", "gauge", "1, with this replica's role as a label");
    out.Sample("ps_server_role", {{"role", what}}, 1);
    (*metrics)->Publish(out.Take());
  };
  auto linger = [&]() {
    if (*metrics != nullptr) (*metrics)->Linger(job->metrics.linger_ms, g_signalled);
  };
  std::unique_ptr<ps::ShardServer> server;
  if (as_backup) {
    publish_role("backup");
    auto backup = ps::BackupServer::Create(*job, shard, replica, bind, restore_clock, join);
    if (!backup.ok()) {
      PS_LOG_ERROR("{}", backup.status().ToString());
      return 1;
    }
    g_backup = backup->get();
    start_authority();
    ps::Status s = (*backup)->Run();
    g_backup = nullptr;
    if (!(*backup)->promoted()) publish_role("stopped");
    if (!s.ok()) {
      PS_LOG_ERROR("{}", s.ToString());
      return 1;
    }
    if (const std::string reason = authority_stopped(); !reason.empty()) {
      PS_LOG_ERROR("backup {} of shard {} stopped: {}", replica, shard, reason);
      return 1;
    }
    if (!(*backup)->promoted()) {
      linger();
      return 0;
    }
    // The authority made this copy the shard's primary: it serves at its
    // own address, where the workers' clients find it (PRIMARY).
    const int64_t epoch = (*backup)->promoted_epoch();
    ps::BackupServer::State state = (*backup)->TakeState();
    backup->reset();  // its own port goes
    ps::InitLogging("server " + std::to_string(shard), log_level).IgnoreError();
    auto promoted = ps::ShardServer::CreatePromoted(*job, shard, std::move(state));
    if (!promoted.ok()) {
      PS_LOG_ERROR("backup {} of shard {} could not take over: {}", replica, shard,
                   promoted.status().ToString());
      return 1;
    }
    PS_LOG_WARN("shard {}: backup {} serves as the primary from epoch {} on {}, with no backup "
                "of its own until one rejoins",
                shard, replica, epoch, (*promoted)->endpoint());
    server = std::move(*promoted);
    if (authority != nullptr) server->SetWriteLease(authority->lease());
  } else {
    const char* stall = std::getenv("PS_CHECKPOINT_TEST_STALL");
    auto created =
        ps::ShardServer::Create(*job, shard, bind, restore_clock, /*clock=*/nullptr,
                                ps::TestStallHook("PS_CHECKPOINT_TEST_STALL",
                                                  stall == nullptr ? "" : stall));
    if (!created.ok()) {
      PS_LOG_ERROR("{}", created.status().ToString());
      return 1;
    }
    server = std::move(*created);
    for (uint32_t w : left_workers) server->WorkerLeft(w);
    if (authority != nullptr) server->SetWriteLease(authority->lease());
    start_authority();
  }
  server->SetMetricsEndpoint(metrics->get());
  g_server = server.get();
  std::signal(SIGHUP, OnHangup);
  ps::Status s = server->Run();
  g_server = nullptr;
  linger();
  if (const std::string reason = authority_stopped(); !reason.empty()) {
    PS_LOG_ERROR("shard {} (replica {}) stopped: {}", shard, replica, reason);
    return 1;
  }
  if (!s.ok()) {
    PS_LOG_ERROR("{}", s.ToString());
    return 1;
  }
  return 0;
}
