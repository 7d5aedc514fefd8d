#include "benchmarks/machine.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

namespace ps {

std::string CpuModel() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return "unknown";
  char line[512];
  std::string model = "unknown";
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "model name", 10) == 0) {
      const char* colon = std::strchr(line, ':');
      if (colon != nullptr) {
        model = colon + 2;
        while (!model.empty() && (model.back() == '\n' || model.back() == ' ')) model.pop_back();
      }
      break;
    }
  }
  std::fclose(f);
  return model;
}

uint32_t PatternBits(uint64_t i, uint64_t k) {
  uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull ^ (k + 1) * 0xc2b2ae3d27d4eb4full;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return static_cast<uint32_t>(h);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

std::string OwnDir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

StatusOr<std::string> ExecutableIn(const std::string& bin_dir, const std::string& name) {
  const std::string dir = bin_dir.empty() ? OwnDir() : bin_dir;
  const std::string path = (std::filesystem::path(dir) / name).string();
  if (::access(path.c_str(), X_OK) != 0) {
    return NotFoundError("no executable " + name + " in " + dir + " (build the " + name +
                         " target, or pass --bin-dir)");
  }
  return path;
}

namespace {
// Binds a loopback TCP socket to `port` (0: any) and returns the port it
// got, closing the socket.
StatusOr<int> BindLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return InternalError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    return UnavailableError("cannot bind loopback port " + std::to_string(port) + ": " + err);
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}
}  // namespace

StatusOr<int> FreePort() { return BindLoopback(0); }

bool PortIsFree(int port) { return port > 0 && port <= 65535 && BindLoopback(port).ok(); }

Status DropCaches(std::string_view off_flag) {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::write(fd, "3", 1) != 1) {
    const std::string err = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return PermissionDeniedError("cannot write 3 to /proc/sys/vm/drop_caches (" + err +
                                 "): it needs root; run with " + std::string(off_flag));
  }
  ::close(fd);
  return Status::Ok();
}

char ProcessState(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return '?';
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  const std::string stat(buf, n > 0 ? static_cast<size_t>(n) : 0);
  const size_t paren = stat.rfind(')');  // the command name may hold spaces
  return paren == std::string::npos || paren + 2 >= stat.size() ? '?' : stat[paren + 2];
}

uint64_t ResidentBytes(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmRSS: %llu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

std::string LoadAverage() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "unknown";
  double one = 0, five = 0, fifteen = 0;
  const int got = std::fscanf(f, "%lf %lf %lf", &one, &five, &fifteen);
  std::fclose(f);
  if (got != 3) return "unknown";
  char text[64];
  std::snprintf(text, sizeof text, "%.2f %.2f %.2f", one, five, fifteen);
  return text;
}

StatusOr<uint64_t> ReadTree(const std::filesystem::path& dir, std::vector<char>* buffer) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string path = it->path().string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return InternalError("cannot open " + path + ": " + std::strerror(errno));
    while (true) {
      const ssize_t r = ::read(fd, buffer->data(), buffer->size());
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        const std::string err = std::strerror(errno);
        ::close(fd);
        return InternalError("cannot read " + path + ": " + err);
      }
      if (r == 0) break;
      total += static_cast<uint64_t>(r);
    }
    ::close(fd);
  }
  if (ec) return InternalError("cannot list " + dir.string() + ": " + ec.message());
  return total;
}

StatusOr<uint32_t> FreeReplicaPorts(uint32_t shards, uint32_t factor,
                                    std::vector<std::string>* servers) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::vector<int> ports;
    for (uint32_t i = 0; i < shards; ++i) {
      PS_ASSIGN_OR_RETURN(int port, FreePort());
      ports.push_back(port);
    }
    int highest = 0;
    for (int port : ports) highest = std::max(highest, port);
    const int room = (65535 - highest) / static_cast<int>(std::max<uint32_t>(1, factor - 1));
    if (room < 1) continue;
    const auto offset = static_cast<uint32_t>(1 + (attempt * 7919 + 1000) % room);
    bool free = std::set<int>(ports.begin(), ports.end()).size() == ports.size();
    for (uint32_t j = 1; j < factor && free; ++j) {
      for (int port : ports) free = free && PortIsFree(port + static_cast<int>(j * offset));
    }
    if (!free) continue;
    servers->clear();
    for (int port : ports) servers->push_back("127.0.0.1:" + std::to_string(port));
    return offset;
  }
  return UnavailableError("no free loopback ports for the replicas");
}

StatusOr<BusyCores> BusyCores::Start(uint32_t n) {
  BusyCores busy;
  const pid_t parent = ::getpid();
  for (uint32_t i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      return InternalError(std::string("cannot start a busy process (fork): ") +
                           std::strerror(errno));
    }
    if (pid == 0) {
      // Only async-signal-safe calls from here on.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::prctl(PR_SET_NAME, "busy-core");
      if (::getppid() != parent) ::_exit(0);  // the benchmark is gone already
      volatile uint64_t spins = 0;
      for (;;) spins = spins + 1;
    }
    busy.pids_.push_back(pid);
  }
  return busy;
}

BusyCores::~BusyCores() {
  for (pid_t pid : pids_) ::kill(pid, SIGKILL);
  for (pid_t pid : pids_) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace ps
