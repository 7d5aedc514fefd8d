#include "worker/ctr_training.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "common/logging.h"
#include "worker/batch_balance.h"
#include "worker/models/ctr.h"
#include "worker/training.h"
#include "worker/training_loop.h"

namespace ps {
namespace {

// Test samples per forward pass of an evaluation.
constexpr uint32_t kTestBatch = 1000;

bool UsesCriteo(const TrainJob& job) { return !job.train.ctr.criteo_train.empty(); }

// Worker `rank`'s training samples.
StatusOr<CtrData> TrainingData(const TrainJob& job, uint32_t rank) {
  if (UsesCriteo(job)) {
    return ReadCriteoTsv(job.train.ctr.criteo_train, rank, job.cluster.workers, 0,
                         job.train.ctr.bags);
  }
  return GenerateCtrData(CtrGeneratedOptions(job), rank, job.cluster.workers);
}

// The held-out samples: fresh draws of the teacher, or the first
// test_samples lines of the Criteo test file.
StatusOr<CtrData> HeldOutData(const TrainJob& job) {
  if (UsesCriteo(job)) {
    return ReadCriteoTsv(job.train.ctr.criteo_test, 0, 1, job.train.test_samples,
                         job.train.ctr.bags);
  }
  CtrDataOptions options = CtrGeneratedOptions(job);
  options.first_sample = options.num_samples;
  options.num_samples = job.train.test_samples;
  return GenerateCtrData(options, 0, 1);
}

// The model of a job, on batches of up to `max_batch` samples.
StatusOr<std::unique_ptr<CtrModel>> MakeModel(const TrainJob& job, Backend* backend,
                                              uint32_t max_batch) {
  const CtrOptions& ctr = job.train.ctr;
  const bool criteo = UsesCriteo(job);
  PS_ASSIGN_OR_RETURN(uint32_t embeddings, job.TableId(ctr.embedding_table));
  return CtrModel::Create(backend, criteo ? kCriteoFields : ctr.fields,
                          criteo ? kCriteoDense : ctr.dense, job.tables[embeddings].dim,
                          ctr.hidden, max_batch);
}

// The tables of the model: the MLP's and the embeddings'.
struct CtrTables {
  uint32_t mlp = 0, embeddings = 0;
  uint32_t dim = 0;
};

StatusOr<CtrTables> FindTables(const TrainJob& job) {
  CtrTables t;
  PS_ASSIGN_OR_RETURN(t.mlp, job.TableId(job.train.table));
  PS_ASSIGN_OR_RETURN(t.embeddings, job.TableId(job.train.ctr.embedding_table));
  t.dim = job.tables[t.embeddings].dim;
  return t;
}

// The ctr model's step: pull the MLP and the embeddings of the minibatch's
// distinct ids, their loss and gradient, push both gradients.
// Thread-compatible.
class CtrStep final : public TrainingStep {
 public:
  // Every pointer must outlive the step; `data` is this worker's partition.
  CtrStep(CtrTables tables, ParamStore* store, CtrModel* model, const CtrData* data,
          const Partitions<CtrData>* partitions)
      : tables_(tables),
        store_(store),
        model_(model),
        batch_(data, partitions, data->EmptyLike()),
        params_(model->num_parameters()),
        mlp_gradients_(model->num_parameters()) {}

  void TakeMinibatch(int64_t clock, uint32_t samples, const BatchBalancer& balancer) override {
    samples_ = samples;
    batch_.Take(clock, samples, balancer);
  }

  Status Pull() override {
    BatchIds(batch_.data(), batch_.first(), samples_, &ids_);
    embeddings_.resize(ids_.size() * tables_.dim);
    PS_RETURN_IF_ERROR(store_->PullDense(tables_.mlp, params_.data()));
    return store_->Pull(tables_.embeddings, ids_, embeddings_.data());
  }

  StatusOr<double> Compute() override {
    mlp_grad_ = mlp_gradients_.Next();
    embedding_grad_ = embedding_gradients_.Next();
    embedding_grad_->resize(embeddings_.size());
    PS_ASSIGN_OR_RETURN(float loss, model_->TrainStep(batch_.data(), batch_.first(), samples_,
                                                      ids_, embeddings_, params_,
                                                      *embedding_grad_, *mlp_grad_));
    return loss;
  }

  Status Push(const BatchBalancer& balancer) override {
    balancer.Weigh(*mlp_grad_);
    balancer.Weigh(*embedding_grad_);
    PS_RETURN_IF_ERROR(store_->PushDense(tables_.mlp, SharedFloats::Of(mlp_grad_)));
    return store_->Push(tables_.embeddings, ids_, SharedFloats::Of(embedding_grad_));
  }

 private:
  const CtrTables tables_;
  ParamStore* const store_;
  CtrModel* const model_;
  MinibatchSamples<CtrData> batch_;
  std::vector<float> params_;
  AlternatingBuffers mlp_gradients_, embedding_gradients_;
  // The step's minibatch (samples_ of batch_), its distinct ids, their
  // embeddings, and its gradient buffers.
  uint32_t samples_ = 0;
  std::vector<uint64_t> ids_;
  std::vector<float> embeddings_;
  std::shared_ptr<std::vector<float>> mlp_grad_, embedding_grad_;
};

}  // namespace

CtrDataOptions CtrGeneratedOptions(const TrainJob& job) {
  const CtrOptions& ctr = job.train.ctr;
  CtrDataOptions options;
  options.fields = ctr.fields;
  options.dense = ctr.dense;
  options.vocabulary = ctr.vocabulary;
  options.zipf_exponent = ctr.zipf_exponent;
  options.bags = ctr.bags;
  options.num_samples = job.train.samples_per_worker * job.cluster.workers;
  options.seed = job.train.seed;
  return options;
}

StatusOr<Evaluation> CtrEvaluation(const TrainJob& job, ParamStore* store, Backend* backend) {
  PS_ASSIGN_OR_RETURN(CtrTables tables, FindTables(job));
  // The held-out samples, their ids, the model and its pulled parameters,
  // shared by the evaluation's copies.
  struct HeldOut {
    CtrData test;
    std::vector<uint64_t> ids;
    std::vector<float> embeddings, params, logits;
    std::unique_ptr<CtrModel> model;
  };
  auto held = std::make_shared<HeldOut>();
  PS_ASSIGN_OR_RETURN(held->test, HeldOutData(job));
  PS_ASSIGN_OR_RETURN(held->model, MakeModel(job, backend, kTestBatch));
  BatchIds(held->test, 0, held->test.num_samples(), &held->ids);
  held->embeddings.resize(held->ids.size() * tables.dim);
  held->params.resize(held->model->num_parameters());
  held->logits.resize(held->test.num_samples());
  const CtrData& test = held->test;
  double clicks = 0;
  for (int32_t label : test.labels) clicks += label;
  const double rate = clicks / static_cast<double>(test.num_samples());
  const std::vector<float> base(test.num_samples(),
                                static_cast<float>(std::log(rate / (1.0 - rate))));
  PS_LOG_INFO("{} held-out samples, {} distinct ids, click rate {:.4f}: log-loss {:.4f} when "
              "predicting the rate{}",
              test.num_samples(), held->ids.size(), rate, MeanLogLoss(base, test.labels),
              test.teacher_logits.empty()
                  ? std::string()
                  : fmt::format("; at the planted teacher's probabilities (no model does better "
                                "on average) log-loss {:.4f}, AUC {:.4f}",
                                MeanLogLoss(test.teacher_logits, test.labels),
                                Auc(test.teacher_logits, test.labels)));
  Evaluation evaluation;
  evaluation.metric_name = "test AUC";
  evaluation.higher_is_better = true;
  evaluation.evaluate = [held, store, tables]() -> StatusOr<double> {
    PS_RETURN_IF_ERROR(store->PullDense(tables.mlp, held->params.data()));
    PS_RETURN_IF_ERROR(store->Pull(tables.embeddings, held->ids, held->embeddings.data()));
    PS_RETURN_IF_ERROR(held->model->SetParameters(held->params));
    PS_RETURN_IF_ERROR(
        held->model->Logits(held->test, held->ids, held->embeddings, held->logits));
    const double auc = Auc(held->logits, held->test.labels);
    PS_LOG_INFO("test AUC {:.4f}, test log-loss {:.4f}", auc,
                MeanLogLoss(held->logits, held->test.labels));
    return auc;
  };
  return evaluation;
}

StatusOr<TrainSummary> TrainCtr(const TrainJob& job, uint32_t rank, ParamStore* store,
                                Backend* backend, MetricsEndpoint* metrics) {
  const TrainOptions& train = job.train;
  PS_ASSIGN_OR_RETURN(CtrTables tables, FindTables(job));
  PS_ASSIGN_OR_RETURN(CtrData data, TrainingData(job, rank));
  if (data.num_samples() < train.batch_size) {
    return FailedPreconditionError(
        "worker " + std::to_string(rank) + " holds " + std::to_string(data.num_samples()) +
        " training samples, fewer than train.batch_size " + std::to_string(train.batch_size) +
        (UsesCriteo(job) ? " (its block of the lines of " + train.ctr.criteo_train +
                               "); lower batch_size or cluster.workers, or give a longer file"
                         : std::string()));
  }
  Evaluation evaluation;
  if (EvaluatesBetweenSteps(job, rank)) {
    PS_ASSIGN_OR_RETURN(evaluation, CtrEvaluation(job, store, backend));
  }
  PS_ASSIGN_OR_RETURN(auto balancer, BatchBalancer::Create(job, rank, store, UINT32_MAX));
  PS_ASSIGN_OR_RETURN(
      Partitions<CtrData> partitions,
      MakePartitions(
          *balancer, job, rank, data, [&](uint32_t r) { return TrainingData(job, r); },
          [](const CtrData& part) { return part.num_samples(); }));
  PS_ASSIGN_OR_RETURN(auto model, MakeModel(job, backend, balancer->max_batch()));
  PS_LOG_INFO("ctr: {} fields{} (embedding dim {}, table {}) and {} dense features into an MLP "
              "of {} parameters; {} training samples{}, batch {}, {} steps ({})",
              data.fields,
              data.has_bags()
                  ? fmt::format(", {} of them bags ({:.2f} ids a sample)", train.ctr.bags.size(),
                                static_cast<double>(data.ids.size()) /
                                    static_cast<double>(data.num_samples()))
                  : std::string(),
              tables.dim, train.ctr.embedding_table, data.dense,
              model->num_parameters(), data.num_samples(),
              UsesCriteo(job) ? " from " + train.ctr.criteo_train : std::string(),
              train.batch_size, train.iterations, store->Describe());
  PS_ASSIGN_OR_RETURN(auto progress, TrainingProgress::Create(job, rank, store, "test AUC",
                                                              data.num_samples(), metrics, backend));
  CtrStep step(tables, store, model.get(), &data, &partitions);
  return RunTrainingSteps({.job = &job, .rank = rank, .store = store, .balancer = balancer.get(),
                           .progress = progress.get(), .evaluate = evaluation.evaluate},
                          &step);
}

}  // namespace ps
