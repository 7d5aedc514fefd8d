// Test helper: the job a test runs, built in one expression.
//
//   JobOptions job = TestJob().Servers(2).Workers(3).Ssp(2)
//                        .Table("w", 1000, 4, OptimizerKind::kAdd).Build();
//
// Servers are placeholder loopback addresses ("127.0.0.1:1", ...): the
// in-process shards bind port 0 and the clients are given their real
// endpoints. Anything the builder does not name is set on the result.
#ifndef PS_TESTS_UTIL_TEST_JOB_H_
#define PS_TESTS_UTIL_TEST_JOB_H_

#include <cstdint>
#include <string>
#include <utility>

#include "common/options.h"

namespace ps {

// A table of `rows` x `dim` under `optimizer` with its default settings,
// for a test to adjust before it is added.
inline TableOptions TestTable(std::string name, uint64_t rows, uint32_t dim = 1,
                              OptimizerKind optimizer = OptimizerKind::kSgd) {
  TableOptions t;
  t.name = std::move(name);
  t.rows = rows;
  t.dim = dim;
  t.optimizer.kind = optimizer;
  return t;
}

class TestJob {
 public:
  // `n` servers at placeholder addresses 127.0.0.1:<first_port + i>.
  TestJob& Servers(uint32_t n, uint32_t first_port = 1) {
    job_.cluster.servers.clear();
    for (uint32_t i = 0; i < n; ++i) {
      job_.cluster.servers.push_back("127.0.0.1:" + std::to_string(first_port + i));
    }
    return *this;
  }
  TestJob& Workers(uint32_t n) {
    job_.cluster.workers = n;
    return *this;
  }
  TestJob& Bsp() { return Mode(ConsistencyMode::kBsp, 0); }
  TestJob& Ssp(uint32_t staleness) { return Mode(ConsistencyMode::kSsp, staleness); }
  TestJob& Asp() { return Mode(ConsistencyMode::kAsp, 0); }
  TestJob& Mode(ConsistencyMode mode, uint32_t staleness) {
    job_.consistency.mode = mode;
    job_.consistency.staleness = staleness;
    return *this;
  }
  // A table of `rows` x `dim` with the given rule (its default settings).
  TestJob& Table(std::string name, uint64_t rows, uint32_t dim = 1,
                 OptimizerKind optimizer = OptimizerKind::kSgd) {
    return Table(TestTable(std::move(name), rows, dim, optimizer));
  }
  // A table given whole (init, optimizer settings, ...).
  TestJob& Table(TableOptions table) {
    job_.tables.push_back(std::move(table));
    return *this;
  }
  TestJob& RequestTimeoutMs(uint32_t ms) {
    job_.client.request_timeout_ms = ms;
    return *this;
  }
  // liveness.heartbeat_ms and timeout_ms (heartbeat 0: liveness off).
  TestJob& Liveness(uint32_t heartbeat_ms, uint32_t timeout_ms = 10000) {
    job_.liveness.heartbeat_ms = heartbeat_ms;
    job_.liveness.timeout_ms = timeout_ms;
    return *this;
  }
  JobOptions Build() const { return job_; }

 private:
  // One server and one worker until told otherwise.
  JobOptions job_ = [] {
    JobOptions job;
    job.cluster.servers = {"127.0.0.1:1"};
    job.cluster.workers = 1;
    return job;
  }();
};

}  // namespace ps

#endif  // PS_TESTS_UTIL_TEST_JOB_H_
