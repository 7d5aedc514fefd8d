// ps_ctl: asks a running job's servers for their status, a checkpoint, or
// to shut down.
//   ps_ctl status     --config job.yaml [--shard N] [--replica J] [--timeout-ms 3000]
//                     [--json | --raw] [--watch [SECONDS]]
//   ps_ctl checkpoint --config job.yaml [--wait-s 600]
//   ps_ctl shutdown   --config job.yaml
//   ps_ctl keygen     --config job.yaml [--dir keys/] [--force | --rotate RANK]
//   ps_ctl reshard    --config job.yaml --to job3.yaml [--wait-s 120]
//                     [--through-generation]
//                     moves the running job onto the servers of job3.yaml
//                     (tools/ctl_reshard.h)
//   ps_ctl export     --checkpoint-dir DIR [--clock C] --out OUT [--force]
//                     runs ps_export, built beside ps_ctl (tools/ctl_export.h),
//                     so that ps_ctl itself links no RocksDB
// status prints one page for people: every worker's clock, how far it
// trails the fastest, how long it has been silent and whether it trains,
// is dead or left; the slowest worker; every shard's requests/s, MB/s in
// and out, waiting pulls, errors, memory and last checkpoint
// (tools/ctl_status.h). --json prints the same facts as one JSON object,
// --raw every shard's STATS report as the server writes it (what scripts
// that read single counters use). --watch redraws every SECONDS (default
// 2; MB/s come from consecutive rounds; with --json one object per line)
// until Ctrl-C, which ends it with exit 0. A shard that does not answer
// within 0.8 s gets a plain TCP connect to its address: a server that is
// not running is reported as such ("shard 1 at host:port: not running
// (connection refused)") in about a second, one that listens is asked
// again until --timeout-ms, and the other shards are still reported
// (--raw waits out --timeout-ms and prints the request's error, as before).
// Exits 0 when every asked shard answered, 1 when one did not (named in the
// output, or the error), 2 on a bad config or flag. keygen writes the
// job's CurveZMQ key pairs (common/security.h) into --dir, or the job's
// security.keys_dir, and talks to no server.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <string_view>
#include <thread>

#include <CLI/CLI.hpp>

#include "client/control_client.h"
#include "common/config.h"
#include "common/endpoint.h"
#include "common/logging.h"
#include "common/security.h"
#include "tools/ctl_reshard.h"
#include "tools/ctl_status.h"

namespace {

// ps_ctl keygen: the key pairs of every identity of the job, or a new one
// for one worker.
int Keygen(const ps::JobOptions& job, std::string dir, bool force, std::optional<uint32_t> rotate) {
  if (dir.empty()) dir = job.security.keys_dir;
  if (dir.empty()) {
    std::fprintf(stderr,
                 "ps_ctl keygen: where to? Give --dir <folder>, or set security.keys_dir in "
                 "%s\n",
                 job.source.c_str());
    return 2;
  }
  if (rotate) {
    if (*rotate >= job.cluster.workers) {
      std::fprintf(stderr, "ps_ctl keygen: --rotate %u: the job has workers 0..%u\n", *rotate,
                   job.cluster.workers - 1);
      return 2;
    }
    if (ps::Status s = ps::RotateWorkerKey(dir, *rotate); !s.ok()) {
      std::fprintf(stderr, "ps_ctl keygen: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("wrote a new key pair for worker %u in %s (the old public key is kept as "
                "worker-%u.previous.public). Next: copy worker-%u.public to the server hosts and "
                "send the servers SIGHUP; restart worker %u with worker-%u.secret; then delete "
                "worker-%u.previous.public there and send SIGHUP again.\n",
                *rotate, dir.c_str(), *rotate, *rotate, *rotate, *rotate, *rotate);
    return 0;
  }
  if (ps::Status s = ps::WriteJobKeys(dir, job.cluster.workers, force); !s.ok()) {
    std::fprintf(stderr, "ps_ctl keygen: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("wrote CurveZMQ key pairs to %s: server, worker-0..worker-%u, evaluator, admin "
              "(secret files mode 0600).\n"
              "Give each host only what its role needs: servers server.secret and every "
              "*.public; worker r server.public and worker-<r>.secret; the evaluator "
              "server.public and evaluator.secret; ps_ctl and ps_launch server.public and "
              "admin.secret.\n"
              "Use them with   security: { mode: curve, keys_dir: %s }\n",
              dir.c_str(), job.cluster.workers - 1, dir.c_str());
  if (job.security.mode != ps::SecurityMode::kCurve) {
    std::printf("(%s has security.mode none: the keys are not used until it says curve)\n",
                job.source.c_str());
  }
  return 0;
}

// Set by SIGINT while `status --watch` runs. A signal handler can reach
// nothing but a static; a lock-free atomic is safe to write from one.
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void OnInterrupt(int) { g_interrupted.store(true); }

constexpr double kDefaultWatchS = 2.0;  // status --watch without a value

struct StatusFlags {
  std::optional<uint32_t> shard;
  std::optional<uint32_t> replica;
  uint32_t timeout_ms = 3000;
  bool json = false;
  std::optional<double> watch_s;  // set: redraw every this many seconds
};

// ps_ctl status without --raw: one round, or rounds until SIGINT.
int RunStatus(ps::ControlClient& client, const ps::JobOptions& job, const StatusFlags& flags) {
  const auto deadline = std::chrono::milliseconds(flags.timeout_ms);
  const auto probe_deadline = std::chrono::milliseconds(1000);
  if (!flags.watch_s) {
    auto samples =
        ps::SampleShards(client, job, flags.shard, flags.replica, deadline, probe_deadline);
    const ps::JobView view = ps::BuildJobView(job, samples, {});
    if (flags.json) {
      std::printf("%s\n", ps::JobViewJson(view).c_str());
    } else {
      std::printf("%s", ps::FormatJobView(view).c_str());
    }
    return view.all_answered ? 0 : 1;
  }
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a poll in progress returns early
  ::sigaction(SIGINT, &action, nullptr);
  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  const auto interval = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(*flags.watch_s));
  // Two rounds at most are kept: rates need only the previous one.
  std::vector<ps::ShardSample> before, now;
  while (!g_interrupted.load()) {
    const auto started = std::chrono::steady_clock::now();
    now = ps::SampleShards(client, job, flags.shard, flags.replica, deadline, probe_deadline);
    if (g_interrupted.load()) break;
    const ps::JobView view = ps::BuildJobView(job, now, before);
    if (flags.json) {
      std::printf("%s\n", ps::JobViewJson(view).c_str());
    } else {
      const std::time_t wall = std::time(nullptr);
      std::tm local{};
      char when[32] = "";
      if (::localtime_r(&wall, &local) != nullptr) {
        std::strftime(when, sizeof(when), "%H:%M:%S", &local);
      }
      // On a terminal the page is drawn again in place; into a file or a
      // pipe the pages follow each other.
      std::printf("%s%s, every %g s (Ctrl-C to stop)\n%s%s", terminal ? "\033[H\033[2J" : "", when,
                  *flags.watch_s, ps::FormatJobView(view).c_str(), terminal ? "" : "\n");
    }
    std::fflush(stdout);
    before = std::move(now);
    now.clear();
    while (!g_interrupted.load() && std::chrono::steady_clock::now() - started < interval) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return 0;
}

// The request deadline (--timeout-ms) and, for status, how long a server
// that does not answer is waited for.
void SetDeadlines(ps::JobOptions& job, uint32_t timeout_ms, bool status, bool raw) {
  job.client.request_timeout_ms = timeout_ms;
  if (status && !raw) {
    // A short deadline per request, asked again while the server listens
    // (ps::SampleShards), so that a server that is not running costs about
    // a second, not --timeout-ms.
    job.client.request_timeout_ms = std::min(timeout_ms, ps::kStatusRequestTimeoutMs);
  }
  if (status) {
    // A server that exits while it is asked (the job ended) is reported as
    // not answering at the request's deadline, not waited for as a worker
    // waits for a server to come back.
    job.liveness.server_down_timeout_ms = job.client.request_timeout_ms;
  }
}

// The endpoints of replica `replica` of every shard; an empty list when
// none is named (the client finds each shard's primary). Prints why and
// returns nullopt when there is no such replica.
std::optional<std::vector<std::string>> ReplicaEndpoints(const ps::JobOptions& job,
                                                         std::optional<uint32_t> replica) {
  std::vector<std::string> endpoints;
  if (!replica.has_value()) return endpoints;
  if (*replica >= job.replication.factor) {
    std::fprintf(stderr, "ps_ctl: --replica %u: the job has replication.factor %u, so replicas "
                         "0..%u\n",
                 *replica, job.replication.factor, job.replication.factor - 1);
    return std::nullopt;
  }
  for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
    auto where = ps::ReplicaAddress(job, s, *replica);
    if (!where.ok()) {
      std::fprintf(stderr, "ps_ctl: %s\n", where.status().ToString().c_str());
      return std::nullopt;
    }
    endpoints.push_back(ps::ConnectEndpoint(*where));
  }
  return endpoints;
}

// ps_ctl status --raw: every shard's STATS text as the server writes it.
int PrintRawStats(ps::ControlClient& client, std::optional<uint32_t> shard) {
  int rc = 0;
  for (uint32_t s = 0; s < client.num_shards(); ++s) {
    if (shard && *shard != s) continue;
    auto report = client.Stats(s);
    if (!report.ok()) {
      std::fprintf(stderr, "ps_ctl: %s\n", report.status().ToString().c_str());
      rc = 1;
      continue;
    }
    std::printf("%s", report->c_str());
  }
  return rc;
}

// ps_ctl checkpoint: starts a generation on every shard and waits until
// no shard reports a write in progress.
int Checkpoint(ps::ControlClient& client, uint32_t wait_s) {
  auto generations = client.CheckpointServers();
  if (!generations.ok()) {
    std::fprintf(stderr, "ps_ctl: %s\n", generations.status().ToString().c_str());
    return 1;
  }
  for (const std::string& g : *generations) std::printf("writing %s\n", g.c_str());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
  for (uint32_t s = 0; s < client.num_shards(); ++s) {
    while (true) {
      auto report = client.StructuredStats(s);
      if (!report.ok()) {
        std::fprintf(stderr, "ps_ctl: %s\n", report.status().ToString().c_str());
        return 1;
      }
      if (!report->checkpoint.writing) break;
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "ps_ctl: shard %u is still writing its checkpoint after %u s\n", s,
                     wait_s);
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::printf("all %u checkpoints written\n", client.num_shards());
  return 0;
}

int Shutdown(ps::ControlClient& client) {
  ps::Status s = client.ShutdownServers();
  if (!s.ok()) {
    std::fprintf(stderr, "ps_ctl: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("all %u servers acknowledged SHUTDOWN\n", client.num_shards());
  return 0;
}

// ps_ctl export: runs ps_export from this binary's folder with the same
// arguments; returns only when it cannot (exit code 1).
int ExecExport(int argc, char** argv) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = ".";
  if (n > 0) {
    self[n] = '\0';
    dir = self;
    dir = dir.substr(0, dir.rfind('/'));
  }
  const std::string program = dir + "/ps_export";
  std::vector<char*> args = {const_cast<char*>(program.c_str())};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(program.c_str(), args.data());
  std::fprintf(stderr, "ps_ctl export: cannot run %s: %s; it is built and installed beside "
                       "ps_ctl\n", program.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "export") return ExecExport(argc, argv);
  CLI::App app{"ps_ctl: status, checkpoints and shutdown of a running parameter-server job, and "
               "export of its checkpoints"};
  app.require_subcommand(1);
  std::string config_path;
  std::optional<uint32_t> shard;
  uint32_t timeout_ms = 3000;
  CLI::App* status = app.add_subcommand(
      "status", "the job's workers and shards on one page (--json, --raw: the STATS reports)");
  CLI::App* shutdown = app.add_subcommand("shutdown", "ask every shard to shut down cleanly");
  CLI::App* checkpoint = app.add_subcommand(
      "checkpoint", "ask every shard to write a checkpoint now and wait until all are written");
  uint32_t wait_s = 600;
  checkpoint->add_option("--wait-s", wait_s, "how long to wait for the writes, seconds");
  CLI::App* reshard = app.add_subcommand(
      "reshard", "move the running job onto the servers of another job file (--to) while it "
                 "trains");
  std::string to_path;
  uint32_t reshard_wait_s = 120;
  reshard->add_option("--to", to_path, "the job file of the next servers")->required();
  reshard->add_option("--wait-s", reshard_wait_s,
                      "how long to wait for the next servers to serve, seconds");
  bool through_generation = false;
  reshard->add_flag("--through-generation", through_generation,
                    "move the rows through the handover generation even where the next servers "
                    "could follow them in memory (server/reshard_follower.h)");
  CLI::App* keygen = app.add_subcommand(
      "keygen", "write the job's CurveZMQ key pairs (security.mode curve); contacts no server");
  std::string keys_dir;
  bool force = false;
  std::optional<uint32_t> rotate;
  keygen->add_option("--dir", keys_dir, "folder for the keys (default: security.keys_dir)");
  auto* force_flag = keygen->add_flag("--force", force, "replace the keys a folder already holds");
  keygen->add_option("--rotate", rotate, "a new key pair for this worker rank only")
      ->excludes(force_flag);
  keygen->add_option("--config", config_path, "job YAML file")->required();
  // Listed for --help; `ps_ctl export ...` runs ps_export before parsing.
  app.add_subcommand("export",
                     "write a checkpoint generation as numpy .npy files and manifest.json "
                     "(ps_ctl export --help)")
      ->allow_extras();
  for (CLI::App* sub : {status, shutdown, checkpoint, reshard}) {
    sub->add_option("--config", config_path, "job YAML file")->required();
    sub->add_option("--timeout-ms", timeout_ms, "per-request deadline in milliseconds");
  }
  status->add_option("--shard", shard, "only this shard");
  bool json = false, raw = false;
  double watch_s = kDefaultWatchS;
  auto* json_flag = status->add_flag("--json", json, "the same facts as one JSON object");
  status->add_flag("--raw", raw, "every shard's STATS report as the server writes it")
      ->excludes(json_flag);
  CLI::Option* watch = status->add_option(
      "--watch", watch_s,
      "redraw every SECONDS (default 2) until Ctrl-C; MB/s from consecutive rounds");
  watch->expected(0, 1)->check(CLI::Range(0.1, 3600.0))->excludes("--raw");
  std::optional<uint32_t> replica;
  status->add_option("--replica", replica,
                     "with replication.factor k: ask replica J (0..k-1) of each shard, whatever "
                     "its role, instead of the shard's primary (default: the replica that serves, "
                     "found as a worker finds it)");
  CLI11_PARSE(app, argc, argv);

  if (!ps::InitLogging("ps_ctl", "warn").ok()) return 2;
  auto job = ps::LoadJobFile(config_path);
  if (!job.ok()) {
    std::fprintf(stderr, "ps_ctl: %s\n", job.status().ToString().c_str());
    return 2;
  }
  if (keygen->parsed()) return Keygen(*job, keys_dir, force, rotate);
  SetDeadlines(*job, timeout_ms, status->parsed(), raw);
  if (reshard->parsed()) {
    return ps::RunReshard(*job, to_path, reshard_wait_s, timeout_ms, !through_generation);
  }
  const std::optional<std::vector<std::string>> endpoints = ReplicaEndpoints(*job, replica);
  if (!endpoints) return 2;
  auto client = ps::ControlClient::Create(*job, *endpoints);
  if (!client.ok()) {
    std::fprintf(stderr, "ps_ctl: %s\n", client.status().ToString().c_str());
    return 1;
  }
  if (status->parsed() && shard && *shard >= (*client)->num_shards()) {
    std::fprintf(stderr, "ps_ctl: shard %u does not exist; the job has %u servers\n", *shard,
                 (*client)->num_shards());
    return 2;
  }
  if (status->parsed() && !raw) {
    StatusFlags flags;
    flags.shard = shard;
    flags.replica = replica;
    flags.timeout_ms = timeout_ms;
    flags.json = json;
    if (watch->count() > 0) {
      // "--watch" without a value reads as an empty one: the default interval.
      const std::vector<std::string>& given = watch->results();
      flags.watch_s = given.empty() || given[0].empty() ? kDefaultWatchS : watch_s;
    }
    return RunStatus(**client, *job, flags);
  }
  if (status->parsed()) return PrintRawStats(**client, shard);
  if (checkpoint->parsed()) return Checkpoint(**client, wait_s);
  return Shutdown(**client);
}
