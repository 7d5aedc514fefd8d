// Wire protocol (DESIGN.md section 4): one message = a protobuf header frame,
// then raw little-endian frames of keys (uint64[count], absent for dense
// ranges) and values (count*dim values of the header's dtype: float32, or
// bfloat16 or binary16 for a table whose `wire` says so). A request carries its values in
// one frame; a PULL_OK reply may split them over several frames, each of
// whole rows, in row order (the shard sends its storage blocks as they are). The only code that includes the
// generated ps.pb.h is wire.cc; everything else sees MessageHeader.
//
// DecodeRequest is the single gate between the network and a shard's state:
// it checks every frame of a request before anything reads it. DecodeReply
// is its counterpart on the client: it checks every frame of a reply against
// the request it answers before the client reads any value.
#ifndef PS_COMMON_WIRE_H_
#define PS_COMMON_WIRE_H_

#include <bit>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/key_range.h"
#include "common/ops.h"
#include "common/options.h"
#include "common/status.h"
#include "common/transport.h"

namespace ps {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian and is read in place");

// Header flag: the rows are the dense range [first_row, first_row + count)
// and there is no keys frame.
inline constexpr uint32_t kFlagDenseRange = 1u;
// HEARTBEAT flag: the worker is done and leaves the job (it is no longer
// waited for, and never reported dead).
inline constexpr uint32_t kFlagLeaving = 2u;
// HEARTBEAT flag: a periodic beat of the worker's heartbeat thread. It
// keeps the worker alive but never brings back a worker that left: beats
// travel on their own connection, so one sent just before the goodbye may
// arrive after it.
inline constexpr uint32_t kFlagBeat = 4u;
// HEARTBEAT flag: the worker is at clock `clock` (it finished every clock
// below it). A client sends it when its connection to a shard comes back,
// so that a shard restarted from a checkpoint learns where the workers are
// instead of waiting for clocks that already passed.
inline constexpr uint32_t kFlagResume = 8u;

// STATS flag: the reply's text is the report as JSON (ShardStatsJson),
// not as lines of text.
inline constexpr uint32_t kFlagStatsJson = 1u;

// PUSH_OK flag (consistency.backup_workers): the push came after its
// clock's quorum of gradients and was dropped, not applied.
inline constexpr uint32_t kFlagLate = 16u;

// MEMBERSHIP flags (the header's epoch is the new epoch): the backup
// becomes its shard's primary; the primary stops waiting for backup
// `replica` (it is gone); the primary copies its state to backup `replica`
// (a replica that rejoins) and then replicates to it.
inline constexpr uint32_t kMembershipPromote = 1u;
inline constexpr uint32_t kMembershipDropBackup = 2u;
// With kMembershipAddBackup the header's session may name the incarnation
// of the replica's process the copy is for (under etcd, that process's
// lease; 0: whichever listens at its address).
inline constexpr uint32_t kMembershipAddBackup = 4u;

// PRIMARY_OK flag: the replica that answered serves its shard's writes at
// the reply's epoch (a backup, or a primary fenced out of its epoch,
// answers without it).
inline constexpr uint32_t kFlagServing = 1u;
// ERROR flag: the replica that answered does not serve its shard's writes
// (a backup, or a primary fenced out of its epoch): the client looks for
// the shard's primary and sends the request there.
inline constexpr uint32_t kFlagNotPrimary = 1u;

// ERROR flag: the shard map changed (server/reshard_gate.h): the request
// was not applied; the reply's map_epoch is the map the job runs on now
// and its text that map's servers, comma-separated. The client sends the
// request again under that map.
inline constexpr uint32_t kFlagMoved = 2u;

// ERROR flag of a REPLICATE reply: the replica that refused the entry holds
// no copy of the shard yet (a backup that joins, waiting for its copy).
// A primary that replicated to an earlier process at that address learns
// that this process is gone, and goes on without it until the authority
// adds the new one (server/replication.h).
inline constexpr uint32_t kFlagHoldsNoCopy = 4u;

// RESHARD flags (exactly one): prepare to hand the shard over at the
// header's clock to the servers of its text at map map_epoch; commit the
// prepared handover; abort it; follow: a server of map map_epoch listens
// at the endpoint in the text ("tcp://host:port") and takes a copy of the
// shard and every change after it until the handover
// (server/reshard_follower.h), or with no text, the shard sends nothing
// more to the servers of map map_epoch that follow it (the reshard was
// given up).
inline constexpr uint32_t kReshardPrepare = 1u;
inline constexpr uint32_t kReshardCommit = 2u;
inline constexpr uint32_t kReshardAbort = 4u;
inline constexpr uint32_t kReshardFollow = 8u;

// The largest clock a request may carry; far beyond any run, and small
// enough that clock + staleness arithmetic cannot overflow.
inline constexpr int64_t kMaxClock = int64_t{1} << 62;

// The fields of ps.wire.Header. EncodeHeader and DecodeHeader map them
// from one list (wire.cc), which UnmappedHeaderFields() checks against the
// proto.
struct MessageHeader {
  Op op = Op::kUnknown;
  uint64_t request_id = 0;  // chosen by the client, echoed in the reply
  uint32_t worker = 0;      // sender's rank, or kControlWorker
  int64_t clock = 0;
  uint32_t table = 0;       // index in JobOptions::tables
  uint64_t count = 0;       // rows in the message
  uint32_t dim = 0;         // floats per row
  uint32_t flags = 0;
  uint64_t first_row = 0;   // dense ranges only
  StatusCode code = StatusCode::kOk;  // ERROR replies
  std::string text;         // ERROR replies: message; STATS_OK: report; HELLO: the job
  int64_t min_clock = 0;
  uint32_t shard = 0;       // replies: the answering shard
  uint32_t max_wait_ms = 0; // PULL: longest wait for slower workers; 0: no limit
  uint64_t cache_hits = 0;   // HEARTBEAT: the worker's cache statistics
  uint64_t cache_misses = 0;
  uint64_t waited_us = 0;    // PULL_OK: time held back by the staleness bound
  // Requests: the sending client's session (random, non-zero; 0: none). A
  // PUSH repeating the (worker, session, request_id) of one the shard
  // applied lately is acknowledged and not applied again.
  uint64_t session = 0;
  // The membership epoch (server/replication.h): in replies of a
  // replicated shard the one its primary serves at; in MEMBERSHIP the new
  // one; in REPLICATE the sending primary's. 0 otherwise.
  int64_t epoch = 0;
  uint32_t replica = 0;      // MEMBERSHIP: the backup it drops or adds
  // Requests: the shard map the sender routes by (0: the job file's
  // servers); an ERROR with kFlagMoved and RESHARD: the map the job runs
  // on next (server/reshard_gate.h).
  int64_t map_epoch = 0;
  int64_t target_clock = 0;  // HELLO: the clock the worker trains to; 0: not said
  // PUSH: what the values frame holds; PULL: what the reply's should hold;
  // PULL_OK: what they hold. kF32 for every other op.
  WireType dtype = WireType::kF32;

  bool dense() const { return (flags & kFlagDenseRange) != 0; }
};

// Serializes the header into a frame.
Frame EncodeHeader(const MessageHeader& header);
// Parses a header frame. InvalidArgument when the bytes are not a header or
// name an unknown dtype.
StatusOr<MessageHeader> DecodeHeader(std::span<const std::byte> bytes);

// The fields of ps.wire.Header that EncodeHeader and DecodeHeader do not
// map, and the mapped names the proto lacks: empty when the two agree.
std::vector<std::string> UnmappedHeaderFields();
// The values of ps.wire.Op without a row in kOps (or whose row's name is
// not the proto's), and the rows without a proto value: empty when the two
// agree.
std::vector<std::string> UnmatchedOps();

// What a shard knows about one table, to check requests against.
struct TableLayout {
  std::string name;
  uint64_t rows = 0;  // range tables; 0 for hashed tables
  uint32_t dim = 0;
  // Range tables: the rows this shard holds. Hashed tables: the hash slots
  // it holds (the ids whose IdSlot lies in it, common/hash_slots.h).
  RowRange owned;
  // Besides float32, the dtype pulls may ask for and pushes may carry.
  WireOptions wire;
  // Hashed tables (keys: hashed): the slot count, the slot hash's seed, and
  // the number of shards the slots are split among.
  bool hashed = false;
  uint32_t slots = 0;
  uint64_t hash_seed = 0;
  uint32_t shards = 0;
};

// Who a header's `worker` is, for messages: "worker 3", "worker <control>",
// "the evaluator".
std::string SenderName(uint32_t worker);

// Everything DecodeRequest checks a request against. Must outlive the call.
struct RequestRules {
  uint32_t shard = 0;
  std::span<const TableLayout> tables;
  uint32_t num_workers = 0;
  uint64_t max_request_bytes = 0;  // all frames after the routing id
  uint64_t max_keys = 0;
  bool reject_non_finite = true;   // NaN or Inf in pushed values
  bool evaluator = false;          // cluster.evaluator: kEvaluatorWorker may read
  // A backup's rules: REPLICATE entries are taken (unchecked beyond their
  // header, and above max_request_bytes); a primary refuses them.
  bool replication = false;
};

// A validated request. `keys` and `values` point into the frames it was
// decoded from (or into the scratch vectors, for frames that were not
// aligned); both must outlive every use of the spans.
struct Request {
  MessageHeader header;
  std::span<const uint64_t> keys;  // empty for dense ranges
  std::span<const float> values;   // PUSH only
  // PUSH: MaxAbsBits of `values` when the decoder measured it (its finite
  // check, rules.reject_non_finite), else kValuesNotMeasured.
  uint32_t values_max_bits = kValuesNotMeasured;
  static constexpr uint32_t kValuesNotMeasured = 0xffffffffu;
  std::vector<uint64_t> key_scratch;
  std::vector<float> value_scratch;
};

// Checks one request (`frames` without the routing id) against `rules`:
// frame count for the op, header parse, a request op (kOps), a sender its
// row allows (common/ops.h), clock in [0, kMaxClock], total bytes and key count under the limits,
// known table, matching dim, a dtype the table allows (float32 or its
// `wire` type for the direction; float32 for every op but PUSH and PULL),
// keys frame size == count*8, values frame size == count*dim times the
// dtype's bytes, every key (or the dense range) inside this shard's rows
// (for a hashed table: keys only, every id in one of this shard's slots),
// and finite values. A PUSH in a 16-bit dtype is converted to float32 into
// value_scratch, which `values` then views. On success fills *out; on failure returns the error for the
// ERROR reply (InvalidArgument, OutOfRange, NotFound, ResourceExhausted,
// Unimplemented, PermissionDenied) and leaves nothing half-done.
Status DecodeRequest(std::span<Frame> frames, const RequestRules& rules, Request* out);

// The header of a request DecodeRequest refused, as far as it parses (a
// default header when it does not), for the ERROR reply to echo so that
// the client can match it.
MessageHeader EchoHeader(std::span<const Frame> frames);

// An ERROR reply header for `status` to the request `request` (may be a
// partially parsed or default header when the request was unreadable).
MessageHeader MakeErrorHeader(const MessageHeader& request, uint32_t shard, const Status& status);

// Reads a Status back from an ERROR reply.
Status StatusFromErrorHeader(const MessageHeader& header);

// What the request a reply answers asked for, to check the reply against.
struct ReplyExpectation {
  Op request = Op::kUnknown;  // the request's op
  uint32_t shard = 0;         // the shard it was sent to
  uint64_t count = 0;         // PULL: rows asked for
  uint32_t dim = 0;           // PULL: floats per row
  int64_t clock = 0;          // PULL: the worker's clock when it was sent
  int64_t bound = 0;          // PULL: the job's staleness bound
  WireType dtype = WireType::kF32;  // PULL: the dtype it asked for
};

// The request in flight with this request id, or nullopt when none is (it
// was answered or expired).
using ReplyLookup = std::function<std::optional<ReplyExpectation>(uint64_t request_id)>;

// Which check a reply failed (kNone: it passed).
enum class ReplyFault {
  kNone,
  kUnreadable,  // no frames, or the header does not parse; not matched to a request
  kUnmatched,   // answers no request in flight to that shard (e.g. one that expired)
  kRejected,    // an ERROR reply: the shard refused the request
  kWrongOp,     // a reply op that does not answer the request's op
  kStale,       // PULL_OK older than the staleness bound allows (a bug in the shard)
  kBadValues,   // frames that do not carry what the request asked for
};

// A reply that passed DecodeReply. `values` (PULL_OK only) are the frames
// after the header, each of whole rows, in row order, together exactly the
// rows asked for; they stay in the frames given to DecodeReply (no copy).
struct Reply {
  MessageHeader header;  // set unless fault is kUnreadable
  std::span<Frame> values;
  ReplyFault fault = ReplyFault::kNone;
};

// Checks one reply (`frames` as a DEALER receives them) that arrived from
// `shard`: header parse; a request in flight to that shard with the
// header's request id (`lookup`); an ERROR reply; the reply op against the
// request's; for PULL_OK the staleness bound (the shard's minimum clock is
// at least clock - bound), the dtype asked for, and the values frames (at
// least one, each of whole rows, count*dim values of the dtype in all); for
// every other reply no frame
// after the header. Fills *out (out->fault says which check failed, and
// out->header is set whenever the header parsed) and returns OK, or the
// error without the request's description: InvalidArgument (kUnreadable),
// NotFound (kUnmatched), the shard's own code and text (kRejected),
// Internal (kWrongOp, kStale), DataLoss (kBadValues).
Status DecodeReply(std::span<Frame> frames, uint32_t shard, const ReplyLookup& lookup,
                   Reply* out);

// Reinterprets a frame as an array of T, in place when the frame is aligned
// for T, else via a copy into *scratch. REQUIRES: size is a multiple of sizeof(T).
template <typename T>
std::span<const T> FrameAs(const Frame& frame, std::vector<T>* scratch);

}  // namespace ps

#endif  // PS_COMMON_WIRE_H_
