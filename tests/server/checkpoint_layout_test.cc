// Where a job's checkpoints lie: the shards' folders, which shards wrote
// each generation, and the generation a job resumes from, read from folder
// and file names alone.
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
  // Generation gen-<clock> of shard `shard`, written by `writers` shards
  // (its shards-<writers> file).
  void Written(uint32_t shard, int64_t clock, uint32_t writers) {
    const std::string gen = ShardCheckpointDir(dir_, shard) + "/gen-" + std::to_string(clock);
    std::filesystem::remove_all(gen);
    std::filesystem::create_directories(gen);
    std::ofstream(gen + "/" + GenerationShardsFileName(writers)).flush();
  }
  RestorePoint Point(int64_t restore_clock = -1) {
    OsFilesystem files;
    StatusOr<RestorePoint> point = FindRestorePoint(files, job_, restore_clock);
    EXPECT_OK(point);
    return point.ok() ? *point : RestorePoint{-2, 0, ""};
  }
  Status PointError(int64_t restore_clock = -1) {
    OsFilesystem files;
    return FindRestorePoint(files, job_, restore_clock).status();
  }

  std::string dir_;
  JobOptions job_;
};

TEST_F(CheckpointLayoutTest, EachShardHasItsFolder) {
  EXPECT_EQ(ShardCheckpointDir("/ckpt", 2), "/ckpt/shard-2");
}

TEST_F(CheckpointLayoutTest, ANewJobHasNoClockAndGetsItsShardFolders) {
  EXPECT_EQ(CommonRestorePoint(job_).value().clock, -1);
  for (uint32_t s = 0; s < 3; ++s) {
    EXPECT_TRUE(std::filesystem::is_directory(ShardCheckpointDir(dir_, s)));
  }
  job_.checkpoint.restore = false;
  Generation(0, "gen-5");
  EXPECT_EQ(CommonRestorePoint(job_).value().clock, -1);  // restore off: nothing is read
}

TEST_F(CheckpointLayoutTest, TheNewestClockEveryShardHoldsIgnoringTornOnes) {
  for (uint32_t s = 0; s < 3; ++s) Generation(s, "gen-10");
  Generation(0, "gen-20");
  Generation(1, "gen-20");
  Generation(2, "gen-20.tmp");  // torn: not a generation
  EXPECT_EQ(CommonRestorePoint(job_).value().clock, 10);
  Generation(2, "gen-20");
  EXPECT_EQ(CommonRestorePoint(job_).value().clock, 20);
}

TEST_F(CheckpointLayoutTest, NoCommonClockListsEachShard) {
  Generation(0, "gen-10");
  Generation(1, "gen-20");
  StatusOr<RestorePoint> clock = CommonRestorePoint(job_);
  ASSERT_FALSE(clock.ok());
  EXPECT_EQ(clock.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(clock.status().message().find("; shard 0: 10; shard 1: 20; shard 2: none"),
            std::string::npos)
      << clock.status().ToString();
  // Parts without a shards file (written before parts named their shard
  // count) count as the job's: the message says what to do when they are not.
  EXPECT_NE(clock.status().message().find(
                "(newest clock 10: shard-1 lacks it (a part without a shards file counts as "
                "written by the job's 3 servers; if it was written by another number, resume "
                "it on that number once))"),
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
  EXPECT_EQ(CommonRestorePoint(job_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateCheckpointFolder(files, "").code(), StatusCode::kInvalidArgument);
}

TEST_F(CheckpointLayoutTest, AGenerationSaysHowManyShardsWroteIt) {
  OsFilesystem files;
  EXPECT_EQ(GenerationShardsFileName(4), "shards-4");
  Generation(0, "gen-5");  // written before the file existed
  EXPECT_EQ(GenerationShards(files, ShardCheckpointDir(dir_, 0) + "/gen-5").value(), 0u);
  Written(0, 6, 4);
  const std::string gen = ShardCheckpointDir(dir_, 0) + "/gen-6";
  EXPECT_EQ(GenerationShards(files, gen).value(), 4u);
  std::ofstream(gen + "/shards-x").flush();   // not a count
  std::ofstream(gen + "/shards-07").flush();  // not a count either
  std::ofstream(gen + "/000012.sst").flush();
  EXPECT_EQ(GenerationShards(files, gen).value(), 4u);
  std::ofstream(gen + "/shards-2").flush();
  const Status two = GenerationShards(files, gen).status();
  EXPECT_EQ(two.code(), StatusCode::kDataLoss);
  EXPECT_NE(two.message().find("gen-6: two files name the shards that wrote it"),
            std::string::npos)
      << two.ToString();
}

TEST_F(CheckpointLayoutTest, AGenerationOfAnotherShardCountIsTakenWhenEveryWriterHoldsIt) {
  // The job has 3 servers; the checkpoint was written by 2, then by 4.
  for (uint32_t s = 0; s < 2; ++s) Written(s, 10, 2);
  RestorePoint point = Point();
  EXPECT_EQ(point.clock, 10);
  EXPECT_EQ(point.writers, 2u);
  EXPECT_TRUE(point.passed_over.empty());
  for (uint32_t s = 0; s < 4; ++s) Written(s, 20, 4);
  point = Point();
  EXPECT_EQ(point.clock, 20);
  EXPECT_EQ(point.writers, 4u);
  EXPECT_TRUE(std::filesystem::is_directory(ShardCheckpointDir(dir_, 2)));  // the job's folders
  // A part of 4 lost: its generation is passed over, naming why.
  std::filesystem::remove_all(ShardCheckpointDir(dir_, 3) + "/gen-20");
  point = Point();
  EXPECT_EQ(point.clock, 10);
  EXPECT_EQ(point.passed_over, "clock 20 (of 4): shard-3 lacks it");
  // Asked for: the incomplete one is refused, naming what there is.
  const Status asked = PointError(20);
  EXPECT_EQ(asked.code(), StatusCode::kNotFound);
  EXPECT_NE(asked.message().find("no complete generation of clock 20 (clock 20 (of 4): shard-3 "
                                 "lacks it); it has 10 (of 2); shard 0: 10 (of 2), 20 (of 4); "
                                 "shard 1: 10 (of 2), 20 (of 4); shard 2: 20 (of 4); shard 3: none"),
            std::string::npos)
      << asked.ToString();
  EXPECT_EQ(Point(10).writers, 2u);
}

TEST_F(CheckpointLayoutTest, FoldersLeftByAnotherShardCountAreNeverMixedIn) {
  // 4 shards wrote clocks 100 and 120; the job resumed on 2 at clock 100
  // and wrote 120 again, and 140; shard-2 and shard-3 keep the 4 shards'.
  for (uint32_t s = 0; s < 4; ++s) {
    Written(s, 100, 4);
    Written(s, 120, 4);
  }
  for (uint32_t s = 0; s < 2; ++s) {
    Written(s, 120, 2);
    Written(s, 140, 2);
  }
  job_ = TestJob().Servers(2).Workers(1).Build();
  job_.checkpoint.dir = dir_;
  EXPECT_EQ(Point().clock, 140);
  EXPECT_EQ(Point().writers, 2u);
  // Clock 120 is the 2 shards' in shard-0 and shard-1: the 4 shards' parts
  // left in shard-2 and shard-3 are not part of it.
  EXPECT_EQ(Point(120).writers, 2u);
  EXPECT_EQ(Point(100).writers, 4u);
  // A job of 4 resumes from the 2 shards' generation as well.
  job_ = TestJob().Servers(4).Workers(1).Build();
  job_.checkpoint.dir = dir_;
  EXPECT_EQ(Point().clock, 140);
  EXPECT_EQ(Point(120).writers, 2u);
  // A crash while the 2 shards rewrote clock 100: shard-0 holds theirs,
  // shard-1 still the 4 shards' part. Neither is complete.
  Written(0, 100, 2);
  const Status mixed = PointError(100);
  EXPECT_EQ(mixed.code(), StatusCode::kNotFound);
  EXPECT_NE(mixed.message().find("(clock 100 (of 2): shard-1's is of 4 shards)"),
            std::string::npos)
      << mixed.ToString();
  // Once the 2 shards pruned their older generations, only shard-2 and
  // shard-3 hold the 4 shards' clock 100: never complete again.
  for (uint32_t s = 0; s < 2; ++s) {
    std::filesystem::remove_all(ShardCheckpointDir(dir_, s) + "/gen-100");
  }
  EXPECT_EQ(PointError(100).code(), StatusCode::kNotFound);
}

TEST_F(CheckpointLayoutTest, AMissingFolderOfTheShardsThatWroteItIsNamed) {
  for (uint32_t s = 0; s < 4; ++s) Written(s, 30, 4);
  std::filesystem::remove_all(ShardCheckpointDir(dir_, 3));
  const Status st = PointError();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("no checkpoint clock is held by every shard that wrote it, so the "
                              "job cannot resume consistently (newest clock 30 (of 4): shard-3 "
                              "is missing); shard 0: 30 (of 4)"),
            std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("move the folder aside"), std::string::npos) << st.ToString();
}

TEST_F(CheckpointLayoutTest, AShardPrefersItsOwnNewerGenerationOfTheJobsShardCount) {
  OsFilesystem files;
  for (uint32_t s = 0; s < 3; ++s) Written(s, 10, 3);
  Written(1, 20, 3);  // shard 1 finished clock 20 before the others (a restart)
  RestorePoint own = ShardRestorePoint(files, job_, 1, -1).value();
  EXPECT_EQ(own.clock, 20);
  EXPECT_EQ(own.writers, 3u);
  EXPECT_EQ(ShardRestorePoint(files, job_, 0, -1).value().clock, 10);
  EXPECT_EQ(ShardRestorePoint(files, job_, 1, 10).value().clock, 10);
  // A newer complete generation of another count wins over its own.
  for (uint32_t s = 0; s < 2; ++s) Written(s, 30, 2);
  own = ShardRestorePoint(files, job_, 1, -1).value();
  EXPECT_EQ(own.clock, 30);
  EXPECT_EQ(own.writers, 2u);
  own = ShardRestorePoint(files, job_, 2, -1).value();
  EXPECT_EQ(own.clock, 30);
  EXPECT_EQ(own.writers, 2u);
  // Its own generation of another count is not its own: the job's is taken.
  EXPECT_EQ(ShardRestorePoint(files, job_, 1, 30).value().writers, 2u);
  EXPECT_EQ(ShardRestorePoint(files, job_, 2, 7).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ps
