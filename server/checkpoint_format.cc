// The meta record as bytes (EncodeMeta, DecodeMeta), the run records a
// table's rows take and the bytes they hold, the split of the runs into
// key ranges for reads on several threads (SplitRuns), and a delta's link
// to its base (server/checkpoint_format.h). The records' keys are in
// checkpoint_keys.cc, their checks on a read in checkpoint_run_checker.cc,
// the checks of a snapshot before a write in checkpoint_validate.cc.
#include "server/checkpoint_format.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

}  // namespace ps
