// ShardStore's guard against results that are not finite
// (server.on_non_finite_result, store/shard_store.h): the magnitudes of a
// run of values and state, each table's bounds on them, kept as pushes
// widen them and measured again when they come near float's limit, which
// prove a dense push's every result finite before it is applied; and,
// where they cannot, the rows saved before their update, to put back when
// the push is refused (kRefuse).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>

#include "common/update_rule.h"
#include "store/shard_store.h"

namespace ps {

void ShardStore::Magnitudes(const Table& table, const Block& block, size_t offset, size_t n,
                            StateBits& bits) {
  std::fill(std::begin(bits), std::end(bits), 0u);
  bits[0] = MaxAbsBits(block.values.data() + offset, n);
  for (uint32_t k = 0; k < table.slots; ++k) {
    bits[1 + k] = MaxAbsBits(block.slots[k].data() + offset, n);
  }
}

bool ShardStore::Finite(const Table& table, const StateBits& bits) {
  for (uint32_t k = 0; k <= table.slots; ++k) {
    if (bits[k] >= kNonFiniteBits) return false;
  }
  return true;
}

bool ShardStore::Finite(const Table& table, const Block& block, size_t offset, size_t n) {
  StateBits bits;
  Magnitudes(table, block, offset, n, bits);
  return Finite(table, bits);
}

namespace {
double MagnitudeOf(uint32_t bits) {
  if (bits >= kNonFiniteBits) return HUGE_VAL;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
}  // namespace

void ShardStore::Widen(Table* t, const StateBits& bits) {
  if (!t->bounded) return;
  for (uint32_t k = 0; k <= t->slots; ++k) {
    t->bound[k] = std::max(t->bound[k], MagnitudeOf(bits[k]));
  }
}

void ShardStore::MeasureBounds(Table* t) {
  t->bounded = true;
  t->measured = true;
  std::fill(std::begin(t->bound), std::end(t->bound), 0.0);
  for (const auto& block : t->blocks) {
    StateBits bits;
    Magnitudes(*t, *block, 0, block->values.size(), bits);
    Widen(t, bits);
  }
}

void ShardStore::Save(const Table& table, Block* block, size_t offset, size_t n) {
  const uint32_t slots = table.slots;
  const size_t at = undo_used_;
  const size_t need = at + n * (1 + slots);
  if (need > undo_capacity_) {
    // Grown by doubling and never zeroed: saving costs one copy only.
    const size_t capacity = std::max(need, 2 * undo_capacity_);
    std::unique_ptr<float[]> grown(new float[capacity]);
    std::memcpy(grown.get(), undo_.get(), at * sizeof(float));
    undo_ = std::move(grown);
    undo_capacity_ = capacity;
  }
  undo_used_ = need;
  float* saved = undo_.get() + at;
  std::memcpy(saved, block->values.data() + offset, n * sizeof(float));
  for (uint32_t k = 0; k < slots; ++k) {
    std::memcpy(saved + (k + 1) * n, block->slots[k].data() + offset, n * sizeof(float));
  }
  saved_.push_back({block, offset, n, at});
}

void ShardStore::PutBack(const Table& table) {
  const uint32_t slots = table.slots;
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    const float* saved = undo_.get() + it->at;
    std::memcpy(it->block->values.data() + it->offset, saved, it->n * sizeof(float));
    for (uint32_t k = 0; k < slots; ++k) {
      std::memcpy(it->block->slots[k].data() + it->offset, saved + (k + 1) * it->n,
                  it->n * sizeof(float));
    }
  }
  saved_.clear();
  undo_used_ = 0;
}

bool ShardStore::ProvenFinite(Table& t, const Request& request, int64_t clock, StateBounds& after) {
  if (!request.header.dense()) return false;
  constexpr double kSafeMagnitude = 1e36;  // float's largest is 3.4e38
  const double max_grad =
      MagnitudeOf(request.values_max_bits != Request::kValuesNotMeasured
                      ? request.values_max_bits
                      : MaxAbsBits(request.values.data(), request.values.size()));
  auto safe = [&] {
    StepBounds(t.optimizer, t.bound, max_grad, t.optimizer.LearningRate(clock), clock + 1, after);
    for (uint32_t k = 0; k <= t.slots; ++k) {
      if (!(after[k] < kSafeMagnitude)) return false;
    }
    return true;
  };
  if (!t.bounded) MeasureBounds(&t);
  if (safe()) return true;
  // The bounds only grow, each push by what it could add; when they come
  // near the limit they are measured again (one pass over the table, not
  // repeated until a push changes the table).
  if (t.measured) return false;
  MeasureBounds(&t);
  return safe();
}

bool ShardStore::PushProvenFinite(const Request& request, int64_t clock) {
  if (!refuse_non_finite_) return true;
  StateBounds after;
  return ProvenFinite(tables_[request.header.table], request, clock, after);
}

}  // namespace ps
