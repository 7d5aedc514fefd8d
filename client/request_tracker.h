// The bookkeeping of a client's requests: tickets (what the caller waits
// for), the per-shard parts each ticket is made of, their deadlines, and
// what a part needs to be sent again after its connection came back. No
// sockets: the Client sends and receives, the tracker remembers.
//
// A ticket completes when every part of it finished and its issuer let go
// of it (Release); its status is the first error recorded on it, with the
// first error of each other shard that failed a part after it appended
// (a few at most): a pull one shard refused after waiting for a slow
// worker also says that another shard did not answer at all. A
// completed ticket with a callback runs it and is forgotten; one without
// waits to be taken (Take).
//
// Thread safety: not thread-safe; owned by one Client.
#ifndef PS_CLIENT_REQUEST_TRACKER_H_
#define PS_CLIENT_REQUEST_TRACKER_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/transport.h"
#include "common/wire.h"

namespace ps {

class PulledValues;

using Ticket = uint64_t;
// Runs inside Wait/WaitAll/Poll when a ticket completes.
using Callback = std::function<void(const Status&)>;

// One request to one shard: what was asked, where a PULL's values go, and
// the tracker's state of it. Built with designated initializers; fields not
// named keep their defaults.
struct Part {
  Ticket ticket = 0;
  uint32_t shard = 0;
  Op op = Op::kUnknown;
  uint32_t table = 0;
  uint64_t count = 0;      // rows
  uint32_t dim = 0;        // floats per row
  uint64_t first_row = 0;  // dense parts: the first row
  uint32_t flags = 0;      // header flags beyond kFlagDenseRange (HEARTBEAT)
  uint32_t replica = 0;    // MEMBERSHIP: the backup it drops or adds
  int64_t epoch = 0;       // MEMBERSHIP: the new epoch
  // PUSH: what its values frame holds; PULL: what the reply is to hold (the
  // table's wire settings).
  WireType dtype = WireType::kF32;
  // PULL into a buffer: row i lands at out + i * dim, or at
  // out + positions[i] * dim when positions is not empty.
  float* out = nullptr;
  std::vector<uint64_t> positions = {};
  // PULL into a PulledValues: the received frames are kept, the first at
  // this float offset.
  PulledValues* view = nullptr;
  uint64_t view_offset = 0;
  bool control = false;  // the caller waits for the reply header (Client::Control)

  // Set when it is sent.
  int64_t clock = 0;                 // the worker's clock
  bool cache_insert = false;         // PULL: store the reply in the parameter cache
  std::vector<uint64_t> cache_rows = {};  // ... the row ids (sparse parts)
  // What was sent (header, keys, values; the bytes shared, not copied), to
  // send it again.
  std::array<Frame, 3> message = {};
  uint8_t message_frames = 0;

  // A CLOCK a reshard moved, waiting for the ticket's other moved parts
  // (Client::ResendMoved).
  bool moved = false;
  // Not sent yet: made while its shard's server was looked for
  // (Client::Shard::probing); sent, in order, once it answers.
  bool held = false;

  // The tracker's.
  Clock::TimePoint deadline = {};
  uint32_t resends = 0;  // times it was sent again
};

class RequestTracker {
 public:
  // A part is sent again at most this often (each time its server's
  // connection came back); one whose connection drops every time (e.g. a
  // frame over the server's transport limit) fails instead.
  static constexpr uint32_t kMaxResends = 8;

  // Deadlines are `timeout` after a part is sent (or sent again), on
  // `clock`, which must outlive the tracker.
  RequestTracker(const Clock* clock, std::chrono::milliseconds timeout, uint32_t num_shards);
  RequestTracker(const RequestTracker&) = delete;
  RequestTracker& operator=(const RequestTracker&) = delete;

  // A new ticket, held once by its issuer (so it cannot complete while its
  // parts are being sent) until Release. `finish` (when set) runs when it
  // completes, before `done` and before Take can see it (the caller's last
  // step, e.g. copying pulled rows into place); it must not issue requests.
  Ticket NewTicket(Callback done, Callback finish = nullptr);
  // Records `status` on the ticket unless it already has an error.
  void Fail(Ticket ticket, const Status& status);
  // Fail(), then drops one hold (a part's, or the issuer's); the last one
  // completes the ticket: its callback, if any, runs (after the ticket is
  // forgotten, so it may issue requests).
  void Release(Ticket ticket, const Status& status);
  // A pull part of the ticket was held back `waited_us` at its shard; the
  // ticket waited the longest of its parts.
  void NoteWait(Ticket ticket, uint64_t waited_us);

  // InvalidArgument when `ticket` is unknown, was taken, or has a callback
  // (it completes by itself).
  Status CheckWaitable(Ticket ticket) const;
  // True when the ticket completed (or is unknown).
  bool Done(Ticket ticket) const;
  // The status of a completed ticket without callback; forgets it.
  // REQUIRES: Done(ticket) and CheckWaitable(ticket).ok().
  Status Take(Ticket ticket);
  // Forgets every ticket; returns the first error among those without a
  // callback. REQUIRES: no part in flight.
  Status TakeAll();

  // Tracks `part` as request `request_id`, sent now: holds its ticket and
  // arms its deadline. Returns the stored part.
  Part& Add(uint64_t request_id, Part&& part);
  Part* Find(uint64_t request_id);
  const Part* Find(uint64_t request_id) const;
  // Forgets the part and releases its ticket with `status` (which may run
  // the ticket's callback). No-op for an unknown request id.
  void Finish(uint64_t request_id, const Status& status);

  // True when a part of `ticket` (any ticket when 0) with op `op`, sent at
  // worker clock `clock`, is in flight.
  bool HasPartAt(Ticket ticket, Op op, int64_t clock) const;

  // Counts parts to shards 0..num_shards-1 from now on (never fewer than
  // before: a shard a reshard left out may still answer).
  void SetShards(uint32_t num_shards) {
    if (num_shards > in_flight_.size()) in_flight_.resize(num_shards, 0);
  }
  // The request ids of the parts of `ticket` in flight.
  std::vector<uint64_t> PartsOf(Ticket ticket) const {
    std::vector<uint64_t> ids;
    for (const auto& [id, part] : parts_) {
      if (part.ticket == ticket) ids.push_back(id);
    }
    return ids;
  }
  // Parts in flight, in all and to one shard.
  size_t size() const { return parts_.size(); }
  uint32_t in_flight(uint32_t shard) const { return in_flight_[shard]; }
  // The request ids in flight to `shard`, oldest first (as they were sent).
  std::vector<uint64_t> InFlightTo(uint32_t shard) const;
  // Counts one more sending of a part (after a reconnect) and gives it a
  // new deadline; false, with nothing changed, when it was sent again
  // kMaxResends times already.
  bool Resent(uint64_t request_id, Part& part);

  // The earliest deadline armed, if any (possibly of a part that has since
  // finished or been given a later one: never later than the real one).
  std::optional<Clock::TimePoint> NextDeadline() const;
  // Request id of a part whose deadline is at or before `now`, 0 when none
  // is; each expired part is returned once unless it gets a new deadline.
  uint64_t PopExpired(Clock::TimePoint now);
  // Gives a part a new deadline (e.g. its server went away and it waits
  // longer for it to come back).
  void Extend(uint64_t request_id, Part& part, Clock::TimePoint deadline);

  // Time pulls were held back at the shards, summed over completed tickets,
  // microseconds.
  uint64_t staleness_wait_us() const { return staleness_wait_us_; }
  const Clock& clock() const { return *clock_; }

 private:
  // The most other shards' errors a ticket's status carries.
  static constexpr size_t kMaxOtherShardErrors = 2;
  struct TicketState {
    Status status;
    // The shards whose parts' errors are in `status` (parts finished with
    // an error only).
    std::vector<uint32_t> failed_shards;
    uint32_t remaining = 0;  // holds: the issuer's and one per part in flight
    Callback done;
    Callback finish;
    uint64_t waited_us = 0;  // pulls: the longest wait a shard reported
  };
  using Deadline = std::pair<Clock::TimePoint, uint64_t>;
  // Records the error of a part of `ticket` to `shard` (see the top).
  void FailPart(Ticket ticket, uint32_t shard, const Status& status);

  const Clock* const clock_;
  const std::chrono::milliseconds timeout_;
  Ticket next_ticket_ = 1;
  std::unordered_map<uint64_t, Part> parts_;
  std::unordered_map<Ticket, TicketState> tickets_;
  std::vector<uint32_t> in_flight_;  // per shard
  // (deadline, request id), earliest first. An entry whose part has since
  // finished or been given a new deadline is skipped.
  std::priority_queue<Deadline, std::vector<Deadline>, std::greater<>> deadlines_;
  uint64_t staleness_wait_us_ = 0;
};

}  // namespace ps

#endif  // PS_CLIENT_REQUEST_TRACKER_H_
