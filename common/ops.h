// The wire ops (proto/ps.proto, enum Op) and one table of what each is:
// its name, its reply, who may send it, whether it changes a shard's state
// and its metrics label. Every part that treats ops differently (the
// request decoder, access control, admission, the shard's dispatch of
// state changes, its metrics) reads this table, so a new op is its proto
// value, one row here and its handler.
//
// Everything here is constant: safe to use from any thread.
#ifndef PS_COMMON_OPS_H_
#define PS_COMMON_OPS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ps {

// The values of ps.wire.Op; a reply is its request + 100 by convention,
// but only the table below says which reply answers which request.
enum class Op : int {
  kUnknown = 0,
  kPush = 1,
  kPull = 2,
  kClock = 3,
  kHeartbeat = 4,
  kStats = 5,
  kCheckpoint = 6,
  kShutdown = 7,
  kHello = 8,        // start-up rendezvous (common/rendezvous.h)
  kReplicate = 9,    // primary to backup (server/replication.h)
  kMembership = 10,  // the authority to a replica (server/replication.h)
  kPrimary = 11,     // does this replica serve its shard's writes? (server/replication.h)
  kReshard = 12,     // hand the shard over to another server count (server/reshard_gate.h)
  kPushOk = 101,
  kPullOk = 102,
  kClockOk = 103,
  kHeartbeatOk = 104,
  kStatsOk = 105,
  kCheckpointOk = 106,
  kShutdownOk = 107,
  kHelloOk = 108,
  kReplicateOk = 109,
  kMembershipOk = 110,
  kPrimaryOk = 111,
  kReshardOk = 112,
  kError = 200,
};

// What kind of message an op is, which decides the frames it has and the
// checks DecodeRequest makes.
enum class OpClass : uint8_t {
  kReply,        // a reply (and kUnknown): never a request
  kData,         // PUSH, PULL: a table's rows (keys and values frames)
  kWorker,       // a worker's bookkeeping: header only
  kControl,      // the operator's (ps_ctl, the authority): header only; admin under curve
  kProbe,        // which replica serves: header only, answered even when fenced
  kReplication,  // primary to backup: an entry of its log and its frames
};

// Who may send a request op: bits of OpTraits::senders.
inline constexpr uint8_t kByWorker = 1;     // a worker rank 0..workers-1
inline constexpr uint8_t kByEvaluator = 2;  // kEvaluatorWorker (cluster.evaluator)
inline constexpr uint8_t kByControl = 4;    // kControlWorker (ps_ctl, ps_launch, the authority)
inline constexpr uint8_t kByPrimary = 8;    // the shard's primary, to its backups

struct OpTraits {
  Op op;
  const char* name;           // the proto enum name: "PUSH", "PULL_OK"
  OpClass op_class;
  Op reply;                   // requests: the success reply; replies: kUnknown
  uint8_t senders;            // requests: kBy* bits; replies: 0
  bool changes_state;         // with backups, answered once they hold it
  const char* metrics_label;  // ps_server_requests_total{op=...}; nullptr: not counted
};

inline constexpr OpTraits kOps[] = {
    // op, name, class, reply, senders, changes state, metrics label
    {Op::kUnknown, "UNKNOWN", OpClass::kReply, Op::kUnknown, 0, false, "invalid"},
    {Op::kPush, "PUSH", OpClass::kData, Op::kPushOk, kByWorker, true, "push"},
    {Op::kPull, "PULL", OpClass::kData, Op::kPullOk, kByWorker | kByEvaluator, false, "pull"},
    {Op::kClock, "CLOCK", OpClass::kWorker, Op::kClockOk, kByWorker, true, "clock"},
    {Op::kHeartbeat, "HEARTBEAT", OpClass::kWorker, Op::kHeartbeatOk, kByWorker | kByEvaluator,
     true, "heartbeat"},
    {Op::kStats, "STATS", OpClass::kControl, Op::kStatsOk, kByWorker | kByControl, false,
     "stats"},
    {Op::kCheckpoint, "CHECKPOINT", OpClass::kControl, Op::kCheckpointOk, kByWorker | kByControl,
     false, "checkpoint"},
    {Op::kShutdown, "SHUTDOWN", OpClass::kControl, Op::kShutdownOk, kByWorker | kByControl, false,
     "shutdown"},
    {Op::kHello, "HELLO", OpClass::kWorker, Op::kHelloOk, kByWorker, true, "hello"},
    {Op::kReplicate, "REPLICATE", OpClass::kReplication, Op::kReplicateOk, kByPrimary, true,
     nullptr},
    {Op::kMembership, "MEMBERSHIP", OpClass::kControl, Op::kMembershipOk, kByControl, false,
     "membership"},
    {Op::kPrimary, "PRIMARY", OpClass::kProbe, Op::kPrimaryOk,
     kByWorker | kByEvaluator | kByControl, false, "primary"},
    {Op::kReshard, "RESHARD", OpClass::kControl, Op::kReshardOk, kByControl, false, "reshard"},
    {Op::kPushOk, "PUSH_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kPullOk, "PULL_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kClockOk, "CLOCK_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kHeartbeatOk, "HEARTBEAT_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kStatsOk, "STATS_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kCheckpointOk, "CHECKPOINT_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kShutdownOk, "SHUTDOWN_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kHelloOk, "HELLO_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kReplicateOk, "REPLICATE_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kMembershipOk, "MEMBERSHIP_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kPrimaryOk, "PRIMARY_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kReshardOk, "RESHARD_OK", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
    {Op::kError, "ERROR", OpClass::kReply, Op::kUnknown, 0, false, nullptr},
};

namespace ops_internal {

// Op values are small: a row index per value, so that Traits() is a load.
inline constexpr size_t kMaxOpValue = 255;

constexpr std::array<uint8_t, kMaxOpValue + 1> RowIndex() {
  std::array<uint8_t, kMaxOpValue + 1> index{};  // 0: the kUnknown row
  for (size_t i = 0; i < std::size(kOps); ++i) index[static_cast<size_t>(kOps[i].op)] = i;
  return index;
}
inline constexpr std::array<uint8_t, kMaxOpValue + 1> kRowIndex = RowIndex();

constexpr bool RowsValid() {
  if (kOps[0].op != Op::kUnknown || std::size(kOps) > 255) return false;
  for (size_t i = 0; i < std::size(kOps); ++i) {
    const int v = static_cast<int>(kOps[i].op);
    if (v < 0 || static_cast<size_t>(v) > kMaxOpValue) return false;
    for (size_t j = 0; j < i; ++j) {
      if (kOps[j].op == kOps[i].op) return false;
    }
  }
  return true;
}
static_assert(RowsValid(), "kOps: kUnknown first, each op once, values 0..255");

}  // namespace ops_internal

// The row of `op`; the kUnknown row for a value no row names (a peer may
// send any number).
constexpr const OpTraits& Traits(Op op) {
  const auto v = static_cast<unsigned>(op);
  return v <= ops_internal::kMaxOpValue ? kOps[ops_internal::kRowIndex[v]] : kOps[0];
}

// Whether `op` has a row (kUnknown has one too).
constexpr bool KnownOp(Op op) { return Traits(op).op == op; }

// One more than the largest op value with a metrics label: the size of an
// array of per-op metrics indexed by the op's value.
constexpr size_t OpMetricsSlots() {
  size_t n = 0;
  for (const OpTraits& t : kOps) {
    if (t.metrics_label != nullptr && static_cast<size_t>(t.op) + 1 > n) {
      n = static_cast<size_t>(t.op) + 1;
    }
  }
  return n;
}

// "PUSH", "PULL_OK", ...; "OP(<n>)" for unknown values.
std::string OpName(Op op);
// The success reply of a request op (kPush -> kPushOk); kError for any
// other op.
constexpr Op ReplyOp(Op request) {
  const OpTraits& t = Traits(request);
  return t.op != request || t.op_class == OpClass::kReply ? Op::kError : t.reply;
}

}  // namespace ps

#endif  // PS_COMMON_OPS_H_
