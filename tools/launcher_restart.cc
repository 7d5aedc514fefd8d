// The restart side of a launcher run (tools/job_run.h): a server that
// died or was stopped by etcd's authority is started again (restoring its
// newest checkpoint, or rejoining its shard as a backup), a dead primary's
// backup is promoted (FailOver), and every restart counts against its
// liveness limit (Respawn).
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "common/authority.h"
#include "common/subprocess.h"
#include "common/wire.h"
#include "tools/job_run.h"
#include "tools/launch_plan.h"

namespace ps {

bool JobRun::FailOver(Child& child, const std::string& how, std::string* why_not) {
  const uint32_t shard = child.index;
  const auto start = std::chrono::steady_clock::now();
  StatusOr<MembershipChange> change = authority_->ReplicaGone(shard, child.replica);
  if (!change.ok()) {
    *why_not = std::string(change.status().message());
    return false;
  }
  const std::string epoch = std::to_string(change->epoch);
  if (change->flags == kMembershipDropBackup) {
    // A backup: the primary goes on without it, and it comes back as a
    // backup that takes a copy.
    Say(how + "; shard " + std::to_string(shard) + "'s primary goes on without it (epoch " +
        epoch + ")");
    return Rejoin(child, how, why_not);
  }
  for (const MembershipChange::PassedOver& p : change->passed_over) {
    Say(how + "; " + ServerName(shard, p.replica) + " cannot be promoted: " + p.why.ToString());
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  char took[32];
  std::snprintf(took, sizeof(took), "%.0f", ms);
  Say(how + "; " + ServerName(shard, change->replica) + " is shard " + std::to_string(shard) +
      "'s primary now (epoch " + epoch + ", promoted in " + took +
      " ms) and serves at its own address; the workers find it there and send it what was "
      "not acknowledged");
  // The other backups held the old primary's log, not the new one's: they
  // come back as backups that take a copy.
  for (Child& c : children_) {
    // Of this map: a server of the next map following this one's primaries
    // is another's (ServerDiedWhileFollowed).
    if (c.is_server && !c.follower && !c.retired && c.map_epoch == map_epoch_ &&
        c.index == shard && c.replica != change->replica && !c.exited) {
      Say("stopping " + c.name + ": it follows the old primary; it joins again after");
      c.rejoin_on_exit = true;
      c.process->Signal(SIGTERM).IgnoreError();
    }
  }
  // The dead primary comes back as a backup, at its own address.
  return Rejoin(child, how, why_not);
}

bool JobRun::Rejoin(Child& child, const std::string& how, std::string* why_not) {
  const uint32_t shard = child.index;
  const uint32_t slot = child.replica;  // it comes back at its own address
  if (!Respawn(child, job_.liveness.server_restarts, "liveness.server_restarts", how,
               "it joins shard " + std::to_string(shard) + " as backup " + std::to_string(slot) +
                   " and takes a copy from its primary",
               why_not, slot, /*join=*/true)) {
    // The shard goes on with fewer copies.
    Say(child.name + " is not started again (" + *why_not + "); shard " + std::to_string(shard) +
        " goes on with fewer replicas");
    return true;
  }
  StatusOr<MembershipChange> added = authority_->ReplicaJoins(shard, slot);
  if (!added.ok()) {
    *why_not = std::string(added.status().message());
    return false;
  }
  Say("shard " + std::to_string(shard) + "'s primary sends " + child.name +
      " a copy (epoch " + std::to_string(added->epoch) + ")");
  return true;
}

bool JobRun::MaybeRestart(Child& child, const std::string& how, std::string* why_not) {
  if (job_.replication.factor > 1 &&
      job_.replication.authority == ReplicationAuthority::kEtcd) {
    // etcd decides who serves (a backup takes over once the dead one's
    // lease lapses); started again, it rejoins as a backup (--join: it never
    // takes the shard afresh from a checkpoint, which would serve without
    // the pushes its backups hold).
    return Respawn(child, job_.liveness.server_restarts, "liveness.server_restarts", how,
                   "etcd (replication.authority) decides which replica serves; it rejoins as "
                   "a backup",
                   why_not, child.replica, /*join=*/true);
  }
  if (authority_ != nullptr) return FailOver(child, how, why_not);
  if (job_.checkpoint.dir.empty() || !job_.checkpoint.restore) {
    *why_not = "it cannot be restarted without checkpoints (set checkpoint.dir, and "
               "checkpoint.restore: true, to let ps_launch restart a crashed server)";
    return false;
  }
  return Respawn(child, job_.liveness.server_restarts, "liveness.server_restarts", how,
                 "it restores its newest checkpoint and the workers go on", why_not);
}

bool JobRun::Respawn(Child& child, uint32_t limit, const std::string& setting,
                     const std::string& how, const std::string& then, std::string* why_not,
                     uint32_t replica, bool join) {
  if (child.restarts >= limit) {
    *why_not = limit == 0 ? "restarts are off (" + setting + ": 0)"
                          : "it was restarted " + std::to_string(child.restarts) +
                                " times already (" + setting + ")";
    return false;
  }
  ChildSpec spec;
  spec.is_server = child.is_server;
  spec.is_evaluator = child.is_evaluator;
  spec.index = child.index;
  spec.replica = replica;
  spec.restart = true;
  spec.join = join;
  std::string command;
  StatusOr<std::unique_ptr<Subprocess>> process = Spawn(spec, &command);
  if (!process.ok()) {
    *why_not = "restarting it failed: " + process.status().ToString();
    return false;
  }
  ++child.restarts;
  Say(how + "; restarted it (restart " + std::to_string(child.restarts) + " of " +
      std::to_string(limit) + ", pid " + std::to_string((*process)->pid()) +
      "): " + then + ": " + command);
  child.process = std::move(process).value();
  child.output_open = true;
  child.exited = false;
  child.killed = false;
  return true;
}

}  // namespace ps
