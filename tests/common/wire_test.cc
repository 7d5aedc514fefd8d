#include "common/wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/hash_slots.h"
#include "common/options.h"
#include "common/wire_floats.h"
#include "tests/util/status_matchers.h"

namespace ps {
namespace {

TEST(WireTest, HeaderRoundTripsEveryField) {
  MessageHeader h;
  h.op = Op::kError;
  h.request_id = 1ull << 40;
  h.worker = 3;
  h.clock = -7;
  h.table = 2;
  h.count = 123456789;
  h.dim = 16;
  h.flags = kFlagDenseRange;
  h.first_row = 99;
  h.code = StatusCode::kOutOfRange;
  h.text = "what went wrong";
  h.min_clock = 5;
  h.shard = 4;
  h.session = 77;
  h.epoch = 6;
  h.replica = 2;
  Frame f = EncodeHeader(h);
  auto back = DecodeHeader({f.data(), f.size()});
  ASSERT_OK(back);
  EXPECT_EQ(back->op, h.op);
  EXPECT_EQ(back->request_id, h.request_id);
  EXPECT_EQ(back->worker, h.worker);
  EXPECT_EQ(back->clock, h.clock);
  EXPECT_EQ(back->table, h.table);
  EXPECT_EQ(back->count, h.count);
  EXPECT_EQ(back->dim, h.dim);
  EXPECT_TRUE(back->dense());
  EXPECT_EQ(back->first_row, h.first_row);
  EXPECT_EQ(back->code, h.code);
  EXPECT_EQ(back->text, h.text);
  EXPECT_EQ(back->min_clock, h.min_clock);
  EXPECT_EQ(back->shard, h.shard);
  EXPECT_EQ(back->session, h.session);
  EXPECT_EQ(back->epoch, h.epoch);
  EXPECT_EQ(back->replica, h.replica);
  EXPECT_EQ(StatusFromErrorHeader(*back).code(), StatusCode::kOutOfRange);
}

TEST(WireTest, TruncatedHeaderIsRejected) {
  MessageHeader h;
  h.op = Op::kPull;
  h.text = "some text to make it longer";
  Frame f = EncodeHeader(h);
  auto back = DecodeHeader({f.data(), f.size() - 3});
  EXPECT_EQ(back.status().code(), StatusCode::kInvalidArgument);
}

TEST(WireTest, ReplyOpsMatchRequests) {
  EXPECT_EQ(ReplyOp(Op::kPush), Op::kPushOk);
  EXPECT_EQ(ReplyOp(Op::kShutdown), Op::kShutdownOk);
  EXPECT_EQ(ReplyOp(Op::kPushOk), Op::kError);
  EXPECT_EQ(OpName(static_cast<Op>(55)), "OP(55)");
}

TEST(WireTest, MisalignedFramesAreReadThroughScratch) {
  // A small frame lives inside the zmq_msg_t; whatever its alignment, the
  // values read back are the same.
  std::vector<float> src = {1.5f, -2.0f, 3.25f};
  unsigned char buf[sizeof(float) * 3 + 1];
  std::memcpy(buf + 1, src.data(), sizeof(float) * 3);
  Frame f = Frame::CopyOf(buf + 1, sizeof(float) * 3);
  std::vector<float> scratch;
  auto view = FrameAs<float>(f, &scratch);
  ASSERT_EQ(view.size(), 3u);
  EXPECT_EQ(std::vector<float>(view.begin(), view.end()), src);
}

TEST(WireTest, DecodeRequestAcceptsAValidSparsePush) {
  TableLayout t{"t", 100, 2, {50, 100}, {}};
  RequestRules rules{1, std::span<const TableLayout>(&t, 1), 2, 1 << 20, 1000, true};
  MessageHeader h;
  h.op = Op::kPush;
  h.worker = 1;
  h.count = 2;
  h.dim = 2;
  std::vector<uint64_t> keys = {50, 99};
  std::vector<float> vals = {1, 2, 3, 4};
  std::vector<Frame> frames;
  frames.push_back(EncodeHeader(h));
  frames.push_back(Frame::CopyOf(keys.data(), 16));
  frames.push_back(Frame::CopyOf(vals.data(), 16));
  Request r;
  ASSERT_OK(DecodeRequest(frames, rules, &r));
  EXPECT_EQ(std::vector<uint64_t>(r.keys.begin(), r.keys.end()), keys);
  EXPECT_EQ(std::vector<float>(r.values.begin(), r.values.end()), vals);
  // The same request aimed at the other shard's rows is refused.
  keys[0] = 49;
  frames[1] = Frame::CopyOf(keys.data(), 16);
  EXPECT_EQ(DecodeRequest(frames, rules, &r).code(), StatusCode::kOutOfRange);
}

TEST(WireTest, AHashedTablesIdsMustLieInThisShardsSlots) {
  // Shard 1 of 3 holds slots [22, 43) of 64.
  constexpr uint32_t kSlots = 64;
  const uint64_t seed = NameHash("emb");
  TableLayout t{"emb", 0, 1, ShardSlots(kSlots, 3, 1), {}, true, kSlots, seed, 3};
  RequestRules rules{1, std::span<const TableLayout>(&t, 1), 1, 1 << 20, 1000, true};
  // Ids of each shard, found by their slots.
  std::vector<uint64_t> mine, other;
  for (uint64_t id = 1; mine.size() < 3 || other.empty(); id = id * 6364136223846793005ull + 1) {
    const uint32_t owner = SlotShard(IdSlot(id, seed, kSlots), kSlots, 3);
    if (owner == 1 && mine.size() < 3) mine.push_back(id);
    if (owner == 2 && other.empty()) other.push_back(id);
  }
  MessageHeader h;
  h.op = Op::kPull;
  h.count = 3;
  h.dim = 1;
  auto decode = [&](const std::vector<uint64_t>& keys) {
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(h));
    frames.push_back(Frame::CopyOf(keys.data(), keys.size() * 8));
    Request r;
    return DecodeRequest(frames, rules, &r);
  };
  EXPECT_OK(decode(mine));
  std::vector<uint64_t> keys = mine;
  keys[2] = other[0];
  const Status refused = decode(keys);
  EXPECT_EQ(refused.code(), StatusCode::kOutOfRange);
  const std::string slot = std::to_string(IdSlot(other[0], seed, kSlots));
  EXPECT_NE(refused.message().find("id " + std::to_string(other[0]) + " (index 2) of table "
                                   "'emb' is in hash slot " + slot + ", which shard 2 holds"),
            std::string::npos)
      << refused.ToString();
  // A dense range of a hashed table is refused: it has no rows to range over.
  h.flags = kFlagDenseRange;
  h.first_row = 22;
  std::vector<Frame> frames;
  frames.push_back(EncodeHeader(h));
  Request r;
  const Status dense = DecodeRequest(frames, rules, &r);
  EXPECT_EQ(dense.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dense.message().find("which is hashed"), std::string::npos) << dense.ToString();
}

TEST(WireTest, NonFiniteValuesAreRefusedUnlessAllowed) {
  TableLayout t{"t", 10, 1, {0, 10}, {}};
  RequestRules rules{0, std::span<const TableLayout>(&t, 1), 1, 1 << 20, 1000, true};
  MessageHeader h;
  h.op = Op::kPush;
  h.count = 10;
  h.dim = 1;
  h.flags = kFlagDenseRange;
  for (size_t bad = 0; bad < 10; ++bad) {
    std::vector<float> vals(10, 3.0f);
    vals[bad] = bad % 2 ? -std::numeric_limits<float>::infinity()
                        : std::numeric_limits<float>::quiet_NaN();
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(h));
    frames.push_back(Frame::CopyOf(vals.data(), 40));
    Request r;
    rules.reject_non_finite = true;
    EXPECT_EQ(DecodeRequest(frames, rules, &r).code(), StatusCode::kInvalidArgument) << bad;
    rules.reject_non_finite = false;
    EXPECT_OK(DecodeRequest(frames, rules, &r)) << bad;
  }
  // Largest finite values, zeros and denormals pass.
  std::vector<float> ok = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                           0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), 1, 2, 3, 4, 5};
  std::vector<Frame> frames;
  frames.push_back(EncodeHeader(h));
  frames.push_back(Frame::CopyOf(ok.data(), 40));
  Request r;
  rules.reject_non_finite = true;
  EXPECT_OK(DecodeRequest(frames, rules, &r));
}

TEST(WireTest, EmptyMessageIsRejected) {
  RequestRules rules;
  Request r;
  EXPECT_EQ(DecodeRequest({}, rules, &r).code(), StatusCode::kInvalidArgument);
}

// A client's view of one request in flight: PULL request 7 of 4 rows x 3
// floats to shard 1, sent at clock 5 under a staleness bound of 2.
class DecodeReplyTest : public ::testing::Test {
 protected:
  DecodeReplyTest() {
    lookup_ = [this](uint64_t id) -> std::optional<ReplyExpectation> {
      if (id != 7) return std::nullopt;
      return expect_;
    };
  }
  MessageHeader Header(Op op) const {
    MessageHeader h;
    h.op = op;
    h.request_id = 7;
    h.shard = 1;
    h.count = 4;
    h.dim = 3;
    h.min_clock = 3;
    return h;
  }
  // A reply of `header` and value frames of `sizes` bytes.
  static std::vector<Frame> Message(const MessageHeader& header, std::vector<size_t> sizes) {
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(header));
    for (size_t size : sizes) frames.push_back(Frame::CopyOf(std::string(size, '\0')));
    return frames;
  }
  Status Decode(std::vector<Frame>& frames, uint32_t shard = 1) {
    return DecodeReply(frames, shard, lookup_, &reply_);
  }
  ReplyExpectation expect_{.request = Op::kPull, .shard = 1, .count = 4, .dim = 3, .clock = 5,
                           .bound = 2};
  ReplyLookup lookup_;
  Reply reply_;
};

TEST_F(DecodeReplyTest, PullReplyInSeveralFramesOfWholeRowsPasses) {
  std::vector<Frame> frames = Message(Header(Op::kPullOk), {12, 36});
  Status s = Decode(frames);
  ASSERT_OK(s);
  EXPECT_EQ(reply_.fault, ReplyFault::kNone);
  EXPECT_EQ(reply_.header.request_id, 7u);
  ASSERT_EQ(reply_.values.size(), 2u);
  EXPECT_EQ(reply_.values[0].size(), 12u);
  EXPECT_EQ(reply_.values[1].data(), frames[2].data());  // the frames themselves, not copies
}

TEST_F(DecodeReplyTest, ControlReplyWithOnlyAHeaderPasses) {
  expect_ = {.request = Op::kStats, .shard = 1};
  MessageHeader h = Header(Op::kStatsOk);
  h.text = "report";
  std::vector<Frame> frames = Message(h, {});
  ASSERT_OK(Decode(frames));
  EXPECT_EQ(reply_.header.text, "report");
  EXPECT_TRUE(reply_.values.empty());
}

TEST_F(DecodeReplyTest, EmptyOrUnreadableRepliesAreUnreadable) {
  std::vector<Frame> none;
  EXPECT_EQ(Decode(none).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reply_.fault, ReplyFault::kUnreadable);
  std::vector<Frame> garbage;
  garbage.push_back(Frame::CopyOf(std::string_view("\xff\xff\xff")));
  EXPECT_EQ(Decode(garbage).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reply_.fault, ReplyFault::kUnreadable);
}

TEST_F(DecodeReplyTest, ReplyToNoRequestInFlightOrFromAnotherShardIsUnmatched) {
  MessageHeader h = Header(Op::kPullOk);
  h.request_id = 8;
  std::vector<Frame> unknown = Message(h, {48});
  Status s = Decode(unknown);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(reply_.fault, ReplyFault::kUnmatched);
  EXPECT_NE(s.message().find("request 8 from server 1"), std::string::npos) << s.ToString();
  std::vector<Frame> elsewhere = Message(Header(Op::kPullOk), {48});
  EXPECT_EQ(Decode(elsewhere, /*shard=*/0).code(), StatusCode::kNotFound);
  EXPECT_EQ(reply_.fault, ReplyFault::kUnmatched);
}

TEST_F(DecodeReplyTest, ErrorReplyCarriesTheShardsCodeAndText) {
  std::vector<Frame> frames;
  frames.push_back(
      EncodeHeader(MakeErrorHeader(Header(Op::kPull), 1, ResourceExhaustedError("too big"))));
  Status s = Decode(frames);
  EXPECT_EQ(s, ResourceExhaustedError("too big"));
  EXPECT_EQ(reply_.fault, ReplyFault::kRejected);
  EXPECT_EQ(reply_.header.request_id, 7u);
}

TEST_F(DecodeReplyTest, ReplyOpThatDoesNotAnswerTheRequestIsInternal) {
  std::vector<Frame> frames = Message(Header(Op::kPushOk), {});
  Status s = Decode(frames);
  EXPECT_EQ(s, InternalError("got a PUSH_OK reply"));
  EXPECT_EQ(reply_.fault, ReplyFault::kWrongOp);
}

TEST_F(DecodeReplyTest, PullOlderThanTheStalenessBoundIsInternal) {
  MessageHeader h = Header(Op::kPullOk);
  h.min_clock = 2;  // clock 5 with bound 2 needs at least 3
  std::vector<Frame> frames = Message(h, {48});
  Status s = Decode(frames);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(reply_.fault, ReplyFault::kStale);
  EXPECT_NE(s.message().find("pulled at clock 5 with bound 2 but the shard's minimum clock was 2"),
            std::string::npos)
      << s.ToString();
  // An unbounded mode never checks.
  expect_.bound = kMaxClock;
  EXPECT_OK(Decode(frames));
}

TEST_F(DecodeReplyTest, ValuesThatAreNotTheRowsAskedForAreDataLoss) {
  struct Case {
    std::vector<size_t> sizes;
    const char* what;
  };
  const Case cases[] = {
      {{}, "reply has 0 value bytes in 0 frames, expected 48"},
      {{12}, "reply has 12 value bytes in 1 frames, expected 48"},
      {{60}, "reply has 60 value bytes in 1 frames, expected 48"},
      {{20, 28}, "reply has 48 value bytes in 2 frames, expected 48 in frames of whole rows"},
  };
  for (const Case& c : cases) {
    std::vector<Frame> frames = Message(Header(Op::kPullOk), c.sizes);
    Status s = Decode(frames);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << c.what;
    EXPECT_EQ(reply_.fault, ReplyFault::kBadValues) << c.what;
    EXPECT_NE(s.message().find(c.what), std::string::npos) << s.ToString();
  }
}

TEST_F(DecodeReplyTest, ControlReplyWithExtraFramesIsDataLoss) {
  expect_ = {.request = Op::kClock, .shard = 1};
  std::vector<Frame> frames = Message(Header(Op::kClockOk), {8});
  Status s = Decode(frames);
  EXPECT_EQ(s, DataLossError("CLOCK_OK reply has 2 frames, expected 1 (header)"));
  EXPECT_EQ(reply_.fault, ReplyFault::kBadValues);
}

// A table whose pushes may come in bf16 and whose pulls may ask for fp16.
struct DtypeFixture {
  TableLayout t{"h", 10, 2, {0, 10}, {.pull = WireType::kF16, .push = WireType::kBf16}};
  RequestRules rules{0, std::span<const TableLayout>(&t, 1), 1, 1 << 20, 1000, true};

  // A dense push of `count` rows from row 0 in `dtype`, its values frame
  // `value_bytes` long (the values: i / 3).
  std::vector<Frame> Push(WireType dtype, uint64_t count, size_t value_bytes) const {
    MessageHeader h;
    h.op = Op::kPush;
    h.count = count;
    h.dim = 2;
    h.flags = kFlagDenseRange;
    h.dtype = dtype;
    std::vector<float> v(count * 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / 3.0f;
    std::vector<uint8_t> bytes(std::max(value_bytes, v.size() * 4));
    EncodeFloats(dtype, v.data(), v.size(), bytes.data());
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(h));
    frames.push_back(Frame::CopyOf(bytes.data(), value_bytes));
    return frames;
  }
};

TEST(WireTest, DtypeRoundTripsAndUnknownOnesAreRefused) {
  MessageHeader h;
  h.op = Op::kPush;
  h.dtype = WireType::kF16;
  Frame f = EncodeHeader(h);
  ASSERT_EQ(DecodeHeader({f.data(), f.size()})->dtype, WireType::kF16);
  h.dtype = static_cast<WireType>(7);
  f = EncodeHeader(h);
  const auto bad = DecodeHeader({f.data(), f.size()});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("dtype 7"), std::string::npos) << bad.status().ToString();
}

// A bf16 push is converted to float32 once, in the decoder: the shard sees
// exactly the values the worker rounded to.
TEST(WireTest, A16BitPushIsDecodedToFloat32) {
  DtypeFixture x;
  std::vector<Frame> frames = x.Push(WireType::kBf16, 10, 10 * 2 * 2);
  Request r;
  ASSERT_OK(DecodeRequest(frames, x.rules, &r));
  ASSERT_EQ(r.values.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(r.values[i], Bf16ToFloat(FloatToBf16(static_cast<float>(i) / 3.0f))) << i;
  }
  // float32 stays allowed whatever the table's wire says.
  frames = x.Push(WireType::kF32, 10, 10 * 2 * 4);
  ASSERT_OK(DecodeRequest(frames, x.rules, &r));
  EXPECT_EQ(r.values[5], 5.0f / 3.0f);
}

// Each malformed 16-bit request is refused, naming what is wrong.
TEST(WireTest, MalformedOrForbiddenDtypesAreRefused) {
  DtypeFixture x;
  Request r;
  struct Case {
    const char* name;
    std::vector<Frame> frames;
    const char* says;
  };
  std::vector<Case> cases;
  // A float32-sized values frame under a bf16 header, a short one, an odd one.
  cases.push_back({"bf16 header, fp32 bytes", x.Push(WireType::kBf16, 10, 80), "count*dim*2 (bf16)"});
  cases.push_back({"bf16, one value short", x.Push(WireType::kBf16, 10, 38), "count*dim*2"});
  cases.push_back({"bf16, odd bytes", x.Push(WireType::kBf16, 10, 41), "count*dim*2"});
  // A dtype the table does not take for pushes (fp16; only bf16 is).
  cases.push_back({"fp16 push", x.Push(WireType::kF16, 10, 40), "wire.push"});
  {
    // A pull asking for bf16 where the table answers in fp16.
    MessageHeader h;
    h.op = Op::kPull;
    h.count = 10;
    h.dim = 2;
    h.flags = kFlagDenseRange;
    h.dtype = WireType::kBf16;
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(h));
    cases.push_back({"bf16 pull", std::move(frames), "wire.pull"});
  }
  {
    // A dtype on a request that carries no values.
    MessageHeader h;
    h.op = Op::kClock;
    h.dtype = WireType::kBf16;
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(h));
    cases.push_back({"clock with a dtype", std::move(frames), "only PUSH and PULL"});
  }
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Status st = DecodeRequest(c.frames, x.rules, &r);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.ToString();
  }
  // NaN and Inf keep float32's rule in 16 bits: refused.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    std::vector<Frame> frames = x.Push(WireType::kBf16, 1, 4);
    const uint16_t v[2] = {FloatToBf16(1.0f), FloatToBf16(bad)};
    frames[1] = Frame::CopyOf(v, 4);
    EXPECT_EQ(DecodeRequest(frames, x.rules, &r).code(), StatusCode::kInvalidArgument) << bad;
  }
}

// A PULL_OK holds what the pull asked for, in that dtype's size.
TEST(WireTest, ReplyValuesMustBeOfTheDtypeAsked) {
  const ReplyExpectation expect{.request = Op::kPull, .shard = 0, .count = 4, .dim = 2,
                                .dtype = WireType::kBf16};
  auto reply = [](WireType dtype, size_t bytes) {
    MessageHeader h;
    h.op = Op::kPullOk;
    h.request_id = 9;
    h.dtype = dtype;
    std::vector<Frame> frames;
    frames.push_back(EncodeHeader(h));
    std::vector<uint8_t> zeros(bytes);
    frames.push_back(Frame::CopyOf(zeros.data(), bytes));
    return frames;
  };
  const ReplyLookup lookup = [&](uint64_t) { return std::optional<ReplyExpectation>(expect); };
  Reply out;
  std::vector<Frame> good = reply(WireType::kBf16, 4 * 2 * 2);
  ASSERT_OK(DecodeReply(good, 0, lookup, &out));
  EXPECT_EQ(out.values.size(), 1u);
  std::vector<Frame> wrong_type = reply(WireType::kF32, 4 * 2 * 4);
  EXPECT_EQ(DecodeReply(wrong_type, 0, lookup, &out).code(), StatusCode::kDataLoss);
  EXPECT_EQ(out.fault, ReplyFault::kBadValues);
  std::vector<Frame> wrong_size = reply(WireType::kBf16, 4 * 2 * 4);
  EXPECT_EQ(DecodeReply(wrong_size, 0, lookup, &out).code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ps
