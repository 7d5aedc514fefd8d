#include "client/param_cache.h"

#include <algorithm>
#include <cstring>

#include "common/update_rule.h"

namespace ps {

ParamCache::ParamCache(const JobOptions& job) {
  for (const TableOptions& t : job.tables) {
    Table table;
    table.rows = t.rows;
    table.dim = t.dim;
    table.hashed = t.hashed();
    table.optimizer = t.optimizer;
    if (t.hashed()) {
      // One shard's bound: its rows, or max_mb of cached values.
      table.max_cached = std::max<uint64_t>(
          1, t.max_rows != 0 ? t.max_rows : (t.max_mb << 20) / (t.dim * sizeof(float)));
      table.pushes_apply = !t.admit.enabled() && t.evict.policy != EvictPolicy::kNone;
    }
    tables_.push_back(std::move(table));
  }
}

int64_t ParamCache::CachedRow(const Table& t, uint64_t id) {
  const auto it = t.where.find(id);
  return it == t.where.end() ? -1 : static_cast<int64_t>(it->second);
}

int64_t ParamCache::Slot(const Table& t, uint64_t row) {
  if (t.hashed) return CachedRow(t, row);
  return t.clock.empty() || t.clock[row] < 0 ? -1 : static_cast<int64_t>(row);
}

uint32_t ParamCache::HashedSlot(Table& t, uint64_t id) {
  if (const int64_t r = CachedRow(t, id); r >= 0) return static_cast<uint32_t>(r);
  if (t.ids.size() >= t.max_cached) {
    t.ids.clear();
    t.where.clear();
    t.values.clear();
    t.clock.clear();
  }
  const auto r = static_cast<uint32_t>(t.ids.size());
  t.ids.push_back(id);
  t.where.emplace(id, r);
  t.values.resize(t.values.size() + t.dim);
  t.clock.push_back(-1);
  return r;
}

void ParamCache::DropHashed(Table& t, uint32_t r) {
  const auto last = static_cast<uint32_t>(t.ids.size() - 1);
  t.where.erase(t.ids[r]);
  if (r != last) {
    t.ids[r] = t.ids[last];
    t.where[t.ids[r]] = r;
    std::memcpy(t.values.data() + size_t{r} * t.dim, t.values.data() + size_t{last} * t.dim,
                t.dim * sizeof(float));
    t.clock[r] = t.clock[last];
  }
  t.ids.pop_back();
  t.values.resize(t.values.size() - t.dim);
  t.clock.pop_back();
}

uint64_t ParamCache::cached_rows(uint32_t table) const {
  const Table& t = tables_[table];
  if (t.hashed) return t.ids.size();
  return static_cast<uint64_t>(std::count_if(t.clock.begin(), t.clock.end(),
                                             [](int64_t c) { return c >= 0; }));
}

bool ParamCache::Read(uint32_t table, uint64_t row, int64_t needed, float* out) const {
  const Table& t = tables_[table];
  const int64_t r = Slot(t, row);
  if (r < 0 || t.clock[r] < 0 || t.clock[r] < needed) return false;
  std::memcpy(out, t.values.data() + r * t.dim, t.dim * sizeof(float));
  return true;
}

bool ParamCache::AllFresh(uint32_t table, int64_t needed) const {
  const Table& t = tables_[table];
  if (t.clock.empty() || t.hashed) return false;
  return std::all_of(t.clock.begin(), t.clock.end(),
                     [needed](int64_t c) { return c >= 0 && c >= needed; });
}

void ParamCache::ReadAll(uint32_t table, float* out) const {
  const Table& t = tables_[table];
  std::memcpy(out, t.values.data(), t.values.size() * sizeof(float));
}

void ParamCache::Insert(uint32_t table, uint64_t first_row, const uint64_t* rows, uint64_t count,
                        const float* values, int64_t clock) {
  Table& t = tables_[table];
  if (t.hashed) {
    for (uint64_t i = 0; i < count; ++i) {
      const uint32_t r = HashedSlot(t, rows[i]);
      std::memcpy(t.values.data() + size_t{r} * t.dim, values + i * t.dim, t.dim * sizeof(float));
      t.clock[r] = clock;
    }
    return;
  }
  if (t.clock.empty()) {
    t.values.assign(t.rows * t.dim, 0.0f);
    t.clock.assign(t.rows, -1);
  }
  if (rows == nullptr) {  // a dense run: one copy
    std::memcpy(t.values.data() + first_row * t.dim, values, count * t.dim * sizeof(float));
    std::fill(t.clock.begin() + static_cast<std::ptrdiff_t>(first_row),
              t.clock.begin() + static_cast<std::ptrdiff_t>(first_row + count), clock);
    return;
  }
  for (uint64_t i = 0; i < count; ++i) {
    std::memcpy(t.values.data() + rows[i] * t.dim, values + i * t.dim, t.dim * sizeof(float));
    t.clock[rows[i]] = clock;
  }
}

void ParamCache::ApplyPush(uint32_t table, uint64_t first_row, const uint64_t* rows,
                           uint64_t count, const float* values) {
  Table& t = tables_[table];
  if (t.clock.empty()) return;
  if (t.hashed) {
    FlushSubnormals flush;
    for (uint64_t i = 0; i < count; ++i) {
      const int64_t r = CachedRow(t, rows[i]);
      if (r < 0) continue;
      if (t.optimizer.Stateless() && t.pushes_apply) {
        ApplyUpdate(t.optimizer, t.values.data() + r * t.dim, values + i * t.dim, t.dim);
      } else {
        DropHashed(t, static_cast<uint32_t>(r));
      }
    }
    return;
  }
  if (!t.optimizer.Stateless()) {
    // The shard's update depends on state or a schedule the worker does not
    // have: the pushed rows are stale now and must be pulled again.
    for (uint64_t i = 0; i < count; ++i) t.clock[rows == nullptr ? first_row + i : rows[i]] = -1;
    return;
  }
  // The shard's arithmetic, exactly (common/update_rule.h), subnormals
  // flushed alike; set once for all of a sparse push's rows.
  FlushSubnormals flush;
  if (rows == nullptr) {
    // A dense run: one update per run of cached rows.
    uint64_t i = 0;
    while (i < count) {
      if (t.clock[first_row + i] < 0) {
        ++i;
        continue;
      }
      uint64_t j = i;
      while (j < count && t.clock[first_row + j] >= 0) ++j;
      ApplyUpdate(t.optimizer, t.values.data() + (first_row + i) * t.dim, values + i * t.dim,
                  (j - i) * t.dim);
      i = j;
    }
    return;
  }
  for (uint64_t i = 0; i < count; ++i) {
    if (t.clock[rows[i]] < 0) continue;
    ApplyUpdate(t.optimizer, t.values.data() + rows[i] * t.dim, values + i * t.dim, t.dim);
  }
}

void ParamCache::Invalidate(uint32_t table) {
  Table& t = tables_[table];
  std::fill(t.clock.begin(), t.clock.end(), -1);
  if (t.hashed) {
    t.ids.clear();
    t.where.clear();
    t.values.clear();
    t.clock.clear();
  }
}

}  // namespace ps
