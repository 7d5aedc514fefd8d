#include "server/checkpoint_layout.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <vector>

#include "server/durable_dir.h"

namespace ps {
namespace {

constexpr std::string_view kShardsPrefix = "shards-";
constexpr std::string_view kShardPrefix = "shard-";
constexpr std::string_view kBasePrefix = "base-";

// n of a name "<prefix><n>" (decimal, no sign, no leading zero but for
// "0"), or -1 for any other name.
int64_t ParseNumbered(std::string_view name, std::string_view prefix) {
  if (name.size() <= prefix.size() || !name.starts_with(prefix)) return -1;
  const std::string_view digits = name.substr(prefix.size());
  if (digits.size() > 1 && digits[0] == '0') return -1;
  int64_t n = -1;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (error != std::errc() || end != digits.data() + digits.size() || n < 0) return -1;
  return n;
}

// Each shard folder's generations: clock -> the shard count its
// shards-<n> file names (0: none).
using Generations = std::map<int64_t, uint32_t>;

// Every shard-<i> folder under `dir` (i < 2^32), its generations and their
// writers.
StatusOr<std::map<uint32_t, Generations>> ReadShardFolders(Filesystem& files,
                                                           const std::string& dir) {
  std::map<uint32_t, Generations> folders;
  PS_ASSIGN_OR_RETURN(const std::vector<Filesystem::Entry> entries, files.List(dir));
  for (const Filesystem::Entry& e : entries) {
    const int64_t shard = ParseNumbered(e.name, kShardPrefix);
    if (shard < 0 || shard > UINT32_MAX || e.type != Filesystem::Type::kDirectory) continue;
    const std::string folder = ShardCheckpointDir(dir, static_cast<uint32_t>(shard));
    PS_ASSIGN_OR_RETURN(const std::vector<int64_t> clocks, ListGenerations(files, folder));
    Generations& generations = folders[static_cast<uint32_t>(shard)];
    for (const int64_t clock : clocks) {
      PS_ASSIGN_OR_RETURN(generations[clock],
                          GenerationShards(files, folder + "/" + GenerationName(clock)));
    }
  }
  return folders;
}

// "10 (of 2)", or "10" for a generation without its writers' file.
std::string GenerationText(int64_t clock, uint32_t writers) {
  return std::to_string(clock) + (writers != 0 ? " (of " + std::to_string(writers) + ")" : "");
}

// "" when generation `clock` of shard-0 (whose file names `marker`
// shards) is held by every shard that wrote it; else why not.
std::string Incomplete(const std::map<uint32_t, Generations>& folders, int64_t clock,
                       uint32_t marker, uint32_t servers) {
  const uint32_t writers = marker != 0 ? marker : servers;
  for (uint32_t i = 0; i < writers; ++i) {
    const auto folder = folders.find(i);
    if (folder == folders.end()) return "shard-" + std::to_string(i) + " is missing";
    const auto generation = folder->second.find(clock);
    if (generation == folder->second.end()) return "shard-" + std::to_string(i) + " lacks it";
    if (generation->second != marker) {
      return "shard-" + std::to_string(i) + "'s is " +
             (generation->second != 0 ? "of " + std::to_string(generation->second) + " shards"
                                      : "without a shards file");
    }
  }
  return "";
}

// Every shard folder's generations, as errors list them: "; shard 0: 10
// (of 2), 20; shard 1: none".
std::string Listing(const std::map<uint32_t, Generations>& folders, uint32_t servers) {
  std::string have;
  uint32_t last = servers;
  if (!folders.empty()) last = std::max(last, folders.rbegin()->first + 1);
  for (uint32_t s = 0; s < last; ++s) {
    have += "; shard " + std::to_string(s) + ":";
    const auto folder = folders.find(s);
    if (folder == folders.end()) {
      have += s < servers ? " none" : " no folder";
      continue;
    }
    if (folder->second.empty()) have += " none";
    bool first = true;
    for (const auto& [clock, writers] : folder->second) {
      have += (first ? " " : ", ") + GenerationText(clock, writers);
      first = false;
    }
  }
  return have;
}

}  // namespace

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

std::string GenerationShardsFileName(uint32_t num_shards) {
  return std::string(kShardsPrefix) + std::to_string(num_shards);
}

StatusOr<uint32_t> GenerationShards(Filesystem& files, const std::string& generation) {
  PS_ASSIGN_OR_RETURN(const std::vector<Filesystem::Entry> entries, files.List(generation));
  uint32_t shards = 0;
  for (const Filesystem::Entry& e : entries) {
    const int64_t n = ParseNumbered(e.name, kShardsPrefix);
    if (n < 1 || n > UINT32_MAX) continue;
    if (shards != 0) {
      return DataLossError(generation + ": two files name the shards that wrote it (" +
                           GenerationShardsFileName(shards) + " and " + e.name +
                           "); remove the generation");
    }
    shards = static_cast<uint32_t>(n);
  }
  return shards;
}

std::string GenerationBaseFileName(int64_t base_clock) {
  return std::string(kBasePrefix) + std::to_string(base_clock);
}

StatusOr<int64_t> GenerationBase(Filesystem& files, const std::string& generation) {
  PS_ASSIGN_OR_RETURN(const std::vector<Filesystem::Entry> entries, files.List(generation));
  int64_t base = -1;
  for (const Filesystem::Entry& e : entries) {
    const int64_t n = ParseNumbered(e.name, kBasePrefix);
    if (n < 0) continue;
    if (base >= 0) {
      return DataLossError(generation + ": two files name the generation it builds on (" +
                           GenerationBaseFileName(base) + " and " + e.name +
                           "); remove the generation");
    }
    base = n;
  }
  return base;
}

StatusOr<std::set<int64_t>> GenerationsNeeded(Filesystem& files, const std::string& dir,
                                              uint32_t keep) {
  PS_ASSIGN_OR_RETURN(const std::vector<int64_t> clocks, ListGenerations(files, dir));
  std::set<int64_t> needed;
  const size_t first_kept = clocks.size() > keep ? clocks.size() - keep : 0;
  for (size_t i = first_kept; i < clocks.size(); ++i) {
    // Each base is older than its delta: the walk ends.
    for (int64_t clock = clocks[i]; clock >= 0;) {
      PS_ASSIGN_OR_RETURN(const int64_t base,
                          GenerationBase(files, dir + "/" + GenerationName(clock)));
      // A base that is gone already (a broken chain) holds nothing back.
      if (base < 0 || base >= clock ||
          !std::binary_search(clocks.begin(), clocks.end(), base) ||
          !needed.insert(base).second) {
        break;
      }
      clock = base;
    }
  }
  return needed;
}

StatusOr<RestorePoint> FindRestorePoint(Filesystem& files, const JobOptions& job,
                                        int64_t restore_clock) {
  if (job.checkpoint.dir.empty() || !job.checkpoint.restore) return RestorePoint();
  const auto servers = static_cast<uint32_t>(job.cluster.servers.size());
  for (uint32_t s = 0; s < servers; ++s) {
    PS_RETURN_IF_ERROR(CreateCheckpointFolder(files, ShardCheckpointDir(job.checkpoint.dir, s)));
  }
  PS_ASSIGN_OR_RETURN(const auto folders, ReadShardFolders(files, job.checkpoint.dir));
  bool any = false;
  for (const auto& [shard, generations] : folders) any = any || !generations.empty();
  if (!any && restore_clock < 0) return RestorePoint();  // a new job
  // Every writer set has a shard 0: its generations are the candidates.
  const Generations& first = folders.at(0);
  RestorePoint point;
  std::string newest_reason;
  for (auto it = first.rbegin(); it != first.rend(); ++it) {
    const auto [clock, marker] = *it;
    if (restore_clock >= 0 && clock != restore_clock) continue;
    const std::string reason = Incomplete(folders, clock, marker, servers);
    if (reason.empty()) {
      point.clock = clock;
      point.writers = marker != 0 ? marker : servers;
      return point;
    }
    std::string text = "clock " + GenerationText(clock, marker) + ": " + reason;
    if (marker == 0) {
      // Written before parts named their shard count: taken for the job's.
      text += " (a part without a shards file counts as written by the job's " +
              std::to_string(servers) +
              " servers; if it was written by another number, resume it on that number once)";
    }
    if (newest_reason.empty()) newest_reason = text;
    point.passed_over += (point.passed_over.empty() ? "" : "; ") + text;
  }
  const std::string where = "checkpoint.dir " + job.checkpoint.dir;
  if (restore_clock >= 0) {
    std::string have;
    for (const auto& [clock, marker] : first) {
      if (Incomplete(folders, clock, marker, servers).empty()) {
        have += (have.empty() ? "" : ", ") + GenerationText(clock, marker);
      }
    }
    return NotFoundError(where + ": no complete generation of clock " +
                         std::to_string(restore_clock) +
                         (newest_reason.empty() ? "" : " (" + newest_reason + ")") + "; it has " +
                         (have.empty() ? "none complete" : have) + Listing(folders, servers));
  }
  return FailedPreconditionError(
      where +
      ": no checkpoint clock is held by every shard that wrote it, so the job cannot resume "
      "consistently" +
      (newest_reason.empty() ? "" : " (newest " + newest_reason + ")") + Listing(folders, servers) +
      "; move the folder aside to start the job afresh");
}

StatusOr<RestorePoint> CommonRestorePoint(const JobOptions& job) {
  OsFilesystem files;
  return FindRestorePoint(files, job);
}

StatusOr<RestorePoint> ShardRestorePoint(Filesystem& files, const JobOptions& job, uint32_t shard,
                                         int64_t restore_clock) {
  if (job.checkpoint.dir.empty() || !job.checkpoint.restore) return RestorePoint();
  const auto servers = static_cast<uint32_t>(job.cluster.servers.size());
  const std::string own_dir = ShardCheckpointDir(job.checkpoint.dir, shard);
  PS_RETURN_IF_ERROR(CreateCheckpointFolder(files, own_dir));
  // Its own generations written by the job's current shard count (or
  // before the shards file existed, which counts as the same).
  PS_ASSIGN_OR_RETURN(const std::vector<int64_t> clocks, ListGenerations(files, own_dir));
  RestorePoint own;
  for (auto it = clocks.rbegin(); it != clocks.rend(); ++it) {
    if (restore_clock >= 0 && *it != restore_clock) continue;
    PS_ASSIGN_OR_RETURN(const uint32_t marker,
                        GenerationShards(files, own_dir + "/" + GenerationName(*it)));
    if (marker == 0 || marker == servers) {
      own.clock = *it;
      own.writers = servers;
      break;
    }
    if (restore_clock >= 0) break;
  }
  if (restore_clock >= 0 && own.clock >= 0) return own;
  StatusOr<RestorePoint> job_point = FindRestorePoint(files, job, restore_clock);
  if (!job_point.ok()) {
    if (own.clock >= 0) return own;
    return job_point.status();
  }
  if (own.clock > job_point->clock) return own;
  return job_point;
}

}  // namespace ps
