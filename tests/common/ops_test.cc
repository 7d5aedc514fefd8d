#include "common/ops.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/wire.h"

namespace ps {
namespace {

TEST(OpsTest, EveryProtoOpHasOneRowOfItsName) {
  // Both directions: each ps.wire.Op value has a row named as the proto
  // names it, and each row is a proto value.
  EXPECT_EQ(UnmatchedOps(), std::vector<std::string>());
}

TEST(OpsTest, EveryRowIsItsOpsAndNamesAreUnique) {
  std::set<std::string> names;
  std::set<int> values;
  for (const OpTraits& t : kOps) {
    EXPECT_TRUE(names.insert(t.name).second) << t.name;
    EXPECT_TRUE(values.insert(static_cast<int>(t.op)).second) << t.name;
    EXPECT_EQ(&Traits(t.op), &t) << t.name;
    EXPECT_EQ(OpName(t.op), t.name);
  }
}

TEST(OpsTest, RequestsAnswerWithTheirOwnReplyOp) {
  std::set<Op> replies;
  for (const OpTraits& t : kOps) {
    if (t.op_class == OpClass::kReply) {
      EXPECT_EQ(t.reply, Op::kUnknown) << t.name;
      EXPECT_EQ(t.senders, 0) << t.name;
      EXPECT_FALSE(t.changes_state) << t.name;
      EXPECT_EQ(ReplyOp(t.op), Op::kError) << t.name;
      continue;
    }
    // A request's reply is a reply op, answering no other request.
    EXPECT_TRUE(KnownOp(t.reply)) << t.name;
    EXPECT_EQ(Traits(t.reply).op_class, OpClass::kReply) << t.name;
    EXPECT_NE(t.reply, Op::kError) << t.name;
    EXPECT_TRUE(replies.insert(t.reply).second) << t.name;
    EXPECT_EQ(ReplyOp(t.op), t.reply) << t.name;
    EXPECT_NE(t.senders, 0) << t.name << " has nobody to send it";
  }
}

TEST(OpsTest, ValuesWithoutARowAreUnknown) {
  EXPECT_FALSE(KnownOp(static_cast<Op>(55)));
  EXPECT_EQ(Traits(static_cast<Op>(55)).op, Op::kUnknown);
  EXPECT_EQ(Traits(static_cast<Op>(-1)).op, Op::kUnknown);
  EXPECT_EQ(Traits(static_cast<Op>(100000)).op, Op::kUnknown);
  EXPECT_EQ(ReplyOp(static_cast<Op>(55)), Op::kError);
  EXPECT_EQ(OpName(static_cast<Op>(55)), "OP(55)");
}

TEST(OpsTest, MetricsSlotsHoldEveryLabelledOp) {
  std::set<std::string> labels;
  for (const OpTraits& t : kOps) {
    if (t.metrics_label == nullptr) continue;
    EXPECT_LT(static_cast<size_t>(t.op), OpMetricsSlots()) << t.name;
    EXPECT_TRUE(labels.insert(t.metrics_label).second) << t.metrics_label;
  }
  EXPECT_EQ(labels.count("invalid"), 1u);  // requests that could not be decoded
}

TEST(OpsTest, EveryHeaderFieldIsMappedOnce) {
  EXPECT_EQ(UnmappedHeaderFields(), std::vector<std::string>());
}

}  // namespace
}  // namespace ps
