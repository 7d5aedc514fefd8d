// Every worker's clock as one shard sees it, and the minimum over workers
// (DESIGN.md section 5). A worker's clock is the number of clocks it has
// finished: it starts at 0 and becomes c + 1 when it reports clock c done.
//
// With backup workers (consistency.backup_workers b, bsp aggregate; Chen et
// al., arXiv 1604.00981) the job's clock is not the minimum but the first
// clock that has not completed: clock c completes once `quorum` (workers -
// b) of the workers that pushed into it (its members) finished it. A
// worker becomes a member of c with its first push of c (Admit) while
// fewer than `quorum` are; a push that finds the clock full, or already
// complete, is late: it is dropped (kOut), and so are the worker's later
// pushes of c. A worker that finishes c without pushing to this shard
// (its minibatch touched none of its rows: a zero gradient here) is made a
// member when there is room. With fewer than `quorum` workers left that
// can still contribute (dead ones and late ones cannot), that many are
// enough. min_clock() is then that job clock; a late worker's own clock
// stays below it until it catches up (Client::CatchUp).
//
// Not thread-safe: the ShardServer thread owns it.
#ifndef PS_SERVER_CLOCK_TABLE_H_
#define PS_SERVER_CLOCK_TABLE_H_

#include <cstdint>
#include <map>
#include <vector>

namespace ps {

class ClockTable {
 public:
  // `quorum` 0 (or num_workers): no backup workers, the minimum is the
  // job's clock. REQUIRES: num_workers >= 1, quorum <= num_workers.
  explicit ClockTable(uint32_t num_workers, uint32_t quorum = 0);

  // True with backup workers (quorum < workers).
  bool backups() const { return quorum_ < clocks_.size(); }
  uint32_t quorum() const { return quorum_; }
  // Whether worker `worker`'s push of clock `clock` goes into that clock's
  // sum: always without backups; with them, when the clock has not
  // completed and the worker is one of its members (made one here while
  // there is room). False: the push is late and dropped.
  // REQUIRES: worker < num_workers(), clock >= 0.
  bool Admit(uint32_t worker, int64_t clock);
  // With backups: the clocks the last advance of min_clock() completed,
  // each with its members (the mean's divisor), in clock order.
  struct Completed {
    int64_t clock;
    uint32_t members;
  };
  const std::vector<Completed>& completed() const { return completed_; }

  // Worker `worker` finished clock `finished` (its clock becomes
  // finished + 1). A report for a clock it already passed changes nothing,
  // so a repeated CLOCK is harmless. Returns true if the minimum advanced.
  // REQUIRES: worker < num_workers(), finished >= 0.
  bool Finish(uint32_t worker, int64_t finished);

  int64_t clock(uint32_t worker) const { return clocks_[worker]; }
  // The minimum over the workers that count (all, unless some were left
  // out); with none left it stays where it was. With backups: the first
  // clock not completed.
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
  // minimum, then the number of clocks with members and, for each, its
  // clock and one state per worker (0 none, 1 member, 2 late).
  std::vector<int64_t> Encode() const;
  // Takes the state Encode() gave; false (and no change) when `data` is
  // not a table of num_workers() workers: a wrong size, a clock outside
  // [0, limit], a flag other than 0 or 1, a minimum above a counted
  // worker's clock (without backups), or members that are not a valid set
  // (a clock below the minimum, a state other than 0-2, more members than
  // the quorum).
  bool Decode(const std::vector<int64_t>& data, int64_t limit);

 private:
  enum Member : uint8_t { kNone = 0, kIn = 1, kOut = 2 };
  // Recomputes min_; returns true if it advanced.
  bool Recompute();
  // The same with backups: completes clocks from min_ on.
  bool RecomputeQuorum();
  std::vector<uint8_t>& MembersOf(int64_t clock);

  std::vector<int64_t> clocks_;
  std::vector<bool> counted_;
  int64_t min_ = 0;
  uint32_t quorum_;
  // With backups: each open clock's Member state per worker.
  std::map<int64_t, std::vector<uint8_t>> members_;
  std::vector<Completed> completed_;
};

}  // namespace ps

#endif  // PS_SERVER_CLOCK_TABLE_H_
