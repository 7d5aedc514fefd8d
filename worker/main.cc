// ps_worker: one worker of a job. Runs the job's training program against
// the servers in the config.
//   ps_worker --config job.yaml --rank 0
// The rank may also come from mpirun/Slurm (see common/rank.h; under a
// combined mpirun the servers take the first ranks, so workers subtract the
// server count). Exits 0 when training recovered the generating weights
// (relative error under 5%), 1 when it did not or on a training or server
// error, 2 on a bad config or flag.
#include <cstdio>
#include <optional>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "common/logging.h"
#include "common/rank.h"
#include "worker/backend.h"
#include "worker/client.h"
#include "worker/linear_regression.h"
#include "worker/mlp_training.h"

namespace {
// Relative distance to the generating weights below which a run counts as
// converged (the noise floor is far lower: ~noise / sqrt(samples)).
constexpr double kMaxWeightError = 0.05;
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ps_worker: one worker of a parameter-server job"};
  std::string config_path;
  std::optional<int64_t> rank_flag;
  std::string log_level = "info";
  app.add_option("--config", config_path, "job YAML file")->required();
  app.add_option("--rank", rank_flag, "worker rank (default: from mpirun/Slurm environment)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
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
  auto backend = ps::CreateBackend(job->worker.device);
  if (!backend.ok()) {
    PS_LOG_ERROR("{}: worker.device: {}", config_path, backend.status().ToString());
    return 2;
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
  if (job->train.program == ps::TrainProgram::kMlp) {
    auto result = ps::TrainMlp(*job, *rank, client->get(), backend->get());
    if (!result.ok()) {
      PS_LOG_ERROR("training failed: {}", result.status().ToString());
      return 1;
    }
    if (ps::Status left = (*client)->Leave(); !left.ok()) {
      PS_LOG_WARN("could not say goodbye to every shard: {}", left.ToString());
    }
    PS_LOG_INFO("worker {} done: first loss {:.4f}, last loss {:.4f}{}", *rank, result->first_loss,
                result->last_loss,
                result->test_accuracy >= 0
                    ? fmt::format(", test accuracy {:.4f}", result->test_accuracy)
                    : std::string());
    if (!(result->last_loss < result->first_loss)) {
      PS_LOG_ERROR("the loss did not go down; check the table's optimizer.lr");
      return 1;
    }
    return 0;
  }
  auto result = ps::TrainLinearRegression(*job, *rank, client->get());
  if (!result.ok()) {
    PS_LOG_ERROR("training failed: {}", result.status().ToString());
    return 1;
  }
  if (ps::Status left = (*client)->Leave(); !left.ok()) {
    PS_LOG_WARN("could not say goodbye to every shard: {}", left.ToString());
  }
  PS_LOG_INFO("worker {} done: first loss {:.6f}, final loss {:.6f}, |w - w*|/|w*| = {:.4f}",
              *rank, result->first_loss, result->final_loss, result->weight_error);
  // The data has a known answer: the run succeeded when the weights found it.
  if (!(result->weight_error < kMaxWeightError)) {
    PS_LOG_ERROR("the weights did not converge: |w - w*|/|w*| = {:.4f} (needs < {}); raise "
                 "train.iterations or the table's optimizer.lr",
                 result->weight_error, kMaxWeightError);
    return 1;
  }
  return 0;
}
