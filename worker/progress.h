// Progress of one worker's training program: a line per interval (epoch,
// clock, loss, test metric, samples/s, time spent waiting on the staleness
// bound, where the step's time went) and, when train.metrics_csv is set,
// the same as a CSV row that the convergence benchmarks plot.
#ifndef PS_WORKER_PROGRESS_H_
#define PS_WORKER_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/metrics_endpoint.h"
#include "common/status.h"
#include "worker/backend.h"
#include "worker/batch_balance.h"
#include "worker/param_store.h"
#include "worker/train_options.h"

namespace ps {

// Where the time of a training step went, in milliseconds per step (a mean
// over some steps; evaluations left out):
//   - step: wall time;
//   - pull and push: time the training thread waited in the ParamStore's
//     pulls and pushes (ParamStore::Times);
//   - h2d, compute, d2h: the compute backend's busy time (DeviceTimes):
//     copies to the device, compute, copies back. A GPU runs copies and
//     compute at once, so these may add up to more than the step. On the
//     cpu backend the MLP copies nothing (Mlp::TrainStep computes where
//     the parameters were pulled and writes the gradient where it is
//     pushed from); the sparse models still copy their pulled rows in and
//     their gradients out (memcpy), and those copies count here.
struct StepBreakdown {
  double step_ms = 0, pull_ms = 0, h2d_ms = 0, compute_ms = 0, d2h_ms = 0, push_ms = 0;
  // "step 12.30 ms: pull 3.10, h2d 0.40, compute 5.20, d2h 0.40, push 2.00"
  std::string ToString() const;
};

// Rows of a metrics CSV shared by every worker of a run. The file is
// created with its header line when missing (atomically: a half-written
// header is never seen) and each row is one append, so the workers'
// processes may write to the same file at once.
class MetricsCsv {
 public:
  static constexpr const char* kHeader =
      "time_s,clock,worker,epoch,loss,metric_name,metric,samples_per_s,staleness_wait_s,"
      "step_ms,pull_ms,h2d_ms,compute_ms,d2h_ms,push_ms";
  // The header before the step breakdown's columns: SetAside moves such a
  // file aside too (Open refuses to append to it).
  static constexpr const char* kHeaderWithoutBreakdown =
      "time_s,clock,worker,epoch,loss,metric_name,metric,samples_per_s,staleness_wait_s";
  // Opens (creating when missing) `path`. InvalidArgument naming the path
  // when it cannot be created or is not a metrics CSV (another header).
  static StatusOr<std::unique_ptr<MetricsCsv>> Open(const std::string& path);
  // Before a new run: renames an existing metrics CSV at `path` to
  // `path`.prev (replacing an older one) and returns true; false when there
  // is none. InvalidArgument when `path` exists but is not a metrics CSV
  // (it is left alone).
  static StatusOr<bool> SetAside(const std::string& path);
  ~MetricsCsv();
  MetricsCsv(const MetricsCsv&) = delete;
  MetricsCsv& operator=(const MetricsCsv&) = delete;

  struct Row {
    double time_s = 0;
    int64_t clock = 0;
    uint32_t worker = 0;  // kEvaluatorWorker: written "evaluator", with no loss
    double epoch = 0;
    double loss = 0;
    std::string metric_name;        // empty when no evaluation
    std::optional<double> metric;
    double samples_per_s = 0;
    double staleness_wait_s = 0;
    StepBreakdown breakdown;  // of the interval the row ends
  };
  // One line; Internal naming the path when the write fails (disk full).
  Status Append(const Row& row);
  const std::string& path() const { return path_; }

 private:
  MetricsCsv(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

// What a training program reports when it is done.
struct TrainSummary {
  double first_loss = 0;  // minibatch loss of the first step
  double last_loss = 0;   // mean minibatch loss of the last interval
  std::string metric_name;  // "test accuracy", "test log-loss", "test RMSE"; empty: none
  std::vector<double> metrics;  // every evaluation, in order (worker 0 only)
  double samples_per_s = 0;     // over the whole run, evaluations excluded
  double staleness_wait_s = 0;
  StepBreakdown breakdown;      // over the whole run

  // Mean of the last `n` evaluations (fewer if there are fewer); NaN when none.
  double TailMean(size_t n) const;
};

class TrainingProgress {
 public:
  // `metric_name` names what the program's evaluation measures;
  // `samples_per_epoch` is this worker's data size. Opens train.metrics_csv.
  // With `metrics` (must outlive this), publishes the worker's metrics
  // there every metrics.interval_ms and at the last step. `backend` (must
  // outlive this; null: none) gives the breakdown's device times.
  static StatusOr<std::unique_ptr<TrainingProgress>> Create(const TrainJob& job, uint32_t rank,
                                                            const ParamStore* store,
                                                            std::string metric_name,
                                                            uint64_t samples_per_epoch,
                                                            MetricsEndpoint* metrics = nullptr,
                                                            const Backend* backend = nullptr);

  // Records one step's minibatch loss and size.
  void AddStep(double loss, uint64_t samples);
  // After `done` steps of `total`: prints a line when an interval ends
  // (train.log_every, and the last step) and, on worker 0 when an
  // evaluation is due (train.eval_every, and the last step), first runs
  // `evaluate`, whose time does not count as training time.
  Status StepDone(int64_t done, int64_t total, const std::function<StatusOr<double>()>& evaluate);

  const TrainSummary& summary() const { return summary_; }
  // After the last step's pushes are acknowledged (ParamStore::Flush):
  // publishes the final metrics (what metrics.linger_ms serves), with the
  // counts those acknowledgements brought, and returns the summary.
  TrainSummary Finish();
  // Adds the balancer's batch and decisions to the metrics (`balancer` must
  // outlive this; null: none).
  void ShowBalance(const BatchBalancer* balancer) { balancer_ = balancer; }
  // The worker's metrics as Prometheus text after `done` steps of `total`.
  std::string MetricsText(int64_t done, int64_t total) const;

 private:
  using SteadyClock = std::chrono::steady_clock;
  TrainingProgress(const TrainJob& job, uint32_t rank, const ParamStore* store,
                   std::string metric_name, uint64_t samples_per_epoch,
                   std::unique_ptr<MetricsCsv> csv, MetricsEndpoint* metrics,
                   const Backend* backend);
  double TrainingSeconds() const;
  // Seconds spent in the store's pulls and pushes and on the backend.
  struct Spent {
    double pull_s = 0, push_s = 0;
    DeviceTimes device;
    Spent operator-(const Spent& other) const;
    Spent operator+(const Spent& other) const;
  };
  // Running totals of the breakdown's parts, evaluations left out.
  struct Totals {
    uint64_t steps = 0;
    double step_s = 0;
    Spent spent;
  };
  // What the store and the backend report so far, all of it.
  Spent SpentSoFar() const;
  Totals Now() const;
  static StepBreakdown Between(const Totals& from, const Totals& to);
  // Times the step just done and publishes the metrics when due.
  void UpdateMetrics(int64_t done, int64_t total);

  int64_t done_ = 0, total_ = 0;  // the last StepDone's
  const uint32_t rank_;
  const uint32_t log_every_;
  const uint32_t eval_every_;
  const bool backups_;  // consistency.backup_workers > 0: lines count late pushes
  const ParamStore* const store_;
  const uint64_t samples_per_epoch_;
  std::unique_ptr<MetricsCsv> csv_;
  const SteadyClock::time_point start_;
  SteadyClock::duration evaluating_{};  // time spent in evaluations
  uint64_t samples_ = 0;                // since the start
  bool first_step_ = true;
  double interval_loss_ = 0;
  uint64_t interval_steps_ = 0;
  TrainSummary summary_;
  // Metrics (null: none served).
  MetricsEndpoint* const metrics_;
  const std::chrono::milliseconds metrics_interval_;
  Histogram step_seconds_{Histogram::LatencyBounds()};
  SteadyClock::time_point step_start_;           // end of the previous step
  SteadyClock::duration step_evaluating_{};      // evaluating_ at step_start_
  SteadyClock::time_point published_{};
  uint64_t published_samples_ = 0;  // samples_ at the last publication
  double samples_per_s_now_ = 0;    // between the last two publications
  double last_loss_ = 0;
  const BatchBalancer* balancer_ = nullptr;
  // The breakdown: steps so far, what the store and backend spent outside
  // steps (before training, in evaluations), and the totals at the last
  // log line.
  const Backend* const backend_;
  uint64_t steps_ = 0;
  Spent left_out_;
  Totals logged_;
};

}  // namespace ps

#endif  // PS_WORKER_PROGRESS_H_
