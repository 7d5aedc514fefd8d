#include "tools/launch_plan.h"

#include <algorithm>
#include <chrono>

#include "server/checkpoint_layout.h"

namespace ps {

uint32_t MaxLaunchProcesses(uint32_t max_processes, unsigned hardware_threads) {
  if (max_processes != 0) return max_processes;
  return std::max<uint32_t>(64, 16 * std::max(hardware_threads, 1u));
}

uint32_t WorkerCpuShare(uint32_t workers, unsigned hardware_threads) {
  return std::max<uint32_t>(1, std::max(hardware_threads, 1u) / std::max(workers, 1u));
}

Status CheckLaunch(const JobOptions& job, const std::string& config_path,
                   const LauncherOptions& options) {
  if (job.cluster.servers.empty()) {
    return InvalidArgumentError("launcher: cluster.servers is empty in '" + config_path +
                                "'; list one host:port per shard");
  }
  if (job.cluster.workers == 0) {
    return InvalidArgumentError("launcher: cluster.workers is 0 in '" + config_path +
                                "'; the job needs >= 1 worker");
  }
  if (config_path.empty()) {
    return InvalidArgumentError("launcher: empty config path");
  }
  const uint64_t processes = job.cluster.servers.size() * uint64_t{job.replication.factor} +
                             job.cluster.workers + (job.cluster.evaluator ? 1 : 0);
  const uint32_t limit = MaxLaunchProcesses(options.max_processes);
  if (processes > limit) {
    return InvalidArgumentError(
        "launcher: '" + config_path + "' has " + std::to_string(processes) + " processes (" +
        std::to_string(job.cluster.servers.size()) + " servers + " +
        std::to_string(job.cluster.workers) + " workers" +
        (job.cluster.evaluator ? std::string(" + the evaluator") : "") +
        ") and ps_launch starts every one on this host; the limit is " + std::to_string(limit) +
        (options.max_processes == 0 ? " (16 per hardware thread, at least 64)" : "") +
        ". Run a job this size across hosts (mpirun, srun, Kubernetes), lower cluster.workers, "
        "or raise the limit with --max-processes");
  }
  if (options.grace < std::chrono::milliseconds(0)) {
    return InvalidArgumentError("launcher: grace period " + std::to_string(options.grace.count()) +
                                " ms is negative");
  }
  return Status::Ok();
}

StatusOr<RestorePoint> ResumePoint(const JobOptions& job, const std::string& config_path,
                                   bool resume) {
  if (resume) {
    if (job.checkpoint.dir.empty()) {
      return FailedPreconditionError("--resume: the job in '" + config_path +
                                     "' has no checkpoint.dir, so there is nothing to resume from");
    }
    if (!job.checkpoint.restore) {
      return FailedPreconditionError("--resume: checkpoint.restore is false in '" + config_path +
                                     "'; set it to true to resume");
    }
  }
  // Every shard restores the same generation: the newest one that all the
  // shards that wrote it have.
  PS_ASSIGN_OR_RETURN(const RestorePoint point, CommonRestorePoint(job));
  if (resume && point.clock < 0) {
    return FailedPreconditionError("--resume: " + job.checkpoint.dir +
                                   " holds no checkpoint generation; run without --resume to "
                                   "start the job afresh");
  }
  return point;
}

std::string ServerName(uint32_t shard, uint32_t replica) {
  return "server " + std::to_string(shard) +
         (replica > 0 ? " backup " + std::to_string(replica) : "");
}

std::vector<ReplicaSlot> ReplicasInStartOrder(const JobOptions& job) {
  const auto shards = static_cast<uint32_t>(job.cluster.servers.size());
  std::vector<ReplicaSlot> slots;
  for (uint32_t replica = job.replication.factor; replica-- > 0;) {
    for (uint32_t shard = 0; shard < shards; ++shard) slots.push_back({shard, replica});
  }
  return slots;
}

std::vector<std::string> ChildCommand(const JobOptions& job, const std::string& config_path,
                                      const LauncherOptions& options, const ChildSpec& child,
                                      int64_t restore_clock,
                                      const std::vector<uint32_t>& finished_workers) {
  const bool is_server = child.is_server;
  std::vector<std::string> argv = is_server ? options.server_command : options.worker_command;
  if (argv.empty()) {
    const char* binary = is_server ? "ps_server" : "ps_worker";
    argv.push_back(options.bin_dir.empty() ? binary : options.bin_dir + "/" + binary);
  }
  argv.insert(argv.end(), {"--config", config_path});
  if (child.is_evaluator) {
    argv.push_back("--evaluator");
  } else {
    argv.insert(argv.end(), {is_server ? "--shard" : "--rank", std::to_string(child.index)});
  }
  if (child.replica > 0 || child.join) {
    argv.insert(argv.end(), {"--replica", std::to_string(child.replica)});
  }
  if (child.join) argv.push_back("--join");
  if (!options.log_level.empty()) argv.insert(argv.end(), {"--log-level", options.log_level});
  // Every worker runs on this host: each gets its share of the cores for
  // its BLAS, not all of them (worker.cpu_threads 0 = auto).
  if (!is_server && job.worker.cpu_threads == 0) {
    const uint32_t share = WorkerCpuShare(job.cluster.workers + (job.cluster.evaluator ? 1 : 0));
    argv.insert(argv.end(), {"--cpu-threads", std::to_string(share)});
  }
  if (is_server && restore_clock >= 0 && !child.restart) {
    argv.insert(argv.end(), {"--restore-clock", std::to_string(restore_clock)});
  }
  if (is_server && child.map_epoch > 0) {
    argv.insert(argv.end(), {"--map-epoch", std::to_string(child.map_epoch)});
    if (!child.follow.empty()) argv.insert(argv.end(), {"--follow", child.follow});
  }
  if (is_server && (child.restart || child.map_epoch > 0) && !child.join &&
      !finished_workers.empty()) {
    std::string ranks;
    for (uint32_t r : finished_workers) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    argv.insert(argv.end(), {"--left-workers", ranks});
  }
  return argv;
}

std::string JoinArgv(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& arg : argv) {
    if (!text.empty()) text += ' ';
    text += arg;
  }
  return text;
}

}  // namespace ps
