#include "worker/batch_balance.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/logging.h"

namespace ps {
namespace {

// The weight of a window's rates in their running mean.
constexpr double kSmoothing = 0.3;
// The least shortening of the clock, as a fraction, that changes the split.
constexpr double kMinGain = 0.15;

}  // namespace

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
  std::unique_ptr<BatchBalancer> balancer(
      new BatchBalancer(job, rank, store, max_batch, table, enabled));
  if (enabled) {
    // A worker started again finds the rate its earlier life pushed in its
    // row: its next push replaces it (a change from it), not adds to it.
    std::vector<float> own(1);
    PS_RETURN_IF_ERROR(store->Pull(table, balancer->row_, own.data()));
    balancer->pushed_rate_ = own[0];
  }
  return balancer;
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
      split_(workers_, std::max<uint32_t>(job.train.batch_size, 1)),
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

std::vector<BatchBalancer::Piece> BatchBalancer::PiecesOf(std::span<const uint32_t> split,
                                                          uint32_t rank, uint32_t nominal_batch,
                                                          int64_t clock,
                                                          std::span<const uint64_t> part_sizes) {
  const uint64_t nominal = std::max<uint32_t>(nominal_batch, 1);
  const auto workers = static_cast<uint32_t>(split.size());
  uint64_t begin = 0;  // this worker's first position among the job's samples
  for (uint32_t j = 0; j < rank; ++j) begin += split[j];
  const uint64_t end = begin + split[rank];
  std::vector<Piece> pieces;
  for (uint64_t p = begin; p < end;) {
    const auto part = static_cast<uint32_t>(std::min<uint64_t>(p / nominal, workers - 1));
    const uint64_t within = p - part * nominal;
    // The last partition takes what the others leave (a split that read
    // other rates under ssp may overrun the job's samples a little).
    const uint64_t room = part + 1 < workers ? nominal - within : end - p;
    const uint64_t size = part < part_sizes.size() ? part_sizes[part] : nominal;
    const uint64_t steps = std::max<uint64_t>(size / nominal, 1);
    const uint64_t cursor = (static_cast<uint64_t>(clock) % steps) * nominal;
    const uint64_t count = std::min(room, end - p);
    // Past the partition's end (an overrun of the last one): wrap to its start.
    const uint64_t first = (cursor + within) % std::max<uint64_t>(size, 1);
    const uint64_t fits = std::min<uint64_t>(count, size - first);
    pieces.push_back({part, first, static_cast<uint32_t>(fits)});
    if (fits < count) pieces.push_back({part, 0, static_cast<uint32_t>(count - fits)});
    p += count;
  }
  return pieces;
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
  // follows their running mean (kSmoothing of the new window), the same on
  // every worker that read the same tables.
  bool measured = true;
  for (size_t i = 0; i < rates_.size(); ++i) {
    const double r = rates_[i];
    if (!(r > 0) || !std::isfinite(r)) measured = false;
    smoothed_[i] = smoothed_[i] > 0 ? (1 - kSmoothing) * smoothed_[i] + kSmoothing * r : r;
  }
  if (!measured) return Status::Ok();  // a worker has not measured yet
  const std::vector<double>& rates = smoothed_;
  const std::vector<uint32_t> split = Split(rates, total_, cap_);
  if (split.empty()) return Status::Ok();  // a worker has not measured yet
  // A new split only when it shortens the clock (the slowest worker's
  // batch / rate) by more than kMinGain: under bsp the clock is its
  // slowest worker's, and a split that follows noise between equal workers
  // makes one of them slower.
  double now_s = 0, then_s = 0;
  for (size_t i = 0; i < split.size(); ++i) {
    now_s = std::max(now_s, split_[i] / rates[i]);
    then_s = std::max(then_s, split[i] / rates[i]);
  }
  ++decisions_;
  if (then_s > (1 - kMinGain) * now_s) return Status::Ok();
  const uint32_t before = batch_;
  split_ = split;
  batch_ = split[rank_];
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
