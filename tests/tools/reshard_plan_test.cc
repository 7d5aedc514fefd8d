#include "tools/reshard_plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "tests/util/status_matchers.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

class ReshardPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ps_plan_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ReshardPlanTest, AWrittenPlanReadsBack) {
  ASSERT_OK(WriteReshardPlan(dir_.string(), {3, 120, "/jobs/job 3.yaml"}));
  EXPECT_TRUE(fs::exists(dir_ / "reshard-3.plan"));
  auto plan = ReadReshardPlan(dir_.string(), 3);
  ASSERT_OK(plan);
  EXPECT_EQ(plan->epoch, 3);
  EXPECT_EQ(plan->clock, 120);
  EXPECT_EQ(plan->config, "/jobs/job 3.yaml");
  EXPECT_FALSE(plan->follow);
  // A plan whose next servers follow the old ones in memory, its clock not
  // picked yet.
  ASSERT_OK(WriteReshardPlan(dir_.string(), {4, -1, "/jobs/job4.yaml", /*follow=*/true}));
  plan = ReadReshardPlan(dir_.string(), 4);
  ASSERT_OK(plan);
  EXPECT_EQ(plan->clock, -1);
  EXPECT_TRUE(plan->follow);
  // One written before the follow line existed says no.
  std::ofstream(dir_ / "reshard-5.plan") << "epoch 5\nclock 9\nconfig /a.yaml\n";
  plan = ReadReshardPlan(dir_.string(), 5);
  ASSERT_OK(plan);
  EXPECT_FALSE(plan->follow);
}

TEST_F(ReshardPlanTest, AMissingPlanIsNotFoundABrokenOneIsNamed) {
  EXPECT_EQ(ReadReshardPlan(dir_.string(), 1).status().code(), StatusCode::kNotFound);
  std::ofstream(dir_ / "reshard-1.plan") << "epoch 1\nclock x\nconfig /a.yaml\n";
  auto broken = ReadReshardPlan(dir_.string(), 1);
  EXPECT_EQ(broken.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(broken.status().message().find("reshard-1.plan:2"), std::string::npos)
      << broken.status().ToString();
  std::ofstream(dir_ / "reshard-2.plan") << "epoch 1\nclock 5\nconfig /a.yaml\n";
  EXPECT_EQ(ReadReshardPlan(dir_.string(), 2).status().code(), StatusCode::kDataLoss);
  std::ofstream(dir_ / "reshard-3.plan") << "epoch 3\nclock 5\nconfig /a.yaml\nfollow 2\n";
  broken = ReadReshardPlan(dir_.string(), 3);
  EXPECT_EQ(broken.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(broken.status().message().find("reshard-3.plan:4"), std::string::npos)
      << broken.status().ToString();
}

TEST_F(ReshardPlanTest, RemovingPlansLeavesEverythingElse) {
  ASSERT_OK(WriteReshardPlan(dir_.string(), {1, 10, "/a.yaml"}));
  ASSERT_OK(WriteReshardPlan(dir_.string(), {2, 20, "/b.yaml"}));
  std::ofstream(dir_ / "shard-0") << "";
  ASSERT_OK(RemoveReshardPlan(dir_.string(), 1));
  EXPECT_FALSE(fs::exists(dir_ / "reshard-1.plan"));
  EXPECT_OK(RemoveReshardPlan(dir_.string(), 1));  // none: nothing to do
  ASSERT_OK(WriteReshardPlan(dir_.string(), {3, 30, "/c.yaml"}));
  auto removed = RemoveReshardPlans(dir_.string());
  ASSERT_OK(removed);
  EXPECT_EQ(*removed, (std::vector<std::string>{(dir_ / "reshard-2.plan").string(),
                                                 (dir_ / "reshard-3.plan").string()}));
  EXPECT_FALSE(fs::exists(dir_ / "reshard-2.plan"));
  EXPECT_TRUE(fs::exists(dir_ / "shard-0"));
  removed = RemoveReshardPlans((dir_ / "missing").string());
  ASSERT_OK(removed);
  EXPECT_TRUE(removed->empty());
}

}  // namespace
}  // namespace ps
