// Who may talk to a shard under security.mode curve (DESIGN.md section 10,
// common/security.h): the shard's ZAP handler with the job's allowlist,
// the identity check of every request, and the log of what was refused.
//
// Every CURVE handshake of a key not on the allowlist is refused by the ZAP
// handler, so such a peer never gets a request read; it is logged once per
// address every kRefusalLogIntervalMs, with how many more were refused
// since (LogRateLimit). A request from an allowed key is checked against the identity of
// its connection (the ZAP user id that libzmq stamps on every frame, which
// a sender cannot forge): a worker key only as its own rank and never an
// admin op, the admin key only as the control client. Under mode none the
// header is trusted and nothing is checked.
//
// Thread safety: Check and ReloadAllowlist are for the shard's thread; the
// ZAP handler logs refusals from its own thread.
#ifndef PS_SERVER_ACCESS_H_
#define PS_SERVER_ACCESS_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/options.h"
#include "common/status.h"
#include "common/transport.h"
#include "common/wire.h"

namespace ps {

// A log line of one kind at most once per key (an address, a user id, or
// none) per interval, with a count of what was held back: what a shard
// logs of misbehaving peers cannot flood its log. Bounded: past kMaxKeys
// keys it starts over. The interval is of the shard's clock, which must
// outlive this. Thread-safe.
class LogRateLimit {
 public:
  static constexpr size_t kMaxKeys = 4096;
  LogRateLimit(const Clock& clock, std::chrono::milliseconds interval)
      : clock_(clock), interval_(interval) {}
  // True when an event of `key` should be logged now; *held_back is then
  // the number of its events not logged since the last line.
  bool ShouldLog(const std::string& key, uint64_t* held_back);
  // The same for events of one kind with no key.
  bool ShouldLog(uint64_t* held_back) { return ShouldLog(std::string(), held_back); }

 private:
  struct Entry {
    Clock::TimePoint last;
    uint64_t held_back = 0;
  };
  const Clock& clock_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;  // guarded by mu_
};

// " (N more since the last line)" for a line that held N back; empty for 0.
std::string HeldBack(uint64_t held_back);

inline constexpr int kRefusalLogIntervalMs = 10000;

class ShardAccess {
 public:
  // Mode none: nothing to start (Check admits everything). Mode curve:
  // reads the allowlist (NotFound / InvalidArgument naming a bad key file)
  // and starts the ZAP handler in `context`, which must outlive this.
  // Sets *curve to the server socket's CURVE options. Refused handshakes
  // are logged at most once per address per kRefusalLogIntervalMs of
  // `clock`, which must outlive this.
  static StatusOr<std::unique_ptr<ShardAccess>> Create(const JobOptions& job, uint32_t shard,
                                                       Context* context, const Clock& clock,
                                                       CurveOptions* curve);

  bool enabled() const { return zap_ != nullptr; }
  // OK when the sender of `header` (whose first frame is `first_frame`)
  // may send it; PermissionDenied naming the op, the key and the address
  // otherwise (the caller logs it, rate-limited with the shard's other
  // refusals).
  Status Check(const Frame& first_frame, const MessageHeader& header);
  // Reads the key files again (a rotated worker key); keeps the old list
  // and returns the error when they are bad.
  Status ReloadAllowlist();
  // Handshakes refused by the ZAP handler, and requests refused by Check.
  uint64_t refused_handshakes() const { return zap_ == nullptr ? 0 : zap_->refused(); }
  uint64_t refused_requests() const { return refused_requests_; }

 private:
  ShardAccess(const JobOptions& job, uint32_t shard, const Clock& clock)
      : job_(job), shard_(shard), handshake_log_(clock, std::chrono::milliseconds(kRefusalLogIntervalMs)) {}
  const JobOptions& job_;  // the shard's; outlives this
  const uint32_t shard_;
  LogRateLimit handshake_log_;
  uint64_t refused_requests_ = 0;
  // Last: stopped (its thread joined) before the logs it uses go.
  std::unique_ptr<ZapHandler> zap_;
};

}  // namespace ps

#endif  // PS_SERVER_ACCESS_H_
