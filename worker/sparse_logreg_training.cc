#include "worker/sparse_logreg_training.h"

#include <chrono>
#include <memory>
#include <vector>

#include "common/logging.h"
#include "common/text.h"
#include "worker/batch_balance.h"
#include "worker/models/sparse_logreg.h"
#include "worker/straggler.h"
#include "worker/training.h"

namespace ps {

SparseClickOptions ClickDataOptions(const TrainJob& job) {
  SparseClickOptions options;
  const uint32_t table = job.TableId(job.train.table).value();
  options.num_features = job.tables[table].rows;
  options.num_samples = job.train.samples_per_worker * job.cluster.workers;
  options.seed = job.train.seed;
  return options;
}

Status CheckSparseLogisticRegression(const TrainJob& job) {
  PS_ASSIGN_OR_RETURN(const TableOptions* table, WeightTable(job));
  const TrainOptions& train = job.train;
  if (train.features != 0 && train.features != table->rows) {
    return TrainOptionError(job, "features",
                            "got " + std::to_string(train.features) + " but table " +
                                Quote(table->name) + " has " + std::to_string(table->rows) +
                                " rows",
                            "features equal to the rows of train.table (or omit it)");
  }
  // A sample holds up to 50 distinct features, at most half of them all.
  if (table->rows < 100) {
    return TrainOptionError(job, "table",
                            "table " + Quote(table->name) + " has " +
                                std::to_string(table->rows) + " rows",
                            "at least 100 features (rows) for the click-like data");
  }
  if (train.test_samples < 1) {
    return TrainOptionError(job, "test_samples", "got 0", "held-out samples >= 1");
  }
  return CheckSamplesPerWorker(job);
}

StatusOr<Evaluation> SparseLogisticRegressionEvaluation(const TrainJob& job, ParamStore* store,
                                                        Backend* backend) {
  PS_ASSIGN_OR_RETURN(uint32_t table, job.TableId(job.train.table));
  // The held-out samples, the rows they touch and the model, shared by
  // the evaluation's copies.
  struct HeldOut {
    SparseClickData test;
    std::vector<uint64_t> ids;
    std::vector<float> weights;
    std::unique_ptr<SparseLogReg> model;
  };
  auto held = std::make_shared<HeldOut>();
  PS_ASSIGN_OR_RETURN(held->model, SparseLogReg::Create(backend));
  SparseClickOptions options = ClickDataOptions(job);
  options.first_sample = options.num_samples;  // fresh draws, same weights
  options.num_samples = job.train.test_samples;
  PS_ASSIGN_OR_RETURN(held->test, GenerateSparseClicks(options, 0, 1));
  BatchFeatures(held->test, 0, held->test.num_samples(), &held->ids);
  held->weights.resize(held->ids.size());
  for (size_t i = 0; i < held->ids.size(); ++i) {
    held->weights[i] = held->test.true_weights[held->ids[i]];
  }
  PS_ASSIGN_OR_RETURN(float best, held->model->LogLoss(held->test, held->ids, held->weights));
  PS_LOG_INFO("{} held-out samples; their log-loss at the generating weights is {:.4f} (no "
              "model does better on average)",
              held->test.num_samples(), best);
  Evaluation evaluation;
  evaluation.metric_name = "test log-loss";
  evaluation.higher_is_better = false;
  evaluation.evaluate = [held, store, table]() -> StatusOr<double> {
    PS_RETURN_IF_ERROR(store->Pull(table, held->ids, held->weights.data()));
    PS_ASSIGN_OR_RETURN(float loss, held->model->LogLoss(held->test, held->ids, held->weights));
    return loss;
  };
  return evaluation;
}

StatusOr<TrainSummary> TrainSparseLogisticRegression(const TrainJob& job, uint32_t rank,
                                                     ParamStore* store, Backend* backend,
    MetricsEndpoint* metrics) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(uint32_t table, job.TableId(train.table));
  const SparseClickOptions options = ClickDataOptions(job);
  PS_ASSIGN_OR_RETURN(SparseClickData data,
                      GenerateSparseClicks(options, rank, job.cluster.workers));
  PS_ASSIGN_OR_RETURN(auto model, SparseLogReg::Create(backend));
  Evaluation evaluation;
  if (EvaluatesBetweenSteps(job, rank)) {
    PS_ASSIGN_OR_RETURN(evaluation, SparseLogisticRegressionEvaluation(job, store, backend));
  }
  const uint32_t batch = train.batch_size;
  PS_LOG_INFO("sparse logistic regression, {} features, {} training samples, batch {}, "
              "{} steps ({})",
              options.num_features, data.num_samples(), batch, train.iterations,
              store->Describe());
  // Before the progress starts its clock: with stragglers.balance every
  // worker's partition is made here, which takes a while.
  PS_ASSIGN_OR_RETURN(auto balancer, BatchBalancer::Create(job, rank, store, UINT32_MAX));
  // stragglers.balance: every worker's partition, each step's samples
  // gathered from them into `gathered` (BatchBalancer::Pieces).
  std::vector<SparseClickData> others(balancer->enabled() ? job.cluster.workers : 0);
  std::vector<const SparseClickData*> parts;  // by rank; this worker's is `data`
  std::vector<uint64_t> part_sizes;
  SparseClickData gathered;
  for (uint32_t r = 0; r < others.size(); ++r) {
    if (r != rank) {
      PS_ASSIGN_OR_RETURN(others[r], GenerateSparseClicks(options, r, job.cluster.workers));
    }
    parts.push_back(r == rank ? &data : &others[r]);
    part_sizes.push_back(parts.back()->num_samples());
  }
  PS_ASSIGN_OR_RETURN(auto progress, TrainingProgress::Create(job, rank, store, "test log-loss",
                                                              data.num_samples(), metrics, backend));
  const std::function<StatusOr<double>()>& evaluate = evaluation.evaluate;

  std::vector<uint64_t> ids;
  std::vector<float> weights;
  AlternatingBuffers gradients;
  StragglerInjector stragglers(job.stragglers, rank);
  progress->ShowBalance(balancer.get());
  size_t cursor = 0;
  for (int64_t step = store->clock(); step < train.iterations; ++step) {
    const std::shared_ptr<std::vector<float>>& grads = gradients.Next();
    PS_RETURN_IF_ERROR(balancer->BeginStep(step));
    const uint32_t samples = balancer->batch();
    const SparseClickData* source = &data;
    if (balancer->enabled()) {
      gathered.row_offsets.assign(1, 0);
      gathered.feature_ids.clear();
      gathered.labels.clear();
      for (const BatchBalancer::Piece& piece : balancer->Pieces(step, part_sizes)) {
        const SparseClickData& part = *parts[piece.part];
        for (uint64_t i = piece.first; i < piece.first + piece.count; ++i) {
          gathered.feature_ids.insert(
              gathered.feature_ids.end(),
              part.feature_ids.begin() + static_cast<ptrdiff_t>(part.row_offsets[i]),
              part.feature_ids.begin() + static_cast<ptrdiff_t>(part.row_offsets[i + 1]));
          gathered.row_offsets.push_back(gathered.feature_ids.size());
          gathered.labels.push_back(part.labels[i]);
        }
      }
      source = &gathered;
      cursor = 0;
    } else if (cursor + samples > data.num_samples()) {
      cursor = 0;
    }
    // Only the rows this minibatch touches travel.
    BatchFeatures(*source, cursor, samples, &ids);
    weights.resize(ids.size());
    PS_RETURN_IF_ERROR(store->Pull(table, ids, weights.data()));
    // consistency.backup_workers: a worker the job left behind continues
    // at the job's clock, which its pull read.
    if (step = store->CatchUp(step); step >= train.iterations) {
      PS_RETURN_IF_ERROR(progress->StepDone(step, train.iterations, evaluate));
      break;
    }
    const auto compute_start = std::chrono::steady_clock::now();
    grads->resize(ids.size());
    PS_ASSIGN_OR_RETURN(float loss,
                        model->LossAndGradient(*source, cursor, samples, ids, weights, *grads));
    cursor += samples;
    stragglers.HoldBack(std::chrono::steady_clock::now() - compute_start, balancer->share());
    PS_RETURN_IF_ERROR(CheckLossFinite(loss, rank, step));
    progress->AddStep(loss, samples);
    balancer->Weigh(*grads);
    PS_RETURN_IF_ERROR(store->Push(table, ids, SharedFloats::Of(grads)));
    PS_RETURN_IF_ERROR(balancer->FinishStep(step));
    PS_RETURN_IF_ERROR(store->EndStepAsync());
    PS_RETURN_IF_ERROR(progress->StepDone(step + 1, train.iterations, evaluate));
  }
  PS_RETURN_IF_ERROR(store->Flush());
  return progress->Finish();
}

}  // namespace ps
