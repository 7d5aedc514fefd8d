// The requests a shard holds unanswered until the job's clock lets it
// answer them: pulls waiting for slower workers (the staleness bound), the
// evaluator's reads waiting for the clock of its next evaluation, and,
// under consistency.aggregate, pushes for a clock above the job's clock + 1
// (the sums cover the job's clock and the next only).
//
// Each is kept whole (the message, routing id first, and the request decoded
// from it, whose spans point into the frames, which never move while the
// vector is moved) with when it came and, for a pull, its deadline. They
// are counted per connection (routing id), so one identity's connections
// cannot use up another's quota (server.max_waiting_pulls_per_worker), and
// the pushes' bytes all together (server.max_queued_reply_bytes).
//
// This holds and finds them; whether one may wait, and what its reply is,
// is the shard's to say (ShardServer::ParkPull, ParkPush). Not thread-safe:
// the shard's thread only.
#ifndef PS_SERVER_WAITING_REQUESTS_H_
#define PS_SERVER_WAITING_REQUESTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/transport.h"
#include "common/wire.h"

namespace ps {

class WaitingRequests {
 public:
  using TimePoint = Clock::TimePoint;

  struct Waiting {
    std::vector<Frame> frames;  // routing id first
    Request request;
    TimePoint since;
    TimePoint deadline = TimePoint::max();  // pulls only
  };

  // Requests of connection `routing_id` waiting now, pulls and pushes.
  uint32_t connection_count(std::string_view routing_id) const;
  size_t pulls() const { return pulls_.size(); }
  size_t pushes() const { return pushes_.size(); }
  // The bytes of the waiting pushes (their frames after the routing id).
  uint64_t push_bytes() const { return push_bytes_; }
  // The earliest deadline of a waiting pull, if any.
  std::optional<TimePoint> next_deadline() const;

  // A pull waiting until the job's clock reaches its clock (a read of the
  // evaluator when `read`), or until `w.deadline`.
  void AddPull(Waiting w, bool read);
  // A push waiting until the job's clock reaches its clock.
  void AddPush(Waiting w);

  // Takes, in arrival order, the pulls whose clock `ready` accepts (tried
  // from the lowest clock up, stopping at the first it refuses) and the
  // reads whose clock `read_ready` accepts (likewise).
  std::vector<Waiting> TakeReadyPulls(const std::function<bool(int64_t)>& ready,
                                      const std::function<bool(int64_t)>& read_ready);
  // Takes, by deadline, the pulls whose deadline is at or before `now`.
  std::vector<Waiting> TakeExpiredPulls(TimePoint now);
  // Takes every pull, in arrival order.
  std::vector<Waiting> TakeAllPulls();
  // Takes, in arrival order, the pushes `ready` accepts.
  std::vector<Waiting> TakePushes(const std::function<bool(const Waiting&)>& ready);

 private:
  Waiting TakePull(uint64_t seq);
  void Uncount(const Waiting& w);

  uint64_t next_ = 0;  // arrival order, pulls and pushes alike
  std::map<uint64_t, Waiting> pulls_;
  // The pulls by the clock they wait for (released from the lowest while
  // the job's clock allows, so a CLOCK walks only the pulls it releases),
  // the evaluator's likewise, and all by deadline.
  std::set<std::pair<int64_t, uint64_t>> pulls_by_clock_;
  std::set<std::pair<int64_t, uint64_t>> reads_by_clock_;
  std::set<std::pair<TimePoint, uint64_t>> pulls_by_deadline_;
  std::map<uint64_t, Waiting> pushes_;
  uint64_t push_bytes_ = 0;
  std::unordered_map<std::string, uint32_t> per_connection_;
};

}  // namespace ps

#endif  // PS_SERVER_WAITING_REQUESTS_H_
