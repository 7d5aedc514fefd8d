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

uint64_t ChunkRows(size_t stride) {
  return std::bit_floor(std::max<uint64_t>(1, kChunkFloats / stride));
}

}  // namespace

HashedRows::HashedRows(uint32_t dim, uint32_t slots, const InitOptions& init, uint64_t max_rows)
    : dim_(dim),
      slots_(slots),
      stride_(size_t{dim} * (1 + slots)),
      init_(init),
      max_rows_(std::clamp<uint64_t>(max_rows, 1, kMostRows)),
      chunk_rows_(ChunkRows(stride_)),
      chunk_shift_(static_cast<uint32_t>(std::countr_zero(chunk_rows_))) {}

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

const float* HashedRows::Find(uint64_t id) const {
  if (index_.empty()) return nullptr;
  const size_t i = Probe(id);
  return tags_[i] == 0 ? nullptr : RowAt(index_[i].row);
}

float* HashedRows::Find(uint64_t id) {
  return const_cast<float*>(static_cast<const HashedRows*>(this)->Find(id));
}

void HashedRows::Grow() {
  const size_t size = index_.empty() ? kFirstIndexSize : 2 * index_.size();
  index_.assign(size, Entry());
  tags_.assign(size, 0);
  mask_ = size - 1;
  for (uint64_t r = 0; r < size_; ++r) {
    const uint64_t row_id = id(r);
    Place(Probe(row_id), row_id, r);
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

float* HashedRows::FindOrMake(uint64_t id, bool* made) {
  if (made != nullptr) *made = false;
  if (!index_.empty()) {
    const size_t i = Probe(id);
    if (tags_[i] != 0) return RowAt(index_[i].row);
  }
  if (full()) return nullptr;
  // At most half full, so a probe ends soon.
  if (2 * (size_ + 1) > index_.size()) Grow();
  const uint64_t r = size_;
  if ((r >> chunk_shift_) == chunks_.size()) {
    chunks_.push_back(std::make_unique_for_overwrite<float[]>(chunk_rows_ * stride_));
    id_chunks_.push_back(std::make_unique_for_overwrite<uint64_t[]>(chunk_rows_));
  }
  Place(Probe(id), id, r);
  ++size_;
  IdAt(r) = id;
  float* row = RowAt(r);
  InitRow(id, row);
  if (made != nullptr) *made = true;
  return row;
}

bool HashedRows::Erase(uint64_t id) {
  if (index_.empty()) return false;
  size_t hole = Probe(id);
  if (tags_[hole] == 0) return false;
  const uint32_t r = index_[hole].row;
  // The last row moves into the erased one's place.
  const uint64_t last = size_ - 1;
  if (r != last) {
    std::memcpy(RowAt(r), RowAt(last), stride_ * sizeof(float));
    IdAt(r) = IdAt(last);
    index_[Probe(HashedRows::id(r))].row = r;
  }
  --size_;
  if ((size_ & (chunk_rows_ - 1)) == 0 && (size_ >> chunk_shift_) < chunks_.size()) {
    chunks_.pop_back();  // the last chunk is empty
    id_chunks_.pop_back();
  }
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
  index_[hole] = Entry();
  tags_[hole] = 0;
  return true;
}

void HashedRows::Gather(std::span<const uint64_t> ids, float* out) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    float* dst = out + i * dim_;
    if (const float* row = Find(ids[i]); row != nullptr) {
      std::memcpy(dst, row, dim_ * sizeof(float));
    } else {
      for (uint32_t c = 0; c < dim_; ++c) dst[c] = InitialValue(init_, ids[i], c);
    }
  }
}

HashedRows::PushCounts HashedRows::Apply(std::span<const uint64_t> ids, const float* grads,
                                         const UpdateRule& rule,
                                         const OptimizerOptions& optimizer, float lr,
                                         int64_t step, bool refuse_non_finite) {
  PushCounts counts;
  FlushSubnormals flush;
  undo_.clear();
  saved_.clear();
  for (size_t i = 0; i < ids.size(); ++i) {
    bool made = false;
    float* row = FindOrMake(ids[i], &made);
    if (row == nullptr) {
      ++counts.dropped;
      continue;
    }
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
  return counts;
}

uint64_t HashedRows::id(uint64_t i) const {
  return IdAt(i);
}

uint64_t HashedRows::RowsWithin(uint64_t bytes, uint32_t dim, uint32_t slots) {
  const uint64_t row_floats = uint64_t{dim} * (1 + slots);
  const uint64_t slot_bytes = row_floats * sizeof(float) + sizeof(uint64_t);  // and its id
  const uint64_t chunk_bytes = ChunkRows(row_floats) * slot_bytes;
  const uint64_t entry_bytes = sizeof(Entry) + sizeof(uint8_t);
  // For each index size, the rows it holds (half of it) and the rows the
  // bytes left after it and one chunk's rounding pay for.
  uint64_t best = 1;
  for (uint64_t entries = kFirstIndexSize; entries / 2 <= kMostRows; entries *= 2) {
    const uint64_t fixed = entries * entry_bytes + chunk_bytes;
    if (fixed >= bytes) break;
    best = std::max(best, std::min(entries / 2, (bytes - fixed) / slot_bytes));
  }
  return best;
}

size_t HashedRows::RowBytes(uint32_t dim, uint32_t slots) {
  // The row's floats and its id, and 2 index entries and their tags.
  return size_t{dim} * (1 + slots) * sizeof(float) + sizeof(uint64_t) +
         2 * (sizeof(Entry) + sizeof(uint8_t));
}

size_t HashedRows::bytes() const {
  return chunks_.size() * chunk_rows_ * (stride_ * sizeof(float) + sizeof(uint64_t)) +
         index_.capacity() * sizeof(Entry) +
         tags_.capacity() * sizeof(uint8_t) + saved_.capacity() * sizeof(float) +
         undo_.capacity() * sizeof(Undo);
}

}  // namespace ps
