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

void RecentPushes::Forget(uint32_t worker, uint64_t session, uint64_t request_id) {
  Window& w = windows_[worker];
  const Id id{session, request_id};
  if (w.ids.erase(id) == 0) return;
  // Rare (a refused push): a linear search of at most per_worker_ ids.
  w.order.erase(std::find(w.order.begin(), w.order.end(), id));
}

}  // namespace ps
