// The one file that includes xxhash.h.
#include "common/hash_slots.h"

#include <bit>
#include <cstring>

#include <xxhash.h>

namespace ps {

uint64_t IdHash(uint64_t id, uint64_t seed) {
  // The id's bytes in little-endian order on every host.
  if constexpr (std::endian::native == std::endian::big) id = __builtin_bswap64(id);
  unsigned char bytes[sizeof(id)];
  std::memcpy(bytes, &id, sizeof(id));
  return XXH3_64bits_withSeed(bytes, sizeof(bytes), seed);
}

uint64_t NameHash(std::string_view name) { return XXH3_64bits(name.data(), name.size()); }

}  // namespace ps
