// ShardStore's delta snapshots (CheckpointSnapshot, store/shard_store.h):
// what changed since the previous checkpoint's snapshot, copied for an
// incremental generation: a range table's blocks written whole since,
// widened to whole runs, and the rows sparse pushes marked in the others;
// a hashed table's rows stamped since (shared with the store's chunks,
// listed by the writer) and the ids removed since. Each snapshot, full or
// delta, starts a new change epoch. A full one shares the blocks
// (SharedSnapshot, shard_store_copy.cc).
#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/hash_slots.h"
#include "store/shard_store.h"

namespace ps {

StatusOr<ShardSnapshot> ShardStore::CheckpointSnapshot(const JobOptions& job, uint32_t shard,
                                                       int64_t clock, const DeltaSince* delta) {
  // A hashed table that lost count of its removed ids (more than its
  // tracking keeps) makes the snapshot full.
  for (const Table& t : tables_) {
    if (t.hashed != nullptr && t.hashed->removed_overflowed()) delta = nullptr;
  }
  StatusOr<ShardSnapshot> taken = [&]() -> StatusOr<ShardSnapshot> {
    // A full one shares the range tables' blocks instead of copying them.
    if (delta == nullptr) return SharedSnapshot(job, shard, clock);
    ShardSnapshot snapshot = Layout(job, shard, clock);
    snapshot.changes_only = true;
    try {
      CopyChanges(*delta, &snapshot);
    } catch (const std::bad_alloc&) {
      return ResourceExhaustedError("shard " + std::to_string(shard) +
                                    ": not enough memory for a checkpoint's copy of the rows "
                                    "changed since the last one");
    }
    return snapshot;
  }();
  // Whatever the outcome, the next delta is taken against this epoch (a
  // caller whose snapshot or write failed takes a full one next).
  const uint64_t epoch = change_epoch_++;
  for (Table& t : tables_) {
    if (t.hashed == nullptr || !t.hashed->tracks_changes()) continue;
    t.hashed->SetStamp(static_cast<uint32_t>(change_epoch_));
    if (delta == nullptr || !taken.ok()) t.hashed->TakeRemoved();
  }
  if (taken.ok()) taken->epoch = epoch;
  return taken;
}

void ShardStore::CopyChanges(const DeltaSince& delta, ShardSnapshot* snapshot) {
  for (size_t i = 0; i < tables_.size(); ++i) {
    Table& t = tables_[i];
    TableSnapshot& ts = snapshot->tables[i];
    if (t.hashed != nullptr) {
      const uint64_t seed = NameHash(ts.name);
      // Shared with the store, as a full snapshot's; the writer lists the
      // rows stamped since (a table that does not track its rows' changes
      // has every row in it).
      ts.hashed_rows = t.hashed->Share();
      ts.hashed_rows.changes_only = t.hashed->tracks_changes();
      ts.hashed_rows.since = static_cast<uint32_t>(delta.since_epoch);
      ts.stored_rows = t.hashed->size();
      const std::span<const std::byte> sketch = SketchData(static_cast<uint32_t>(i));
      ts.sketch.assign(sketch.begin(), sketch.end());
      if (!t.hashed->tracks_changes()) continue;
      // The removed ids that have no row now, in key order, once each.
      std::vector<uint64_t> removed = t.hashed->TakeRemoved();
      std::vector<std::pair<uint32_t, uint64_t>> keyed;
      keyed.reserve(removed.size());
      for (const uint64_t id : removed) {
        if (t.hashed->Find(id) == nullptr) keyed.push_back({IdSlot(id, seed, ts.hash_slots), id});
      }
      std::sort(keyed.begin(), keyed.end());
      keyed.erase(std::unique(keyed.begin(), keyed.end()), keyed.end());
      ts.removed.resize(keyed.size());
      for (size_t k = 0; k < keyed.size(); ++k) ts.removed[k] = keyed[k].second;
      continue;
    }
    // Blocks written since, widened to the runs a checkpoint writes, as
    // shard-local row ranges, merged where they meet; and the rows sparse
    // pushes changed in the other blocks, where they take fewer bytes than
    // the block's runs.
    const uint32_t dim = t.layout.dim;
    const uint64_t owned = t.layout.owned.size();
    const uint64_t per_run = std::max<uint64_t>(1, delta.rows_per_run(dim));
    const uint64_t row_bytes = uint64_t{dim} * sizeof(float) * (1 + t.slots);
    std::vector<RowRange> local;
    std::vector<uint64_t> patched;  // blocks whose marked rows are patched
    // The marks of rows [first, end) as words from first / 64 (the edges
    // masked), into `out` when not null; returns how many are set.
    const auto marks = [&](uint64_t first, uint64_t end, std::vector<uint64_t>* out) {
      uint64_t set = 0;
      for (uint64_t w = first / 64; w * 64 < end; ++w) {
        uint64_t bits = t.dirty[w];
        if (w * 64 < first) bits &= ~uint64_t{0} << (first - w * 64);
        if (end - w * 64 < 64) bits &= (uint64_t{1} << (end - w * 64)) - 1;
        set += static_cast<uint64_t>(std::popcount(bits));
        if (out != nullptr) out->push_back(bits);
      }
      return set;
    };
    for (uint64_t b = 0; b < t.blocks.size(); ++b) {
      const uint64_t first = b * t.rows_per_block;
      const uint64_t end = std::min(owned, first + t.rows_per_block);
      bool whole = t.stamps[b] > delta.since_epoch;
      if (!whole && t.sparse_stamps[b] > delta.since_epoch) {
        const uint64_t marked = marks(first, end, nullptr);
        whole = marked * (row_bytes + delta.row_overhead) >= (end - first) * row_bytes;
        if (!whole && marked > 0) patched.push_back(b);
      }
      if (!whole) continue;
      const RowRange run{first / per_run * per_run,
                         std::min(owned, (end + per_run - 1) / per_run * per_run)};
      if (!local.empty() && run.begin <= local.back().end) {
        local.back().end = std::max(local.back().end, run.end);
      } else {
        local.push_back(run);
      }
    }
    // The runs written whole, and the blocks of the patched rows: shared
    // with the store's blocks, as a full snapshot's rows (a push into one
    // meanwhile copies it, once); nothing is copied.
    uint64_t at_row = 0;
    for (const RowRange& r : local) {
      ts.changed.push_back({t.layout.owned.begin + r.begin, t.layout.owned.begin + r.end});
      ForEachBlockRun(t, r.begin, r.size(), [&](uint64_t block, uint64_t in_block, uint64_t n) {
        ts.shared.push_back(ShareRows(t, block, in_block, n, at_row));
        at_row += n;
      });
    }
    // The blocks of the patched rows, held, and their marks copied (a
    // word per 64 rows): the writer lists the rows (ListSharedRows), less
    // those inside the runs written whole.
    for (const uint64_t b : patched) {
      const uint64_t first = b * t.rows_per_block;
      const uint64_t end = std::min(owned, first + t.rows_per_block);
      ts.patched_blocks.push_back(ShareRows(t, b, 0, 0, at_row));
      ts.patched_marks.push_back({first, end, ts.patched_bits.size()});
      marks(first, end, &ts.patched_bits);
    }
  }
}

SharedRows ShardStore::ShareRows(const Table& t, uint64_t block, uint64_t in_block, uint64_t rows,
                                 uint64_t first) {
  const std::shared_ptr<Block>& b = t.blocks[block];
  const size_t offset = static_cast<size_t>(in_block) * t.layout.dim;
  SharedRows run;
  run.first = first;
  run.rows = rows;
  run.values = b->values.data() + offset;
  for (uint32_t k = 0; k < t.slots; ++k) run.slots[k] = b->slots[k].data() + offset;
  run.holder = HoldWhole(b);
  return run;
}

}  // namespace ps
