#include "common/transport.h"

#include <malloc.h>
#include <sys/socket.h>
#include <zmq.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "common/endpoint.h"

namespace ps {

static_assert(sizeof(zmq_msg_t) <= 64 && alignof(zmq_msg_t) <= 8,
              "Frame storage too small for zmq_msg_t");

namespace {

zmq_msg_t* AsMsg(void* p) { return static_cast<zmq_msg_t*>(p); }
const zmq_msg_t* AsMsg(const void* p) { return static_cast<const zmq_msg_t*>(p); }

// The one place libzmq errors become Status: EAGAIN means "try later"
// (Unavailable), EINVAL a bad argument, the rest keep libzmq's text.
Status ZmqError(std::string_view what, int err = zmq_errno()) {
  std::string msg = std::string(what) + ": " + zmq_strerror(err);
  switch (err) {
    case EAGAIN:
    case EADDRINUSE:
    case EHOSTUNREACH:
      return UnavailableError(msg);
    case EINVAL:
    case EPROTONOSUPPORT:
    case ENOCOMPATPROTO:
    case EADDRNOTAVAIL:
    case ENODEV:
      return InvalidArgumentError(msg);
    case ENOMEM:
      return ResourceExhaustedError(msg);
    case ETERM:
      return CancelledError(msg);
    default:
      return InternalError(msg);
  }
}

void ReleaseOwner(void* /*data*/, void* hint) {
  // Takes back the reference handed to libzmq in Frame::Share.
  std::unique_ptr<std::shared_ptr<const void>> owner(
      static_cast<std::shared_ptr<const void>*>(hint));
}

}  // namespace

Frame::Frame() { zmq_msg_init(AsMsg(msg())); }

Frame::~Frame() { zmq_msg_close(AsMsg(msg())); }

// What zmq_msg_move does into a message that holds nothing: take the bytes
// of `other` (libzmq moves a zmq_msg_t by copying it) and leave `other`
// empty. Skips initialising and closing an empty message, which is most
// of a move's cost on the request path.
Frame::Frame(Frame&& other) noexcept {
  std::memcpy(storage_, other.storage_, sizeof(storage_));
  zmq_msg_init(AsMsg(other.msg()));
}

Frame& Frame::operator=(Frame&& other) noexcept {
  if (this != &other) zmq_msg_move(AsMsg(msg()), AsMsg(other.msg()));
  return *this;
}

StatusOr<Frame> Frame::Allocate(size_t size) {
  Frame f;
  zmq_msg_close(AsMsg(f.msg()));
  if (zmq_msg_init_size(AsMsg(f.msg()), size) != 0) {
    int err = zmq_errno();
    zmq_msg_init(AsMsg(f.msg()));
    return ZmqError("allocating a frame of " + std::to_string(size) + " bytes", err);
  }
  return f;
}

Frame Frame::CopyOf(const void* data, size_t size) {
  auto f = Allocate(size);
  if (!f.ok()) std::abort();  // out of memory for a small frame: nothing sane to do
  if (size > 0) std::memcpy(f->mutable_data(), data, size);
  return std::move(f).value();
}

Frame Frame::Clone() const {
  Frame f;
  // zmq_msg_copy only adds a reference; it takes a non-const source.
  if (zmq_msg_copy(AsMsg(f.msg()), const_cast<zmq_msg_t*>(AsMsg(msg()))) != 0) std::abort();
  return f;
}

StatusOr<Frame> Frame::Share(const void* data, size_t size, std::shared_ptr<const void> owner) {
  Frame f;
  if (size == 0) return f;
  auto hint = std::make_unique<std::shared_ptr<const void>>(std::move(owner));
  zmq_msg_close(AsMsg(f.msg()));
  // libzmq takes a non-const pointer but only reads the bytes of a sent message.
  if (zmq_msg_init_data(AsMsg(f.msg()), const_cast<void*>(data), size, &ReleaseOwner,
                        hint.get()) != 0) {
    const int err = zmq_errno();
    zmq_msg_init(AsMsg(f.msg()));
    return ZmqError("sharing a frame of " + std::to_string(size) + " bytes", err);
  }
  hint.release();  // now owned by libzmq until ReleaseOwner runs
  return f;
}

const std::byte* Frame::data() const {
  return static_cast<const std::byte*>(zmq_msg_data(const_cast<zmq_msg_t*>(AsMsg(msg()))));
}

std::byte* Frame::mutable_data() { return static_cast<std::byte*>(zmq_msg_data(AsMsg(msg()))); }

size_t Frame::size() const { return zmq_msg_size(AsMsg(msg())); }

std::string Frame::Property(const char* name) const {
  const char* value = zmq_msg_gets(const_cast<zmq_msg_t*>(AsMsg(msg())), name);
  return value != nullptr ? std::string(value) : std::string();
}

StatusOr<std::unique_ptr<Context>> Context::Create(int io_threads) {
  void* ctx = zmq_ctx_new();
  if (ctx == nullptr) return ZmqError("creating a ZeroMQ context");
  if (zmq_ctx_set(ctx, ZMQ_IO_THREADS, io_threads) != 0) {
    Status s = ZmqError("setting ZMQ_IO_THREADS=" + std::to_string(io_threads));
    zmq_ctx_term(ctx);
    return s;
  }
  // Closing must never wait on unsent messages of a dead peer.
  zmq_ctx_set(ctx, ZMQ_BLOCKY, 0);
  return std::unique_ptr<Context>(new Context(ctx));
}

Context::~Context() {
  while (zmq_ctx_term(ctx_) != 0 && zmq_errno() == EINTR) {
  }
}

StatusOr<std::unique_ptr<Socket>> Socket::Create(Context* context, SocketType type,
                                                  const SocketOptions& options) {
  int zmq_type = ZMQ_DEALER;
  const char* name = "DEALER";
  if (type == SocketType::kRouter) {
    zmq_type = ZMQ_ROUTER;
    name = "ROUTER";
  } else if (type == SocketType::kPair) {
    zmq_type = ZMQ_PAIR;
    name = "PAIR";
  } else if (type == SocketType::kRep) {
    zmq_type = ZMQ_REP;
    name = "REP";
  }
  const CurveOptions& curve = options.curve;
  if (curve.enabled() && curve.server && !context->zap_running_.load()) {
    // libzmq lets every client key in when no ZAP handler answers.
    return FailedPreconditionError(std::string("a CURVE server ") + name +
                                   " needs a ZapHandler running in its context");
  }
  void* s = zmq_socket(context->ctx_, zmq_type);
  if (s == nullptr) return ZmqError(std::string("creating a ") + name + " socket");
  std::unique_ptr<Socket> socket(new Socket(s, name));

  auto set_int = [&](int opt, int value, const char* opt_name) -> Status {
    if (zmq_setsockopt(s, opt, &value, sizeof(value)) != 0) {
      return ZmqError(std::string("setting ") + opt_name + " on " + name);
    }
    return Status::Ok();
  };
  PS_RETURN_IF_ERROR(set_int(ZMQ_LINGER, options.linger_ms, "ZMQ_LINGER"));
  PS_RETURN_IF_ERROR(set_int(ZMQ_SNDHWM, options.send_hwm, "ZMQ_SNDHWM"));
  PS_RETURN_IF_ERROR(set_int(ZMQ_RCVHWM, options.recv_hwm, "ZMQ_RCVHWM"));
  PS_RETURN_IF_ERROR(set_int(ZMQ_RECONNECT_IVL, options.reconnect_ivl_ms, "ZMQ_RECONNECT_IVL"));
  if (options.handshake_ivl_ms >= 0) {
    PS_RETURN_IF_ERROR(set_int(ZMQ_HANDSHAKE_IVL, options.handshake_ivl_ms, "ZMQ_HANDSHAKE_IVL"));
  }
  // Detect peers that vanish without closing their connection.
  PS_RETURN_IF_ERROR(set_int(ZMQ_TCP_KEEPALIVE, 1, "ZMQ_TCP_KEEPALIVE"));
  int64_t max = options.max_frame_bytes;
  if (zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof(max)) != 0) {
    return ZmqError(std::string("setting ZMQ_MAXMSGSIZE on ") + name);
  }
  if (curve.enabled()) {
    auto set_key = [&](int opt, const std::string& key, const char* what) -> Status {
      if (!IsCurveKey(key)) {
        return InvalidArgumentError(std::string("the CURVE ") + what + " of a " + name +
                                    " is not a key (40 characters of Z85)");
      }
      if (zmq_setsockopt(s, opt, key.data(), key.size()) != 0) {
        return ZmqError(std::string("setting the CURVE ") + what + " on " + name);
      }
      return Status::Ok();
    };
    if (curve.server) {
      PS_RETURN_IF_ERROR(set_int(ZMQ_CURVE_SERVER, 1, "ZMQ_CURVE_SERVER"));
      PS_RETURN_IF_ERROR(set_key(ZMQ_CURVE_SECRETKEY, curve.secret_key, "secret key"));
      // A domain makes libzmq ask the ZAP handler about every handshake.
      const char domain[] = "ps";
      if (zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, domain, sizeof(domain) - 1) != 0) {
        return ZmqError(std::string("setting ZMQ_ZAP_DOMAIN on ") + name);
      }
    } else {
      PS_RETURN_IF_ERROR(set_key(ZMQ_CURVE_SERVERKEY, curve.server_key, "server key"));
      PS_RETURN_IF_ERROR(set_key(ZMQ_CURVE_PUBLICKEY, curve.public_key, "public key"));
      PS_RETURN_IF_ERROR(set_key(ZMQ_CURVE_SECRETKEY, curve.secret_key, "secret key"));
    }
  }
  if (options.router_mandatory) {
    PS_RETURN_IF_ERROR(set_int(ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY"));
  }
  if (!options.routing_id.empty() &&
      zmq_setsockopt(s, ZMQ_ROUTING_ID, options.routing_id.data(), options.routing_id.size()) != 0) {
    return ZmqError(std::string("setting ZMQ_ROUTING_ID on ") + name);
  }
  return socket;
}

Socket::~Socket() { zmq_close(socket_); }

namespace {
// IPv6 only where the endpoint asks for it ("tcp://[::1]:7000"), so IPv4
// endpoints read back as plain IPv4 addresses.
void EnableIpv6For(void* socket, const std::string& endpoint) {
  int on = endpoint.find('[') != std::string::npos ? 1 : 0;
  zmq_setsockopt(socket, ZMQ_IPV6, &on, sizeof(on));
}

// True when the host of "tcp://host:port" is a name with IPv6 addresses
// only: ZeroMQ resolves a name to IPv4 alone unless ZMQ_IPV6 is on. A name
// with an IPv4 address keeps IPv4, the address its server binds
// (ResolveHost prefers it).
bool NameResolvesToIpv6Only(const std::string& endpoint) {
  const size_t start = endpoint.find("://");
  if (start == std::string::npos) return false;
  HostPort host_port;
  std::string problem;
  if (!ParseHostPort(std::string_view(endpoint).substr(start + 3), &host_port, &problem) ||
      host_port.family != HostPort::Family::kName) {
    return false;
  }
  StatusOr<std::string> address = ResolveHost(host_port);
  return address.ok() && !address->empty() && address->front() == '[';
}
}  // namespace

Status Socket::Bind(const std::string& endpoint) {
  EnableIpv6For(socket_, endpoint);
  if (zmq_bind(socket_, endpoint.c_str()) != 0) {
    return ZmqError(description_ + " cannot bind " + endpoint);
  }
  char buf[256];
  size_t len = sizeof(buf);
  if (zmq_getsockopt(socket_, ZMQ_LAST_ENDPOINT, buf, &len) == 0) {
    last_endpoint_.assign(buf, len > 0 ? len - 1 : 0);
  }
  return Status::Ok();
}

void Socket::DropUnsentOnClose() {
  const int zero = 0;
  zmq_setsockopt(socket_, ZMQ_LINGER, &zero, sizeof(zero));
}

Status Socket::Connect(const std::string& endpoint) {
  EnableIpv6For(socket_, endpoint);
  if (NameResolvesToIpv6Only(endpoint)) {
    const int on = 1;
    zmq_setsockopt(socket_, ZMQ_IPV6, &on, sizeof(on));
  }
  if (zmq_connect(socket_, endpoint.c_str()) != 0) {
    return ZmqError(description_ + " cannot connect to " + endpoint);
  }
  return Status::Ok();
}

StatusOr<std::string> Socket::LastEndpoint() const {
  if (last_endpoint_.empty()) return FailedPreconditionError(description_ + " is not bound");
  return last_endpoint_;
}

Status Socket::Send(std::span<Frame> frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    int flags = ZMQ_DONTWAIT | (i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    if (zmq_msg_send(AsMsg(frames[i].msg()), socket_, flags) < 0) {
      // libzmq sends multipart messages atomically: only the first part can
      // fail with EAGAIN, so nothing has left when this returns.
      return ZmqError(description_ + " send");
    }
  }
  return Status::Ok();
}

StatusOr<bool> Socket::TryRecv(std::vector<Frame>* frames) {
  frames->clear();
  while (true) {
    Frame f;
    int flags = frames->empty() ? ZMQ_DONTWAIT : 0;
    if (zmq_msg_recv(AsMsg(f.msg()), socket_, flags) < 0) {
      int err = zmq_errno();
      if (frames->empty() && (err == EAGAIN || err == EINTR)) return false;
      return ZmqError(description_ + " receive", err);
    }
    bool more = zmq_msg_more(AsMsg(f.msg())) != 0;
    frames->push_back(std::move(f));
    if (!more) return true;
  }
}

StatusOr<size_t> PollReadable(std::span<Socket* const> sockets, int timeout_ms,
                              std::vector<bool>* readable) {
  zmq_pollitem_t items[16];
  std::vector<zmq_pollitem_t> big;
  zmq_pollitem_t* p = items;
  if (sockets.size() > 16) {
    big.resize(sockets.size());
    p = big.data();
  }
  for (size_t i = 0; i < sockets.size(); ++i) {
    const int fd = sockets[i]->poll_fd_;
    p[i] = fd >= 0 ? zmq_pollitem_t{nullptr, fd, ZMQ_POLLIN, 0}
                   : zmq_pollitem_t{sockets[i]->socket_, 0, ZMQ_POLLIN, 0};
  }
  readable->assign(sockets.size(), false);
  int rc = zmq_poll(p, static_cast<int>(sockets.size()), timeout_ms);
  if (rc < 0) {
    if (zmq_errno() == EINTR) return size_t{0};
    return ZmqError("poll");
  }
  size_t n = 0;
  for (size_t i = 0; i < sockets.size(); ++i) {
    if (p[i].revents & ZMQ_POLLIN) {
      (*readable)[i] = true;
      ++n;
    }
  }
  return n;
}

StatusOr<std::unique_ptr<ConnectionMonitor>> ConnectionMonitor::Create(Context* context,
                                                                     Socket* watched) {
  // A connection counts once its handshake succeeded (with CURVE: the
  // server let this socket in), not when TCP connected.
  return Watch(context, watched,
               ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED |
                   ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                   ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL);
}

StatusOr<std::unique_ptr<ConnectionMonitor>> ConnectionMonitor::CreateForAccepts(Context* context,
                                                                               Socket* watched) {
  // And handshakes that failed before any ZAP request: a client without
  // CURVE against a CURVE server (a key the handler refuses is its own to log).
  PS_ASSIGN_OR_RETURN(auto monitor, Watch(context, watched,
                                          ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                                              ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                              ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL));
  monitor->accepts_ = true;
  return monitor;
}

StatusOr<std::unique_ptr<ConnectionMonitor>> ConnectionMonitor::Watch(Context* context,
                                                                    Socket* watched, int mask) {
  // One inproc address per monitor in the process.
  static std::atomic<uint64_t> next{0};
  const std::string address = "inproc://ps-connection-monitor-" + std::to_string(next++);
  if (zmq_socket_monitor(watched->socket_, address.c_str(), mask) != 0) {
    return ZmqError("monitoring the connections of a " + watched->description_);
  }
  auto events = Socket::Create(context, SocketType::kPair, SocketOptions{});
  if (!events.ok()) {
    zmq_socket_monitor(watched->socket_, nullptr, 0);
    return events.status();
  }
  if (zmq_connect((*events)->socket_, address.c_str()) != 0) {
    Status s = ZmqError("connecting to the connection monitor " + address);
    zmq_socket_monitor(watched->socket_, nullptr, 0);
    return s;
  }
  int fd = -1;
  size_t fd_size = sizeof(fd);
  if (zmq_getsockopt((*events)->socket_, ZMQ_FD, &fd, &fd_size) != 0) {
    Status s = ZmqError("reading the file descriptor of the connection monitor " + address);
    zmq_socket_monitor(watched->socket_, nullptr, 0);
    return s;
  }
  std::unique_ptr<ConnectionMonitor> monitor(new ConnectionMonitor(watched, std::move(*events)));
  // Finding the events pipe empty once makes ZeroMQ signal ZMQ_FD for the
  // next event (it signals a reader that found nothing, not one that never
  // looked). Empty it is: the watched socket has not connected or bound yet
  // (Create, CreateForAccepts), so no event can be there.
  PS_ASSIGN_OR_RETURN(bool early, monitor->events_->TryRecv(&monitor->frames_));
  (void)early;
  monitor->events_->poll_fd_ = fd;
  return monitor;
}

ConnectionMonitor::~ConnectionMonitor() { zmq_socket_monitor(watched_->socket_, nullptr, 0); }

StatusOr<std::optional<ConnectionEvent>> ConnectionMonitor::TryNext() {
  while (true) {
    PS_ASSIGN_OR_RETURN(bool got, events_->TryRecv(&frames_));
    if (!got) return std::optional<ConnectionEvent>();
    // Frame 1: uint16 event, uint32 value (native byte order); frame 2: the endpoint.
    if (frames_.empty() || frames_[0].size() < sizeof(uint16_t)) continue;
    uint16_t event = 0;
    std::memcpy(&event, frames_[0].data(), sizeof(event));
    uint32_t value = 0;
    if (frames_[0].size() >= sizeof(event) + sizeof(value)) {
      std::memcpy(&value, frames_[0].data() + sizeof(event), sizeof(value));
    }
    last_value_ = static_cast<int>(value);
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) return std::optional(ConnectionEvent::kConnected);
    if (event == ZMQ_EVENT_ACCEPTED) return std::optional(ConnectionEvent::kAccepted);
    if (event == ZMQ_EVENT_DISCONNECTED) {
      return std::optional(accepts_ ? ConnectionEvent::kClosed : ConnectionEvent::kDisconnected);
    }
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return std::optional(ConnectionEvent::kRefused);
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      return std::optional(ConnectionEvent::kHandshakeFailed);
    }
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      return std::optional(ConnectionEvent::kHandshakeCut);
    }
  }
}

void ConnectionMonitor::CloseAccepted(int fd) {
  // Not close(): ZeroMQ owns the descriptor and closes it once it sees the
  // connection end.
  ::shutdown(fd, SHUT_RDWR);
}

std::string ZmqVersion() {
  int major, minor, patch;
  zmq_version(&major, &minor, &patch);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

void KeepMessageMemory() {
  // Setting either turns off glibc's own adjustment of both.
  ::mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMessageHeapMaxBytes));
  ::mallopt(M_TRIM_THRESHOLD, static_cast<int>(kMessageHeapKeepBytes));
}

StatusOr<CurveKeyPair> NewCurveKeyPair() {
  if (!zmq_has("curve")) {
    return UnimplementedError("this libzmq " + ZmqVersion() +
                              " was built without CURVE; install Debian's libzmq5, which has it");
  }
  char public_key[41];
  char secret_key[41];
  if (zmq_curve_keypair(public_key, secret_key) != 0) return ZmqError("making a CURVE key pair");
  return CurveKeyPair{std::string(public_key, 40), std::string(secret_key, 40)};
}

bool IsCurveKey(std::string_view text) {
  if (text.size() != 40) return false;
  const std::string z85(text);
  uint8_t bytes[32];
  return zmq_z85_decode(bytes, z85.c_str()) != nullptr;
}

StatusOr<std::string> CurvePublicKey(const std::string& secret_key) {
  if (!IsCurveKey(secret_key)) {
    return InvalidArgumentError("not a CURVE key: expected 40 characters of Z85");
  }
  char public_key[41];
  if (zmq_curve_public(public_key, secret_key.c_str()) != 0) {
    return ZmqError("deriving a CURVE public key");
  }
  return std::string(public_key, 40);
}

// ZAP (ZeroMQ RFC 27): libzmq asks the handler at this address of the
// socket's own context about each handshake of a socket with a ZAP domain.
namespace {
constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";

std::string ZapReplyCode(bool ok) { return ok ? "200" : "400"; }
}  // namespace

ZapHandler::ZapHandler(Context* context, std::unique_ptr<Socket> socket, Allowlist allowed,
                       RefusedCallback on_refused)
    : context_(context), socket_(std::move(socket)), on_refused_(std::move(on_refused)),
      allowed_(std::move(allowed)) {}

StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::Start(Context* context, Allowlist allowed,
                                                        RefusedCallback on_refused) {
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Socket> socket,
                      Socket::Create(context, SocketType::kRep, SocketOptions{}));
  if (zmq_bind(socket->socket_, kZapEndpoint) != 0) {
    const int err = zmq_errno();
    if (err == EADDRINUSE) {
      return UnavailableError("a ZAP handler already serves this ZeroMQ context");
    }
    return ZmqError("binding the ZAP handler at " + std::string(kZapEndpoint), err);
  }
  std::unique_ptr<ZapHandler> handler(
      new ZapHandler(context, std::move(socket), std::move(allowed), std::move(on_refused)));
  handler->thread_ = std::thread([raw = handler.get()] { raw->Run(); });
  context->zap_running_.store(true);
  return handler;
}

ZapHandler::~ZapHandler() {
  context_->zap_running_.store(false);
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::SetAllowlist(Allowlist allowed) {
  std::lock_guard<std::mutex> lock(mu_);
  allowed_ = std::move(allowed);
}

void ZapHandler::Run() {
  std::vector<Frame> request;
  Socket* sockets[] = {socket_.get()};
  std::vector<bool> readable;
  while (!stop_.load()) {
    auto ready = PollReadable(sockets, 100, &readable);
    if (!ready.ok() || *ready == 0) continue;
    auto got = socket_->TryRecv(&request);
    if (!got.ok() || !*got) continue;
    // version, request id, domain, address, routing id, mechanism,
    // credentials...; anything else is answered with a refusal.
    auto text = [&](size_t i) {
      return i < request.size() ? std::string(request[i].view()) : std::string();
    };
    const std::string mechanism = text(5);
    Refusal who{text(3), "", mechanism};
    bool ok = false;
    std::string user_id;
    if (request.size() >= 6 && text(0) == "1.0" && mechanism == "CURVE" && request.size() == 7 &&
        request[6].size() == 32) {
      char z85[41];
      if (zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(request[6].data()), 32) !=
          nullptr) {
        who.public_key.assign(z85, 40);
        std::lock_guard<std::mutex> lock(mu_);
        auto it = allowed_.find(who.public_key);
        if (it != allowed_.end()) {
          ok = true;
          user_id = it->second;
        }
      }
    }
    std::vector<Frame> reply;
    reply.push_back(Frame::CopyOf("1.0"));
    reply.push_back(Frame::CopyOf(text(1)));
    reply.push_back(Frame::CopyOf(ZapReplyCode(ok)));
    reply.push_back(Frame::CopyOf(ok ? std::string_view("OK") : std::string_view("key not allowed")));
    reply.push_back(Frame::CopyOf(user_id));
    reply.push_back(Frame::CopyOf(std::string_view()));  // no metadata
    // A REP must answer before it reads the next request; libzmq waits
    // for the answer, so the send never finds a full queue.
    Status sent = socket_->Send(reply);
    (void)sent;  // libzmq is gone (context terminating): nothing to answer
    if (ok) {
      accepted_.fetch_add(1, std::memory_order_relaxed);
    } else {
      refused_.fetch_add(1, std::memory_order_relaxed);
      if (on_refused_) on_refused_(who);
    }
  }
}

}  // namespace ps
