// ps_server: one parameter-server shard.
//   ps_server --config job.yaml --shard 0
//   ps_server --config job.yaml --shard 0 --replica 1   (a backup of shard 0's
//                                                       rows, replication.factor >= 2)
//   ps_server --config job.yaml --shard 0 --replica 0 --join   (a replica that
//                                    died comes back as a backup of the primary)
//   ps_server --config job.yaml --check     (what it would serve, then exit)
//   ps_server --config next.yaml --shard 2 --map-epoch 1 --follow job.yaml
//                                    (a server of the next shard map that takes its
//                                    rows from job.yaml's servers as they hand over;
//                                    with --replica j, that replica of the shard)
// The shard index may also come from mpirun/Slurm, a Kubernetes Indexed
// Job, or a StatefulSet pod's name with --shard-from-hostname (see
// common/rank.h).
// Exits 0 after SHUTDOWN, SIGTERM or SIGINT; 2 on a bad config or flag; 1
// when serving fails; 3 when the shard handed its rows over to another
// server count (ps_ctl reshard, server/reshard_gate.h); 4 when etcd's
// authority stopped this replica (its lease is gone, or its shard has
// another primary than the one it followed): started again, it rejoins;
// 5 when a server started with --follow did not take over (ps_launch then
// starts it restoring the handover generation).
// SIGHUP reads the key files again (security.mode
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
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "common/endpoint.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/metrics_endpoint.h"
#include "common/rank.h"
#include "common/transport.h"
#include "server/checkpoint_stall.h"
#include "server/open_files.h"
#include "server/etcd_authority.h"
#include "server/replication.h"
#include "server/reshard_follower.h"
#include "server/shard_server.h"
#include "store/huge_memory.h"

namespace {
// The one process-wide pointer: a signal handler can reach nothing else.
// Read by signal handlers and the etcd authority's thread (lock-free).
std::atomic<ps::ShardServer*> g_server{nullptr};
std::atomic<ps::BackupServer*> g_backup{nullptr};  // a backup (--replica j >= 1, --join)
std::atomic<ps::ReshardFollower*> g_follower{nullptr};  // --follow, until it serves
std::atomic<bool> g_signalled{false};  // ends metrics.linger_ms early
void OnSignal(int) {
  g_signalled.store(true);
  if (ps::ShardServer* server = g_server.load(); server != nullptr) server->Stop();
  if (ps::BackupServer* backup = g_backup.load(); backup != nullptr) backup->Stop();
  if (ps::ReshardFollower* follower = g_follower.load(); follower != nullptr) follower->Stop();
}
// SIGHUP: read the job's key files again (a rotated worker key).
void OnHangup(int) {
  if (ps::ShardServer* server = g_server.load(); server != nullptr) server->ReloadKeys();
}
}  // namespace

namespace {

// The exit code of a shard that handed its rows over to another server
// count; ps_launch starts the servers of the next map once they all did.
constexpr int kExitHandedOver = 3;
// The exit code of a replica etcd's authority stopped, or of a backup its
// primary dropped from its log while it ran (it got a new copy while it
// held one); started again, it rejoins its shard (ps_launch restarts it,
// within liveness.server_restarts).
constexpr int kExitStoppedByAuthority = 4;
// The exit code of a server started with --follow that did not take its
// rows over in memory (server/reshard_follower.h says when).
constexpr int kExitNotFollowed = 5;

// ps_server's flags.
struct ServerFlags {
  std::string config_path;
  ps::RankFlags shard;
  std::string log_level = "info";
  std::string bind;
  bool check = false;
  int64_t restore_clock = -1;
  uint32_t replica = 0;
  bool join = false;
  std::vector<uint32_t> left_workers;
  int64_t metrics_port = -1;
  int64_t map_epoch = 0;
  std::string follow;  // --follow: the job file the job runs on now
};

void AddFlags(CLI::App& app, ServerFlags* f) {
  app.add_option("--config", f->config_path, "job YAML file")->required();
  ps::AddRankFlags(app, "shard", "from mpirun/srun or JOB_COMPLETION_INDEX", "ps-server-3",
                   &f->shard);
  app.add_flag("--check", f->check,
               "check the flags and the job file, resolve the shard, print what would run and "
               "exit 0 (resolves no host name, opens no socket)");
  app.add_option("--log-level", f->log_level, "trace, debug, info, warn, error, off");
  app.add_option("--bind", f->bind,
                 "endpoint to bind instead of the config's address, e.g. tcp://0.0.0.0:7000");
  app.add_option("--restore-clock", f->restore_clock,
                 "with checkpoint.dir: restore the generation of this clock instead of the newest")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--replica", f->replica,
                 "with replication.factor k: run replica j (0..k-1) of the shard's rows at its "
                 "address (0: cluster.servers[shard]; j >= 1: the next servers' hosts at the port "
                 "replication.port_offset sets); 0 (default) starts as the primary, j >= 1 as a "
                 "backup (the authority may promote it), and any with --join as a backup");
  app.add_flag("--join", f->join,
               "with --replica: start empty and take the state from the shard's running primary "
               "(ps_launch restarts a dead replica so; the primary is told by the authority)");
  app.add_option("--left-workers", f->left_workers,
                 "ranks of workers that already finished the job (a shard restarted while the "
                 "job runs does not wait for them); ps_launch passes them")
      ->delimiter(',');
  app.add_option("--map-epoch", f->map_epoch,
                 "the shard map this server serves in: 0 (default) for a job's first servers; "
                 "ps_launch passes the next one to the servers a reshard starts "
                 "(server/reshard_gate.h)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--follow", f->follow,
                 "with --map-epoch E >= 1: this server of map E takes its rows in memory from "
                 "the servers of this job file (the map the job runs on now) while they hand "
                 "over, instead of restoring the handover generation; exits 5 when it did not "
                 "take over (server/reshard_follower.h). ps_launch passes it");
  app.add_option("--metrics-port", f->metrics_port,
                 "serve Prometheus metrics on this port instead of the one metrics.port gives "
                 "this replica (0: serve none)")
      ->check(CLI::Range(int64_t{0}, int64_t{65535}));
}

// OK when the flags fit the job; else the reason (exit code 2).
ps::Status CheckFlags(const ps::JobOptions& job, const ServerFlags& f, uint32_t shard) {
  for (uint32_t w : f.left_workers) {
    if (w >= job.cluster.workers) {
      return ps::InvalidArgumentError(
          "--left-workers: worker " + std::to_string(w) + " is not in this job (" +
          std::to_string(job.cluster.workers) + " workers: ranks 0.." +
          std::to_string(job.cluster.workers - 1) + ")");
    }
  }
  if (f.replica >= job.replication.factor) {
    return ps::InvalidArgumentError(
        "--replica " + std::to_string(f.replica) + ": the job has replication.factor " +
        std::to_string(job.replication.factor) + ", so shard " + std::to_string(shard) +
        " has " +
        (job.replication.factor == 1
             ? std::string("no backups")
             : "backups 1.." + std::to_string(job.replication.factor - 1)));
  }
  if (!f.follow.empty() && (f.map_epoch < 1 || f.join || f.restore_clock >= 0)) {
    return ps::InvalidArgumentError(
        "--follow: a server of a next shard map (--map-epoch 1 or more) follows the old "
        "servers; not with --join or --restore-clock");
  }
  if (f.join && f.restore_clock >= 0) {
    return ps::InvalidArgumentError(
        "--join: a joining replica takes its state from the shard's primary; not with "
        "--restore-clock");
  }
  if (f.join && job.replication.factor < 2) {
    return ps::InvalidArgumentError(
        "--join: the job has replication.factor 1, so a shard has no primary to copy from; it "
        "restores from its checkpoints instead");
  }
  return ps::Status::Ok();
}

// --check: one line naming the shard and its address. Parsed, not resolved:
// Validate() has parsed every entry already.
void PrintCheck(const ps::JobOptions& job, const ServerFlags& f, const ps::ResolvedRank& shard) {
  ps::HostPort address;
  std::string problem;
  (void)ps::ParseHostPort(job.cluster.servers[shard.rank], &address, &problem);
  const std::string binds =
      !f.bind.empty() ? f.bind + " (--bind)"
      : job.cluster.bind == ps::BindMode::kAll
          ? "tcp://*:" + std::to_string(address.port) + " (cluster.bind: all)"
          : "the address " + address.host + " resolves to, port " + std::to_string(address.port);
  std::printf("ps_server: shard %u of %u (from %s), listens on %s, binds %s\n", shard.rank,
              static_cast<uint32_t>(job.cluster.servers.size()), shard.source.c_str(),
              address.canonical.c_str(), binds.c_str());
}

// Each connection a shard accepts takes a file descriptor: take all the
// process may have before the workers come.
void RaiseFileLimit(uint32_t shard) {
  ps::OpenFileLimit raised;
  const ps::OpenFileLimit before = ps::RaiseOpenFileLimit(&raised);
  if (raised.soft != before.soft) {
    PS_LOG_INFO("shard {}: open-file limit (RLIMIT_NOFILE) raised from {} to its hard limit {}",
                shard, before.soft, raised.soft);
  }
}

// One replica's process once its flags are checked: its authority
// (replication.authority etcd), its metrics, and the server it runs, a
// backup that may be promoted or the shard's primary. Run() returns the
// exit code. Not thread-safe, but for the authority's stop callback.
class ServerProcess {
 public:
  ServerProcess(const ps::JobOptions& job, const ServerFlags& flags, uint32_t shard)
      : job_(job), flags_(flags), shard_(shard), join_(flags.join),
        as_backup_(flags.replica > 0 || flags.join) {}

  int Run() {
    std::unique_ptr<ps::ShardServer> server;
    std::unique_ptr<ps::BackupServer> backup;  // a backup that followed
    if (!flags_.follow.empty()) {
      // Its metrics port is the old server's until that one handed over.
      const int code = RunFollower(&server, &backup);
      if (server == nullptr && backup == nullptr) return code;
    }
    if (ps::Status s = Setup(/*port_may_be_freed=*/!flags_.follow.empty()); !s.ok()) {
      PS_LOG_ERROR("{}", s.ToString());
      return 1;
    }
    if (server == nullptr) {
      const int code = as_backup_ ? RunBackup(&server, std::move(backup)) : CreatePrimary(&server);
      if (server == nullptr) return code;
    }
    return Serve(std::move(server));
  }

 private:
  // The etcd authority (which says what this replica is) and the metrics;
  // with `port_may_be_freed` (a follower that took over), the metrics port
  // is tried again for up to 2 s past metrics.linger_ms while the old
  // server there exits.
  ps::Status Setup(bool port_may_be_freed) {
    if (job_.replication.authority == ps::ReplicationAuthority::kEtcd) {
      auto created =
          ps::EtcdAuthority::Create(job_, shard_, flags_.replica, join_, flags_.map_epoch);
      if (!created.ok()) {
        return created.status().WithContext("replica " + std::to_string(flags_.replica) +
                                            " of shard " + std::to_string(shard_));
      }
      authority_ = std::move(*created);
      as_backup_ = authority_->role() != ps::EtcdAuthority::Role::kPrimary;
      join_ = authority_->role() == ps::EtcdAuthority::Role::kJoin;
    }
    const std::string role =
        "shard " + std::to_string(shard_) +
        (flags_.replica > 0 ? " replica " + std::to_string(flags_.replica) : std::string());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2) +
                       std::chrono::milliseconds(job_.metrics.linger_ms);
    for (;;) {
      auto started = ps::StartProcessMetrics(job_.metrics.bind,
                                             ps::ServerMetricsPort(job_, shard_, flags_.replica),
                                             flags_.metrics_port, role);
      if (started.ok()) {
        metrics_ = std::move(*started);
        return ps::Status::Ok();
      }
      if (!port_may_be_freed || started.status().code() != ps::StatusCode::kUnavailable ||
          std::chrono::steady_clock::now() >= until) {
        return started.status();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // The authority's thread renews its lease and hands its server etcd's
  // decisions (server/etcd_authority.h); when it must stop the process it
  // says why.
  void StartAuthority() {
    if (authority_ == nullptr) return;
    authority_->Start([this](const std::string& reason) {
      {
        std::lock_guard<std::mutex> lock(stopped_mu_);
        stopped_by_authority_ = reason;
      }
      OnSignal(0);
    });
  }
  std::string StoppedByAuthority() {
    std::lock_guard<std::mutex> lock(stopped_mu_);
    return stopped_by_authority_;
  }

  // Until it serves the shard (a backup): who it is; a promoted backup's
  // ShardServer publishes the shard's own metrics.
  void PublishRole(const char* what) {
    if (metrics_ == nullptr) return;
    ps::MetricsWriter out(
        {{"shard", std::to_string(shard_)}, {"replica", std::to_string(flags_.replica)}});
    out.Family("ps_server_role", "gauge", "1, with this replica's role as a label");
    out.Sample("ps_server_role", {{"role", what}}, 1);
    metrics_->Publish(out.Take());
  }
  void Linger() {
    if (metrics_ != nullptr) metrics_->Linger(job_.metrics.linger_ms, g_signalled);
  }

  // Runs the backup (`made`, one that followed the old shards; else one
  // made here) until it stops (returns the exit code, *server null) or the
  // authority promotes it (*server: the shard's new primary).
  int RunBackup(std::unique_ptr<ps::ShardServer>* server,
                std::unique_ptr<ps::BackupServer> made = nullptr) {
    PublishRole("backup");
    ps::StatusOr<std::unique_ptr<ps::BackupServer>> backup = std::move(made);
    if (*backup == nullptr) {
      // A replica that joins (--join, or etcd's word: the shard's primary
      // took its key first) takes its state from the primary, whatever
      // generation it was started to restore.
      backup = ps::BackupServer::Create(job_, shard_, flags_.replica, flags_.bind,
                                        join_ ? -1 : flags_.restore_clock, join_);
    }
    if (!backup.ok()) {
      PS_LOG_ERROR("{}", backup.status().ToString());
      return 1;
    }
    g_backup = backup->get();
    if (g_signalled.load()) (*backup)->Stop();  // a signal before it could be told
    (*backup)->SetMapEpoch(flags_.map_epoch);
    if (authority_ != nullptr) {
      (*backup)->SetIncarnation(static_cast<uint64_t>(authority_->lease_id()));
      // A copy still being taken never takes a lapsed primary key.
      ps::BackupServer* copy = backup->get();
      authority_->SetInSync([copy] { return copy->in_sync_now(); });
    }
    StartAuthority();
    ps::Status s = (*backup)->Run();
    g_backup = nullptr;
    if (authority_ != nullptr) authority_->SetInSync(nullptr);  // the copy goes below
    if (!(*backup)->promoted()) PublishRole("stopped");
    if (!s.ok()) {
      PS_LOG_ERROR("{}", s.ToString());
      return 1;
    }
    if (const std::string reason = StoppedByAuthority(); !reason.empty()) {
      PS_LOG_ERROR("backup {} of shard {} stopped: {}", flags_.replica, shard_, reason);
      return kExitStoppedByAuthority;
    }
    if (!(*backup)->must_rejoin().empty()) return kExitStoppedByAuthority;
    if (!(*backup)->promoted()) {
      const bool handed_over = (*backup)->handed_over();
      // Its address goes at once: a replica of the next map may serve there.
      backup->reset();
      Linger();
      return handed_over ? kExitHandedOver : 0;
    }
    // The authority made this copy the shard's primary: it serves at its
    // own address, where the workers' clients find it (PRIMARY).
    const int64_t epoch = (*backup)->promoted_epoch();
    ps::BackupServer::State state = (*backup)->TakeState();
    backup->reset();  // its own port goes
    ps::InitLogging("server " + std::to_string(shard_), flags_.log_level).IgnoreError();
    auto promoted = ps::ShardServer::CreatePromoted(job_, shard_, std::move(state));
    if (!promoted.ok()) {
      PS_LOG_ERROR("backup {} of shard {} could not take over: {}", flags_.replica, shard_,
                   promoted.status().ToString());
      return 1;
    }
    PS_LOG_WARN("shard {}: backup {} serves as the primary from epoch {} on {}, with no backup "
                "of its own until one rejoins",
                shard_, flags_.replica, epoch, (*promoted)->endpoint());
    *server = std::move(*promoted);
    (*server)->SetMapEpoch(flags_.map_epoch);
    if (authority_ != nullptr) (*server)->SetWriteLease(authority_->lease());
    return 0;
  }

  // A server of the next shard map that follows the old servers until
  // their handover, then serves the rows it took (*server: replica 0, the
  // shard's primary; *backup: another replica of it), or exits
  // kExitNotFollowed.
  int RunFollower(std::unique_ptr<ps::ShardServer>* server,
                  std::unique_ptr<ps::BackupServer>* backup) {
    PublishRole("follower");
    const std::string who =
        (flags_.replica > 0 ? "replica " + std::to_string(flags_.replica) + " of " : "") +
        std::string("shard ") + std::to_string(shard_) + " of map " +
        std::to_string(flags_.map_epoch);
    auto fail = [&](const ps::Status& why) {
      PS_LOG_WARN("{} does not take its rows over in memory: {}; start it restoring the "
                  "handover generation (ps_launch does)",
                  who, why.ToString());
      return kExitNotFollowed;
    };
    auto from = ps::LoadJobFile(flags_.follow);
    if (!from.ok()) return fail(from.status());
    auto follower =
        ps::ReshardFollower::Create(*from, job_, shard_, flags_.replica, flags_.map_epoch);
    if (!follower.ok()) return fail(follower.status());
    follower_ = std::move(*follower);  // it frees its copies while the shard serves
    g_follower = follower_.get();
    if (g_signalled.load()) follower_->Stop();  // a signal before it could be told
    auto state = follower_->Run();
    g_follower = nullptr;
    if (!state.ok()) return fail(state.status());
    if (flags_.replica > 0) {
      auto made = ps::BackupServer::CreateFromState(job_, shard_, std::move(*state), flags_.bind);
      if (!made.ok()) return fail(made.status());
      *backup = std::move(*made);
      return 0;
    }
    auto created = ps::ShardServer::CreatePromoted(job_, shard_, std::move(*state), flags_.bind);
    if (!created.ok()) return fail(created.status());
    *server = std::move(*created);
    (*server)->SetMapEpoch(flags_.map_epoch);
    return 0;
  }

  // The shard's primary (restored from its checkpoints when the job says).
  int CreatePrimary(std::unique_ptr<ps::ShardServer>* server) {
    const char* stall = std::getenv("PS_CHECKPOINT_TEST_STALL");
    auto created = ps::ShardServer::Create(
        job_, shard_, flags_.bind, flags_.restore_clock, /*env=*/nullptr,
        ps::TestStallHook("PS_CHECKPOINT_TEST_STALL", stall == nullptr ? "" : stall));
    if (!created.ok()) {
      PS_LOG_ERROR("{}", created.status().ToString());
      return 1;
    }
    *server = std::move(*created);
    (*server)->SetMapEpoch(flags_.map_epoch);
    for (uint32_t w : flags_.left_workers) (*server)->WorkerLeft(w);
    if (authority_ != nullptr) (*server)->SetWriteLease(authority_->lease());
    StartAuthority();
    return 0;
  }

  int Serve(std::unique_ptr<ps::ShardServer> server) {
    server->SetMetricsEndpoint(metrics_.get());
    g_server = server.get();
    if (g_signalled.load()) server->Stop();  // a signal before it could be told
    std::signal(SIGHUP, OnHangup);
    ps::Status s = server->Run();
    g_server = nullptr;
    Linger();
    if (server->handed_over()) {
      // The next map's server at this address takes the metrics port too.
      metrics_.reset();
      if (ps::Status written = server->WriteDueHandover(); !written.ok() && s.ok()) s = written;
    }
    if (const std::string reason = StoppedByAuthority(); !reason.empty()) {
      PS_LOG_ERROR("shard {} (replica {}) stopped: {}", shard_, flags_.replica, reason);
      return kExitStoppedByAuthority;
    }
    if (!s.ok()) {
      PS_LOG_ERROR("{}", s.ToString());
      return 1;
    }
    return server->handed_over() ? kExitHandedOver : 0;
  }

  const ps::JobOptions& job_;
  const ServerFlags& flags_;
  const uint32_t shard_;
  bool join_;       // --join, or etcd's decision
  bool as_backup_;  // --replica j >= 1 or --join, or etcd's decision
  std::unique_ptr<ps::EtcdAuthority> authority_;
  std::unique_ptr<ps::MetricsEndpoint> metrics_;
  std::unique_ptr<ps::ReshardFollower> follower_;  // --follow
  std::mutex stopped_mu_;
  std::string stopped_by_authority_;  // guarded by stopped_mu_
};

}  // namespace

int main(int argc, char** argv) {
  ps::KeepMessageMemory();
  CLI::App app{"ps_server: one shard of the parameter server"};
  ServerFlags flags;
  AddFlags(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a refused flag exits 2, as a bad config does (CLI11's
    // own codes would tell a launcher nothing).
    return app.exit(e) == 0 ? 0 : 2;
  }
  ps::Status logging = ps::InitLogging("server", flags.log_level);
  if (!logging.ok()) {
    std::fprintf(stderr, "ps_server: %s\n", logging.ToString().c_str());
    return 2;
  }
  auto job = ps::LoadJobFile(flags.config_path);
  if (!job.ok()) {
    PS_LOG_ERROR("{}", job.status().ToString());
    return 2;
  }
  const auto num_servers = static_cast<uint32_t>(job->cluster.servers.size());
  auto resolved = ps::ResolveRankFromFlags(flags.shard, 0, num_servers, "shard");
  if (!resolved.ok()) {
    PS_LOG_ERROR("{}", resolved.status().ToString());
    return 2;
  }
  const uint32_t shard = resolved->rank;
  if (ps::Status fits = CheckFlags(*job, flags, shard); !fits.ok()) {
    PS_LOG_ERROR("{}", fits.message());
    return 2;
  }
  if (flags.check) {
    PrintCheck(*job, flags, *resolved);
    return 0;
  }
  ps::InitLogging("server " + std::to_string(shard) +
                      (flags.replica > 0 || flags.join ? " backup " + std::to_string(flags.replica)
                                                       : std::string()),
                  flags.log_level)
      .IgnoreError();
  RaiseFileLimit(shard);
  ps::SetHugePages(job->server.huge_pages);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  return ServerProcess(*job, flags, shard).Run();
}
