// Writing: the database is created with the write-ahead log disabled,
// filled with write batches of about 1 MiB in key order, flushed and closed,
// through the caller's Filesystem with syncs that do nothing (the folder is
// not visible yet; the caller fsyncs every file once afterwards). Reading
// opens a generation read-only; a full one's records are read here on
// several threads, a delta's chain merged in checkpoint_chain.cc.
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
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/hash_slots.h"
#include "server/checkpoint_format.h"
#include "server/checkpoint_rocksdb.h"
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

}  // namespace

Status RocksError(const rocksdb::Status& s, const std::string& what, StatusCode fallback) {
  StatusCode code = fallback;
  if (s.IsNoSpace()) {
    code = StatusCode::kResourceExhausted;
  } else if (s.IsIOError() && s.ToString().find("Permission denied") != std::string::npos) {
    code = StatusCode::kPermissionDenied;
  }
  return Status(code, what + ": " + s.ToString());
}

namespace {

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
        EncodeRowUse(t.UseOf(first), use);
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

}  // namespace ps
