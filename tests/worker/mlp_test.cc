// The MLP (and softmax regression, its one-layer case) on every available
// backend: gradients match finite differences of its own loss, and SGD
// learns a separable problem. CUDA cases skip without a device.
#include "tests/util/status_matchers.h"
#include "worker/backend_factory.h"
#include "worker/models/mlp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace ps {
namespace {

class MlpTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    if (GetParam() == BackendKind::kCuda && CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    backend_ = CreateBackend(GetParam()).value();
  }

  // Central differences of the model's own loss against its gradient, for
  // every parameter.
  void CheckGradient(std::vector<uint32_t> layers) {
    const uint32_t rows = 9;
    auto model = Mlp::Create(backend_.get(), layers, 16).value();
    std::mt19937 gen(5);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<float> params(model->num_parameters()), grad(params.size());
    std::vector<float> x(rows * layers.front());
    std::vector<int32_t> labels(rows);
    for (auto& p : params) p = 0.5f * n(gen);
    for (auto& v : x) v = n(gen);
    // One output: a binary classifier, labels 0 or 1.
    for (auto& l : labels) l = static_cast<int32_t>(gen() % std::max(layers.back(), 2u));
    ASSERT_OK(model->SetParameters(params));
    ASSERT_OK(model->LossAndGradient(x, labels, grad));
    const float eps = 1e-2f;
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<float> p = params;
      p[i] += eps;
      ASSERT_OK(model->SetParameters(p));
      const float up = *model->LossAndGradient(x, labels, {});
      p[i] -= 2 * eps;
      ASSERT_OK(model->SetParameters(p));
      const float down = *model->LossAndGradient(x, labels, {});
      const float numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(grad[i], numeric, 2e-3f + 2e-2f * std::abs(numeric)) << "parameter " << i;
    }
  }

  std::unique_ptr<Backend> backend_;
};

TEST_P(MlpTest, SoftmaxRegressionGradientMatchesFiniteDifferences) { CheckGradient({7, 4}); }

TEST_P(MlpTest, TwoHiddenLayerGradientMatchesFiniteDifferences) { CheckGradient({6, 5, 4, 3}); }

TEST_P(MlpTest, LogisticOutputGradientMatchesFiniteDifferences) { CheckGradient({6, 5, 1}); }

// The inputs' gradient (TrainStep's dx, for inputs that are parameters
// themselves) against central differences of the loss in each input, with
// a softmax and a logistic top.
TEST_P(MlpTest, InputGradientMatchesFiniteDifferences) {
  for (const std::vector<uint32_t>& layers :
       {std::vector<uint32_t>{5, 4, 3}, std::vector<uint32_t>{5, 6, 1}, std::vector<uint32_t>{5, 1}}) {
    SCOPED_TRACE(::testing::PrintToString(layers));
    const uint32_t rows = 7;
    auto model = Mlp::Create(backend_.get(), layers, 8).value();
    std::mt19937 gen(11);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<float> params(model->num_parameters()), grad(params.size());
    std::vector<float> x(rows * layers.front()), dx(x.size(), -1.0f);
    std::vector<int32_t> labels(rows);
    for (auto& p : params) p = 0.5f * n(gen);
    for (auto& v : x) v = n(gen);
    for (auto& l : labels) l = static_cast<int32_t>(gen() % std::max(layers.back(), 2u));
    const float loss = *model->TrainStep(x, labels, params, grad, dx);
    ASSERT_OK(model->SetParameters(params));
    EXPECT_FLOAT_EQ(loss, *model->LossAndGradient(x, labels, {}));
    const float eps = 1e-2f;
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<float> moved = x;
      moved[i] += eps;
      const float up = *model->LossAndGradient(moved, labels, {});
      moved[i] -= 2 * eps;
      const float down = *model->LossAndGradient(moved, labels, {});
      const float numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(dx[i], numeric, 2e-3f + 2e-2f * std::abs(numeric)) << "input " << i;
    }
    // A dx of the wrong size, or without the parameters' gradient, is refused.
    std::vector<float> short_dx(x.size() - 1);
    EXPECT_FALSE(model->TrainStep(x, labels, params, grad, short_dx).ok());
  }
}

// One output: the logit of label 1, so Logits and Accuracy agree with it.
TEST_P(MlpTest, LogitsAndAccuracyOfALogisticOutput) {
  auto model = Mlp::Create(backend_.get(), {2, 1}, 4).value();
  ASSERT_OK(model->SetParameters(std::vector<float>{1.0f, -1.0f, 0.5f}));  // z = a - b + 0.5
  const std::vector<float> x = {1, 0, 0, 1, 2, 2, 0, 3};
  std::vector<float> logits(4);
  ASSERT_OK(model->Logits(x, logits));
  EXPECT_EQ(logits, (std::vector<float>{1.5f, -0.5f, 0.5f, -2.5f}));
  EXPECT_DOUBLE_EQ(*model->Accuracy(x, std::vector<int32_t>{1, 0, 0, 0}), 0.75);
  std::vector<float> wrong(3);
  EXPECT_FALSE(model->Logits(x, wrong).ok());
}

TEST_P(MlpTest, SgdLearnsASeparableProblem) {
  constexpr uint32_t kRows = 60;
  for (std::vector<uint32_t> layers : {std::vector<uint32_t>{2, 3}, {2, 8, 3}}) {
    auto model = Mlp::Create(backend_.get(), layers, kRows).value();
    std::mt19937 gen(9);
    std::normal_distribution<float> n(0.0f, 0.3f);
    const float centers[3][2] = {{3, 0}, {-3, 0}, {0, 3}};
    std::vector<float> x(kRows * 2);
    std::vector<int32_t> labels(kRows);
    for (uint32_t r = 0; r < kRows; ++r) {
      labels[r] = static_cast<int32_t>(r % 3);
      x[r * 2] = centers[r % 3][0] + n(gen);
      x[r * 2 + 1] = centers[r % 3][1] + n(gen);
    }
    std::vector<float> params(model->num_parameters()), grad(params.size());
    std::normal_distribution<float> init(0.0f, 0.1f);
    for (auto& p : params) p = init(gen);
    float last = 0;
    for (int step = 0; step < 200; ++step) {
      ASSERT_OK(model->SetParameters(params));
      last = *model->LossAndGradient(x, labels, grad);
      for (size_t i = 0; i < params.size(); ++i) params[i] -= 0.3f * grad[i];
    }
    ASSERT_OK(model->SetParameters(params));
    EXPECT_LT(last, 0.1f) << layers.size() << " layers";
    EXPECT_EQ(*model->Accuracy(x, labels), 1.0);
  }
}

TEST_P(MlpTest, BadShapesAreRejected) {
  auto model = Mlp::Create(backend_.get(), {3, 2}, 4).value();
  EXPECT_EQ(model->num_parameters(), 8u);
  std::vector<float> x(15);
  std::vector<int32_t> labels(5, 0);
  EXPECT_EQ(model->LossAndGradient(x, labels, {}).status().code(), StatusCode::kInvalidArgument);
  std::vector<float> short_params(3);
  EXPECT_EQ(model->SetParameters(short_params).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Mlp::Create(backend_.get(), {3}, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Mlp::Create(backend_.get(), {3, 0, 2}, 4).status().code(),
            StatusCode::kInvalidArgument);
}

// A training step from host memory gives what SetParameters and
// LossAndGradient give, bit for bit, and on a host-memory backend copies
// nothing: the layers read the parameters and write the gradient in place.
TEST_P(MlpTest, TrainStepEqualsLossAndGradientAndCopiesNothingOnTheHost) {
  const std::vector<uint32_t> layers = {20, 16, 12, 5};
  const uint32_t rows = 13;
  auto model = Mlp::Create(backend_.get(), layers, 32).value();
  std::mt19937 gen(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> params(model->num_parameters()), x(rows * layers.front());
  std::vector<int32_t> labels(rows);
  for (auto& p : params) p = 0.3f * n(gen);
  for (auto& v : x) v = n(gen);
  for (auto& l : labels) l = static_cast<int32_t>(gen() % layers.back());
  std::vector<float> want(params.size()), got(params.size(), -7.0f);
  ASSERT_OK(model->SetParameters(params));
  const float want_loss = *model->LossAndGradient(x, labels, want);
  auto pin_params = backend_->Pin(params.data(), params.size()).value();
  auto pin_grad = backend_->Pin(got.data(), got.size()).value();
  const DeviceTimes before = backend_->times();
  for (int step = 0; step < 3; ++step) {  // buffers are reused step after step
    const float loss = *model->TrainStep(x, labels, params, got);
    EXPECT_EQ(loss, want_loss);
    EXPECT_EQ(got, want);
  }
  const DeviceTimes after = backend_->times();
  EXPECT_GT(after.compute_s, before.compute_s);
  if (backend_->host_memory()) {
    EXPECT_EQ(after.upload_s, before.upload_s);
    EXPECT_EQ(after.download_s, before.download_s);
  } else {
    EXPECT_GT(after.upload_s, before.upload_s);
    EXPECT_GT(after.download_s, before.download_s);
  }
  // Wrong sizes are refused.
  std::vector<float> short_params(params.size() - 1);
  EXPECT_EQ(model->TrainStep(x, labels, short_params, got).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(model->TrainStep(x, labels, params, std::span<float>(got).first(3)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(model->TrainStep(std::span<const float>(x).first(7), labels, params, got)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST_P(MlpTest, TrainStepFlopsCountsTheThreeProductsOfEachLayer) {
  auto model = Mlp::Create(backend_.get(), {784, 100, 10}, 64).value();
  // Layer 0: forward and weight gradient; layer 1: also the input gradient.
  EXPECT_DOUBLE_EQ(model->TrainStepFlops(64), 2.0 * 64 * 784 * 100 * 2 + 2.0 * 64 * 100 * 10 * 3);
}

INSTANTIATE_TEST_SUITE_P(Backends, MlpTest, ::testing::Values(BackendKind::kCpu, BackendKind::kCuda),
                         [](const ::testing::TestParamInfo<BackendKind>& param_info) {
                           return param_info.param == BackendKind::kCpu ? std::string("Cpu")
                                                                        : std::string("Cuda");
                         });

}  // namespace
}  // namespace ps
