// ps_worker: one worker of a job. Runs the job's training program against
// the servers in the config.
//   ps_worker --config job.yaml --rank 0
//   ps_worker --config job.yaml --standalone   (one process, no servers)
// The rank may also come from mpirun/Slurm (see common/rank.h; under a
// combined mpirun the servers take the first ranks, so workers subtract the
// server count). Exits 0 when training succeeded (linear regression: it
// recovered the generating weights, relative error under 5%; the other
// programs: the loss went down), 1 when it did not or on a training or
// server error, 2 on a bad config or flag.
#include <cstdio>
#include <optional>

#include <CLI/CLI.hpp>

#include "client/client.h"
#include "common/config.h"
#include "common/logging.h"
#include "common/rank.h"
#include "worker/backend.h"
#include "worker/linear_regression.h"
#include "worker/mf_training.h"
#include "worker/mlp_training.h"
#include "worker/param_store.h"
#include "worker/progress.h"
#include "worker/sparse_logreg_training.h"
#include "worker/training.h"

namespace {
// Relative distance to the generating weights below which a run counts as
// converged (the noise floor is far lower: ~noise / sqrt(samples)).
constexpr double kMaxWeightError = 0.05;

// Linear regression, the smallest program: it talks to the client directly
// (it overlaps each step's push with the next pull) and needs the servers.
int RunLinearRegression(const ps::JobOptions& job, uint32_t rank, ps::Client* client) {
  auto result = ps::TrainLinearRegression(job, rank, client);
  if (!result.ok()) {
    PS_LOG_ERROR("training failed: {}", result.status().ToString());
    return 1;
  }
  if (ps::Status left = client->Leave(); !left.ok()) {
    PS_LOG_WARN("could not say goodbye to every shard: {}", left.ToString());
  }
  PS_LOG_INFO("worker {} done: first loss {:.6f}, final loss {:.6f}, |w - w*|/|w*| = {:.4f}",
              rank, result->first_loss, result->final_loss, result->weight_error);
  // The data has a known answer: the run succeeded when the weights found it.
  if (!(result->weight_error < kMaxWeightError)) {
    PS_LOG_ERROR("the weights did not converge: |w - w*|/|w*| = {:.4f} (needs < {}); raise "
                 "train.iterations or the table's optimizer.lr",
                 result->weight_error, kMaxWeightError);
    return 1;
  }
  return 0;
}

// The programs written against a ParamStore (servers or in-process).
ps::StatusOr<ps::TrainSummary> RunProgram(const ps::JobOptions& job, uint32_t rank,
                                          ps::ParamStore* store, ps::Backend* backend) {
  switch (job.train.program) {
    case ps::TrainProgram::kMlp:
      return ps::TrainMlp(job, rank, store, backend);
    case ps::TrainProgram::kSparseLogisticRegression:
      return ps::TrainSparseLogisticRegression(job, rank, store, backend);
    case ps::TrainProgram::kMatrixFactorization:
      return ps::TrainMatrixFactorization(job, rank, store, backend);
    default:
      break;
  }
  return ps::InvalidArgumentError("train.program " + ps::TrainProgramName(job.train.program) +
                                  " needs the servers (it cannot run with --standalone)");
}

// Logs the outcome; 0 unless training failed or the loss grew to more than
// twice its first value (a diverging run). A loss that merely did not go
// down is a warning: under asp a worker that starts late meets a model the
// others already trained, so its first minibatch loss can be its lowest.
int Finish(const ps::StatusOr<ps::TrainSummary>& result, uint32_t rank, const ps::JobOptions& job) {
  if (!result.ok()) {
    PS_LOG_ERROR("training failed: {}", result.status().ToString());
    return 1;
  }
  const ps::TrainSummary& s = *result;
  PS_LOG_INFO("worker {} done: first loss {:.4f}, last loss {:.4f}, {:.0f} samples/s, {:.2f} s "
              "waiting on staleness{}{}",
              rank, s.first_loss, s.last_loss, s.samples_per_s, s.staleness_wait_s,
              s.metrics.empty() ? std::string()
                                : fmt::format(", {} {:.4f} (mean of the last {}: {:.4f})",
                                              s.metric_name, s.metrics.back(),
                                              std::min<size_t>(3, s.metrics.size()), s.TailMean(3)),
              job.train.metrics_csv.empty() ? std::string()
                                            : ", metrics in " + job.train.metrics_csv);
  if (!(s.last_loss <= 2 * s.first_loss)) {
    PS_LOG_ERROR("the loss grew from {:.4f} to {:.4f}: training diverges; lower the table's "
                 "optimizer.lr",
                 s.first_loss, s.last_loss);
    return 1;
  }
  if (!(s.last_loss < s.first_loss)) {
    PS_LOG_WARN("the loss did not go down ({:.4f} to {:.4f}); if this worker started with the "
                "job's initial model, check the table's optimizer.lr",
                s.first_loss, s.last_loss);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ps_worker: one worker of a parameter-server job"};
  std::string config_path;
  std::optional<int64_t> rank_flag;
  std::string log_level = "info";
  app.add_option("--config", config_path, "job YAML file")->required();
  app.add_option("--rank", rank_flag, "worker rank (default: from mpirun/Slurm environment)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
  bool standalone = false;
  app.add_flag("--standalone", standalone,
               "train the job's model in this process with no servers: one worker with all the "
               "workers' data and steps (the single-process reference)");
  std::optional<uint32_t> cpu_threads;
  app.add_option("--cpu-threads", cpu_threads,
                 "BLAS threads of the CPU backend (overrides worker.cpu_threads; ps_launch "
                 "passes each worker its share of the host's cores)")
      ->check(CLI::Range(1u, 1024u));
  std::string metrics_csv;
  app.add_option("--metrics-csv", metrics_csv, "append progress rows to this CSV (overrides "
                 "train.metrics_csv)");
  CLI11_PARSE(app, argc, argv);

  ps::Status logging = ps::InitLogging("worker", log_level);
  if (!logging.ok()) {
    std::fprintf(stderr, "ps_worker: %s\n", logging.ToString().c_str());
    return 2;
  }
  auto job = ps::LoadJobFile(config_path);
  if (!job.ok()) {
    PS_LOG_ERROR("{}", job.status().ToString());
    return 2;
  }
  if (!metrics_csv.empty()) job->train.metrics_csv = metrics_csv;
  if (cpu_threads) job->worker.cpu_threads = *cpu_threads;
  if (standalone) {
    if (rank_flag && *rank_flag != 0) {
      PS_LOG_ERROR("--standalone runs the whole job as worker 0; drop --rank {}", *rank_flag);
      return 2;
    }
    *job = ps::SingleProcessJob(*job);
    rank_flag = 0;
  }
  const auto num_servers = static_cast<uint32_t>(job->cluster.servers.size());
  auto rank = ps::ResolveRank(rank_flag, rank_flag ? 0 : num_servers, job->cluster.workers, "rank");
  if (!rank.ok()) {
    PS_LOG_ERROR("{}", rank.status().ToString());
    return 2;
  }
  ps::InitLogging("worker " + std::to_string(*rank), log_level).IgnoreError();
  if (job->train.program == ps::TrainProgram::kNone) {
    PS_LOG_ERROR("{}: the job has no train section; nothing to run",
                 config_path);
    return 2;
  }
  // The compute backend (worker.device); asking for cuda where no device is
  // usable is a configuration error, reported before anything starts.
  auto backend = ps::CreateBackend(job->worker.device, job->worker.cpu_threads);
  if (!backend.ok()) {
    PS_LOG_ERROR("{}: worker.device: {}", config_path, backend.status().ToString());
    return 2;
  }
  if (standalone) {
    auto store = ps::LocalParamStore::Create(*job);
    if (!store.ok()) {
      PS_LOG_ERROR("{}", store.status().ToString());
      return 1;
    }
    PS_LOG_INFO("standalone: {} steps over all the data in this process, no servers",
                job->train.iterations);
    return Finish(RunProgram(*job, *rank, store->get(), backend->get()), *rank, *job);
  }
  auto client = ps::Client::Create(*job, *rank);
  if (!client.ok()) {
    PS_LOG_ERROR("{}", client.status().ToString());
    return 1;
  }
  if (ps::Status joined = (*client)->Join(); !joined.ok()) {
    PS_LOG_ERROR("cannot join the job: {}", joined.ToString());
    return 1;
  }
  if (job->train.program == ps::TrainProgram::kLinearRegression) {
    return RunLinearRegression(*job, *rank, client->get());
  }
  ps::RemoteParamStore store(*job, client->get());
  auto result = RunProgram(*job, *rank, &store, backend->get());
  if (result.ok()) {
    if (ps::Status left = (*client)->Leave(); !left.ok()) {
      PS_LOG_WARN("could not say goodbye to every shard: {}", left.ToString());
    }
  }
  return Finish(result, *rank, *job);
}
