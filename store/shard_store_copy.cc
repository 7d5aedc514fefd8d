// ShardStore's copies of its state (store/shard_store.h): the snapshot a
// checkpoint writes and a restore reads back, a backup's rows and sums, the
// values a test or a joining copy reads, and the checksum replicas compare.
// None of it is on the push or pull path.
#include <algorithm>
#include <bit>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

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
  for (const Table& t : tables_) {
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
    }
    snapshot.tables.push_back(std::move(ts));
  }
  return snapshot;
}

StatusOr<ShardSnapshot> ShardStore::Snapshot(const JobOptions& job, uint32_t shard,
                                             int64_t clock) const {
  ShardSnapshot snapshot = Layout(job, shard, clock);
  try {
    for (size_t i = 0; i < tables_.size(); ++i) {
      const auto table = static_cast<uint32_t>(i);
      TableSnapshot& ts = snapshot.tables[i];
      if (tables_[i].hashed != nullptr) {
        CopyHashed(*tables_[i].hashed, &ts);
        const std::span<const std::byte> sketch = SketchData(table);
        ts.sketch.assign(sketch.begin(), sketch.end());
        continue;
      }
      ts.values = CopyValues(table);
      for (uint32_t slot = 0; slot < ts.slots.size(); ++slot) ts.slots[slot] = CopySlot(table, slot);
    }
  } catch (const std::bad_alloc&) {
    return ResourceExhaustedError("shard " + std::to_string(shard) +
                                  ": not enough memory for a checkpoint's copy of the tables");
  }
  return snapshot;
}

void ShardStore::Restore(const ShardSnapshot& snapshot) {
  for (size_t i = 0; i < tables_.size(); ++i) {
    const TableSnapshot& ts = snapshot.tables[i];
    std::vector<const std::byte*> slots;
    for (const std::vector<float>& slot : ts.slots) {
      slots.push_back(reinterpret_cast<const std::byte*>(slot.data()));
    }
    if (ts.hashed) {
      if (!ts.sketch.empty()) RestoreSketch(static_cast<uint32_t>(i), ts.sketch);
      // A row at a time, as a checkpoint read delivers them.
      const size_t dim = ts.dim;
      for (size_t r = 0; r < ts.ids.size(); ++r) {
        std::vector<const std::byte*> row_slots;
        for (const std::byte* slot : slots) row_slots.push_back(slot + r * dim * sizeof(float));
        std::byte use[kRowUseBytes];
        if (!ts.uses.empty()) EncodeRowUse(ts.uses[r], use);
        RestoreRows(static_cast<uint32_t>(i), ts.ids[r], 1,
                    reinterpret_cast<const std::byte*>(ts.values.data() + r * dim), row_slots,
                    ts.uses.empty() ? nullptr : use);
      }
      continue;
    }
    RestoreRows(static_cast<uint32_t>(i), ts.owned.begin, ts.owned.size(),
                reinterpret_cast<const std::byte*>(ts.values.data()), slots);
  }
}

void ShardStore::CopyHashed(const HashedRows& rows, TableSnapshot* ts) {
  // In ascending order of id, as the checkpoint's keys sort.
  std::vector<uint64_t> order(rows.size());
  for (uint64_t r = 0; r < rows.size(); ++r) order[r] = r;
  std::sort(order.begin(), order.end(),
            [&rows](uint64_t a, uint64_t b) { return rows.id(a) < rows.id(b); });
  const size_t dim = rows.dim();
  ts->stored_rows = rows.size();
  ts->ids.resize(rows.size());
  if (rows.tracks_use()) ts->uses.resize(rows.size());
  ts->values.resize(rows.size() * dim);
  for (std::vector<float>& slot : ts->slots) slot.resize(rows.size() * dim);
  for (size_t i = 0; i < order.size(); ++i) {
    const float* row = rows.row(order[i]);
    ts->ids[i] = rows.id(order[i]);
    if (rows.tracks_use()) ts->uses[i] = rows.use(order[i]);
    std::memcpy(ts->values.data() + i * dim, row, dim * sizeof(float));
    for (size_t k = 0; k < ts->slots.size(); ++k) {
      std::memcpy(ts->slots[k].data() + i * dim, row + (k + 1) * dim, dim * sizeof(float));
    }
  }
}

void ShardStore::RestoreRows(uint32_t table, uint64_t first, uint64_t count,
                             const std::byte* values, std::span<const std::byte* const> slots,
                             const std::byte* use) {
  Table& t = tables_[table];
  t.bounded = false;  // measured again on the next push
  const size_t row_bytes = size_t{t.layout.dim} * sizeof(float);
  if (t.hashed != nullptr) {
    // One row, `first` its id (REQUIRES of the header).
    RowUse row_use;
    if (use != nullptr) row_use = DecodeRowUse(use);
    float* row = t.hashed->Restore(first, use != nullptr ? &row_use : nullptr);
    if (row == nullptr) {  // CheckRestorable refuses more rows than the bound
      ++t.dropped_rows;
      return;
    }
    std::memcpy(row, values, row_bytes);
    for (size_t k = 0; k < slots.size(); ++k) {
      std::memcpy(row + (k + 1) * t.layout.dim, slots[k], row_bytes);
    }
    return;
  }
  size_t done = 0;  // bytes of each array consumed
  ForEachBlockRun(t, first - t.layout.owned.begin, count,
                  [&](uint64_t block, uint64_t in_block, uint64_t n) {
                    Block* b = Writable(t, block);
                    const size_t offset = static_cast<size_t>(in_block) * t.layout.dim;
                    const size_t bytes = static_cast<size_t>(n) * row_bytes;
                    std::memcpy(b->values.data() + offset, values + done, bytes);
                    for (size_t k = 0; k < slots.size(); ++k) {
                      std::memcpy(b->slots[k].data() + offset, slots[k] + done, bytes);
                    }
                    done += bytes;
                  });
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
      // A hashed table's sum is not copied: JobOptions::Validate refuses
      // replication with hashed tables.
      if (sum.values.empty()) continue;
      frames->push_back(Frame::CopyOf(sum.values.data(), sum.values.size() * sizeof(float)));
      std::vector<uint8_t> touched(sum.touched.begin(), sum.touched.end());
      frames->push_back(Frame::CopyOf(touched.data(), touched.size()));
      index->push_back(it->first);
      index->push_back(table);
    }
  }
}

Status ShardStore::RestoreSum(PendingSum sum) {
  PS_RETURN_IF_ERROR(CheckSum(sum));
  std::vector<TableSum>& clock_sums = sums_[sum.clock];
  if (clock_sums.empty()) clock_sums.resize(tables_.size());
  clock_sums[sum.table] = TableSum{std::move(sum.values), std::move(sum.touched), nullptr};
  return Status::Ok();
}

Status ShardStore::CheckSum(const PendingSum& sum) const {
  if (sum.table >= tables_.size()) {
    return InvalidArgumentError("a sum of table index " + std::to_string(sum.table) + "; " +
                                std::to_string(tables_.size()) + " tables");
  }
  const Table& t = tables_[sum.table];
  if (sum.values.size() != t.layout.owned.size() * t.layout.dim ||
      sum.touched.size() != t.blocks.size() || sum.clock < 0) {
    return InvalidArgumentError("a sum of table '" + t.layout.name + "' of " +
                                std::to_string(sum.values.size()) + " values and " +
                                std::to_string(sum.touched.size()) + " blocks at clock " +
                                std::to_string(sum.clock) + "; the table holds " +
                                std::to_string(t.layout.owned.size() * t.layout.dim) +
                                " values in " + std::to_string(t.blocks.size()) + " blocks");
  }
  return Status::Ok();
}

}  // namespace ps
