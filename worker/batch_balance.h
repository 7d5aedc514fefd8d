// Work that follows speed (stragglers.balance; LB-BSP, arXiv 1806.02508):
// under bsp and ssp a worker that is slower over recent clocks processes
// proportionally fewer samples per clock, so that every worker's clock
// takes about the same time, while the job's samples per clock (workers x
// train.batch_size) stay the same.
//
// Each worker measures its rate over every stragglers.balance_window
// clocks: samples per second of its own work, from the start of a step to
// its pushes, with the time its pulls waited for slower workers left out.
// At the window's end it pushes the change of its rate to its row of the
// table kBalanceTableName (optimizer add: the row holds the rate; under
// consistency.aggregate every row holds rate / workers, the same
// proportions). At the next clock every worker pulls the whole table and
// takes its part of the job's samples in proportion to the rates (their
// running mean over windows, 30% the newest; Split:
// the same split on every worker that reads the same rates, as bsp
// guarantees), when the split shortens the predicted clock (the slowest
// worker's batch / rate) by more than 15%: between equal workers on a busy
// host the rates differ by noise, and a split that follows it only makes
// one of them the slowest. The fixed point is equal clock times: a worker with fixed
// costs per step (its pulls and pushes) has a lower rate at a smaller
// batch, and so gets less until its clock takes as long as the others'.
// A program scales each gradient by share() = batch / train.batch_size, so
// the update is that of the same global batch.
//
// The samples are the same as without balancing: every worker holds every
// worker's partition, and the job's samples of clock c are the N
// partitions' minibatches of step c one after another (partition r's
// minibatch at step c starts at (c mod floor(size_r / batch_size)) x
// batch_size, as a worker walks its own partition); worker i takes the
// split's i-th stretch of them (Pieces). So a slow worker's partition is
// trained on as much as any other, by whoever has the time.
//
// Not thread-safe: the training loop's thread drives it.
#ifndef PS_WORKER_BATCH_BALANCE_H_
#define PS_WORKER_BATCH_BALANCE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "worker/param_store.h"
#include "worker/train_options.h"

namespace ps {

class BatchBalancer {
 public:
  // Off (batch() is train.batch_size, share() 1, nothing pulled or pushed)
  // unless stragglers.balance and cluster.workers >= 2. `max_batch`: the
  // most samples one step of the program may take (>= train.batch_size).
  // `store` must outlive it. FailedPrecondition when the job has no table
  // kBalanceTableName (a job built in code rather than loaded).
  static StatusOr<std::unique_ptr<BatchBalancer>> Create(const TrainJob& job, uint32_t rank,
                                                         ParamStore* store, uint32_t max_batch);

  bool enabled() const { return enabled_; }
  // Samples of this clock's step.
  uint32_t batch() const { return batch_; }
  // batch() / train.batch_size: the weight of this step's gradient.
  double share() const { return static_cast<double>(batch_) / nominal_; }
  // The most samples a step may take: what the program must allow for.
  uint32_t max_batch() const { return enabled_ ? cap_ : batch_; }
  // Scales `gradient` by share() (nothing to do when off or at share 1).
  void Weigh(std::vector<float>& gradient) const;
  // Decisions taken (windows whose rates were read, whether or not the
  // split changed).
  uint64_t decisions() const { return decisions_; }

  // Before the step of `clock` (before its pull): when a window ended at
  // the clock before, reads every worker's rate and sets batch(). Errors:
  // the store's.
  Status BeginStep(int64_t clock);
  // After the step's pushes, before its EndStep: counts its samples and its
  // work; at a window's end pushes this worker's rate. Errors: the store's.
  Status FinishStep(int64_t clock);

  // A stretch of the samples of one step: `count` samples of partition
  // `part` from `first`.
  struct Piece {
    uint32_t part = 0;
    uint64_t first = 0;
    uint32_t count = 0;
    friend bool operator==(const Piece&, const Piece&) = default;
  };
  // This worker's samples of the step at `clock` (batch() of them) in the
  // partitions of sizes `part_sizes` (one per worker, each >=
  // train.batch_size), in order. REQUIRES: enabled().
  std::vector<Piece> Pieces(int64_t clock, std::span<const uint64_t> part_sizes) const {
    return PiecesOf(split_, rank_, static_cast<uint32_t>(nominal_), clock, part_sizes);
  }
  // The same for worker `rank` of a job whose workers take `split` samples
  // each, `nominal` samples a worker without balancing.
  static std::vector<Piece> PiecesOf(std::span<const uint32_t> split, uint32_t rank,
                                     uint32_t nominal, int64_t clock,
                                     std::span<const uint64_t> part_sizes);

  // The split of `total` samples over workers in proportion to `rates`
  // (largest remainders, ties to the lower rank), each at least 1 and at
  // most `cap`; empty when a rate is not a positive finite number.
  // REQUIRES: rates.size() <= total, cap >= 1.
  static std::vector<uint32_t> Split(std::span<const double> rates, uint32_t total,
                                     uint32_t cap);

 private:
  BatchBalancer(const TrainJob& job, uint32_t rank, ParamStore* store, uint32_t max_batch,
                uint32_t table, bool enabled);

  using Steady = std::chrono::steady_clock;
  const uint32_t rank_;
  const uint32_t workers_;
  const uint32_t window_;
  const double nominal_;  // train.batch_size
  const uint32_t total_;  // workers x train.batch_size
  const uint32_t cap_;
  ParamStore* const store_;
  const uint32_t table_;
  const bool enabled_;
  uint32_t batch_;
  uint64_t decisions_ = 0;
  // The step in progress and the window so far.
  Steady::time_point step_start_{};
  double wait_at_start_ = 0;
  double window_work_s_ = 0;
  uint64_t window_samples_ = 0;
  float pushed_rate_ = 0;  // what this worker's row holds (its pushes so far)
  std::vector<uint32_t> split_;   // every worker's batch, as this worker last split
  std::vector<float> rates_;      // the table as last pulled
  std::vector<double> smoothed_;  // the running mean the split follows
  std::vector<uint64_t> row_;
};

}  // namespace ps

#endif  // PS_WORKER_BATCH_BALANCE_H_
