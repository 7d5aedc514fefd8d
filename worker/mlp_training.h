// The MLP training program of ps_worker (train.program: mlp): each worker
// trains on its partition of Fashion-MNIST; the parameters are one dense
// table (the MLP's flat layout). Per step: pull the parameters (under ssp
// the cache may serve them), a minibatch forward and backward pass on the
// compute backend, push the gradient, end the step. Worker 0 (or the
// evaluator, cluster.evaluator) measures test accuracy every
// train.eval_every steps and at the end.
#ifndef PS_WORKER_MLP_TRAINING_H_
#define PS_WORKER_MLP_TRAINING_H_

#include <cstdint>

#include "common/metrics_endpoint.h"
#include "common/status.h"
#include "common/yaml_reader.h"
#include "worker/backend.h"
#include "worker/param_store.h"
#include "worker/progress.h"
#include "worker/evaluation.h"
#include "worker/train_options.h"

namespace ps {

// REQUIRES: job.train.program is mlp, ValidateTrain(job).ok(); `store`
// and `backend` outlive the call.
StatusOr<TrainSummary> TrainMlp(const TrainJob& job, uint32_t rank, ParamStore* store,
                                Backend* backend,
    MetricsEndpoint* metrics = nullptr);

// The accuracy on the Fashion-MNIST test set of the pulled parameters (a
// model of its own: the evaluator's).
StatusOr<Evaluation> MlpEvaluation(const TrainJob& job, ParamStore* store, Backend* backend);

}  // namespace ps

#endif  // PS_WORKER_MLP_TRAINING_H_
