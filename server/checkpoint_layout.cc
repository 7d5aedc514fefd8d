#include "server/checkpoint_layout.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

#include "server/durable_dir.h"

namespace ps {

namespace fs = std::filesystem;

std::string ShardCheckpointDir(const std::string& checkpoint_dir, uint32_t shard) {
  return checkpoint_dir + "/shard-" + std::to_string(shard);
}

Status CreateCheckpointFolder(const std::string& dir) {
  if (dir.empty()) return InvalidArgumentError("the checkpoint folder name is empty");
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return InvalidArgumentError(dir + ": cannot use it as the checkpoint folder: " + ec.message());
  }
  if (fs::exists(st) && !fs::is_directory(st)) {
    return InvalidArgumentError(dir + ": cannot use it as the checkpoint folder: not a folder");
  }
  if (!fs::exists(st)) {
    fs::create_directories(dir, ec);
    if (ec) {
      return InvalidArgumentError(dir + ": cannot create the checkpoint folder: " + ec.message());
    }
  }
  return Status::Ok();
}

StatusOr<int64_t> CommonRestoreClock(const JobOptions& job) {
  if (job.checkpoint.dir.empty() || !job.checkpoint.restore) return -1;
  std::vector<std::vector<int64_t>> per_shard;
  bool any = false;
  for (size_t s = 0; s < job.cluster.servers.size(); ++s) {
    const std::string dir = ShardCheckpointDir(job.checkpoint.dir, static_cast<uint32_t>(s));
    PS_RETURN_IF_ERROR(CreateCheckpointFolder(dir));
    PS_ASSIGN_OR_RETURN(std::vector<int64_t> clocks, ListGenerations(dir));
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
