// Test helper: every shard of a job as a real ShardServer on a thread of the
// test process, bound to a free loopback port. Stops and joins them when it
// goes away.
#ifndef PS_TESTS_UTIL_IN_PROCESS_CLUSTER_H_
#define PS_TESTS_UTIL_IN_PROCESS_CLUSTER_H_

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/shard_server.h"

namespace ps {

class InProcessCluster {
 public:
  // `env` (null: Env::Default()) is every shard's; it must outlive the
  // cluster.
  explicit InProcessCluster(const JobOptions& job, Env* env = nullptr) {
    for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
      auto server = ShardServer::Create(job, s, "tcp://127.0.0.1:*", -1, env);
      EXPECT_TRUE(server.ok()) << server.status().ToString();
      if (!server.ok()) continue;
      endpoints_.push_back((*server)->endpoint());
      servers_.push_back(std::move(*server));
    }
    for (auto& s : servers_) threads_.emplace_back([&s] { s->Run().IgnoreError(); });
  }
  ~InProcessCluster() { Stop(); }
  InProcessCluster(const InProcessCluster&) = delete;
  InProcessCluster& operator=(const InProcessCluster&) = delete;

  // Stops every shard and waits for it; their ports stay bound until the
  // cluster is destroyed.
  void Stop() {
    for (auto& s : servers_) s->Stop();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  // Returns once every shard ran its housekeeping (liveness, pull
  // deadlines) at least once after this call began: after moving a
  // FakeClock, the shards have seen the new time. A round starts at least
  // every 100 ms; fails the test after 10 s.
  void AwaitHousekeeping() {
    std::vector<uint64_t> from;
    for (auto& s : servers_) from.push_back(s->housekeeping_rounds());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (size_t i = 0; i < servers_.size(); ++i) {
      // The round under way may have read the time before the call: wait
      // for the one after it.
      while (servers_[i]->housekeeping_rounds() < from[i] + 2) {
        if (std::chrono::steady_clock::now() > deadline) {
          ADD_FAILURE() << "shard " << i << " ran no housekeeping round in 10 s";
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
  // "tcp://127.0.0.1:<port>" per shard, for Client::Create.
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // REQUIRES: for state and counters, Stop() first.
  ShardServer& server(size_t i) { return *servers_[i]; }

 private:
  std::vector<std::unique_ptr<ShardServer>> servers_;
  std::vector<std::thread> threads_;
  std::vector<std::string> endpoints_;
};

}  // namespace ps

#endif  // PS_TESTS_UTIL_IN_PROCESS_CLUSTER_H_
