#include "common/channel.h"

namespace ps {

StatusOr<std::unique_ptr<Channel>> ZmqChannel::Connect(Context* context,
                                                       const ChannelOptions& options) {
  SocketOptions so;
  so.curve = options.curve;
  so.send_hwm = options.hwm;
  so.recv_hwm = options.hwm;
  so.linger_ms = options.linger_ms;
  so.reconnect_ivl_ms = options.reconnect_ms;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Socket> socket,
                      Socket::Create(context, SocketType::kDealer, so));
  std::unique_ptr<ConnectionMonitor> monitor;
  if (options.events) {
    PS_ASSIGN_OR_RETURN(monitor, ConnectionMonitor::Create(context, socket.get()));
  }
  PS_RETURN_IF_ERROR(socket->Connect(options.endpoint));
  return std::unique_ptr<Channel>(new ZmqChannel(std::move(socket), std::move(monitor)));
}

StatusOr<std::optional<ConnectionEvent>> ZmqChannel::TryNextEvent() {
  if (monitor_ == nullptr) return std::optional<ConnectionEvent>();
  return monitor_->TryNext();
}

Channel::PollSockets ZmqChannel::poll_sockets() {
  return {socket_.get(), monitor_ != nullptr ? monitor_->socket() : nullptr};
}

}  // namespace ps
