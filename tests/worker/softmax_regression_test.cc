// Softmax regression on every available backend: its gradient matches
// finite differences of its own loss, and a few SGD steps learn a separable
// problem.
#include "worker/models/softmax_regression.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace ps {
namespace {

class SoftmaxRegressionTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    if (GetParam() == BackendKind::kCuda && CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    backend_ = CreateBackend(GetParam()).value();
  }
  std::unique_ptr<Backend> backend_;
};

TEST_P(SoftmaxRegressionTest, GradientMatchesFiniteDifferences) {
  constexpr uint32_t kF = 7, kC = 4, kRows = 9;
  auto model = SoftmaxRegression::Create(backend_.get(), kF, kC, 16).value();
  std::mt19937 gen(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> params(model->num_parameters()), x(kRows * kF), grad(params.size());
  std::vector<int32_t> labels(kRows);
  for (auto& p : params) p = 0.3f * n(gen);
  for (auto& v : x) v = n(gen);
  for (auto& l : labels) l = static_cast<int32_t>(gen() % kC);
  ASSERT_TRUE(model->SetParameters(params).ok());
  ASSERT_TRUE(model->LossAndGradient(x, labels, grad).ok());
  const float eps = 1e-2f;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> p = params;
    p[i] += eps;
    ASSERT_TRUE(model->SetParameters(p).ok());
    const float up = *model->LossAndGradient(x, labels, {});
    p[i] -= 2 * eps;
    ASSERT_TRUE(model->SetParameters(p).ok());
    const float down = *model->LossAndGradient(x, labels, {});
    const float numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(grad[i], numeric, 2e-3f + 2e-2f * std::abs(numeric)) << "parameter " << i;
  }
}

TEST_P(SoftmaxRegressionTest, SgdLearnsASeparableProblem) {
  constexpr uint32_t kF = 2, kC = 3, kRows = 60;
  auto model = SoftmaxRegression::Create(backend_.get(), kF, kC, kRows).value();
  // Three well separated blobs.
  std::mt19937 gen(9);
  std::normal_distribution<float> n(0.0f, 0.3f);
  const float centers[3][2] = {{3, 0}, {-3, 0}, {0, 3}};
  std::vector<float> x(kRows * kF);
  std::vector<int32_t> labels(kRows);
  for (uint32_t r = 0; r < kRows; ++r) {
    labels[r] = static_cast<int32_t>(r % kC);
    x[r * kF] = centers[r % kC][0] + n(gen);
    x[r * kF + 1] = centers[r % kC][1] + n(gen);
  }
  std::vector<float> params(model->num_parameters(), 0.0f), grad(params.size());
  float first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    ASSERT_TRUE(model->SetParameters(params).ok());
    last = *model->LossAndGradient(x, labels, grad);
    if (step == 0) first = last;
    for (size_t i = 0; i < params.size(); ++i) params[i] -= 0.5f * grad[i];
  }
  ASSERT_TRUE(model->SetParameters(params).ok());
  EXPECT_NEAR(first, std::log(3.0f), 1e-5f);
  EXPECT_LT(last, 0.1f);
  EXPECT_EQ(*model->Accuracy(x, labels), 1.0);
}

TEST_P(SoftmaxRegressionTest, BadShapesAreRejected) {
  auto model = SoftmaxRegression::Create(backend_.get(), 3, 2, 4).value();
  std::vector<float> x(15);
  std::vector<int32_t> labels(5, 0);
  EXPECT_EQ(model->LossAndGradient(x, labels, {}).status().code(), StatusCode::kInvalidArgument);
  std::vector<float> short_params(3);
  EXPECT_EQ(model->SetParameters(short_params).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SoftmaxRegression::Create(backend_.get(), 0, 2, 4).status().code(),
            StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, SoftmaxRegressionTest,
                         ::testing::Values(BackendKind::kCpu, BackendKind::kCuda),
                         [](const ::testing::TestParamInfo<BackendKind>& param_info) {
                           return param_info.param == BackendKind::kCpu ? std::string("Cpu")
                                                                        : std::string("Cuda");
                         });

}  // namespace
}  // namespace ps
