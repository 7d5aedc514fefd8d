#include "store/hashed_rows.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>

#include "store/shard_store.h"

namespace ps {
namespace {

// Floats per chunk of rows: about 256 KiB.
constexpr uint64_t kChunkFloats = 64 * 1024;
constexpr size_t kFirstIndexSize = 16;

// The index's hash of an id: SplitMix64's finalizer, independent of the
// slot hash (IdHash), which every id of a shard shares a range of.
uint64_t IndexHash(uint64_t id) {
  id ^= id >> 30;
  id *= 0xbf58476d1ce4e5b9ull;
  id ^= id >> 27;
  id *= 0x94d049bb133111ebull;
  return id ^ (id >> 31);
}

// An occupied entry's tag: 7 bits of the index hash that Home does not use
// (it uses the low bits), with the top bit set; 0 marks a free entry.
uint8_t Tag(uint64_t hash) { return static_cast<uint8_t>((hash >> 57) | 0x80); }

// An old index's entry erased before it moved (no Tag: those have the top
// bit set).
constexpr uint8_t kTombstone = 1;
// Old index slots moved per row made while the index doubles: the doubling
// starts at half the old size in rows and must end before the new index is
// half full (as many rows again), so at least 2; 8 ends it after a 16th
// of the old size in rows made, an 8th of what it may take, so that the
// two indexes are there together while few rows are (a table whose bound
// lies just past a doubling stays within it).
constexpr size_t kMovesPerMake = 8;
// Old index slots moved per id a push names, besides: a table that stops
// growing (at its bound, or whose ids all have rows) still ends its
// doubling, and stops probing two indexes, within a few pushes.
constexpr size_t kMovesPerPushedId = 4;

// lfu's use classes: 1, 2-3, 4-7, ..., 2^15 and more pushes.
constexpr uint32_t kUseClasses = 16;

uint64_t ChunkRows(size_t stride) {
  return std::bit_floor(std::max<uint64_t>(1, kChunkFloats / stride));
}

}  // namespace

HashedRows::HashedRows(uint32_t dim, uint32_t slots, const InitOptions& init, uint64_t max_rows,
                       const EvictOptions& evict)
    : dim_(dim),
      slots_(slots),
      stride_(size_t{dim} * (1 + slots)),
      init_(init),
      max_rows_(std::clamp<uint64_t>(max_rows, 1, kMostRows)),
      chunk_rows_(ChunkRows(stride_)),
      chunk_shift_(static_cast<uint32_t>(std::countr_zero(chunk_rows_))),
      evict_(evict),
      lists_(!evict.enabled() ? 0 : evict.policy == EvictPolicy::kLfu ? kUseClasses : 1) {}

size_t HashedRows::Home(uint64_t id) const { return IndexHash(id) & mask_; }

size_t HashedRows::Probe(uint64_t id) const {
  // The tags first: an id without a row is told apart by them alone (one
  // byte per entry), and an entry's id is read only when its tag matches.
  const uint64_t hash = IndexHash(id);
  const uint8_t tag = Tag(hash);
  size_t i = hash & mask_;
  while (tags_[i] != 0 && (tags_[i] != tag || index_[i].id != id)) i = (i + 1) & mask_;
  return i;
}

size_t HashedRows::ProbeOld(uint64_t id) const {
  if (old_size_ == 0) return kNoSlot;
  const uint64_t hash = IndexHash(id);
  const uint8_t tag = Tag(hash);
  const size_t mask = old_size_ - 1;
  // Tombstones keep the probe going; they match no tag.
  for (size_t i = hash & mask; old_tags_[i] != 0; i = (i + 1) & mask) {
    if (old_tags_[i] == tag && old_index_[i].id == id) return i >= moved_ ? i : kNoSlot;
  }
  return kNoSlot;
}

uint32_t& HashedRows::EntryRow(uint64_t id) {
  const size_t i = Probe(id);
  return tags_[i] != 0 ? index_[i].row : old_index_[ProbeOld(id)].row;
}

const float* HashedRows::Find(uint64_t id) const {
  const uint32_t r = RowOf(id);
  return r == kNil ? nullptr : RowAt(r);
}

float* HashedRows::Find(uint64_t id) {
  return const_cast<float*>(static_cast<const HashedRows*>(this)->Find(id));
}

void HashedRows::Grow() {
  MoveSome(SIZE_MAX);  // a previous doubling's rest (never left, at kMovesPerMake)
  const size_t size = index_size_ == 0 ? kFirstIndexSize : 2 * index_size_;
  old_index_ = std::move(index_);
  old_tags_ = std::move(tags_);
  old_size_ = index_size_;
  moved_ = 0;
  // Neither is written now (the tags are calloc's zero pages): the pages
  // become resident as entries land, so a doubling costs no pause.
  index_ = std::make_unique_for_overwrite<Entry[]>(size);
  tags_.reset(static_cast<uint8_t*>(std::calloc(size, 1)));
  if (tags_ == nullptr) throw std::bad_alloc();
  index_size_ = size;
  mask_ = size - 1;
}

void HashedRows::MoveSome(size_t slots) {
  if (old_size_ == 0) return;
  const size_t end = std::min(old_size_, moved_ + std::min(slots, old_size_));
  for (; moved_ < end; ++moved_) {
    if ((old_tags_[moved_] & 0x80) == 0) continue;  // free, or a tombstone
    const Entry& e = old_index_[moved_];
    Place(Probe(e.id), e.id, e.row);
  }
  if (moved_ == old_size_) {
    old_index_.reset();
    old_tags_.reset();
    old_size_ = 0;
    moved_ = 0;
  }
}

void HashedRows::Place(size_t i, uint64_t id, uint64_t row) {
  index_[i].id = id;
  index_[i].row = static_cast<uint32_t>(row);
  tags_[i] = Tag(IndexHash(id));
}

void HashedRows::InitRow(uint64_t id, float* row) const {
  for (uint32_t c = 0; c < dim_; ++c) row[c] = InitialValue(init_, id, c);
  std::fill(row + dim_, row + stride_, 0.0f);
}

uint32_t HashedRows::RowOf(uint64_t id) const {
  if (index_size_ == 0) return kNil;
  if (const size_t i = Probe(id); tags_[i] != 0) return index_[i].row;
  const size_t old = ProbeOld(id);
  return old == kNoSlot ? kNil : old_index_[old].row;
}

float* HashedRows::FindOrMake(uint64_t id, bool* made) {
  bool is_new = false;
  const uint32_t r = FindOrMakeRow(id, &is_new);
  if (made != nullptr) *made = is_new;
  return r == kNil ? nullptr : RowAt(r);
}

uint32_t HashedRows::FindOrMakeRow(uint64_t id, bool* made) {
  *made = false;
  if (const uint32_t found = RowOf(id); found != kNil) return found;
  if (full()) return kNil;
  // At most half full, so a probe ends soon.
  if (2 * (size_ + 1) > index_size_) Grow();
  const auto r = static_cast<uint32_t>(size_);
  if ((r >> chunk_shift_) == chunks_.size()) {
    chunks_.push_back(std::make_unique_for_overwrite<float[]>(chunk_rows_ * stride_));
    id_chunks_.push_back(std::make_unique_for_overwrite<uint64_t[]>(chunk_rows_));
    if (tracks_use()) use_chunks_.push_back(std::make_unique<Use[]>(chunk_rows_));
  }
  Place(Probe(id), id, r);
  MoveSome(kMovesPerMake);
  ++size_;
  IdAt(r) = id;
  InitRow(id, RowAt(r));
  if (tracks_use()) {
    // Pushed once, by the current push.
    UseAt(r) = Use{.use = {next_seq_++, clock_, 1}};
    if (!unlinked_) Link(r);
  }
  *made = true;
  return r;
}

bool HashedRows::Erase(uint64_t id) {
  if (index_size_ == 0) return false;
  if (const size_t hole = Probe(id); tags_[hole] != 0) {
    EraseEntry(hole);
    return true;
  }
  const size_t old = ProbeOld(id);
  if (old == kNoSlot) return false;
  // The old index is not probed again once moved: a tombstone does.
  old_tags_[old] = kTombstone;
  RemoveRow(old_index_[old].row);
  return true;
}

void HashedRows::EraseEntry(size_t hole) {
  RemoveRow(index_[hole].row);
  // Backward-shift deletion: an entry after the hole whose home is not in
  // (hole, its place] moves into the hole, until a free entry.
  for (size_t i = (hole + 1) & mask_; tags_[i] != 0; i = (i + 1) & mask_) {
    const size_t home = Home(index_[i].id);
    const bool stays = hole <= i ? (hole < home && home <= i) : (hole < home || home <= i);
    if (stays) continue;
    index_[hole] = index_[i];
    tags_[hole] = tags_[i];
    hole = i;
  }
  tags_[hole] = 0;
}

void HashedRows::RemoveRow(uint32_t r) {
  const bool linked = tracks_use() && !unlinked_;
  if (linked) Unlink(r);
  // The last row moves into the erased one's place.
  const auto last = static_cast<uint32_t>(size_ - 1);
  if (r != last) {
    std::memcpy(RowAt(r), RowAt(last), stride_ * sizeof(float));
    IdAt(r) = IdAt(last);
    EntryRow(IdAt(r)) = r;
    if (tracks_use()) {
      Use& moved = UseAt(r);
      moved = UseAt(last);
      if (linked) {
        List& list = lists_[ListOf(moved.use.uses)];
        (moved.prev != kNil ? UseAt(moved.prev).next : list.head) = r;
        (moved.next != kNil ? UseAt(moved.next).prev : list.tail) = r;
      }
    }
  }
  --size_;
  if ((size_ & (chunk_rows_ - 1)) == 0 && (size_ >> chunk_shift_) < chunks_.size()) {
    chunks_.pop_back();  // the last chunk is empty
    id_chunks_.pop_back();
    if (tracks_use()) use_chunks_.pop_back();
  }
}

uint32_t HashedRows::ListOf(uint32_t uses) const {
  if (lists_.size() == 1) return 0;
  return static_cast<uint32_t>(std::min<int>(std::bit_width(std::max(uses, 1u)), kUseClasses)) - 1;
}

void HashedRows::Link(uint32_t r) {
  Use& u = UseAt(r);
  List& list = lists_[ListOf(u.use.uses)];
  u.prev = list.tail;
  u.next = kNil;
  (list.tail != kNil ? UseAt(list.tail).next : list.head) = r;
  list.tail = r;
}

void HashedRows::Unlink(uint32_t r) {
  const Use& u = UseAt(r);
  List& list = lists_[ListOf(u.use.uses)];
  (u.prev != kNil ? UseAt(u.prev).next : list.head) = u.next;
  (u.next != kNil ? UseAt(u.next).prev : list.tail) = u.prev;
}

void HashedRows::Touch(uint32_t r) {
  Use& u = UseAt(r);
  if (u.use.seq >= push_seq_) return;  // the push counted it already
  Unlink(r);
  u.use.seq = next_seq_++;
  u.use.clock = clock_;
  if (u.use.uses < UINT32_MAX) ++u.use.uses;
  Link(r);
}

void HashedRows::Relink() {
  if (!unlinked_) return;
  for (List& list : lists_) list = List();
  std::vector<uint32_t> order(size_);
  for (uint32_t r = 0; r < size_; ++r) order[r] = r;
  std::sort(order.begin(), order.end(), [this](uint32_t a, uint32_t b) {
    const uint64_t sa = UseAt(a).use.seq, sb = UseAt(b).use.seq;
    return sa != sb ? sa < sb : IdAt(a) < IdAt(b);
  });
  for (const uint32_t r : order) {
    Link(r);
    next_seq_ = std::max(next_seq_, UseAt(r).use.seq + 1);
  }
  unlinked_ = false;
}

uint32_t HashedRows::Victim() const {
  // A list is in order of last push: when its head was named by the
  // current push, so was every row of it.
  for (const List& list : lists_) {
    if (list.head != kNil && UseAt(list.head).use.seq < push_seq_) return list.head;
  }
  return kNil;
}

uint64_t HashedRows::EvictIdle(uint64_t budget) {
  if (evict_.idle_clocks == 0 || clock_ < evict_.idle_clocks) return 0;
  // Rows last pushed at a clock below this one are idle_clocks or more
  // clocks old; each list is in order of last push, so they are its head.
  const uint32_t below = clock_ - evict_.idle_clocks + 1;
  uint64_t evicted = 0;
  for (List& list : lists_) {
    while (evicted < budget && list.head != kNil && UseAt(list.head).use.clock < below) {
      Erase(IdAt(list.head));
      ++evicted;
    }
  }
  return evicted;
}

RowUse HashedRows::use(uint64_t i) const { return UseAt(i).use; }

float* HashedRows::Restore(uint64_t id, const RowUse* use) {
  // The lists are rebuilt from the uses once restoring is done.
  if (tracks_use()) unlinked_ = true;
  bool made = false;
  const uint32_t r = FindOrMakeRow(id, &made);
  if (r == kNil) return nullptr;
  if (tracks_use()) {
    RowUse& u = UseAt(r).use;
    u = use != nullptr ? *use : RowUse{next_seq_, 0, 1};
    next_seq_ = std::max(next_seq_, u.seq + 1);
  }
  return RowAt(r);
}

void HashedRows::Gather(std::span<const uint64_t> ids, float* out) const {
  // A pull's ids lie anywhere in the index and the rows: each costs a tag,
  // an entry and a row, three cache misses in a large table, one after
  // the other. So the lookups run as a pipeline: the tag and entry of the
  // id kSlotsAhead on are fetched, the row of the id kRowsAhead on is found
  // and fetched, and the id at hand is copied, with its misses overlapped.
  constexpr size_t kSlotsAhead = 16, kRowsAhead = 8;
  const size_t n = ids.size();
  uint32_t found[kRowsAhead];  // the rows of ids [i, i + kRowsAhead), by i % kRowsAhead
  const auto fetch_slot = [&](uint64_t id) {
    if (index_size_ == 0) return;
    const size_t home = Home(id);
    __builtin_prefetch(&tags_[home]);
    __builtin_prefetch(&index_[home]);
  };
  const auto find_row = [&](size_t i) {
    const uint32_t r = RowOf(ids[i]);
    found[i % kRowsAhead] = r;
    if (r != kNil) __builtin_prefetch(RowAt(r));
  };
  for (size_t i = 0; i < std::min(n, kSlotsAhead); ++i) fetch_slot(ids[i]);
  for (size_t i = 0; i < std::min(n, kRowsAhead); ++i) find_row(i);
  for (size_t i = 0; i < n; ++i) {
    if (i + kSlotsAhead < n) fetch_slot(ids[i + kSlotsAhead]);
    const uint32_t r = found[i % kRowsAhead];
    if (i + kRowsAhead < n) find_row(i + kRowsAhead);
    float* dst = out + i * dim_;
    if (r != kNil) {
      std::memcpy(dst, RowAt(r), dim_ * sizeof(float));
    } else {
      for (uint32_t c = 0; c < dim_; ++c) dst[c] = InitialValue(init_, ids[i], c);
    }
  }
}

HashedRows::PushCounts HashedRows::Apply(std::span<const uint64_t> ids, const float* grads,
                                         const UpdateRule& rule,
                                         const OptimizerOptions& optimizer, float lr,
                                         int64_t step, bool refuse_non_finite, int64_t clock) {
  PushCounts counts;
  FlushSubnormals flush;
  undo_.clear();
  saved_.clear();
  MoveSome(kMovesPerPushedId * std::max<size_t>(ids.size(), 1));
  const bool evicting = evict_.policy != EvictPolicy::kNone;
  if (tracks_use()) {
    Relink();
    push_seq_ = next_seq_;
    clock_ = static_cast<uint32_t>(std::clamp<int64_t>(clock, 0, UINT32_MAX));
    // When the push may not fit, its rows count their use first, so that
    // no row it names is evicted to make room for another.
    if (evicting && size_ + ids.size() > max_rows_) {
      for (const uint64_t id : ids) {
        if (const uint32_t r = RowOf(id); r != kNil) Touch(r);
      }
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    bool made = false;
    uint32_t r = FindOrMakeRow(ids[i], &made);
    if (r == kNil && evicting) {
      if (const uint32_t victim = Victim(); victim != kNil) {
        Erase(IdAt(victim));
        ++counts.evicted;
        r = FindOrMakeRow(ids[i], &made);
      }
    }
    if (r == kNil) {
      ++counts.dropped;
      continue;
    }
    if (!made && tracks_use()) Touch(r);
    float* row = RowAt(r);
    if (refuse_non_finite) {
      undo_.push_back({ids[i], made, saved_.size()});
      if (!made) saved_.insert(saved_.end(), row, row + stride_);
    }
    OptimizerSlots state{};
    for (uint32_t k = 0; k < slots_; ++k) state[k] = row + size_t{dim_} * (1 + k);
    rule.apply(optimizer, row, state, grads + i * dim_, dim_, lr, step);
    if (made) ++counts.made;
    if (AllFinite(row, stride_)) continue;
    ++counts.non_finite;
    if (!refuse_non_finite) continue;
    // Put every row of the push back, newest first: a row named twice gets
    // its oldest values, and a row made by the push goes again.
    for (auto u = undo_.rbegin(); u != undo_.rend(); ++u) {
      if (u->made) {
        Erase(u->id);
      } else {
        std::memcpy(Find(u->id), saved_.data() + u->at, stride_ * sizeof(float));
      }
    }
    counts.made = 0;
    counts.refused = 1;
    counts.refused_id = ids[i];
    break;
  }
  if (tracks_use()) counts.expired = EvictIdle(std::max<uint64_t>(1024, 2 * ids.size()));
  return counts;
}

uint64_t HashedRows::id(uint64_t i) const {
  return IdAt(i);
}

uint64_t HashedRows::RowsWithin(uint64_t bytes, uint32_t dim, uint32_t slots, bool use) {
  const uint64_t row_floats = uint64_t{dim} * (1 + slots);
  // The floats, the id and the use.
  const uint64_t slot_bytes =
      row_floats * sizeof(float) + sizeof(uint64_t) + (use ? sizeof(Use) : 0);
  const uint64_t chunk_bytes = ChunkRows(row_floats) * slot_bytes;
  const uint64_t entry_bytes = sizeof(Entry) + sizeof(uint8_t);
  // For each index size, the rows it holds (half of it) and the rows the
  // bytes left after it and one chunk's rounding pay for; and it must be
  // reached: while the index doubled to it, the old one (half its size)
  // was there too, with the rows made until its entries moved (a quarter
  // of its size, and the old size / kMovesPerMake more).
  uint64_t best = 1;
  for (uint64_t entries = kFirstIndexSize; entries / 2 <= kMostRows; entries *= 2) {
    const uint64_t fixed = entries * entry_bytes + chunk_bytes;
    const uint64_t doubling = fixed + entries / 2 * entry_bytes +
                              (entries / 4 + entries / 2 / kMovesPerMake + 1) * slot_bytes;
    if (fixed >= bytes || (entries > kFirstIndexSize && doubling > bytes)) break;
    best = std::max(best, std::min(entries / 2, (bytes - fixed) / slot_bytes));
  }
  return best;
}

size_t HashedRows::RowBytes(uint32_t dim, uint32_t slots, bool use) {
  // The row's floats, its id and its use, and 2 index entries and their tags.
  return size_t{dim} * (1 + slots) * sizeof(float) + sizeof(uint64_t) +
         (use ? sizeof(Use) : 0) + 2 * (sizeof(Entry) + sizeof(uint8_t));
}

size_t HashedRows::bytes() const {
  return chunks_.size() * chunk_rows_ *
             (stride_ * sizeof(float) + sizeof(uint64_t) + (tracks_use() ? sizeof(Use) : 0)) +
         (index_size_ + old_size_) * (sizeof(Entry) + sizeof(uint8_t));
}

}  // namespace ps
