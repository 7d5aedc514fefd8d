// The store's counter-based random numbers: SplitMix64 and a float in
// (0, 1) from its bits, so that a value drawn for a row or an id (its
// initial value, an admission draw) is a function of the row or id alone,
// the same on every shard and replica.
#ifndef PS_STORE_SPLIT_MIX_H_
#define PS_STORE_SPLIT_MIX_H_

#include <cstdint>

namespace ps {

// SplitMix64's step: a counter-based generator.
inline uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1), from the top 24 bits.
inline float UnitFloat(uint64_t bits) {
  return (static_cast<float>(bits >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

}  // namespace ps

#endif  // PS_STORE_SPLIT_MIX_H_
