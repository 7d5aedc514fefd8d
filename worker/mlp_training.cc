#include "worker/mlp_training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/key_range.h"
#include "common/logging.h"
#include "common/text.h"
#include "worker/batch_balance.h"
#include "worker/data/fashion_mnist.h"
#include "worker/models/mlp.h"
#include "worker/straggler.h"
#include "worker/training.h"

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

Status ReadMlpKeys(const YamlReader& r, const YamlMap& section, TrainOptions* train) {
  constexpr std::string_view kLayers = "a list of layer sizes, e.g. [784, 100, 10]";
  PS_ASSIGN_OR_RETURN(const YamlValue* value, r.Required(section, "layers", kLayers));
  PS_ASSIGN_OR_RETURN(std::vector<YamlValue> items, r.ReadList(*value, kLayers));
  train->layers.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    PS_RETURN_IF_ERROR(r.ReadUnsigned(items[i], &train->layers[i]));
  }
  return Status::Ok();
}

Status CheckMlp(const TrainJob& job) {
  PS_ASSIGN_OR_RETURN(const TableOptions* table, WeightTable(job));
  const std::vector<uint32_t>& layers = job.train.layers;
  if (layers.size() < 2 || layers.front() != 784 || layers.back() != 10 ||
      std::find(layers.begin(), layers.end(), 0u) != layers.end()) {
    return TrainOptionError(job, "layers", "got " + std::to_string(layers.size()) + " sizes",
                            "layer sizes from 784 (Fashion-MNIST pixels) to 10 (classes), each "
                            ">= 1, e.g. [784, 100, 10]");
  }
  uint64_t params = 0;
  for (size_t l = 1; l < layers.size(); ++l) {
    params += uint64_t{layers[l - 1]} * layers[l] + layers[l];
  }
  if (params != table->rows) {
    return TrainOptionError(job, "table",
                            "table " + Quote(table->name) + " has " +
                                std::to_string(table->rows) + " rows but the MLP has " +
                                std::to_string(params) + " parameters",
                            "rows equal to the parameter count (" + std::to_string(params) + ")");
  }
  // Every worker trains on its own block of the training split
  // (LoadFashionMnist); the smallest block must hold a minibatch.
  const uint64_t smallest = kFashionMnistTrainSamples / job.cluster.workers;
  if (job.train.batch_size < 1 || job.train.batch_size > smallest) {
    const std::string split = std::to_string(kFashionMnistTrainSamples) +
                              " Fashion-MNIST training samples split over " +
                              std::to_string(job.cluster.workers) + " workers";
    if (smallest == 0) {
      return InvalidOption(job.source, "cluster.workers",
                           "got " + std::to_string(job.cluster.workers) + ": " + split +
                               " leaves workers with no samples",
                           "at most " + std::to_string(kFashionMnistTrainSamples / std::max<uint32_t>(job.train.batch_size, 1)) +
                               " workers (a minibatch of train.batch_size each)");
    }
    return TrainOptionError(job, "batch_size", "got " + std::to_string(job.train.batch_size),
                            "1 <= batch_size <= " + std::to_string(smallest) +
                                ", the smallest worker's samples (" + split +
                                "); lower batch_size or cluster.workers");
  }
  return Status::Ok();
}

StatusOr<TrainSummary> TrainMlp(const TrainJob& job, uint32_t rank, ParamStore* store,
                                Backend* backend,
    MetricsEndpoint* metrics) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(uint32_t table, job.TableId(train.table));
  PS_ASSIGN_OR_RETURN(FashionMnistDataset data,
                      LoadFashionMnist(train.data_dir, FashionMnistSplit::kTrain, rank,
                                       job.cluster.workers));
  // Worker 0 measures the parameters it pulled for its step (unless the
  // evaluator does, with a model of its own: MlpEvaluation).
  FashionMnistDataset test;
  const bool evaluates = EvaluatesBetweenSteps(job, rank);
  if (evaluates) {
    PS_ASSIGN_OR_RETURN(test, LoadFashionMnist(train.data_dir, FashionMnistSplit::kTest, 0, 1));
  }
  const uint32_t batch = train.batch_size;
  if (data.num_samples() < batch) {  // CheckMlp refuses such a job; never read past the data
    return FailedPreconditionError("worker " + std::to_string(rank) + " holds " +
                                   std::to_string(data.num_samples()) +
                                   " training samples, fewer than train.batch_size " +
                                   std::to_string(batch));
  }
  PS_ASSIGN_OR_RETURN(auto balancer, BatchBalancer::Create(job, rank, store, UINT32_MAX));
  // stragglers.balance: every partition (the whole split), each step's
  // samples gathered from them (BatchBalancer::Pieces).
  FashionMnistDataset all;
  std::vector<uint64_t> part_sizes, part_starts;
  std::vector<float> batch_images;
  std::vector<int32_t> batch_labels;
  if (balancer->enabled()) {
    PS_ASSIGN_OR_RETURN(all, LoadFashionMnist(train.data_dir, FashionMnistSplit::kTrain, 0, 1));
    for (uint32_t r = 0; r < job.cluster.workers; ++r) {
      const RowRange part = ShardRows(all.num_samples(), job.cluster.workers, r);
      part_starts.push_back(part.begin);
      part_sizes.push_back(part.size());
    }
    batch_images.resize(size_t{balancer->max_batch()} * FashionMnistDataset::kPixels);
    batch_labels.resize(balancer->max_batch());
  }
  PS_ASSIGN_OR_RETURN(auto model, Mlp::Create(backend, train.layers,
                                              std::max<uint32_t>(balancer->max_batch(), kTestBatch)));
  PS_LOG_INFO("MLP {} layers, {} parameters, {} training samples, batch {}, {} steps ({})",
              train.layers.size(), model->num_parameters(), data.num_samples(), batch,
              train.iterations, store->Describe());
  PS_ASSIGN_OR_RETURN(auto progress, TrainingProgress::Create(job, rank, store, "test accuracy",
                                                              data.num_samples(), metrics, backend));

  std::vector<float> params(model->num_parameters());
  AlternatingBuffers gradients(model->num_parameters());
  // Page-locked on a GPU: pulls land where the device copies from, the
  // gradients come back where they are pushed from, and the batches are
  // copied from the training data itself (nothing is pinned on the cpu,
  // where the model computes on this memory in place).
  std::vector<std::unique_ptr<PinnedHost>> pins;
  for (std::vector<float>* memory :
       {&params, gradients.buffer(0).get(), gradients.buffer(1).get(), &data.images,
        &all.images, &batch_images}) {
    StatusOr<std::unique_ptr<PinnedHost>> pin = backend->Pin(memory->data(), memory->size());
    if (!pin.ok()) {
      // Still correct, only slower: the copies of unpinned memory wait.
      PS_LOG_WARN("could not page-lock {} MB of host memory ({}); its copies to and from the "
                  "device will not overlap compute",
                  memory->size() * sizeof(float) >> 20, pin.status().ToString());
      continue;
    }
    pins.push_back(std::move(pin).value());
  }
  StragglerInjector stragglers(job.stragglers, rank);
  std::function<StatusOr<double>()> evaluate;
  if (evaluates) {
    evaluate = [&]() -> StatusOr<double> {
      PS_RETURN_IF_ERROR(model->SetParameters(params));
      return TestAccuracy(model.get(), test, kTestBatch);
    };
  }
  progress->ShowBalance(balancer.get());
  size_t cursor = 0;
  for (int64_t step = store->clock(); step < train.iterations; ++step) {
    const std::shared_ptr<std::vector<float>>& grads = gradients.Next();
    PS_RETURN_IF_ERROR(balancer->BeginStep(step));
    const uint32_t samples = balancer->batch();
    // Sees this worker's own last push: the shards handle its requests in order.
    PS_RETURN_IF_ERROR(store->PullDense(table, params.data()));
    // consistency.backup_workers: a worker the job left behind continues
    // at the job's clock, which its pull read.
    if (step = store->CatchUp(step); step >= train.iterations) {
      PS_RETURN_IF_ERROR(progress->StepDone(step, train.iterations, evaluate));
      break;
    }
    const float* images = nullptr;
    const int32_t* labels = nullptr;
    if (balancer->enabled()) {
      constexpr size_t kPixels = FashionMnistDataset::kPixels;
      size_t at = 0;
      for (const BatchBalancer::Piece& piece : balancer->Pieces(step, part_sizes)) {
        const size_t from = part_starts[piece.part] + piece.first;
        std::copy_n(all.images.data() + from * kPixels, size_t{piece.count} * kPixels,
                    batch_images.data() + at * kPixels);
        std::copy_n(all.labels.data() + from, piece.count, batch_labels.data() + at);
        at += piece.count;
      }
      images = batch_images.data();
      labels = batch_labels.data();
    } else {
      if (cursor + samples > data.num_samples()) cursor = 0;
      images = data.images.data() + cursor * FashionMnistDataset::kPixels;
      labels = data.labels.data() + cursor;
      cursor += samples;
    }
    const auto compute_start = std::chrono::steady_clock::now();
    PS_ASSIGN_OR_RETURN(
        float loss, model->TrainStep({images, size_t{samples} * FashionMnistDataset::kPixels},
                                     {labels, samples}, params, *grads));
    stragglers.HoldBack(std::chrono::steady_clock::now() - compute_start, balancer->share());
    PS_RETURN_IF_ERROR(CheckLossFinite(loss, rank, step));
    progress->AddStep(loss, samples);
    balancer->Weigh(*grads);
    // Pushed zero-copy; the push completes during the next step, which
    // fills the other buffer.
    PS_RETURN_IF_ERROR(store->PushDense(table, SharedFloats::Of(grads)));
    PS_RETURN_IF_ERROR(balancer->FinishStep(step));
    PS_RETURN_IF_ERROR(store->EndStepAsync());
    PS_RETURN_IF_ERROR(progress->StepDone(step + 1, train.iterations, evaluate));
  }
  PS_RETURN_IF_ERROR(store->Flush());
  return progress->Finish();
}

}  // namespace ps
