#include "server/waiting_requests.h"

#include <algorithm>

namespace ps {

namespace {

uint64_t BytesAfterRoutingId(const std::vector<Frame>& frames) {
  uint64_t bytes = 0;
  for (size_t i = 1; i < frames.size(); ++i) bytes += frames[i].size();
  return bytes;
}

}  // namespace

uint32_t WaitingRequests::connection_count(std::string_view routing_id) const {
  const auto found = per_connection_.find(std::string(routing_id));
  return found == per_connection_.end() ? 0 : found->second;
}

std::optional<WaitingRequests::TimePoint> WaitingRequests::next_deadline() const {
  if (pulls_by_deadline_.empty()) return std::nullopt;
  return pulls_by_deadline_.begin()->first;
}

void WaitingRequests::AddPull(Waiting w, bool read) {
  ++per_connection_[std::string(w.frames[0].view())];
  const uint64_t seq = next_++;
  (read ? reads_by_clock_ : pulls_by_clock_).emplace(w.request.header.clock, seq);
  pulls_by_deadline_.emplace(w.deadline, seq);
  pulls_.emplace(seq, std::move(w));
}

void WaitingRequests::AddPush(Waiting w) {
  ++per_connection_[std::string(w.frames[0].view())];
  push_bytes_ += BytesAfterRoutingId(w.frames);
  pushes_.emplace(next_++, std::move(w));
}

void WaitingRequests::Uncount(const Waiting& w) {
  const auto found = per_connection_.find(std::string(w.frames[0].view()));
  if (found != per_connection_.end() && --found->second == 0) per_connection_.erase(found);
}

WaitingRequests::Waiting WaitingRequests::TakePull(uint64_t seq) {
  auto it = pulls_.find(seq);
  Waiting w = std::move(it->second);
  pulls_.erase(it);
  const std::pair<int64_t, uint64_t> by_clock{w.request.header.clock, seq};
  if (pulls_by_clock_.erase(by_clock) == 0) reads_by_clock_.erase(by_clock);
  pulls_by_deadline_.erase({w.deadline, seq});
  Uncount(w);
  return w;
}

std::vector<WaitingRequests::Waiting> WaitingRequests::TakeReadyPulls(
    const std::function<bool(int64_t)>& ready, const std::function<bool(int64_t)>& read_ready) {
  std::vector<uint64_t> seqs;
  for (auto it = pulls_by_clock_.begin(); it != pulls_by_clock_.end() && ready(it->first); ++it) {
    seqs.push_back(it->second);
  }
  for (auto it = reads_by_clock_.begin(); it != reads_by_clock_.end() && read_ready(it->first);
       ++it) {
    seqs.push_back(it->second);
  }
  std::sort(seqs.begin(), seqs.end());
  std::vector<Waiting> taken;
  taken.reserve(seqs.size());
  for (uint64_t seq : seqs) taken.push_back(TakePull(seq));
  return taken;
}

std::vector<WaitingRequests::Waiting> WaitingRequests::TakeExpiredPulls(TimePoint now) {
  std::vector<Waiting> taken;
  while (!pulls_by_deadline_.empty() && pulls_by_deadline_.begin()->first <= now) {
    taken.push_back(TakePull(pulls_by_deadline_.begin()->second));
  }
  return taken;
}

std::vector<WaitingRequests::Waiting> WaitingRequests::TakeAllPulls() {
  std::vector<Waiting> taken;
  while (!pulls_.empty()) taken.push_back(TakePull(pulls_.begin()->first));
  return taken;
}

std::vector<WaitingRequests::Waiting> WaitingRequests::TakePushes(
    const std::function<bool(const Waiting&)>& ready) {
  std::vector<Waiting> taken;
  for (auto it = pushes_.begin(); it != pushes_.end();) {
    if (!ready(it->second)) {
      ++it;
      continue;
    }
    Uncount(it->second);
    push_bytes_ -= BytesAfterRoutingId(it->second.frames);
    taken.push_back(std::move(it->second));
    it = pushes_.erase(it);
  }
  return taken;
}

}  // namespace ps
