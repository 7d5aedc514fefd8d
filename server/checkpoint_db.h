// The database of one checkpoint generation: its records
// (server/checkpoint_format.h) in a RocksDB database folder. The adapter of
// RocksDB: checkpoint_db.cc and checkpoint_chain.cc (a delta's chain), with
// their shared header server/checkpoint_rocksdb.h, are the only files that
// include it, and every rocksdb::Status becomes a ps::Status there
// (RocksError).
//
// The database uses the default column family, bytewise key order, no
// compression and 64 KiB blocks, each checksummed (verified on every read).
//
// Thread safety: the functions keep no state; different paths may be
// written and read from several threads at once.
#ifndef PS_SERVER_CHECKPOINT_DB_H_
#define PS_SERVER_CHECKPOINT_DB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/env.h"
#include "common/status.h"
#include "server/checkpoint_io.h"
#include "store/snapshot.h"

namespace ps {

// Creates a database at `path` (which must not exist) holding the meta
// record and every run record of `s`, and closes it. The write-ahead log is
// off and RocksDB's own syncs are skipped: the caller syncs the folder
// afterwards, before it becomes visible. `at_stage` (when set) is called
// with kCreated once the database exists, and with kRecords once about half
// of the run records are committed. Errors name `path`: Internal,
// ResourceExhausted (disk full) or PermissionDenied; the folder may then
// hold a partial database.
// REQUIRES: ValidateForWrite(s, ..).ok().
// Every file, folder, rename and removal of the write goes through `files`.
// `written` (when set) is called on the writing thread as the records are
// made: once the rows [0, end) of table index `table` (indices into its
// snapshot rows) are in a record, their arrays are not read again (a
// caller that owns `s` may release them: TableSnapshot::ReleaseShared).
using RowsWrittenFn = std::function<void(uint32_t table, uint64_t end)>;
Status WriteGenerationDatabase(Filesystem& files, const ShardSnapshot& s, const std::string& path,
                               const CheckpointStageHook& at_stage,
                               const RowsWrittenFn& written = nullptr);

// Reads the database at `path` read-only (no file in it is created or
// changed) into `sink`: its layout to sink->Begin, then every run record to
// sink->Rows. A full generation's records in key order, or, when the sink
// allows it (RowSink::ConcurrentRangeRows) and `options` give more than one
// thread, the range tables' runs in key ranges of about equal bytes
// (SplitRuns) on as many threads at once, each range in key order (the
// first, with the sketches and the hashed tables' rows, in key order too);
// every record is checked as in one pass (RunChecker, each range from its
// start). A delta (checkpoint_format.h) is read with its chain, on one
// thread: the generations it builds on, gen-<base clock> beside it, down to
// a full one, their records merged key by key (the newest wins, a removed
// id hides its row), so the sink gets the state at the delta's clock as
// from a full generation (its layout: AsFullLayout). Each link is checked
// against its meta record and the next link (CheckChainLink), and the
// merged records as a full generation of the newest meta record. Returns
// the clock of its meta record. A missing base is DataLoss naming the
// delta, the missing folder and what to do; a link's errors name that
// link's path. DataLoss naming `path` and what is wrong when it cannot be
// opened, a file is corrupt, the meta record is missing or corrupt or
// promises more row data than the files hold, or a record is missing,
// extra, overlapping or of the wrong size (RunChecker; with several
// threads, the first such record in key order when there is one, and the
// reading stops on every thread once one fails); FailedPrecondition for
// another format version; the error of sink->Begin; ResourceExhausted when
// a reading thread runs out of memory. A DataLoss may come after some rows
// were handed over; every thread has returned when the call does.
StatusOr<int64_t> ReadGenerationDatabase(const std::string& path, RowSink* sink,
                                         const GenerationReadOptions& options = {});

// A generation's database opened read-only for reading parts of it: what
// a restore onto another shard count reads of each old shard (the records
// of the rows, or hash slots, its new shard owns). A delta is opened with
// its chain, as ReadGenerationDatabase does, and read merged: Scan and Get
// see the state at its clock. Thread-safe: Scan and Get may be called from
// several threads at once (each call reads through iterators of its own).
class GenerationReader {
 public:
  // Opens the database at `path` and decodes its meta record. DataLoss
  // naming `path` when it cannot be opened, its meta record is missing or
  // corrupt, or it promises more row data than the files hold;
  // FailedPrecondition for a format version this build does not read.
  static StatusOr<std::unique_ptr<GenerationReader>> Open(const std::string& path);
  ~GenerationReader();

  const std::string& path() const { return path_; }
  // The meta record (no values; of a delta, as a full generation's:
  // AsFullLayout), and its format version (of a chain: its oldest link's).
  const ShardSnapshot& layout() const { return layout_; }
  uint32_t version() const { return version_; }
  // The generations read: 1, or a delta's chain's length.
  size_t links() const;

  // Calls fn(key, value) for every record whose key lies in [begin, end),
  // in key order, each block's checksum verified (of a chain: each key's
  // newest record, none for a removed id); stops at fn's first error and
  // returns it (of a chain, naming the link the record came from).
  // DataLoss naming the path when the files cannot be read. The views are
  // valid during the call only.
  Status Scan(std::string_view begin, std::string_view end,
              const std::function<Status(std::string_view key, std::string_view value)>& fn) const;
  // The value of `key`; NotFound when there is none, DataLoss when it
  // cannot be read.
  StatusOr<std::string> Get(std::string_view key) const;

 private:
  struct Db;
  GenerationReader(std::string path, std::unique_ptr<Db> db, ShardSnapshot layout,
                   uint32_t version);
  const std::string path_;
  const std::unique_ptr<Db> db_;
  const ShardSnapshot layout_;
  const uint32_t version_;
};

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_DB_H_
