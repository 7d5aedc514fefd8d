#include "server/held_replies.h"

#include <utility>

namespace ps {

void HeldReplies::EndRequest(uint64_t last_seq) {
  in_request_ = false;
  for (auto it = held_.rbegin(); unassigned_ > 0; ++it, --unassigned_) it->seq = last_seq;
}

void HeldReplies::Hold(Held reply, uint64_t seq) {
  if (in_request_) {
    held_.push_back(std::move(reply));
    ++unassigned_;
    return;
  }
  reply.seq = seq;
  held_.push_back(std::move(reply));
}

std::vector<HeldReplies::Held> HeldReplies::TakeCommitted(uint64_t committed) {
  std::vector<Held> out;
  while (held_.size() > unassigned_ && held_.front().seq <= committed) {
    out.push_back(std::move(held_.front()));
    held_.pop_front();
  }
  return out;
}

std::vector<HeldReplies::Held> HeldReplies::TakeAllAssigned() {
  std::vector<Held> out;
  while (held_.size() > unassigned_) {
    out.push_back(std::move(held_.front()));
    held_.pop_front();
  }
  return out;
}

void HeldReplies::HoldForSum(int64_t clock, uint32_t worker, uint64_t session,
                             uint64_t request_id, Held reply) {
  std::vector<uint64_t>& ids = summed_pushes_[clock];
  ids.insert(ids.end(), {worker, session, request_id});
  sum_replies_[clock].push_back(std::move(reply));
}

int64_t HeldReplies::SummedInto(uint32_t worker, uint64_t session, uint64_t request_id) const {
  for (const auto& [clock, ids] : summed_pushes_) {
    for (size_t k = 0; k < ids.size(); k += 3) {
      if (ids[k] == worker && ids[k + 1] == session && ids[k + 2] == request_id) return clock;
    }
  }
  return -1;
}

namespace {

// `recent` without the pushes of `sums` (3 numbers each, per clock).
void ForgetSummed(const std::map<int64_t, std::vector<uint64_t>>& sums, RecentPushes* recent) {
  for (const auto& [clock, ids] : sums) {
    for (size_t k = 0; k < ids.size(); k += 3) {
      recent->Forget(static_cast<uint32_t>(ids[k]), ids[k + 1], ids[k + 2]);
    }
  }
}

}  // namespace

RecentPushes HeldReplies::Replicated(const RecentPushes& recent) const {
  RecentPushes replicated = recent;
  ForgetSummed(summed_pushes_, &replicated);
  return replicated;
}

void HeldReplies::NoteSummed(int64_t clock, uint32_t worker, uint64_t session,
                             uint64_t request_id) {
  std::vector<uint64_t>& ids = acknowledged_sums_[clock];
  ids.insert(ids.end(), {worker, session, request_id});
}

void HeldReplies::SumsApplied(int64_t below) {
  acknowledged_sums_.erase(acknowledged_sums_.begin(), acknowledged_sums_.lower_bound(below));
}

RecentPushes HeldReplies::InRows(const RecentPushes& recent) const {
  RecentPushes in_rows = Replicated(recent);
  ForgetSummed(acknowledged_sums_, &in_rows);
  return in_rows;
}

std::vector<uint64_t> HeldReplies::TakeSummedPushes(int64_t below) {
  std::vector<uint64_t> ids;
  while (!summed_pushes_.empty() && summed_pushes_.begin()->first < below) {
    ids.insert(ids.end(), summed_pushes_.begin()->second.begin(),
               summed_pushes_.begin()->second.end());
    summed_pushes_.erase(summed_pushes_.begin());
  }
  return ids;
}

void HeldReplies::ReleaseSumReplies(int64_t below, uint64_t seq) {
  while (!sum_replies_.empty() && sum_replies_.begin()->first < below) {
    for (Held& reply : sum_replies_.begin()->second) Hold(std::move(reply), seq);
    sum_replies_.erase(sum_replies_.begin());
  }
}

}  // namespace ps
