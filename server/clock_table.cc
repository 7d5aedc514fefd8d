#include "server/clock_table.h"

#include <algorithm>

namespace ps {

ClockTable::ClockTable(uint32_t num_workers)
    : clocks_(num_workers, 0), counted_(num_workers, true) {}

bool ClockTable::Finish(uint32_t worker, int64_t finished) {
  int64_t& c = clocks_[worker];
  if (finished + 1 <= c) return false;
  const bool was_min = c == min_ && counted_[worker];
  c = finished + 1;
  return was_min && Recompute();
}

void ClockTable::StartAt(int64_t clock) {
  for (int64_t& c : clocks_) c = std::max(c, clock);
  min_ = std::max(min_, clock);
}

bool ClockTable::Recompute() {
  bool any = false;
  int64_t m = 0;
  for (size_t w = 0; w < clocks_.size(); ++w) {
    if (!counted_[w]) continue;
    m = any ? std::min(m, clocks_[w]) : clocks_[w];
    any = true;
  }
  if (!any || m <= min_) return false;
  min_ = m;
  return true;
}

bool ClockTable::Exclude(uint32_t worker) {
  if (!counted_[worker]) return false;
  counted_[worker] = false;
  return Recompute();
}

void ClockTable::Include(uint32_t worker) {
  if (counted_[worker]) return;
  clocks_[worker] = std::max(clocks_[worker], min_);
  counted_[worker] = true;
}

std::vector<int64_t> ClockTable::Encode() const {
  std::vector<int64_t> data(clocks_);
  for (bool c : counted_) data.push_back(c ? 1 : 0);
  data.push_back(min_);
  return data;
}

bool ClockTable::Decode(const std::vector<int64_t>& data, int64_t limit) {
  const size_t n = clocks_.size();
  if (data.size() != 2 * n + 1) return false;
  const int64_t min = data[2 * n];
  if (min < 0 || min > limit) return false;
  for (size_t w = 0; w < n; ++w) {
    const int64_t clock = data[w], counted = data[n + w];
    if (clock < 0 || clock > limit || (counted != 0 && counted != 1)) return false;
    if (counted == 1 && clock < min) return false;
  }
  for (size_t w = 0; w < n; ++w) {
    clocks_[w] = data[w];
    counted_[w] = data[n + w] == 1;
  }
  min_ = min;
  return true;
}

uint32_t ClockTable::num_at_least(int64_t clock) const {
  return static_cast<uint32_t>(
      std::count_if(clocks_.begin(), clocks_.end(), [clock](int64_t c) { return c >= clock; }));
}

uint32_t ClockTable::num_counted() const {
  return static_cast<uint32_t>(std::count(counted_.begin(), counted_.end(), true));
}

uint32_t ClockTable::slowest_worker() const {
  uint32_t slowest = 0;
  bool any = false;
  for (uint32_t w = 0; w < clocks_.size(); ++w) {
    if (!counted_[w]) continue;
    if (!any || clocks_[w] < clocks_[slowest]) slowest = w;
    any = true;
  }
  return slowest;
}

}  // namespace ps
