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
#include "worker/metrics_csv.h"
#include "worker/param_store.h"
#include "worker/train_options.h"

namespace ps {

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
