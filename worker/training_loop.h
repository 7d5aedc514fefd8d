// The training loop of the programs written against a ParamStore (mlp,
// sparse_logistic_regression, matrix_factorization). A program says what
// its step does with its data and model (a TrainingStep: its minibatch,
// pull, compute and push); RunTrainingSteps does the rest, the same for
// every program: the balancer's batch size (stragglers.balance), the catch
// up to the job's clock (consistency.backup_workers), the straggler delay
// after the compute, the loss checked and counted, the end of the step at
// the balancer and the store, the progress lines and worker 0's
// evaluations, and after the last step the flush of the pushes and the
// summary.
//
// Thread-compatible: one training thread drives a loop and its step.
#ifndef PS_WORKER_TRAINING_LOOP_H_
#define PS_WORKER_TRAINING_LOOP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "worker/batch_balance.h"
#include "worker/param_store.h"
#include "worker/progress.h"
#include "worker/train_options.h"

namespace ps {

// One program's part of a training step, called by RunTrainingSteps in the
// order of its methods, once each per step (a step the job left behind
// ends after Pull). Thread-compatible.
class TrainingStep {
 public:
  virtual ~TrainingStep() = default;
  // Chooses the minibatch of the step at `clock`: `samples` samples of the
  // worker's own data or, with `balancer` enabled, its Pieces of every
  // worker's partition.
  virtual void TakeMinibatch(int64_t clock, uint32_t samples, const BatchBalancer& balancer) = 0;
  // Pulls what the minibatch needs of the model. Errors: the store's.
  virtual Status Pull() = 0;
  // The minibatch's loss at the pulled parameters, and its gradient. Its
  // time is the step's compute time (StragglerInjector).
  virtual StatusOr<double> Compute() = 0;
  // Weighs the gradient (BatchBalancer::Weigh) and pushes it. Errors: the
  // store's.
  virtual Status Push(const BatchBalancer& balancer) = 0;
};

// What RunTrainingSteps works with besides the program's step; each pointer
// must outlive the call.
struct TrainingLoop {
  const TrainJob* job = nullptr;
  uint32_t rank = 0;
  ParamStore* store = nullptr;
  BatchBalancer* balancer = nullptr;
  TrainingProgress* progress = nullptr;
  // Worker 0's evaluation between steps (EvaluatesBetweenSteps); empty:
  // none.
  std::function<StatusOr<double>()> evaluate;
};

// Runs the steps from the store's clock to train.iterations, then flushes
// the store's pushes and returns the progress's summary. Fails on the
// first error of the step, the store, the balancer or the progress, and
// with FailedPrecondition when a loss is not finite (CheckLossFinite).
StatusOr<TrainSummary> RunTrainingSteps(const TrainingLoop& loop, TrainingStep* step);

// The first sample of each minibatch of a worker's own data: in order, and
// from the start again when the next minibatch would run past the end.
// Thread-compatible.
class MinibatchCursor {
 public:
  // The first of the next `samples` samples of `size`.
  size_t Next(size_t samples, size_t size) {
    if (next_ + samples > size) next_ = 0;
    const size_t first = next_;
    next_ += samples;
    return first;
  }

 private:
  size_t next_ = 0;
};

// stragglers.balance: every worker's partition of the training data, by
// rank, for BatchBalancer::Pieces; none when the balancer is off.
template <typename Data>
struct Partitions {
  std::vector<Data> others;          // by rank; this worker's own left empty
  std::vector<const Data*> by_rank;  // this worker's is `own`
  std::vector<uint64_t> sizes;       // samples in each
};

// The partitions with this worker's `own` (which must outlive them) and
// the others made by `make(rank)` (StatusOr<Data>); `count(data)` is a
// partition's number of samples. Errors: make's.
template <typename Data, typename Make, typename Count>
StatusOr<Partitions<Data>> MakePartitions(const BatchBalancer& balancer, const TrainJob& job,
                                          uint32_t rank, const Data& own, Make make,
                                          Count count) {
  Partitions<Data> partitions;
  if (!balancer.enabled()) return partitions;
  partitions.others.resize(job.cluster.workers);
  for (uint32_t r = 0; r < job.cluster.workers; ++r) {
    if (r != rank) {
      PS_ASSIGN_OR_RETURN(partitions.others[r], make(r));
    }
    partitions.by_rank.push_back(r == rank ? &own : &partitions.others[r]);
    partitions.sizes.push_back(count(*partitions.by_rank.back()));
  }
  return partitions;
}

// The samples of each step's minibatch from a program's data of type Data
// (which has num_samples(), ClearSamples() and Append(other, i)): a
// MinibatchCursor's block of the worker's own partition or, with
// stragglers.balance, the balancer's Pieces of every worker's partition
// gathered into a Data of its own. Thread-compatible.
template <typename Data>
class MinibatchSamples {
 public:
  // `own` (this worker's partition) and `partitions` must outlive this;
  // `gathered` is an empty Data of own's shape.
  MinibatchSamples(const Data* own, const Partitions<Data>* partitions, Data gathered)
      : own_(own), partitions_(partitions), gathered_(std::move(gathered)) {}

  // Chooses the `samples` samples of the step at `clock`.
  void Take(int64_t clock, uint32_t samples, const BatchBalancer& balancer) {
    if (!balancer.enabled()) {
      source_ = own_;
      first_ = cursor_.Next(samples, own_->num_samples());
      return;
    }
    gathered_.ClearSamples();
    for (const BatchBalancer::Piece& piece : balancer.Pieces(clock, partitions_->sizes)) {
      const Data& part = *partitions_->by_rank[piece.part];
      for (uint64_t i = piece.first; i < piece.first + piece.count; ++i) gathered_.Append(part, i);
    }
    source_ = &gathered_;
    first_ = 0;
  }

  // The step's samples are data()'s [first(), first() + samples).
  const Data& data() const { return *source_; }
  size_t first() const { return first_; }

 private:
  const Data* const own_;
  const Partitions<Data>* const partitions_;
  Data gathered_;
  MinibatchCursor cursor_;
  const Data* source_ = nullptr;
  size_t first_ = 0;
};

}  // namespace ps

#endif  // PS_WORKER_TRAINING_LOOP_H_
