// A small, real training program for the whole path: minibatch SGD on
// linear regression y = x.w* + noise, with generated data and a known w*.
// Each worker generates its own partition; the weights live in a dense table
// on the servers (sgd update rule), pulled before and pushed after each step.
// train.program linear_regression (worker/programs.h); it drives the Client
// itself, to overlap each push with the next pull, so it needs the servers.
#ifndef PS_WORKER_LINEAR_REGRESSION_H_
#define PS_WORKER_LINEAR_REGRESSION_H_

#include <cstdint>
#include <vector>

#include "client/client.h"
#include "common/status.h"
#include "common/yaml_reader.h"
#include "worker/train_options.h"
#include "worker/training.h"

namespace ps {

struct RegressionData {
  uint64_t samples = 0;
  uint64_t features = 0;
  std::vector<float> x;       // samples x features, row-major
  std::vector<float> y;       // samples
  std::vector<float> w_true;  // features
};

// The generating weights depend on train.seed only; a worker's samples on
// (train.seed, rank), so partitions are disjoint and reproducible.
RegressionData GenerateRegressionData(const TrainOptions& train, uint32_t rank);

// 0.5 * mean((x.w - y)^2) over samples [begin, end); if grad is not null,
// writes the gradient of that loss with respect to w (features floats).
double RegressionLoss(const RegressionData& data, const float* w, uint64_t begin, uint64_t end,
                      float* grad);

struct TrainResult {
  double first_loss = 0;    // minibatch loss of the first step
  double final_loss = 0;    // loss over the worker's whole partition, final weights
  double weight_error = 0;  // |w - w*| / |w*| for the final weights
};

// Runs train.iterations steps: pull the weights, compute the minibatch
// gradient, push it and advance the worker's clock (the push and the clock
// overlap the next pull; under bsp or ssp the pull waits for slow workers). Logs the loss every
// train.log_every steps. Fails on any client error (with the server named).
// REQUIRES: ValidateTrain(job).ok(); `client` outlives the call.
StatusOr<TrainResult> TrainLinearRegression(const TrainJob& job, uint32_t rank, Client* client);

// The program's run (worker/programs.h; its keys and checks are in
// worker/program_specs.cc): TrainLinearRegression, then 0 when the weights found the generating ones
// (relative error under 5%), else 1.
int RunLinearRegression(const ProgramContext& context);

}  // namespace ps

#endif  // PS_WORKER_LINEAR_REGRESSION_H_
