// A shard's state as plain data: every table's layout and, when taken from a
// store, its values and optimizer state (copied, or shared with the store: a
// range table's copy-on-write blocks, a hashed table's chunks of rows with
// the rows saved before a change). What a checkpoint writes and reads
// (server/checkpoint.h) and what a store is restored from; the layout
// comparison that decides whether a saved state fits a shard.
#ifndef PS_STORE_SNAPSHOT_H_
#define PS_STORE_SNAPSHOT_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/key_range.h"
#include "common/status.h"
#include "common/table_options.h"
#include "store/saved_rows.h"

namespace ps {

// A hashed row's use, kept when its table evicts (HashedRows): `seq`
// numbers its last push in the table's order of pushes (1, 2, ...),
// `clock` is that push's minimum clock and `uses` counts the pushes that
// named it. 16 bytes as a checkpoint or a replica's copy stores it
// (EncodeRowUse).
struct RowUse {
  uint64_t seq = 0;
  uint32_t clock = 0;
  uint32_t uses = 0;
};
inline constexpr size_t kRowUseBytes = 16;
// Little-endian, as every record: seq, clock, uses.
void EncodeRowUse(const RowUse& use, std::byte* out);
RowUse DecodeRowUse(const std::byte* in);

// A run of a range table's consecutive rows that a snapshot shares with
// the store instead of copying them (one of ShardStore's copy-on-write
// blocks). While `holder` is held the arrays stay as they were when the
// snapshot was taken: the store copies a block that a snapshot holds
// before it changes it.
struct SharedRows {
  uint64_t first = 0;             // its first row, as an index into the snapshot's rows
  uint64_t rows = 0;              // >= 1
  const float* values = nullptr;  // rows x dim floats, row-major
  // Each optimizer state array, laid out like values (the table's
  // slots.size() of them).
  std::array<const float*, kMaxOptimizerSlots> slots = {};
  // Keeps the arrays alive and unchanged; null once released
  // (TableSnapshot::ReleaseShared), when the pointers are null too.
  std::shared_ptr<const void> holder;
};

// A hashed table's rows that a snapshot shares with the store instead of
// copying them (HashedRows::Share): the store's chunks of rows, and the
// rows the store changed since as they were (`saved`, store/saved_rows.h),
// so that they read as the state of the snapshot's moment. Row r lies in
// chunk r >> chunk_shift at r & (chunk_rows - 1): its id (8 bytes) then its
// values and optimizer state, row_floats floats in all; its use (when the
// table keeps them) at the same place in `uses`, use_bytes apart, RowUse
// first; its stamp (when it tracks changes) likewise in `stamps`. A saved
// row's entry holds the same: the row_floats floats, the use, the stamp.
// Read on any thread while the store changes (the copies are checked
// against the saves).
struct SharedHashedRows {
  uint64_t rows = 0;
  uint64_t chunk_rows = 1;
  uint32_t chunk_shift = 0;
  size_t row_floats = 0;
  size_t use_bytes = 0;  // 0: no uses
  bool stamps = false;
  struct Chunk {
    const float* rows = nullptr;
    const std::byte* uses = nullptr;
    const uint32_t* stamps = nullptr;
    // Keep the three alive (the store may drop a chunk it emptied).
    std::shared_ptr<const void> rows_holder, uses_holder, stamps_holder;
  };
  std::vector<Chunk> chunks;
  std::shared_ptr<SavedRows> saved;
  // A delta's: only the rows stamped after `since` are the snapshot's.
  bool changes_only = false;
  uint32_t since = 0;

  // Row r as of the snapshot: its id, its floats (values, then each state
  // array: row_floats - 2 of them) into `floats` when not null, its use
  // into `use` when not null (and the table keeps uses), its stamp (0 when
  // it tracks none).
  struct Row {
    uint64_t id = 0;
    uint32_t stamp = 0;
  };
  Row Read(uint64_t r, float* floats, RowUse* use) const;
  // Chunk c's rows are read for good: the store need not save them.
  void Done(uint64_t c) const;
};

// Consecutive rows of a snapshot in one piece of memory: `rows` x dim
// floats of values at `values`, and of each optimizer state array at
// slots[k] (k < the table's slots.size()).
struct RowPiece {
  const float* values = nullptr;
  std::array<const float*, kMaxOptimizerSlots> slots = {};
  uint64_t rows = 0;
};

// One table of a shard: its layout, and (when taken from a store) its
// values and optimizer state, copied into `values` and `slots`, or, taken
// by ShardStore::SharedSnapshot or CheckpointSnapshot, shared with the
// store (a range table's `shared`, a hashed table's `hashed_rows`).
// ForEachPiece reads any of them.
struct TableSnapshot {
  std::string name;
  uint64_t rows = 0;     // rows of the whole table
  uint32_t dim = 0;
  RowRange owned;        // the rows this shard holds
  // The optimizer's settings as text (OptimizerDescription in
  // common/options.h); a restore refuses a different one.
  std::string optimizer;
  // owned.size() x dim floats, row-major.
  std::vector<float> values;
  // The optimizer's state arrays (0, 1 or 2), each laid out like values.
  std::vector<std::vector<float>> slots;

  // A hashed table (keys: hashed): `rows` is 0 and `owned` the shard's
  // hash slots of `hash_slots`; the rows are those of `ids`, in the order
  // of their checkpoint keys (by hash slot, then id; a generation of format
  // 4 or older: by id), with values and each slot array ids.size() x dim.
  bool hashed = false;
  uint32_t hash_slots = 0;
  // Hashed: the rows the shard held (ids.size() once the values are read;
  // a meta record says it before them).
  uint64_t stored_rows = 0;
  // Hashed, in a store's layout (ShardStore::Layout): the most rows the
  // shard may hold; a checkpoint of more is not restorable.
  uint64_t max_rows = 0;
  std::vector<uint64_t> ids;
  // Hashed, with an admission filter: its sketch's width (0: none) and,
  // when taken from a store, its counters (PushSketch::Data).
  uint32_t sketch_width = 0;
  std::vector<std::byte> sketch;
  // Hashed, evicting (`evict`): whether its rows carry their use, and,
  // when taken from a store, each row's (in the order of ids).
  bool row_uses = false;
  std::vector<RowUse> uses;

  // A hashed table's settings that decide its values besides its rows,
  // dim and optimizer (TableOptions::HashedSettings: init, admission,
  // eviction); empty for a range table, and in a generation of format 4 or
  // older, which did not record them.
  std::string settings;

  // A hashed table taken without a copy (ShardStore::SharedSnapshot, and
  // the deltas of CheckpointSnapshot): its rows in the store's chunks
  // (`hashed_rows.chunks` not empty). `ids` stays empty, and `values`,
  // `slots` and `uses` always, until ListSharedRows (on the thread that
  // writes it) lists the snapshot's rows, in key order: ids[i] then lies
  // at row hashed_at[i] of `hashed_rows`, and ForEachPiece and UseOf read
  // it there.
  SharedHashedRows hashed_rows;
  std::vector<uint32_t> hashed_at;
  // Rows listed (ids[i], i < this) that ReleaseShared gave back already,
  // and per chunk the listed rows still to be given back.
  uint64_t hashed_released = 0;
  std::vector<uint32_t> hashed_left;
  bool shares_hashed_rows() const { return !hashed_rows.chunks.empty(); }
  // Lists a shared hashed table's rows (above), and a delta's patched rows
  // (patched_marks); nothing when listed already. Costs a sort of a hashed
  // table's keys, a pass over a delta's marks.
  void ListSharedRows();
  // Copies what the snapshot shares with the store (a range table's runs,
  // a hashed table's rows) into its arrays, as ShardStore::Snapshot takes
  // them, and gives the shared memory back.
  void CopyShared();
  // Row i's use. REQUIRES: row_uses, i < the rows the arrays hold.
  RowUse UseOf(uint64_t i) const {
    if (!shares_hashed_rows()) return uses[i];
    RowUse use;
    hashed_rows.Read(hashed_at[i], nullptr, &use);
    return use;
  }

  // A range table taken without a copy (ShardStore::SharedSnapshot): its
  // rows as runs shared with the store's blocks, in row order, covering
  // every owned row once; `values` is then empty and `slots` holds as many
  // empty arrays as the optimizer has state arrays. A delta's
  // (CheckpointSnapshot): the rows of `changed` as such runs, and its
  // `patched` rows after them in `patched_blocks`. Empty otherwise.
  std::vector<SharedRows> shared;
  // A delta's patched rows shared with the store's blocks: per block that
  // holds some, a run whose `first` is the index (among the snapshot's
  // rows) of its first patched row, `rows` their count, and whose arrays
  // start at the block's first row; patched_at[j], the row within its
  // block of patched[j]. Empty when the patched rows are copied into
  // `values` and `slots` (or there are none).
  std::vector<SharedRows> patched_blocks;
  std::vector<uint32_t> patched_at;
  // A delta's patched rows before ListSharedRows lists them: per block of
  // patched_blocks, its shard-local rows [first_row, end_row) and their
  // marks as the store had them at the snapshot, a bit per row, in
  // patched_bits from `word` on (word 0 holding rows first_row / 64 * 64
  // on). `patched` and `patched_at` are empty until then.
  struct PatchedMarks {
    uint64_t first_row = 0;
    uint64_t end_row = 0;
    size_t word = 0;
  };
  std::vector<PatchedMarks> patched_marks;
  std::vector<uint64_t> patched_bits;
  // The rows the shared runs hold (the first rows of the snapshot's).
  uint64_t SharedRowCount() const {
    return shared.empty() ? 0 : shared.back().first + shared.back().rows;
  }
  // A delta's table (ShardSnapshot::base_clock >= 0): what changed since
  // the base generation. A range table's arrays hold only the rows of
  // `changed` (sorted, disjoint ranges of global row ids inside `owned`,
  // in order, one after the other), then those of `patched` (single rows
  // changed outside them, ascending global ids); a hashed table's `ids`
  // (and their values, slots and uses) only the rows made or updated since
  // the base, `removed` the ids whose rows went since (evicted, expired,
  // erased) and that have none now, both in key order, and `stored_rows`
  // the rows the shard holds in all. Empty in a full snapshot.
  std::vector<RowRange> changed;
  std::vector<uint64_t> patched;
  std::vector<uint64_t> removed;
  // A delta's meta record (DecodeMeta): its records of the table, a range
  // table's runs or a hashed table's changed rows, and a range table's row
  // records (patched rows) or a hashed table's removed ids.
  uint64_t delta_records = 0;
  uint64_t delta_rows = 0;

  // The rows the snapshot's arrays hold: owned rows, or a hashed table's.
  // REQUIRES: a full snapshot (a delta's: DeltaRowCount).
  uint64_t RowCount() const { return hashed ? stored_rows : owned.size(); }
  // The rows a delta's arrays hold.
  uint64_t DeltaRowCount() const {
    if (hashed) return ids.size();
    uint64_t n = patched.size();
    for (const RowRange& r : changed) n += r.size();
    return n;
  }

  // Calls fn(const RowPiece&) for the snapshot's rows [first, first +
  // count) (indices into its rows: 0 is its first row), in order, one piece
  // per contiguous run of memory: one from `values` and `slots`, or one per
  // shared run the rows touch, or one per row of a shared hashed table
  // (read into a buffer of the snapshot: valid until the next call, and
  // not for two threads at once). Nothing for count 0.
  // REQUIRES: first + count <= the rows the arrays hold (RowCount(), or a
  // delta's DeltaRowCount()); the shared runs touched are not released.
  template <typename Fn>
  void ForEachPiece(uint64_t first, uint64_t count, Fn&& fn) const;

  // Releases the shared runs that end at or before row `end`: their blocks
  // go back to the store alone (a push into one no longer copies it, and a
  // block the store replaced meanwhile is freed). Their rows may not be
  // read again. Costs the runs released, when called with `end` ascending.
  // A shared hashed table's chunk goes back once every listed row of it
  // is below `end` (one without any, at the first call): the store stops
  // saving its rows, for every copy of this snapshot, which must be done
  // with them too (the writer consumes its snapshot: CheckpointDir::Write).
  void ReleaseShared(uint64_t end);

 private:
  // Gives chunk c of the shared hashed rows back to the store.
  void ReleaseHashedChunk(uint64_t c);
  // ListSharedRows' part for a delta's patched rows.
  void ListPatchedRows();
  // ForEachPiece's rows of a shared hashed table.
  mutable std::vector<float> hashed_buffer_;
  // The index of the patched block holding snapshot row `row`. REQUIRES:
  // patched_blocks not empty, row among the patched rows.
  size_t PatchedBlockOf(uint64_t row) const;
  // The index of the shared run holding row `row`. REQUIRES: row <
  // RowCount(), shared not empty.
  size_t SharedRunOf(uint64_t row) const;
};

// What a delta snapshot is taken against (ShardStore::CheckpointSnapshot):
// the changes the store stamped after `since_epoch` (the `epoch` of the
// snapshot of the base generation), a range table's changed blocks widened
// to whole runs of `rows_per_run(dim)` rows counted from the first owned
// row (a checkpoint's records, server/checkpoint_format.h), or, for a
// block only sparse pushes wrote, its rows that changed when they take
// fewer bytes, counted `row_overhead` bytes each besides their floats.
struct DeltaSince {
  uint64_t since_epoch = 0;
  uint64_t (*rows_per_run)(uint32_t dim) = nullptr;
  uint64_t row_overhead = 32;
};

template <typename Fn>
void TableSnapshot::ForEachPiece(uint64_t first, uint64_t count, Fn&& fn) const {
  if (count == 0) return;
  const size_t num_slots = slots.size();
  RowPiece piece;
  if (shares_hashed_rows()) {
    // Each row's values and state, as of the snapshot, read into the
    // snapshot's buffer: a piece per row.
    const size_t floats = hashed_rows.row_floats;
    hashed_buffer_.resize(static_cast<size_t>(count) * floats);
    piece.rows = 1;
    for (uint64_t i = 0; i < count; ++i) {
      float* row = hashed_buffer_.data() + i * floats;
      hashed_rows.Read(hashed_at[first + i], row, nullptr);
      piece.values = row;
      for (size_t k = 0; k < num_slots; ++k) piece.slots[k] = row + (k + 1) * dim;
      fn(static_cast<const RowPiece&>(piece));
    }
    return;
  }
  const uint64_t end = first + count;
  const uint64_t shared_end = SharedRowCount();
  if (first < shared_end) {
    for (size_t run = SharedRunOf(first); first < std::min(end, shared_end); ++run) {
      const SharedRows& r = shared[run];
      const uint64_t in_run = first - r.first;
      const size_t offset = static_cast<size_t>(in_run) * dim;
      piece.values = r.values + offset;
      for (size_t k = 0; k < num_slots; ++k) piece.slots[k] = r.slots[k] + offset;
      piece.rows = std::min(r.rows - in_run, end - first);
      fn(static_cast<const RowPiece&>(piece));
      first += piece.rows;
    }
    if (first == end) return;
  }
  if (!patched_blocks.empty()) {
    // The patched rows in their shared blocks: a piece per row.
    piece.rows = 1;
    size_t block = PatchedBlockOf(first);
    for (; first < end; ++first) {
      while (first >= patched_blocks[block].first + patched_blocks[block].rows) ++block;
      const SharedRows& b = patched_blocks[block];
      const size_t offset = static_cast<size_t>(patched_at[first - shared_end]) * dim;
      piece.values = b.values + offset;
      for (size_t k = 0; k < num_slots; ++k) piece.slots[k] = b.slots[k] + offset;
      fn(static_cast<const RowPiece&>(piece));
    }
    return;
  }
  // The rows after the shared runs, in the arrays.
  const size_t offset = static_cast<size_t>(first - shared_end) * dim;
  piece.values = values.data() + offset;
  for (size_t k = 0; k < num_slots; ++k) piece.slots[k] = slots[k].data() + offset;
  piece.rows = end - first;
  fn(static_cast<const RowPiece&>(piece));
}

// The state of one shard at a clock boundary.
struct ShardSnapshot {
  uint32_t shard = 0;
  uint32_t num_shards = 0;
  // The shard's minimum clock: the snapshot holds every update of every
  // clock < clock (and, under ssp or asp, possibly some later ones).
  int64_t clock = 0;
  // A fingerprint of the job's model (JobFingerprint in common/options.h):
  // a restore refuses a generation written for another model.
  std::string fingerprint;
  std::vector<TableSnapshot> tables;

  // Incremental generations (checkpoint.full_every). A generation's own
  // id (random, not 0; 0 in a generation of format 5 or older), and for a
  // delta the clock and id of the generation it builds on (base_clock -1:
  // a full snapshot, every row of every table). A delta holds what changed
  // since its base (TableSnapshot::changed, removed); its sketches and
  // every table's layout are whole.
  uint64_t generation_id = 0;
  int64_t base_clock = -1;
  uint64_t base_id = 0;
  bool delta() const { return base_clock >= 0; }
  // The shard's recent pushes at the snapshot (RecentPushes::Encode,
  // server/recent_pushes.h), every one of them applied and so in the
  // snapshot's rows; empty when the shard does not record them (under
  // consistency.aggregate a push waits in a sum). Written beside the
  // database (server/checkpoint.h, kRecentPushesFile), so that a shard
  // restored from the generation acknowledges such a push sent again
  // instead of applying it twice.
  std::vector<uint64_t> recent_pushes;
  // Taken from a store by ShardStore::CheckpointSnapshot: true when it
  // holds only what changed since the epoch asked for (a delta, whose
  // caller sets base_clock and base_id); false for every row. Not written.
  bool changes_only = false;
  // Lists every shared hashed table's rows (TableSnapshot::ListSharedRows):
  // what the thread that writes the snapshot does first.
  void ListSharedRows() {
    for (TableSnapshot& t : tables) t.ListSharedRows();
  }
  // Whether a shared hashed table's rows are not listed yet.
  bool HasUnlistedRows() const {
    for (const TableSnapshot& t : tables) {
      if ((t.shares_hashed_rows() && t.hashed_left.empty()) || !t.patched_marks.empty()) {
        return true;
      }
    }
    return false;
  }
  // Copies what every table shares with the store (TableSnapshot::CopyShared).
  void CopyShared() {
    for (TableSnapshot& t : tables) t.CopyShared();
  }

  // Taken from a store: the store's change epoch it was taken at
  // (changes after it are stamped later); what a delta on this snapshot's
  // generation passes as DeltaSince::since_epoch. Not written.
  uint64_t epoch = 0;
};

// OK when `saved` (read from disk) can be restored into a shard whose
// layout is `expected` (same shard and shard count, fingerprint, tables
// with the same names, kind, rows or hash slots, dim, owned rows,
// optimizer and settings (when `saved` has them), and no more rows of a
// hashed table than its max_rows). Otherwise FailedPrecondition naming
// `where` (the generation's path), the first difference, and both values.
Status CheckRestorable(const ShardSnapshot& saved, const ShardSnapshot& expected,
                       const std::string& where);

// OK when `saved`, written by shard `saved.shard` of `saved.num_shards`, can
// be restored, in part, onto a job of another shard count whose layout on
// one of its shards is `expected`: the same tables (names, kinds, rows or
// hash slots, dims, optimizers, settings, admission sketch widths, row
// uses), and each table's owned rows (or hash slots) those ShardRows gives
// the shard among saved.num_shards. The shard count, the owned rows of
// `expected` and the per-shard bounds of hashed tables (max_rows, max_mb)
// may differ; the fingerprint, which covers the shard count and the
// bounds, is not compared: its other parts are, one by one. Otherwise
// FailedPrecondition naming `where`, the first difference and both values.
Status CheckReshardable(const ShardSnapshot& saved, const ShardSnapshot& expected,
                        const std::string& where);

}  // namespace ps

#endif  // PS_STORE_SNAPSHOT_H_
