#include "worker/linear_regression.h"

#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include "common/logging.h"
#include "common/text.h"
#include "worker/straggler.h"
#include "worker/training.h"

namespace ps {
namespace {

// Relative distance to the generating weights below which a run counts as
// converged (the noise floor is far lower: ~noise / sqrt(samples)).
constexpr double kMaxWeightError = 0.05;

}  // namespace

RegressionData GenerateRegressionData(const TrainOptions& train, uint32_t rank) {
  RegressionData d;
  d.samples = train.samples_per_worker;
  d.features = train.features;
  std::mt19937_64 wgen(train.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  d.w_true.resize(d.features);
  for (float& w : d.w_true) w = normal(wgen);
  std::mt19937_64 gen(train.seed * 0x9e3779b97f4a7c15ull + rank + 1);
  d.x.resize(d.samples * d.features);
  d.y.resize(d.samples);
  for (uint64_t i = 0; i < d.samples; ++i) {
    double dot = 0;
    for (uint64_t j = 0; j < d.features; ++j) {
      float v = normal(gen);
      d.x[i * d.features + j] = v;
      dot += double{v} * d.w_true[j];
    }
    d.y[i] = static_cast<float>(dot) + train.noise * normal(gen);
  }
  return d;
}

double RegressionLoss(const RegressionData& d, const float* w, uint64_t begin, uint64_t end,
                      float* grad) {
  if (grad != nullptr) std::fill(grad, grad + d.features, 0.0f);
  double loss = 0;
  const double inv = 1.0 / static_cast<double>(end - begin);
  for (uint64_t i = begin; i < end; ++i) {
    const float* x = &d.x[i * d.features];
    double pred = 0;
    for (uint64_t j = 0; j < d.features; ++j) pred += double{x[j]} * w[j];
    const double r = pred - d.y[i];
    loss += 0.5 * r * r;
    if (grad != nullptr) {
      const auto scale = static_cast<float>(r * inv);
      for (uint64_t j = 0; j < d.features; ++j) grad[j] += scale * x[j];
    }
  }
  return loss * inv;
}

StatusOr<TrainResult> TrainLinearRegression(const TrainJob& job, uint32_t rank, Client* client) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(uint32_t table, job.TableId(train.table));
  const RegressionData data = GenerateRegressionData(train, rank);
  PS_LOG_INFO("{} samples x {} features, batch {}, {} steps", data.samples,
              data.features, train.batch_size, train.iterations);

  std::vector<float> w(data.features);
  // Two gradient buffers: one may still be on its way to the servers while
  // the next step fills the other.
  std::shared_ptr<std::vector<float>> grads[2] = {
      std::make_shared<std::vector<float>>(data.features),
      std::make_shared<std::vector<float>>(data.features)};
  // Per gradient buffer: its push and the CLOCK after it, still in flight.
  std::vector<Ticket> in_flight[2];
  TrainResult result;
  StragglerInjector stragglers(job.stragglers, rank);
  const auto start = std::chrono::steady_clock::now();
  uint64_t cursor = 0;
  // A worker that rejoined a running job resumes at its clock.
  const int64_t first_step = client->clock();
  if (first_step > 0) {
    PS_LOG_INFO("resumes at step {} of {}", first_step, train.iterations);
  }
  bool computed_any = false;
  for (int64_t step = first_step; step < train.iterations; ++step) {
    // Pushes before this pull on the same connection are applied before it
    // is answered, so the pull sees this worker's own last update; the shard
    // answers once the slowest worker is within the job's staleness bound.
    PS_ASSIGN_OR_RETURN(Ticket pull, client->PullDense(table, w.data()));
    PS_RETURN_IF_ERROR(client->Wait(pull));
    // consistency.backup_workers: a worker the job left behind continues
    // at the job's clock, which its pull read.
    if (step = std::max(step, client->CatchUp()); step >= train.iterations) break;

    std::vector<float>& grad = *grads[step % 2];
    for (Ticket t : in_flight[step % 2]) PS_RETURN_IF_ERROR(client->Wait(t));
    in_flight[step % 2].clear();
    if (cursor + train.batch_size > data.samples) cursor = 0;
    const auto compute_start = std::chrono::steady_clock::now();
    const double loss = RegressionLoss(data, w.data(), cursor, cursor + train.batch_size, grad.data());
    cursor += train.batch_size;
    stragglers.HoldBack(std::chrono::steady_clock::now() - compute_start);
    PS_RETURN_IF_ERROR(CheckLossFinite(loss, rank, step));
    // The first step this worker computed: with backup workers its first
    // pull may have moved it past first_step already (CatchUp).
    const bool first = !computed_any;
    computed_any = true;
    if (first) result.first_loss = loss;
    const bool last = step + 1 == train.iterations;
    if (first || last || (train.log_every != 0 && step % train.log_every == 0)) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      PS_LOG_INFO("step {:5d} loss {:.6f} ({:.1f} steps/s)", step, loss,
                  secs > 0 ? static_cast<double>(step + 1 - first_step) / secs : 0.0);
    }
    PS_ASSIGN_OR_RETURN(Ticket push, client->PushDense(table, SharedFloats::Of(grads[step % 2])));
    // The step is done: its clock goes to every shard after its push.
    PS_ASSIGN_OR_RETURN(Ticket clock, client->Clock());
    in_flight[step % 2] = {push, clock};
  }
  for (auto& tickets : in_flight) {
    for (Ticket t : tickets) PS_RETURN_IF_ERROR(client->Wait(t));
  }
  PS_ASSIGN_OR_RETURN(Ticket pull, client->PullDense(table, w.data()));
  PS_RETURN_IF_ERROR(client->Wait(pull));
  result.final_loss = RegressionLoss(data, w.data(), 0, data.samples, nullptr);
  double num = 0, den = 0;
  for (uint64_t j = 0; j < data.features; ++j) {
    num += (w[j] - data.w_true[j]) * (w[j] - data.w_true[j]);
    den += data.w_true[j] * data.w_true[j];
  }
  result.weight_error = std::sqrt(num / den);
  return result;
}

int RunLinearRegression(const ProgramContext& context) {
  auto result = TrainLinearRegression(*context.job, context.rank, context.client);
  if (!result.ok()) {
    PS_LOG_ERROR("training failed: {}", result.status().ToString());
    return 1;
  }
  LeaveJob(context);
  PS_LOG_INFO("done: first loss {:.6f}, final loss {:.6f}, |w - w*|/|w*| = {:.4f}",
              result->first_loss, result->final_loss, result->weight_error);
  // The data has a known answer: the run succeeded when the weights found it.
  if (!(result->weight_error < kMaxWeightError)) {
    PS_LOG_ERROR("the weights did not converge: |w - w*|/|w*| = {:.4f} (needs < {}); raise "
                 "train.iterations or the table's optimizer.lr",
                 result->weight_error, kMaxWeightError);
    return 1;
  }
  return 0;
}

}  // namespace ps
