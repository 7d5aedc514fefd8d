#include "worker/mlp_training.h"

#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "common/logging.h"
#include "worker/data/fashion_mnist.h"
#include "worker/models/mlp.h"
#include "worker/straggler.h"
#include "worker/training.h"

namespace ps {

namespace {

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

StatusOr<MlpTrainResult> TrainMlp(const JobOptions& job, uint32_t rank, Client* client,
                                  Backend* backend) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(uint32_t table, job.TableId(train.table));
  PS_ASSIGN_OR_RETURN(FashionMnistDataset data,
                      LoadFashionMnist(train.data_dir, FashionMnistSplit::kTrain, rank,
                                       job.cluster.workers));
  FashionMnistDataset test;
  if (rank == 0) {
    PS_ASSIGN_OR_RETURN(test, LoadFashionMnist(train.data_dir, FashionMnistSplit::kTest, 0, 1));
  }
  const uint32_t batch = train.batch_size;
  PS_ASSIGN_OR_RETURN(auto model, Mlp::Create(backend, train.layers, std::max<uint32_t>(batch, 1000)));
  PS_LOG_INFO("worker {}: MLP {} layers, {} parameters, {} training samples, batch {}, {} steps",
              rank, train.layers.size(), model->num_parameters(), data.num_samples(), batch,
              train.iterations);

  std::vector<float> params(model->num_parameters());
  auto grads = std::make_shared<std::vector<float>>(model->num_parameters());
  StragglerInjector stragglers(job.stragglers, rank);
  MlpTrainResult result;
  const auto start = std::chrono::steady_clock::now();
  double interval_loss = 0;
  uint32_t interval_steps = 0;
  size_t cursor = 0;
  const int64_t first_step = client->clock();
  for (int64_t step = first_step; step < train.iterations; ++step) {
    PS_ASSIGN_OR_RETURN(Ticket pull, client->PullDense(table, params.data()));
    PS_RETURN_IF_ERROR(client->Wait(pull));
    PS_RETURN_IF_ERROR(model->SetParameters(params));
    if (cursor + batch > data.num_samples()) cursor = 0;
    const auto compute_start = std::chrono::steady_clock::now();
    PS_ASSIGN_OR_RETURN(
        float loss,
        model->LossAndGradient({data.images.data() + cursor * FashionMnistDataset::kPixels,
                                size_t{batch} * FashionMnistDataset::kPixels},
                               {data.labels.data() + cursor, batch}, *grads));
    cursor += batch;
    stragglers.HoldBack(std::chrono::steady_clock::now() - compute_start);
    PS_RETURN_IF_ERROR(CheckLossFinite(loss, rank, step));
    if (step == first_step) result.first_loss = loss;
    interval_loss += loss;
    ++interval_steps;
    // The gradient buffer is pushed zero-copy: wait for the push before the
    // next step writes it again.
    PS_ASSIGN_OR_RETURN(Ticket push, client->PushDense(table, SharedFloats::Of(grads)));
    PS_ASSIGN_OR_RETURN(Ticket clock, client->Clock());
    PS_RETURN_IF_ERROR(client->Wait(push));
    PS_RETURN_IF_ERROR(client->Wait(clock));

    const bool last = step + 1 == train.iterations;
    const bool log = last || (train.log_every != 0 && (step + 1) % train.log_every == 0);
    const bool eval = rank == 0 && (last || (train.eval_every != 0 && (step + 1) % train.eval_every == 0));
    if (log || eval) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double samples_per_s =
          secs > 0 ? static_cast<double>((step + 1 - first_step) * batch) / secs : 0.0;
      result.last_loss = interval_steps > 0 ? interval_loss / interval_steps : loss;
      std::string metric;
      if (eval) {
        PS_ASSIGN_OR_RETURN(double acc, TestAccuracy(model.get(), test, 1000));
        result.test_accuracy = acc;
        metric = fmt::format(" test accuracy {:.4f}", acc);
      }
      PS_LOG_INFO("worker {} step {:5d} epoch {:.2f} loss {:.4f}{} ({:.0f} samples/s)", rank,
                  step + 1,
                  static_cast<double>((step + 1) * batch) / static_cast<double>(data.num_samples()),
                  result.last_loss, metric, samples_per_s);
      interval_loss = 0;
      interval_steps = 0;
    }
  }
  return result;
}

}  // namespace ps
