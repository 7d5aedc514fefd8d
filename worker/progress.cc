#include "worker/progress.h"

#include <algorithm>
#include <limits>

#include "common/logging.h"

namespace ps {

double TrainSummary::TailMean(size_t n) const {
  if (metrics.empty() || n == 0) return std::numeric_limits<double>::quiet_NaN();
  const size_t k = std::min(n, metrics.size());
  double sum = 0;
  for (size_t i = metrics.size() - k; i < metrics.size(); ++i) sum += metrics[i];
  return sum / static_cast<double>(k);
}

StatusOr<std::unique_ptr<TrainingProgress>> TrainingProgress::Create(
    const TrainJob& job, uint32_t rank, const ParamStore* store, std::string metric_name,
    uint64_t samples_per_epoch, MetricsEndpoint* metrics, const Backend* backend) {
  std::unique_ptr<MetricsCsv> csv;
  if (!job.train.metrics_csv.empty()) {
    PS_ASSIGN_OR_RETURN(csv, MetricsCsv::Open(job.train.metrics_csv));
  }
  return std::unique_ptr<TrainingProgress>(new TrainingProgress(job, rank, store,
                                                                std::move(metric_name),
                                                                samples_per_epoch, std::move(csv),
                                                                metrics, backend));
}

TrainingProgress::TrainingProgress(const TrainJob& job, uint32_t rank, const ParamStore* store,
                                   std::string metric_name, uint64_t samples_per_epoch,
                                   std::unique_ptr<MetricsCsv> csv, MetricsEndpoint* metrics,
                                   const Backend* backend)
    : rank_(rank),
      log_every_(job.train.log_every),
      eval_every_(job.train.eval_every),
      backups_(job.consistency.backup_workers > 0),
      store_(store),
      samples_per_epoch_(std::max<uint64_t>(samples_per_epoch, 1)),
      csv_(std::move(csv)),
      start_(SteadyClock::now()),
      metrics_(metrics),
      metrics_interval_(job.metrics.interval_ms),
      step_start_(start_),
      published_(start_),
      backend_(backend) {
  summary_.metric_name = std::move(metric_name);
  // What the store and backend did before training (loading data, the
  // first model) is not a step's.
  left_out_ = SpentSoFar();
  logged_ = Now();
}

TrainingProgress::Spent TrainingProgress::Spent::operator-(const Spent& o) const {
  return {pull_s - o.pull_s, push_s - o.push_s,
          {device.upload_s - o.device.upload_s, device.compute_s - o.device.compute_s,
           device.download_s - o.device.download_s}};
}

TrainingProgress::Spent TrainingProgress::Spent::operator+(const Spent& o) const {
  return {pull_s + o.pull_s, push_s + o.push_s,
          {device.upload_s + o.device.upload_s, device.compute_s + o.device.compute_s,
           device.download_s + o.device.download_s}};
}

TrainingProgress::Spent TrainingProgress::SpentSoFar() const {
  const ParamStore::Times& store = store_->times();
  return {store.pull_s, store.push_s, backend_ != nullptr ? backend_->times() : DeviceTimes()};
}

TrainingProgress::Totals TrainingProgress::Now() const {
  return {steps_, TrainingSeconds(), SpentSoFar() - left_out_};
}

StepBreakdown TrainingProgress::Between(const Totals& from, const Totals& to) {
  StepBreakdown b;
  if (to.steps <= from.steps) return b;
  const double per_step_ms = 1000.0 / static_cast<double>(to.steps - from.steps);
  const Spent d = to.spent - from.spent;
  b.step_ms = (to.step_s - from.step_s) * per_step_ms;
  b.pull_ms = d.pull_s * per_step_ms;
  b.push_ms = d.push_s * per_step_ms;
  b.h2d_ms = d.device.upload_s * per_step_ms;
  b.compute_ms = d.device.compute_s * per_step_ms;
  b.d2h_ms = d.device.download_s * per_step_ms;
  return b;
}

double TrainingProgress::TrainingSeconds() const {
  return std::chrono::duration<double>(SteadyClock::now() - start_ - evaluating_).count();
}

void TrainingProgress::AddStep(double loss, uint64_t samples) {
  if (first_step_) {
    summary_.first_loss = loss;
    first_step_ = false;
  }
  interval_loss_ += loss;
  ++interval_steps_;
  ++steps_;
  samples_ += samples;
  last_loss_ = loss;
}

void TrainingProgress::UpdateMetrics(int64_t done, int64_t total) {
  if (metrics_ == nullptr) return;
  // A step's time is from the end of the one before, evaluations excluded.
  const SteadyClock::time_point now = SteadyClock::now();
  step_seconds_.Observe(
      std::chrono::duration<double>(now - step_start_ - (evaluating_ - step_evaluating_)).count());
  step_start_ = now;
  step_evaluating_ = evaluating_;
  if (done < total && now - published_ < metrics_interval_) return;
  const double secs = std::chrono::duration<double>(now - published_).count();
  if (secs > 0) {
    samples_per_s_now_ = static_cast<double>(samples_ - published_samples_) / secs;
  }
  published_ = now;
  published_samples_ = samples_;
  metrics_->Publish(MetricsText(done, total));
}

std::string TrainingProgress::MetricsText(int64_t done, int64_t total) const {
  MetricsWriter out({{"worker", std::to_string(rank_)}});
  out.Counter("ps_worker_steps_total", "Training steps done", static_cast<double>(done));
  out.Gauge("ps_worker_steps_target", "Steps this worker is to do (train.iterations)",
            static_cast<double>(total));
  out.Counter("ps_worker_samples_total", "Training samples processed",
              static_cast<double>(samples_));
  out.Gauge("ps_worker_samples_per_second",
            "Samples per second since the previous publication (metrics.interval_ms)",
            samples_per_s_now_);
  out.Family("ps_worker_step_duration_seconds", "histogram",
             "Wall time of each training step: pull, compute, push and clock (evaluations "
             "excluded)");
  step_seconds_.Write(out, "ps_worker_step_duration_seconds");
  out.Counter("ps_worker_staleness_wait_seconds_total",
              "Seconds pulls were held back by the staleness bound, waiting for slower workers",
              store_->staleness_wait_seconds());
  out.Counter("ps_worker_evaluation_seconds_total", "Seconds spent evaluating on the test set",
              std::chrono::duration<double>(evaluating_).count());
  const Spent totals = Now().spent;
  out.Family("ps_worker_step_phase_seconds_total", "counter",
             "Seconds of training steps by phase: waiting in pulls and pushes (wall time), and "
             "the compute backend's busy time copying to the device (h2d), computing and "
             "copying back (d2h), which a GPU overlaps");
  for (const auto& [phase, seconds] :
       {std::pair<const char*, double>{"pull", totals.pull_s},
        {"h2d", totals.device.upload_s},
        {"compute", totals.device.compute_s},
        {"d2h", totals.device.download_s},
        {"push", totals.push_s}}) {
    out.Sample("ps_worker_step_phase_seconds_total", {{"phase", phase}}, seconds);
  }
  out.Gauge("ps_worker_loss", "Minibatch loss of the last step", last_loss_);
  out.Gauge("ps_worker_epoch", "Epochs of this worker's data processed",
            static_cast<double>(samples_) / static_cast<double>(samples_per_epoch_));
  if (!summary_.metrics.empty()) {
    out.Family("ps_worker_test_metric", "gauge", "The last evaluation on the test set");
    out.Sample("ps_worker_test_metric", {{"metric", summary_.metric_name}},
               summary_.metrics.back());
  }
  if (balancer_ != nullptr && balancer_->enabled()) {
    out.Gauge("ps_worker_batch_size",
              "Samples of this worker's current step (stragglers.balance)", balancer_->batch());
    out.Counter("ps_worker_balance_decisions_total",
                "Windows whose rates were read and split (stragglers.balance)",
                static_cast<double>(balancer_->decisions()));
  }
  store_->WriteMetrics(out);
  return out.Take();
}

TrainSummary TrainingProgress::Finish() {
  if (metrics_ != nullptr) metrics_->Publish(MetricsText(done_, total_));
  return summary_;
}

Status TrainingProgress::StepDone(int64_t done, int64_t total,
                                  const std::function<StatusOr<double>()>& evaluate) {
  done_ = done;
  total_ = total;
  const bool last = done >= total;
  const bool log = last || (log_every_ != 0 && done % log_every_ == 0);
  const bool eval = rank_ == 0 && evaluate &&
                    (last || (eval_every_ != 0 && done % eval_every_ == 0));
  if (!eval) UpdateMetrics(done, total);
  if (!log && !eval) return Status::Ok();

  std::optional<double> metric;
  if (eval) {
    const auto eval_start = SteadyClock::now();
    const Spent before = SpentSoFar();
    PS_ASSIGN_OR_RETURN(double value, evaluate());
    evaluating_ += SteadyClock::now() - eval_start;
    // What the evaluation pulled and computed is not the steps'.
    left_out_ = left_out_ + (SpentSoFar() - before);
    metric = value;
    summary_.metrics.push_back(value);
    UpdateMetrics(done, total);  // after it: the step's time leaves it out, the value is in
  }
  const double secs = TrainingSeconds();
  summary_.samples_per_s = secs > 0 ? static_cast<double>(samples_) / secs : 0.0;
  summary_.staleness_wait_s = store_->staleness_wait_seconds();
  if (interval_steps_ > 0) summary_.last_loss = interval_loss_ / static_cast<double>(interval_steps_);
  const double epoch = static_cast<double>(samples_) / static_cast<double>(samples_per_epoch_);
  const double wall = std::chrono::duration<double>(SteadyClock::now() - start_).count();
  std::string late;
  if (backups_) {
    const ParamStore::Lateness l = store_->lateness();
    late = fmt::format(" | {} pushes late, {} clocks skipped", l.late_pushes, l.clocks_skipped);
  }
  const Totals now = Now();
  const StepBreakdown interval = Between(logged_, now);
  summary_.breakdown = Between(Totals(), now);
  logged_ = now;
  PS_LOG_INFO("clock {:6d} epoch {:6.2f} loss {:.4f}{} | {:.0f} samples/s, waited "
              "{:.2f} s on staleness ({:.0f}%){} | {}",
              done, epoch, summary_.last_loss,
              metric ? fmt::format(" {} {:.4f}", summary_.metric_name, *metric) : std::string(),
              summary_.samples_per_s, summary_.staleness_wait_s,
              wall > 0 ? 100.0 * summary_.staleness_wait_s / wall : 0.0, late,
              interval.ToString());
  if (csv_ != nullptr) {
    MetricsCsv::Row row;
    row.time_s = wall;
    row.clock = done;
    row.worker = rank_;
    row.epoch = epoch;
    row.loss = summary_.last_loss;
    row.metric_name = summary_.metric_name;
    row.metric = metric;
    row.samples_per_s = summary_.samples_per_s;
    row.staleness_wait_s = summary_.staleness_wait_s;
    row.breakdown = interval;
    PS_RETURN_IF_ERROR(csv_->Append(row));
  }
  interval_loss_ = 0;
  interval_steps_ = 0;
  return Status::Ok();
}

}  // namespace ps
