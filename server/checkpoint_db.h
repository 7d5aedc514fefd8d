// The database of one checkpoint generation: its records
// (server/checkpoint_format.h) in a RocksDB database folder. The adapter of
// RocksDB: checkpoint_db.cc is the only file that includes it, and every
// rocksdb::Status becomes a ps::Status there.
//
// The database uses the default column family, bytewise key order, no
// compression and 64 KiB blocks, each checksummed (verified on every read).
//
// Thread safety: the functions keep no state; different paths may be
// written and read from several threads at once.
#ifndef PS_SERVER_CHECKPOINT_DB_H_
#define PS_SERVER_CHECKPOINT_DB_H_

#include <cstdint>
#include <string>

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
Status WriteGenerationDatabase(Filesystem& files, const ShardSnapshot& s, const std::string& path,
                               const CheckpointStageHook& at_stage);

// Reads the database at `path` read-only (no file in it is created or
// changed) into `sink`: its layout to sink->Begin, then every run record in
// key order to sink->Rows. Returns the clock of its meta record. DataLoss
// naming `path` and what is wrong when it cannot be opened, a file is
// corrupt, the meta record is missing or corrupt or promises more row data
// than the files hold, or a record is missing, extra, overlapping or of the
// wrong size (RunChecker); FailedPrecondition for another format version;
// the error of sink->Begin. A DataLoss may come after some rows were handed
// over.
StatusOr<int64_t> ReadGenerationDatabase(const std::string& path, RowSink* sink);

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_DB_H_
