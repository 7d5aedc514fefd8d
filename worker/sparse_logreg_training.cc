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

StatusOr<TrainSummary> TrainSparseLogisticRegression(const TrainJob& job, uint32_t rank,
                                                     ParamStore* store, Backend* backend,
    MetricsEndpoint* metrics) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(uint32_t table, job.TableId(train.table));
  const SparseClickOptions options = ClickDataOptions(job);
  PS_ASSIGN_OR_RETURN(SparseClickData data,
                      GenerateSparseClicks(options, rank, job.cluster.workers));
  PS_ASSIGN_OR_RETURN(auto model, SparseLogReg::Create(backend));
  SparseClickData test;
  std::vector<uint64_t> test_ids;
  std::vector<float> test_weights;
  if (rank == 0) {
    SparseClickOptions held_out = options;
    held_out.first_sample = options.num_samples;  // fresh draws, same weights
    held_out.num_samples = train.test_samples;
    PS_ASSIGN_OR_RETURN(test, GenerateSparseClicks(held_out, 0, 1));
    BatchFeatures(test, 0, test.num_samples(), &test_ids);
    test_weights.resize(test_ids.size());
    for (size_t i = 0; i < test_ids.size(); ++i) test_weights[i] = test.true_weights[test_ids[i]];
    PS_ASSIGN_OR_RETURN(float best, model->LogLoss(test, test_ids, test_weights));
    PS_LOG_INFO("worker 0: {} held-out samples; their log-loss at the generating weights is "
                "{:.4f} (no model does better on average)",
                test.num_samples(), best);
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
                                                              data.num_samples(), metrics));
  const auto evaluate = [&]() -> StatusOr<double> {
    PS_RETURN_IF_ERROR(store->Pull(table, test_ids, test_weights.data()));
    PS_ASSIGN_OR_RETURN(float loss, model->LogLoss(test, test_ids, test_weights));
    return loss;
  };

  std::vector<uint64_t> ids;
  std::vector<float> weights;
  AlternatingBuffers gradients;
  StragglerInjector stragglers(job.stragglers, rank);
  progress->ShowBalance(balancer.get());
  size_t cursor = 0;
  for (int64_t step = store->clock(); step < train.iterations; ++step) {
    const std::shared_ptr<std::vector<float>>& grads = gradients.For(step);
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
  return progress->summary();
}

}  // namespace ps
