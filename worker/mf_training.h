// The matrix factorization program of ps_worker (train.program:
// matrix_factorization) on generated low-rank ratings
// (worker/data/generators.h): train.user_table and train.item_table hold
// the factor rows (dim = the rank k). Each worker trains on the ratings of
// its block of users; each step pulls only the user and item rows its
// minibatch touches and pushes their gradient (regularization, if any, is
// the tables' optimizer.l2). A fraction train.test_fraction of the ratings
// is held out; worker 0 (or the evaluator, cluster.evaluator) evaluates
// the RMSE on all of them. The model's
// forward and backward passes run on the compute backend.
#ifndef PS_WORKER_MF_TRAINING_H_
#define PS_WORKER_MF_TRAINING_H_

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

// The ratings of a job: users and items from the tables' rows, rank from
// their dim, train.observe_probability, train.noise, train.seed.
LowRankRatingsOptions RatingsDataOptions(const TrainJob& job);

// REQUIRES: job.train.program is matrix_factorization,
// ValidateTrain(job).ok(); `store` and `backend` outlive the call.
StatusOr<TrainSummary> TrainMatrixFactorization(const TrainJob& job, uint32_t rank,
                                                ParamStore* store, Backend* backend,
    MetricsEndpoint* metrics = nullptr);

// The RMSE on the held-out ratings of the pulled rows they touch.
StatusOr<Evaluation> MatrixFactorizationEvaluation(const TrainJob& job, ParamStore* store,
                                                   Backend* backend);

}  // namespace ps

#endif  // PS_WORKER_MF_TRAINING_H_
