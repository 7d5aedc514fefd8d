// Inside the RocksDB adapter of checkpoint generations
// (server/checkpoint_db.h): what its two files share. checkpoint_db.cc
// writes a generation, opens one read-only and reads a full one;
// checkpoint_chain.cc opens a delta with the generations it builds on and
// reads their records merged. No other file includes this header
// (tests/dependency_rule_test.py), so that RocksDB stays behind
// checkpoint_db.h.
//
// Thread safety: the functions keep no state; an OpenedGeneration's
// database may be read from several threads at once.
#ifndef PS_SERVER_CHECKPOINT_ROCKSDB_H_
#define PS_SERVER_CHECKPOINT_ROCKSDB_H_

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/status.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/key_range.h"
#include "common/status.h"
#include "server/checkpoint_io.h"
#include "store/snapshot.h"

namespace ps {

// A RocksDB error as a Status whose message starts with `what`: disk full
// is ResourceExhausted, a denied permission PermissionDenied, anything else
// `fallback`. The one conversion of rocksdb::Status.
Status RocksError(const rocksdb::Status& s, const std::string& what, StatusCode fallback);

// `s` as a RocksDB slice (a view, no copy).
inline rocksdb::Slice AsSlice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }

// The options of every read of a generation's records: checksums verified,
// no block cache, 2 MiB of read-ahead.
rocksdb::ReadOptions ReadOptionsForRestore();

// A generation's database opened read-only, and its meta record checked
// against the size of its files.
struct OpenedGeneration {
  std::string path;
  std::unique_ptr<rocksdb::DB> db;
  ShardSnapshot layout;
  uint32_t version = 0;
  Uint128 file_bytes = 0;
};

// Opens the database at `path` read-only and decodes its meta record.
// DataLoss naming `path` when it cannot be opened, its meta record is
// missing or corrupt, or it promises more row data than the files hold;
// FailedPrecondition for a format version this build does not read.
StatusOr<OpenedGeneration> OpenGeneration(const std::string& path);

// The records of `opened`, a full generation (a chain of one), into
// `sink`, on several threads when the sink and `options` allow it, as
// ReadGenerationDatabase says (`path` names it in errors); returns its
// clock.
StatusOr<int64_t> ReadFullGeneration(const OpenedGeneration& opened, const std::string& path,
                                     RowSink* sink, const GenerationReadOptions& options);

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_ROCKSDB_H_
