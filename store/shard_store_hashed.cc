// ShardStore's hashed tables (keys: hashed, store/shard_store.h): their
// pushes through the admission filter into HashedRows, a clock's sum of
// them under aggregation, and the counts and sketch the shard reports and
// copies. Their pulls are gathered in ReadRows, their copies in
// shard_store_copy.cc.
#include <algorithm>
#include <span>
#include <string>

#include "store/shard_store.h"
#include "store/split_mix.h"

namespace ps {

std::span<const std::byte> ShardStore::SketchData(uint32_t table) const {
  const Table& t = tables_[table];
  return t.sketch != nullptr ? t.sketch->Data() : std::span<const std::byte>();
}

bool ShardStore::RestoreSketch(uint32_t table, std::span<const std::byte> data) {
  Table& t = tables_[table];
  return t.sketch != nullptr && t.sketch->Restore(data);
}

void ShardStore::Admitted(Table& t, const Request& request, std::span<const uint64_t>* ids,
                          const float** grads) {
  *ids = request.keys;
  *grads = request.values.data();
  if (t.sketch == nullptr) return;
  const uint32_t dim = t.layout.dim;
  admitted_ids_.clear();
  admitted_grads_.clear();
  const uint32_t least = std::max<uint32_t>(1, t.admit.min_pushes);
  for (size_t i = 0; i < request.keys.size(); ++i) {
    const uint64_t id = request.keys[i];
    if (t.hashed->Find(id) == nullptr) {
      const uint32_t count = t.sketch->Add(id);
      // The probability's draw: a hash of the id and its count, the same
      // on every replica.
      if (count < least ||
          (t.admit.probability < 1.0f && UnitFloat(SplitMix(id ^ SplitMix(count))) >= t.admit.probability)) {
        ++t.unadmitted_rows;
        continue;
      }
    }
    admitted_ids_.push_back(id);
    const float* g = request.values.data() + i * dim;
    admitted_grads_.insert(admitted_grads_.end(), g, g + dim);
  }
  *ids = admitted_ids_;
  *grads = admitted_grads_.data();
}

void ShardStore::Count(Table& t, const HashedRows::PushCounts& counts) {
  t.dropped_rows += counts.dropped;
  t.evicted_rows += counts.evicted;
  t.expired_rows += counts.expired;
}

Status ShardStore::ApplyHashed(Table& t, const Request& request, int64_t clock) {
  std::span<const uint64_t> ids;
  const float* grads = nullptr;
  Admitted(t, request, &ids, &grads);
  const HashedRows::PushCounts counts =
      t.hashed->Apply(ids, grads, *t.rule, t.optimizer, t.optimizer.LearningRate(clock),
                      clock + 1, refuse_non_finite_, clock);
  Count(t, counts);
  if (counts.refused == 0) {
    t.non_finite_rows += counts.non_finite;
    return Status::Ok();
  }
  ++t.refused_rows;
  return OutOfRangeError("table '" + t.layout.name + "': the update of id " +
                         std::to_string(counts.refused_id) + " (" +
                         OptimizerDescription(t.optimizer) +
                         ") gives a value or optimizer state that is not finite; no row of the "
                         "push was applied (server.on_non_finite_result: refuse). Lower the "
                         "learning rate or clip the gradients");
}

void ShardStore::AccumulateHashed(Table& t, const Request& request, TableSum* sum) {
  if (sum->hashed == nullptr) {
    sum->hashed = std::make_unique<HashedRows>(t.layout.dim, 0, InitOptions(), t.hashed->max_rows());
  }
  const OptimizerOptions add{OptimizerKind::kAdd, 0.0f};
  std::span<const uint64_t> ids;
  const float* grads = nullptr;
  Admitted(t, request, &ids, &grads);
  t.dropped_rows += sum->hashed->Apply(ids, grads, *FindRule(add.kind), add, 0.0f, 0, false).dropped;
}

void ShardStore::ApplyHashedSum(Table& t, const HashedRows& sum, float scale, int64_t clock) {
  const uint32_t dim = t.layout.dim;
  gathered_.resize(dim);
  const float lr = t.optimizer.LearningRate(clock);
  for (uint64_t r = 0; r < sum.size(); ++r) {
    const uint64_t id = sum.id(r);
    const float* g = sum.row(r);
    for (uint32_t c = 0; c < dim; ++c) gathered_[c] = g[c] * scale;
    // One id at a time: a row whose result is not finite keeps its values
    // (kRefuse) and the others still take theirs, as for a range table.
    const HashedRows::PushCounts counts = t.hashed->Apply(
        {&id, 1}, gathered_.data(), *t.rule, t.optimizer, lr, clock + 1, refuse_non_finite_, clock);
    Count(t, counts);
    if (counts.refused != 0) {
      ++t.refused_rows;
    } else {
      t.non_finite_rows += counts.non_finite;
    }
  }
}

}  // namespace ps
