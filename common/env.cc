// OsEnv: the POSIX calls, each error turned into a Status by ErrnoStatus.
#include "common/env.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

namespace ps {
namespace {

namespace fs = std::filesystem;

// fsyncs one file or folder.
Status SyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) return ErrnoStatus(errno, "cannot open " + path + " to sync it");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(err, "cannot sync " + path);
  return Status::Ok();
}

class OsWritableFile final : public WritableFile {
 public:
  OsWritableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~OsWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(std::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(errno, "cannot write " + path_);
      }
      data.remove_prefix(static_cast<size_t>(n));  // a short write: the rest again
    }
    return Status::Ok();
  }
  Status Sync() override {
    if (::fsync(fd_) != 0) return ErrnoStatus(errno, "cannot sync " + path_);
    return Status::Ok();
  }
  Status Close() override {
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return ErrnoStatus(errno, "cannot close " + path_);
    return Status::Ok();
  }

 private:
  int fd_;
  const std::string path_;
};

}  // namespace

StatusCode ErrnoCode(int err, StatusCode fallback) {
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

Status ErrnoStatus(int err, const std::string& what) {
  return Status(ErrnoCode(err, StatusCode::kInternal), what + ": " + std::strerror(err));
}

Status FileSystemError(const std::error_code& ec, const std::string& what, StatusCode fallback) {
  const bool posix =
      ec.category() == std::generic_category() || ec.category() == std::system_category();
  return Status(posix ? ErrnoCode(ec.value(), fallback) : fallback, what + ": " + ec.message());
}

StatusOr<Filesystem::Type> OsFilesystem::TypeOf(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return FileSystemError(ec, "cannot look at " + path, StatusCode::kInternal);
  }
  if (!fs::exists(st)) return Type::kMissing;
  if (fs::is_directory(st)) return Type::kDirectory;
  if (fs::is_regular_file(st)) return Type::kFile;
  return Type::kOther;
}

StatusOr<std::vector<Filesystem::Entry>> OsFilesystem::List(const std::string& dir) {
  std::vector<Entry> entries;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    Entry entry{.name = it->path().filename().string()};
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      entry.type = Type::kDirectory;
    } else if (it->is_regular_file(type_ec)) {
      entry.type = Type::kFile;
    }
    entries.push_back(std::move(entry));
  }
  if (ec) return FileSystemError(ec, "cannot list " + dir, StatusCode::kInternal);
  return entries;
}

Status OsFilesystem::CreateDirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return FileSystemError(ec, "cannot create " + path, StatusCode::kInternal);
  return Status::Ok();
}

StatusOr<std::unique_ptr<WritableFile>> OsFilesystem::NewWritableFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "cannot create " + path);
  return std::unique_ptr<WritableFile>(std::make_unique<OsWritableFile>(fd, path));
}

Status OsFilesystem::SyncFile(const std::string& path) { return SyncPath(path, false); }

Status OsFilesystem::SyncDir(const std::string& path) { return SyncPath(path, true); }

Status OsFilesystem::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) == 0) return Status::Ok();
  const int err = errno;
  const std::string what = "cannot rename " + from + " to " + to;
  if (err == ENOTEMPTY || err == EEXIST) {
    return Status(StatusCode::kAlreadyExists, what + ": " + std::strerror(err));
  }
  return ErrnoStatus(err, what);
}

Status OsFilesystem::Exchange(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) {
    return Status::Ok();
  }
  const int err = errno;
  const std::string what = "cannot exchange " + a + " and " + b;
  if (err == EINVAL || err == ENOSYS || err == ENOTSUP) {
    return Status(StatusCode::kUnimplemented, what + ": " + std::strerror(err));
  }
  return ErrnoStatus(err, what);
}

Status OsFilesystem::RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return Status::Ok();
  return ErrnoStatus(errno, "cannot remove " + path);
}

Status OsFilesystem::RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return FileSystemError(ec, "cannot remove " + path, StatusCode::kInternal);
  return Status::Ok();
}

void OsEnv::SleepFor(Clock::Duration duration) { std::this_thread::sleep_for(duration); }

Env* Env::Default() {
  static OsEnv* const env = new OsEnv();
  return env;
}

}  // namespace ps
