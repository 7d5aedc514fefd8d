#include "server/durable_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "common/logging.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kGenPrefix = "gen-";
constexpr std::string_view kTmpSuffix = ".tmp";

// The status code of a failed system call on a generation's files.
StatusCode CodeOfErrno(int err, StatusCode fallback) {
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return StatusCode::kPermissionDenied;
    case ENOSPC:
    case EDQUOT:
      return StatusCode::kResourceExhausted;
    default:
      return fallback;
  }
}

Status ErrnoError(int err, const std::string& what) {
  return FileSystemError(std::error_code(err, std::generic_category()), what,
                         StatusCode::kInternal);
}

// fsyncs one file or folder.
Status SyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) return ErrnoError(errno, "cannot open " + path + " to sync it");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError(err, "cannot sync " + path);
  return Status::Ok();
}

// Removes a replaced generation (under a .tmp name: a failure leaves it to
// the next RemoveTornGenerations, the new generation is already visible).
void RemoveOld(const std::string& path) {
  const Status removed = RemoveTree(path);
  if (!removed.ok()) PS_LOG_WARN("checkpoint: {}", removed.ToString());
}

Status Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return Status::Ok();
  return ErrnoError(errno, "cannot rename " + from + " to " + to);
}

// The rename of PublishGeneration, without the sync.
Status Publish(const std::string& tmp, const std::string& final_path) {
  if (::rename(tmp.c_str(), final_path.c_str()) == 0) return Status::Ok();
  const int err = errno;
  if (err != ENOTEMPTY && err != EEXIST) {
    return ErrnoError(err, "cannot rename " + tmp + " to " + final_path);
  }
  // A generation of the same clock exists: swap the two atomically, then
  // remove the old one (now under the .tmp name, so never read).
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) == 0) {
    RemoveOld(tmp);
    return Status::Ok();
  }
  const int xerr = errno;
  if (xerr != EINVAL && xerr != ENOSYS && xerr != ENOTSUP) {
    return ErrnoError(xerr, "cannot exchange " + tmp + " and " + final_path);
  }
  // No atomic exchange on this file system: move the old one aside first. A
  // crash in between leaves neither (the older generations stay intact).
  const std::string old = TmpName(final_path + ".old");
  PS_RETURN_IF_ERROR(RemoveTree(old));
  PS_RETURN_IF_ERROR(Rename(final_path, old));
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int rename_err = errno;
    if (::rename(old.c_str(), final_path.c_str()) != 0) {
      PS_LOG_WARN("checkpoint: cannot move {} back to {}: {}", old, final_path,
                  std::strerror(errno));
    }
    return ErrnoError(rename_err, "cannot rename " + tmp + " to " + final_path);
  }
  RemoveOld(old);
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

Status FileSystemError(const std::error_code& ec, const std::string& what, StatusCode fallback) {
  const StatusCode code =
      ec.category() == std::generic_category() || ec.category() == std::system_category()
          ? CodeOfErrno(ec.value(), fallback)
          : fallback;
  return Status(code, what + ": " + ec.message());
}

Status SyncFile(const std::string& path) { return SyncPath(path, false); }

Status SyncDir(const std::string& path) { return SyncPath(path, true); }

Status SyncFlatFolder(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_regular_file(type_ec)) PS_RETURN_IF_ERROR(SyncFile(it->path().string()));
  }
  if (ec) return FileSystemError(ec, "cannot list " + dir + " to sync it", StatusCode::kInternal);
  return SyncDir(dir);
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return FileSystemError(ec, "cannot remove " + path, StatusCode::kInternal);
  return Status::Ok();
}

Status RemoveTornGenerations(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (IsTmpGenerationName(it->path().filename().string())) {
      PS_RETURN_IF_ERROR(RemoveTree(it->path().string()));
    }
  }
  if (ec) {
    return FileSystemError(ec, "cannot list the checkpoint folder " + dir, StatusCode::kInternal);
  }
  return Status::Ok();
}

Status PublishGeneration(const std::string& tmp, const std::string& final_path, bool sync) {
  PS_RETURN_IF_ERROR(Publish(tmp, final_path));
  if (sync) return SyncDir(fs::path(final_path).parent_path().string());
  return Status::Ok();
}

StatusOr<std::vector<int64_t>> ListGenerations(const std::string& dir) {
  std::vector<int64_t> clocks;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t clock = ParseGenerationName(it->path().filename().string());
    if (clock < 0) continue;
    std::error_code type_ec;
    if (it->is_directory(type_ec)) clocks.push_back(clock);
  }
  if (ec) {
    return FileSystemError(ec, "cannot list the checkpoint folder " + dir, StatusCode::kInternal);
  }
  std::sort(clocks.begin(), clocks.end());
  return clocks;
}

Status PruneGenerations(const std::string& dir, uint32_t keep, bool sync,
                        const std::function<void(const std::string& doomed)>& renamed) {
  PS_ASSIGN_OR_RETURN(const std::vector<int64_t> clocks, ListGenerations(dir));
  if (clocks.size() <= keep) return Status::Ok();
  const size_t drop = clocks.size() - keep;
  for (size_t i = 0; i < drop; ++i) {
    const std::string old = (fs::path(dir) / GenerationName(clocks[i])).string();
    const std::string doomed = TmpName(old);
    PS_RETURN_IF_ERROR(Rename(old, doomed));
    if (renamed) renamed(doomed);
    PS_RETURN_IF_ERROR(RemoveTree(doomed));
  }
  if (sync) return SyncDir(dir);
  return Status::Ok();
}

}  // namespace ps
