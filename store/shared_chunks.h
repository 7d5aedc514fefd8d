// Equal chunks of zeroed memory (store/huge_memory.h) whose holders may
// outlive their place in the list: a hashed table's rows, their uses and
// their stamps (store/hashed_rows.h), which a snapshot reads on another
// thread (SharedHashedRows) while the table drops a chunk it emptied.
//
// Not thread-safe: the owner's thread only; a holder is released on any.
#ifndef PS_STORE_SHARED_CHUNKS_H_
#define PS_STORE_SHARED_CHUNKS_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "store/huge_memory.h"

namespace ps {

class SharedChunks {
 public:
  explicit SharedChunks(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}

  size_t size() const { return data_.size(); }
  std::byte* data(size_t c) const { return data_[c]; }

  // A new last chunk, zeroed. Throws std::bad_alloc.
  void PushBack() {
    owners_.push_back(std::make_shared<HugeMemory>(HugeMemory::Allocate(chunk_bytes_)));
    data_.push_back(static_cast<std::byte*>(owners_.back()->get()));
  }
  // Drops the last chunk (a holder keeps its memory).
  void PopBack() {
    owners_.pop_back();
    data_.pop_back();
  }
  // Keeps chunk c's memory alive while held.
  std::shared_ptr<const void> Hold(size_t c) const { return owners_[c]; }

 private:
  size_t chunk_bytes_;
  std::vector<std::shared_ptr<HugeMemory>> owners_;
  std::vector<std::byte*> data_;  // owners_[c]->get()
};

}  // namespace ps

#endif  // PS_STORE_SHARED_CHUNKS_H_
