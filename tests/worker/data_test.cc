// Tests for worker/data: the Fashion-MNIST reader (real files when installed,
// small generated gzipped IDX files for every error path) and the synthetic
// generators.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/util/status_matchers.h"
#include "worker/data/fashion_mnist.h"
#include "worker/data/generators.h"

namespace ps {
namespace {

namespace fs = std::filesystem;

bool HaveFashionMnist() { return fs::exists(kDefaultFashionMnistDir); }

#define SKIP_WITHOUT_FASHION_MNIST()      \
  if (!HaveFashionMnist())                \
  GTEST_SKIP() << kDefaultFashionMnistDir \
               << " not found; install dataset-fashion-mnist to run the real-data tests"

// ---------------------------------------------------------------------------
// Real data.

TEST(FashionMnistTest, TrainSplitHasShapesBalancedLabelsAndUnitPixels) {
  SKIP_WITHOUT_FASHION_MNIST();
  auto ds = LoadFashionMnist(kDefaultFashionMnistDir, FashionMnistSplit::kTrain, 0, 1);
  ASSERT_OK(ds);
  EXPECT_EQ(ds->num_samples(), 60000u);
  EXPECT_EQ(ds->split_size, 60000u);
  EXPECT_EQ(ds->range, (RowRange{0, 60000}));
  ASSERT_EQ(ds->images.size(), 60000u * 784u);
  std::array<int, 10> histogram{};
  for (int32_t label : ds->labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++histogram[label];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], 6000) << "class " << c;
  float lo = 1, hi = 0;
  for (float p : ds->images) {
    lo = std::min(lo, p);
    hi = std::max(hi, p);
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
}

TEST(FashionMnistTest, TestSplitHasTenThousandBalancedSamples) {
  SKIP_WITHOUT_FASHION_MNIST();
  auto ds = LoadFashionMnist(kDefaultFashionMnistDir, FashionMnistSplit::kTest, 0, 1);
  ASSERT_OK(ds);
  EXPECT_EQ(ds->num_samples(), 10000u);
  EXPECT_EQ(ds->images.size(), 10000u * 784u);
  std::array<int, 10> histogram{};
  for (int32_t label : ds->labels) ++histogram[label];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], 1000) << "class " << c;
}

TEST(FashionMnistTest, PartitionsOfOneTwoFourRanksAreDisjointAndCoverEverySample) {
  SKIP_WITHOUT_FASHION_MNIST();
  for (FashionMnistSplit split : {FashionMnistSplit::kTest, FashionMnistSplit::kTrain}) {
    auto whole = LoadFashionMnist(kDefaultFashionMnistDir, split, 0, 1);
    ASSERT_OK(whole);
    for (uint32_t m : {2u, 4u}) {
      uint64_t next = 0;  // contiguous blocks: each starts where the last ended
      for (uint32_t r = 0; r < m; ++r) {
        auto part = LoadFashionMnist(kDefaultFashionMnistDir, split, r, m);
        ASSERT_OK(part);
        EXPECT_EQ(part->range.begin, next) << "rank " << r << " of " << m;
        EXPECT_EQ(part->num_samples(), part->range.size());
        next = part->range.end;
        ASSERT_TRUE(std::equal(part->labels.begin(), part->labels.end(),
                               whole->labels.begin() + part->range.begin));
        ASSERT_TRUE(std::equal(part->images.begin(), part->images.end(),
                               whole->images.begin() + part->range.begin * 784));
      }
      EXPECT_EQ(next, whole->num_samples()) << m << " ranks";
    }
  }
}

TEST(FashionMnistTest, ImpossibleRankIsInvalidArgument) {
  auto ds = LoadFashionMnist(kDefaultFashionMnistDir, FashionMnistSplit::kTest, 2, 2);
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  auto none = LoadFashionMnist(kDefaultFashionMnistDir, FashionMnistSplit::kTest, 0, 0);
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Small generated files.

std::vector<uint8_t> IdxBytes(uint8_t type, const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::vector<uint8_t> Ramp(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7);
  return v;
}

class IdxReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ps_data_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string WriteGz(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    EXPECT_EQ(gzclose(f), Z_OK);
    return path;
  }
  std::string WriteRaw(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  static std::vector<uint8_t> ReadRaw(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  // A status that is `code` and whose message names `path` and contains `what`.
  static void ExpectError(const Status& s, StatusCode code, const std::string& path,
                          const std::string& what) {
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
  }

  fs::path dir_;
};

TEST_F(IdxReaderTest, ReadsSmallFileWithoutMd5Check) {
  const std::string path = WriteGz("ok.gz", IdxBytes(0x08, {3, 2, 2}, Ramp(12)));
  IdxExpectation expect;
  expect.magic = 2051;
  expect.dims = {3, 2, 2};
  auto idx = ReadIdxGz(path, expect);
  ASSERT_OK(idx);
  EXPECT_EQ(idx->magic, 2051u);
  EXPECT_EQ(idx->dims, (std::vector<uint32_t>{3, 2, 2}));
  EXPECT_EQ(idx->data, Ramp(12));
}

TEST_F(IdxReaderTest, Md5OfUncompressedContentsIsCheckedWhenGiven) {
  const std::vector<uint8_t> bytes = IdxBytes(0x08, {5}, Ramp(5));
  const std::string path = WriteGz("labels.gz", bytes);
  auto md5 = Md5Hex(bytes);
  ASSERT_OK(md5);
  IdxExpectation expect;
  expect.md5_hex = *md5;
  EXPECT_OK(ReadIdxGz(path, expect));

  expect.md5_hex = "00000000000000000000000000000000";
  expect.remedy = "reinstall the thing";
  auto bad = ReadIdxGz(path, expect);
  ExpectError(bad.status(), StatusCode::kDataLoss, path, "MD5");
  EXPECT_NE(bad.status().message().find(*md5), std::string::npos);
  EXPECT_NE(bad.status().message().find("reinstall the thing"), std::string::npos);
}

TEST_F(IdxReaderTest, Md5HexMatchesKnownDigest) {
  const std::string abc = "abc";
  auto md5 = Md5Hex(std::vector<uint8_t>(abc.begin(), abc.end()));
  ASSERT_OK(md5);
  EXPECT_EQ(*md5, "900150983cd24fb0d6963f7d28e17f72");  // RFC 1321 test suite
}

TEST_F(IdxReaderTest, MissingFileIsNotFoundNamingTheFile) {
  const std::string path = (dir_ / "absent.gz").string();
  ExpectError(ReadIdxGz(path, {}).status(), StatusCode::kNotFound, path, "cannot open");
}

TEST_F(IdxReaderTest, TruncatedGzipIsDataLoss) {
  const std::string path = WriteGz("cut.gz", IdxBytes(0x08, {4000}, Ramp(4000)));
  std::vector<uint8_t> gz = ReadRaw(path);
  gz.resize(gz.size() / 2);
  WriteRaw("cut.gz", gz);
  ExpectError(ReadIdxGz(path, {}).status(), StatusCode::kDataLoss, path, "gzip");
}

TEST_F(IdxReaderTest, CorruptGzipIsDataLoss) {
  const std::string path = WriteGz("flip.gz", IdxBytes(0x08, {4000}, Ramp(4000)));
  std::vector<uint8_t> gz = ReadRaw(path);
  gz[gz.size() - 6] ^= 0xff;  // inside the CRC-32 trailer
  WriteRaw("flip.gz", gz);
  ExpectError(ReadIdxGz(path, {}).status(), StatusCode::kDataLoss, path, "gzip");
}

TEST_F(IdxReaderTest, UncompressedFileIsDataLoss) {
  const std::string path = WriteRaw("plain.gz", IdxBytes(0x08, {3}, Ramp(3)));
  ExpectError(ReadIdxGz(path, {}).status(), StatusCode::kDataLoss, path, "not a gzip stream");
  const std::string empty = WriteRaw("empty.gz", {});
  ExpectError(ReadIdxGz(empty, {}).status(), StatusCode::kDataLoss, empty, "not a gzip stream");
}

TEST_F(IdxReaderTest, BadMagicIsDataLoss) {
  const std::string floats = WriteGz("floats.gz", IdxBytes(0x0D, {1}, Ramp(4)));
  ExpectError(ReadIdxGz(floats, {}).status(), StatusCode::kDataLoss, floats, "magic");

  const std::string labels = WriteGz("labels.gz", IdxBytes(0x08, {3}, Ramp(3)));
  IdxExpectation want_images;
  want_images.magic = 2051;
  ExpectError(ReadIdxGz(labels, want_images).status(), StatusCode::kDataLoss, labels,
              "magic number 2049, want 2051");
}

TEST_F(IdxReaderTest, WrongDimensionsOrPayloadSizeIsDataLoss) {
  const std::string path = WriteGz("dims.gz", IdxBytes(0x08, {3, 2, 2}, Ramp(12)));
  IdxExpectation expect;
  expect.dims = {3, 28, 28};
  ExpectError(ReadIdxGz(path, expect).status(), StatusCode::kDataLoss, path,
              "dimensions 3x2x2, want 3x28x28");

  const std::string short_payload = WriteGz("short.gz", IdxBytes(0x08, {3, 2, 2}, Ramp(11)));
  ExpectError(ReadIdxGz(short_payload, {}).status(), StatusCode::kDataLoss, short_payload,
              "truncated");
  const std::string long_payload = WriteGz("long.gz", IdxBytes(0x08, {3, 2, 2}, Ramp(13)));
  ExpectError(ReadIdxGz(long_payload, {}).status(), StatusCode::kDataLoss, long_payload,
              "trailing");
  const std::string short_header = WriteGz("hdr.gz", {0, 0, 8, 3, 0, 0});
  ExpectError(ReadIdxGz(short_header, {}).status(), StatusCode::kDataLoss, short_header, "header");
}

TEST_F(IdxReaderTest, LoaderRejectsWrongCountAndWrongContentsWithReinstallHint) {
  // Ten labels where 10000 are expected.
  const std::string labels = WriteGz("t10k-labels-idx1-ubyte.gz", IdxBytes(0x08, {10}, Ramp(10)));
  auto few = LoadFashionMnist(dir_.string(), FashionMnistSplit::kTest, 0, 1);
  ExpectError(few.status(), StatusCode::kDataLoss, labels, "dimensions 10, want 10000");
  EXPECT_NE(few.status().message().find("reinstall dataset-fashion-mnist"), std::string::npos);

  // The right shape but not the official contents.
  WriteGz("t10k-labels-idx1-ubyte.gz", IdxBytes(0x08, {10000}, std::vector<uint8_t>(10000, 3)));
  auto wrong = LoadFashionMnist(dir_.string(), FashionMnistSplit::kTest, 0, 1);
  ExpectError(wrong.status(), StatusCode::kDataLoss, labels, "MD5");
  EXPECT_NE(wrong.status().message().find("reinstall dataset-fashion-mnist"), std::string::npos);

  // Images missing once the labels are right (copied from the real files).
  if (HaveFashionMnist()) {
    fs::copy_file(std::string(kDefaultFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz", labels,
                  fs::copy_options::overwrite_existing);
    auto no_images = LoadFashionMnist(dir_.string(), FashionMnistSplit::kTest, 0, 1);
    ExpectError(no_images.status(), StatusCode::kNotFound,
                (dir_ / "t10k-images-idx3-ubyte.gz").string(), "cannot open");
  }
}

// ---------------------------------------------------------------------------
// Sparse click generator.

SparseClickOptions SmallClicks() {
  SparseClickOptions o;
  o.num_features = 100'000;
  o.num_samples = 20'000;
  o.seed = 42;
  return o;
}

TEST(SparseClickGeneratorTest, SameSeedGivesSameDataOtherSeedDiffers) {
  auto a = GenerateSparseClicks(SmallClicks(), 0, 1);
  auto b = GenerateSparseClicks(SmallClicks(), 0, 1);
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->feature_ids, b->feature_ids);
  EXPECT_EQ(a->row_offsets, b->row_offsets);
  EXPECT_EQ(a->labels, b->labels);
  EXPECT_EQ(a->true_weights, b->true_weights);
  SparseClickOptions other = SmallClicks();
  other.seed = 43;
  auto c = GenerateSparseClicks(other, 0, 1);
  ASSERT_OK(c);
  EXPECT_NE(a->feature_ids, c->feature_ids);
  EXPECT_NE(a->true_weights, c->true_weights);
}

TEST(SparseClickGeneratorTest, RankPartitionsAreDisjointAndConcatenateToWhole) {
  auto whole = GenerateSparseClicks(SmallClicks(), 0, 1);
  ASSERT_OK(whole);
  std::vector<uint64_t> ids;
  std::vector<int32_t> labels;
  uint64_t next = 0;
  for (uint32_t r = 0; r < 3; ++r) {
    auto part = GenerateSparseClicks(SmallClicks(), r, 3);
    ASSERT_OK(part);
    EXPECT_EQ(part->range.begin, next);
    next = part->range.end;
    EXPECT_EQ(part->true_weights, whole->true_weights);
    ids.insert(ids.end(), part->feature_ids.begin(), part->feature_ids.end());
    labels.insert(labels.end(), part->labels.begin(), part->labels.end());
  }
  EXPECT_EQ(next, SmallClicks().num_samples);
  EXPECT_EQ(ids, whole->feature_ids);
  EXPECT_EQ(labels, whole->labels);
}

TEST(SparseClickGeneratorTest, SamplesHoldSortedDistinctIdsInConfiguredCount) {
  const SparseClickOptions o = SmallClicks();
  auto d = GenerateSparseClicks(o, 0, 1);
  ASSERT_OK(d);
  ASSERT_EQ(d->row_offsets.size(), d->num_samples() + 1);
  for (size_t i = 0; i < d->num_samples(); ++i) {
    const uint64_t n = d->row_offsets[i + 1] - d->row_offsets[i];
    ASSERT_GE(n, o.min_features);
    ASSERT_LE(n, o.max_features);
    for (uint64_t j = d->row_offsets[i]; j + 1 < d->row_offsets[i + 1]; ++j) {
      ASSERT_LT(d->feature_ids[j], d->feature_ids[j + 1]);
    }
    ASSERT_LT(d->feature_ids[d->row_offsets[i + 1] - 1], o.num_features);
  }
}

TEST(SparseClickGeneratorTest, FeatureFrequenciesFallWithPopularityRank) {
  const SparseClickOptions o = SmallClicks();
  auto d = GenerateSparseClicks(o, 0, 1);
  ASSERT_OK(d);
  std::vector<uint64_t> count(o.num_features, 0);
  for (uint64_t id : d->feature_ids) ++count[id];
  // Mean count per feature over popularity-rank bands [0,1), [1,2), [2,10),
  // [10,100), [100,1000), [1000,10000): each band strictly rarer.
  const std::vector<uint64_t> edges = {0, 1, 2, 10, 100, 1000, 10000};
  double previous = 1e300;
  for (size_t b = 0; b + 1 < edges.size(); ++b) {
    double sum = 0;
    for (uint64_t k = edges[b]; k < edges[b + 1]; ++k)
      sum += count[FeatureIdOfPopularityRank(o, k)];
    const double mean = sum / static_cast<double>(edges[b + 1] - edges[b]);
    EXPECT_LT(mean, previous) << "band starting at rank " << edges[b];
    previous = mean;
  }
}

TEST(SparseClickGeneratorTest, ScatteredIdsAreAPermutationAndSpreadHotKeys) {
  SparseClickOptions o = SmallClicks();
  o.num_features = 1000;
  std::set<uint64_t> seen;
  for (uint64_t k = 0; k < o.num_features; ++k) seen.insert(FeatureIdOfPopularityRank(o, k));
  EXPECT_EQ(seen.size(), o.num_features);
  EXPECT_EQ(*seen.rbegin(), o.num_features - 1);
  // The 100 hottest features do not all land in the first of 4 key ranges.
  int first_quarter = 0;
  for (uint64_t k = 0; k < 100; ++k) first_quarter += FeatureIdOfPopularityRank(o, k) < 250;
  EXPECT_LT(first_quarter, 60);
  o.scatter_feature_ids = false;
  EXPECT_EQ(FeatureIdOfPopularityRank(o, 7), 7u);
}

double MeanLogLoss(const SparseClickData& d, bool use_true_weights) {
  double loss = 0;
  for (size_t i = 0; i < d.num_samples(); ++i) {
    double z = 0;
    if (use_true_weights) {
      for (uint64_t j = d.row_offsets[i]; j < d.row_offsets[i + 1]; ++j) {
        z += d.true_weights[d.feature_ids[j]];
      }
    }
    const double margin = d.labels[i] == 1 ? z : -z;
    loss += std::log1p(std::exp(-margin));
  }
  return loss / static_cast<double>(d.num_samples());
}

TEST(SparseClickGeneratorTest, LabelsFollowTrueWeights) {
  auto d = GenerateSparseClicks(SmallClicks(), 0, 1);
  ASSERT_OK(d);
  const double zero = MeanLogLoss(*d, false);
  const double truth = MeanLogLoss(*d, true);
  EXPECT_NEAR(zero, std::log(2.0), 1e-9);
  EXPECT_LT(truth, zero - 0.1) << "true-weight loss " << truth << " vs zero-weight " << zero;
}

TEST(SparseClickGeneratorTest, DenseWeightsAndDefaultsWork) {
  SparseClickOptions o;  // 10^6 features
  o.num_samples = 1000;
  o.weight_density = 1.0;
  auto d = GenerateSparseClicks(o, 1, 2);
  ASSERT_OK(d);
  EXPECT_EQ(d->true_weights.size(), 1'000'000u);
  EXPECT_EQ(d->num_samples(), 500u);
  EXPECT_EQ(std::count(d->true_weights.begin(), d->true_weights.end(), 0.0f), 0);
}

TEST(SparseClickGeneratorTest, ImpossibleOptionsOrRankAreInvalidArgument) {
  SparseClickOptions o = SmallClicks();
  o.max_features = 5;  // < min_features
  auto bad = GenerateSparseClicks(o, 0, 1);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("min_features"), std::string::npos);
  o = SmallClicks();
  o.weight_density = 0;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  o = SmallClicks();
  o.zipf_exponent = -1;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GenerateSparseClicks(SmallClicks(), 3, 3).status().code(),
            StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------
// Low-rank ratings generator.

LowRankRatingsOptions SmallRatings() {
  LowRankRatingsOptions o;
  o.num_users = 2000;
  o.num_items = 1000;
  o.rank = 8;
  o.observe_probability = 0.05;
  o.noise_stddev = 0.2;
  o.seed = 7;
  return o;
}

bool SameRatings(const std::vector<Rating>& a, const std::vector<Rating>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const Rating& x, const Rating& y) {
    return x.user == y.user && x.item == y.item && x.value == y.value;
  });
}

TEST(LowRankRatingsGeneratorTest, SameSeedGivesSameRatingsAndPartitionsConcatenate) {
  auto whole = GenerateLowRankRatings(SmallRatings(), 0, 1);
  auto again = GenerateLowRankRatings(SmallRatings(), 0, 1);
  ASSERT_OK(whole);
  ASSERT_OK(again);
  EXPECT_TRUE(SameRatings(whole->ratings, again->ratings));

  std::vector<Rating> joined;
  std::vector<float> user_factors;
  uint64_t next = 0;
  for (uint32_t r = 0; r < 4; ++r) {
    auto part = GenerateLowRankRatings(SmallRatings(), r, 4);
    ASSERT_OK(part);
    EXPECT_EQ(part->users.begin, next);
    next = part->users.end;
    EXPECT_EQ(part->item_factors, whole->item_factors);
    for (const Rating& x : part->ratings) {
      ASSERT_TRUE(part->users.Contains(x.user));
    }
    joined.insert(joined.end(), part->ratings.begin(), part->ratings.end());
    user_factors.insert(user_factors.end(), part->user_factors.begin(), part->user_factors.end());
  }
  EXPECT_EQ(next, SmallRatings().num_users);
  EXPECT_TRUE(SameRatings(joined, whole->ratings));
  EXPECT_EQ(user_factors, whole->user_factors);

  LowRankRatingsOptions other = SmallRatings();
  other.seed = 8;
  auto c = GenerateLowRankRatings(other, 0, 1);
  ASSERT_OK(c);
  EXPECT_FALSE(SameRatings(c->ratings, whole->ratings));
}

TEST(LowRankRatingsGeneratorTest, ObservedFractionMatchesProbabilityAndIsSorted) {
  const LowRankRatingsOptions o = SmallRatings();
  auto d = GenerateLowRankRatings(o, 0, 1);
  ASSERT_OK(d);
  const double expected = o.observe_probability * static_cast<double>(o.num_users * o.num_items);
  // 100000 expected; binomial sd ~ 308.
  EXPECT_NEAR(static_cast<double>(d->ratings.size()), expected, 0.02 * expected);
  for (size_t i = 1; i < d->ratings.size(); ++i) {
    const Rating& a = d->ratings[i - 1];
    const Rating& b = d->ratings[i];
    ASSERT_TRUE(a.user < b.user || (a.user == b.user && a.item < b.item));
    ASSERT_LT(b.item, o.num_items);
  }
}

TEST(LowRankRatingsGeneratorTest, ResidualsHaveConfiguredNoiseLevel) {
  const LowRankRatingsOptions o = SmallRatings();
  auto d = GenerateLowRankRatings(o, 1, 2);
  ASSERT_OK(d);
  double sum = 0, sum_sq = 0, signal_sq = 0;
  for (const Rating& x : d->ratings) {
    double dot = 0;
    for (uint32_t k = 0; k < o.rank; ++k) {
      dot += double{d->user_factors[(x.user - d->users.begin) * o.rank + k]} *
             d->item_factors[x.item * o.rank + k];
    }
    const double residual = x.value - dot;
    sum += residual;
    sum_sq += residual * residual;
    signal_sq += dot * dot;
  }
  const double n = static_cast<double>(d->ratings.size());
  ASSERT_GT(n, 10000);
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sum_sq / n), o.noise_stddev, 0.05 * o.noise_stddev);
  // Clean ratings have variance rank * factor_stddev^4 = 0.5.
  const double signal_var = o.rank * std::pow(o.factor_stddev, 4);
  EXPECT_NEAR(signal_sq / n, signal_var, 0.15 * signal_var);
}

TEST(LowRankRatingsGeneratorTest, FullObservationAndImpossibleOptions) {
  LowRankRatingsOptions o = SmallRatings();
  o.num_users = 3;
  o.num_items = 5;
  o.observe_probability = 1.0;
  auto d = GenerateLowRankRatings(o, 0, 1);
  ASSERT_OK(d);
  EXPECT_EQ(d->ratings.size(), 15u);
  o.rank = 0;
  auto bad = GenerateLowRankRatings(o, 0, 1);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("LowRankRatingsOptions.rank"), std::string::npos);
  o = SmallRatings();
  o.observe_probability = 0;
  EXPECT_EQ(o.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GenerateLowRankRatings(SmallRatings(), 0, 0).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
