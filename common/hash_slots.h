// Where an id of a hash-keyed table lives (DESIGN.md section 15).
//
// An id (any uint64) maps to one of a table's `slots` hash slots, and the
// slots are split among the shards in ranges, as the rows of a dense table
// are (ShardRows over the slots instead of the rows). Resharding moves
// whole slots; the ids never change their slot.
//
// The hash is XXH3-64 (Debian's libxxhash, version 0.8) of the id's 8 bytes
// in little-endian order, with the table's seed as XXH3's seed:
//
//   slot = XXH3_64bits_withSeed(&id_le, 8, seed) % slots
//
// so a user's tool can compute where an id lives (e.g. with Python's
// xxhash.xxh3_64_intdigest(id.to_bytes(8, "little"), seed) % slots).
// A table's seed is the XXH3-64 of its name's bytes (NameHash; Python:
// xxhash.xxh3_64_intdigest(name.encode())), so that one id lands on
// different shards in different tables.
//
// Thread-safe: pure functions.
#ifndef PS_COMMON_HASH_SLOTS_H_
#define PS_COMMON_HASH_SLOTS_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/key_range.h"

namespace ps {

// The hash of `id` under `seed` (see the top of this file).
uint64_t IdHash(uint64_t id, uint64_t seed);

// XXH3-64 (seed 0) of `name`'s bytes: a hashed table's seed.
uint64_t NameHash(std::string_view name);

// The slot of `id` among `slots`. REQUIRES: slots >= 1.
inline uint32_t IdSlot(uint64_t id, uint64_t seed, uint32_t slots) {
  return static_cast<uint32_t>(IdHash(id, seed) % slots);
}

// The slots shard `shard` of `num_shards` owns: a range, as ShardRows
// splits rows. REQUIRES: num_shards >= 1, shard < num_shards.
inline RowRange ShardSlots(uint32_t slots, uint32_t num_shards, uint32_t shard) {
  return ShardRows(slots, num_shards, shard);
}

// The shard that owns `slot` of `slots` among `num_shards`.
// REQUIRES: slot < slots, num_shards >= 1.
inline uint32_t SlotShard(uint32_t slot, uint32_t slots, uint32_t num_shards) {
  return ShardOfRow(slots, num_shards, slot);
}

// Sorts `ids` by hash slot, then id: the order in which a checkpoint
// generation holds a hashed table's rows (server/checkpoint_format.h).
inline void SortBySlotThenId(std::span<uint64_t> ids, uint64_t seed, uint32_t slots) {
  std::sort(ids.begin(), ids.end(), [seed, slots](uint64_t a, uint64_t b) {
    const uint32_t sa = IdSlot(a, seed, slots), sb = IdSlot(b, seed, slots);
    return sa != sb ? sa < sb : a < b;
  });
}

}  // namespace ps

#endif  // PS_COMMON_HASH_SLOTS_H_
