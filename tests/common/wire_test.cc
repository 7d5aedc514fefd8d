#include "common/wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "common/options.h"

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
  Frame f = EncodeHeader(h);
  auto back = DecodeHeader({f.data(), f.size()});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
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
  TableLayout t{"t", 100, 2, {50, 100}};
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
  ASSERT_TRUE(DecodeRequest(frames, rules, &r).ok());
  EXPECT_EQ(std::vector<uint64_t>(r.keys.begin(), r.keys.end()), keys);
  EXPECT_EQ(std::vector<float>(r.values.begin(), r.values.end()), vals);
  // The same request aimed at the other shard's rows is refused.
  keys[0] = 49;
  frames[1] = Frame::CopyOf(keys.data(), 16);
  EXPECT_EQ(DecodeRequest(frames, rules, &r).code(), StatusCode::kOutOfRange);
}

TEST(WireTest, NonFiniteValuesAreRefusedUnlessAllowed) {
  TableLayout t{"t", 10, 1, {0, 10}};
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
    EXPECT_TRUE(DecodeRequest(frames, rules, &r).ok()) << bad;
  }
  // Largest finite values, zeros and denormals pass.
  std::vector<float> ok = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                           0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), 1, 2, 3, 4, 5};
  std::vector<Frame> frames;
  frames.push_back(EncodeHeader(h));
  frames.push_back(Frame::CopyOf(ok.data(), 40));
  Request r;
  rules.reject_non_finite = true;
  EXPECT_TRUE(DecodeRequest(frames, rules, &r).ok());
}

TEST(WireTest, EmptyMessageIsRejected) {
  RequestRules rules;
  Request r;
  EXPECT_EQ(DecodeRequest({}, rules, &r).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
