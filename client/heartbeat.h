// A worker's heartbeats: a thread of its own, with its own channels
// (common/channel.h), that tells every shard "this worker is alive, at
// clock c" every interval, so a long compute step (or a blocked pull) never
// reads as a dead worker. The channels come from the client's Env, so what
// cuts the client's connection cuts its heartbeats.
//
// Thread-safe: set_clock() may be called from any thread while it runs.
#ifndef PS_CLIENT_HEARTBEAT_H_
#define PS_CLIENT_HEARTBEAT_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/channel.h"
#include "common/env.h"
#include "common/status.h"
#include "common/transport.h"

namespace ps {

class HeartbeatSender {
 public:
  // Connects to `endpoints` (one per shard) and starts the thread, which
  // sends a HEARTBEAT from `worker` to every shard every `interval`.
  // `curve`: the worker's keys under security.mode curve (the heartbeats
  // travel on connections of their own, authenticated as the worker).
  // `env` (null: Env::Default()) makes each channel (ChannelUse::kHeartbeats,
  // with room for kQueued heartbeats; on the calling thread at the start,
  // on the heartbeat thread after a Retarget); it must outlive the sender.
  // `reconnect_ms`: the job's liveness.reconnect_ms (ChannelOptions).
  static StatusOr<std::unique_ptr<HeartbeatSender>> Start(const std::vector<std::string>& endpoints,
                                                          uint32_t worker,
                                                          std::chrono::milliseconds interval,
                                                          const CurveOptions& curve = {},
                                                          Env* env = nullptr,
                                                          int reconnect_ms = ChannelOptions{}.reconnect_ms);
  // Heartbeats queued per shard before more are dropped (a dead shard must
  // not pile them up), and replies (drained before each beat: one a beat).
  static constexpr int kQueued = 4;
  // Stops and joins the thread (unsent heartbeats are dropped).
  ~HeartbeatSender();
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

  // The clock the next heartbeats report.
  void set_clock(int64_t clock) { clock_.store(clock, std::memory_order_relaxed); }
  // The parameter-cache counts the next heartbeats report (ps_ctl status).
  void set_cache_stats(uint64_t hits, uint64_t misses) {
    cache_hits_.store(hits, std::memory_order_relaxed);
    cache_misses_.store(misses, std::memory_order_relaxed);
  }
  // From the next beat on, shard `shard`'s heartbeats go to `endpoint` (its
  // primary moved to another replica, replication.factor >= 2; a reshard
  // added the shard), or nowhere when it is empty (a reshard left the
  // shard out).
  void Retarget(uint32_t shard, const std::string& endpoint);
  // Heartbeats sent so far (to all shards together).
  uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }
  // Stops the thread now; no heartbeat leaves after this returns.
  void Stop();

 private:
  HeartbeatSender(uint32_t worker, std::chrono::milliseconds interval, const CurveOptions& curve,
                  Env* env, int reconnect_ms);
  void Run();
  // A heartbeat channel to `shard` at `endpoint`.
  StatusOr<std::unique_ptr<Channel>> Connect(uint32_t shard, const std::string& endpoint);

  const uint32_t worker_;
  const std::chrono::milliseconds interval_;
  const CurveOptions curve_;
  Env* const env_;
  const int reconnect_ms_;
  std::unique_ptr<Context> context_;
  std::vector<std::unique_ptr<Channel>> channels_;  // by shard; used only by the thread
  std::atomic<int64_t> clock_{0};
  std::atomic<uint64_t> cache_hits_{0};
  std::atomic<uint64_t> cache_misses_{0};
  std::atomic<uint64_t> sent_{0};
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mu_
  // Guarded by mu_: Retarget's endpoints, by shard, not taken by the thread yet.
  std::vector<std::pair<uint32_t, std::string>> retargets_;
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_CLIENT_HEARTBEAT_H_
