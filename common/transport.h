// The ZeroMQ adapter: the only code that includes <zmq.h>. Frames, sockets
// and polling, with every libzmq error turned into a ps::Status.
//
// Thread safety: a Context is thread-safe. A Socket and a Frame are not; a
// Socket must be used by one thread at a time (ZeroMQ's own rule).
#ifndef PS_COMMON_TRANSPORT_H_
#define PS_COMMON_TRANSPORT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace ps {

// One part of a multipart message. Move-only; owns a zmq_msg_t.
class Frame {
 public:
  Frame();  // empty, size 0
  ~Frame();
  Frame(Frame&& other) noexcept;
  Frame& operator=(Frame&& other) noexcept;
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;

  // A frame of `size` uninitialized bytes, to be filled through mutable_data().
  // ResourceExhausted if the memory cannot be had.
  static StatusOr<Frame> Allocate(size_t size);
  // A frame holding a copy of the bytes (for small frames: headers, keys).
  static Frame CopyOf(const void* data, size_t size);
  static Frame CopyOf(std::string_view bytes) { return CopyOf(bytes.data(), bytes.size()); }
  // Zero-copy: the frame points at [data, data + size) without copying.
  // `owner` keeps the bytes alive and is released when ZeroMQ no longer needs
  // them (after sending, or when the message is dropped), possibly on a
  // ZeroMQ I/O thread. The bytes must not change until the message is sent.
  // ResourceExhausted when ZeroMQ cannot take the bytes (it allocates a
  // small record per shared frame); `owner` is then released at once.
  static StatusOr<Frame> Share(const void* data, size_t size, std::shared_ptr<const void> owner);

  // Another frame with the same bytes: large frames share them (reference
  // counted by libzmq), small ones are copied. Used to keep a request that
  // may have to be sent again. The bytes must not change afterwards.
  Frame Clone() const;
  const std::byte* data() const;
  std::byte* mutable_data();
  size_t size() const;
  std::string_view view() const {
    return {reinterpret_cast<const char*>(data()), size()};
  }
  // A metadata property of a received frame, empty when it has none:
  // "User-Id" is the identity the context's ZapHandler gave the connection
  // the frame came over, "Peer-Address" the peer's IP address. Properties
  // are set by the connection, never by the sender's bytes.
  std::string Property(const char* name) const;

 private:
  friend class Socket;
  void* msg() { return storage_; }
  const void* msg() const { return storage_; }
  alignas(8) unsigned char storage_[64];  // a zmq_msg_t
};

// A ZeroMQ context. Create one per process (or per node in tests); it must
// outlive every Socket made from it.
class Context {
 public:
  static StatusOr<std::unique_ptr<Context>> Create(int io_threads);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  friend class Socket;
  friend class ZapHandler;
  explicit Context(void* ctx) : ctx_(ctx) {}
  void* const ctx_;
  // A ZapHandler is running: CURVE server sockets may be made (without
  // one libzmq would let every client key in).
  std::atomic<bool> zap_running_{false};
};

// kPair: the receiving end of a ConnectionMonitor.
enum class SocketType { kDealer, kRouter, kPair, kRep };

// CurveZMQ (ZeroMQ RFC 26) on a socket: every message encrypted and the
// peers authenticated by their long-term keys. Keys are Z85 text, 40
// characters (common/security.h reads them from files).
struct CurveOptions {
  // True: this socket is a CURVE server: it needs `secret_key`, and its
  // context must have a running ZapHandler, which decides which clients
  // may connect. False: a CURVE client of the server whose public key is
  // `server_key`, with its own key pair.
  bool server = false;
  std::string public_key;
  std::string secret_key;
  std::string server_key;
  // No CURVE (the NULL mechanism: plain TCP) when the secret key is empty.
  bool enabled() const { return !secret_key.empty(); }
};

// Bytes a CURVE MESSAGE adds to a frame (command name, nonce, MAC, flags),
// with a margin: ZMQ_MAXMSGSIZE counts them.
inline constexpr int64_t kCurveFrameOverhead = 64;

struct SocketOptions {
  // Frames larger than this are refused by ZeroMQ, which drops the
  // connection before the frame is read (memory protection). -1: no limit.
  int64_t max_frame_bytes = -1;
  // Messages queued per peer before sends would block. 0: no limit.
  int send_hwm = 0;
  int recv_hwm = 0;
  // Milliseconds unsent messages are kept after Close. Default 0: dropped.
  int linger_ms = 0;
  // Routing id a DEALER presents to a ROUTER; empty: chosen by ZeroMQ.
  std::string routing_id;
  // Reconnect interval after a peer goes away, milliseconds.
  int reconnect_ivl_ms = 100;
  // A connection whose handshake has not finished after this many
  // milliseconds is closed. -1: ZeroMQ's default (30 s).
  int handshake_ivl_ms = -1;
  // Encryption and authentication; default none.
  CurveOptions curve;
  // ROUTER only: a send to a peer whose queue is full (send_hwm) or that
  // is gone fails with Unavailable instead of being dropped silently
  // (ZMQ_ROUTER_MANDATORY), so the owner can count and log it.
  bool router_mandatory = false;
};

class Socket {
 public:
  // `context` must outlive the socket.
  static StatusOr<std::unique_ptr<Socket>> Create(Context* context, SocketType type,
                                                  const SocketOptions& options);
  ~Socket();
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // endpoint: "tcp://host:port" (port "*" picks a free one). Unavailable
  // when the address is in use, InvalidArgument when malformed.
  Status Bind(const std::string& endpoint);
  Status Connect(const std::string& endpoint);
  // Messages not sent yet are dropped when the socket closes (ZMQ_LINGER
  // 0), whatever SocketOptions::linger_ms said: for a peer that is gone
  // and whose address a new process may take.
  void DropUnsentOnClose();
  // The endpoint last bound, with the real port ("tcp://127.0.0.1:41234").
  StatusOr<std::string> LastEndpoint() const;

  // Sends the frames as one multipart message, never blocking: Unavailable
  // when the peer's queue is full or there is no peer. On success the frames
  // are left empty; on failure they keep their contents.
  Status Send(std::span<Frame> frames);
  // Receives one whole message into *frames if one is ready. Returns false
  // when none is ready (never blocks).
  StatusOr<bool> TryRecv(std::vector<Frame>* frames);

 private:
  friend class ConnectionMonitor;
  friend class ZapHandler;
  friend StatusOr<size_t> PollReadable(std::span<Socket* const>, int, std::vector<bool>*);
  Socket(void* socket, std::string description) : socket_(socket), description_(std::move(description)) {}
  void* const socket_;
  std::string description_;  // "DEALER", "ROUTER"; for error messages
  std::string last_endpoint_;
  // >= 0: PollReadable waits on this file descriptor (ZMQ_FD) instead of
  // asking the socket for ZMQ_EVENTS on every pass, which costs a system
  // call each time. Readable then means "read until TryRecv says none":
  // ZMQ_FD only signals that something changed since the last time the
  // socket found nothing to read (a ConnectionMonitor's events socket).
  int poll_fd_ = -1;
};

// A change in the connections of a socket.
enum class ConnectionEvent {
  kConnected,     // a connection to the peer was made (again): its
                  // handshake (and with CURVE, authentication) succeeded
  kDisconnected,  // the connection to the peer was lost (the peer closed,
                  // crashed or became unreachable); ZeroMQ reconnects
  kRefused,       // the peer refused this socket's credentials (a CURVE
                  // server that does not allow its key); ZeroMQ retries
  kHandshakeFailed,  // the handshake failed on a protocol error: the peer
                     // speaks another mechanism (plain TCP against CURVE) or
                     // has another key than the one this socket expects
  kHandshakeCut,  // the connection ended during its handshake with no protocol
                  // error: the peer closed or reset it (a server that exits,
                  // or a CURVE server that could not read this socket's
                  // greeting)
  kAccepted,      // a bound socket accepted a connection
                  // (ConnectionMonitor::last_value(): its descriptor)
  kClosed,        // a connection a bound socket accepted is gone (its
                  // peer closed, its handshake failed or timed out, or
                  // CloseAccepted closed it; last_value(): its descriptor)
};

// Watches the connections of one socket (zmq_socket_monitor), so that its
// owner learns at once that a peer went away and when it is back, instead
// of waiting for a request deadline. Used from the thread that uses the
// watched socket. Must be destroyed before the socket it watches.
class ConnectionMonitor {
 public:
  // Both made before the watched socket connects or binds, so that no
  // event comes before the monitor is ready.
  // Reports kConnected and kDisconnected of a connecting socket.
  static StatusOr<std::unique_ptr<ConnectionMonitor>> Create(Context* context, Socket* watched);
  // Reports kAccepted and kClosed of a bound socket's (a server's)
  // connections, and kHandshakeFailed. Not failed accepts: ZeroMQ retries a
  // failed accept at once while the connection waits, so out of file
  // descriptors it would queue events without end; a server keeps its
  // connections below its limit instead (CloseAccepted).
  static StatusOr<std::unique_ptr<ConnectionMonitor>> CreateForAccepts(Context* context,
                                                                      Socket* watched);
  ~ConnectionMonitor();
  ConnectionMonitor(const ConnectionMonitor&) = delete;
  ConnectionMonitor& operator=(const ConnectionMonitor&) = delete;

  // Readable (PollReadable) when events may be waiting: the caller then
  // calls TryNext until it returns nullopt (a new event signals only once
  // the monitor found none, which keeps polling it free of a system call
  // per pass).
  Socket* socket() { return events_.get(); }
  // The next event, or nullopt when none is waiting (never blocks).
  StatusOr<std::optional<ConnectionEvent>> TryNext();
  // The value of the last event TryNext returned: the descriptor of a
  // kAccepted or kClosed connection.
  int last_value() const { return last_value_; }
  // Closes the connection the watched socket accepted as descriptor `fd`
  // (kAccepted): ZeroMQ sees it end and reports kClosed. For a server
  // past its connection limit. REQUIRES: `fd` was reported kAccepted and
  // not kClosed since.
  static void CloseAccepted(int fd);

 private:
  static StatusOr<std::unique_ptr<ConnectionMonitor>> Watch(Context* context, Socket* watched,
                                                            int events);
  ConnectionMonitor(Socket* watched, std::unique_ptr<Socket> events)
      : watched_(watched), events_(std::move(events)) {}
  Socket* const watched_;
  std::unique_ptr<Socket> events_;
  std::vector<Frame> frames_;
  int last_value_ = 0;
  bool accepts_ = false;  // CreateForAccepts: a DISCONNECTED is kClosed
};

// Waits up to `timeout_ms` (-1: forever, 0: just check) until at least one
// socket has a message to read. Sets (*readable)[i] for each one that does
// and returns how many. A signal interrupting the wait returns 0, so callers
// can check their stop flags.
StatusOr<size_t> PollReadable(std::span<Socket* const> sockets, int timeout_ms,
                              std::vector<bool>* readable);

// "4.3.4": the libzmq version in use.
std::string ZmqVersion();

// Lets this process reuse the memory of the messages it received for the
// next ones instead of giving it back to the system at every free: libzmq
// allocates each received message, and with several 1 MiB replies or pushes
// in flight glibc's malloc returned the freed ones (trimming the heap above
// 2 MiB) and took fresh zeroed pages for the next, which doubled the CPU of
// a pull with 8 in flight (benchmarks/docs/transport_bench.md, "A busy host").
// Messages up to kMessageHeapMaxBytes come from the heap, and up to
// kMessageHeapKeepBytes of freed memory stays with the process.
// Process-wide (mallopt): ps_server, ps_worker, transport_bench and
// push_latency call it at the start of main; a program that embeds the
// client decides for itself.
inline constexpr size_t kMessageHeapMaxBytes = size_t{32} << 20;
inline constexpr size_t kMessageHeapKeepBytes = size_t{128} << 20;
void KeepMessageMemory();

// A CurveZMQ key pair in Z85 text.
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};

// A new random key pair. Unimplemented when libzmq was built without CURVE.
StatusOr<CurveKeyPair> NewCurveKeyPair();
// The public key of a secret key; InvalidArgument when `secret_key` is not
// 40 characters of Z85.
StatusOr<std::string> CurvePublicKey(const std::string& secret_key);
// True when `text` is a key: 40 characters of Z85 (32 bytes).
bool IsCurveKey(std::string_view text);

// Authenticates the CURVE handshakes of every server socket of one context
// (ZAP, ZeroMQ RFC 27). A client whose public key is on the allowlist is
// let in, and every message of its connection carries the user id the list
// gives it (Frame::Property("User-Id")); every other handshake is refused
// and reported to `on_refused`. Start it before binding a CURVE server
// socket (Socket::Create refuses otherwise).
//
// Thread safety: requests are answered on a thread of its own;
// SetAllowlist and the counters are safe from any thread. `on_refused`
// runs on that thread. Destroy it before its Context.
class ZapHandler {
 public:
  // Z85 public key -> user id.
  using Allowlist = std::unordered_map<std::string, std::string>;
  struct Refusal {
    std::string address;     // the client's IP address
    std::string public_key;  // Z85; empty for a mechanism other than CURVE
    std::string mechanism;   // "CURVE", "NULL", "PLAIN"
  };
  using RefusedCallback = std::function<void(const Refusal&)>;

  // `context` must outlive the handler. Unavailable when another handler
  // already serves the context.
  static StatusOr<std::unique_ptr<ZapHandler>> Start(Context* context, Allowlist allowed,
                                                     RefusedCallback on_refused);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // Replaces the allowlist for handshakes from now on; connections already
  // let in stay.
  void SetAllowlist(Allowlist allowed);
  uint64_t accepted() const { return accepted_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  ZapHandler(Context* context, std::unique_ptr<Socket> socket, Allowlist allowed,
             RefusedCallback on_refused);
  void Run();
  Context* const context_;
  std::unique_ptr<Socket> socket_;  // REP at inproc://zeromq.zap.01
  const RefusedCallback on_refused_;
  std::mutex mu_;
  Allowlist allowed_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_COMMON_TRANSPORT_H_
