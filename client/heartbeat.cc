#include "client/heartbeat.h"

#include "common/wire.h"

namespace ps {

HeartbeatSender::HeartbeatSender(uint32_t worker, std::chrono::milliseconds interval,
                                 const CurveOptions& curve, Env* env, int reconnect_ms)
    : worker_(worker),
      interval_(interval),
      curve_(curve),
      env_(env != nullptr ? env : Env::Default()),
      reconnect_ms_(reconnect_ms) {}

StatusOr<std::unique_ptr<Channel>> HeartbeatSender::Connect(uint32_t shard,
                                                            const std::string& endpoint) {
  return env_->Connect(context_.get(), {.shard = shard,
                                        .endpoint = endpoint,
                                        .curve = curve_,
                                        .use = ChannelUse::kHeartbeats,
                                        .hwm = kQueued,
                                        .reconnect_ms = reconnect_ms_});
}

StatusOr<std::unique_ptr<HeartbeatSender>> HeartbeatSender::Start(
    const std::vector<std::string>& endpoints, uint32_t worker,
    std::chrono::milliseconds interval, const CurveOptions& curve, Env* env, int reconnect_ms) {
  std::unique_ptr<HeartbeatSender> h(
      new HeartbeatSender(worker, interval, curve, env, reconnect_ms));
  PS_ASSIGN_OR_RETURN(h->context_, Context::Create(1));
  for (uint32_t s = 0; s < endpoints.size(); ++s) {
    PS_ASSIGN_OR_RETURN(auto channel, h->Connect(s, endpoints[s]));
    h->channels_.push_back(std::move(channel));
  }
  h->thread_ = std::thread([raw = h.get()] { raw->Run(); });
  return h;
}

HeartbeatSender::~HeartbeatSender() { Stop(); }

void HeartbeatSender::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HeartbeatSender::Retarget(uint32_t shard, const std::string& endpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  retargets_.emplace_back(shard, endpoint);
}

void HeartbeatSender::Run() {
  std::vector<Frame> replies;
  uint64_t id = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    std::vector<std::pair<uint32_t, std::string>> retargets;
    retargets.swap(retargets_);
    lock.unlock();
    for (const auto& [shard, endpoint] : retargets) {
      if (shard >= channels_.size()) channels_.resize(shard + 1);
      if (endpoint.empty()) {
        channels_[shard].reset();  // a server a reshard left out
        continue;
      }
      auto channel = Connect(shard, endpoint);
      if (channel.ok()) channels_[shard] = std::move(*channel);
    }
    for (auto& channel : channels_) {
      if (channel == nullptr) continue;
      // Replies and connection events carry nothing the worker needs; drop
      // them.
      while (true) {
        auto got = channel->TryRecv(&replies);
        if (!got.ok() || !*got) break;
      }
      while (true) {
        auto event = channel->TryNextEvent();
        if (!event.ok() || !*event) break;
      }
      MessageHeader h;
      h.op = Op::kHeartbeat;
      h.request_id = ++id;
      h.worker = worker_;
      h.flags = kFlagBeat;  // alive, but never a rejoin (see wire.h)
      h.clock = clock_.load(std::memory_order_relaxed);
      h.cache_hits = cache_hits_.load(std::memory_order_relaxed);
      h.cache_misses = cache_misses_.load(std::memory_order_relaxed);
      Frame frame = EncodeHeader(h);
      // A full queue means the shard is not reading: skip this beat.
      if (channel->Send(std::span<Frame>(&frame, 1)).ok()) {
        sent_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    lock.lock();
    wake_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

}  // namespace ps
