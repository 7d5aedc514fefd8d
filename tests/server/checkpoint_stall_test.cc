// The "<stage>:<clock>" text of ps_server's crash-point test hook. The hook
// itself stalls a real process: tests/server/checkpoint_crash_test.cc.
#include "server/checkpoint_stall.h"
#include "tests/util/status_matchers.h"

#include <gtest/gtest.h>

#include <string>

namespace ps {
namespace {

TEST(CheckpointStallTest, ParsesEveryStageAndClock) {
  for (const CheckpointStage stage : kCheckpointStages) {
    const std::string text = std::string(CheckpointStageName(stage)) + ":7";
    auto point = ParseStallPoint(text);
    ASSERT_OK(point) << text << ": " << point.status().ToString();
    EXPECT_EQ(point->stage, stage) << text;
    EXPECT_EQ(point->clock, 7) << text;
  }
  EXPECT_EQ(ParseStallPoint("records:0").value().clock, 0);
}

TEST(CheckpointStallTest, MalformedTextSaysWhatIsExpected) {
  struct Case {
    const char* text;
    const char* why;
  };
  for (const Case& c : {Case{"records", "expected <stage>:<clock>, e.g. records:4"},
                        Case{"", "expected <stage>:<clock>"},
                        Case{"torn:2", "unknown stage \"torn\"; expected created, records, "
                                       "flushed, synced, published or pruning"},
                        Case{":2", "unknown stage \"\""},
                        Case{"records:two", "the clock \"two\" is not an integer >= 0"},
                        Case{"records:-1", "the clock \"-1\" is not an integer >= 0"},
                        Case{"records:", "the clock \"\" is not an integer >= 0"},
                        Case{"records:4x", "the clock \"4x\" is not an integer >= 0"}}) {
    auto point = ParseStallPoint(c.text);
    ASSERT_FALSE(point.ok()) << c.text;
    EXPECT_EQ(point.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(point.status().message().find(c.why), std::string::npos)
        << c.text << ": " << point.status().ToString();
  }
}

TEST(CheckpointStallTest, EmptyOrMalformedTextGivesNoHook) {
  EXPECT_FALSE(TestStallHook("PS_CHECKPOINT_TEST_STALL", ""));
  EXPECT_FALSE(TestStallHook("PS_CHECKPOINT_TEST_STALL", "torn:2"));
  const CheckpointStageHook hook = TestStallHook("PS_CHECKPOINT_TEST_STALL", "pruning:5");
  ASSERT_TRUE(hook);
  // Other stages, and earlier clocks of its stage, pass straight through.
  hook(CheckpointStage::kCreated, 9, "/ckpt/shard-0/gen-9.tmp");
  hook(CheckpointStage::kPruning, 4, "/ckpt/shard-0/gen-4.tmp");
}

}  // namespace
}  // namespace ps
