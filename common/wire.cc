#include "common/wire.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/hash_slots.h"
#include "common/options.h"
#include "common/update_rule.h"
#include "common/wire_floats.h"
#include "ps.pb.h"

namespace ps {

namespace {

// Every field of ps.wire.Header that maps one to one onto the MessageHeader
// member of the same name. EncodeHeader and DecodeHeader are written from
// this list, and the fields converted by hand (kConvertedFields) make up
// the rest: UnmappedHeaderFields() checks the two against the proto.
#define PS_HEADER_PLAIN_FIELDS(X)                                                              \
  X(request_id) X(worker) X(clock) X(table) X(count) X(dim) X(flags) X(first_row)               \
  X(min_clock) X(shard) X(max_wait_ms) X(cache_hits) X(cache_misses) X(waited_us) X(session)    \
  X(epoch) X(target_clock) X(replica) X(map_epoch)

// Fields whose types differ between the proto and MessageHeader (enums, a
// string set only when not empty).
constexpr const char* kConvertedFields[] = {"op", "code", "dtype", "text"};

}  // namespace

Frame EncodeHeader(const MessageHeader& h) {
  wire::Header p;
  p.set_op(static_cast<wire::Op>(h.op));
#define PS_ENCODE_FIELD(name) p.set_##name(h.name);
  PS_HEADER_PLAIN_FIELDS(PS_ENCODE_FIELD)
#undef PS_ENCODE_FIELD
  p.set_code(static_cast<int32_t>(h.code));
  if (!h.text.empty()) p.set_text(h.text);
  p.set_dtype(static_cast<wire::DType>(h.dtype));
  size_t size = p.ByteSizeLong();
  auto frame = Frame::Allocate(size);
  if (!frame.ok()) std::abort();  // a header is a few dozen bytes
  p.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(frame->mutable_data()));
  return std::move(frame).value();
}

StatusOr<MessageHeader> DecodeHeader(std::span<const std::byte> bytes) {
  wire::Header p;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return InvalidArgumentError("header frame (" + std::to_string(bytes.size()) +
                                " bytes) is not a valid ps.wire.Header protobuf");
  }
  if (p.dtype() != wire::F32 && p.dtype() != wire::BF16 && p.dtype() != wire::F16) {
    return InvalidArgumentError("header dtype " + std::to_string(p.dtype()) +
                                " is not supported: F32 (0), BF16 (1) or F16 (2)");
  }
  MessageHeader h;
  h.op = static_cast<Op>(p.op());
#define PS_DECODE_FIELD(name) h.name = p.name();
  PS_HEADER_PLAIN_FIELDS(PS_DECODE_FIELD)
#undef PS_DECODE_FIELD
  h.code = static_cast<StatusCode>(p.code());
  h.text = p.text();
  h.dtype = static_cast<WireType>(p.dtype());
  return h;
}

std::vector<std::string> UnmappedHeaderFields() {
  std::vector<std::string> mapped(std::begin(kConvertedFields), std::end(kConvertedFields));
#define PS_NAME_FIELD(name) mapped.push_back(#name);
  PS_HEADER_PLAIN_FIELDS(PS_NAME_FIELD)
#undef PS_NAME_FIELD
  std::vector<std::string> wrong;
  const google::protobuf::Descriptor* d = wire::Header::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string name(d->field(i)->name());
    if (std::count(mapped.begin(), mapped.end(), name) != 1) {
      wrong.push_back("proto field " + name + " is not mapped exactly once");
    }
  }
  for (const std::string& name : mapped) {
    if (d->FindFieldByName(name) == nullptr) {
      wrong.push_back("mapped field " + name + " is not in ps.wire.Header");
    }
  }
  return wrong;
}

std::vector<std::string> UnmatchedOps() {
  std::vector<std::string> wrong;
  const google::protobuf::EnumDescriptor* d = wire::Op_descriptor();
  for (int i = 0; i < d->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* v = d->value(i);
    const std::string name(v->name());
    const Op op = static_cast<Op>(v->number());
    // The proto says OP_UNKNOWN where the table says UNKNOWN.
    const std::string expected = op == Op::kUnknown ? "OP_UNKNOWN" : Traits(op).name;
    if (!KnownOp(op) || name != expected) {
      wrong.push_back("proto op " + name + " (" + std::to_string(v->number()) +
                      ") has no row in kOps" +
                      (KnownOp(op) ? " of its name (the row says " + expected + ")" : ""));
    }
  }
  for (const OpTraits& t : kOps) {
    if (d->FindValueByNumber(static_cast<int>(t.op)) == nullptr) {
      wrong.push_back(std::string("row ") + t.name + " of kOps is not a ps.wire.Op value");
    }
  }
  return wrong;
}

template <typename T>
std::span<const T> FrameAs(const Frame& frame, std::vector<T>* scratch) {
  const size_t n = frame.size() / sizeof(T);
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(T) == 0) {
    return {reinterpret_cast<const T*>(frame.data()), n};
  }
  scratch->resize(n);
  std::memcpy(scratch->data(), frame.data(), n * sizeof(T));
  return {scratch->data(), n};
}
template std::span<const uint64_t> FrameAs(const Frame&, std::vector<uint64_t>*);
template std::span<const float> FrameAs(const Frame&, std::vector<float>*);

namespace {

std::string Where(const MessageHeader& h) {
  return OpName(h.op) + " request " + std::to_string(h.request_id) + " from " +
         SenderName(h.worker);
}

// Every key of a range table inside this shard's rows.
Status CheckRangeKeys(const MessageHeader& h, const TableLayout& t,
                      std::span<const uint64_t> keys) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!t.owned.Contains(keys[i])) {
      return OutOfRangeError(Where(h) + ": key " + std::to_string(keys[i]) + " (index " +
                             std::to_string(i) + ") of table '" + t.name +
                             "' is not inside this shard's rows [" +
                             std::to_string(t.owned.begin) + ", " +
                             std::to_string(t.owned.end) + ")");
    }
  }
  return Status::Ok();
}

// Every id of a hashed table in one of this shard's slots.
Status CheckHashedKeys(const MessageHeader& h, const TableLayout& t,
                       std::span<const uint64_t> keys) {
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t slot = IdSlot(keys[i], t.hash_seed, t.slots);
    if (!t.owned.Contains(slot)) {
      return OutOfRangeError(
          Where(h) + ": id " + std::to_string(keys[i]) + " (index " + std::to_string(i) +
          ") of table '" + t.name + "' is in hash slot " + std::to_string(slot) +
          ", which shard " + std::to_string(SlotShard(slot, t.slots, t.shards)) +
          " holds, not this shard (slots [" + std::to_string(t.owned.begin) + ", " +
          std::to_string(t.owned.end) + ") of " + std::to_string(t.slots) +
          "); the client's shard map differs from the server's config");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string SenderName(uint32_t worker) {
  switch (worker) {
    case kControlWorker:
      return "worker <control>";
    case kEvaluatorWorker:
      return "the evaluator";
    default:
      return "worker " + std::to_string(worker);
  }
}

namespace {

// "workers, the evaluator or the control client": who `senders` (kBy* bits) names.
std::string SendersText(uint8_t senders) {
  std::vector<std::string> who;
  if (senders & kByWorker) who.push_back("workers");
  if (senders & kByEvaluator) who.push_back("the evaluator");
  if (senders & kByControl) who.push_back("the control client");
  if (senders & kByPrimary) who.push_back("the shard's primary");
  std::string text;
  for (size_t i = 0; i < who.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == who.size() ? " or " : ", ") + who[i];
  }
  return text;
}

}  // namespace

Status DecodeRequest(std::span<Frame> frames, const RequestRules& rules, Request* out) {
  if (frames.empty()) return InvalidArgumentError("empty message: expected a header frame");
  uint64_t total = 0;
  for (const Frame& f : frames) total += f.size();
  const auto too_large = [&] {
    return ResourceExhaustedError("message of " + std::to_string(total) +
                                  " bytes exceeds the server's max_request_bytes (" +
                                  std::to_string(rules.max_request_bytes) +
                                  "); split the request or raise server.max_request_bytes");
  };
  // A backup takes its primary's entries whatever their size (a copy
  // sends whole storage blocks); every other message is bounded.
  const bool over_limit = total > rules.max_request_bytes;
  if (over_limit && !rules.replication) return too_large();
  auto parsed = DecodeHeader({frames[0].data(), frames[0].size()});
  if (!parsed.ok()) return parsed.status();
  MessageHeader& h = *parsed;
  const OpTraits& op = Traits(h.op);
  const bool replication = op.op_class == OpClass::kReplication;
  if (over_limit && !replication) return too_large();
  if (op.op != h.op || op.op_class == OpClass::kReply || (replication && !rules.replication)) {
    return InvalidArgumentError(Where(h) + ": op " + OpName(h.op) + " is not a request op");
  }
  if (replication) {
    // An entry of the primary's log: its fields and frames are the
    // backup's to check as it applies it (server/replication.cc).
    out->header = std::move(h);
    out->keys = {};
    out->values = {};
    return Status::Ok();
  }
  if (h.worker == kEvaluatorWorker) {
    // The evaluator reads: pulls, beats, a goodbye, and where the primary is.
    if (!rules.evaluator) {
      return PermissionDeniedError(Where(h) + ": this job has no evaluator (cluster.evaluator: "
                                   "false); set it in every process's job file");
    }
    if ((op.senders & kByEvaluator) == 0) {
      return PermissionDeniedError(Where(h) + ": the evaluator may only pull, beat and leave, "
                                   "not send " + OpName(h.op));
    }
    if (h.op == Op::kHeartbeat && (h.flags & kFlagResume) != 0) {
      return InvalidArgumentError(Where(h) + ": the evaluator has no clock to resume");
    }
  } else if (h.worker >= rules.num_workers &&
             !(h.worker == kControlWorker && (op.senders & kByControl) != 0)) {
    return PermissionDeniedError(Where(h) + ": unknown worker " + std::to_string(h.worker) +
                                 "; this job has workers 0.." +
                                 std::to_string(rules.num_workers - 1));
  } else if (h.worker < rules.num_workers && (op.senders & kByWorker) == 0) {
    return PermissionDeniedError(Where(h) + ": " + OpName(h.op) + " comes from " +
                                 SendersText(op.senders) + " only");
  }
  if (h.clock < 0 || h.clock > kMaxClock) {
    return InvalidArgumentError(Where(h) + ": clock " + std::to_string(h.clock) +
                                " is outside [0, 2^62]");
  }
  if (h.map_epoch < 0 || h.map_epoch > kMaxClock) {
    return InvalidArgumentError(Where(h) + ": map_epoch " + std::to_string(h.map_epoch) +
                                " is outside [0, 2^62]");
  }
  if (h.op == Op::kMembership) {
    if (h.flags != kMembershipPromote && h.flags != kMembershipDropBackup &&
        h.flags != kMembershipAddBackup) {
      return InvalidArgumentError(Where(h) + ": MEMBERSHIP flags " + std::to_string(h.flags) +
                                  "; expected 1 (promote), 2 (drop a backup) or 4 (add one)");
    }
    if (h.epoch < 0 || h.epoch > kMaxClock) {
      return InvalidArgumentError(Where(h) + ": epoch " + std::to_string(h.epoch) +
                                  " is outside [0, 2^62]");
    }
  }
  if (h.dtype != WireType::kF32 && h.op != Op::kPush && h.op != Op::kPull) {
    return InvalidArgumentError(Where(h) + ": dtype " + WireTypeName(h.dtype) +
                                " on a request without values; only PUSH and PULL carry one");
  }
  if (op.op_class != OpClass::kData) {
    const uint32_t allowed_flags =
        h.op == Op::kHeartbeat   ? (kFlagLeaving | kFlagBeat | kFlagResume)
        : h.op == Op::kMembership ? h.flags  // checked above
        : h.op == Op::kStats      ? kFlagStatsJson
        : h.op == Op::kReshard    ? (kReshardPrepare | kReshardCommit | kReshardAbort |
                                     kReshardFollow)
                                  : 0;
    if ((h.flags & ~allowed_flags) != 0) {
      return InvalidArgumentError(Where(h) + ": unknown header flags " + std::to_string(h.flags));
    }
    if (frames.size() != 1) {
      return InvalidArgumentError(Where(h) + ": expected 1 frame (header), got " +
                                  std::to_string(frames.size()));
    }
    out->header = std::move(h);
    out->keys = {};
    out->values = {};
    return Status::Ok();
  }

  if (h.table >= rules.tables.size()) {
    return NotFoundError(Where(h) + ": unknown table id " + std::to_string(h.table) + "; this job has " +
                         std::to_string(rules.tables.size()) + " tables");
  }
  const TableLayout& t = rules.tables[h.table];
  if (h.dim != t.dim) {
    return InvalidArgumentError(Where(h) + ": table '" + t.name + "' has dim " +
                                std::to_string(t.dim) + ", header says " + std::to_string(h.dim));
  }
  if (h.count == 0) return InvalidArgumentError(Where(h) + ": key count is 0; expected >= 1");
  if (h.count > rules.max_keys) {
    return ResourceExhaustedError(Where(h) + ": " + std::to_string(h.count) +
                                  " keys exceed the server's max_keys_per_request (" +
                                  std::to_string(rules.max_keys) + ")");
  }
  if ((h.flags & ~kFlagDenseRange) != 0) {
    return InvalidArgumentError(Where(h) + ": unknown header flags " + std::to_string(h.flags));
  }
  const bool push = h.op == Op::kPush;
  const WireType allowed = push ? t.wire.push : t.wire.pull;
  if (h.dtype != WireType::kF32 && h.dtype != allowed) {
    return InvalidArgumentError(
        Where(h) + ": table '" + t.name + "' " + (push ? "takes pushes" : "answers pulls") +
        " in fp32" +
        (allowed == WireType::kF32 ? std::string() : std::string(" or ") + WireTypeName(allowed)) +
        ", not " + WireTypeName(h.dtype) + " (its wire." + (push ? "push" : "pull") +
        "); the worker's job file differs from the server's");
  }
  const size_t expected_frames = 1 + (h.dense() ? 0 : 1) + (push ? 1 : 0);
  if (frames.size() != expected_frames) {
    return InvalidArgumentError(Where(h) + ": expected " + std::to_string(expected_frames) +
                                " frames (header" + (h.dense() ? "" : ", keys") +
                                (push ? ", values" : "") + "), got " +
                                std::to_string(frames.size()));
  }
  // count <= max_keys and the byte limit keep these products far from overflow;
  // compute in 128 bits anyway so no configuration can wrap them.
  const Uint128 key_bytes = static_cast<Uint128>(h.count) * 8;
  const Uint128 value_bytes = static_cast<Uint128>(h.count) * h.dim * WireBytes(h.dtype);

  std::span<const uint64_t> keys;
  if (t.hashed && h.dense()) {
    return InvalidArgumentError(Where(h) + ": a dense range of table '" + t.name +
                                "', which is hashed: its requests name ids in a keys frame");
  }
  if (h.dense()) {
    if (h.first_row < t.owned.begin || h.first_row > t.owned.end ||
        h.count > t.owned.end - h.first_row) {
      return OutOfRangeError(Where(h) + ": rows [" + std::to_string(h.first_row) + ", " +
                             std::to_string(h.first_row + h.count) + ") of table '" + t.name +
                             "' are not inside this shard's rows [" +
                             std::to_string(t.owned.begin) + ", " + std::to_string(t.owned.end) +
                             "); the client's shard map differs from the server's config");
    }
  } else {
    const Frame& kf = frames[1];
    if (kf.size() != key_bytes) {
      return InvalidArgumentError(Where(h) + ": keys frame has " + std::to_string(kf.size()) +
                                  " bytes, expected count*8 = " +
                                  std::to_string(static_cast<uint64_t>(key_bytes)));
    }
    keys = FrameAs<uint64_t>(kf, &out->key_scratch);
    if (t.hashed) {
      PS_RETURN_IF_ERROR(CheckHashedKeys(h, t, keys));
    } else {
      PS_RETURN_IF_ERROR(CheckRangeKeys(h, t, keys));
    }
  }
  std::span<const float> values;
  uint32_t max_bits = Request::kValuesNotMeasured;
  if (push) {
    const Frame& vf = frames.back();
    if (vf.size() != value_bytes) {
      return InvalidArgumentError(Where(h) + ": values frame has " + std::to_string(vf.size()) +
                                  " bytes, expected count*dim*" +
                                  std::to_string(WireBytes(h.dtype)) + " (" +
                                  WireTypeName(h.dtype) + ") = " +
                                  std::to_string(static_cast<uint64_t>(value_bytes)));
    }
    if (h.dtype == WireType::kF32) {
      values = FrameAs<float>(vf, &out->value_scratch);
    } else {
      // The shard keeps float32: the values are converted here, once.
      const size_t n = vf.size() / WireBytes(h.dtype);
      out->value_scratch.resize(n);
      DecodeFloats(h.dtype, vf.data(), n, out->value_scratch.data());
      values = out->value_scratch;
    }
    if (rules.reject_non_finite) {
      // The largest magnitude, at the cost of the finite check alone: the
      // store uses it to know whether the push can overflow (StepBounds).
      max_bits = MaxAbsBits(values.data(), values.size());
      if (max_bits >= kNonFiniteBits) {
        return InvalidArgumentError(Where(h) + ": pushed values for table '" + t.name +
                                    "' contain NaN or Inf; nothing was applied");
      }
    }
  }
  out->values_max_bits = max_bits;
  out->header = std::move(h);
  out->keys = keys;
  out->values = values;
  return Status::Ok();
}

Status DecodeReply(std::span<Frame> frames, uint32_t shard, const ReplyLookup& lookup,
                   Reply* out) {
  out->values = {};
  out->fault = ReplyFault::kUnreadable;
  if (frames.empty()) return InvalidArgumentError("empty reply: expected a header frame");
  auto parsed = DecodeHeader({frames[0].data(), frames[0].size()});
  if (!parsed.ok()) return parsed.status();
  out->header = std::move(*parsed);
  const MessageHeader& h = out->header;
  const std::optional<ReplyExpectation> expect = lookup(h.request_id);
  if (!expect || expect->shard != shard) {
    out->fault = ReplyFault::kUnmatched;
    return NotFoundError(OpName(h.op) + " reply to request " + std::to_string(h.request_id) +
                         " from server " + std::to_string(shard) +
                         " answers no request in flight to it");
  }
  if (h.op == Op::kError) {
    out->fault = ReplyFault::kRejected;
    return StatusFromErrorHeader(h);
  }
  if (h.op != ReplyOp(expect->request)) {
    out->fault = ReplyFault::kWrongOp;
    return InternalError("got a " + OpName(h.op) + " reply");
  }
  if (expect->request != Op::kPull) {
    if (frames.size() != 1) {
      out->fault = ReplyFault::kBadValues;
      return DataLossError(OpName(h.op) + " reply has " + std::to_string(frames.size()) +
                           " frames, expected 1 (header)");
    }
    out->fault = ReplyFault::kNone;
    return Status::Ok();
  }
  if (expect->clock > expect->bound && h.min_clock < expect->clock - expect->bound) {
    out->fault = ReplyFault::kStale;
    return InternalError("staleness bound violated: pulled at clock " +
                         std::to_string(expect->clock) + " with bound " +
                         std::to_string(expect->bound) + " but the shard's minimum clock was " +
                         std::to_string(h.min_clock));
  }
  if (h.dtype != expect->dtype) {
    out->fault = ReplyFault::kBadValues;
    return DataLossError(std::string("reply values are ") + WireTypeName(h.dtype) +
                         ", the pull asked for " + WireTypeName(expect->dtype));
  }
  // count and dim come from the client's own checked request.
  const uint64_t row_bytes = uint64_t{expect->dim} * WireBytes(h.dtype);
  const uint64_t expected = expect->count * row_bytes;
  uint64_t got = 0;
  bool whole_rows = row_bytes > 0;
  for (size_t i = 1; i < frames.size(); ++i) {
    got += frames[i].size();
    whole_rows = whole_rows && frames[i].size() % row_bytes == 0;
  }
  if (frames.size() < 2 || got != expected || !whole_rows) {
    out->fault = ReplyFault::kBadValues;
    return DataLossError("reply has " + std::to_string(got) + " value bytes in " +
                         std::to_string(frames.size() - 1) + " frames, expected " +
                         std::to_string(expected) + " in frames of whole rows");
  }
  out->values = frames.subspan(1);
  out->fault = ReplyFault::kNone;
  return Status::Ok();
}

MessageHeader EchoHeader(std::span<const Frame> frames) {
  if (frames.empty()) return MessageHeader();
  StatusOr<MessageHeader> h = DecodeHeader({frames[0].data(), frames[0].size()});
  return h.ok() ? std::move(*h) : MessageHeader();
}

MessageHeader MakeErrorHeader(const MessageHeader& request, uint32_t shard, const Status& status) {
  MessageHeader h;
  h.op = Op::kError;
  h.request_id = request.request_id;
  h.worker = request.worker;
  h.table = request.table;
  h.shard = shard;
  h.code = status.code();
  h.text = status.message();
  return h;
}

Status StatusFromErrorHeader(const MessageHeader& h) {
  StatusCode code = h.code == StatusCode::kOk ? StatusCode::kUnknown : h.code;
  return Status(code, h.text);
}

}  // namespace ps
