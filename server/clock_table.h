// Every worker's clock as one shard sees it, and the minimum over workers
// (DESIGN.md section 5). A worker's clock is the number of clocks it has
// finished: it starts at 0 and becomes c + 1 when it reports clock c done.
//
// Not thread-safe: the ShardServer thread owns it.
#ifndef PS_SERVER_CLOCK_TABLE_H_
#define PS_SERVER_CLOCK_TABLE_H_

#include <cstdint>
#include <vector>

namespace ps {

class ClockTable {
 public:
  // REQUIRES: num_workers >= 1.
  explicit ClockTable(uint32_t num_workers);

  // Worker `worker` finished clock `finished` (its clock becomes
  // finished + 1). A report for a clock it already passed changes nothing,
  // so a repeated CLOCK is harmless. Returns true if the minimum advanced.
  // REQUIRES: worker < num_workers(), finished >= 0.
  bool Finish(uint32_t worker, int64_t finished);

  int64_t clock(uint32_t worker) const { return clocks_[worker]; }
  // The minimum over the workers that count (all, unless some were left
  // out); with none left it stays where it was.
  int64_t min_clock() const { return min_; }
  // The counted worker with the smallest clock (the lowest rank among
  // ties); worker 0 when none counts.
  uint32_t slowest_worker() const;

  // Every worker's clock (and the minimum) becomes at least `clock`: the
  // state of a shard restored from a checkpoint taken at that clock.
  void StartAt(int64_t clock);

  // Leaves `worker` out of the minimum (it finished, or is dead and the job
  // goes on without it). Returns true if the minimum advanced.
  bool Exclude(uint32_t worker);
  // Counts `worker` again, at no less than the current minimum (a worker
  // rejoining after a restart resumes there).
  void Include(uint32_t worker);
  bool counted(uint32_t worker) const { return counted_[worker]; }
  // Workers that count toward the minimum.
  uint32_t num_counted() const;
  // Workers at clock >= `clock`, counted or not: those that finished every
  // clock below it (one that left or was dropped after finishing clock c
  // still pushed into clock c).
  uint32_t num_at_least(int64_t clock) const;
  uint32_t num_workers() const { return static_cast<uint32_t>(clocks_.size()); }

  // True when a pull from a worker at clock `clock` may be answered under
  // staleness `bound`: min_clock() >= clock - bound.
  bool PullReady(int64_t clock, int64_t bound) const {
    return clock <= bound || min_ >= clock - bound;
  }

  // The whole table as numbers (a replica's copy, server/replication.h):
  // each worker's clock, then 1 or 0 per worker (counted), then the
  // minimum.
  std::vector<int64_t> Encode() const;
  // Takes the state Encode() gave; false (and no change) when `data` is
  // not a table of num_workers() workers: a wrong size, a clock outside
  // [0, limit], a flag other than 0 or 1, or a minimum above a counted
  // worker's clock.
  bool Decode(const std::vector<int64_t>& data, int64_t limit);

 private:
  // Recomputes min_; returns true if it advanced.
  bool Recompute();

  std::vector<int64_t> clocks_;
  std::vector<bool> counted_;
  int64_t min_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_CLOCK_TABLE_H_
