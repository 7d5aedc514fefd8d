#include "store/snapshot.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <iterator>
#include <vector>

#include "common/hash_slots.h"

namespace ps {

void EncodeRowUse(const RowUse& use, std::byte* out) {
  std::memcpy(out, &use.seq, 8);
  std::memcpy(out + 8, &use.clock, 4);
  std::memcpy(out + 12, &use.uses, 4);
}

RowUse DecodeRowUse(const std::byte* in) {
  RowUse use;
  std::memcpy(&use.seq, in, 8);
  std::memcpy(&use.clock, in + 8, 4);
  std::memcpy(&use.uses, in + 12, 4);
  return use;
}

size_t TableSnapshot::SharedRunOf(uint64_t row) const {
  const auto after =
      std::upper_bound(shared.begin(), shared.end(), row,
                       [](uint64_t r, const SharedRows& run) { return r < run.first; });
  return static_cast<size_t>(after - shared.begin()) - 1;
}

SharedHashedRows::Row SharedHashedRows::Read(uint64_t r, float* floats, RowUse* use) const {
  const uint64_t c = r >> chunk_shift;
  const uint64_t at = r & (chunk_rows - 1);
  const size_t row_bytes = row_floats * sizeof(float);
  Row out;
  const auto from_entry = [&](const std::byte* entry) {
    std::memcpy(&out.id, entry, sizeof(out.id));
    if (floats != nullptr) std::memcpy(floats, entry + 8, row_bytes - 8);
    if (use != nullptr && use_bytes != 0) std::memcpy(use, entry + row_bytes, sizeof(RowUse));
    if (stamps) std::memcpy(&out.stamp, entry + row_bytes + use_bytes, sizeof(out.stamp));
  };
  if (const std::byte* entry = saved->Find(r); entry != nullptr) {
    from_entry(entry);
    return out;
  }
  // From the store's memory; then, should the store have saved the row
  // meanwhile (before changing it), from its save (SavedRows).
  const Chunk& chunk = chunks[c];
  const float* row = chunk.rows + at * row_floats;
  std::memcpy(&out.id, row, sizeof(out.id));
  if (floats != nullptr) std::memcpy(floats, row + 2, row_bytes - 8);
  if (use != nullptr && use_bytes != 0) std::memcpy(use, chunk.uses + at * use_bytes, sizeof(RowUse));
  if (stamps) out.stamp = chunk.stamps[at];
  std::atomic_thread_fence(std::memory_order_acquire);
  if (const std::byte* entry = saved->Find(r); entry != nullptr) from_entry(entry);
  return out;
}

void SharedHashedRows::Done(uint64_t c) const { saved->Done(c); }

void TableSnapshot::ListPatchedRows() {
  if (patched_marks.empty()) return;
  // Ascending, block after block; a row inside a run written whole (the
  // runs reach into neighbouring blocks) is written with the run.
  uint64_t at = SharedRowCount();
  size_t range = 0;
  std::vector<SharedRows> kept;
  for (size_t k = 0; k < patched_marks.size(); ++k) {
    const PatchedMarks& m = patched_marks[k];
    SharedRows& run = patched_blocks[k];
    run.first = at;
    run.rows = 0;
    const uint64_t words = (m.end_row + 63) / 64 - m.first_row / 64;
    for (uint64_t j = 0; j < words; ++j) {
      for (uint64_t bits = patched_bits[m.word + j]; bits != 0; bits &= bits - 1) {
        const uint64_t r = (m.first_row / 64 + j) * 64 + std::countr_zero(bits);
        const uint64_t row = owned.begin + r;
        while (range < changed.size() && changed[range].end <= row) ++range;
        if (range < changed.size() && changed[range].Contains(row)) continue;
        patched.push_back(row);
        patched_at.push_back(static_cast<uint32_t>(r - m.first_row));
        ++run.rows;
      }
    }
    at += run.rows;
    if (run.rows > 0) kept.push_back(std::move(run));
  }
  patched_blocks = std::move(kept);
  patched_marks.clear();
  patched_bits = {};
}

void TableSnapshot::ListSharedRows() {
  ListPatchedRows();
  if (!shares_hashed_rows() || !hashed_left.empty()) return;
  // In the order of the checkpoint's keys: by hash slot, then id.
  struct Key {
    uint32_t slot;
    uint32_t row;
    uint64_t id;
  };
  const SharedHashedRows& h = hashed_rows;
  const uint64_t seed = NameHash(name);
  std::vector<Key> order;
  order.reserve(h.changes_only ? 0 : h.rows);
  for (uint64_t r = 0; r < h.rows; ++r) {
    const SharedHashedRows::Row row = h.Read(r, nullptr, nullptr);
    if (h.changes_only && row.stamp <= h.since) continue;
    order.push_back({IdSlot(row.id, seed, hash_slots), static_cast<uint32_t>(r), row.id});
  }
  std::sort(order.begin(), order.end(), [](const Key& a, const Key& b) {
    return a.slot != b.slot ? a.slot < b.slot : a.id < b.id;
  });
  ids.resize(order.size());
  hashed_at.resize(order.size());
  hashed_left.assign(h.chunks.size(), 0);
  for (size_t i = 0; i < order.size(); ++i) {
    ids[i] = order[i].id;
    hashed_at[i] = order[i].row;
    ++hashed_left[order[i].row >> h.chunk_shift];
  }
  stored_rows = h.rows;
  hashed_released = 0;
}

void TableSnapshot::ReleaseHashedChunk(uint64_t c) {
  hashed_rows.Done(c);
  hashed_rows.chunks[c] = SharedHashedRows::Chunk();
}

void TableSnapshot::CopyShared() {
  ListPatchedRows();
  if (!shared.empty() || !patched_blocks.empty()) {
    // A range table's runs, then its patched rows (shared, or already in
    // the arrays).
    const uint64_t held = SharedRowCount() + (!patched_blocks.empty() ? patched.size()
                                              : dim == 0             ? 0
                                                                     : values.size() / dim);
    std::vector<float> flat;
    std::vector<std::vector<float>> flat_slots(slots.size());
    flat.reserve(static_cast<size_t>(held) * dim);
    ForEachPiece(0, held, [&](const RowPiece& piece) {
      const size_t n = static_cast<size_t>(piece.rows) * dim;
      flat.insert(flat.end(), piece.values, piece.values + n);
      for (size_t k = 0; k < slots.size(); ++k) {
        flat_slots[k].insert(flat_slots[k].end(), piece.slots[k], piece.slots[k] + n);
      }
    });
    values = std::move(flat);
    slots = std::move(flat_slots);
    shared.clear();
    patched_blocks.clear();
    patched_at.clear();
    return;
  }
  if (!shares_hashed_rows()) return;
  ListSharedRows();
  const size_t n = ids.size();
  values.resize(n * dim);
  for (std::vector<float>& slot : slots) slot.resize(n * dim);
  if (row_uses) uses.resize(n);
  std::vector<float> row(hashed_rows.row_floats);
  for (size_t i = 0; i < n; ++i) {
    hashed_rows.Read(hashed_at[i], row.data(), row_uses ? &uses[i] : nullptr);
    std::memcpy(values.data() + i * dim, row.data(), dim * sizeof(float));
    for (size_t k = 0; k < slots.size(); ++k) {
      std::memcpy(slots[k].data() + i * dim, row.data() + (k + 1) * dim, dim * sizeof(float));
    }
  }
  hashed_rows = SharedHashedRows();
  hashed_at.clear();
  hashed_left.clear();
  hashed_released = 0;
}

size_t TableSnapshot::PatchedBlockOf(uint64_t row) const {
  const auto after =
      std::upper_bound(patched_blocks.begin(), patched_blocks.end(), row,
                       [](uint64_t r, const SharedRows& run) { return r < run.first; });
  return static_cast<size_t>(after - patched_blocks.begin()) - 1;
}

void TableSnapshot::ReleaseShared(uint64_t end) {
  if (shares_hashed_rows()) {
    if (hashed_released == 0) {
      // The writer began: the chunks with none of its rows (a delta's) go
      // back now.
      for (size_t c = 0; c < hashed_left.size(); ++c) {
        if (hashed_left[c] == 0) ReleaseHashedChunk(c);
      }
    }
    for (; hashed_released < end && hashed_released < hashed_at.size(); ++hashed_released) {
      const uint64_t c = hashed_at[hashed_released] >> hashed_rows.chunk_shift;
      if (--hashed_left[c] == 0) ReleaseHashedChunk(c);
    }
    return;
  }
  // The runs ending by `end`, newest first, up to the first one already
  // released: a writer releasing in row order touches each run once.
  for (std::vector<SharedRows>* runs : {&shared, &patched_blocks}) {
    const auto after = std::upper_bound(
        runs->begin(), runs->end(), end,
        [](uint64_t e, const SharedRows& run) { return e < run.first + run.rows; });
    for (auto it = std::make_reverse_iterator(after); it != runs->rend(); ++it) {
      if (it->holder == nullptr) break;
      it->holder.reset();
      it->values = nullptr;
      it->slots = {};
    }
  }
}

namespace {

std::string RangeText(const RowRange& r) {
  return "[" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
}

// The first difference of layout (shard, shard count, tables) as
// "<what> <a> in the checkpoint but <b> in the job", or "" when none.
// With `placement` false, what only a shard count fixes is left out: the
// shard and shard count, each table's owned rows, and a hashed table's
// bound.
std::string LayoutDifference(const ShardSnapshot& saved, const ShardSnapshot& expected,
                             bool placement = true) {
  const auto differ = [](const std::string& what, const std::string& in_saved,
                         const std::string& in_job) {
    return what + " " + in_saved + " in the checkpoint but " + in_job + " in the job";
  };
  if (placement && saved.num_shards != expected.num_shards) {
    return differ("the shard count is", std::to_string(saved.num_shards),
                  std::to_string(expected.num_shards));
  }
  if (placement && saved.shard != expected.shard) {
    return differ("the shard is", std::to_string(saved.shard), std::to_string(expected.shard));
  }
  if (saved.tables.size() != expected.tables.size()) {
    return differ("the table count is", std::to_string(saved.tables.size()),
                  std::to_string(expected.tables.size()));
  }
  for (size_t i = 0; i < saved.tables.size(); ++i) {
    const TableSnapshot& a = saved.tables[i];
    const TableSnapshot& b = expected.tables[i];
    if (a.name != b.name) {
      return differ("table " + std::to_string(i) + " is", "'" + a.name + "'", "'" + b.name + "'");
    }
    const std::string table = "table '" + a.name + "' has";
    if (a.hashed != b.hashed) {
      return differ(table, a.hashed ? "keys hashed" : "keys range",
                    b.hashed ? "hashed" : "range");
    }
    if (a.hash_slots != b.hash_slots) {
      return differ(table, std::to_string(a.hash_slots) + " hash slots",
                    std::to_string(b.hash_slots));
    }
    if (a.sketch_width != b.sketch_width) {
      return differ(table, "an admission sketch of width " + std::to_string(a.sketch_width),
                    std::to_string(b.sketch_width));
    }
    if (a.row_uses != b.row_uses) {
      return differ(table, a.row_uses ? "eviction (rows with their uses)" : "no eviction",
                    b.row_uses ? "eviction" : "none");
    }
    if (placement && a.hashed && a.stored_rows > b.max_rows) {
      return table + " " + std::to_string(a.stored_rows) +
             " rows on this shard in the checkpoint, more than its bound of " +
             std::to_string(b.max_rows) + " rows in the job (max_rows or max_mb)";
    }
    if (a.rows != b.rows) {
      return differ(table, std::to_string(a.rows) + " rows", std::to_string(b.rows));
    }
    if (a.dim != b.dim) {
      return differ(table, "dim " + std::to_string(a.dim), std::to_string(b.dim));
    }
    if (placement && a.owned != b.owned) {
      return differ(table, "owned rows " + RangeText(a.owned), RangeText(b.owned));
    }
    if (a.optimizer != b.optimizer) {
      return differ(table, "optimizer \"" + a.optimizer + "\"", "\"" + b.optimizer + "\"");
    }
    // A generation of format 4 or older did not record them.
    if (!a.settings.empty() && a.settings != b.settings) {
      return differ(table, "settings \"" + a.settings + "\"", "\"" + b.settings + "\"");
    }
  }
  return "";
}

}  // namespace

Status CheckRestorable(const ShardSnapshot& saved, const ShardSnapshot& expected,
                       const std::string& where) {
  static const std::string kHint =
      "; start the job with the config it was written with, or a new checkpoint.dir";
  const std::string layout = LayoutDifference(saved, expected);
  if (saved.fingerprint != expected.fingerprint) {
    // The fingerprint covers the layout: name the concrete difference first
    // when there is one.
    const std::string fingerprints = "the model's fingerprint is \"" + saved.fingerprint +
                                     "\" in the checkpoint but \"" + expected.fingerprint +
                                     "\" in the job";
    return FailedPreconditionError(
        where + ": " + (layout.empty() ? fingerprints : layout + " (" + fingerprints + ")") +
        kHint);
  }
  if (!layout.empty()) return FailedPreconditionError(where + ": " + layout + kHint);
  return Status::Ok();
}

Status CheckReshardable(const ShardSnapshot& saved, const ShardSnapshot& expected,
                        const std::string& where) {
  static const std::string kHint =
      "; resume with the job file the checkpoint was written with (only cluster.servers and the "
      "tables' max_rows or max_mb may differ), or start with a new checkpoint.dir";
  std::string difference = LayoutDifference(saved, expected, /*placement=*/false);
  if (difference.empty() && (saved.num_shards == 0 || saved.shard >= saved.num_shards)) {
    difference = "it says it was written by shard " + std::to_string(saved.shard) + " of " +
                 std::to_string(saved.num_shards);
  }
  for (size_t i = 0; difference.empty() && i < saved.tables.size(); ++i) {
    const TableSnapshot& t = saved.tables[i];
    const RowRange owned = ShardRows(t.hashed ? t.hash_slots : t.rows, saved.num_shards, saved.shard);
    if (t.owned != owned) {
      difference = "table '" + t.name + "' has " + (t.hashed ? "hash slots " : "rows ") +
                   RangeText(t.owned) + " on shard " + std::to_string(saved.shard) + " of " +
                   std::to_string(saved.num_shards) + ", which owns " + RangeText(owned);
    }
  }
  if (difference.empty()) return Status::Ok();
  return FailedPreconditionError(where + ": " + difference + kHint);
}

}  // namespace ps
