// The bytes of pull replies a shard has handed to ZeroMQ that ZeroMQ has not
// released yet (server.max_queued_reply_bytes), per connection (routing id)
// and in all.
//
// The bound is per connection, not per worker id, so that whoever else
// holds a worker's key cannot use up the worker's own; all connections
// together are bounded too (a client may open many), and once they reach
// that bound only the connections holding at least an equal share of it
// are refused: a worker that reads its replies is still served.
//
// ZeroMQ releases a reply's frames once it has written them to the kernel,
// so the bytes stay counted while the client does not read. Each value frame
// of a charged reply is wrapped in a frame sharing its bytes (Frame::Share)
// whose owner holds the original frames and the counts; the owner goes when
// ZeroMQ releases the last of them and takes the reply's bytes off again.
//
// Thread safety: Charge, Queued, Sweep and the readers run on the shard's
// thread; the counts drop on whichever thread ZeroMQ releases a frame on
// (an I/O thread), so they are atomic and shared with the frames, which may
// outlive this object.
#ifndef PS_SERVER_QUEUED_REPLIES_H_
#define PS_SERVER_QUEUED_REPLIES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/transport.h"

namespace ps {

class QueuedReplies {
 public:
  QueuedReplies();

  // The bytes queued for connection `routing_id`.
  uint64_t Queued(std::string_view routing_id) const;

  // Whether a pull of connection `routing_id` must be refused: the
  // connection holds `per_connection` bytes or more, or all connections
  // together hold `total` or more and this one at least an equal share of
  // `total` among the connections holding any.
  bool OverBound(std::string_view routing_id, uint64_t per_connection, uint64_t total) const;

  // Counts `bytes` for `routing_id` until ZeroMQ has released every frame
  // of `frames`, which are replaced by frames sharing their bytes.
  // ResourceExhausted when a frame cannot be wrapped; `frames` are then
  // gone (empty) and nothing stays counted.
  Status Charge(std::string_view routing_id, uint64_t bytes, std::span<Frame> frames);

  // Forgets the connections with nothing queued.
  void Sweep();

  // Bytes queued over every connection.
  uint64_t total() const { return total_->load(std::memory_order_relaxed); }
  // Connections known with bytes queued (at the last Sweep, at most).
  size_t connections() const { return peers_.size(); }
  // The most bytes queued for one connection.
  uint64_t max_per_connection() const;

 private:
  using Count = std::atomic<uint64_t>;

  std::map<std::string, std::shared_ptr<Count>, std::less<>> peers_;
  std::shared_ptr<Count> total_;
};

}  // namespace ps

#endif  // PS_SERVER_QUEUED_REPLIES_H_
