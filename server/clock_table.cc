#include "server/clock_table.h"

#include <algorithm>
#include <functional>

namespace ps {

ClockTable::ClockTable(uint32_t num_workers, uint32_t quorum)
    : clocks_(num_workers, 0),
      counted_(num_workers, true),
      quorum_(quorum == 0 ? num_workers : std::min(quorum, num_workers)) {}

bool ClockTable::Finish(uint32_t worker, int64_t finished) {
  int64_t& c = clocks_[worker];
  if (finished + 1 <= c) return false;
  const bool was_min = c == min_ && counted_[worker];
  c = finished + 1;
  if (backups()) return RecomputeQuorum();
  return was_min && Recompute();
}

void ClockTable::StartAt(int64_t clock) {
  for (int64_t& c : clocks_) c = std::max(c, clock);
  min_ = std::max(min_, clock);
  members_.erase(members_.begin(), members_.lower_bound(min_));
}

std::vector<uint8_t>& ClockTable::MembersOf(int64_t clock) {
  std::vector<uint8_t>& m = members_[clock];
  if (m.empty()) m.assign(clocks_.size(), kNone);
  return m;
}

bool ClockTable::Admit(uint32_t worker, int64_t clock) {
  if (!backups()) return true;
  if (clock < min_) return false;  // the clock completed without it
  std::vector<uint8_t>& m = MembersOf(clock);
  if (m[worker] == kNone) {
    const auto in = static_cast<uint32_t>(std::count(m.begin(), m.end(), kIn));
    m[worker] = in < quorum_ ? kIn : kOut;
  }
  return m[worker] == kIn;
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

bool ClockTable::RecomputeQuorum() {
  completed_.clear();
  const auto n = static_cast<uint32_t>(clocks_.size());
  bool advanced = false;
  for (;;) {
    const int64_t c = min_;
    auto it = members_.find(c);
    if (it == members_.end()) {
      // No push into c here: it completes once `needed` workers finished
      // it, and so does every clock below the needed-th highest clock, up
      // to the next clock with pushes (no sums to apply: one step).
      std::vector<int64_t> available;
      for (uint32_t w = 0; w < n; ++w) {
        if (counted_[w] || clocks_[w] > c) available.push_back(clocks_[w]);
      }
      const uint32_t needed = std::min<uint32_t>(quorum_, available.size());
      if (needed == 0) break;
      std::nth_element(available.begin(), available.begin() + (needed - 1), available.end(),
                       std::greater<>());
      int64_t to = available[needed - 1];
      if (auto next = members_.upper_bound(c); next != members_.end()) {
        to = std::min(to, next->first);
      }
      if (to <= c) break;
      min_ = to;
      advanced = true;
      continue;
    }
    std::vector<uint8_t>& m = it->second;
    // Workers that can still give clock c a gradient, or gave one: alive,
    // or finished it before they left; never one found late.
    uint32_t available = 0, members = 0, finished = 0;
    for (uint32_t w = 0; w < n; ++w) {
      if (m[w] == kOut || (!counted_[w] && clocks_[w] <= c)) continue;
      ++available;
      if (m[w] == kIn) ++members;
      if (m[w] == kIn && clocks_[w] > c) ++finished;
    }
    const uint32_t needed = std::min(quorum_, available);
    if (needed == 0) break;
    // A worker that finished c without a push here is a member while
    // there is room (in rank order: the same on every replica).
    for (uint32_t w = 0; w < n && finished < needed && members < quorum_; ++w) {
      if (m[w] != kNone || clocks_[w] <= c) continue;
      m[w] = kIn;
      ++members;
      ++finished;
    }
    if (finished < needed) break;
    completed_.push_back({c, finished});
    members_.erase(it);
    ++min_;
    advanced = true;
  }
  return advanced;
}

bool ClockTable::Exclude(uint32_t worker) {
  if (!counted_[worker]) return false;
  counted_[worker] = false;
  if (!backups()) return Recompute();
  // A member that goes before finishing a clock gives its place up (what
  // it pushed stays in the sum, as without backups); pushes of that clock
  // it sends again after a restart are late.
  for (auto& [clock, m] : members_) {
    if (clocks_[worker] <= clock && m[worker] != kNone) m[worker] = kOut;
  }
  return RecomputeQuorum();
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
  data.push_back(static_cast<int64_t>(members_.size()));
  for (const auto& [clock, m] : members_) {
    data.push_back(clock);
    data.insert(data.end(), m.begin(), m.end());
  }
  return data;
}

bool ClockTable::Decode(const std::vector<int64_t>& data, int64_t limit) {
  const size_t n = clocks_.size();
  if (data.size() < 2 * n + 2) return false;
  const int64_t min = data[2 * n];
  if (min < 0 || min > limit) return false;
  for (size_t w = 0; w < n; ++w) {
    const int64_t clock = data[w], counted = data[n + w];
    if (clock < 0 || clock > limit || (counted != 0 && counted != 1)) return false;
    if (!backups() && counted == 1 && clock < min) return false;
  }
  const int64_t open = data[2 * n + 1];
  if (open < 0 || (open > 0 && !backups()) ||
      static_cast<uint64_t>(open) != (data.size() - 2 * n - 2) / (n + 1) ||
      data.size() != 2 * n + 2 + static_cast<size_t>(open) * (n + 1)) {
    return false;
  }
  std::map<int64_t, std::vector<uint8_t>> members;
  for (size_t k = 0, at = 2 * n + 2; k < static_cast<size_t>(open); ++k, at += n + 1) {
    const int64_t clock = data[at];
    if (clock < min || clock > limit || members.count(clock) != 0) return false;
    std::vector<uint8_t> m(n);
    for (size_t w = 0; w < n; ++w) {
      const int64_t state = data[at + 1 + w];
      if (state < kNone || state > kOut) return false;
      m[w] = static_cast<uint8_t>(state);
    }
    if (std::count(m.begin(), m.end(), kIn) > quorum_) return false;
    members.emplace(clock, std::move(m));
  }
  for (size_t w = 0; w < n; ++w) {
    clocks_[w] = data[w];
    counted_[w] = data[n + w] == 1;
  }
  min_ = min;
  members_ = std::move(members);
  completed_.clear();
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
