// Tests of the train section (worker/train_options.h): its loader on top of
// common's, and ValidateTrain on jobs built in code. Bad train sections
// live in tests/data/train/bad_*.yaml; every example job in config/ must
// load with its train section.
#include "worker/train_options.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/status.h"
#include "tests/util/status_matchers.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_job.h"

namespace ps {
namespace {

const std::string kConfigDir = std::string(PS_SOURCE_DIR) + "/config";
const std::string kBadDir = std::string(PS_SOURCE_DIR) + "/tests/data/train";

// Loads tests/data/train/<name>; it must fail with InvalidArgument whose
// message starts with the file's path and contains each of `parts`.
::testing::AssertionResult BadFileRejected(const std::string& name,
                                           std::initializer_list<std::string> parts) {
  const std::string path = kBadDir + "/" + name;
  return RejectedNamingFile(LoadTrainJobFile(path), path, parts);
}

// A valid job built in code: one loopback server, one worker, one 64 x 1
// table "weights", no train section.
TrainJob ValidJob() {
  TrainJob job{TestJob().Servers(1, 7000).Table("weights", 64).Build(), TrainOptions()};
  job.source = "job.yaml";
  return job;
}

// Every check of a job with its train section, as the loader runs them.
Status ValidateAll(const TrainJob& job) {
  PS_RETURN_IF_ERROR(job.Validate());
  return ValidateTrain(job);
}

// A one-worker job with tables `tables` (a flow list's contents) and
// `train` as its train section.
std::string JobYaml(const std::string& tables, const std::string& train) {
  return "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
         "tables: [ " + tables + " ]\n"
         "train: " + train + "\n";
}

// ---------------------------------------------------------------------------
// Examples in config/

TEST(TrainOptionsTest, EveryExampleInConfigDirectoryLoadsWithItsTrainSection) {
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kConfigDir)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    StatusOr<TrainJob> job = LoadTrainJobFile(entry.path().string());
    ASSERT_OK(job);
    EXPECT_EQ(job->source, entry.path().string());
    EXPECT_OK(ValidateAll(*job));
    ++loaded;
  }
  EXPECT_GE(loaded, 3) << "expected local_demo, two_shards and single";
}

TEST(TrainOptionsTest, LocalDemoTrainsLinearRegressionOnItsWeightsTable) {
  StatusOr<TrainJob> job = LoadTrainJobFile(kConfigDir + "/local_demo.yaml");
  ASSERT_OK(job);
  EXPECT_EQ(job->train.program, "linear_regression");
  EXPECT_EQ(job->train.table, "weights");
  EXPECT_EQ(job->train.features, 512u);
}

TEST(TrainOptionsTest, TwoShardsHasNoTraining) {
  StatusOr<TrainJob> job = LoadTrainJobFile(kConfigDir + "/two_shards.yaml");
  ASSERT_OK(job);
  EXPECT_EQ(job->train.program, "");
  EXPECT_EQ(job->train.features, 0u);
}

// ---------------------------------------------------------------------------
// Filling the options

TEST(TrainOptionsTest, OmittedKeysTakeTheDefaultsOfTrainOptionsH) {
  const TrainOptions train_defaults;
  StatusOr<TrainJob> none = LoadTrainJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
      "tables: [ { name: weights, rows: 64 } ]\n",
      "mem");
  ASSERT_OK(none);
  EXPECT_EQ(none->train.program, "");
  EXPECT_EQ(none->train.features, 0u);
  EXPECT_EQ(none->train.batch_size, train_defaults.batch_size);
  EXPECT_EQ(none->source, "mem");
  StatusOr<TrainJob> job = LoadTrainJobString(
      JobYaml("{ name: weights, rows: 64 }", "{ features: 64 }"), "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->train.program, kDefaultTrainProgram);
  EXPECT_EQ(job->train.table, train_defaults.table);
  EXPECT_EQ(job->train.batch_size, train_defaults.batch_size);
  EXPECT_EQ(job->train.iterations, train_defaults.iterations);
  EXPECT_EQ(job->train.samples_per_worker, train_defaults.samples_per_worker);
}

TEST(TrainOptionsTest, EveryKeyIsReadIntoItsField) {
  StatusOr<TrainJob> job = LoadTrainJobString(
      JobYaml("{ name: w, rows: 8 }",
              "{ table: w, features: 8, samples_per_worker: 100,"
              " batch_size: 100, iterations: 3, noise: 0, seed: 7, log_every: 0 }"),
      "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->train.table, "w");
  EXPECT_EQ(job->train.features, 8u);
  EXPECT_EQ(job->train.samples_per_worker, 100u);
  EXPECT_EQ(job->train.batch_size, 100u);
  EXPECT_EQ(job->train.iterations, 3u);
  EXPECT_EQ(job->train.noise, 0.0f);
  EXPECT_EQ(job->train.seed, 7u);
  EXPECT_EQ(job->train.log_every, 0u);
}

TEST(TrainOptionsTest, DoubleOptionsKeepTheirDoublePrecision) {
  StatusOr<TrainJob> job = LoadTrainJobString(
      JobYaml("{ name: u, rows: 100, dim: 4 }, { name: v, rows: 50, dim: 4 }",
              "{ program: matrix_factorization, user_table: u, item_table: v,\n"
              "         observe_probability: 0.2, test_fraction: 0.3 }"),
      "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->train.observe_probability, 0.2);
  EXPECT_EQ(job->train.test_fraction, 0.3);
}

TEST(TrainOptionsTest, MatrixFactorizationKeysLoad) {
  const std::string dir = UniqueTempDir("train_keys");
  const std::string path = dir + "/job.yaml";
  std::ofstream(path) << JobYaml("{ name: u, rows: 100, dim: 4 }, { name: v, rows: 50, dim: 4 }",
                                 "{ program: matrix_factorization, user_table: u, item_table: v,\n"
                                 "         observe_probability: 0.2, test_fraction: 0.25,"
                                 " metrics_csv: run.csv }");
  StatusOr<TrainJob> job = LoadTrainJobFile(path);
  ASSERT_OK(job);
  EXPECT_EQ(job->train.program, "matrix_factorization");
  EXPECT_EQ(job->train.user_table, "u");
  EXPECT_EQ(job->train.item_table, "v");
  EXPECT_FLOAT_EQ(static_cast<float>(job->train.observe_probability), 0.2f);
  EXPECT_FLOAT_EQ(static_cast<float>(job->train.test_fraction), 0.25f);
  EXPECT_EQ(job->train.metrics_csv, "run.csv");
  std::filesystem::remove_all(dir);
}

TEST(TrainOptionsTest, MlpTrainingLoadsAndChecksItsTable) {
  const std::string tables = "{ name: mlp, rows: 79510 }";
  auto job = LoadTrainJobString(
      JobYaml(tables, "{ program: mlp, table: mlp, layers: [784, 100, 10], eval_every: 100 }"),
      "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->train.program, "mlp");
  EXPECT_EQ(job->train.layers, (std::vector<uint32_t>{784, 100, 10}));
  auto wrong =
      LoadTrainJobString(JobYaml(tables, "{ program: mlp, table: mlp, layers: [784, 50, 10] }"),
                         "mem");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("the MLP has 39760 parameters"), std::string::npos)
      << wrong.status().ToString();
  auto bad_layers =
      LoadTrainJobString(JobYaml(tables, "{ program: mlp, table: mlp, layers: [100, 10] }"), "mem");
  EXPECT_NE(bad_layers.status().message().find("train.layers"), std::string::npos);
}

// train.command: the workers' own program (ps_launch starts it with
// ps_worker's flags): read as an argv, with no program checks, and each
// key it cannot go with named.
TEST(TrainOptionsTest, ACommandRunsTheWorkersOwnProgramAndGoesWithNoProgramKeys) {
  const std::string tables = "{ name: mine, rows: 5 }";
  auto job = LoadTrainJobString(JobYaml(tables, "{ command: [python3, train.py, --epochs, 3] }"),
                                "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->train.command,
            (std::vector<std::string>{"python3", "train.py", "--epochs", "3"}));
  struct Bad {
    std::string train;
    std::vector<std::string> names;
  };
  const Bad bad[] = {
      {"{ command: [] }", {"train.command", "got an empty list"}},
      {"{ command: python3 }", {"train.command", "a list of strings"}},
      {"{ command: [\"\", x.py] }", {"train.command[0]", "an empty string"}},
      {"{ command: [python3, [x]] }", {"a list of strings"}},
      {"{ program: mlp, command: [python3, x.py] }", {"train.command", "train.program mlp"}},
      {"{ command: [python3, x.py], features: 5 }", {"train.features", "given with train.command"}},
      {"{ command: [python3, x.py], layers: [5, 1] }", {"train.layers", "train.command"}},
  };
  for (const Bad& b : bad) {
    auto refused = LoadTrainJobString(JobYaml(tables, b.train), "mem");
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << b.train;
    for (const std::string& name : b.names) {
      EXPECT_NE(refused.status().message().find(name), std::string::npos)
          << b.train << ": " << refused.status().ToString();
    }
  }
  auto evaluator = LoadTrainJobString(
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1, evaluator: true }\n"
      "tables: [ " + tables + " ]\ntrain: { command: [python3, x.py] }\n",
      "mem");
  EXPECT_NE(evaluator.status().message().find("cluster.evaluator"), std::string::npos)
      << evaluator.status().ToString();
}

// The ctr program: its keys under train.ctr, its tables (a hashed table of
// embeddings, a range table with one row per MLP parameter) and each check
// of its data, named.
TEST(TrainOptionsTest, CtrKeysLoadAndItsTablesAreChecked) {
  // 3 fields x dim 4 + 2 dense = 14 inputs; hidden [5]: 14*5+5 + 5+1 = 81.
  const std::string tables =
      "{ name: emb, keys: hashed, dim: 4, max_rows: 1000 }, { name: mlp, rows: 81 }";
  const auto train = [](const std::string& ctr) {
    const std::string hidden = ctr.find("hidden") == std::string::npos ? ", hidden: [5]" : "";
    return "{ program: ctr, table: mlp, samples_per_worker: 100, batch_size: 10,\n"
           "  ctr: { embedding_table: emb, fields: 3, dense: 2" + hidden + ctr + " } }";
  };
  auto job = LoadTrainJobString(JobYaml(tables, train(", vocabulary: [10, 20, 30], "
                                                      "zipf_exponent: 0.9")),
                                "mem");
  ASSERT_OK(job);
  EXPECT_EQ(job->train.program, "ctr");
  EXPECT_EQ(job->train.ctr.embedding_table, "emb");
  EXPECT_EQ(job->train.ctr.vocabulary, (std::vector<uint64_t>{10, 20, 30}));
  EXPECT_EQ(job->train.ctr.hidden, (std::vector<uint32_t>{5}));
  EXPECT_DOUBLE_EQ(job->train.ctr.zipf_exponent, 0.9);
  auto one = LoadTrainJobString(JobYaml(tables, train(", vocabulary: 7")), "mem");
  ASSERT_OK(one);
  EXPECT_EQ(one->train.ctr.vocabulary, (std::vector<uint64_t>{7}));
  EXPECT_TRUE(one->train.ctr.bags.empty());
  auto bags = LoadTrainJobString(
      JobYaml(tables, train(", bags: [{ field: 2, max_values: 5 }, { field: 0, max_values: 1 }]")),
      "mem");
  ASSERT_OK(bags);
  ASSERT_EQ(bags->train.ctr.bags.size(), 2u);
  EXPECT_EQ(bags->train.ctr.bags[0].field, 2u);
  EXPECT_EQ(bags->train.ctr.bags[0].max_values, 5u);
  EXPECT_EQ(bags->train.ctr.bags[1].field, 0u);
  EXPECT_EQ(bags->train.ctr.bags[1].max_values, 1u);
  const struct {
    std::string tables, ctr;
    std::initializer_list<std::string> parts;
  } bad[] = {
      {"{ name: emb, rows: 100, dim: 4 }, { name: mlp, rows: 81 }", "",
       {"train.ctr.embedding_table", "keys: range", "keys: hashed"}},
      {tables, ", hidden: [6]", {"train.table", "81 rows", "has 97 parameters"}},
      {tables, ", vocabulary: [10, 20]", {"train.ctr.vocabulary", "2 counts for 3 fields"}},
      {tables, ", vocabulary: 0", {"train.ctr.vocabulary", "1..2^40"}},
      {tables, ", zipf_exponent: 0", {"train.ctr.zipf_exponent", "> 0"}},
      {tables, ", hidden: [0]", {"train.ctr.hidden", "size 0"}},
      {tables, ", criteo_train: a.tsv", {"train.ctr.criteo_test", "both"}},
      {tables, ", colour: red", {"train.ctr", "colour", "embedding_table"}},
      {tables, ", bags: [{ field: 3, max_values: 2 }]",
       {"mem: train.ctr.bags[0].field: got 3 for 3 fields; expected a field index 0..2",
        "(line 4, column"}},
      {tables, ", bags: [{ field: 1, max_values: 2 }, { field: 1, max_values: 3 }]",
       {"train.ctr.bags[1].field: got 1, which ctr.bags[0] names too",
        "expected each field in at most one entry"}},
      {tables, ", bags: [{ field: 1, max_values: 0 }]",
       {"train.ctr.bags[0].max_values: got 0", "1..1024"}},
      {tables, ", bags: [{ field: 1, max_values: 1025 }]",
       {"train.ctr.bags[0].max_values: got 1025", "1..1024"}},
      {tables, ", bags: [{ field: 1 }]", {"train.ctr.bags[0]", "max_values"}},
      {tables, ", bags: [{ field: 1, max_values: 2, values: 3 }]",
       {"train.ctr.bags[0].values", "unknown key", "field, max_values"}},
      {tables, ", bags: [{ field: -1, max_values: 2 }]", {"train.ctr.bags[0].field"}},
      {tables, ", bags: { field: 1, max_values: 2 }",
       {"train.ctr.bags", "a list of multi-valued fields"}},
      {"{ name: emb, keys: hashed, dim: 4, max_rows: 1000 }, { name: mlp, rows: 81, dim: 2 }", "",
       {"train.table", "dim 2"}},
  };
  for (const auto& c : bad) {
    SCOPED_TRACE(c.ctr);
    EXPECT_TRUE(InvalidWith(LoadTrainJobString(JobYaml(c.tables, train(c.ctr)), "mem").status(),
                            c.parts));
  }
  // Criteo files fix the shape: 26 fields x 4 + 13 = 117 inputs.
  const std::string criteo_tables =
      "{ name: emb, keys: hashed, dim: 4, max_rows: 1000 }, { name: mlp, rows: 596 }";
  EXPECT_OK(LoadTrainJobString(
      JobYaml(criteo_tables, train(", criteo_train: a.tsv, criteo_test: b.tsv")), "mem"));
  // A bag of the Criteo data may name any of its 26 columns.
  EXPECT_OK(LoadTrainJobString(JobYaml(criteo_tables,
                                       train(", criteo_train: a.tsv, criteo_test: b.tsv, "
                                             "bags: [{ field: 25, max_values: 4 }]")),
                               "mem"));
  EXPECT_TRUE(InvalidWith(
      LoadTrainJobString(JobYaml(criteo_tables, train(", criteo_train: a.tsv, criteo_test: b.tsv, "
                                                      "bags: [{ field: 26, max_values: 4 }]")),
                         "mem")
          .status(),
      {"train.ctr.bags[0].field: got 26 for 26 fields (the Criteo columns C1..C26)", "0..25"}));
}

TEST(TrainOptionsTest, LoaderErrorsNameTheTrainPathLineAndColumn) {
  const std::string table = "{ name: weights, rows: 64 }";
  auto job = LoadTrainJobString(JobYaml(table, "{ features: 64, batchsize: 8 }"), "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: train.batchsize: unknown key", "batch_size",
                                         "line 3"}));
  job = LoadTrainJobString(JobYaml(table, "{ features: 0 }"), "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: train.features: got 0", "line 3",
                                         "omit the train section"}));
  // Found by the program's check, which sees options: still with its line.
  job = LoadTrainJobString(JobYaml(table, "{ features: 10 }"), "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: train.features: got 10", "line 3"}));
  job = LoadTrainJobString(JobYaml(table, "[1]"), "mem");
  EXPECT_TRUE(InvalidWith(job.status(), {"mem: train: got a list",
                                         "a map with the training program's settings"}));
}

// ---------------------------------------------------------------------------
// Bad files, one per error class

TEST(TrainOptionsTest, EveryBadFileIsInvalidArgumentNamingTheFile) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kBadDir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("bad_", 0) != 0 || entry.path().extension() != ".yaml") continue;
    EXPECT_TRUE(BadFileRejected(name, {})) << name;
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(TrainOptionsTest, TrainTableMustExist) {
  EXPECT_TRUE(BadFileRejected("bad_train_unknown_table.yaml",
                              {"train.table", "\"weight\"", "weights"}));
}

TEST(TrainOptionsTest, TrainTableMustHaveDimOne) {
  EXPECT_TRUE(BadFileRejected("bad_train_table_dim.yaml", {"train.table", "dim 4"}));
}

TEST(TrainOptionsTest, MatrixFactorizationNeedsTwoTablesOfOneRank) {
  EXPECT_TRUE(BadFileRejected("bad_train_mf_dim_mismatch.yaml",
                              {"train.item_table", "dim 4", "dim 8"}));
  EXPECT_TRUE(BadFileRejected("bad_train_mf_same_table.yaml",
                              {"train.item_table", "two different tables"}));
  EXPECT_TRUE(BadFileRejected("bad_train_mf_observe_probability.yaml",
                              {"train.observe_probability", "1.5", "(0, 1]"}));
  EXPECT_TRUE(BadFileRejected("bad_train_mf_missing_item_table.yaml",
                              {"train.item_table", "no table named \"items\"", "users"}));
}

TEST(TrainOptionsTest, SparseLogisticRegressionAndProgramNames) {
  EXPECT_TRUE(BadFileRejected("bad_train_sparse_lr_too_few_features.yaml",
                              {"train.table", "50 rows", "at least 100"}));
  EXPECT_TRUE(BadFileRejected("bad_train_unknown_program.yaml",
                              {"train.program", "word2vec", "sparse_logistic_regression",
                               "matrix_factorization"}));
}

TEST(TrainOptionsTest, TrainFeaturesMustEqualTableRows) {
  EXPECT_TRUE(BadFileRejected("bad_train_features_mismatch.yaml",
                              {"train.features: got 32", "64 rows"}));
}

TEST(TrainOptionsTest, BatchLargerThanSamplesIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_train_batch_size.yaml", {"train.batch_size: got 128", "(100)"}));
}

TEST(TrainOptionsTest, ZeroIterationsIsRejected) {
  EXPECT_TRUE(BadFileRejected("bad_train_zero_iterations.yaml", {"train.iterations: got 0"}));
}

TEST(TrainOptionsTest, TrainSectionRequiresFeatures) {
  EXPECT_TRUE(BadFileRejected("bad_train_missing_features.yaml",
                              {"train.features: missing required key"}));
}

// ---------------------------------------------------------------------------
// ValidateTrain on jobs built in code

TEST(ValidateTrainTest, TrainChecksAreSkippedWhenFeaturesIsZero) {
  TrainJob job = ValidJob();
  job.train.table = "no_such_table";
  job.train.batch_size = 0;
  EXPECT_OK(ValidateAll(job));
}

TEST(ValidateTrainTest, TrainBatchSizeMayEqualSamplesPerWorker) {
  TrainJob job = ValidJob();
  job.train.program = "linear_regression";
  job.train.features = 64;
  job.train.samples_per_worker = 100;
  job.train.batch_size = 100;
  EXPECT_OK(ValidateAll(job));
  job.train.batch_size = 0;
  EXPECT_TRUE(InvalidWith(ValidateAll(job), {"train.batch_size"}));
  job.train.batch_size = 1;
  job.train.samples_per_worker = 0;
  EXPECT_TRUE(InvalidWith(ValidateAll(job), {"train.samples_per_worker"}));
}

TEST(ValidateTrainTest, TrainNoiseMustBeFiniteAndNonNegative) {
  TrainJob job = ValidJob();
  job.train.program = "linear_regression";
  job.train.features = 64;
  job.train.noise = -0.5f;
  EXPECT_TRUE(InvalidWith(ValidateAll(job), {"train.noise"}));
  job.train.noise = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(InvalidWith(ValidateAll(job), {"train.noise"}));
}

TEST(ValidateTrainTest, MessageStartsWithSourceAndTrainPath) {
  TrainJob job = ValidJob();
  job.train.program = "linear_regression";
  job.train.features = 32;
  const Status status = ValidateTrain(job);
  EXPECT_TRUE(InvalidWith(status, {"job.yaml: train.features: got 32 but table \"weights\" has 64 "
                                   "rows; expected features equal to the rows of train.table"}));
  EXPECT_EQ(status.message().rfind("job.yaml: train.features: ", 0), 0u) << status.message();
}

}  // namespace
}  // namespace ps
