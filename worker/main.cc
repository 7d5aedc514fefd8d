// ps_worker: one worker of a job. Runs the job's training program against
// the servers in the config.
//   ps_worker --config job.yaml --rank 0
//   ps_worker --config job.yaml --standalone   (one process, no servers)
//   ps_worker --config job.yaml --check        (what it would run, then exit)
//   ps_worker --config job.yaml --evaluator    (the job's evaluator, with
//                                               cluster.evaluator: true)
// The rank may also come from mpirun/Slurm (under a combined mpirun the
// servers take the first ranks, so workers subtract the server count), a
// Kubernetes Indexed Job (JOB_COMPLETION_INDEX), or a StatefulSet pod's name
// with --rank-from-hostname (see common/rank.h). train.program names the
// program (worker/programs.h).
// --check loads and checks the job file and its train section, resolves the
// rank, prints one line on stdout saying what would run and exits 0; it
// resolves no host name, opens no socket and creates no compute backend
// (worker.device is checked where the worker runs).
// Exits 0 when training succeeded (linear regression: it recovered the
// generating weights, relative error under 5%; the other programs: the loss
// did not diverge), 1 when it did not or on a training or server error, 2
// on a bad config or flag.
#include <atomic>
#include <cstdio>
#include <optional>

#include <CLI/CLI.hpp>

#include "client/client.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/metrics_endpoint.h"
#include "common/rank.h"
#include "worker/backend_factory.h"
#include "worker/evaluator.h"
#include "worker/param_store.h"
#include "worker/programs.h"
#include "worker/train_options.h"
#include "worker/training.h"

int main(int argc, char** argv) {
  CLI::App app{"ps_worker: one worker of a parameter-server job"};
  std::string config_path;
  ps::RankFlags rank_flags;
  std::string log_level = "info";
  app.add_option("--config", config_path, "job YAML file")->required();
  ps::AddRankFlags(app, "rank",
                   "from mpirun/srun minus the server count, or JOB_COMPLETION_INDEX",
                   "ps-worker-3", &rank_flags);
  bool check = false;
  app.add_flag("--check", check,
               "check the flags, the job file and its train section, resolve the rank, print "
               "what would run and exit 0 (resolves no host name, opens no socket)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
  bool standalone = false;
  app.add_flag("--standalone", standalone,
               "train the job's model in this process with no servers: one worker with all the "
               "workers' data and steps (the single-process reference)");
  bool evaluator = false;
  app.add_flag("--evaluator", evaluator,
               "run the job's evaluator (cluster.evaluator: true): measure the model on the "
               "held-out data every train.eval_every clocks of the job while the workers train");
  std::optional<uint32_t> cpu_threads;
  app.add_option("--cpu-threads", cpu_threads,
                 "BLAS threads of the CPU backend (overrides worker.cpu_threads; ps_launch "
                 "passes each worker its share of the host's cores)")
      ->check(CLI::Range(1u, 1024u));
  int64_t metrics_port = -1;
  app.add_option("--metrics-port", metrics_port,
                 "serve Prometheus metrics on this port instead of the one metrics.port gives "
                 "this rank (0: serve none)")
      ->check(CLI::Range(int64_t{0}, int64_t{65535}));
  std::string metrics_csv;
  app.add_option("--metrics-csv", metrics_csv, "append progress rows to this CSV (overrides "
                 "train.metrics_csv)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a refused flag exits 2, as a bad config does (CLI11's
    // own codes would tell a launcher nothing).
    return app.exit(e) == 0 ? 0 : 2;
  }

  ps::Status logging = ps::InitLogging("worker", log_level);
  if (!logging.ok()) {
    std::fprintf(stderr, "ps_worker: %s\n", logging.ToString().c_str());
    return 2;
  }
  auto job = ps::LoadTrainJobFile(config_path);
  if (!job.ok()) {
    PS_LOG_ERROR("{}", job.status().ToString());
    return 2;
  }
  if (!metrics_csv.empty()) {
    job->train.metrics_csv = metrics_csv;
    // The file's own checks ran at load; the flag's program checks now.
    if (const ps::TrainProgram* p = ps::FindTrainProgram(job->train.program);
        p != nullptr && p->check != nullptr) {
      if (ps::Status checked = p->check(*job); !checked.ok()) {
        PS_LOG_ERROR("--metrics-csv: {}", checked.ToString());
        return 2;
      }
    }
  }
  if (cpu_threads) job->worker.cpu_threads = *cpu_threads;
  if (evaluator) {
    if (standalone || rank_flags.value || rank_flags.from_hostname) {
      PS_LOG_ERROR("--evaluator is a process of its own: drop --standalone, --rank and "
                   "--rank-from-hostname");
      return 2;
    }
    if (!job->cluster.evaluator) {
      PS_LOG_ERROR("--evaluator: {} has cluster.evaluator: false; set it to true (in every "
                   "process's job file: the shards then serve the evaluator and worker 0 "
                   "leaves evaluating to it)",
                   config_path);
      return 2;
    }
  }
  if (standalone) {
    if (rank_flags.value && *rank_flags.value != 0) {
      PS_LOG_ERROR("--standalone runs the whole job as worker 0; drop --rank {}",
                   *rank_flags.value);
      return 2;
    }
    if (rank_flags.from_hostname) {
      PS_LOG_ERROR("--standalone runs the whole job as worker 0; drop --rank-from-hostname");
      return 2;
    }
    *job = ps::SingleProcessJob(*job);
    rank_flags.value = 0;
  }
  const auto num_servers = static_cast<uint32_t>(job->cluster.servers.size());
  auto resolved =
      evaluator ? ps::StatusOr<ps::ResolvedRank>(ps::ResolvedRank{ps::kEvaluatorWorker, "--evaluator"})
                : ps::ResolveRankFromFlags(rank_flags, num_servers, job->cluster.workers, "rank");
  if (!resolved.ok()) {
    PS_LOG_ERROR("{}", resolved.status().ToString());
    return 2;
  }
  const uint32_t rank = resolved->rank;
  ps::InitLogging(evaluator ? std::string("evaluator") : "worker " + std::to_string(rank),
                  log_level)
      .IgnoreError();
  if (job->train.program.empty()) {
    PS_LOG_ERROR("{}", ps::NoTrainSectionMessage(config_path));
    return 2;
  }
  // Known: LoadTrainJobFile checked the name.
  const ps::TrainProgram& program = *ps::FindTrainProgram(job->train.program);
  if (standalone && program.needs_servers) {
    PS_LOG_ERROR("training failed: train.program {} needs the servers (it cannot run with "
                 "--standalone)",
                 program.name);
    return 1;
  }
  if (check) {
    std::string what = "standalone: one process with all the data, no servers";
    if (!standalone) {
      what = (evaluator ? std::string("the evaluator")
                        : "rank " + std::to_string(rank) + " of " +
                              std::to_string(job->cluster.workers) + " (from " +
                              resolved->source + ")") +
             ", " + std::to_string(num_servers) + " servers";
      for (const std::string& server : job->cluster.servers) what += " " + server;
    }
    std::printf("ps_worker: train.program %s, %s\n", std::string(program.name).c_str(),
                what.c_str());
    return 0;
  }
  // The compute backend (worker.device); asking for cuda where no device is
  // usable is a configuration error, reported before anything starts.
  auto backend = ps::CreateBackend(job->worker.device, job->worker.cpu_threads);
  if (!backend.ok()) {
    PS_LOG_ERROR("{}: worker.device: {}", config_path, backend.status().ToString());
    return 2;
  }
  auto metrics = ps::StartProcessMetrics(
      job->metrics.bind, ps::WorkerMetricsPort(*job, rank), metrics_port,
      evaluator ? std::string("the evaluator") : "worker " + std::to_string(rank));
  if (!metrics.ok()) {
    PS_LOG_ERROR("{}", metrics.status().ToString());
    return 1;
  }
  // After training: the final values stay served metrics.linger_ms.
  const auto finish = [&](int code) {
    if (*metrics != nullptr) (*metrics)->Linger(job->metrics.linger_ms, std::atomic<bool>{false});
    return code;
  };
  ps::ProgramContext context{
      .job = &*job, .rank = rank, .backend = backend->get(), .metrics = metrics->get()};
  if (standalone) {
    auto store = ps::LocalParamStore::Create(*job);
    if (!store.ok()) {
      PS_LOG_ERROR("{}", store.status().ToString());
      return 1;
    }
    PS_LOG_INFO("standalone: {} steps over all the data in this process, no servers",
                job->train.iterations);
    context.store = store->get();
    return finish(program.run(context));
  }
  auto client = ps::Client::Create(*job, rank);
  if (!client.ok()) {
    PS_LOG_ERROR("{}", client.status().ToString());
    return 1;
  }
  if (evaluator) {
    // No rendezvous: it holds no clock, and reads as the workers go.
    ps::RemoteParamStore store(*job, client->get());
    context.store = &store;
    context.client = client->get();
    return finish(ps::RunEvaluator(context, program));
  }
  (*client)->SetTargetClock(job->train.iterations);
  if (ps::Status joined = (*client)->Join(); !joined.ok()) {
    PS_LOG_ERROR("cannot join the job: {}", joined.ToString());
    return 1;
  }
  ps::RemoteParamStore store(*job, client->get());
  context.store = &store;
  context.client = client->get();
  return finish(program.run(context));
}
