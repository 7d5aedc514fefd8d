// Launcher: runs one job on this machine, the library behind ps_launch.
//
// Starts one ps_server per entry of cluster.servers (shard order), and with
// replication.factor k each shard's k - 1 backups (ps_server --replica j,
// started before the shards), then cluster.workers ps_worker processes, streams every child's output line by
// line with a prefix ("[server 0] ...", "[worker 1] ..."), and ends the job:
//
//  - all workers exit with code 0: SIGTERM to the servers that have not
//    exited by themselves (server.exit_when_workers_leave), up to `grace`
//    for them to stop, SIGKILL to the rest; exit code 0, or 1 if a server
//    then ends other than by exit code 0 or that SIGTERM (it crashed or had
//    to be killed: a shutdown bug worth failing on);
//  - a worker exits non-zero or by a signal: under liveness.on_dead_worker
//    fail (or with heartbeats off) the job stops as below; under drop the
//    job goes on, and the worker is started again (at most
//    liveness.worker_restarts times per rank; it rejoins at the clock the
//    servers hold for it) or, past the limit, left out: the job ends when
//    every other worker finished, with exit code 0 if any did;
//  - a server exits non-zero or by a signal first (and is not restarted,
//    below), or a worker fails under fail: the launcher says which and how
//    ("[launch] worker 1 exited with code 3; stopping the job") and stops
//    all others the same way; exit code 1;
//  - with checkpoints, every server is started with --restore-clock set to
//    the newest generation that all the shards that wrote it hold
//    (CommonRestorePoint, server/checkpoint_layout.h), written by the
//    job's number of servers or another (each server then reads its rows
//    of every old shard's part: server/restore.h);
//  - a server that dies by a signal while workers run (a crash, the
//    out-of-memory killer, kill -9) is started again, when the job has
//    checkpoint.dir and replication.factor 1, at most
//    liveness.server_restarts times per shard: it
//    restores its own newest generation, is told (--left-workers) which
//    workers already finished, and the workers go on (client/client.h sends
//    their unanswered requests again). Without checkpoints, or past the
//    limit, the job stops as for any failure;
//  - with replication.factor >= 2 the launcher is the authority over each
//    shard's replicas instead: a dead primary's live backup is promoted (it
//    takes over the shard's address) and a dead backup is dropped from its
//    primary's log, each at the shard's next epoch; the job goes on. The
//    dead replica is started again (within liveness.server_restarts) as a
//    backup with --join and its primary is told to send it a copy
//    (kMembershipAddBackup, one more epoch); a backup still copying is not
//    promoted. A shard with no live replica stops the job;
//  - SIGINT or SIGTERM reaches the launcher: it stops all children the same
//    way; exit code 130 or 143. A second signal SIGKILLs them at once.
//
// A server that exits with code 0 while workers still run is reported and
// the job goes on (every worker said goodbye, or an operator shut it down
// with ps_ctl; workers that still need it fail on their own). The last line
// states the job's result ("[launch] job succeeded: all 4 workers finished
// (exit 0)", "[launch] job failed: worker 1 exited with code 3 (exit 1)").
//
// Children run in their own process groups (common/subprocess.h), so a
// Ctrl-C on the terminal reaches the launcher only and the job stops in
// order; they die with SIGKILL if the launcher dies.
#ifndef PS_TOOLS_LAUNCHER_H_
#define PS_TOOLS_LAUNCHER_H_

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/options.h"
#include "common/status.h"

namespace ps {

struct LauncherOptions {
  // Directory that holds the ps_server and ps_worker binaries. Used for the
  // commands below that are left empty. Default: empty (current directory).
  std::string bin_dir;
  // Time the children get between SIGTERM and SIGKILL when the job stops.
  // >= 0. Default 5 s.
  std::chrono::milliseconds grace{5000};
  // Passed to every child as "--log-level <log_level>"; empty: not passed.
  // Default "info".
  std::string log_level = "info";
  // Argv prefix that starts a server; the launcher appends
  // "--config <file> --shard <i>" and the log level flag.
  // Empty (default): {bin_dir + "/ps_server"}. Tests put
  // {"/bin/sh", "-c", "<script>", "sh"} here ($1.. are the appended flags).
  std::vector<std::string> server_command;
  // Same for workers, with "--config <file> --rank <r>".
  // Empty (default): {bin_dir + "/ps_worker"}.
  std::vector<std::string> worker_command;
  // The job must resume from a checkpoint: Run() fails with
  // FailedPrecondition, starting nothing, when the job has no
  // checkpoint.dir, has checkpoint.restore: false, or no generation is held
  // by every shard. Default false (resume when there is something to
  // resume from, else start afresh).
  bool resume = false;
  // Catch SIGINT and SIGTERM (process-wide handlers) while Run() is in
  // progress and stop the job on them; the previous handlers are restored
  // when Run() returns. Only one Run() at a time may do this. Default true.
  bool handle_signals = true;
  // The job's metrics CSV (train.metrics_csv): a previous run's file there
  // is moved to <path>.prev before the children start, so that each run
  // starts a new one. Empty (default): none.
  std::string metrics_csv;
  // Most processes (servers, workers, the evaluator) Run() starts on this host; a job
  // with more is refused before anything starts. 0 (default): 16 per
  // hardware thread, at least 64 (MaxLaunchProcesses).
  uint32_t max_processes = 0;
  // Receives every output line (children's, prefixed, and the launcher's
  // own "[launch] ..."), without '\n', on the thread of Run().
  // Default (empty): written to stdout, flushed per line.
  std::function<void(std::string_view line)> output;
};

// Thread-compatible; Run() may be called again after it returns.
class Launcher {
 public:
  // `job` is assumed validated (LoadJobFile does it); the launcher reads
  // only cluster.servers, cluster.workers, checkpoint, worker.cpu_threads
  // and the liveness section. `config_path` is the file the children are
  // given with --config.
  Launcher(JobOptions job, std::string config_path, LauncherOptions options);

  // Runs the job to its end (see the file comment) and returns the exit code
  // for ps_launch: 0 success, 1 a child failed, 128 + signal number when
  // stopped by SIGINT/SIGTERM. Every child has been reaped when it returns,
  // whatever the outcome.
  // Errors (after stopping the children already started):
  //   InvalidArgument: no servers, no workers, more processes than
  //     max_processes, empty config path, negative grace;
  //   FailedPrecondition: handle_signals and another Run() is handling them;
  //     `resume` and nothing to resume from;
  //   NotFound / PermissionDenied / ...: a child could not be started (from
  //     Subprocess::Spawn; the message names the binary).
  StatusOr<int> Run();

 private:
  const JobOptions job_;
  const std::string config_path_;
  const LauncherOptions options_;
};

}  // namespace ps

#endif  // PS_TOOLS_LAUNCHER_H_
