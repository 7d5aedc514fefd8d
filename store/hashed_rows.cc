#include "store/hashed_rows.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <new>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "store/shard_store.h"

namespace ps {
namespace {

// Floats per chunk of rows: about 256 KiB; in a table whose rows may take
// kLargeTableBytes or more, at least a 2 MiB page's worth (2 to 4 MiB), so
// that most of each chunk lies on one (store/huge_memory.h).
constexpr uint64_t kChunkFloats = 64 * 1024;
constexpr uint64_t kLargeTableBytes = uint64_t{64} << 20;
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

// A taken entry's tag: the index hash's top 8 bits (Home uses the low
// ones), 0 made 1, as 0 marks a free entry.
uint8_t Tag(uint64_t hash) {
  const auto tag = static_cast<uint8_t>(hash >> 56);
  return tag != 0 ? tag : 1;
}

// A group's overflow count that reached this stays (too many ids passed
// it to count): probes keep going past it.
constexpr uint8_t kStuck = UINT8_MAX;

// The index's first size, in groups.
constexpr size_t kFirstGroups = 2;
// Old index groups moved per row made while the index doubles: the
// doubling starts at Capacity(old groups) rows and must end before the
// new index is full (as many rows again), so 1 ends it after
// 1 / 10.5 of that: the two indexes are there together while few rows
// are (a table whose bound lies just past a doubling stays within it).
constexpr size_t kGroupsPerMake = 1;
// A group of the old index moved per this many ids a push names,
// besides: a table that stops growing (at its bound, or whose ids all
// have rows) still ends its doubling, and stops probing two indexes,
// within a few pushes.
constexpr size_t kPushedIdsPerGroup = 3;

// lfu's use classes: 1, 2-3, 4-7, ..., 2^15 and more pushes.
constexpr uint32_t kUseClasses = 16;

uint64_t ChunkRows(size_t slot_floats, uint64_t max_rows) {
  const uint64_t slot_bytes = slot_floats * sizeof(float);
  if (max_rows >= kLargeTableBytes / slot_bytes) {
    return std::bit_ceil((kHugePageBytes + slot_bytes - 1) / slot_bytes);
  }
  return std::bit_floor(std::max<uint64_t>(1, kChunkFloats / slot_floats));
}

// The floats a row of `stride` floats takes in its chunk, its id included.
size_t SlotFloats(size_t stride) { return (2 + stride + 1) & ~size_t{1}; }

}  // namespace

HashedRows::HashedRows(uint32_t dim, uint32_t slots, const InitOptions& init, uint64_t max_rows,
                       const EvictOptions& evict)
    : dim_(dim),
      slots_(slots),
      stride_(size_t{dim} * (1 + slots)),
      slot_floats_(SlotFloats(stride_)),
      init_(init),
      max_rows_(std::clamp<uint64_t>(max_rows, 1, kMostRows)),
      chunk_rows_(ChunkRows(slot_floats_, max_rows_)),
      chunk_shift_(static_cast<uint32_t>(std::countr_zero(chunk_rows_))),
      chunks_(chunk_rows_ * slot_floats_ * sizeof(float)),
      evict_(evict),
      use_chunks_(chunk_rows_ * sizeof(Use)),
      lists_(!evict.enabled() ? 0 : evict.policy == EvictPolicy::kLfu ? kUseClasses : 1),
      stamp_chunks_(chunk_rows_ * sizeof(uint32_t)) {}

uint32_t HashedRows::Match(const Group& group, uint8_t tag) {
#if defined(__SSE2__)
  // The tags are the group's first 16 bytes (with its overflow count and
  // spare bytes, masked off).
  const __m128i line = _mm_load_si128(reinterpret_cast<const __m128i*>(group.tags));
  const __m128i same = _mm_cmpeq_epi8(line, _mm_set1_epi8(static_cast<char>(tag)));
  return static_cast<uint32_t>(_mm_movemask_epi8(same)) & ((1u << kGroupSlots) - 1);
#else
  uint32_t bits = 0;
  for (size_t s = 0; s < kGroupSlots; ++s) bits |= uint32_t{group.tags[s] == tag} << s;
  return bits;
#endif
}

HashedRows::Index HashedRows::MakeIndex(size_t count) {
  // A large index is mapped zero pages: nothing is written now, so a
  // doubling costs no pause; the pages become resident as entries land.
  Index index;
  index.memory = HugeMemory::Allocate(count * sizeof(Group));
  index.groups = static_cast<Group*>(index.memory.get());
  index.count = count;
  return index;
}

size_t HashedRows::Lookup(const Index& index, uint64_t hash, uint64_t id) const {
  if (index.count == 0) return kNoSlot;
  const uint8_t tag = Tag(hash);
  const size_t mask = index.count - 1;
  size_t g = hash & mask;
  // At most every group once: overflow counts that stay (kStuck) could
  // otherwise send a probe round for good.
  for (size_t n = 0; n < index.count; ++n, g = (g + 1) & mask) {
    const Group& group = index.groups[g];
    for (uint32_t m = Match(group, tag); m != 0; m &= m - 1) {
      const int slot = std::countr_zero(m);
      if (IdAt(group.rows[slot]) == id) return g * kGroupSlots + slot;
    }
    if (group.overflow == 0) break;
  }
  return kNoSlot;
}

void HashedRows::Insert(Index& index, uint64_t hash, uint32_t row) {
  // Never full (Capacity), so a group with a free entry comes.
  const size_t mask = index.count - 1;
  for (size_t g = hash & mask;; g = (g + 1) & mask) {
    Group& group = index.groups[g];
    if (const uint32_t free = Match(group, 0); free != 0) {
      const int slot = std::countr_zero(free);
      group.tags[slot] = Tag(hash);
      group.rows[slot] = row;
      return;
    }
    if (group.overflow != kStuck) ++group.overflow;
  }
}

void HashedRows::Remove(Index& index, uint64_t hash, size_t slot) {
  const size_t at = slot / kGroupSlots;
  index.groups[at].tags[slot % kGroupSlots] = 0;
  const size_t mask = index.count - 1;
  for (size_t g = hash & mask; g != at; g = (g + 1) & mask) {
    if (index.groups[g].overflow != kStuck) --index.groups[g].overflow;
  }
}

uint32_t& HashedRows::EntryRow(uint64_t id) {
  const uint64_t hash = IndexHash(id);
  const size_t slot = Lookup(index_, hash, id);
  return slot != kNoSlot ? RowIn(index_, slot) : RowIn(old_, Lookup(old_, hash, id));
}

const float* HashedRows::Find(uint64_t id) const {
  const uint32_t r = RowOf(id);
  return r == kNil ? nullptr : RowAt(r);
}

float* HashedRows::Find(uint64_t id) {
  const uint32_t r = RowOf(id);
  return r == kNil ? nullptr : MutableRow(r);
}

void HashedRows::Grow() {
  MoveSome(SIZE_MAX);  // a previous doubling's rest (never left, at kGroupsPerMake)
  old_ = std::move(index_);
  moved_ = 0;
  index_ = MakeIndex(old_.count == 0 ? kFirstGroups : 2 * old_.count);
}

void HashedRows::MoveSome(size_t groups) {
  if (old_.count == 0) return;
  const size_t end = std::min(old_.count, moved_ + std::min(groups, old_.count));
  for (; moved_ < end; ++moved_) {
    Group& group = old_.groups[moved_];
    // The entries' ids lie anywhere beside the rows: fetched together.
    const uint32_t taken = ~Match(group, 0) & ((1u << kGroupSlots) - 1);
    for (uint32_t m = taken; m != 0; m &= m - 1) {
      __builtin_prefetch(RowAt(group.rows[std::countr_zero(m)]) - kIdFloats);
    }
    for (uint32_t m = taken; m != 0; m &= m - 1) {
      const uint32_t row = group.rows[std::countr_zero(m)];
      Insert(index_, IndexHash(IdAt(row)), row);
    }
    // Moved: no lookup matches here again; the overflow counts stay, as
    // probes of the entries still to move pass through.
    std::fill(std::begin(group.tags), std::end(group.tags), uint8_t{0});
  }
  if (moved_ == old_.count) {
    old_ = Index();
    moved_ = 0;
  }
}

void HashedRows::InitRow(uint64_t id, float* row) const {
  for (uint32_t c = 0; c < dim_; ++c) row[c] = InitialValue(init_, id, c);
  std::fill(row + dim_, row + stride_, 0.0f);
}

uint32_t HashedRows::RowOf(uint64_t id) const {
  const uint64_t hash = IndexHash(id);
  if (const size_t slot = Lookup(index_, hash, id); slot != kNoSlot) {
    return index_.groups[slot / kGroupSlots].rows[slot % kGroupSlots];
  }
  if (const size_t slot = Lookup(old_, hash, id); slot != kNoSlot) {
    return old_.groups[slot / kGroupSlots].rows[slot % kGroupSlots];
  }
  return kNil;
}

float* HashedRows::FindOrMake(uint64_t id, bool* made) {
  bool is_new = false;
  const uint32_t r = FindOrMakeRow(id, &is_new);
  if (made != nullptr) *made = is_new;
  return r == kNil ? nullptr : MutableRow(r);
}

uint32_t HashedRows::FindOrMakeRow(uint64_t id, bool* made) {
  *made = false;
  if (const uint32_t found = RowOf(id); found != kNil) return found;
  if (full()) return kNil;
  if (size_ + 1 > Capacity(index_.count)) Grow();
  const auto r = static_cast<uint32_t>(size_);
  if ((r >> chunk_shift_) == chunks_.size()) {
    chunks_.PushBack();
    if (tracks_use()) use_chunks_.PushBack();
    if (tracking_) stamp_chunks_.PushBack();
  }
  // The row's id first: lookups read it through the entry.
  SetId(r, id);
  ++size_;
  Insert(index_, IndexHash(id), r);
  MoveSome(kGroupsPerMake);
  InitRow(id, MutableRow(r));
  Stamp(r);
  if (tracks_use()) {
    // Pushed once, by the current push.
    MutableUse(r) = Use{.use = {next_seq_++, clock_, 1}};
    if (!unlinked_) Link(r);
  }
  *made = true;
  return r;
}

bool HashedRows::Erase(uint64_t id) {
  const uint64_t hash = IndexHash(id);
  for (Index* index : {&index_, &old_}) {
    if (const size_t slot = Lookup(*index, hash, id); slot != kNoSlot) {
      const uint32_t r = RowIn(*index, slot);
      Remove(*index, hash, slot);
      RemoveRow(r);
      if (tracking_) NoteRemoved(id);
      return true;
    }
  }
  return false;
}

void HashedRows::RemoveRow(uint32_t r) {
  const bool linked = tracks_use() && !unlinked_;
  if (linked) Unlink(r);
  // The last row moves into the erased one's place.
  const auto last = static_cast<uint32_t>(size_ - 1);
  if (r != last) {
    // The destination first: made writable, its chunk may be a copy that
    // the source (in the same chunk) must be read from.
    float* to = MutableRow(r) - kIdFloats;
    std::memcpy(to, RowAt(last) - kIdFloats, slot_floats_ * sizeof(float));
    EntryRow(IdAt(r)) = r;
    if (tracking_) MutableStamp(r) = stamp(last);
    if (tracks_use()) {
      const Use moved = MutableUse(r) = UseAt(last);
      if (linked) {
        List& list = lists_[ListOf(moved.use.uses)];
        (moved.prev != kNil ? MutableUse(moved.prev).next : list.head) = r;
        (moved.next != kNil ? MutableUse(moved.next).prev : list.tail) = r;
      }
    }
  }
  --size_;
  if ((size_ & (chunk_rows_ - 1)) == 0 && (size_ >> chunk_shift_) < chunks_.size()) {
    // The last chunk is empty. A snapshot keeps its memory as it was:
    // the rows made there later go to a new chunk, nothing to save.
    for (const std::shared_ptr<SavedRows>& log : saving_) {
      if (chunks_.size() - 1 < (log->places() + chunk_rows_ - 1) / chunk_rows_) {
        log->Done(chunks_.size() - 1);
      }
    }
    chunks_.PopBack();
    if (tracks_use()) use_chunks_.PopBack();
    if (tracking_) stamp_chunks_.PopBack();
  }
}

uint32_t HashedRows::ListOf(uint32_t uses) const {
  if (lists_.size() == 1) return 0;
  return static_cast<uint32_t>(std::min<int>(std::bit_width(std::max(uses, 1u)), kUseClasses)) - 1;
}

void HashedRows::Link(uint32_t r) {
  Use& u = MutableUse(r);
  List& list = lists_[ListOf(u.use.uses)];
  u.prev = list.tail;
  u.next = kNil;
  (list.tail != kNil ? MutableUse(list.tail).next : list.head) = r;
  list.tail = r;
}

void HashedRows::Unlink(uint32_t r) {
  const Use u = UseAt(r);
  List& list = lists_[ListOf(u.use.uses)];
  (u.prev != kNil ? MutableUse(u.prev).next : list.head) = u.next;
  (u.next != kNil ? MutableUse(u.next).prev : list.tail) = u.prev;
}

void HashedRows::Touch(uint32_t r) {
  if (UseAt(r).use.seq >= push_seq_) return;  // the push counted it already
  Stamp(r);  // its use changes, also when the push is refused
  Unlink(r);
  Use& u = MutableUse(r);
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
  Stamp(r);
  if (tracks_use()) {
    RowUse& u = MutableUse(r).use;
    u = use != nullptr ? *use : RowUse{next_seq_, 0, 1};
    next_seq_ = std::max(next_seq_, u.seq + 1);
  }
  return MutableRow(r);
}

void HashedRows::StepAhead(LookAhead& ahead, size_t c) const {
  const size_t n = ahead.ids.size();
  const auto chunk = [n](size_t k) {
    return std::pair<size_t, size_t>{std::min(n, k * kChunk), std::min(n, (k + 1) * kChunk)};
  };
  if (index_.count == 0) {
    std::fill_n(ahead.guesses[(c + 1) % 3], kChunk, kNil);
    return;
  }
  const size_t mask = index_.count - 1;
  // The groups of chunk c + 2.
  const auto [group_begin, group_end] = chunk(c + 2);
  uint64_t* hash = ahead.hashes[(c + 2) % 3];
  for (size_t i = group_begin; i < group_end; ++i) {
    hash[i - group_begin] = IndexHash(ahead.ids[i]);
    __builtin_prefetch(&index_.groups[hash[i - group_begin] & mask]);
  }
  // The guessed rows of chunk c + 1, whose groups were fetched a step ago.
  const auto [row_begin, row_end] = chunk(c + 1);
  const uint64_t* row_hash = ahead.hashes[(c + 1) % 3];
  uint32_t* guess = ahead.guesses[(c + 1) % 3];
  for (size_t i = row_begin; i < row_end; ++i) {
    const uint64_t h = row_hash[i - row_begin];
    const Group& group = index_.groups[h & mask];
    uint32_t r = kNil;
    if (const uint32_t m = Match(group, Tag(h)); m != 0) {
      r = group.rows[std::countr_zero(m)];
      const auto* line = reinterpret_cast<const char*>(RowAt(r) - kIdFloats);
      for (size_t at = 0; at < ahead.row_bytes; at += 64) __builtin_prefetch(line + at);
    }
    guess[i - row_begin] = r;
  }
}

void HashedRows::StartAhead(LookAhead& ahead) const {
  // Chunk 0's groups (its hashes in slot 0), then the step before chunk
  // 0's: the groups of chunk 1 and the rows of chunk 0.
  const size_t n = ahead.ids.size();
  if (index_.count != 0) {
    for (size_t i = 0; i < std::min(n, kChunk); ++i) {
      ahead.hashes[0][i] = IndexHash(ahead.ids[i]);
      __builtin_prefetch(&index_.groups[ahead.hashes[0][i] & (index_.count - 1)]);
    }
  }
  StepAhead(ahead, SIZE_MAX);  // c = -1: c + 1 and c + 2 wrap to 0 and 1
}

void HashedRows::Gather(std::span<const uint64_t> ids, float* out) const {
  // A pull's ids lie anywhere in the index and the rows: each costs its
  // index group, then its row's id and values, cache misses in a large
  // table, the second waiting on the first. So they are fetched ahead
  // (LookAhead): the groups of the chunk after next and the guessed rows
  // of the next, whose loads do not wait on each other, so that a
  // chunk's misses are in flight together. Each id is then checked
  // against its guessed row's id and its values copied; an id that is not
  // its guess's (a tag shared in its group, an id past its group or in the
  // old index while it doubles, or no row) is looked up in full.
  constexpr size_t kLinesAhead = 4;  // at most this many lines of a row's values
  LookAhead ahead(ids, std::min<size_t>((kIdFloats + dim_) * sizeof(float), kLinesAhead * 64));
  StartAhead(ahead);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i % kChunk == 0) StepAhead(ahead, i / kChunk);
    uint32_t r = ahead.guesses[(i / kChunk) % 3][i % kChunk];
    if (r == kNil || IdAt(r) != ids[i]) r = RowOf(ids[i]);
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
  MoveSome(ids.size() / kPushedIdsPerGroup + 1);
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
  // Each id's group and row fetched ahead, as in Gather (only fetched:
  // the loop looks each id up itself, as a push may move rows).
  constexpr size_t kLinesAhead = 8;  // at most this many lines of a row
  LookAhead ahead(ids, std::min<size_t>(slot_floats_ * sizeof(float), kLinesAhead * 64));
  StartAhead(ahead);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i % kChunk == 0) StepAhead(ahead, i / kChunk);
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
    Stamp(r);
    float* row = MutableRow(r);
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

uint64_t HashedRows::RowsWithin(uint64_t bytes, uint32_t dim, uint32_t slots, bool use,
                                bool stamps) {
  const uint64_t slot_floats = SlotFloats(uint64_t{dim} * (1 + slots));
  // The id, the floats, the use and the stamp.
  const uint64_t slot_bytes =
      slot_floats * sizeof(float) + (use ? sizeof(Use) : 0) + (stamps ? sizeof(uint32_t) : 0);
  const uint64_t chunk_bytes = ChunkRows(slot_floats, bytes / slot_bytes) * slot_bytes;
  // For each index size, the rows it holds (Capacity) and the rows the
  // bytes left after it and one chunk's rounding pay for; and it must be
  // reached: while the index doubled to it, the old one (half its size)
  // was there too, with the rows made until its groups moved (the old
  // one's capacity, and a row for each kGroupsPerMake of its groups).
  uint64_t best = 1;
  for (uint64_t groups = kFirstGroups; Capacity(groups / 2) <= kMostRows; groups *= 2) {
    const uint64_t fixed = groups * sizeof(Group) + chunk_bytes;
    const uint64_t doubling = fixed + groups / 2 * sizeof(Group) +
                              (Capacity(groups / 2) + groups / 2 / kGroupsPerMake + 1) * slot_bytes;
    if (fixed >= bytes || (groups > kFirstGroups && doubling > bytes)) break;
    best = std::max(best, std::min(Capacity(groups), (bytes - fixed) / slot_bytes));
  }
  return best;
}

size_t HashedRows::RowBytes(uint32_t dim, uint32_t slots, bool use, bool stamps) {
  // The row's floats, its id, its use and its stamp, and its part of the
  // index at its fullest (rounded up).
  const size_t index = (2 * sizeof(Group) + Capacity(2) - 1) / Capacity(2);
  return SlotFloats(size_t{dim} * (1 + slots)) * sizeof(float) + (use ? sizeof(Use) : 0) +
         (stamps ? sizeof(uint32_t) : 0) + index;
}

void HashedRows::NoteRemoved(uint64_t id) {
  if (removed_overflowed_) return;
  if (removed_.size() >= max_rows_ / 4 + 1024) {
    removed_overflowed_ = true;
    removed_ = {};
    return;
  }
  removed_.push_back(id);
}

void HashedRows::TrackChanges() {
  if (tracking_) return;
  tracking_ = true;
  // Rows made before count as changed at stamp 0.
  for (size_t c = 0; c < chunks_.size(); ++c) stamp_chunks_.PushBack();
}

size_t HashedRows::bytes() const {
  return chunks_.size() * chunk_rows_ *
             (slot_floats_ * sizeof(float) + (tracks_use() ? sizeof(Use) : 0) +
              (tracking_ ? sizeof(uint32_t) : 0)) +
         (index_.count + old_.count) * sizeof(Group);
}

}  // namespace ps
