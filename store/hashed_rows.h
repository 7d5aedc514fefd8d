// The rows of one hash-keyed table on one shard (DESIGN.md section 15):
// rows keyed by any uint64 id, made on the first push applied to them, and
// read as their initial value until then.
//
// Storage: each row is its id (8 bytes), then one run of floats, its
// `dim` values followed by each optimizer state array's `dim` floats (a
// row's update reads and writes one contiguous run, and the id a lookup
// checks lies beside the values a pull copies). Rows lie packed in chunks
// of about 256 KiB (2 to 4 MiB, on 2 MiB pages, in a table whose bound
// allows 64 MiB of rows or more: store/huge_memory.h), in no order; erasing a row moves the last row into
// its place, so the chunks hold exactly size() rows (and the last
// chunk is freed once empty): the memory follows the rows, with nothing
// that grows by doubling but the index. The index maps an id to its row:
// open addressing over groups of 12 entries, each group one cache line
// (a byte per entry, a hash tag of the id or 0 when free; an overflow
// count; the entries' 32-bit row numbers), probed group after group,
// at most 7/8 full. An id's group is told by its hash; the tags of a
// group are compared at once (SSE2), and only an entry whose tag matches
// has its row's id read, so an id is found with one cache line of the
// index and its row's, and a missing one usually with the index's line
// alone. A group's overflow count is the
// number of ids that passed it full to lie further on: a probe stops at a
// group without them, and an erase takes its id's count back from the
// groups it passed (no tombstones, no moves). The index doubles without a
// pause: the new one takes new rows at once, and each row made after it
// moves the entries of kGroupsPerMake groups of the old one (and each
// push those of a group per kPushedIdsPerGroup ids it names, so that a
// table that stops growing ends its doubling too), which is freed when
// all are moved; meanwhile a lookup that misses in the new index looks in
// the old one, whose moved groups keep only their overflow counts.
// Memory: see row_bytes() and bytes().
//
// A missing row's values are InitialValue(init, id, c) (store/shard_store.h):
// a pure function of the table's init seed and the id, so every replica, a
// restarted shard and a one-process run read the same values, and a read
// stores nothing.
//
// Eviction (EvictOptions, when enabled): each row keeps its use (the
// number of its last push in the table's order, that push's clock and how
// many pushes named it: RowUse) and a place in a doubly linked list in the
// order of last push, one list for lru (and idle eviction alone), one per
// use class 1, 2-3, 4-7, ... for lfu. So the rows that go are the heads of
// lists: each eviction is O(1) and a push evicts at most as many rows as
// it makes, plus a bounded sweep of idle rows; nothing scans the table.
// The lists' order follows from the pushes alone, not from where rows lie
// in memory, so replicas that applied the same pushes evict the same rows,
// and a restored or copied table rebuilds them from the rows' uses.
//
// Not thread-safe: the shard's loop owns it.
#ifndef PS_STORE_HASHED_ROWS_H_
#define PS_STORE_HASHED_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "common/options.h"
#include "common/status.h"
#include "common/update_rule.h"
#include "store/saved_rows.h"
#include "store/shared_chunks.h"
#include "store/huge_memory.h"
#include "store/snapshot.h"

namespace ps {

class HashedRows {
 public:
  // Rows of `dim` values with `slots` optimizer state arrays each, starting
  // at `init`; at most `max_rows` of them (at least 1, at most 2^32 - 2).
  // Allocates nothing until the first row.
  HashedRows(uint32_t dim, uint32_t slots, const InitOptions& init, uint64_t max_rows,
             const EvictOptions& evict = {});

  uint32_t dim() const { return dim_; }
  uint32_t slots() const { return slots_; }
  uint64_t size() const { return size_; }
  uint64_t max_rows() const { return max_rows_; }
  bool full() const { return size() >= max_rows_; }
  // Floats per row: its values and its state.
  size_t stride() const { return stride_; }

  // The row of `id` (values, then each state array), null when it has none.
  const float* Find(uint64_t id) const;
  float* Find(uint64_t id);
  // The row of `id`, made now (initial values, zero state) when it has
  // none; null when it has none and the table is full (the caller evicts
  // first, or drops the push).
  float* FindOrMake(uint64_t id, bool* made = nullptr);
  // Removes the row of `id`: it reads as its initial value again. False
  // when it had none. Moves the last row into its place (row pointers
  // from Find are invalid after).
  bool Erase(uint64_t id);

  // Writes the values of each of `ids` (its row's, or its initial values)
  // to out[i * dim .. (i + 1) * dim).
  void Gather(std::span<const uint64_t> ids, float* out) const;

  // One push at minimum clock `clock`: grads[i * dim ..) for ids[i], each
  // applied with `rule` at learning rate `lr` and step `step` to the id's
  // row, made when missing. With an eviction policy, a push whose new ids
  // do not fit first evicts as many rows as it lacks room for (counted in
  // `evicted`; never a row the push names); a row that the table still
  // has no room for is skipped (counted in `dropped`). With idle_clocks,
  // the push then evicts rows idle since clock - idle_clocks or before, at
  // most max(1024, 2 * ids.size()) of them (counted in `expired`; the
  // rest go with the next pushes). With `refuse_non_finite`, the first row whose result is
  // not finite stops the push and every row of it is put back as it was
  // (rows it made are removed again): `refused` is 1 and `refused_id`
  // names the row; otherwise such rows take the result. Subnormals are
  // flushed (FlushSubnormals), as in dense tables. An id named twice is
  // updated twice, in order.
  struct PushCounts {
    uint64_t made = 0;     // rows made (0 when the push was refused)
    uint64_t dropped = 0;  // rows skipped: the table was full
    uint64_t refused = 0;  // 1 when the push was refused
    uint64_t refused_id = 0;  // the id whose result was not finite, when refused
    uint64_t non_finite = 0;  // rows whose result was not finite (taken, or the refused one)
    uint64_t evicted = 0;  // rows evicted at the bound to make room for it
    uint64_t expired = 0;  // rows evicted for idleness
  };
  // A refused push changes no row it names, but its pushes count as uses,
  // and the rows evicted to make room for it stay evicted.
  PushCounts Apply(std::span<const uint64_t> ids, const float* grads, const UpdateRule& rule,
                   const OptimizerOptions& optimizer, float lr, int64_t step,
                   bool refuse_non_finite, int64_t clock = 0);

  // Whether rows keep their use (RowUse, store/snapshot.h): eviction on.
  bool tracks_use() const { return evict_.enabled(); }
  // Row i's use. REQUIRES: tracks_use(), i < size().
  RowUse use(uint64_t i) const;
  // The row of `id` as a checkpoint or a joining replica's copy gives it:
  // made when missing (initial values; null when the table is full) or
  // overwritten by the caller. With eviction on, `use` is its use (null:
  // it was not kept, as in a table written without eviction: the rows
  // then count as pushed once, in the order they are restored). The lists
  // are rebuilt from the uses before the next push.
  float* Restore(uint64_t id, const RowUse* use);

  // Change tracking, for incremental checkpoints (checkpoint.full_every):
  // from TrackChanges() on, each row carries the stamp (SetStamp) current
  // when it was last made, updated or restored, and the ids of the rows
  // removed (erased, evicted, expired) are kept until TakeRemoved. Costs 4
  // bytes per row (counted in bytes(), and in RowBytes and RowsWithin with
  // `stamps`) and 8 per removal between two TakeRemoved, up to
  // max_rows / 4 + 1024 removals: beyond, the ids are dropped and
  // removed_overflowed() says so until the next TakeRemoved (a store that
  // is never snapshot, a backup's, holds no more).
  void TrackChanges();
  bool tracks_changes() const { return tracking_; }
  // The stamp of the changes from now on.
  void SetStamp(uint32_t stamp) { stamp_ = stamp; }
  // Row i's stamp. REQUIRES: tracks_changes(), i < size().
  uint32_t stamp(uint64_t i) const {
    return reinterpret_cast<const uint32_t*>(
        stamp_chunks_.data(i >> chunk_shift_))[i & (chunk_rows_ - 1)];
  }
  // The ids removed since the last call, in the order of their removal,
  // possibly repeated, and possibly of rows made again since; incomplete
  // when removed_overflowed().
  std::vector<uint64_t> TakeRemoved() {
    removed_overflowed_ = false;
    return std::exchange(removed_, {});
  }
  bool removed_overflowed() const { return removed_overflowed_; }

  // The rows as they are now, shared with the caller instead of copied
  // (SharedHashedRows; their uses and stamps too, when kept): O(chunks).
  // Until the caller drops it, each row changed is first saved for it
  // (store/saved_rows.h), so what the caller reads stays the rows of this
  // moment. Const: it changes no row, only what a write does first.
  SharedHashedRows Share() const;
  // Rows saved so for the snapshots shared, in all.
  uint64_t saves() const { return saves_; }

  // The id of row i. REQUIRES: i < size().
  uint64_t id(uint64_t i) const;
  // Row i (stride() floats). REQUIRES: i < size().
  const float* row(uint64_t i) const { return RowAt(i); }

  // Bytes per row, index included, when the index is 7/8 full (its
  // fullest, 6.1 bytes a row; just after it doubles, twice that), and
  // its use when `use` (eviction on).
  // With `stamps`, the 4 bytes of change tracking (TrackChanges) too.
  size_t row_bytes() const { return RowBytes(dim_, slots_, tracks_use(), tracking_); }
  static size_t RowBytes(uint32_t dim, uint32_t slots, bool use = false, bool stamps = false);
  // The most rows of `dim` values and `slots` state arrays whose bytes()
  // stay within `bytes` (a max_mb bound): the rows, their chunks (the last
  // one whole) and the index at the size those rows make it (at most 7/8
  // full: between 6.1 and 12.2 bytes per row), also while it doubled to that
  // size (the old index beside it, and the rows made until its entries
  // moved). At least 1.
  static uint64_t RowsWithin(uint64_t bytes, uint32_t dim, uint32_t slots, bool use = false,
                             bool stamps = false);
  // Bytes the rows (with their ids and uses) and the index take now (their
  // capacity). Apply's undo log is not counted: a copy of the rows of the
  // largest push so far, a cost of the push's size (server.max_request_bytes
  // bounds it), not of the table's.
  size_t bytes() const;

 private:
  // Rows are numbered in 32 bits.
  static constexpr uint64_t kMostRows = uint64_t{UINT32_MAX} - 1;
  // A row's use and its neighbours in its list (kNil: none).
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Use {
    RowUse use;
    uint32_t prev = kNil;
    uint32_t next = kNil;
  };
  struct List {
    uint32_t head = kNil;
    uint32_t tail = kNil;
  };
  // The index's groups: one cache line each.
  static constexpr size_t kGroupSlots = 12;
  struct alignas(64) Group {
    uint8_t tags[kGroupSlots];  // Tag of the entry's id's hash; 0: free
    uint8_t overflow;           // ids that passed this group full (255: too many to count)
    uint8_t spare[3];
    uint32_t rows[kGroupSlots];  // meaningful only where the tag is not 0
  };
  static_assert(sizeof(Group) == 64);
  // An index: `count` groups (a power of two, or none), zeroed, on 2 MiB
  // pages when large (store/huge_memory.h).
  struct Index {
    HugeMemory memory;
    Group* groups = nullptr;
    size_t count = 0;
  };
  static Index MakeIndex(size_t count);
  // The entries of `group` whose tag is `tag` (0: the free ones), a bit each.
  static uint32_t Match(const Group& group, uint8_t tag);
  // An entry's place: its group's number times kGroupSlots plus its slot.
  static constexpr size_t kNoSlot = SIZE_MAX;
  // The entry of `id` (whose IndexHash is `hash`) in `index`, or kNoSlot.
  size_t Lookup(const Index& index, uint64_t hash, uint64_t id) const;
  // Puts `row` in the first free entry of `hash`'s probe in `index`,
  // counting the overflow of each full group it passes.
  static void Insert(Index& index, uint64_t hash, uint32_t row);
  // Frees entry `slot` of `index` (of an id whose IndexHash is `hash`),
  // taking its overflow back from the groups before it.
  static void Remove(Index& index, uint64_t hash, size_t slot);
  static uint32_t& RowIn(Index& index, size_t slot) {
    return index.groups[slot / kGroupSlots].rows[slot % kGroupSlots];
  }
  // The rows the index of `groups` takes before it doubles.
  static uint64_t Capacity(size_t groups) { return groups * kGroupSlots * 7 / 8; }
  // The row number in the entry of `id` (in the index, or in the old one
  // while it doubles). REQUIRES: `id` has a row.
  uint32_t& EntryRow(uint64_t id);
  // Starts doubling the index (or makes its first one): the old one's
  // entries move in steps (MoveSome), the rest of a previous doubling at once.
  void Grow();
  // Moves the entries of up to `groups` groups of the old index into the index.
  void MoveSome(size_t groups);
  // Removes row r (its entry already gone): the last row moves into its
  // place.
  void RemoveRow(uint32_t r);
  // Initial values and zero state into `row`.
  void InitRow(uint64_t id, float* row) const;
  // Row i's floats (its id lies in the kIdFloats before them), to read.
  const float* RowAt(uint64_t i) const {
    return reinterpret_cast<const float*>(chunks_.data(i >> chunk_shift_)) +
           (i & (chunk_rows_ - 1)) * slot_floats_ + kIdFloats;
  }
  // The same, to write: saved first for the snapshots that need it.
  float* MutableRow(uint64_t i) {
    BeforeWrite(i);
    return reinterpret_cast<float*>(chunks_.data(i >> chunk_shift_)) +
           (i & (chunk_rows_ - 1)) * slot_floats_ + kIdFloats;
  }
  // Row i's place (its floats, id, use and stamp) is about to change.
  void BeforeWrite(uint64_t i) {
    if (!saving_.empty()) SaveFor(i);
  }
  // Saves row i's place for each snapshot still reading it that has not
  // saved it yet (and forgets the snapshots dropped).
  void SaveFor(uint64_t i);
  uint64_t IdAt(uint64_t i) const {
    uint64_t id;
    std::memcpy(&id, RowAt(i) - kIdFloats, sizeof(id));
    return id;
  }
  void SetId(uint64_t i, uint64_t id) { std::memcpy(MutableRow(i) - kIdFloats, &id, sizeof(id)); }
  const Use& UseAt(uint64_t i) const {
    return reinterpret_cast<const Use*>(use_chunks_.data(i >> chunk_shift_))[i & (chunk_rows_ - 1)];
  }
  Use& MutableUse(uint64_t i) {
    BeforeWrite(i);
    return reinterpret_cast<Use*>(use_chunks_.data(i >> chunk_shift_))[i & (chunk_rows_ - 1)];
  }
  uint32_t& MutableStamp(uint64_t i) {
    BeforeWrite(i);
    return reinterpret_cast<uint32_t*>(
        stamp_chunks_.data(i >> chunk_shift_))[i & (chunk_rows_ - 1)];
  }
  // Keeps the id of a row removed (when tracking).
  void NoteRemoved(uint64_t id);
  // Row r changed now (when tracking).
  void Stamp(uint32_t r) {
    if (tracking_) MutableStamp(r) = stamp_;
  }
  // The list of a row pushed `uses` times.
  uint32_t ListOf(uint32_t uses) const;
  void Link(uint32_t r);
  void Unlink(uint32_t r);
  // Row r counts a use by the current push (once per push): it moves to
  // its list's tail.
  void Touch(uint32_t r);
  // Rebuilds the lists from the rows' uses (after Restore).
  void Relink();
  // The row to evict at the bound: the first head, in the lists' order,
  // that the current push has not named; kNil when none.
  uint32_t Victim() const;
  // Evicts up to `budget` rows idle since clock_ - idle_clocks; returns how many.
  uint64_t EvictIdle(uint64_t budget);
  // The row of `id`, kNil when none.
  uint32_t RowOf(uint64_t id) const;
  // FindOrMake by row number (kNil: none, and no room).
  uint32_t FindOrMakeRow(uint64_t id, bool* made);
  // Fetching ahead, for a pull or push of many ids (Gather, Apply): the
  // ids go in chunks of kChunk; before chunk c is read, the index groups
  // of chunk c + 2 and the rows of chunk c + 1 are fetched (each id's
  // guess: the row of the first entry of its group whose tag matches;
  // kNil when none), so that the misses of a chunk are in flight together
  // and each id's row waits on its group by a chunk's time, not on a miss.
  static constexpr size_t kChunk = 16;
  struct LookAhead {
    LookAhead(std::span<const uint64_t> i, size_t bytes) : ids(i), row_bytes(bytes) {}
    std::span<const uint64_t> ids;
    size_t row_bytes;  // of a guessed row fetched, from its id on
    uint64_t hashes[3][kChunk];  // by chunk number % 3: IndexHash of its ids
    uint32_t guesses[3][kChunk];  // and their guessed rows
  };
  // Fetches chunk 0's groups and rows and chunk 1's groups.
  void StartAhead(LookAhead& ahead) const;
  // At chunk c: fetches the groups of chunk c + 2 and the rows of c + 1.
  void StepAhead(LookAhead& ahead, size_t c) const;

  const uint32_t dim_;
  const uint32_t slots_;
  const size_t stride_;
  // A row's place in its chunk: its id (kIdFloats floats' room), then its
  // stride_ floats, made even so that every id lies on 8 bytes.
  static constexpr size_t kIdFloats = sizeof(uint64_t) / sizeof(float);
  const size_t slot_floats_;
  const InitOptions init_;
  const uint64_t max_rows_;
  Index index_;
  // While the index doubles: the old index, and its groups [0, moved_)
  // whose entries moved (their tags cleared, their overflow counts kept).
  Index old_;
  size_t moved_ = 0;
  // Rows per chunk (a power of two) and its log2.
  const uint64_t chunk_rows_;
  const uint32_t chunk_shift_;
  uint64_t size_ = 0;  // rows
  SharedChunks chunks_;  // chunk_rows_ rows of slot_floats_ floats each
  // Eviction: beside each chunk, its rows' uses; the lists; the next
  // push's number, the first number of the current push and its clock;
  // whether Restore left the lists to be rebuilt.
  const EvictOptions evict_;
  SharedChunks use_chunks_;  // chunk_rows_ Use each, when tracks_use()
  std::vector<List> lists_;
  uint64_t next_seq_ = 1;
  uint64_t push_seq_ = 1;
  uint32_t clock_ = 0;
  bool unlinked_ = false;
  // Apply's undo log under refuse_non_finite: each row it updated, in
  // order (made, or saved: its stride_ floats before the update lie at
  // saved_[at]).
  struct Undo {
    uint64_t id;
    bool made;
    size_t at;
  };
  std::vector<Undo> undo_;
  std::vector<float> saved_;
  // Change tracking: beside each chunk, its rows' stamps; the current
  // stamp; the ids removed since TakeRemoved.
  bool tracking_ = false;
  SharedChunks stamp_chunks_;  // chunk_rows_ stamps each, when tracking_
  uint32_t stamp_ = 0;
  std::vector<uint64_t> removed_;
  bool removed_overflowed_ = false;
  // The snapshots shared (Share) that may still read the rows: each row's
  // place is saved in their log before it first changes. Mutable: Share
  // adds one without changing a row.
  mutable std::vector<std::shared_ptr<SavedRows>> saving_;
  uint64_t saves_ = 0;
};

}  // namespace ps

#endif  // PS_STORE_HASHED_ROWS_H_
