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
#include <string>

#include <CLI/CLI.hpp>

#include "client/client.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/metrics_endpoint.h"
#include "common/rank.h"
#include "common/transport.h"
#include "worker/backend_factory.h"
#include "worker/evaluator.h"
#include "worker/param_store.h"
#include "worker/programs.h"
#include "worker/train_options.h"
#include "worker/training.h"

namespace {

// ps_worker's exit codes besides 0 (see the top of this file).
constexpr int kExitFailed = 1;
constexpr int kExitBadConfig = 2;

// The command line.
struct WorkerFlags {
  std::string config_path;
  ps::RankFlags rank;
  std::string log_level = "info";
  bool check = false;
  bool standalone = false;
  bool evaluator = false;
  std::optional<uint32_t> cpu_threads;
  int64_t metrics_port = -1;
  std::string metrics_csv;
};

// Declares ps_worker's flags on `app`; parsing fills *flags.
void AddFlags(CLI::App& app, WorkerFlags* flags) {
  app.add_option("--config", flags->config_path, "job YAML file")->required();
  ps::AddRankFlags(app, "rank",
                   "from mpirun/srun minus the server count, or JOB_COMPLETION_INDEX",
                   "ps-worker-3", &flags->rank);
  app.add_flag("--check", flags->check,
               "check the flags, the job file and its train section, resolve the rank, print "
               "what would run and exit 0 (resolves no host name, opens no socket)");
  app.add_option("--log-level", flags->log_level, "trace, debug, info, warn, error, off");
  app.add_flag("--standalone", flags->standalone,
               "train the job's model in this process with no servers: one worker with all the "
               "workers' data and steps (the single-process reference)");
  app.add_flag("--evaluator", flags->evaluator,
               "run the job's evaluator (cluster.evaluator: true): measure the model on the "
               "held-out data every train.eval_every clocks of the job while the workers train");
  app.add_option("--cpu-threads", flags->cpu_threads,
                 "BLAS threads of the CPU backend (overrides worker.cpu_threads; ps_launch "
                 "passes each worker its share of the host's cores)")
      ->check(CLI::Range(1u, 1024u));
  app.add_option("--metrics-port", flags->metrics_port,
                 "serve Prometheus metrics on this port instead of the one metrics.port gives "
                 "this rank (0: serve none)")
      ->check(CLI::Range(int64_t{0}, int64_t{65535}));
  app.add_option("--metrics-csv", flags->metrics_csv, "append progress rows to this CSV (overrides "
                 "train.metrics_csv)");
}

// --metrics-csv and --cpu-threads over the job file's values. False
// (logged) when the program refuses the CSV.
bool ApplyOverrides(const WorkerFlags& flags, ps::TrainJob* job) {
  if (!flags.metrics_csv.empty()) {
    job->train.metrics_csv = flags.metrics_csv;
    // The file's own checks ran at load; the flag's program checks now.
    if (const ps::ProgramSpec* p = ps::FindProgramSpec(job->train.program);
        p != nullptr && p->check != nullptr) {
      if (ps::Status checked = p->check(*job); !checked.ok()) {
        PS_LOG_ERROR("--metrics-csv: {}", checked.ToString());
        return false;
      }
    }
  }
  if (flags.cpu_threads) job->worker.cpu_threads = *flags.cpu_threads;
  return true;
}

// Whether --evaluator and --standalone go with the other flags and the job
// file; false (logged) when not. With --standalone the job becomes the
// single-process job (SingleProcessJob) and the rank 0.
bool ApplyProcessKind(WorkerFlags* flags, ps::TrainJob* job) {
  if (flags->evaluator) {
    if (flags->standalone || flags->rank.value || flags->rank.from_hostname) {
      PS_LOG_ERROR("--evaluator is a process of its own: drop --standalone, --rank and "
                   "--rank-from-hostname");
      return false;
    }
    if (!job->cluster.evaluator) {
      PS_LOG_ERROR("--evaluator: {} has cluster.evaluator: false; set it to true (in every "
                   "process's job file: the shards then serve the evaluator and worker 0 "
                   "leaves evaluating to it)",
                   flags->config_path);
      return false;
    }
  }
  if (flags->standalone) {
    if (flags->rank.value && *flags->rank.value != 0) {
      PS_LOG_ERROR("--standalone runs the whole job as worker 0; drop --rank {}",
                   *flags->rank.value);
      return false;
    }
    if (flags->rank.from_hostname) {
      PS_LOG_ERROR("--standalone runs the whole job as worker 0; drop --rank-from-hostname");
      return false;
    }
    *job = ps::SingleProcessJob(*job);
    flags->rank.value = 0;
  }
  return true;
}

// This process's rank: kEvaluatorWorker for the evaluator, else from the
// flags or the launcher's environment (common/rank.h).
ps::StatusOr<ps::ResolvedRank> ResolveRank(const WorkerFlags& flags, const ps::TrainJob& job) {
  if (flags.evaluator) return ps::ResolvedRank{ps::kEvaluatorWorker, "--evaluator"};
  return ps::ResolveRankFromFlags(flags.rank, static_cast<uint32_t>(job.cluster.servers.size()),
                                  job.cluster.workers, "rank");
}

// --check's line: what would run, and against which servers.
std::string DescribeRun(const WorkerFlags& flags, const ps::TrainJob& job,
                        const ps::ResolvedRank& rank, const ps::TrainProgram& program) {
  std::string what = "standalone: one process with all the data, no servers";
  if (!flags.standalone) {
    what = (flags.evaluator ? std::string("the evaluator")
                            : "rank " + std::to_string(rank.rank) + " of " +
                                  std::to_string(job.cluster.workers) + " (from " + rank.source +
                                  ")") +
           ", " + std::to_string(job.cluster.servers.size()) + " servers";
    for (const std::string& server : job.cluster.servers) what += " " + server;
  }
  return "ps_worker: train.program " + std::string(program.name) + ", " + what + "\n";
}

// After a run: the final values stay served metrics.linger_ms.
int AfterRun(const ps::ProgramContext& context, int code) {
  if (context.metrics != nullptr) {
    context.metrics->Linger(context.job->metrics.linger_ms, std::atomic<bool>{false});
  }
  return code;
}

// Runs `program` (or its evaluator) in `context`, whose store and client
// are made here: in this process with --standalone, else over the servers
// (a worker joins the job first; the evaluator holds no clock and reads as
// the workers go, so it does not).
int RunOverStore(const WorkerFlags& flags, const ps::TrainJob& job,
                 const ps::TrainProgram& program, ps::ProgramContext context) {
  if (flags.standalone) {
    auto store = ps::LocalParamStore::Create(job);
    if (!store.ok()) {
      PS_LOG_ERROR("{}", store.status().ToString());
      return kExitFailed;
    }
    PS_LOG_INFO("standalone: {} steps over all the data in this process, no servers",
                job.train.iterations);
    context.store = store->get();
    return AfterRun(context, program.run(context));
  }
  auto client = ps::Client::Create(job, context.rank);
  if (!client.ok()) {
    PS_LOG_ERROR("{}", client.status().ToString());
    return kExitFailed;
  }
  if (!flags.evaluator) {
    (*client)->SetTargetClock(job.train.iterations);
    if (ps::Status joined = (*client)->Join(); !joined.ok()) {
      PS_LOG_ERROR("cannot join the job: {}", joined.ToString());
      return kExitFailed;
    }
  }
  ps::RemoteParamStore store(job, client->get());
  context.store = &store;
  context.client = client->get();
  return AfterRun(context,
                  flags.evaluator ? ps::RunEvaluator(context, program) : program.run(context));
}

// Makes the compute backend and the metrics endpoint, then runs the
// program.
int RunProcess(const WorkerFlags& flags, const ps::TrainJob& job, uint32_t rank,
        const ps::TrainProgram& program) {
  // The compute backend (worker.device); asking for cuda where no device is
  // usable is a configuration error, reported before anything starts.
  auto backend = ps::CreateBackend(job.worker.device, job.worker.cpu_threads);
  if (!backend.ok()) {
    PS_LOG_ERROR("{}: worker.device: {}", flags.config_path, backend.status().ToString());
    return kExitBadConfig;
  }
  auto metrics = ps::StartProcessMetrics(
      job.metrics.bind, ps::WorkerMetricsPort(job, rank), flags.metrics_port,
      flags.evaluator ? std::string("the evaluator") : "worker " + std::to_string(rank));
  if (!metrics.ok()) {
    PS_LOG_ERROR("{}", metrics.status().ToString());
    return kExitFailed;
  }
  return RunOverStore(
      flags, job, program,
      {.job = &job, .rank = rank, .backend = backend->get(), .metrics = metrics->get()});
}

}  // namespace

int main(int argc, char** argv) {
  ps::KeepMessageMemory();
  CLI::App app{"ps_worker: one worker of a parameter-server job"};
  WorkerFlags flags;
  AddFlags(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a refused flag exits 2, as a bad config does (CLI11's
    // own codes would tell a launcher nothing).
    return app.exit(e) == 0 ? 0 : kExitBadConfig;
  }

  ps::Status logging = ps::InitLogging("worker", flags.log_level);
  if (!logging.ok()) {
    std::fprintf(stderr, "ps_worker: %s\n", logging.ToString().c_str());
    return kExitBadConfig;
  }
  auto job = ps::LoadTrainJobFile(flags.config_path);
  if (!job.ok()) {
    PS_LOG_ERROR("{}", job.status().ToString());
    return kExitBadConfig;
  }
  if (!ApplyOverrides(flags, &*job) || !ApplyProcessKind(&flags, &*job)) return kExitBadConfig;
  auto resolved = ResolveRank(flags, *job);
  if (!resolved.ok()) {
    PS_LOG_ERROR("{}", resolved.status().ToString());
    return kExitBadConfig;
  }
  const uint32_t rank = resolved->rank;
  ps::InitLogging(flags.evaluator ? std::string("evaluator") : "worker " + std::to_string(rank),
                  flags.log_level)
      .IgnoreError();
  if (job->train.program.empty()) {
    PS_LOG_ERROR("{}", ps::NoTrainSectionMessage(flags.config_path));
    return kExitBadConfig;
  }
  if (!job->train.command.empty()) {
    std::string command;
    for (const std::string& arg : job->train.command) command += (command.empty() ? "" : " ") + arg;
    PS_LOG_ERROR("{}: the job's workers run train.command ({}), not a program of ps_worker; "
                 "start them with ps_launch --config {}, or run that command with --config {} "
                 "--rank N",
                 flags.config_path, command, flags.config_path, flags.config_path);
    return kExitBadConfig;
  }
  // Known: LoadTrainJobFile checked the name.
  const ps::TrainProgram& program = *ps::FindTrainProgram(job->train.program);
  if (flags.standalone && ps::FindProgramSpec(program.name)->needs_servers) {
    PS_LOG_ERROR("training failed: train.program {} needs the servers (it cannot run with "
                 "--standalone)",
                 program.name);
    return kExitFailed;
  }
  if (flags.check) {
    std::fputs(DescribeRun(flags, *job, *resolved, program).c_str(), stdout);
    return 0;
  }
  return RunProcess(flags, *job, rank, program);
}
