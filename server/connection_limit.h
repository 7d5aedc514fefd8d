// The connections a shard keeps (server.max_connections): counts the
// connections its router accepted and closed, from the accept monitor's
// events, and closes at once each one past the limit, so that a flood of
// connections can never use up the process's file descriptors. Handshakes
// that fail (a client without CurveZMQ against a curve server, or with
// another server key) are counted and logged, rate-limited.
//
// Not thread-safe: the shard's thread only.
#ifndef PS_SERVER_CONNECTION_LIMIT_H_
#define PS_SERVER_CONNECTION_LIMIT_H_

#include <cstdint>
#include <unordered_set>

#include "common/options.h"
#include "common/status.h"
#include "common/transport.h"
#include "server/access.h"

namespace ps {

class ConnectionLimit {
 public:
  // A connection whose handshake is not done by then is closed.
  static constexpr int kHandshakeTimeoutMs = 10000;

  // server.max_connections of shard `shard`, or its default from the
  // open-file limit. InvalidArgument when the option is above what the
  // limit allows, ResourceExhausted when the limit leaves fewer than 16.
  static StatusOr<uint32_t> MaxConnections(const JobOptions& job, uint32_t shard);

  // `max_connections`: MaxConnections(job, shard); `curve`: the router
  // speaks CurveZMQ (named in the log of a failed handshake). Its log
  // lines are rate-limited on `clock`, which must outlive this.
  ConnectionLimit(uint32_t shard, const JobOptions& job, uint32_t max_connections, bool curve,
                  const Clock& clock)
      : shard_(shard), job_(job), max_(max_connections), curve_(curve),
        handshake_log_(clock, std::chrono::milliseconds(kRefusalLogIntervalMs)),
        connection_log_(clock, std::chrono::milliseconds(kRefusalLogIntervalMs)) {}

  // Reads the events `monitor` has (a bounded number per call: connections
  // come and go at the rate of TCP handshakes), counting connections and
  // closing those past the limit.
  void Drain(ConnectionMonitor& monitor);

  uint32_t open() const { return open_; }
  uint32_t max() const { return max_; }
  // Connections closed for coming past the limit.
  uint64_t refused() const { return refused_; }
  // Handshakes that failed before the ZAP handler saw a key.
  uint64_t failed_handshakes() const { return failed_handshakes_; }

 private:
  const uint32_t shard_;
  const JobOptions& job_;  // the shard's; outlives this
  const uint32_t max_;
  const bool curve_;
  uint32_t open_ = 0;
  uint64_t refused_ = 0;
  uint64_t failed_handshakes_ = 0;
  // Descriptors of the connections closed past the limit, until ZeroMQ
  // reports them gone (they were never counted open).
  std::unordered_set<int> closing_;
  LogRateLimit handshake_log_, connection_log_;
};

}  // namespace ps

#endif  // PS_SERVER_CONNECTION_LIMIT_H_
