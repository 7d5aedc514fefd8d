// The client's side of resharding (server/reshard_gate.h): turning to the
// shard map a moved reply names, and sending each moved request again under
// it, split anew over its servers.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "common/endpoint.h"
#include "common/hash_slots.h"
#include "common/key_range.h"
#include "common/logging.h"
#include "common/wire_floats.h"

namespace ps {

Status Client::SwitchMap(int64_t epoch, const std::string& servers) {
  if (epoch <= map_epoch_) return Status::Ok();
  // The list, each entry checked before anything changes.
  StatusOr<std::vector<HostPort>> parsed = ParseServerList(servers);
  if (!parsed.ok()) {
    return parsed.status().WithContext("a server answered that the job moved to map " +
                                       std::to_string(epoch));
  }
  std::vector<std::string> endpoints;
  for (const HostPort& server : *parsed) endpoints.push_back(ConnectEndpoint(server));
  // replication.factor >= 2 (replicas found from the job, not named): each
  // shard's replicas in the new map, whose replica 0 serves first.
  std::vector<std::vector<std::string>> replicas(endpoints.size());
  if (job_.replication.factor > 1 && !shards_.empty() && !shards_[0].replicas.empty()) {
    JobOptions next = job_;
    next.cluster.servers.clear();
    for (const HostPort& server : *parsed) next.cluster.servers.push_back(server.canonical);
    for (uint32_t s = 0; s < endpoints.size(); ++s) {
      for (uint32_t r = 0; r < next.replication.factor; ++r) {
        StatusOr<HostPort> replica = ReplicaHostPort(next, s, r);
        if (!replica.ok()) {
          return replica.status().WithContext("a server answered that the job moved to map " +
                                              std::to_string(epoch));
        }
        replicas[s].push_back(ConnectEndpoint(*replica));
      }
    }
  }
  const uint32_t before = map_size_;
  for (uint32_t s = 0; s < endpoints.size(); ++s) {
    if (s >= shards_.size()) {
      Shard shard;
      shard.endpoint = endpoints[s];
      // A channel for the poll list; Probe makes the one used below.
      PS_ASSIGN_OR_RETURN(shard.channel, Connect(s, shard.endpoint));
      shards_.push_back(std::move(shard));
    }
    Shard& shard = shards_[s];
    shard.closing = false;  // a server left out once may be in the map again
    // The new map's replicas start at epoch 0 with replica 0 serving.
    shard.endpoint = endpoints[s];
    shard.replicas = replicas[s];
    shard.replica = 0;
    shard.epoch = 0;
    shard.connected_once = true;
    // A handshake that failed with the old map's server (one that exited
    // as it was reached) says nothing of the new map's.
    shard.handshake_failed_at.reset();
    shard.handshake_cuts = 0;
    shard.refused = false;
    if (heartbeat_ != nullptr) heartbeat_->Retarget(s, endpoints[s]);
  }
  // Servers the map leaves out: they answer (moved) what was sent there,
  // then exit, which is no server going away.
  for (uint32_t s = static_cast<uint32_t>(endpoints.size()); s < shards_.size(); ++s) {
    shards_[s].closing = true;
    if (heartbeat_ != nullptr) heartbeat_->Retarget(s, "");
  }
  map_size_ = static_cast<uint32_t>(endpoints.size());
  map_epoch_ = epoch;
  ++counters_.map_changes;
  tracker_.SetShards(static_cast<uint32_t>(shards_.size()));
  poll_sockets_.clear();
  for (const Shard& shard : shards_) poll_sockets_.push_back(shard.channel->poll_sockets().messages);
  for (const Shard& shard : shards_) poll_sockets_.push_back(shard.channel->poll_sockets().events);
  // Each server of the new map is asked whether it serves (PRIMARY, which
  // a process of an older map at the same address does not answer as
  // serving), on a channel of its own, before anything is sent there: what
  // the old channel still queued, and any request sent before the new
  // server listens, could reach it ahead of the requests it must follow.
  // The requests wait (Shard::probing) and go once it answers, in order.
  for (uint32_t s = 0; s < map_size_; ++s) {
    Shard& shard = shards_[s];
    shard.new_map = true;
    shard.down = true;
    shard.down_since = time_->Now();
    LookFor(s, 0);
  }
  // The servers of the new map restored the state at the handover clock.
  if (cache_ != nullptr) {
    for (uint32_t t = 0; t < job_.tables.size(); ++t) cache_->Invalidate(t);
  }
  PS_LOG_INFO("the job moved from {} to {} servers (shard map {}): {}; sending the moved "
              "requests there",
              before, map_size_, epoch, servers);
  return Status::Ok();
}

void Client::ResendMoved(uint64_t request_id) {
  Part* found = tracker_.Find(request_id);
  if (found == nullptr) return;
  Part& p = *found;
  StatusOr<MessageHeader> decoded =
      DecodeHeader(std::span<const std::byte>(p.message[0].data(), p.message[0].size()));
  if (!decoded.ok()) {
    FinishPart(request_id, decoded.status().WithContext(Describe(p, request_id)));
    return;
  }
  const MessageHeader& sent = *decoded;
  const Ticket ticket = p.ticket;
  // The new parts hold the ticket before the moved one lets go of it.
  auto send = [&](Part&& part, MessageHeader h, Frame&& keys, Frame&& values) {
    h.map_epoch = map_epoch_;
    h.flags &= ~kFlagDenseRange;  // set again for a part without keys
    SendWithHeader(std::move(part), h, std::move(keys), std::move(values), /*cacheable=*/false);
  };
  if (p.op != Op::kPush && p.op != Op::kPull) {
    // A CLOCK (the only other op a shard moves) goes to every server of the
    // map once all its parts were moved: each old shard answers its moved
    // requests in order, so by then every push before it went there first
    // (a shard of the new map gets a clock's pushes before its CLOCK).
    p.moved = true;
    const std::vector<uint64_t> parts = tracker_.PartsOf(ticket);
    for (uint64_t id : parts) {
      const Part* other = tracker_.Find(id);
      if (other != nullptr && other->op == p.op && !other->moved) return;
    }
    for (uint32_t s = 0; s < map_size_; ++s) {
      send(Part{.ticket = ticket, .shard = s, .op = sent.op}, sent, Frame(), Frame());
    }
    for (uint64_t id : parts) {
      const Part* other = tracker_.Find(id);
      if (other != nullptr && other->moved) FinishPart(id, Status::Ok());
    }
    return;
  }
  const TableOptions& t = job_.tables[p.table];
  const bool dense = sent.dense();
  const uint64_t count = p.count;
  const auto* keys =
      dense ? nullptr : reinterpret_cast<const uint64_t*>(p.message[1].data());
  const Frame* values = p.op == Op::kPush ? &p.message[dense ? 1 : 2] : nullptr;
  const uint64_t row_bytes = uint64_t{p.dim} * WireBytes(p.dtype);
  // Each row's server under the new map, and the rows of each server in
  // the order of the part.
  std::vector<std::vector<uint64_t>> by_shard(map_size_);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t row = dense ? p.first_row + i : keys[i];
    const uint32_t owner =
        t.hashed() ? SlotShard(IdSlot(row, t.HashSeed(), t.HashSlots()), t.HashSlots(), map_size_)
                   : ShardOfRow(t.rows, map_size_, row);
    by_shard[owner].push_back(i);
  }
  for (uint32_t s = 0; s < map_size_; ++s) {
    const std::vector<uint64_t>& rows = by_shard[s];
    if (rows.empty()) continue;
    const uint64_t n = rows.size();
    Part part{.ticket = ticket, .shard = s, .op = p.op, .table = p.table, .count = n,
              .dim = p.dim, .dtype = p.dtype};
    MessageHeader h = sent;
    h.count = n;
    Frame key_frame, value_frame;
    // A dense part's rows on one server are one run of it.
    if (dense) {
      h.first_row = part.first_row = p.first_row + rows.front();
      if (values != nullptr) {
        value_frame = Frame::CopyOf(values->data() + rows.front() * row_bytes, n * row_bytes);
      }
      if (p.view != nullptr) {
        part.view = p.view;
        part.view_offset = p.view_offset + rows.front() * p.dim;
      } else if (p.out != nullptr && p.positions.empty()) {
        part.out = p.out + rows.front() * p.dim;
      } else if (p.out != nullptr) {
        part.out = p.out;
        part.positions.assign(p.positions.begin() + static_cast<ptrdiff_t>(rows.front()),
                              p.positions.begin() + static_cast<ptrdiff_t>(rows.front() + n));
      }
    } else {
      StatusOr<Frame> kf = Frame::Allocate(n * sizeof(uint64_t));
      StatusOr<Frame> vf = values != nullptr ? Frame::Allocate(n * row_bytes) : StatusOr<Frame>(Frame());
      if (!kf.ok() || !vf.ok()) {
        tracker_.Fail(ticket, !kf.ok() ? kf.status() : vf.status());
        continue;
      }
      auto* k = reinterpret_cast<uint64_t*>(kf->mutable_data());
      for (uint64_t x = 0; x < n; ++x) {
        k[x] = keys[rows[x]];
        if (values != nullptr) {
          std::memcpy(vf->mutable_data() + x * row_bytes, values->data() + rows[x] * row_bytes,
                      row_bytes);
        }
      }
      key_frame = std::move(*kf);
      value_frame = std::move(*vf);
      h.first_row = 0;
      if (p.out != nullptr) {
        part.out = p.out;
        part.positions.resize(n);
        for (uint64_t x = 0; x < n; ++x) {
          part.positions[x] = p.positions.empty() ? rows[x] : p.positions[rows[x]];
        }
      }
    }
    send(std::move(part), h, std::move(key_frame), std::move(value_frame));
  }
  FinishPart(request_id, Status::Ok());
}

}  // namespace ps
