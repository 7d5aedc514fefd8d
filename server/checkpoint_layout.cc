#include "server/checkpoint_layout.h"

#include <algorithm>
#include <vector>

#include "server/durable_dir.h"

namespace ps {

std::string ShardCheckpointDir(const std::string& checkpoint_dir, uint32_t shard) {
  return checkpoint_dir + "/shard-" + std::to_string(shard);
}

Status CreateCheckpointFolder(Filesystem& files, const std::string& dir) {
  if (dir.empty()) return InvalidArgumentError("the checkpoint folder name is empty");
  const StatusOr<Filesystem::Type> type = files.TypeOf(dir);
  if (!type.ok()) {
    return InvalidArgumentError(dir + ": cannot use it as the checkpoint folder: " +
                                type.status().message());
  }
  if (*type == Filesystem::Type::kMissing) {
    const Status created = files.CreateDirs(dir);
    if (!created.ok()) {
      return InvalidArgumentError(dir + ": cannot create the checkpoint folder: " +
                                  created.message());
    }
  } else if (*type != Filesystem::Type::kDirectory) {
    return InvalidArgumentError(dir + ": cannot use it as the checkpoint folder: not a folder");
  }
  return Status::Ok();
}

StatusOr<int64_t> CommonRestoreClock(const JobOptions& job) {
  if (job.checkpoint.dir.empty() || !job.checkpoint.restore) return -1;
  OsFilesystem files;
  std::vector<std::vector<int64_t>> per_shard;
  bool any = false;
  for (size_t s = 0; s < job.cluster.servers.size(); ++s) {
    const std::string dir = ShardCheckpointDir(job.checkpoint.dir, static_cast<uint32_t>(s));
    PS_RETURN_IF_ERROR(CreateCheckpointFolder(files, dir));
    PS_ASSIGN_OR_RETURN(std::vector<int64_t> clocks, ListGenerations(files, dir));
    any = any || !clocks.empty();
    per_shard.push_back(std::move(clocks));
  }
  if (!any) return -1;  // a new job
  for (auto it = per_shard[0].rbegin(); it != per_shard[0].rend(); ++it) {
    bool everywhere = true;
    for (const auto& clocks : per_shard) {
      everywhere = everywhere && std::binary_search(clocks.begin(), clocks.end(), *it);
    }
    if (everywhere) return *it;
  }
  std::string have;
  for (size_t s = 0; s < per_shard.size(); ++s) {
    have += "; shard " + std::to_string(s) + ":";
    if (per_shard[s].empty()) have += " none";
    for (int64_t c : per_shard[s]) have += " " + std::to_string(c);
  }
  return FailedPreconditionError(
      "checkpoint.dir " + job.checkpoint.dir +
      ": no checkpoint clock is held by every shard, so the job cannot resume consistently" + have +
      "; move the folder aside to start the job afresh");
}

}  // namespace ps
