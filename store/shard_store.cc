#include "store/shard_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>

#include "common/key_range.h"
#include "common/update_rule.h"

namespace ps {

namespace {

// Rows per block: about 1 MiB of values, at least one row.
constexpr uint64_t kBlockFloats = 256 * 1024;

// SplitMix64: a counter-based generator, so a row's initial values can be
// computed from its index alone on any shard.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1), from the top 24 bits.
float Unit(uint64_t bits) { return (static_cast<float>(bits >> 40) + 0.5f) * (1.0f / 16777216.0f); }

}  // namespace

float InitialValue(const InitOptions& init, uint64_t row, uint32_t col) {
  switch (init.kind) {
    case InitKind::kZeros:
      return 0.0f;
    case InitKind::kConstant:
      return init.value;
    case InitKind::kUniform: {
      uint64_t r = Mix(init.seed ^ Mix(row * 0x100000001b3ull + col));
      return init.value * (2.0f * Unit(r) - 1.0f);
    }
    case InitKind::kNormal: {
      uint64_t r1 = Mix(init.seed ^ Mix(row * 0x100000001b3ull + col));
      uint64_t r2 = Mix(r1);
      float u1 = Unit(r1), u2 = Unit(r2);
      return init.value * std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    }
  }
  return 0.0f;
}

StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(const JobOptions& job, uint32_t shard,
                                                        bool initialize) {
  std::unique_ptr<ShardStore> store(new ShardStore());
  const auto num_shards = static_cast<uint32_t>(job.cluster.servers.size());
  for (const TableOptions& t : job.tables) {
    Table table;
    table.layout = {t.name, t.rows, t.dim, ShardRows(t.rows, num_shards, shard)};
    table.optimizer = t.optimizer;
    table.rows_per_block = std::max<uint64_t>(1, kBlockFloats / t.dim);
    const uint64_t owned = table.layout.owned.size();
    try {
      for (uint64_t first = 0; first < owned; first += table.rows_per_block) {
        const uint64_t rows = std::min(table.rows_per_block, owned - first);
        auto block = std::make_shared<Block>();
        block->values.resize(rows * t.dim);
        for (uint32_t k = 0; k < t.optimizer.Slots(); ++k) block->slots[k].assign(rows * t.dim, 0.0f);
        if (initialize && t.init.kind != InitKind::kZeros) {
          for (uint64_t r = 0; r < rows; ++r) {
            for (uint32_t c = 0; c < t.dim; ++c) {
              block->values[r * t.dim + c] =
                  InitialValue(t.init, table.layout.owned.begin + first + r, c);
            }
          }
        }
        table.blocks.push_back(std::move(block));
      }
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

ShardStore::Block* ShardStore::Writable(Table& table, uint64_t block) {
  std::shared_ptr<Block>& b = table.blocks[block];
  if (b.use_count() > 1) {
    // A reply still holds this block's values: leave them to the reply and
    // write a copy. Replies never read the optimizer state, so it moves to
    // the new block instead of being copied (a third of adam's bytes).
    auto copy = std::make_shared<Block>();
    copy->values = b->values;
    for (std::vector<float>& slot : b->slots) {
      copy->slots[&slot - b->slots] = std::move(slot);
    }
    b = std::move(copy);
    ++copy_on_write_count_;
  } else {
    // The I/O thread dropped its reference (release); see its reads of the
    // block before writing over them.
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  return b.get();
}

void ShardStore::Update(const Table& table, Block* block, size_t offset, const float* g, size_t n,
                        int64_t clock) {
  const uint32_t slots = table.optimizer.Slots();
  // Adam's step t is the job's step, clock + 1: the same for every part of
  // a push and for every worker's push of one clock, and known again from
  // the clock alone after a restart.
  ApplyOptimizer(table.optimizer, block->values.data() + offset,
                 slots > 0 ? block->slots[0].data() + offset : nullptr,
                 slots > 1 ? block->slots[1].data() + offset : nullptr, g, n,
                 table.optimizer.LearningRate(clock), clock + 1);
}

void ShardStore::ApplyPush(const Request& request, int64_t clock) {
  Table& t = tables_[request.header.table];
  const uint32_t dim = t.layout.dim;
  const uint64_t rpb = t.rows_per_block;
  const float* g = request.values.data();
  if (request.header.dense()) {
    ForEachBlockRun(t, request.header.first_row - t.layout.owned.begin, request.header.count,
                    [&](uint64_t block, uint64_t in_block, uint64_t n) {
                      Update(t, Writable(t, block), in_block * dim, g, n * dim, clock);
                      g += n * dim;
                    });
    return;
  }
  uint64_t last_block = ~0ull;
  Block* base = nullptr;
  for (size_t i = 0; i < request.keys.size(); ++i) {
    const uint64_t row = request.keys[i] - t.layout.owned.begin;
    const uint64_t block = row / rpb;
    if (block != last_block) {
      base = Writable(t, block);
      last_block = block;
    }
    Update(t, base, (row % rpb) * dim, g + i * dim, dim, clock);
  }
}

void ShardStore::Accumulate(const Request& request, int64_t clock) {
  std::vector<TableSum>& clock_sums = sums_[clock];
  if (clock_sums.empty()) clock_sums.resize(tables_.size());
  const Table& t = tables_[request.header.table];
  TableSum& sum = clock_sums[request.header.table];
  const uint32_t dim = t.layout.dim;
  if (sum.values.empty()) {
    sum.values.assign(t.layout.owned.size() * dim, 0.0f);
    sum.touched.assign(t.blocks.size(), false);
  }
  const OptimizerOptions add{OptimizerKind::kAdd, 0.0f};
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

void ShardStore::ApplyAccumulated(int64_t below, float scale) {
  while (!sums_.empty() && sums_.begin()->first < below) {
    const int64_t clock = sums_.begin()->first;
    std::vector<TableSum>& clock_sums = sums_.begin()->second;
    for (size_t ti = 0; ti < clock_sums.size(); ++ti) {
      TableSum& sum = clock_sums[ti];
      if (sum.values.empty()) continue;
      Table& t = tables_[ti];
      const uint64_t block_floats = t.rows_per_block * t.layout.dim;
      for (uint64_t b = 0; b < t.blocks.size(); ++b) {
        if (!sum.touched[b]) continue;
        float* g = sum.values.data() + b * block_floats;
        const size_t n = t.blocks[b]->values.size();
        for (size_t i = 0; i < n; ++i) g[i] *= scale;
        Update(t, Writable(t, b), 0, g, n, clock);
      }
    }
    sums_.erase(sums_.begin());
  }
}

Status ShardStore::ReadRows(const Request& request, std::vector<Frame>* frames,
                            uint64_t* held_bytes) {
  const Table& t = tables_[request.header.table];
  const uint32_t dim = t.layout.dim;
  const uint64_t rpb = t.rows_per_block;
  uint64_t held = 0;
  if (request.header.dense()) {
    Status shared;
    ForEachBlockRun(t, request.header.first_row - t.layout.owned.begin, request.header.count,
                    [&](uint64_t block, uint64_t in_block, uint64_t n) {
                      if (!shared.ok()) return;
                      const std::shared_ptr<Block>& b = t.blocks[block];
                      StatusOr<Frame> f = Frame::Share(b->values.data() + in_block * dim,
                                                       n * dim * sizeof(float),
                                                       std::shared_ptr<const void>(b));
                      if (f.ok()) {
                        frames->push_back(std::move(f).value());
                        held += b->values.size() * sizeof(float);
                      } else {
                        shared = f.status();
                      }
                    });
    if (held_bytes != nullptr) *held_bytes = held;
    return shared;
  }
  PS_ASSIGN_OR_RETURN(Frame out, Frame::Allocate(request.keys.size() * dim * sizeof(float)));
  if (held_bytes != nullptr) *held_bytes = out.size();
  auto* dst = reinterpret_cast<float*>(out.mutable_data());
  for (size_t i = 0; i < request.keys.size(); ++i) {
    const uint64_t row = request.keys[i] - t.layout.owned.begin;
    std::memcpy(dst + i * dim, t.blocks[row / rpb]->values.data() + (row % rpb) * dim,
                dim * sizeof(float));
  }
  frames->push_back(std::move(out));
  return Status::Ok();
}

std::vector<float> ShardStore::CopySlot(uint32_t table, uint32_t slot) const {
  std::vector<float> all;
  for (const auto& b : tables_[table].blocks) {
    all.insert(all.end(), b->slots[slot].begin(), b->slots[slot].end());
  }
  return all;
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
    ts.slots.resize(t.optimizer.Slots());
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
    RestoreRows(static_cast<uint32_t>(i), ts.owned.begin, ts.owned.size(),
                reinterpret_cast<const std::byte*>(ts.values.data()), slots);
  }
}

void ShardStore::RestoreRows(uint32_t table, uint64_t first, uint64_t count,
                             const std::byte* values, std::span<const std::byte* const> slots) {
  Table& t = tables_[table];
  const size_t row_bytes = size_t{t.layout.dim} * sizeof(float);
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

std::vector<float> ShardStore::CopyValues(uint32_t table) const {
  std::vector<float> all;
  all.reserve(tables_[table].layout.owned.size() * tables_[table].layout.dim);
  for (const auto& b : tables_[table].blocks) all.insert(all.end(), b->values.begin(), b->values.end());
  return all;
}

}  // namespace ps
