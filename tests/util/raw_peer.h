// A raw DEALER for tests that play a peer the project's own clients never
// are: a primary or an authority against one backup, a forged or stale
// worker against a shard. Sends a header and frames, returns the reply's
// header; header-only, for tests.
#ifndef PS_TESTS_UTIL_RAW_PEER_H_
#define PS_TESTS_UTIL_RAW_PEER_H_

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/transport.h"
#include "common/wire.h"
#include "tests/util/status_matchers.h"

namespace ps {

class RawPeer {
 public:
  explicit RawPeer(const std::string& endpoint)
      : context_(Context::Create(1).value()),
        socket_(Socket::Create(context_.get(), SocketType::kDealer, SocketOptions()).value()) {
    EXPECT_OK(socket_->Connect(endpoint));
  }
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
    std::vector<Frame> in;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      auto got = socket_->TryRecv(&in);
      if (got.ok() && *got) return DecodeHeader({in[0].data(), in[0].size()}).value();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ADD_FAILURE() << "no reply from the peer";
    return MessageHeader();
  }

 private:
  std::unique_ptr<Context> context_;
  std::unique_ptr<Socket> socket_;
};

}  // namespace ps

#endif  // PS_TESTS_UTIL_RAW_PEER_H_
