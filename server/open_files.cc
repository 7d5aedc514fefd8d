#include "server/open_files.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace ps {

namespace {

uint64_t FromRlim(rlim_t value) {
  return value == RLIM_INFINITY ? std::numeric_limits<uint64_t>::max() : uint64_t{value};
}

std::string Describe(uint64_t value) {
  return value == std::numeric_limits<uint64_t>::max() ? "unlimited" : std::to_string(value);
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

std::string AcceptFailureText(int err, const OpenFileLimit& limit) {
  const std::string limits = "RLIMIT_NOFILE soft limit " + Describe(limit.soft) + ", hard " +
                             Describe(limit.hard);
  if (err == EMFILE) {
    return "too many open files (" + limits +
           "): raise `ulimit -n` (the hard limit too where the soft one is already at it, e.g. "
           "LimitNOFILE= of a systemd service or the container's nofile ulimit)";
  }
  if (err == ENFILE) {
    return "the system's table of open files is full (" + limits +
           "): raise fs.file-max (sysctl) or stop processes holding many files";
  }
  if (err == ENOBUFS || err == ENOMEM) {
    return std::string(std::strerror(err)) + ": the host is out of socket memory";
  }
  return std::string(std::strerror(err)) + " (" + limits + ")";
}

}  // namespace ps
