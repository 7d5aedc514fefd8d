#include "client/request_tracker.h"

#include <algorithm>
#include <string>

namespace ps {

RequestTracker::RequestTracker(const Clock* clock, std::chrono::milliseconds timeout,
                               uint32_t num_shards)
    : clock_(clock), timeout_(timeout), in_flight_(num_shards, 0) {}

Ticket RequestTracker::NewTicket(Callback done, Callback finish) {
  const Ticket t = next_ticket_++;
  TicketState& st = tickets_[t];
  st.remaining = 1;
  st.done = std::move(done);
  st.finish = std::move(finish);
  return t;
}

void RequestTracker::Fail(Ticket ticket, const Status& status) {
  auto it = tickets_.find(ticket);
  if (it != tickets_.end() && it->second.status.ok()) it->second.status = status;
}

void RequestTracker::Release(Ticket ticket, const Status& status) {
  Fail(ticket, status);
  auto t = tickets_.find(ticket);
  if (t == tickets_.end()) return;
  if (--t->second.remaining > 0) return;
  staleness_wait_us_ += t->second.waited_us;
  if (t->second.finish) {
    Callback finish = std::move(t->second.finish);
    finish(t->second.status);
  }
  if (t->second.done) {
    // Forgotten first: the callback may issue new requests.
    Callback done = std::move(t->second.done);
    Status result = t->second.status;
    tickets_.erase(t);
    done(result);
  }
}

void RequestTracker::NoteWait(Ticket ticket, uint64_t waited_us) {
  if (auto t = tickets_.find(ticket); t != tickets_.end()) {
    t->second.waited_us = std::max(t->second.waited_us, waited_us);
  }
}

Status RequestTracker::CheckWaitable(Ticket ticket) const {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) {
    return InvalidArgumentError("ticket " + std::to_string(ticket) +
                                " is unknown or was already waited for");
  }
  if (it->second.done) {
    return InvalidArgumentError("ticket " + std::to_string(ticket) +
                                " has a callback; use WaitAll() or Poll() to complete it");
  }
  return Status::Ok();
}

bool RequestTracker::HasPartAt(Ticket ticket, Op op, int64_t clock) const {
  for (const auto& [id, part] : parts_) {
    if ((ticket == 0 || part.ticket == ticket) && part.op == op && part.clock == clock) return true;
  }
  return false;
}

bool RequestTracker::Done(Ticket ticket) const {
  auto it = tickets_.find(ticket);
  return it == tickets_.end() || it->second.remaining == 0;
}

Status RequestTracker::Take(Ticket ticket) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return InternalError("ticket " + std::to_string(ticket) + " is gone");
  Status result = std::move(it->second.status);
  tickets_.erase(it);
  return result;
}

Status RequestTracker::TakeAll() {
  Status first;
  for (auto it = tickets_.begin(); it != tickets_.end();) {
    if (first.ok() && !it->second.status.ok()) first = it->second.status;
    it = tickets_.erase(it);
  }
  return first;
}

Part& RequestTracker::Add(uint64_t request_id, Part&& part) {
  part.deadline = clock_->Now() + timeout_;
  deadlines_.emplace(part.deadline, request_id);
  ++in_flight_[part.shard];
  if (auto t = tickets_.find(part.ticket); t != tickets_.end()) ++t->second.remaining;
  return parts_.insert_or_assign(request_id, std::move(part)).first->second;
}

Part* RequestTracker::Find(uint64_t request_id) {
  auto it = parts_.find(request_id);
  return it == parts_.end() ? nullptr : &it->second;
}

const Part* RequestTracker::Find(uint64_t request_id) const {
  auto it = parts_.find(request_id);
  return it == parts_.end() ? nullptr : &it->second;
}

void RequestTracker::FailPart(Ticket ticket, uint32_t shard, const Status& status) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end() || status.ok()) return;
  TicketState& t = it->second;
  if (t.status.ok()) {
    t.status = status;
    t.failed_shards.push_back(shard);
    return;
  }
  if (t.failed_shards.empty() || t.failed_shards.size() > kMaxOtherShardErrors ||
      std::find(t.failed_shards.begin(), t.failed_shards.end(), shard) !=
          t.failed_shards.end()) {
    return;
  }
  t.failed_shards.push_back(shard);
  t.status = Status(t.status.code(), t.status.message() + "; and " + status.ToString());
}

void RequestTracker::Finish(uint64_t request_id, const Status& status) {
  auto it = parts_.find(request_id);
  if (it == parts_.end()) return;
  const Ticket ticket = it->second.ticket;
  const uint32_t shard = it->second.shard;
  --in_flight_[shard];
  parts_.erase(it);
  FailPart(ticket, shard, status);
  Release(ticket, Status::Ok());
}

std::vector<uint64_t> RequestTracker::InFlightTo(uint32_t shard) const {
  std::vector<uint64_t> ids;
  for (const auto& [id, part] : parts_) {
    if (part.shard == shard) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());  // request ids grow with each send
  return ids;
}

bool RequestTracker::Resent(uint64_t request_id, Part& part) {
  if (part.resends >= kMaxResends) return false;
  ++part.resends;
  Extend(request_id, part, clock_->Now() + timeout_);
  return true;
}

std::optional<Clock::TimePoint> RequestTracker::NextDeadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.top().first;
}

uint64_t RequestTracker::PopExpired(Clock::TimePoint now) {
  while (!deadlines_.empty() && deadlines_.top().first <= now) {
    const auto [deadline, id] = deadlines_.top();
    deadlines_.pop();
    auto it = parts_.find(id);
    // Answered, or given a new deadline since.
    if (it == parts_.end() || it->second.deadline != deadline) continue;
    return id;
  }
  return 0;
}

void RequestTracker::Extend(uint64_t request_id, Part& part, Clock::TimePoint deadline) {
  part.deadline = deadline;
  deadlines_.emplace(deadline, request_id);
}

}  // namespace ps
