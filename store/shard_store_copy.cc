// ShardStore's copies of its state (store/shard_store.h): the snapshot a
// checkpoint writes (a full one: a delta's is in shard_store_delta.cc), a
// backup's rows and sums, the values a test or a joining copy reads, and
// the checksum replicas compare. None of it is on the push or pull path.
#include <algorithm>
#include <bit>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/hash_slots.h"
#include "store/shard_store.h"

namespace ps {

namespace {

// FNV-1a over 64-bit words (each float's bits, an id, a clock), with a
// final mix: a few GB/s, where a byte at a time would hold a large shard's
// STATS up.
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;
uint64_t AddWord(uint64_t h, uint64_t word) { return (h ^ word) * 0x100000001b3ull; }
uint64_t AddFloats(uint64_t h, const float* floats, size_t n) {
  for (size_t i = 0; i < n; ++i) h = AddWord(h, std::bit_cast<uint32_t>(floats[i]));
  return h ^ n;
}
uint64_t Finish(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  return x ^ (x >> 33);
}

}  // namespace

uint64_t ShardStore::Checksum(uint32_t table) const {
  const Table& t = tables_[table];
  uint64_t h = kFnvBasis;
  for (const auto& b : t.blocks) {
    h = AddFloats(h, b->values.data(), b->values.size());
    for (uint32_t k = 0; k < t.slots; ++k) h = AddFloats(h, b->slots[k].data(), b->slots[k].size());
  }
  if (t.hashed != nullptr) {
    // Each row hashed on its own (its id, then its floats) and the hashes
    // summed: the same rows in any order give the same checksum.
    uint64_t rows = 0;
    const HashedRows& hashed = *t.hashed;
    for (uint64_t r = 0; r < hashed.size(); ++r) {
      rows += Finish(AddFloats(AddWord(kFnvBasis, hashed.id(r)), hashed.row(r), hashed.stride()));
    }
    h = AddWord(h, Finish(rows ^ hashed.size()));
  }
  // The sums not applied yet, in clock order: a replica without one would
  // apply another update at that clock's end. A hashed sum's rows in their
  // order, which its apply follows (and with it eviction).
  for (const auto& [clock, clock_sums] : sums_) {
    const TableSum& sum = clock_sums[table];
    if (sum.values.empty() && sum.hashed == nullptr) continue;
    h = AddWord(h, static_cast<uint64_t>(clock));
    h = AddFloats(h, sum.values.data(), sum.values.size());
    for (const bool touched : sum.touched) h = AddWord(h, touched ? 1 : 0);
    if (sum.hashed == nullptr) continue;
    for (uint64_t r = 0; r < sum.hashed->size(); ++r) {
      h = AddFloats(AddWord(h, sum.hashed->id(r)), sum.hashed->row(r), sum.hashed->stride());
    }
    h = AddWord(h, sum.hashed->size());
  }
  return Finish(h);
}

ShardSnapshot ShardStore::Layout(const JobOptions& job, uint32_t shard, int64_t clock) const {
  ShardSnapshot snapshot;
  snapshot.shard = shard;
  snapshot.num_shards = static_cast<uint32_t>(job.cluster.servers.size());
  snapshot.clock = clock;
  snapshot.fingerprint = job.Fingerprint();
  for (size_t i = 0; i < tables_.size(); ++i) {
    const Table& t = tables_[i];
    TableSnapshot ts;
    ts.name = t.layout.name;
    ts.rows = t.layout.rows;
    ts.dim = t.layout.dim;
    ts.owned = t.layout.owned;
    ts.optimizer = OptimizerDescription(t.optimizer);
    ts.slots.resize(t.slots);
    if (t.hashed != nullptr) {
      ts.hashed = true;
      ts.hash_slots = t.layout.slots;
      ts.stored_rows = t.hashed->size();
      ts.max_rows = t.hashed->max_rows();
      ts.sketch_width = t.sketch != nullptr ? t.sketch->width() : 0;
      ts.row_uses = t.hashed->tracks_use();
      ts.settings = job.tables[i].HashedSettings();
    }
    snapshot.tables.push_back(std::move(ts));
  }
  return snapshot;
}

uint64_t ShardStore::snapshot_saves() const {
  uint64_t saves = 0;
  for (const Table& t : tables_) {
    if (t.hashed != nullptr) saves += t.hashed->saves();
  }
  return saves;
}

StatusOr<ShardSnapshot> ShardStore::Snapshot(const JobOptions& job, uint32_t shard,
                                             int64_t clock) const {
  return TakeSnapshot(job, shard, clock, /*share=*/false);
}

StatusOr<ShardSnapshot> ShardStore::SharedSnapshot(const JobOptions& job, uint32_t shard,
                                                   int64_t clock) const {
  return TakeSnapshot(job, shard, clock, /*share=*/true);
}

StatusOr<ShardSnapshot> ShardStore::TakeSnapshot(const JobOptions& job, uint32_t shard,
                                                 int64_t clock, bool share) const {
  ShardSnapshot snapshot = Layout(job, shard, clock);
  try {
    for (size_t i = 0; i < tables_.size(); ++i) {
      const auto table = static_cast<uint32_t>(i);
      const Table& t = tables_[i];
      TableSnapshot& ts = snapshot.tables[i];
      if (t.hashed != nullptr) {
        // The rows stay in the store's chunks (a row changed while they are
        // held is saved first); the writer lists them
        // (TableSnapshot::ListSharedRows), or they are copied now.
        ts.hashed_rows = t.hashed->Share();
        ts.stored_rows = t.hashed->size();
        if (!share) ts.CopyShared();
        const std::span<const std::byte> sketch = SketchData(table);
        ts.sketch.assign(sketch.begin(), sketch.end());
        continue;
      }
      if (!share) {
        ts.values = CopyValues(table);
        for (uint32_t slot = 0; slot < ts.slots.size(); ++slot) {
          ts.slots[slot] = CopySlot(table, slot);
        }
        continue;
      }
      // A reference to each block, counted as a whole holder: a push into
      // one meanwhile copies it, optimizer state included (Writable).
      ts.shared.reserve(t.blocks.size());
      uint64_t first = 0;
      for (uint64_t block = 0; block < t.blocks.size(); ++block) {
        const uint64_t rows =
            t.blocks[block]->values.size() / std::max<uint32_t>(1, t.layout.dim);
        ts.shared.push_back(ShareRows(t, block, 0, rows, first));
        first += rows;
      }
    }
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("shard " + std::to_string(shard) +
                                  ": not enough memory for a checkpoint's copy of the tables");
  }
  return snapshot;
}

uint64_t ShardStore::HashedRowsPerCopy(uint32_t table) const {
  constexpr uint64_t kCopyFloats = 256 * 1024;  // 1 MiB
  return std::max<uint64_t>(1, kCopyFloats / tables_[table].hashed->stride());
}

Status ShardStore::CopyIds(uint32_t table, uint64_t first, uint64_t count,
                           std::vector<Frame>* frames) const {
  const HashedRows& rows = *tables_[table].hashed;
  const size_t stride = rows.stride();
  PS_ASSIGN_OR_RETURN(Frame ids, Frame::Allocate(count * sizeof(uint64_t)));
  PS_ASSIGN_OR_RETURN(Frame floats, Frame::Allocate(count * stride * sizeof(float)));
  PS_ASSIGN_OR_RETURN(Frame uses, Frame::Allocate(rows.tracks_use() ? count * kRowUseBytes : 0));
  std::byte* id_out = ids.mutable_data();
  std::byte* row_out = floats.mutable_data();
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t id = rows.id(first + i);
    std::memcpy(id_out + i * sizeof(uint64_t), &id, sizeof(id));
    std::memcpy(row_out + i * stride * sizeof(float), rows.row(first + i), stride * sizeof(float));
    if (rows.tracks_use()) EncodeRowUse(rows.use(first + i), uses.mutable_data() + i * kRowUseBytes);
  }
  frames->push_back(std::move(ids));
  frames->push_back(std::move(floats));
  if (rows.tracks_use()) frames->push_back(std::move(uses));
  return Status::Ok();
}

Status ShardStore::RestoreIds(uint32_t table, std::span<const uint64_t> ids,
                              const std::byte* rows, const std::byte* uses) {
  Table& t = tables_[table];
  const size_t bytes = t.hashed->stride() * sizeof(float);
  for (size_t i = 0; i < ids.size(); ++i) {
    RowUse use;
    if (uses != nullptr) use = DecodeRowUse(uses + i * kRowUseBytes);
    float* row = t.hashed->Restore(ids[i], uses != nullptr ? &use : nullptr);
    if (row == nullptr) {
      return DataLossError("table '" + t.layout.name + "' has no room for id " +
                           std::to_string(ids[i]) + ": it holds its bound of " +
                           std::to_string(t.hashed->max_rows()) +
                           " rows; the primary's job holds more (max_rows or max_mb differ)");
    }
    std::memcpy(row, rows + i * bytes, bytes);
  }
  return Status::Ok();
}

std::vector<float> ShardStore::CopyValues(uint32_t table) const {
  std::vector<float> all;
  all.reserve(tables_[table].layout.owned.size() * tables_[table].layout.dim);
  for (const auto& b : tables_[table].blocks) all.insert(all.end(), b->values.begin(), b->values.end());
  return all;
}

void ShardStore::CopySums(int64_t below, std::vector<Frame>* frames,
                          std::vector<int64_t>* index) const {
  for (auto it = sums_.begin(); it != sums_.end() && it->first < below; ++it) {
    for (uint32_t table = 0; table < it->second.size(); ++table) {
      const TableSum& sum = it->second[table];
      int64_t count = 0;
      if (sum.hashed != nullptr) {
        // Its ids and rows in its own order: the backup makes them in the
        // same order and applies them in it, as this shard does.
        const HashedRows& rows = *sum.hashed;
        const size_t dim = rows.dim();
        std::vector<uint64_t> ids(rows.size());
        std::vector<float> values(rows.size() * dim);
        for (uint64_t r = 0; r < rows.size(); ++r) {
          ids[r] = rows.id(r);
          std::memcpy(values.data() + r * dim, rows.row(r), dim * sizeof(float));
        }
        frames->push_back(Frame::CopyOf(ids.data(), ids.size() * sizeof(uint64_t)));
        frames->push_back(Frame::CopyOf(values.data(), values.size() * sizeof(float)));
        count = static_cast<int64_t>(rows.size());
      } else if (!sum.values.empty()) {
        frames->push_back(Frame::CopyOf(sum.values.data(), sum.values.size() * sizeof(float)));
        std::vector<uint8_t> touched(sum.touched.begin(), sum.touched.end());
        frames->push_back(Frame::CopyOf(touched.data(), touched.size()));
        count = static_cast<int64_t>(touched.size());
      } else {
        continue;  // no push reached the table at this clock
      }
      index->push_back(it->first);
      index->push_back(table);
      index->push_back(count);
    }
  }
}

StatusOr<ShardStore::PendingSum> ShardStore::SumFromFrames(int64_t clock, int64_t table,
                                                           int64_t count, const Frame& first,
                                                           const Frame& second) const {
  if (table < 0 || static_cast<uint64_t>(table) >= tables_.size()) {
    return InvalidArgumentError("a sum of table index " + std::to_string(table) +
                                "; the shard has " + std::to_string(tables_.size()) + " tables");
  }
  const Table& t = tables_[table];
  const std::string what =
      "a sum of clock " + std::to_string(clock) + " of table '" + t.layout.name + "'";
  if (clock < 0 || clock >= kMaxClock) return InvalidArgumentError(what + ": no such clock");
  PendingSum sum;
  sum.clock = clock;
  sum.table = static_cast<uint32_t>(table);
  if (t.hashed == nullptr) {
    if (first.size() % sizeof(float) != 0) {
      return InvalidArgumentError(what + " of " + std::to_string(first.size()) +
                                  " bytes of values, not whole floats");
    }
    if (count < 0 || static_cast<uint64_t>(count) != second.size()) {
      return InvalidArgumentError(what + " counted as " + std::to_string(count) +
                                  " blocks with touched bytes for " +
                                  std::to_string(second.size()));
    }
    sum.values.resize(first.size() / sizeof(float));
    std::memcpy(sum.values.data(), first.data(), first.size());
    const auto* touched = reinterpret_cast<const uint8_t*>(second.data());
    sum.touched.assign(touched, touched + second.size());
    PS_RETURN_IF_ERROR(CheckSum(sum));
    return sum;
  }
  // A hashed table's: `count` ids and as many rows, checked before
  // anything is allocated for them.
  const uint64_t bound = t.hashed->max_rows();
  const size_t dim = t.layout.dim;
  if (count < 0 || static_cast<uint64_t>(count) > bound) {
    return InvalidArgumentError(what + " of " + std::to_string(count) +
                                " ids; the table holds at most " + std::to_string(bound) +
                                " rows on this shard");
  }
  const auto n = static_cast<uint64_t>(count);
  if (first.size() != n * sizeof(uint64_t)) {
    return InvalidArgumentError(what + " of " + std::to_string(n) + " ids with an ids frame of " +
                                std::to_string(first.size()) + " bytes, not " +
                                std::to_string(n * sizeof(uint64_t)));
  }
  if (second.size() != n * dim * sizeof(float)) {
    return InvalidArgumentError(what + " of " + std::to_string(n) + " ids with a rows frame of " +
                                std::to_string(second.size()) + " bytes, not " +
                                std::to_string(n * dim * sizeof(float)) + " (" +
                                std::to_string(dim) + " floats a row)");
  }
  sum.hashed = std::make_unique<HashedRows>(t.layout.dim, 0, InitOptions(), bound);
  std::vector<uint64_t> scratch;
  const std::span<const uint64_t> ids = FrameAs<uint64_t>(first, &scratch);
  const std::byte* rows = second.data();
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t size = sum.hashed->size();
    float* row = sum.hashed->Restore(ids[i], nullptr);
    if (row == nullptr || sum.hashed->size() == size) {
      return InvalidArgumentError(what + " names id " + std::to_string(ids[i]) + " twice");
    }
    std::memcpy(row, rows + i * dim * sizeof(float), dim * sizeof(float));
  }
  PS_RETURN_IF_ERROR(CheckSum(sum));
  return sum;
}

Status ShardStore::RestoreSum(PendingSum sum) {
  PS_RETURN_IF_ERROR(CheckSum(sum));
  std::vector<TableSum>& clock_sums = sums_[sum.clock];
  if (clock_sums.empty()) clock_sums.resize(tables_.size());
  clock_sums[sum.table] =
      TableSum{std::move(sum.values), std::move(sum.touched), std::move(sum.hashed)};
  return Status::Ok();
}

Status ShardStore::CheckSum(const PendingSum& sum) const {
  if (sum.table >= tables_.size()) {
    return InvalidArgumentError("a sum of table index " + std::to_string(sum.table) + "; " +
                                std::to_string(tables_.size()) + " tables");
  }
  const Table& t = tables_[sum.table];
  const std::string what =
      "a sum of clock " + std::to_string(sum.clock) + " of table '" + t.layout.name + "'";
  if (sum.clock < 0 || sum.clock >= kMaxClock) {
    return InvalidArgumentError(what + ": no such clock");
  }
  if (t.hashed == nullptr) {
    if (sum.hashed != nullptr) {
      return InvalidArgumentError(what + " holds rows by id; the table is not a hashed table");
    }
    if (sum.values.size() != t.layout.owned.size() * t.layout.dim ||
        sum.touched.size() != t.blocks.size()) {
      return InvalidArgumentError(what + " of " + std::to_string(sum.values.size()) +
                                  " values and " + std::to_string(sum.touched.size()) +
                                  " blocks; the table holds " +
                                  std::to_string(t.layout.owned.size() * t.layout.dim) +
                                  " values in " + std::to_string(t.blocks.size()) + " blocks");
    }
    return Status::Ok();
  }
  const HashedRows* rows = sum.hashed.get();
  if (rows == nullptr || !sum.values.empty() || !sum.touched.empty()) {
    return InvalidArgumentError(what + " without its rows by id; the table is a hashed table");
  }
  if (rows->dim() != t.layout.dim || rows->slots() != 0 ||
      rows->max_rows() != t.hashed->max_rows()) {
    return InvalidArgumentError(what + " of rows of " + std::to_string(rows->dim()) +
                                " values and a bound of " + std::to_string(rows->max_rows()) +
                                " rows; the table's rows hold " + std::to_string(t.layout.dim) +
                                " values, at most " + std::to_string(t.hashed->max_rows()));
  }
  const TableLayout& layout = t.layout;
  for (uint64_t r = 0; r < rows->size(); ++r) {
    const uint32_t slot = IdSlot(rows->id(r), layout.hash_seed, layout.slots);
    if (!layout.owned.Contains(slot)) {
      return InvalidArgumentError(
          what + " names id " + std::to_string(rows->id(r)) + " of hash slot " +
          std::to_string(slot) + ", outside this shard's slots [" +
          std::to_string(layout.owned.begin) + ", " + std::to_string(layout.owned.end) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace ps
