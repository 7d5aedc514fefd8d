#include "worker/training_loop.h"

#include <chrono>

#include "worker/straggler.h"
#include "worker/training.h"

namespace ps {

StatusOr<TrainSummary> RunTrainingSteps(const TrainingLoop& loop, TrainingStep* step) {
  const int64_t last = loop.job->train.iterations;
  ParamStore* store = loop.store;
  BatchBalancer& balancer = *loop.balancer;
  TrainingProgress& progress = *loop.progress;
  StragglerInjector stragglers(loop.job->stragglers, loop.rank);
  progress.ShowBalance(&balancer);
  for (int64_t clock = store->clock(); clock < last; ++clock) {
    PS_RETURN_IF_ERROR(balancer.BeginStep(clock));
    const uint32_t samples = balancer.batch();
    step->TakeMinibatch(clock, samples, balancer);
    // Sees this worker's own last push: the shards handle its requests in
    // order.
    PS_RETURN_IF_ERROR(step->Pull());
    // consistency.backup_workers: a worker the job left behind continues
    // at the job's clock, which its pull read.
    if (clock = store->CatchUp(clock); clock >= last) {
      PS_RETURN_IF_ERROR(progress.StepDone(clock, last, loop.evaluate));
      break;
    }
    const auto compute_start = std::chrono::steady_clock::now();
    PS_ASSIGN_OR_RETURN(const double loss, step->Compute());
    stragglers.HoldBack(std::chrono::steady_clock::now() - compute_start, balancer.share());
    PS_RETURN_IF_ERROR(CheckLossFinite(loss, loop.rank, clock));
    progress.AddStep(loss, samples);
    // The pushes complete during the next step (EndStepAsync), which fills
    // the program's other gradient buffer (AlternatingBuffers).
    PS_RETURN_IF_ERROR(step->Push(balancer));
    PS_RETURN_IF_ERROR(balancer.FinishStep(clock));
    PS_RETURN_IF_ERROR(store->EndStepAsync());
    PS_RETURN_IF_ERROR(progress.StepDone(clock + 1, last, loop.evaluate));
  }
  PS_RETURN_IF_ERROR(store->Flush());
  return progress.Finish();
}

}  // namespace ps
