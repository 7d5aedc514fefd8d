#include "server/shard_store.h"

#include <cmath>
#include <cstring>
#include <new>

#include "common/key_range.h"

namespace ps {

namespace {

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

// value[i] op= lr * g[i] over a contiguous run. The loops are kept plain so
// the compiler vectorizes them; `w` and `g` never alias (g is a receive buffer).
void SgdRun(float* __restrict w, const float* __restrict g, size_t n, float lr) {
  for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
}
void AddRun(float* __restrict w, const float* __restrict g, size_t n) {
  for (size_t i = 0; i < n; ++i) w[i] += g[i];
}

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

StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(const JobOptions& job, uint32_t shard) {
  std::unique_ptr<ShardStore> store(new ShardStore());
  const auto num_shards = static_cast<uint32_t>(job.cluster.servers.size());
  for (const TableOptions& t : job.tables) {
    Table table;
    table.layout = {t.name, t.rows, t.dim, ShardRows(t.rows, num_shards, shard)};
    table.optimizer = t.optimizer;
    const uint64_t n = table.layout.owned.size() * t.dim;
    try {
      table.values.resize(n);
    } catch (const std::bad_alloc&) {
      return ResourceExhaustedError("shard " + std::to_string(shard) + ": cannot allocate " +
                                    std::to_string(n * 4) + " bytes for table '" + t.name +
                                    "'; reduce its rows or run more shards");
    }
    if (t.init.kind != InitKind::kZeros) {
      for (uint64_t r = 0; r < table.layout.owned.size(); ++r) {
        for (uint32_t c = 0; c < t.dim; ++c) {
          table.values[r * t.dim + c] = InitialValue(t.init, table.layout.owned.begin + r, c);
        }
      }
    }
    store->layouts_.push_back(table.layout);
    store->tables_.push_back(std::move(table));
  }
  return store;
}

void ShardStore::ApplyPush(const Request& request) {
  Table& t = tables_[request.header.table];
  const uint32_t dim = t.layout.dim;
  const float* g = request.values.data();
  auto apply = [&](float* w, const float* grad, size_t n) {
    if (t.optimizer.kind == OptimizerKind::kAdd) {
      AddRun(w, grad, n);
    } else {
      SgdRun(w, grad, n, t.optimizer.lr);
    }
  };
  if (request.header.dense()) {
    float* w = t.values.data() + (request.header.first_row - t.layout.owned.begin) * dim;
    apply(w, g, request.header.count * dim);
    return;
  }
  for (size_t i = 0; i < request.keys.size(); ++i) {
    float* w = t.values.data() + (request.keys[i] - t.layout.owned.begin) * dim;
    apply(w, g + i * dim, dim);
  }
}

void ShardStore::ReadRows(const Request& request, float* out) const {
  const Table& t = tables_[request.header.table];
  const uint32_t dim = t.layout.dim;
  if (request.header.dense()) {
    const float* w = t.values.data() + (request.header.first_row - t.layout.owned.begin) * dim;
    std::memcpy(out, w, request.header.count * dim * sizeof(float));
    return;
  }
  for (size_t i = 0; i < request.keys.size(); ++i) {
    const float* w = t.values.data() + (request.keys[i] - t.layout.owned.begin) * dim;
    std::memcpy(out + i * dim, w, dim * sizeof(float));
  }
}

}  // namespace ps
