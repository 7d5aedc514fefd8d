// Test helper: a real one-member etcd (/usr/bin/etcd, Debian's etcd-server)
// on loopback, for the tests of what talks to etcd.
//
//   static void SetUpTestSuite() { etcd_ = new StatusOr<...>(EtcdServer::Start()); }
//   void SetUp() override {
//     if (EtcdServer::NotInstalled(etcd_->status())) GTEST_SKIP() << etcd_->status().message();
//     ASSERT_OK(*etcd_);
//   }
//
// etcd gets two free loopback ports (client and peer; a start that loses
// them to another process is tried again with new ones), a data folder in a
// temporary folder of its own, and heartbeat 10 ms / election timeout 100 ms,
// so it elects itself within a second and allows leases of 1 s. Its log
// (zap, JSON lines) goes to etcd.log in the temporary folder; a failed start
// returns its last lines. The destructor stops it by pid (SIGTERM, SIGKILL
// after 5 s, reaped) and removes the folder, also when the test failed;
// should the test process die, the kernel kills etcd (common/subprocess.h).
//
// Thread-compatible. Start it on a thread that outlives it (the main
// thread: SetUpTestSuite is fine).
#ifndef PS_TESTS_UTIL_ETCD_SERVER_H_
#define PS_TESTS_UTIL_ETCD_SERVER_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"
#include "tests/util/free_port.h"

namespace ps {

class EtcdServer {
 public:
  static constexpr char kEtcdPath[] = "/usr/bin/etcd";
  static constexpr char kNotInstalled[] = "etcd-server is not installed; ./ps setup installs it";

  // Starts etcd and waits until GET /health says it has a leader (which
  // /version, answered before the election, does not).
  // Errors: FailedPrecondition kNotInstalled when /usr/bin/etcd is missing
  // (see NotInstalled); Internal when the temporary folder cannot be made;
  // the errors of Subprocess::Spawn; Unavailable with the log's last lines
  // when etcd exits, three times over, or is not healthy within `timeout`.
  static StatusOr<std::unique_ptr<EtcdServer>> Start(
      std::chrono::milliseconds timeout = std::chrono::seconds(15)) {
    if (access(kEtcdPath, X_OK) != 0) return FailedPreconditionError(kNotInstalled);
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::temp_directory_path(ec) / "ps-etcd-XXXXXX";
    std::string dir = base.string();
    if (ec || mkdtemp(dir.data()) == nullptr) {
      return InternalError("etcd test server: cannot make a folder like " + base.string());
    }
    std::unique_ptr<EtcdServer> server(new EtcdServer(dir));
    Status started;
    for (int attempt = 0; attempt < 3; ++attempt) {
      started = server->Launch(timeout);
      if (started.ok() || started.code() != StatusCode::kAborted) break;
    }
    if (started.code() == StatusCode::kAborted) return UnavailableError(started.message());
    PS_RETURN_IF_ERROR(started);
    return server;
  }

  // True for Start's error when etcd is not installed: the test skips.
  static bool NotInstalled(const Status& status) {
    return status.code() == StatusCode::kFailedPrecondition && status.message() == kNotInstalled;
  }

  ~EtcdServer() {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // Where clients connect: "127.0.0.1:<port>".
  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return process_ != nullptr ? process_->pid() : -1; }
  const std::string& log_path() const { return log_; }

  // Stops etcd: SIGTERM, SIGKILL after 5 s, reaped. Nothing once stopped.
  void Stop() {
    if (process_ != nullptr) process_->Terminate(std::chrono::seconds(5));
  }

  // The last `lines` lines of etcd's log.
  std::string LogTail(size_t lines = 30) const {
    std::ifstream in(log_);
    std::deque<std::string> tail;
    for (std::string line; std::getline(in, line);) {
      tail.push_back(line);
      if (tail.size() > lines) tail.pop_front();
    }
    std::string text;
    for (const std::string& line : tail) text += "  " + line + "\n";
    return text;
  }

 private:
  explicit EtcdServer(std::string dir) : dir_(std::move(dir)), log_(dir_ + "/etcd.log") {}

  // One start on new free ports. Aborted (try again) when etcd exited
  // because a port was taken.
  Status Launch(std::chrono::milliseconds timeout) {
    process_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_ + "/data", ec);
    const int client_port = FreePort();
    int peer_port = FreePort();
    while (peer_port == client_port) peer_port = FreePort();
    endpoint_ = "127.0.0.1:" + std::to_string(client_port);
    const std::string client_url = "http://" + endpoint_;
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer_port);
    SubprocessOptions options;
    options.argv = {kEtcdPath,
                    "--name",
                    "test",
                    "--data-dir",
                    dir_ + "/data",
                    "--listen-client-urls",
                    client_url,
                    "--advertise-client-urls",
                    client_url,
                    "--listen-peer-urls",
                    peer_url,
                    "--initial-advertise-peer-urls",
                    peer_url,
                    "--initial-cluster",
                    "test=" + peer_url,
                    "--heartbeat-interval",
                    "10",
                    "--election-timeout",
                    "100",
                    "--logger",
                    "zap",
                    "--log-outputs",
                    log_};
    PS_ASSIGN_OR_RETURN(process_, Subprocess::Spawn(options));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (process_->TryWait().has_value()) {
        const std::string tail = LogTail();
        const std::string what = "etcd " + endpoint_ + " " +
                                 DescribeWaitStatus(*process_->wait_status()) +
                                 " while starting; its log " + log_ + " ends:\n" + tail;
        if (tail.find("address already in use") != std::string::npos) return AbortedError(what);
        return UnavailableError(what);
      }
      if (Get(client_port, "/health").find("\"health\":\"true\"") != std::string::npos) {
        return Status::Ok();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Stop();
    return UnavailableError("etcd " + endpoint_ + " not healthy after " +
                            std::to_string(timeout.count()) + " ms; its log " + log_ + " ends:\n" +
                            LogTail());
  }

  // The whole HTTP/1.0 reply to GET `path` on the loopback `port`, or "".
  static std::string Get(int port, const std::string& path) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return "";
    const timeval one_second{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &one_second, sizeof(one_second));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &one_second, sizeof(one_second));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    std::string reply;
    const std::string request = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(request.size())) {
      char buffer[4096];
      for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) reply.append(buffer, n);
    }
    close(fd);
    return reply;
  }

  const std::string dir_;
  const std::string log_;
  std::string endpoint_;
  std::unique_ptr<Subprocess> process_;
};

}  // namespace ps

#endif  // PS_TESTS_UTIL_ETCD_SERVER_H_
