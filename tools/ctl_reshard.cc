#include "tools/ctl_reshard.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "client/control_client.h"
#include "common/config.h"
#include "common/endpoint.h"
#include "common/reshard_sources.h"
#include "common/rendezvous.h"
#include "common/wire.h"
#include "tools/reshard_plan.h"

namespace ps {
namespace {

using ReshardTime = std::chrono::steady_clock;

// Clocks past the fastest worker the first handover is prepared at, and
// attempts (each further past) before giving up.
constexpr int64_t kClockMargin = 2;
constexpr int kAttempts = 5;
// How long the next map's servers get to start following the old ones
// (ps_launch starts them once the plan is on disk): kFollowStart for the
// first, and as long again after each one that came (many starting on few
// cores come one by one) for the next; and to take their copies, before
// the handover clock is picked. Those that do not follow by then restore
// the handover generation, and a copy still under way at the handover is
// finished within its pause.
constexpr std::chrono::seconds kFollowStart{3};
constexpr std::chrono::seconds kFollowCopy{60};

void Fail(const std::string& what) { std::fprintf(stderr, "ps_ctl reshard: %s\n", what.c_str()); }

// OK when `next` is `job` on other servers, as the top of ctl_reshard.h
// says.
Status CheckNext(const JobOptions& job, const JobOptions& next) {
  JobOptions same = next;
  same.cluster.servers = job.cluster.servers;
  PS_RETURN_IF_ERROR(CompareAgreement(EncodeAgreement(job), EncodeAgreement(same),
                                      "the running job (" + job.source + ")",
                                      "--to " + next.source)
                         .WithContext("only cluster.servers may differ"));
  if (next.checkpoint.dir != job.checkpoint.dir) {
    return InvalidArgumentError("--to " + next.source + " has checkpoint.dir '" +
                                next.checkpoint.dir + "', the running job '" +
                                job.checkpoint.dir + "'; the next servers restore from the same "
                                "folder");
  }
  const size_t common = std::min(job.cluster.servers.size(), next.cluster.servers.size());
  for (size_t i = 0; i < common; ++i) {
    if (job.cluster.servers[i] != next.cluster.servers[i]) {
      return InvalidArgumentError(
          "--to " + next.source + ": cluster.servers[" + std::to_string(i) + "] is " +
          next.cluster.servers[i] + ", the running job's " + job.cluster.servers[i] +
          "; the servers both lists hold keep their places (add servers at the end, remove "
          "them from the end)");
    }
  }
  if (next.cluster.servers == job.cluster.servers) {
    return InvalidArgumentError("--to " + next.source + " lists the same servers as the running "
                                "job; nothing to move");
  }
  return Status::Ok();
}

// Waits until every shard of `job` has, following it and holding its copy,
// each server of `next` whose rows overlap its own (ShardStats::
// reshard_followers_ready): at most kFollowStart for the next follower to
// start following (ps_launch starts them; without it none comes), at most
// kFollowCopy in all. Says how it went, and returns the fastest worker
// clock the shards reported last.
int64_t WaitForFollowers(ControlClient& client, const JobOptions& job, const JobOptions& next) {
  const auto shards = static_cast<uint32_t>(job.cluster.servers.size());
  std::vector<uint32_t> expected(shards, 0);
  // Every replica of each shard of the next map follows its old shards.
  for (uint32_t j = 0; j < next.cluster.servers.size(); ++j) {
    for (uint32_t s : FollowedShards(job, next, j)) expected[s] += next.replication.factor;
  }
  const auto start = ReshardTime::now();
  std::vector<uint32_t> following(shards, 0), ready(shards, 0);
  int64_t fastest = 0;
  uint32_t came = 0;  // followers, all shards together
  auto last_came = start;
  for (;;) {
    bool all_following = true, all_ready = true;
    for (uint32_t s = 0; s < shards; ++s) {
      auto stats = client.StructuredStats(s);
      if (!stats.ok()) continue;
      following[s] = stats->reshard_followers;
      ready[s] = stats->reshard_followers_ready;
      for (const ShardStats::Worker& w : stats->workers) fastest = std::max(fastest, w.clock);
      all_following &= following[s] >= expected[s];
      all_ready &= ready[s] >= expected[s];
    }
    const auto now = ReshardTime::now();
    if (const uint32_t total = std::accumulate(following.begin(), following.end(), 0u);
        total > came) {
      came = total;
      last_came = now;
    }
    if (all_ready || (!all_following && now - last_came > kFollowStart) ||
        now - start > kFollowCopy) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double seconds = std::chrono::duration<double>(ReshardTime::now() - start).count();
  std::string missing;
  for (uint32_t s = 0; s < shards; ++s) {
    if (ready[s] < expected[s]) {
      missing += (missing.empty() ? "" : ", ") + std::string("shard ") + std::to_string(s) + " (" +
                 std::to_string(following[s]) + " of " + std::to_string(expected[s]) +
                 " following, " + std::to_string(ready[s]) + " with their copy)";
    }
  }
  if (missing.empty()) {
    std::printf("the %zu servers of the next map%s follow the old servers' rows in memory, "
                "each with its copy (after %.2f s)\n",
                next.cluster.servers.size(),
                next.replication.factor > 1 ? " and their backups" : "", seconds);
  } else {
    std::printf("after %.2f s not every server of the next map follows the old ones with its "
                "copy: %s (ps_launch starts them); a server that does not take its rows over at "
                "the handover restores the handover generation\n",
                seconds, missing.c_str());
  }
  return fastest;
}

}  // namespace

int RunReshard(const JobOptions& job, const std::string& to_path, uint32_t wait_s,
               uint32_t timeout_ms, bool in_memory) {
  StatusOr<JobOptions> loaded = LoadJobFile(to_path);
  if (!loaded.ok()) {
    Fail(loaded.status().ToString());
    return 2;
  }
  JobOptions next = std::move(*loaded);
  if (Status fits = CheckNext(job, next); !fits.ok()) {
    Fail(fits.ToString());
    return 2;
  }
  if (job.checkpoint.dir.empty()) {
    Fail("the job has no checkpoint.dir: its rows move to the new servers through a checkpoint "
         "generation; add a checkpoint section (the running job needs it too)");
    return 2;
  }
  // A server that goes away while it is asked (it handed over and exited,
  // or the job was stopped) counts at the request's deadline, not waited
  // for as a worker waits for a server to come back.
  JobOptions asked = job;
  asked.liveness.server_down_timeout_ms = timeout_ms;
  auto client = ControlClient::Create(asked);
  if (!client.ok()) {
    Fail(client.status().ToString());
    return 1;
  }
  const uint32_t shards = (*client)->num_shards();
  const std::string servers = JoinServerList(next.cluster.servers);
  int64_t epoch = -1, fastest = 0;
  for (uint32_t s = 0; s < shards; ++s) {
    auto stats = (*client)->StructuredStats(s);
    if (!stats.ok()) {
      Fail(stats.status().ToString());
      return 1;
    }
    if (stats->handover_clock >= 0) {
      Fail("shard " + std::to_string(s) + " is handing over at clock " +
           std::to_string(stats->handover_clock) + " already (another ps_ctl reshard)");
      return 1;
    }
    if (epoch >= 0 && stats->map_epoch != epoch) {
      Fail("shard " + std::to_string(s) + " serves map " + std::to_string(stats->map_epoch) +
           ", another shard map " + std::to_string(epoch) +
           "; a reshard is under way: wait for it to end");
      return 1;
    }
    epoch = stats->map_epoch;
    for (const ShardStats::Worker& w : stats->workers) fastest = std::max(fastest, w.clock);
  }
  const int64_t next_epoch = epoch + 1;
  std::printf("the job runs on %u servers at map %lld, its fastest worker at clock %lld; moving "
              "it onto %zu servers (map %lld)\n",
              shards, static_cast<long long>(epoch), static_cast<long long>(fastest),
              next.cluster.servers.size(), static_cast<long long>(next_epoch));
  std::fflush(stdout);
  std::error_code ec;
  const std::string config = std::filesystem::absolute(to_path, ec).string();
  // The next map's servers follow the old ones' rows in memory when the
  // job allows it (common/reshard_sources.h): the plan goes on disk first,
  // with no clock yet, so that ps_launch starts them while the job runs
  // on; the clock is picked once they follow.
  bool planned_early = false;
  // Undoes the plan (there may be none yet) and the followers it started.
  const auto give_up = [&] {
    for (uint32_t s = 0; s < shards && planned_early; ++s) {
      auto dropped = (*client)->Reshard(s, kReshardFollow, 0, next_epoch, "");
      if (!dropped.ok()) Fail("shard " + std::to_string(s) + ": " + dropped.status().ToString());
    }
    if (Status removed = RemoveReshardPlan(job.checkpoint.dir, next_epoch); !removed.ok()) {
      Fail(removed.ToString());
    }
  };
  const Status can = in_memory ? CanFollow(job, next)
                               : FailedPreconditionError("--through-generation");
  if (!can.ok()) {
    std::printf("the rows move through the handover generation: %s\n", can.message().c_str());
  } else if (Status planned =
                 WriteReshardPlan(job.checkpoint.dir, {next_epoch, -1, config, /*follow=*/true});
             !planned.ok()) {
    Fail(planned.ToString());
    return 1;
  } else {
    planned_early = true;
    // The workers ran on meanwhile.
    fastest = std::max(fastest, WaitForFollowers(**client, job, next));
  }
  std::fflush(stdout);
  auto abort_all = [&](uint32_t prepared, int64_t clock) {
    for (uint32_t s = 0; s < prepared; ++s) {
      auto aborted = (*client)->Reshard(s, kReshardAbort, clock, next_epoch, servers);
      if (!aborted.ok()) Fail("abort on shard " + std::to_string(s) + ": " + aborted.status().ToString());
    }
  };
  int64_t clock = fastest + kClockMargin;
  bool prepared_all = false;
  for (int attempt = 0; attempt < kAttempts && !prepared_all; ++attempt) {
    uint32_t prepared = 0;
    Status refused;
    int64_t seen = fastest;
    for (; prepared < shards; ++prepared) {
      auto reply = (*client)->Reshard(prepared, kReshardPrepare, clock, next_epoch, servers);
      if (!reply.ok()) {
        refused = reply.status();
        break;
      }
      seen = std::max(seen, reply->clock);
    }
    if (prepared == shards) {
      prepared_all = true;
      break;
    }
    abort_all(prepared, clock);
    if (refused.code() != StatusCode::kFailedPrecondition ||
        refused.message().find("past the handover clock") == std::string::npos) {
      give_up();
      Fail(refused.ToString());
      return 1;
    }
    std::printf("clock %lld passed on a shard before it prepared; trying again further ahead\n",
                static_cast<long long>(clock));
    // The workers ran on while it was asked: further ahead each time.
    clock = std::max(clock, seen) + (kClockMargin << (attempt + 1));
  }
  if (!prepared_all) {
    give_up();
    Fail("the workers kept passing the handover clock; " + std::to_string(kAttempts) +
         " attempts failed");
    return 1;
  }
  Status planned =
      WriteReshardPlan(job.checkpoint.dir, {next_epoch, clock, config, planned_early});
  if (!planned.ok()) {
    abort_all(shards, clock);
    give_up();
    Fail(planned.ToString());
    return 1;
  }
  const auto committed_at = ReshardTime::now();
  for (uint32_t s = 0; s < shards; ++s) {
    auto reply = (*client)->Reshard(s, kReshardCommit, clock, next_epoch, servers);
    if (!reply.ok()) {
      // Before any shard reached the clock, an abort undoes it all.
      abort_all(shards, clock);
      give_up();
      Fail("commit on shard " + std::to_string(s) + ": " + reply.status().ToString());
      return 1;
    }
  }
  std::printf("every shard hands over at clock %lld; waiting for the %zu servers of map %lld "
              "(ps_launch starts them; without it, start each with: ps_server --config %s "
              "--shard I --restore-clock %lld --map-epoch %lld)\n",
              static_cast<long long>(clock), next.cluster.servers.size(),
              static_cast<long long>(next_epoch), config.c_str(), static_cast<long long>(clock),
              static_cast<long long>(next_epoch));
  std::fflush(stdout);
  client->reset();
  // The next map's servers, once each answers at its epoch.
  next.client.request_timeout_ms = timeout_ms;
  // A server that goes away while it is asked is asked again in the loop,
  // not waited for as a worker waits for a server to come back.
  next.liveness.server_down_timeout_ms = timeout_ms;
  auto fresh = ControlClient::Create(next);
  if (!fresh.ok()) {
    Fail(fresh.status().ToString());
    return 1;
  }
  const auto deadline = ReshardTime::now() + std::chrono::seconds(wait_s);
  for (uint32_t s = 0; s < (*fresh)->num_shards();) {
    auto stats = (*fresh)->StructuredStats(s);
    if (stats.ok() && stats->map_epoch == next_epoch) {
      ++s;
      continue;
    }
    if (ReshardTime::now() > deadline) {
      Fail("server " + std::to_string(s) + " of map " + std::to_string(next_epoch) + " (" +
           next.cluster.servers[s] + ") does not serve it after " + std::to_string(wait_s) +
           " s" + (stats.ok() ? " (it serves map " + std::to_string(stats->map_epoch) + ")"
                              : ": " + stats.status().ToString()) +
           "; under ps_launch the servers of the next map start once the old ones handed over");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double seconds =
      std::chrono::duration<double>(ReshardTime::now() - committed_at).count();
  std::printf("the job runs on %zu server%s at map %lld from clock %lld (%.2f s from the "
              "commit until every new server answered)\n",
              next.cluster.servers.size(), next.cluster.servers.size() == 1 ? "" : "s",
              static_cast<long long>(next_epoch),
              static_cast<long long>(clock), seconds);
  return 0;
}

}  // namespace ps
