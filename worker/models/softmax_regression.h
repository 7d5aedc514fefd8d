// Softmax regression (multinomial logistic regression) on a compute
// backend: logits = X W + b, mean cross-entropy loss. Parameters are one
// flat vector, W (features x classes, row-major) then b (classes), the
// layout of the model's table on the servers.
//
// Thread-compatible; `backend` must outlive the model.
#ifndef PS_WORKER_MODELS_SOFTMAX_REGRESSION_H_
#define PS_WORKER_MODELS_SOFTMAX_REGRESSION_H_

#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"
#include "worker/backend.h"

namespace ps {

class SoftmaxRegression {
 public:
  // Allocates the parameter, batch and gradient buffers for batches of up
  // to `max_batch` rows. InvalidArgument for a zero size.
  static StatusOr<std::unique_ptr<SoftmaxRegression>> Create(Backend* backend, uint32_t features,
                                                             uint32_t classes, uint32_t max_batch);

  // features * classes + classes.
  size_t num_parameters() const { return size_t{features_} * classes_ + classes_; }

  // Loads the parameters (num_parameters() floats).
  Status SetParameters(std::span<const float> params);

  // For a batch (x: rows x features, row-major; labels: rows), returns the
  // mean cross-entropy at the current parameters and, if `grad` is not
  // empty, writes its gradient (num_parameters() floats).
  // REQUIRES: 1 <= rows <= max_batch.
  StatusOr<float> LossAndGradient(std::span<const float> x, std::span<const int32_t> labels,
                                  std::span<float> grad);

  // Fraction of the batch whose most likely class is its label.
  StatusOr<double> Accuracy(std::span<const float> x, std::span<const int32_t> labels);

 private:
  SoftmaxRegression(Backend* backend, uint32_t features, uint32_t classes, uint32_t max_batch)
      : backend_(backend), features_(features), classes_(classes), max_batch_(max_batch) {}
  // logits_ = x W + b for `rows` rows.
  Status Forward(std::span<const float> x, size_t rows);
  Status CheckBatch(std::span<const float> x, std::span<const int32_t> labels) const;

  Backend* const backend_;
  const uint32_t features_;
  const uint32_t classes_;
  const uint32_t max_batch_;
  std::unique_ptr<DeviceBuffer> w_, b_, x_, logits_, dlogits_, dw_, db_;
};

}  // namespace ps

#endif  // PS_WORKER_MODELS_SOFTMAX_REGRESSION_H_
