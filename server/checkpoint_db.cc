// Writing: the database is created with the write-ahead log disabled,
// filled with write batches of about 1 MiB in key order, flushed and closed,
// through the caller's Filesystem with syncs that do nothing (the folder is
// not visible yet; the caller fsyncs every file once afterwards). Reading
// opens it read-only.
#include "server/checkpoint_db.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/hash_slots.h"
#include "server/checkpoint_format.h"
#include "server/durable_dir.h"
#include "server/read_tasks.h"

namespace ps {
namespace {

constexpr size_t kBatchBytes = size_t{1} << 20;

// RocksDB's informational log goes nowhere: without one, a read-only open
// would create a LOG file inside the generation. Errors come back as Status.
class NullLogger : public rocksdb::Logger {
 public:
  NullLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::FATAL_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
  void Logv(const rocksdb::InfoLogLevel /*level*/, const char* /*format*/,
            va_list /*ap*/) override {}
};

const std::shared_ptr<rocksdb::Logger>& SharedNullLogger() {
  static const std::shared_ptr<rocksdb::Logger> logger = std::make_shared<NullLogger>();
  return logger;
}

// The project's Status as RocksDB's: disk full stays disk full (RocksError
// maps it back), anything else is an I/O error carrying the message.
rocksdb::IOStatus ToIOStatus(const Status& s) {
  if (s.ok()) return rocksdb::IOStatus::OK();
  if (s.code() == StatusCode::kResourceExhausted) return rocksdb::IOStatus::NoSpace(s.message());
  return rocksdb::IOStatus::IOError(s.message());
}

// A file of the database, written through the project's Filesystem. Its
// syncs do nothing: RocksDB syncs each file as it writes it, but a
// generation is not visible until it is renamed, so those syncs buy
// nothing; with CheckpointWriteOptions::sync (server/checkpoint.h) every
// file is fsynced once after the database is closed (SyncFlatFolder). So
// sync: false never waits for the disk.
class CheckpointWritableFile : public rocksdb::FSWritableFile {
 public:
  explicit CheckpointWritableFile(std::unique_ptr<WritableFile> file) : file_(std::move(file)) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions&,
                           rocksdb::IODebugContext*) override {
    const Status appended = file_->Append(data.ToStringView());
    if (appended.ok()) size_ += data.size();
    return ToIOStatus(appended);
  }
  rocksdb::IOStatus Close(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return ToIOStatus(file_->Close());
  }
  rocksdb::IOStatus Flush(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();  // nothing is buffered here
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus RangeSync(uint64_t, uint64_t, const rocksdb::IOOptions&,
                              rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  uint64_t GetFileSize(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return size_;
  }

 private:
  std::unique_ptr<WritableFile> file_;
  uint64_t size_ = 0;
};

class UnsyncedDirectory : public rocksdb::FSDirectoryWrapper {
 public:
  using rocksdb::FSDirectoryWrapper::FSDirectoryWrapper;
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus FsyncWithDirOptions(const rocksdb::IOOptions&, rocksdb::IODebugContext*,
                                        const rocksdb::DirFsyncOptions&) override {
    return rocksdb::IOStatus::OK();
  }
};

// The file system of a database write: its files, folders, renames and
// removals go through the project's Filesystem (so a test's faulty one
// fails them too), its syncs nowhere (see CheckpointWritableFile); reads
// and locks go to RocksDB's default.
class CheckpointFileSystem : public rocksdb::FileSystemWrapper {
 public:
  explicit CheckpointFileSystem(Filesystem* files)
      : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()), files_(files) {}
  const char* Name() const override { return "PsCheckpointFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions&,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext*) override {
    StatusOr<std::unique_ptr<WritableFile>> file = files_->NewWritableFile(name);
    if (!file.ok()) return ToIOStatus(file.status());
    *result = std::make_unique<CheckpointWritableFile>(std::move(*file));
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions&,
                                       std::unique_ptr<rocksdb::FSWritableFile>*,
                                       rocksdb::IODebugContext*) override {
    // A database written once from empty never reopens a file.
    return rocksdb::IOStatus::NotSupported("reopening " + name + " in a checkpoint");
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string&,
                                      const rocksdb::FileOptions&,
                                      std::unique_ptr<rocksdb::FSWritableFile>*,
                                      rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::NotSupported("reusing " + name + " in a checkpoint");
  }
  rocksdb::IOStatus CreateDirIfMissing(const std::string& name, const rocksdb::IOOptions&,
                                       rocksdb::IODebugContext*) override {
    return ToIOStatus(files_->CreateDirs(name));
  }
  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to,
                               const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return ToIOStatus(files_->Rename(from, to));
  }
  rocksdb::IOStatus DeleteFile(const std::string& name, const rocksdb::IOOptions&,
                               rocksdb::IODebugContext*) override {
    return ToIOStatus(files_->RemoveFile(name));
  }
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewDirectory(name, options, result, dbg);
    if (s.ok()) *result = std::make_unique<UnsyncedDirectory>(std::move(*result));
    return s;
  }

 private:
  Filesystem* const files_;
};

// A RocksDB error as a Status whose message starts with `what`.
Status RocksError(const rocksdb::Status& s, const std::string& what, StatusCode fallback) {
  StatusCode code = fallback;
  if (s.IsNoSpace()) {
    code = StatusCode::kResourceExhausted;
  } else if (s.IsIOError() && s.ToString().find("Permission denied") != std::string::npos) {
    code = StatusCode::kPermissionDenied;
  }
  return Status(code, what + ": " + s.ToString());
}

rocksdb::Options CommonOptions() {
  rocksdb::Options o;
  o.info_log = SharedNullLogger();
  o.paranoid_checks = true;
  // Floats of trained models hardly compress; storing them raw keeps writes
  // and reads at disk speed.
  o.compression = rocksdb::kNoCompression;
  o.stats_dump_period_sec = 0;
  o.stats_persist_period_sec = 0;
  rocksdb::BlockBasedTableOptions table;
  table.block_size = 64 << 10;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return o;
}

rocksdb::Slice AsSlice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }

}  // namespace

Status WriteGenerationDatabase(Filesystem& files, const ShardSnapshot& s, const std::string& path,
                               const CheckpointStageHook& at_stage, const RowsWrittenFn& written) {
  // Declared before the database, so it outlives it.
  const std::unique_ptr<rocksdb::Env> env =
      rocksdb::NewCompositeEnv(std::make_shared<CheckpointFileSystem>(&files));
  rocksdb::Options o = CommonOptions();
  o.create_if_missing = true;
  o.error_if_exists = true;
  // Keys arrive in order and the database is written once: compactions
  // would only rewrite it.
  o.disable_auto_compactions = true;
  o.env = env.get();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status rs = rocksdb::DB::Open(o, path, &raw);
  if (!rs.ok()) return RocksError(rs, "cannot create database " + path, StatusCode::kInternal);
  std::unique_ptr<rocksdb::DB> db(raw);
  if (at_stage) at_stage(CheckpointStage::kCreated, s.clock, path);
  // The hook's `records` point: once about half of the run records are
  // committed. Counted only when there is a hook.
  const uint64_t stall_after_runs =
      at_stage ? std::max<uint64_t>(1, RunCount(s) / 2) : std::numeric_limits<uint64_t>::max();
  uint64_t runs_written = 0;

  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  rocksdb::WriteBatch batch;
  const auto commit = [&]() -> Status {
    rocksdb::Status ws = db->Write(wo, &batch);
    batch.Clear();
    if (!ws.ok()) return RocksError(ws, "cannot write to " + path, StatusCode::kInternal);
    return Status::Ok();
  };
  rs = batch.Put(AsSlice(kMetaKey), EncodeMeta(s));
  if (!rs.ok()) return RocksError(rs, "cannot write to " + path, StatusCode::kInternal);

  char key[kIdKeySize];
  for (size_t ti = 0; ti < s.tables.size(); ++ti) {
    const TableSnapshot& t = s.tables[ti];
    const uint64_t seed = t.hashed ? NameHash(t.name) : 0;
    if (t.sketch_width != 0) {
      rs = batch.Put(AsSlice(SketchKey(static_cast<uint32_t>(ti))),
                     rocksdb::Slice(reinterpret_cast<const char*>(t.sketch.data()), t.sketch.size()));
      if (!rs.ok()) return RocksError(rs, "cannot write to " + path, StatusCode::kInternal);
    }
    // A range table's records are runs of rows; a hashed table's, one row
    // each, keyed by its id.
    const uint64_t per_run = t.hashed ? 1 : RowsPerRun(t.dim);
    // A record's value: its rows' values, then each slot's, from one piece
    // of memory or, for a run that spans two of a shared snapshot's blocks,
    // from two; each row's use follows, when the table evicts.
    const size_t arrays = 1 + t.slots.size();
    std::vector<RowPiece> pieces;
    std::vector<rocksdb::Slice> parts;
    std::byte use[kRowUseBytes];
    // Puts `key` with `nparts` of `parts` (a removed id's: kRemovedRecord).
    const auto put = [&](size_t key_size, const rocksdb::Slice* value_parts,
                         int nvalue) -> Status {
      const rocksdb::Slice key_slice(key, key_size);
      rs = batch.Put(rocksdb::SliceParts(&key_slice, 1), rocksdb::SliceParts(value_parts, nvalue));
      if (!rs.ok()) return RocksError(rs, "cannot write to " + path, StatusCode::kInternal);
      if (batch.GetDataSize() >= kBatchBytes) PS_RETURN_IF_ERROR(commit());
      if (++runs_written == stall_after_runs) {
        if (batch.Count() > 0) PS_RETURN_IF_ERROR(commit());
        at_stage(CheckpointStage::kRecords, s.clock, path);
      }
      return Status::Ok();
    };
    // Rows [first, first + n) of the snapshot's arrays, at global row (or
    // id) `at`; a delta's row record ('p') with `patch`.
    const auto put_rows = [&](uint64_t first, uint64_t n, uint64_t at,
                              bool patch = false) -> Status {
      size_t key_size = kRowKeySize;
      if (t.hashed) {
        EncodeIdKey(static_cast<uint32_t>(ti), IdSlot(at, seed, t.hash_slots), at, key);
        key_size = kIdKeySize;
      } else if (patch) {
        const std::string patch_key = PatchKey(static_cast<uint32_t>(ti), at);
        std::memcpy(key, patch_key.data(), kRowKeySize);
      } else {
        EncodeRowKey(static_cast<uint32_t>(ti), at, key);
      }
      pieces.clear();
      t.ForEachPiece(first, n, [&](const RowPiece& piece) { pieces.push_back(piece); });
      parts.clear();
      for (size_t a = 0; a < arrays; ++a) {
        for (const RowPiece& piece : pieces) {
          const float* p = a == 0 ? piece.values : piece.slots[a - 1];
          parts.emplace_back(reinterpret_cast<const char*>(p),
                             static_cast<size_t>(piece.rows) * t.dim * sizeof(float));
        }
      }
      if (t.row_uses) {
        EncodeRowUse(t.uses[first], use);
        parts.emplace_back(reinterpret_cast<const char*>(use), kRowUseBytes);
      }
      PS_RETURN_IF_ERROR(put(key_size, parts.data(), static_cast<int>(parts.size())));
      // The batch holds its own copy of the record's bytes: a shared
      // snapshot's rows written so far go back to the store.
      if (written) written(static_cast<uint32_t>(ti), first + n);
      return Status::Ok();
    };
    if (t.hashed && s.delta()) {
      // Changed rows and removed ids, both in key order, merged.
      const rocksdb::Slice removed_value(kRemovedRecord.data(), kRemovedRecord.size());
      const auto key_of = [&](uint64_t id) {
        return std::pair(IdSlot(id, seed, t.hash_slots), id);
      };
      size_t i = 0, j = 0;
      while (i < t.ids.size() || j < t.removed.size()) {
        if (j == t.removed.size() ||
            (i < t.ids.size() && key_of(t.ids[i]) < key_of(t.removed[j]))) {
          PS_RETURN_IF_ERROR(put_rows(i, 1, t.ids[i]));
          ++i;
        } else {
          const uint64_t id = t.removed[j++];
          EncodeIdKey(static_cast<uint32_t>(ti), IdSlot(id, seed, t.hash_slots), id, key);
          PS_RETURN_IF_ERROR(put(kIdKeySize, &removed_value, 1));
        }
      }
    } else if (!t.hashed && s.delta()) {
      // The changed ranges' runs, each range's rows one after the other in
      // the arrays.
      uint64_t first = 0;
      for (const RowRange& r : t.changed) {
        for (uint64_t row = r.begin; row < r.end; row += per_run) {
          const uint64_t n = std::min(per_run, r.end - row);
          PS_RETURN_IF_ERROR(put_rows(first, n, row));
          first += n;
        }
      }
      // Then the single rows changed outside them.
      for (const uint64_t row : t.patched) PS_RETURN_IF_ERROR(put_rows(first++, 1, row, true));
    } else {
      const uint64_t rows = t.RowCount();
      for (uint64_t first = 0; first < rows; first += per_run) {
        const uint64_t n = std::min(per_run, rows - first);
        PS_RETURN_IF_ERROR(put_rows(first, n, t.hashed ? t.ids[first] : t.owned.begin + first));
      }
    }
  }
  if (batch.Count() > 0) PS_RETURN_IF_ERROR(commit());

  rocksdb::FlushOptions fo;
  fo.wait = true;
  rs = db->Flush(fo);
  if (!rs.ok()) return RocksError(rs, "cannot flush " + path, StatusCode::kInternal);
  rs = db->Close();
  if (!rs.ok()) return RocksError(rs, "cannot close " + path, StatusCode::kInternal);
  return Status::Ok();
}

namespace {

// Every block's checksum is verified once, as it is read; blocks are read
// once, so they are not cached; each iterator reads ahead 2 MiB at a time
// through the page cache. Measured on a 2-core VM, a 1.2 GB generation on 4
// threads: direct reads (no page cache) spent about 15% less CPU from a
// cold cache but lost the page cache a generation just written is still
// in; memory-mapped reads saved copies but would turn a disk's read error
// into SIGBUS instead of DataLoss.
rocksdb::ReadOptions ReadOptionsForRestore() {
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  ro.readahead_size = 2 << 20;
  return ro;
}

// A generation's database opened read-only, and its meta record checked
// against the size of its files.
struct OpenedGeneration {
  std::string path;
  std::unique_ptr<rocksdb::DB> db;
  ShardSnapshot layout;
  uint32_t version = 0;
  Uint128 file_bytes = 0;
};

StatusOr<OpenedGeneration> OpenGeneration(const std::string& path) {
  rocksdb::Options o = CommonOptions();
  o.create_if_missing = false;
  o.skip_checking_sst_file_sizes_on_db_open = false;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status rs = rocksdb::DB::OpenForReadOnly(o, path, &raw);
  if (!rs.ok()) return RocksError(rs, path + ": cannot open the generation", StatusCode::kDataLoss);
  OpenedGeneration opened;
  opened.path = path;
  opened.db.reset(raw);

  std::string meta;
  rs = opened.db->Get(ReadOptionsForRestore(), AsSlice(kMetaKey), &meta);
  if (rs.IsNotFound()) return DataLossError(path + ": the meta record is missing");
  if (!rs.ok()) {
    return RocksError(rs, path + ": cannot read the meta record", StatusCode::kDataLoss);
  }
  PS_ASSIGN_OR_RETURN(opened.layout, DecodeMeta(meta, path, &opened.version));

  // The values are stored uncompressed, so the files hold at least as many
  // bytes as the meta record promises: never allocate more than that.
  std::vector<rocksdb::LiveFileMetaData> files;
  opened.db->GetLiveFilesMetaData(&files);
  for (const auto& f : files) opened.file_bytes += f.size;
  PS_ASSIGN_OR_RETURN(const Uint128 promised, RowDataBytes(opened.layout, path));
  if (promised > opened.file_bytes) {
    return DataLossError(path + ": the meta record promises more row data than the files hold");
  }
  return opened;
}

// Generation `path` and, when it is a delta, the generations it builds on
// (each gen-<base clock> beside it), oldest (the full one) first, each link
// checked against the next (CheckChainLink), and the state of the newest
// against the bytes of all of them.
StatusOr<std::vector<OpenedGeneration>> OpenChain(const std::string& path) {
  std::vector<OpenedGeneration> chain;
  PS_ASSIGN_OR_RETURN(OpenedGeneration newest, OpenGeneration(path));
  chain.push_back(std::move(newest));
  // Base clocks decrease (DecodeMeta): the walk ends.
  while (chain.back().layout.delta()) {
    const OpenedGeneration& newer = chain.back();
    const int64_t base = newer.layout.base_clock;
    const std::string base_path =
        (std::filesystem::path(newer.path).parent_path() / GenerationName(base)).string();
    std::error_code ec;
    if (!std::filesystem::is_directory(base_path, ec)) {
      return DataLossError(newer.path + " is a delta on generation " + std::to_string(base) +
                           ", but " + base_path + " is missing (removed or pruned by hand): the " +
                           "chain of generations from " + path + " is broken; restore an older " +
                           "generation (--restore-clock) that does not build on it, or start " +
                           "with a new checkpoint.dir");
    }
    StatusOr<OpenedGeneration> older = OpenGeneration(base_path);
    if (!older.ok()) {
      return Status(older.status().code(),
                    older.status().message() + " (the base of the delta " + newer.path +
                        ", needed to read " + path + ")");
    }
    PS_RETURN_IF_ERROR(CheckChainLink(older->layout, base_path, newer.layout, newer.path));
    chain.push_back(std::move(*older));
  }
  std::reverse(chain.begin(), chain.end());
  if (chain.size() > 1) {
    Uint128 file_bytes = 0;
    for (const OpenedGeneration& link : chain) file_bytes += link.file_bytes;
    PS_ASSIGN_OR_RETURN(const Uint128 promised,
                        RowDataBytes(AsFullLayout(chain.back().layout), path));
    if (promised > file_bytes) {
      return DataLossError(path + ": the meta record promises more row data than the files of " +
                           "its chain of " + std::to_string(chain.size()) + " generations hold");
    }
  }
  return chain;
}

// "gen-30 (a delta; chain gen-10 <- gen-20 <- gen-30)" for errors about the
// state a chain merges to.
std::string ChainText(const std::vector<OpenedGeneration>& chain) {
  std::string text = chain.back().path;
  if (chain.size() == 1) return text;
  text += " (a delta; its chain: ";
  for (size_t i = 0; i < chain.size(); ++i) {
    if (i > 0) text += " <- ";
    text += std::filesystem::path(chain[i].path).filename().string();
  }
  return text + ")";
}

bool IsPatchKey(const rocksdb::Slice& key) {
  uint32_t table = 0;
  uint64_t row = 0;
  return DecodePatchKey(key.ToStringView(), &table, &row);
}

// The records of a chain's links in key order, merged: of the records of
// one key the newest link's wins, a delta's removed id (kRemovedRecord)
// hides the key, and a run record gets the row records ('p') of the links
// newer than its own put over its rows. `on_record` sees every record of
// every link (its link's index, for that link's checks), `on_winner` each
// key's winner that is not a removed id (a run with the rows put over it).
// The meta records, and the row records as records of their own, are left
// out. Stops at the first error.
class ChainMerge {
 public:
  ChainMerge(const std::vector<OpenedGeneration>& chain, const rocksdb::ReadOptions& ro)
      : chain_(chain) {
    rocksdb::ReadOptions patch_ro = ro;
    patch_ro.iterate_upper_bound = nullptr;
    for (const OpenedGeneration& link : chain) {
      its_.emplace_back(link.db->NewIterator(ro));
      bool patches = false;
      for (const TableSnapshot& t : link.layout.tables) patches |= !t.hashed && t.delta_rows > 0;
      patch_its_.emplace_back(patches ? link.db->NewIterator(patch_ro) : nullptr);
    }
  }
  void Seek(std::string_view begin) {
    for (auto& it : its_) begin.empty() ? it->SeekToFirst() : it->Seek(AsSlice(begin));
  }
  template <typename OnRecord, typename OnWinner>
  Status Run(OnRecord on_record, OnWinner on_winner) {
    const rocksdb::Slice meta = AsSlice(kMetaKey);
    for (;;) {
      int best = -1;
      for (size_t i = 0; i < its_.size(); ++i) {
        auto& it = its_[i];
        while (it->Valid() && (it->key() == meta || IsPatchKey(it->key()))) {
          if (it->key() != meta) {
            PS_RETURN_IF_ERROR(
                on_record(i, it->key().ToStringView(), it->value().ToStringView()));
          }
          it->Next();
        }
        if (!it->Valid()) continue;
        // On equal keys the newer link (a larger index) wins.
        if (best < 0 || it->key().compare(its_[best]->key()) <= 0) best = static_cast<int>(i);
      }
      if (best < 0) break;
      const std::string key = its_[best]->key().ToString();
      for (size_t i = 0; i < its_.size(); ++i) {
        auto& it = its_[i];
        if (!it->Valid() || it->key() != AsSlice(key)) continue;
        PS_RETURN_IF_ERROR(
            on_record(i, it->key().ToStringView(), it->value().ToStringView()));
        if (static_cast<int>(i) != best) it->Next();
      }
      auto& winner = its_[best];
      const bool removed =
          chain_[best].layout.delta() && winner->value().ToStringView() == kRemovedRecord;
      if (!removed) {
        std::string_view value = winner->value().ToStringView();
        PS_RETURN_IF_ERROR(PutRowsOver(static_cast<size_t>(best), key, &value));
        PS_RETURN_IF_ERROR(
            on_winner(static_cast<size_t>(best), winner->key().ToStringView(), value));
      }
      winner->Next();
    }
    for (size_t i = 0; i < its_.size(); ++i) {
      if (!its_[i]->status().ok()) {
        return RocksError(its_[i]->status(), chain_[i].path + ": cannot read the records",
                          StatusCode::kDataLoss);
      }
    }
    return Status::Ok();
  }

 private:
  // When `key` is a run record of link `link` (*value its value): the row
  // records of the newer links for its rows put over a copy of it, in link
  // order (the newest last), *value then viewing the copy. A record that
  // is not a whole run of its table is left to the checks.
  Status PutRowsOver(size_t link, const std::string& key, std::string_view* value) {
    uint32_t ti = 0;
    uint64_t first = 0;
    const ShardSnapshot& layout = chain_[link].layout;
    if (!DecodeRowKey(key, &ti, &first) || ti >= layout.tables.size()) return Status::Ok();
    const TableSnapshot& t = layout.tables[ti];
    if (t.hashed || !t.owned.Contains(first)) return Status::Ok();
    const uint64_t end = first + std::min(RowsPerRun(t.dim), t.owned.end - first);
    const size_t row_bytes = size_t{t.dim} * sizeof(float);
    const size_t piece = static_cast<size_t>(end - first) * row_bytes;
    const size_t pieces = 1 + t.slots.size();
    if (value->size() != piece * pieces) return Status::Ok();
    const std::string begin_key = PatchKey(ti, first), end_key = PatchKey(ti, end);
    bool copied = false;
    for (size_t i = link + 1; i < chain_.size(); ++i) {
      rocksdb::Iterator* it = patch_its_[i].get();
      if (it == nullptr || chain_[i].layout.tables[ti].delta_rows == 0) continue;
      // Runs come in key order: the iterator stands where the last run's
      // rows ended, and seeks (reading ahead) only to skip rows.
      if (!it->Valid() || it->key().compare(AsSlice(begin_key)) < 0) it->Seek(AsSlice(begin_key));
      for (; it->Valid() && it->key().compare(AsSlice(end_key)) < 0; it->Next()) {
        uint32_t table = 0;
        uint64_t row = 0;
        DecodePatchKey(it->key().ToStringView(), &table, &row);
        if (it->value().size() != row_bytes * pieces) {
          return DataLossError(chain_[i].path + ": the row record of table '" + t.name +
                               "' row " + std::to_string(row) + " has " +
                               std::to_string(it->value().size()) + " bytes, not " +
                               std::to_string(row_bytes * pieces));
        }
        if (!copied) patched_.assign(value->data(), value->size());
        copied = true;
        for (size_t k = 0; k < pieces; ++k) {
          std::memcpy(patched_.data() + k * piece + (row - first) * row_bytes,
                      it->value().data() + k * row_bytes, row_bytes);
        }
      }
      if (!it->status().ok()) {
        return RocksError(it->status(), chain_[i].path + ": cannot read the records",
                          StatusCode::kDataLoss);
      }
    }
    if (copied) *value = patched_;
    return Status::Ok();
  }

  const std::vector<OpenedGeneration>& chain_;
  std::vector<std::unique_ptr<rocksdb::Iterator>> its_;
  // Per link, an iterator over its row records (none for a link without).
  std::vector<std::unique_ptr<rocksdb::Iterator>> patch_its_;
  std::string patched_;  // a run with rows put over it
};

// Every record of one link of a chain against its own meta record.
Status CheckLink(const OpenedGeneration& link, const rocksdb::ReadOptions& ro) {
  RunChecker checker(link.layout, link.path, link.version);
  RunRecord run;
  std::unique_ptr<rocksdb::Iterator> it(link.db->NewIterator(ro));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key() == AsSlice(kMetaKey)) continue;
    PS_RETURN_IF_ERROR(checker.Next(it->key().ToStringView(), it->value().ToStringView(), &run));
  }
  if (!it->status().ok()) {
    return RocksError(it->status(), link.path + ": cannot read the records", StatusCode::kDataLoss);
  }
  return checker.Finish();
}

}  // namespace

namespace {

// A full generation (a chain of one) read on several threads, as
// ReadGenerationDatabase says.
StatusOr<int64_t> ReadFullGeneration(const OpenedGeneration& opened, const std::string& path,
                                     RowSink* sink, const GenerationReadOptions& options) {
  const std::unique_ptr<rocksdb::DB>& db = opened.db;
  const ShardSnapshot& layout = opened.layout;
  const uint32_t version = opened.version;
  PS_RETURN_IF_ERROR(sink->Begin(layout));

  // Key ranges read by one thread each: the first from the first key (the
  // sketches, the hashed tables' rows by table and id, then the first range
  // tables' runs), each other one from the start of a run; together every
  // record once, each range checked as the part of one pass in key order.
  const uint32_t threads = options.threads != 0 ? options.threads : DefaultReadThreads();
  const std::vector<RunStart> starts =
      sink->ConcurrentRangeRows() && threads > 1
          ? SplitRuns(layout, threads, options.min_range_bytes)
          : std::vector<RunStart>();
  std::vector<std::string> bounds;  // the key of each start
  for (const RunStart& s : starts) bounds.push_back(RowKey(s.table, s.row));
  const auto read_range = [&](size_t range, const std::atomic<bool>& stop) -> Status {
    rocksdb::ReadOptions ro = ReadOptionsForRestore();
    rocksdb::Slice upper;
    if (range < starts.size()) {
      upper = AsSlice(bounds[range]);
      ro.iterate_upper_bound = &upper;
    }
    RunChecker checker(layout, path, version);
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
    if (range == 0) {
      it->SeekToFirst();
    } else {
      checker.StartAt(starts[range - 1].table, starts[range - 1].row);
      it->Seek(AsSlice(bounds[range - 1]));
    }
    RunRecord run;
    for (; it->Valid(); it->Next()) {
      if (stop.load(std::memory_order_relaxed)) return StoppedError();
      const rocksdb::Slice key = it->key();
      if (key == AsSlice(kMetaKey)) continue;
      PS_RETURN_IF_ERROR(checker.Next(key.ToStringView(), it->value().ToStringView(), &run));
      if (run.sketch) {
        sink->Sketch(run.table, {run.values, run.piece_bytes});
      } else if (run.piece_bytes > 0) {
        sink->Rows(run.table, run.first, run.count, run.values,
                   std::span<const std::byte* const>(run.slots, run.num_slots), run.use);
      }
    }
    if (!it->status().ok()) {
      return RocksError(it->status(), path + ": cannot read the records", StatusCode::kDataLoss);
    }
    if (range < starts.size()) return checker.FinishAt(starts[range].table, starts[range].row);
    return checker.Finish();
  };
  PS_RETURN_IF_ERROR(RunReadTasks(starts.size() + 1, threads, path, read_range));
  return layout.clock;
}

}  // namespace

StatusOr<int64_t> ReadGenerationDatabase(const std::string& path, RowSink* sink,
                                         const GenerationReadOptions& options) {
  PS_ASSIGN_OR_RETURN(std::vector<OpenedGeneration> chain, OpenChain(path));
  // A full generation's records are read on several threads; a delta's
  // chain is merged key by key in one pass.
  if (chain.size() == 1) return ReadFullGeneration(chain.front(), path, sink, options);
  const ShardSnapshot layout = AsFullLayout(chain.back().layout);
  // A chain's oldest version speaks for its keys' shapes (every link of a
  // chain is of format 6, its full one too, but for a chain of one).
  const uint32_t version = chain.front().version;
  const rocksdb::ReadOptions ro = ReadOptionsForRestore();
  PS_RETURN_IF_ERROR(sink->Begin(layout));

  // One pass over the records in key order: the hashed tables' rows, by
  // table and id, then the range tables', table by table, run by run. A
  // chain's records are merged, each link's checked as its own meta record
  // says and the merged ones as the newest's full state.
  const std::string where = ChainText(chain);
  RunChecker checker(layout, where, version);
  std::vector<RunChecker> link_checkers;
  if (chain.size() > 1) {
    for (const OpenedGeneration& link : chain) {
      link_checkers.emplace_back(link.layout, link.path, link.version);
    }
  }
  RunRecord run;
  RunRecord link_run;
  ChainMerge merge(chain, ro);
  merge.Seek("");
  const Status merged = merge.Run(
      [&](size_t link, std::string_view key, std::string_view value) -> Status {
        if (link_checkers.empty()) return Status::Ok();
        return link_checkers[link].Next(key, value, &link_run);
      },
      [&](size_t /*link*/, std::string_view key, std::string_view value) -> Status {
        PS_RETURN_IF_ERROR(checker.Next(key, value, &run));
        if (run.sketch) {
          sink->Sketch(run.table, {run.values, run.piece_bytes});
        } else if (run.piece_bytes > 0) {
          sink->Rows(run.table, run.first, run.count, run.values,
                     std::span<const std::byte* const>(run.slots, run.num_slots), run.use);
        }
        return Status::Ok();
      });
  Status checked = merged;
  for (size_t i = 0; checked.ok() && i < link_checkers.size(); ++i) {
    checked = link_checkers[i].Finish();
  }
  if (checked.ok()) checked = checker.Finish();
  if (checked.ok()) return layout.clock;
  // A damaged link may show first as a flaw of the merged state (a row
  // missing from a delta: the state has a row less): name the link when
  // one is at fault.
  if (checked.code() == StatusCode::kDataLoss && chain.size() > 1) {
    for (const OpenedGeneration& link : chain) PS_RETURN_IF_ERROR(CheckLink(link, ro));
  }
  return checked;
}

struct GenerationReader::Db {
  std::vector<OpenedGeneration> chain;
};

GenerationReader::GenerationReader(std::string path, std::unique_ptr<Db> db, ShardSnapshot layout,
                                   uint32_t version)
    : path_(std::move(path)), db_(std::move(db)), layout_(std::move(layout)), version_(version) {}

GenerationReader::~GenerationReader() = default;

StatusOr<std::unique_ptr<GenerationReader>> GenerationReader::Open(const std::string& path) {
  PS_ASSIGN_OR_RETURN(std::vector<OpenedGeneration> chain, OpenChain(path));
  auto db = std::make_unique<Db>();
  ShardSnapshot layout = AsFullLayout(chain.back().layout);
  const uint32_t version = chain.front().version;
  db->chain = std::move(chain);
  return std::unique_ptr<GenerationReader>(
      new GenerationReader(path, std::move(db), std::move(layout), version));
}

size_t GenerationReader::links() const { return db_->chain.size(); }

Status GenerationReader::Scan(
    std::string_view begin, std::string_view end,
    const std::function<Status(std::string_view key, std::string_view value)>& fn) const {
  rocksdb::ReadOptions ro = ReadOptionsForRestore();
  const rocksdb::Slice upper = AsSlice(end);
  ro.iterate_upper_bound = &upper;
  const std::vector<OpenedGeneration>& chain = db_->chain;
  ChainMerge merge(chain, ro);
  merge.Seek(begin);
  return merge.Run(
      [](size_t, std::string_view, std::string_view) { return Status::Ok(); },
      [&](size_t link, std::string_view key, std::string_view value) -> Status {
        Status s = fn(key, value);
        if (s.ok() || chain.size() == 1) return s;
        // Name the link the record came from.
        return Status(s.code(), s.message() + " (the record is " + chain[link].path +
                                    "'s, link " + std::to_string(link + 1) + " of the chain " +
                                    ChainText(chain) + ")");
      });
}

StatusOr<std::string> GenerationReader::Get(std::string_view key) const {
  // The newest link holding the key.
  const std::vector<OpenedGeneration>& chain = db_->chain;
  for (auto link = chain.rbegin(); link != chain.rend(); ++link) {
    std::string value;
    const rocksdb::Status rs = link->db->Get(ReadOptionsForRestore(), AsSlice(key), &value);
    if (rs.IsNotFound()) continue;
    if (!rs.ok()) {
      return RocksError(rs, link->path + ": cannot read a record", StatusCode::kDataLoss);
    }
    if (link->layout.delta() && value == kRemovedRecord) break;
    return value;
  }
  return NotFoundError(path_ + ": no record with that key");
}

}  // namespace ps
