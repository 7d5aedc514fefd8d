#include "client/channel.h"

namespace ps {

StatusOr<std::unique_ptr<Channel>> ZmqChannel::Connect(Context* context,
                                                       const std::string& endpoint,
                                                       const CurveOptions& curve, int hwm) {
  SocketOptions options;
  options.curve = curve;
  options.send_hwm = hwm;
  options.recv_hwm = hwm;
  PS_ASSIGN_OR_RETURN(std::unique_ptr<Socket> socket,
                      Socket::Create(context, SocketType::kDealer, options));
  PS_ASSIGN_OR_RETURN(std::unique_ptr<ConnectionMonitor> monitor,
                      ConnectionMonitor::Create(context, socket.get()));
  PS_RETURN_IF_ERROR(socket->Connect(endpoint));
  return std::unique_ptr<Channel>(new ZmqChannel(std::move(socket), std::move(monitor)));
}

}  // namespace ps
