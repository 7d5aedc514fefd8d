#include "server/recent_pushes.h"

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

}  // namespace ps
