#include "client/heartbeat.h"

#include "common/wire.h"

namespace ps {

StatusOr<std::unique_ptr<HeartbeatSender>> HeartbeatSender::Start(
    const std::vector<std::string>& endpoints, uint32_t worker,
    std::chrono::milliseconds interval, const CurveOptions& curve) {
  std::unique_ptr<HeartbeatSender> h(new HeartbeatSender(worker, interval));
  PS_ASSIGN_OR_RETURN(h->context_, Context::Create(1));
  SocketOptions& options = h->options_;
  options.send_hwm = 4;  // a dead shard must not pile heartbeats up
  options.curve = curve;
  options.recv_hwm = 16;  // replies are drained before every beat
  for (const std::string& endpoint : endpoints) {
    PS_ASSIGN_OR_RETURN(auto socket,
                        Socket::Create(h->context_.get(), SocketType::kDealer, options));
    PS_RETURN_IF_ERROR(socket->Connect(endpoint));
    h->sockets_.push_back(std::move(socket));
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
      if (shard >= sockets_.size()) continue;
      auto socket = Socket::Create(context_.get(), SocketType::kDealer, options_);
      if (socket.ok() && (*socket)->Connect(endpoint).ok()) sockets_[shard] = std::move(*socket);
    }
    for (auto& socket : sockets_) {
      // Replies carry nothing the worker needs; drop them.
      while (true) {
        auto got = socket->TryRecv(&replies);
        if (!got.ok() || !*got) break;
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
      if (socket->Send(std::span<Frame>(&frame, 1)).ok()) {
        sent_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    lock.lock();
    wake_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

}  // namespace ps
