#include "client/hashed_residuals.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

namespace ps {
namespace {

constexpr size_t kFirstIndexEntries = 16;

// Fibonacci hashing: the top bits of the product spread ids that count up
// (the common case) over the whole index.
size_t Home(uint64_t id, size_t entries) {
  return static_cast<size_t>((id * 0x9e3779b97f4a7c15ull) >> (64 - std::countr_zero(entries)));
}

}  // namespace

HashedResiduals::HashedResiduals(uint32_t dim, uint64_t max_rows)
    : dim_(std::max<uint32_t>(dim, 1)),
      // Rows are numbered in 32 bits.
      generation_rows_(std::clamp<uint64_t>(max_rows, 2, 2 * uint64_t{UINT32_MAX - 1}) / 2) {}

uint64_t HashedResiduals::BoundFor(const TableOptions& table) {
  if (table.max_rows != 0) return std::max<uint64_t>(table.max_rows, 2);
  // The most ids whose residuals fit in max_mb: BytesFor grows with the
  // ids, so a binary search finds it.
  const size_t budget = size_t{table.max_mb} << 20;
  uint64_t lo = 2, hi = std::max<uint64_t>(2, budget / (size_t{table.dim} * sizeof(float)));
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (BytesFor(table.dim, mid) <= budget) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

size_t HashedResiduals::IndexEntriesFor(uint64_t rows) {
  return std::max(kFirstIndexEntries, std::bit_ceil(static_cast<size_t>(2 * rows)));
}

size_t HashedResiduals::BytesFor(uint32_t dim, uint64_t max_rows) {
  const uint64_t rows = std::max<uint64_t>(max_rows, 2) / 2;
  return 2 * (rows * dim * sizeof(float) + IndexEntriesFor(rows) * sizeof(Entry));
}

void HashedResiduals::StartRequest() { turned_ = false; }

float* HashedResiduals::Lookup(const Generation& g, uint64_t id) const {
  if (g.rows == 0) return nullptr;
  const size_t mask = g.index.size() - 1;
  for (size_t at = Home(id, g.index.size());; at = (at + 1) & mask) {
    const Entry& e = g.index[at];
    if (e.row == 0) return nullptr;
    if (e.id == id) return g.values.get() + size_t{e.row - 1} * dim_;
  }
}

void HashedResiduals::Grow(Generation& g) {
  std::vector<Entry> old = std::move(g.index);
  g.index.assign(old.empty() ? kFirstIndexEntries : 2 * old.size(), Entry{0, 0});
  const size_t mask = g.index.size() - 1;
  for (const Entry& e : old) {
    if (e.row == 0) continue;
    size_t at = Home(e.id, g.index.size());
    while (g.index[at].row != 0) at = (at + 1) & mask;
    g.index[at] = e;
  }
}

float* HashedResiduals::Add(Generation& g, uint64_t id) {
  if (g.values == nullptr) {
    // The whole generation's room at once, not written: pages become
    // resident as residuals land, and none moves while the generation lives.
    g.values = std::make_unique_for_overwrite<float[]>(generation_rows_ * dim_);
  }
  if (2 * (g.rows + 1) > g.index.size()) Grow(g);
  const size_t mask = g.index.size() - 1;
  size_t at = Home(id, g.index.size());
  while (g.index[at].row != 0) at = (at + 1) & mask;
  g.index[at] = Entry{id, static_cast<uint32_t>(g.rows + 1)};
  float* residual = g.values.get() + g.rows * dim_;
  ++g.rows;
  std::fill(residual, residual + dim_, 0.0f);
  return residual;
}

void HashedResiduals::Turn() {
  dropped_ += previous_.rows - previous_.moved_out;
  std::swap(current_, previous_);
  std::fill(current_.index.begin(), current_.index.end(), Entry{0, 0});
  current_.rows = 0;
  current_.moved_out = 0;
}

float* HashedResiduals::Find(uint64_t id) {
  if (float* residual = Lookup(current_, id)) return residual;
  const float* kept = Lookup(previous_, id);
  const bool full = current_.rows == generation_rows_;
  // Turning twice in one request would drop residuals it handed out.
  if (full && turned_) {
    ++dropped_;
    return nullptr;
  }
  if (kept != nullptr) {
    ++previous_.moved_out;
    if (full) {  // its generation goes now: carried over
      carried_.assign(kept, kept + dim_);
      kept = carried_.data();
    }
  }
  if (full) {
    Turn();
    turned_ = true;
  }
  float* residual = Add(current_, id);
  if (kept != nullptr) std::memcpy(residual, kept, dim_ * sizeof(float));
  return residual;
}

uint64_t HashedResiduals::size() const {
  return current_.rows + previous_.rows - previous_.moved_out;
}

size_t HashedResiduals::bytes() const {
  size_t total = 0;
  for (const Generation* g : {&current_, &previous_}) {
    if (g->values != nullptr) total += generation_rows_ * dim_ * sizeof(float);
    total += g->index.size() * sizeof(Entry);
  }
  return total;
}

}  // namespace ps
