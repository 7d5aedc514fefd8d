// What a launch starts and with which flags, decided from the job and the
// launcher's options alone (no process runs here): whether the job can be
// started on this host at all, the checkpoint clock every shard restores,
// and the command line of each server, worker and the evaluator, first
// started or started again. The launcher (tools/launcher.h) runs what this
// plans.
//
// Thread-safe: functions of their arguments (ResumePoint reads and creates
// the checkpoint folders).
#ifndef PS_TOOLS_LAUNCH_PLAN_H_
#define PS_TOOLS_LAUNCH_PLAN_H_

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/options.h"
#include "common/status.h"
#include "server/checkpoint_layout.h"
#include "tools/launcher.h"

namespace ps {

// `max_processes`, or when it is 0 the default limit of processes on a host
// with `hardware_threads` hardware threads: 16 per thread, at least 64.
uint32_t MaxLaunchProcesses(uint32_t max_processes,
                            unsigned hardware_threads = std::thread::hardware_concurrency());

// BLAS threads of each of `workers` workers sharing a host with
// `hardware_threads` hardware threads: an equal share, at least 1 (0
// hardware threads, unknown, counts as 1). ps_launch passes it as
// ps_worker --cpu-threads when worker.cpu_threads is 0 (auto).
uint32_t WorkerCpuShare(uint32_t workers,
                        unsigned hardware_threads = std::thread::hardware_concurrency());

// InvalidArgument, naming `config_path` and what to change, when the job
// cannot be launched: no servers, no workers, an empty config path, more
// processes than options.max_processes allows (MaxLaunchProcesses), a
// negative grace period.
Status CheckLaunch(const JobOptions& job, const std::string& config_path,
                   const LauncherOptions& options);

// The generation every server restores (CommonRestorePoint,
// server/checkpoint_layout.h): its clock is every server's --restore-clock
// (-1 for none), and it may have been written by another number of shards
// than the job's servers (each then reads its rows of every old shard's
// part). With `resume` FailedPrecondition when the job has no
// checkpoint.dir, has checkpoint.restore false, or no generation is held
// by every shard that wrote it.
StatusOr<RestorePoint> ResumePoint(const JobOptions& job, const std::string& config_path,
                                   bool resume);

// One child to start.
struct ChildSpec {
  bool is_server = false;
  bool is_evaluator = false;  // ps_worker --evaluator (cluster.evaluator)
  uint32_t index = 0;         // shard or rank
  uint32_t replica = 0;       // servers: the ReplicaAddress slot it holds
  // A server restarted while the job runs: it restores its own newest
  // generation (no --restore-clock) and is told which workers finished.
  bool restart = false;
  // A backup that takes its state from the running primary (--join).
  bool join = false;
  // Servers: the shard map it serves in (--map-epoch when > 0: a server a
  // reshard started, which is told which workers finished, as a restart is).
  int64_t map_epoch = 0;
  // A server of the next shard map that takes its rows from the servers of
  // this job file in memory (--follow; server/reshard_follower.h).
  std::string follow;
};

// "server 0", "server 0 backup 2": a server's name in the output.
std::string ServerName(uint32_t shard, uint32_t replica);

// One replica of one shard: a server ps_launch starts.
struct ReplicaSlot {
  uint32_t shard = 0;
  uint32_t replica = 0;
};
// Every replica of `job`'s shards in the order ps_launch starts them:
// backups first (each primary connects to its backups), shards in order
// within each replica.
std::vector<ReplicaSlot> ReplicasInStartOrder(const JobOptions& job);

// The argv that starts `child`: options.server_command or worker_command
// (or the binary in options.bin_dir), then --config, --shard or --rank (or
// --evaluator), --replica and --join, --log-level, a worker's
// --cpu-threads share (worker.cpu_threads 0), a first-started server's
// --restore-clock (`restore_clock` >= 0), a restarted one's --left-workers
// (`finished_workers`, the ranks that exited with code 0).
std::vector<std::string> ChildCommand(const JobOptions& job, const std::string& config_path,
                                      const LauncherOptions& options, const ChildSpec& child,
                                      int64_t restore_clock,
                                      const std::vector<uint32_t>& finished_workers);

// `argv` joined by spaces, for the line that says what was started.
std::string JoinArgv(const std::vector<std::string>& argv);

}  // namespace ps

#endif  // PS_TOOLS_LAUNCH_PLAN_H_
