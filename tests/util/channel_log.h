// Test helper: a ChannelFactory that makes real channels
// (ZmqChannel::Connect) and keeps the options each was asked with, so a
// test can check what a client, its heartbeats or a primary asked of its
// connections. Thread-safe: heartbeat channels are made on their own thread.
#ifndef PS_TESTS_UTIL_CHANNEL_LOG_H_
#define PS_TESTS_UTIL_CHANNEL_LOG_H_

#include <mutex>
#include <vector>

#include "common/channel.h"

namespace ps {

class ChannelLog {
 public:
  ChannelFactory Factory() {
    return [this](Context* context, const ChannelOptions& options)
               -> StatusOr<std::unique_ptr<Channel>> {
      {
        std::lock_guard<std::mutex> lock(mu_);
        made_.push_back(options);
      }
      return ZmqChannel::Connect(context, options);
    };
  }
  // The options of every channel made so far, in order.
  std::vector<ChannelOptions> made() const {
    std::lock_guard<std::mutex> lock(mu_);
    return made_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<ChannelOptions> made_;
};

}  // namespace ps

#endif  // PS_TESTS_UTIL_CHANNEL_LOG_H_
