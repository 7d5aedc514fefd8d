// Test helper: every shard of a job as a ShardStore in one process (no
// server), and a sparse push request to apply to one of them.
//
//   TestStores stores = CreateTestStores(job);
//   ASSERT_OK(stores[s]->ApplyPush(TestPushRequest(table, dim, keys, values), clock));
#ifndef PS_TESTS_UTIL_TEST_STORES_H_
#define PS_TESTS_UTIL_TEST_STORES_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/options.h"
#include "common/wire.h"
#include "store/shard_store.h"

namespace ps {

// The stores of a job's shards, stores[s] shard s's.
using TestStores = std::vector<std::unique_ptr<ShardStore>>;

// A store for every shard of `job` (ShardStore::Create; with `initialize`
// false every value starts at 0).
inline TestStores CreateTestStores(const JobOptions& job, bool initialize = true) {
  TestStores stores;
  for (uint32_t s = 0; s < job.cluster.servers.size(); ++s) {
    stores.push_back(ShardStore::Create(job, s, initialize).value());
  }
  return stores;
}

// A sparse push of `keys` (rows of a range table or ids of a hashed one)
// of table index `table`, with `dim` floats of `values` for each key in
// turn. The request views `keys` and `values`, which must outlive it.
inline Request TestPushRequest(uint32_t table, uint32_t dim, std::span<const uint64_t> keys,
                               std::span<const float> values) {
  Request r;
  r.header.op = Op::kPush;
  r.header.table = table;
  r.header.count = keys.size();
  r.header.dim = dim;
  r.keys = keys;
  r.values = values;
  return r;
}

}  // namespace ps

#endif  // PS_TESTS_UTIL_TEST_STORES_H_
