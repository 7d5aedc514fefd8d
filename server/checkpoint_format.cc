#include "server/checkpoint_format.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "common/hash_slots.h"

namespace ps {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoint records store integers and floats little-endian by memcpy");

constexpr char kMagic[4] = {'P', 'S', 'C', 'K'};

// Little-endian encoding of the meta record.
class MetaWriter {
 public:
  void Bytes(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  void U32(uint32_t v) { Bytes(&v, sizeof v); }
  void U64(uint64_t v) { Bytes(&v, sizeof v); }
  void I64(int64_t v) { Bytes(&v, sizeof v); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class MetaReader {
 public:
  explicit MetaReader(std::string_view in) : in_(in) {}
  bool Bytes(void* p, size_t n) {
    if (in_.size() < n) return false;
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool U32(uint32_t* v) { return Bytes(v, sizeof *v); }
  bool U64(uint64_t* v) { return Bytes(v, sizeof *v); }
  bool I64(int64_t* v) { return Bytes(v, sizeof *v); }
  bool Str(std::string* s) {
    uint32_t n = 0;
    if (!U32(&n) || in_.size() < n) return false;
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  size_t remaining() const { return in_.size(); }

 private:
  std::string_view in_;
};

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

std::string EncodeMeta(const ShardSnapshot& s) {
  MetaWriter w;
  w.Bytes(kMagic, sizeof kMagic);
  w.U32(kCheckpointFormatVersion);
  w.U32(s.shard);
  w.U32(s.num_shards);
  w.I64(s.clock);
  w.Str(s.fingerprint);
  w.U64(s.generation_id);
  w.I64(s.delta() ? s.base_clock : -1);
  w.U64(s.delta() ? s.base_id : 0);
  w.U32(static_cast<uint32_t>(s.tables.size()));
  for (const TableSnapshot& t : s.tables) {
    w.Str(t.name);
    w.U64(t.rows);
    w.U32(t.dim);
    w.U64(t.owned.begin);
    w.U64(t.owned.end);
    w.Str(t.optimizer);
    w.U32(static_cast<uint32_t>(t.slots.size()));
    w.U32(t.hashed ? 1 : 0);
    if (t.hashed) {
      w.U32(t.hash_slots);
      w.U64(t.stored_rows);
      w.U32(t.sketch_width);
      w.U32(t.row_uses ? 1 : 0);
    }
    w.Str(t.settings);
    uint64_t records = 0;
    if (s.delta()) {
      if (t.hashed) {
        records = t.ids.size();
      } else {
        for (const RowRange& r : t.changed) records += RunCount(r.size(), t.dim);
      }
    }
    w.U64(records);
    w.U64(!s.delta() ? 0 : t.hashed ? t.removed.size() : t.patched.size());
  }
  return w.Take();
}

StatusOr<ShardSnapshot> DecodeMeta(std::string_view record, const std::string& where,
                                   uint32_t* version_out) {
  MetaReader r(record);
  const auto corrupt = [&](const std::string& what) {
    return DataLossError(where + ": the meta record is corrupt: " + what);
  };
  char magic[sizeof kMagic];
  if (!r.Bytes(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0) {
    return corrupt("it does not start with \"PSCK\"");
  }
  uint32_t version = 0;
  if (!r.U32(&version)) return corrupt("it ends before the format version");
  if (version < kOldestCheckpointFormatVersion || version > kCheckpointFormatVersion) {
    return FailedPreconditionError(
        where + ": checkpoint format version " + std::to_string(version) +
        ", but this build reads only versions " + std::to_string(kOldestCheckpointFormatVersion) +
        " to " + std::to_string(kCheckpointFormatVersion) +
        " (the record format changed); start the job with a new checkpoint.dir");
  }
  if (version_out != nullptr) *version_out = version;
  const bool has_keys = version >= 3;
  const bool has_uses = version >= 4;
  const bool has_settings = version >= 5;
  const bool has_chain = version >= 6;
  ShardSnapshot s;
  uint32_t table_count = 0;
  if (!r.U32(&s.shard) || !r.U32(&s.num_shards) || !r.I64(&s.clock) || !r.Str(&s.fingerprint) ||
      (has_chain && (!r.U64(&s.generation_id) || !r.I64(&s.base_clock) || !r.U64(&s.base_id))) ||
      !r.U32(&table_count)) {
    return corrupt("it ends inside the shard fields");
  }
  if (s.base_clock < -1 || (s.delta() && s.base_clock >= s.clock)) {
    return corrupt("its base clock " + std::to_string(s.base_clock) + " is not below its clock " +
                   std::to_string(s.clock));
  }
  // Each table takes at least kMinTableBytes: do not trust a count the
  // record cannot hold.
  const size_t kMinTableBytes = 4 + 8 + 4 + 8 + 8 + 4 + 4 + (has_keys ? 4 : 0) +
                                (has_settings ? 4 : 0) + (has_chain ? 16 : 0);
  if (table_count > r.remaining() / kMinTableBytes) {
    return corrupt("it lists " + std::to_string(table_count) + " tables in " +
                   std::to_string(r.remaining()) + " bytes");
  }
  s.tables.resize(table_count);
  for (uint32_t i = 0; i < table_count; ++i) {
    TableSnapshot& t = s.tables[i];
    uint32_t slots = 0;
    uint32_t keys = 0;
    if (!r.Str(&t.name) || !r.U64(&t.rows) || !r.U32(&t.dim) || !r.U64(&t.owned.begin) ||
        !r.U64(&t.owned.end) || !r.Str(&t.optimizer) || !r.U32(&slots) ||
        (has_keys && !r.U32(&keys))) {
      return corrupt("it ends inside table " + std::to_string(i));
    }
    if (keys > 1) {
      return corrupt("table '" + t.name + "' has keys " + std::to_string(keys) +
                     " (0 range, 1 hashed)");
    }
    if (keys == 1) {
      t.hashed = true;
      uint32_t uses = 0;
      if (!r.U32(&t.hash_slots) || !r.U64(&t.stored_rows) || !r.U32(&t.sketch_width) ||
          (has_uses && !r.U32(&uses))) {
        return corrupt("it ends inside table " + std::to_string(i));
      }
      if (uses > 1) {
        return corrupt("hashed table '" + t.name + "' has row uses " + std::to_string(uses) +
                       " (0 none, 1 each row's)");
      }
      t.row_uses = uses == 1;
      if (t.rows != 0 || t.hash_slots == 0 || t.owned.begin > t.owned.end ||
          t.owned.end > t.hash_slots) {
        return corrupt("hashed table '" + t.name + "' of " + std::to_string(t.rows) +
                       " rows owns slots [" + std::to_string(t.owned.begin) + ", " +
                       std::to_string(t.owned.end) + ") of " + std::to_string(t.hash_slots));
      }
    } else if (t.owned.begin > t.owned.end || t.owned.end > t.rows) {
      return corrupt("table '" + t.name + "' owns rows [" + std::to_string(t.owned.begin) + ", " +
                     std::to_string(t.owned.end) + ") of " + std::to_string(t.rows));
    }
    if (slots > kMaxOptimizerSlots) {
      return corrupt("table '" + t.name + "' has " + std::to_string(slots) + " optimizer slots");
    }
    if (has_settings && !r.Str(&t.settings)) {
      return corrupt("it ends inside table " + std::to_string(i));
    }
    if (!t.hashed && !t.settings.empty()) {
      return corrupt("range table '" + t.name + "' has settings \"" + t.settings + "\"");
    }
    if (has_chain && (!r.U64(&t.delta_records) || !r.U64(&t.delta_rows))) {
      return corrupt("it ends inside table " + std::to_string(i));
    }
    if (!s.delta() && (t.delta_records != 0 || t.delta_rows != 0)) {
      return corrupt("table '" + t.name + "' has delta records in a full generation");
    }
    t.slots.resize(slots);
  }
  if (r.remaining() != 0) {
    return corrupt(std::to_string(r.remaining()) + " bytes follow the last table");
  }
  return s;
}

uint64_t RowsPerRun(uint32_t dim) {
  return dim == 0 ? kRunFloats : std::max<uint64_t>(1, kRunFloats / dim);
}

uint64_t RunCount(uint64_t rows, uint32_t dim) {
  const uint64_t per_run = RowsPerRun(dim);
  return rows / per_run + (rows % per_run != 0 ? 1 : 0);
}

uint64_t RunCount(const ShardSnapshot& s) {
  uint64_t runs = 0;
  for (const TableSnapshot& t : s.tables) {
    if (!s.delta()) {
      runs += t.hashed ? t.stored_rows : RunCount(t.owned.size(), t.dim);
    } else if (t.hashed) {
      runs += t.ids.size() + t.removed.size();
    } else {
      for (const RowRange& r : t.changed) runs += RunCount(r.size(), t.dim);
      runs += t.patched.size();
    }
  }
  return runs;
}

std::vector<RunStart> SplitRuns(const ShardSnapshot& layout, size_t ranges, uint64_t min_bytes) {
  std::vector<RunStart> starts;
  if (ranges < 2) return starts;
  const auto run_bytes = [](const TableSnapshot& t, uint64_t rows) {
    return Uint128{rows} * t.dim * sizeof(float) * (1 + t.slots.size());
  };
  Uint128 total = 0;
  for (const TableSnapshot& t : layout.tables) {
    if (!t.hashed) total += run_bytes(t, t.owned.size());
  }
  const Uint128 target = std::max<Uint128>({(total + ranges - 1) / ranges, min_bytes, 1});
  // Bytes of the runs before the table being cut, and where the next range
  // should start (a range holds at least `target`).
  Uint128 before = 0;
  Uint128 next_cut = target;
  for (size_t ti = 0; ti < layout.tables.size(); ++ti) {
    const TableSnapshot& t = layout.tables[ti];
    if (t.hashed) continue;
    const uint64_t per_run = RowsPerRun(t.dim);
    const Uint128 full_run = run_bytes(t, per_run);
    const uint64_t runs = RunCount(t.owned.size(), t.dim);
    while (full_run > 0 && next_cut < total) {
      // The first run of this table that starts at or after next_cut.
      const Uint128 k = next_cut <= before ? 0 : (next_cut - before + full_run - 1) / full_run;
      if (k >= runs) break;
      starts.push_back({static_cast<uint32_t>(ti), t.owned.begin + static_cast<uint64_t>(k) * per_run});
      next_cut = before + k * full_run + target;
    }
    before += run_bytes(t, t.owned.size());
  }
  return starts;
}

std::vector<uint64_t> SplitRowsAtRuns(uint64_t first, uint64_t begin, uint64_t end, uint32_t dim,
                                      size_t ranges, uint64_t min_rows) {
  std::vector<uint64_t> starts;
  if (ranges < 2 || end <= begin) return starts;
  const uint64_t per_run = RowsPerRun(dim);
  const uint64_t target = std::max<uint64_t>({(end - begin + ranges - 1) / ranges, min_rows, 1});
  uint64_t at = begin;
  while (end - at > target) {
    // The first run start at or after at + target.
    const uint64_t want = at + target;
    const uint64_t cut = first + (want - first + per_run - 1) / per_run * per_run;
    if (cut >= end) break;
    starts.push_back(cut);
    at = cut;
  }
  return starts;
}

std::optional<size_t> TableElements(const TableSnapshot& t) {
  const Uint128 n = Uint128{t.RowCount()} * t.dim;
  if (n > std::numeric_limits<size_t>::max() / sizeof(float) / (kMaxOptimizerSlots + 1)) {
    return std::nullopt;
  }
  return static_cast<size_t>(n);
}

StatusOr<Uint128> RowDataBytes(const ShardSnapshot& layout, const std::string& where) {
  Uint128 bytes = 0;
  for (const TableSnapshot& t : layout.tables) {
    if (layout.delta()) {
      // At least: every record but a range table's last one whole.
      const Uint128 row_bytes = Uint128{t.dim} * sizeof(float) * (1 + t.slots.size());
      if (t.hashed) {
        bytes += Uint128{t.delta_records} * (row_bytes + (t.row_uses ? kRowUseBytes : 0)) +
                 t.delta_rows;
      } else {
        if (t.delta_records > 0) {
          bytes += Uint128{t.delta_records - 1} * RowsPerRun(t.dim) * row_bytes;
        }
        bytes += Uint128{t.delta_rows} * row_bytes;
      }
      bytes += SketchBytes(t.sketch_width);
      continue;
    }
    const std::optional<size_t> n = TableElements(t);
    if (!n) {
      return DataLossError(where + ": the meta record is corrupt: table '" + t.name +
                           "' is too large");
    }
    bytes += Uint128{*n} * sizeof(float) * (1 + t.slots.size()) + SketchBytes(t.sketch_width) +
             (t.row_uses ? Uint128{t.stored_rows} * kRowUseBytes : 0);
  }
  return bytes;
}

namespace {

// A hashed table's ids: as many as stored_rows, in key order (by slot,
// then id), each in one of the shard's slots.
// `ids` of hashed table `t`: in key order, each in one of the shard's slots.
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
// held, in row order, covering its rows once, and no flat arrays beside
// them.
Status ValidateShared(const TableSnapshot& t, const std::string& table) {
  if (t.hashed) return InvalidArgumentError(table + " is hashed but has shared runs of rows");
  bool flat = !t.values.empty();
  for (const std::vector<float>& slot : t.slots) flat = flat || !slot.empty();
  if (flat) return InvalidArgumentError(table + " has both shared runs of rows and copied arrays");
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
  if (next != t.RowCount()) {
    return InvalidArgumentError(table + " has shared runs of " + std::to_string(next) +
                                " rows for its " + std::to_string(t.RowCount()) + " rows");
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
    if (t.uses.size() != (t.row_uses ? t.ids.size() : 0) || (!t.hashed && t.row_uses)) {
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
    if (!t.shared.empty()) {
      PS_RETURN_IF_ERROR(ValidateShared(t, table));
    } else if (t.values.size() != elements) {
      return InvalidArgumentError(table + " has " + std::to_string(t.values.size()) +
                                  " values for " + std::to_string(held_rows) +
                                  " rows of dim " + std::to_string(t.dim));
    }
    for (size_t k = 0; k < t.slots.size() && t.shared.empty(); ++k) {
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

std::string RowsText(uint64_t first, uint64_t end) {
  return "[" + std::to_string(first) + ", " + std::to_string(end) + ")";
}

Status CheckChainLink(const ShardSnapshot& older, const std::string& older_where,
                      const ShardSnapshot& newer, const std::string& newer_where) {
  const auto broken = [&](const std::string& what) {
    return DataLossError(newer_where + " is a delta on generation " +
                         std::to_string(newer.base_clock) + ", but " + older_where + " " + what +
                         ": the chain of generations is broken; restore an older generation "
                         "(--restore-clock) that does not build on it, or start with a new "
                         "checkpoint.dir");
  };
  if (!newer.delta() || newer.base_clock != older.clock) {
    return broken("is of clock " + std::to_string(older.clock));
  }
  if (older.generation_id == 0 || newer.base_id != older.generation_id) {
    return broken("is another generation of that clock (its id is " +
                  std::to_string(older.generation_id) + ", the delta's base is " +
                  std::to_string(newer.base_id) + "; it was written again since)");
  }
  if (older.shard != newer.shard || older.num_shards != newer.num_shards ||
      older.fingerprint != newer.fingerprint || older.tables.size() != newer.tables.size()) {
    return broken("was written by shard " + std::to_string(older.shard) + " of " +
                  std::to_string(older.num_shards) + " for model \"" + older.fingerprint +
                  "\" with " + std::to_string(older.tables.size()) + " tables, the delta by shard " +
                  std::to_string(newer.shard) + " of " + std::to_string(newer.num_shards) +
                  " for \"" + newer.fingerprint + "\" with " +
                  std::to_string(newer.tables.size()));
  }
  for (size_t i = 0; i < older.tables.size(); ++i) {
    const TableSnapshot& a = older.tables[i];
    const TableSnapshot& b = newer.tables[i];
    if (a.name != b.name || a.rows != b.rows || a.dim != b.dim || a.owned != b.owned ||
        a.optimizer != b.optimizer || a.slots.size() != b.slots.size() || a.hashed != b.hashed ||
        a.hash_slots != b.hash_slots || a.sketch_width != b.sketch_width ||
        a.row_uses != b.row_uses || a.settings != b.settings) {
      return broken("has another layout of table " + std::to_string(i) + " ('" + a.name +
                    "', the delta's '" + b.name + "')");
    }
  }
  return Status::Ok();
}

ShardSnapshot AsFullLayout(ShardSnapshot newest) {
  newest.base_clock = -1;
  newest.base_id = 0;
  for (TableSnapshot& t : newest.tables) {
    t.delta_records = 0;
    t.delta_rows = 0;
  }
  return newest;
}

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
