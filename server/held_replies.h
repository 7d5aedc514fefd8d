// The replies a primary with backups holds back (replication.factor >= 2;
// DESIGN.md section 13): a request that changed state is answered only once
// every backup has the log up to the entry it made, so that nothing
// acknowledged is lost when the primary dies. Replies leave in the order
// they were made.
//
// While a request is handled (BeginRequest .. EndRequest) its replies are
// held with no log position yet: the request may add entries after its
// reply was made (an acknowledgement goes before the apply), and EndRequest
// gives them the log's last position once it is done. A reply held outside
// a request (a sum's replies, below) gets the position given to Hold.
//
// Under replication.after_aggregation (consistency.aggregate) a push summed
// into its clock is replicated only with the clock's sum: its reply waits
// in the clock's group (HoldForSum) until the sum goes to the backups
// (TakeSummedPushes, ReleaseSumReplies), and the pushes in each unreplicated sum are remembered, so
// that a push sent again is recognised (SummedInto) and a joining backup's
// copy leaves them out (Replicated). Without it, the pushes acknowledged
// into each sum not applied yet are remembered too (NoteSummed), so that a
// generation's recent pushes name only pushes its rows hold (InRows).
//
// This holds and orders; sending, fencing and what the backups
// acknowledged are the shard's (ShardServer::FlushDeferred). Not
// thread-safe: the shard's thread only.
#ifndef PS_SERVER_HELD_REPLIES_H_
#define PS_SERVER_HELD_REPLIES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "common/transport.h"
#include "common/wire.h"
#include "server/recent_pushes.h"

namespace ps {

class HeldReplies {
 public:
  struct Held {
    uint64_t seq = 0;           // the log position the backups must have
    std::vector<Frame> frames;  // routing id, header (and any value frames)
    MessageHeader header;
  };

  // Replies held now (a sum's group not counted until ReleaseSums).
  size_t size() const { return held_.size(); }
  bool empty() const { return held_.empty(); }
  // Whether replies are being held for the request in progress.
  bool in_request() const { return in_request_; }

  // The request in progress changes state: its replies are held (Hold)
  // until EndRequest.
  void BeginRequest() { in_request_ = true; }
  // Ends the request: the replies it held wait for log position `last_seq`.
  void EndRequest(uint64_t last_seq);
  // Holds `reply`; inside a request its position comes with EndRequest,
  // else it is `seq`.
  void Hold(Held reply, uint64_t seq);

  // Takes, in order, the replies whose position is at most `committed`
  // (every backup has it); none of a request in progress.
  std::vector<Held> TakeCommitted(uint64_t committed);
  // Takes, in order, every reply but those of a request in progress
  // (fenced: they are refused instead of answered).
  std::vector<Held> TakeAllAssigned();

  // replication.after_aggregation: push (worker, session, request id) is
  // in clock `clock`'s sum, and its reply waits for that sum.
  void HoldForSum(int64_t clock, uint32_t worker, uint64_t session, uint64_t request_id,
                  Held reply);
  // A repeated push's reply joins the group of the clock whose sum holds
  // the first copy.
  void HoldForSum(int64_t clock, Held reply) { sum_replies_[clock].push_back(std::move(reply)); }
  // The clock whose sum holds push (worker, session, request id), or -1.
  int64_t SummedInto(uint32_t worker, uint64_t session, uint64_t request_id) const;
  // `recent` without the pushes of sums not replicated yet: what the
  // backups know as applied (a joining backup's copy).
  RecentPushes Replicated(const RecentPushes& recent) const;
  // consistency.aggregate with the sums not replicated: push (worker,
  // session, request id), acknowledged already, is in clock `clock`'s sum,
  // not applied yet (SumsApplied forgets it).
  void NoteSummed(int64_t clock, uint32_t worker, uint64_t session, uint64_t request_id);
  // The sums of the clocks below `below` are applied (NoteSummed's).
  void SumsApplied(int64_t below);
  // `recent` without the pushes of every sum not applied yet: the pushes
  // the rows hold (a generation's recent pushes).
  RecentPushes InRows(const RecentPushes& recent) const;
  // The sums of the clocks below `below` go to the backups: returns their
  // pushes (worker, session, request id each, for the log entry) and
  // forgets them.
  std::vector<uint64_t> TakeSummedPushes(int64_t below);
  // Holds the replies of the sums of the clocks below `below`, which the
  // log has up to position `seq` (Hold).
  void ReleaseSumReplies(int64_t below, uint64_t seq);

 private:
  std::deque<Held> held_;
  size_t unassigned_ = 0;  // the newest ones, of the request in progress
  bool in_request_ = false;
  // Per clock: the pushes summed into it (3 numbers each) and their replies.
  std::map<int64_t, std::vector<uint64_t>> summed_pushes_;
  std::map<int64_t, std::vector<Held>> sum_replies_;
  // Per clock: the pushes acknowledged into its sum (NoteSummed).
  std::map<int64_t, std::vector<uint64_t>> acknowledged_sums_;
};

}  // namespace ps

#endif  // PS_SERVER_HELD_REPLIES_H_
