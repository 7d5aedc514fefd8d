// The error feedback of a hashed table's 16-bit pushes (common/wire_floats.h)
// on the worker: the residual of each pushed id, `dim` floats, kept by id
// (a range table's are an array of rows x dim; a hashed table's ids are any
// uint64, so only the ids pushed lately are kept).
//
// Bounded: at most max_rows ids, in two generations of max_rows / 2 ids
// each. A pushed id's residual lies in the current generation. When a push
// names an id the current generation lacks and it is full, the previous
// generation is dropped, the current one becomes the previous, and a new
// one starts; an id found in the previous generation moves into the current
// one with its residual (also when that starts a new one). So an id pushed
// at least once in every max_rows / 2 new ids keeps its residual for good,
// and one not pushed for longer loses it. A lost residual costs what
// rounding left out of the id's last push (less than one rounding step of
// each value), once: the next push is rounded without it. It never makes a
// value wrong.
//
// Storage per generation: the residuals packed by arrival (its capacity
// reserved when it gets its first id, so a residual never moves while the
// generation lives) and an open-addressing index (linear probing, at most
// half full, doubling as the generation fills) of (id, row). Dropping a
// generation clears its index and keeps its memory. Memory: BytesFor().
//
// Not thread-safe: one per Client and hashed table.
#ifndef PS_CLIENT_HASHED_RESIDUALS_H_
#define PS_CLIENT_HASHED_RESIDUALS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/options.h"

namespace ps {

class HashedResiduals {
 public:
  // Residuals of `dim` floats (>= 1) for at most `max_rows` ids (at least 2).
  // Allocates nothing until the first id.
  HashedResiduals(uint32_t dim, uint64_t max_rows);

  // The most ids a worker keeps residuals for in hashed table `table`: as
  // many as one shard holds of it (its max_rows), or for a max_mb table as
  // many as BytesFor() fits in max_mb MiB. At least 2.
  static uint64_t BoundFor(const TableOptions& table);

  // Starts the lookups of one request: the residuals Find hands out from
  // now on stay in place (and keep their ids) until the next call.
  void StartRequest();
  // The residual of `id`: dim floats, zeros for an id without one; kept
  // for the id from now on. Null when there is no room for it in this
  // request: the current generation is full and already started anew since
  // StartRequest (the request names more than max_rows / 2 ids this
  // generation lacks); the caller then rounds the id's values without a
  // residual and keeps none (counted in dropped()).
  float* Find(uint64_t id);

  uint32_t dim() const { return dim_; }
  uint64_t max_rows() const { return 2 * generation_rows_; }
  // Ids with a residual now (in either generation; an id moved out of the
  // previous generation counts once).
  uint64_t size() const;
  // Ids whose residual was let go so far: those left in a dropped
  // generation, and those without room in their request.
  uint64_t dropped() const { return dropped_; }
  // Bytes held now: both generations' residuals (their reserved capacity)
  // and indexes.
  size_t bytes() const;
  // The most bytes that residuals of `dim` floats for `max_rows` ids take:
  // each generation full, its index at the size that makes.
  static size_t BytesFor(uint32_t dim, uint64_t max_rows);

 private:
  // An index entry: `row` + 1 of the residual of `id`, 0 when free.
  struct Entry {
    uint64_t id;
    uint32_t row;
  };
  struct Generation {
    std::vector<Entry> index;         // a power of two entries, at most half taken
    std::unique_ptr<float[]> values;  // rows x dim, room for generation_rows_
    uint64_t rows = 0;
    uint64_t moved_out = 0;  // its ids moved into the next generation
  };
  // The residual of `id` in `g`, null when it has none.
  float* Lookup(const Generation& g, uint64_t id) const;
  // Adds `id` to `g` (which lacks it and has room) with zero residual.
  float* Add(Generation& g, uint64_t id);
  // Doubles g's index (or makes its first one).
  static void Grow(Generation& g);
  // Drops the previous generation; the current one becomes the previous.
  void Turn();
  static size_t IndexEntriesFor(uint64_t rows);

  const uint32_t dim_;
  const uint64_t generation_rows_;  // max_rows / 2
  Generation current_, previous_;
  bool turned_ = false;         // Turn() ran since StartRequest
  std::vector<float> carried_;  // Find's copy of a residual whose generation goes
  uint64_t dropped_ = 0;
};

}  // namespace ps

#endif  // PS_CLIENT_HASHED_RESIDUALS_H_
