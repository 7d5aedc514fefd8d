// What a launch starts: the checks before it, the restore clock, and each
// child's command line, from the job and the options alone.
#include "tools/launch_plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/util/status_matchers.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

std::vector<std::string> Argv(std::initializer_list<const char*> args) {
  return std::vector<std::string>(args.begin(), args.end());
}

TEST(LaunchPlanTest, ARestartedServerRestoresItsOwnGenerationAndHearsWhoFinished) {
  JobOptions job = TestJob().Servers(2).Workers(3).Build();
  LauncherOptions options;
  options.bin_dir = "/opt/ps";
  ChildSpec server;
  server.is_server = true;
  server.index = 1;
  EXPECT_EQ(ChildCommand(job, "job.yaml", options, server, 20, {}),
            Argv({"/opt/ps/ps_server", "--config", "job.yaml", "--shard", "1", "--log-level",
                  "info", "--restore-clock", "20"}));
  server.restart = true;
  EXPECT_EQ(ChildCommand(job, "job.yaml", options, server, 20, {0, 2}),
            Argv({"/opt/ps/ps_server", "--config", "job.yaml", "--shard", "1", "--log-level",
                  "info", "--left-workers", "0,2"}));
  // A backup that joins takes a copy: no generation, no finished workers.
  server.replica = 2;
  server.join = true;
  EXPECT_EQ(ChildCommand(job, "job.yaml", options, server, 20, {0, 2}),
            Argv({"/opt/ps/ps_server", "--config", "job.yaml", "--shard", "1", "--replica", "2",
                  "--join", "--log-level", "info"}));
}

TEST(LaunchPlanTest, AServerOfTheNextShardMapRestoresTheHandoverAndHearsWhoFinished) {
  JobOptions job = TestJob().Servers(3).Workers(3).Build();
  LauncherOptions options;
  options.bin_dir = "/opt/ps";
  ChildSpec server;
  server.is_server = true;
  server.index = 2;
  server.map_epoch = 1;
  EXPECT_EQ(ChildCommand(job, "job3.yaml", options, server, 120, {1}),
            Argv({"/opt/ps/ps_server", "--config", "job3.yaml", "--shard", "2", "--log-level",
                  "info", "--restore-clock", "120", "--map-epoch", "1", "--left-workers", "1"}));
  // Restarted after a crash: its own newest generation, the same map.
  server.restart = true;
  EXPECT_EQ(ChildCommand(job, "job3.yaml", options, server, 120, {}),
            Argv({"/opt/ps/ps_server", "--config", "job3.yaml", "--shard", "2", "--log-level",
                  "info", "--map-epoch", "1"}));
}

TEST(LaunchPlanTest, WorkersGetTheirShareOfTheCoresAndTheEvaluatorItsFlag) {
  JobOptions job = TestJob().Servers(1).Workers(2).Build();
  job.cluster.evaluator = true;
  LauncherOptions options;
  options.log_level = "";
  options.worker_command = {"/bin/sh", "-c", "exit 0", "sh"};
  ChildSpec evaluator;
  evaluator.is_evaluator = true;
  EXPECT_EQ(ChildCommand(job, "j.yaml", options, evaluator, -1, {}),
            Argv({"/bin/sh", "-c", "exit 0", "sh", "--config", "j.yaml", "--evaluator",
                  "--cpu-threads", std::to_string(WorkerCpuShare(3)).c_str()}));
  job.worker.cpu_threads = 4;  // set in the job: not overridden
  ChildSpec worker;
  worker.index = 1;
  EXPECT_EQ(ChildCommand(job, "j.yaml", options, worker, 7, {}),
            Argv({"/bin/sh", "-c", "exit 0", "sh", "--config", "j.yaml", "--rank", "1"}));
}

TEST(LaunchPlanTest, CheckLaunchRefusesWhatCannotStartNamingTheFile) {
  LauncherOptions options;
  JobOptions job = TestJob().Servers(1).Workers(1).Build();
  EXPECT_OK(CheckLaunch(job, "j.yaml", options));
  EXPECT_EQ(CheckLaunch(job, "", options).code(), StatusCode::kInvalidArgument);
  options.max_processes = 1;
  Status too_many = CheckLaunch(job, "j.yaml", options);
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("'j.yaml' has 2 processes"), std::string::npos)
      << too_many.ToString();
  options.max_processes = 0;
  options.grace = std::chrono::milliseconds(-1);
  EXPECT_EQ(CheckLaunch(job, "j.yaml", options).code(), StatusCode::kInvalidArgument);
  job.cluster.workers = 0;
  EXPECT_NE(CheckLaunch(job, "j.yaml", options).message().find("cluster.workers is 0 in 'j.yaml'"),
            std::string::npos);
}

TEST(LaunchPlanTest, ResumePointIsTheNewestGenerationEveryShardThatWroteItHolds) {
  const std::string dir = UniqueTempDir("launch_plan_resume");
  std::filesystem::remove_all(dir);
  JobOptions job = TestJob().Servers(2).Workers(1).Build();
  EXPECT_EQ(ResumePoint(job, "j.yaml", /*resume=*/false).value().clock, -1);
  EXPECT_EQ(ResumePoint(job, "j.yaml", /*resume=*/true).status().code(),
            StatusCode::kFailedPrecondition);
  job.checkpoint.dir = dir;
  EXPECT_EQ(ResumePoint(job, "j.yaml", /*resume=*/false).value().clock, -1);  // a new job
  EXPECT_NE(ResumePoint(job, "j.yaml", /*resume=*/true).status().message().find(
                "holds no checkpoint generation"),
            std::string::npos);
  for (const char* gen : {"shard-0/gen-10", "shard-0/gen-20", "shard-1/gen-20", "shard-1/gen-30"}) {
    std::filesystem::create_directories(dir + "/" + gen);
  }
  EXPECT_EQ(ResumePoint(job, "j.yaml", /*resume=*/true).value().clock, 20);
  // A newer generation of 3 shards (its shards-3 file in each part): the
  // servers restore it, each its rows of the three parts.
  for (const char* gen : {"shard-0/gen-40", "shard-1/gen-40", "shard-2/gen-40"}) {
    std::filesystem::create_directories(dir + "/" + gen);
    std::ofstream(dir + "/" + gen + "/shards-3").flush();
  }
  const RestorePoint point = ResumePoint(job, "j.yaml", /*resume=*/true).value();
  EXPECT_EQ(point.clock, 40);
  EXPECT_EQ(point.writers, 3u);
  std::filesystem::remove_all(dir);
}

TEST(LaunchPlanTest, ServersAreNamedByShardAndBackup) {
  EXPECT_EQ(ServerName(3, 0), "server 3");
  EXPECT_EQ(ServerName(3, 2), "server 3 backup 2");
}

// Backups start before the primaries that connect to them.
TEST(LaunchPlanTest, ReplicasStartBackupsFirst) {
  JobOptions job = TestJob().Servers(2).Table("w", 10).Build();
  job.replication.factor = 3;
  std::vector<std::pair<uint32_t, uint32_t>> order;
  for (const ReplicaSlot& slot : ReplicasInStartOrder(job)) {
    order.emplace_back(slot.shard, slot.replica);
  }
  EXPECT_EQ(order, (std::vector<std::pair<uint32_t, uint32_t>>{
                       {0, 2}, {1, 2}, {0, 1}, {1, 1}, {0, 0}, {1, 0}}));
  job.replication.factor = 1;
  EXPECT_EQ(ReplicasInStartOrder(job).size(), 2u);
}

}  // namespace
}  // namespace ps
