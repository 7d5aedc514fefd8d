// Client::Poll and what it handles: replies (checked by DecodeReply, then
// delivered), deadlines, and the connection events of each shard, with the
// resend of unanswered requests when a connection comes back.
#include "client/client.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/security.h"
#include "common/wire_floats.h"

namespace ps {

void Client::HandleReply(uint32_t shard, std::span<Frame> frames) {
  for (const Frame& f : frames) counters_.bytes_received += f.size();
  Reply reply;
  const Status checked = DecodeReply(frames, shard, expectation_, &reply);
  if (reply.fault == ReplyFault::kUnreadable) {
    PS_LOG_WARN("server {} at {} sent an unreadable reply: {}", shard, shards_[shard].endpoint,
                checked.ToString());
    return;  // the request it answered will expire with a clear error
  }
  if (reply.fault == ReplyFault::kUnmatched) {
    ++counters_.late_replies;
    return;
  }
  const MessageHeader& h = reply.header;
  Part& p = *tracker_.Find(h.request_id);  // matched by DecodeReply
  ++counters_.replies;
  shards_[shard].min_clock = std::max(shards_[shard].min_clock, h.min_clock);
  if (h.op == Op::kPushOk && (h.flags & kFlagLate) != 0) ++counters_.late_pushes;
  if (!checked.ok()) {
    if (reply.fault == ReplyFault::kRejected && (h.flags & kFlagMoved) != 0) {
      // A reshard moved the job onto other servers: the request was not
      // applied; it goes to them.
      ++counters_.moved;
      if (Status switched = SwitchMap(h.map_epoch, h.text); !switched.ok()) {
        FinishPart(h.request_id, switched.WithContext(Describe(p, h.request_id) + " was moved"));
        return;
      }
      ResendMoved(h.request_id);
      return;
    }
    if (reply.fault == ReplyFault::kRejected) ++counters_.errors;
    if (reply.fault == ReplyFault::kRejected && (h.flags & kFlagNotPrimary) != 0 &&
        !shards_[shard].replicas.empty()) {
      // A backup (or a fenced primary) turned it away: the request waits
      // for the shard's primary, and is sent there once it is found.
      Shard& sh = shards_[shard];
      if (!sh.probing) {
        PS_LOG_WARN("server {} at {} does not serve the shard's writes ({}); looking for its "
                    "primary",
                    shard, sh.endpoint, h.text);
        if (!sh.down) {
          sh.down = true;
          sh.down_since = time_->Now();
        }
        FindPrimary(shard);
      }
      return;
    }
    if (reply.fault == ReplyFault::kStale) ++counters_.bound_violations;
    const std::string what = Describe(p, h.request_id);
    FinishPart(h.request_id, checked.WithContext(reply.fault == ReplyFault::kRejected
                                                     ? what + " was rejected"
                                                     : what));
    return;
  }
  Status delivered;
  if (p.op == Op::kPull) {
    // The shards of one pull wait side by side: the pull waited the longest of them.
    if (h.waited_us > 0) tracker_.NoteWait(p.ticket, h.waited_us);
    delivered = DeliverPull(p, reply);
  } else if (p.control) {
    control_replies_[h.request_id] = h;
  }
  FinishPart(h.request_id, delivered);
}

Status Client::DeliverPull(Part& p, Reply& reply) {
  // Values come as one or more frames of whole rows, in row order (DecodeReply).
  const uint64_t wire_row_bytes = uint64_t{p.dim} * WireBytes(p.dtype);
  const uint64_t row_bytes = uint64_t{p.dim} * sizeof(float);
  const int64_t min_clock = reply.header.min_clock;
  uint64_t row = 0;  // first row of the current frame within this part
  for (Frame& wire_frame : reply.values) {
    const uint64_t rows = wire_frame.size() / wire_row_bytes;
    if (p.view == nullptr && p.positions.empty()) {
      // Consecutive rows of the output: copied, or decoded, straight there.
      float* to = p.out + row * p.dim;
      DecodeFloats(p.dtype, wire_frame.data(), rows * p.dim, to);
      if (p.cache_insert) {
        cache_->Insert(p.table, p.first_row + row,
                       p.cache_rows.empty() ? nullptr : p.cache_rows.data() + row, rows, to,
                       min_clock);
      }
      row += rows;
      continue;
    }
    // Kept or scattered: a 16-bit frame becomes a float32 one first.
    Frame frame = std::move(wire_frame);
    if (p.dtype != WireType::kF32) {
      PS_ASSIGN_OR_RETURN(Frame converted, Frame::Allocate(rows * row_bytes));
      DecodeFloats(p.dtype, frame.data(), rows * p.dim,
                   reinterpret_cast<float*>(converted.mutable_data()));
      frame = std::move(converted);
    }
    if (p.view != nullptr) {
      if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(float) != 0) {
        frame = Frame::CopyOf(frame.data(), frame.size());  // spans of float need alignment
      }
      p.view->pieces_.push_back({p.view_offset + row * p.dim, std::move(frame)});
    } else {
      const auto* src = reinterpret_cast<const std::byte*>(frame.data());
      for (uint64_t x = 0; x < rows; ++x) {
        std::memcpy(p.out + p.positions[row + x] * p.dim, src + x * row_bytes, row_bytes);
      }
      if (p.cache_insert) {
        cache_->Insert(p.table, 0, p.cache_rows.data() + row, rows,
                       reinterpret_cast<const float*>(src), min_clock);
      }
    }
    row += rows;
  }
  return Status::Ok();
}

double Client::MillisSince(ps::Clock::TimePoint t) const {
  return std::chrono::duration<double, std::milli>(time_->Now() - t).count();
}

std::string Client::HandshakeCuts(const Shard& shard) {
  return "the server closed each of the last " + std::to_string(shard.handshake_cuts) +
         " connections during the handshake: it speaks CurveZMQ and this process does not "
         "(security.mode none; every process of a job needs the same security section), or it "
         "is past its server.max_connections";
}

size_t Client::ExpireDeadlines() {
  const auto now = time_->Now();
  size_t expired = 0;
  while (const uint64_t rid = tracker_.PopExpired(now)) {
    ++expired;
    Part& p = *tracker_.Find(rid);
    const Shard& shard = shards_[p.shard];
    if (shard.down) {
      // The server went away: its requests wait for it to come back.
      const auto give_up = shard.down_since + down_timeout_;
      if (give_up > now) {
        tracker_.Extend(rid, p, give_up);
        continue;
      }
      ++counters_.timeouts;
      FinishPart(rid, UnavailableError(
                          Describe(p, rid) + " failed: the connection to the server dropped " +
                          std::to_string(static_cast<int64_t>(MillisSince(shard.down_since))) +
                          " ms ago and it did not come back within " +
                          std::to_string(down_timeout_.count()) +
                          " ms (liveness.server_down_timeout_ms); " +
                          (shard.handshake_cuts == 0
                               ? std::string("is it running? ps_launch restarts a crashed server "
                                             "when the job has checkpoint.dir")
                               : HandshakeCuts(shard))));
      continue;
    }
    ++counters_.timeouts;
    FinishPart(rid, DeadlineExceededError(
                        Describe(p, rid) + " got no reply within " +
                        std::to_string(timeout_.count()) + " ms (client.request_timeout_ms); " +
                        (shard.handshake_cuts == 0
                             ? std::string("the server may be down, overloaded or unreachable")
                             : HandshakeCuts(shard))));
  }
  return expired;
}

Status Client::Poll(int timeout_ms) {
  // Requests that just ended may be what the caller waits for: return
  // without waiting.
  if (ExpireDeadlines() > 0) timeout_ms = 0;
  if (auto next = tracker_.NextDeadline()) {
    auto until =
        std::chrono::duration_cast<std::chrono::milliseconds>(*next - time_->Now()).count() + 1;
    timeout_ms = static_cast<int>(std::clamp<int64_t>(until, 0, timeout_ms));
  }
  for (uint32_t s = 0; s < shards_.size(); ++s) {
    Shard& shard = shards_[s];
    if (!shard.handshake_failed_at) continue;
    const auto since = time_->Now() - *shard.handshake_failed_at;
    if (since >= kHandshakeRefusedAfter) {
      shard.handshake_failed_at.reset();
      RefusedBy(s, ConnectionEvent::kHandshakeFailed);
      timeout_ms = 0;
    } else {
      timeout_ms = std::min<int>(
          timeout_ms,
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                               kHandshakeRefusedAfter - since).count()) + 1);
    }
  }
  AdvanceProbes(&timeout_ms);
  bool buffered = false;  // a channel holds messages of its own (a test's)
  for (const Shard& shard : shards_) buffered = buffered || shard.channel->HasBuffered();
  if (buffered) timeout_ms = 0;
  auto ready = PollReadable(poll_sockets_, timeout_ms, &readable_);
  if (!ready.ok()) return ready.status();
  if (*ready > 0 || buffered) {
    const size_t n = shards_.size();
    for (uint32_t s = 0; s < n; ++s) {
      if (readable_[s] || buffered) PS_RETURN_IF_ERROR(ReceiveReplies(s));
    }
    // After the replies: those that arrived before a connection dropped
    // are answers, not requests to send again.
    for (uint32_t s = 0; s < n; ++s) {
      if (readable_[n + s] || buffered) PS_RETURN_IF_ERROR(HandleConnectionEvents(s));
    }
  }
  ExpireDeadlines();
  return Status::Ok();
}

Status Client::ReceiveReplies(uint32_t s) {
  while (true) {
    PS_ASSIGN_OR_RETURN(bool got, shards_[s].channel->TryRecv(&frames_));
    if (!got) return Status::Ok();
    if (shards_[s].probing) {
      HandleProbeReply(s, frames_);
    } else {
      HandleReply(s, frames_);
    }
  }
}

void Client::FindPrimary(uint32_t s) {
  Shard& shard = shards_[s];
  // The next replica on the ring first: the one the authority promotes
  // when the primary died.
  const uint32_t ring = ProbeRing(shard);
  shard.replica = shard.replica % ring;
  LookFor(s, (shard.replica + 1) % ring);
}

void Client::LookFor(uint32_t s, uint32_t replica) {
  shards_[s].probing = true;  // its requests wait from now on
  if (Status asked = Probe(s, replica); !asked.ok()) {
    PS_LOG_WARN("server {}: {}", s, asked.ToString());  // asked again at probe_next_at
  }
}

Status Client::Probe(uint32_t s, uint32_t replica) {
  Shard& shard = shards_[s];
  const std::string endpoint = ProbeEndpoint(shard, replica);
  shard.replica = replica;
  shard.probe_id = 0;
  shard.probe_same = false;
  // Not connected by then: the next one (kProbeTimeout once connected).
  shard.probe_next_at = time_->Now() + kProbeConnectTimeout;
  // A channel of its own for each question: the old one's queue may hold
  // requests that a replica that is not the primary must not get, and
  // answers of another replica.
  PS_ASSIGN_OR_RETURN(auto channel, Connect(s, endpoint));
  shard.channel = std::move(channel);
  shard.awaiting_first_connect = true;
  const size_t n = shards_.size();
  poll_sockets_[s] = shard.channel->poll_sockets().messages;
  poll_sockets_[n + s] = shard.channel->poll_sockets().events;
  MessageHeader h;
  h.op = Op::kPrimary;
  h.map_epoch = map_epoch_;  // a server of an older map drops or refuses it
  h.request_id = next_request_id_++;
  h.worker = worker_;
  h.session = session_;
  Frame frame = EncodeHeader(h);
  PS_RETURN_IF_ERROR(shard.channel->Send(std::span<Frame>(&frame, 1))
                         .WithContext("asking replica " + std::to_string(replica) + " at " +
                                      endpoint + " whether it serves"));
  shard.probe_id = h.request_id;
  ++counters_.probes;
  return Status::Ok();
}

void Client::HandleProbeReply(uint32_t s, std::span<Frame> frames) {
  Shard& shard = shards_[s];
  const uint64_t probe_id = shard.probe_id;
  ps::Reply reply;
  (void)DecodeReply(
      frames, s,
      [probe_id, s](uint64_t id) -> std::optional<ReplyExpectation> {
        if (probe_id == 0 || id != probe_id) return std::nullopt;
        return ReplyExpectation{.request = Op::kPrimary, .shard = s};
      },
      &reply);
  if (reply.fault != ReplyFault::kNone && reply.fault != ReplyFault::kRejected) {
    ++counters_.late_replies;  // an answer of an earlier replica, or not one
    return;
  }
  const MessageHeader* h = &reply.header;
  const std::string endpoint = ProbeEndpoint(shard, shard.replica);
  if (shard.replicas.empty()) {
    // One address and nothing to choose among: whatever of this map (or a
    // newer one) answers there is the server (a control client may talk to
    // a backup, which serves no writes); a primary of an older map that
    // lingers there is asked again until its successor takes the address.
    if (reply.fault == ReplyFault::kNone && h->map_epoch < map_epoch_) {
      shard.probe_same = true;
      shard.probe_id = 0;
      shard.probe_next_at = time_->Now() + kProbeRetry;
      return;
    }
  } else if (reply.fault == ReplyFault::kRejected || (h->flags & kFlagServing) == 0 ||
             h->map_epoch < map_epoch_ ||
             (h->epoch < shard.epoch && h->map_epoch <= map_epoch_)) {
    // A backup, a fenced primary, one of an older epoch than this client
    // saw (a replica's epoch counts from 0 again in each shard map, so an
    // older epoch of a newer map is not an old primary's), a server of an
    // older map, or a server that does not know PRIMARY: the next one,
    // soon. A primary of an older map lingers where the new map's replica
    // comes once it exited: that replica is asked again, not the next (a
    // backup, of any map, sends the client on).
    shard.probe_same = reply.fault != ReplyFault::kRejected && (h->flags & kFlagServing) != 0 &&
                       h->map_epoch < map_epoch_;
    PS_LOG_DEBUG("server {}: replica {} at {} does not serve (epoch {}, map {}); asking {}", s,
                 shard.replica, endpoint, h->epoch, h->map_epoch,
                 shard.probe_same ? "it again" : "the next");
    shard.probe_id = 0;
    shard.probe_next_at = time_->Now() + kProbeRetry;
    return;
  }
  shard.probing = false;
  shard.probe_id = 0;
  const bool moved = endpoint != shard.endpoint;
  if (moved) {
    ++counters_.fail_overs;
    PS_LOG_WARN("server {}: replica {} at {} serves as the shard's primary at epoch {} (was {} "
                "at epoch {})",
                s, shard.replica, endpoint, h->epoch, shard.endpoint, shard.epoch);
    shard.endpoint = endpoint;
    if (heartbeat_ != nullptr) heartbeat_->Retarget(s, endpoint);
  }
  shard.epoch = h->epoch;
  shard.handshake_failed_at.reset();
  Reconnected(s);
  shard.down = false;
}

void Client::AdvanceProbes(int* timeout_ms) {
  const auto now = time_->Now();
  for (uint32_t s = 0; s < shards_.size(); ++s) {
    Shard& shard = shards_[s];
    if (!shard.probing) continue;
    if (now >= shard.probe_next_at) {
      const uint32_t next = shard.probe_same ? shard.replica : (shard.replica + 1) % ProbeRing(shard);
      // A "not serving" answer: the next replica. No answer at all (the
      // replica is gone): the next too.
      Status asked = Probe(s, next);
      if (!asked.ok()) PS_LOG_WARN("server {}: {}", s, asked.ToString());
    }
    const auto until = std::chrono::duration_cast<std::chrono::milliseconds>(
                           shard.probe_next_at - now).count() + 1;
    *timeout_ms = static_cast<int>(std::clamp<int64_t>(until, 0, *timeout_ms));
  }
}

Status Client::HandleConnectionEvents(uint32_t s) {
  Shard& shard = shards_[s];
  while (true) {
    PS_ASSIGN_OR_RETURN(std::optional<ConnectionEvent> event, shard.channel->TryNextEvent());
    if (!event) return Status::Ok();
    // Under security.mode none a server of another mode fails the handshake
    // on a protocol error (a mechanism mismatch); one cut with none is a
    // server that went away during it (one that exits, at an address its
    // successor listens at later), and counts for nothing.
    if (*event == ConnectionEvent::kHandshakeCut && job_.security.mode != SecurityMode::kCurve) {
      ++shard.handshake_cuts;
      continue;
    }
    if (*event == ConnectionEvent::kHandshakeFailed ||
        *event == ConnectionEvent::kHandshakeCut) {
      // Decided in Poll once kHandshakeRefusedAfter passes with no
      // handshake that succeeded.
      if (!shard.handshake_failed_at) shard.handshake_failed_at = time_->Now();
      continue;
    }
    if (*event == ConnectionEvent::kRefused) {
      RefusedBy(s, *event);
      continue;
    }
    if (*event == ConnectionEvent::kDisconnected) {
      if (shard.probing) {
        // The replica asked went away (an old server at an address its
        // successor takes, one that exits): asked again, or the next, soon.
        shard.probe_next_at = std::min(shard.probe_next_at, time_->Now() + kProbeRetry);
        continue;
      }
      if (shard.closing) {
        // It acknowledged a SHUTDOWN or this worker's goodbye: a server
        // exits then, and nothing is waiting for it.
        PS_LOG_DEBUG("server {} at {} closed the connection", s, shard.endpoint);
        continue;
      }
      if (shard.down) continue;
      {
        // What the server answered before the connection dropped is in
        // the channel already: read before the channel goes (FindPrimary),
        // those requests are not sent again.
        const int64_t map_before = map_epoch_;
        PS_RETURN_IF_ERROR(ReceiveReplies(s));
        if (map_epoch_ != map_before) return Status::Ok();  // every shard is looked for anew
      }
      shard.down = true;
      if (shard.refused) {
        // The handshake was refused (logged): not a server that went away.
        shard.down_since = time_->Now();
        continue;
      }
      shard.down_since = time_->Now();
      ++counters_.disconnects;
      if (!shard.replicas.empty()) {
        PS_LOG_WARN("connection to server {} at {} dropped with {} requests in flight; looking "
                    "for the shard's primary among its {} replicas for up to {} ms "
                    "(liveness.server_down_timeout_ms)",
                    s, shard.endpoint, tracker_.in_flight(s), shard.replicas.size(),
                    down_timeout_.count());
        FindPrimary(s);
        continue;
      }
      PS_LOG_WARN("connection to server {} at {} dropped with {} requests in flight; waiting up "
                  "to {} ms (liveness.server_down_timeout_ms) for it to come back",
                  s, shard.endpoint, tracker_.in_flight(s), down_timeout_.count());
      // On a new channel: the old one's queue may hold requests that came
      // after those the connection lost, which the server there next must
      // not get first.
      FindPrimary(s);
      continue;
    }
    const bool first_of_probe_channel = shard.awaiting_first_connect;
    shard.awaiting_first_connect = false;
    if (shard.probing || first_of_probe_channel) {
      // A replica asked whether it serves: its answer decides (a channel
      // made for the primary found was answered on already).
      shard.connected_once = true;
      shard.handshake_failed_at.reset();
      shard.handshake_cuts = 0;
      if (shard.probing && first_of_probe_channel) {
        // Something listens there: an answer comes soon, or never.
        shard.probe_next_at = std::min(shard.probe_next_at, time_->Now() + kProbeTimeout);
      }
      continue;
    }
    const bool again = shard.connected_once;
    shard.connected_once = true;
    shard.handshake_failed_at.reset();
    shard.handshake_cuts = 0;
    shard.refused = false;  // let in (a key the server reads now)
    if (again) Reconnected(s);
    shard.down = false;
  }
}

void Client::RefusedBy(uint32_t s, ConnectionEvent event) {
  Shard& shard = shards_[s];
  ++counters_.refusals;
  const std::string keys = job_.security.keys_dir.empty() ? "the keys folder" : job_.security.keys_dir;
  const std::string who = KeyName(IdentityOf(worker_));
  const Status refused =
      event == ConnectionEvent::kRefused
          ? PermissionDeniedError(
                "server " + std::to_string(s) + " at " + shard.endpoint + " refused this " +
                "process's key (" + keys + "/" + who + ".secret): is " + who +
                ".public among the server's keys? After a new key, send the servers SIGHUP "
                "(or restart them) so they read it")
          : PermissionDeniedError(
                "the handshake with server " + std::to_string(s) + " at " + shard.endpoint +
                " failed: it " +
                (job_.security.mode == SecurityMode::kCurve
                     ? "does not speak CurveZMQ, or its key is not " + keys + "/server.public"
                     : "speaks CurveZMQ and this process does not (security.mode none)") +
                "; every process of a job needs the same security section and server.public");
  // ZeroMQ tries again and again (each attempt refused alike): what waits
  // on this server fails now instead of at its deadline.
  const std::vector<uint64_t> rids = tracker_.InFlightTo(s);
  if (!shard.refused) {
    shard.refused = true;
    PS_LOG_ERROR("{}", refused.message());
  }
  for (uint64_t rid : rids) FinishPart(rid, refused);
}

void Client::Reconnected(uint32_t s) {
  Shard& shard = shards_[s];
  ++counters_.reconnects;
  const std::vector<uint64_t> rids = tracker_.InFlightTo(s);  // oldest first
  const std::string clock =
      control_ || reader_ ? "" : " and this worker's clock " + std::to_string(clock_);
  if (shard.new_map) {
    PS_LOG_INFO("server {} of shard map {} at {} serves after {:.0f} ms; sending it its {} "
                "requests{}",
                s, map_epoch_, shard.endpoint, MillisSince(shard.down_since), rids.size(), clock);
  } else if (shard.down) {
    PS_LOG_INFO("server {} at {} is back after {:.0f} ms; sending its {} unanswered requests "
                "again{}",
                s, shard.endpoint, MillisSince(shard.down_since), rids.size(), clock);
  } else {
    PS_LOG_INFO("reconnected to server {} at {}; sending its {} unanswered requests again{}", s,
                shard.endpoint, rids.size(), clock);
  }
  std::vector<Frame> copy;
  shard.new_map = false;
  for (uint64_t rid : rids) {
    Part* p = tracker_.Find(rid);
    if (p == nullptr) continue;  // a callback of an earlier one finished it
    const bool again = !p->held;
    if (!again) {
      // Made while the server was looked for: its first send, its
      // deadline from now.
      p->held = false;
      tracker_.Extend(rid, *p, time_->Now() + timeout_);
    } else if (!tracker_.Resent(rid, *p)) {
      FinishPart(rid, UnavailableError(Describe(*p, rid) + " was sent " +
                                       std::to_string(RequestTracker::kMaxResends + 1) +
                                       " times and each time the connection to the server "
                                       "dropped before it answered; giving up"));
      continue;
    }
    copy.clear();
    uint64_t bytes = 0;
    for (size_t i = 0; i < p->message_frames; ++i) {
      copy.push_back(p->message[i].Clone());
      bytes += p->message[i].size();
    }
    Status sent = shard.channel->Send(copy);
    if (!sent.ok()) {
      FinishPart(rid, sent.WithContext(Describe(*p, rid) + " could not be sent again"));
      continue;
    }
    if (again) ++counters_.resent;
    ++counters_.requests;
    counters_.bytes_sent += bytes;
  }
  // A restarted server went back to its checkpoint: cached rows may be
  // newer than what it serves now.
  if (cache_ != nullptr) {
    for (uint32_t t = 0; t < job_.tables.size(); ++t) cache_->Invalidate(t);
  }
  if (!control_ && !reader_) {
    // A server restarted from a checkpoint would otherwise wait for this
    // worker's clocks that already passed. Sent after the requests above,
    // on the same connection, so it arrives after them. No slot wait: this
    // runs inside Poll.
    const Ticket ticket = tracker_.NewTicket([](const Status&) {});
    SendPartNow({.ticket = ticket, .shard = s, .op = Op::kHeartbeat, .flags = kFlagResume},
                Frame(), Frame());
    tracker_.Release(ticket, Status::Ok());
  }
}

}  // namespace ps
