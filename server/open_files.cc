#include "server/open_files.h"

#include <sys/resource.h>

#include <limits>

namespace ps {

namespace {

uint64_t FromRlim(rlim_t value) {
  return value == RLIM_INFINITY ? std::numeric_limits<uint64_t>::max() : uint64_t{value};
}

}  // namespace

OpenFileLimit CurrentOpenFileLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return {};
  return {FromRlim(r.rlim_cur), FromRlim(r.rlim_max)};
}

OpenFileLimit RaiseOpenFileLimit(OpenFileLimit* after) {
  rlimit r{};
  OpenFileLimit before;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0) {
    before = {FromRlim(r.rlim_cur), FromRlim(r.rlim_max)};
    if (r.rlim_cur != r.rlim_max) {
      rlimit raised = r;
      raised.rlim_cur = r.rlim_max;
      setrlimit(RLIMIT_NOFILE, &raised);  // refused (e.g. above a kernel cap): the limit stays
    }
  }
  *after = CurrentOpenFileLimit();
  return before;
}

}  // namespace ps
