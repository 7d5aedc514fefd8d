// The ctr program's data and model: the Zipf sampler's law, generated data
// that is a pure function of (seed, sample) and partitions exactly, the
// Criteo reader and each malformed line it names, the log-loss and AUC, and
// the model's gradients (MLP and embeddings, a repeated id summed) against
// finite differences on every available backend (the CUDA cases skip
// without a device).
#include "worker/models/ctr.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/util/status_matchers.h"
#include "tests/util/temp_dir.h"
#include "worker/backend_factory.h"
#include "worker/data/ctr_data.h"
#include "worker/data/random_stream.h"

namespace ps {
namespace {

// Frequencies of 400,000 draws against the law itself, for a small and a
// huge value range (where only the head can be checked).
TEST(ZipfSamplerTest, DrawsFollowTheLaw) {
  for (const auto& [n, exponent] : {std::pair<uint64_t, double>{10, 1.1}, {50, 0.7}, {1000, 1.0},
                                    {10'000'000, 1.1}}) {
    SCOPED_TRACE("n " + std::to_string(n) + " exponent " + std::to_string(exponent));
    const ZipfSampler zipf(n, exponent);
    constexpr int kDraws = 400000;
    constexpr uint64_t kHead = 10;
    std::vector<double> counts(kHead + 1, 0);
    Stream s(7, 1, 0);
    for (int i = 0; i < kDraws; ++i) {
      const uint64_t k = zipf.Sample(s);
      ASSERT_GE(k, 1u);
      ASSERT_LE(k, n);
      if (k <= kHead) ++counts[k];
    }
    double total = 0;  // the law's normalizer, in closed form past 10^6 terms
    for (uint64_t k = 1; k <= std::min<uint64_t>(n, 1'000'000); ++k) total += std::pow(k, -exponent);
    if (n > 1'000'000) {
      total += (std::pow(n + 0.5, 1 - exponent) - std::pow(1'000'000.5, 1 - exponent)) / (1 - exponent);
    }
    for (uint64_t k = 1; k <= std::min(n, kHead); ++k) {
      const double expected = kDraws * std::pow(k, -exponent) / total;
      EXPECT_NEAR(counts[k], expected, 5 * std::sqrt(expected) + 1) << "value " << k;
    }
  }
}

CtrDataOptions SmallData(uint64_t samples) {
  CtrDataOptions o;
  o.fields = 5;
  o.dense = 3;
  o.vocabulary = {50, 1000, 7, 20000, 300};
  o.num_samples = samples;
  o.seed = 9;
  return o;
}

TEST(CtrDataTest, RanksPartitionTheDataAndSamplesDependOnlyOnTheirIndex) {
  const CtrDataOptions o = SmallData(1001);
  const CtrData whole = GenerateCtrData(o, 0, 1).value();
  ASSERT_EQ(whole.num_samples(), 1001u);
  CtrData joined;
  joined.fields = o.fields;
  joined.dense = o.dense;
  for (uint32_t r = 0; r < 3; ++r) {
    const CtrData part = GenerateCtrData(o, r, 3).value();
    for (size_t i = 0; i < part.num_samples(); ++i) joined.Append(part, i);
  }
  EXPECT_EQ(joined.ids, whole.ids);
  EXPECT_EQ(joined.dense_values, whole.dense_values);
  EXPECT_EQ(joined.labels, whole.labels);
  EXPECT_EQ(joined.teacher_logits, whole.teacher_logits);
  // A set that starts later is the tail of a longer one.
  CtrDataOptions tail = o;
  tail.first_sample = 1000;
  tail.num_samples = 1;
  const CtrData last = GenerateCtrData(tail, 0, 1).value();
  EXPECT_EQ(last.labels[0], whole.labels[1000]);
  EXPECT_EQ(last.ids, std::vector<uint64_t>(whole.ids.end() - 5, whole.ids.end()));
  // Every id names its field and a value of that field's vocabulary.
  for (size_t i = 0; i < whole.ids.size(); ++i) {
    const uint32_t f = static_cast<uint32_t>(i % o.fields);
    EXPECT_EQ(whole.ids[i] >> kCtrValueBits, f);
    const uint64_t value = whole.ids[i] & kCtrMissing;
    EXPECT_GE(value, 1u);
    EXPECT_LE(value, o.vocabulary[f]);
  }
}

// The labels are draws at the teacher's probabilities: its log-loss is
// their entropy, well below the click rate's, and its AUC well above 0.5.
TEST(CtrDataTest, TheTeacherSeparatesTheClicks) {
  const CtrData data = GenerateCtrData(SmallData(40000), 0, 1).value();
  double rate = 0, entropy = 0;
  for (size_t i = 0; i < data.num_samples(); ++i) {
    rate += data.labels[i];
    const double p = 1 / (1 + std::exp(-double{data.teacher_logits[i]}));
    entropy -= p * std::log(p) + (1 - p) * std::log(1 - p);
  }
  rate /= data.num_samples();
  entropy /= data.num_samples();
  EXPECT_GT(rate, 0.15);
  EXPECT_LT(rate, 0.5);
  const double teacher = MeanLogLoss(data.teacher_logits, data.labels);
  EXPECT_NEAR(teacher, entropy, 0.01);
  const double base = -(rate * std::log(rate) + (1 - rate) * std::log(1 - rate));
  EXPECT_LT(teacher, base - 0.08);
  EXPECT_GT(Auc(data.teacher_logits, data.labels), 0.75);
}

TEST(CtrDataTest, BadOptionsAreNamed) {
  CtrDataOptions o = SmallData(10);
  o.vocabulary = {1, 2};
  EXPECT_TRUE(InvalidWith(GenerateCtrData(o, 0, 1).status(), {"vocabulary"}));
  o = SmallData(10);
  o.zipf_exponent = 0;
  EXPECT_TRUE(InvalidWith(GenerateCtrData(o, 0, 1).status(), {"zipf_exponent"}));
  o = SmallData(10);
  o.fields = 0;
  EXPECT_TRUE(InvalidWith(GenerateCtrData(o, 0, 1).status(), {"fields"}));
  EXPECT_TRUE(InvalidWith(GenerateCtrData(SmallData(10), 2, 2).status(), {"rank 2 of 2"}));
}

TEST(CtrMetricsTest, AucAndLogLossOfKnownCases) {
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f}, std::vector<int32_t>{0, 0, 1, 1}),
                   0.75);
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{1, 2, 3}, std::vector<int32_t>{0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{3, 2, 1}, std::vector<int32_t>{0, 1, 1}), 0.0);
  // Ties count one half.
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{1, 1, 1, 1}, std::vector<int32_t>{0, 1, 0, 1}), 0.5);
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{1, 2}, std::vector<int32_t>{1, 1}), 0.5);
  EXPECT_NEAR(MeanLogLoss(std::vector<float>{0, 0}, std::vector<int32_t>{0, 1}), std::log(2.0), 1e-12);
  // No overflow for huge logits.
  EXPECT_NEAR(MeanLogLoss(std::vector<float>{1000}, std::vector<int32_t>{0}), 1000, 1e-9);
  EXPECT_NEAR(MeanLogLoss(std::vector<float>{-1000}, std::vector<int32_t>{0}), 0, 1e-12);
}

class CriteoTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = UniqueTempDir("criteo"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& text) {
    const std::string path = dir_ + "/day.tsv";
    std::ofstream(path) << text;
    return path;
  }

  // A well-formed line: label, 13 integers (some empty), 26 hex values
  // (some empty).
  static std::string Line(int label, int seed) {
    std::string line = std::to_string(label);
    for (int d = 0; d < 13; ++d) {
      line += '\t';
      if ((d + seed) % 5 != 0) line += std::to_string((d * 7 + seed) % 40 - 3);
    }
    for (int f = 0; f < 26; ++f) {
      line += '\t';
      if ((f + seed) % 7 != 0) {
        char hex[16];
        std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>((f + 1) * 2654435761u * (seed + 1)));
        line += hex;
      }
    }
    return line;
  }

  std::string dir_;
};

TEST_F(CriteoTest, ReadsEachColumnAndPartitionsTheLines) {
  std::string text;
  for (int i = 0; i < 7; ++i) text += Line(i % 2, i) + "\n";
  const std::string path = Write(text);
  const CtrData all = ReadCriteoTsv(path, 0, 1).value();
  ASSERT_EQ(all.num_samples(), 7u);
  EXPECT_EQ(all.fields, 26u);
  EXPECT_EQ(all.dense, 13u);
  EXPECT_TRUE(all.teacher_logits.empty());
  EXPECT_EQ(all.labels[1], 1);
  // Line 0: I1 is empty (seed 0, d 0), I2 = 4: log(5); I1 of line 1 is -2.
  EXPECT_FLOAT_EQ(all.dense_values[0], 0.0f);
  EXPECT_FLOAT_EQ(all.dense_values[1], static_cast<float>(std::log(5.0)));
  EXPECT_FLOAT_EQ(all.dense_values[13], static_cast<float>(-std::log(3.0)));
  // C1 of line 0 is empty: the missing value of field 0; C2 is hex.
  EXPECT_EQ(all.ids[0], CtrId(0, kCtrMissing));
  EXPECT_EQ(all.ids[1], CtrId(1, uint64_t{2} * 2654435761u & 0xffffffffu));
  CtrData joined;
  joined.fields = 26;
  joined.dense = 13;
  for (uint32_t r = 0; r < 3; ++r) {
    const CtrData part = ReadCriteoTsv(path, r, 3).value();
    for (size_t i = 0; i < part.num_samples(); ++i) joined.Append(part, i);
  }
  EXPECT_EQ(joined.ids, all.ids);
  EXPECT_EQ(joined.dense_values, all.dense_values);
  EXPECT_EQ(joined.labels, all.labels);
  EXPECT_EQ(ReadCriteoTsv(path, 0, 1, 3)->num_samples(), 3u);  // max_lines
}

TEST_F(CriteoTest, MalformedLinesAreNamedWithTheirLineAndColumn) {
  const std::string good = Line(1, 3);
  auto with_column = [&](int column, const std::string& value) {
    std::vector<std::string> cells;
    size_t at = 0;
    for (;;) {
      const size_t tab = good.find('\t', at);
      cells.push_back(good.substr(at, tab == std::string::npos ? std::string::npos : tab - at));
      if (tab == std::string::npos) break;
      at = tab + 1;
    }
    cells[column] = value;
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) line += (i ? "\t" : "") + cells[i];
    return good + "\n" + line + "\n";
  };
  const struct {
    std::string text, fragment;
  } cases[] = {
      {good + "\n1\t2\t3\n", "day.tsv:2: 3 tab-separated columns; expected 40"},
      {with_column(0, "2"), "day.tsv:2: column 1 holds \"2\"; expected a label, 0 or 1"},
      {with_column(3, "1.5"), "day.tsv:2: column 4 holds \"1.5\"; expected an integer (I3)"},
      {with_column(3, "-"), "column 4 holds \"-\""},
      {with_column(20, "xyz"), "day.tsv:2: column 21 holds \"xyz\"; expected hex digits (C7)"},
      {with_column(20, "1234567890abc"), "at most 12 hex digits (C7)"},
  };
  for (const auto& c : cases) {
    EXPECT_TRUE(InvalidWith(ReadCriteoTsv(Write(c.text), 0, 1).status(), {c.fragment}));
  }
  // Only the lines of a rank's block are parsed; every line is counted.
  EXPECT_OK(ReadCriteoTsv(Write(with_column(0, "2")), 0, 2).status());
  EXPECT_TRUE(InvalidWith(ReadCriteoTsv(Write(good + "\n"), 0, 2).status(), {"1 lines for 2 workers"}));
  const Status missing = ReadCriteoTsv(dir_ + "/none.tsv", 0, 1).status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
  EXPECT_NE(missing.message().find("none.tsv: cannot open"), std::string::npos)
      << missing.ToString();
  // Windows line ends are taken.
  EXPECT_OK(ReadCriteoTsv(Write(good + "\r\n"), 0, 1).status());
}

class CtrModelTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    if (GetParam() == BackendKind::kCuda && CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    backend_ = CreateBackend(GetParam()).value();
  }
  std::unique_ptr<Backend> backend_;
};

// Central differences of the model's loss in every MLP parameter and every
// embedding value, on a batch where an id repeats (its gradient is the sum
// of its uses) and an id of `ids` is not used (its gradient is 0).
TEST_P(CtrModelTest, GradientsMatchFiniteDifferences) {
  constexpr uint32_t kFields = 3, kDense = 2, kDim = 2;
  CtrData data;
  data.fields = kFields;
  data.dense = kDense;
  data.ids = {CtrId(0, 1), CtrId(1, 5), CtrId(2, 1),   //
              CtrId(0, 1), CtrId(1, 6), CtrId(2, 2),   //
              CtrId(0, 2), CtrId(1, 5), CtrId(2, 1)};
  data.dense_values = {0.5f, -1.0f, 1.5f, 0.2f, -0.3f, 0.8f};
  data.labels = {1, 0, 1};
  auto model = CtrModel::Create(backend_.get(), kFields, kDense, kDim, {4}, 8).value();
  EXPECT_EQ(model->num_parameters(), (kFields * kDim + kDense) * 4 + 4 + 4 + 1);
  std::vector<uint64_t> ids;
  BatchIds(data, 0, 3, &ids);
  ASSERT_EQ(ids.size(), 6u);
  ids.push_back(CtrId(3, 9));  // pulled, unused
  std::mt19937 gen(3);
  std::normal_distribution<float> n(0.0f, 0.7f);
  std::vector<float> params(model->num_parameters()), embeddings(ids.size() * kDim);
  for (float& p : params) p = n(gen);
  for (float& e : embeddings) e = n(gen);
  std::vector<float> param_grad(params.size()), embedding_grad(embeddings.size(), 9.0f);
  ASSERT_OK(model->TrainStep(data, 0, 3, ids, embeddings, params, embedding_grad, param_grad).status());
  std::vector<float> scratch_e(embeddings.size()), scratch_p(params.size());
  auto loss = [&](const std::vector<float>& e, const std::vector<float>& p) {
    return *model->TrainStep(data, 0, 3, ids, e, p, scratch_e, scratch_p);
  };
  const float eps = 1e-2f;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> up = params, down = params;
    up[i] += eps;
    down[i] -= eps;
    const float numeric = (loss(embeddings, up) - loss(embeddings, down)) / (2 * eps);
    EXPECT_NEAR(param_grad[i], numeric, 2e-3f + 2e-2f * std::abs(numeric)) << "parameter " << i;
  }
  for (size_t i = 0; i < embeddings.size(); ++i) {
    std::vector<float> up = embeddings, down = embeddings;
    up[i] += eps;
    down[i] -= eps;
    const float numeric = (loss(up, params) - loss(down, params)) / (2 * eps);
    EXPECT_NEAR(embedding_grad[i], numeric, 2e-3f + 2e-2f * std::abs(numeric)) << "embedding " << i;
  }
  EXPECT_EQ(embedding_grad[12], 0.0f);
  EXPECT_EQ(embedding_grad[13], 0.0f);
  // Logits agree with the loss the step computed.
  ASSERT_OK(model->SetParameters(params));
  std::vector<float> logits(3);
  ASSERT_OK(model->Logits(data, ids, embeddings, logits));
  EXPECT_NEAR(MeanLogLoss(logits, data.labels), loss(embeddings, params), 1e-5);
}

TEST_P(CtrModelTest, BadArgumentsAreInvalidArgument) {
  const CtrData data = GenerateCtrData(SmallData(20), 0, 1).value();
  auto model = CtrModel::Create(backend_.get(), 5, 3, 2, {3}, 8).value();
  std::vector<uint64_t> ids;
  BatchIds(data, 0, 4, &ids);
  std::vector<float> params(model->num_parameters()), pg(params.size());
  std::vector<float> e(ids.size() * 2), eg(e.size());
  EXPECT_OK(model->TrainStep(data, 0, 4, ids, e, params, eg, pg).status());
  EXPECT_TRUE(InvalidWith(model->TrainStep(data, 0, 9, ids, e, params, eg, pg).status(), {"batches of 1..8"}));
  EXPECT_TRUE(InvalidWith(model->TrainStep(data, 18, 4, ids, e, params, eg, pg).status(), {"samples [18, +4) of 20"}));
  std::vector<uint64_t> fewer(ids.begin() + 1, ids.end());
  std::vector<float> fewer_e(fewer.size() * 2), fewer_g(fewer_e.size());
  EXPECT_TRUE(InvalidWith(model->TrainStep(data, 0, 4, fewer, fewer_e, params, fewer_g, pg).status(), {"is not among the pulled ids"}));
  std::vector<uint64_t> unsorted = ids;
  std::swap(unsorted[0], unsorted[1]);
  EXPECT_TRUE(InvalidWith(model->TrainStep(data, 0, 4, unsorted, e, params, eg, pg).status(), {"strictly increasing"}));
  std::vector<float> short_g(eg.size() - 1);
  EXPECT_TRUE(InvalidWith(model->TrainStep(data, 0, 4, ids, e, params, short_g, pg).status(), {"embedding gradient"}));
  auto other = CtrModel::Create(backend_.get(), 4, 3, 2, {3}, 8).value();
  std::vector<float> other_params(other->num_parameters()), other_grad(other_params.size());
  EXPECT_TRUE(InvalidWith(
      other->TrainStep(data, 0, 4, ids, e, other_params, eg, other_grad).status(), {"5 fields"}));
  EXPECT_FALSE(CtrModel::Create(backend_.get(), 0, 3, 2, {3}, 8).ok());
  EXPECT_FALSE(CtrModel::Create(backend_.get(), 5, 3, 2, {0}, 8).ok());
}

INSTANTIATE_TEST_SUITE_P(Backends, CtrModelTest,
                         ::testing::Values(BackendKind::kCpu, BackendKind::kCuda),
                         [](const ::testing::TestParamInfo<BackendKind>& param_info) {
                           return std::string(param_info.param == BackendKind::kCpu ? "Cpu"
                                                                                    : "Cuda");
                         });

}  // namespace
}  // namespace ps
