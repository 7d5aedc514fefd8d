// The ctr program's data and model: the Zipf sampler's law, generated data
// (with and without bag fields) that is a pure function of (seed, sample)
// and partitions exactly, a teacher that sums a bag's vectors and that the
// model represents exactly, the Criteo reader (bag columns too) and each
// malformed line it names, the log-loss and AUC, and the model's gradients
// (MLP and embeddings, a repeated id summed, in a bag and across samples)
// against finite differences on every available backend (the CUDA cases
// skip without a device).
#include "worker/models/ctr.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
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

// All samples of `parts` in order, in a data of their layout.
CtrData Joined(const std::vector<CtrData>& parts) {
  CtrData joined = parts.front().EmptyLike();
  for (const CtrData& part : parts) {
    for (size_t i = 0; i < part.num_samples(); ++i) joined.Append(part, i);
  }
  return joined;
}

// The samples of `parts` joined in order are those of `whole`: its ids,
// offsets, dense values and labels.
void ExpectJoinedEqual(const std::vector<CtrData>& parts, const CtrData& whole) {
  const CtrData joined = Joined(parts);
  EXPECT_EQ(joined.ids, whole.ids);
  EXPECT_EQ(joined.offsets, whole.offsets);
  EXPECT_EQ(joined.dense_values, whole.dense_values);
  EXPECT_EQ(joined.labels, whole.labels);
}

// The data of `o` on one rank, checked against the blocks of 3 ranks joined
// and against a set of its last sample alone.
CtrData CheckedWholeData(const CtrDataOptions& o) {
  const CtrData whole = GenerateCtrData(o, 0, 1).value();
  EXPECT_EQ(whole.num_samples(), o.num_samples);
  std::vector<CtrData> parts;
  for (uint32_t r = 0; r < 3; ++r) parts.push_back(GenerateCtrData(o, r, 3).value());
  ExpectJoinedEqual(parts, whole);
  EXPECT_EQ(Joined(parts).teacher_logits, whole.teacher_logits);
  // A set that starts later is the tail of a longer one.
  CtrDataOptions tail = o;
  tail.first_sample = o.num_samples - 1;
  tail.num_samples = 1;
  const CtrData last = GenerateCtrData(tail, 0, 1).value();
  EXPECT_EQ(last.labels[0], whole.labels.back());
  EXPECT_EQ(last.teacher_logits[0], whole.teacher_logits.back());
  const std::span<const uint64_t> last_ids = whole.SampleIds(o.num_samples - 1);
  EXPECT_EQ(last.ids, std::vector<uint64_t>(last_ids.begin(), last_ids.end()));
  const std::vector<uint64_t> last_offsets =
      whole.has_bags() ? std::vector<uint64_t>{0, last_ids.size()} : std::vector<uint64_t>{};
  EXPECT_EQ(last.offsets, last_offsets);
  return whole;
}

TEST(CtrDataTest, RanksPartitionTheDataAndSamplesDependOnlyOnTheirIndex) {
  const CtrDataOptions o = SmallData(1001);
  const CtrData whole = CheckedWholeData(o);
  EXPECT_FALSE(whole.has_bags());
  EXPECT_EQ(whole.ids.size(), 1001u * o.fields);
  // Every id names its field and a value of that field's vocabulary.
  for (size_t i = 0; i < whole.ids.size(); ++i) {
    const uint32_t f = static_cast<uint32_t>(i % o.fields);
    EXPECT_EQ(whole.ids[i] >> kCtrValueBits, f);
    const uint64_t value = whole.ids[i] & kCtrMissing;
    EXPECT_GE(value, 1u);
    EXPECT_LE(value, o.vocabulary[f]);
  }
}

// SmallData with two bag fields: field 2 (7 values, so bags repeat
// values) of up to 5 values and field 3 of up to 3.
CtrDataOptions BagData(uint64_t samples) {
  CtrDataOptions o = SmallData(samples);
  o.bags = {{.field = 2, .max_values = 5}, {.field = 3, .max_values = 3}};
  return o;
}

TEST(CtrDataTest, BagDataPartitionsByRankAndSamplesDependOnlyOnTheirIndex) {
  const CtrDataOptions o = BagData(1001);
  const CtrData whole = CheckedWholeData(o);
  ASSERT_TRUE(whole.has_bags());
  ASSERT_EQ(whole.offsets.size(), 1002u);
  EXPECT_EQ(whole.offsets.back(), whole.ids.size());
  // Each sample: one value of every single-valued field, 1..max_values of
  // a bag field, in field order, each in its field's vocabulary; bag
  // lengths uniform over 1..max_values; some bag holds a value twice.
  std::vector<std::vector<int>> lengths(o.fields, std::vector<int>(6, 0));
  bool repeated = false;
  for (size_t i = 0; i < whole.num_samples(); ++i) {
    std::vector<uint32_t> count(o.fields, 0);
    std::set<uint64_t> seen;
    uint32_t previous = 0;
    for (uint64_t id : whole.SampleIds(i)) {
      const uint32_t f = CtrField(id);
      ASSERT_LT(f, o.fields);
      ASSERT_GE(f, previous) << "sample " << i;
      previous = f;
      ++count[f];
      const uint64_t value = id & kCtrMissing;
      EXPECT_GE(value, 1u);
      EXPECT_LE(value, o.vocabulary[f]);
      repeated |= !seen.insert(id).second;
    }
    EXPECT_EQ(count[0], 1u);
    EXPECT_EQ(count[1], 1u);
    EXPECT_EQ(count[4], 1u);
    ASSERT_GE(count[2], 1u);
    ASSERT_LE(count[2], 5u);
    ASSERT_GE(count[3], 1u);
    ASSERT_LE(count[3], 3u);
    ++lengths[2][count[2]];
    ++lengths[3][count[3]];
  }
  EXPECT_TRUE(repeated);
  for (const auto& [field, max] : {std::pair<uint32_t, int>{2, 5}, {3, 3}}) {
    for (int k = 1; k <= max; ++k) {
      const double expected = 1001.0 / max;
      EXPECT_NEAR(lengths[field][k], expected, 5 * std::sqrt(expected))
          << "field " << field << " length " << k;
    }
  }
}

// The teacher's input for a field is the sum of its ids' vectors (a value
// twice counts twice, an empty bag is zeros).
TEST(CtrDataTest, TheTeacherSumsABagsVectors) {
  const CtrDataOptions o = BagData(1);
  const CtrTeacher teacher(o);
  ASSERT_EQ(teacher.inputs(), 5 * 4 + 3u);
  const std::vector<uint64_t> ids = {CtrId(0, 3), CtrId(2, 1), CtrId(2, 6), CtrId(2, 1),
                                     CtrId(4, 9)};
  const std::vector<double> dense = {0.5, -1, 2};
  std::vector<double> input(teacher.inputs(), 7.0);
  teacher.Input(ids, dense, input);
  std::vector<double> expected(teacher.inputs(), 0.0), v(4);
  for (uint64_t id : ids) {
    teacher.IdVector(id, v.data());
    for (int k = 0; k < 4; ++k) expected[CtrField(id) * 4 + k] += v[k];
  }
  std::copy(dense.begin(), dense.end(), expected.begin() + 20);
  for (size_t k = 0; k < input.size(); ++k) EXPECT_DOUBLE_EQ(input[k], expected[k]) << k;
  for (int k = 4; k < 8; ++k) EXPECT_EQ(input[k], 0.0) << "field 1 has no id";
  teacher.IdVector(CtrId(2, 1), v.data());
  EXPECT_NE(v[0], 0.0);
}

// The labels are draws at the teacher's probabilities: its log-loss is
// their entropy, well below the click rate's, and its AUC well above 0.5;
// with bag fields too.
TEST(CtrDataTest, TheTeacherSeparatesTheClicks) {
  for (const CtrDataOptions& options : {SmallData(40000), BagData(40000)}) {
    SCOPED_TRACE(options.bags.empty() ? "no bags" : "bags");
    const CtrData data = GenerateCtrData(options, 0, 1).value();
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
  o = SmallData(10);
  o.bags = {{.field = 5, .max_values = 2}};
  EXPECT_TRUE(InvalidWith(GenerateCtrData(o, 0, 1).status(),
                          {"CtrDataOptions.bags[0].field = 5", "0..4"}));
  o.bags = {{.field = 1, .max_values = 2}, {.field = 1, .max_values = 3}};
  EXPECT_TRUE(InvalidWith(GenerateCtrData(o, 0, 1).status(),
                          {"bags[1].field = 1", "bags[0] names it too"}));
  for (uint32_t max_values : {0u, kCtrMaxBagValues + 1}) {
    o.bags = {{.field = 1, .max_values = max_values}};
    EXPECT_TRUE(InvalidWith(GenerateCtrData(o, 0, 1).status(),
                            {"bags[0].max_values = " + std::to_string(max_values), "1..1024"}));
  }
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

  std::string Write(const std::string& text, const std::string& name = "day.tsv") {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  // `line` with its column `column` (0-based) holding `value`.
  static std::string WithColumn(const std::string& line, int column, const std::string& value) {
    std::vector<std::string> cells;
    size_t at = 0;
    for (;;) {
      const size_t tab = line.find('\t', at);
      cells.push_back(line.substr(at, tab == std::string::npos ? std::string::npos : tab - at));
      if (tab == std::string::npos) break;
      at = tab + 1;
    }
    cells[column] = value;
    std::string joined;
    for (size_t i = 0; i < cells.size(); ++i) joined += (i ? "\t" : "") + cells[i];
    return joined;
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
  std::vector<CtrData> parts;
  for (uint32_t r = 0; r < 3; ++r) parts.push_back(ReadCriteoTsv(path, r, 3).value());
  ExpectJoinedEqual(parts, all);
  EXPECT_EQ(ReadCriteoTsv(path, 0, 1, 3)->num_samples(), 3u);  // max_lines
}

TEST_F(CriteoTest, MalformedLinesAreNamedWithTheirLineAndColumn) {
  const std::string good = Line(1, 3);
  auto with_column = [&](int column, const std::string& value) {
    return good + "\n" + WithColumn(good, column, value) + "\n";
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

// The ids of field `field` in sample i of `data`.
std::vector<uint64_t> FieldIds(const CtrData& data, size_t i, uint32_t field) {
  std::vector<uint64_t> ids;
  for (uint64_t id : data.SampleIds(i)) {
    if (CtrField(id) == field) ids.push_back(id);
  }
  return ids;
}

// C3 (field 2) a bag of up to 3 values and C5 (field 4) of up to 2: each
// line's ids in field order, a value twice in a bag kept twice, an empty
// bag column the missing value; rank blocks join into the whole file.
TEST_F(CriteoTest, ReadsBagColumnsAndPartitionsTheirLines) {
  const std::vector<CtrBagField> bags = {{.field = 2, .max_values = 3},
                                         {.field = 4, .max_values = 2}};
  const std::string c3[] = {"a3,ff,a3", "", "7", "0,1", "FF"};
  const std::string c5[] = {"c,d", "b", "", "e", "1,2"};
  std::string text;
  for (int i = 0; i < 5; ++i) {
    text += WithColumn(WithColumn(Line(i % 2, i), 1 + 13 + 2, c3[i]), 1 + 13 + 4, c5[i]) + "\n";
  }
  const std::string path = Write(text);
  const CtrData all = ReadCriteoTsv(path, 0, 1, 0, bags).value();
  ASSERT_EQ(all.num_samples(), 5u);
  ASSERT_TRUE(all.has_bags());
  ASSERT_EQ(all.offsets.size(), 6u);
  EXPECT_EQ(all.offsets.back(), all.ids.size());
  EXPECT_EQ(FieldIds(all, 0, 2), (std::vector<uint64_t>{CtrId(2, 0xa3), CtrId(2, 0xff), CtrId(2, 0xa3)}));
  EXPECT_EQ(FieldIds(all, 0, 4), (std::vector<uint64_t>{CtrId(4, 0xc), CtrId(4, 0xd)}));
  EXPECT_EQ(FieldIds(all, 1, 2), (std::vector<uint64_t>{CtrId(2, kCtrMissing)}));
  EXPECT_EQ(FieldIds(all, 1, 4), (std::vector<uint64_t>{CtrId(4, 0xb)}));
  EXPECT_EQ(FieldIds(all, 2, 4), (std::vector<uint64_t>{CtrId(4, kCtrMissing)}));
  EXPECT_EQ(FieldIds(all, 4, 2), (std::vector<uint64_t>{CtrId(2, 0xff)}));
  EXPECT_EQ(FieldIds(all, 4, 4), (std::vector<uint64_t>{CtrId(4, 1), CtrId(4, 2)}));
  for (size_t i = 0; i < all.num_samples(); ++i) {
    uint32_t previous = 0;
    for (uint64_t id : all.SampleIds(i)) {
      EXPECT_GE(CtrField(id), previous) << "line " << i + 1;
      previous = CtrField(id);
    }
    for (uint32_t f = 0; f < 26; ++f) {
      if (f == 2 || f == 4) continue;
      EXPECT_EQ(FieldIds(all, i, f).size(), 1u) << "line " << i + 1 << " C" << f + 1;
    }
  }
  // The single-valued columns read as without bags.
  const std::string plain_line = WithColumn(WithColumn(Line(0, 0), 16, ""), 18, "");
  const CtrData plain = ReadCriteoTsv(Write(plain_line + "\n", "plain.tsv"), 0, 1).value();
  for (uint32_t f : {0u, 1u, 3u, 5u, 25u}) EXPECT_EQ(FieldIds(all, 0, f), FieldIds(plain, 0, f)) << f;
  std::vector<CtrData> parts;
  for (uint32_t r = 0; r < 3; ++r) parts.push_back(ReadCriteoTsv(path, r, 3, 0, bags).value());
  ExpectJoinedEqual(parts, all);
  const CtrData head = ReadCriteoTsv(path, 0, 1, 2, bags).value();  // max_lines
  EXPECT_EQ(head.offsets, std::vector<uint64_t>(all.offsets.begin(), all.offsets.begin() + 3));
}

TEST_F(CriteoTest, MalformedBagColumnsAreNamed) {
  const std::vector<CtrBagField> bags = {{.field = 2, .max_values = 3}};
  const std::string good = Line(1, 3);
  const std::string bag =
      "expected up to 3 values of 1..12 hex digits separated by ',' (C3, a bag field) or nothing";
  const struct {
    int column;
    std::string value, fragment;
  } cases[] = {
      {16, "a3,,ff", "day.tsv:2: column 17 holds \"a3,,ff\"; " + bag + "; value 2 is \"\""},
      {16, "a3,", "column 17 holds \"a3,\"; " + bag + "; value 2 is \"\""},
      {16, ",a3", "value 1 is \"\""},
      {16, "a3,zz", "value 2 is \"zz\""},
      {16, "1234567890abc", "value 1 is \"1234567890abc\""},
      {16, "1,2,3,4", "column 17 holds \"1,2,3,4\"; " + bag + "; it holds 4 values"},
      {20, "a,b",
       "day.tsv:2: column 21 holds \"a,b\"; expected one hex value (C7 is not a bag field; a list "
       "of values needs an entry in train.ctr.bags) or nothing"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.value);
    const std::string path = Write(good + "\n" + WithColumn(good, c.column, c.value) + "\n");
    EXPECT_TRUE(InvalidWith(ReadCriteoTsv(path, 0, 1, 0, bags).status(), {c.fragment}));
  }
  const std::string path = Write(good + "\n");
  EXPECT_OK(ReadCriteoTsv(path, 0, 1, 0, bags).status());
  const std::vector<CtrBagField> past = {{.field = 26, .max_values = 2}};
  EXPECT_TRUE(InvalidWith(ReadCriteoTsv(path, 0, 1, 0, past).status(),
                          {"ReadCriteoTsv: bags[0].field = 26", "0..25"}));
  const std::vector<CtrBagField> twice = {{.field = 3, .max_values = 2}, {.field = 3, .max_values = 2}};
  EXPECT_TRUE(InvalidWith(ReadCriteoTsv(path, 0, 1, 0, twice).status(),
                          {"bags[1].field = 3", "bags[0] names it too"}));
  const std::vector<CtrBagField> none = {{.field = 3, .max_values = 0}};
  EXPECT_TRUE(InvalidWith(ReadCriteoTsv(path, 0, 1, 0, none).status(),
                          {"bags[0].max_values = 0", "1..1024"}));
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

// `n` normals of standard deviation 0.7 from `seed`.
std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.7f);
  std::vector<float> values(n);
  for (float& v : values) v = normal(gen);
  return values;
}

// The gradient of `model`'s loss on every sample of `data` at (ids,
// embeddings, params), checked against central differences in every MLP
// parameter and every embedding value; returns the embeddings' part.
std::vector<float> CheckedEmbeddingGradient(CtrModel* model, const CtrData& data,
                                            const std::vector<uint64_t>& ids,
                                            const std::vector<float>& embeddings,
                                            const std::vector<float>& params) {
  const size_t rows = data.num_samples();
  std::vector<float> param_grad(params.size()), embedding_grad(embeddings.size(), 9.0f);
  EXPECT_OK(model->TrainStep(data, 0, rows, ids, embeddings, params, embedding_grad, param_grad)
                .status());
  std::vector<float> scratch_e(embeddings.size()), scratch_p(params.size());
  auto loss = [&](const std::vector<float>& e, const std::vector<float>& p) {
    return *model->TrainStep(data, 0, rows, ids, e, p, scratch_e, scratch_p);
  };
  // Central differences in each value of x, the loss a function of x.
  const auto check = [](const std::vector<float>& x, const std::vector<float>& grad,
                        const char* what, auto loss_at) {
    const float eps = 1e-2f;
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<float> up = x, down = x;
      up[i] += eps;
      down[i] -= eps;
      const float numeric = (loss_at(up) - loss_at(down)) / (2 * eps);
      EXPECT_NEAR(grad[i], numeric, 2e-3f + 2e-2f * std::abs(numeric)) << what << " " << i;
    }
  };
  check(params, param_grad, "parameter", [&](const std::vector<float>& p) { return loss(embeddings, p); });
  check(embeddings, embedding_grad, "embedding", [&](const std::vector<float>& e) { return loss(e, params); });
  // Logits agree with the loss the step computed.
  EXPECT_OK(model->SetParameters(params));
  std::vector<float> logits(rows);
  EXPECT_OK(model->Logits(data, ids, embeddings, logits));
  EXPECT_NEAR(MeanLogLoss(logits, data.labels), loss(embeddings, params), 1e-5);
  return embedding_grad;
}

// Three samples of kFields fields and kDense dense features with these ids
// (and offsets, for bags).
constexpr uint32_t kFields = 3, kDense = 2, kDim = 2;
CtrData ThreeSamples(std::vector<uint64_t> ids, std::vector<uint64_t> offsets = {}) {
  CtrData data;
  data.fields = kFields;
  data.dense = kDense;
  data.ids = std::move(ids);
  data.offsets = std::move(offsets);
  data.dense_values = {0.5f, -1.0f, 1.5f, 0.2f, -0.3f, 0.8f};
  data.labels = {1, 0, 1};
  return data;
}

// Central differences of the model's loss in every MLP parameter and every
// embedding value, on a batch where an id repeats (its gradient is the sum
// of its uses) and an id of `ids` is not used (its gradient is 0).
TEST_P(CtrModelTest, GradientsMatchFiniteDifferences) {
  const CtrData data = ThreeSamples({CtrId(0, 1), CtrId(1, 5), CtrId(2, 1),  //
                                     CtrId(0, 1), CtrId(1, 6), CtrId(2, 2),  //
                                     CtrId(0, 2), CtrId(1, 5), CtrId(2, 1)});
  auto model = CtrModel::Create(backend_.get(), kFields, kDense, kDim, {4}, 8).value();
  EXPECT_EQ(model->num_parameters(), (kFields * kDim + kDense) * 4 + 4 + 4 + 1);
  std::vector<uint64_t> ids;
  BatchIds(data, 0, 3, &ids);
  ASSERT_EQ(ids.size(), 6u);
  ids.push_back(CtrId(3, 9));  // pulled, unused
  const std::vector<float> embedding_grad =
      CheckedEmbeddingGradient(model.get(), data, ids, RandomFloats(ids.size() * kDim, 3),
                               RandomFloats(model->num_parameters(), 4));
  EXPECT_EQ(embedding_grad[12], 0.0f);
  EXPECT_EQ(embedding_grad[13], 0.0f);
}

// Field 1 is a bag: sample 0 holds value 5 twice and 6 once, sample 1
// none (an empty bag), sample 2 value 5 again; ids of fields 0 and 2
// repeat across samples. Each value's gradient is the field's, summed over
// its uses; the forward pass sums a bag's embeddings, as the same samples
// with each bag one id whose embedding is that sum (zeros for none) show.
TEST_P(CtrModelTest, BagGradientsMatchFiniteDifferences) {
  const CtrData data =
      ThreeSamples({CtrId(0, 1), CtrId(1, 5), CtrId(1, 6), CtrId(1, 5), CtrId(2, 1),  //
                    CtrId(0, 1), CtrId(2, 2),                                         //
                    CtrId(0, 2), CtrId(1, 5), CtrId(2, 1)},
                   {0, 5, 7, 10});
  auto model = CtrModel::Create(backend_.get(), kFields, kDense, kDim, {4}, 8).value();
  std::vector<uint64_t> ids;
  BatchIds(data, 0, 3, &ids);
  ASSERT_EQ(ids, (std::vector<uint64_t>{CtrId(0, 1), CtrId(0, 2), CtrId(1, 5), CtrId(1, 6),
                                        CtrId(2, 1), CtrId(2, 2)}));
  BatchIds(data, 1, 1, &ids);
  EXPECT_EQ(ids, (std::vector<uint64_t>{CtrId(0, 1), CtrId(2, 2)}));
  BatchIds(data, 0, 3, &ids);
  ids.push_back(CtrId(3, 9));  // pulled, unused
  const std::vector<float> embeddings = RandomFloats(ids.size() * kDim, 5);
  const std::vector<float> params = RandomFloats(model->num_parameters(), 6);
  const std::vector<float> embedding_grad =
      CheckedEmbeddingGradient(model.get(), data, ids, embeddings, params);
  EXPECT_EQ(embedding_grad[12], 0.0f);
  EXPECT_EQ(embedding_grad[13], 0.0f);
  std::vector<float> logits(3);
  ASSERT_OK(model->SetParameters(params));
  ASSERT_OK(model->Logits(data, ids, embeddings, logits));
  // The bags as single ids 100 (5 + 6 + 5), 101 (empty) and 102 (5).
  const CtrData single = ThreeSamples({CtrId(0, 1), CtrId(1, 100), CtrId(2, 1),  //
                                       CtrId(0, 1), CtrId(1, 101), CtrId(2, 2),  //
                                       CtrId(0, 2), CtrId(1, 102), CtrId(2, 1)});
  std::vector<uint64_t> single_ids;
  BatchIds(single, 0, 3, &single_ids);
  const auto row = [&](uint64_t id, uint32_t k) {
    return embeddings[(std::lower_bound(ids.begin(), ids.end(), id) - ids.begin()) * kDim + k];
  };
  std::vector<float> single_embeddings;
  for (uint64_t id : single_ids) {
    for (uint32_t k = 0; k < kDim; ++k) {
      float value = 0;
      if (id == CtrId(1, 100)) value = row(CtrId(1, 5), k) * 2 + row(CtrId(1, 6), k);
      if (id == CtrId(1, 102)) value = row(CtrId(1, 5), k);
      if (CtrField(id) != 1) value = row(id, k);
      single_embeddings.push_back(value);
    }
  }
  std::vector<float> single_logits(3);
  ASSERT_OK(model->Logits(single, single_ids, single_embeddings, single_logits));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(logits[i], single_logits[i], 1e-5) << "sample " << i;
}

// With the planted teacher's weights and vectors, the model's logits are
// the teacher's on data with bag fields: both sum a bag's vectors, and the
// model represents the teacher exactly.
TEST_P(CtrModelTest, TheTeachersWeightsGiveItsLogitsOnBagData) {
  const CtrDataOptions o = BagData(300);
  const CtrData data = GenerateCtrData(o, 0, 1).value();
  const CtrTeacher teacher(o);
  constexpr uint32_t kHidden = CtrTeacher::kHidden;
  auto model = CtrModel::Create(backend_.get(), o.fields, o.dense, o.teacher_dim, {kHidden}, 64)
                   .value();
  // Layer 1: W (inputs x kHidden, row-major), b = 0; layer 2: W (kHidden x
  // 1), b.
  const uint32_t inputs = teacher.inputs();
  std::vector<float> params(model->num_parameters(), 0.0f);
  ASSERT_EQ(params.size(), size_t{inputs} * kHidden + kHidden + kHidden + 1);
  for (uint32_t i = 0; i < inputs; ++i) {
    for (uint32_t j = 0; j < kHidden; ++j) {
      params[i * kHidden + j] = static_cast<float>(teacher.hidden_weights()[j * inputs + i]);
    }
  }
  for (uint32_t j = 0; j < kHidden; ++j) {
    params[inputs * kHidden + kHidden + j] = static_cast<float>(teacher.out_weights()[j]);
  }
  params.back() = static_cast<float>(teacher.bias());
  std::vector<uint64_t> ids;
  BatchIds(data, 0, data.num_samples(), &ids);
  std::vector<float> embeddings;
  std::vector<double> vector(o.teacher_dim);
  for (uint64_t id : ids) {
    teacher.IdVector(id, vector.data());
    embeddings.insert(embeddings.end(), vector.begin(), vector.end());
  }
  ASSERT_OK(model->SetParameters(params));
  std::vector<float> logits(data.num_samples());
  ASSERT_OK(model->Logits(data, ids, embeddings, logits));
  for (size_t i = 0; i < data.num_samples(); ++i) {
    EXPECT_NEAR(logits[i], data.teacher_logits[i], 1e-4 * (1 + std::abs(data.teacher_logits[i])))
        << "sample " << i;
  }
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
  // A sample's ids out of field order, or naming a field past the model's.
  CtrData swapped = data;
  std::swap(swapped.ids[0], swapped.ids[1]);
  EXPECT_TRUE(InvalidWith(model->TrainStep(swapped, 0, 4, ids, e, params, eg, pg).status(),
                          {"names field 0 after an id of field 1", "field order"}));
  CtrData past = data;
  past.ids[4] = CtrId(5, 1);
  std::vector<uint64_t> past_ids;
  BatchIds(past, 0, 4, &past_ids);
  std::vector<float> past_e(past_ids.size() * 2), past_g(past_e.size());
  EXPECT_TRUE(InvalidWith(model->TrainStep(past, 0, 4, past_ids, past_e, params, past_g, pg).status(),
                          {"names field 5 of a model of 5 fields"}));
  // Offsets that do not fit the ids.
  CtrData bags = GenerateCtrData(BagData(20), 0, 1).value();
  BatchIds(bags, 0, 4, &ids);
  std::vector<float> bag_e(ids.size() * 2), bag_g(bag_e.size());
  EXPECT_OK(model->TrainStep(bags, 0, 4, ids, bag_e, params, bag_g, pg).status());
  bags.offsets.pop_back();
  EXPECT_TRUE(InvalidWith(model->TrainStep(bags, 0, 4, ids, bag_e, params, bag_g, pg).status(),
                          {"20 samples", "offsets"}));
}

INSTANTIATE_TEST_SUITE_P(Backends, CtrModelTest,
                         ::testing::Values(BackendKind::kCpu, BackendKind::kCuda),
                         [](const ::testing::TestParamInfo<BackendKind>& param_info) {
                           return std::string(param_info.param == BackendKind::kCpu ? "Cpu"
                                                                                    : "Cuda");
                         });

}  // namespace
}  // namespace ps
