#include "tools/launcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "common/authority.h"
#include "common/endpoint.h"
#include "common/subprocess.h"
#include "common/wire.h"
#include "tools/job_run.h"
#include "tools/launch_plan.h"
#include "tools/local_authority.h"
#include "tools/signal_catcher.h"
#include "worker/metrics_csv.h"

namespace ps {
namespace {

using LaunchClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Without pidfds (kernel < 5.3) exits are noticed by polling this often.
constexpr milliseconds kReapTick(50);
// Most bytes read from one child per wake-up, so that a chatty child cannot
// starve the others or the signal pipe.
constexpr size_t kReadChunk = 64 * 1024;
// Most bytes drained from a child's pipe right after it exited.
constexpr size_t kDrainLimit = 1 << 20;

std::string SignalName(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  return abbrev != nullptr ? std::string("SIG") + abbrev
                           : "signal " + std::to_string(signo);
}

}  // namespace

void JobRun::Emit(std::string_view line) {
  if (options_.output) {
    options_.output(line);
    return;
  }
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

Status JobRun::StartAll() {
  PS_ASSIGN_OR_RETURN(const RestorePoint restore, ResumePoint(job_, config_path_, options_.resume));
  restore_clock_ = restore.clock;
  // Plans of reshards an earlier run of the job left (it stopped during
  // one): this run starts at the job file's map.
  if (!job_.checkpoint.dir.empty()) {
    StatusOr<std::vector<std::string>> removed = RemoveReshardPlans(job_.checkpoint.dir);
    if (!removed.ok()) {
      Say("warning: " + removed.status().ToString());
    } else {
      for (const std::string& plan : *removed) {
        Say("checkpoint: removed " + plan + ", the plan of a reshard an earlier run stopped "
            "during; this run serves the " + std::to_string(job_.cluster.servers.size()) +
            " servers of " + config_path_);
      }
    }
  }
  if (restore_clock_ >= 0) {
    const size_t servers = job_.cluster.servers.size();
    Say("checkpoint: every shard restores clock " + std::to_string(restore_clock_) + " from " +
        job_.checkpoint.dir +
        (restore.writers == servers
             ? std::string()
             : ", written by " + std::to_string(restore.writers) + " shards: each of the " +
                   std::to_string(servers) + " servers reads its rows of theirs"));
    if (!restore.passed_over.empty()) {
      Say("checkpoint: newer generations are incomplete, passed over: " + restore.passed_over);
    }
  }
  // Each run starts a new metrics file; the previous run's is kept aside.
  if (!options_.metrics_csv.empty()) {
    StatusOr<bool> moved = MetricsCsv::SetAside(options_.metrics_csv);
    if (!moved.ok()) return moved.status();
    if (*moved) {
      Say("metrics: moved the previous run's " + options_.metrics_csv + " to " +
          options_.metrics_csv + ".prev");
    }
  }
  // The servers, then the workers.
  PS_RETURN_IF_ERROR(StartServers());
  const uint32_t processes = job_.cluster.workers;
  const uint32_t total = processes + (job_.cluster.evaluator ? 1 : 0);
  children_.reserve(children_.size() + total);
  for (uint32_t i = 0; i < total; ++i) {
    const bool is_evaluator = i == processes;  // last
    const uint32_t index = is_evaluator ? 0 : i;
    std::string name = is_evaluator ? std::string("evaluator") : "worker " + std::to_string(index);
    ChildSpec spec;
    spec.is_evaluator = is_evaluator;
    spec.index = index;
    std::string command;
    StatusOr<std::unique_ptr<Subprocess>> process = Spawn(spec, &command);
    if (!process.ok()) {
      return process.status().WithContext("launcher: " + name);
    }
    Say("started " + name + " (pid " + std::to_string((*process)->pid()) + "): " + command);
    Child& child = children_.emplace_back();
    child.name = std::move(name);
    child.is_evaluator = is_evaluator;
    child.index = index;
    child.process = std::move(process).value();
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Subprocess>> JobRun::Spawn(const ChildSpec& child,
                                                    std::string* command) const {
  SubprocessOptions spawn;
  spawn.argv = CommandFor(child);
  spawn.capture_output = true;
  *command = JoinArgv(spawn.argv);
  return Subprocess::Spawn(spawn);
}

Status JobRun::StartServers(const std::vector<bool>& followed) {
  // Every shard's replicas, backups first: the primaries connect to them.
  const auto shards = static_cast<uint32_t>(job_.cluster.servers.size());
  const uint32_t factor = job_.replication.factor;
  if (factor > 1 && job_.replication.authority == ReplicationAuthority::kLauncher) {
    // The current map's: every shard at epoch 0 with replica 0 its primary.
    authority_ = std::make_unique<LocalAuthority>(
        job_, [this](uint32_t shard, uint32_t replica) {
          return LiveServer(shard, replica) != nullptr;
        });
  }
  // Of an earlier map (a reshard): named by the map they serve.
  const std::string map = map_epoch_ == 0 ? "" : " of shard map " + std::to_string(map_epoch_);
  children_.reserve(children_.size() + size_t{shards} * factor);
  for (const auto [index, replica] : ReplicasInStartOrder(job_)) {
    if (size_t{index} * factor + replica < followed.size() &&
        followed[size_t{index} * factor + replica]) {
      continue;
    }
    std::string name = ServerName(index, replica);
    StatusOr<HostPort> address = ReplicaHostPort(job_, index, replica);
    if (!address.ok()) return address.status().WithContext("launcher: " + name);
    ChildSpec spec;
    spec.is_server = true;
    spec.index = index;
    spec.replica = replica;
    std::string command;
    StatusOr<std::unique_ptr<Subprocess>> process = Spawn(spec, &command);
    if (!process.ok()) {
      return process.status().WithContext("launcher: " + name + map);
    }
    Say("started " + name + map + " (pid " + std::to_string((*process)->pid()) + "): " + command);
    spec.map_epoch = map_epoch_;
    AddServer(std::move(name), spec, address->canonical, std::move(process).value());
  }
  return Status::Ok();
}

Child& JobRun::AddServer(std::string name, const ChildSpec& spec, const std::string& address,
                         std::unique_ptr<Subprocess> process) {
  Child& child = children_.emplace_back();
  child.name = std::move(name);
  child.is_server = true;
  child.index = spec.index;
  child.replica = spec.replica;
  child.map_epoch = spec.map_epoch;
  child.address = address;
  child.process = std::move(process);
  return child;
}

bool JobRun::AnyRunning() const {
  return std::any_of(children_.begin(), children_.end(),
                     [](const Child& c) { return !c.exited; });
}

void JobRun::PumpOutput(Child& child, size_t max_bytes) {
  if (!child.output_open) return;
  std::vector<std::string> lines;
  StatusOr<bool> eof =
      child.reader.ReadFrom(child.process->output_fd(), &lines, max_bytes);
  const std::string prefix = "[" + child.name + "] ";
  for (const std::string& line : lines) Emit(prefix + line);
  if (!eof.ok()) {
    Say("cannot read the output of " + child.name + ": " +
        eof.status().ToString());
    child.output_open = false;
  } else if (*eof) {
    child.output_open = false;
  }
}

void JobRun::BeginStop() {
  if (stopping_) return;
  stopping_ = true;
  deadline_ = LaunchClock::now() + options_.grace;
  for (Child& child : children_) {
    if (child.exited) continue;
    Status sent = child.process->Signal(SIGTERM);
    if (!sent.ok()) Say("cannot stop " + child.name + ": " + sent.ToString());
  }
}

void JobRun::KillAll(const std::string& why) {
  killed_all_ = true;
  for (Child& child : children_) {
    if (child.exited) continue;
    Say(child.name + " " + why + "; sending SIGKILL");
    child.killed = true;
    child.process->Signal(SIGKILL).IgnoreError();
  }
}

const Child* JobRun::LiveServer(uint32_t shard, uint32_t replica) const {
  for (const Child& c : children_) {
    if (c.is_server && !c.retired && c.index == shard && c.replica == replica && !c.exited) {
      return &c;
    }
  }
  return nullptr;
}

void JobRun::FailJob(const std::string& how, const std::string& then) {
  Say(how + then);
  failure_ = how;
  outcome_ = Outcome::kFailed;
  exit_code_ = 1;
  BeginStop();
}

void JobRun::HandleExit(Child& child, int wait_status) {
  child.exited = true;
  const std::string how = child.name + " " + DescribeWaitStatus(wait_status);
  const bool success = ExitedSuccessfully(wait_status);
  if (stopping_) {
    ExitWhileStopping(child, how, wait_status);
    return;
  }
  if (child.follower) {
    FollowerExited(child, how);
    return;
  }
  if (child.retired) {
    // A server of an earlier shard map: it handed over and lingered to
    // answer the workers that had not turned yet.
    Say(how + " (a server the job was moved off)");
    return;
  }
  if (child.is_server && WIFEXITED(wait_status) &&
      WEXITSTATUS(wait_status) == kExitHandedOver) {
    ServerHandedOver(child, how);
    return;
  }
  // A server that dies while a reshard is under way (ps_ctl committed it:
  // its plan is on disk) would come back knowing nothing of it, and the
  // others would wait for its part of the handover for good. Unless its
  // shard handed over already: a replica left out of its primary's log (a
  // backup still waiting for its copy) learns nothing of the handover and
  // stops on its own once the primary is gone.
  const std::optional<int64_t> handover = child.is_server ? ReshardUnderWay() : std::nullopt;
  if (handover == kReshardNoClockYet) {
    // No handover clock is committed yet (ps_ctl writes it into the plan
    // before its commit): the server comes back (or its backup takes over)
    // as at any other time; a commit it cannot take makes ps_ctl abort the
    // reshard, and the job goes on on its servers. The followers stop if
    // they followed it (a primary).
    if (Followed(child)) ServerDiedWhileFollowed(how);
  } else if (handover.has_value()) {
    if (*handover >= 0 && child.map_epoch == map_epoch_ &&
        ShardHandedOver(child.index, *handover)) {
      child.retired = true;
      Say(how + ": shard " + std::to_string(child.index) + " handed its rows over at clock " +
          std::to_string(*handover) + " already, so it holds nothing the job needs");
      return;
    }
    FailJob(how, " while the job was being moved onto other servers (ps_ctl reshard); stopping "
                 "the job. Resume it from its checkpoints with ps_launch --resume (on the job "
                 "file it ran on)");
    return;
  }
  // A server that died by a signal crashed (or was killed): it comes back
  // from its checkpoint. One that exited with an error code found a
  // problem a restart would meet again.
  std::string why_not;
  if (child.is_server && child.rejoin_on_exit) {
    // Stopped by this launcher: it followed a primary that is gone.
    child.rejoin_on_exit = false;
    if (Rejoin(child, how, &why_not)) return;
    FailJob(how, "; " + why_not + "; stopping the job");
    return;
  }
  if (child.is_evaluator) {
    EvaluatorExited(child, how, success);
    return;
  }
  const bool stopped_by_etcd = child.is_server && WIFEXITED(wait_status) &&
                               WEXITSTATUS(wait_status) == kExitStoppedByAuthority &&
                               job_.replication.authority == ReplicationAuthority::kEtcd;
  // A follower the next map's start took as its server, which did not take
  // its rows over after all (server/reshard_follower.h): started again, it
  // restores the handover generation.
  const bool not_followed = child.is_server && WIFEXITED(wait_status) &&
                            WEXITSTATUS(wait_status) == kExitNotFollowed;
  if (child.is_server && (WIFSIGNALED(wait_status) || stopped_by_etcd || not_followed)) {
    if (MaybeRestart(child, how, &why_not)) return;
    why_not = "; " + why_not;
  }
  if (!success && !child.is_server) {
    WorkerFailed(child, how);
  } else if (!success) {
    FailJob(how, why_not + "; stopping the job");
  } else if (child.is_server) {
    // Servers exit by themselves once every worker has said goodbye
    // (server.exit_when_workers_leave), which may be just before the
    // last worker process exits; or an operator ran ps_ctl shutdown.
    // Workers that still need it fail on their own.
    Say(how);
  } else {
    Say(how);
    finished_workers_.push_back(child.index);
    ++workers_succeeded_;
    MaybeFinish();
  }
}

void JobRun::EvaluatorExited(Child& child, const std::string& how, bool success) {
  // Training never waits for it. It holds no state: started again, it
  // reads from the job's current clock on. Past its restarts a failed
  // evaluator costs the job its evaluations, and the result says so.
  if (success) {
    Say(how);
  } else {
    std::string why_not;
    if (Respawn(child, job_.liveness.worker_restarts, "liveness.worker_restarts", how,
                "it evaluates from the job's current clock on", &why_not)) {
      return;
    }
    Say(how + "; training goes on without evaluations (" + why_not +
        "; the shards stop waiting for it after liveness.timeout_ms)");
    evaluator_failed_ = true;
  }
  MaybeFinish();
}

void JobRun::ExitWhileStopping(Child& child, const std::string& how, int wait_status) {
  // After a success, a server must end by exit code 0 or by the SIGTERM it
  // was sent; anything else is a shutdown bug.
  const bool clean = ExitedSuccessfully(wait_status) || child.retired || child.follower ||
                     (WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGTERM);
  if (outcome_ == Outcome::kSucceeded && child.is_server && !clean) {
    Say(how + " while shutting down; the job fails");
    exit_code_ = 1;
  } else {
    Say(how);
  }
}

void JobRun::WorkerFailed(Child& child, const std::string& how) {
  const LivenessOptions& liveness = job_.liveness;
  if (liveness.on_dead_worker != DeadWorkerPolicy::kDrop || liveness.heartbeat_ms == 0) {
    FailJob(how, "; stopping the job (liveness.on_dead_worker: fail; with drop the job would go "
                 "on without it)");
    return;
  }
  std::string why_not;
  if (Respawn(child, liveness.worker_restarts, "liveness.worker_restarts", how,
              "it rejoins at the clock the servers hold for it (liveness.on_dead_worker: drop)",
              &why_not)) {
    return;
  }
  Say(how + "; the job goes on without it (liveness.on_dead_worker: drop; " + why_not + ")");
  dropped_workers_.push_back(child.index);
  MaybeFinish();
}

void JobRun::MaybeFinish() {
  if (workers_succeeded_ + dropped_workers_.size() < job_.cluster.workers) return;
  for (const Child& child : children_) {
    if (child.is_evaluator && !child.exited) {
      // Its last evaluation reads the final model; the servers serve it
      // until it leaves, then exit.
      Say("all workers are done; waiting for the evaluator's last evaluation");
      return;
    }
  }
  if (workers_succeeded_ == 0) {
    Say("every worker failed; stopping the servers");
    failure_ = "every worker failed (liveness.on_dead_worker: drop)";
    outcome_ = Outcome::kFailed;
    exit_code_ = 1;
  } else {
    Say(dropped_workers_.empty()
            ? "all " + std::to_string(workers_succeeded_) + " workers finished; stopping the servers"
            : std::to_string(workers_succeeded_) + " of " + std::to_string(job_.cluster.workers) +
                  " workers finished, the others were dropped; stopping the servers");
    outcome_ = Outcome::kSucceeded;
    exit_code_ = evaluator_failed_ ? 1 : 0;
  }
  BeginStop();
}

void JobRun::SayResult() {
  std::string dropped;
  for (uint32_t r : dropped_workers_) dropped += (dropped.empty() ? "" : ", ") + std::to_string(r);
  switch (outcome_) {
    case Outcome::kSucceeded:
      if (evaluator_failed_) {
        Say("job failed: the workers finished, but the evaluator failed, so the job has no "
            "final evaluation (exit 1)");
      } else if (exit_code_ != 0) {
        Say("job failed: the workers finished, but a server did not shut down cleanly (exit 1)");
      } else if (dropped.empty()) {
        Say("job succeeded: all " + std::to_string(workers_succeeded_) + " workers finished (exit 0)");
      } else {
        Say("job succeeded without worker" + std::string(dropped_workers_.size() > 1 ? "s " : " ") +
            dropped + ": " + std::to_string(workers_succeeded_) + " of " +
            std::to_string(job_.cluster.workers) +
            " workers finished (liveness.on_dead_worker: drop) (exit 0)");
      }
      return;
    case Outcome::kFailed:
      Say("job failed: " + failure_ + " (exit " + std::to_string(exit_code_) + ")");
      return;
    case Outcome::kSignalled:
      Say("job stopped by a signal (exit " + std::to_string(exit_code_) + ")");
      return;
    case Outcome::kUndecided:
      Say("job ended with no result (exit " + std::to_string(exit_code_) + ")");
      return;
  }
}

void JobRun::HandleSignal(int signo) {
  if (!stopping_) {
    Say("received " + SignalName(signo) + "; stopping the job");
    outcome_ = Outcome::kSignalled;
    exit_code_ = 128 + signo;
    BeginStop();
  } else if (!killed_all_) {
    Say("received " + SignalName(signo) + " while stopping");
    KillAll("still running after a second signal");
  }
}

void JobRun::Loop(SignalCatcher* catcher) {
  std::vector<pollfd> fds;
  while (AnyRunning()) {
    fds.clear();
    if (catcher != nullptr) fds.push_back({catcher->read_fd(), POLLIN, 0});
    bool need_tick = false;
    for (const Child& child : children_) {
      if (child.output_open) {
        fds.push_back({child.process->output_fd(), POLLIN, 0});
      }
      if (!child.exited) {
        if (child.process->exit_fd() >= 0) {
          fds.push_back({child.process->exit_fd(), POLLIN, 0});
        } else {
          need_tick = true;
        }
      }
    }
    milliseconds timeout(-1);
    // A reshard waits for the handover generation on disk: looked at each tick.
    if (need_tick || next_map_.pending || FollowPossible()) timeout = kReapTick;
    if (stopping_ && !killed_all_) {
      // Round up so that the wake-up is not just before the deadline.
      auto left = std::chrono::ceil<milliseconds>(deadline_ - LaunchClock::now());
      left = std::max(left, milliseconds(0));
      timeout = timeout.count() < 0 ? left : std::min(timeout, left);
    }
    int ready = ::poll(fds.data(), fds.size(),
                       static_cast<int>(std::min<milliseconds::rep>(
                           timeout.count(), 1 << 30)));
    if (ready < 0 && errno != EINTR) {
      // Cannot happen with valid descriptors; avoid spinning if it does.
      Say(std::string("poll failed: ") + std::strerror(errno));
      ::usleep(10000);
    }

    if (catcher != nullptr) {
      for (int signo : catcher->Drain()) HandleSignal(signo);
    }
    for (Child& child : children_) {
      if (child.output_open) PumpOutput(child, kReadChunk);
    }
    for (Child& child : children_) {
      if (child.exited) continue;
      std::optional<int> status = child.process->TryWait();
      if (!status) continue;
      // Print what it wrote before saying how it ended.
      PumpOutput(child, kDrainLimit);
      if (std::optional<std::string> tail = child.reader.Flush()) {
        Emit("[" + child.name + "] " + *tail);
      }
      HandleExit(child, *status);
    }
    MaybeStartFollowers();
    MaybeStartNextMap();
    if (stopping_ && !killed_all_ && LaunchClock::now() >= deadline_ &&
        AnyRunning()) {
      KillAll("still running " + std::to_string(options_.grace.count()) +
              " ms after SIGTERM");
    }
  }
  // Everything is reaped and its group killed; take what is left in the
  // pipes without waiting for writers that escaped the group.
  for (Child& child : children_) {
    PumpOutput(child, kDrainLimit);
    if (std::optional<std::string> tail = child.reader.Flush()) {
      Emit("[" + child.name + "] " + *tail);
    }
  }
}

StatusOr<int> JobRun::Run() {
  PS_RETURN_IF_ERROR(CheckLaunch(job_, config_path_, options_));
  std::unique_ptr<SignalCatcher> catcher;
  if (options_.handle_signals) {
    PS_ASSIGN_OR_RETURN(catcher, SignalCatcher::Install());
  }

  Status started = StartAll();
  if (!started.ok()) FailJob(started.ToString(), "; stopping the job");
  Loop(catcher.get());
  SayResult();
  if (!started.ok()) return started;
  return exit_code_;
}

Launcher::Launcher(JobOptions job, std::string config_path,
                   LauncherOptions options)
    : job_(std::move(job)),
      config_path_(std::move(config_path)),
      options_(std::move(options)) {}

StatusOr<int> Launcher::Run() {
  JobRun run(job_, config_path_, options_);
  return run.Run();
}

}  // namespace ps
