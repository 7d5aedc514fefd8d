// How often each id of a hashed table was pushed before it had a row: the
// admission filter's count (DESIGN.md section 15, `admit` in
// config/README.md), in bounded memory.
//
// A Count-Min sketch (Cormode and Muthukrishnan 2005) of kDepth rows of
// `width` 16-bit counters (a power of two), with conservative update (Estan
// and Varghese 2002): an increment raises only the counters that hold the
// minimum. Memory: kDepth * width * 2 bytes. Count(id) is never below the
// pushes counted for id; it is above by at most e * total / width with
// probability at least 1 - e^-kDepth (98%), where total is every push
// counted so far, and less in practice with conservative update. Counters
// stop at 65535.
//
// Deterministic: the same pushes in the same order give the same counters
// on every replica (the hashes are fixed functions of the id).
//
// Not thread-safe: the shard's loop owns it.
#ifndef PS_STORE_PUSH_SKETCH_H_
#define PS_STORE_PUSH_SKETCH_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ps {

class PushSketch {
 public:
  static constexpr uint32_t kDepth = 4;

  // REQUIRES: width a power of two, >= 1.
  explicit PushSketch(uint32_t width);

  // Counts one push of `id`; returns the count after it.
  uint32_t Add(uint64_t id);
  // The count of `id` (never below its pushes counted).
  uint32_t Count(uint64_t id) const;

  uint32_t width() const { return width_; }
  size_t bytes() const { return counters_.size() * sizeof(uint16_t); }
  // Pushes counted since the start (or the restore).
  uint64_t total() const { return total_; }

  // The counters as bytes (kDepth rows of width, little-endian), for a
  // checkpoint or a joining replica; Restore takes them back (false when
  // the size is not bytes()).
  std::span<const std::byte> Data() const;
  bool Restore(std::span<const std::byte> data);

 private:
  // The counter of `id` in row `row`.
  size_t Index(uint64_t id, uint32_t row) const;

  const uint32_t width_;
  std::vector<uint16_t> counters_;  // kDepth rows of width_
  uint64_t total_ = 0;
};

}  // namespace ps

#endif  // PS_STORE_PUSH_SKETCH_H_
