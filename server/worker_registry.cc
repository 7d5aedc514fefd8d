#include "server/worker_registry.h"

#include <algorithm>

#include "common/options.h"

namespace ps {

WorkerRegistry::WorkerRegistry(uint32_t workers, Clock::TimePoint silent_from) : workers_(workers) {
  for (WorkerState& w : workers_) w.last_seen = silent_from;
  evaluator_.last_seen = silent_from;
}

WorkerState& WorkerRegistry::sender(uint32_t worker) {
  return worker == kEvaluatorWorker ? evaluator_ : workers_[worker];
}

void WorkerRegistry::Seen(uint32_t worker, Clock::TimePoint now) {
  WorkerState& w = sender(worker);
  w.last_seen = now;
  w.heard = true;
}

bool WorkerRegistry::AllGone() const {
  return std::all_of(workers_.begin(), workers_.end(),
                     [](const WorkerState& w) { return w.left || w.dead; });
}

const char* WorkerRegistry::EvaluatorState() const {
  return evaluator_.left    ? "left"
         : evaluator_.dead  ? "dead"
         : evaluator_.heard ? "reading"
                            : "starting";
}

}  // namespace ps
