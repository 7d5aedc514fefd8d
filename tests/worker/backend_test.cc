// Parity tests for every Backend op against a float64 reference computed
// here on the host, run for each backend; the CUDA cases skip where no
// device is present. Inputs are fresh random numbers on each run; the seed
// is in the failure message to reproduce one.
#include "worker/backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/util/status_matchers.h"
#include "worker/backend_factory.h"
#include "worker/cpu_backend.h"

namespace ps {
namespace {

using Matrix = std::vector<double>;

// |got - want|, infinite where got is NaN (std::max would skip a NaN, so a
// NaN left in an output would pass unseen).
double AbsDiff(float got, double want) {
  const double d = std::abs(static_cast<double>(got) - want);
  return std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
}

// max |got - want| / max |want|: a normwise relative error, which stays
// meaningful where single elements cancel to near zero.
double RelativeError(const std::vector<float>& got, const Matrix& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    diff = std::max(diff, AbsDiff(got[i], want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return diff / std::max(scale, 1e-30);
}

// The error relative to the size of the terms that were summed (`magnitude`:
// the same formula over absolute values), so a result that cancels to nearly
// zero is not held to a relative bound float arithmetic cannot meet.
double RelativeError(const std::vector<float>& got, const Matrix& want, const Matrix& magnitude) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    diff = std::max(diff, AbsDiff(got[i], want[i]));
    scale = std::max(scale, magnitude[i]);
  }
  return diff / std::max(scale, 1e-30);
}

std::string KindName(const ::testing::TestParamInfo<BackendKind>& info) {
  return info.param == BackendKind::kCpu ? "Cpu" : "Cuda";
}

class BackendTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    if (GetParam() == BackendKind::kCuda && CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    auto backend = CreateBackend(GetParam());
    ASSERT_OK(backend);
    backend_ = std::move(backend).value();
    tolerance_ = GetParam() == BackendKind::kCpu ? 1e-5 : 1e-4;
    seed_ = std::random_device{}();
    rng_.seed(seed_);
  }

  std::vector<float> Random(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }

  std::unique_ptr<DeviceBuffer> Put(const std::vector<float>& host) {
    auto buffer = backend_->Allocate(host.size());
    EXPECT_OK(buffer);
    if (!buffer.ok()) return nullptr;
    EXPECT_OK(backend_->Upload(host.data(), host.size(), buffer->get()));
    return std::move(buffer).value();
  }

  std::vector<float> Get(const DeviceBuffer& buffer, size_t n) {
    std::vector<float> host(n);
    Status st = backend_->Download(buffer, host.data(), n);
    EXPECT_OK(st);
    return host;
  }

  // m random row indices into a table of `rows` rows (repeats likely).
  std::vector<uint32_t> RandomIndex(size_t m, size_t rows) {
    std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(rows - 1));
    std::vector<uint32_t> index(m);
    for (uint32_t& i : index) i = pick(rng_);
    return index;
  }

  // A random binary CSR matrix of `rows` rows over `cols` columns with 0 to
  // max_per_row entries per row (columns may repeat within a row).
  void RandomCsr(size_t rows, size_t cols, size_t max_per_row, std::vector<uint64_t>* offsets,
                 std::vector<uint32_t>* col_index) {
    std::uniform_int_distribution<size_t> count(0, max_per_row);
    offsets->assign(1, 0);
    col_index->clear();
    for (size_t r = 0; r < rows; ++r) {
      const size_t n = count(rng_);
      for (uint32_t c : RandomIndex(n, cols)) col_index->push_back(c);
      offsets->push_back(col_index->size());
    }
  }

  std::string Trace() const { return backend_->name() + " seed " + std::to_string(seed_); }

  std::unique_ptr<Backend> backend_;
  double tolerance_ = 0;
  unsigned seed_ = 0;
  std::mt19937 rng_;
};

// Row-major element (r, c) of a matrix stored rows x cols, read transposed or not.
double At(const std::vector<float>& m, bool trans, size_t r, size_t c, size_t stored_cols) {
  return trans ? m[c * stored_cols + r] : m[r * stored_cols + c];
}

TEST_P(BackendTest, GemmMatchesReferenceForAllTransposes) {
  SCOPED_TRACE(Trace());
  struct Shape {
    size_t m, n, k;
  };
  for (Shape s : {Shape{1, 1, 1}, Shape{7, 5, 3}, Shape{33, 17, 65}, Shape{64, 128, 257},
                  Shape{3, 1, 300}, Shape{1, 129, 2}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, -0.3f}) {
          SCOPED_TRACE(testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k
                                          << " ta=" << ta << " tb=" << tb << " beta=" << beta);
          const float alpha = 0.7f;
          auto a = Random(s.m * s.k);
          auto b = Random(s.k * s.n);
          auto c = Random(s.m * s.n);
          // beta == 0 must ignore C, even NaN.
          if (beta == 0.0f) std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
          Matrix want(s.m * s.n), mag(s.m * s.n);
          for (size_t i = 0; i < s.m; ++i) {
            for (size_t j = 0; j < s.n; ++j) {
              double sum = 0, abs_sum = 0;
              for (size_t p = 0; p < s.k; ++p) {
                const double term =
                    At(a, ta, i, p, ta ? s.m : s.k) * At(b, tb, p, j, tb ? s.k : s.n);
                sum += term;
                abs_sum += std::abs(term);
              }
              const double cterm = beta == 0.0f ? 0.0 : double{beta} * c[i * s.n + j];
              want[i * s.n + j] = alpha * sum + cterm;
              mag[i * s.n + j] = std::abs(alpha) * abs_sum + std::abs(cterm);
            }
          }
          auto da = Put(a), db = Put(b), dc = Put(c);
          ASSERT_TRUE(backend_
                          ->Gemm(ta ? Transpose::kYes : Transpose::kNo,
                                 tb ? Transpose::kYes : Transpose::kNo, s.m, s.n, s.k, alpha, *da,
                                 *db, beta, dc.get())
                          .ok());
          EXPECT_LT(RelativeError(Get(*dc, s.m * s.n), want, mag), tolerance_);
        }
      }
    }
  }
}

TEST_P(BackendTest, GemvMatchesReferenceBothWays) {
  SCOPED_TRACE(Trace());
  for (auto [rows, cols] : {std::pair<size_t, size_t>{1, 1}, {7, 13}, {129, 65}, {1, 300}}) {
    for (bool t : {false, true}) {
      for (float beta : {0.0f, 0.5f}) {
        SCOPED_TRACE(testing::Message() << rows << "x" << cols << " t=" << t << " beta=" << beta);
        const size_t in = t ? rows : cols, out = t ? cols : rows;
        auto a = Random(rows * cols), x = Random(in), y = Random(out);
        if (beta == 0.0f) std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
        Matrix want(out), mag(out);
        for (size_t i = 0; i < out; ++i) {
          double sum = 0, abs_sum = 0;
          for (size_t p = 0; p < in; ++p) {
            sum += At(a, t, i, p, cols) * x[p];
            abs_sum += std::abs(At(a, t, i, p, cols) * x[p]);
          }
          const double yterm = beta == 0.0f ? 0.0 : double{beta} * y[i];
          want[i] = -1.5 * sum + yterm;
          mag[i] = 1.5 * abs_sum + std::abs(yterm);
        }
        auto da = Put(a), dx = Put(x), dy = Put(y);
        ASSERT_TRUE(backend_
                        ->Gemv(t ? Transpose::kYes : Transpose::kNo, rows, cols, -1.5f, *da, *dx,
                               beta, dy.get())
                        .ok());
        EXPECT_LT(RelativeError(Get(*dy, out), want, mag), tolerance_);
      }
    }
  }
}

TEST_P(BackendTest, AxpyAndScaleMatchReference) {
  SCOPED_TRACE(Trace());
  for (size_t n : {1u, 31u, 1000u, 4099u}) {
    auto x = Random(n), y = Random(n);
    Matrix want(n), mag(n);
    for (size_t i = 0; i < n; ++i) {
      want[i] = -0.25 * (double{y[i]} + 1.75 * x[i]);
      mag[i] = 0.25 * (std::abs(double{y[i]}) + 1.75 * std::abs(double{x[i]}));
    }
    auto dx = Put(x), dy = Put(y);
    ASSERT_OK(backend_->Axpy(n, 1.75f, *dx, dy.get()));
    ASSERT_OK(backend_->Scale(n, -0.25f, dy.get()));
    EXPECT_LT(RelativeError(Get(*dy, n), want, mag), tolerance_) << "n=" << n;
  }
}

TEST_P(BackendTest, AddBiasAddsTheRowVectorToEveryRow) {
  SCOPED_TRACE(Trace());
  for (auto [rows, cols] : {std::pair<size_t, size_t>{1, 1}, {5, 3}, {130, 33}}) {
    auto x = Random(rows * cols), bias = Random(cols);
    Matrix want(rows * cols), mag(rows * cols);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t c = 0; c < cols; ++c) {
        want[r * cols + c] = double{x[r * cols + c]} + bias[c];
        mag[r * cols + c] = std::abs(double{x[r * cols + c]}) + std::abs(double{bias[c]});
      }
    }
    auto dx = Put(x), db = Put(bias);
    ASSERT_OK(backend_->AddBias(rows, cols, *db, dx.get()));
    EXPECT_LT(RelativeError(Get(*dx, rows * cols), want, mag), tolerance_) << rows << "x" << cols;
  }
}

TEST_P(BackendTest, ReluAndReluBackwardMatchReference) {
  SCOPED_TRACE(Trace());
  for (size_t n : {1u, 257u, 5000u}) {
    auto x = Random(n), grad = Random(n);
    x[0] = 0.0f;  // the boundary: relu'(0) is taken as 0
    Matrix want_act(n), want_grad(n);
    for (size_t i = 0; i < n; ++i) {
      want_act[i] = std::max(0.0, double{x[i]});
      want_grad[i] = want_act[i] > 0 ? grad[i] : 0.0;
    }
    auto dx = Put(x), dg = Put(grad);
    ASSERT_OK(backend_->Relu(n, dx.get()));
    ASSERT_OK(backend_->ReluBackward(n, *dx, dg.get()));
    EXPECT_LT(RelativeError(Get(*dx, n), want_act), tolerance_) << "n=" << n;
    EXPECT_LT(RelativeError(Get(*dg, n), want_grad), tolerance_) << "n=" << n;
  }
}

TEST_P(BackendTest, SumRowsGivesColumnSums) {
  SCOPED_TRACE(Trace());
  for (auto [rows, cols] : {std::pair<size_t, size_t>{1, 1}, {9, 4}, {300, 17}, {2, 1030}}) {
    auto x = Random(rows * cols);
    Matrix want(cols, 0.0), mag(cols, 0.0);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t c = 0; c < cols; ++c) {
        want[c] += x[r * cols + c];
        mag[c] += std::abs(double{x[r * cols + c]});
      }
    }
    auto dx = Put(x);
    auto dout = Put(Random(cols));  // overwritten, not accumulated into
    ASSERT_OK(backend_->SumRows(rows, cols, *dx, dout.get()));
    EXPECT_LT(RelativeError(Get(*dout, cols), want, mag), tolerance_) << rows << "x" << cols;
  }
}

// The float64 reference of SoftmaxCrossEntropy.
void ReferenceSoftmax(size_t rows, size_t classes, const std::vector<float>& logits,
                      const std::vector<int32_t>& labels, Matrix* probs, Matrix* grad,
                      double* loss) {
  probs->assign(rows * classes, 0);
  grad->assign(rows * classes, 0);
  *loss = 0;
  for (size_t r = 0; r < rows; ++r) {
    double max = -std::numeric_limits<double>::infinity();
    for (size_t c = 0; c < classes; ++c) max = std::max(max, double{logits[r * classes + c]});
    double sum = 0;
    for (size_t c = 0; c < classes; ++c) sum += std::exp(logits[r * classes + c] - max);
    for (size_t c = 0; c < classes; ++c) {
      const double p = std::exp(logits[r * classes + c] - max) / sum;
      (*probs)[r * classes + c] = p;
      (*grad)[r * classes + c] = (p - (static_cast<int32_t>(c) == labels[r] ? 1 : 0)) / rows;
    }
    *loss -= std::log((*probs)[r * classes + static_cast<size_t>(labels[r])]);
  }
  *loss /= static_cast<double>(rows);
}

TEST_P(BackendTest, SoftmaxCrossEntropyMatchesReference) {
  SCOPED_TRACE(Trace());
  for (auto [rows, cols] :
       {std::pair<size_t, size_t>{1, 1}, {1, 10}, {7, 3}, {128, 10}, {5, 100}, {3, 1000}}) {
    SCOPED_TRACE(testing::Message() << rows << "x" << cols);
    auto logits = Random(rows * cols, -8.0f, 8.0f);
    std::vector<int32_t> labels(rows);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(cols) - 1);
    for (int32_t& l : labels) l = pick(rng_);
    Matrix want_probs, want_grad;
    double want_loss = 0;
    ReferenceSoftmax(rows, cols, logits, labels, &want_probs, &want_grad, &want_loss);

    auto dl = Put(logits);
    auto dp = Put(Random(rows * cols)), dg = Put(Random(rows * cols));
    float loss = -1;
    ASSERT_TRUE(
        backend_->SoftmaxCrossEntropy(rows, cols, *dl, labels.data(), dp.get(), dg.get(), &loss)
            .ok());
    EXPECT_LT(RelativeError(Get(*dp, rows * cols), want_probs), tolerance_);
    EXPECT_LT(RelativeError(Get(*dg, rows * cols), want_grad), tolerance_);
    EXPECT_LE(std::abs(loss - want_loss), tolerance_ * std::max(1.0, std::abs(want_loss)));

    // In place (probs over the logits) and without a gradient gives the same.
    float loss2 = -1;
    ASSERT_TRUE(
        backend_->SoftmaxCrossEntropy(rows, cols, *dl, labels.data(), dl.get(), nullptr, &loss2)
            .ok());
    EXPECT_LT(RelativeError(Get(*dl, rows * cols), want_probs), tolerance_);
    EXPECT_FLOAT_EQ(loss2, loss);
  }
}

TEST_P(BackendTest, SoftmaxCrossEntropyIsStableForHugeLogits) {
  SCOPED_TRACE(Trace());
  std::vector<float> logits = {1000.0f, -1000.0f, 0.0f, 88.0f, 89.0f, 90.0f};
  std::vector<int32_t> labels = {1, 0};
  Matrix want_probs, want_grad;
  double want_loss = 0;
  ReferenceSoftmax(2, 3, logits, labels, &want_probs, &want_grad, &want_loss);
  auto dl = Put(logits), dp = Put(logits), dg = Put(logits);
  float loss = 0;
  ASSERT_OK(backend_->SoftmaxCrossEntropy(2, 3, *dl, labels.data(), dp.get(), dg.get(), &loss));
  ASSERT_OK(backend_->Synchronize());  // writes the loss
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_LE(std::abs(loss - want_loss), 1e-4 * want_loss);
  EXPECT_LT(RelativeError(Get(*dp, 6), want_probs), tolerance_);
}

// The backend's gradient against central differences of the backend's own
// loss: this checks the contract (gradient of the mean loss), not only
// agreement with the reference formula.
TEST_P(BackendTest, SoftmaxCrossEntropyGradientMatchesFiniteDifferences) {
  SCOPED_TRACE(Trace());
  const size_t rows = 4, cols = 5;
  auto logits = Random(rows * cols, -2.0f, 2.0f);
  std::vector<int32_t> labels = {0, 4, 2, 2};
  auto dl = Put(logits), dp = Put(logits), dg = Put(logits);
  float loss = 0;
  ASSERT_TRUE(
      backend_->SoftmaxCrossEntropy(rows, cols, *dl, labels.data(), dp.get(), dg.get(), &loss)
          .ok());
  const auto grad = Get(*dg, rows * cols);
  const float h = 1e-2f;
  for (size_t i = 0; i < rows * cols; ++i) {
    float loss_plus = 0, loss_minus = 0;
    auto perturbed = logits;
    perturbed[i] = logits[i] + h;
    ASSERT_OK(backend_->Upload(perturbed.data(), perturbed.size(), dl.get()));
    ASSERT_TRUE(
        backend_->SoftmaxCrossEntropy(rows, cols, *dl, labels.data(), dp.get(), nullptr, &loss_plus)
            .ok());
    perturbed[i] = logits[i] - h;
    ASSERT_OK(backend_->Upload(perturbed.data(), perturbed.size(), dl.get()));
    ASSERT_TRUE(
        backend_
            ->SoftmaxCrossEntropy(rows, cols, *dl, labels.data(), dp.get(), nullptr, &loss_minus)
            .ok());
    ASSERT_OK(backend_->Synchronize());
    const double numeric = (double{loss_plus} - loss_minus) / (2.0 * h);
    EXPECT_NEAR(grad[i], numeric, 2e-3) << "element " << i;
  }
}

TEST_P(BackendTest, GatherRowsAndScatterAddRowsMatchReference) {
  SCOPED_TRACE(Trace());
  struct Shape {
    size_t rows, cols, m;
  };
  // m > rows forces repeated indices; cols 1 and 129 cross a warp's width.
  for (Shape s : {Shape{1, 1, 1}, Shape{10, 5, 7}, Shape{300, 17, 1000}, Shape{5, 129, 40},
                  Shape{2000, 1, 3}}) {
    SCOPED_TRACE(testing::Message() << "rows=" << s.rows << " cols=" << s.cols << " m=" << s.m);
    auto table = Random(s.rows * s.cols), src = Random(s.m * s.cols);
    const auto index = RandomIndex(s.m, s.rows);
    Matrix want_gather(s.m * s.cols);
    Matrix want_table(table.begin(), table.end()), mag(s.rows * s.cols);
    for (size_t i = 0; i < s.rows * s.cols; ++i) mag[i] = std::abs(double{table[i]});
    for (size_t i = 0; i < s.m; ++i) {
      for (size_t c = 0; c < s.cols; ++c) {
        want_gather[i * s.cols + c] = table[index[i] * s.cols + c];
        want_table[index[i] * s.cols + c] += src[i * s.cols + c];
        mag[index[i] * s.cols + c] += std::abs(double{src[i * s.cols + c]});
      }
    }
    auto dtable = Put(table), dsrc = Put(src);
    auto dout = Put(Random(s.m * s.cols));
    ASSERT_OK(backend_->GatherRows(s.rows, s.cols, *dtable, index.data(), s.m, dout.get()));
    // A gather copies: exact.
    EXPECT_EQ(RelativeError(Get(*dout, s.m * s.cols), want_gather), 0.0);
    ASSERT_OK(backend_->ScatterAddRows(s.m, s.cols, *dsrc, index.data(), s.rows, dtable.get()));
    EXPECT_LT(RelativeError(Get(*dtable, s.rows * s.cols), want_table, mag), tolerance_);
  }
}

TEST_P(BackendTest, RowDotsScaleRowsAndFillMatchReference) {
  SCOPED_TRACE(Trace());
  for (auto [m, cols] :
       {std::pair<size_t, size_t>{1, 1}, {7, 5}, {100, 33}, {3, 1000}, {2049, 2}}) {
    SCOPED_TRACE(testing::Message() << m << "x" << cols);
    auto a = Random(m * cols), b = Random(m * cols), scale = Random(m, -2.0f, 2.0f);
    Matrix want_dots(m), mag_dots(m), want_scaled(m * cols);
    for (size_t i = 0; i < m; ++i) {
      for (size_t c = 0; c < cols; ++c) {
        want_dots[i] += double{a[i * cols + c]} * b[i * cols + c];
        mag_dots[i] += std::abs(double{a[i * cols + c]} * b[i * cols + c]);
        want_scaled[i * cols + c] = double{a[i * cols + c]} * scale[i];
      }
    }
    auto da = Put(a), db = Put(b), dscale = Put(scale);
    auto dout = Put(std::vector<float>(m, std::numeric_limits<float>::quiet_NaN()));
    ASSERT_OK(backend_->RowDots(m, cols, *da, *db, dout.get()));
    EXPECT_LT(RelativeError(Get(*dout, m), want_dots, mag_dots), tolerance_);
    ASSERT_OK(backend_->ScaleRows(m, cols, *dscale, da.get()));
    EXPECT_LT(RelativeError(Get(*da, m * cols), want_scaled), tolerance_);
    ASSERT_OK(backend_->Fill(m * cols, -0.375f, db.get()));
    EXPECT_EQ(RelativeError(Get(*db, m * cols), Matrix(m * cols, -0.375)), 0.0);
  }
}

TEST_P(BackendTest, CsrMatVecMatchesReferenceBothWays) {
  SCOPED_TRACE(Trace());
  struct Shape {
    size_t rows, cols, max_per_row;
  };
  // Empty rows, columns no row stores, rows longer than a warp, and the
  // shape of a click batch (500 samples of up to 50 of 10^4 pulled ids).
  for (Shape s : {Shape{1, 1, 1}, Shape{9, 4, 6}, Shape{40, 300, 3}, Shape{7, 5, 100},
                  Shape{500, 10000, 50}, Shape{3, 1, 0}}) {
    SCOPED_TRACE(testing::Message()
                 << "rows=" << s.rows << " cols=" << s.cols << " max_per_row=" << s.max_per_row);
    std::vector<uint64_t> offsets;
    std::vector<uint32_t> col_index;
    RandomCsr(s.rows, s.cols, s.max_per_row, &offsets, &col_index);
    for (bool t : {false, true}) {
      SCOPED_TRACE(testing::Message() << "t=" << t);
      const size_t in = t ? s.rows : s.cols, out = t ? s.cols : s.rows;
      auto x = Random(in);
      Matrix want(out, 0.0), mag(out, 0.0);
      for (size_t r = 0; r < s.rows; ++r) {
        for (uint64_t j = offsets[r]; j < offsets[r + 1]; ++j) {
          const size_t from = t ? r : col_index[j], to = t ? col_index[j] : r;
          want[to] += x[from];
          mag[to] += std::abs(double{x[from]});
        }
      }
      auto dx = Put(x);
      // y is overwritten, not accumulated into: NaN must not survive.
      auto dy = Put(std::vector<float>(out, std::numeric_limits<float>::quiet_NaN()));
      ASSERT_TRUE(backend_
                      ->CsrMatVec(t ? Transpose::kYes : Transpose::kNo, s.rows, s.cols,
                                  offsets.data(), col_index.data(), *dx, dy.get())
                      .ok());
      EXPECT_LT(RelativeError(Get(*dy, out), want, mag), tolerance_);
    }
  }
}

// The float64 reference of LogisticLoss.
void ReferenceLogistic(const std::vector<float>& logits, const std::vector<int32_t>& labels,
                       Matrix* grad, double* loss) {
  const size_t n = logits.size();
  grad->assign(n, 0);
  *loss = 0;
  for (size_t i = 0; i < n; ++i) {
    const double z = logits[i];
    const double m = labels[i] == 1 ? z : -z;
    *loss += std::log1p(std::exp(-std::abs(m))) + std::max(-m, 0.0);
    const double p = z >= 0 ? 1.0 / (1.0 + std::exp(-z)) : std::exp(z) / (1.0 + std::exp(z));
    (*grad)[i] = (p - labels[i]) / static_cast<double>(n);
  }
  *loss /= static_cast<double>(n);
}

TEST_P(BackendTest, LogisticLossMatchesReference) {
  SCOPED_TRACE(Trace());
  for (size_t n : {1u, 7u, 500u, 4099u}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    auto logits = Random(n, -8.0f, 8.0f);
    std::vector<int32_t> labels(n);
    std::bernoulli_distribution coin(0.5);
    for (int32_t& l : labels) l = coin(rng_) ? 1 : 0;
    Matrix want_grad;
    double want_loss = 0;
    ReferenceLogistic(logits, labels, &want_grad, &want_loss);

    auto dl = Put(logits), dg = Put(Random(n));
    float loss = -1;
    ASSERT_OK(backend_->LogisticLoss(n, *dl, labels.data(), dg.get(), &loss));
    EXPECT_LT(RelativeError(Get(*dg, n), want_grad), tolerance_);
    EXPECT_LE(std::abs(loss - want_loss), tolerance_ * std::max(1.0, want_loss));

    // Without a gradient, and with the gradient over the logits, the same.
    float loss2 = -1, loss3 = -1;
    ASSERT_OK(backend_->LogisticLoss(n, *dl, labels.data(), nullptr, &loss2));
    ASSERT_OK(backend_->Synchronize());
    EXPECT_FLOAT_EQ(loss2, loss);
    ASSERT_OK(backend_->LogisticLoss(n, *dl, labels.data(), dl.get(), &loss3));
    ASSERT_OK(backend_->Synchronize());
    EXPECT_FLOAT_EQ(loss3, loss);
    EXPECT_LT(RelativeError(Get(*dl, n), want_grad), tolerance_);
  }
}

TEST_P(BackendTest, LogisticLossIsStableForHugeLogits) {
  SCOPED_TRACE(Trace());
  const std::vector<float> logits = {1000.0f, -1000.0f, 1000.0f, -1000.0f, 90.0f, -90.0f, 0.0f};
  const std::vector<int32_t> labels = {1, 0, 0, 1, 1, 1, 0};
  Matrix want_grad;
  double want_loss = 0;
  ReferenceLogistic(logits, labels, &want_grad, &want_loss);
  auto dl = Put(logits), dg = Put(logits);
  float loss = 0;
  ASSERT_OK(backend_->LogisticLoss(logits.size(), *dl, labels.data(), dg.get(), &loss));
  ASSERT_OK(backend_->Synchronize());
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_LE(std::abs(loss - want_loss), 1e-4 * want_loss);
  const auto grad = Get(*dg, logits.size());
  for (float g : grad) EXPECT_TRUE(std::isfinite(g));
  EXPECT_LT(RelativeError(grad, want_grad), tolerance_);
}

// The backend's gradient against central differences of its own loss.
TEST_P(BackendTest, LogisticLossGradientMatchesFiniteDifferences) {
  SCOPED_TRACE(Trace());
  const size_t n = 6;
  auto logits = Random(n, -3.0f, 3.0f);
  const std::vector<int32_t> labels = {0, 1, 1, 0, 1, 0};
  auto dl = Put(logits), dg = Put(logits);
  float loss = 0;
  ASSERT_OK(backend_->LogisticLoss(n, *dl, labels.data(), dg.get(), &loss));
  const auto grad = Get(*dg, n);
  const float h = 1e-2f;
  for (size_t i = 0; i < n; ++i) {
    float loss_plus = 0, loss_minus = 0;
    auto perturbed = logits;
    perturbed[i] = logits[i] + h;
    ASSERT_OK(backend_->Upload(perturbed.data(), n, dl.get()));
    ASSERT_OK(backend_->LogisticLoss(n, *dl, labels.data(), nullptr, &loss_plus));
    perturbed[i] = logits[i] - h;
    ASSERT_OK(backend_->Upload(perturbed.data(), n, dl.get()));
    ASSERT_OK(backend_->LogisticLoss(n, *dl, labels.data(), nullptr, &loss_minus));
    ASSERT_OK(backend_->Synchronize());
    const double numeric = (double{loss_plus} - loss_minus) / (2.0 * h);
    EXPECT_NEAR(grad[i], numeric, 2e-4) << "element " << i;
  }
}

// Every sparse op refuses a bad index, offset or label, a short buffer and a
// foreign one, before it writes anything.
TEST_P(BackendTest, SparseOpsRejectBadIndicesSizesAndForeignBuffers) {
  SCOPED_TRACE(Trace());
  const size_t rows = 6, cols = 3;
  const auto table = Random(rows * cols), src = Random(4 * cols);
  auto dtable = Put(table), dsrc = Put(src), dout = Put(src);
  auto small = Put(Random(2));
  // The bad index is the last one, so a backend that wrote while checking
  // would already have changed the table.
  const std::vector<uint32_t> bad_index = {0, 5, 1, 6};
  Status st = backend_->ScatterAddRows(4, cols, *dsrc, bad_index.data(), rows, dtable.get());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("index[3] = 6"), std::string::npos) << st.message();
  EXPECT_EQ(Get(*dtable, rows * cols), table);
  st = backend_->GatherRows(rows, cols, *dtable, bad_index.data(), 4, dout.get());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ(Get(*dout, 4 * cols), src);
  EXPECT_EQ(backend_->GatherRows(rows, cols, *dtable, nullptr, 4, dout.get()).code(),
            StatusCode::kInvalidArgument);
  // Too small: the table for its rows, out for m rows.
  const std::vector<uint32_t> index = {0, 5, 1, 2};
  st = backend_->GatherRows(rows + 1, cols, *dtable, index.data(), 4, dout.get());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("GatherRows: table"), std::string::npos) << st.message();
  EXPECT_EQ(backend_->GatherRows(rows, cols, *dtable, index.data(), 4, small.get()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->ScatterAddRows(4, cols, *small, index.data(), rows, dtable.get()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->RowDots(4, cols, *dsrc, *dsrc, small.get()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->RowDots(4, cols, *dsrc, *small, dout.get()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->ScaleRows(4, cols, *small, dout.get()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->ScaleRows(4, cols, *dsrc, small.get()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Fill(3, 1.0f, small.get()).code(), StatusCode::kInvalidArgument);

  // A buffer of another backend instance, for each sparse op.
  auto other = CreateCpuBackend();
  auto foreign = std::move(other->Allocate(64)).value();
  const std::string kForeign = "another backend";
  st = backend_->GatherRows(rows, cols, *foreign, index.data(), 4, dout.get());
  EXPECT_NE(st.message().find(kForeign), std::string::npos) << st.ToString();
  st = backend_->ScatterAddRows(4, cols, *dsrc, index.data(), rows, foreign.get());
  EXPECT_NE(st.message().find(kForeign), std::string::npos) << st.ToString();
  st = backend_->RowDots(4, cols, *foreign, *dsrc, dout.get());
  EXPECT_NE(st.message().find(kForeign), std::string::npos) << st.ToString();
  st = backend_->ScaleRows(4, cols, *dsrc, foreign.get());
  EXPECT_NE(st.message().find(kForeign), std::string::npos) << st.ToString();
  st = backend_->Fill(4, 0.0f, foreign.get());
  EXPECT_NE(st.message().find(kForeign), std::string::npos) << st.ToString();

  // CSR: 2 rows over 3 columns.
  const std::vector<uint64_t> offsets = {0, 2, 3};
  const std::vector<uint32_t> col_index = {0, 2, 1};
  const std::vector<uint32_t> bad_cols = {0, 2, 3};
  const std::vector<uint64_t> not_from_zero = {1, 2, 3}, decreasing = {0, 2, 1};
  auto dx = Put(Random(3));
  auto dy = Put(std::vector<float>(3, 7.0f));
  ASSERT_TRUE(
      backend_->CsrMatVec(Transpose::kNo, 2, 3, offsets.data(), col_index.data(), *dx, dy.get())
          .ok());
  const auto y_before = Get(*dy, 3);
  for (Transpose t : {Transpose::kNo, Transpose::kYes}) {
    st = backend_->CsrMatVec(t, 2, 3, offsets.data(), bad_cols.data(), *dx, dy.get());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("col_index[2] = 3 (row 1)"), std::string::npos) << st.message();
    st = backend_->CsrMatVec(t, 2, 3, not_from_zero.data(), col_index.data(), *dx, dy.get());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    st = backend_->CsrMatVec(t, 2, 3, decreasing.data(), col_index.data(), *dx, dy.get());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("decrease at row 1"), std::string::npos) << st.message();
    EXPECT_EQ(backend_->CsrMatVec(t, 2, 3, nullptr, col_index.data(), *dx, dy.get()).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(backend_->CsrMatVec(t, 2, 3, offsets.data(), nullptr, *dx, dy.get()).code(),
              StatusCode::kInvalidArgument);
    // y (kNo: 2, kYes: 3 floats) or x (kNo: 3, kYes: 2) too small.
    EXPECT_EQ(
        backend_->CsrMatVec(t, 2, 3, offsets.data(), col_index.data(), *dx, small.get()).code(),
        t == Transpose::kYes ? StatusCode::kInvalidArgument : StatusCode::kOk);
    EXPECT_EQ(
        backend_->CsrMatVec(t, 2, 3, offsets.data(), col_index.data(), *small, dy.get()).code(),
        t == Transpose::kNo ? StatusCode::kInvalidArgument : StatusCode::kOk);
    st = backend_->CsrMatVec(t, 2, 3, offsets.data(), col_index.data(), *foreign, dy.get());
    EXPECT_NE(st.message().find(kForeign), std::string::npos) << st.ToString();
    // Put y back: the kOk calls above wrote it.
    ASSERT_OK(backend_->Upload(y_before.data(), 3, dy.get()));
  }
  EXPECT_EQ(Get(*dy, 3), y_before);

  // LogisticLoss: labels other than 0 and 1, n == 0, short or foreign grad.
  const std::vector<int32_t> labels = {1, 0, 2};
  auto dz = Put(Random(3));
  const auto z_before = Get(*dz, 3);
  float loss = -1;
  st = backend_->LogisticLoss(3, *dz, labels.data(), dz.get(), &loss);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("label 2 of element 2"), std::string::npos) << st.message();
  EXPECT_EQ(Get(*dz, 3), z_before);
  EXPECT_EQ(loss, -1.0f);
  EXPECT_EQ(backend_->LogisticLoss(0, *dz, labels.data(), nullptr, &loss).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->LogisticLoss(2, *dz, labels.data(), small.get(), &loss).code(),
            StatusCode::kOk);
  EXPECT_EQ(backend_->LogisticLoss(3, *dz, labels.data(), small.get(), &loss).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->LogisticLoss(2, *dz, labels.data(), foreign.get(), &loss).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->LogisticLoss(2, *dz, nullptr, nullptr, &loss).code(),
            StatusCode::kInvalidArgument);
}

TEST_P(BackendTest, RejectsWrongSizesForeignBuffersAndBadLabels) {
  SCOPED_TRACE(Trace());
  auto small = Put(Random(4));
  auto big = Put(Random(64));
  // Too small for 3x3.
  Status st =
      backend_->Gemm(Transpose::kNo, Transpose::kNo, 3, 3, 3, 1.0f, *small, *big, 0.0f, big.get());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("Gemm: A"), std::string::npos) << st.message();
  EXPECT_EQ(
      backend_->Gemm(Transpose::kNo, Transpose::kNo, 0, 3, 3, 1.0f, *big, *big, 0.0f, big.get())
          .code(),
      StatusCode::kInvalidArgument);
  float host[8] = {};
  EXPECT_EQ(backend_->Upload(host, 8, small.get()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Download(*small, host, 8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Allocate(0).status().code(), StatusCode::kInvalidArgument);

  // A buffer of another backend instance.
  auto other = CreateCpuBackend();
  auto foreign = other->Allocate(64);
  ASSERT_OK(foreign);
  st = backend_->Axpy(4, 1.0f, **foreign, big.get());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("another backend"), std::string::npos) << st.message();

  std::vector<int32_t> labels = {0, 3};
  float loss = 0;
  st = backend_->SoftmaxCrossEntropy(2, 3, *big, labels.data(), big.get(), nullptr, &loss);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("label 3 of row 1"), std::string::npos) << st.message();
}

// A view computes on its part of a buffer and nothing else; on a backend
// whose memory is host memory, a view of host memory is that memory.
TEST_P(BackendTest, ViewsComputeOnTheirPartOnly) {
  SCOPED_TRACE(Trace());
  const std::vector<float> ones(10, 1.0f);
  auto whole = Put(ones);
  {
    BufferView middle(*whole, 3, 4);
    EXPECT_EQ(middle.size(), 4u);
    EXPECT_EQ(middle.owner(), backend_.get());
    ASSERT_OK(backend_->Scale(4, 5.0f, &middle));
    // A view's size is what the checks see.
    EXPECT_EQ(backend_->Scale(5, 5.0f, &middle).code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(Get(*whole, 10),
            (std::vector<float>{1, 1, 1, 5, 5, 5, 5, 1, 1, 1}));
  if (!backend_->host_memory()) return;  // views of host memory are for host backends
  std::vector<float> host = {1, 2, 3};
  BufferView in_place(*backend_, host.data(), host.size());
  ASSERT_OK(backend_->Scale(3, 2.0f, &in_place));
  EXPECT_EQ(host, (std::vector<float>{2, 4, 6}));
}

// Asynchronous copies from and to pinned memory keep the order of the ops
// around them: compute reads what was uploaded before it, an upload does
// not overwrite what earlier compute still reads, and a download sees the
// compute queued before it and not what follows.
TEST_P(BackendTest, AsyncCopiesKeepTheOrderOfTheOpsAroundThem) {
  SCOPED_TRACE(Trace());
  const size_t n = 1 << 16;
  std::vector<float> a_old = Random(n), a_new = Random(n), b = Random(n);
  std::vector<float> before(n), after(n);
  std::vector<std::unique_ptr<PinnedHost>> pins;
  for (std::vector<float>* v : {&a_old, &a_new, &b, &before, &after}) {
    auto pin = backend_->Pin(v->data(), v->size());
    ASSERT_OK(pin);
    pins.push_back(std::move(pin).value());
  }
  auto da = backend_->Allocate(n).value();
  auto db = backend_->Allocate(n).value();
  auto dc = Put(std::vector<float>(n, 0.0f));
  ASSERT_OK(backend_->UploadAsync(a_old.data(), n, da.get()));
  ASSERT_OK(backend_->UploadAsync(b.data(), n, db.get()));
  ASSERT_OK(backend_->Axpy(n, 1.0f, *da, dc.get()));        // c = a_old
  ASSERT_OK(backend_->UploadAsync(a_new.data(), n, da.get()));
  ASSERT_OK(backend_->Axpy(n, 1.0f, *da, dc.get()));        // c = a_old + a_new
  ASSERT_OK(backend_->Axpy(n, 1.0f, *db, dc.get()));        // c = a_old + a_new + b
  ASSERT_OK(backend_->DownloadAsync(*dc, before.data(), n));
  ASSERT_OK(backend_->Scale(n, 2.0f, dc.get()));            // after the download
  ASSERT_OK(backend_->DownloadAsync(*dc, after.data(), n));
  ASSERT_OK(backend_->Synchronize());
  for (size_t i = 0; i < n; ++i) {
    const float want = (a_old[i] + a_new[i]) + b[i];
    ASSERT_FLOAT_EQ(before[i], want) << "element " << i;
    ASSERT_FLOAT_EQ(after[i], 2.0f * want) << "element " << i;
  }
  // Bad sizes are refused like Upload's and Download's.
  EXPECT_EQ(backend_->UploadAsync(a_old.data(), n + 1, da.get()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->DownloadAsync(*da, before.data(), n + 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->UploadAsync(a_old.data(), 1, nullptr).code(), StatusCode::kInvalidArgument);
}

// Busy times grow with the work of each kind.
TEST_P(BackendTest, TimesCountCopiesAndCompute) {
  SCOPED_TRACE(Trace());
  const DeviceTimes start = backend_->times();
  const size_t n = 1 << 18;
  std::vector<float> host = Random(n);
  auto d = backend_->Allocate(n).value();
  ASSERT_OK(backend_->UploadAsync(host.data(), n, d.get()));
  ASSERT_OK(backend_->Synchronize());
  const DeviceTimes uploaded = backend_->times();
  EXPECT_GT(uploaded.upload_s, start.upload_s);
  EXPECT_EQ(uploaded.download_s, start.download_s);
  for (int i = 0; i < 10; ++i) ASSERT_OK(backend_->Scale(n, 0.5f, d.get()));
  ASSERT_OK(backend_->DownloadAsync(*d, host.data(), n));
  ASSERT_OK(backend_->Synchronize());
  const DeviceTimes end = backend_->times();
  EXPECT_GT(end.compute_s, uploaded.compute_s);
  EXPECT_GT(end.download_s, uploaded.download_s);
  EXPECT_EQ(end.upload_s, uploaded.upload_s);
  EXPECT_LT(end.compute_s - start.compute_s, 60.0);  // seconds, not milliseconds
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackendTest,
                         ::testing::Values(BackendKind::kCpu, BackendKind::kCuda), KindName);

TEST(BackendFactoryTest, CpuWorks) {
  auto backend = CreateBackend(BackendKind::kCpu);
  ASSERT_OK(backend);
  EXPECT_EQ((*backend)->name().rfind("cpu", 0), 0u) << (*backend)->name();
}

TEST(BackendFactoryTest, CpuThreadsAreSetAndNamed) {
  auto backend = CreateBackend(BackendKind::kCpu, 1);
  ASSERT_OK(backend);
  EXPECT_EQ((*backend)->name(), "cpu (OpenBLAS, 1 thread)");
}

TEST(BackendFactoryTest, AutoPicksCudaOnlyWhenADeviceIsPresent) {
  auto backend = CreateBackend(BackendKind::kAuto);
  ASSERT_OK(backend);
  const std::string expected = CudaDeviceCount() > 0 ? "cuda" : "cpu";
  EXPECT_EQ((*backend)->name().rfind(expected, 0), 0u) << (*backend)->name();
}

TEST(BackendFactoryTest, CudaWithoutDeviceIsFailedPreconditionSayingWhy) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto backend = CreateBackend(BackendKind::kCuda);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), StatusCode::kFailedPrecondition);
  const std::string& msg = backend.status().message();
  EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;
  // The reason itself follows: a driver error or "not built".
  EXPECT_GT(msg.size(), std::string("no CUDA device is usable: ").size() + 30) << msg;
}

TEST(BackendFactoryTest, ParsesDeviceNames) {
  for (BackendKind kind : {BackendKind::kAuto, BackendKind::kCpu, BackendKind::kCuda}) {
    auto parsed = ParseBackendKind(BackendKindName(kind));
    ASSERT_OK(parsed);
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_EQ(ParseBackendKind("gpu").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
