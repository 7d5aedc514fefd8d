#include "server/connection_limit.h"

#include <algorithm>
#include <string>

#include "common/logging.h"
#include "server/open_files.h"

namespace ps {

void ConnectionLimit::Drain(ConnectionMonitor& monitor) {
  for (int i = 0; i < 1024; ++i) {
    auto event = monitor.TryNext();
    if (!event.ok() || !event->has_value()) return;
    if (**event == ConnectionEvent::kHandshakeFailed ||
        **event == ConnectionEvent::kHandshakeCut) {
      ++failed_handshakes_;
      uint64_t skipped = 0;
      if (!handshake_log_.ShouldLog(&skipped)) continue;
      PS_LOG_WARN("shard {}: refused a connection whose handshake failed: a client without "
                  "CurveZMQ against this {} server, or one with another server key; it gets "
                  "nothing (ZeroMQ names no address for this){}",
                  shard_, curve_ ? "CurveZMQ" : "plain",
                  HeldBack(skipped));
      continue;
    }
    const int fd = monitor.last_value();
    if (**event == ConnectionEvent::kClosed) {
      // One this shard closed was never counted open.
      if (closing_.erase(fd) == 0 && open_ > 0) --open_;
      continue;
    }
    if (**event != ConnectionEvent::kAccepted) continue;
    if (open_ < max_) {
      ++open_;
      continue;
    }
    // Past the limit: closed at once, so the descriptors never run out.
    ConnectionMonitor::CloseAccepted(fd);
    closing_.insert(fd);
    ++refused_;
    uint64_t skipped = 0;
    if (!connection_log_.ShouldLog(&skipped)) continue;
    PS_LOG_ERROR("shard {}: refused a connection: {} are open, the most it keeps "
                 "(server.max_connections {}{}); it is closed, and so is each one more until some "
                 "close (a connection that does not finish its handshake closes after {} s){}",
                 shard_, open_, max_,
                 job_.server.max_connections == 0
                     ? ", from the open-file limit " + std::to_string(CurrentOpenFileLimit().soft)
                     : std::string(),
                 kHandshakeTimeoutMs / 1000, HeldBack(skipped));
  }
}

StatusOr<uint32_t> ConnectionLimit::MaxConnections(const JobOptions& job, uint32_t shard) {
  const OpenFileLimit limit = CurrentOpenFileLimit();
  const uint64_t usable =
      std::min<uint64_t>(limit.soft, uint64_t{1} << 20) - std::min<uint64_t>(limit.soft, kReservedFiles);
  const std::string where = "shard " + std::to_string(shard) + ": the open-file limit (RLIMIT_NOFILE) is " +
                            std::to_string(limit.soft) + " (hard " + std::to_string(limit.hard) +
                            "), and a shard keeps " + std::to_string(kReservedFiles) +
                            " descriptors for its checkpoints and its own sockets";
  if (job.server.max_connections > usable) {
    return InvalidArgumentError(where + ": server.max_connections " +
                                std::to_string(job.server.max_connections) +
                                " would run out of them; raise `ulimit -n` (the hard limit) or "
                                "lower server.max_connections");
  }
  if (job.server.max_connections > 0) return job.server.max_connections;
  if (usable < 16) {
    return ResourceExhaustedError(where + ", which leaves " + std::to_string(usable) +
                                  " connections (at least 16 needed): raise `ulimit -n`");
  }
  return static_cast<uint32_t>(std::min<uint64_t>(usable, UINT32_MAX));
}

}  // namespace ps
