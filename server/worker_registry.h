// What a shard knows of each worker besides its clock (ClockTable): when it
// last spoke, whether it is dead or left, whether its clock was heard, and
// the counts its requests report; the same for the evaluator, which holds
// no clock.
//
// This keeps the state and answers questions about it; what a death or a
// goodbye does to the job (drop, fail, exit) is the shard's to decide
// (ShardServer::CheckLiveness, Touch). Not thread-safe: the shard's thread
// only.
#ifndef PS_SERVER_WORKER_REGISTRY_H_
#define PS_SERVER_WORKER_REGISTRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"

namespace ps {

struct WorkerState {
  Clock::TimePoint last_seen;  // its last request or heartbeat (start: the shard's start)
  bool heard = false;          // a request or heartbeat arrived since the shard started
  bool dead = false;           // silent for liveness.timeout_ms
  bool left = false;           // said goodbye (or finished while the shard was down)
  bool heard_clock = false;    // a CLOCK or resume told this process its clock
  bool refused = false;        // a HELLO of another job was refused (logged once)
  // Whether a CLOCK or resume of it was accepted since the shard started
  // (the resume window is spent), and whether it sent a HELLO since its
  // last one (it may resume a little above its clock: Admission::RejoinWindow).
  bool clock_synced = false;
  bool rejoining = false;
  // The parameter-cache counts its last heartbeat reported.
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  int64_t target_clock = 0;  // its HELLO's: the clock it trains to; 0: not said
  // consistency.backup_workers: its pushes dropped for coming after
  // their clock's quorum.
  uint64_t late_pushes = 0;

  // Silent since `now - timeout` or longer, and neither dead nor gone.
  bool SilentPast(Clock::TimePoint now, Clock::Duration timeout) const {
    return !dead && !left && now - last_seen >= timeout;
  }
};

class WorkerRegistry {
 public:
  // `workers` ranks; a worker that never spoke counts as silent only from
  // `silent_from` on (the shard's start plus the start-up grace period:
  // processes may start in any order).
  WorkerRegistry(uint32_t workers, Clock::TimePoint silent_from);

  uint32_t size() const { return static_cast<uint32_t>(workers_.size()); }
  // REQUIRES: worker < size().
  WorkerState& worker(uint32_t worker) { return workers_[worker]; }
  const WorkerState& worker(uint32_t worker) const { return workers_[worker]; }
  const std::vector<WorkerState>& workers() const { return workers_; }
  WorkerState& evaluator() { return evaluator_; }
  const WorkerState& evaluator() const { return evaluator_; }
  // The evaluator's state for kEvaluatorWorker, else the worker's.
  // REQUIRES: a worker rank < size() or kEvaluatorWorker.
  WorkerState& sender(uint32_t worker);

  // `worker` (or the evaluator) spoke at `now`.
  void Seen(uint32_t worker, Clock::TimePoint now);
  // Every worker left or is dead (the evaluator aside).
  bool AllGone() const;
  // The ranks for which `pick` is true, "1 3" (empty when none).
  template <typename Pick>
  std::string Ranks(Pick pick, const char* separator = " ") const {
    std::string out;
    for (uint32_t w = 0; w < workers_.size(); ++w) {
      if (!pick(workers_[w])) continue;
      if (!out.empty()) out += separator;
      out += std::to_string(w);
    }
    return out;
  }
  // The evaluator's state in a word: left, dead, reading, or starting
  // (not heard from yet).
  const char* EvaluatorState() const;

 private:
  std::vector<WorkerState> workers_;  // by rank
  WorkerState evaluator_;
};

}  // namespace ps

#endif  // PS_SERVER_WORKER_REGISTRY_H_
