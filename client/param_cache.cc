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
    tables_.push_back(std::move(table));
  }
}

bool ParamCache::Read(uint32_t table, uint64_t row, int64_t needed, float* out) const {
  const Table& t = tables_[table];
  if (t.clock.empty() || t.clock[row] < 0 || t.clock[row] < needed) return false;
  std::memcpy(out, t.values.data() + row * t.dim, t.dim * sizeof(float));
  return true;
}

bool ParamCache::AllFresh(uint32_t table, int64_t needed) const {
  const Table& t = tables_[table];
  if (t.clock.empty()) return false;
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
  if (t.hashed) return;
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
}

}  // namespace ps
