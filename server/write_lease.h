// The lease under which a primary acknowledges writes when an external
// authority (replication.authority etcd, server/etcd_authority.h) decides
// which replica is a shard's primary. The authority's thread extends it
// each time it renews the server's lease at etcd, to a moment before that
// lease can lapse there; a ShardServer accepts and acknowledges writes only
// while it is valid. So a primary cut off from etcd stops acknowledging
// before etcd lets a backup take the shard over: at no time do two
// replicas accept writes for the same rows.
//
// Thread-safe: one writer (the authority's thread), any readers.
#ifndef PS_SERVER_WRITE_LEASE_H_
#define PS_SERVER_WRITE_LEASE_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ps {

class WriteLease {
 public:
  using Clock = std::chrono::steady_clock;

  // True while writes may be acknowledged: extended past now, not revoked.
  bool Valid() const {
    if (revoked_.load(std::memory_order_acquire)) return false;
    return Clock::now().time_since_epoch().count() <
           valid_until_.load(std::memory_order_acquire);
  }
  // The epoch the primary holds the shard at (0 before it holds it).
  int64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // For good: the lease is gone (etcd said so), or another replica holds
  // the shard.
  bool revoked() const { return revoked_.load(std::memory_order_acquire); }

  // The authority's side.
  void Extend(Clock::time_point until, int64_t epoch) {
    epoch_.store(epoch, std::memory_order_release);
    valid_until_.store(until.time_since_epoch().count(), std::memory_order_release);
  }
  void Revoke() { revoked_.store(true, std::memory_order_release); }

 private:
  std::atomic<int64_t> valid_until_{0};  // Clock ticks; 0: never valid yet
  std::atomic<int64_t> epoch_{0};
  std::atomic<bool> revoked_{false};
};

}  // namespace ps

#endif  // PS_SERVER_WRITE_LEASE_H_
