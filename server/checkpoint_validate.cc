// ValidateForWrite (server/checkpoint_format.h): what a snapshot must be
// for its records to be written (a full one's or a delta's), checked
// before a write creates anything; each refusal names the table and what
// is wrong with it.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/hash_slots.h"
#include "server/checkpoint_format.h"

namespace ps {
namespace {

// `ids` of hashed table `t`: in key order (by slot, then id), each in one
// of the shard's slots.
Status ValidateKeyOrder(const TableSnapshot& t, const std::vector<uint64_t>& ids,
                        const std::string& table) {
  const uint64_t seed = NameHash(t.name);
  uint32_t last_slot = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t slot = IdSlot(ids[i], seed, t.hash_slots);
    if (i > 0 && (slot < last_slot || (slot == last_slot && ids[i] <= ids[i - 1]))) {
      return InvalidArgumentError(table + ": id " + std::to_string(ids[i]) + " (hash slot " +
                                  std::to_string(slot) + ") does not come after " +
                                  std::to_string(ids[i - 1]) + " (hash slot " +
                                  std::to_string(last_slot) + ")");
    }
    if (!t.owned.Contains(slot)) {
      return InvalidArgumentError(table + ": id " + std::to_string(ids[i]) +
                                  " is not in the shard's hash slots");
    }
    last_slot = slot;
  }
  return Status::Ok();
}

// A hashed table's ids: as many as stored_rows (a delta's: any number, and
// its removed ids, none of them a row's), in key order (by slot, then id),
// each in one of the shard's slots.
Status ValidateIds(const TableSnapshot& t, const std::string& table, bool delta) {
  if ((!delta && t.ids.size() != t.stored_rows) || t.rows != 0 || t.hash_slots == 0) {
    return InvalidArgumentError(table + " (hashed) has " + std::to_string(t.ids.size()) +
                                " ids for " + std::to_string(t.stored_rows) + " rows, rows " +
                                std::to_string(t.rows) + " and " +
                                std::to_string(t.hash_slots) + " hash slots");
  }
  PS_RETURN_IF_ERROR(ValidateKeyOrder(t, t.ids, table));
  if (!delta) {
    if (!t.removed.empty()) return InvalidArgumentError(table + ": removed ids in a full snapshot");
    return Status::Ok();
  }
  PS_RETURN_IF_ERROR(ValidateKeyOrder(t, t.removed, table + " (removed ids)"));
  // Both in key order: one pass finds an id in both.
  const uint64_t seed = NameHash(t.name);
  const auto key = [&](uint64_t id) { return std::pair(IdSlot(id, seed, t.hash_slots), id); };
  for (size_t i = 0, j = 0; i < t.ids.size() && j < t.removed.size();) {
    const auto a = key(t.ids[i]), b = key(t.removed[j]);
    if (a == b) {
      return InvalidArgumentError(table + ": id " + std::to_string(t.ids[i]) +
                                  " is both a row and removed");
    }
    a < b ? ++i : ++j;
  }
  return Status::Ok();
}

// A delta's range table: changed ranges in order, inside the owned rows,
// each starting where a run starts and ending where one ends.
Status ValidateChanged(const TableSnapshot& t, const std::string& table) {
  const uint64_t per_run = RowsPerRun(t.dim);
  uint64_t last_end = t.owned.begin;
  for (const RowRange& r : t.changed) {
    const bool on_grid = (r.begin - t.owned.begin) % per_run == 0 &&
                         (r.end == t.owned.end || (r.end - t.owned.begin) % per_run == 0);
    if (r.begin < last_end || r.empty() || r.end > t.owned.end || !on_grid) {
      return InvalidArgumentError(table + ": changed rows " + RowsText(r.begin, r.end) +
                                  " are not whole runs of its owned rows " +
                                  RowsText(t.owned.begin, t.owned.end) +
                                  " after the changed rows before them");
    }
    last_end = r.end;
  }
  // Patched rows: ascending, owned, outside the changed ranges.
  size_t range = 0;
  for (size_t i = 0; i < t.patched.size(); ++i) {
    const uint64_t row = t.patched[i];
    while (range < t.changed.size() && t.changed[range].end <= row) ++range;
    if ((i > 0 && row <= t.patched[i - 1]) || !t.owned.Contains(row) ||
        (range < t.changed.size() && t.changed[range].Contains(row))) {
      return InvalidArgumentError(table + ": changed row " + std::to_string(row) +
                                  " is not an owned row after the one before it, outside the "
                                  "changed runs");
    }
  }
  return Status::Ok();
}

// A range table's rows shared with a store (TableSnapshot::shared): runs
// held, in row order, covering its rows once (a delta's: its changed
// ranges' rows, its patched rows in flat arrays after them), and no flat
// arrays beside them otherwise.
Status ValidateShared(const TableSnapshot& t, const std::string& table, bool delta,
                      uint64_t held_rows) {
  if (t.hashed) return InvalidArgumentError(table + " is hashed but has shared runs of rows");
  if (!t.patched_marks.empty()) {
    return InvalidArgumentError(table + "'s patched rows are not listed (ListSharedRows)");
  }
  // A delta's patched rows: in the arrays, or in shared blocks.
  const uint64_t patched_rows = delta ? t.patched.size() : 0;
  const uint64_t flat_rows = t.patched_blocks.empty() ? patched_rows : 0;
  if (!t.patched_blocks.empty()) {
    uint64_t in_blocks = 0;
    bool held = t.patched_at.size() == patched_rows;
    for (const SharedRows& run : t.patched_blocks) {
      held = held && run.first == t.SharedRowCount() + in_blocks && run.rows > 0 &&
             run.holder != nullptr && run.values != nullptr;
      for (size_t k = 0; k < t.slots.size(); ++k) held = held && run.slots[k] != nullptr;
      in_blocks += run.rows;
    }
    if (!held || in_blocks != patched_rows) {
      return InvalidArgumentError(table + "'s " + std::to_string(patched_rows) +
                                  " patched rows are not all in held shared blocks");
    }
  }
  bool flat = t.values.size() != flat_rows * t.dim;
  for (const std::vector<float>& slot : t.slots) flat = flat || slot.size() != t.values.size();
  if (flat) {
    return InvalidArgumentError(table + " has both shared runs of rows and copied arrays (" +
                                std::to_string(t.values.size()) + " values where its " +
                                std::to_string(flat_rows) + " patched rows take " +
                                std::to_string(flat_rows * t.dim) + ")");
  }
  uint64_t next = 0;
  for (const SharedRows& run : t.shared) {
    if (run.first != next || run.rows == 0) {
      return InvalidArgumentError(table + " has a shared run of rows " +
                                  RowsText(run.first, run.first + run.rows) + " where rows from " +
                                  std::to_string(next) + " come next");
    }
    bool held = run.holder != nullptr && run.values != nullptr;
    for (size_t k = 0; k < t.slots.size(); ++k) held = held && run.slots[k] != nullptr;
    if (!held) {
      return InvalidArgumentError(table + " has a shared run of rows " +
                                  RowsText(run.first, run.first + run.rows) +
                                  " that was released or lacks an array");
    }
    next += run.rows;
  }
  if (next + patched_rows != held_rows) {
    return InvalidArgumentError(table + " has shared runs of " + std::to_string(next) +
                                " rows for its " + std::to_string(held_rows - patched_rows) +
                                " rows");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateForWrite(const ShardSnapshot& s, const std::string& where) {
  if (s.clock < 0) {
    return InvalidArgumentError(where + ": clock " + std::to_string(s.clock) + " is negative");
  }
  if (s.num_shards < 1 || s.shard >= s.num_shards) {
    return InvalidArgumentError(where + ": shard " + std::to_string(s.shard) + " of " +
                                std::to_string(s.num_shards));
  }
  if (s.tables.size() > std::numeric_limits<uint32_t>::max()) {
    return InvalidArgumentError(where + ": too many tables");
  }
  if (s.delta() && s.base_clock >= s.clock) {
    return InvalidArgumentError(where + ": a delta on generation " + std::to_string(s.base_clock) +
                                ", which is not older than its clock " + std::to_string(s.clock));
  }
  for (const TableSnapshot& t : s.tables) {
    const std::string table = where + ": table '" + t.name + "'";
    const uint64_t end = t.hashed ? t.hash_slots : t.rows;
    if (t.owned.begin > t.owned.end || t.owned.end > end) {
      return InvalidArgumentError(table + " owns " + (t.hashed ? "hash slots" : "rows") + " [" +
                                  std::to_string(t.owned.begin) + ", " +
                                  std::to_string(t.owned.end) + ") of " + std::to_string(end));
    }
    if (t.hashed) PS_RETURN_IF_ERROR(ValidateIds(t, table, s.delta()));
    if (!t.hashed && s.delta()) PS_RETURN_IF_ERROR(ValidateChanged(t, table));
    if (!s.delta() && (!t.changed.empty() || !t.patched.empty())) {
      return InvalidArgumentError(table + ": changed rows in a full snapshot");
    }
    if (t.shares_hashed_rows()) {
      // Its rows in the store's chunks, listed (ListSharedRows), none given
      // back yet, each one's use there when it has one.
      const SharedHashedRows& h = t.hashed_rows;
      bool held = t.hashed && t.hashed_at.size() == t.ids.size() &&
                  t.hashed_left.size() == h.chunks.size() && t.hashed_released == 0 &&
                  (h.use_bytes != 0) == t.row_uses && t.values.empty() && t.uses.empty();
      for (size_t i = 0; held && i < t.hashed_at.size(); ++i) {
        const uint64_t r = t.hashed_at[i];
        held = r < h.rows && h.chunks[r >> h.chunk_shift].rows != nullptr;
      }
      if (!held) {
        return InvalidArgumentError(table + ": its rows shared with the store are not listed, "
                                    "or were given back");
      }
    } else if (t.uses.size() != (t.row_uses ? t.ids.size() : 0) || (!t.hashed && t.row_uses)) {
      return InvalidArgumentError(table + " has " + std::to_string(t.uses.size()) +
                                  " row uses for " + std::to_string(t.ids.size()) + " rows");
    }
    if (t.sketch.size() != SketchBytes(t.sketch_width) || (!t.hashed && t.sketch_width != 0)) {
      return InvalidArgumentError(table + " has a sketch of " + std::to_string(t.sketch.size()) +
                                  " bytes for width " + std::to_string(t.sketch_width));
    }
    if (t.slots.size() > kMaxOptimizerSlots) {
      return InvalidArgumentError(table + " has " + std::to_string(t.slots.size()) +
                                  " optimizer slots (at most " +
                                  std::to_string(kMaxOptimizerSlots) + ")");
    }
    const uint64_t held_rows = s.delta() ? t.DeltaRowCount() : t.RowCount();
    const std::optional<size_t> n = TableElements(t);
    const Uint128 elements = Uint128{held_rows} * t.dim;
    if (!n) {
      return InvalidArgumentError(table + " of " + std::to_string(t.RowCount()) + " rows of dim " +
                                  std::to_string(t.dim) + " is too large");
    }
    if (!t.shared.empty() || !t.patched_blocks.empty() || !t.patched_marks.empty()) {
      PS_RETURN_IF_ERROR(ValidateShared(t, table, s.delta(), held_rows));
    } else if (t.shares_hashed_rows()) {
      // Checked above.
    } else if (t.values.size() != elements) {
      return InvalidArgumentError(table + " has " + std::to_string(t.values.size()) +
                                  " values for " + std::to_string(held_rows) +
                                  " rows of dim " + std::to_string(t.dim));
    }
    for (size_t k = 0; k < t.slots.size() && t.shared.empty() && t.patched_blocks.empty() &&
                       !t.shares_hashed_rows();
         ++k) {
      if (t.slots[k].size() != t.values.size()) {
        return InvalidArgumentError(table + " slot " + std::to_string(k) + " has " +
                                    std::to_string(t.slots[k].size()) + " floats, not " +
                                    std::to_string(t.values.size()));
      }
    }
    if (t.name.size() > std::numeric_limits<uint32_t>::max() ||
        t.optimizer.size() > std::numeric_limits<uint32_t>::max()) {
      return InvalidArgumentError(table + ": name or optimizer text too long");
    }
  }
  return Status::Ok();
}

}  // namespace ps
