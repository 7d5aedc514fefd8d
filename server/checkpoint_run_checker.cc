// RunChecker (server/checkpoint_format.h): the records of a generation
// checked one at a time, in key order, against its meta record, so that a
// missing, extra, overlapping or wrongly sized record is named where a
// read meets it; a delta's records against its meta record's delta
// counts; and one key range of a generation on its own (StartAt,
// FinishAt), for reads on several threads that check the same as one pass.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "common/hash_slots.h"
#include "server/checkpoint_format.h"

namespace ps {
namespace {

// The first 32 bytes of `bytes` in hex, for a key in an error message.
std::string Hex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes.substr(0, 32)) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  if (bytes.size() > 32) out += "...";
  return out;
}

}  // namespace

RunChecker::RunChecker(const ShardSnapshot& layout, std::string where, uint32_t version)
    : layout_(layout),
      where_(std::move(where)),
      version_(version),
      next_row_(layout.tables.empty() ? 0 : layout.tables[0].owned.begin),
      delta_(layout.delta()),
      runs_seen_(layout.tables.size(), 0),
      patches_seen_(layout.tables.size(), 0) {}

void RunChecker::SkipFullTables() {
  while (cur_ < layout_.tables.size() &&
         (layout_.tables[cur_].hashed || next_row_ == layout_.tables[cur_].owned.end)) {
    ++cur_;
    if (cur_ < layout_.tables.size()) next_row_ = layout_.tables[cur_].owned.begin;
  }
}

uint64_t RunChecker::ExpectedEnd() const {
  const TableSnapshot& t = layout_.tables[cur_];
  return next_row_ + std::min(RowsPerRun(t.dim), t.owned.end - next_row_);
}

Status RunChecker::Missing() const {
  return DataLossError(where_ + ": the record of table '" + layout_.tables[cur_].name +
                       "' rows " + RowsText(next_row_, ExpectedEnd()) + " is missing");
}

Status RunChecker::HashedUpTo(size_t table) {
  while (hashed_cur_ < table) {
    const TableSnapshot& t = layout_.tables[hashed_cur_];
    if (t.hashed && delta_ &&
        (hashed_seen_ != t.delta_records || removed_seen_ != t.delta_rows)) {
      return DataLossError(where_ + ": table '" + t.name + "' has " +
                           std::to_string(hashed_seen_) + " row records and " +
                           std::to_string(removed_seen_) +
                           " removed ids, but its meta record says " +
                           std::to_string(t.delta_records) + " and " +
                           std::to_string(t.delta_rows));
    }
    if (t.hashed && !delta_ && hashed_seen_ != t.stored_rows) {
      return DataLossError(where_ + ": table '" + t.name + "' has " +
                           std::to_string(hashed_seen_) + " row records, but its meta record says " +
                           std::to_string(t.stored_rows));
    }
    ++hashed_cur_;
    hashed_seen_ = 0;
    removed_seen_ = 0;
  }
  return Status::Ok();
}

Status RunChecker::NextId(std::string_view key, std::string_view value, RunRecord* run) {
  uint32_t ti = 0;
  uint32_t key_slot = 0;
  uint64_t id = 0;
  DecodeIdKey(key, &ti, &key_slot, &id);
  if ((key_slot == kNoSlotInKey) != (version_ < 5)) {
    return DataLossError(where_ + ": unexpected record with key " + Hex(key) + " in format " +
                         std::to_string(version_));
  }
  if (ti >= layout_.tables.size() || !layout_.tables[ti].hashed) {
    return DataLossError(where_ + ": a record of id " + std::to_string(id) + " of " +
                         (ti < layout_.tables.size() ? "table '" + layout_.tables[ti].name + "'"
                                                     : "table index " + std::to_string(ti)) +
                         ", which is not hashed");
  }
  const TableSnapshot& t = layout_.tables[ti];
  const uint32_t slot = IdSlot(id, NameHash(t.name), t.hash_slots);
  // Version 4 keys sort by id alone; later ones by slot, then id.
  const uint32_t order_slot = key_slot == kNoSlotInKey ? 0 : key_slot;
  if (ti < hashed_cur_ ||
      (ti == hashed_cur_ && hashed_seen_ + removed_seen_ > 0 &&
       (order_slot < last_slot_ || (order_slot == last_slot_ && id <= last_id_)))) {
    return DataLossError(where_ + ": table '" + t.name + "' has a record of id " +
                         std::to_string(id) + " out of order");
  }
  if (key_slot != kNoSlotInKey && key_slot != slot) {
    return DataLossError(where_ + ": table '" + t.name + "' has a record of id " +
                         std::to_string(id) + " under hash slot " + std::to_string(key_slot) +
                         ", but the id's slot is " + std::to_string(slot));
  }
  PS_RETURN_IF_ERROR(HashedUpTo(ti));
  const bool removed = delta_ && value == kRemovedRecord;
  if (delta_ && (removed ? removed_seen_ == t.delta_rows : hashed_seen_ == t.delta_records)) {
    return DataLossError(where_ + ": table '" + t.name + "' has more " +
                         (removed ? "removed ids than the " + std::to_string(t.delta_rows)
                                  : "row records than the " + std::to_string(t.delta_records)) +
                         " its meta record says");
  }
  if (!delta_ && hashed_seen_ == t.stored_rows) {
    return DataLossError(where_ + ": table '" + t.name + "' has " +
                         std::to_string(hashed_seen_ + 1) +
                         " row records or more, but its meta record says " +
                         std::to_string(t.stored_rows));
  }
  if (!t.owned.Contains(slot)) {
    return DataLossError(where_ + ": table '" + t.name + "' has a record of id " +
                         std::to_string(id) + " in hash slot " + std::to_string(slot) +
                         ", outside its slots " + RowsText(t.owned.begin, t.owned.end));
  }
  if (removed) {
    run->table = ti;
    run->first = id;
    run->removed = true;
    ++removed_seen_;
    last_slot_ = order_slot;
    last_id_ = id;
    return Status::Ok();
  }
  const size_t num_slots = t.slots.size();
  const size_t bytes = size_t{t.dim} * sizeof(float);
  const size_t expected = bytes * (1 + num_slots) + (t.row_uses ? kRowUseBytes : 0);
  if (value.size() != expected) {
    return DataLossError(where_ + ": the record of table '" + t.name + "' id " +
                         std::to_string(id) + " has " + std::to_string(value.size()) +
                         " bytes, not " + std::to_string(expected));
  }
  const auto* data = reinterpret_cast<const std::byte*>(value.data());
  if (t.row_uses) run->use = data + bytes * (1 + num_slots);
  run->table = ti;
  run->first = id;
  run->count = 1;
  run->piece_bytes = bytes;
  run->values = data;
  run->num_slots = num_slots;
  for (size_t k = 0; k < num_slots; ++k) run->slots[k] = data + (1 + k) * bytes;
  ++hashed_seen_;
  last_slot_ = order_slot;
  last_id_ = id;
  return Status::Ok();
}

Status RunChecker::NextSketch(uint32_t ti, std::string_view value, RunRecord* run) {
  if (ti >= layout_.tables.size() || layout_.tables[ti].sketch_width == 0) {
    return DataLossError(where_ + ": a sketch record of " +
                         (ti < layout_.tables.size() ? "table '" + layout_.tables[ti].name + "'"
                                                     : "table index " + std::to_string(ti)) +
                         ", which has no admission sketch");
  }
  const TableSnapshot& t = layout_.tables[ti];
  if (value.size() != SketchBytes(t.sketch_width)) {
    return DataLossError(where_ + ": the sketch record of table '" + t.name + "' has " +
                         std::to_string(value.size()) + " bytes, not " +
                         std::to_string(SketchBytes(t.sketch_width)));
  }
  sketch_seen_.resize(layout_.tables.size(), false);
  sketch_seen_[ti] = true;
  run->table = ti;
  run->sketch = true;
  run->values = reinterpret_cast<const std::byte*>(value.data());
  run->piece_bytes = value.size();
  return Status::Ok();
}

Status RunChecker::SketchesDone() {
  if (sketches_done_) return Status::Ok();
  sketch_seen_.resize(layout_.tables.size(), false);
  for (size_t ti = 0; ti < layout_.tables.size(); ++ti) {
    if (layout_.tables[ti].sketch_width != 0 && !sketch_seen_[ti]) {
      return DataLossError(where_ + ": the sketch record of table '" + layout_.tables[ti].name +
                           "' is missing");
    }
  }
  sketches_done_ = true;
  return Status::Ok();
}

Status RunChecker::Next(std::string_view key, std::string_view value, RunRecord* run) {
  *run = RunRecord();
  uint32_t ti = 0;
  uint32_t slot = 0;
  uint64_t row = 0;
  if (DecodeSketchKey(key, &ti)) return NextSketch(ti, value, run);
  PS_RETURN_IF_ERROR(SketchesDone());  // 'a' keys sort first
  if (DecodeIdKey(key, &ti, &slot, &row)) return NextId(key, value, run);
  if (delta_ && DecodePatchKey(key, &ti, &row)) {
    PS_RETURN_IF_ERROR(HashedUpTo(layout_.tables.size()));  // 'h' keys sort first
    return NextPatch(ti, row, value, run);
  }
  if (!DecodeRowKey(key, &ti, &row)) {
    return DataLossError(where_ + ": unexpected record with key " + Hex(key));
  }
  // The 'h' records sort first: every hashed table is complete by now.
  PS_RETURN_IF_ERROR(HashedUpTo(layout_.tables.size()));
  if (ti >= layout_.tables.size()) {
    return DataLossError(where_ + ": a record of table index " + std::to_string(ti) +
                         ", but the meta record lists " + std::to_string(layout_.tables.size()) +
                         " tables");
  }
  const TableSnapshot& t = layout_.tables[ti];
  if (t.hashed) {
    return DataLossError(where_ + ": a record of rows from " + std::to_string(row) +
                         " of table '" + t.name + "', which is hashed (its records are by id)");
  }
  if (delta_) return NextDeltaRun(ti, row, value, run);
  SkipFullTables();
  if (ti != cur_ || row != next_row_) {
    if (!t.owned.Contains(row)) {
      return DataLossError(where_ + ": table '" + t.name + "' has a record of rows from " +
                           std::to_string(row) + ", outside its rows " +
                           RowsText(t.owned.begin, t.owned.end));
    }
    // Keys come in order: an owned row after the expected one means the
    // expected record is missing; before it, the row was already read.
    if (ti > cur_ || (ti == cur_ && row > next_row_)) return Missing();
    return DataLossError(where_ + ": table '" + t.name + "' has a record of rows from " +
                         std::to_string(row) + ", inside the record of rows " +
                         RowsText(last_first_, last_end_) + " before it");
  }
  const uint64_t end = ExpectedEnd();
  PS_RETURN_IF_ERROR(RunOf(ti, row, end, value, run));
  last_first_ = row;
  last_end_ = next_row_ = end;
  return Status::Ok();
}

Status RunChecker::NextDeltaRun(uint32_t ti, uint64_t row, std::string_view value,
                                RunRecord* run) {
  const TableSnapshot& t = layout_.tables[ti];
  const uint64_t per_run = RowsPerRun(t.dim);
  if (!t.owned.Contains(row)) {
    return DataLossError(where_ + ": table '" + t.name + "' has a record of rows from " +
                         std::to_string(row) + ", outside its rows " +
                         RowsText(t.owned.begin, t.owned.end));
  }
  if ((row - t.owned.begin) % per_run != 0) {
    return DataLossError(where_ + ": table '" + t.name + "' has a record of rows from " +
                         std::to_string(row) + ", which is not where a run starts (every " +
                         std::to_string(per_run) + " rows from row " +
                         std::to_string(t.owned.begin) + ")");
  }
  // Keys come in order and runs on the grid cannot overlap.
  if (++runs_seen_[ti] > t.delta_records) {
    return DataLossError(where_ + ": table '" + t.name + "' has more run records than the " +
                         std::to_string(t.delta_records) + " its meta record says");
  }
  const uint64_t end = row + std::min(per_run, t.owned.end - row);
  return RunOf(ti, row, end, value, run);
}

Status RunChecker::RunOf(uint32_t ti, uint64_t row, uint64_t end, std::string_view value,
                         RunRecord* run) const {
  const TableSnapshot& t = layout_.tables[ti];
  const size_t num_slots = t.slots.size();
  const size_t bytes = static_cast<size_t>(end - row) * t.dim * sizeof(float);
  if (value.size() != bytes * (1 + num_slots)) {
    return DataLossError(where_ + ": the record of table '" + t.name + "' rows " +
                         RowsText(row, end) + " has " + std::to_string(value.size()) +
                         " bytes, not " + std::to_string(bytes * (1 + num_slots)));
  }
  const auto* data = reinterpret_cast<const std::byte*>(value.data());
  run->table = ti;
  run->first = row;
  run->count = end - row;
  run->piece_bytes = bytes;
  run->values = data;
  run->num_slots = num_slots;
  for (size_t k = 0; k < num_slots; ++k) run->slots[k] = data + (1 + k) * bytes;
  return Status::Ok();
}

Status RunChecker::NextPatch(uint32_t ti, uint64_t row, std::string_view value,
                             RunRecord* run) {
  if (ti >= layout_.tables.size() || layout_.tables[ti].hashed) {
    return DataLossError(where_ + ": a row record of row " + std::to_string(row) + " of " +
                         (ti < layout_.tables.size() ? "table '" + layout_.tables[ti].name + "'"
                                                     : "table index " + std::to_string(ti)) +
                         ", which is not a range table");
  }
  const TableSnapshot& t = layout_.tables[ti];
  if (!t.owned.Contains(row)) {
    return DataLossError(where_ + ": table '" + t.name + "' has a row record of row " +
                         std::to_string(row) + ", outside its rows " +
                         RowsText(t.owned.begin, t.owned.end));
  }
  if (++patches_seen_[ti] > t.delta_rows) {
    return DataLossError(where_ + ": table '" + t.name + "' has more row records than the " +
                         std::to_string(t.delta_rows) + " its meta record says");
  }
  const size_t expected = size_t{t.dim} * sizeof(float) * (1 + t.slots.size());
  if (value.size() != expected) {
    return DataLossError(where_ + ": the row record of table '" + t.name + "' row " +
                         std::to_string(row) + " has " + std::to_string(value.size()) +
                         " bytes, not " + std::to_string(expected));
  }
  PS_RETURN_IF_ERROR(RunOf(ti, row, row + 1, value, run));
  run->patch = true;
  return Status::Ok();
}

Status RunChecker::DeltaRunsDone() const {
  for (size_t ti = 0; ti < layout_.tables.size(); ++ti) {
    const TableSnapshot& t = layout_.tables[ti];
    if (!t.hashed && (runs_seen_[ti] != t.delta_records || patches_seen_[ti] != t.delta_rows)) {
      return DataLossError(where_ + ": table '" + t.name + "' has " +
                           std::to_string(runs_seen_[ti]) + " run records and " +
                           std::to_string(patches_seen_[ti]) + " row records, but its meta " +
                           "record says " + std::to_string(t.delta_records) + " and " +
                           std::to_string(t.delta_rows));
    }
  }
  return Status::Ok();
}

void RunChecker::StartAt(uint32_t table, uint64_t row) {
  sketches_done_ = true;
  hashed_cur_ = layout_.tables.size();
  cur_ = table;
  next_row_ = last_first_ = last_end_ = row;
}

Status RunChecker::FinishAt(uint32_t table, uint64_t row) {
  PS_RETURN_IF_ERROR(SketchesDone());
  PS_RETURN_IF_ERROR(HashedUpTo(layout_.tables.size()));
  SkipFullTables();
  if (cur_ < table || (cur_ == table && next_row_ < row)) return Missing();
  return Status::Ok();
}

Status RunChecker::Finish() {
  PS_RETURN_IF_ERROR(SketchesDone());
  PS_RETURN_IF_ERROR(HashedUpTo(layout_.tables.size()));
  if (delta_) return DeltaRunsDone();
  SkipFullTables();
  if (cur_ < layout_.tables.size()) return Missing();
  return Status::Ok();
}

}  // namespace ps
