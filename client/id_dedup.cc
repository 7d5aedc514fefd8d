#include "client/id_dedup.h"

#include <algorithm>
#include <bit>

namespace ps {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

}  // namespace

bool IdDedup::SumDuplicates(std::span<const uint64_t> ids, const float* values, uint32_t dim,
                            std::vector<uint64_t>* unique, std::vector<float>* sums) {
  if (!Distinct(ids, unique, &first_)) return false;
  sums->assign(unique->size() * dim, 0.0f);
  for (size_t i = 0; i < ids.size(); ++i) {
    float* out = sums->data() + size_t{first_[i]} * dim;
    const float* in = values + i * dim;
    for (uint32_t c = 0; c < dim; ++c) out[c] += in[c];
  }
  return true;
}

bool IdDedup::Distinct(std::span<const uint64_t> ids, std::vector<uint64_t>* unique,
                       std::vector<uint32_t>* places) {
  if (ids.size() < 2) return false;
  const size_t size = std::bit_ceil(2 * ids.size());
  slots_.assign(size, 0);
  places->resize(ids.size());
  unique->clear();
  const size_t mask = size - 1;
  bool repeated = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    size_t at = Mix(ids[i]) & mask;
    while (slots_[at] != 0 && (*unique)[slots_[at] - 1] != ids[i]) at = (at + 1) & mask;
    if (slots_[at] == 0) {
      unique->push_back(ids[i]);
      slots_[at] = static_cast<uint32_t>(unique->size());
    } else {
      repeated = true;
    }
    (*places)[i] = slots_[at] - 1;
  }
  return repeated;
}

}  // namespace ps
