// Matrix factorization on the generated low-rank ratings: the gradient
// matches finite differences of the regularized objective, the true factors
// reach the noise floor, the held-out split is deterministic and
// partition-independent, and plain minibatch SGD recovers the ratings to near
// the noise level. The model's cases run on every available backend; the
// CUDA cases skip without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "tests/util/status_matchers.h"
#include "worker/backend.h"
#include "worker/backend_factory.h"
#include "worker/data/generators.h"
#include "worker/models/matrix_factorization.h"

namespace ps {
namespace {

std::vector<uint64_t> Iota(uint64_t begin, uint64_t end) {
  std::vector<uint64_t> v(end - begin);
  std::iota(v.begin(), v.end(), begin);
  return v;
}

bool SameRatings(const std::vector<Rating>& a, const std::vector<Rating>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const Rating& x, const Rating& y) {
    return x.user == y.user && x.item == y.item && x.value == y.value;
  });
}

class MatrixFactorizationTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    if (GetParam() == BackendKind::kCuda && CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    backend_ = CreateBackend(GetParam()).value();
  }

  std::unique_ptr<MatrixFactorization> Model(uint32_t k) {
    return MatrixFactorization::Create(backend_.get(), k).value();
  }

  std::unique_ptr<Backend> backend_;
};

// The regularized objective LossAndGradient differentiates, computed here
// independently of the model code (except for its returned data loss).
double Objective(MatrixFactorization* model, std::span<const Rating> batch,
                 std::span<const uint64_t> users, std::span<const float> uf,
                 std::span<const uint64_t> items, std::span<const float> vf, float l2) {
  const uint32_t k = model->k();
  const double data = model->LossAndGradient(batch, users, uf, items, vf, l2, {}, {}).value();
  double reg = 0;
  for (const Rating& r : batch) {
    const size_t ui = std::lower_bound(users.begin(), users.end(), r.user) - users.begin();
    const size_t vi = std::lower_bound(items.begin(), items.end(), r.item) - items.begin();
    for (uint32_t d = 0; d < k; ++d) {
      reg += double{uf[ui * k + d]} * uf[ui * k + d] + double{vf[vi * k + d]} * vf[vi * k + d];
    }
  }
  return data + 0.5 * l2 * reg / static_cast<double>(batch.size());
}

TEST_P(MatrixFactorizationTest, GradientMatchesFiniteDifferences) {
  constexpr uint32_t kK = 4;
  auto model = Model(kK);
  // Users 3 and 10 and items 7 and 8 repeat; user 42 and item 99 are pulled
  // but absent from the batch, so their gradient is zero.
  const std::vector<Rating> batch = {
      {3, 7, 1.5f},   {10, 7, -0.5f}, {3, 8, 0.25f}, {5, 2, 2.0f},
      {10, 8, 0.75f}, {3, 2, -1.0f},  {5, 7, 0.5f},  {10, 7, 1.0f},
  };
  const std::vector<uint64_t> users = {3, 5, 10, 42};
  const std::vector<uint64_t> items = {2, 7, 8, 99};
  std::mt19937 gen(11);
  std::normal_distribution<float> n(0.0f, 0.7f);
  std::vector<float> uf(users.size() * kK), vf(items.size() * kK);
  for (float& x : uf) x = n(gen);
  for (float& x : vf) x = n(gen);
  // With L2 and without (the training programs' case, which the model
  // computes in place of the gathered rows).
  for (const float l2 : {0.3f, 0.0f}) {
    SCOPED_TRACE(testing::Message() << "l2 " << l2);
    std::vector<float> ug(uf.size(), -1.0f), vg(vf.size(), -1.0f);
    auto loss = model->LossAndGradient(batch, users, uf, items, vf, l2, ug, vg);
    ASSERT_OK(loss);
    EXPECT_GT(*loss, 0.0);

    // The objective is quadratic in any one coordinate, so central
    // differences are exact up to rounding, whatever the step: a wide one
    // (1/8) keeps the rounding of the float errors u . v - r (~1e-7 of a loss
    // of a few units) small in the quotient. The quotient divides by the
    // perturbed values' actual difference, so a rounded x +- eps costs
    // nothing.
    const float eps = 1.0f / 8;
    auto check = [&](std::vector<float>& params, const std::vector<float>& grad, const char* what) {
      for (size_t i = 0; i < params.size(); ++i) {
        const float saved = params[i];
        params[i] = saved + eps;
        const double x_up = params[i];
        const double up = Objective(model.get(), batch, users, uf, items, vf, l2);
        params[i] = saved - eps;
        const double x_down = params[i];
        const double down = Objective(model.get(), batch, users, uf, items, vf, l2);
        params[i] = saved;
        const double numeric = (up - down) / (x_up - x_down);
        EXPECT_NEAR(grad[i], numeric, 1e-5 + 1e-5 * std::abs(numeric)) << what << " " << i;
      }
    };
    check(uf, ug, "user factor");
    check(vf, vg, "item factor");
    for (uint32_t d = 0; d < kK; ++d) {
      EXPECT_EQ(ug[3 * kK + d], 0.0f);  // user 42
      EXPECT_EQ(vg[3 * kK + d], 0.0f);  // item 99
    }
    // Loss only: the same value.
    auto loss_only = model->LossAndGradient(batch, users, uf, items, vf, l2, {}, {});
    ASSERT_OK(loss_only);
    EXPECT_EQ(*loss_only, *loss);
  }
}

TEST_P(MatrixFactorizationTest, LossAndRmseMatchTheHandComputedValues) {
  auto model = Model(2);
  // k = 2: predictions 1*3 + 2*4 = 11 and 1*5 + 2*6 = 17.
  const std::vector<Rating> batch = {{0, 0, 10.0f}, {0, 1, 20.0f}};
  const std::vector<uint64_t> users = {0}, items = {0, 1};
  const std::vector<float> uf = {1, 2}, vf = {3, 4, 5, 6};
  // Errors 1 and -3: mean 0.5 * e^2 = (0.5 + 4.5) / 2.
  EXPECT_DOUBLE_EQ(model->LossAndGradient(batch, users, uf, items, vf, 0, {}, {}).value(), 2.5);
  EXPECT_DOUBLE_EQ(model->Rmse(batch, users, uf, items, vf).value(), std::sqrt(5.0));
  // The gradient by hand: errors e = (1, -3), mean over 2 ratings, l2 = 0.5
  // per occurrence. User 0: (1 * (3, 4) - 3 * (5, 6)) / 2 + 0.5 * 2 * (1, 2) / 2;
  // item 0: 1 * (1, 2) / 2 + 0.5 * (3, 4) / 2; item 1: -3 * (1, 2) / 2 + 0.5 * (5, 6) / 2.
  std::vector<float> ug(2), vg(4);
  ASSERT_OK(model->LossAndGradient(batch, users, uf, items, vf, 0.5f, ug, vg));
  EXPECT_EQ(ug, (std::vector<float>{-5.5f, -6.0f}));
  EXPECT_EQ(vg, (std::vector<float>{1.25f, 2.0f, -0.25f, -1.5f}));
  // Without L2: user 0 (-12, -14) / 2, item 0 (1, 2) / 2, item 1 (-3, -6) / 2.
  ASSERT_OK(model->LossAndGradient(batch, users, uf, items, vf, 0.0f, ug, vg));
  EXPECT_EQ(ug, (std::vector<float>{-6.0f, -7.0f}));
  EXPECT_EQ(vg, (std::vector<float>{0.5f, 1.0f, -1.5f, -3.0f}));
}

TEST_P(MatrixFactorizationTest, TrueFactorsReachTheNoiseFloor) {
  LowRankRatingsOptions o;
  o.num_users = 1000;
  o.num_items = 500;
  o.rank = 6;
  o.observe_probability = 0.05;
  o.noise_stddev = 0.2;
  o.seed = 3;
  // A middle rank's share: user ids do not start at 0.
  auto d = GenerateLowRankRatings(o, 1, 3);
  ASSERT_OK(d);
  ASSERT_GT(d->ratings.size(), 5000u);
  const auto users = Iota(d->users.begin, d->users.end);
  const auto items = Iota(0, o.num_items);
  auto model = Model(o.rank);
  auto loss =
      model->LossAndGradient(d->ratings, users, d->user_factors, items, d->item_factors, 0, {}, {});
  ASSERT_OK(loss);
  const double half_var = 0.5 * o.noise_stddev * o.noise_stddev;
  EXPECT_NEAR(*loss, half_var, 0.1 * half_var);
  auto rmse = model->Rmse(d->ratings, users, d->user_factors, items, d->item_factors);
  ASSERT_OK(rmse);
  EXPECT_NEAR(*rmse, o.noise_stddev, 0.05 * o.noise_stddev);
}

TEST(BatchRowsTest, AreSortedAndDistinct) {
  const std::vector<Rating> batch = {{9, 4, 0}, {2, 4, 0}, {9, 1, 0}, {5, 7, 0}, {2, 1, 0}};
  std::vector<uint64_t> users = {100}, items = {100};  // replaced, not appended to
  BatchRows(batch, &users, &items);
  EXPECT_EQ(users, (std::vector<uint64_t>{2, 5, 9}));
  EXPECT_EQ(items, (std::vector<uint64_t>{1, 4, 7}));
  BatchRows({}, &users, &items);
  EXPECT_TRUE(users.empty());
  EXPECT_TRUE(items.empty());
}

TEST_P(MatrixFactorizationTest, RejectsBadArguments) {
  auto model = Model(2);
  auto* m = model.get();
  const std::vector<Rating> batch = {{1, 2, 1.0f}, {3, 2, 0.5f}};
  const std::vector<uint64_t> users = {1, 3}, items = {2};
  const std::vector<float> uf(4, 0.5f), vf(2, 0.5f);
  std::vector<float> ug(4), vg(2);
  auto code = [](const StatusOr<double>& s) { return s.status().code(); };
  const auto kBad = StatusCode::kInvalidArgument;
  ASSERT_OK(m->LossAndGradient(batch, users, uf, items, vf, 0.1f, ug, vg));

  EXPECT_EQ(code(m->LossAndGradient({}, users, uf, items, vf, 0, ug, vg)), kBad);
  EXPECT_EQ(MatrixFactorization::Create(backend_.get(), 0).status().code(), kBad);
  EXPECT_EQ(MatrixFactorization::Create(nullptr, 2).status().code(), kBad);
  // An id of the batch that was not pulled.
  const std::vector<uint64_t> missing_user = {1, 4}, missing_item = {3};
  EXPECT_EQ(code(m->LossAndGradient(batch, missing_user, uf, items, vf, 0, ug, vg)), kBad);
  EXPECT_EQ(code(m->LossAndGradient(batch, users, uf, missing_item, vf, 0, ug, vg)), kBad);
  // Ids out of order or repeated.
  const std::vector<uint64_t> unsorted = {3, 1}, repeated = {1, 1};
  EXPECT_EQ(code(m->LossAndGradient(batch, unsorted, uf, items, vf, 0, ug, vg)), kBad);
  EXPECT_EQ(code(m->LossAndGradient(batch, repeated, uf, items, vf, 0, ug, vg)), kBad);
  // Size mismatches: factors, then gradients (one empty, one short).
  const std::vector<float> short_uf(3, 0.5f);
  EXPECT_EQ(code(m->LossAndGradient(batch, users, short_uf, items, vf, 0, ug, vg)), kBad);
  EXPECT_EQ(code(m->LossAndGradient(batch, users, uf, items, uf, 0, ug, vg)), kBad);
  std::vector<float> short_grad(3);
  EXPECT_EQ(code(m->LossAndGradient(batch, users, uf, items, vf, 0, ug, {})), kBad);
  EXPECT_EQ(code(m->LossAndGradient(batch, users, uf, items, vf, 0, {}, vg)), kBad);
  EXPECT_EQ(code(m->LossAndGradient(batch, users, uf, items, vf, 0, short_grad, vg)), kBad);

  EXPECT_EQ(code(m->Rmse({}, users, uf, items, vf)), kBad);
  // The layout of a rank-2 model does not fit a rank-1 one.
  EXPECT_EQ(code(MatrixFactorization::Create(backend_.get(), 1)
                     .value()
                     ->Rmse(batch, users, uf, items, vf)),
            kBad);
  EXPECT_EQ(code(m->Rmse(batch, missing_user, uf, items, vf)), kBad);
  EXPECT_EQ(code(m->Rmse(batch, users, short_uf, items, vf)), kBad);
  // The model still works after all these refusals.
  EXPECT_OK(m->LossAndGradient(batch, users, uf, items, vf, 0.1f, ug, vg));
}

LowRankRatingsOptions SplitData() {
  LowRankRatingsOptions o;
  o.num_users = 2000;
  o.num_items = 1000;
  o.rank = 3;
  o.observe_probability = 0.05;
  o.seed = 21;
  return o;
}

TEST(SplitRatingsTest, DeterministicWithTheRequestedFractionAndCoversTheInput) {
  auto d = GenerateLowRankRatings(SplitData(), 0, 1);
  ASSERT_OK(d);
  const std::vector<Rating>& all = d->ratings;
  std::vector<Rating> train, test, train2, test2;
  SplitRatings(all, 0.2, 5, &train, &test);
  SplitRatings(all, 0.2, 5, &train2, &test2);
  EXPECT_TRUE(SameRatings(train, train2));
  EXPECT_TRUE(SameRatings(test, test2));

  // ~100000 ratings; binomial sd of the test count ~126.
  const double n = static_cast<double>(all.size());
  EXPECT_EQ(train.size() + test.size(), all.size());
  EXPECT_NEAR(static_cast<double>(test.size()) / n, 0.2, 0.01);

  // Both keep the input order (sorted by (user, item)), so merging them back
  // in that order gives exactly the input.
  auto less = [](const Rating& a, const Rating& b) {
    return a.user < b.user || (a.user == b.user && a.item < b.item);
  };
  EXPECT_TRUE(std::is_sorted(train.begin(), train.end(), less));
  EXPECT_TRUE(std::is_sorted(test.begin(), test.end(), less));
  std::vector<Rating> merged;
  std::merge(train.begin(), train.end(), test.begin(), test.end(), std::back_inserter(merged),
             less);
  EXPECT_TRUE(SameRatings(merged, all));

  // Another seed picks another test set; fraction 0 keeps everything.
  SplitRatings(all, 0.2, 6, &train2, &test2);
  EXPECT_FALSE(SameRatings(test, test2));
  SplitRatings(all, 0.0, 5, &train2, &test2);
  EXPECT_TRUE(SameRatings(train2, all));
  EXPECT_TRUE(test2.empty());
}

TEST(SplitRatingsTest, IndependentOfTheRankPartitionAndOrder) {
  auto whole = GenerateLowRankRatings(SplitData(), 0, 1);
  ASSERT_OK(whole);
  std::vector<Rating> train, test;
  SplitRatings(whole->ratings, 0.1, 9, &train, &test);

  std::vector<Rating> joined_train, joined_test, part_train, part_test;
  for (uint32_t r = 0; r < 3; ++r) {
    auto part = GenerateLowRankRatings(SplitData(), r, 3);
    ASSERT_OK(part);
    SplitRatings(part->ratings, 0.1, 9, &part_train, &part_test);
    joined_train.insert(joined_train.end(), part_train.begin(), part_train.end());
    joined_test.insert(joined_test.end(), part_test.begin(), part_test.end());
  }
  EXPECT_TRUE(SameRatings(joined_train, train));
  EXPECT_TRUE(SameRatings(joined_test, test));

  // A rating's side does not depend on where it sits: reversed input gives
  // the reversed outputs.
  std::vector<Rating> reversed(whole->ratings.rbegin(), whole->ratings.rend());
  SplitRatings(reversed, 0.1, 9, &part_train, &part_test);
  std::reverse(part_train.begin(), part_train.end());
  std::reverse(part_test.begin(), part_test.end());
  EXPECT_TRUE(SameRatings(part_train, train));
  EXPECT_TRUE(SameRatings(part_test, test));
}

// Plain minibatch SGD on dense local factor arrays, the way a worker would
// use the model with pulled rows: gather the batch's rows, take the gradient,
// apply it to those rows.
TEST_P(MatrixFactorizationTest, SgdRecoversTheRatingsToNearTheNoiseLevel) {
  LowRankRatingsOptions o;
  o.num_users = 2000;
  o.num_items = 1000;
  o.rank = 5;
  o.observe_probability = 0.05;
  o.noise_stddev = 0.1;
  o.seed = 17;
  // Each row appears about once per batch, so a step of lr on the mean
  // gradient moves a row by lr / batch_size times its per-rating gradient:
  // the per-rating step is 8 / 100 = 0.08. Runs diverged from about 12 up.
  const float lr = 8.0f;
  const float init_scale = 0.1f;
  const float l2 = 0.001f;
  const int epochs = 20;
  const size_t batch_size = 100;
  const uint32_t k = o.rank;

  const auto start = std::chrono::steady_clock::now();
  auto d = GenerateLowRankRatings(o, 0, 1);
  ASSERT_OK(d);
  std::vector<Rating> train, test;
  SplitRatings(d->ratings, 0.1, 1, &train, &test);

  std::mt19937 gen(static_cast<unsigned>(o.seed));
  std::normal_distribution<float> init(0.0f, init_scale);
  std::vector<float> uf(o.num_users * k), vf(o.num_items * k);
  for (float& x : uf) x = init(gen);
  for (float& x : vf) x = init(gen);
  const auto all_users = Iota(0, o.num_users), all_items = Iota(0, o.num_items);

  auto model = Model(k);
  std::vector<uint64_t> users, items;
  std::vector<float> bu, bv, gu, gv;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::shuffle(train.begin(), train.end(), gen);
    for (size_t begin = 0; begin < train.size(); begin += batch_size) {
      const std::span<const Rating> batch(train.data() + begin,
                                          std::min(batch_size, train.size() - begin));
      BatchRows(batch, &users, &items);
      bu.resize(users.size() * k);
      bv.resize(items.size() * k);
      gu.resize(bu.size());
      gv.resize(bv.size());
      for (size_t i = 0; i < users.size(); ++i) {
        std::copy_n(uf.data() + users[i] * k, k, bu.data() + i * k);
      }
      for (size_t i = 0; i < items.size(); ++i) {
        std::copy_n(vf.data() + items[i] * k, k, bv.data() + i * k);
      }
      ASSERT_OK(model->LossAndGradient(batch, users, bu, items, bv, l2, gu, gv));
      for (size_t i = 0; i < users.size(); ++i) {
        for (uint32_t c = 0; c < k; ++c) uf[users[i] * k + c] -= lr * gu[i * k + c];
      }
      for (size_t i = 0; i < items.size(); ++i) {
        for (uint32_t c = 0; c < k; ++c) vf[items[i] * k + c] -= lr * gv[i * k + c];
      }
    }
  }
  const double rmse = model->Rmse(test, all_users, uf, all_items, vf).value();
  // Predicting 0 everywhere: the RMS of the held-out ratings.
  double sum_sq = 0;
  for (const Rating& r : test) sum_sq += double{r.value} * r.value;
  const double zero_rmse = std::sqrt(sum_sq / static_cast<double>(test.size()));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("held-out RMSE %.4f (noise %.2f, predicting 0: %.4f) in %.2f s\n", rmse,
              o.noise_stddev, zero_rmse, seconds);
  EXPECT_LT(rmse, 1.5 * o.noise_stddev);
  EXPECT_LT(rmse, 0.3 * zero_rmse);
}

INSTANTIATE_TEST_SUITE_P(Backends, MatrixFactorizationTest,
                         ::testing::Values(BackendKind::kCpu, BackendKind::kCuda),
                         [](const ::testing::TestParamInfo<BackendKind>& param_info) {
                           return param_info.param == BackendKind::kCpu ? std::string("Cpu")
                                                                        : std::string("Cuda");
                         });

}  // namespace
}  // namespace ps
