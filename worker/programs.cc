#include "worker/programs.h"

#include <algorithm>
#include <string>

#include "common/logging.h"
#include "worker/ctr_training.h"
#include "worker/linear_regression.h"
#include "worker/mf_training.h"
#include "worker/mlp_training.h"
#include "worker/progress.h"
#include "worker/sparse_logreg_training.h"

namespace ps {
namespace {

// Logs the outcome of a program written against a ParamStore; 0 unless
// training failed or the loss grew to more than twice its first value (a
// diverging run). A loss that merely did not go down is a warning: under
// asp a worker that starts late meets a model the others already trained,
// so its first minibatch loss can be its lowest.
int Finish(const StatusOr<TrainSummary>& result, const ProgramContext& context) {
  if (!result.ok()) {
    PS_LOG_ERROR("training failed: {}", result.status().ToString());
    return 1;
  }
  const TrainSummary& s = *result;
  const std::string& csv = context.job->train.metrics_csv;
  PS_LOG_INFO("done: first loss {:.4f}, last loss {:.4f}, {:.0f} samples/s, {:.2f} s "
              "waiting on staleness, {}{}{}",
              s.first_loss, s.last_loss, s.samples_per_s, s.staleness_wait_s,
              s.breakdown.ToString(),
              s.metrics.empty() ? std::string()
                                : fmt::format(", {} {:.4f} (mean of the last {}: {:.4f})",
                                              s.metric_name, s.metrics.back(),
                                              std::min<size_t>(3, s.metrics.size()), s.TailMean(3)),
              csv.empty() ? std::string() : ", metrics in " + csv);
  if (!(s.last_loss <= 2 * s.first_loss)) {
    PS_LOG_ERROR("the loss grew from {:.4f} to {:.4f}: training diverges; lower the table's "
                 "optimizer.lr",
                 s.first_loss, s.last_loss);
    return 1;
  }
  if (!(s.last_loss < s.first_loss)) {
    PS_LOG_WARN("the loss did not go down ({:.4f} to {:.4f}); if this worker started with the "
                "job's initial model, check the table's optimizer.lr",
                s.first_loss, s.last_loss);
  }
  return 0;
}

// The run of a program written against a ParamStore (the servers or
// in-process): `Train` is its training loop.
template <StatusOr<TrainSummary> (*Train)(const TrainJob&, uint32_t, ParamStore*, Backend*,
                                          MetricsEndpoint*)>
int RunOnStore(const ProgramContext& context) {
  const StatusOr<TrainSummary> result =
      Train(*context.job, context.rank, context.store, context.backend, context.metrics);
  if (result.ok()) LeaveJob(context);
  return Finish(result, context);
}

// The programs, one row each.
const TrainProgram kPrograms[] = {
    {.name = "linear_regression", .run = RunLinearRegression},
    {.name = "mlp", .run = RunOnStore<TrainMlp>, .evaluation = MlpEvaluation},
    {.name = "sparse_logistic_regression",
     .run = RunOnStore<TrainSparseLogisticRegression>,
     .evaluation = SparseLogisticRegressionEvaluation},
    {.name = "matrix_factorization",
     .run = RunOnStore<TrainMatrixFactorization>,
     .evaluation = MatrixFactorizationEvaluation},
    {.name = "ctr", .run = RunOnStore<TrainCtr>, .evaluation = CtrEvaluation},
};

}  // namespace

std::span<const TrainProgram> TrainPrograms() { return kPrograms; }

const TrainProgram* FindTrainProgram(std::string_view name) {
  for (const TrainProgram& program : kPrograms) {
    if (program.name == name) return &program;
  }
  return nullptr;
}

}  // namespace ps
