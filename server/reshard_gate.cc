#include "server/reshard_gate.h"

#include <utility>

#include "common/endpoint.h"

namespace ps {
namespace {

bool IsWrite(Op op) { return op == Op::kPush || op == Op::kClock; }

}  // namespace

ReshardGate::ReshardGate(uint32_t shard, std::vector<std::string> servers, int64_t map_epoch,
                         uint32_t workers)
    : shard_(shard),
      servers_(std::move(servers)),
      map_epoch_(map_epoch),
      turned_(workers, false) {}

ReshardGate::Action ReshardGate::CheckSlow(const MessageHeader& request) const {
  if (request.map_epoch < map_epoch_) return Action::kMoved;
  if (request.map_epoch > map_epoch_) {
    // The next map's, or (handed over, lingering at an address a later map
    // takes) a later one's: the worker sends it again to the server that
    // takes this address once this process is gone.
    const bool later = handed_over_ && request.map_epoch > next_epoch_;
    return (prepared_ && request.map_epoch == next_epoch_) || later ? Action::kDrop
                                                                     : Action::kRefuse;
  }
  // A request of this map while a handover is prepared.
  if (handed_over_) return Action::kMoved;
  if (IsWrite(request.op) && request.clock >= boundary_) return Action::kHold;
  return Action::kServe;
}

MessageHeader ReshardGate::Moved(const MessageHeader& request) {
  const bool next = request.map_epoch >= map_epoch_ && handed_over_;
  MessageHeader h = MakeErrorHeader(
      request, shard_,
      UnavailableError("shard " + std::to_string(shard_) + " no longer serves map " +
                       std::to_string(request.map_epoch) + ": the job runs on " +
                       std::to_string(next ? next_servers_.size() : servers_.size()) +
                       " servers at map " + std::to_string(next ? next_epoch_ : map_epoch_)));
  h.flags = kFlagMoved;
  h.map_epoch = next ? next_epoch_ : map_epoch_;
  h.text = next ? next_text_ : JoinServerList(servers_);
  if (next) Turned(request.worker);
  return h;
}

Status ReshardGate::Unknown(const MessageHeader& request) const {
  return FailedPreconditionError(
      "shard " + std::to_string(shard_) + " serves map " + std::to_string(map_epoch_) +
      (prepared_ ? " (handing over to map " + std::to_string(next_epoch_) + ")" : std::string()) +
      " and the request routes by map " + std::to_string(request.map_epoch) +
      ", which it does not know; was this server started with an older --map-epoch than the "
      "job's servers?");
}

void ReshardGate::Turned(uint32_t worker) {
  if (worker < turned_.size()) turned_[worker] = true;
}

void ReshardGate::Dropped(const MessageHeader& request) {
  Turned(request.worker);
  // The job moved past the next map: every worker turned to it long ago.
  if (handed_over_ && request.map_epoch > next_epoch_) moved_past_ = true;
}

Status ReshardGate::Prepare(const MessageHeader& request, int64_t max_worker_clock,
                            const std::string& why_not) {
  const std::string who = "shard " + std::to_string(shard_);
  if (!why_not.empty()) return FailedPreconditionError(who + " cannot be resharded: " + why_not);
  if (request.map_epoch != map_epoch_ + 1) {
    return FailedPreconditionError(who + " serves map " + std::to_string(map_epoch_) +
                                   "; a reshard makes map " + std::to_string(map_epoch_ + 1) +
                                   ", not " + std::to_string(request.map_epoch));
  }
  PS_ASSIGN_OR_RETURN(const std::vector<HostPort> parsed, ParseServerList(request.text));
  std::vector<std::string> servers;
  for (const HostPort& server : parsed) servers.push_back(server.canonical);
  if (prepared_) {
    if (request.map_epoch == next_epoch_ && request.clock == boundary_ && servers == next_servers_) {
      return Status::Ok();
    }
    return FailedPreconditionError(who + " is handing over to map " + std::to_string(next_epoch_) +
                                   " at clock " + std::to_string(boundary_) +
                                   " already; abort that reshard first");
  }
  if (request.clock <= max_worker_clock) {
    return FailedPreconditionError(who + " has a worker at clock " +
                                   std::to_string(max_worker_clock) +
                                   ", past the handover clock " + std::to_string(request.clock) +
                                   "; try again at a later clock");
  }
  prepared_ = true;
  committed_ = false;
  boundary_ = request.clock;
  next_epoch_ = request.map_epoch;
  next_servers_ = std::move(servers);
  next_text_ = JoinServerList(next_servers_);
  keeps_address_ = false;
  HostPort own;
  std::string problem;
  if (shard_ < servers_.size() && ParseHostPort(servers_[shard_], &own, &problem)) {
    for (const std::string& next : next_servers_) keeps_address_ |= next == own.canonical;
  }
  return Status::Ok();
}

Status ReshardGate::Commit(const MessageHeader& request) {
  if (!prepared_ || request.map_epoch != next_epoch_) {
    return FailedPreconditionError("shard " + std::to_string(shard_) +
                                   " has no handover to map " +
                                   std::to_string(request.map_epoch) + " prepared");
  }
  committed_ = true;
  return Status::Ok();
}

Status ReshardGate::Abort(const MessageHeader& request) {
  if (!prepared_) return Status::Ok();
  if (handed_over_) {
    return FailedPreconditionError("shard " + std::to_string(shard_) + " handed over to map " +
                                   std::to_string(next_epoch_) + " already");
  }
  if (request.map_epoch != next_epoch_) {
    return FailedPreconditionError("shard " + std::to_string(shard_) +
                                   " prepares the handover to map " +
                                   std::to_string(next_epoch_) + ", not " +
                                   std::to_string(request.map_epoch));
  }
  prepared_ = false;
  committed_ = false;
  return Status::Ok();
}

void ReshardGate::HandedOver(Clock::TimePoint now) {
  handed_over_ = true;
  handed_over_at_ = now;
}

}  // namespace ps
