// A raw DEALER for tests that play a peer the project's own clients never
// are: a primary or an authority against one backup, a forged or stale
// worker against a shard, a client holding a stolen key. Sends a header and
// frames, returns the reply's header; and a process's resident memory
// (ResidentBytes, PeakMemory). Header-only, for tests.
#ifndef PS_TESTS_UTIL_RAW_PEER_H_
#define PS_TESTS_UTIL_RAW_PEER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/transport.h"
#include "common/wire.h"
#include "tests/util/status_matchers.h"

namespace ps {

class RawPeer {
 public:
  // `options`: e.g. a worker's or the admin's CURVE keys, a small recv_hwm
  // for a client that does not read.
  explicit RawPeer(const std::string& endpoint, const SocketOptions& options = SocketOptions())
      : context_(Context::Create(1).value()),
        socket_(Socket::Create(context_.get(), SocketType::kDealer, options).value()) {
    EXPECT_OK(socket_->Connect(endpoint));
  }
  // Sends raw frames as they are (an undecodable request).
  void SendFrames(std::vector<Frame> frames) { EXPECT_OK(socket_->Send(frames)); }
  // Sends a message whose reply, if any, is not awaited.
  void Send(const MessageHeader& h, std::vector<Frame> frames = {}) {
    std::vector<Frame> out;
    out.push_back(EncodeHeader(h));
    for (Frame& f : frames) out.push_back(std::move(f));
    EXPECT_OK(socket_->Send(out));
  }
  MessageHeader Exchange(const MessageHeader& h, std::vector<Frame> frames = {}) {
    Send(h, std::move(frames));
    return Receive();
  }
  // The next reply's header (a failure after 10 s without one).
  MessageHeader Receive() {
    std::optional<MessageHeader> h = TryReceive(std::chrono::seconds(10));
    if (!h.has_value()) ADD_FAILURE() << "no reply from the peer";
    return h.value_or(MessageHeader());
  }
  // The next reply's header, or nullopt after `timeout`.
  std::optional<MessageHeader> TryReceive(std::chrono::milliseconds timeout) {
    std::vector<Frame> in;
    const auto until = std::chrono::steady_clock::now() + timeout;
    do {
      auto got = socket_->TryRecv(&in);
      if (got.ok() && *got) return DecodeHeader({in[0].data(), in[0].size()}).value();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    } while (std::chrono::steady_clock::now() < until);
    return std::nullopt;
  }

 private:
  std::unique_ptr<Context> context_;
  std::unique_ptr<Socket> socket_;
};

// The numbers of a STATS report as "key value" pairs (words followed by a
// number; the last one wins where a key repeats).
inline std::map<std::string, int64_t> StatsNumbers(std::string_view text) {
  std::map<std::string, int64_t> stats;
  std::istringstream words{std::string(text)};
  std::string key, value;
  while (words >> key) {
    std::streampos at = words.tellg();
    if (!(words >> value)) break;
    char* end = nullptr;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (end != nullptr && *end == '\0' && !value.empty()) {
      stats[key] = v;
    } else {
      words.seekg(at);
    }
  }
  return stats;
}

// `count` plain TCP connections to 127.0.0.1:`port` that send nothing (a
// client without the handshake, or a connection flood); their descriptors,
// for the caller to close. A failure for each that could not be made.
inline std::vector<int> PlainTcpConnections(int port, int count) {
  std::vector<int> fds;
  for (int i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
      ADD_FAILURE() << "socket: " << std::strerror(errno);
      continue;
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0)
        << std::strerror(errno);
    fds.push_back(fd);
  }
  return fds;
}

// The resident memory of process `pid`, in bytes (0 when unreadable).
inline uint64_t ResidentBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// The highest resident memory of process `pid`, sampled every `period` on
// a thread of its own until destroyed.
class PeakMemory {
 public:
  explicit PeakMemory(pid_t pid, std::chrono::milliseconds period = std::chrono::milliseconds(10))
      : thread_([this, pid, period] {
          while (!stop_.load()) {
            const uint64_t now = ResidentBytes(pid);
            if (now > peak_.load()) peak_.store(now);
            std::this_thread::sleep_for(period);
          }
        }) {}
  ~PeakMemory() {
    stop_.store(true);
    thread_.join();
  }
  uint64_t peak() const { return peak_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> peak_{0};
  std::thread thread_;
};

}  // namespace ps

#endif  // PS_TESTS_UTIL_RAW_PEER_H_
