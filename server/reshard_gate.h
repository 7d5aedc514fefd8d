// Resharding while training (DESIGN.md section 17): a shard's part in
// moving a running job onto another number of servers.
//
// The shard map is the list of servers the rows are split over
// (common/key_range.h: a range table's rows by ShardRows, a hashed table's
// slots alike), numbered by an epoch: 0 is the job file's, and each
// reshard makes the next. Requests carry the map their client routes by
// (MessageHeader::map_epoch).
//
// A reshard moves the rows at a clock boundary, through a checkpoint
// generation (ps_ctl reshard, tools/ctl_reshard.h, drives it):
//   1. prepare (RESHARD, kReshardPrepare): every shard agrees to hand over
//      at clock c, above every worker clock it has seen. From then on it
//      holds, without applying or answering them, the writes (PUSH, CLOCK)
//      of clock c or later; everything below c is served as before, so the
//      slower workers reach c. A shard that saw a worker at c or beyond
//      refuses, and the reshard is aborted (kReshardAbort: the held writes
//      are applied as if nothing happened) and tried again at a later c.
//   2. commit (kReshardCommit), once every shard prepared.
//   3. When its minimum clock reaches c (every update of the clocks below c
//      is applied, none of c or later), the shard writes generation c and
//      hands over: the held writes, the waiting pulls, and every later
//      request of the old map are answered ERROR with kFlagMoved naming the
//      next map (its epoch and servers). None of them was applied. The
//      client sends them again under that map (client/client.h).
//   4. The shard exits (ps_server exit code 3): at once when the next map
//      keeps its address (the server that takes the address moves what
//      comes late, and must not wait for the port); otherwise once every
//      live worker turned to the next map (it was answered kFlagMoved, or
//      sent a request of the next map, which the shard drops unanswered),
//      or kHandoverLinger after the handover.
//   5. ps_launch (tools/job_run.h) starts the servers of the next map,
//      each restoring its rows of generation c (server/restore.h, the
//      restore onto another shard count) at map epoch E (ps_server
//      --map-epoch). A request of an older map reaching them is answered
//      kFlagMoved with their map.
// In memory (server/reshard_follower.h): when the next map's servers
// follow this shard (ReplicationLog::Follow), step 3 sends them kEnd and
// answers the moved requests first, and writes generation c after (once
// the socket is closed when the next map keeps this address), and step 5
// starts only the servers that did not follow.
// No acknowledged push is lost or applied twice: what a worker had
// acknowledged is in generation c, and what was held or moved was applied
// nowhere. Workers keep their clocks; they resume at c.
//
// Not thread-safe: the shard's loop thread makes every call.
#ifndef PS_SERVER_RESHARD_GATE_H_
#define PS_SERVER_RESHARD_GATE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/wire.h"

namespace ps {

// How long a shard that handed over keeps answering requests of the old
// map, at most, before it exits.
inline constexpr std::chrono::seconds kHandoverLinger{10};
// The nice value a shard writes its handover generation at when the next
// map's servers followed it (they take over on the same hosts meanwhile).
inline constexpr int kHandoverWriteNice = 10;

class ReshardGate {
 public:
  // `servers`: the map this shard serves in (the job file's
  // cluster.servers), at epoch `map_epoch`; `workers`: the job's worker
  // count.
  ReshardGate(uint32_t shard, std::vector<std::string> servers, int64_t map_epoch,
              uint32_t workers);

  int64_t map_epoch() const { return map_epoch_; }
  bool prepared() const { return prepared_; }
  bool committed() const { return committed_; }
  bool handed_over() const { return handed_over_; }
  // The clock of the prepared handover.
  int64_t boundary() const { return boundary_; }
  // The next map's epoch and servers (when prepared).
  int64_t next_epoch() const { return next_epoch_; }
  const std::vector<std::string>& next_servers() const { return next_servers_; }
  // The next map lists this shard's own address (when prepared).
  bool keeps_address() const { return keeps_address_; }

  // What to do with a worker's PUSH, PULL or CLOCK.
  enum class Action {
    kServe,  // as always
    kHold,   // prepared: a write of the boundary clock or later; kept unanswered
    kMoved,  // answer Moved(request)
    kDrop,   // a request of the next map (or, once handed over, of a later one)
             // reached the shard that hands over: no answer
    kRefuse, // a map this shard does not know: answer Unknown(request)
  };
  // Cheap when no reshard runs and the request is of this map.
  Action Check(const MessageHeader& request) const {
    if (request.map_epoch == map_epoch_ && !prepared_) return Action::kServe;
    return CheckSlow(request);
  }

  // The ERROR header answering a request that Check moved: kFlagMoved, the
  // map the job runs on next (after a handover; this one for a request of
  // an older map), its servers in the text. Notes the worker as turned.
  MessageHeader Moved(const MessageHeader& request);
  // The error for kRefuse.
  Status Unknown(const MessageHeader& request) const;
  // A request of the next map came from `worker`: it turned.
  void Turned(uint32_t worker);
  // A request Check dropped: its worker turned; one of a map after the
  // next (the job moved on while this shard lingered) lets it exit.
  void Dropped(const MessageHeader& request);

  // RESHARD requests. Prepare: hand over at request.clock to the servers
  // of request.text (comma-separated host:port) at request.map_epoch.
  // `max_worker_clock`: the highest clock a worker is at here. Errors:
  // FailedPrecondition naming the reason (not the next epoch; a clock at
  // or below a worker's, which the caller may try again above; another
  // reshard in progress; `why_not` when not empty: what the job lacks),
  // InvalidArgument for an empty or malformed server list. Preparing the
  // same handover again is OK.
  Status Prepare(const MessageHeader& request, int64_t max_worker_clock,
                 const std::string& why_not);
  // Commit: FailedPrecondition unless a handover of request.map_epoch is
  // prepared.
  Status Commit(const MessageHeader& request);
  // Abort: forgets the prepared handover (OK when none is); the caller
  // serves the held writes. FailedPrecondition once it handed over.
  Status Abort(const MessageHeader& request);

  // True when the prepared handover is committed and the minimum clock
  // reached its boundary: the caller writes the generation, then calls
  // HandedOver.
  bool HandoverDue(int64_t min_clock) const {
    return committed_ && !handed_over_ && min_clock >= boundary_;
  }
  void HandedOver(Clock::TimePoint now);
  // Once handed over: true when the next map keeps this shard's address
  // (the server that takes it moves what comes late, and it must not wait
  // for the port), or every worker for which `live(worker)` holds turned to
  // the next map, or a request of a later map came, or kHandoverLinger
  // passed.
  template <typename Live>
  bool MayExit(Clock::TimePoint now, Live live) const {
    if (!handed_over_) return false;
    if (keeps_address_ || moved_past_ || now - handed_over_at_ >= kHandoverLinger) return true;
    for (uint32_t w = 0; w < turned_.size(); ++w) {
      if (!turned_[w] && live(w)) return false;
    }
    return true;
  }

 private:
  Action CheckSlow(const MessageHeader& request) const;
  const uint32_t shard_;
  const std::vector<std::string> servers_;
  const int64_t map_epoch_;
  bool prepared_ = false;
  bool committed_ = false;
  bool handed_over_ = false;
  int64_t boundary_ = 0;
  int64_t next_epoch_ = 0;
  std::vector<std::string> next_servers_;
  std::string next_text_;  // next_servers_ comma-separated
  bool keeps_address_ = false;  // next_servers_ holds this shard's address
  bool moved_past_ = false;     // a request of a map after the next came (Dropped)
  Clock::TimePoint handed_over_at_{};
  std::vector<bool> turned_;  // per worker, after the handover
};

}  // namespace ps

#endif  // PS_SERVER_RESHARD_GATE_H_
