#include "server/recent_pushes.h"

#include <algorithm>

namespace ps {

RecentPushes::RecentPushes(uint32_t num_workers, size_t per_worker)
    : per_worker_(per_worker), windows_(num_workers) {}

bool RecentPushes::Insert(uint32_t worker, uint64_t session, uint64_t request_id) {
  if (session == 0) return true;
  Window& w = windows_[worker];
  const Id id{session, request_id};
  if (!w.ids.insert(id).second) {
    ++repeats_;
    return false;
  }
  w.order.push_back(id);
  if (w.order.size() > per_worker_) {
    w.ids.erase(w.order.front());
    w.order.pop_front();
  }
  return true;
}

bool RecentPushes::Contains(uint32_t worker, uint64_t session, uint64_t request_id) const {
  if (session == 0 || worker >= windows_.size()) return false;
  return windows_[worker].ids.contains(Id{session, request_id});
}

std::vector<uint64_t> RecentPushes::Encode() const {
  std::vector<uint64_t> data;
  for (const Window& w : windows_) {
    data.push_back(w.order.size());
    for (const Id& id : w.order) {
      data.push_back(id.session);
      data.push_back(id.request);
    }
  }
  return data;
}

bool RecentPushes::Decode(const std::vector<uint64_t>& data) {
  size_t at = 0;
  for (size_t w = 0; w < windows_.size(); ++w) {
    if (at >= data.size() || data[at] > per_worker_ || data.size() - at - 1 < 2 * data[at]) {
      return false;
    }
    at += 1 + 2 * data[at];
  }
  if (at != data.size()) return false;
  at = 0;
  for (uint32_t w = 0; w < windows_.size(); ++w) {
    const uint64_t n = data[at++];
    for (uint64_t i = 0; i < n; ++i, at += 2) Insert(w, data[at], data[at + 1]);
  }
  return true;
}

void RecentPushes::Forget(uint32_t worker, uint64_t session, uint64_t request_id) {
  Window& w = windows_[worker];
  const Id id{session, request_id};
  if (w.ids.erase(id) == 0) return;
  // Rare (a refused push): a linear search of at most per_worker_ ids.
  w.order.erase(std::find(w.order.begin(), w.order.end(), id));
}

}  // namespace ps
