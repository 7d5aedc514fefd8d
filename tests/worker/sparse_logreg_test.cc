// Sparse logistic regression on the generated click data: the gradient matches
// finite differences of the loss, the loss at the true weights is near the
// labels' Bernoulli entropy, batch feature lists are exact, bad arguments are
// InvalidArgument, held-out sets from first_sample are fresh draws of the same
// process, and plain SGD learns the true model. The model's cases run on every
// available backend; the CUDA cases skip without a device.
#include "worker/models/sparse_logreg.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/util/status_matchers.h"
#include "worker/backend.h"
#include "worker/backend_factory.h"
#include "worker/data/generators.h"

namespace ps {
namespace {

SparseClickOptions Clicks(uint64_t features, uint64_t samples, uint64_t seed) {
  SparseClickOptions o;
  o.num_features = features;
  o.num_samples = samples;
  o.seed = seed;
  return o;
}

std::vector<uint64_t> AllIds(uint64_t n) {
  std::vector<uint64_t> ids(n);
  std::iota(ids.begin(), ids.end(), uint64_t{0});
  return ids;
}

// Weights of `ids` gathered from a dense vector.
std::vector<float> Gather(const std::vector<float>& dense, const std::vector<uint64_t>& ids) {
  std::vector<float> w(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) w[i] = dense[ids[i]];
  return w;
}

void ExpectInvalid(const Status& s, const std::string& fragment) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.ToString();
}

class SparseLogRegTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    if (GetParam() == BackendKind::kCuda && CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    backend_ = CreateBackend(GetParam()).value();
    model_ = SparseLogReg::Create(backend_.get()).value();
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SparseLogReg> model_;
};

TEST_P(SparseLogRegTest, GradientMatchesFiniteDifferences) {
  auto d = GenerateSparseClicks(Clicks(2000, 200, 3), 0, 1);
  ASSERT_OK(d);
  const size_t first = 17, rows = 13;
  std::vector<uint64_t> ids;
  BatchFeatures(*d, first, rows, &ids);
  // Two ids outside the batch: present in the pull, gradient exactly 0.
  std::vector<uint64_t> extra;
  for (uint64_t id = 0; extra.size() < 2; ++id) {
    if (!std::binary_search(ids.begin(), ids.end(), id)) extra.push_back(id);
  }
  ids.insert(ids.end(), extra.begin(), extra.end());
  std::sort(ids.begin(), ids.end());

  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> w(ids.size());
  for (float& v : w) v = normal(gen);
  std::vector<float> grad(ids.size(), 123.0f);
  auto loss = model_->LossAndGradient(*d, first, rows, ids, w, grad);
  ASSERT_OK(loss);
  EXPECT_GT(*loss, 0.0);

  // The loss is a float: its rounding (~3e-8 at ~0.7) divided by the step
  // 2 eps = 1/32 puts errors of a few 1e-6 into the difference quotient,
  // hence the absolute 1e-5 below (the gradients are ~0.01 to 0.1).
  const float eps = 1.0f / 64;  // exact in float
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<float> p = w;
    p[i] = w[i] + eps;
    const double up = *model_->LossAndGradient(*d, first, rows, ids, p, {});
    const double w_up = p[i];
    p[i] = w[i] - eps;
    const double down = *model_->LossAndGradient(*d, first, rows, ids, p, {});
    const double numeric = (up - down) / (w_up - double{p[i]});
    EXPECT_NEAR(grad[i], numeric, 1e-5 + 1e-3 * std::abs(numeric)) << "id " << ids[i];
    if (std::binary_search(extra.begin(), extra.end(), ids[i])) {
      EXPECT_EQ(grad[i], 0.0f);
    }
  }
}

TEST_P(SparseLogRegTest, StableForHugeMargins) {
  auto d = GenerateSparseClicks(Clicks(1000, 50, 4), 0, 1);
  ASSERT_OK(d);
  const std::vector<uint64_t> ids = AllIds(1000);
  for (float big : {1e4f, -1e4f}) {
    const std::vector<float> w(ids.size(), big);
    std::vector<float> grad(ids.size());
    auto loss = model_->LossAndGradient(*d, 0, 50, ids, w, grad);
    ASSERT_OK(loss);
    EXPECT_TRUE(std::isfinite(*loss));
    EXPECT_GT(*loss, 1e3);  // every wrong label costs ~|z|
    for (float g : grad) ASSERT_TRUE(std::isfinite(g));
  }
}

TEST_P(SparseLogRegTest, TrueWeightsLossIsNearBernoulliEntropy) {
  const SparseClickOptions o = Clicks(10'000, 30'000, 5);
  auto d = GenerateSparseClicks(o, 0, 1);
  ASSERT_OK(d);
  const std::vector<uint64_t> ids = AllIds(o.num_features);
  const std::vector<float> zero(ids.size(), 0.0f);
  auto at_zero = model_->LogLoss(*d, ids, zero);
  auto at_truth = model_->LogLoss(*d, ids, d->true_weights);
  ASSERT_TRUE(at_zero.ok() && at_truth.ok());
  // log 2 rounded to float (the loss is a float from the backend).
  EXPECT_NEAR(*at_zero, std::log(2.0), 1e-7);

  // Mean entropy of Bernoulli(sigmoid(w_true . x)): the expected loss at the
  // true weights.
  double entropy = 0;
  for (size_t s = 0; s < d->num_samples(); ++s) {
    double z = 0;
    for (uint64_t k = d->row_offsets[s]; k < d->row_offsets[s + 1]; ++k) {
      z += d->true_weights[d->feature_ids[k]];
    }
    const double p = 1.0 / (1.0 + std::exp(-z));
    if (p > 0 && p < 1) entropy -= p * std::log(p) + (1 - p) * std::log1p(-p);
  }
  entropy /= static_cast<double>(d->num_samples());
  EXPECT_LT(*at_truth, std::log(2.0) - 0.1);
  // The per-sample loss minus entropy has standard deviation < 0.5, so the
  // mean over 30k samples is within 0.01 of the entropy by > 3 sigma.
  EXPECT_NEAR(*at_truth, entropy, 0.01) << "entropy " << entropy;
  RecordProperty("entropy_gap", std::to_string(*at_truth - entropy));

  // The sparse lookup (pulled rows only) agrees with the dense one.
  std::vector<uint64_t> batch_ids;
  BatchFeatures(*d, 0, d->num_samples(), &batch_ids);
  auto sparse = model_->LogLoss(*d, batch_ids, Gather(d->true_weights, batch_ids));
  ASSERT_OK(sparse);
  EXPECT_FLOAT_EQ(*sparse, *at_truth);
}

TEST(SparseLogRegDataTest, BatchFeaturesAreSortedDistinctAndExact) {
  auto d = GenerateSparseClicks(Clicks(100'000, 5000, 6), 0, 1);
  ASSERT_OK(d);
  std::vector<uint64_t> ids = {99, 1, 7};  // replaced, not appended to
  const size_t first = 1234, rows = 1000;
  BatchFeatures(*d, first, rows, &ids);
  std::set<uint64_t> want;
  for (size_t s = first; s < first + rows; ++s) {
    for (uint64_t k = d->row_offsets[s]; k < d->row_offsets[s + 1]; ++k) {
      want.insert(d->feature_ids[k]);
    }
  }
  EXPECT_EQ(ids, std::vector<uint64_t>(want.begin(), want.end()));
  EXPECT_TRUE(std::adjacent_find(ids.begin(), ids.end(), std::greater_equal<uint64_t>()) ==
              ids.end());

  // A range past the end is cut; an empty one gives no ids.
  BatchFeatures(*d, 4990, 100, &ids);
  std::vector<uint64_t> tail;
  BatchFeatures(*d, 4990, 10, &tail);
  EXPECT_EQ(ids, tail);
  BatchFeatures(*d, 5000, 10, &ids);
  EXPECT_TRUE(ids.empty());
}

TEST_P(SparseLogRegTest, BadArgumentsAreInvalidArgument) {
  auto d = GenerateSparseClicks(Clicks(1000, 100, 7), 0, 1);
  ASSERT_OK(d);
  std::vector<uint64_t> ids;
  BatchFeatures(*d, 10, 5, &ids);
  const std::vector<float> w(ids.size(), 0.1f);
  std::vector<float> grad(ids.size());
  ASSERT_OK(model_->LossAndGradient(*d, 10, 5, ids, w, grad));

  ExpectInvalid(model_->LossAndGradient(*d, 10, 0, ids, w, grad).status(), "rows == 0");
  ExpectInvalid(model_->LossAndGradient(*d, 98, 5, ids, w, grad).status(), "reaches past");
  ExpectInvalid(model_->LossAndGradient(*d, SIZE_MAX, 2, ids, w, grad).status(), "reaches past");
  ExpectInvalid(
      model_->LossAndGradient(*d, 10, 5, ids, std::span(w).first(w.size() - 1), grad).status(),
      "weights for");
  ExpectInvalid(model_->LossAndGradient(*d, 10, 5, ids, w, std::span(grad).first(1)).status(),
                "gradient of");
  // A pull that lacks one of the batch's ids.
  std::vector<uint64_t> lacking = ids;
  lacking.erase(lacking.begin() + static_cast<ptrdiff_t>(lacking.size() / 2));
  ExpectInvalid(model_
                    ->LossAndGradient(*d, 10, 5, lacking, std::span(w).first(lacking.size()),
                                      std::span(grad).first(lacking.size()))
                    .status(),
                "missing from ids");
  std::vector<uint64_t> unsorted = ids;
  std::swap(unsorted[0], unsorted[1]);
  ExpectInvalid(model_->LossAndGradient(*d, 10, 5, unsorted, w, grad).status(), "not sorted");
  std::vector<uint64_t> repeated = ids;
  repeated[1] = repeated[0];
  ExpectInvalid(model_->LossAndGradient(*d, 10, 5, repeated, w, grad).status(), "not sorted");
  // Whole-set evaluation: batch ids are not all the ids, nor is a dense list
  // 0..k-1 that stops just below the largest id in use.
  ExpectInvalid(model_->LogLoss(*d, ids, w).status(), "missing from ids");
  const uint64_t max_id = *std::max_element(d->feature_ids.begin(), d->feature_ids.end());
  const std::vector<uint64_t> short_dense = AllIds(max_id);
  ExpectInvalid(
      model_->LogLoss(*d, short_dense, std::vector<float>(short_dense.size(), 0.0f)).status(),
      "missing from ids");
  ExpectInvalid(model_->LogLoss(SparseClickData{}, ids, w).status(), "no samples");
  // A label other than 0 or 1 (the backend's LogisticLoss refuses it).
  SparseClickData bad_label = *d;
  bad_label.labels[12] = 2;
  ExpectInvalid(model_->LossAndGradient(bad_label, 10, 5, ids, w, grad).status(),
                "neither 0 nor 1");
  EXPECT_EQ(SparseLogReg::Create(nullptr).status().code(), StatusCode::kInvalidArgument);
  // The model still works after all these refusals.
  auto loss = model_->LossAndGradient(*d, 10, 5, ids, w, grad);
  ASSERT_OK(loss);
  EXPECT_GT(*loss, 0.0f);
}

TEST(SparseLogRegDataTest, FirstSampleGivesTheTailOfALongerSetAndRanksPartitionIt) {
  const uint64_t n = 700, m = 500;
  SparseClickOptions whole_options = Clicks(5000, n + m, 8);
  SparseClickOptions tail_options = whole_options;
  tail_options.first_sample = n;
  tail_options.num_samples = m;
  auto whole = GenerateSparseClicks(whole_options, 0, 1);
  auto tail = GenerateSparseClicks(tail_options, 0, 1);
  ASSERT_TRUE(whole.ok() && tail.ok()) << tail.status().ToString();
  EXPECT_EQ(tail->range, (RowRange{n, n + m}));
  ASSERT_EQ(tail->num_samples(), m);
  EXPECT_EQ(tail->true_weights, whole->true_weights);
  EXPECT_EQ(tail->labels, std::vector<int32_t>(whole->labels.begin() + n, whole->labels.end()));
  const uint64_t base = whole->row_offsets[n];
  EXPECT_EQ(tail->feature_ids,
            std::vector<uint64_t>(whole->feature_ids.begin() + static_cast<ptrdiff_t>(base),
                                  whole->feature_ids.end()));
  for (size_t i = 0; i <= m; ++i) {
    ASSERT_EQ(tail->row_offsets[i], whole->row_offsets[n + i] - base) << "row " << i;
  }

  std::vector<uint64_t> ids;
  std::vector<int32_t> labels;
  uint64_t next = n;
  for (uint32_t r = 0; r < 3; ++r) {
    auto part = GenerateSparseClicks(tail_options, r, 3);
    ASSERT_OK(part);
    EXPECT_EQ(part->range.begin, next);
    EXPECT_EQ(part->range.size(), part->num_samples());
    next = part->range.end;
    ids.insert(ids.end(), part->feature_ids.begin(), part->feature_ids.end());
    labels.insert(labels.end(), part->labels.begin(), part->labels.end());
  }
  EXPECT_EQ(next, n + m);
  EXPECT_EQ(ids, tail->feature_ids);
  EXPECT_EQ(labels, tail->labels);

  SparseClickOptions overflow = tail_options;
  overflow.first_sample = UINT64_MAX;
  EXPECT_EQ(overflow.Validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(overflow.Validate().message().find("first_sample"), std::string::npos);
}

TEST_P(SparseLogRegTest, MinibatchSgdApproachesTheTrueModelOnHeldOutData) {
  const auto start = std::chrono::steady_clock::now();
  // 100k samples: with 10^4 Zipf-distributed features, fewer leave the rare
  // features too few occurrences to estimate (20k samples plateau ~0.08 above
  // the true-weight loss, however long SGD runs).
  const SparseClickOptions train_options = Clicks(10'000, 100'000, 9);
  SparseClickOptions test_options = train_options;
  test_options.first_sample = train_options.num_samples;
  test_options.num_samples = 20'000;
  auto train = GenerateSparseClicks(train_options, 0, 1);
  auto test = GenerateSparseClicks(test_options, 0, 1);
  ASSERT_TRUE(train.ok() && test.ok());

  const std::vector<uint64_t> all = AllIds(train_options.num_features);
  std::vector<float> w(all.size(), 0.0f);
  const double truth = *model_->LogLoss(*test, all, test->true_weights);

  const size_t batch = 100;
  const float lr = 1.0f;
  std::vector<uint64_t> ids;
  std::vector<float> pulled, grad;
  double test_loss = 0;
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t first = 0; first < train->num_samples(); first += batch) {
      const size_t rows = std::min(batch, train->num_samples() - first);
      BatchFeatures(*train, first, rows, &ids);
      pulled = Gather(w, ids);
      grad.assign(ids.size(), 0.0f);
      ASSERT_OK(model_->LossAndGradient(*train, first, rows, ids, pulled, grad));
      for (size_t i = 0; i < ids.size(); ++i) w[ids[i]] -= lr * grad[i];
    }
    test_loss = *model_->LogLoss(*test, all, w);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("test_loss", std::to_string(test_loss));
  RecordProperty("true_weight_loss", std::to_string(truth));
  std::printf("held-out log-loss %.4f (true weights %.4f, zero weights %.4f), %.2f s\n", test_loss,
              truth, std::log(2.0), seconds);
  EXPECT_LT(test_loss, std::log(2.0) - 0.1);
  // Within 0.07 of the true model (the sampling noise of the test set is
  // ~0.004), and not implausibly better than it.
  EXPECT_LT(test_loss, truth + 0.07);
  EXPECT_GT(test_loss, truth - 0.02);
}

INSTANTIATE_TEST_SUITE_P(Backends, SparseLogRegTest,
                         ::testing::Values(BackendKind::kCpu, BackendKind::kCuda),
                         [](const ::testing::TestParamInfo<BackendKind>& param_info) {
                           return param_info.param == BackendKind::kCpu ? std::string("Cpu")
                                                                        : std::string("Cuda");
                         });

}  // namespace
}  // namespace ps
