// The HTTP endpoint that serves a process's metrics (common/metrics.h) to
// Prometheus: GET /metrics answers the text last published, in the text
// exposition format 0.0.4; GET / says where the metrics are. The adapter
// of the HTTP server library (cpp-httplib): no other file of the project
// sees it.
//
// Thread-safe: Publish() may be called from any thread while the
// endpoint's own threads (one listener, two that answer) serve scrapes.
#ifndef PS_COMMON_METRICS_ENDPOINT_H_
#define PS_COMMON_METRICS_ENDPOINT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace ps {

class MetricsEndpoint {
 public:
  // Listens on `bind`:`port` (port 0: any free port, see port()) and starts
  // serving. `name` says whose metrics these are in messages ("shard 1").
  // Unavailable when the address cannot be bound (in use, or not an
  // address of this host), naming it and what to change.
  static StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& bind,
                                                          uint32_t port,
                                                          const std::string& name);
  // Stops serving and joins the endpoint's threads.
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // What the next scrapes get (replaces the text published before).
  void Publish(std::string text);
  // The port it listens on.
  uint32_t port() const;
  // "host:port" as a scraper would name it.
  const std::string& address() const;

  // Keeps serving (the values last published) for `ms` milliseconds, or
  // until *cancel is true: metrics.linger_ms after a process's work ends.
  void Linger(uint32_t ms, const std::atomic<bool>& cancel) const;

  class Impl;

 private:
  explicit MetricsEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The endpoint of one process of a job: on `flag_port` when it is >= 0 (a
// --metrics-port flag: 0 serves none), else on `job_port` (the port
// metrics.port gives the process: ServerMetricsPort, WorkerMetricsPort; 0
// serves none). Null when it serves none; the error of Start otherwise.
StatusOr<std::unique_ptr<MetricsEndpoint>> StartProcessMetrics(const std::string& bind,
                                                               uint32_t job_port,
                                                               int64_t flag_port,
                                                               const std::string& name);

}  // namespace ps

#endif  // PS_COMMON_METRICS_ENDPOINT_H_
