// The sparse logistic regression program of ps_worker (train.program:
// sparse_logistic_regression) on generated click-like data
// (worker/data/generators.h): train.table holds one weight per feature
// (dim 1, rows = features, about 10^6), and each step pulls only the rows
// its minibatch touches and pushes their gradient. Regularization (L2,
// optional L1) is the table's optimizer.l2 / l1, applied by the shards.
// Worker 0 (or the evaluator, cluster.evaluator) evaluates the mean
// log-loss on train.test_samples held-out samples (fresh draws from the
// same generating weights). The model's
// forward and backward passes run on the compute backend.
#ifndef PS_WORKER_SPARSE_LOGREG_TRAINING_H_
#define PS_WORKER_SPARSE_LOGREG_TRAINING_H_

#include <cstdint>

#include "common/metrics_endpoint.h"
#include "common/status.h"
#include "worker/backend.h"
#include "worker/data/generators.h"
#include "worker/evaluation.h"
#include "worker/param_store.h"
#include "worker/progress.h"
#include "worker/train_options.h"

namespace ps {

// The click data of a job: every worker's samples together
// (samples_per_worker x workers, seed train.seed) over the table's rows.
SparseClickOptions ClickDataOptions(const TrainJob& job);

// REQUIRES: job.train.program is sparse_logistic_regression,
// ValidateTrain(job).ok(); `store` and `backend` outlive the call.
StatusOr<TrainSummary> TrainSparseLogisticRegression(const TrainJob& job, uint32_t rank,
                                                     ParamStore* store, Backend* backend,
    MetricsEndpoint* metrics = nullptr);

// The mean log-loss on the held-out samples of the pulled rows they touch.
StatusOr<Evaluation> SparseLogisticRegressionEvaluation(const TrainJob& job, ParamStore* store,
                                                        Backend* backend);

}  // namespace ps

#endif  // PS_WORKER_SPARSE_LOGREG_TRAINING_H_
