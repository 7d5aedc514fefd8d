#include "worker/models/softmax_regression.h"

#include <algorithm>
#include <vector>

namespace ps {

StatusOr<std::unique_ptr<SoftmaxRegression>> SoftmaxRegression::Create(Backend* backend,
                                                                       uint32_t features,
                                                                       uint32_t classes,
                                                                       uint32_t max_batch) {
  if (features == 0 || classes == 0 || max_batch == 0) {
    return InvalidArgumentError("softmax regression needs features, classes and max_batch >= 1");
  }
  std::unique_ptr<SoftmaxRegression> m(new SoftmaxRegression(backend, features, classes, max_batch));
  const size_t fc = size_t{features} * classes;
  PS_ASSIGN_OR_RETURN(m->w_, backend->Allocate(fc));
  PS_ASSIGN_OR_RETURN(m->b_, backend->Allocate(classes));
  PS_ASSIGN_OR_RETURN(m->x_, backend->Allocate(size_t{max_batch} * features));
  PS_ASSIGN_OR_RETURN(m->logits_, backend->Allocate(size_t{max_batch} * classes));
  PS_ASSIGN_OR_RETURN(m->dlogits_, backend->Allocate(size_t{max_batch} * classes));
  PS_ASSIGN_OR_RETURN(m->dw_, backend->Allocate(fc));
  PS_ASSIGN_OR_RETURN(m->db_, backend->Allocate(classes));
  return m;
}

Status SoftmaxRegression::SetParameters(std::span<const float> params) {
  if (params.size() != num_parameters()) {
    return InvalidArgumentError("softmax regression: got " + std::to_string(params.size()) +
                                " parameters, expected " + std::to_string(num_parameters()));
  }
  const size_t fc = size_t{features_} * classes_;
  PS_RETURN_IF_ERROR(backend_->Upload(params.data(), fc, w_.get()));
  return backend_->Upload(params.data() + fc, classes_, b_.get());
}

Status SoftmaxRegression::CheckBatch(std::span<const float> x,
                                     std::span<const int32_t> labels) const {
  const size_t rows = labels.size();
  if (rows == 0 || rows > max_batch_) {
    return InvalidArgumentError("softmax regression: batch of " + std::to_string(rows) +
                                " rows; expected 1.." + std::to_string(max_batch_));
  }
  if (x.size() != rows * features_) {
    return InvalidArgumentError("softmax regression: " + std::to_string(x.size()) +
                                " inputs for " + std::to_string(rows) + " rows of " +
                                std::to_string(features_) + " features");
  }
  return Status::Ok();
}

Status SoftmaxRegression::Forward(std::span<const float> x, size_t rows) {
  PS_RETURN_IF_ERROR(backend_->Upload(x.data(), x.size(), x_.get()));
  PS_RETURN_IF_ERROR(backend_->Gemm(Transpose::kNo, Transpose::kNo, rows, classes_, features_,
                                    1.0f, *x_, *w_, 0.0f, logits_.get()));
  return backend_->AddBias(rows, classes_, *b_, logits_.get());
}

StatusOr<float> SoftmaxRegression::LossAndGradient(std::span<const float> x,
                                                   std::span<const int32_t> labels,
                                                   std::span<float> grad) {
  PS_RETURN_IF_ERROR(CheckBatch(x, labels));
  if (!grad.empty() && grad.size() != num_parameters()) {
    return InvalidArgumentError("softmax regression: gradient buffer of " +
                                std::to_string(grad.size()) + " floats, expected " +
                                std::to_string(num_parameters()));
  }
  const size_t rows = labels.size();
  PS_RETURN_IF_ERROR(Forward(x, rows));
  float loss = 0;
  PS_RETURN_IF_ERROR(backend_->SoftmaxCrossEntropy(rows, classes_, *logits_, labels.data(),
                                                   logits_.get(),
                                                   grad.empty() ? nullptr : dlogits_.get(), &loss));
  if (grad.empty()) return loss;
  // dW = X^T dlogits, db = column sums of dlogits.
  PS_RETURN_IF_ERROR(backend_->Gemm(Transpose::kYes, Transpose::kNo, features_, classes_, rows,
                                    1.0f, *x_, *dlogits_, 0.0f, dw_.get()));
  PS_RETURN_IF_ERROR(backend_->SumRows(rows, classes_, *dlogits_, db_.get()));
  const size_t fc = size_t{features_} * classes_;
  PS_RETURN_IF_ERROR(backend_->Download(*dw_, grad.data(), fc));
  PS_RETURN_IF_ERROR(backend_->Download(*db_, grad.data() + fc, classes_));
  return loss;
}

StatusOr<double> SoftmaxRegression::Accuracy(std::span<const float> x,
                                             std::span<const int32_t> labels) {
  PS_RETURN_IF_ERROR(CheckBatch(x, labels));
  const size_t rows = labels.size();
  PS_RETURN_IF_ERROR(Forward(x, rows));
  std::vector<float> logits(rows * classes_);
  PS_RETURN_IF_ERROR(backend_->Download(*logits_, logits.data(), logits.size()));
  size_t right = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * classes_;
    right += std::max_element(row, row + classes_) - row == labels[r];
  }
  return static_cast<double>(right) / static_cast<double>(rows);
}

}  // namespace ps
