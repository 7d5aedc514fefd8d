#include "worker/mlp_training.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/key_range.h"
#include "common/logging.h"
#include "common/text.h"
#include "worker/batch_balance.h"
#include "worker/data/fashion_mnist.h"
#include "worker/models/mlp.h"
#include "worker/training.h"
#include "worker/training_loop.h"

namespace ps {

namespace {

// Test samples per forward pass of an evaluation.
constexpr uint32_t kTestBatch = 1000;

// Test accuracy of the parameters the model holds, in batches.
StatusOr<double> TestAccuracy(Mlp* model, const FashionMnistDataset& test, uint32_t batch) {
  double right = 0;
  const size_t n = test.num_samples();
  for (size_t first = 0; first < n; first += batch) {
    const size_t rows = std::min<size_t>(batch, n - first);
    PS_ASSIGN_OR_RETURN(
        double acc,
        model->Accuracy({test.images.data() + first * FashionMnistDataset::kPixels,
                         rows * FashionMnistDataset::kPixels},
                        {test.labels.data() + first, rows}));
    right += acc * static_cast<double>(rows);
  }
  return right / static_cast<double>(n);
}

// The training images of the MLP's steps.
struct MlpTrainingData {
  FashionMnistDataset own;  // this worker's partition
  // stragglers.balance: the whole split, and where each worker's partition
  // of it starts and how many samples it holds (BatchBalancer::Pieces).
  FashionMnistDataset all;
  std::vector<uint64_t> part_starts, part_sizes;
};

// Loads the whole training split into data->all, for stragglers.balance.
Status LoadEveryPartition(const TrainJob& job, MlpTrainingData* data) {
  PS_ASSIGN_OR_RETURN(data->all,
                      LoadFashionMnist(job.train.data_dir, FashionMnistSplit::kTrain, 0, 1));
  for (uint32_t r = 0; r < job.cluster.workers; ++r) {
    const RowRange part = ShardRows(data->all.num_samples(), job.cluster.workers, r);
    data->part_starts.push_back(part.begin);
    data->part_sizes.push_back(part.size());
  }
  return Status::Ok();
}

// The MLP's step: pull the whole parameter table, a forward and backward
// pass on the minibatch, push the gradient of every parameter.
// Thread-compatible.
class MlpStep final : public TrainingStep {
 public:
  // `max_batch`: the most samples of a step (BatchBalancer::max_batch).
  // `store` and `model` must outlive the step.
  MlpStep(uint32_t table, ParamStore* store, Mlp* model, MlpTrainingData data,
          uint32_t max_batch)
      : table_(table),
        store_(store),
        model_(model),
        data_(std::move(data)),
        params_(model->num_parameters()),
        gradients_(model->num_parameters()) {
    if (data_.all.num_samples() > 0) {
      batch_images_.resize(size_t{max_batch} * FashionMnistDataset::kPixels);
      batch_labels_.resize(max_batch);
    }
  }

  // Page-locks on a GPU what the step copies to and from the device: pulls
  // land where the device copies from, the gradients come back where they
  // are pushed from, and the batches are copied from the training data
  // itself (nothing is pinned on the cpu, where the model computes on this
  // memory in place). Memory that cannot be pinned is logged and used as
  // it is.
  void Pin(Backend* backend) {
    for (std::vector<float>* memory :
         {&params_, gradients_.buffer(0).get(), gradients_.buffer(1).get(), &data_.own.images,
          &data_.all.images, &batch_images_}) {
      StatusOr<std::unique_ptr<PinnedHost>> pin = backend->Pin(memory->data(), memory->size());
      if (!pin.ok()) {
        // Still correct, only slower: the copies of unpinned memory wait.
        PS_LOG_WARN("could not page-lock {} MB of host memory ({}); its copies to and from the "
                    "device will not overlap compute",
                    memory->size() * sizeof(float) >> 20, pin.status().ToString());
        continue;
      }
      pins_.push_back(std::move(pin).value());
    }
  }

  // The parameters of the last pull.
  const std::vector<float>& params() const { return params_; }

  void TakeMinibatch(int64_t clock, uint32_t samples, const BatchBalancer& balancer) override {
    constexpr size_t kPixels = FashionMnistDataset::kPixels;
    samples_ = samples;
    if (!balancer.enabled()) {
      const size_t first = cursor_.Next(samples, data_.own.num_samples());
      images_ = data_.own.images.data() + first * kPixels;
      labels_ = data_.own.labels.data() + first;
      return;
    }
    size_t at = 0;
    for (const BatchBalancer::Piece& piece : balancer.Pieces(clock, data_.part_sizes)) {
      const size_t from = data_.part_starts[piece.part] + piece.first;
      std::copy_n(data_.all.images.data() + from * kPixels, size_t{piece.count} * kPixels,
                  batch_images_.data() + at * kPixels);
      std::copy_n(data_.all.labels.data() + from, piece.count, batch_labels_.data() + at);
      at += piece.count;
    }
    images_ = batch_images_.data();
    labels_ = batch_labels_.data();
  }

  Status Pull() override { return store_->PullDense(table_, params_.data()); }

  StatusOr<double> Compute() override {
    grads_ = gradients_.Next();
    PS_ASSIGN_OR_RETURN(
        float loss,
        model_->TrainStep({images_, size_t{samples_} * FashionMnistDataset::kPixels},
                          {labels_, samples_}, params_, *grads_));
    return loss;
  }

  Status Push(const BatchBalancer& balancer) override {
    balancer.Weigh(*grads_);
    // Pushed zero-copy.
    return store_->PushDense(table_, SharedFloats::Of(grads_));
  }

 private:
  const uint32_t table_;
  ParamStore* const store_;
  Mlp* const model_;
  MlpTrainingData data_;
  // stragglers.balance: the step's samples gathered from data_.all.
  std::vector<float> batch_images_;
  std::vector<int32_t> batch_labels_;
  std::vector<float> params_;
  AlternatingBuffers gradients_;
  std::vector<std::unique_ptr<PinnedHost>> pins_;
  MinibatchCursor cursor_;
  // The step's minibatch and gradient buffer.
  const float* images_ = nullptr;
  const int32_t* labels_ = nullptr;
  uint32_t samples_ = 0;
  std::shared_ptr<std::vector<float>> grads_;
};

}  // namespace

StatusOr<Evaluation> MlpEvaluation(const TrainJob& job, ParamStore* store, Backend* backend) {
  PS_ASSIGN_OR_RETURN(uint32_t table, job.TableId(job.train.table));
  // The test set, a model and its parameters, shared by the evaluation's
  // copies.
  struct HeldOut {
    FashionMnistDataset test;
    std::unique_ptr<Mlp> model;
    std::vector<float> params;
  };
  auto held = std::make_shared<HeldOut>();
  PS_ASSIGN_OR_RETURN(held->test,
                      LoadFashionMnist(job.train.data_dir, FashionMnistSplit::kTest, 0, 1));
  PS_ASSIGN_OR_RETURN(held->model, Mlp::Create(backend, job.train.layers, kTestBatch));
  held->params.resize(held->model->num_parameters());
  Evaluation evaluation;
  evaluation.metric_name = "test accuracy";
  evaluation.evaluate = [held, store, table]() -> StatusOr<double> {
    PS_RETURN_IF_ERROR(store->PullDense(table, held->params.data()));
    PS_RETURN_IF_ERROR(held->model->SetParameters(held->params));
    return TestAccuracy(held->model.get(), held->test, kTestBatch);
  };
  return evaluation;
}

StatusOr<TrainSummary> TrainMlp(const TrainJob& job, uint32_t rank, ParamStore* store,
                                Backend* backend,
    MetricsEndpoint* metrics) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(uint32_t table, job.TableId(train.table));
  MlpTrainingData data;
  PS_ASSIGN_OR_RETURN(data.own, LoadFashionMnist(train.data_dir, FashionMnistSplit::kTrain, rank,
                                                 job.cluster.workers));
  // Worker 0 measures the parameters it pulled for its step (unless the
  // evaluator does, with a model of its own: MlpEvaluation).
  FashionMnistDataset test;
  const bool evaluates = EvaluatesBetweenSteps(job, rank);
  if (evaluates) {
    PS_ASSIGN_OR_RETURN(test, LoadFashionMnist(train.data_dir, FashionMnistSplit::kTest, 0, 1));
  }
  const uint32_t batch = train.batch_size;
  if (data.own.num_samples() < batch) {  // CheckMlp refuses such a job; never read past the data
    return FailedPreconditionError("worker " + std::to_string(rank) + " holds " +
                                   std::to_string(data.own.num_samples()) +
                                   " training samples, fewer than train.batch_size " +
                                   std::to_string(batch));
  }
  PS_ASSIGN_OR_RETURN(auto balancer, BatchBalancer::Create(job, rank, store, UINT32_MAX));
  if (balancer->enabled()) PS_RETURN_IF_ERROR(LoadEveryPartition(job, &data));
  PS_ASSIGN_OR_RETURN(auto model, Mlp::Create(backend, train.layers,
                                              std::max<uint32_t>(balancer->max_batch(), kTestBatch)));
  PS_LOG_INFO("MLP {} layers, {} parameters, {} training samples, batch {}, {} steps ({})",
              train.layers.size(), model->num_parameters(), data.own.num_samples(), batch,
              train.iterations, store->Describe());
  PS_ASSIGN_OR_RETURN(auto progress,
                      TrainingProgress::Create(job, rank, store, "test accuracy",
                                               data.own.num_samples(), metrics, backend));
  MlpStep step(table, store, model.get(), std::move(data), balancer->max_batch());
  step.Pin(backend);
  std::function<StatusOr<double>()> evaluate;
  if (evaluates) {
    evaluate = [&]() -> StatusOr<double> {
      PS_RETURN_IF_ERROR(model->SetParameters(step.params()));
      return TestAccuracy(model.get(), test, kTestBatch);
    };
  }
  return RunTrainingSteps({.job = &job, .rank = rank, .store = store, .balancer = balancer.get(),
                           .progress = progress.get(), .evaluate = std::move(evaluate)},
                          &step);
}

}  // namespace ps
