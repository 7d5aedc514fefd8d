// The MLP training program of ps_worker (train.program: mlp): each worker
// trains on its partition of Fashion-MNIST; the parameters are one dense
// table on the servers (the MLP's flat layout). Per step: pull the
// parameters (the cache may serve them under ssp), a minibatch forward and
// backward pass on the compute backend, push the gradient, advance the
// clock. Worker 0 measures test accuracy every train.eval_every steps and
// at the end.
#ifndef PS_WORKER_MLP_TRAINING_H_
#define PS_WORKER_MLP_TRAINING_H_

#include <cstdint>

#include "common/options.h"
#include "common/status.h"
#include "worker/backend.h"
#include "worker/client.h"

namespace ps {

struct MlpTrainResult {
  double first_loss = 0;     // minibatch loss of the first step
  double last_loss = 0;      // mean minibatch loss of the last log interval
  double test_accuracy = -1; // worker 0's final test accuracy; -1 elsewhere
};

// REQUIRES: job.train.program == kMlp, job.Validate().ok(); `client` has
// joined; `backend` outlives the call.
StatusOr<MlpTrainResult> TrainMlp(const JobOptions& job, uint32_t rank, Client* client,
                                  Backend* backend);

}  // namespace ps

#endif  // PS_WORKER_MLP_TRAINING_H_
