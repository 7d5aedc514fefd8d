// The worker's parameter cache (DESIGN.md section 5): rows it pulled, each
// with the shard's minimum clock m at the time. A read at clock c may use a
// cached row while m >= c - bound, which is what lets SSP skip pulls. The
// worker's own pushes are applied to cached rows with the table's rule (sgd,
// add), so reads from the cache still see the worker's own writes.
//
// A range table's rows are held in one lazily allocated array (rows x dim),
// so it costs its full size on the worker once any row of it is cached. A
// hashed table's (keys: hashed) are held by id, at most as many as one
// shard holds of it (max_rows, or max_mb of cached values); when that is
// reached they are all dropped and caching starts over. A push reaches a
// hashed row on its shard only when the shard makes or keeps the row: with
// an admission filter, or without an eviction policy (a full shard drops
// new ids' rows), the worker cannot tell, so such tables' pushed rows are
// dropped from the cache instead of updated.
// Not thread-safe: owned by one Client.
#ifndef PS_CLIENT_PARAM_CACHE_H_
#define PS_CLIENT_PARAM_CACHE_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/options.h"

namespace ps {

class ParamCache {
 public:
  // REQUIRES: job.Validate().ok().
  explicit ParamCache(const JobOptions& job);

  // Copies `row` into out[0..dim) and returns true when it is cached with a
  // clock >= `needed`.
  bool Read(uint32_t table, uint64_t row, int64_t needed, float* out) const;
  // True when every row of `table` is cached with a clock >= `needed`.
  bool AllFresh(uint32_t table, int64_t needed) const;
  // Copies the whole table into out[0..rows*dim). REQUIRES: AllFresh().
  void ReadAll(uint32_t table, float* out) const;

  // Stores `count` rows starting at values[0], pulled when the shard's
  // minimum clock was `clock`. `rows` null: the dense run first_row.. ;
  // else the row ids.
  void Insert(uint32_t table, uint64_t first_row, const uint64_t* rows, uint64_t count,
              const float* values, int64_t clock);

  // The worker pushed `count` rows (`rows` as in Insert) of `values`:
  // cached ones get the same update the shard applies, or are dropped when
  // the table's optimizer has state or a schedule (OptimizerOptions::
  // Stateless) the worker cannot reproduce (`values` is not read then and
  // may be null).
  void ApplyPush(uint32_t table, uint64_t first_row, const uint64_t* rows, uint64_t count,
                 const float* values);
  // Forgets every row of `table` (after a push that may not have applied).
  void Invalidate(uint32_t table);
  // Rows of `table` cached now (tests, counters).
  uint64_t cached_rows(uint32_t table) const;

 private:
  struct Table {
    uint64_t rows = 0;
    uint32_t dim = 0;
    OptimizerOptions optimizer;
    std::vector<float> values;   // range: rows x dim once anything is cached
    std::vector<int64_t> clock;  // per row; -1: not cached
    // Hashed tables: `values` and `clock` by cached row, its id in `ids`
    // and `where` the other way; at most max_cached rows; whether a push
    // always reaches the shard's row (no admission filter, an eviction
    // policy), so the cache may apply it.
    bool hashed = false;
    uint64_t max_cached = 0;
    bool pushes_apply = false;
    std::vector<uint64_t> ids;
    std::unordered_map<uint64_t, uint32_t> where;
  };
  // The cached row of a hashed table's `id`, or -1.
  static int64_t CachedRow(const Table& t, uint64_t id);
  // A hashed table's row for `id`, made (or, when full, made after every
  // row is dropped).
  static uint32_t HashedSlot(Table& t, uint64_t id);
  // Drops a hashed table's cached row r (the last row takes its place).
  static void DropHashed(Table& t, uint32_t r);
  // Where `row` (a range row, or a hashed id) lies in values/clock; -1
  // when not cached.
  static int64_t Slot(const Table& t, uint64_t row);
  std::vector<Table> tables_;
};

}  // namespace ps

#endif  // PS_CLIENT_PARAM_CACHE_H_
