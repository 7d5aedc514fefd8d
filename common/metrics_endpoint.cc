#include "common/metrics_endpoint.h"

#include <sys/socket.h>

#include <httplib.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "common/logging.h"

namespace ps {

// The library's server and what it serves. The text is shared with the
// threads that answer, so a scrape sends the text it started with while a
// newer one is published.
class MetricsEndpoint::Impl {
 public:
  explicit Impl(std::string whose) : name(std::move(whose)) {}

  void Publish(std::string text) {
    auto shared = std::make_shared<const std::string>(std::move(text));
    std::lock_guard<std::mutex> lock(mu_);
    text_ = std::move(shared);
  }
  std::shared_ptr<const std::string> Latest() const {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }

  const std::string name;
  std::string address;  // "host:port", set before serving starts
  uint32_t port = 0;
  httplib::Server server;
  std::thread listener;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const std::string> text_ = std::make_shared<const std::string>();  // guarded by mu_
};

StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& bind,
                                                                  uint32_t port,
                                                                  const std::string& name) {
  if (port > 65535) {
    return InvalidArgumentError(name + " metrics endpoint: port " + std::to_string(port) +
                                " is above 65535; lower metrics.port");
  }
  auto impl = std::make_unique<Impl>(name);
  Impl* raw = impl.get();
  httplib::Server& server = impl->server;
  // Two threads answer (a scrape and a person's curl at once); the library's
  // default is one per core.
  server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  server.set_keep_alive_timeout(2);
  // SO_REUSEADDR only: the library's default also sets SO_REUSEPORT, which
  // would let two processes of a job share a port without an error.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server.Get("/metrics", [raw](const httplib::Request&, httplib::Response& response) {
    std::shared_ptr<const std::string> text = raw->Latest();
    response.set_content(*text, "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/", [raw](const httplib::Request&, httplib::Response& response) {
    response.set_content(raw->name + ": metrics at /metrics\n", "text/plain; charset=utf-8");
  });
  int bound = -1;
  try {
    if (port == 0) {
      bound = server.bind_to_any_port(bind);
    } else if (server.bind_to_port(bind, static_cast<int>(port))) {
      bound = static_cast<int>(port);
    }
  } catch (const std::exception& e) {  // the library's own, should it throw
    return InternalError(name + " metrics endpoint " + bind + ":" + std::to_string(port) + ": " +
                         e.what());
  }
  if (bound <= 0) {
    return UnavailableError(name + " metrics endpoint: cannot listen on " + bind + ":" +
                            std::to_string(port) +
                            " (the port is in use, or the address is not this host's); "
                            "choose another metrics.port or metrics.bind, or metrics.port 0 "
                            "to serve no metrics");
  }
  impl->port = static_cast<uint32_t>(bound);
  const bool v6 = bind.find(':') != std::string::npos;
  impl->address = (v6 ? "[" + bind + "]" : bind) + ":" + std::to_string(bound);
  impl->listener = std::thread([raw] { raw->server.listen_after_bind(); });
  PS_LOG_INFO("{}: metrics at http://{}/metrics", name, impl->address);
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(impl)));
}

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsEndpoint::~MetricsEndpoint() {
  impl_->server.stop();
  if (impl_->listener.joinable()) impl_->listener.join();
}

void MetricsEndpoint::Publish(std::string text) { impl_->Publish(std::move(text)); }

uint32_t MetricsEndpoint::port() const { return impl_->port; }

const std::string& MetricsEndpoint::address() const { return impl_->address; }

void MetricsEndpoint::Linger(uint32_t ms, const std::atomic<bool>& cancel) const {
  if (ms == 0) return;
  PS_LOG_INFO("{}: serving the final metrics at http://{}/metrics for {} ms (metrics.linger_ms)",
              impl_->name, impl_->address, ms);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!cancel.load(std::memory_order_relaxed) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

StatusOr<std::unique_ptr<MetricsEndpoint>> StartProcessMetrics(const std::string& bind,
                                                               uint32_t job_port,
                                                               int64_t flag_port,
                                                               const std::string& name) {
  const int64_t port = flag_port >= 0 ? flag_port : job_port;
  if (port == 0) return std::unique_ptr<MetricsEndpoint>();
  if (port > 65535) {
    return InvalidArgumentError("--metrics-port " + std::to_string(port) +
                                ": expected a port 1..65535, or 0 to serve no metrics");
  }
  return MetricsEndpoint::Start(bind, static_cast<uint32_t>(port), name);
}

}  // namespace ps
