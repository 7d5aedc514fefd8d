#include "store/push_sketch.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace ps {
namespace {

// One 64-bit mix of the id per row (SplitMix64's finalizer over the id
// and the row's constant): independent enough for Count-Min's rows.
uint64_t RowHash(uint64_t id, uint32_t row) {
  uint64_t x = id + 0x9e3779b97f4a7c15ull * (row + 1);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

PushSketch::PushSketch(uint32_t width)
    : width_(width), counters_(size_t{kDepth} * width, 0) {}

size_t PushSketch::Index(uint64_t id, uint32_t row) const {
  return size_t{row} * width_ + (RowHash(id, row) & (width_ - 1));
}

uint32_t PushSketch::Count(uint64_t id) const {
  uint32_t least = std::numeric_limits<uint16_t>::max();
  for (uint32_t r = 0; r < kDepth; ++r) least = std::min<uint32_t>(least, counters_[Index(id, r)]);
  return least;
}

uint32_t PushSketch::Add(uint64_t id) {
  ++total_;
  size_t at[kDepth];
  uint32_t least = std::numeric_limits<uint16_t>::max();
  for (uint32_t r = 0; r < kDepth; ++r) {
    at[r] = Index(id, r);
    least = std::min<uint32_t>(least, counters_[at[r]]);
  }
  if (least == std::numeric_limits<uint16_t>::max()) return least;
  // Conservative update: only the counters at the minimum grow.
  const auto next = static_cast<uint16_t>(least + 1);
  for (uint32_t r = 0; r < kDepth; ++r) counters_[at[r]] = std::max(counters_[at[r]], next);
  return next;
}

std::span<const std::byte> PushSketch::Data() const {
  return {reinterpret_cast<const std::byte*>(counters_.data()), bytes()};
}

bool PushSketch::Restore(std::span<const std::byte> data) {
  if (data.size() != bytes()) return false;
  std::memcpy(counters_.data(), data.data(), data.size());
  return true;
}

}  // namespace ps
