// HashedRows' rows shared with snapshots (store/hashed_rows.h: Share) and
// their places saved before a change (SaveFor, store/saved_rows.h).
#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>

#include "store/hashed_rows.h"

namespace ps {

SharedHashedRows HashedRows::Share() const {
  SharedHashedRows shared;
  shared.rows = size_;
  shared.chunk_rows = chunk_rows_;
  shared.chunk_shift = chunk_shift_;
  shared.row_floats = slot_floats_;
  shared.use_bytes = tracks_use() ? sizeof(Use) : 0;
  shared.stamps = tracking_;
  static_assert(offsetof(Use, use) == 0, "a shared use starts with its RowUse");
  shared.chunks.resize(chunks_.size());
  for (size_t c = 0; c < chunks_.size(); ++c) {
    SharedHashedRows::Chunk& chunk = shared.chunks[c];
    chunk.rows_holder = chunks_.Hold(c);
    chunk.rows = reinterpret_cast<const float*>(chunks_.data(c));
    if (tracks_use()) {
      chunk.uses_holder = use_chunks_.Hold(c);
      chunk.uses = use_chunks_.data(c);
    }
    if (tracking_) {
      chunk.stamps_holder = stamp_chunks_.Hold(c);
      chunk.stamps = reinterpret_cast<const uint32_t*>(stamp_chunks_.data(c));
    }
  }
  shared.saved = std::make_shared<SavedRows>(
      size_, chunk_rows_, chunk_shift_,
      slot_floats_ * sizeof(float) + shared.use_bytes + (tracking_ ? sizeof(uint32_t) : 0));
  saving_.push_back(shared.saved);
  return shared;
}

void HashedRows::SaveFor(uint64_t i) {
  const size_t row_bytes = slot_floats_ * sizeof(float);
  for (size_t k = 0; k < saving_.size();) {
    if (saving_[k].use_count() == 1) {
      // The snapshot is gone (released on its thread): see its reads of
      // the rows before writing over them.
      std::atomic_thread_fence(std::memory_order_acquire);
      saving_.erase(saving_.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    SavedRows& log = *saving_[k++];
    if (!log.NeedsSave(i)) continue;
    std::byte* entry = log.Reserve(i);
    std::memcpy(entry, RowAt(i) - kIdFloats, row_bytes);
    if (tracks_use()) std::memcpy(entry + row_bytes, &UseAt(i), sizeof(Use));
    if (tracking_) {
      const uint32_t s = stamp(i);
      std::memcpy(entry + row_bytes + (tracks_use() ? sizeof(Use) : 0), &s, sizeof(s));
    }
    log.Publish(i);
    ++saves_;
  }
}

}  // namespace ps
