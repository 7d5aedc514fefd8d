// The pushes a shard applied lately, per worker, so that a push sent again
// is acknowledged without being applied twice (DESIGN.md section 7).
//
// A client sends a request again when its connection to the shard dropped
// and came back (the shard restarted, or the network broke): the first copy
// may or may not have been applied. Requests carry the client's random
// session id and a request id that grows per session, so (worker, session,
// request id) names one push. A client has at most client.max_in_flight
// requests in flight per shard, and sends them again oldest first, so a
// push that comes again was recorded at most a few windows ago: each worker
// keeps the ids of its last `per_worker` pushes.
//
// Not thread-safe: the ShardServer thread owns it.
#ifndef PS_SERVER_RECENT_PUSHES_H_
#define PS_SERVER_RECENT_PUSHES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_set>
#include <vector>

namespace ps {

class RecentPushes {
 public:
  // REQUIRES: per_worker >= 1.
  RecentPushes(uint32_t num_workers, size_t per_worker);

  // Records a push of `worker`. Returns false when the same (session,
  // request id) is already recorded: the push is a repeat. Session 0 (a
  // sender without a session, e.g. a test tool) is never a repeat.
  // REQUIRES: worker < num_workers.
  bool Insert(uint32_t worker, uint64_t session, uint64_t request_id);

  // Whether Insert recorded (worker, session, request id) and it is still
  // in the worker's window; counts nothing. False for session 0 and for a
  // worker out of range.
  bool Contains(uint32_t worker, uint64_t session, uint64_t request_id) const;

  // Forgets a push recorded by Insert (one that was refused after all: a
  // copy sent again is then handled afresh, not acknowledged as applied).
  void Forget(uint32_t worker, uint64_t session, uint64_t request_id);

  // Repeats seen so far.
  uint64_t repeats() const { return repeats_; }

  // Every window as numbers (a replica's copy, server/replication.h): per
  // worker the count of ids, then each id's session and request id,
  // oldest first.
  std::vector<uint64_t> Encode() const;
  // Records the ids Encode() gave, in order; false (nothing recorded) when
  // `data` does not hold num_workers windows of at most per_worker ids.
  bool Decode(const std::vector<uint64_t>& data);

 private:
  struct Id {
    uint64_t session;
    uint64_t request;
    bool operator==(const Id&) const = default;
  };
  struct IdHash {
    size_t operator()(const Id& id) const {
      return static_cast<size_t>(id.session * 0x9E3779B97F4A7C15ull ^ id.request);
    }
  };
  struct Window {
    std::unordered_set<Id, IdHash> ids;
    std::deque<Id> order;  // oldest first
  };
  size_t per_worker_;
  std::vector<Window> windows_;
  uint64_t repeats_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_RECENT_PUSHES_H_
