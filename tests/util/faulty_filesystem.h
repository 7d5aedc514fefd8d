// Test helper: a Filesystem around the real one that fails the Nth write
// call on the test's command, the way a full or failing disk does: ENOSPC,
// EIO, or a short write (part of the bytes land, then ENOSPC). Once, or
// (sticky) for that call and every write call after it, like a disk that
// stays full.
//
// Write calls are those that change the file system: CreateDirs,
// NewWritableFile, Append, a file's Sync and Close, SyncFile, SyncDir,
// Rename, Exchange, RemoveFile, RemoveTree. TypeOf and List always go
// through.
//
// Thread-safe: RocksDB writes from its own threads too.
#ifndef PS_TESTS_UTIL_FAULTY_FILESYSTEM_H_
#define PS_TESTS_UTIL_FAULTY_FILESYSTEM_H_

#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/env.h"

namespace ps {

class FaultyFilesystem final : public Filesystem {
 public:
  enum class Fault {
    kNoSpace,     // ENOSPC
    kIoError,     // EIO
    kShortWrite,  // an Append writes half its bytes, then ENOSPC
  };

  // `inner` must outlive this one.
  explicit FaultyFilesystem(Filesystem* inner) : inner_(inner) {}

  // The `n`th write call from now on (1: the next) that `fault` applies to
  // fails with it: any write call for kNoSpace and kIoError, an Append for
  // kShortWrite. `sticky`: every write call after it fails too (with ENOSPC
  // for kShortWrite) until Clear().
  void FailNth(uint64_t n, Fault fault, bool sticky = false) {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = Armed{fault, n, sticky};
    fired_ = false;
    failing_ = false;
  }
  // No more faults; the write calls counted so far stay counted.
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_.reset();
    failing_ = false;
  }
  // Whether the fault armed last has failed a call.
  bool fired() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fired_;
  }
  // Write calls and Appends so far (failed ones included).
  uint64_t write_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return write_calls_;
  }
  uint64_t appends() const {
    std::lock_guard<std::mutex> lock(mu_);
    return appends_;
  }

  StatusOr<Type> TypeOf(const std::string& path) override { return inner_->TypeOf(path); }
  StatusOr<std::vector<Entry>> List(const std::string& dir) override { return inner_->List(dir); }

  Status CreateDirs(const std::string& path) override {
    PS_RETURN_IF_ERROR(Hit("create", path));
    return inner_->CreateDirs(path);
  }
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    PS_RETURN_IF_ERROR(Hit("create", path));
    PS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, inner_->NewWritableFile(path));
    return std::unique_ptr<WritableFile>(std::make_unique<File>(this, std::move(file), path));
  }
  Status SyncFile(const std::string& path) override {
    PS_RETURN_IF_ERROR(Hit("sync", path));
    return inner_->SyncFile(path);
  }
  Status SyncDir(const std::string& path) override {
    PS_RETURN_IF_ERROR(Hit("sync", path));
    return inner_->SyncDir(path);
  }
  Status Rename(const std::string& from, const std::string& to) override {
    PS_RETURN_IF_ERROR(Hit("rename", from));
    return inner_->Rename(from, to);
  }
  Status Exchange(const std::string& a, const std::string& b) override {
    PS_RETURN_IF_ERROR(Hit("exchange", a));
    return inner_->Exchange(a, b);
  }
  Status RemoveFile(const std::string& path) override {
    PS_RETURN_IF_ERROR(Hit("remove", path));
    return inner_->RemoveFile(path);
  }
  Status RemoveTree(const std::string& path) override {
    PS_RETURN_IF_ERROR(Hit("remove", path));
    return inner_->RemoveTree(path);
  }

 private:
  struct Armed {
    Fault fault;
    uint64_t countdown;  // applicable write calls until the fault
    bool sticky;
  };

  class File final : public WritableFile {
   public:
    File(FaultyFilesystem* owner, std::unique_ptr<WritableFile> inner, std::string path)
        : owner_(owner), inner_(std::move(inner)), path_(std::move(path)) {}
    Status Append(std::string_view data) override {
      size_t keep = data.size();
      const Status hit = owner_->Hit("write", path_, &keep);
      if (keep < data.size()) {
        // A short write: what fit lands, the rest does not.
        PS_RETURN_IF_ERROR(inner_->Append(data.substr(0, keep)));
        return hit;
      }
      PS_RETURN_IF_ERROR(hit);
      return inner_->Append(data);
    }
    Status Sync() override {
      PS_RETURN_IF_ERROR(owner_->Hit("sync", path_));
      return inner_->Sync();
    }
    Status Close() override {
      const Status hit = owner_->Hit("close", path_);
      const Status closed = inner_->Close();  // the descriptor is released either way
      return hit.ok() ? closed : hit;
    }

   private:
    FaultyFilesystem* const owner_;
    const std::unique_ptr<WritableFile> inner_;
    const std::string path_;
  };

  // Counts one write call (`what` of `path`) and returns its fault, if it
  // gets one. `keep` is set for an Append: how many of its bytes land
  // (fewer than all only for a short write).
  Status Hit(std::string_view what, const std::string& path, size_t* keep = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    ++write_calls_;
    if (keep != nullptr) ++appends_;
    if (!armed_) return Status::Ok();
    const bool applies = armed_->fault != Fault::kShortWrite || keep != nullptr;
    if (!failing_ && applies && --armed_->countdown == 0) {
      failing_ = true;
      fired_ = true;
      const Fault fault = armed_->fault;
      if (!armed_->sticky) armed_.reset();
      if (fault == Fault::kShortWrite) {
        *keep /= 2;
        return ErrnoStatus(ENOSPC, "cannot " + std::string(what) + " " + path +
                                       " (injected short write)");
      }
      return ErrnoStatus(fault == Fault::kNoSpace ? ENOSPC : EIO,
                         "cannot " + std::string(what) + " " + path + " (injected)");
    }
    if (failing_ && armed_ && armed_->sticky) {
      return ErrnoStatus(armed_->fault == Fault::kIoError ? EIO : ENOSPC,
                         "cannot " + std::string(what) + " " + path + " (injected, sticky)");
    }
    return Status::Ok();
  }

  Filesystem* const inner_;
  mutable std::mutex mu_;
  std::optional<Armed> armed_;  // guarded by mu_
  bool fired_ = false;          // guarded by mu_
  bool failing_ = false;        // guarded by mu_: a sticky fault has fired
  uint64_t write_calls_ = 0;    // guarded by mu_
  uint64_t appends_ = 0;        // guarded by mu_
};

}  // namespace ps

#endif  // PS_TESTS_UTIL_FAULTY_FILESYSTEM_H_
