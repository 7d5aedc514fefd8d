#include "server/clock_table.h"

#include <algorithm>

namespace ps {

ClockTable::ClockTable(uint32_t num_workers) : clocks_(num_workers, 0) {}

bool ClockTable::Finish(uint32_t worker, int64_t finished) {
  int64_t& c = clocks_[worker];
  if (finished + 1 <= c) return false;
  const bool was_min = c == min_;
  c = finished + 1;
  if (!was_min) return false;
  const int64_t new_min = *std::min_element(clocks_.begin(), clocks_.end());
  const bool advanced = new_min > min_;
  min_ = new_min;
  return advanced;
}

uint32_t ClockTable::slowest_worker() const {
  return static_cast<uint32_t>(std::min_element(clocks_.begin(), clocks_.end()) - clocks_.begin());
}

}  // namespace ps
