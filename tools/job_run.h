// The state of one Launcher::Run() (tools/launcher.h says what a run
// does): the children and their output, restarts, signals and the job's
// result, with the replication authority (tools/local_authority.h) deciding
// who serves each replicated shard. Internal to the launcher library; its
// own header so that the launcher's files stay readable.
//
// Not thread-safe: Run() does everything on its caller's thread.
#ifndef PS_TOOLS_JOB_RUN_H_
#define PS_TOOLS_JOB_RUN_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/authority.h"
#include "common/options.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "tools/launch_plan.h"
#include "tools/reshard_plan.h"
#include "tools/launcher.h"
#include "tools/signal_catcher.h"

namespace ps {

struct Child {
  std::string name;  // "server 0", "worker 1", "evaluator"
  bool is_server = false;
  bool is_evaluator = false;  // ps_worker --evaluator (cluster.evaluator)
  uint32_t index = 0;     // shard or rank
  // Servers: the replica it is, whose address it holds for good
  // (ReplicaAddress: 0 the shard's own, j >= 1 backup j's), whichever role
  // it has: the authority says which replica is its shard's primary.
  uint32_t replica = 0;
  bool rejoin_on_exit = false;  // stopped because it followed an old primary
  uint32_t restarts = 0;  // times restarted (a server after a crash, a worker under drop)
  std::unique_ptr<Subprocess> process;
  LineReader reader;
  bool output_open = true;
  bool exited = false;  // its exit has been handled
  bool killed = false;  // we sent it SIGKILL
  // Servers: the shard map it serves in (0: the job file's), and whether a
  // reshard moved the job past it (it handed over; its exit ends nothing).
  int64_t map_epoch = 0;
  bool retired = false;
  // A server of the next shard map started early to follow the old
  // servers' rows in memory (ps_server --follow), until that map starts:
  // then it serves (or, if it exited, a server restoring the handover
  // generation takes its place).
  bool follower = false;
  // Servers: the address whose port it holds (ReplicaHostPort's canonical
  // "host:port" of its shard and replica in its map).
  std::string address;
};

class JobRun {
 public:
  JobRun(const JobOptions& job, const std::string& config_path,
         const LauncherOptions& options)
      : job_(job), config_path_(config_path), options_(options) {}
  // The exit code of a server that handed its rows over to another server
  // count (ps_server; server/reshard_gate.h).
  static constexpr int kExitHandedOver = 3;
  // The exit code of a replica etcd's authority stopped (its lease is gone,
  // or its shard has another primary than the one it followed): started
  // again, it rejoins (ps_server).
  static constexpr int kExitStoppedByAuthority = 4;
  // ps_server's exit code when, started with --follow, it did not take its
  // rows over in memory: started again, it restores the handover generation.
  static constexpr int kExitNotFollowed = 5;

  StatusOr<int> Run();

 private:
  enum class Outcome { kUndecided, kSucceeded, kFailed, kSignalled };

  void Emit(std::string_view line);
  void Say(const std::string& message) { Emit("[launch] " + message); }

  // The argv that starts `child` (tools/launch_plan.h).
  std::vector<std::string> CommandFor(ChildSpec child) const {
    if (child.is_server) child.map_epoch = map_epoch_;
    return ChildCommand(job_, config_path_, options_, child, restore_clock_, finished_workers_);
  }
  // Starts `child` (CommandFor) with its output captured; *command is the
  // command line, for the log.
  StatusOr<std::unique_ptr<Subprocess>> Spawn(const ChildSpec& child, std::string* command) const;
  Status StartAll();
  // Every replica of every shard of the current map (job_, map_epoch_),
  // backups first, and the launcher's authority over them (replication.
  // authority launcher); each said with its pid and command.
  // `followed`: the replicas (shard * factor + replica) whose server (a
  // follower) runs already.
  Status StartServers(const std::vector<bool>& followed = {});
  // A server started as `spec` says, named `name`, holding `address`.
  Child& AddServer(std::string name, const ChildSpec& spec, const std::string& address,
                   std::unique_ptr<Subprocess> process);
  // A server died by a signal while the job runs: starts it again when the
  // job allows (checkpoints, liveness.server_restarts). False when it
  // cannot be restarted; `why_not` says why.
  bool MaybeRestart(Child& child, const std::string& how, std::string* why_not);
  // replication.factor >= 2 under the launcher's authority: a replica died by a
  // signal. The authority decides (a dead primary's backup takes over; a
  // dead backup is dropped); this stops the backups that followed an old
  // primary and starts the dead replica again as a backup (Rejoin). False
  // when the shard cannot go on (`why_not` says why).
  bool FailOver(Child& child, const std::string& how, std::string* why_not);
  // Starts `child` (exited) again as a backup of its shard at its own address
  // (--join), and tells the primary to send it a copy (a new epoch); it is a
  // full replica once it applied the copy. Within liveness.server_restarts.
  bool Rejoin(Child& child, const std::string& how, std::string* why_not);
  // The running process of replica `replica` of shard `shard`, or null.
  const Child* LiveServer(uint32_t shard, uint32_t replica) const;
  // Starts `child` again unless it was restarted `limit` times already
  // (`setting` names the limit); says so with `then`, what happens next.
  bool Respawn(Child& child, uint32_t limit, const std::string& setting, const std::string& how,
               const std::string& then, std::string* why_not, uint32_t replica = 0,
               bool join = false);
  // A worker failed (exit code or signal): under liveness.on_dead_worker
  // drop the job goes on (restarting it when liveness.worker_restarts
  // allows); under fail the job stops naming it.
  void WorkerFailed(Child& child, const std::string& how);
  // Resharding (ps_ctl reshard): a server of the current map exited after
  // handing over; the servers of the next map start once every old server
  // at an address the next map uses exited and every old shard wrote the
  // handover generation (MaybeStartNextMap, each round of the loop).
  void ServerHandedOver(Child& child, const std::string& how);
  void MaybeStartNextMap();
  // Once ps_ctl reshard planned the next map (its plan on disk), starts
  // that map's servers at once, each following the old servers' rows in
  // memory (server/reshard_follower.h), when the job allows it
  // (FollowPossible); stops them if the plan goes away (the reshard was
  // aborted) or changes.
  void MaybeStartFollowers();
  bool FollowPossible() const;
  void StopFollowers(const std::string& why);
  // A follower exited before its map started.
  void FollowerExited(Child& child, const std::string& how);
  // A server of the current map died (`how`) while ps_ctl reshard had the
  // next map's servers follow it and picked no handover clock yet: the
  // followers stop and none starts again for this plan (the rows move
  // through the generation); the dead server is restarted as ever.
  void ServerDiedWhileFollowed(const std::string& how);
  // `child`, a server that died, is one the next map's servers would
  // follow: a primary of the current map (any server of it at factor 1).
  bool Followed(const Child& child) const;
  // The handover clock of the reshard under way (ps_ctl committed it: its
  // plan is on disk, or a server handed over); nullopt when none is,
  // kReshardNoClockYet while ps_ctl has planned it and picks the clock
  // once the next map's servers follow, kReshardPlanUnreadable when its
  // plan cannot be read.
  static constexpr int64_t kReshardNoClockYet = -1;
  static constexpr int64_t kReshardPlanUnreadable = -2;
  std::optional<int64_t> ReshardUnderWay() const;
  // Shard `shard`'s part of handover generation `clock` is on disk whole:
  // no replica of it holds anything the job still needs.
  bool ShardHandedOver(uint32_t shard, int64_t clock) const;
  // Every worker finished or was dropped: the job ends.
  void MaybeFinish();
  // The job's result, the last line of the run.
  void SayResult();
  void Loop(SignalCatcher* catcher);

  void PumpOutput(Child& child, size_t max_bytes);
  void HandleExit(Child& child, int wait_status);
  // HandleExit of the evaluator while the job runs.
  void EvaluatorExited(Child& child, const std::string& how, bool success);
  // HandleExit after the job began to stop.
  void ExitWhileStopping(Child& child, const std::string& how, int wait_status);
  // The job fails because of `how` (said with `then` appended): all stop.
  void FailJob(const std::string& how, const std::string& then);
  void HandleSignal(int signo);
  void BeginStop();
  void KillAll(const std::string& why);
  bool AnyRunning() const;

  // The job as it runs now: a reshard moves it onto another job file's
  // servers (the workers started or restarted after it get that file too).
  JobOptions job_;
  std::string config_path_;
  const LauncherOptions& options_;
  int64_t map_epoch_ = 0;  // the shard map the current servers serve in
  // A reshard under way: the next map's plan and job, once a server handed
  // over.
  struct NextMap {
    bool pending = false;
    ReshardPlan plan;
    JobOptions job;
  };
  NextMap next_map_;
  // The next map the followers running now were started for (or, after
  // ServerDiedWhileFollowed, stopped for good); 0: none.
  int64_t followers_epoch_ = 0;

  std::vector<Child> children_;
  int64_t restore_clock_ = -1;  // --restore-clock for every server; -1: none
  // replication.factor >= 2 and replication.authority launcher: who is each
  // shard's primary, at which epoch (tools/local_authority.h); else null.
  std::unique_ptr<Authority> authority_;
  Outcome outcome_ = Outcome::kUndecided;
  int exit_code_ = 0;
  uint32_t workers_succeeded_ = 0;
  bool evaluator_failed_ = false;  // it exited with an error or a signal
  std::vector<uint32_t> finished_workers_;  // ranks that exited with code 0
  std::vector<uint32_t> dropped_workers_;   // ranks that failed under policy drop
  std::string failure_;  // why the job failed, for the result line
  bool stopping_ = false;
  bool killed_all_ = false;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace ps

#endif  // PS_TOOLS_JOB_RUN_H_
