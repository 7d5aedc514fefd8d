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
      chunk_shift_(static_cast<uint32_t>(std::countr_zero(chunk_rows_))),
      saved_(stride_) {}

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
  for (uint64_t r = 0; r < ids_.size(); ++r) Place(Probe(ids_[r]), ids_[r], r);
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
  if (2 * (ids_.size() + 1) > index_.size()) Grow();
  const uint64_t r = ids_.size();
  if ((r >> chunk_shift_) == chunks_.size()) {
    chunks_.push_back(std::make_unique_for_overwrite<float[]>(chunk_rows_ * stride_));
  }
  Place(Probe(id), id, r);
  ids_.push_back(id);
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
  const uint64_t last = ids_.size() - 1;
  if (r != last) {
    std::memcpy(RowAt(r), RowAt(last), stride_ * sizeof(float));
    ids_[r] = ids_[last];
    index_[Probe(ids_[r])].row = r;
  }
  ids_.pop_back();
  if ((ids_.size() & (chunk_rows_ - 1)) == 0 && (ids_.size() >> chunk_shift_) < chunks_.size()) {
    chunks_.pop_back();  // the last chunk is empty
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
  for (size_t i = 0; i < ids.size(); ++i) {
    bool made = false;
    float* row = FindOrMake(ids[i], &made);
    if (row == nullptr) {
      ++counts.dropped;
      continue;
    }
    if (refuse_non_finite) std::memcpy(saved_.data(), row, stride_ * sizeof(float));
    OptimizerSlots state{};
    for (uint32_t k = 0; k < slots_; ++k) state[k] = row + size_t{dim_} * (1 + k);
    rule.apply(optimizer, row, state, grads + i * dim_, dim_, lr, step);
    if (!AllFinite(row, stride_)) {
      ++counts.non_finite;
      if (refuse_non_finite) {
        ++counts.refused;
        if (made) {
          Erase(ids[i]);
          continue;
        }
        std::memcpy(row, saved_.data(), stride_ * sizeof(float));
      }
    }
    if (made) ++counts.made;
  }
  return counts;
}

size_t HashedRows::row_bytes() const {
  // The row's floats and its id, and 2 index entries and their tags.
  return stride_ * sizeof(float) + sizeof(uint64_t) + 2 * (sizeof(Entry) + sizeof(uint8_t));
}

size_t HashedRows::bytes() const {
  return chunks_.size() * chunk_rows_ * stride_ * sizeof(float) +
         ids_.capacity() * sizeof(uint64_t) + index_.capacity() * sizeof(Entry) +
         tags_.capacity() * sizeof(uint8_t) +
         saved_.capacity() * sizeof(float);
}

}  // namespace ps
