// Small pieces shared by ps_worker's training programs.
#ifndef PS_WORKER_TRAINING_H_
#define PS_WORKER_TRAINING_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <algorithm>

#include "common/options.h"
#include "common/status.h"

namespace ps {

// FailedPrecondition when a step's loss is NaN or infinite: training has
// diverged, and the message says what to change.
inline Status CheckLossFinite(double loss, uint32_t rank, int64_t step) {
  if (std::isfinite(loss)) return Status::Ok();
  return FailedPreconditionError("worker " + std::to_string(rank) + ": loss became " +
                                 std::to_string(loss) + " at step " + std::to_string(step) +
                                 "; lower the table's optimizer.lr");
}

// The job as one process trains it with no parameter server (ps_worker
// --standalone, the reference of accuracy and speed comparisons): one
// worker that holds all the data of the job's workers (samples_per_worker
// times workers; all of Fashion-MNIST) and runs as many steps as they do
// together (iterations, eval_every and log_every times workers), with no
// stragglers.
inline JobOptions SingleProcessJob(const JobOptions& job) {
  JobOptions one = job;
  const uint64_t w = job.cluster.workers;
  auto scale = [w](uint32_t v) {
    return static_cast<uint32_t>(std::min<uint64_t>(uint64_t{v} * w, UINT32_MAX));
  };
  one.cluster.workers = 1;
  one.train.iterations = scale(job.train.iterations);
  one.train.eval_every = scale(job.train.eval_every);
  one.train.log_every = scale(job.train.log_every);
  one.train.samples_per_worker = job.train.samples_per_worker * w;
  one.stragglers = StragglerOptions();
  return one;
}

}  // namespace ps

#endif  // PS_WORKER_TRAINING_H_
