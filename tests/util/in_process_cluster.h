// Test helper: every shard of a job as a real ShardServer on a thread of the
// test process, bound to a free loopback port. Stops and joins them when it
// goes away.
#ifndef PS_TESTS_UTIL_IN_PROCESS_CLUSTER_H_
#define PS_TESTS_UTIL_IN_PROCESS_CLUSTER_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/shard_server.h"

namespace ps {

class InProcessCluster {
 public:
  explicit InProcessCluster(const JobOptions& job) {
    for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
      auto server = ShardServer::Create(job, s, "tcp://127.0.0.1:*");
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
