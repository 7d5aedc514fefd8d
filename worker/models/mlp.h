// A multilayer perceptron on a compute backend: layers {n0, n1, ..., nL}
// map n0 inputs through ReLU hidden layers to nL classes, with mean
// softmax cross-entropy loss. Layers {features, classes} is softmax
// regression. A last layer of one output is a binary classifier instead:
// its output is the logit of label 1 and the loss is the mean logistic loss
// (labels 0 or 1). Parameters are one flat vector, per layer W (in x out,
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

  // Loads the parameters (num_parameters() floats) that LossAndGradient
  // and Accuracy use.
  Status SetParameters(std::span<const float> params);

  // For a batch (x: rows x n0, row-major; labels: rows), returns the mean
  // cross-entropy at the parameters of SetParameters and, if `grad` is not
  // empty, writes its gradient (num_parameters() floats).
  // REQUIRES: 1 <= rows <= max_batch.
  StatusOr<float> LossAndGradient(std::span<const float> x, std::span<const int32_t> labels,
                                  std::span<float> grad);

  // A training step from host memory to host memory: the loss and
  // gradient of LossAndGradient, at `params` (num_parameters() floats)
  // instead. On a backend whose memory is host memory (cpu) nothing is
  // copied: the layers read `params` and `x` and write `grad` where they
  // are. On a device, each layer's parameters are uploaded and each
  // layer's gradient downloaded asynchronously, in the order the layers
  // need them: layer 0 computes while the others' parameters are on their
  // way, and the top layers' gradients travel while the lower layers
  // compute. For the copies to be asynchronous, `params`, `grad` and `x`
  // should be pinned (Backend::Pin). Returns when the gradient is in
  // `grad`. Afterwards the parameters of SetParameters are unspecified
  // (call it again before Accuracy or LossAndGradient).
  // With `dx` not empty (rows x n0 floats), also writes the gradient of the
  // loss with respect to the inputs there (a model whose inputs are
  // themselves parameters, such as embeddings, pushes it on).
  // REQUIRES: 1 <= rows <= max_batch.
  StatusOr<float> TrainStep(std::span<const float> x, std::span<const int32_t> labels,
                            std::span<const float> params, std::span<float> grad,
                            std::span<float> dx = {});

  // The outputs (logits) of the last layer for a batch at the parameters of
  // SetParameters: rows x nL floats into `out`.
  // REQUIRES: 1 <= rows <= max_batch, out.size() == rows * nL.
  Status Logits(std::span<const float> x, std::span<float> out);

  // Fraction of the batch whose most likely class is its label, at the
  // parameters of SetParameters.
  StatusOr<double> Accuracy(std::span<const float> x, std::span<const int32_t> labels);

  // Floating-point operations of one training step on `rows` samples:
  // 2 * rows * in * out per product, three products per layer (forward,
  // weight gradient, input gradient) but two for the first layer, whose
  // input gradient is not needed. The element-wise ops are left out.
  double TrainStepFlops(uint32_t rows) const;

 private:
  struct Layer {
    uint32_t in = 0, out = 0;
    size_t offset = 0;  // of W in the flat parameter vector; b follows W
    std::unique_ptr<DeviceBuffer> a, dz;  // a: this layer's output
    size_t size() const { return size_t{in} * out + out; }  // W and b
  };
  Mlp(Backend* backend, std::vector<uint32_t> layers, uint32_t max_batch)
      : backend_(backend), layers_(std::move(layers)), max_batch_(max_batch) {}
  Status CheckBatch(std::span<const float> x, std::span<const int32_t> labels) const;
  // The loss and, with `grad`, the gradient of a batch (and with `dx` its
  // inputs'). params: host memory (TrainStep) or null for the model's own
  // (SetParameters).
  StatusOr<float> Step(std::span<const float> x, std::span<const int32_t> labels,
                       const float* params, std::span<float> grad, std::span<float> dx);
  // Runs every layer on x (rows x n0) with `params` (flat); the last
  // layer's `a` holds the logits.
  Status Forward(const DeviceBuffer& x, const DeviceBuffer& params, size_t rows);
  // From the top layer's dz down: each layer's W and b gradient into
  // `grad` (flat) and, with `host`, downloaded (asynchronously) to
  // host[offset] as soon as it is computed; with `dx`, the inputs'
  // gradient (rows x n0) into it.
  Status Backward(const DeviceBuffer& x, const DeviceBuffer& params, size_t rows,
                  DeviceBuffer* grad, float* host, DeviceBuffer* dx);
  // The loss of the top layer's logits (softmax cross-entropy, or logistic
  // for one output) and, with `dz`, its gradient there.
  Status Loss(size_t rows, std::span<const int32_t> labels, DeviceBuffer* dz, float* loss);

  Backend* const backend_;
  const std::vector<uint32_t> layers_;
  const uint32_t max_batch_;
  size_t num_parameters_ = 0;
  // x_: a batch uploaded to the device; params_ and grad_: flat, in the
  // layout of the table.
  std::unique_ptr<DeviceBuffer> x_, params_, grad_;
  // The inputs' gradient, allocated by the first step that asks for it.
  std::unique_ptr<DeviceBuffer> dx_;
  std::vector<Layer> net_;
};

}  // namespace ps

#endif  // PS_WORKER_MODELS_MLP_H_
