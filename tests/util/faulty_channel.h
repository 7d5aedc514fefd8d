// Test helper: a Channel around the real one that drops, holds back
// (delays), duplicates or reorders messages and cuts the connection, on the
// test's command. Faults are chosen by direction and by the op in the
// message's header, so a test says "duplicate the next PUSH" or "hold the
// next three PULL_OK replies".
//
// A cut is what the client sees when a server goes away: a kDisconnected
// event, then every message either way is lost, until Restore() reports
// kConnected again (and the client sends its unanswered requests again).
// The server itself keeps its connection. Channels made with one link (as
// FaultyChannels makes the client's and its heartbeats' to one shard) are
// cut together: the others lose every message too, without events.
//
// Not thread-safe: used by the thread that drives the client, as the
// client uses it; only the cut is seen by the other channels of its link,
// from their own threads.
#ifndef PS_TESTS_UTIL_FAULTY_CHANNEL_H_
#define PS_TESTS_UTIL_FAULTY_CHANNEL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/channel.h"
#include "common/wire.h"

namespace ps {

class FaultyChannel final : public Channel {
 public:
  enum class Direction { kToServer = 0, kFromServer = 1 };
  enum class Fault {
    kDrop,       // lost
    kDuplicate,  // delivered twice
    kHold,       // kept until ReleaseHeld (delayed, and reordered when released newest first)
  };

  // A link: whether the connection is cut, shared by the channels cut
  // together.
  using Link = std::shared_ptr<std::atomic<bool>>;
  static Link NewLink() { return std::make_shared<std::atomic<bool>>(false); }

  explicit FaultyChannel(std::unique_ptr<Channel> inner, Link link = NewLink())
      : inner_(std::move(inner)), cut_(std::move(link)) {}

  // The next `times` messages going `direction` whose header op is `op`
  // (Op::kUnknown: any op) get `fault`. Rules apply in the order given.
  void Inject(Direction direction, Op op, Fault fault, int times = 1) {
    rules_.push_back({direction, op, fault, times});
  }
  // Delivers the messages held going `direction`: to the server at once,
  // to the client by the next TryRecv calls. Oldest first, or newest first
  // to reorder them.
  Status ReleaseHeld(Direction direction, bool newest_first = false) {
    std::deque<std::vector<Frame>>& held = held_[static_cast<int>(direction)];
    while (!held.empty()) {
      std::vector<Frame> message = std::move(newest_first ? held.back() : held.front());
      if (newest_first) {
        held.pop_back();
      } else {
        held.pop_front();
      }
      if (direction == Direction::kToServer) {
        Status sent = inner_->Send(message);
        if (!sent.ok()) return sent;
      } else {
        ready_.push_back(std::move(message));
      }
    }
    return Status::Ok();
  }
  size_t held(Direction direction) const { return held_[static_cast<int>(direction)].size(); }

  // Cuts the connection (see the top of this file).
  void Cut() {
    TakeInnerEvents();  // a real event not yet seen comes before the cut
    cut_->store(true);
    events_.push_back(ConnectionEvent::kDisconnected);
  }
  void Restore() {
    cut_->store(false);
    events_.push_back(ConnectionEvent::kConnected);
  }

  uint64_t dropped() const { return dropped_; }      // by kDrop or a cut
  uint64_t duplicated() const { return duplicated_; }

  Status Send(std::span<Frame> frames) override {
    if (cut_->load()) return Discard(frames);
    const std::optional<Fault> fault = Match(Direction::kToServer, frames);
    if (!fault) return inner_->Send(frames);
    switch (*fault) {
      case Fault::kDrop:
        return Discard(frames);
      case Fault::kHold:
        held_[0].push_back(Take(frames));
        return Status::Ok();
      case Fault::kDuplicate: {
        std::vector<Frame> copy = Clone(frames);
        Status first = inner_->Send(copy);
        if (!first.ok()) return first;
        ++duplicated_;
        return inner_->Send(frames);
      }
    }
    return inner_->Send(frames);
  }

  StatusOr<bool> TryRecv(std::vector<Frame>* frames) override {
    if (!ready_.empty()) {
      *frames = std::move(ready_.front());
      ready_.pop_front();
      return true;
    }
    while (true) {
      PS_ASSIGN_OR_RETURN(bool got, inner_->TryRecv(frames));
      if (!got) return false;
      if (cut_->load()) {
        ++dropped_;
        continue;
      }
      const std::optional<Fault> fault = Match(Direction::kFromServer, *frames);
      if (!fault) return true;
      switch (*fault) {
        case Fault::kDrop:
          ++dropped_;
          continue;
        case Fault::kHold:
          held_[1].push_back(std::move(*frames));
          continue;
        case Fault::kDuplicate:
          ready_.push_back(Clone(*frames));
          ++duplicated_;
          return true;
      }
    }
  }

  StatusOr<std::optional<ConnectionEvent>> TryNextEvent() override {
    TakeInnerEvents();
    if (events_.empty()) return std::optional<ConnectionEvent>();
    const ConnectionEvent event = events_.front();
    events_.pop_front();
    return std::optional(event);
  }

  PollSockets poll_sockets() override { return inner_->poll_sockets(); }
  bool HasBuffered() const override { return !ready_.empty() || !events_.empty(); }
  void DropUnsentOnClose() override { inner_->DropUnsentOnClose(); }

 private:
  struct Rule {
    Direction direction;
    Op op;
    Fault fault;
    int times;
  };

  std::optional<Fault> Match(Direction direction, std::span<const Frame> frames) {
    if (frames.empty()) return std::nullopt;
    auto header = DecodeHeader({frames[0].data(), frames[0].size()});
    for (auto it = rules_.begin(); it != rules_.end(); ++it) {
      if (it->direction != direction) continue;
      if (it->op != Op::kUnknown && (!header.ok() || header->op != it->op)) continue;
      const Fault fault = it->fault;
      if (--it->times <= 0) rules_.erase(it);
      return fault;
    }
    return std::nullopt;
  }
  // Real connection events, in order; lost while the connection is cut.
  void TakeInnerEvents() {
    while (true) {
      auto event = inner_->TryNextEvent();
      if (!event.ok() || !*event) return;
      if (!cut_->load()) events_.push_back(**event);
    }
  }
  Status Discard(std::span<Frame> frames) {
    Take(frames);
    ++dropped_;
    return Status::Ok();
  }
  static std::vector<Frame> Take(std::span<Frame> frames) {
    std::vector<Frame> message;
    for (Frame& f : frames) message.push_back(std::move(f));
    return message;
  }
  static std::vector<Frame> Clone(std::span<const Frame> frames) {
    std::vector<Frame> message;
    for (const Frame& f : frames) message.push_back(f.Clone());
    return message;
  }

  std::unique_ptr<Channel> inner_;
  std::vector<Rule> rules_;
  std::deque<std::vector<Frame>> held_[2];    // by Direction
  std::deque<std::vector<Frame>> ready_;      // for the client, before the inner channel's
  std::deque<ConnectionEvent> events_;
  const Link cut_;
  uint64_t dropped_ = 0;
  uint64_t duplicated_ = 0;
};

// A ChannelFactory of FaultyChannels around ZmqChannels, for a TestEnv
// (tests/util/test_env.h); the client owns the channels, `channels[shard]`
// gives the test a handle on the client's channel to each shard, valid
// while the client lives. The heartbeats' channel to a shard shares its
// link: cutting the one cuts the other. A primary's channels to a backup
// (ChannelUse::kReplication) share a link of their own, by the backup's
// address (replication_link).
// Thread-safe: the heartbeat thread makes channels too.
class FaultyChannels {
 public:
  ChannelFactory Factory() {
    return [this](Context* context,
                  const ChannelOptions& options) -> StatusOr<std::unique_ptr<Channel>> {
      PS_ASSIGN_OR_RETURN(std::unique_ptr<Channel> inner, ZmqChannel::Connect(context, options));
      std::lock_guard<std::mutex> lock(mu_);
      if (options.use == ChannelUse::kReplication) {
        // Its events are not watched: the test cuts it through its link
        // (from any thread), not with Cut().
        FaultyChannel::Link& link = replication_[options.endpoint];
        if (link == nullptr) link = FaultyChannel::NewLink();
        return std::unique_ptr<Channel>(std::make_unique<FaultyChannel>(std::move(inner), link));
      }
      if (shards_.size() <= options.shard) shards_.resize(options.shard + 1);
      Shard& s = shards_[options.shard];
      if (s.link == nullptr) s.link = FaultyChannel::NewLink();
      auto channel = std::make_unique<FaultyChannel>(std::move(inner), s.link);
      if (options.use == ChannelUse::kRequests) s.requests = channel.get();
      return std::unique_ptr<Channel>(std::move(channel));
    };
  }
  FaultyChannel& operator[](uint32_t shard) {
    std::lock_guard<std::mutex> lock(mu_);
    return *shards_.at(shard).requests;
  }
  // The link of the replication channels to `endpoint` ("tcp://host:port",
  // a backup's address), made now when none was: storing true cuts them
  // (every entry and acknowledgement is lost), false restores them.
  FaultyChannel::Link replication_link(const std::string& endpoint) {
    std::lock_guard<std::mutex> lock(mu_);
    FaultyChannel::Link& link = replication_[endpoint];
    if (link == nullptr) link = FaultyChannel::NewLink();
    return link;
  }

 private:
  struct Shard {
    FaultyChannel* requests = nullptr;
    FaultyChannel::Link link;
  };
  std::mutex mu_;
  std::vector<Shard> shards_;  // guarded by mu_
  std::map<std::string, FaultyChannel::Link> replication_;  // by endpoint; guarded by mu_
};

}  // namespace ps

#endif  // PS_TESTS_UTIL_FAULTY_CHANNEL_H_
