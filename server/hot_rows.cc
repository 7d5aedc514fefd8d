#include "server/hot_rows.h"

#include <algorithm>
#include <utility>

namespace ps {

HotRows::HotRows(size_t capacity, uint32_t stride)
    : capacity_(std::max<size_t>(capacity, 1)), stride_(std::max<uint32_t>(stride, 1)) {
  slots_.reserve(capacity_);
  heap_.reserve(capacity_);
  position_.reserve(capacity_);
  index_.reserve(2 * capacity_);
}

void HotRows::Add(uint32_t table, std::span<const uint64_t> rows) {
  for (size_t i = offset_ % stride_; i < rows.size(); i += stride_) Count(table, rows[i], stride_);
  offset_ = (offset_ + 1) % stride_;
}

void HotRows::Count(uint32_t table, uint64_t row, uint64_t by) {
  const auto key = std::make_pair(table, row);
  if (auto it = index_.find(key); it != index_.end()) {
    slots_[it->second].count += by;
    SiftDown(position_[it->second]);
    return;
  }
  if (slots_.size() < capacity_) {
    const size_t slot = slots_.size();
    slots_.push_back({table, row, by, 0});
    position_.push_back(heap_.size());
    heap_.push_back(slot);
    index_.emplace(key, slot);
    SiftUp(heap_.size() - 1);
    return;
  }
  // Full: the least counted row gives its counter to this one.
  const size_t slot = heap_[0];
  Entry& e = slots_[slot];
  index_.erase(std::make_pair(e.table, e.row));
  e.error = e.count;
  e.count += by;
  e.table = table;
  e.row = row;
  index_.emplace(key, slot);
  SiftDown(0);
}

void HotRows::Swap(size_t a, size_t b) {
  std::swap(heap_[a], heap_[b]);
  position_[heap_[a]] = a;
  position_[heap_[b]] = b;
}

void HotRows::SiftUp(size_t pos) {
  while (pos > 0) {
    const size_t parent = (pos - 1) / 2;
    if (slots_[heap_[parent]].count <= slots_[heap_[pos]].count) return;
    Swap(parent, pos);
    pos = parent;
  }
}

void HotRows::SiftDown(size_t pos) {
  for (;;) {
    size_t least = pos;
    for (size_t child : {2 * pos + 1, 2 * pos + 2}) {
      if (child < heap_.size() && slots_[heap_[child]].count < slots_[heap_[least]].count) {
        least = child;
      }
    }
    if (least == pos) return;
    Swap(pos, least);
    pos = least;
  }
}

std::vector<HotRows::Entry> HotRows::Top(size_t k) const {
  std::vector<Entry> out = slots_;
  const auto first = [](const Entry& a, const Entry& b) {
    if (a.count != b.count) return a.count > b.count;
    return a.table != b.table ? a.table < b.table : a.row < b.row;
  };
  const size_t n = std::min(k, out.size());
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), out.end(), first);
  out.resize(n);
  return out;
}

}  // namespace ps
