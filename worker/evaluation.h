// A training program's measure of the model on held-out data: worker 0's
// between its steps, or the evaluator process's (cluster.evaluator,
// worker/evaluator.h) while the workers train.
#ifndef PS_WORKER_EVALUATION_H_
#define PS_WORKER_EVALUATION_H_

#include <functional>
#include <string>

#include "common/status.h"
#include "worker/train_options.h"

namespace ps {

class Backend;
class ParamStore;

struct Evaluation {
  // What `evaluate` measures: "test accuracy", "test log-loss", "test RMSE".
  std::string metric_name;
  // Whether a larger value is better (accuracy) or a smaller one (losses).
  bool higher_is_better = true;
  // Pulls what it needs of the model from the store it was made with and
  // measures it on the held-out data. Holds the data itself (copies of the
  // function share it).
  std::function<StatusOr<double>()> evaluate;
};

// Whether worker `rank` evaluates between its steps: worker 0, unless the
// job has an evaluator process.
inline bool EvaluatesBetweenSteps(const TrainJob& job, uint32_t rank) {
  return rank == 0 && !job.cluster.evaluator;
}

// Makes a program's evaluation over `store` (the held-out data loaded or
// generated here, which may take a while); every pointer must outlive it.
using MakeEvaluation = StatusOr<Evaluation> (*)(const TrainJob& job, ParamStore* store,
                                                Backend* backend);

}  // namespace ps

#endif  // PS_WORKER_EVALUATION_H_
