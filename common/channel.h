// A connection to one server: what a Client sends its requests and
// receives its replies through, what its heartbeats go on, and what a
// primary sends its backups the replication log on. The Env makes them
// (Env::Connect, common/env.h); ZmqChannel is the real one (a ZeroMQ
// DEALER and a monitor of its connection, common/transport.h); tests wrap
// it to drop, delay, duplicate or reorder messages and to cut the
// connection (tests/util/faulty_channel.h).
//
// A channel moves whole messages; it never looks into value frames, so a
// wrapper costs a virtual call per message, not per row.
//
// Thread safety: not thread-safe; used by the one thread that owns it.
#ifndef PS_COMMON_CHANNEL_H_
#define PS_COMMON_CHANNEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/transport.h"

namespace ps {

class Channel {
 public:
  // What Client::Poll waits on for this channel (PollReadable): `messages`
  // is readable when TryRecv may have a message, `events` when
  // TryNextEvent may have an event.
  struct PollSockets {
    Socket* messages = nullptr;
    Socket* events = nullptr;
  };

  virtual ~Channel() = default;

  // Sends the frames as one multipart message, never blocking. On success
  // the frames are left empty; on failure (Unavailable: the queue to the
  // shard is full) they keep their contents.
  virtual Status Send(std::span<Frame> frames) = 0;
  // Receives one whole message into *frames if one is ready; false when
  // none is (never blocks).
  virtual StatusOr<bool> TryRecv(std::vector<Frame>* frames) = 0;
  // The next change of the connection, nullopt when none is waiting (never
  // blocks). The first kConnected is the first connection; a later one
  // follows a kDisconnected.
  virtual StatusOr<std::optional<ConnectionEvent>> TryNextEvent() = 0;
  virtual PollSockets poll_sockets() = 0;
  // True when the channel holds messages or events of its own, ready
  // without waiting on its sockets.
  virtual bool HasBuffered() const { return false; }
  // Messages not sent yet are dropped when the channel is destroyed,
  // instead of lingering (a backup the primary forgot must not get them
  // at its address later).
  virtual void DropUnsentOnClose() = 0;
};

// What a channel carries: a Client's requests and their replies, a
// worker's heartbeats (client/heartbeat.h; its channels are used by the
// heartbeat thread), or a primary's replication log to one backup
// (server/replication.h).
enum class ChannelUse { kRequests, kHeartbeats, kReplication };

// Where a channel goes and how much it queues.
struct ChannelOptions {
  // The shard it reaches (the index of its server).
  uint32_t shard = 0;
  // "tcp://host:port".
  std::string endpoint;
  // The connecting side's keys under security.mode curve; disabled otherwise.
  CurveOptions curve;
  ChannelUse use = ChannelUse::kRequests;
  // Messages queued in each direction before a send fails with
  // Unavailable (a server that is gone or not reading) or ZeroMQ stops
  // reading replies; 0: no limit.
  int hwm = 0;
  // How long messages not sent yet are kept after the channel is closed.
  int linger_ms = 0;
  // How often a dropped connection is tried again, milliseconds (the
  // job's liveness.reconnect_ms; 100 is ZeroMQ's own default).
  int reconnect_ms = 100;
  // Whether the connection's events are watched (TryNextEvent); a
  // replication channel's are not.
  bool events = true;
};

// Makes a channel: `context` is its user's (it outlives the channel).
// Called from the thread that will use the channel. Env::Connect is one;
// tests keep one in their Env (tests/util/test_env.h).
using ChannelFactory =
    std::function<StatusOr<std::unique_ptr<Channel>>(Context* context, const ChannelOptions& options)>;

// A DEALER connected to the shard, and its ConnectionMonitor.
class ZmqChannel final : public Channel {
 public:
  // Watches the connection (options.events) from before it is made, so a
  // reconnect is never mistaken for the first connection. Connecting does
  // not wait for the server. `context` must outlive the channel. With
  // options.curve enabled the connection is a CurveZMQ client of the
  // server's key.
  static StatusOr<std::unique_ptr<Channel>> Connect(Context* context,
                                                    const ChannelOptions& options);
  // The high-water mark of a client with `max_in_flight` requests per
  // shard: its requests, their copies sent again after a reconnect while
  // the first ones still wait in the queue, and a reply for each (a pull
  // sent twice is answered twice), with room for CLOCKs. A client that
  // keeps to max_in_flight never fills it.
  static constexpr int ChannelHwm(uint32_t max_in_flight) {
    return static_cast<int>(4 * max_in_flight + 64);
  }

  Status Send(std::span<Frame> frames) override { return socket_->Send(frames); }
  StatusOr<bool> TryRecv(std::vector<Frame>* frames) override { return socket_->TryRecv(frames); }
  StatusOr<std::optional<ConnectionEvent>> TryNextEvent() override;
  PollSockets poll_sockets() override;
  void DropUnsentOnClose() override { socket_->DropUnsentOnClose(); }

 private:
  ZmqChannel(std::unique_ptr<Socket> socket, std::unique_ptr<ConnectionMonitor> monitor)
      : socket_(std::move(socket)), monitor_(std::move(monitor)) {}
  std::unique_ptr<Socket> socket_;
  // Declared after `socket_`: destroyed before the socket it watches.
  // Null when the events are not watched.
  std::unique_ptr<ConnectionMonitor> monitor_;
};

}  // namespace ps

#endif  // PS_COMMON_CHANNEL_H_
