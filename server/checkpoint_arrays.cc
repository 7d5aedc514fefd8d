#include "server/checkpoint_arrays.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <map>
#include <numeric>
#include <utility>

#include "common/update_rule.h"
#include "server/checkpoint_format.h"
#include "server/checkpoint_layout.h"
#include "store/snapshot.h"

namespace ps {

// The records hold little-endian floats and the arrays are little-endian:
// rows are copied as bytes.
static_assert(std::endian::native == std::endian::little,
              "checkpoint arrays copy little-endian records as they are");

namespace {

constexpr std::string_view kShardPrefix = "shard-";

// The shard number of a folder named "shard-<n>" (no sign, no leading
// zero), or nullopt.
std::optional<uint32_t> ShardNumber(std::string_view name) {
  if (!name.starts_with(kShardPrefix)) return std::nullopt;
  const std::string_view digits = name.substr(kShardPrefix.size());
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  uint32_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

std::string ClockList(const std::vector<int64_t>& clocks) {
  if (clocks.empty()) return "none";
  std::string text;
  for (int64_t c : clocks) text += (text.empty() ? "" : " ") + std::to_string(c);
  return text;
}

// Reads a generation's meta record only: Begin keeps the layout and stops
// the read.
class MetaSink final : public RowSink {
 public:
  explicit MetaSink(ShardSnapshot* out) : out_(out) {}
  Status Begin(const ShardSnapshot& layout) override {
    *out_ = layout;
    got_ = true;
    return Status(StatusCode::kCancelled, "the meta record is all that is read");
  }
  void Rows(uint32_t, uint64_t, uint64_t, const std::byte*, std::span<const std::byte* const>,
            const std::byte*) override {}
  void Sketch(uint32_t, std::span<const std::byte>) override {}
  bool got() const { return got_; }

 private:
  ShardSnapshot* const out_;
  bool got_ = false;
};

std::string Describe(const TableSnapshot& t) {
  std::string text = "'" + t.name + "' (" + (t.hashed ? "hashed, " : "range, ");
  text +=
      t.hashed ? std::to_string(t.hash_slots) + " hash slots" : std::to_string(t.rows) + " rows";
  text += ", dim " + std::to_string(t.dim) + ", " + std::to_string(t.slots.size()) +
          " state arrays, optimizer '" + t.optimizer + "')";
  return text;
}

bool SameTable(const TableSnapshot& a, const TableSnapshot& b) {
  return a.name == b.name && a.hashed == b.hashed && a.rows == b.rows && a.dim == b.dim &&
         a.optimizer == b.optimizer && a.slots.size() == b.slots.size() &&
         a.hash_slots == b.hash_slots;
}

// The same layout as Open read: what ReadInto checks each shard's meta
// record against (the generation may have been replaced in between).
bool SameLayout(const ShardSnapshot& a, const ShardSnapshot& b) {
  if (a.shard != b.shard || a.num_shards != b.num_shards || a.clock != b.clock ||
      a.fingerprint != b.fingerprint || a.tables.size() != b.tables.size()) {
    return false;
  }
  for (size_t i = 0; i < a.tables.size(); ++i) {
    const TableSnapshot& x = a.tables[i];
    const TableSnapshot& y = b.tables[i];
    if (!SameTable(x, y) || x.owned.begin != y.owned.begin || x.owned.end != y.owned.end ||
        x.stored_rows != y.stored_rows) {
      return false;
    }
  }
  return true;
}

// OK when the shards' owned rows (or hash slots) of table `t` cover
// [0, end) once. DataLoss naming the rows left out or held twice.
Status CheckCoverage(const ArrayGeneration& g, size_t t, const std::vector<ShardSnapshot>& layouts,
                     uint64_t end) {
  struct Owned {
    uint64_t begin, end;
    uint32_t shard;
  };
  std::vector<Owned> owned;
  for (uint32_t s = 0; s < layouts.size(); ++s) {
    const RowRange r = layouts[s].tables[t].owned;
    if (r.begin < r.end) owned.push_back({r.begin, r.end, s});
  }
  std::sort(owned.begin(), owned.end(),
            [](const Owned& a, const Owned& b) { return a.begin < b.begin; });
  const std::string what = g.tables[t].hashed ? "hash slots" : "rows";
  const std::string where =
      g.dir + ": generation " + std::to_string(g.clock) + ": table '" + g.tables[t].name + "': ";
  uint64_t next = 0;
  for (size_t i = 0; i < owned.size(); ++i) {
    if (owned[i].begin > next) {
      return DataLossError(where + "no shard holds its " + what + " " +
                           RowsText(next, owned[i].begin) +
                           "; the shard folders are not of one job");
    }
    if (owned[i].begin < next) {
      return DataLossError(where + "shard-" + std::to_string(owned[i - 1].shard) + " and shard-" +
                           std::to_string(owned[i].shard) + " both hold its " + what + " from " +
                           std::to_string(owned[i].begin) +
                           "; the shard folders are not of one job");
    }
    next = owned[i].end;
  }
  if (next != end) {
    return DataLossError(where + "no shard holds its " + what + " " + RowsText(next, end) +
                         "; the shard folders are not of one job");
  }
  return Status::Ok();
}

// Copies each shard's rows into the arrays, as ReadInto describes.
class AssembleSink final : public RowSink {
 public:
  AssembleSink(const ArrayGeneration& g, const ShardSnapshot& expected,
               const std::vector<TableArrays>& arrays, std::vector<std::vector<uint64_t>>* ids,
               const std::string& path)
      : g_(g), expected_(expected), arrays_(arrays), ids_(ids), path_(path) {
    for (size_t t = 0; t < g.tables.size(); ++t) {
      if (g.tables[t].hashed)
        held_before_.push_back((*ids)[t].size());
      else
        held_before_.push_back(0);
    }
  }

  Status Begin(const ShardSnapshot& layout) override {
    if (!SameLayout(layout, expected_)) {
      return DataLossError(path_ +
                           ": its meta record changed while it was read; run the export again");
    }
    return Status::Ok();
  }

  void Rows(uint32_t table, uint64_t first, uint64_t count, const std::byte* values,
            std::span<const std::byte* const> slots, const std::byte* /*use*/) override {
    if (!error_.ok()) return;
    const ArrayTable& t = g_.tables[table];
    const TableArrays& a = arrays_[table];
    const size_t row_bytes = size_t{t.dim} * sizeof(float);
    if (slots.size() != a.slots.size()) {
      error_ = DataLossError(path_ + ": table '" + t.name + "' has records of " +
                             std::to_string(slots.size()) + " state arrays, not " +
                             std::to_string(a.slots.size()));
      return;
    }
    uint64_t at = 0;  // the first row's place in the arrays
    if (t.hashed) {
      std::vector<uint64_t>& ids = (*ids_)[table];
      const TableSnapshot& e = expected_.tables[table];
      if (count != 1 || ids.size() - held_before_[table] >= e.stored_rows) {
        error_ = DataLossError(path_ + ": table '" + t.name +
                               "' holds more rows than its meta "
                               "record says (" +
                               std::to_string(e.stored_rows) + ")");
        return;
      }
      at = ids.size();
      ids.push_back(first);
    } else {
      const RowRange owned = expected_.tables[table].owned;
      if (first < owned.begin || count > owned.end - first) {
        error_ = DataLossError(path_ + ": table '" + t.name + "' has rows " +
                               RowsText(first, first + count) + " outside its owned rows " +
                               RowsText(owned.begin, owned.end));
        return;
      }
      at = first;
    }
    const size_t offset = static_cast<size_t>(at) * row_bytes;
    const size_t bytes = static_cast<size_t>(count) * row_bytes;
    std::memcpy(a.values.data() + offset, values, bytes);
    for (size_t k = 0; k < slots.size(); ++k)
      std::memcpy(a.slots[k].data() + offset, slots[k], bytes);
  }

  void Sketch(uint32_t, std::span<const std::byte>) override {}

  const Status& error() const { return error_; }

 private:
  const ArrayGeneration& g_;
  const ShardSnapshot& expected_;
  const std::vector<TableArrays>& arrays_;
  std::vector<std::vector<uint64_t>>* const ids_;
  const std::string& path_;
  std::vector<size_t> held_before_;  // per hashed table: rows of earlier shards
  Status error_;
};

// Moves rows of `row_bytes` so that row k holds what row order[k] held.
// `done` has order.size() entries, all false.
void PermuteRows(std::span<std::byte> rows, size_t row_bytes, const std::vector<uint64_t>& order,
                 std::vector<bool>& done) {
  if (row_bytes == 0) return;
  std::vector<std::byte> held(row_bytes);
  for (size_t i = 0; i < order.size(); ++i) {
    if (done[i] || order[i] == i) continue;
    std::memcpy(held.data(), rows.data() + i * row_bytes, row_bytes);
    size_t j = i;
    while (true) {
      done[j] = true;
      const size_t from = order[j];
      if (from == i) {
        std::memcpy(rows.data() + j * row_bytes, held.data(), row_bytes);
        break;
      }
      std::memcpy(rows.data() + j * row_bytes, rows.data() + from * row_bytes, row_bytes);
      j = from;
    }
  }
}

}  // namespace

std::vector<std::string> OptimizerSlotNames(const std::string& optimizer, size_t slots) {
  const std::string_view text = optimizer;
  const std::string_view type = text.substr(0, text.find_first_of(" \n"));
  const UpdateRule* rule = FindRule(type);
  std::vector<std::string> names;
  for (size_t k = 0; k < slots; ++k) {
    if (rule != nullptr && k < rule->slot_names.size() && !rule->slot_names[k].empty()) {
      names.emplace_back(rule->slot_names[k]);
    } else {
      names.push_back("slot" + std::to_string(k));
    }
  }
  return names;
}

StatusOr<std::unique_ptr<CheckpointArrays>> CheckpointArrays::Open(const std::string& dir,
                                                                   std::optional<int64_t> clock,
                                                                   Filesystem* files) {
  OsFilesystem os_files;
  Filesystem& fs = files != nullptr ? *files : os_files;
  PS_ASSIGN_OR_RETURN(const Filesystem::Type type, fs.TypeOf(dir));
  if (type == Filesystem::Type::kMissing) {
    return NotFoundError(dir +
                         ": no such folder; give the job's checkpoint.dir (the folder that "
                         "holds shard-0, shard-1, ...)");
  }
  if (type != Filesystem::Type::kDirectory) {
    return InvalidArgumentError(dir +
                                ": not a folder; give the job's checkpoint.dir (the folder "
                                "that holds shard-0, shard-1, ...)");
  }
  PS_ASSIGN_OR_RETURN(const std::vector<Filesystem::Entry> entries, fs.List(dir));
  std::vector<uint32_t> numbers;
  for (const Filesystem::Entry& e : entries) {
    const std::optional<uint32_t> n = ShardNumber(e.name);
    if (n && e.type == Filesystem::Type::kDirectory) numbers.push_back(*n);
  }
  std::sort(numbers.begin(), numbers.end());
  if (numbers.empty()) {
    return NotFoundError(dir +
                         ": holds no shard-<i> folder, so no checkpoint; give the job's "
                         "checkpoint.dir (the folder that holds shard-0, shard-1, ...)");
  }
  std::string found;
  for (uint32_t n : numbers) found += (found.empty() ? "shard-" : ", shard-") + std::to_string(n);
  for (uint32_t i = 0; i < numbers.size(); ++i) {
    if (numbers[i] != i) {
      return NotFoundError(ShardCheckpointDir(dir, i) + " is missing (" + dir + " holds " + found +
                           "): every shard's folder is needed; copy it back next to the others");
    }
  }
  const uint32_t num_folders = static_cast<uint32_t>(numbers.size());

  ArrayGeneration g;
  g.dir = dir;
  std::vector<std::unique_ptr<CheckpointDir>> shards;
  std::vector<std::vector<int64_t>> held;
  for (uint32_t i = 0; i < num_folders; ++i) {
    PS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointDir> shard,
                        CheckpointDir::Open(ShardCheckpointDir(dir, i), files));
    PS_ASSIGN_OR_RETURN(std::vector<int64_t> clocks, shard->Generations());
    shards.push_back(std::move(shard));
    held.push_back(std::move(clocks));
  }
  std::string have;
  for (uint32_t i = 0; i < num_folders; ++i) {
    have += "; shard-" + std::to_string(i) + ": " + ClockList(held[i]);
  }
  const auto everywhere = [&](int64_t c) {
    return std::all_of(held.begin(), held.end(), [c](const std::vector<int64_t>& clocks) {
      return std::binary_search(clocks.begin(), clocks.end(), c);
    });
  };
  if (clock.has_value()) {
    if (!everywhere(*clock)) {
      return NotFoundError(dir + ": generation " + std::to_string(*clock) +
                           " is not complete in every shard's folder (complete generations" + have +
                           "); name a clock every shard holds, or leave the clock out "
                           "for the newest such");
    }
    g.clock = *clock;
  } else {
    std::optional<int64_t> newest;
    for (auto it = held[0].rbegin(); it != held[0].rend() && !newest; ++it) {
      if (everywhere(*it)) newest = *it;
    }
    if (!newest) {
      return NotFoundError(dir +
                           ": no generation is complete in every shard's folder (complete "
                           "generations" +
                           have +
                           "); a job writes one at every "
                           "checkpoint.every_clocks, or on `ps_ctl checkpoint`");
    }
    g.clock = *newest;
  }

  std::vector<ShardSnapshot> layouts(num_folders);
  for (uint32_t i = 0; i < num_folders; ++i) {
    MetaSink sink(&layouts[i]);
    const Status read = shards[i]->ReadInto(g.clock, &sink);
    if (!sink.got()) return read;
    g.paths.push_back(shards[i]->GenerationPath(g.clock));
  }
  if (layouts.empty())
    return NotFoundError(dir + ": holds no shard-<i> folder");  // (checked above)
  const uint32_t num_shards = layouts[0].num_shards;
  if (num_shards > num_folders) {
    return NotFoundError(ShardCheckpointDir(dir, num_folders) + " is missing: generation " +
                         std::to_string(g.clock) + " was written by " + std::to_string(num_shards) +
                         " shards (" + g.paths[0] + " says so), and " + dir + " holds " + found +
                         "; copy the missing folders back");
  }
  for (uint32_t i = 0; i < num_folders; ++i) {
    const ShardSnapshot& l = layouts[i];
    if (l.shard != i || l.num_shards != num_shards) {
      return DataLossError(g.paths[i] + ": its meta record says shard " + std::to_string(l.shard) +
                           " of " + std::to_string(l.num_shards) + ", but it lies in shard-" +
                           std::to_string(i) + "'s folder and " + g.paths[0] + " says " +
                           std::to_string(num_shards) +
                           " shards; move folders that are not of this job aside");
    }
    if (l.fingerprint != layouts[0].fingerprint) {
      return DataLossError(g.paths[i] + ": written for another model than " + g.paths[0] +
                           " (fingerprints '" + l.fingerprint + "' and '" + layouts[0].fingerprint +
                           "'); the shard folders are not of one job");
    }
    if (l.tables.size() != layouts[0].tables.size()) {
      return DataLossError(g.paths[i] + ": holds " + std::to_string(l.tables.size()) +
                           " tables, but " + g.paths[0] + " holds " +
                           std::to_string(layouts[0].tables.size()) +
                           "; the shard folders are not of one job");
    }
    for (size_t t = 0; t < l.tables.size(); ++t) {
      if (!SameTable(l.tables[t], layouts[0].tables[t])) {
        return DataLossError(g.paths[i] + ": table " + std::to_string(t) + " is " +
                             Describe(l.tables[t]) + ", but in " + g.paths[0] + " it is " +
                             Describe(layouts[0].tables[t]) +
                             "; the shard folders are not of one job");
      }
    }
  }
  g.num_shards = num_shards;
  g.fingerprint = layouts[0].fingerprint;
  for (size_t t = 0; t < layouts[0].tables.size(); ++t) {
    const TableSnapshot& first = layouts[0].tables[t];
    ArrayTable a;
    a.name = first.name;
    a.hashed = first.hashed;
    a.dim = first.dim;
    a.optimizer = first.optimizer;
    a.slot_names = OptimizerSlotNames(first.optimizer, first.slots.size());
    a.hash_slots = first.hash_slots;
    for (const ShardSnapshot& l : layouts) {
      const uint64_t rows = l.tables[t].RowCount();
      a.shard_rows.push_back(rows);
      if (a.hashed) a.rows += rows;
    }
    if (!a.hashed) a.rows = first.rows;
    g.tables.push_back(std::move(a));
    PS_RETURN_IF_ERROR(CheckCoverage(g, t, layouts, first.hashed ? first.hash_slots : first.rows));
  }
  return std::unique_ptr<CheckpointArrays>(
      new CheckpointArrays(std::move(g), std::move(shards), std::move(layouts)));
}

Status CheckpointArrays::ReadInto(ArrayTarget* target, const ArrayProgress& progress) const {
  const ArrayGeneration& g = generation_;
  const auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  std::vector<TableArrays> arrays;
  for (size_t t = 0; t < g.tables.size(); ++t) {
    const ArrayTable& table = g.tables[t];
    PS_ASSIGN_OR_RETURN(TableArrays a, target->Arrays(t, table));
    const uint64_t bytes = table.rows * table.dim * sizeof(float);
    bool fits = a.values.size() == bytes && a.slots.size() == table.slot_names.size() &&
                a.ids.size() == (table.hashed ? table.rows * sizeof(uint64_t) : 0);
    for (const auto& slot : a.slots) fits = fits && slot.size() == bytes;
    if (!fits) {
      return InternalError("the arrays given for table '" + table.name + "' are not of " +
                           std::to_string(table.rows) + " x " + std::to_string(table.dim) +
                           " elements each");
    }
    arrays.push_back(std::move(a));
  }
  std::vector<std::vector<uint64_t>> ids(g.tables.size());
  for (size_t t = 0; t < g.tables.size(); ++t) {
    if (g.tables[t].hashed) ids[t].reserve(g.tables[t].rows);
  }
  for (uint32_t s = 0; s < g.num_shards; ++s) {
    say("reading shard " + std::to_string(s + 1) + " of " + std::to_string(g.num_shards) + ": " +
        g.paths[s]);
    AssembleSink sink(g, layouts_[s], arrays, &ids, g.paths[s]);
    PS_RETURN_IF_ERROR(shards_[s]->ReadInto(g.clock, &sink));
    PS_RETURN_IF_ERROR(sink.error());
  }
  for (size_t t = 0; t < g.tables.size(); ++t) {
    const ArrayTable& table = g.tables[t];
    if (!table.hashed) continue;
    std::vector<uint64_t>& held = ids[t];
    if (held.size() != table.rows) {
      return DataLossError(g.dir + ": generation " + std::to_string(g.clock) + ": table '" +
                           table.name + "' has " + std::to_string(held.size()) +
                           " rows, but the meta records say " + std::to_string(table.rows));
    }
    std::vector<uint64_t> order(held.size());
    std::iota(order.begin(), order.end(), uint64_t{0});
    if (!std::is_sorted(held.begin(), held.end())) {
      say("ordering hashed table '" + table.name + "' by id (" + std::to_string(held.size()) +
          " rows)");
      std::sort(order.begin(), order.end(),
                [&held](uint64_t a, uint64_t b) { return held[a] < held[b]; });
    }
    // Each shard's rows came in ascending order; ids are in one shard only.
    const auto shard_of = [&](uint64_t at) {
      uint64_t before = 0;
      for (uint32_t s = 0; s < table.shard_rows.size(); ++s) {
        before += table.shard_rows[s];
        if (at < before) return s;
      }
      return static_cast<uint32_t>(table.shard_rows.size() - 1);
    };
    for (size_t k = 1; k < order.size(); ++k) {
      if (held[order[k]] == held[order[k - 1]]) {
        return DataLossError(g.dir + ": generation " + std::to_string(g.clock) + ": table '" +
                             table.name + "' holds id " + std::to_string(held[order[k]]) +
                             " in shard-" + std::to_string(shard_of(order[k - 1])) +
                             " and in shard-" + std::to_string(shard_of(order[k])) +
                             "; the shard folders are not of one job");
      }
    }
    const size_t row_bytes = size_t{table.dim} * sizeof(float);
    std::vector<bool> done(order.size());
    PermuteRows(arrays[t].values, row_bytes, order, done);
    for (std::span<std::byte> slot : arrays[t].slots) {
      done.assign(order.size(), false);
      PermuteRows(slot, row_bytes, order, done);
    }
    for (size_t k = 0; k < order.size(); ++k) {
      const uint64_t id = held[order[k]];
      std::memcpy(arrays[t].ids.data() + k * sizeof(uint64_t), &id, sizeof id);
    }
  }
  return Status::Ok();
}

}  // namespace ps
