// The records of a checkpoint generation, as bytes: what a generation's
// database holds (server/checkpoint.h), without the database. Pure
// functions and one small checker; no I/O.
//
// A generation is one key-value database (bytewise key order) holding two
// kinds of records:
//
//   key "meta"   the shard's layout, in this binary format (all integers
//                little-endian; str = u32 byte length, then the bytes):
//                  char[4] "PSCK"
//                  u32     format version (kCheckpointFormatVersion, 6;
//                          versions 2 to 5 are read too: see below)
//                  u32     shard
//                  u32     num_shards
//                  i64     clock
//                  str     fingerprint
//                  u64     generation id: random, not 0, the generation's
//                          own (a delta names its base's)
//                  i64     base clock: -1 for a full generation; for a
//                          delta, the clock of the generation it builds on
//                          (gen-<base clock> beside it, older)
//                  u64     base id: the base's generation id (0 for a full
//                          generation)
//                  u32     table count
//                  per table:
//                    str   name
//                    u64   rows (of the whole table)
//                    u32   dim
//                    u64   owned.begin
//                    u64   owned.end
//                    str   optimizer (its text)
//                    u32   slots (0..kMaxOptimizerSlots, the rule's state
//                          arrays in its UpdateRule::slot_names order)
//                    u32   keys: 0 range, 1 hashed; for hashed:
//                      u32 hash slots (rows is 0 and owned the shard's
//                          slots of these)
//                      u64 rows held: the table's 'h' records
//                      u32 admission sketch width (0: no sketch, and no
//                          'a' record)
//                      u32 row uses: 1 when each 'h' record ends with its
//                          row's use (the table evicts), else 0
//                    str   settings (TableOptions::HashedSettings: a hashed
//                          table's init, admission and eviction; empty for
//                          a range table)
//                    u64   delta records: in a delta, the table's run
//                          records (range) or changed rows' 'h' records
//                          (hashed); 0 in a full generation
//                    u64   delta rows: in a delta, a range table's 'p'
//                          records or a hashed table's removed ids' 'h'
//                          records; else 0
//                Nothing may follow the last table.
//                `num_shards` is the number of shards that wrote the
//                generation (each its own shard-<i>/gen-<clock>, i <
//                num_shards, with the file shards-<num_shards> beside the
//                database: server/checkpoint_layout.h), and `owned` the
//                rows (or hash slots) ShardRows gives shard `shard` of
//                them: a restore onto another shard count reads each old
//                shard's records of the rows its new shard owns.
//
//   key 'r' + table index (u32 big-endian) + first row (u64 big-endian, the
//                row's index in the whole table)
//                one record per run of consecutive owned rows. A table's
//                runs start at owned.begin and every n rows after it, with
//                n = RowsPerRun(dim) = max(1, floor(16384 / dim)) (16384
//                floats = 64 KiB of values; a row of more than 16384 floats
//                is a run of its own); the last run of a table holds the
//                rest of its rows (1 to n). A table that owns no rows has no
//                record. The value is the run's values (its n rows,
//                row-major: n * dim floats), then each slot's n * dim floats
//                laid out the same, in slot order, as little-endian IEEE
//                float32: (1 + slots) * n * dim * 4 bytes. So a record
//                copies from and to the snapshot's arrays in 1 + slots
//                pieces. Big-endian keys sort by table, then row, so a read
//                fills each table in order with one pass in key order, and a
//                missing, extra, overlapping, short or long record shows as
//                a key or a size other than the next one expected
//                (RunChecker).
//
//   key 'a' + table index (u32 big-endian) + 0 (u64)
//                a hashed table's admission sketch (store/push_sketch.h):
//                its counters, 4 x width u16 little-endian. 'a' keys sort
//                first: a read has each sketch before any row.
//
//   key 'h' + table index (u32 big-endian) + hash slot (u32 big-endian)
//                + id (u64 big-endian)
//                one record per row of a hashed table (ids as keys): its
//                values (dim floats), then each slot's dim floats, as
//                little-endian IEEE float32, then its use (kRowUseBytes)
//                when the meta record says row uses: (1 + slots) * dim * 4
//                (+ 16) bytes. The hash slot is the id's (IdSlot), one of
//                the shard's, and a table has exactly the rows its meta
//                record says. 'h' keys sort before "meta" and the 'r'
//                records, by table, slot and id: a read meets each hashed
//                table's rows slot by slot, then the range tables' runs
//                (RunChecker), and a restore onto another shard count
//                seeks to the slots its shard owns and reads nothing else.
//
//   key 'p' + table index (u32 big-endian) + row (u64 big-endian)
//                in a delta only: one row of a range table changed since
//                the base, outside the delta's run records of that table:
//                its values (dim floats), then each slot's dim floats,
//                (1 + slots) * dim * 4 bytes. 'p' keys sort after "meta"
//                and before every 'r' record.
//
// Deltas (incremental generations, checkpoint.full_every). A delta holds
// the records of what changed since its base, with the keys and values of
// a full generation: a range table's run records of the runs that changed
// (any subset of the runs a full generation would hold, each whole) and
// 'p' records of single rows changed outside them; a
// hashed table's 'h' records of the rows made or updated since, and of the
// ids whose rows went since (evicted, expired) and that have none now,
// whose value is the one byte kRemovedRecord; every sketch record whole.
// Its meta record is whole (every table's layout, stored_rows the rows
// the shard holds at its clock) and says how many records of each kind
// each table has. The state at a delta's clock is its base's state with
// every record of the delta put over it (a removed id's row gone): a
// reader merges the records of the chain full <- delta <- ... <- delta,
// key by key, the newest record of a key winning, and the 'p' records of
// links newer than a run's put over its rows (server/checkpoint_db.h), and
// checks what comes out as a full generation of the newest meta record.
//
// Older versions, still read:
//   5  no generation id, base clock nor base id; no delta fields: every
//      generation is full.
//   4  an 'h' key is 'h' + table index + id (13 bytes, no hash slot): a
//      table's rows sort by id. The meta record has no settings.
//   3  as 4, and a hashed table has no row uses field (never uses).
//   2  as 3, and a table has no `keys` field: every table a range table.
// Version 1 (never released) held one record per row, its values followed
// by its slots; DecodeMeta refuses it (FailedPrecondition).
//
// The database checksums its blocks, so the records carry no checksum of
// their own. The layout of the values is tied to the format version: a
// change to either record means a new version.
//
// Thread safety: the functions are pure; a RunChecker is used by one thread.
#ifndef PS_SERVER_CHECKPOINT_FORMAT_H_
#define PS_SERVER_CHECKPOINT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/options.h"
#include "common/status.h"
#include "store/snapshot.h"

namespace ps {

inline constexpr uint32_t kCheckpointFormatVersion = 6;
// The oldest version DecodeMeta reads (range tables only).
inline constexpr uint32_t kOldestCheckpointFormatVersion = 2;
// The key of the meta record.
inline constexpr std::string_view kMetaKey = "meta";
// Bytes of a run record's key: tag, table index, first row (and of a
// sketch record's, and of a hashed row's of version 4).
inline constexpr size_t kRowKeySize = 1 + 4 + 8;
// Bytes of a hashed row's key: tag, table index, hash slot, id.
inline constexpr size_t kIdKeySize = 1 + 4 + 4 + 8;
// The hash slot DecodeIdKey gives a version 4 key, which has none.
inline constexpr uint32_t kNoSlotInKey = UINT32_MAX;
// Floats of values per run record (64 KiB): see RowsPerRun.
inline constexpr uint64_t kRunFloats = 16384;
// The value of a delta's 'h' record of a removed id (never a row's size,
// which is a multiple of 4).
inline constexpr std::string_view kRemovedRecord = "-";
// The meta record of `s` (its layout; values and slots are not read, only
// the number of slot arrays). REQUIRES: ValidateForWrite(s, ..).ok().
std::string EncodeMeta(const ShardSnapshot& s);

// The layout a meta record describes: every field of the snapshot, and each
// table's `slots` holding as many empty arrays as the table has slots (no
// values); its format version into *version when set. `where` (the
// generation's path) starts every error message.
// DataLoss "<where>: the meta record is corrupt: <what>" when it does not
// start with "PSCK", ends early (inside the shard fields or a table), lists
// more tables than its bytes can hold, has a table whose owned rows do not
// lie inside its rows or with more than kMaxOptimizerSlots slots, or has bytes after
// the last table. FailedPrecondition naming both versions when its format
// version is not one this build reads (kOldestCheckpointFormatVersion to
// kCheckpointFormatVersion). The sizes are not checked against memory: see
// TableElements.
StatusOr<ShardSnapshot> DecodeMeta(std::string_view record, const std::string& where,
                                   uint32_t* version = nullptr);

// The key of the run record of table index `table` starting at (global) row
// `row`, written into `out`.
void EncodeRowKey(uint32_t table, uint64_t row, char out[kRowKeySize]);
// The same as a string.
std::string RowKey(uint32_t table, uint64_t row);
// The table index and first row of a run record's key; false when `key` is
// not of that shape (size or tag).
bool DecodeRowKey(std::string_view key, uint32_t* table, uint64_t* row);
// The key of the record of id `id`, in hash slot `slot`, of the hashed
// table index `table`, and its inverse (false when `key` is not of that
// shape; a version 4 key of 13 bytes gives *slot kNoSlotInKey).
void EncodeIdKey(uint32_t table, uint32_t slot, uint64_t id, char out[kIdKeySize]);
std::string IdKey(uint32_t table, uint32_t slot, uint64_t id);
bool DecodeIdKey(std::string_view key, uint32_t* table, uint32_t* slot, uint64_t* id);
// Where the records of hash slot `slot` of table index `table` start: the
// smallest key of the slot (its end: SlotKey(table, slot + 1)).
std::string SlotKey(uint32_t table, uint32_t slot);
// A version 4 key of a hashed row (no hash slot), for reading tests.
std::string IdKeyV4(uint32_t table, uint64_t id);
// The key of a delta's record of one row `row` of the range table index
// `table` ('p' records), and its inverse.
std::string PatchKey(uint32_t table, uint64_t row);
bool DecodePatchKey(std::string_view key, uint32_t* table, uint64_t* row);
// The key of a hashed table's admission sketch record, and its inverse.
std::string SketchKey(uint32_t table);
bool DecodeSketchKey(std::string_view key, uint32_t* table);
// Bytes of the sketch record of a table whose meta gives it `width`.
inline uint64_t SketchBytes(uint32_t width) { return uint64_t{width} * 4 * 2; }

// Rows per run record of a table of `dim` (see the format above); >= 1.
uint64_t RowsPerRun(uint32_t dim);
// Run records of a table owning `rows` rows of `dim`: ceil(rows / RowsPerRun).
uint64_t RunCount(uint64_t rows, uint32_t dim);
// Run records of every table of `s`, and a hashed table's row records (of
// a delta: the records it holds, removed ids included).
uint64_t RunCount(const ShardSnapshot& s);

// The start of a run record: run `row` of range table index `table`.
struct RunStart {
  uint32_t table = 0;
  uint64_t row = 0;
};
// The range tables' run records of `layout` cut into at most `ranges` key
// ranges of about equal bytes, each of whole runs and at least
// `min_bytes` (but for the last): the start of every range but the first,
// in key order (empty: one range). A range reader reads from its start to
// the next one (RunChecker::StartAt, FinishAt).
std::vector<RunStart> SplitRuns(const ShardSnapshot& layout, size_t ranges, uint64_t min_bytes);
// Rows [begin, end) of a range table of `dim` whose runs start at row
// `first` and every RowsPerRun(dim) rows after it, cut into at most
// `ranges` pieces of about equal rows, each of at least `min_rows` (but for
// the last), at run starts: where each piece but the first starts,
// ascending (empty: one piece). REQUIRES: first <= begin.
std::vector<uint64_t> SplitRowsAtRuns(uint64_t first, uint64_t begin, uint64_t end, uint32_t dim,
                                      size_t ranges, uint64_t min_rows);

// RowCount() x dim of `t`, or nullopt when that many floats, times
// 1 + kMaxOptimizerSlots arrays, would not fit a size_t of bytes.
std::optional<size_t> TableElements(const TableSnapshot& t);
// Bytes of row data the run records of `layout` (from DecodeMeta) hold in
// all: values and slots of every owned row. DataLoss "<where>: the meta
// record is corrupt: table '<t>' is too large" when a table is too large
// for TableElements.
// A delta's layout: at least the bytes its records hold.
StatusOr<Uint128> RowDataBytes(const ShardSnapshot& layout, const std::string& where);

// OK when generation `older` (the meta record at `older_where`) is the
// base `newer` (at `newer_where`) names: newer is a delta whose base clock
// and base id are older's clock and generation id, and both are of the
// same shard, shard count, fingerprint and tables (names, kinds, rows or
// hash slots, dims, owned rows, optimizers, slots, settings, sketch widths,
// row uses). Otherwise DataLoss naming both paths and what differs: a
// delta applied on another generation would restore a mix of two states.
Status CheckChainLink(const ShardSnapshot& older, const std::string& older_where,
                      const ShardSnapshot& newer, const std::string& newer_where);
// The layout of the state a chain ending in `newest` holds: `newest` as a
// full generation's meta record (no base, no delta counts).
ShardSnapshot AsFullLayout(ShardSnapshot newest);

// OK when `s` can be written: clock >= 0, shard < num_shards, owned rows
// inside each table's rows (a hashed table: slots inside its hash slots,
// ids in key order (by hash slot, then id) and as many as stored_rows, of
// a delta: any number, and its removed ids in key order too, none of
// them among its ids; a delta's range table: changed ranges in order,
// inside its owned rows, each starting on a run and ending on one or at
// the last owned row), a delta's base clock below its clock, values and
// every slot of RowCount() (a delta's: DeltaRowCount()) x dim floats, at most kMaxOptimizerSlots slots, a table count and table names and
// optimizer texts that fit a u32.
// Otherwise InvalidArgument "<where>: ..." naming the table and what is
// wrong.
Status ValidateForWrite(const ShardSnapshot& s, const std::string& where);

// "[first, end)", as errors print row ranges.
std::string RowsText(uint64_t first, uint64_t end);

// One run record, as RunChecker::Next found it (a hashed table's row
// record: one row, `first` its id).
struct RunRecord {
  uint32_t table = 0;
  uint64_t first = 0;  // global row id, or a hashed table's id
  uint64_t count = 0;  // rows
  // Bytes of each piece (count x dim floats); 0 for a table of dim 0.
  size_t piece_bytes = 0;
  // The values, then each slot's piece, pointing into the record's value.
  const std::byte* values = nullptr;
  const std::byte* slots[kMaxOptimizerSlots] = {};
  size_t num_slots = 0;
  // A hashed table's sketch record: `values` and piece_bytes its counters,
  // no rows (count 0).
  bool sketch = false;
  // A hashed row's use (kRowUseBytes) after its slots, when its table
  // evicts; null otherwise.
  const std::byte* use = nullptr;
  // A delta's record of a removed id (`first`): no values.
  bool removed = false;
  // A delta's record of one row of a range table ('p'): its rows are put
  // over the runs of older generations, not handed over as a run.
  bool patch = false;
};

// Checks the run records of one generation, handed over in key order (the
// meta record left out), against its layout: each must be the next run
// expected, of exactly the size expected. Every error is DataLoss starting
// with `where` and naming the table and rows:
//   "unexpected record with key <hex>"            a key of another shape;
//   "a record of table index <i>, but the meta record lists <n> tables";
//   "table '<t>' has a record of rows from <r>, outside its rows [b, e)";
//   "table '<t>' has a record of rows from <r>, inside the record of rows
//    [b, e) before it"                            an overlap or a repeat;
//   "the record of table '<t>' rows [b, e) is missing";
//   "the record of table '<t>' rows [b, e) has <n> bytes, not <m>";
// and for a hashed table's 'h' records:
//   "a record of id <x> of table '<t>', which is not hashed";
//   "table '<t>' has a record of id <x> in hash slot <s>, outside its slots [b, e)";
//   "table '<t>' has a record of id <x> under hash slot <k>, but the id's slot is <s>";
//   "table '<t>' has a record of id <x> out of order";
//   "table '<t>' has <n> row records, but its meta record says <m>";
//   "the record of table '<t>' id <x> has <n> bytes, not <m>";
// and for the sketch records:
//   "a sketch record of table '<t>', which has no admission sketch";
//   "the sketch record of table '<t>' has <n> bytes, not <m>";
//   "the sketch record of table '<t>' is missing".
// A delta's layout (base clock >= 0) is checked as a delta: its run
// records may leave runs out but each must be one of the runs a full
// generation holds, whole; its 'h' records are rows or removed ids
// (kRemovedRecord); and the counts are its meta record's delta fields:
//   "table '<t>' has a record of rows from <r>, which is not where a run starts";
//   "table '<t>' has <n> run records and <k> row records, but its meta
//    record says <m> and <j>";
//   "the row record of table '<t>' row <r> has <n> bytes, not <m>";
//   "table '<t>' has <n> row records and <k> removed ids, but its meta
//    record says <m> and <j>".
// Not thread-safe.
class RunChecker {
 public:
  // REQUIRES: `layout` comes from DecodeMeta (of format `version`) and
  // outlives the checker.
  RunChecker(const ShardSnapshot& layout, std::string where,
             uint32_t version = kCheckpointFormatVersion);

  // The next record in key order. On OK, *run describes its rows and points
  // into `value` (which must outlive the use of *run).
  Status Next(std::string_view key, std::string_view value, RunRecord* run);
  // After the last record: the missing-record error when rows remain.
  Status Finish();

  // A checker of one key range of a generation's range runs, so that
  // several threads can read and check disjoint ranges: StartAt before the
  // first record makes the run of rows from `row` of range table `table`
  // the next one expected, as if every record before it (sketches, hashed
  // rows, runs) had been read and found right; the range's records then go
  // to Next, and FinishAt(t, r) after them is OK when the records ended
  // just before the run of table `t` from row `r` (the start of the next
  // range), the missing-record error otherwise. The first range (from the
  // first key) has no StartAt, the last one ends with Finish. The ranges
  // together check the same as one checker of the whole generation, with
  // the same errors.
  // REQUIRES: `row` starts a run of range table `table` (SplitRuns), and
  // StartAt comes before any Next.
  void StartAt(uint32_t table, uint64_t row);
  Status FinishAt(uint32_t table, uint64_t row);

 private:
  // Moves past tables whose every run was seen (and hashed tables, whose
  // records are the 'h' ones).
  void SkipFullTables();
  // A hashed table's row record, and its sketch record.
  Status NextId(std::string_view key, std::string_view value, RunRecord* run);
  Status NextSketch(uint32_t table, std::string_view value, RunRecord* run);
  // Every sketch record the meta record promises has come (before the
  // first row record).
  Status SketchesDone();
  // Moves the hashed tables' reading to table index `table` (the end: the
  // table count), each hashed table before it complete.
  Status HashedUpTo(size_t table);
  // The end row of the run expected at next_row_ of table cur_;
  // REQUIRES: cur_ < tables.
  uint64_t ExpectedEnd() const;
  Status Missing() const;

  const ShardSnapshot& layout_;
  const std::string where_;
  const uint32_t version_;
  // The next record expected starts at row next_row_ of table cur_;
  // [last_first_, last_end_) are the rows of the last record accepted.
  size_t cur_ = 0;
  uint64_t next_row_ = 0;
  uint64_t last_first_ = 0, last_end_ = 0;
  // The hashed table whose 'h' records are being read, how many of them
  // came, and the last one's slot and id.
  size_t hashed_cur_ = 0;
  uint64_t hashed_seen_ = 0;
  uint32_t last_slot_ = 0;
  uint64_t last_id_ = 0;
  // The sketch records seen, by table, and whether rows came after them.
  std::vector<bool> sketch_seen_;
  bool sketches_done_ = false;
  // A delta: its run and row records counted by table, and the current
  // hashed table's removed ids.
  const bool delta_;
  std::vector<uint64_t> runs_seen_;
  std::vector<uint64_t> patches_seen_;
  uint64_t removed_seen_ = 0;
  // *run for the record `value` of rows [row, end) of table `ti`, or the
  // error of a record of another size.
  Status RunOf(uint32_t ti, uint64_t row, uint64_t end, std::string_view value,
               RunRecord* run) const;
  // A delta's run record (NextDeltaRun) and row record (NextPatch), and
  // the counts at the end.
  Status NextDeltaRun(uint32_t table, uint64_t row, std::string_view value, RunRecord* run);
  Status NextPatch(uint32_t table, uint64_t row, std::string_view value, RunRecord* run);
  Status DeltaRunsDone() const;
};

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_FORMAT_H_
