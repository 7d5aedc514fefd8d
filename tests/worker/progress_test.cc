// Progress lines and the metrics CSV of the training programs.
#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "worker/backend_factory.h"
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
  row.breakdown = {.step_ms = 12.5, .pull_ms = 3, .h2d_ms = 0.25, .compute_ms = 6,
                   .d2h_ms = 0.125, .push_ms = 2};
  ASSERT_OK((*a)->Append(row));
  row.worker = 1;
  row.metric.reset();
  row.breakdown = {};
  ASSERT_OK((*b)->Append(row));
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], MetricsCsv::kHeader);
  EXPECT_EQ(lines[1],
            "1.500,10,0,0.2500,0.75,test accuracy,0.8125,1000.0,0.500,"
            "12.5000,3.0000,0.2500,6.0000,0.1250,2.0000");
  EXPECT_EQ(lines[2],
            "1.500,10,1,0.2500,0.75,,,1000.0,0.500,0.0000,0.0000,0.0000,0.0000,0.0000,0.0000");
}

// A CSV of the version before the step breakdown: moved aside before a
// run like any metrics CSV, never appended to (its rows would not match).
TEST(MetricsCsvTest, AnEarlierVersionsCsvIsSetAsideNotAppendedTo) {
  const std::string path = FreshPath("earlier.csv");
  {
    std::ofstream(path) << MetricsCsv::kHeaderWithoutBreakdown << "\n1.0,1,0,0.1,0.5,,,10.0,0.0\n";
  }
  auto csv = MetricsCsv::Open(path);
  ASSERT_FALSE(csv.ok());
  EXPECT_NE(csv.status().message().find("is not a metrics CSV"), std::string::npos);
  EXPECT_EQ(Lines(path).size(), 2u);
  EXPECT_TRUE(MetricsCsv::SetAside(path).value());
  EXPECT_EQ(Lines(path + ".prev").size(), 2u);
  EXPECT_OK(MetricsCsv::Open(path));
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

// The breakdown: pulls and pushes from the store's times, compute from the
// backend's; the cpu backend copies nothing in a step, and what an
// evaluation does is left out (its upload here).
TEST(TrainingProgressTest, BreakdownSplitsTheStepAndLeavesEvaluationsOut) {
  const std::string path = FreshPath("breakdown.csv");
  TrainJob job = LocalJob(path);
  job.train.eval_every = 2;
  auto store = LocalParamStore::Create(job).value();
  auto backend = CreateBackend(BackendKind::kCpu).value();
  const size_t n = 1 << 16;
  auto buffer = backend->Allocate(n).value();
  std::vector<float> params(4), host(n, 1.0f);
  auto progress =
      TrainingProgress::Create(job, 0, store.get(), "test accuracy", 100, nullptr, backend.get())
          .value();
  for (int64_t step = 1; step <= 4; ++step) {
    ASSERT_OK(store->PullDense(0, params.data()));
    for (int i = 0; i < 20; ++i) ASSERT_OK(backend->Scale(n, 0.5f, buffer.get()));
    ASSERT_OK(store->PushDense(0, SharedFloats::Take(std::vector<float>(4, 0.0f))));
    ASSERT_OK(store->EndStep());
    progress->AddStep(1.0, 10);
    ASSERT_OK(progress->StepDone(step, 4, [&]() -> StatusOr<double> {
      PS_RETURN_IF_ERROR(backend->Upload(host.data(), n, buffer.get()));
      return 0.5;
    }));
  }
  const StepBreakdown& b = progress->summary().breakdown;
  EXPECT_GT(backend->times().upload_s, 0.0);
  EXPECT_EQ(b.h2d_ms, 0.0);  // the evaluations' uploads are left out
  EXPECT_EQ(b.d2h_ms, 0.0);
  EXPECT_GT(b.compute_ms, 0.0);
  EXPECT_GT(b.pull_ms, 0.0);
  EXPECT_GT(b.push_ms, 0.0);
  EXPECT_GT(b.step_ms, 0.0);
  EXPECT_LE(b.pull_ms + b.compute_ms + b.push_ms, b.step_ms * 1.01);
  EXPECT_NE(b.ToString().find("step "), std::string::npos);
  // Every row carries its interval's breakdown.
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 1u + 2u);
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> fields;
    std::stringstream in(lines[i]);
    for (std::string f; std::getline(in, f, ',');) fields.push_back(f);
    ASSERT_EQ(fields.size(), 15u) << lines[i];
    EXPECT_GT(std::stod(fields[9]), 0.0) << "step_ms of " << lines[i];
    EXPECT_EQ(fields[11], "0.0000") << "h2d_ms of " << lines[i];
    EXPECT_GT(std::stod(fields[12]), 0.0) << "compute_ms of " << lines[i];
  }
}

}  // namespace
}  // namespace ps
