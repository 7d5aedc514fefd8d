#include "worker/evaluator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "worker/progress.h"

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

}  // namespace

int RunEvaluator(const ProgramContext& context, const TrainProgram& program) {
  const TrainJob& job = *context.job;
  Client* client = context.client;
  const auto started = Steady::now();
  StatusOr<Evaluation> made = program.evaluation(job, context.store, context.backend);
  if (!made.ok()) {
    PS_LOG_ERROR("cannot make the evaluation of train.program {}: {}", program.name,
                 made.status().ToString());
    return 1;
  }
  const Evaluation& evaluation = *made;
  std::unique_ptr<MetricsCsv> csv;
  if (!job.train.metrics_csv.empty()) {
    auto opened = MetricsCsv::Open(job.train.metrics_csv);
    if (!opened.ok()) {
      PS_LOG_ERROR("{}", opened.status().ToString());
      return 1;
    }
    csv = std::move(*opened);
  }
  const int64_t last = job.train.iterations;
  const int64_t every = job.train.eval_every;
  EvaluatorMetrics metrics{.metric_name = evaluation.metric_name};
  const auto publish = [&]() {
    if (context.metrics != nullptr) context.metrics->Publish(metrics.Text(last));
  };
  publish();
  PS_LOG_INFO("{} {}, read as every worker finishes each clock ({} shards)",
              evaluation.metric_name,
              every > 0 ? "every " + std::to_string(every) + " clocks and at clock " +
                              std::to_string(last)
                        : "at clock " + std::to_string(last) + " (train.eval_every 0)",
              client->num_shards());

  std::vector<double> values;
  int64_t next = every > 0 ? std::min(every, last) : last;
  // Waits end when the workers reach `next`, or (expired at the shards,
  // which ask again) after the request timeout; the loop ends with the
  // job: at its last clock, or when the shards are gone.
  while (true) {
    if (Status set = client->SetReadClock(next); !set.ok()) {
      PS_LOG_ERROR("{}", set.ToString());
      return 1;
    }
    const auto asked = Steady::now();
    const double waited_before = context.store->staleness_wait_seconds();
    StatusOr<double> value = evaluation.evaluate();
    // How long its pulls waited at the shards for the workers.
    const double waited = context.store->staleness_wait_seconds() - waited_before;
    if (!value.ok()) {
      if (value.status().code() == StatusCode::kDeadlineExceeded) {
        // The workers are not at `next` yet.
        PS_LOG_DEBUG("{}", value.status().message());
        metrics.waiting_s += SecondsSince(asked);
        continue;
      }
      PS_LOG_ERROR("the evaluation at clock {} failed: {}; did the job end before "
                   "clock {}?",
                   next, value.status().ToString(), last);
      return 1;
    }
    // The pulls were answered at the minimum clock their replies carry:
    // >= next, unless every worker had left before it (the final model);
    // a shard not asked this time carried an older one before.
    int64_t clock = 0;
    for (uint32_t s = 0; s < client->num_shards(); ++s) {
      clock = std::max(clock, client->min_clock(s));
    }
    const bool ended = clock < next;
    const double took = std::max(0.0, SecondsSince(asked) - waited);
    values.push_back(*value);
    ++metrics.evaluations;
    metrics.clock = clock;
    metrics.last = *value;
    metrics.evaluating_s += took;
    metrics.waiting_s += waited;
    publish();
    PS_LOG_INFO("clock {} of {}: {} {:.4f} ({:.2f} s; waited {:.2f} s for the "
                "workers)",
                clock, last, evaluation.metric_name, *value, took, waited);
    if (csv != nullptr) {
      MetricsCsv::Row row;
      row.time_s = SecondsSince(started);
      row.clock = clock;
      row.worker = kEvaluatorWorker;
      row.epoch = static_cast<double>(clock) * job.train.batch_size /
                  static_cast<double>(std::max<uint64_t>(job.train.samples_per_worker, 1));
      row.loss = std::nan("");
      row.metric_name = evaluation.metric_name;
      row.metric = *value;
      if (Status appended = csv->Append(row); !appended.ok()) {
        PS_LOG_ERROR("{}", appended.ToString());
        return 1;
      }
    }
    if (ended) {
      PS_LOG_WARN("the workers left at clock {}, before clock {}: that was the last "
                  "evaluation",
                  clock, next);
      break;
    }
    if (clock >= last) break;
    next = every > 0 ? std::min(last, (clock / every + 1) * every) : last;
  }
  if (Status left = client->Leave(); !left.ok()) {
    PS_LOG_WARN("could not say goodbye to every shard: {}", left.ToString());
  }
  const size_t tail = std::min<size_t>(3, values.size());
  double tail_sum = 0;
  for (size_t i = values.size() - tail; i < values.size(); ++i) tail_sum += values[i];
  PS_LOG_INFO("done: {} evaluations, {} {:.4f} at clock {} (mean of the last {}: "
              "{:.4f}); {:.1f} s evaluating, {:.1f} s waiting for the workers{}",
              values.size(), evaluation.metric_name, values.back(), metrics.clock, tail,
              tail_sum / static_cast<double>(tail), metrics.evaluating_s, metrics.waiting_s,
              csv != nullptr ? ", metrics in " + job.train.metrics_csv : std::string());
  return 0;
}

}  // namespace ps
