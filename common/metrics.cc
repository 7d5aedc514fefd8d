#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ps {
namespace {

// Prometheus's float syntax: integers without an exponent (counters read
// exactly), NaN and +-Inf spelled as the format wants.
void AppendValue(std::string* out, double v) {
  if (std::isnan(v)) {
    out->append("NaN");
    return;
  }
  if (std::isinf(v)) {
    out->append(v > 0 ? "+Inf" : "-Inf");
    return;
  }
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  out->append(buf);
}

void AppendEscaped(std::string* out, std::string_view value, bool quote) {
  for (char c : value) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && quote) {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

}  // namespace

MetricsWriter::MetricsWriter(MetricLabels constant_labels)
    : constant_(std::move(constant_labels)) {}

void MetricsWriter::Family(std::string_view name, std::string_view type, std::string_view help) {
  text_.append("# HELP ").append(name).push_back(' ');
  AppendEscaped(&text_, help, /*quote=*/false);
  text_.append("\n# TYPE ").append(name).push_back(' ');
  text_.append(type).push_back('\n');
}

void MetricsWriter::AppendLabels(const MetricLabels& labels) {
  if (labels.empty() && constant_.empty()) return;
  text_.push_back('{');
  bool first = true;
  for (const MetricLabels* set : {static_cast<const MetricLabels*>(&constant_), &labels}) {
    for (const auto& [key, value] : *set) {
      if (!first) text_.push_back(',');
      first = false;
      text_.append(key).append("=\"");
      AppendEscaped(&text_, value, /*quote=*/true);
      text_.push_back('"');
    }
  }
  text_.push_back('}');
}

void MetricsWriter::Sample(std::string_view name, const MetricLabels& labels, double value) {
  text_.append(name);
  AppendLabels(labels);
  text_.push_back(' ');
  AppendValue(&text_, value);
  text_.push_back('\n');
}

void MetricsWriter::Counter(std::string_view name, std::string_view help, double value) {
  Family(name, "counter", help);
  Sample(name, value);
}

void MetricsWriter::Gauge(std::string_view name, std::string_view help, double value) {
  Family(name, "gauge", help);
  Sample(name, value);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

std::vector<double> Histogram::LatencyBounds() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
          100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0};
}

void Histogram::Observe(double value) {
  const size_t i = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[i];
  ++count_;
  sum_ += value;
}

void Histogram::Write(MetricsWriter& out, std::string_view name,
                      const MetricLabels& labels) const {
  const std::string bucket = std::string(name) + "_bucket";
  MetricLabels with_le = labels;
  with_le.emplace_back("le", "");
  uint64_t cumulative = 0;
  char buf[40];
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    if (i < bounds_.size()) {
      std::snprintf(buf, sizeof buf, "%g", bounds_[i]);
      with_le.back().second = buf;
    } else {
      with_le.back().second = "+Inf";
    }
    out.Sample(bucket, with_le, static_cast<double>(cumulative));
  }
  out.Sample(std::string(name) + "_sum", labels, sum_);
  out.Sample(std::string(name) + "_count", labels, static_cast<double>(count_));
}

uint32_t ServerMetricsPort(const JobOptions& job, uint32_t shard, uint32_t replica) {
  if (job.metrics.port == 0) return 0;
  const auto shards = static_cast<uint32_t>(job.cluster.servers.size());
  if (replica == 0) return job.metrics.port + shard;
  return job.metrics.port + shards + job.cluster.workers + (replica - 1) * shards + shard;
}

uint32_t WorkerMetricsPort(const JobOptions& job, uint32_t rank) {
  if (job.metrics.port == 0) return 0;
  const auto shards = static_cast<uint32_t>(job.cluster.servers.size());
  if (rank == kEvaluatorWorker) {
    // After every server, worker and backup.
    return job.metrics.port + shards * std::max<uint32_t>(job.replication.factor, 1) +
           job.cluster.workers;
  }
  return job.metrics.port + shards + rank;
}

uint32_t MaxMetricsPortOffset(const JobOptions& job) {
  const auto shards = static_cast<uint64_t>(job.cluster.servers.size());
  const uint64_t replicas = std::max<uint32_t>(job.replication.factor, 1);
  const uint64_t processes =
      shards * replicas + job.cluster.workers + (job.cluster.evaluator ? 1 : 0);
  return static_cast<uint32_t>(std::min<uint64_t>(processes - 1, 1u << 31));
}

}  // namespace ps
