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
  ShardSnapshot s;
  uint32_t table_count = 0;
  if (!r.U32(&s.shard) || !r.U32(&s.num_shards) || !r.I64(&s.clock) || !r.Str(&s.fingerprint) ||
      !r.U32(&table_count)) {
    return corrupt("it ends inside the shard fields");
  }
  // Each table takes at least kMinTableBytes: do not trust a count the
  // record cannot hold.
  const size_t kMinTableBytes =
      4 + 8 + 4 + 8 + 8 + 4 + 4 + (has_keys ? 4 : 0) + (has_settings ? 4 : 0);
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
    runs += t.hashed ? t.stored_rows : RunCount(t.owned.size(), t.dim);
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
Status ValidateIds(const TableSnapshot& t, const std::string& table) {
  if (t.ids.size() != t.stored_rows || t.rows != 0 || t.hash_slots == 0) {
    return InvalidArgumentError(table + " (hashed) has " + std::to_string(t.ids.size()) +
                                " ids for " + std::to_string(t.stored_rows) + " rows, rows " +
                                std::to_string(t.rows) + " and " +
                                std::to_string(t.hash_slots) + " hash slots");
  }
  const uint64_t seed = NameHash(t.name);
  uint32_t last_slot = 0;
  for (size_t i = 0; i < t.ids.size(); ++i) {
    const uint32_t slot = IdSlot(t.ids[i], seed, t.hash_slots);
    if (i > 0 && (slot < last_slot || (slot == last_slot && t.ids[i] <= t.ids[i - 1]))) {
      return InvalidArgumentError(table + ": id " + std::to_string(t.ids[i]) + " (hash slot " +
                                  std::to_string(slot) + ") does not come after " +
                                  std::to_string(t.ids[i - 1]) + " (hash slot " +
                                  std::to_string(last_slot) + ")");
    }
    if (!t.owned.Contains(slot)) {
      return InvalidArgumentError(table + ": id " + std::to_string(t.ids[i]) +
                                  " is not in the shard's hash slots");
    }
    last_slot = slot;
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
  for (const TableSnapshot& t : s.tables) {
    const std::string table = where + ": table '" + t.name + "'";
    const uint64_t end = t.hashed ? t.hash_slots : t.rows;
    if (t.owned.begin > t.owned.end || t.owned.end > end) {
      return InvalidArgumentError(table + " owns " + (t.hashed ? "hash slots" : "rows") + " [" +
                                  std::to_string(t.owned.begin) + ", " +
                                  std::to_string(t.owned.end) + ") of " + std::to_string(end));
    }
    if (t.hashed) PS_RETURN_IF_ERROR(ValidateIds(t, table));
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
    const std::optional<size_t> n = TableElements(t);
    if (!n) {
      return InvalidArgumentError(table + " of " + std::to_string(t.RowCount()) + " rows of dim " +
                                  std::to_string(t.dim) + " is too large");
    }
    if (!t.shared.empty()) {
      PS_RETURN_IF_ERROR(ValidateShared(t, table));
    } else if (t.values.size() != *n) {
      return InvalidArgumentError(table + " has " + std::to_string(t.values.size()) +
                                  " values for " + std::to_string(t.RowCount()) +
                                  " rows of dim " + std::to_string(t.dim));
    }
    for (size_t k = 0; k < t.slots.size() && t.shared.empty(); ++k) {
      if (t.slots[k].size() != *n) {
        return InvalidArgumentError(table + " slot " + std::to_string(k) + " has " +
                                    std::to_string(t.slots[k].size()) + " floats, not " +
                                    std::to_string(*n));
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

RunChecker::RunChecker(const ShardSnapshot& layout, std::string where, uint32_t version)
    : layout_(layout),
      where_(std::move(where)),
      version_(version),
      next_row_(layout.tables.empty() ? 0 : layout.tables[0].owned.begin) {}

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
    if (t.hashed && hashed_seen_ != t.stored_rows) {
      return DataLossError(where_ + ": table '" + t.name + "' has " +
                           std::to_string(hashed_seen_) + " row records, but its meta record says " +
                           std::to_string(t.stored_rows));
    }
    ++hashed_cur_;
    hashed_seen_ = 0;
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
      (ti == hashed_cur_ && hashed_seen_ > 0 &&
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
  if (hashed_seen_ == t.stored_rows) {
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
  last_first_ = row;
  last_end_ = next_row_ = end;
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
  SkipFullTables();
  if (cur_ < layout_.tables.size()) return Missing();
  return Status::Ok();
}

}  // namespace ps
