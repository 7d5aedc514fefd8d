// checkpoint_bench's two cases beside its main table (checkpoint_bench.cc
// says what each measures): a shared snapshot written while pushes change
// the store's blocks, and the snapshot of a hashed table, whose chunks of
// rows are shared alike; and the array checks both files use.
#ifndef PS_BENCHMARKS_CHECKPOINT_BENCH_CASES_H_
#define PS_BENCHMARKS_CHECKPOINT_BENCH_CASES_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/options.h"
#include "common/status.h"
#include "server/checkpoint.h"
#include "store/shard_store.h"

namespace ps {

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The arrays of a snapshot's only table: values, then its slots.
inline std::vector<const std::vector<float>*> Arrays(const ShardSnapshot& s) {
  std::vector<const std::vector<float>*> out = {&s.tables[0].values};
  for (const auto& slot : s.tables[0].slots) out.push_back(&slot);
  return out;
}

// A write of a shared snapshot with pushes meanwhile.
struct PushedWrite {
  double write_s = 0;
  uint64_t pushes = 0;
  uint64_t copies = 0;  // blocks the pushes copied
  double median_push_s = 0, longest_push_s = 0;
};

// Takes a shared snapshot of `store` (shard 0 of `job`, one range table)
// as generation `clock` (removing any generation of that clock first) and
// writes it with sync: true on a thread, while this thread pushes into
// table 0 block after block (each push one block's rows of small
// gradients), back to back, until the write is over. Then reads the
// generation back: DataLoss unless it holds the store's state at the
// snapshot (a copy taken just before), bit for bit.
StatusOr<PushedWrite> WriteWhilePushing(const JobOptions& job, ShardStore& store,
                                        CheckpointDir& ckpt, int64_t clock);

// The pause of a shared snapshot of a hashed table.
struct HashedRow {
  uint64_t rows = 0;
  uint64_t bytes = 0;  // values and slot
  double copy = 0;     // ShardStore::Snapshot: a copy and a sort (the pause before)
  double pause = 0;    // SharedSnapshot: the pause now
  double list = 0;     // ListSharedRows, on the writer's thread
  // Pushes of kHashedPushIds random ids while the snapshot is held, and
  // the same pushes with none held (medians and longest); the rows the
  // held ones saved for the snapshot (HashedRows::Share).
  double held_push = 0, held_longest = 0, free_push = 0, free_longest = 0;
  uint64_t saves = 0;
};
inline constexpr uint64_t kHashedPushIds = 10000;

// A store holding only a hashed table of `rows` rows of dim 16 with
// adagrad: per repetition (`reps`), the time Snapshot takes (a copy and a
// sort by hash slot, then id), the pause of SharedSnapshot (references to
// the table's chunks of rows) and the time its rows take to be listed in
// key order; then 20 pushes of kHashedPushIds random ids of the table while
// a shared snapshot is held, and 20 with none. DataLoss unless the shared
// snapshot, listed after those pushes, equals the copy taken at its moment,
// bit for bit.
StatusOr<HashedRow> HashedSnapshotPause(uint64_t rows, int reps);

}  // namespace ps

#endif  // PS_BENCHMARKS_CHECKPOINT_BENCH_CASES_H_
