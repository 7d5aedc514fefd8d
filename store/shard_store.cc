// ShardStore (store/shard_store.h): its tables made, a push applied to a
// range table's blocks (copy-on-write: Writable) and a clock's sums under
// aggregation, a pull answered from the blocks, and blocks shared with a
// joining replica. The bounds that prove a push's results finite, and the
// rows saved to put back a refused one, are in shard_store_finite.cc;
// hashed tables in shard_store_hashed.cc; copies, snapshots and restores
// in shard_store_copy.cc, shard_store_delta.cc and shard_store_restore.cc.
#include "store/shard_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>

#include "common/hash_slots.h"
#include "common/key_range.h"
#include "common/update_rule.h"
#include "common/wire_floats.h"
#include "store/split_mix.h"

namespace ps {

namespace {

// Rows per block: about 1 MiB of values, at least one row.
constexpr uint64_t kBlockFloats = 256 * 1024;
// A dense run is updated, saved (kRefuse) and checked for results that are
// not finite in pieces of about this many floats (8 KiB per array), so the
// check reads what the update just wrote from the L1 cache.
constexpr uint64_t kCheckFloats = 2048;

}  // namespace

float InitialValue(const InitOptions& init, uint64_t row, uint32_t col) {
  switch (init.kind) {
    case InitKind::kZeros:
      return 0.0f;
    case InitKind::kConstant:
      return init.value;
    case InitKind::kUniform: {
      uint64_t r = SplitMix(init.seed ^ SplitMix(row * 0x100000001b3ull + col));
      return init.value * (2.0f * UnitFloat(r) - 1.0f);
    }
    case InitKind::kNormal: {
      uint64_t r1 = SplitMix(init.seed ^ SplitMix(row * 0x100000001b3ull + col));
      uint64_t r2 = SplitMix(r1);
      float u1 = UnitFloat(r1), u2 = UnitFloat(r2);
      return init.value * std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    }
  }
  return 0.0f;
}

StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(const JobOptions& job, uint32_t shard,
                                                        bool initialize) {
  return Make(job, shard, initialize ? Start::kInitialValues : Start::kZeros);
}

StatusOr<std::unique_ptr<ShardStore>> ShardStore::CreateUnwritten(const JobOptions& job,
                                                                 uint32_t shard) {
  return Make(job, shard, Start::kUnwritten);
}

StatusOr<std::unique_ptr<ShardStore>> ShardStore::Make(const JobOptions& job, uint32_t shard,
                                                      Start start) {
  std::unique_ptr<ShardStore> store(new ShardStore());
  store->refuse_non_finite_ = job.server.on_non_finite_result == NonFiniteResultPolicy::kRefuse;
  const auto num_shards = static_cast<uint32_t>(job.cluster.servers.size());
  // Incremental checkpoints need each hashed row's last change.
  const bool track_changes = !job.checkpoint.dir.empty() && job.checkpoint.full_every > 1;
  for (const TableOptions& t : job.tables) {
    Table table;
    table.optimizer = t.optimizer;
    table.rule = FindRule(t.optimizer.kind);
    if (table.rule == nullptr) {
      return InvalidArgumentError("table '" + t.name + "': unknown optimizer kind " +
                                  std::to_string(static_cast<int>(t.optimizer.kind)));
    }
    table.slots = t.optimizer.Slots();
    if (t.hashed()) {
      // No rows until pushes make them: the bound only.
      table.layout = {t.name,  0,    t.dim,          ShardSlots(t.HashSlots(), num_shards, shard),
                      t.wire,  true, t.HashSlots(), t.HashSeed(), num_shards};
      const uint64_t max_rows =
          t.max_rows != 0 ? t.max_rows
                          : HashedRows::RowsWithin(t.max_mb << 20, t.dim, table.slots,
                                                   t.evict.enabled(), track_changes);
      table.hashed = std::make_unique<HashedRows>(t.dim, table.slots, t.init, max_rows, t.evict);
      if (track_changes) {
        table.hashed->TrackChanges();
        table.hashed->SetStamp(static_cast<uint32_t>(store->change_epoch_));
      }
      if (t.admit.enabled()) {
        table.admit = t.admit;
        table.sketch = std::make_unique<PushSketch>(t.admit.sketch_width);
      }
      store->layouts_.push_back(table.layout);
      store->tables_.push_back(std::move(table));
      continue;
    }
    table.layout = {t.name, t.rows, t.dim, ShardRows(t.rows, num_shards, shard), t.wire};
    table.rows_per_block = std::max<uint64_t>(1, kBlockFloats / t.dim);
    const uint64_t owned = table.layout.owned.size();
    try {
      for (uint64_t first = 0; first < owned; first += table.rows_per_block) {
        const uint64_t rows = std::min(table.rows_per_block, owned - first);
        auto block = std::make_shared<Block>();
        if (start == Start::kUnwritten) {
          block->values.resize(rows * t.dim);
          for (uint32_t k = 0; k < table.slots; ++k) block->slots[k].resize(rows * t.dim);
        } else {
          block->values.assign(rows * t.dim, 0.0f);
          for (uint32_t k = 0; k < table.slots; ++k) block->slots[k].assign(rows * t.dim, 0.0f);
        }
        if (start == Start::kInitialValues && t.init.kind != InitKind::kZeros) {
          for (uint64_t r = 0; r < rows; ++r) {
            for (uint32_t c = 0; c < t.dim; ++c) {
              block->values[r * t.dim + c] =
                  InitialValue(t.init, table.layout.owned.begin + first + r, c);
            }
          }
        }
        table.blocks.push_back(std::move(block));
      }
      table.stamps.assign(table.blocks.size(), 0);
      table.sparse_stamps.assign(table.blocks.size(), 0);
      table.dirty.assign((owned + 63) / 64, 0);
    } catch (const std::bad_alloc&) {
      return ResourceExhaustedError("shard " + std::to_string(shard) + ": cannot allocate " +
                                    std::to_string(owned * t.dim * 4) + " bytes for table '" +
                                    t.name + "'; reduce its rows or run more shards");
    }
    store->layouts_.push_back(table.layout);
    store->tables_.push_back(std::move(table));
  }
  return store;
}

void ShardStore::MarkRow(Table& table, uint64_t row) {
  const uint64_t block = row / table.rows_per_block;
  if (table.sparse_stamps[block] != change_epoch_) {
    // The block's bits are of an older epoch: a snapshot took them since.
    const uint64_t first = block * table.rows_per_block;
    const uint64_t end = std::min(first + table.rows_per_block, table.layout.owned.size());
    for (uint64_t r = first; r < end;) {
      if (r % 64 == 0 && r + 64 <= end) {
        table.dirty[r / 64] = 0;
        r += 64;
      } else {
        table.dirty[r / 64] &= ~(uint64_t{1} << (r % 64));
        ++r;
      }
    }
    table.sparse_stamps[block] = change_epoch_;
  }
  table.dirty[row / 64] |= uint64_t{1} << (row % 64);
}

ShardStore::Block* ShardStore::Writable(Table& table, uint64_t block, bool whole_block) {
  std::shared_ptr<Block>& b = table.blocks[block];
  if (whole_block) table.stamps[block] = change_epoch_;
  if (b.use_count() > 1) {
    // A reply still holds this block's values: leave them to the reply and
    // write a copy. Replies never read the optimizer state, so it moves to
    // the new block instead of being copied (a third of adam's bytes).
    auto copy = std::make_shared<Block>();
    copy->values = b->values;
    // A replica's copy (ShareBlock) reads the optimizer state as well.
    const bool whole = b->whole_holders.load(std::memory_order_acquire) > 0;
    for (BlockFloats& slot : b->slots) {
      copy->slots[&slot - b->slots] = whole ? slot : std::move(slot);
    }
    b = std::move(copy);
    ++copy_on_write_count_;
  } else {
    // The I/O thread dropped its reference (release); see its reads of the
    // block before writing over them.
    std::atomic_thread_fence(std::memory_order_acquire);
    b->encoded.reset();  // the values are about to change
  }
  return b.get();
}

void ShardStore::Update(const Table& table, Block* block, size_t offset, const float* g, size_t n,
                        int64_t clock) {
  OptimizerSlots state = {};
  for (uint32_t k = 0; k < table.slots; ++k) state[k] = block->slots[k].data() + offset;
  // Adam's step t is the job's step, clock + 1: the same for every part of
  // a push and for every worker's push of one clock, and known again from
  // the clock alone after a restart.
  ApplyRule(*table.rule, table.optimizer, block->values.data() + offset, state, g, n,
            table.optimizer.LearningRate(clock), clock + 1);
}

Status ShardStore::ApplyPush(const Request& request, int64_t clock) {
  Table& t = tables_[request.header.table];
  if (t.hashed != nullptr) return ApplyHashed(t, request, clock);
  FlushSubnormals flush;  // once for all of a sparse push's rows
  const uint32_t dim = t.layout.dim;
  const uint64_t rpb = t.rows_per_block;
  const bool refuse = refuse_non_finite_;
  saved_.clear();
  undo_used_ = 0;
  // kRefuse: rows are saved before their update only when the table's
  // bounds cannot prove that the push keeps every result finite (measured:
  // saving every row halves the apply rate). The bounds are of one step:
  // a dense push updates each row once, a sparse one may name a row many
  // times, so sparse pushes (a minibatch's rows, small) always save.
  StateBounds after = {};
  const bool save = refuse && !ProvenFinite(t, request, clock, after);
  // Updates rows [row, row + rows) (global ids), which lie at `offset` of
  // `block`; false when a result is not finite, with *bad the first such row.
  uint64_t bad = 0;
  auto update = [&](Block* block, size_t offset, const float* g, uint64_t row, uint64_t rows) {
    const size_t n = static_cast<size_t>(rows) * dim;
    if (save) Save(t, block, offset, n);
    Update(t, block, offset, g, n, clock);
    if (refuse && !save) return true;  // the bounds rule out a result that is not finite
    StateBits bits;
    Magnitudes(t, *block, offset, n, bits);
    if (Finite(t, bits)) {
      Widen(&t, bits);
      return true;
    }
    bool first = true;
    for (uint64_t r = 0; r < rows; ++r) {
      if (Finite(t, *block, offset + r * dim, dim)) continue;
      ++(refuse ? t.refused_rows : t.non_finite_rows);
      if (first) bad = row + r;
      first = false;
    }
    return !refuse;  // kFlag: counted, and the push goes on
  };
  const float* g = request.values.data();
  bool ok = true;
  if (request.header.dense()) {
    // Checked pieces stay in the L1 cache between update and check; an
    // update the bounds prove finite runs over whole blocks.
    const uint64_t piece = refuse && !save
                               ? rpb
                               : std::max<uint64_t>(1, kCheckFloats / std::max<uint32_t>(1, dim));
    ForEachBlockRun(t, request.header.first_row - t.layout.owned.begin, request.header.count,
                    [&](uint64_t block, uint64_t in_block, uint64_t n) {
                      if (!ok) return;
                      Block* b = Writable(t, block);
                      for (uint64_t r = 0; r < n && ok; r += piece) {
                        const uint64_t rows = std::min(piece, n - r);
                        const uint64_t row = t.layout.owned.begin + block * rpb + in_block + r;
                        ok = update(b, (in_block + r) * dim, g, row, rows);
                        g += rows * dim;
                      }
                    });
  } else {
    uint64_t last_block = ~0ull;
    Block* base = nullptr;
    for (size_t i = 0; i < request.keys.size() && ok; ++i) {
      const uint64_t row = request.keys[i] - t.layout.owned.begin;
      const uint64_t block = row / rpb;
      if (block != last_block) {
        base = Writable(t, block, /*whole=*/false);
        last_block = block;
      }
      MarkRow(t, row);
      ok = update(base, (row % rpb) * dim, g + i * dim, request.keys[i], 1);
    }
  }
  if (ok) {
    if (refuse && !save) {
      for (uint32_t k = 0; k <= t.slots; ++k) t.bound[k] = std::max(t.bound[k], after[k]);
    }
    t.measured = false;
    return Status::Ok();
  }
  if (!save) {
    // The bounds promised a finite result: a bug, never a worker's doing.
    return InternalError("table '" + t.layout.name + "': the update of row " + std::to_string(bad) +
                         " gave a result that is not finite although the table's bounds ruled "
                         "it out; the rows before it were applied");
  }
  PutBack(t);
  return OutOfRangeError("table '" + t.layout.name + "': the update of row " +
                         std::to_string(bad) + " (" + OptimizerDescription(t.optimizer) +
                         ") gives a value or optimizer state that is not finite; no row of the "
                         "push was applied (server.on_non_finite_result: refuse). Lower the "
                         "learning rate or clip the gradients");
}

void ShardStore::Accumulate(const Request& request, int64_t clock) {
  std::vector<TableSum>& clock_sums = sums_[clock];
  if (clock_sums.empty()) clock_sums.resize(tables_.size());
  Table& t = tables_[request.header.table];
  TableSum& sum = clock_sums[request.header.table];
  const uint32_t dim = t.layout.dim;
  if (t.hashed != nullptr) {
    AccumulateHashed(t, request, &sum);
    return;
  }
  if (sum.values.empty()) {
    sum.values.assign(t.layout.owned.size() * dim, 0.0f);
    sum.touched.assign(t.blocks.size(), false);
  }
  const OptimizerOptions add{OptimizerKind::kAdd, 0.0f};
  FlushSubnormals flush;  // once for all of a sparse push's rows
  const float* g = request.values.data();
  if (request.header.dense()) {
    const uint64_t first = request.header.first_row - t.layout.owned.begin;
    ApplyUpdate(add, sum.values.data() + first * dim, g, request.header.count * dim);
    const uint64_t last = first + request.header.count - 1;
    for (uint64_t b = first / t.rows_per_block; b <= last / t.rows_per_block; ++b) {
      sum.touched[b] = true;
    }
    return;
  }
  for (size_t i = 0; i < request.keys.size(); ++i) {
    const uint64_t row = request.keys[i] - t.layout.owned.begin;
    ApplyUpdate(add, sum.values.data() + row * dim, g + i * dim, dim);
    sum.touched[row / t.rows_per_block] = true;
  }
}

uint64_t ShardStore::sum_bytes() const {
  uint64_t bytes = 0;
  for (const auto& [clock, clock_sums] : sums_) {
    for (const TableSum& sum : clock_sums) {
      bytes += sum.values.capacity() * sizeof(float) + sum.touched.capacity() / 8 +
               (sum.hashed != nullptr ? sum.hashed->bytes() : 0);
    }
  }
  return bytes;
}

void ShardStore::ApplyAccumulated(int64_t below, float scale) {
  FlushSubnormals flush;  // the scaling as well as the updates
  while (!sums_.empty() && sums_.begin()->first < below) {
    const int64_t clock = sums_.begin()->first;
    std::vector<TableSum>& clock_sums = sums_.begin()->second;
    for (size_t ti = 0; ti < clock_sums.size(); ++ti) {
      TableSum& sum = clock_sums[ti];
      Table& t = tables_[ti];
      if (sum.hashed != nullptr) {
        ApplyHashedSum(t, *sum.hashed, scale, clock);
        continue;
      }
      if (sum.values.empty()) continue;
      const uint64_t block_floats = t.rows_per_block * t.layout.dim;
      for (uint64_t b = 0; b < t.blocks.size(); ++b) {
        if (!sum.touched[b]) continue;
        float* g = sum.values.data() + b * block_floats;
        const size_t n = t.blocks[b]->values.size();
        for (size_t i = 0; i < n; ++i) g[i] *= scale;
        ApplyChecked(t, Writable(t, b), g, n, clock);
      }
    }
    sums_.erase(sums_.begin());
  }
}

void ShardStore::ApplyChecked(Table& t, Block* block, const float* g, size_t n, int64_t clock) {
  const uint32_t dim = t.layout.dim;
  const size_t piece = std::max<size_t>(1, kCheckFloats / std::max<uint32_t>(1, dim)) * dim;
  const uint32_t slots = t.slots;
  for (size_t offset = 0; offset < n; offset += piece) {
    const size_t m = std::min(piece, n - offset);
    if (refuse_non_finite_) {
      saved_.clear();
      undo_used_ = 0;
      Save(t, block, offset, m);
    }
    Update(t, block, offset, g + offset, m, clock);
    StateBits bits;
    Magnitudes(t, *block, offset, m, bits);
    if (Finite(t, bits)) {
      Widen(&t, bits);
      continue;
    }
    // A row whose result is not finite: counted, and under kRefuse put back.
    for (size_t r = 0; r < m; r += dim) {
      if (Finite(t, *block, offset + r, dim)) continue;
      if (!refuse_non_finite_) {
        ++t.non_finite_rows;
        continue;
      }
      ++t.refused_rows;
      std::memcpy(block->values.data() + offset + r, undo_.get() + r, dim * sizeof(float));
      for (uint32_t k = 0; k < slots; ++k) {
        std::memcpy(block->slots[k].data() + offset + r, undo_.get() + (k + 1) * m + r,
                    dim * sizeof(float));
      }
    }
    // The rows that took their update count toward the bounds.
    Magnitudes(t, *block, offset, m, bits);
    Widen(&t, bits);
  }
  saved_.clear();
  undo_used_ = 0;
}

Status ShardStore::ReadRows(const Request& request, std::vector<Frame>* frames,
                            uint64_t* held_bytes) {
  const Table& t = tables_[request.header.table];
  const uint32_t dim = t.layout.dim;
  const uint64_t rpb = t.rows_per_block;
  const WireType dtype = request.header.dtype;
  const size_t bytes = WireBytes(dtype);
  uint64_t held = 0;
  if (request.header.dense()) {
    Status shared;
    ForEachBlockRun(t, request.header.first_row - t.layout.owned.begin, request.header.count,
                    [&](uint64_t block, uint64_t in_block, uint64_t n) {
                      if (!shared.ok()) return;
                      const std::shared_ptr<Block>& b = t.blocks[block];
                      auto share = [&]() -> StatusOr<Frame> {
                        if (dtype == WireType::kF32) {
                          return Frame::Share(b->values.data() + in_block * dim,
                                              n * dim * bytes, std::shared_ptr<const void>(b));
                        }
                        PS_RETURN_IF_ERROR(Encode(b.get(), dtype));
                        return Frame::Share(b->encoded.get() + in_block * dim, n * dim * bytes,
                                            std::shared_ptr<const void>(b->encoded));
                      };
                      StatusOr<Frame> f = share();
                      if (f.ok()) {
                        frames->push_back(std::move(f).value());
                        held += b->values.size() * bytes;
                      } else {
                        shared = f.status();
                      }
                    });
    if (held_bytes != nullptr) *held_bytes = held;
    return shared;
  }
  PS_ASSIGN_OR_RETURN(Frame out, Frame::Allocate(request.keys.size() * dim * bytes));
  if (held_bytes != nullptr) *held_bytes = out.size();
  float* dst = reinterpret_cast<float*>(out.mutable_data());
  if (dtype != WireType::kF32) {
    gathered_.resize(request.keys.size() * dim);
    dst = gathered_.data();
  }
  if (t.hashed != nullptr) {
    t.hashed->Gather(request.keys, dst);
  } else {
    for (size_t i = 0; i < request.keys.size(); ++i) {
      const uint64_t row = request.keys[i] - t.layout.owned.begin;
      std::memcpy(dst + i * dim, t.blocks[row / rpb]->values.data() + (row % rpb) * dim,
                  dim * sizeof(float));
    }
  }
  if (dtype != WireType::kF32) EncodeFloats(dtype, dst, gathered_.size(), out.mutable_data());
  frames->push_back(std::move(out));
  return Status::Ok();
}

Status ShardStore::Encode(Block* block, WireType dtype) {
  if (block->encoded != nullptr && block->encoded_type == dtype) return Status::Ok();
  const size_t n = block->values.size();
  std::shared_ptr<uint16_t[]> encoded = MakeBlockArray<uint16_t>(n);
  if (encoded == nullptr) {
    return ResourceExhaustedError("cannot allocate " + std::to_string(n * sizeof(uint16_t)) +
                                  " bytes for a block's values in 16 bits (a pull's reply)");
  }
  EncodeFloats(dtype, block->values.data(), n, encoded.get());
  block->encoded = std::move(encoded);
  block->encoded_type = dtype;
  ++encoded_block_count_;
  return Status::Ok();
}

std::vector<float> ShardStore::CopySlot(uint32_t table, uint32_t slot) const {
  std::vector<float> all;
  for (const auto& b : tables_[table].blocks) {
    all.insert(all.end(), b->slots[slot].begin(), b->slots[slot].end());
  }
  return all;
}

struct ShardStore::WholeHold {
  std::shared_ptr<Block> block;
  explicit WholeHold(std::shared_ptr<Block> b) : block(std::move(b)) {
    // Only the loop thread reads the count (Writable), after taking holds.
    block->whole_holders.fetch_add(1, std::memory_order_relaxed);
  }
  // Release: the holder's reads of the block come before a push that sees
  // the count drop and moves the block's optimizer state away.
  ~WholeHold() { block->whole_holders.fetch_sub(1, std::memory_order_release); }
};

std::shared_ptr<const void> ShardStore::HoldWhole(std::shared_ptr<Block> block) {
  return std::make_shared<const WholeHold>(std::move(block));
}

Status ShardStore::ShareBlock(uint32_t table, uint64_t block, std::vector<Frame>* frames,
                              uint64_t* first, uint64_t* rows) {
  Table& t = tables_[table];
  std::shared_ptr<Block> b = t.blocks[block];
  *first = t.layout.owned.begin + block * t.rows_per_block;
  *rows = b->values.size() / std::max<uint32_t>(1, t.layout.dim);
  // One holder for every frame of the block.
  const std::shared_ptr<const void> holder = HoldWhole(b);
  auto share = [&](const BlockFloats& v) -> Status {
    PS_ASSIGN_OR_RETURN(Frame f, Frame::Share(v.data(), v.size() * sizeof(float), holder));
    frames->push_back(std::move(f));
    return Status::Ok();
  };
  PS_RETURN_IF_ERROR(share(b->values));
  for (uint32_t k = 0; k < t.slots; ++k) PS_RETURN_IF_ERROR(share(b->slots[k]));
  return Status::Ok();
}

}  // namespace ps
