// The operator's side of a job (ps_ctl, launchers, tests): STATS,
// CHECKPOINT and SHUTDOWN to the servers. It speaks as the control worker
// (kControlWorker): it has no clock, sends no heartbeats, is never counted
// among the job's workers, and a server accepts only these three requests
// from it.
//
// Every call has the deadline of client.request_timeout_ms per server and
// names the server that did not answer or refused.
//
// Thread safety: not thread-safe; use it from one thread at a time.
#ifndef PS_CLIENT_CONTROL_CLIENT_H_
#define PS_CLIENT_CONTROL_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/options.h"
#include "common/status.h"

namespace ps {

class ControlClient {
 public:
  // Connects to every server of `job` (or to `endpoints`, one per shard,
  // when not empty), as Client::Create does. REQUIRES: job.Validate().ok().
  static StatusOr<std::unique_ptr<ControlClient>> Create(const JobOptions& job,
                                                         std::vector<std::string> endpoints = {},
                                                         Env* env = nullptr);

  // The text report of a shard (STATS). InvalidArgument for a shard the job
  // does not have.
  StatusOr<std::string> Stats(uint32_t shard);
  // The same report as numbers (common/shard_stats.h); also
  // InvalidArgument when the reply does not read as one.
  StatusOr<ShardStats> StructuredStats(uint32_t shard) { return client_->StructuredStats(shard); }
  // Asks every shard to write a checkpoint of its current state now (the
  // write runs in the background; STATS shows when it is done). Returns
  // the generation each shard started ("<dir>/shard-<i>/gen-<clock>").
  // FailedPrecondition when the job has no checkpoint.dir.
  StatusOr<std::vector<std::string>> CheckpointServers();
  // Asks every shard to shut down; returns after all acknowledged (the
  // first error otherwise, after asking every shard).
  Status ShutdownServers();
  // The authority's word to a replica (server/replication.h): with
  // kMembershipPromote the backup that `shard`'s endpoint reaches becomes
  // that shard's primary at epoch `epoch`; with kMembershipDropBackup the
  // primary stops waiting for its backup `backup` (it died).
  Status Membership(uint32_t shard, uint32_t flags, uint32_t backup, int64_t epoch) {
    return client_->Membership(shard, flags, backup, epoch);
  }

  // RESHARD (Client::Reshard): one step of moving the job onto other
  // servers (tools/ctl_reshard.h drives it).
  StatusOr<MessageHeader> Reshard(uint32_t shard, uint32_t flags, int64_t clock, int64_t epoch,
                                  const std::string& servers) {
    return client_->Reshard(shard, flags, clock, epoch, servers);
  }

  uint32_t num_shards() const { return client_->num_shards(); }
  const std::string& endpoint(uint32_t shard) const { return client_->endpoint(shard); }

 private:
  explicit ControlClient(std::unique_ptr<Client> client) : client_(std::move(client)) {}
  std::unique_ptr<Client> client_;  // of kControlWorker
};

}  // namespace ps

#endif  // PS_CLIENT_CONTROL_CLIENT_H_
