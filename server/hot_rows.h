// The hottest rows of a shard by pushes (the metrics' top k), in bounded
// memory: the Space-Saving algorithm (Metwally et al., ICDT 2005) over
// `capacity` counters. A row already counted gains; a new row takes the
// counter of the least counted one, inheriting its count (an
// over-estimate by at most that count, kept as `error`). Any row pushed
// more than total / capacity times is among the counters.
//
// Only sparse pushes (rows named by keys) are counted: a dense push touches
// every row of a range alike, so no row of it is hotter than another. To
// keep the cost off the request path, every `stride`-th row of a push is
// counted (for `stride` each), from an offset that moves by one each push.
//
// Not thread-safe: the shard's serving thread owns it.
#ifndef PS_SERVER_HOT_ROWS_H_
#define PS_SERVER_HOT_ROWS_H_

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace ps {

class HotRows {
 public:
  struct Entry {
    uint32_t table = 0;
    uint64_t row = 0;
    uint64_t count = 0;  // estimated pushes (an over-estimate by at most `error`)
    uint64_t error = 0;
  };

  // REQUIRES: capacity >= 1, stride >= 1.
  explicit HotRows(size_t capacity = 64, uint32_t stride = 16);

  // Counts the rows of one sparse push of `table`.
  void Add(uint32_t table, std::span<const uint64_t> rows);
  // The `k` most pushed rows, most first (ties: lower table, then row).
  std::vector<Entry> Top(size_t k) const;
  size_t size() const { return slots_.size(); }

 private:
  void Count(uint32_t table, uint64_t row, uint64_t by);
  void SiftDown(size_t pos);
  void SiftUp(size_t pos);
  void Swap(size_t a, size_t b);
  static uint64_t Key(uint32_t table, uint64_t row) { return row * 1315423911u ^ table; }

  const size_t capacity_;
  const uint32_t stride_;
  uint32_t offset_ = 0;
  std::vector<Entry> slots_;
  std::vector<size_t> heap_;      // slot ids, least count first
  std::vector<size_t> position_;  // by slot: its place in heap_
  // (table, row) -> slot; keyed by both, so equal hashes of two rows
  // never merge them.
  struct Hash {
    size_t operator()(const std::pair<uint32_t, uint64_t>& k) const {
      return static_cast<size_t>(Key(k.first, k.second));
    }
  };
  std::unordered_map<std::pair<uint32_t, uint64_t>, size_t, Hash> index_;
};

}  // namespace ps

#endif  // PS_SERVER_HOT_ROWS_H_
