// The rows of a hashed table (store/hashed_rows.h) as they were when a
// snapshot shared them (SharedHashedRows), for the rows the table changed
// since: before the table's thread first writes a place (a row's floats,
// its id, its use or its stamp) that the snapshot holds, it saves the
// place's whole state here; the snapshot's thread reads a place from here
// once saved, from the table's own memory otherwise. So the snapshot
// costs the table's thread one copy of a row per row it changes while the
// snapshot is held (not a copy of the table, nor of whole chunks, which a
// push of random ids would all touch at once), and the snapshot stays the
// state of its moment.
//
// Reading a place that is not saved: the reader copies it from the table's
// memory, then looks again whether it was saved meanwhile (an acquire
// fence between): the table saves a place, and publishes that, before it
// writes there (a release fence between), so a copy that may be torn is
// always seen to be one and replaced by the saved state.
//
// Places are numbered as the table's rows: place r lies in chunk
// r / chunk_rows. Every place is saved at most once, so the log holds at
// most the snapshot's rows.
//
// Thread-safe as described: one writer (the table's thread: Save,
// saved), any readers (Find, Done).
#ifndef PS_STORE_SAVED_ROWS_H_
#define PS_STORE_SAVED_ROWS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ps {

class SavedRows {
 public:
  // `places`: the snapshot's rows; `entry_bytes`: a place's state.
  SavedRows(uint64_t places, uint64_t chunk_rows, uint32_t chunk_shift, size_t entry_bytes);

  uint64_t places() const { return places_; }
  size_t entry_bytes() const { return entry_bytes_; }

  // The table's thread: whether place r must be saved before a write
  // (r is the snapshot's, not saved yet, and its chunk not written out).
  bool NeedsSave(uint64_t r) const {
    if (r >= places_) return false;
    const uint64_t c = r >> chunk_shift_;
    if (done_[c].load(std::memory_order_relaxed) != 0) return false;
    const std::atomic<uint32_t>* index = index_[c].load(std::memory_order_relaxed);
    return index == nullptr || index[r & (chunk_rows_ - 1)].load(std::memory_order_relaxed) == 0;
  }
  // The table's thread: room for place r's state (entry_bytes()), to be
  // filled and then published by Publish(r). Throws std::bad_alloc.
  std::byte* Reserve(uint64_t r);
  void Publish(uint64_t r);

  // Any thread: place r's saved state, or null.
  const std::byte* Find(uint64_t r) const {
    const uint64_t c = r >> chunk_shift_;
    const std::atomic<uint32_t>* index = index_[c].load(std::memory_order_acquire);
    if (index == nullptr) return nullptr;
    const uint32_t n = index[r & (chunk_rows_ - 1)].load(std::memory_order_acquire);
    if (n == 0) return nullptr;
    return segments_[(n - 1) / kSegmentEntries].load(std::memory_order_relaxed) +
           static_cast<size_t>((n - 1) % kSegmentEntries) * entry_bytes_;
  }
  // Any thread: the snapshot's places in chunk c are read for good; the
  // table need not save them any more.
  void Done(uint64_t c) { done_[c].store(1, std::memory_order_relaxed); }

  // Places saved so far.
  uint64_t count() const { return count_; }

 private:
  static constexpr uint64_t kSegmentEntries = 4096;
  const uint64_t places_;
  const uint64_t chunk_rows_;
  const uint32_t chunk_shift_;
  const size_t entry_bytes_;
  const uint64_t chunks_;
  // Per chunk: its places' entry numbers (1-based; 0: not saved), made at
  // its first save; whether it is written out.
  std::unique_ptr<std::atomic<std::atomic<uint32_t>*>[]> index_;
  std::unique_ptr<std::atomic<uint8_t>[]> done_;
  std::vector<std::unique_ptr<std::atomic<uint32_t>[]>> index_owners_;
  // The entries, kSegmentEntries to a segment, made as needed.
  std::unique_ptr<std::atomic<std::byte*>[]> segments_;
  std::vector<std::unique_ptr<std::byte[]>> segment_owners_;
  uint64_t count_ = 0;
};

}  // namespace ps

#endif  // PS_STORE_SAVED_ROWS_H_
