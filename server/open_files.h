// The process's limit on open files (RLIMIT_NOFILE): every connection a
// shard accepts takes one, so a shard keeps its connections below it
// (server.max_connections).
//
// Thread-safe (the process's limits are the kernel's).
#ifndef PS_SERVER_OPEN_FILES_H_
#define PS_SERVER_OPEN_FILES_H_

#include <cstdint>
#include <string>

namespace ps {

struct OpenFileLimit {
  uint64_t soft = 0;  // UINT64_MAX: unlimited
  uint64_t hard = 0;
};

// The current limit.
OpenFileLimit CurrentOpenFileLimit();

// Raises the soft limit to the hard one (what a process may do without
// privileges). Returns the limit before; `after` receives the limit now.
OpenFileLimit RaiseOpenFileLimit(OpenFileLimit* after);

}  // namespace ps

#endif  // PS_SERVER_OPEN_FILES_H_
