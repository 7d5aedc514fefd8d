// Progress lines and the metrics CSV of the training programs.
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "worker/progress.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ps {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string FreshPath(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/progress_test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".prev");
  return path;
}

TEST(MetricsCsvTest, WritersShareOneFileWithOneHeader) {
  const std::string path = FreshPath("shared.csv");
  auto a = MetricsCsv::Open(path);
  ASSERT_OK(a);
  auto b = MetricsCsv::Open(path);  // a second worker: appends, no second header
  ASSERT_OK(b);
  MetricsCsv::Row row;
  row.time_s = 1.5;
  row.clock = 10;
  row.worker = 0;
  row.epoch = 0.25;
  row.loss = 0.75;
  row.metric_name = "test accuracy";
  row.metric = 0.8125;
  row.samples_per_s = 1000;
  row.staleness_wait_s = 0.5;
  ASSERT_OK((*a)->Append(row));
  row.worker = 1;
  row.metric.reset();
  ASSERT_OK((*b)->Append(row));
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], MetricsCsv::kHeader);
  EXPECT_EQ(lines[1], "1.500,10,0,0.2500,0.75,test accuracy,0.8125,1000.0,0.500");
  EXPECT_EQ(lines[2], "1.500,10,1,0.2500,0.75,,,1000.0,0.500");
}

TEST(MetricsCsvTest, ForeignFileIsRefusedAndLeftAlone) {
  const std::string path = FreshPath("notes.txt");
  { std::ofstream(path) << "my notes\n"; }
  auto csv = MetricsCsv::Open(path);
  ASSERT_FALSE(csv.ok());
  EXPECT_EQ(csv.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(csv.status().message().find(path), std::string::npos);
  EXPECT_NE(csv.status().message().find("is not a metrics CSV"), std::string::npos);
  auto moved = MetricsCsv::SetAside(path);
  EXPECT_FALSE(moved.ok());
  EXPECT_EQ(Lines(path), std::vector<std::string>{"my notes"});
}

TEST(MetricsCsvTest, MissingFolderIsAClearError) {
  auto csv = MetricsCsv::Open(::testing::TempDir() + "/no/such/folder/m.csv");
  ASSERT_FALSE(csv.ok());
  EXPECT_NE(csv.status().message().find("no/such/folder"), std::string::npos);
  EXPECT_NE(csv.status().message().find("folder exists"), std::string::npos)
      << csv.status().ToString();
}

TEST(MetricsCsvTest, SetAsideKeepsThePreviousRun) {
  const std::string path = FreshPath("runs.csv");
  EXPECT_FALSE(MetricsCsv::SetAside(path).value());  // nothing there yet
  {
    auto csv = MetricsCsv::Open(path).value();
    ASSERT_OK(csv->Append(MetricsCsv::Row()));
  }
  EXPECT_TRUE(MetricsCsv::SetAside(path).value());
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(Lines(path + ".prev").size(), 2u);
}

TrainJob LocalJob(const std::string& csv) {
  TrainJob job{TestJob().Table("w", 4).Build(), TrainOptions()};
  job.train.program = "linear_regression";
  job.train.log_every = 2;
  job.train.eval_every = 3;
  job.train.metrics_csv = csv;
  return job;
}

TEST(TrainingProgressTest, LogsEveryIntervalAndEvaluatesOnWorkerZero) {
  const std::string path = FreshPath("progress.csv");
  const TrainJob job = LocalJob(path);
  auto store = LocalParamStore::Create(job).value();
  for (uint32_t rank : {0u, 1u}) {
    auto progress = TrainingProgress::Create(job, rank, store.get(), "test accuracy", 100).value();
    int evaluations = 0;
    for (int64_t step = 1; step <= 7; ++step) {
      progress->AddStep(1.0 / static_cast<double>(step), 10);
      ASSERT_TRUE(progress->StepDone(step, 7, [&]() -> StatusOr<double> {
        ++evaluations;
        return 0.5 + 0.1 * evaluations;
      }).ok());
    }
    const TrainSummary& s = progress->summary();
    EXPECT_DOUBLE_EQ(s.first_loss, 1.0);
    EXPECT_DOUBLE_EQ(s.last_loss, 1.0 / 7.0);  // the last interval held step 7 alone
    if (rank == 0) {
      // Evaluations after steps 3, 6 and the last one (7).
      ASSERT_EQ(s.metrics.size(), 3u);
      EXPECT_NEAR(s.metrics.back(), 0.8, 1e-12);
      EXPECT_NEAR(s.TailMean(2), 0.75, 1e-12);
      EXPECT_NEAR(s.TailMean(10), 0.7, 1e-12);
    } else {
      EXPECT_EQ(evaluations, 0);
      EXPECT_TRUE(s.metrics.empty());
      EXPECT_TRUE(std::isnan(s.TailMean(3)));
    }
  }
  // Rows: worker 0 after steps 2, 3, 4, 6, 7; worker 1 after 2, 4, 6, 7.
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 1u + 5u + 4u);
  EXPECT_EQ(lines[2].substr(lines[2].find(',') + 1, 4), "3,0,");
  EXPECT_NE(lines[2].find(",test accuracy,0.6,"), std::string::npos) << lines[2];
  EXPECT_EQ(lines[6].substr(lines[6].find(',') + 1, 4), "2,1,");
}

}  // namespace
}  // namespace ps
