// Test helper: a real ps_server of a job file, started as a user starts it.
#ifndef PS_TESTS_UTIL_SERVER_PROCESS_H_
#define PS_TESTS_UTIL_SERVER_PROCESS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/watched_process.h"

namespace ps {

// Shard `shard` of the job in `job_path`: the ps_server built beside the
// tests (PS_BINARY_DIR/bin), its lines prefixed "[ps_server N] ". Killed
// (SIGKILL) and reaped when the returned process is destroyed, also when a
// test fails; wait for its "serving" line before sending it anything.
inline StatusOr<std::unique_ptr<WatchedProcess>> StartShardServer(const std::string& job_path,
                                                                  uint32_t shard) {
  return WatchedProcess::Start(
      {.argv = {std::string(PS_BINARY_DIR) + "/bin/ps_server", "--config", job_path, "--shard",
                std::to_string(shard)},
       .env = {}},
      "[ps_server " + std::to_string(shard) + "] ");
}

}  // namespace ps

#endif  // PS_TESTS_UTIL_SERVER_PROCESS_H_
