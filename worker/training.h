// Small pieces shared by ps_worker's training programs: what a program runs
// with (ProgramContext, the argument of a row's run in worker/programs.h)
// and what every program does the same way. Thread-safe: nothing here keeps
// state across calls, except AlternatingBuffers (thread-compatible).
#ifndef PS_WORKER_TRAINING_H_
#define PS_WORKER_TRAINING_H_

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics_endpoint.h"
#include "common/status.h"
#include "worker/train_options.h"

namespace ps {

class Backend;
class Client;
class ParamStore;

// What a program runs with; everything outlives the run.
struct ProgramContext {
  const TrainJob* job = nullptr;
  // This worker's rank, in [0, job->cluster.workers).
  uint32_t rank = 0;
  Backend* backend = nullptr;
  // Where the model lives: the servers (a RemoteParamStore over `client`)
  // or, with --standalone, this process (a LocalParamStore).
  ParamStore* store = nullptr;
  // The servers' client, for a program that drives it itself; null with
  // --standalone.
  Client* client = nullptr;
  // Where the worker's metrics are served (metrics.port); null: nowhere.
  MetricsEndpoint* metrics = nullptr;
};

// After a run that completed: tells every server this worker is done
// (Client::Leave), so it is neither waited for nor declared dead; a failure
// is logged as a warning. Nothing with --standalone.
void LeaveJob(const ProgramContext& context);

// FailedPrecondition when a step's loss is NaN or infinite: training has
// diverged, and the message says what to change.
inline Status CheckLossFinite(double loss, uint32_t rank, int64_t step) {
  if (std::isfinite(loss)) return Status::Ok();
  return FailedPreconditionError("worker " + std::to_string(rank) + ": loss became " +
                                 std::to_string(loss) + " at step " + std::to_string(step) +
                                 "; lower the table's optimizer.lr");
}

// Two gradient buffers used in turn, for steps that end with
// ParamStore::EndStepAsync: one may still be on its way to the servers while
// the next step fills the other.
class AlternatingBuffers {
 public:
  explicit AlternatingBuffers(size_t floats = 0)
      : buffers_{std::make_shared<std::vector<float>>(floats),
                 std::make_shared<std::vector<float>>(floats)} {}
  // The buffer of the next step: the other one than the last call's (a
  // step may skip clocks, consistency.backup_workers, so not by parity).
  const std::shared_ptr<std::vector<float>>& Next() {
    next_ ^= 1;
    return buffers_[next_];
  }
  // Buffer 0 or 1 (to pin them, say).
  const std::shared_ptr<std::vector<float>>& buffer(int i) const { return buffers_[i & 1]; }

 private:
  std::shared_ptr<std::vector<float>> buffers_[2];
  int next_ = 1;
};

// The job as one process trains it with no parameter server (ps_worker
// --standalone, the reference of accuracy and speed comparisons): one
// worker that holds all the data of the job's workers (samples_per_worker
// times workers; all of Fashion-MNIST) and runs as many steps as they do
// together (iterations, eval_every and log_every times workers), with no
// stragglers.
inline TrainJob SingleProcessJob(const TrainJob& job) {
  TrainJob one = job;
  const uint64_t w = job.cluster.workers;
  auto scale = [w](uint32_t v) {
    return static_cast<uint32_t>(std::min<uint64_t>(uint64_t{v} * w, UINT32_MAX));
  };
  one.cluster.workers = 1;
  one.cluster.evaluator = false;  // it evaluates between its steps
  one.train.iterations = scale(job.train.iterations);
  one.train.eval_every = scale(job.train.eval_every);
  one.train.log_every = scale(job.train.log_every);
  one.train.samples_per_worker = job.train.samples_per_worker * w;
  one.stragglers = StragglerOptions();
  return one;
}

}  // namespace ps

#endif  // PS_WORKER_TRAINING_H_
