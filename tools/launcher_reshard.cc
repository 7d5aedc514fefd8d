// The resharding side of a launcher run (tools/job_run.h): a server that
// handed its rows over (ps_ctl reshard, server/reshard_gate.h), and the
// start of the next shard map's servers once every old one's part of the
// handover generation is on disk and its port is free.
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/endpoint.h"
#include "common/reshard_sources.h"
#include "common/subprocess.h"
#include "server/checkpoint_layout.h"
#include "tools/job_run.h"
#include "tools/launch_plan.h"

namespace ps {

void JobRun::ServerHandedOver(Child& child, const std::string& how) {
  child.retired = true;
  if (next_map_.pending) {
    Say(how + ": it handed its rows over");
    return;
  }
  const int64_t epoch = map_epoch_ + 1;
  StatusOr<ReshardPlan> plan = ReadReshardPlan(job_.checkpoint.dir, epoch);
  if (!plan.ok()) {
    FailJob(how, " after handing its rows over, but the plan of the next servers cannot be "
                 "read (" + plan.status().ToString() + "); stopping the job. Resume it with "
                 "ps_launch --resume on the next job file");
    return;
  }
  StatusOr<JobOptions> next = LoadJobFile(plan->config);
  if (!next.ok()) {
    FailJob(how, " after handing its rows over, but the next job file cannot be loaded (" +
                     next.status().ToString() + "); stopping the job");
    return;
  }
  next_map_.pending = true;
  next_map_.plan = std::move(*plan);
  next_map_.job = std::move(*next);
  Say(how + ": it handed its rows over at clock " + std::to_string(next_map_.plan.clock) +
      "; the job moves onto the " + std::to_string(next_map_.job.cluster.servers.size()) +
      " servers of " + next_map_.plan.config + " (shard map " + std::to_string(epoch) +
      "), started once the " + std::to_string(job_.cluster.servers.size()) +
      " servers of map " + std::to_string(map_epoch_) + " handed over");
}

std::optional<int64_t> JobRun::ReshardUnderWay() const {
  if (next_map_.pending) return next_map_.plan.clock;
  StatusOr<ReshardPlan> plan = ReadReshardPlan(job_.checkpoint.dir, map_epoch_ + 1);
  if (plan.ok()) return plan->clock < 0 ? kReshardNoClockYet : plan->clock;
  if (plan.status().code() == StatusCode::kNotFound) return std::nullopt;
  return kReshardPlanUnreadable;
}

bool JobRun::ShardHandedOver(uint32_t shard, int64_t clock) const {
  std::error_code ec;
  return std::filesystem::is_directory(
      ShardCheckpointDir(job_.checkpoint.dir, shard) + "/gen-" + std::to_string(clock), ec);
}

void JobRun::MaybeStartNextMap() {
  if (!next_map_.pending || stopping_) return;
  // Every address a replica of the next map binds.
  std::vector<std::string> next_addresses;
  const JobOptions& next = next_map_.job;
  for (uint32_t s = 0; s < next.cluster.servers.size(); ++s) {
    for (uint32_t r = 0; r < next.replication.factor; ++r) {
      StatusOr<HostPort> address = ReplicaHostPort(next, s, r);
      if (!address.ok()) {
        FailJob(ServerName(s, r) + " of shard map " + std::to_string(next_map_.plan.epoch) +
                    " has no address: " + address.status().ToString(),
                "; stopping the job");
        return;
      }
      next_addresses.push_back(address->canonical);
    }
  }
  for (const Child& c : children_) {
    // A follower binds its address only once the old server there is gone.
    if (!c.is_server || c.exited || c.follower) continue;
    // A server still running at an address the next map takes holds its
    // port (one of the current map, or of an earlier one that lingers).
    if (std::find(next_addresses.begin(), next_addresses.end(), c.address) !=
        next_addresses.end()) {
      return;
    }
  }
  // The next map's servers that followed the old ones serve now; a replica
  // whose follower exited gets a server restoring the handover generation.
  const uint32_t factor = next.replication.factor;
  std::vector<bool> followed(next.cluster.servers.size() * factor, false);
  for (const Child& c : children_) {
    if (c.follower && !c.exited && c.map_epoch == next_map_.plan.epoch &&
        c.index < next.cluster.servers.size() && c.replica < factor) {
      followed[size_t{c.index} * factor + c.replica] = true;
    }
  }
  const auto kept = static_cast<uint32_t>(std::count(followed.begin(), followed.end(), true));
  // For a server restoring it, every old shard's part of the handover
  // generation is complete (a server that lingers at an address the next
  // map leaves out wrote it before it answered anyone moved; one whose
  // servers followed it writes it after). With every server of the next
  // map serving what it followed, nothing waits for it: they train on and
  // may prune it with their own generations meanwhile.
  for (uint32_t s = 0; s < job_.cluster.servers.size() && kept < followed.size(); ++s) {
    if (!ShardHandedOver(s, next_map_.plan.clock)) return;
  }
  for (Child& c : children_) {
    if (c.is_server && c.map_epoch == map_epoch_) c.retired = true;
    c.follower = false;
  }
  followers_epoch_ = 0;
  const size_t old_servers = job_.cluster.servers.size();
  // Carried out: a server that dies from now on is restarted as usual.
  if (Status removed = RemoveReshardPlan(job_.checkpoint.dir, next_map_.plan.epoch);
      !removed.ok()) {
    Say("warning: " + removed.ToString());
  }
  job_ = std::move(next_map_.job);
  config_path_ = next_map_.plan.config;
  map_epoch_ = next_map_.plan.epoch;
  restore_clock_ = next_map_.plan.clock;
  next_map_ = NextMap{};
  if (Status started = StartServers(followed); !started.ok()) {
    FailJob("shard map " + std::to_string(map_epoch_) + " could not be started: " +
                started.ToString(),
            "; stopping the job");
    return;
  }
  const auto replicas = static_cast<uint32_t>(followed.size());  // of every shard
  const auto plural = [](uint32_t n, const std::string& what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  const std::string what = factor > 1 ? "replica" : "server";
  if (kept > 0) {
    Say("shard map " + std::to_string(map_epoch_) + ": " + std::to_string(kept) + " of its " +
        std::to_string(replicas) + " " + what + "s took their rows over in memory (they " +
        "followed the old servers)" + (kept == replicas ? "" : "; starting the others"));
  }
  if (kept == replicas) return;
  // In place of the old servers: a whole map (each shard with its
  // backups), or the replicas that did not follow.
  Say("shard map " + std::to_string(map_epoch_) + ": started " +
      (kept > 0 ? plural(replicas - kept, what)
                : plural(static_cast<uint32_t>(job_.cluster.servers.size()), "server")) +
      (kept == 0 || factor == 1 ? " in place of " + std::to_string(old_servers) : "") +
      (kept == 0 && factor > 1
           ? " (each with " + plural(factor - 1, "backup") + ")"
           : std::string()) +
      ", each restoring its rows of generation " + std::to_string(restore_clock_) + " (" +
      config_path_ + ")");
}

bool JobRun::FollowPossible() const {
  // CanFollow (with the next job file) decides; this is what the current
  // one alone rules out, checked every tick.
  return !stopping_ && !next_map_.pending && !job_.checkpoint.dir.empty() &&
         (job_.replication.factor == 1 ||
          job_.replication.authority == ReplicationAuthority::kLauncher) &&
         job_.security.mode != SecurityMode::kCurve;
}

void JobRun::StopFollowers(const std::string& why) {
  for (Child& c : children_) {
    if (!c.follower || c.exited) continue;
    Say("stopping " + c.name + ": " + why);
    c.process->Signal(SIGTERM).IgnoreError();  // gone already: its exit is handled
  }
}

void JobRun::MaybeStartFollowers() {
  if (!FollowPossible()) return;
  const int64_t epoch = map_epoch_ + 1;
  StatusOr<ReshardPlan> plan = ReadReshardPlan(job_.checkpoint.dir, epoch);
  if (!plan.ok()) {
    // No reshard planned (or the plan was taken back: an abort).
    if (followers_epoch_ != 0) {
      StopFollowers("the reshard to shard map " + std::to_string(epoch) + " was called off");
      followers_epoch_ = 0;
    }
    return;
  }
  if (followers_epoch_ == epoch || !plan->follow) return;
  followers_epoch_ = epoch;
  StatusOr<JobOptions> next = LoadJobFile(plan->config);
  if (!next.ok() || !CanFollow(job_, *next).ok()) return;  // the generation moves it
  const std::string map = " of shard map " + std::to_string(epoch);
  for (const auto [s, r] : ReplicasInStartOrder(*next)) {
    StatusOr<HostPort> address = ReplicaHostPort(*next, s, r);
    if (!address.ok()) return;  // MaybeStartNextMap says why
    ChildSpec spec;
    spec.is_server = true;
    spec.index = s;
    spec.replica = r;
    spec.map_epoch = epoch;
    spec.follow = config_path_;
    SubprocessOptions spawn;
    spawn.argv = ChildCommand(*next, plan->config, options_, spec, /*restore_clock=*/-1,
                              finished_workers_);
    spawn.capture_output = true;
    StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Spawn(spawn);
    const std::string name = ServerName(s, r);
    if (!process.ok()) {
      Say("warning: " + name + map + " could not be started to follow the old servers (" +
          process.status().ToString() + "); it restores the handover generation instead");
      continue;
    }
    Say("started " + name + map + " (pid " + std::to_string((*process)->pid()) +
        ") to follow the old servers' rows until their handover: " + JoinArgv(spawn.argv));
    AddServer(name + map, spec, address->canonical, std::move(process).value()).follower = true;
  }
}

void JobRun::FollowerExited(Child& child, const std::string& how) {
  child.follower = false;
  child.retired = true;  // ends nothing: its map's start replaces it
  Say(how + ": it did not take its rows over in memory; " +
      (child.replica > 0 ? "replica " + std::to_string(child.replica) + " of " : std::string()) +
      "shard " + std::to_string(child.index) +
      " of the next map restores the handover generation instead");
}

bool JobRun::Followed(const Child& child) const {
  if (child.map_epoch != map_epoch_) return false;
  if (authority_ == nullptr) return true;
  // The followers follow each old shard's primary; a backup's death leaves
  // them be.
  StatusOr<ShardMembership> membership = authority_->Membership(child.index);
  return !membership.ok() || membership->primary == child.replica;
}

void JobRun::ServerDiedWhileFollowed(const std::string& how) {
  const int64_t epoch = map_epoch_ + 1;
  if (followers_epoch_ == epoch) {
    StopFollowers("a server of the map they follow died (" + how + ")");
  }
  // None is started again for this plan: the rows move through the
  // handover generation, which the old shards write as they hand over.
  followers_epoch_ = epoch;
  Say(how + " while ps_ctl reshard has the next map's servers follow the old ones; they stop, "
            "and the rows move through the handover generation");
}

}  // namespace ps
