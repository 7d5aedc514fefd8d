// A push to a hashed table names each id once (DESIGN.md section 15): the
// client sums the rows of an id a minibatch names several times before it
// sends the push, so the shard applies one update of the summed gradient
// (an update rule with state, adagrad or adam, gives another result for
// two updates than for one of their sum). A pull names each id once too:
// the rows of repeated ids are copied on the worker after it.
//
// Not thread-safe: one per Client; its storage is kept between pushes.
#ifndef PS_CLIENT_ID_DEDUP_H_
#define PS_CLIENT_ID_DEDUP_H_

#include <cstdint>
#include <span>
#include <vector>

namespace ps {

class IdDedup {
 public:
  // When `ids` names an id more than once: fills *unique with each id once
  // (in the order of its first appearance) and *sums with its rows summed
  // (unique->size() x dim, values read as ids.size() x dim), and returns
  // true. Otherwise returns false and leaves both alone.
  bool SumDuplicates(std::span<const uint64_t> ids, const float* values, uint32_t dim,
                     std::vector<uint64_t>* unique, std::vector<float>* sums);
  // When `ids` names an id more than once: fills *unique with each id once
  // (in the order of its first appearance) and *places with the place in
  // *unique of each of `ids`, and returns true. Otherwise returns false.
  bool Distinct(std::span<const uint64_t> ids, std::vector<uint64_t>* unique,
                std::vector<uint32_t>* places);

 private:
  // Open addressing over the positions in *unique (+1; 0 is free),
  // a power of two at least twice the ids.
  std::vector<uint32_t> slots_;
  std::vector<uint32_t> first_;  // per id of the push: its place in *unique
};

}  // namespace ps

#endif  // PS_CLIENT_ID_DEDUP_H_
