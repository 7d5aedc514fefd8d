// Where a job's checkpoints lie: the shards' folders and the generation
// clock every shard holds, read from folder names alone.
#include "server/checkpoint_layout.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/util/status_matchers.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

class CheckpointLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = UniqueTempDir("checkpoint_layout_test");
    std::filesystem::remove_all(dir_);
    job_ = TestJob().Servers(3).Workers(1).Build();
    job_.checkpoint.dir = dir_;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Generation(uint32_t shard, const std::string& name) {
    std::filesystem::create_directories(ShardCheckpointDir(dir_, shard) + "/" + name);
  }

  std::string dir_;
  JobOptions job_;
};

TEST_F(CheckpointLayoutTest, EachShardHasItsFolder) {
  EXPECT_EQ(ShardCheckpointDir("/ckpt", 2), "/ckpt/shard-2");
}

TEST_F(CheckpointLayoutTest, ANewJobHasNoClockAndGetsItsShardFolders) {
  EXPECT_EQ(CommonRestoreClock(job_).value(), -1);
  for (uint32_t s = 0; s < 3; ++s) {
    EXPECT_TRUE(std::filesystem::is_directory(ShardCheckpointDir(dir_, s)));
  }
  job_.checkpoint.restore = false;
  Generation(0, "gen-5");
  EXPECT_EQ(CommonRestoreClock(job_).value(), -1);  // restore off: nothing is read
}

TEST_F(CheckpointLayoutTest, TheNewestClockEveryShardHoldsIgnoringTornOnes) {
  for (uint32_t s = 0; s < 3; ++s) Generation(s, "gen-10");
  Generation(0, "gen-20");
  Generation(1, "gen-20");
  Generation(2, "gen-20.tmp");  // torn: not a generation
  EXPECT_EQ(CommonRestoreClock(job_).value(), 10);
  Generation(2, "gen-20");
  EXPECT_EQ(CommonRestoreClock(job_).value(), 20);
}

TEST_F(CheckpointLayoutTest, NoCommonClockListsEachShard) {
  Generation(0, "gen-10");
  Generation(1, "gen-20");
  StatusOr<int64_t> clock = CommonRestoreClock(job_);
  ASSERT_FALSE(clock.ok());
  EXPECT_EQ(clock.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(clock.status().message().find("; shard 0: 10; shard 1: 20; shard 2: none"),
            std::string::npos)
      << clock.status().ToString();
}

TEST_F(CheckpointLayoutTest, AFileWhereAFolderMustBeIsRefusedByName) {
  std::filesystem::create_directories(dir_);
  std::ofstream(ShardCheckpointDir(dir_, 0)) << "not a folder";
  OsFilesystem files;
  Status created = CreateCheckpointFolder(files, ShardCheckpointDir(dir_, 0));
  EXPECT_EQ(created.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(created.message().find("shard-0: cannot use it as the checkpoint folder: not a folder"),
            std::string::npos);
  EXPECT_EQ(CommonRestoreClock(job_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateCheckpointFolder(files, "").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
