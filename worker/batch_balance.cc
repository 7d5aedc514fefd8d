#include "worker/batch_balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/logging.h"

namespace ps {

StatusOr<std::unique_ptr<BatchBalancer>> BatchBalancer::Create(const TrainJob& job,
                                                               uint32_t rank, ParamStore* store,
                                                               uint32_t max_batch) {
  const bool enabled = job.stragglers.balance && job.cluster.workers >= 2;
  uint32_t table = 0;
  if (enabled) {
    StatusOr<uint32_t> id = job.TableId(kBalanceTableName);
    if (!id.ok()) {
      return FailedPreconditionError(
          "stragglers.balance: the job has no table " + std::string(kBalanceTableName) +
          " (the job loader adds it; a job built in code must add it too)");
    }
    table = *id;
  }
  return std::unique_ptr<BatchBalancer>(
      new BatchBalancer(job, rank, store, max_batch, table, enabled));
}

BatchBalancer::BatchBalancer(const TrainJob& job, uint32_t rank, ParamStore* store,
                             uint32_t max_batch, uint32_t table, bool enabled)
    : rank_(rank),
      workers_(std::max<uint32_t>(job.cluster.workers, 1)),
      window_(std::max<uint32_t>(job.stragglers.balance_window, 1)),
      nominal_(static_cast<double>(std::max<uint32_t>(job.train.batch_size, 1))),
      total_(workers_ * std::max<uint32_t>(job.train.batch_size, 1)),
      cap_(std::max<uint32_t>(1, std::min(max_batch, total_ - (workers_ - 1)))),
      store_(store),
      table_(table),
      enabled_(enabled),
      batch_(std::max<uint32_t>(job.train.batch_size, 1)),
      rates_(workers_, 0.0f),
      smoothed_(workers_, 0.0),
      row_{rank} {}

std::vector<uint32_t> BatchBalancer::Split(std::span<const double> rates, uint32_t total,
                                           uint32_t cap) {
  const size_t n = rates.size();
  double sum = 0;
  for (double r : rates) {
    if (!(r > 0) || !std::isfinite(r)) return {};
    sum += r;
  }
  // Each worker's exact part, then the floor of it (at least 1, at most
  // cap); what is left goes one sample at a time to the largest remainders.
  std::vector<double> exact(n);
  std::vector<uint32_t> out(n);
  uint64_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    exact[i] = static_cast<double>(total) * rates[i] / sum;
    out[i] = std::clamp<uint32_t>(static_cast<uint32_t>(std::floor(exact[i])), 1, cap);
    given += out[i];
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return exact[a] - out[a] > exact[b] - out[b];
  });
  for (size_t k = 0; given < total && k < 4 * n; ++k) {
    const size_t i = order[k % n];
    if (out[i] < cap) {
      ++out[i];
      ++given;
    }
  }
  // Floors raised to 1 may overshoot: take back from the largest parts.
  while (given > total) {
    const size_t i = static_cast<size_t>(std::max_element(out.begin(), out.end()) - out.begin());
    if (out[i] <= 1) break;
    --out[i];
    --given;
  }
  return out;
}

void BatchBalancer::Weigh(std::vector<float>& gradient) const {
  if (!enabled_ || batch_ == static_cast<uint32_t>(nominal_)) return;
  const auto w = static_cast<float>(share());
  for (float& g : gradient) g *= w;
}

Status BatchBalancer::BeginStep(int64_t clock) {
  if (!enabled_) return Status::Ok();
  step_start_ = Steady::now();
  wait_at_start_ = store_->staleness_wait_seconds();
  if (clock == 0 || clock % window_ != 0) return Status::Ok();
  // Sees every worker's rate of the window that just ended under bsp (this
  // pull waits for them), up to the staleness bound's lag under ssp.
  PS_RETURN_IF_ERROR(store_->PullDense(table_, rates_.data()));
  // The wait of this pull is the others' pace, not this worker's work.
  wait_at_start_ = store_->staleness_wait_seconds();
  step_start_ = Steady::now();
  // Each window's rates are noisy (a shared host, a pause): the split
  // follows their running mean, half the new window and half the past, the
  // same on every worker that read the same tables.
  bool measured = true;
  for (size_t i = 0; i < rates_.size(); ++i) {
    const double r = rates_[i];
    if (!(r > 0) || !std::isfinite(r)) measured = false;
    smoothed_[i] = smoothed_[i] > 0 ? 0.5 * smoothed_[i] + 0.5 * r : r;
  }
  if (!measured) return Status::Ok();  // a worker has not measured yet
  const std::vector<double>& rates = smoothed_;
  const std::vector<uint32_t> split = Split(rates, total_, cap_);
  if (split.empty()) return Status::Ok();  // a worker has not measured yet
  const uint32_t before = batch_;
  batch_ = split[rank_];
  ++decisions_;
  // Logged when the batch moves by more than a tenth, and the first time.
  if (decisions_ == 1 || std::abs(static_cast<double>(batch_) - before) > 0.1 * before) {
    const auto slowest = std::min_element(rates.begin(), rates.end()) - rates.begin();
    PS_LOG_INFO("balance at clock {}: batch {} -> {} of the job's {} per clock (share {:.2f}); "
                "slowest worker {} at {:.0f}% of the mean rate",
                clock, before, batch_, total_, share(), slowest,
                100.0 * rates[static_cast<size_t>(slowest)] * static_cast<double>(workers_) /
                    std::accumulate(rates.begin(), rates.end(), 0.0));
  }
  return Status::Ok();
}

Status BatchBalancer::FinishStep(int64_t clock) {
  if (!enabled_) return Status::Ok();
  const double wait = store_->staleness_wait_seconds() - wait_at_start_;
  const double work =
      std::chrono::duration<double>(Steady::now() - step_start_).count() - std::max(0.0, wait);
  window_work_s_ += std::max(work, 0.0);
  window_samples_ += batch_;
  if ((clock + 1) % window_ != 0) return Status::Ok();
  const float rate = window_work_s_ > 0
                         ? static_cast<float>(static_cast<double>(window_samples_) / window_work_s_)
                         : pushed_rate_;
  window_work_s_ = 0;
  window_samples_ = 0;
  if (!(rate > 0) || !std::isfinite(rate)) return Status::Ok();
  // A buffer per push: the store keeps it until the step after next.
  auto delta = std::make_shared<std::vector<float>>(1, rate - pushed_rate_);
  pushed_rate_ = rate;
  return store_->Push(table_, row_, SharedFloats::Of(delta));
}

}  // namespace ps
