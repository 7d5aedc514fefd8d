// Metrics of a running process in Prometheus's text exposition format
// (version 0.0.4), served over HTTP by MetricsEndpoint
// (common/metrics_endpoint.h).
//
// The owner of the numbers (a shard's serving thread, a worker's training
// loop) writes them itself, into a MetricsWriter, once per
// metrics.interval_ms, and publishes the text; the HTTP thread only hands
// out the text last published. So the hot paths take no lock and touch no
// atomic, and a scrape never reads a half-updated state; what a scrape sees
// is at most one interval old.
#ifndef PS_COMMON_METRICS_H_
#define PS_COMMON_METRICS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/options.h"

namespace ps {

// Adds the wall time from its construction to its destruction, in seconds,
// to *total: the time a scope took, for a counter of seconds.
class ScopedSeconds {
 public:
  explicit ScopedSeconds(double* total)
      : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~ScopedSeconds() {
    *total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  ScopedSeconds(const ScopedSeconds&) = delete;
  ScopedSeconds& operator=(const ScopedSeconds&) = delete;

 private:
  double* const total_;
  const std::chrono::steady_clock::time_point start_;
};

// Label pairs of one sample, e.g. {{"op", "push"}}.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Builds one exposition text. Families are written one after another: a
// family's HELP and TYPE line, then its samples. `labels` given to the
// constructor are added to every sample (e.g. shard="0"). Label values are
// escaped as the format asks (backslash, double quote, newline); names must
// be valid metric and label names (the caller's constants).
// Not thread-safe.
class MetricsWriter {
 public:
  explicit MetricsWriter(MetricLabels constant_labels = {});

  // Starts the family `name` of `type` ("counter", "gauge", "histogram").
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // One sample of `name` (the family's name, or with _bucket/_sum/_count).
  void Sample(std::string_view name, const MetricLabels& labels, double value);
  void Sample(std::string_view name, double value) { Sample(name, {}, value); }
  // Family + one sample without labels, the common case.
  void Counter(std::string_view name, std::string_view help, double value);
  void Gauge(std::string_view name, std::string_view help, double value);

  const std::string& text() const { return text_; }
  std::string Take() { return std::move(text_); }

 private:
  void AppendLabels(const MetricLabels& labels);
  MetricLabels constant_;
  std::string text_;
};

// A histogram with fixed upper bounds (in the unit observed, seconds for
// durations), cumulative as Prometheus counts them when written.
// Not thread-safe.
class Histogram {
 public:
  // `bounds` ascending; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
  // Bounds of durations from 50 microseconds to 10 seconds, about 2.5x apart.
  static std::vector<double> LatencyBounds();

  void Observe(double value);
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

  // Writes the _bucket, _sum and _count samples of the family `name` (the
  // caller wrote its Family line) with `labels` on each.
  void Write(MetricsWriter& out, std::string_view name, const MetricLabels& labels = {}) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = above every bound
  uint64_t count_ = 0;
  double sum_ = 0;
};

// The port on which a process of `job` serves its metrics (0: it serves
// none): metrics.port + the process's place in the job, so that every
// process of a job on one host has a port of its own: shard i (replica 0)
// at port + i, worker r at port + S + r, backup j >= 1 of shard i at
// port + S + W + (j - 1) x S + i (S shards, W workers), the evaluator
// (cluster.evaluator) at port + S x k + W (k = replication.factor).
// REQUIRES: job.Validate().ok().
uint32_t ServerMetricsPort(const JobOptions& job, uint32_t shard, uint32_t replica);
// rank kEvaluatorWorker: the evaluator's.
uint32_t WorkerMetricsPort(const JobOptions& job, uint32_t rank);
// The highest offset from metrics.port that ServerMetricsPort and
// WorkerMetricsPort can give for `job`'s shape.
uint32_t MaxMetricsPortOffset(const JobOptions& job);

}  // namespace ps

#endif  // PS_COMMON_METRICS_H_
