// Where a training program reads and updates the model: the parameter
// servers of the job (RemoteParamStore, through a Client), or the same
// shard code inside the worker process with no servers and no network
// (LocalParamStore: the single-process reference that benchmarks and
// accuracy comparisons measure the distributed runs against).
//
// A training step is: Pull / PullDense the rows it needs, compute, Push /
// PushDense gradients, EndStep. Pushes are applied with each table's
// optimizer (common/update_rule.h) in both stores, so one program trains the
// same model either way.
//
// Not thread-safe: one store belongs to one training thread.
#ifndef PS_WORKER_PARAM_STORE_H_
#define PS_WORKER_PARAM_STORE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"
#include "common/metrics.h"
#include "common/options.h"
#include "common/status.h"

namespace ps {

class ShardStore;

// One table's rows to read: rows.size() x dim floats into out, row-major.
struct RowsToPull {
  uint32_t table = 0;
  std::span<const uint64_t> rows;
  float* out = nullptr;
};

class ParamStore {
 public:
  virtual ~ParamStore() = default;

  // Steps finished so far (the worker's clock).
  virtual int64_t clock() const = 0;
  // After a step's pulls: the step this worker is at, moved up to the
  // job's clock when the job left it behind (consistency.backup_workers,
  // Client::CatchUp); `step` itself otherwise.
  virtual int64_t CatchUp(int64_t step) { return step; }
  // consistency.backup_workers: push requests of this worker dropped as
  // late, and the clocks CatchUp skipped.
  struct Lateness {
    uint64_t late_pushes = 0;
    uint64_t clocks_skipped = 0;
  };
  virtual Lateness lateness() const { return {}; }
  // Reads the whole table into out[0 .. rows * dim).
  Status PullDense(uint32_t table, float* out) {
    const ScopedSeconds t(&times_.pull_s);
    return DoPullDense(table, out);
  }
  // Reads `rows` (sorted rows avoid a copy on the remote store) into
  // out[0 .. rows.size() * dim), row-major in the order of `rows`.
  Status Pull(uint32_t table, std::span<const uint64_t> rows, float* out) {
    const ScopedSeconds t(&times_.pull_s);
    return DoPull(table, rows, out);
  }
  // Several Pulls at once (the remote store has them in flight together);
  // the first error.
  Status PullMany(std::span<const RowsToPull> pulls) {
    const ScopedSeconds t(&times_.pull_s);
    return DoPullMany(pulls);
  }
  // Sends the gradient of the whole table. The contents of `gradient` must
  // not change until EndStep returns.
  Status PushDense(uint32_t table, SharedFloats gradient) {
    const ScopedSeconds t(&times_.push_s);
    return DoPushDense(table, std::move(gradient));
  }
  // Sends the gradient of `rows` (rows.size() x dim). `rows` may be reused
  // at once; the contents of `gradient` must not change until EndStep.
  Status Push(uint32_t table, std::span<const uint64_t> rows, SharedFloats gradient) {
    const ScopedSeconds t(&times_.push_s);
    return DoPush(table, rows, std::move(gradient));
  }
  // Ends the step: every push of the step is applied (remote: acknowledged)
  // and the clock advances.
  Status EndStep() {
    const ScopedSeconds t(&times_.push_s);
    return DoEndStep();
  }
  // Ends the step without waiting for its pushes: the clock advances at
  // once and the pushes and clock report complete while the next step
  // computes (the next pull still sees them: a shard handles one
  // connection's requests in order). Waits for the step before. The
  // gradients of this step must not change until the next EndStep,
  // EndStepAsync or Flush returns (alternate two buffers). An error of this
  // step surfaces from that call.
  Status EndStepAsync() {
    const ScopedSeconds t(&times_.push_s);
    return DoEndStepAsync();
  }
  // Waits for every push and clock report still in flight.
  Status Flush() {
    const ScopedSeconds t(&times_.push_s);
    return DoFlush();
  }

  // Wall time the calls above kept the training thread waiting, in
  // seconds: pulls (the network, the shards, and the staleness bound's
  // waits) and pushes (sending, applying in the local store, and the
  // acknowledgements EndStep and EndStepAsync wait for).
  struct Times {
    double pull_s = 0;
    double push_s = 0;
  };
  const Times& times() const { return times_; }

  // Seconds pulls spent held back by the staleness bound, waiting for
  // slower workers (0 for the local store).
  virtual double staleness_wait_seconds() const = 0;
  // "2 shards, ssp 2" or "in-process, no parameter server", for progress lines.
  virtual std::string Describe() const = 0;
  // Adds the store's own metrics (the client's requests, bytes, cache) to
  // a worker's (worker/progress.h); the local store has none.
  virtual void WriteMetrics(MetricsWriter& out) const { (void)out; }

 protected:
  // What the public calls of the same names do; they time these.
  virtual Status DoPullDense(uint32_t table, float* out) = 0;
  virtual Status DoPull(uint32_t table, std::span<const uint64_t> rows, float* out) = 0;
  virtual Status DoPullMany(std::span<const RowsToPull> pulls) {
    for (const RowsToPull& p : pulls) PS_RETURN_IF_ERROR(DoPull(p.table, p.rows, p.out));
    return Status::Ok();
  }
  virtual Status DoPushDense(uint32_t table, SharedFloats gradient) = 0;
  virtual Status DoPush(uint32_t table, std::span<const uint64_t> rows,
                        SharedFloats gradient) = 0;
  virtual Status DoEndStep() = 0;
  virtual Status DoEndStepAsync() { return DoEndStep(); }
  virtual Status DoFlush() { return Status::Ok(); }

 private:
  Times times_;
};

// The job's parameter servers, through `client` (which must have joined and
// must outlive the store).
class RemoteParamStore final : public ParamStore {
 public:
  RemoteParamStore(const JobOptions& job, Client* client);
  int64_t clock() const override { return client_->clock(); }
  int64_t CatchUp(int64_t step) override;
  Lateness lateness() const override {
    const ClientCounters c = client_->counters();
    return {c.late_pushes, c.clocks_skipped};
  }
  double staleness_wait_seconds() const override;
  std::string Describe() const override { return description_; }
  void WriteMetrics(MetricsWriter& out) const override;

 private:
  Status DoPullDense(uint32_t table, float* out) override;
  Status DoPull(uint32_t table, std::span<const uint64_t> rows, float* out) override;
  Status DoPullMany(std::span<const RowsToPull> pulls) override;
  Status DoPushDense(uint32_t table, SharedFloats gradient) override;
  Status DoPush(uint32_t table, std::span<const uint64_t> rows, SharedFloats gradient) override;
  Status DoEndStep() override;
  Status DoEndStepAsync() override;
  Status DoFlush() override;

  // Waits for `tickets` (all of them); the first error.
  Status WaitFor(std::vector<Ticket>* tickets);

  Client* const client_;
  const bool backups_;  // consistency.backup_workers > 0
  const std::string description_;
  std::vector<Ticket> pushes_;     // of the current step
  std::vector<Ticket> in_flight_;  // pushes and clock of the step before (EndStepAsync)
  bool caught_up_ = false;         // CatchUp moved the step once (logged)
};

// Every table of the job in this process, held by one ShardStore that owns
// all rows: the same initial values and update rules as the servers, with
// no network. Its clock is the schedule's minimum clock.
class LocalParamStore final : public ParamStore {
 public:
  // ResourceExhausted when the tables do not fit in memory.
  // REQUIRES: job.Validate().ok().
  static StatusOr<std::unique_ptr<LocalParamStore>> Create(const JobOptions& job);
  ~LocalParamStore() override;

  int64_t clock() const override { return clock_; }
  double staleness_wait_seconds() const override { return 0.0; }
  std::string Describe() const override { return "in-process, no parameter server"; }

 private:
  Status DoPullDense(uint32_t table, float* out) override;
  Status DoPull(uint32_t table, std::span<const uint64_t> rows, float* out) override;
  Status DoPushDense(uint32_t table, SharedFloats gradient) override;
  Status DoPush(uint32_t table, std::span<const uint64_t> rows, SharedFloats gradient) override;
  Status DoEndStep() override;

  explicit LocalParamStore(std::unique_ptr<ShardStore> store);
  // InvalidArgument for an unknown table, a row out of range or a size mismatch.
  Status Check(const char* op, uint32_t table, std::span<const uint64_t> rows, bool dense,
               size_t values) const;
  Status Read(uint32_t table, std::span<const uint64_t> rows, bool dense, float* out);

  std::unique_ptr<ShardStore> store_;
  int64_t clock_ = 0;
};

}  // namespace ps

#endif  // PS_WORKER_PARAM_STORE_H_
