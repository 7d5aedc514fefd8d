#include "server/queued_replies.h"

#include <algorithm>
#include <utility>

namespace ps {

namespace {

// What a charged reply's frames keep alive: the original frames (and so
// the store blocks they share) and the counts they are part of.
struct ChargedReply {
  std::vector<Frame> frames;
  uint64_t bytes = 0;
  std::shared_ptr<std::atomic<uint64_t>> peer, total;
  ~ChargedReply() {
    for (auto* count : {peer.get(), total.get()}) {
      count->fetch_sub(bytes, std::memory_order_relaxed);
    }
  }
};

}  // namespace

QueuedReplies::QueuedReplies() : total_(std::make_shared<Count>(0)) {}

uint64_t QueuedReplies::Queued(std::string_view routing_id) const {
  auto it = peers_.find(routing_id);
  return it == peers_.end() ? 0 : it->second->load(std::memory_order_relaxed);
}

bool QueuedReplies::OverBound(std::string_view routing_id, uint64_t per_connection,
                              uint64_t total) const {
  const uint64_t queued = Queued(routing_id);
  if (queued >= per_connection) return true;
  if (queued == 0 || total_->load(std::memory_order_relaxed) < total) return false;
  uint64_t holding = 0;
  for (const auto& [id, count] : peers_) {
    if (count->load(std::memory_order_relaxed) > 0) ++holding;
  }
  return queued >= total / std::max<uint64_t>(holding, 1);
}

Status QueuedReplies::Charge(std::string_view routing_id, uint64_t bytes,
                             std::span<Frame> frames) {
  auto it = peers_.find(routing_id);
  if (it == peers_.end()) {
    it = peers_.emplace(std::string(routing_id), std::make_shared<Count>(0)).first;
  }
  auto charged = std::make_shared<ChargedReply>();
  charged->bytes = bytes;
  charged->peer = it->second;
  charged->total = total_;
  for (auto* count : {charged->peer.get(), charged->total.get()}) {
    count->fetch_add(bytes, std::memory_order_relaxed);
  }
  // Moved first, then shared from where they stay: a small frame keeps its
  // bytes inside itself, so they move with it.
  charged->frames.reserve(frames.size());
  for (Frame& f : frames) charged->frames.push_back(std::move(f));
  for (size_t i = 0; i < frames.size(); ++i) {
    const Frame& original = charged->frames[i];
    StatusOr<Frame> shared = Frame::Share(original.data(), original.size(), charged);
    if (!shared.ok()) {
      for (Frame& f : frames) f = Frame();
      return shared.status();
    }
    frames[i] = std::move(shared).value();
  }
  return Status::Ok();
}

void QueuedReplies::Sweep() {
  std::erase_if(peers_, [](const auto& peer) {
    return peer.second->load(std::memory_order_relaxed) == 0;
  });
}

uint64_t QueuedReplies::max_per_connection() const {
  uint64_t most = 0;
  for (const auto& [id, count] : peers_) most = std::max(most, count->load(std::memory_order_relaxed));
  return most;
}

}  // namespace ps
