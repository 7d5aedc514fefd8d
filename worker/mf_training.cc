#include "worker/mf_training.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "common/logging.h"
#include "common/text.h"
#include "worker/batch_balance.h"
#include "worker/models/matrix_factorization.h"
#include "worker/straggler.h"
#include "worker/training.h"

namespace ps {

Status CheckMatrixFactorization(const TrainJob& job) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(const TableOptions* users, TrainTable(job, "user_table", train.user_table));
  PS_ASSIGN_OR_RETURN(const TableOptions* items, TrainTable(job, "item_table", train.item_table));
  if (users == items) {
    return TrainOptionError(job, "item_table", "the same table as train.user_table",
                            "two different tables for user and item factors");
  }
  if (users->dim != items->dim) {
    return TrainOptionError(job, "item_table",
                            "table " + Quote(items->name) + " has dim " +
                                std::to_string(items->dim) + " but user table " +
                                Quote(users->name) + " has dim " + std::to_string(users->dim),
                            "the same dim (the factorization's rank) for both tables");
  }
  if (users->rows < job.cluster.workers) {
    return TrainOptionError(job, "user_table",
                            "table " + Quote(users->name) + " has " + std::to_string(users->rows) +
                                " rows for " + std::to_string(job.cluster.workers) + " workers",
                            "at least one user per worker");
  }
  if (!(train.observe_probability > 0.0 && train.observe_probability <= 1.0)) {
    return TrainOptionError(job, "observe_probability",
                            "got " + DoubleText(train.observe_probability),
                            "a probability in (0, 1]");
  }
  if (!(train.test_fraction >= 0.0 && train.test_fraction < 1.0)) {
    return TrainOptionError(job, "test_fraction", "got " + DoubleText(train.test_fraction),
                            "a fraction in [0, 1)");
  }
  return Status::Ok();
}

LowRankRatingsOptions RatingsDataOptions(const TrainJob& job) {
  const TableOptions& users = job.tables[job.TableId(job.train.user_table).value()];
  const TableOptions& items = job.tables[job.TableId(job.train.item_table).value()];
  LowRankRatingsOptions options;
  options.num_users = users.rows;
  options.num_items = items.rows;
  options.rank = users.dim;
  options.observe_probability = job.train.observe_probability;
  options.noise_stddev = job.train.noise;
  options.seed = job.train.seed;
  return options;
}

namespace {

// The rows `ratings` touch, pulled from both tables.
struct PulledRows {
  std::vector<uint64_t> users, items;
  std::vector<float> user_factors, item_factors;

  Status Pull(ParamStore* store, uint32_t user_table, uint32_t item_table, uint32_t k,
              std::span<const Rating> ratings) {
    BatchRows(ratings, &users, &items);
    user_factors.resize(users.size() * k);
    item_factors.resize(items.size() * k);
    const RowsToPull pulls[] = {{user_table, users, user_factors.data()},
                                {item_table, items, item_factors.data()}};
    return store->PullMany(pulls);
  }
};

}  // namespace

StatusOr<Evaluation> MatrixFactorizationEvaluation(const TrainJob& job, ParamStore* store,
                                                   Backend* backend) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(uint32_t user_table, job.TableId(train.user_table));
  PS_ASSIGN_OR_RETURN(uint32_t item_table, job.TableId(train.item_table));
  const LowRankRatingsOptions options = RatingsDataOptions(job);
  const uint32_t k = options.rank;
  // The held-out ratings of every user, the rows they touch and the
  // model, shared by the evaluation's copies.
  struct HeldOut {
    std::vector<Rating> test;
    PulledRows rows;
    std::unique_ptr<MatrixFactorization> model;
  };
  auto held = std::make_shared<HeldOut>();
  PS_ASSIGN_OR_RETURN(held->model, MatrixFactorization::Create(backend, k));
  PS_ASSIGN_OR_RETURN(LowRankRatingsData all, GenerateLowRankRatings(options, 0, 1));
  std::vector<Rating> training;
  SplitRatings(all.ratings, train.test_fraction, train.seed, &training, &held->test);
  if (held->test.empty()) {
    PS_LOG_WARN("no held-out ratings (train.test_fraction {}): the test RMSE is measured on the "
                "training ratings", train.test_fraction);
    held->test = std::move(training);
  }
  Evaluation evaluation;
  evaluation.metric_name = "test RMSE";
  evaluation.higher_is_better = false;
  evaluation.evaluate = [held, store, user_table, item_table, k]() -> StatusOr<double> {
    PulledRows& r = held->rows;
    PS_RETURN_IF_ERROR(r.Pull(store, user_table, item_table, k, held->test));
    return held->model->Rmse(held->test, r.users, r.user_factors, r.items, r.item_factors);
  };
  return evaluation;
}

StatusOr<TrainSummary> TrainMatrixFactorization(const TrainJob& job, uint32_t rank,
                                                ParamStore* store, Backend* backend,
    MetricsEndpoint* metrics) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(uint32_t user_table, job.TableId(train.user_table));
  PS_ASSIGN_OR_RETURN(uint32_t item_table, job.TableId(train.item_table));
  const LowRankRatingsOptions options = RatingsDataOptions(job);
  const uint32_t k = options.rank;
  PS_ASSIGN_OR_RETURN(auto model, MatrixFactorization::Create(backend, k));
  // Worker r's training ratings: its share, less the held-out ones,
  // shuffled once (generated in (user, item) order) so that a minibatch
  // mixes users and items.
  const auto training_ratings = [&](uint32_t r) -> StatusOr<std::vector<Rating>> {
    PS_ASSIGN_OR_RETURN(LowRankRatingsData share,
                        GenerateLowRankRatings(options, r, job.cluster.workers));
    std::vector<Rating> training, held;
    SplitRatings(share.ratings, train.test_fraction, train.seed, &training, &held);
    std::mt19937_64 shuffle(train.seed * 1000003 + r);
    std::shuffle(training.begin(), training.end(), shuffle);
    return training;
  };
  PS_ASSIGN_OR_RETURN(std::vector<Rating> ratings, training_ratings(rank));
  if (ratings.size() < train.batch_size) {
    return InvalidArgumentError(
        "worker " + std::to_string(rank) + " has " + std::to_string(ratings.size()) +
        " training ratings, fewer than train.batch_size (" + std::to_string(train.batch_size) +
        "); raise train.observe_probability or the user table's rows, or lower batch_size");
  }

  // Worker 0 evaluates on the held-out ratings of every user (unless the
  // evaluator does).
  Evaluation evaluation;
  if (EvaluatesBetweenSteps(job, rank)) {
    PS_ASSIGN_OR_RETURN(evaluation, MatrixFactorizationEvaluation(job, store, backend));
  }
  const uint32_t batch = train.batch_size;
  PS_LOG_INFO("matrix factorization rank {}, {} users x {} items, {} training ratings, "
              "batch {}, {} steps ({})",
              k, options.num_users, options.num_items, ratings.size(), batch,
              train.iterations, store->Describe());
  // Before the progress starts its clock: with stragglers.balance every
  // worker's partition is made here, which takes a while.
  PS_ASSIGN_OR_RETURN(auto balancer, BatchBalancer::Create(job, rank, store, UINT32_MAX));
  // stragglers.balance: every worker's training ratings, each step's
  // gathered from them into `gathered` (BatchBalancer::Pieces).
  std::vector<std::vector<Rating>> others(balancer->enabled() ? job.cluster.workers : 0);
  std::vector<const std::vector<Rating>*> parts;  // by rank; this worker's is `ratings`
  std::vector<uint64_t> part_sizes;
  std::vector<Rating> gathered;
  for (uint32_t r = 0; r < others.size(); ++r) {
    if (r != rank) {
      PS_ASSIGN_OR_RETURN(others[r], training_ratings(r));
    }
    parts.push_back(r == rank ? &ratings : &others[r]);
    part_sizes.push_back(parts.back()->size());
  }
  PS_ASSIGN_OR_RETURN(auto progress,
                      TrainingProgress::Create(job, rank, store, "test RMSE", ratings.size(),
                                               metrics, backend));
  const std::function<StatusOr<double>()>& evaluate = evaluation.evaluate;

  PulledRows rows;
  AlternatingBuffers user_grads, item_grads;
  StragglerInjector stragglers(job.stragglers, rank);
  progress->ShowBalance(balancer.get());
  size_t cursor = 0;
  for (int64_t step = store->clock(); step < train.iterations; ++step) {
    const std::shared_ptr<std::vector<float>>& user_grad = user_grads.Next();
    const std::shared_ptr<std::vector<float>>& item_grad = item_grads.Next();
    PS_RETURN_IF_ERROR(balancer->BeginStep(step));
    const uint32_t samples = balancer->batch();
    std::span<const Rating> minibatch;
    if (balancer->enabled()) {
      gathered.clear();
      for (const BatchBalancer::Piece& piece : balancer->Pieces(step, part_sizes)) {
        const std::vector<Rating>& part = *parts[piece.part];
        gathered.insert(gathered.end(), part.begin() + static_cast<ptrdiff_t>(piece.first),
                        part.begin() + static_cast<ptrdiff_t>(piece.first + piece.count));
      }
      minibatch = gathered;
    } else {
      if (cursor + samples > ratings.size()) cursor = 0;
      minibatch = std::span<const Rating>(ratings.data() + cursor, samples);
      cursor += samples;
    }
    PS_RETURN_IF_ERROR(rows.Pull(store, user_table, item_table, k, minibatch));
    // consistency.backup_workers: a worker the job left behind continues
    // at the job's clock, which its pull read.
    if (step = store->CatchUp(step); step >= train.iterations) {
      PS_RETURN_IF_ERROR(progress->StepDone(step, train.iterations, evaluate));
      break;
    }
    const auto compute_start = std::chrono::steady_clock::now();
    user_grad->resize(rows.user_factors.size());
    item_grad->resize(rows.item_factors.size());
    PS_ASSIGN_OR_RETURN(double loss,
                        model->LossAndGradient(minibatch, rows.users, rows.user_factors, rows.items,
                                               rows.item_factors, 0.0f, *user_grad, *item_grad));
    stragglers.HoldBack(std::chrono::steady_clock::now() - compute_start, balancer->share());
    PS_RETURN_IF_ERROR(CheckLossFinite(loss, rank, step));
    progress->AddStep(loss, samples);
    balancer->Weigh(*user_grad);
    balancer->Weigh(*item_grad);
    PS_RETURN_IF_ERROR(store->Push(user_table, rows.users, SharedFloats::Of(user_grad)));
    PS_RETURN_IF_ERROR(store->Push(item_table, rows.items, SharedFloats::Of(item_grad)));
    PS_RETURN_IF_ERROR(balancer->FinishStep(step));
    PS_RETURN_IF_ERROR(store->EndStepAsync());
    PS_RETURN_IF_ERROR(progress->StepDone(step + 1, train.iterations, evaluate));
  }
  PS_RETURN_IF_ERROR(store->Flush());
  return progress->Finish();
}

}  // namespace ps
