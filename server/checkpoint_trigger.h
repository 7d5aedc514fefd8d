// When a shard writes a checkpoint generation, and what the CHECKPOINT
// requests are answered (DESIGN.md section 7).
//
// A generation is written at every checkpoint.every_clocks boundary the
// minimum clock crosses (ClockAdvanced) and for a CHECKPOINT request when
// no write runs (Request). The shard's snapshot is taken on the calling
// thread (the snapshot function, ShardStore::CheckpointSnapshot: references
// to the store's blocks and its hashed tables' chunks of rows, the only
// pause in serving) and written through the CheckpointDir by a thread of this
// part, which releases each block as it is written. At most one write
// runs, so there is never more than one snapshot of the shard:
// - a boundary waits for a write still running (serving pauses, and the
//   pause is logged), so that every boundary's generation holds exactly
//   its clock's state;
// - a request that starts a write is answered once the write started (its
//   generation and folder), or with the snapshot's error;
// - a request meeting a write waits for it (at most `max_waiting` of them;
//   Unavailable beyond) without holding up other requests, and is answered
//   when the write is over (Poll): with that generation, or its error, when
//   the minimum clock is still the write's; with one new generation of the
//   current clock once the clock moved on. A boundary crossed meanwhile
//   answers them with its generation.
//
// Answers leave through the AnswerFn given at construction: this part
// keeps the waiting requests' routing ids but owns no socket.
//
// Incremental generations (full_every above 1): a generation is a delta
// on the previous one (the snapshot function is asked for the changes
// since that one's snapshot) unless it is the first this trigger writes
// (after a start or a restore), the previous write or copy failed, the
// previous one is of the same clock, full_every - 1 deltas followed the
// last full one, or one more delta as large as the last would bring the
// deltas since it above its bytes (a job that changes most rows between
// generations writes every other one full, and a chain's deltas hold
// about as much as its full generation at most); then it is full.
//
// Not thread-safe: the shard's loop thread makes every call, and the
// AnswerFn and snapshot function run on it. The writer thread is internal:
// it touches only the snapshot it was handed (whose shared blocks the
// store copies before changing them), the CheckpointDir and the result it
// leaves for the loop; writing() is safe from any thread.
#ifndef PS_SERVER_CHECKPOINT_TRIGGER_H_
#define PS_SERVER_CHECKPOINT_TRIGGER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/transport.h"
#include "common/wire.h"
#include "server/checkpoint.h"
#include "store/snapshot.h"

namespace ps {

struct CheckpointTriggerOptions {
  // The shard, as log lines and errors name it.
  uint32_t shard = 0;
  // A generation whenever the minimum clock reaches a multiple of this
  // (checkpoint.every_clocks), >= 1.
  int64_t every_clocks = 1000;
  // How each generation is written (checkpoint.sync, checkpoint.keep, the
  // crash-point test hook).
  CheckpointWriteOptions write;
  // CHECKPOINT requests that may wait for a write in progress
  // (server.socket_hwm).
  size_t max_waiting = 1000;
  // A full generation every this many (checkpoint.full_every), the ones
  // between deltas on the one before; >= 1 (1: every one full). See
  // CheckpointTrigger for when a full one comes sooner.
  uint32_t full_every = 1;
};

class CheckpointTrigger {
 public:
  // What one CHECKPOINT request is answered.
  struct Answer {
    Frame routing_id;
    MessageHeader request;
    // OK: generation `clock`, in folder `path`. Otherwise the error the
    // request is answered (`clock` and `path` then mean nothing).
    Status status;
    int64_t clock = 0;
    std::string path;
  };
  using AnswerFn = std::function<void(Answer& answer)>;
  // The shard's state after every update of the clocks below `clock`
  // (ShardStore::CheckpointSnapshot): whole with `since` null (its range
  // tables shared with the store's blocks, ShardStore::SharedSnapshot),
  // else what changed since the snapshot of epoch since->since_epoch
  // (copied); its `epoch` set. ResourceExhausted when a copy does not fit.
  using SnapshotFn = std::function<StatusOr<ShardSnapshot>(int64_t clock, const DeltaSince* since)>;

  // `dir` and `clock` must outlive this; `clock` times the snapshot, the
  // write and the pause of a boundary. `last_clock`: the clock of the newest
  // generation written or restored (the clock the shard started at), the
  // boundary rule counts from it.
  CheckpointTrigger(CheckpointTriggerOptions options, CheckpointDir& dir, SnapshotFn snapshot,
                    const Clock& clock, AnswerFn answer, int64_t last_clock);
  // Waits for a write in progress (a generation is finished, not torn).
  ~CheckpointTrigger();
  CheckpointTrigger(const CheckpointTrigger&) = delete;
  CheckpointTrigger& operator=(const CheckpointTrigger&) = delete;

  // The minimum clock is `clock` now: when it crossed a multiple of
  // every_clocks since the last generation, takes the snapshot and starts
  // writing generation `clock` (first waiting, with a log line, for a
  // write still running); the requests that waited get that generation,
  // or the error of the snapshot (which is logged).
  void ClockAdvanced(int64_t clock);
  // A CHECKPOINT request, the minimum clock being `clock`: starts
  // generation `clock`, or waits for the write in progress (see the top).
  // Answered now (through the AnswerFn) unless it waits; `routing_id` is
  // taken either way.
  void Request(Frame& routing_id, const MessageHeader& request, int64_t clock);
  // When the write in progress has finished: reaps its thread and answers
  // the requests that waited for it, starting a new generation for them
  // when the minimum clock (`clock`) moved on. Cheap when nothing finished:
  // the loop calls it every round.
  void Poll(int64_t clock);
  // Once the loop stopped, the minimum clock being `clock`: waits for a
  // write in progress to finish and answers the requests still waiting for
  // it, with its generation (or its error) when it is of `clock`, and
  // otherwise with Unavailable: the shard stops before it could write one
  // of `clock` (none is started now).
  void Stop(int64_t clock);

  // Writes generation `clock` and returns once it is complete, its
  // result (a shard that hands its rows over to another server count,
  // server/reshard_gate.h: the servers that take them restore it). Waits
  // for a write in progress first; a generation of `clock` that it wrote
  // is not written again. Requests waiting for a write are answered as
  // Poll answers them.
  Status WriteNow(int64_t clock);

  // Whether a generation is being written. Safe from any thread.
  bool writing() const { return writing_.load(std::memory_order_acquire); }
  // The clock of the newest generation started or restored.
  int64_t last_clock() const { return last_clock_; }
  // Generations snapshotted and handed to the writer.
  uint64_t started() const { return started_; }
  // CHECKPOINT requests waiting for the write in progress.
  size_t requests_waiting() const { return waiting_.size(); }
  // Generations started as deltas (of started()).
  uint64_t deltas_started() const { return deltas_started_; }
  // How long the newest snapshot stopped the calling thread, in ms.
  double last_pause_ms() const { return last_pause_ms_; }

 private:
  // Answers every waiting request: generation `clock`, or `status` when it
  // is an error.
  void AnswerWaiting(const Status& status, int64_t clock);
  // Poll; `may_start`: whether a new generation may be started for the
  // waiting requests.
  void Finish(int64_t clock, bool may_start);
  // Takes the snapshot of generation `clock` and starts writing it; the
  // snapshot's error otherwise. REQUIRES: no write is running.
  Status Start(int64_t clock);
  // The writer thread's work: writes `snapshot` (consuming it), logs how
  // it went and leaves the result for the loop.
  void Write(ShardSnapshot snapshot, double pause_ms);
  void JoinWriter();

  const CheckpointTriggerOptions options_;
  CheckpointDir& dir_;
  const SnapshotFn snapshot_;
  const Clock& clock_;
  const AnswerFn answer_;
  int64_t last_clock_;
  uint64_t started_ = 0;
  std::thread writer_;
  std::atomic<bool> writing_{false};
  // The clock and result of the write in progress or last finished; the
  // writer sets result_ before writing_ goes false, the loop reads it after.
  int64_t write_clock_ = 0;
  Status result_;
  // Requests waiting for the write in progress (status, clock and path
  // filled in when answered).
  std::vector<Answer> waiting_;
  // The generation the next delta builds on: the last one written, set by
  // the writer thread when its write succeeded (read by the loop after it
  // joined the writer). has_base_ false: the next one is full.
  struct Base {
    int64_t clock = 0;
    uint64_t id = 0;
    uint64_t epoch = 0;
  };
  bool has_base_ = false;
  Base base_;
  uint32_t deltas_since_full_ = 0;
  uint64_t full_bytes_ = 0;   // of the last full generation's rows
  uint64_t delta_bytes_ = 0;  // of the deltas since
  uint64_t last_delta_bytes_ = 0;
  double last_pause_ms_ = 0;
  uint64_t deltas_started_ = 0;
};

}  // namespace ps

#endif  // PS_SERVER_CHECKPOINT_TRIGGER_H_
