// How one Push or Pull is laid out over the shards (DESIGN.md section 3):
// which shard each part goes to, which of the request's rows it carries,
// where its values come from and where a pull's rows land, each part small
// enough for the server's request limits and, for pushes,
// client.push_part_bytes. Pure: no sockets, no clocks; the Client turns
// each PartSpec into a message.
//
// Thread safety: a Partition is not thread-safe; use one per thread.
#ifndef PS_CLIENT_PARTITION_H_
#define PS_CLIENT_PARTITION_H_

#include <cstdint>
#include <span>
#include <vector>

#include "common/wire.h"

namespace ps {

// The limits each part must keep.
struct PartLimits {
  uint64_t max_request_bytes = 0;  // server.max_request_bytes (all frames of a request)
  uint64_t max_keys = 0;           // server.max_keys_per_request
  uint64_t push_part_bytes = 0;    // client.push_part_bytes (value bytes of a push part)
};

// Rows per part of a `op` request (kPush or kPull) of rows of `dim` floats,
// sent as a dense range (no keys) or with keys: under the byte limit with
// room for the header, under the key limit, pushes under push_part_bytes,
// and at least 1.
uint64_t RowsPerPart(Op op, uint32_t dim, bool dense, const PartLimits& limits);

// One request as the partitioner sees it.
struct PartitionRequest {
  Op op = Op::kUnknown;   // kPush or kPull
  uint64_t table_rows = 0;
  uint32_t dim = 0;
  uint32_t num_shards = 0;
  bool dense = false;     // the whole table, in row order; `rows` is not used
  // Sparse: the row ids, each < table_rows (checked by the caller).
  std::span<const uint64_t> rows = {};
  // PULL: row i of the request lands at output row out_index[i] (empty:
  // at output row i).
  std::span<const uint64_t> out_index = {};
  // A hashed table (keys: hashed): `rows` are ids, each on the shard that
  // holds its hash slot (common/hash_slots.h); never dense.
  bool hashed = false;
  uint32_t slots = 0;
  uint64_t hash_seed = 0;
};

// One part. Row offsets count rows (multiply by dim for floats).
struct PartSpec {
  enum class Kind {
    kDenseRange,  // table rows [first_row, first_row + count): no keys frame
    kRun,         // request rows [offset, offset + count), in place
    kGathered,    // request rows gather[0..count), from several places
  };
  Kind kind = Kind::kRun;
  uint32_t shard = 0;
  uint64_t count = 0;
  uint64_t first_row = 0;  // kDenseRange
  // kDenseRange and kRun: the part's first row in the request's rows (and
  // values, and, without positions, the output); kDenseRange: == first_row.
  uint64_t offset = 0;
  std::span<const uint64_t> gather = {};  // kGathered: indices into the request's rows
  // PULL: the output row of each of the part's rows; empty: output rows
  // [offset, offset + count).
  std::span<const uint64_t> positions = {};
};

// The parts of one request. Spans point into the request's out_index and
// into the Partition, valid until its next Split (or its destruction). The
// storage is kept between requests, so splitting allocates only when a
// request is larger than any before.
class Partition {
 public:
  // Lays `request` out: dense requests per shard in row order; rows grouped
  // by shard (each shard's rows one run, e.g. sorted) as runs of the
  // caller's rows; otherwise gathered per shard, in the request's order.
  // Every part has 1..RowsPerPart() rows.
  void Split(const PartitionRequest& request, const PartLimits& limits);

  std::span<const PartSpec> parts() const { return parts_; }

 private:
  void SplitGathered(const PartitionRequest& request, uint64_t chunk);

  std::vector<PartSpec> parts_;
  std::vector<uint32_t> owner_;      // per request row: its shard
  std::vector<uint64_t> gather_;     // request row indices, grouped by shard
  std::vector<uint64_t> positions_;  // output rows of gathered pull rows
  std::vector<uint64_t> starts_;     // per shard: its first entry in gather_
};

}  // namespace ps

#endif  // PS_CLIENT_PARTITION_H_
