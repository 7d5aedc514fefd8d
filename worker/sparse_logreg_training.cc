#include "worker/sparse_logreg_training.h"

#include <memory>
#include <vector>

#include "common/logging.h"
#include "common/text.h"
#include "worker/batch_balance.h"
#include "worker/models/sparse_logreg.h"
#include "worker/training.h"
#include "worker/training_loop.h"

namespace ps {

SparseClickOptions ClickDataOptions(const TrainJob& job) {
  SparseClickOptions options;
  const uint32_t table = job.TableId(job.train.table).value();
  options.num_features = job.tables[table].rows;
  options.num_samples = job.train.samples_per_worker * job.cluster.workers;
  options.seed = job.train.seed;
  return options;
}

StatusOr<Evaluation> SparseLogisticRegressionEvaluation(const TrainJob& job, ParamStore* store,
                                                        Backend* backend) {
  PS_ASSIGN_OR_RETURN(uint32_t table, job.TableId(job.train.table));
  // The held-out samples, the rows they touch and the model, shared by
  // the evaluation's copies.
  struct HeldOut {
    SparseClickData test;
    std::vector<uint64_t> ids;
    std::vector<float> weights;
    std::unique_ptr<SparseLogReg> model;
  };
  auto held = std::make_shared<HeldOut>();
  PS_ASSIGN_OR_RETURN(held->model, SparseLogReg::Create(backend));
  SparseClickOptions options = ClickDataOptions(job);
  options.first_sample = options.num_samples;  // fresh draws, same weights
  options.num_samples = job.train.test_samples;
  PS_ASSIGN_OR_RETURN(held->test, GenerateSparseClicks(options, 0, 1));
  BatchFeatures(held->test, 0, held->test.num_samples(), &held->ids);
  held->weights.resize(held->ids.size());
  for (size_t i = 0; i < held->ids.size(); ++i) {
    held->weights[i] = held->test.true_weights[held->ids[i]];
  }
  PS_ASSIGN_OR_RETURN(float best, held->model->LogLoss(held->test, held->ids, held->weights));
  PS_LOG_INFO("{} held-out samples; their log-loss at the generating weights is {:.4f} (no "
              "model does better on average)",
              held->test.num_samples(), best);
  Evaluation evaluation;
  evaluation.metric_name = "test log-loss";
  evaluation.higher_is_better = false;
  evaluation.evaluate = [held, store, table]() -> StatusOr<double> {
    PS_RETURN_IF_ERROR(store->Pull(table, held->ids, held->weights.data()));
    PS_ASSIGN_OR_RETURN(float loss, held->model->LogLoss(held->test, held->ids, held->weights));
    return loss;
  };
  return evaluation;
}

namespace {

// The sparse logistic regression's step: pull the weights of the features
// the minibatch touches (only those travel), its loss and gradient, push
// the gradient of those rows. Thread-compatible.
class SparseLogRegStep final : public TrainingStep {
 public:
  // Every pointer must outlive the step; `data` is this worker's partition.
  SparseLogRegStep(uint32_t table, ParamStore* store, SparseLogReg* model,
                   const SparseClickData* data, const Partitions<SparseClickData>* partitions)
      : table_(table), store_(store), model_(model), batch_(data, partitions, SparseClickData()) {}

  void TakeMinibatch(int64_t clock, uint32_t samples, const BatchBalancer& balancer) override {
    samples_ = samples;
    batch_.Take(clock, samples, balancer);
  }

  Status Pull() override {
    BatchFeatures(batch_.data(), batch_.first(), samples_, &ids_);
    weights_.resize(ids_.size());
    return store_->Pull(table_, ids_, weights_.data());
  }

  StatusOr<double> Compute() override {
    grads_ = gradients_.Next();
    grads_->resize(ids_.size());
    PS_ASSIGN_OR_RETURN(
        float loss,
        model_->LossAndGradient(batch_.data(), batch_.first(), samples_, ids_, weights_, *grads_));
    return loss;
  }

  Status Push(const BatchBalancer& balancer) override {
    balancer.Weigh(*grads_);
    return store_->Push(table_, ids_, SharedFloats::Of(grads_));
  }

 private:
  const uint32_t table_;
  ParamStore* const store_;
  SparseLogReg* const model_;
  MinibatchSamples<SparseClickData> batch_;
  AlternatingBuffers gradients_;
  // The step's minibatch (samples_ of batch_), its features and their
  // weights, and its gradient buffer.
  uint32_t samples_ = 0;
  std::vector<uint64_t> ids_;
  std::vector<float> weights_;
  std::shared_ptr<std::vector<float>> grads_;
};

}  // namespace

StatusOr<TrainSummary> TrainSparseLogisticRegression(const TrainJob& job, uint32_t rank,
                                                     ParamStore* store, Backend* backend,
    MetricsEndpoint* metrics) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(uint32_t table, job.TableId(train.table));
  const SparseClickOptions options = ClickDataOptions(job);
  PS_ASSIGN_OR_RETURN(SparseClickData data,
                      GenerateSparseClicks(options, rank, job.cluster.workers));
  PS_ASSIGN_OR_RETURN(auto model, SparseLogReg::Create(backend));
  Evaluation evaluation;
  if (EvaluatesBetweenSteps(job, rank)) {
    PS_ASSIGN_OR_RETURN(evaluation, SparseLogisticRegressionEvaluation(job, store, backend));
  }
  PS_LOG_INFO("sparse logistic regression, {} features, {} training samples, batch {}, "
              "{} steps ({})",
              options.num_features, data.num_samples(), train.batch_size, train.iterations,
              store->Describe());
  // Before the progress starts its clock: with stragglers.balance every
  // worker's partition is made here, which takes a while.
  PS_ASSIGN_OR_RETURN(auto balancer, BatchBalancer::Create(job, rank, store, UINT32_MAX));
  PS_ASSIGN_OR_RETURN(
      Partitions<SparseClickData> partitions,
      MakePartitions(
          *balancer, job, rank, data,
          [&](uint32_t r) { return GenerateSparseClicks(options, r, job.cluster.workers); },
          [](const SparseClickData& part) { return part.num_samples(); }));
  PS_ASSIGN_OR_RETURN(auto progress, TrainingProgress::Create(job, rank, store, "test log-loss",
                                                              data.num_samples(), metrics, backend));
  SparseLogRegStep step(table, store, model.get(), &data, &partitions);
  return RunTrainingSteps({.job = &job, .rank = rank, .store = store, .balancer = balancer.get(),
                           .progress = progress.get(), .evaluate = evaluation.evaluate},
                          &step);
}

}  // namespace ps
