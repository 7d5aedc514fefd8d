#include "store/saved_rows.h"

namespace ps {

SavedRows::SavedRows(uint64_t places, uint64_t chunk_rows, uint32_t chunk_shift,
                     size_t entry_bytes)
    : places_(places),
      chunk_rows_(chunk_rows),
      chunk_shift_(chunk_shift),
      entry_bytes_(entry_bytes),
      chunks_((places + chunk_rows - 1) / chunk_rows),
      index_(new std::atomic<std::atomic<uint32_t>*>[chunks_]),
      done_(new std::atomic<uint8_t>[chunks_]),
      segments_(new std::atomic<std::byte*>[places / kSegmentEntries + 1]) {
  for (uint64_t c = 0; c < chunks_; ++c) {
    index_[c].store(nullptr, std::memory_order_relaxed);
    done_[c].store(0, std::memory_order_relaxed);
  }
  for (uint64_t s = 0; s <= places / kSegmentEntries; ++s) {
    segments_[s].store(nullptr, std::memory_order_relaxed);
  }
}

std::byte* SavedRows::Reserve(uint64_t r) {
  const uint64_t c = r >> chunk_shift_;
  if (index_[c].load(std::memory_order_relaxed) == nullptr) {
    auto index = std::make_unique<std::atomic<uint32_t>[]>(chunk_rows_);
    for (uint64_t i = 0; i < chunk_rows_; ++i) index[i].store(0, std::memory_order_relaxed);
    index_[c].store(index.get(), std::memory_order_release);
    index_owners_.push_back(std::move(index));
  }
  const uint64_t segment = count_ / kSegmentEntries;
  if (count_ % kSegmentEntries == 0) {
    segment_owners_.push_back(std::make_unique<std::byte[]>(kSegmentEntries * entry_bytes_));
    segments_[segment].store(segment_owners_.back().get(), std::memory_order_release);
  }
  return segment_owners_.back().get() + (count_ % kSegmentEntries) * entry_bytes_;
}

void SavedRows::Publish(uint64_t r) {
  ++count_;
  std::atomic<uint32_t>* index = index_[r >> chunk_shift_].load(std::memory_order_relaxed);
  index[r & (chunk_rows_ - 1)].store(static_cast<uint32_t>(count_), std::memory_order_release);
  // The write that follows the save must not be seen before it.
  std::atomic_thread_fence(std::memory_order_release);
}

}  // namespace ps
