// The in-memory state of one shard: for every table, the rows this shard
// owns, row-major in blocks of contiguous rows (about 1 MiB each), and the
// update rule that applies pushed values to them.
//
// Blocks are copy-on-write: a pull of a dense range shares the blocks with
// the transport instead of copying them (ShareRows), and a push into a block
// that is still shared (its reply not yet sent) first gives the store its
// own copy. So a reply always holds the values at the moment of the pull,
// and a dense pull costs no copy in the server.
//
// Not thread-safe: one ShardServer thread owns it. The transport's I/O
// thread only drops its references to shared blocks.
#ifndef PS_STORE_SHARD_STORE_H_
#define PS_STORE_SHARD_STORE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "common/options.h"
#include "common/status.h"
#include "common/update_rule.h"
#include "common/wire.h"
#include "store/block_memory.h"
#include "store/hashed_rows.h"
#include "store/push_sketch.h"
#include "store/snapshot.h"

namespace ps {

class ShardStore {
 public:
  // Allocates and initializes the rows of `shard` for every table of `job`.
  // A row's initial values depend only on (table init seed, row), never on
  // the number of shards. With `initialize` false every value starts at 0
  // instead (a store about to be restored from a checkpoint: computing the
  // init would be thrown away). ResourceExhausted if the memory cannot be had.
  // REQUIRES: job.Validate().ok(), shard < job.cluster.servers.size().
  static StatusOr<std::unique_ptr<ShardStore>> Create(const JobOptions& job, uint32_t shard,
                                                      bool initialize = true);
  // As Create, but the range tables' values and optimizer state are left
  // unwritten (their memory is allocated, not even zeroed: its pages are
  // first touched by whoever writes them, such as the threads of a
  // restore): for a store whose every range row is restored before
  // anything reads it, and that is thrown away when its restore fails.
  static StatusOr<std::unique_ptr<ShardStore>> CreateUnwritten(const JobOptions& job,
                                                               uint32_t shard);

  // Per-table layout (rows, dim, owned range) for DecodeRequest.
  std::span<const TableLayout> layouts() const { return layouts_; }
  // What DecodeRequest checks requests for these tables against: the
  // layouts (they must outlive the rules) and `job`'s server limits.
  RequestRules Rules(const JobOptions& job, uint32_t shard) const {
    return RequestRules{shard,
                        layouts_,
                        job.cluster.workers,
                        job.server.max_request_bytes,
                        job.server.max_keys_per_request,
                        job.server.reject_non_finite,
                        job.cluster.evaluator};
  }

  // Applies a PUSH with the table's optimizer, reading the values in place,
  // at the learning rate its schedule gives for minimum clock `clock`.
  // A result that is not finite (a value or optimizer state that the update
  // overflows or makes NaN) is handled as job.server.on_non_finite_result
  // says: kRefuse: returns OutOfRange naming the table and the row, and no
  // row of the push changed, counted in refused_rows(); kFlag: applied,
  // counted in non_finite_rows().
  // Never fails otherwise. Under kRefuse the store keeps a bound on the
  // magnitudes each table holds (measured on its first push after start or
  // restore: one pass over the table) and applies in place a dense push
  // that the bound proves cannot overflow (StepBounds), which is every
  // dense push of a healthy job; a dense push that might overflow, and every
  // sparse push (it may name a row more than once), has its rows saved
  // before their update, to be put back.
  // A hashed table's push (HashedRows::Apply) makes the rows of ids that
  // have none, and drops the rows of ids it has no room for (dropped_rows);
  // under kRefuse a result that is not finite refuses the whole push, as
  // for a sparse push of a range table.
  // REQUIRES: `request` passed DecodeRequest against layouts().
  Status ApplyPush(const Request& request, int64_t clock);
  // True when ApplyPush of `request` at `clock` cannot fail: under kFlag
  // always; under kRefuse when the table's bounds prove every result
  // finite (a dense push of a healthy job). The shard then acknowledges
  // the push before applying it. REQUIRES: as ApplyPush.
  bool PushProvenFinite(const Request& request, int64_t clock);

  // Synchronous aggregation (consistency.aggregate): adds a PUSH's values
  // to the running sum of clock `clock` instead of applying them (a
  // hashed table's: by id, ids beyond its max_rows dropped and counted).
  // REQUIRES: as ApplyPush.
  void Accumulate(const Request& request, int64_t clock);
  // Applies, in clock order, the sum of every clock < `below` scaled by
  // `scale` (1 / workers: their mean) with each table's optimizer (at the
  // learning rate of that clock), and forgets those sums. Only the blocks
  // that received pushes are touched (a hashed table: the ids, each one
  // update, making its row as a push would). A row whose result is not finite
  // keeps its values under kRefuse (its update is skipped) and takes the
  // result under kFlag; counted in refused_rows() or non_finite_rows().
  void ApplyAccumulated(int64_t below, float scale);
  // The clocks that hold a sum not applied yet, and the bytes of those sums
  // (each table's sum is its owned rows once a push reached it).
  size_t sum_clocks() const { return sums_.size(); }
  bool has_sum(int64_t clock) const { return sums_.count(clock) != 0; }
  uint64_t sum_bytes() const;

  // Hashed tables (keys: hashed): the rows this shard holds, the most it
  // may hold (max_rows, or max_mb over HashedRows::RowBytes), the bytes
  // they take (HashedRows::bytes), and the rows of pushes dropped because
  // the table was full (an id without a row; its pull reads the initial
  // value). 0 for range tables. REQUIRES: table < layouts().size().
  uint64_t stored_rows(uint32_t table) const { return OfHashed(table, &HashedRows::size); }
  uint64_t max_rows(uint32_t table) const { return OfHashed(table, &HashedRows::max_rows); }
  uint64_t stored_bytes(uint32_t table) const { return OfHashed(table, &HashedRows::bytes); }
  uint64_t dropped_rows(uint32_t table) const { return tables_[table].dropped_rows; }
  // Hashed tables that evict (`evict`): rows evicted at the bound to make
  // room for new ids, and rows evicted for idleness; 0 otherwise.
  uint64_t evicted_rows(uint32_t table) const { return tables_[table].evicted_rows; }
  uint64_t expired_rows(uint32_t table) const { return tables_[table].expired_rows; }
  // Hashed tables with an admission filter (`admit`): pushed rows of ids
  // without a row that the filter dropped, and the bytes of its sketch;
  // 0 otherwise. The sketch as bytes (PushSketch::Data; empty without a
  // filter), and its restore from a joining replica's copy (false when
  // the size does not fit).
  uint64_t unadmitted_rows(uint32_t table) const { return tables_[table].unadmitted_rows; }
  uint64_t sketch_bytes(uint32_t table) const {
    const PushSketch* sketch = tables_[table].sketch.get();
    return sketch != nullptr ? sketch->bytes() : 0;
  }
  std::span<const std::byte> SketchData(uint32_t table) const;
  bool RestoreSketch(uint32_t table, std::span<const std::byte> data);

  // Rows of `table` whose update result was not finite so far: refused,
  // skipped or (kFlag) applied. REQUIRES: table < layouts().size().
  uint64_t non_finite_rows(uint32_t table) const { return tables_[table].non_finite_rows; }
  // Row updates of `table` refused (kRefuse) for a result that would not be
  // finite: the rows kept their values. REQUIRES: as non_finite_rows.
  uint64_t refused_rows(uint32_t table) const { return tables_[table].refused_rows; }

  // Appends the values a PULL asks for to *frames, row-major in request
  // order and in the request's dtype: a dense range as frames that share
  // the store's blocks (no copy, one frame per block touched); row ids
  // gathered into one new frame. In a 16-bit dtype a dense range shares
  // each block's values in that type, converted by the first such pull
  // after the block last changed and shared by every later one until the
  // next write (every worker's pull of one clock under bsp: one
  // conversion); gathered rows are converted into their frame. A hashed
  // table's ids are gathered: the values of its row, or the initial values
  // of an id that has none (nothing is stored).
  // ResourceExhausted if a frame or a conversion cannot be allocated.
  // `held_bytes` (when set) receives what the appended frames keep in
  // memory until they are released: every block (or converted block) they
  // share (a push meanwhile copies such a block, leaving this one to the
  // frames; a converted block is the frames' alone), or the size of the
  // gathered frame.
  // REQUIRES: as ApplyPush.
  Status ReadRows(const Request& request, std::vector<Frame>* frames,
                  uint64_t* held_bytes = nullptr);

  // A copy of table `table`'s values on this shard (owned rows x dim), for
  // tests and checkpoints; empty for a hashed table. REQUIRES: table <
  // layouts().size().
  std::vector<float> CopyValues(uint32_t table) const;
  // A copy of optimizer state array `slot` (< the optimizer's Slots()) of
  // `table`, laid out like CopyValues.
  std::vector<float> CopySlot(uint32_t table, uint32_t slot) const;

  // A 64-bit hash (FNV-1a over the floats' bits) of table `table`'s values
  // and optimizer state, and of its sums not applied yet (consistency.
  // aggregate: each with its clock, a range table's touched blocks and a
  // hashed table's ids), bit for bit: two replicas of a range hold the
  // same state exactly when their checksums agree (STATS shows it; tests
  // compare replicas). For a hashed table, the sum over its rows of a hash
  // of each row's id, values and state: the rows' order in memory does not
  // count; a sum's rows count in their order, which its apply follows.
  // Not in it: a hashed table's row uses (eviction), whose push numbers a
  // copy may start elsewhere with the same order. Under replication.
  // after_aggregation a backup gets a clock's sums only as they are
  // applied, so its checksums agree with its primary's while the primary
  // holds no sum (at the end of a job).
  uint64_t Checksum(uint32_t table) const;

  // Blocks copied because a push met a block still shared with a reply, a
  // replica's copy (ShareBlock) or a snapshot (SharedSnapshot).
  uint64_t copy_on_write_count() const { return copy_on_write_count_; }
  // Hashed rows saved for a snapshot that shares them (SharedSnapshot,
  // HashedRows::Share) before a change: one copy of a row each.
  uint64_t snapshot_saves() const;
  // Blocks converted to a 16-bit dtype for dense pulls (ReadRows): at most
  // one per block and change, whatever the number of pulls.
  uint64_t encoded_block_count() const { return encoded_block_count_; }

  // The tables' layout as a checkpoint records it (no values): what a
  // generation must match to be restored here (CheckRestorable).
  ShardSnapshot Layout(const JobOptions& job, uint32_t shard, int64_t clock) const;
  // Layout() plus a copy of every value and optimizer state array, in
  // `values` and `slots`: what tests and tools read. Costs one copy of the
  // shard's memory. ResourceExhausted if the copy cannot be allocated.
  StatusOr<ShardSnapshot> Snapshot(const JobOptions& job, uint32_t shard, int64_t clock) const;
  // Layout() plus the state a checkpoint writes, taken without copying the
  // range tables: each one's rows as runs shared with the store's blocks
  // (TableSnapshot::shared, one run per block, with its optimizer state),
  // in time proportional to the number of blocks (about one per MiB of
  // values). While a run is held, a push or restore that changes its block
  // first copies it, values and optimizer state (copy_on_write_count),
  // once; the run keeps the state of the moment of the call. Releasing a
  // run (TableSnapshot::ReleaseShared, or dropping the snapshot) gives its
  // block back, so with no push meanwhile the snapshot costs no memory.
  // The snapshot may be read and released on another thread while this
  // store serves. A hashed table's rows are shared alike, as its chunks of
  // rows (TableSnapshot::hashed_rows, HashedRows::Share: a row is saved for
  // the snapshot before it first changes, snapshot_saves), and listed in
  // key order by the thread that writes them (TableSnapshot::ListSharedRows).
  // ResourceExhausted if the snapshot cannot be allocated.
  StatusOr<ShardSnapshot> SharedSnapshot(const JobOptions& job, uint32_t shard,
                                         int64_t clock) const;
  // The snapshot of a checkpoint generation, which later deltas may build
  // on: with `delta` null, SharedSnapshot() (a full one, its range tables shared
  // with the store's blocks); otherwise (changes_only set) a
  // delta of what changed since the snapshot of epoch delta->since_epoch
  // was taken (the layout whole; base_clock and base_id left for the
  // caller): a range table's blocks written whole since (a dense push, an
  // aggregated sum, a restore or a replica's copy), widened to whole runs
  // of delta->rows_per_run(dim) rows (TableSnapshot::changed), and the
  // rows sparse pushes changed in other blocks (`patched`), or the block's
  // runs when those take fewer bytes (DeltaSince::row_overhead); a hashed
  // table's rows made, updated or restored since and the ids removed since
  // that have no row now (`removed`). A full one instead when a hashed
  // table lost count of its removed ids (HashedRows). Either way sets the
  // snapshot's `epoch` and starts a new change epoch, and forgets the
  // hashed tables' removed ids: a delta is taken only against the previous
  // CheckpointSnapshot (a caller whose write of it failed takes a full one
  // next). A hashed table tracks its rows' changes only when the job's
  // checkpoint.full_every is above 1 (4 bytes per row); without, a delta
  // holds every row of it. A range table keeps a bit per row. A delta
  // shares what a full snapshot shares: the runs written whole and the
  // blocks of the patched rows (TableSnapshot::shared, patched_blocks:
  // their marks copied, a bit per row, the rows listed by the writer), the
  // hashed rows as their chunks; no row is copied. ResourceExhausted if
  // the marks cannot be allocated.
  StatusOr<ShardSnapshot> CheckpointSnapshot(const JobOptions& job, uint32_t shard, int64_t clock,
                                             const DeltaSince* delta);
  // Replaces every value and optimizer state array with the snapshot's
  // (copied, or shared: TableSnapshot::ForEachPiece).
  // REQUIRES: CheckRestorable(snapshot, Layout(...)) is OK; its shared
  // runs are not released.
  void Restore(const ShardSnapshot& snapshot);
  // Restore a run of rows at a time (as a checkpoint read delivers them,
  // server/restore.h): rows [first, first + count) of `table` (global row ids inside its
  // owned range) take `values` and the optimizer state arrays `slots`
  // (count x dim floats each, row-major, possibly unaligned). A hashed
  // table's: one row (count 1), `first` its id, made or overwritten, with
  // its use (kRowUseBytes, EncodeRowUse) when its table evicts (null: the
  // checkpoint kept none).
  // REQUIRES: the generation passed CheckRestorable against Layout().
  void RestoreRows(uint32_t table, uint64_t first, uint64_t count, const std::byte* values,
                   std::span<const std::byte* const> slots, const std::byte* use = nullptr);
  // Restores from several threads at once (a checkpoint read on several
  // threads, server/restore.h): BeginConcurrentRestore makes every block of
  // the range tables the store's own (a copy of one a reply still holds, as
  // a push does) and has their bounds measured again; from then until the
  // store's next other use, RestoreRangeRows (RestoreRows of a range
  // table's rows) may be called from several threads at once, each call
  // with rows no other call has, and beside them one thread at a time may
  // call RestoreRows of hashed tables and RestoreSketch.
  void BeginConcurrentRestore();
  void RestoreRangeRows(uint32_t table, uint64_t first, uint64_t count, const std::byte* values,
                        std::span<const std::byte* const> slots);
  // Removes the row of id `id` of hashed table `table` (it reads as its
  // initial value again), as a delta generation's removed id says; false
  // when it had none. REQUIRES: a hashed table.
  bool RestoreRemoved(uint32_t table, uint64_t id);

  // A copy for a replica that joins (server/replication.h), taken while
  // the shard serves.
  //
  // Blocks of table `table` (each of whole rows, about 1 MiB of values).
  uint64_t block_count(uint32_t table) const { return tables_[table].blocks.size(); }
  // Appends 1 + Slots() frames that share block `block` of `table` (its
  // values, then each optimizer state array: no copy) and sets *first (the
  // global id of its first row) and *rows. A push meanwhile copies the
  // block, its optimizer state too, and leaves these frames the values of
  // the moment of the call. REQUIRES: block < block_count(table).
  Status ShareBlock(uint32_t table, uint64_t block, std::vector<Frame>* frames, uint64_t* first,
                    uint64_t* rows);
  // A hashed table's rows for a replica that joins, copied (they are not
  // shared blocks): rows [first, first + count) in the table's own order
  // (valid until the next push) as two frames, their ids (u64 each) and
  // their floats (each row its values, then each optimizer state array),
  // and a third, their uses (kRowUseBytes each), when the table evicts.
  // HashedRowsPerCopy: rows per such copy, about 1 MiB. ResourceExhausted
  // when the frames cannot be allocated. REQUIRES: a hashed table,
  // first + count <= stored_rows(table).
  uint64_t HashedRowsPerCopy(uint32_t table) const;
  Status CopyIds(uint32_t table, uint64_t first, uint64_t count, std::vector<Frame>* frames) const;
  // Takes rows CopyIds gave (`rows`: ids.size() rows of floats, possibly
  // unaligned; `uses`: their uses, or null), each made or overwritten.
  // DataLoss when the table has no room for one (the bound differs from
  // the primary's).
  Status RestoreIds(uint32_t table, std::span<const uint64_t> ids, const std::byte* rows,
                    const std::byte* uses = nullptr);
  // The sums of synchronous aggregation not applied yet, one per clock and
  // table that received pushes: for each sum of a clock < `below` (clock
  // order, then table), appends two frames to *frames and its clock, table
  // and count to *index (kSumIndexFields int64 each):
  //   a range table's: a copy of its values (owned rows x dim floats) and
  //     one byte per block (1: touched); the count is its blocks;
  //   a hashed table's: its ids (u64 each) and their rows (count x dim
  //     floats, row by row), in the order its pushes first named them,
  //     which is the order its apply follows; the count is its ids.
  // A backup takes them (SumFromFrames, then RestoreSum) to hold the same
  // sums: a joining replica's copy, or a clock's sums replicated once
  // before they are applied (replication.after_aggregation).
  void CopySums(int64_t below, std::vector<Frame>* frames, std::vector<int64_t>* index) const;
  static constexpr size_t kSumIndexFields = 3;
  // One sum as the store holds it, with its clock and table.
  struct PendingSum {
    int64_t clock = 0;
    uint32_t table = 0;
    // A range table's: owned rows x dim floats, and per block whether a
    // push touched it.
    std::vector<float> values;
    std::vector<bool> touched;
    // A hashed table's: a row per id (no optimizer state), at most the
    // table's max_rows, in the primary's order.
    std::unique_ptr<HashedRows> hashed;
  };
  // The sum of clock `clock` and table index `table` from one index entry
  // of CopySums (`count`) and its two frames, checked whole (CheckSum).
  // InvalidArgument naming the sum and what does not fit: a table or
  // clock out of range; a range table's values not whole floats or not
  // its owned rows x dim, or touched bytes other than `count` and its
  // blocks; a hashed table's count above its max_rows, ids or rows frames
  // of other sizes than `count` ids and `count` x dim floats, an id named
  // twice, or an id outside this shard's hash slots.
  StatusOr<PendingSum> SumFromFrames(int64_t clock, int64_t table, int64_t count,
                                     const Frame& first, const Frame& second) const;
  // Takes one sum, in place of any sum of its clock and table.
  // InvalidArgument when it does not fit the table (CheckSum says so
  // beforehand).
  Status RestoreSum(PendingSum sum);
  Status CheckSum(const PendingSum& sum) const;

 private:
  struct Block {
    BlockFloats values;  // rows_per_block x dim (the last block may be shorter)
    BlockFloats slots[kMaxOptimizerSlots];  // optimizer state, like values (Slots() of them)
    // Frames of ShareBlock still holding this block (the I/O thread
    // releases them): its optimizer state is copied, not moved, by a push.
    std::atomic<uint32_t> whole_holders{0};
    // The values in `encoded_type` (a 16-bit dtype), made by the first
    // dense pull in that type since the block last changed, shared with
    // the replies of every such pull; Writable drops it (the replies in
    // flight keep theirs). One type at a time: a table's pulls ask for one.
    std::shared_ptr<const uint16_t[]> encoded;
    WireType encoded_type = WireType::kF32;
  };
  // Counts as a holder of a whole block (whole_holders) while it lives: a
  // push that copies the block then copies its optimizer state instead of
  // moving it. Shared by the frames of ShareBlock and by the runs of
  // SharedSnapshot; released on any thread.
  struct WholeHold;
  // A WholeHold of `block`, as the holder of its frames or runs.
  static std::shared_ptr<const void> HoldWhole(std::shared_ptr<Block> block);
  struct Table {
    TableLayout layout;
    OptimizerOptions optimizer;
    // The optimizer's registry entry and its number of state arrays, looked
    // up once: a push dispatches through these.
    const UpdateRule* rule = nullptr;
    uint32_t slots = 0;
    uint64_t rows_per_block = 1;
    std::vector<std::shared_ptr<Block>> blocks;  // range tables
    // Per block, the change epoch of its last write of whole rows or runs
    // (Writable), and of its last sparse push (MarkRow), whose rows are
    // the bits of `dirty` set in that epoch (a block's bits are cleared
    // when a sparse push first writes it in a new epoch): what a delta
    // snapshot compares.
    std::vector<uint64_t> stamps;
    std::vector<uint64_t> sparse_stamps;
    std::vector<uint64_t> dirty;  // a bit per owned row
    std::unique_ptr<HashedRows> hashed;  // hashed tables (and no blocks)
    // Hashed tables with `admit` on: the filter's settings and its counts.
    AdmitOptions admit;
    std::unique_ptr<PushSketch> sketch;
    uint64_t unadmitted_rows = 0;
    uint64_t dropped_rows = 0;
    uint64_t evicted_rows = 0;
    uint64_t expired_rows = 0;
    uint64_t non_finite_rows = 0;
    uint64_t refused_rows = 0;
    // kRefuse: when `bounded`, bound[0] is at least the magnitude of every
    // value of the table and bound[1 + k] of every element of state k.
    bool bounded = false;
    bool measured = false;  // the bounds were measured and no push came since
    StateBounds bound = {};
  };
  // A run of elements saved before a push updated them, to put back when
  // the push is refused (kRefuse): `at` indexes undo_, where the values
  // and then each slot's elements lie.
  struct SavedRun {
    Block* block;
    size_t offset;
    size_t n;
    size_t at;
  };
  ShardStore() = default;
  // What a new store's range rows hold: Create's initial values or zeros,
  // or CreateUnwritten's nothing.
  enum class Start { kInitialValues, kZeros, kUnwritten };
  static StatusOr<std::unique_ptr<ShardStore>> Make(const JobOptions& job, uint32_t shard,
                                                    Start start);
  // A delta's copy of what changed since `delta->since_epoch` into
  // A snapshot's run of `rows` rows of `t`'s block `block` from row
  // `in_block`, held whole (HoldWhole), as the snapshot's rows from `first`.
  static SharedRows ShareRows(const Table& t, uint64_t block, uint64_t in_block, uint64_t rows,
                              uint64_t first);
  // *snapshot (its layout): see CheckpointSnapshot.
  void CopyChanges(const DeltaSince& delta, ShardSnapshot* snapshot);
  // Snapshot (`share` false) or SharedSnapshot (true).
  StatusOr<ShardSnapshot> TakeSnapshot(const JobOptions& job, uint32_t shard, int64_t clock,
                                       bool share) const;
  // `count` of table `table`'s HashedRows; 0 for a range table.
  template <typename Count>
  uint64_t OfHashed(uint32_t table, Count (HashedRows::*count)() const) const {
    const HashedRows* rows = tables_[table].hashed.get();
    return rows != nullptr ? static_cast<uint64_t>((rows->*count)()) : 0;
  }
  // Adds a hashed push's dropped and evicted rows to the table's counts.
  static void Count(Table& t, const HashedRows::PushCounts& counts);
  // ApplyPush of a hashed table.
  Status ApplyHashed(Table& t, const Request& request, int64_t clock);
  // A hashed table's push with the rows of ids the admission filter does
  // not admit (yet) left out: *ids and *grads view the request, or
  // admitted_ids_ and admitted_grads_. Counts each id without a row in the
  // sketch.
  void Admitted(Table& t, const Request& request, std::span<const uint64_t>* ids,
                const float** grads);
  // The block, made private to the store first if a reply still shares it;
  // with `whole_block`, the block counts as changed for the next delta
  // (else the caller marks its rows, MarkRow).
  Block* Writable(Table& table, uint64_t block, bool whole_block = true);
  // Shard-local row `row` of a range table changed by a sparse push.
  void MarkRow(Table& table, uint64_t row);
  // Fills block->encoded with the values in `dtype` unless it holds them.
  Status Encode(Block* block, WireType dtype);
  // One optimizer step on elements [offset, offset + n) of a block, at the
  // learning rate and Adam step of minimum clock `clock`.
  static void Update(const Table& table, Block* block, size_t offset, const float* g, size_t n,
                     int64_t clock);
  // The largest magnitudes (MaxAbsBits) of elements [offset, offset + n)
  // of the block's values (bits[0]) and of each optimizer state array.
  static void Magnitudes(const Table& table, const Block& block, size_t offset, size_t n,
                         StateBits& bits);
  // True when the magnitudes of Magnitudes() are all finite.
  static bool Finite(const Table& table, const StateBits& bits);
  static bool Finite(const Table& table, const Block& block, size_t offset, size_t n);
  // Raises the table's bounds to `bits` (when it keeps bounds).
  static void Widen(Table* table, const StateBits& bits);
  // Whether the table's bounds prove a dense push's every result finite;
  // fills after[] with the bounds after it. Sparse pushes: false.
  bool ProvenFinite(Table& table, const Request& request, int64_t clock, StateBounds& after);
  // Measures the table's bounds: one pass over every value and state.
  static void MeasureBounds(Table* table);
  // Saves elements [offset, offset + n) of the block (values and slots) as
  // the next run of saved_.
  void Save(const Table& table, Block* block, size_t offset, size_t n);
  // ApplyAccumulated of a hashed table's sum.
  void ApplyHashedSum(Table& t, const HashedRows& sum, float scale, int64_t clock);
  // Update() of elements [0, n) of a block (whole rows) with the checks of
  // ApplyAccumulated: a row whose result is not finite is counted and,
  // under kRefuse, keeps its values.
  void ApplyChecked(Table& table, Block* block, const float* g, size_t n, int64_t clock);
  // Puts every saved run back, newest first (a row a push names twice gets
  // its oldest values), and forgets them.
  void PutBack(const Table& table);
  // Calls fn(block, first row in the block, rows) for each block-sized run
  // of the dense range of `count` rows from the shard-local row `first`.
  template <typename Fn>
  static void ForEachBlockRun(const Table& table, uint64_t first, uint64_t count, Fn fn) {
    const uint64_t end = first + count;
    for (uint64_t row = first; row < end;) {
      const uint64_t block = row / table.rows_per_block, in_block = row % table.rows_per_block;
      const uint64_t n = std::min(table.rows_per_block - in_block, end - row);
      fn(block, in_block, n);
      row += n;
    }
  }

  // One clock's sums: per table, owned rows x dim floats (allocated on the
  // first push to the table) and which blocks they touch.
  // A hashed table's sum is a table of its own: a row per id pushed this
  // clock (add onto zeros), at most the table's max_rows of them.
  struct TableSum {
    std::vector<float> values;
    std::vector<bool> touched;  // per block
    std::unique_ptr<HashedRows> hashed;  // hashed tables: values and touched stay empty
  };
  // Accumulate of a hashed table: into its sum of the clock, by id.
  void AccumulateHashed(Table& t, const Request& request, TableSum* sum);

  std::vector<Table> tables_;
  std::vector<TableLayout> layouts_;
  // Writes are stamped with this; each CheckpointSnapshot takes it and
  // moves on to the next. Blocks made at Create carry 0.
  uint64_t change_epoch_ = 1;
  uint64_t copy_on_write_count_ = 0;
  uint64_t encoded_block_count_ = 0;
  std::vector<float> gathered_;  // ReadRows' rows before their conversion; a scaled sum row
  std::vector<uint64_t> admitted_ids_;  // Admitted's rows of a push
  std::vector<float> admitted_grads_;
  std::map<int64_t, std::vector<TableSum>> sums_;  // by clock
  bool refuse_non_finite_ = true;  // job.server.on_non_finite_result is kRefuse
  // Scratch of ApplyPush under kRefuse, kept to reuse its memory: the saved
  // elements (undo_used_ of undo_capacity_, never zeroed) and their runs.
  std::unique_ptr<float[]> undo_;
  size_t undo_capacity_ = 0;
  size_t undo_used_ = 0;
  std::vector<SavedRun> saved_;
};

// The initial value of element `col` of `row` under `init` (deterministic).
float InitialValue(const InitOptions& init, uint64_t row, uint32_t col);

}  // namespace ps

#endif  // PS_STORE_SHARD_STORE_H_
