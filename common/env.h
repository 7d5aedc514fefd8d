// The operating system as the server and the client see it: the clock and
// sleeping (common/clock.h), the connections they make (common/channel.h),
// and the file system checkpoints are written through. OsEnv is the real
// one (the one adapter of the POSIX file calls checkpoints make); tests
// pass their own (tests/util/test_env.h): a FakeClock whose sleeps move
// it, channels that drop, hold or cut (tests/util/faulty_channel.h), a
// file system that fails the Nth write (tests/util/faulty_filesystem.h).
//
// Everything is passed in, never reached through a global: several servers
// and clients run in one process, each on its own Env. Env::Default() is
// the process's OsEnv, for a caller given none (it holds no state).
#ifndef PS_COMMON_ENV_H_
#define PS_COMMON_ENV_H_

#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "common/channel.h"
#include "common/clock.h"
#include "common/status.h"

namespace ps {

// A file being written, from its start. Not thread-safe: one writer.
class WritableFile {
 public:
  // Closes the file if Close() was not called (errors are then lost).
  virtual ~WritableFile() = default;
  // Appends all of `data`, or returns the error of the write that failed
  // (some of `data` may then be in the file).
  virtual Status Append(std::string_view data) = 0;
  // fsyncs what was appended.
  virtual Status Sync() = 0;
  // Closes the file; no call may follow. The error of the close (a write
  // the kernel deferred may fail here).
  virtual Status Close() = 0;
};

// The file calls checkpoints make. Errors name the path and what failed;
// their code follows errno (ErrnoCode): PermissionDenied (EACCES, EPERM,
// EROFS), ResourceExhausted (ENOSPC, EDQUOT), Internal (any other failure,
// EIO and ENOENT among them); and for Rename and Exchange as said there.
//
// Thread safety: implementations are safe for concurrent use (the OS's
// is stateless); two callers must not change the same path at once.
class Filesystem {
 public:
  enum class Type { kMissing, kFile, kDirectory, kOther };
  struct Entry {
    std::string name;  // the name in the folder, not the path
    Type type = Type::kOther;
  };

  virtual ~Filesystem() = default;

  // What `path` is (kMissing when it does not exist). Follows links.
  virtual StatusOr<Type> TypeOf(const std::string& path) = 0;
  // The entries of the folder `dir`, in no order ("." and ".." left out).
  virtual StatusOr<std::vector<Entry>> List(const std::string& dir) = 0;

  // The calls below change the file system ("write calls").
  //
  // Creates the folder `path` and its missing parents; an existing folder
  // is fine.
  virtual Status CreateDirs(const std::string& path) = 0;
  // Creates the file `path` (emptied when it exists) for writing.
  virtual StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  // fsyncs the file `path`.
  virtual Status SyncFile(const std::string& path) = 0;
  // fsyncs the folder `path` (its entries: names created, renamed,
  // removed); an error when it is not a folder.
  virtual Status SyncDir(const std::string& path) = 0;
  // rename(2): `to` is replaced when it is a file or an empty folder;
  // AlreadyExists when it is a folder that is not empty.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Swaps `a` and `b` atomically (renameat2 RENAME_EXCHANGE); Unimplemented
  // where the file system cannot.
  virtual Status Exchange(const std::string& a, const std::string& b) = 0;
  // Removes the file `path`.
  virtual Status RemoveFile(const std::string& path) = 0;
  // Removes `path` and everything below it; a missing path is fine.
  virtual Status RemoveTree(const std::string& path) = 0;
};

// The POSIX file system. Thread-safe, stateless.
class OsFilesystem final : public Filesystem {
 public:
  StatusOr<Type> TypeOf(const std::string& path) override;
  StatusOr<std::vector<Entry>> List(const std::string& dir) override;
  Status CreateDirs(const std::string& path) override;
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  Status SyncFile(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Exchange(const std::string& a, const std::string& b) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveTree(const std::string& path) override;
};

// The code of a failed file call's errno: PermissionDenied (EACCES, EPERM,
// EROFS), ResourceExhausted (ENOSPC, EDQUOT), `fallback` for any other.
StatusCode ErrnoCode(int err, StatusCode fallback);
// A failed file call as a Status "<what>: <strerror(err)>" of
// ErrnoCode(err, Internal).
Status ErrnoStatus(int err, const std::string& what);
// The same for an error of std::filesystem: "<what>: <ec.message()>", of
// ErrnoCode where `ec` is an errno, `fallback` otherwise.
Status FileSystemError(const std::error_code& ec, const std::string& what, StatusCode fallback);

// Time, sleeping, connections and files together: what ShardServer,
// BackupServer and Client take (a part that needs one piece takes that:
// RequestTracker a Clock, CheckpointDir a Filesystem). Thread-safe: every
// call may come from any thread.
class Env {
 public:
  virtual ~Env() = default;
  // The process's OsEnv. Never destroyed.
  static Env* Default();
  // Deadlines, liveness and waits are measured on it.
  virtual const Clock& clock() = 0;
  // Blocks the calling thread for about `duration` of clock().
  virtual void SleepFor(Clock::Duration duration) = 0;
  // A channel to one server (common/channel.h), made on the calling
  // thread, which will use it.
  virtual StatusOr<std::unique_ptr<Channel>> Connect(Context* context,
                                                     const ChannelOptions& options) = 0;
  virtual Filesystem& filesystem() = 0;
};

// The process's steady clock, std::this_thread::sleep_for, ZeroMQ
// channels (ZmqChannel) and the POSIX file system. Stateless and cheap to
// make.
class OsEnv final : public Env {
 public:
  const Clock& clock() override { return clock_; }
  void SleepFor(Clock::Duration duration) override;
  StatusOr<std::unique_ptr<Channel>> Connect(Context* context,
                                             const ChannelOptions& options) override {
    return ZmqChannel::Connect(context, options);
  }
  Filesystem& filesystem() override { return filesystem_; }

 private:
  SteadyClock clock_;
  OsFilesystem filesystem_;
};

}  // namespace ps

#endif  // PS_COMMON_ENV_H_
