// The resharding side of a launcher run (tools/job_run.h): a server that
// handed its rows over (ps_ctl reshard, server/reshard_gate.h), and the
// start of the next shard map's servers once every old one's part of the
// handover generation is on disk and its port is free.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/endpoint.h"
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
  if (plan.ok()) return plan->clock;
  if (plan.status().code() == StatusCode::kNotFound) return std::nullopt;
  return -1;
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
    if (!c.is_server || c.exited) continue;
    // A server still running at an address the next map takes holds its
    // port (one of the current map, or of an earlier one that lingers).
    if (std::find(next_addresses.begin(), next_addresses.end(), c.address) !=
        next_addresses.end()) {
      return;
    }
  }
  // Every old shard's part of the handover generation is complete (a
  // server that lingers at an address the next map leaves out wrote it
  // before it answered anyone moved).
  for (uint32_t s = 0; s < job_.cluster.servers.size(); ++s) {
    if (!ShardHandedOver(s, next_map_.plan.clock)) return;
  }
  for (Child& c : children_) {
    if (c.is_server && c.map_epoch == map_epoch_) c.retired = true;
  }
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
  if (Status started = StartServers(); !started.ok()) {
    FailJob("shard map " + std::to_string(map_epoch_) + " could not be started: " +
                started.ToString(),
            "; stopping the job");
    return;
  }
  const auto shards = static_cast<uint32_t>(job_.cluster.servers.size());
  Say("shard map " + std::to_string(map_epoch_) + ": started " + std::to_string(shards) +
      (shards == 1 ? " server" : " servers") + " in place of " + std::to_string(old_servers) +
      (job_.replication.factor > 1
           ? " (each with " + std::to_string(job_.replication.factor - 1) +
                 (job_.replication.factor == 2 ? " backup)" : " backups)")
           : std::string()) +
      ", each restoring its rows of generation " + std::to_string(restore_clock_) + " (" +
      config_path_ + ")");
}

}  // namespace ps
