// A multilayer perceptron on a compute backend: layers {n0, n1, ..., nL}
// map n0 inputs through ReLU hidden layers to nL classes, with mean
// softmax cross-entropy loss. Layers {features, classes} is softmax
// regression. Parameters are one flat vector, per layer W (in x out,
// row-major) then b (out), the layout of the model's table on the servers.
//
// Thread-compatible; `backend` must outlive the model.
#ifndef PS_WORKER_MODELS_MLP_H_
#define PS_WORKER_MODELS_MLP_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "worker/backend.h"

namespace ps {

class Mlp {
 public:
  // Allocates parameters, activations and gradients for batches of up to
  // `max_batch` rows. InvalidArgument for fewer than 2 layers or a zero size.
  static StatusOr<std::unique_ptr<Mlp>> Create(Backend* backend, std::vector<uint32_t> layers,
                                               uint32_t max_batch);

  // Total parameters: sum over layers of in * out + out.
  size_t num_parameters() const { return num_parameters_; }
  const std::vector<uint32_t>& layers() const { return layers_; }

  // Loads the parameters (num_parameters() floats).
  Status SetParameters(std::span<const float> params);

  // For a batch (x: rows x n0, row-major; labels: rows), returns the mean
  // cross-entropy at the current parameters and, if `grad` is not empty,
  // writes its gradient (num_parameters() floats).
  // REQUIRES: 1 <= rows <= max_batch.
  StatusOr<float> LossAndGradient(std::span<const float> x, std::span<const int32_t> labels,
                                  std::span<float> grad);

  // Fraction of the batch whose most likely class is its label.
  StatusOr<double> Accuracy(std::span<const float> x, std::span<const int32_t> labels);

 private:
  struct Layer {
    uint32_t in = 0, out = 0;
    size_t offset = 0;  // of W in the flat parameter vector; b follows W
    std::unique_ptr<DeviceBuffer> w, b, a, dz, dw, db;  // a: this layer's output
  };
  Mlp(Backend* backend, std::vector<uint32_t> layers, uint32_t max_batch)
      : backend_(backend), layers_(std::move(layers)), max_batch_(max_batch) {}
  Status CheckBatch(std::span<const float> x, std::span<const int32_t> labels) const;
  // Uploads x and runs every layer; the last layer's `a` holds the logits.
  Status Forward(std::span<const float> x, size_t rows);

  Backend* const backend_;
  const std::vector<uint32_t> layers_;
  const uint32_t max_batch_;
  size_t num_parameters_ = 0;
  std::unique_ptr<DeviceBuffer> x_;
  std::vector<Layer> net_;
};

}  // namespace ps

#endif  // PS_WORKER_MODELS_MLP_H_
