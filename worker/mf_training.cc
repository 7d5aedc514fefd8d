#include "worker/mf_training.h"

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "common/logging.h"
#include "common/text.h"
#include "worker/batch_balance.h"
#include "worker/models/matrix_factorization.h"
#include "worker/training.h"
#include "worker/training_loop.h"

namespace ps {

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

namespace {

// Worker `rank`'s training ratings: its share, less the held-out ones,
// shuffled once (generated in (user, item) order) so that a minibatch
// mixes users and items.
StatusOr<std::vector<Rating>> TrainingRatings(const TrainJob& job,
                                              const LowRankRatingsOptions& options,
                                              uint32_t rank) {
  PS_ASSIGN_OR_RETURN(LowRankRatingsData share,
                      GenerateLowRankRatings(options, rank, job.cluster.workers));
  std::vector<Rating> training, held;
  SplitRatings(share.ratings, job.train.test_fraction, job.train.seed, &training, &held);
  std::mt19937_64 shuffle(job.train.seed * 1000003 + rank);
  std::shuffle(training.begin(), training.end(), shuffle);
  return training;
}

// The matrix factorization's step: pull the user and item rows the
// minibatch's ratings touch, its loss and the gradients of those rows, push
// them to both tables. Thread-compatible.
class MatrixFactorizationStep final : public TrainingStep {
 public:
  // The user table, the item table and the rank of the factorization.
  struct Tables {
    uint32_t users = 0, items = 0, k = 0;
  };
  // Every pointer must outlive the step; `ratings` are this worker's.
  MatrixFactorizationStep(Tables tables, ParamStore* store, MatrixFactorization* model,
                          const std::vector<Rating>* ratings,
                          const Partitions<std::vector<Rating>>* partitions)
      : tables_(tables),
        store_(store),
        model_(model),
        ratings_(ratings),
        partitions_(partitions) {}

  void TakeMinibatch(int64_t clock, uint32_t samples, const BatchBalancer& balancer) override {
    if (!balancer.enabled()) {
      minibatch_ = std::span<const Rating>(
          ratings_->data() + cursor_.Next(samples, ratings_->size()), samples);
      return;
    }
    gathered_.clear();
    for (const BatchBalancer::Piece& piece : balancer.Pieces(clock, partitions_->sizes)) {
      const std::vector<Rating>& part = *partitions_->by_rank[piece.part];
      gathered_.insert(gathered_.end(), part.begin() + static_cast<ptrdiff_t>(piece.first),
                       part.begin() + static_cast<ptrdiff_t>(piece.first + piece.count));
    }
    minibatch_ = gathered_;
  }

  Status Pull() override {
    return rows_.Pull(store_, tables_.users, tables_.items, tables_.k, minibatch_);
  }

  StatusOr<double> Compute() override {
    user_grad_ = user_grads_.Next();
    item_grad_ = item_grads_.Next();
    user_grad_->resize(rows_.user_factors.size());
    item_grad_->resize(rows_.item_factors.size());
    return model_->LossAndGradient(minibatch_, rows_.users, rows_.user_factors, rows_.items,
                                   rows_.item_factors, 0.0f, *user_grad_, *item_grad_);
  }

  Status Push(const BatchBalancer& balancer) override {
    balancer.Weigh(*user_grad_);
    balancer.Weigh(*item_grad_);
    PS_RETURN_IF_ERROR(store_->Push(tables_.users, rows_.users, SharedFloats::Of(user_grad_)));
    return store_->Push(tables_.items, rows_.items, SharedFloats::Of(item_grad_));
  }

 private:
  const Tables tables_;
  ParamStore* const store_;
  MatrixFactorization* const model_;
  const std::vector<Rating>* const ratings_;
  const Partitions<std::vector<Rating>>* const partitions_;
  std::vector<Rating> gathered_;  // stragglers.balance: the step's ratings
  MinibatchCursor cursor_;
  AlternatingBuffers user_grads_, item_grads_;
  // The step's minibatch, the rows it touches and their gradient buffers.
  std::span<const Rating> minibatch_;
  PulledRows rows_;
  std::shared_ptr<std::vector<float>> user_grad_, item_grad_;
};

}  // namespace

StatusOr<TrainSummary> TrainMatrixFactorization(const TrainJob& job, uint32_t rank,
                                                ParamStore* store, Backend* backend,
    MetricsEndpoint* metrics) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(uint32_t user_table, job.TableId(train.user_table));
  PS_ASSIGN_OR_RETURN(uint32_t item_table, job.TableId(train.item_table));
  const LowRankRatingsOptions options = RatingsDataOptions(job);
  const uint32_t k = options.rank;
  PS_ASSIGN_OR_RETURN(auto model, MatrixFactorization::Create(backend, k));
  PS_ASSIGN_OR_RETURN(std::vector<Rating> ratings, TrainingRatings(job, options, rank));
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
  PS_LOG_INFO("matrix factorization rank {}, {} users x {} items, {} training ratings, "
              "batch {}, {} steps ({})",
              k, options.num_users, options.num_items, ratings.size(), train.batch_size,
              train.iterations, store->Describe());
  // Before the progress starts its clock: with stragglers.balance every
  // worker's partition is made here, which takes a while.
  PS_ASSIGN_OR_RETURN(auto balancer, BatchBalancer::Create(job, rank, store, UINT32_MAX));
  PS_ASSIGN_OR_RETURN(
      Partitions<std::vector<Rating>> partitions,
      MakePartitions(
          *balancer, job, rank, ratings,
          [&](uint32_t r) { return TrainingRatings(job, options, r); },
          [](const std::vector<Rating>& part) { return part.size(); }));
  PS_ASSIGN_OR_RETURN(auto progress,
                      TrainingProgress::Create(job, rank, store, "test RMSE", ratings.size(),
                                               metrics, backend));
  MatrixFactorizationStep step({user_table, item_table, k}, store, model.get(), &ratings,
                               &partitions);
  return RunTrainingSteps({.job = &job, .rank = rank, .store = store, .balancer = balancer.get(),
                           .progress = progress.get(), .evaluate = evaluation.evaluate},
                          &step);
}

}  // namespace ps
