// ShardStore's restores (store/shard_store.h): a whole snapshot (Restore),
// a checkpoint read's runs of rows, ids and removed ids as they come
// (RestoreRows, RestoreRemoved), and a range table's rows from several
// threads at once (BeginConcurrentRestore, RestoreRangeRows: each call
// writes only the floats of its own rows). A joining replica's rows are
// taken in shard_store_copy.cc (RestoreIds).
#include <cstring>
#include <span>
#include <vector>

#include "store/block_memory.h"
#include "store/shard_store.h"

namespace ps {

void ShardStore::Restore(const ShardSnapshot& snapshot) {
  for (size_t i = 0; i < tables_.size(); ++i) {
    const TableSnapshot& ts = snapshot.tables[i];
    const auto table = static_cast<uint32_t>(i);
    if (ts.hashed) {
      if (!ts.sketch.empty()) RestoreSketch(table, ts.sketch);
      // Rows shared with a store and not listed yet: listed on a copy
      // (the chunks stay shared), in key order as a checkpoint gives them.
      TableSnapshot listed;
      const TableSnapshot* from = &ts;
      if (ts.shares_hashed_rows() && ts.hashed_left.empty()) {
        listed = ts;
        listed.ListSharedRows();
        from = &listed;
      }
      // A row at a time, as a checkpoint read delivers them.
      const bool uses = from->shares_hashed_rows() ? from->row_uses : !from->uses.empty();
      uint64_t r = 0;
      from->ForEachPiece(0, from->ids.size(), [&](const RowPiece& piece) {
        for (uint64_t in = 0; in < piece.rows; ++in, ++r) {
          const std::byte* slots[kMaxOptimizerSlots];
          for (size_t k = 0; k < from->slots.size(); ++k) {
            slots[k] = reinterpret_cast<const std::byte*>(piece.slots[k] + in * from->dim);
          }
          std::byte use[kRowUseBytes];
          if (uses) EncodeRowUse(from->UseOf(r), use);
          RestoreRows(table, from->ids[r], 1,
                      reinterpret_cast<const std::byte*>(piece.values + in * from->dim),
                      std::span<const std::byte* const>(slots, from->slots.size()),
                      uses ? use : nullptr);
        }
      });
      continue;
    }
    uint64_t row = ts.owned.begin;
    ts.ForEachPiece(0, ts.RowCount(), [&](const RowPiece& piece) {
      const std::byte* slots[kMaxOptimizerSlots];
      for (size_t k = 0; k < ts.slots.size(); ++k) {
        slots[k] = reinterpret_cast<const std::byte*>(piece.slots[k]);
      }
      RestoreRows(table, row, piece.rows, reinterpret_cast<const std::byte*>(piece.values),
                  std::span<const std::byte* const>(slots, ts.slots.size()));
      row += piece.rows;
    });
  }
}

bool ShardStore::RestoreRemoved(uint32_t table, uint64_t id) {
  return tables_[table].hashed->Erase(id);
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
  ForEachBlockRun(t, first - t.layout.owned.begin, count,
                  [&](uint64_t block, uint64_t /*in_block*/, uint64_t /*n*/) { Writable(t, block); });
  RestoreRangeRows(table, first, count, values, slots);
}

void ShardStore::BeginConcurrentRestore() {
  for (Table& t : tables_) {
    if (t.hashed != nullptr) continue;
    t.bounded = false;  // measured again on the next push
    for (uint64_t block = 0; block < t.blocks.size(); ++block) Writable(t, block);
  }
}

void ShardStore::RestoreRangeRows(uint32_t table, uint64_t first, uint64_t count,
                                  const std::byte* values,
                                  std::span<const std::byte* const> slots) {
  // Only the blocks' floats are written: the blocks themselves, the table
  // and the store are read, so calls on disjoint rows may run at once.
  const Table& t = tables_[table];
  const size_t row_bytes = size_t{t.layout.dim} * sizeof(float);
  size_t done = 0;  // bytes of each array consumed
  ForEachBlockRun(t, first - t.layout.owned.begin, count,
                  [&](uint64_t block, uint64_t in_block, uint64_t n) {
                    Block* b = t.blocks[block].get();
                    if (in_block == 0) {
                      // The writer of a block's first rows backs all of its
                      // pages at once (a store from CreateUnwritten has none).
                      PrefaultBlockMemory(b->values.data(), b->values.size() * sizeof(float));
                      for (size_t k = 0; k < slots.size(); ++k) {
                        PrefaultBlockMemory(b->slots[k].data(), b->slots[k].size() * sizeof(float));
                      }
                    }
                    const size_t offset = static_cast<size_t>(in_block) * t.layout.dim;
                    const size_t bytes = static_cast<size_t>(n) * row_bytes;
                    std::memcpy(b->values.data() + offset, values + done, bytes);
                    for (size_t k = 0; k < slots.size(); ++k) {
                      std::memcpy(b->slots[k].data() + offset, slots[k] + done, bytes);
                    }
                    done += bytes;
                  });
}

}  // namespace ps
