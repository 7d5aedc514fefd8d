#include "server/durable_dir.h"

#include <algorithm>
#include <charconv>
#include <filesystem>

#include "common/logging.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kGenPrefix = "gen-";
constexpr std::string_view kTmpSuffix = ".tmp";

// Removes a replaced generation (under a .tmp name: a failure leaves it to
// the next RemoveTornGenerations, the new generation is already visible).
void RemoveOld(Filesystem& files, const std::string& path) {
  const Status removed = files.RemoveTree(path);
  if (!removed.ok()) PS_LOG_WARN("checkpoint: {}", removed.ToString());
}

// The rename of PublishGeneration, without the sync.
Status Publish(Filesystem& files, const std::string& tmp, const std::string& final_path) {
  const Status renamed = files.Rename(tmp, final_path);
  if (renamed.code() != StatusCode::kAlreadyExists) return renamed;
  // A generation of the same clock exists: swap the two atomically, then
  // remove the old one (now under the .tmp name, so never read).
  const Status exchanged = files.Exchange(tmp, final_path);
  if (exchanged.ok()) {
    RemoveOld(files, tmp);
    return Status::Ok();
  }
  if (exchanged.code() != StatusCode::kUnimplemented) return exchanged;
  // No atomic exchange on this file system: move the old one aside first. A
  // crash in between leaves neither (the older generations stay intact).
  const std::string old = TmpName(final_path + ".old");
  PS_RETURN_IF_ERROR(files.RemoveTree(old));
  PS_RETURN_IF_ERROR(files.Rename(final_path, old));
  const Status moved = files.Rename(tmp, final_path);
  if (!moved.ok()) {
    const Status back = files.Rename(old, final_path);
    if (!back.ok()) PS_LOG_WARN("checkpoint: cannot move {} back: {}", old, back.ToString());
    return moved;
  }
  RemoveOld(files, old);
  return Status::Ok();
}

}  // namespace

std::string GenerationName(int64_t clock) { return std::string(kGenPrefix) + std::to_string(clock); }

int64_t ParseGenerationName(std::string_view name) {
  if (name.size() <= kGenPrefix.size() || !name.starts_with(kGenPrefix)) return -1;
  const char* first = name.data() + kGenPrefix.size();
  const char* last = name.data() + name.size();
  if (*first < '0' || *first > '9') return -1;
  if (*first == '0' && last - first > 1) return -1;
  int64_t clock = -1;
  const auto [ptr, ec] = std::from_chars(first, last, clock);
  if (ec != std::errc() || ptr != last) return -1;
  return clock;
}

bool IsTmpGenerationName(std::string_view name) {
  return name.size() > kGenPrefix.size() + kTmpSuffix.size() && name.starts_with(kGenPrefix) &&
         name.ends_with(kTmpSuffix);
}

std::string TmpName(const std::string& final_name) { return final_name + std::string(kTmpSuffix); }

Status SyncFlatFolder(Filesystem& files, const std::string& dir) {
  PS_ASSIGN_OR_RETURN(const std::vector<Filesystem::Entry> entries, files.List(dir));
  for (const Filesystem::Entry& e : entries) {
    if (e.type == Filesystem::Type::kFile) {
      PS_RETURN_IF_ERROR(files.SyncFile((fs::path(dir) / e.name).string()));
    }
  }
  return files.SyncDir(dir);
}

Status RemoveTornGenerations(Filesystem& files, const std::string& dir,
                             const std::function<bool(int64_t clock)>& spare) {
  PS_ASSIGN_OR_RETURN(const std::vector<Filesystem::Entry> entries, files.List(dir));
  for (const Filesystem::Entry& e : entries) {
    if (IsTmpGenerationName(e.name)) {
      const std::string_view name(e.name);
      const int64_t clock =
          ParseGenerationName(name.substr(0, name.size() - kTmpSuffix.size()));
      if (spare && clock >= 0 && spare(clock)) continue;
      PS_RETURN_IF_ERROR(files.RemoveTree((fs::path(dir) / e.name).string()));
    }
  }
  return Status::Ok();
}

Status PublishGeneration(Filesystem& files, const std::string& tmp,
                         const std::string& final_path, bool sync) {
  PS_RETURN_IF_ERROR(Publish(files, tmp, final_path));
  if (sync) return files.SyncDir(fs::path(final_path).parent_path().string());
  return Status::Ok();
}

StatusOr<std::vector<int64_t>> ListGenerations(Filesystem& files, const std::string& dir) {
  PS_ASSIGN_OR_RETURN(const std::vector<Filesystem::Entry> entries, files.List(dir));
  std::vector<int64_t> clocks;
  for (const Filesystem::Entry& e : entries) {
    const int64_t clock = ParseGenerationName(e.name);
    if (clock >= 0 && e.type == Filesystem::Type::kDirectory) clocks.push_back(clock);
  }
  std::sort(clocks.begin(), clocks.end());
  return clocks;
}

Status PruneGenerations(Filesystem& files, const std::string& dir, uint32_t keep, bool sync,
                        const std::function<void(const std::string& doomed)>& renamed,
                        const std::set<int64_t>* also_keep) {
  PS_ASSIGN_OR_RETURN(const std::vector<int64_t> clocks, ListGenerations(files, dir));
  if (clocks.size() <= keep) return Status::Ok();
  const size_t drop = clocks.size() - keep;
  for (size_t i = 0; i < drop; ++i) {
    if (also_keep != nullptr && also_keep->count(clocks[i]) != 0) continue;
    const std::string old = (fs::path(dir) / GenerationName(clocks[i])).string();
    const std::string doomed = TmpName(old);
    PS_RETURN_IF_ERROR(files.Rename(old, doomed));
    if (renamed) renamed(doomed);
    PS_RETURN_IF_ERROR(files.RemoveTree(doomed));
  }
  if (sync) return files.SyncDir(dir);
  return Status::Ok();
}

}  // namespace ps
