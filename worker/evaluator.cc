#include "worker/evaluator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "worker/progress.h"
#include "worker/training.h"

namespace ps {
namespace {

using Steady = std::chrono::steady_clock;

double SecondsSince(Steady::time_point t) {
  return std::chrono::duration<double>(Steady::now() - t).count();
}

// What the evaluator serves at metrics.port (ps_evaluator_*).
struct EvaluatorMetrics {
  std::string metric_name;
  uint64_t evaluations = 0;
  int64_t clock = 0;
  double last = std::nan("");
  double evaluating_s = 0;  // pulling and measuring
  double waiting_s = 0;     // for the workers to reach the next clock

  std::string Text(int64_t target) const {
    MetricsWriter out;
    out.Counter("ps_evaluator_evaluations_total", "Evaluations on the held-out data",
                static_cast<double>(evaluations));
    out.Gauge("ps_evaluator_clock", "The job's clock of the last evaluation", clock);
    out.Gauge("ps_evaluator_clock_target", "The job's last clock (train.iterations)", target);
    if (evaluations > 0) {
      out.Family("ps_evaluator_test_metric", "gauge", "The last evaluation on the held-out data");
      out.Sample("ps_evaluator_test_metric", {{"metric", metric_name}}, last);
    }
    out.Counter("ps_evaluator_evaluation_seconds_total",
                "Seconds spent reading the model and measuring it", evaluating_s);
    out.Counter("ps_evaluator_wait_seconds_total",
                "Seconds waited for the workers to reach the clock of the next evaluation",
                waiting_s);
    return out.Take();
  }
};

// The evaluator's rounds: each waits for the workers to reach the next due
// clock, evaluates there and records the value (metrics, log line, CSV
// row), until the job's last clock or until the workers are gone.
// Thread-compatible: the evaluator's one thread runs it.
class EvaluatorRounds {
 public:
  // `context`, `evaluation` and `started` (the process's start) as in
  // RunEvaluator; `csv` null without train.metrics_csv.
  EvaluatorRounds(const ProgramContext& context, const Evaluation& evaluation,
                  std::unique_ptr<MetricsCsv> csv, Steady::time_point started)
      : context_(context),
        job_(*context.job),
        client_(context.client),
        evaluation_(evaluation),
        csv_(std::move(csv)),
        started_(started),
        last_(job_.train.iterations),
        every_(job_.train.eval_every) {
    metrics_.metric_name = evaluation.metric_name;
  }

  // Runs every round and leaves the job; RunEvaluator's exit code.
  int Run() {
    Publish();
    PS_LOG_INFO("{} {}, read as every worker finishes each clock ({} shards)",
                evaluation_.metric_name,
                every_ > 0 ? "every " + std::to_string(every_) + " clocks and at clock " +
                                 std::to_string(last_)
                           : "at clock " + std::to_string(last_) + " (train.eval_every 0)",
                client_->num_shards());
    int64_t next = every_ > 0 ? std::min(every_, last_) : last_;
    // Waits end when the workers reach `next`, or (expired at the shards,
    // which ask again) after the request timeout; the loop ends with the
    // job: at its last clock, or when the shards are gone.
    while (true) {
      if (Status set = client_->SetReadClock(next); !set.ok()) {
        PS_LOG_ERROR("{}", set.ToString());
        return 1;
      }
      std::optional<int64_t> clock;
      if (!EvaluateAt(next, &clock)) return 1;
      if (!clock) continue;  // the workers are not at `next` yet
      if (*clock < next) {
        PS_LOG_WARN("the workers left at clock {}, before clock {}: that was the last "
                    "evaluation",
                    *clock, next);
        break;
      }
      if (*clock >= last_) break;
      next = every_ > 0 ? std::min(last_, (*clock / every_ + 1) * every_) : last_;
    }
    LeaveJob(context_);
    LogDone();
    return 0;
  }

 private:
  // The round at clock `next`: *clock the job's clock it read (below
  // `next` when every worker had left before it), or empty when the
  // workers are not at `next` yet (ask again). False (logged) when the
  // evaluation or its CSV row failed.
  bool EvaluateAt(int64_t next, std::optional<int64_t>* clock) {
    const auto asked = Steady::now();
    const double waited_before = context_.store->staleness_wait_seconds();
    StatusOr<double> value = evaluation_.evaluate();
    // How long its pulls waited at the shards for the workers.
    const double waited = context_.store->staleness_wait_seconds() - waited_before;
    if (!value.ok()) {
      if (value.status().code() == StatusCode::kDeadlineExceeded) {
        PS_LOG_DEBUG("{}", value.status().message());
        metrics_.waiting_s += SecondsSince(asked);
        return true;
      }
      PS_LOG_ERROR("the evaluation at clock {} failed: {}; did the job end before "
                   "clock {}?",
                   next, value.status().ToString(), last_);
      return false;
    }
    *clock = ReadClock();
    const double took = std::max(0.0, SecondsSince(asked) - waited);
    values_.push_back(*value);
    ++metrics_.evaluations;
    metrics_.clock = **clock;
    metrics_.last = *value;
    metrics_.evaluating_s += took;
    metrics_.waiting_s += waited;
    Publish();
    PS_LOG_INFO("clock {} of {}: {} {:.4f} ({:.2f} s; waited {:.2f} s for the "
                "workers)",
                **clock, last_, evaluation_.metric_name, *value, took, waited);
    if (Status appended = AppendRow(**clock, *value); !appended.ok()) {
      PS_LOG_ERROR("{}", appended.ToString());
      return false;
    }
    return true;
  }

  // The clock the last pulls were answered at: the minimum clock their
  // replies carry, >= the one asked for unless every worker had left
  // before it (the final model); a shard not asked this time carried an
  // older one before.
  int64_t ReadClock() const {
    int64_t clock = 0;
    for (uint32_t s = 0; s < client_->num_shards(); ++s) {
      clock = std::max(clock, client_->min_clock(s));
    }
    return clock;
  }

  // The evaluation's row of train.metrics_csv; nothing without one.
  Status AppendRow(int64_t clock, double value) {
    if (csv_ == nullptr) return Status::Ok();
    MetricsCsv::Row row;
    row.time_s = SecondsSince(started_);
    row.clock = clock;
    row.worker = kEvaluatorWorker;
    row.epoch = static_cast<double>(clock) * job_.train.batch_size /
                static_cast<double>(std::max<uint64_t>(job_.train.samples_per_worker, 1));
    row.loss = std::nan("");
    row.metric_name = evaluation_.metric_name;
    row.metric = value;
    return csv_->Append(row);
  }

  void Publish() const {
    if (context_.metrics != nullptr) context_.metrics->Publish(metrics_.Text(last_));
  }

  void LogDone() const {
    const size_t tail = std::min<size_t>(3, values_.size());
    double tail_sum = 0;
    for (size_t i = values_.size() - tail; i < values_.size(); ++i) tail_sum += values_[i];
    PS_LOG_INFO("done: {} evaluations, {} {:.4f} at clock {} (mean of the last {}: "
                "{:.4f}); {:.1f} s evaluating, {:.1f} s waiting for the workers{}",
                values_.size(), evaluation_.metric_name, values_.back(), metrics_.clock, tail,
                tail_sum / static_cast<double>(tail), metrics_.evaluating_s, metrics_.waiting_s,
                csv_ != nullptr ? ", metrics in " + job_.train.metrics_csv : std::string());
  }

  const ProgramContext& context_;
  const TrainJob& job_;
  Client* const client_;
  const Evaluation& evaluation_;
  const std::unique_ptr<MetricsCsv> csv_;
  const Steady::time_point started_;
  const int64_t last_;   // train.iterations
  const int64_t every_;  // train.eval_every
  EvaluatorMetrics metrics_;
  std::vector<double> values_;  // every evaluation, in order
};

}  // namespace

int RunEvaluator(const ProgramContext& context, const TrainProgram& program) {
  const TrainJob& job = *context.job;
  const auto started = Steady::now();
  StatusOr<Evaluation> made = program.evaluation(job, context.store, context.backend);
  if (!made.ok()) {
    PS_LOG_ERROR("cannot make the evaluation of train.program {}: {}", program.name,
                 made.status().ToString());
    return 1;
  }
  std::unique_ptr<MetricsCsv> csv;
  if (!job.train.metrics_csv.empty()) {
    auto opened = MetricsCsv::Open(job.train.metrics_csv);
    if (!opened.ok()) {
      PS_LOG_ERROR("{}", opened.status().ToString());
      return 1;
    }
    csv = std::move(*opened);
  }
  return EvaluatorRounds(context, *made, std::move(csv), started).Run();
}

}  // namespace ps
