// The worker's parameter cache (DESIGN.md section 5): rows it pulled, each
// with the shard's minimum clock m at the time. A read at clock c may use a
// cached row while m >= c - bound, which is what lets SSP skip pulls. The
// worker's own pushes are applied to cached rows with the table's rule (sgd,
// add), so reads from the cache still see the worker's own writes.
//
// Rows are held in one lazily allocated array per table (rows x dim), so a
// table costs its full size on the worker once any row of it is cached.
// Hashed tables (keys: hashed) are not cached yet: every read of one is a
// miss, and their inserts and pushes are not kept.
// Not thread-safe: owned by one Client.
#ifndef PS_CLIENT_PARAM_CACHE_H_
#define PS_CLIENT_PARAM_CACHE_H_

#include <cstdint>
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

 private:
  struct Table {
    uint64_t rows = 0;
    uint32_t dim = 0;
    bool hashed = false;  // never cached: clock stays empty
    OptimizerOptions optimizer;
    std::vector<float> values;   // rows x dim once anything is cached
    std::vector<int64_t> clock;  // per row; -1: not cached
  };
  std::vector<Table> tables_;
};

}  // namespace ps

#endif  // PS_CLIENT_PARAM_CACHE_H_
