#include "tools/tcp_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ps {
namespace {

TcpProbe Outcome(int err, std::chrono::milliseconds deadline) {
  if (err == 0) return {ProbeResult::kListening, ""};
  if (err == ECONNREFUSED) return {ProbeResult::kRefused, "connection refused"};
  if (err == ETIMEDOUT) {
    return {ProbeResult::kUnreachable,
            "no answer within " + std::to_string(deadline.count()) + " ms"};
  }
  return {ProbeResult::kUnreachable, std::strerror(err)};
}

}  // namespace

TcpProbe ProbeTcp(const HostPort& address, std::chrono::milliseconds deadline) {
  auto host = ResolveHost(address);
  if (!host.ok()) return {ProbeResult::kUnreachable, std::string(host.status().message())};
  std::string ip = *host;
  if (ip.size() >= 2 && ip.front() == '[' && ip.back() == ']') ip = ip.substr(1, ip.size() - 2);
  sockaddr_storage storage{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(address.port);
    length = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(address.port);
    length = sizeof(sockaddr_in6);
  } else {
    return {ProbeResult::kUnreachable, "\"" + ip + "\" is not an IP address"};
  }
  const int fd = ::socket(storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Outcome(errno, deadline);
  int err = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&storage), length) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      // The deadline bounds the whole wait, also across interrupted polls.
      const auto end = std::chrono::steady_clock::now() + deadline;
      err = ETIMEDOUT;
      while (true) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            end - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        pollfd p{fd, POLLOUT, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) {
          err = errno;
          break;
        }
        if (ready == 0) break;
        socklen_t size = sizeof(err);
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &size) != 0) err = errno;
        break;
      }
    }
  }
  ::close(fd);
  return Outcome(err, deadline);
}

}  // namespace ps
