// Test helper: a loopback TCP port for a test's servers.
#ifndef PS_TESTS_UTIL_FREE_PORT_H_
#define PS_TESTS_UTIL_FREE_PORT_H_

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

namespace ps {

// True when a loopback TCP port (1..65535) can be bound now.
inline bool PortIsFree(int port);

// The first port of the kernel's ephemeral range (ip_local_port_range),
// 32768 where it cannot be read.
inline int EphemeralPortsFrom() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return range >> low && low > 1024 ? low : 32768;
}

// A loopback TCP port that was free a moment ago, below the kernel's
// ephemeral range: a port in that range may become the source port of any
// process's outgoing connection between this call and the test server's
// bind (a job's later servers, a reshard's next map or a restarted
// replica, then failed to listen now and then under a loaded suite).
// Random in [12000, 30000), so that concurrent tests rarely pick the same,
// and never the same one twice in a process; where the ephemeral range
// starts lower, a port the kernel picks.
inline int FreePort() {
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  static std::set<int> handed_out;
  constexpr int kLow = 12000, kHigh = 30000;
  if (EphemeralPortsFrom() >= kHigh + 2768) {
    for (int tries = 0; tries < 2000; ++tries) {
      const int port = kLow + static_cast<int>(rng() % (kHigh - kLow));
      if (!handed_out.count(port) && PortIsFree(port)) {
        handed_out.insert(port);
        return port;
      }
    }
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

inline bool PortIsFree(int port) {
  if (port <= 0 || port > 65535) return false;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return free;
}

// A port offset (replication.port_offset) from 1000 up such that every
// port + j x offset, j = 1 .. replicas - 1, is free now; 0 when none is.
template <typename Ports>
uint32_t FreePortOffset(const Ports& ports, uint32_t replicas) {
  for (uint32_t o = 1000; o < 20000; o += 97) {
    bool free = true;
    for (int p : ports) {
      for (uint32_t j = 1; j < replicas && free; ++j) {
        free = PortIsFree(p + static_cast<int>(j * o)) &&
               std::find(std::begin(ports), std::end(ports), p + static_cast<int>(j * o)) ==
                   std::end(ports);
      }
    }
    if (free) return o;
  }
  return 0;
}

// A plain TCP socket listening at 127.0.0.1:port (SO_REUSEADDR, `backlog`),
// for a test that plays a peer below ZeroMQ; -1 when it cannot listen.
inline int ListenOnLoopback(int port, int backlog) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(fd, backlog) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace ps

#endif  // PS_TESTS_UTIL_FREE_PORT_H_
