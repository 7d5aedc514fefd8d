#include "worker/param_cache.h"

#include <algorithm>
#include <cstring>

#include "common/update_rule.h"

namespace ps {

ParamCache::ParamCache(const JobOptions& job) {
  for (const TableOptions& t : job.tables) {
    Table table;
    table.rows = t.rows;
    table.dim = t.dim;
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
  if (t.clock.empty()) {
    t.values.assign(t.rows * t.dim, 0.0f);
    t.clock.assign(t.rows, -1);
  }
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t row = rows == nullptr ? first_row + i : rows[i];
    std::memcpy(t.values.data() + row * t.dim, values + i * t.dim, t.dim * sizeof(float));
    t.clock[row] = clock;
  }
}

void ParamCache::ApplyPush(uint32_t table, uint64_t first_row, const uint64_t* rows,
                           uint64_t count, const float* values) {
  Table& t = tables_[table];
  if (t.clock.empty()) return;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t row = rows == nullptr ? first_row + i : rows[i];
    if (t.clock[row] < 0) continue;
    float* w = t.values.data() + row * t.dim;
    const float* g = values + i * t.dim;
    ApplyUpdate(t.optimizer, w, g, t.dim);  // the shard's arithmetic, exactly
  }
}

void ParamCache::Invalidate(uint32_t table) {
  Table& t = tables_[table];
  std::fill(t.clock.begin(), t.clock.end(), -1);
}

}  // namespace ps
