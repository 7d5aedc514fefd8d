// A client's connection to one shard: what Client sends and receives
// through. ZmqChannel is the real one (a ZeroMQ DEALER and a monitor of its
// connection, common/transport.h); tests wrap it to drop, delay, duplicate
// or reorder messages and to cut the connection
// (tests/util/faulty_channel.h).
//
// A channel moves whole messages; it never looks into value frames, so a
// wrapper costs a virtual call per message, not per row.
//
// Thread safety: not thread-safe; used by the thread that drives its Client.
#ifndef PS_CLIENT_CHANNEL_H_
#define PS_CLIENT_CHANNEL_H_

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
};

// What a channel carries: a Client's requests and their replies, or a
// worker's heartbeats (client/heartbeat.h; its channels are used by the
// heartbeat thread).
enum class ChannelUse { kRequests, kHeartbeats };

// Makes a channel to one shard: `context` is its user's (it outlives the
// channel), `shard` its index, `endpoint` "tcp://host:port", `curve` the
// client's keys under security.mode curve (disabled otherwise), `use` what
// it carries. Called from the thread that will use the channel.
using ChannelFactory = std::function<StatusOr<std::unique_ptr<Channel>>(
    Context* context, uint32_t shard, const std::string& endpoint, const CurveOptions& curve,
    ChannelUse use)>;

// A DEALER connected to the shard, and its ConnectionMonitor.
class ZmqChannel final : public Channel {
 public:
  // Watches the connection from before it is made, so a reconnect is never
  // mistaken for the first connection. Connecting does not wait for the
  // server. `context` must outlive the channel. With `curve` enabled the
  // connection is a CurveZMQ client of the server's key. `hwm`: messages
  // queued in each direction before a send fails with Unavailable (a shard
  // that is gone or not reading) or ZeroMQ stops reading replies (ChannelHwm).
  static StatusOr<std::unique_ptr<Channel>> Connect(Context* context, const std::string& endpoint,
                                                    const CurveOptions& curve = {},
                                                    int hwm = ChannelHwm(256));
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
  StatusOr<std::optional<ConnectionEvent>> TryNextEvent() override { return monitor_->TryNext(); }
  PollSockets poll_sockets() override { return {socket_.get(), monitor_->socket()}; }

 private:
  ZmqChannel(std::unique_ptr<Socket> socket, std::unique_ptr<ConnectionMonitor> monitor)
      : socket_(std::move(socket)), monitor_(std::move(monitor)) {}
  std::unique_ptr<Socket> socket_;
  // Declared after `socket_`: destroyed before the socket it watches.
  std::unique_ptr<ConnectionMonitor> monitor_;
};

}  // namespace ps

#endif  // PS_CLIENT_CHANNEL_H_
