// Checkpoint generations in RocksDB (see checkpoint.h for the folder layout).
//
// A generation gen-<clock>/ is one RocksDB database (default column family,
// bytewise key order, no compression) holding two kinds of records:
//
//   key "meta"   the shard's layout, in this binary format (all integers
//                little-endian; str = u32 byte length, then the bytes):
//                  char[4] "PSCK"
//                  u32     format version (kFormatVersion, 2)
//                  u32     shard
//                  u32     num_shards
//                  i64     clock
//                  str     fingerprint
//                  u32     table count
//                  per table:
//                    str   name
//                    u64   rows (of the whole table)
//                    u32   dim
//                    u64   owned.begin
//                    u64   owned.end
//                    str   optimizer (its text)
//                    u32   slots (0, 1 or 2)
//                Nothing may follow the last table.
//
//   key 'r' + table index (u32 big-endian) + first row (u64 big-endian, the
//                row's index in the whole table)
//                one record per run of consecutive owned rows. A table's
//                runs start at owned.begin and every n rows after it, with
//                n = max(1, floor(16384 / dim)) (16384 floats = 64 KiB of
//                values; a row of more than 16384 floats is a run of its
//                own); the last run of a table holds the rest of its rows
//                (1 to n). A table that owns no rows has no record. The
//                value is the run's values (its n rows, row-major: n * dim
//                floats), then each slot's n * dim floats laid out the same,
//                in slot order, as little-endian IEEE float32:
//                (1 + slots) * n * dim * 4 bytes. So a record copies from
//                and to the snapshot's arrays in 1 + slots pieces.
//                Big-endian keys sort by table, then row, so a read fills
//                each table in order with one pass of an iterator, and a
//                missing, extra, overlapping, short or long record shows as
//                a key or a size other than the next one expected.
//
// Version 1 (never released) held one record per row, its values followed
// by its slots; this build refuses it (FailedPrecondition).
//
// RocksDB checksums every block (verified on every read here), so the
// records carry no checksum of their own. The layout of the values is tied
// to the format version: a change to either record means a new version.
//
// Writing: the database is created in gen-<clock>.tmp/ with the write-ahead
// log disabled, filled with write batches of about 1 MiB, flushed and
// closed (RocksDB's own syncs are skipped: the folder is not visible yet);
// with sync every file in it and the folder itself are then fsynced;
// then it is published (durable_dir.h). Reading opens it read-only (no file
// in it is created or changed).
#include "server/checkpoint.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>

#include "common/logging.h"
#include "server/durable_dir.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "checkpoint records store floats as little-endian float32 by memcpy");

constexpr uint32_t kFormatVersion = 2;
constexpr char kMagic[4] = {'P', 'S', 'C', 'K'};
constexpr const char* kMetaKey = "meta";
constexpr char kRowTag = 'r';
constexpr size_t kRowKeySize = 1 + 4 + 8;
// Floats of values per run record (64 KiB): see RowsPerRun.
constexpr uint64_t kRunFloats = 16384;
constexpr size_t kBatchBytes = size_t{1} << 20;
constexpr uint32_t kMaxSlots = 2;

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

// RocksDB syncs its files as it writes them (each SST file, the manifest,
// the folder). A generation is not visible until it is renamed, so those
// syncs buy nothing: writes go through this file system, which drops them,
// and with options.sync every file is fsynced once after the database is
// closed (SyncFolder). So sync: false never waits for the disk.
class UnsyncedWritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  using rocksdb::FSWritableFileOwnerWrapper::FSWritableFileOwnerWrapper;
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

class UnsyncedFileSystem : public rocksdb::FileSystemWrapper {
 public:
  UnsyncedFileSystem() : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "PsCheckpointUnsyncedFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    return Wrap(target()->NewWritableFile(name, options, result, dbg), result);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override {
    return Wrap(target()->ReopenWritableFile(name, options, result, dbg), result);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override {
    return Wrap(target()->ReuseWritableFile(name, old_name, options, result, dbg), result);
  }
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus s = target()->NewDirectory(name, options, result, dbg);
    if (s.ok()) *result = std::make_unique<UnsyncedDirectory>(std::move(*result));
    return s;
  }

 private:
  static rocksdb::IOStatus Wrap(rocksdb::IOStatus s,
                                std::unique_ptr<rocksdb::FSWritableFile>* result) {
    if (s.ok()) *result = std::make_unique<UnsyncedWritableFile>(std::move(*result));
    return s;
  }
};

// The Env of every database write: the default one on UnsyncedFileSystem.
// Never destroyed: RocksDB's background threads may outlive static
// destructors.
rocksdb::Env* UnsyncedEnv() {
  static rocksdb::Env* const env =
      rocksdb::NewCompositeEnv(std::make_shared<UnsyncedFileSystem>()).release();
  return env;
}

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

// Little-endian encoding of the meta record.
class MetaWriter {
 public:
  void Bytes(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  void U32(uint32_t v) { Bytes(&v, sizeof v); }
  void U64(uint64_t v) { Bytes(&v, sizeof v); }
  void I64(int64_t v) { Bytes(&v, sizeof v); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class MetaReader {
 public:
  explicit MetaReader(std::string_view in) : in_(in) {}
  bool Bytes(void* p, size_t n) {
    if (in_.size() < n) return false;
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool U32(uint32_t* v) { return Bytes(v, sizeof *v); }
  bool U64(uint64_t* v) { return Bytes(v, sizeof *v); }
  bool I64(int64_t* v) { return Bytes(v, sizeof *v); }
  bool Str(std::string* s) {
    uint32_t n = 0;
    if (!U32(&n) || in_.size() < n) return false;
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  size_t remaining() const { return in_.size(); }

 private:
  std::string_view in_;
};

std::string EncodeMeta(const ShardSnapshot& s) {
  MetaWriter w;
  w.Bytes(kMagic, sizeof kMagic);
  w.U32(kFormatVersion);
  w.U32(s.shard);
  w.U32(s.num_shards);
  w.I64(s.clock);
  w.Str(s.fingerprint);
  w.U32(static_cast<uint32_t>(s.tables.size()));
  for (const TableSnapshot& t : s.tables) {
    w.Str(t.name);
    w.U64(t.rows);
    w.U32(t.dim);
    w.U64(t.owned.begin);
    w.U64(t.owned.end);
    w.Str(t.optimizer);
    w.U32(static_cast<uint32_t>(t.slots.size()));
  }
  return w.Take();
}

// Fills everything of *s but the tables' values and slots (their counts are
// returned in *slot_counts). `where` names the generation in errors.
Status DecodeMeta(std::string_view in, const std::string& where, ShardSnapshot* s,
                  std::vector<uint32_t>* slot_counts) {
  MetaReader r(in);
  const auto corrupt = [&](const std::string& what) {
    return DataLossError(where + ": the meta record is corrupt: " + what);
  };
  char magic[sizeof kMagic];
  if (!r.Bytes(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0) {
    return corrupt("it does not start with \"PSCK\"");
  }
  uint32_t version = 0;
  if (!r.U32(&version)) return corrupt("it ends before the format version");
  if (version != kFormatVersion) {
    return FailedPreconditionError(
        where + ": checkpoint format version " + std::to_string(version) +
        ", but this build reads only version " + std::to_string(kFormatVersion) +
        " (the record format changed); start the job with a new checkpoint.dir");
  }
  uint32_t table_count = 0;
  if (!r.U32(&s->shard) || !r.U32(&s->num_shards) || !r.I64(&s->clock) || !r.Str(&s->fingerprint) ||
      !r.U32(&table_count)) {
    return corrupt("it ends inside the shard fields");
  }
  // Each table takes at least kMinTableBytes: do not trust a count the
  // record cannot hold.
  constexpr size_t kMinTableBytes = 4 + 8 + 4 + 8 + 8 + 4 + 4;
  if (table_count > r.remaining() / kMinTableBytes) {
    return corrupt("it lists " + std::to_string(table_count) + " tables in " +
                   std::to_string(r.remaining()) + " bytes");
  }
  s->tables.resize(table_count);
  slot_counts->assign(table_count, 0);
  for (uint32_t i = 0; i < table_count; ++i) {
    TableSnapshot& t = s->tables[i];
    if (!r.Str(&t.name) || !r.U64(&t.rows) || !r.U32(&t.dim) || !r.U64(&t.owned.begin) ||
        !r.U64(&t.owned.end) || !r.Str(&t.optimizer) || !r.U32(&(*slot_counts)[i])) {
      return corrupt("it ends inside table " + std::to_string(i));
    }
    if (t.owned.begin > t.owned.end || t.owned.end > t.rows) {
      return corrupt("table '" + t.name + "' owns rows [" + std::to_string(t.owned.begin) + ", " +
                     std::to_string(t.owned.end) + ") of " + std::to_string(t.rows));
    }
    if ((*slot_counts)[i] > kMaxSlots) {
      return corrupt("table '" + t.name + "' has " + std::to_string((*slot_counts)[i]) +
                     " optimizer slots");
    }
  }
  if (r.remaining() != 0) {
    return corrupt(std::to_string(r.remaining()) + " bytes follow the last table");
  }
  return Status::Ok();
}

void PutBigEndian(char* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

uint64_t GetBigEndian(const char* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(in[i]);
  return v;
}

void RowKey(uint32_t table, uint64_t row, char out[kRowKeySize]) {
  out[0] = kRowTag;
  PutBigEndian(out + 1, table, 4);
  PutBigEndian(out + 5, row, 8);
}

// Rows per run record of a table of `dim` (see the format above).
uint64_t RowsPerRun(uint32_t dim) {
  return dim == 0 ? kRunFloats : std::max<uint64_t>(1, kRunFloats / dim);
}

// "[first, end)"
std::string Rows(uint64_t first, uint64_t end) {
  return "[" + std::to_string(first) + ", " + std::to_string(end) + ")";
}

std::string Hex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes.substr(0, 32)) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  if (bytes.size() > 32) out += "...";
  return out;
}

// Elements of owned.size() x dim, or nullopt when that does not fit a size_t.
std::optional<size_t> Elements(const TableSnapshot& t) {
  const Uint128 n = Uint128{t.owned.size()} * t.dim;
  if (n > std::numeric_limits<size_t>::max() / sizeof(float) / (kMaxSlots + 1)) {
    return std::nullopt;
  }
  return static_cast<size_t>(n);
}

Status ValidateForWrite(const ShardSnapshot& s, const CheckpointWriteOptions& options,
                        const std::string& where) {
  if (options.keep < 1) return InvalidArgumentError(where + ": keep must be at least 1");
  if (s.clock < 0) {
    return InvalidArgumentError(where + ": clock " + std::to_string(s.clock) + " is negative");
  }
  if (s.num_shards < 1 || s.shard >= s.num_shards) {
    return InvalidArgumentError(where + ": shard " + std::to_string(s.shard) + " of " +
                                std::to_string(s.num_shards));
  }
  if (s.tables.size() > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgumentError(where + ": too many tables");
  }
  for (const TableSnapshot& t : s.tables) {
    const std::string table = where + ": table '" + t.name + "'";
    if (t.owned.begin > t.owned.end || t.owned.end > t.rows) {
      return InvalidArgumentError(table + " owns rows [" + std::to_string(t.owned.begin) + ", " +
                                  std::to_string(t.owned.end) + ") of " + std::to_string(t.rows));
    }
    const std::optional<size_t> n = Elements(t);
    if (!n || t.values.size() != *n) {
      return InvalidArgumentError(table + " has " + std::to_string(t.values.size()) +
                                  " values for " + std::to_string(t.owned.size()) +
                                  " rows of dim " + std::to_string(t.dim));
    }
    if (t.slots.size() > kMaxSlots) {
      return InvalidArgumentError(table + " has " + std::to_string(t.slots.size()) +
                                  " optimizer slots (at most " + std::to_string(kMaxSlots) + ")");
    }
    for (size_t k = 0; k < t.slots.size(); ++k) {
      if (t.slots[k].size() != *n) {
        return InvalidArgumentError(table + " slot " + std::to_string(k) + " has " +
                                    std::to_string(t.slots[k].size()) + " floats, not " +
                                    std::to_string(*n));
      }
    }
    if (t.name.size() > std::numeric_limits<uint32_t>::max() ||
        t.optimizer.size() > std::numeric_limits<uint32_t>::max()) {
      return InvalidArgumentError(table + ": name or optimizer text too long");
    }
  }
  return Status::Ok();
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

// Writes every record of `s` into a new database at `path` and closes it.
Status WriteDatabase(const ShardSnapshot& s, const std::string& path,
                     const CheckpointStageHook& at_stage) {
  rocksdb::Options o = CommonOptions();
  o.create_if_missing = true;
  o.error_if_exists = true;
  // Keys arrive in order and the database is written once: compactions
  // would only rewrite it.
  o.disable_auto_compactions = true;
  o.env = UnsyncedEnv();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status rs = rocksdb::DB::Open(o, path, &raw);
  if (!rs.ok()) return RocksError(rs, "cannot create database " + path, StatusCode::kInternal);
  std::unique_ptr<rocksdb::DB> db(raw);
  if (at_stage) at_stage(CheckpointStage::kCreated, s.clock, path);
  // The hook's `records` point: once about half of the run records are
  // committed. Counted only when there is a hook.
  uint64_t stall_after_runs = std::numeric_limits<uint64_t>::max();
  if (at_stage) {
    uint64_t runs = 0;
    for (const TableSnapshot& t : s.tables) {
      runs += (t.owned.size() + RowsPerRun(t.dim) - 1) / RowsPerRun(t.dim);
    }
    stall_after_runs = std::max<uint64_t>(1, runs / 2);
  }
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
  rs = batch.Put(kMetaKey, EncodeMeta(s));
  if (!rs.ok()) return RocksError(rs, "cannot write to " + path, StatusCode::kInternal);

  char key[kRowKeySize];
  for (size_t ti = 0; ti < s.tables.size(); ++ti) {
    const TableSnapshot& t = s.tables[ti];
    const uint64_t per_run = RowsPerRun(t.dim);
    rocksdb::Slice parts[1 + kMaxSlots];
    const int nparts = static_cast<int>(1 + t.slots.size());
    const auto piece = [&](const std::vector<float>& a, size_t offset, size_t floats) {
      return rocksdb::Slice(reinterpret_cast<const char*>(a.data() + offset),
                            floats * sizeof(float));
    };
    for (uint64_t first = 0; first < t.owned.size(); first += per_run) {
      const uint64_t n = std::min(per_run, t.owned.size() - first);
      RowKey(static_cast<uint32_t>(ti), t.owned.begin + first, key);
      const size_t offset = static_cast<size_t>(first) * t.dim;
      const size_t floats = static_cast<size_t>(n) * t.dim;
      parts[0] = piece(t.values, offset, floats);
      for (size_t k = 0; k < t.slots.size(); ++k) parts[1 + k] = piece(t.slots[k], offset, floats);
      const rocksdb::Slice key_slice(key, kRowKeySize);
      rs = batch.Put(rocksdb::SliceParts(&key_slice, 1), rocksdb::SliceParts(parts, nparts));
      if (!rs.ok()) return RocksError(rs, "cannot write to " + path, StatusCode::kInternal);
      if (batch.GetDataSize() >= kBatchBytes) PS_RETURN_IF_ERROR(commit());
      if (++runs_written == stall_after_runs) {
        if (batch.Count() > 0) PS_RETURN_IF_ERROR(commit());
        at_stage(CheckpointStage::kRecords, s.clock, path);
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

// Reads the database at `path` into `sink` (see RowSink); returns the meta
// record's clock.
StatusOr<int64_t> ReadDatabase(const std::string& path, RowSink* sink) {
  rocksdb::Options o = CommonOptions();
  o.create_if_missing = false;
  o.skip_checking_sst_file_sizes_on_db_open = false;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status rs = rocksdb::DB::OpenForReadOnly(o, path, &raw);
  if (!rs.ok()) return RocksError(rs, path + ": cannot open the generation", StatusCode::kDataLoss);
  std::unique_ptr<rocksdb::DB> db(raw);

  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  ro.readahead_size = 2 << 20;

  std::string meta;
  rs = db->Get(ro, kMetaKey, &meta);
  if (rs.IsNotFound()) return DataLossError(path + ": the meta record is missing");
  if (!rs.ok()) {
    return RocksError(rs, path + ": cannot read the meta record", StatusCode::kDataLoss);
  }
  ShardSnapshot s;
  std::vector<uint32_t> slot_counts;
  PS_RETURN_IF_ERROR(DecodeMeta(meta, path, &s, &slot_counts));

  // The values are stored uncompressed, so the files hold at least as many
  // bytes as the meta record promises: never allocate more than that.
  std::vector<rocksdb::LiveFileMetaData> files;
  db->GetLiveFilesMetaData(&files);
  Uint128 file_bytes = 0, promised = 0;
  for (const auto& f : files) file_bytes += f.size;
  for (size_t ti = 0; ti < s.tables.size(); ++ti) {
    TableSnapshot& t = s.tables[ti];
    const std::optional<size_t> n = Elements(t);
    if (!n) {
      return DataLossError(path + ": the meta record is corrupt: table '" + t.name +
                           "' is too large");
    }
    promised += Uint128{*n} * sizeof(float) * (1 + slot_counts[ti]);
  }
  if (promised > file_bytes) {
    return DataLossError(path + ": the meta record promises more row data than the files hold");
  }
  // The layout for the sink: slot arrays present (their count) but empty.
  for (size_t ti = 0; ti < s.tables.size(); ++ti) s.tables[ti].slots.resize(slot_counts[ti]);
  PS_RETURN_IF_ERROR(sink->Begin(s));

  // One pass over the records in key order: table by table, run by run.
  // The next record expected starts at row next_row of table cur_table;
  // [last_first, last_end) are the rows of the last record read.
  size_t cur_table = 0;
  uint64_t next_row = s.tables.empty() ? 0 : s.tables[0].owned.begin;
  uint64_t last_first = 0, last_end = 0;
  const auto skip_full_tables = [&] {
    while (cur_table < s.tables.size() && next_row == s.tables[cur_table].owned.end) {
      ++cur_table;
      if (cur_table < s.tables.size()) next_row = s.tables[cur_table].owned.begin;
    }
  };
  // The rows of the record expected at next_row of cur_table.
  const auto run_end = [&] {
    const TableSnapshot& t = s.tables[cur_table];
    return next_row + std::min(RowsPerRun(t.dim), t.owned.end - next_row);
  };
  const auto missing = [&] {
    return DataLossError(path + ": the record of table '" + s.tables[cur_table].name + "' rows " +
                         Rows(next_row, run_end()) + " is missing");
  };
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (key == rocksdb::Slice(kMetaKey)) continue;
    if (key.size() != kRowKeySize || key[0] != kRowTag) {
      return DataLossError(path + ": unexpected record with key " + Hex(key.ToStringView()));
    }
    const uint64_t ti = GetBigEndian(key.data() + 1, 4);
    const uint64_t row = GetBigEndian(key.data() + 5, 8);
    if (ti >= s.tables.size()) {
      return DataLossError(path + ": a record of table index " + std::to_string(ti) +
                           ", but the meta record lists " + std::to_string(s.tables.size()) +
                           " tables");
    }
    const TableSnapshot& t = s.tables[ti];
    const size_t num_slots = slot_counts[ti];
    skip_full_tables();
    if (ti != cur_table || row != next_row) {
      if (!t.owned.Contains(row)) {
        return DataLossError(path + ": table '" + t.name + "' has a record of rows from " +
                             std::to_string(row) + ", outside its rows " +
                             Rows(t.owned.begin, t.owned.end));
      }
      // Keys come in order: an owned row after the expected one means the
      // expected record is missing; before it, the row was already read.
      if (ti > cur_table || (ti == cur_table && row > next_row)) return missing();
      return DataLossError(path + ": table '" + t.name + "' has a record of rows from " +
                           std::to_string(row) + ", inside the record of rows " +
                           Rows(last_first, last_end) + " before it");
    }
    const uint64_t end = run_end();
    const size_t floats = static_cast<size_t>(end - row) * t.dim;
    const size_t bytes = floats * sizeof(float);
    const rocksdb::Slice value = it->value();
    if (value.size() != bytes * (1 + num_slots)) {
      return DataLossError(path + ": the record of table '" + t.name + "' rows " +
                           Rows(row, end) + " has " + std::to_string(value.size()) +
                           " bytes, not " + std::to_string(bytes * (1 + num_slots)));
    }
    if (bytes > 0) {
      const auto* data = reinterpret_cast<const std::byte*>(value.data());
      const std::byte* slots[kMaxSlots];
      for (size_t k = 0; k < num_slots; ++k) slots[k] = data + (1 + k) * bytes;
      sink->Rows(static_cast<uint32_t>(ti), row, end - row, data,
                 std::span<const std::byte* const>(slots, num_slots));
    }
    last_first = row;
    last_end = next_row = end;
  }
  if (!it->status().ok()) {
    return RocksError(it->status(), path + ": cannot read the records", StatusCode::kDataLoss);
  }
  skip_full_tables();
  if (cur_table < s.tables.size()) return missing();
  return s.clock;
}

// Collects a generation into a ShardSnapshot (CheckpointDir::Read).
class SnapshotSink : public RowSink {
 public:
  explicit SnapshotSink(ShardSnapshot* out) : out_(out) {}
  Status Begin(const ShardSnapshot& layout) override {
    *out_ = layout;
    for (TableSnapshot& t : out_->tables) {
      const size_t n = *Elements(t);  // checked by ReadDatabase
      t.values.resize(n);
      for (std::vector<float>& slot : t.slots) slot.resize(n);
    }
    return Status::Ok();
  }
  void Rows(uint32_t table, uint64_t first, uint64_t count, const std::byte* values,
            std::span<const std::byte* const> slots) override {
    TableSnapshot& t = out_->tables[table];
    const size_t offset = static_cast<size_t>(first - t.owned.begin) * t.dim;
    const size_t bytes = static_cast<size_t>(count) * t.dim * sizeof(float);
    std::memcpy(t.values.data() + offset, values, bytes);
    for (size_t k = 0; k < slots.size(); ++k) {
      std::memcpy(t.slots[k].data() + offset, slots[k], bytes);
    }
  }

 private:
  ShardSnapshot* out_;
};

}  // namespace

std::string_view CheckpointStageName(CheckpointStage stage) {
  switch (stage) {
    case CheckpointStage::kCreated:
      return "created";
    case CheckpointStage::kRecords:
      return "records";
    case CheckpointStage::kFlushed:
      return "flushed";
    case CheckpointStage::kSynced:
      return "synced";
    case CheckpointStage::kPublished:
      return "published";
    case CheckpointStage::kPruning:
      return "pruning";
  }
  return "unknown";
}

std::string ShardCheckpointDir(const std::string& checkpoint_dir, uint32_t shard) {
  return checkpoint_dir + "/shard-" + std::to_string(shard);
}

std::string CheckpointDir::GenerationPath(int64_t clock) const {
  return (fs::path(path_) / GenerationName(clock)).string();
}

StatusOr<std::unique_ptr<CheckpointDir>> CheckpointDir::Open(const std::string& dir) {
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
  return std::unique_ptr<CheckpointDir>(new CheckpointDir(dir));
}

StatusOr<std::vector<int64_t>> CheckpointDir::Generations() const {
  return ListGenerations(path_);
}

Status CheckpointDir::Write(const ShardSnapshot& snapshot, const CheckpointWriteOptions& options) {
  const std::string final_path = GenerationPath(snapshot.clock);
  PS_RETURN_IF_ERROR(ValidateForWrite(snapshot, options, final_path));
  const std::string tmp = TmpName(final_path);
  const auto stage = [&](CheckpointStage s) {
    if (options.at_stage) options.at_stage(s, snapshot.clock, tmp);
  };

  // Torn writes of earlier attempts (of any clock) first.
  PS_RETURN_IF_ERROR(RemoveTornGenerations(path_));

  Status written;
  try {
    written = WriteDatabase(snapshot, tmp, options.at_stage);
    if (written.ok()) stage(CheckpointStage::kFlushed);
    if (written.ok() && options.sync) written = SyncFlatFolder(tmp);
    if (written.ok()) stage(CheckpointStage::kSynced);
    if (written.ok()) written = PublishGeneration(tmp, final_path, options.sync);
    if (written.ok()) stage(CheckpointStage::kPublished);
  } catch (const std::bad_alloc&) {
    written = ResourceExhaustedError("out of memory writing " + tmp);
  }
  if (!written.ok()) {
    RemoveTree(tmp).IgnoreError();
    return written;
  }

  const Status pruned =
      PruneGenerations(path_, options.keep, options.sync,
                       [&](const std::string& /*doomed*/) { stage(CheckpointStage::kPruning); });
  if (!pruned.ok()) {
    // The new generation is complete and visible; the next Write tries again.
    PS_LOG_WARN("checkpoint {} written, but removing older generations failed: {}", final_path,
                pruned.ToString());
  }
  return Status::Ok();
}

Status CheckpointDir::ReadInto(int64_t clock, RowSink* sink) const {
  const std::string path = GenerationPath(clock < 0 ? 0 : clock);
  if (clock < 0) {
    return NotFoundError(path_ + ": no generation of negative clock " + std::to_string(clock));
  }
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return FileSystemError(ec, path + ": cannot read the generation", StatusCode::kDataLoss);
  }
  if (!fs::is_directory(st)) return NotFoundError(path + ": no such generation");
  StatusOr<int64_t> read = [&]() -> StatusOr<int64_t> {
    try {
      return ReadDatabase(path, sink);
    } catch (const std::bad_alloc&) {
      return ResourceExhaustedError(path + ": out of memory reading the generation");
    }
  }();
  if (!read.ok()) return read.status();
  if (*read != clock) {
    return DataLossError(path + ": the meta record says clock " + std::to_string(*read));
  }
  return Status::Ok();
}

StatusOr<ShardSnapshot> CheckpointDir::Read(int64_t clock) const {
  ShardSnapshot snapshot;
  SnapshotSink sink(&snapshot);
  PS_RETURN_IF_ERROR(ReadInto(clock, &sink));
  return snapshot;
}

}  // namespace ps
