// The click-through-rate program of ps_worker (train.program: ctr): a model
// of hashed embeddings and an MLP (worker/models/ctr.h) trained on
// categorical click data (worker/data/ctr_data.h), generated from a planted
// teacher or read from Criteo TSV files (train.ctr), a field holding one
// value per sample or, for the fields of train.ctr.bags, several whose
// embeddings are summed. The embeddings of every
// field are rows of one hashed table (train.ctr.embedding_table), keyed by
// CtrId(field, value); the MLP's parameters are a dense table
// (train.table). Per step: pull the MLP and the embeddings of the
// minibatch's distinct ids, a forward and backward pass, push the MLP's
// gradient and the summed gradient of each distinct id. Worker 0 (or the
// evaluator, cluster.evaluator) measures the AUC and the log-loss on
// held-out samples (fresh draws of the teacher, or the Criteo test file)
// every train.eval_every steps and at the end; the reported metric is the
// AUC.
#ifndef PS_WORKER_CTR_TRAINING_H_
#define PS_WORKER_CTR_TRAINING_H_

#include <cstdint>

#include "common/metrics_endpoint.h"
#include "common/status.h"
#include "worker/backend.h"
#include "worker/data/ctr_data.h"
#include "worker/evaluation.h"
#include "worker/param_store.h"
#include "worker/progress.h"
#include "worker/train_options.h"

namespace ps {

// The generated data of a job: every worker's samples together
// (samples_per_worker x workers, seed train.seed) with train.ctr's shape.
CtrDataOptions CtrGeneratedOptions(const TrainJob& job);

// REQUIRES: job.train.program is ctr, ValidateTrain(job).ok(); `store` and
// `backend` outlive the call.
StatusOr<TrainSummary> TrainCtr(const TrainJob& job, uint32_t rank, ParamStore* store,
                                Backend* backend, MetricsEndpoint* metrics = nullptr);

// The AUC on the held-out samples of the pulled model (a model of its own:
// the evaluator's); each evaluation also logs the log-loss.
StatusOr<Evaluation> CtrEvaluation(const TrainJob& job, ParamStore* store, Backend* backend);

}  // namespace ps

#endif  // PS_WORKER_CTR_TRAINING_H_
