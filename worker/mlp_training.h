// The MLP training program of ps_worker (train.program: mlp): each worker
// trains on its partition of Fashion-MNIST; the parameters are one dense
// table (the MLP's flat layout). Per step: pull the parameters (under ssp
// the cache may serve them), a minibatch forward and backward pass on the
// compute backend, push the gradient, end the step. Worker 0 measures test
// accuracy every train.eval_every steps and at the end.
#ifndef PS_WORKER_MLP_TRAINING_H_
#define PS_WORKER_MLP_TRAINING_H_

#include <cstdint>

#include "common/options.h"
#include "common/status.h"
#include "worker/backend.h"
#include "worker/param_store.h"
#include "worker/progress.h"

namespace ps {

// REQUIRES: job.train.program == kMlp, job.Validate().ok(); `store` and
// `backend` outlive the call.
StatusOr<TrainSummary> TrainMlp(const JobOptions& job, uint32_t rank, ParamStore* store,
                                Backend* backend);

}  // namespace ps

#endif  // PS_WORKER_MLP_TRAINING_H_
